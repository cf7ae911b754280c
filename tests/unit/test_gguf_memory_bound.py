"""Peak memory of gguf_info, spec_compat and spec_lint on hostile vocabularies, run as Ansible runs them (issue 22).

Each module runs in its own python process; its peak resident memory (ru_maxrss) less that of the same module on a
tiny file is what the header cost. The bound per header byte held at once: the header's own bytes (1.0), the
duplicate check's table (at most 0.6: a 4-byte slot per distinct text at 3/4 load, a text costing at least 9
header bytes) and a fixed 8 MiB. At the reader's 256 MiB cap that is 1.6 x 256 + 8 MiB over a module's own
~30 MiB: under 512 MiB (benchmarks/gguf_memory.py runs the headers at the cap). Before, a vocabulary cost about
17 bytes per header byte (a list and a dict of every token): 136 MiB over the bound on the first header below.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from gguf_hostile import distinct_short_tokens, empty_tokens, huge_merges, long_tokens, module_peak, small_model

PER_BYTE = 1.6
FIXED = 8 << 20
MIB = 1 << 20


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("hostile")
    return {"small": small_model(d / "small.gguf"),
            "empty": empty_tokens(d / "empty.gguf", 8 * MIB),          # the issue's: 1,048,576 empty tokens
            "distinct": distinct_short_tokens(d / "distinct.gguf", 4 * MIB),
            "long": long_tokens(d / "long.gguf", 8 * MIB),
            "merges": huge_merges(d / "merges.gguf", 8 * MIB)}


@pytest.fixture(scope="module")
def baseline(files: dict[str, Path]) -> dict[str, int]:
    small = str(files["small"])
    return {"gguf_info": module_peak("gguf_info", {"path": small})["maxrss"],
            "spec_compat": module_peak("spec_compat", {"target": small, "draft": small})["maxrss"],
            "spec_lint": module_peak("spec_lint", {"backend": "llamacpp", "target": small, "draft": small})["maxrss"]}


CASES = [
    ("spec_compat", "small", "empty"),
    ("spec_compat", "merges", "merges"),    # one file as both: the two headers share max_header_bytes
    ("spec_compat", "small", "distinct"),   # the most distinct texts a byte can buy: the table at its largest
    ("spec_lint", "small", "long"),
    ("gguf_info", None, "merges"),
]


_RUNS: dict[tuple[str, str | None, str], dict[str, Any]] = {}


def _run(files: dict[str, Path], module: str, target: str | None, draft: str) -> tuple[dict[str, Any], int]:
    """The module's run on these files (run once for the memory and the verdict tests), and the header bytes held."""
    args: dict[str, Any]
    if module == "gguf_info":
        args, held = {"path": str(files[draft])}, files[draft].stat().st_size
    else:
        args = {"target": str(files[target]), "draft": str(files[draft])}
        held = files[target].stat().st_size + files[draft].stat().st_size
        if module == "spec_lint":
            args.update(engine="llamacpp", flags=["--spec-type", "draft-simple"])
    key = (module, target, draft)
    if key not in _RUNS:
        _RUNS[key] = module_peak(module, args)
    return _RUNS[key], held


@pytest.mark.parametrize(("module", "target", "draft"), CASES)
def test_peak_memory_is_bounded_per_header_byte(files: dict[str, Path], baseline: dict[str, int], module: str,
                                                target: str | None, draft: str) -> None:
    run, held = _run(files, module, target, draft)
    assert run["rc"] == 0 and not run["result"].get("failed"), run
    extra = run["maxrss"] - baseline[module]
    assert extra <= PER_BYTE * held + FIXED, (
        f"{module} on {draft}: {extra / MIB:.1f} MiB over its baseline for {held / MIB:.1f} MiB of headers "
        f"({extra / held:.2f} bytes per header byte)")
    assert extra >= 0.9 * files[draft].stat().st_size  # the header really was read: the measure measures


def test_the_verdicts_on_hostile_vocabularies(files: dict[str, Path]) -> None:
    """What llama.cpp does with them, from the same runs' shapes (kept small: the loader's rules, not memory)."""
    empty = _run(files, "spec_compat", "small", "empty")[0]["result"]
    assert empty["draft"]["vocab"]["loads"] is True and empty["compatible"] is False  # [EMPTY_<id>] are distinct
    assert empty["first_mismatch"] == {"id": 5, "target": "<t5>", "draft": "[EMPTY_5]"}
    long = _run(files, "spec_lint", "small", "long")[0]["result"]
    assert long["ok"] is False and long["outcome"] == "aborts", long  # its last token repeats its first
    assert "...(65536 bytes)" in str(long["errors"]) and len(str(long)) < 64 * 1024  # shown clipped
