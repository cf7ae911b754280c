# Copyright: (c) 2026, llmfleet.specdec contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# Private to the collection: a streaming GGUF header reader (local file or HTTP ranges), standard library only.
"""Read the header of a GGUF file — key/values and the tensor-info table — and nothing else.

The reader never reads tensor data. It buffers the header from byte 0 as far as the parse needs
and not further than ``max_header_bytes``; every count read from the file is checked against the
bytes the file (or that limit) can still back before anything is built from it, so a hostile
or truncated file costs bounded memory and ends in :class:`GGUFError` naming the byte offset.

Values are kept lazily: scalars are decoded, strings and arrays (nested ones too) are views over
the one header buffer, decoded only when asked, so a 248k-token vocabulary parses in one length walk
and the reader holds about one byte of memory per header byte (``benchmarks/gguf_memory.py``,
run by ``make fuzz``, measures it).
The key/value and tensor tables are the only per-item Python objects; their counts are capped
(:data:`MAX_KV_COUNT`, :data:`MAX_TENSOR_COUNT`) so that tiny hostile items cannot multiply memory.
"""
from __future__ import annotations

import hashlib
import re
import struct
from array import array
from enum import IntEnum
from typing import Any, Iterator

from ansible_collections.llmfleet.specdec.plugins.module_utils.common._errors import GGUFError
from ansible_collections.llmfleet.specdec.plugins.module_utils.gguf._gguf_source import (
    DEFAULT_FIRST_READ,
    FileSource,
    HeaderBuffer,
    HttpSource,
    open_source,
)

GGUF_MAGIC = b"GGUF"
SUPPORTED_VERSIONS = (2, 3)
DEFAULT_ALIGNMENT = 32
GGML_MAX_DIMS = 4
GGML_MAX_NAME = 64
MAX_NESTING = 8
INT64_MAX = (1 << 63) - 1
# Real models carry a few dozen keys and at most a few thousand tensors. Each key or tensor costs a
# few hundred bytes of Python objects for as little as 13 (32) header bytes, so without a cap a header
# made of tiny items would cost 10-20 bytes of memory per header byte.
MAX_KV_COUNT = 1 << 16
MAX_TENSOR_COUNT = 1 << 16
# Keys are held as Python strings (up to 4 bytes a character), so their bytes are capped too: one key at the
# GGUF specification's 65,535 bytes, all of them together at 8 MiB (real models: a few KiB in all).
MAX_KEY_BYTES = 65535
MAX_KEY_NAME_BYTES = 8 * 1024 * 1024
HASH_CHUNK = 1 << 20  # bytes fed to a hash at a time when re-encoding big-endian arrays

DEFAULT_MAX_HEADER_BYTES = 256 * 1024 * 1024


class ValueType(IntEnum):
    UINT8 = 0
    INT8 = 1
    UINT16 = 2
    INT16 = 3
    UINT32 = 4
    INT32 = 5
    FLOAT32 = 6
    BOOL = 7
    STRING = 8
    ARRAY = 9
    UINT64 = 10
    INT64 = 11
    FLOAT64 = 12


# struct format character and size of each fixed-size value type
_SCALAR = {
    ValueType.UINT8: ("B", 1),
    ValueType.INT8: ("b", 1),
    ValueType.UINT16: ("H", 2),
    ValueType.INT16: ("h", 2),
    ValueType.UINT32: ("I", 4),
    ValueType.INT32: ("i", 4),
    ValueType.FLOAT32: ("f", 4),
    ValueType.BOOL: ("?", 1),
    ValueType.UINT64: ("Q", 8),
    ValueType.INT64: ("q", 8),
    ValueType.FLOAT64: ("d", 8),
}

# ggml tensor types: id -> (name, elements per block, bytes per block), as ggml/src/ggml.c type_traits.
# Removed ids (4, 5, 31-33, 36-38) are absent: llama.cpp refuses them as "invalid ggml type".
GGML_TYPES = {
    0: ("F32", 1, 4),
    1: ("F16", 1, 2),
    2: ("Q4_0", 32, 18),
    3: ("Q4_1", 32, 20),
    6: ("Q5_0", 32, 22),
    7: ("Q5_1", 32, 24),
    8: ("Q8_0", 32, 34),
    9: ("Q8_1", 32, 36),
    10: ("Q2_K", 256, 84),
    11: ("Q3_K", 256, 110),
    12: ("Q4_K", 256, 144),
    13: ("Q5_K", 256, 176),
    14: ("Q6_K", 256, 210),
    15: ("Q8_K", 256, 292),
    16: ("IQ2_XXS", 256, 66),
    17: ("IQ2_XS", 256, 74),
    18: ("IQ3_XXS", 256, 98),
    19: ("IQ1_S", 256, 50),
    20: ("IQ4_NL", 32, 18),
    21: ("IQ3_S", 256, 110),
    22: ("IQ2_S", 256, 82),
    23: ("IQ4_XS", 256, 136),
    24: ("I8", 1, 1),
    25: ("I16", 1, 2),
    26: ("I32", 1, 4),
    27: ("I64", 1, 8),
    28: ("F64", 1, 8),
    29: ("IQ1_M", 256, 56),
    30: ("BF16", 1, 2),
    34: ("TQ1_0", 256, 54),
    35: ("TQ2_0", 256, 66),
    39: ("MXFP4", 32, 17),
    40: ("NVFP4", 64, 36),
    41: ("Q1_0", 128, 18),
    42: ("Q2_0", 64, 18),
}

# The smallest encoding of one item, used to refuse counts the remaining bytes cannot back.
_MIN_KV_BYTES = 8 + 4 + 1          # key length, value type, one byte of value
_MIN_TENSOR_BYTES = 8 + 4 + 8 + 4 + 8  # name length, n_dims, one dim, type, offset


# ---------------------------------------------------------------------------------------------
# Parsed records


def _array_span(buf: Any, order: str, pos: int) -> tuple[ValueType, int, int, int]:
    """Element type, count, first element byte and end of an array the parser already validated."""
    elem_type, count = struct.unpack_from(order + "IQ", buf, pos)
    start = pos + 12
    elem_type = ValueType(elem_type)
    if elem_type == ValueType.STRING:
        return elem_type, count, start, _strings_end(buf, order, start, count)
    if elem_type == ValueType.ARRAY:
        end = start
        for _dummy in range(count):
            end = _array_span(buf, order, end)[3]
        return elem_type, count, start, end
    return elem_type, count, start, start + count * _SCALAR[elem_type][1]


def _strings_end(buf: Any, order: str, pos: int, count: int) -> int:
    unpack = struct.Struct(order + "Q").unpack_from
    for _dummy in range(count):
        pos += 8 + unpack(buf, pos)[0]
    return pos


class Array:
    """A lazily decoded GGUF array: element type, count, and its span in the header bytes.

    Nothing is decoded at parse time, nested arrays included: each element is found again in the
    header buffer when asked for, so an array costs one small object whatever it holds.
    """

    __slots__ = ("_buf", "_order", "count", "elem_type", "end", "start")

    def __init__(self, elem_type: ValueType, count: int, start: int, end: int, buf: Any, order: str) -> None:
        self.elem_type = elem_type
        self.count = count
        self.start = start  # first byte of the first element
        self.end = end      # one past the last byte of the last element
        self._buf = buf
        self._order = order

    def __len__(self) -> int:
        return self.count

    def raw(self) -> bytes:
        return bytes(self._buf[self.start:self.end])

    def head(self, n: int) -> bytes:
        """The first ``n`` bytes of the elements as stored (no copy of the rest)."""
        return bytes(self._buf[self.start:min(self.start + n, self.end)])

    @property
    def buffer(self) -> Any:
        """The header bytes this array is a view of (positions are file offsets)."""
        return self._buf

    @property
    def order(self) -> str:
        """The file's byte order as a struct prefix (``<`` or ``>``)."""
        return self._order

    def iter_bytes(self, limit: int | None = None) -> Iterator[bytes]:
        """Each string element as raw bytes (for STRING arrays)."""
        if self.elem_type != ValueType.STRING:
            raise TypeError("iter_bytes() needs a STRING array")
        for pos, length in self._string_spans(limit):
            yield bytes(self._buf[pos:pos + length])

    def _string_spans(self, limit: int | None) -> Iterator[tuple[int, int]]:
        buf = self._buf
        unpack = struct.Struct(self._order + "Q").unpack_from
        pos = self.start
        for _dummy in range(self.count if limit is None else min(limit, self.count)):
            (length,) = unpack(buf, pos)
            yield pos + 8, length
            pos += 8 + length

    def iter_arrays(self, limit: int | None = None) -> Iterator[Array]:
        """Each element of a nested array, as an Array view (for ARRAY arrays)."""
        if self.elem_type != ValueType.ARRAY:
            raise TypeError("iter_arrays() needs an ARRAY array")
        pos = self.start
        for _dummy in range(self.count if limit is None else min(limit, self.count)):
            elem_type, count, start, end = _array_span(self._buf, self._order, pos)
            yield Array(elem_type, count, start, end, self._buf, self._order)
            pos = end

    def to_list(self, limit: int | None = None) -> list[Any]:
        n = self.count if limit is None else min(limit, self.count)
        if self.elem_type == ValueType.ARRAY:
            return [a.to_list() for a in self.iter_arrays(n)]
        if self.elem_type == ValueType.STRING:
            return [b.decode("utf-8", "replace") for b in self.iter_bytes(n)]
        fmt = _SCALAR[self.elem_type][0]
        return list(struct.unpack_from(f"{self._order}{n}{fmt}", self._buf, self.start))

    def feed(self, sink: Any, limit: int | None = None) -> None:
        """Pass the first ``limit`` elements (all when None) to ``sink.update`` encoded little-endian,
        as a little-endian GGUF file stores them, in pieces: the raw bytes as stored, byte-swapped
        when the file is big-endian, never decoded (two different byte strings never hash alike)."""
        n = self.count if limit is None else min(limit, self.count)
        buf, order = self._buf, self._order
        if self.elem_type == ValueType.ARRAY:
            for a in self.iter_arrays(n):
                sink.update(struct.pack("<IQ", a.elem_type, a.count))
                a.feed(sink)
            return
        if self.elem_type == ValueType.STRING:
            if order == "<":
                end = _strings_end(buf, order, self.start, n) if n < self.count else self.end
                with memoryview(buf) as mv:
                    sink.update(mv[self.start:end])
                return
            out = bytearray()
            with memoryview(buf) as mv:
                for pos, length in self._string_spans(n):
                    out += struct.pack("<Q", length)
                    out += mv[pos:pos + length]
                    if len(out) >= HASH_CHUNK:
                        sink.update(out)
                        out.clear()
            sink.update(out)
            return
        size = _SCALAR[self.elem_type][1]
        end = self.start + n * size
        with memoryview(buf) as mv:
            if order == "<" or size == 1:
                sink.update(mv[self.start:end])
                return
            step = HASH_CHUNK - HASH_CHUNK % size
            for pos in range(self.start, end, step):
                words = array(_SWAP_CODE[size])
                words.frombytes(mv[pos:min(pos + step, end)])
                words.byteswap()
                sink.update(words)

    def canonical_bytes(self, limit: int | None = None) -> bytes:
        """The elements encoded little-endian, as a little-endian GGUF file stores them."""
        out = _Collect()
        self.feed(out, limit)
        return bytes(out.data)


class _Collect:
    """A sink for :meth:`Array.feed` that keeps the bytes."""

    def __init__(self) -> None:
        self.data = bytearray()

    def update(self, piece: Any) -> None:
        self.data += piece


# array typecodes by item size, for byte-swapping big-endian elements exactly (floats and NaNs too)
_SWAP_CODE = {2: "H", 4: next(c for c in "IL" if array(c).itemsize == 4), 8: "Q"}


class _StringStore:
    """The header buffer and its byte order, shared by all the STRING values of one header."""

    __slots__ = ("buf", "u64")

    def __init__(self, buf: Any, order: str) -> None:
        self.buf = buf
        self.u64 = struct.Struct(order + "Q").unpack_from


class KV:
    """One key/value. A STRING value is not copied: it is found again in the header bytes from the
    key's offset and decoded, invalid UTF-8 replaced, only when ``value`` is read; :meth:`raw_bytes`
    gives the bytes as stored."""

    __slots__ = ("_store", "_value", "key", "offset", "vtype")

    def __init__(self, key: str, vtype: ValueType, value: Any, offset: int, store: _StringStore | None = None) -> None:
        self.key = key
        self.vtype = vtype
        self._value = value    # None for STRING values (see _span)
        self.offset = offset   # first byte of the key
        self._store = store

    def _span(self) -> tuple[int, int]:
        # key length (u64), key, value type (u32), string length (u64), string: all already validated
        store = self._store
        start = self.offset + 8 + store.u64(store.buf, self.offset)[0] + 4 + 8
        return start, start + store.u64(store.buf, start - 8)[0]

    @property
    def value(self) -> Any:
        if self._store is None:
            return self._value
        start, end = self._span()
        with memoryview(self._store.buf) as mv:
            return str(mv[start:end], "utf-8", "replace")

    def raw_bytes(self, limit: int | None = None) -> bytes:
        """A STRING value's bytes exactly as stored (its first ``limit`` bytes when given)."""
        if self._store is None:
            raise TypeError(f"{self.key}: raw_bytes() needs a STRING value")
        start, end = self._span()
        if limit is not None:
            end = min(end, start + limit)
        return bytes(self._store.buf[start:end])

    def byte_length(self) -> int:
        """A STRING value's length in bytes."""
        start, end = self._span()
        return end - start

    def feed_raw(self, sink: Any) -> None:
        """Pass a STRING value's bytes as stored to ``sink.update``, without a copy."""
        start, end = self._span()
        with memoryview(self._store.buf) as mv:
            sink.update(mv[start:end])

    def text(self, limit: int) -> str:
        """A STRING value decoded as :attr:`value` is, but at most its first ``limit`` bytes: a longer
        one ends in ``...(N bytes)``, so a hostile string costs no copy of itself."""
        size = self.byte_length()
        if size <= limit:
            return self.value
        return self.raw_bytes(limit).decode("utf-8", "replace") + f"...({size} bytes)"

    def contains(self, needle: bytes, *, ignore_case: bool = False) -> bool:
        """Whether a STRING value's stored bytes hold ``needle`` (ASCII; ``ignore_case``: ASCII case),
        searched in place. For an ASCII needle this is the same answer as searching the decoded
        text: UTF-8 never encodes another character with ASCII bytes, and a replaced invalid byte
        is never ASCII."""
        start, end = self._span()
        buf = self._store.buf
        if not ignore_case:
            return buf.find(needle, start, end) >= 0
        needle = needle.lower()
        step = max(1 << 20, 4 * len(needle))
        for pos in range(start, end, step):
            if needle in bytes(buf[pos:min(pos + step + len(needle) - 1, end)]).lower():
                return True
        return False

    def python(self) -> Any:
        value = self.value
        return value.to_list() if isinstance(value, Array) else value


class TensorInfo:
    __slots__ = ("dims", "ggml_type", "info_offset", "name", "offset")

    def __init__(self, name: str, dims: tuple[int, ...], ggml_type: int, offset: int, info_offset: int) -> None:
        self.name = name
        self.dims = dims
        self.ggml_type = ggml_type
        self.offset = offset
        self.info_offset = info_offset

    @property
    def type_name(self) -> str:
        return GGML_TYPES[self.ggml_type][0]

    @property
    def n_elements(self) -> int:
        n = 1
        for d in self.dims:
            n *= d
        return n

    @property
    def n_bytes(self) -> int:
        _dummy, block, size = GGML_TYPES[self.ggml_type]
        return self.n_elements // block * size

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "shape": list(self.dims), "type": self.type_name,
                "offset": self.offset, "n_bytes": self.n_bytes}


class GGUFHeader:
    """Everything before the tensor data."""

    def __init__(self) -> None:
        self.source = ""
        self.version = 0
        self.byte_order = "little"
        self.tensor_count = 0
        self.kv_count = 0
        self.kv: dict[str, KV] = {}
        self.tensors: list[TensorInfo] = []
        self.alignment = DEFAULT_ALIGNMENT
        self.header_bytes = 0   # end of the tensor-info table
        self.data_offset = 0    # start of tensor data (aligned)
        self.file_size: int | None = None
        self.bytes_read = 0
        self.requests = 0

    def get(self, key: str, default: Any = None) -> Any:
        kv = self.kv.get(key)
        return default if kv is None else kv.value

    def python(self, key: str, default: Any = None) -> Any:
        kv = self.kv.get(key)
        return default if kv is None else kv.python()

    def has_tensor(self, name: str) -> bool:
        return any(t.name == name for t in self.tensors)


# ---------------------------------------------------------------------------------------------
# Encoding (used for canonical fingerprints and by the tests' writers)


def encode_string(value: bytes | str) -> bytes:
    data = value.encode("utf-8") if isinstance(value, str) else value
    return struct.pack("<Q", len(data)) + data


def encode_value(vtype: ValueType, value: Any) -> bytes:
    """Little-endian GGUF encoding of a value (arrays: element type, count, elements)."""
    if vtype == ValueType.STRING:
        return encode_string(value)
    if vtype == ValueType.ARRAY:
        if isinstance(value, Array):
            return struct.pack("<IQ", value.elem_type, value.count) + value.canonical_bytes()
        elem_type, items = value
        return struct.pack("<IQ", elem_type, len(items)) + b"".join(encode_value(elem_type, v) for v in items)
    fmt, _dummy = _SCALAR[vtype]
    return struct.pack("<" + fmt, value)


# ---------------------------------------------------------------------------------------------
# The parser


class _Parser:
    def __init__(self, buf: HeaderBuffer, order: str) -> None:
        self.buf = buf
        self.name = buf.source.name
        self.order = order
        self.u32 = struct.Struct(order + "I").unpack_from
        self.u64 = struct.Struct(order + "Q").unpack_from

    def fail(self, offset: int, problem: str) -> GGUFError:
        return GGUFError(self.name, offset, problem)

    def read_u32(self, pos: int) -> tuple[int, int]:
        self.buf.ensure(pos + 4, pos)
        return self.u32(self.buf.data, pos)[0], pos + 4

    def read_u64(self, pos: int) -> tuple[int, int]:
        self.buf.ensure(pos + 8, pos)
        return self.u64(self.buf.data, pos)[0], pos + 8

    def read_count(self, pos: int, min_item: int, what: str) -> tuple[int, int]:
        count, end = self.read_u64(pos)
        if count > INT64_MAX:
            raise self.fail(pos, f"{what} count {count} is negative as a signed 64-bit value")
        room = self.buf.room(end)
        if count * min_item > room:
            raise self.fail(pos, f"{what} count {count} needs at least {count * min_item} bytes but only "
                                 f"{max(room, 0)} remain before {self.buf.limit_text()}")
        return count, end

    def read_span(self, pos: int, what: str) -> tuple[int, int]:
        """A length-prefixed string's span [start, end) in the buffer, made available, not copied."""
        length, start = self.read_u64(pos)
        if length > self.buf.room(start):
            raise self.fail(pos, f"{what} length {length} runs past {self.buf.limit_text()}")
        self.buf.ensure(start + length, pos)
        return start, start + length

    def read_str(self, pos: int, what: str) -> tuple[str, int]:
        start, end = self.read_span(pos, what)
        try:
            # decoded straight from the buffer (no copy); the view is released before the buffer grows
            with memoryview(self.buf.data) as mv:
                return str(mv[start:end], "utf-8"), end
        except UnicodeDecodeError as exc:
            raise self.fail(pos, f"{what} is not valid UTF-8 ({exc.reason} at byte {pos + 8 + exc.start})") from None

    def read_value(self, vtype: int, pos: int, depth: int = 0) -> tuple[Any, int]:
        """A scalar or an Array; STRING values are read with :meth:`read_span` instead."""
        if vtype == ValueType.ARRAY:
            return self.read_array(pos, depth)
        try:
            fmt, size = _SCALAR[ValueType(vtype)]
        except ValueError:
            raise self.fail(pos, f"unknown value type {vtype}") from None
        self.buf.ensure(pos + size, pos)
        value = struct.unpack_from(self.order + fmt, self.buf.data, pos)[0]
        if vtype == ValueType.BOOL and self.buf.data[pos] > 1:
            raise self.fail(pos, f"bool value {self.buf.data[pos]} is neither 0 nor 1")
        return value, pos + size

    def read_array(self, pos: int, depth: int) -> tuple[Array, int]:
        if depth >= MAX_NESTING:
            raise self.fail(pos, f"arrays nested deeper than {MAX_NESTING} levels")
        elem_type, p = self.read_u32(pos)
        if elem_type not in ValueType.__members__.values():
            raise self.fail(pos, f"unknown array element type {elem_type}")
        elem_type = ValueType(elem_type)
        if elem_type == ValueType.STRING:
            count, p = self.read_count(p, 8, "string array")
            end = self.skip_strings(p, count)
            return Array(elem_type, count, p, end, self.buf.data, self.order), end
        if elem_type == ValueType.ARRAY:
            count, p = self.read_count(p, 12, "nested array")
            start = p
            for _dummy in range(count):  # validated now, kept as a view: elements are found again on demand
                p = self.read_array(p, depth + 1)[1]
            return Array(elem_type, count, start, p, self.buf.data, self.order), p
        size = _SCALAR[elem_type][1]
        count, p = self.read_count(p, size, "array")
        end = p + count * size
        self.buf.ensure(end, pos)
        if elem_type == ValueType.BOOL:
            bad = _NOT_BOOL.search(self.buf.data, p, end)
            if bad is not None:
                raise self.fail(bad.start(), f"bool value {bad.group()[0]} is neither 0 nor 1")
        return Array(elem_type, count, p, end, self.buf.data, self.order), end

    def skip_strings(self, pos: int, count: int) -> int:
        """Walk ``count`` length-prefixed strings from ``pos``; return the end offset."""
        buf = self.buf
        u64 = self.u64
        data = buf.data
        have = len(data)
        for i in range(count):
            if pos + 8 > have:
                buf.ensure(pos + 8, pos)
                data, have = buf.data, len(buf.data)
            length = u64(data, pos)[0]
            end = pos + 8 + length
            if end > have:
                if length > buf.room(pos + 8):
                    raise self.fail(pos, f"string {i} of an array: length {length} runs past "
                                         f"{self.buf.limit_text()}")
                buf.ensure(end, pos)
                data, have = buf.data, len(buf.data)
            pos = end
        return pos


_NOT_BOOL = re.compile(rb"[^\x00\x01]")


def _detect_order(name: str, head: bytes) -> tuple[str, int]:
    if head[:4] != GGUF_MAGIC:
        raise GGUFError(name, 0, f"not a GGUF file: magic is {bytes(head[:4])!r}, expected b'GGUF'")
    le = struct.unpack_from("<I", head, 4)[0]
    if le in SUPPORTED_VERSIONS:
        return "<", le
    be = struct.unpack_from(">I", head, 4)[0]
    if be in SUPPORTED_VERSIONS:
        return ">", be
    version = le if le < be else be
    if version == 1:
        raise GGUFError(name, 4, "GGUF version 1 is not supported (llama.cpp dropped it); reconvert the model")
    raise GGUFError(name, 4, f"unknown GGUF version {version}; this reader knows versions 2 and 3")


def parse_header(source: FileSource | HttpSource, *, max_header_bytes: int = DEFAULT_MAX_HEADER_BYTES,
                 first_read: int = DEFAULT_FIRST_READ, check_data: bool = True,
                 limit_name: str | None = None) -> GGUFHeader:
    """Parse the header from ``source``; raise GGUFError naming the offset on any problem.

    ``limit_name`` says in the errors what ``max_header_bytes`` is (default: the option of that name)."""
    buf = HeaderBuffer(source, first_read, max_header_bytes, limit_name)
    name = source.name
    buf.ensure(8, 0)
    order, version = _detect_order(name, bytes(buf.data[:8]))
    p = _Parser(buf, order)
    hdr = GGUFHeader()
    hdr.source = name
    hdr.version = version
    hdr.byte_order = "little" if order == "<" else "big"

    hdr.tensor_count, pos = p.read_count(8, _MIN_TENSOR_BYTES, "tensor")
    if hdr.tensor_count > MAX_TENSOR_COUNT:
        raise p.fail(8, f"tensor count {hdr.tensor_count} is more than this reader accepts ({MAX_TENSOR_COUNT}); "
                        "real models have at most a few thousand tensors, so the header is corrupt")
    hdr.kv_count, pos = p.read_count(pos, _MIN_KV_BYTES, "key/value")
    strings = _StringStore(buf.data, order)
    if hdr.kv_count > MAX_KV_COUNT:
        raise p.fail(16, f"key/value count {hdr.kv_count} is more than this reader accepts ({MAX_KV_COUNT}); "
                         "real models have a few dozen keys, so the header is corrupt")

    key_bytes = 0
    for _dummy in range(hdr.kv_count):
        at = pos
        length = p.read_u64(pos)[0]
        key_bytes += length
        if length > MAX_KEY_BYTES:
            raise p.fail(at, f"a key of {length} bytes; the GGUF specification allows at most {MAX_KEY_BYTES}, "
                             "so the header is corrupt")
        if key_bytes > MAX_KEY_NAME_BYTES:
            raise p.fail(at, f"the key names take more than {MAX_KEY_NAME_BYTES} bytes (this reader's limit; "
                             "real models have a few KiB of keys), so the header is corrupt")
        key, pos = p.read_str(pos, "key")
        if key in hdr.kv:
            raise p.fail(at, f"duplicate key {key!r}")
        vtype, pos = p.read_u32(pos)
        if vtype not in ValueType.__members__.values():
            raise p.fail(pos - 4, f"unknown value type {vtype} for key {key!r}")
        if vtype == ValueType.STRING:
            pos = p.read_span(pos, "string")[1]
            hdr.kv[key] = KV(key, ValueType.STRING, None, at, strings)
        else:
            value, pos = p.read_value(vtype, pos)
            hdr.kv[key] = KV(key, ValueType(vtype), value, at)

    align_kv = hdr.kv.get("general.alignment")
    if align_kv is not None:
        a = align_kv.value
        if align_kv.vtype != ValueType.UINT32 or a == 0 or a & (a - 1):
            raise p.fail(align_kv.offset, f"general.alignment must be a non-zero power of two u32, got {a!r}")
        hdr.alignment = a

    seen: set[str] = set()
    for i in range(hdr.tensor_count):
        at = pos
        tname, pos = p.read_str(pos, "tensor name")
        if len(tname.encode("utf-8")) >= GGML_MAX_NAME:
            raise p.fail(at, f"tensor {i} name {tname[:80]!r} is {len(tname)} bytes, llama.cpp allows < {GGML_MAX_NAME}")
        if tname in seen:
            raise p.fail(at, f"duplicate tensor name {tname!r}")
        seen.add(tname)
        n_dims, pos = p.read_u32(pos)
        if not 1 <= n_dims <= GGML_MAX_DIMS:
            raise p.fail(pos - 4, f"tensor {tname!r} has {n_dims} dimensions; ggml allows 1 to {GGML_MAX_DIMS}")
        dims = []
        n_elem = 1
        for _dummy in range(n_dims):
            d, pos = p.read_u64(pos)
            if d > INT64_MAX:
                raise p.fail(pos - 8, f"tensor {tname!r} has a negative dimension ({d - (1 << 64)})")
            dims.append(d)
            n_elem *= d
        if n_elem > INT64_MAX:
            raise p.fail(at, f"tensor {tname!r} shape {dims} has more than 2^63 elements (absurd dimensions)")
        ttype, pos = p.read_u32(pos)
        if ttype not in GGML_TYPES:
            raise p.fail(pos - 4, f"tensor {tname!r} has invalid ggml type {ttype}")
        block = GGML_TYPES[ttype][1]
        if dims[0] % block:
            raise p.fail(at, f"tensor {tname!r} row length {dims[0]} is not a multiple of the "
                             f"{GGML_TYPES[ttype][0]} block size {block}")
        offset, pos = p.read_u64(pos)
        if offset % hdr.alignment:
            raise p.fail(pos - 8, f"tensor {tname!r} data offset {offset} is not a multiple of the alignment {hdr.alignment}")
        hdr.tensors.append(TensorInfo(tname, tuple(dims), ttype, offset, at))

    hdr.header_bytes = pos
    # The buffer may hold up to one read chunk past the header: give that memory back (no view of
    # the buffer is alive here, so it may shrink).
    del buf.data[pos:]
    hdr.data_offset = pos + (-pos % hdr.alignment) if hdr.tensor_count else pos
    hdr.file_size = source.size
    if check_data and source.size is not None and hdr.tensors:
        last = max(hdr.tensors, key=lambda t: t.offset + t.n_bytes)
        end = hdr.data_offset + last.offset + last.n_bytes
        if end > source.size:
            raise GGUFError(name, hdr.data_offset + last.offset,
                            f"the file is truncated: tensor {last.name!r} data ends at byte {end} but the "
                            f"file is {source.size} bytes long")
    hdr.bytes_read = source.bytes_read
    hdr.requests = source.requests
    return hdr


def read_header(location: str, *, max_header_bytes: int = DEFAULT_MAX_HEADER_BYTES,
                first_read: int = DEFAULT_FIRST_READ, check_data: bool = True, limit_name: str | None = None,
                **http_options: Any) -> GGUFHeader:
    """Open ``location`` (path or http(s) URL), parse its header, close it."""
    source = open_source(location, **http_options)
    try:
        return parse_header(source, max_header_bytes=max_header_bytes, first_read=first_read, check_data=check_data,
                            limit_name=limit_name)
    finally:
        source.close()


def share_left(max_header_bytes: int, first: GGUFHeader, what: tuple[str, str] = ("target", "draft")
               ) -> dict[str, Any]:
    """The read options of a second header held beside ``first``: both share one ``max_header_bytes``,
    so a module that holds two at once (spec_compat, spec_lint) holds no more header bytes than one
    at the limit would. Real headers (tens of MB) are far below either share."""
    left = max(max_header_bytes - first.header_bytes, 0)
    return {"max_header_bytes": left,
            "limit_name": (f"the {left} bytes of max_header_bytes ({max_header_bytes}) that the {what[0]}'s header "
                           f"({first.header_bytes} bytes) leaves to the {what[1]}'s (both headers are held at once)")}


def read_pair(first: str, second: str, *, max_header_bytes: int = DEFAULT_MAX_HEADER_BYTES,
              what: tuple[str, str] = ("target", "draft"), **options: Any) -> tuple[GGUFHeader, GGUFHeader]:
    """Two headers that share one ``max_header_bytes`` (:func:`share_left`)."""
    one = read_header(first, max_header_bytes=max_header_bytes, **options)
    return one, read_header(second, **share_left(max_header_bytes, one, what), **options)


def tokens_sha256(tokens: Array, limit: int | None = None) -> str:
    """Hex sha256 over the first ``limit`` tokens (all when None), each encoded as a GGUF string:
    u64 little-endian byte length, then its UTF-8 bytes — whatever the file's byte order."""
    h = hashlib.sha256()
    tokens.feed(h, limit)  # in pieces, from the header buffer: no copy of the vocabulary
    return h.hexdigest()
