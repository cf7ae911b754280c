"""A seeded sample of `make fuzz` (benchmarks/fuzz_gguf.py): the same cases, workers, caps and pipeline."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _fuzzer():
    spec = importlib.util.spec_from_file_location("fuzz_gguf", ROOT / "benchmarks" / "fuzz_gguf.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["fuzz_gguf"] = module  # the worker processes find its functions by this name
    spec.loader.exec_module(module)
    return module


def test_fuzzed_headers_end_in_facts_or_a_project_error() -> None:
    fuzz = _fuzzer()
    # Synthetic seeds only (llama.cpp's vocabulary files live in a cache this test does not need); one
    # worker under the same 512 MiB cap; the deadline only stops a runaway case, it is not asserted.
    r = fuzz.fuzz(3000, seed=7, jobs=1, vocab_paths=[], deadline=30.0)
    c = r["counts"]
    assert sum(c.values()) == 3000
    assert c["other exception"] == 0, r["samples"]
    assert c["memory error"] == 0, r["samples"]
    # both ends were reached: the sample is not all errors, nor all clean
    assert c["parsed"] > 300 and c["project error"] > 300, c
