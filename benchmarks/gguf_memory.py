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
Then the modules as Ansible runs them (issue 22): gguf_info, spec_compat and spec_lint, each in its own process,
on hostile vocabularies scaled to the reader's 256 MiB cap (tests/gguf_hostile.py: the issue's empty tokens,
distinct 3-byte tokens, one-byte tokens, long tokens, a huge merge list, scores and types), their peak resident
memory (ru_maxrss) against the goal of 512 MiB. ``--cap-mib N`` scales them (default 256; the unit test
tests/unit/test_gguf_memory_bound.py runs them at a few MiB); ``--shapes`` picks some.
Run: make benchmark   (or: PYTHONPATH=tests:benchmarks:.build/collections .venv/bin/python benchmarks/gguf_memory.py)
"""
from __future__ import annotations

import argparse
import gc
import struct
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

import gguf
from gguf_header import write_qwen_sized_header
from gguf_hostile import SHAPES, module_peak, small_model

from ansible_collections.llmfleet.specdec.plugins.module_utils.gguf._gguf import (
    DEFAULT_MAX_HEADER_BYTES,
    MAX_KV_COUNT,
    MAX_TENSOR_COUNT,
    read_header,
)
from ansible_collections.llmfleet.specdec.plugins.module_utils.gguf._model_facts import model_facts

GOAL = 3.0
MODULE_GOAL = 512 << 20


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


def reader_table() -> int:
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
    _print_table(head, rows)
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


def _print_table(head: tuple[str, ...], rows: list[tuple[str, ...]]) -> None:
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]
    print("  ".join(h.ljust(w) if i == 0 else h.rjust(w) for i, (h, w) in enumerate(zip(head, widths))))
    print("  ".join("-" * w for w in widths))
    for r in rows:
        print("  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths))))


def module_table(cap: int, shapes: list[str]) -> int:
    """Each module's peak RSS on each hostile shape filling ``cap`` bytes (spec_compat/spec_lint: a small
    target and the hostile draft; the two share max_header_bytes, so the draft is the cap less the target)."""
    rows = []
    worst = 0
    with tempfile.TemporaryDirectory() as tmp:
        small = small_model(Path(tmp) / "small.gguf")
        base = {m: module_peak(m, a)["maxrss"] for m, a in (
            ("gguf_info", {"path": str(small)}), ("spec_compat", {"target": str(small), "draft": str(small)}),
            ("spec_lint", {"engine": "llamacpp", "target": str(small), "draft": str(small)}))}
        for name in shapes:
            path = SHAPES[name](Path(tmp) / "h.gguf", cap - small.stat().st_size)
            size = path.stat().st_size
            for module, args in (
                    ("gguf_info", {"path": str(path)}),
                    ("spec_compat", {"target": str(small), "draft": str(path)}),
                    ("spec_lint", {"backend": "llamacpp", "target": str(small), "draft": str(path),
                                   "flags": ["--spec-type", "draft-simple"]})):
                started = time.monotonic()
                run = module_peak(module, args)
                seconds = time.monotonic() - started
                res = run["result"]
                verdict = ("failed: " + res["msg"][:60]) if res.get("failed") else (
                    res.get("server_outcome") or res.get("outcome") or "facts")
                worst = max(worst, run["maxrss"])
                rows.append((name, module, f"{size / 2**20:.0f}", f"{run['maxrss'] / 2**20:.0f}",
                             f"{(run['maxrss'] - base[module]) / size:.2f}", f"{seconds:.0f}", str(verdict)))
            path.unlink()
    _print_table(("vocabulary", "module", "header MiB", "peak RSS MiB", "over baseline / byte", "s", "verdict"),
                 rows)
    print("baselines (a 300-token file): " + ", ".join(f"{m} {v / 2**20:.0f} MiB" for m, v in base.items()))
    print(f"largest peak {worst / 2**20:.0f} MiB (goal: <= {MODULE_GOAL >> 20} MiB at the 256 MiB cap)")
    return 0 if worst <= MODULE_GOAL or cap < DEFAULT_MAX_HEADER_BYTES else 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cap-mib", type=int, default=DEFAULT_MAX_HEADER_BYTES >> 20)
    parser.add_argument("--shapes", nargs="*", default=list(SHAPES), choices=list(SHAPES))
    parser.add_argument("--modules-only", action="store_true")
    args = parser.parse_args()
    rc = 0 if args.modules_only else reader_table()
    return rc or module_table(args.cap_mib << 20, args.shapes)


if __name__ == "__main__":
    sys.exit(main())
