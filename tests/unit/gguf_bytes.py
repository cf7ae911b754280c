"""Hand-built GGUF bytes for reader tests: any byte order, any value, and deliberately broken files."""
from __future__ import annotations

import struct
from typing import Any

T = dict(u8=0, i8=1, u16=2, i16=3, u32=4, i32=5, f32=6, bool=7, str=8, arr=9, u64=10, i64=11, f64=12)
FMT = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}


class Builder:
    def __init__(self, order: str = "<", version: int = 3) -> None:
        self.o = order
        self.version = version
        self.kvs: list[bytes] = []
        self.tensors: list[bytes] = []
        self.n_kv: int | None = None
        self.n_tensors: int | None = None
        self.data = b""

    def s(self, text: str | bytes) -> bytes:
        b = text.encode() if isinstance(text, str) else text
        return struct.pack(self.o + "Q", len(b)) + b

    def value(self, vtype: int, v: Any) -> bytes:
        if vtype == 8:
            return self.s(v)
        if vtype == 9:
            et, items = v
            return struct.pack(self.o + "IQ", et, len(items)) + b"".join(self.value(et, x) for x in items)
        return struct.pack(self.o + FMT[vtype], v)

    def kv(self, key: str, vtype: int, v: Any) -> Builder:
        self.kvs.append(self.s(key) + struct.pack(self.o + "I", vtype) + self.value(vtype, v))
        return self

    def raw_kv(self, raw: bytes) -> Builder:
        self.kvs.append(raw)
        return self

    def tensor(self, name: str, dims: list[int], ggml_type: int = 0, offset: int = 0) -> Builder:
        self.tensors.append(self.s(name) + struct.pack(self.o + "I", len(dims))
                            + b"".join(struct.pack(self.o + "Q", d) for d in dims)
                            + struct.pack(self.o + "IQ", ggml_type, offset))
        return self

    def build(self, data: bytes = b"") -> bytes:
        n_t = len(self.tensors) if self.n_tensors is None else self.n_tensors
        n_kv = len(self.kvs) if self.n_kv is None else self.n_kv
        head = b"GGUF" + struct.pack(self.o + "I", self.version) + struct.pack(self.o + "QQ", n_t, n_kv)
        body = head + b"".join(self.kvs) + b"".join(self.tensors)
        if self.tensors:
            body += b"\0" * (-len(body) % 32)
        return body + data
