"""Hostile GGUF vocabularies written fast (numpy), and a module's peak memory as Ansible would run it.

Shared by tests/unit/test_gguf_memory_bound.py (headers of a few MB) and benchmarks/gguf_memory.py (headers at the
reader's 256 MiB cap). Each writer fills at most ``size`` bytes of header (its few keys included) with one shape
of vocabulary.
"""
from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Callable

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
COLLECTIONS = ROOT / ".build" / "collections"
MODULES = ROOT / "plugins" / "modules"


def _s(b: bytes) -> bytes:
    return struct.pack("<Q", len(b)) + b


def _kv_str(key: str, value: str) -> bytes:
    return _s(key.encode()) + struct.pack("<I", 8) + _s(value.encode())


def _kv_array(key: str, elem_type: int, count: int, body: bytes) -> bytes:
    return _s(key.encode()) + struct.pack("<IIQ", 9, elem_type, count) + body


def _write(path: Path, kvs: list[bytes]) -> Path:
    with open(path, "wb") as fh:
        fh.write(b"GGUF" + struct.pack("<IQQ", 3, 0, len(kvs)))
        for kv in kvs:
            fh.write(kv)
    return path


SLACK = 16384  # bytes a writer leaves for its keys, so the file stays within ``size``


def _base(model: str = "llama") -> list[bytes]:
    return [_kv_str("general.architecture", "llama"), _kv_str("tokenizer.ggml.model", model)]


def _fixed_strings(values: np.ndarray) -> bytes:
    """A STRING array body from an (n, width) uint8 array: each row one string of ``width`` bytes."""
    n, width = values.shape
    rec = np.zeros(n, dtype=[("len", "<u8"), ("b", "u1", (width,))] if width else [("len", "<u8")])
    rec["len"] = width
    if width:
        rec["b"] = values
    return rec.tobytes()


def _distinct(n: int, width: int) -> np.ndarray:
    """n distinct rows of ``width`` bytes, none of them NUL (so each loads whole)."""
    i = np.arange(n, dtype=np.uint64)
    out = np.empty((n, width), dtype=np.uint8)
    for k in range(width):
        out[:, k] = (i // (255 ** k)) % 255 + 1 if k < 4 else 0x41 + k % 26
    return out


def empty_tokens(path: Path, size: int) -> Path:
    """The issue's shape: nothing but empty tokens (each [EMPTY_<id>] to llama.cpp), 8 header bytes each."""
    n = (size - SLACK) // 8
    return _write(path, [*_base(), _kv_array("tokenizer.ggml.tokens", 8, n, bytes(8 * n))])


def distinct_short_tokens(path: Path, size: int) -> Path:
    """As many distinct texts as the bytes allow: 3-byte tokens (11 header bytes), the worst for the
    duplicate check's table."""
    n = (size - SLACK) // 11
    return _write(path, [*_base(), _kv_array("tokenizer.ggml.tokens", 8, n, _fixed_strings(_distinct(n, 3)))])


def one_byte_tokens(path: Path, size: int) -> Path:
    """Tokens that are all one byte (a duplicate at once: llama.cpp aborts)."""
    n = (size - SLACK) // 9
    return _write(path, [*_base(), _kv_array("tokenizer.ggml.tokens", 8, n, _fixed_strings(np.full((n, 1), 97, np.uint8)))])


def long_tokens(path: Path, size: int, width: int = 64 * 1024) -> Path:
    """Few, long, distinct tokens (hashed and compared in place), the last one repeating the first."""
    n = max((size - SLACK) // (width + 8), 2)
    rows = np.full((n, width), 0x4C, dtype=np.uint8)
    rows[:, :4] = _distinct(n, 4)
    rows[-1] = rows[0]
    return _write(path, [*_base(), _kv_array("tokenizer.ggml.tokens", 8, n, _fixed_strings(rows))])


def huge_merges(path: Path, size: int) -> Path:
    """A small vocabulary with a merge list that fills the header (gpt2 model)."""
    tokens = _kv_array("tokenizer.ggml.tokens", 8, 300, b"".join(_s(f"<t{i}>".encode()) for i in range(300)))
    n = (size - SLACK) // 13
    merges = _kv_array("tokenizer.ggml.merges", 8, n, _fixed_strings(np.full((n, 5), 0x61, np.uint8)))
    return _write(path, [*_base("gpt2"), _kv_str("tokenizer.ggml.pre", "gpt-2"), tokens, merges])


def scores_and_types(path: Path, size: int) -> Path:
    """Distinct 3-byte tokens with one f32 score and one i32 type each (19 header bytes a token)."""
    n = (size - SLACK) // 19
    return _write(path, [*_base(), _kv_array("tokenizer.ggml.tokens", 8, n, _fixed_strings(_distinct(n, 3))),
                         _kv_array("tokenizer.ggml.scores", 6, n, np.linspace(0, 1, n, dtype="<f4").tobytes()),
                         _kv_array("tokenizer.ggml.token_type", 5, n, np.ones(n, dtype="<i4").tobytes())])


def nested_arrays(path: Path, size: int) -> Path:
    """One key holding an array of two-byte u8 arrays (14 header bytes each: the reader's worst per-byte shape)."""
    n = (size - SLACK) // 14
    inner = np.zeros(n, dtype=[("type", "<u4"), ("count", "<u8"), ("b", "u1", (2,))])
    inner["count"] = 2
    inner["b"] = 1
    return _write(path, [_kv_str("general.architecture", "llama"), _kv_array("t.nested", 9, n, inner.tobytes())])


def many_keys(path: Path, size: int) -> Path:
    """The most keys the reader takes (65,536), each holding an equal share of ``size`` as a string."""
    n = 1 << 16
    value = b"v" * max((size - SLACK) // n - 40, 1)
    return _write(path, [_s(b"k%05d" % i) + struct.pack("<I", 8) + _s(value) for i in range(n)])


def small_model(path: Path) -> Path:
    """A plain little vocabulary (the other side of a pair)."""
    return _write(path, [*_base(), _kv_array("tokenizer.ggml.tokens", 8, 300,
                                             b"".join(_s(f"<t{i}>".encode()) for i in range(300)))])


SHAPES: dict[str, Callable[[Path, int], Path]] = {
    "empty tokens": empty_tokens,
    "distinct 3-byte tokens": distinct_short_tokens,
    "one-byte tokens": one_byte_tokens,
    "long tokens": long_tokens,
    "huge merges": huge_merges,
    "scores and types": scores_and_types,
    "nested arrays": nested_arrays,
    "65,536 keys": many_keys,
}

_WRAPPER = """
import json, resource, subprocess, sys
done = subprocess.run(sys.argv[1:], capture_output=True, text=True, check=False)
rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
print(json.dumps({"rc": done.returncode, "maxrss_kib": rss, "out": done.stdout, "err": done.stderr[-2000:]}))
"""


def module_peak(module: str, args: dict[str, Any]) -> dict[str, Any]:
    """Run plugins/modules/<module>.py as Ansible runs a module (its own python process, arguments from a
    file) and return its result and its peak resident memory in bytes (``maxrss``)."""
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as fh:
        json.dump({"ANSIBLE_MODULE_ARGS": args}, fh)
    env = dict(os.environ, PYTHONPATH=str(COLLECTIONS))
    try:
        done = subprocess.run([sys.executable, "-c", _WRAPPER, sys.executable, str(MODULES / f"{module}.py"), fh.name],
                              capture_output=True, text=True, env=env, check=True)
    finally:
        os.unlink(fh.name)
    report = json.loads(done.stdout)
    out = report["out"]
    result = json.loads(out[out.index("{"):]) if "{" in out else {"unparsed": out[-2000:]}
    return {"rc": report["rc"], "maxrss": report["maxrss_kib"] * 1024, "result": result, "stderr": report["err"]}
