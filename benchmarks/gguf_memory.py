#!/usr/bin/env python3
"""Memory of the GGUF header reader: Python bytes allocated per header byte, on real-sized and hostile headers.

For each header, tracemalloc measures the peak while ``read_header`` runs, what the parsed header
still holds afterwards, and the peak of the whole gguf_info path (read_header + model_facts with
fingerprints), each divided by the header's size. Goal: at most 3 bytes per header byte, and at
most 3 bytes per byte of the default 256 MiB ``max_header_bytes`` in the worst case (768 MiB): keys and
tensors cost a few hundred bytes each, so their counts are capped and they add a bounded amount.

Headers: the Qwen3.5/3.6-sized header of benchmarks/gguf_header.py (248,320 tokens, 247,587 merges) in
both byte orders; 2,000,000 one-to-three-byte strings in one array; 60,000 keys of short strings;
30,000 nested arrays of two bytes; 60,000 tensors.
Run: make benchmark   (or: PYTHONPATH=tests:.build/collections .venv/bin/python benchmarks/gguf_memory.py)
"""
from __future__ import annotations

import gc
import struct
import sys
import tempfile
import tracemalloc
from pathlib import Path

import gguf
from gguf_header import write_qwen_sized_header

from ansible_collections.llmfleet.specdec.plugins.module_utils._gguf import (
    DEFAULT_MAX_HEADER_BYTES,
    MAX_KV_COUNT,
    MAX_TENSOR_COUNT,
    read_header,
)
from ansible_collections.llmfleet.specdec.plugins.module_utils._model_facts import model_facts

GOAL = 3.0


def _s(o: str, b: bytes) -> bytes:
    return struct.pack(o + "Q", len(b)) + b


def _head(o: str, n_tensors: int, n_kv: int) -> bytes:
    return b"GGUF" + struct.pack(o + "IQQ", 3, n_tensors, n_kv)


def short_strings(path: Path) -> None:
    n = 2_000_000
    items = b"".join(_s("<", b"ab"[: 1 + i % 2] + b"x" * (i % 3 == 0)) for i in range(n))
    kv = _s("<", b"tokenizer.ggml.tokens") + struct.pack("<IIQ", 9, 8, n) + items
    path.write_bytes(_head("<", 0, 2) + _s("<", b"general.architecture") + struct.pack("<I", 8) + _s("<", b"llama") + kv)


def many_keys(path: Path) -> None:
    n = 60_000
    kvs = b"".join(_s("<", b"k%d" % i) + struct.pack("<I", 8) + _s("<", b"v") for i in range(n))
    path.write_bytes(_head("<", 0, n) + kvs)


def nested_arrays(path: Path) -> None:
    n = 30_000
    inner = b"".join(struct.pack("<IQ", 0, 2) + b"\x01\x02" for _dummy in range(n))
    kv = _s("<", b"t.nested") + struct.pack("<IIQ", 9, 9, n) + inner
    path.write_bytes(_head("<", 0, 1) + kv)


def many_tensors(path: Path) -> None:
    n = 60_000
    infos = b"".join(_s("<", b"t%d" % i) + struct.pack("<IQIQ", 1, 32, 0, 128 * i) for i in range(n))
    body = _head("<", n, 0) + infos
    body += b"\0" * (-len(body) % 32)
    path.write_bytes(body + b"\0" * (128 * n))


def qwen_big_endian(path: Path) -> None:
    """The Qwen-sized header rewritten big-endian by gguf-py's own writer."""
    le = path.with_suffix(".le.gguf")
    write_qwen_sized_header(le)
    r = gguf.GGUFReader(str(le))
    w = gguf.GGUFWriter(str(path), "qwen35", endianess=gguf.GGUFEndian.BIG)
    for name, field in r.fields.items():
        if name.startswith("GGUF.") or name == "general.architecture":
            continue
        vtype = field.types[0]
        if vtype == gguf.GGUFValueType.ARRAY:
            w.add_key_value(name, field.contents(), vtype, sub_type=field.types[-1])
        else:
            w.add_key_value(name, field.contents(), vtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.close()
    le.unlink()


def measure(path: Path) -> tuple[int, float, float, float]:
    gc.collect()
    tracemalloc.start()
    hdr = read_header(str(path))
    parse_peak = tracemalloc.get_traced_memory()[1]
    gc.collect()
    held = tracemalloc.get_traced_memory()[0]
    tracemalloc.reset_peak()
    model_facts(hdr, include_tensors=False)
    facts_peak = max(parse_peak, tracemalloc.get_traced_memory()[1])
    tracemalloc.stop()
    size = hdr.header_bytes
    return size, parse_peak / size, held / size, facts_peak / size


def main() -> int:
    cases = [("Qwen-sized, little-endian", write_qwen_sized_header), ("Qwen-sized, big-endian", qwen_big_endian),
             ("2,000,000 short strings", short_strings), ("60,000 keys of short strings", many_keys),
             ("30,000 nested arrays", nested_arrays), ("60,000 tensors", many_tensors)]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, write in cases:
            path = Path(tmp) / "h.gguf"
            write(path)
            size, parse, held, facts = measure(path)
            rows.append((name, f"{size:,}", f"{parse:.2f}", f"{held:.2f}", f"{facts:.2f}"))
            path.unlink()
    head = ("header", "header bytes", "parse peak / byte", "held after / byte", "gguf_info peak / byte")
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]
    print("  ".join(h.ljust(w) if i == 0 else h.rjust(w) for i, (h, w) in enumerate(zip(head, widths))))
    print("  ".join("-" * w for w in widths))
    for r in rows:
        print("  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths))))
    # Keys and tensors are the only per-item objects; their counts are capped, so they add a bounded
    # amount, whatever the header's size. The worst case at the default limit: the worst per-byte ratio
    # of the other headers over all of max_header_bytes, plus full key and tensor tables.
    per_key = float(rows[3][4]) * int(rows[3][1].replace(",", "")) / 60_000
    per_tensor = float(rows[5][4]) * int(rows[5][1].replace(",", "")) / 60_000
    per_byte = max(float(r[4]) for i, r in enumerate(rows) if i not in (3, 5))
    limit = DEFAULT_MAX_HEADER_BYTES
    worst = per_byte * limit + per_key * MAX_KV_COUNT + per_tensor * MAX_TENSOR_COUNT
    print(f"per key {per_key:.0f} bytes, per tensor {per_tensor:.0f} bytes (at most {MAX_KV_COUNT:,} of each)")
    print(f"worst case at the default max_header_bytes ({limit >> 20} MiB): {per_byte:.2f} x {limit >> 20} MiB + "
          f"{per_key * MAX_KV_COUNT / 2**20:.0f} MiB of keys + {per_tensor * MAX_TENSOR_COUNT / 2**20:.0f} MiB of "
          f"tensors = {worst / 2**20:.0f} MiB, {worst / limit:.2f} bytes per byte of the limit (goal: <= {GOAL:.0f})")
    return 0 if worst / limit <= GOAL and per_byte <= GOAL else 1


if __name__ == "__main__":
    sys.exit(main())
