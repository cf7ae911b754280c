"""A seeded sample of `make benchmark-calibration` (benchmarks/calibration.py): one A/A run on the tiny bed.

The benchmark's own pieces on the real llama-server: ``role_run`` (the role's schedule: ``ab_schedule``'s plan,
``ab_round``'s slots, a fresh server start per slot, every shape measured by ``_endpoint.run_bench``, ``ab_look``
after each round), then ``judge_runs`` (the confirmatory verdicts of ``_judge.judge``) and ``print_real``. The
baseline and one null twin over at most two rounds: four server starts of the 1.5 MB target at most, seconds.
What the twin is called is not asserted beyond "not a WIN or a LOSS is the usual outcome" (the benchmark counts
the false-WIN rate over many runs); the sample shows that the benchmark still runs end to end on the role's
schedule and judges the same data the same way twice.
"""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]


def _calibration():
    spec = importlib.util.spec_from_file_location("calibration", ROOT / "benchmarks" / "calibration.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["calibration"] = module
    spec.loader.exec_module(module)
    return module


def test_one_aa_run_of_the_tiny_bed_is_measured_on_the_roles_schedule_and_judged(
        standard_models: dict[str, Path], llama_server_bin: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    calibration = _calibration()
    # the tiny bed reads <cache>/demo-models/target.gguf: the session's standard set is that set
    (tmp_path / "demo-models").symlink_to(standard_models["target.gguf"].parent, target_is_directory=True)
    monkeypatch.setattr(calibration, "CACHE", tmp_path)
    monkeypatch.setenv("LLAMA_SERVER_BIN", llama_server_bin)
    bed = calibration.beds(1)["tiny"]
    bed["configs"] = {"baseline": bed["configs"]["baseline"], "twin1": bed["configs"]["twin1"]}
    run = calibration.role_run(bed, max_rounds=2, prompts=2, seed=3)

    entries = run["entries"]
    rounds = sorted({e["round"] for e in entries})
    assert rounds[0] == 0 and rounds == list(range(len(rounds))), rounds
    # every round measures the baseline and each config the last look kept, once each, each on its own start
    for rnd in rounds:
        names = [e["config"] for e in entries if e["round"] == rnd]
        assert sorted(names) == sorted(set(names)) and "baseline" in names, (rnd, names)
    assert {e["config"] for e in entries if e["round"] == 0} == {"baseline", "twin1"}
    for entry in entries:
        measured = [(r["shape"], r["prompt_index"]) for r in entry["bench"]["requests"]]
        assert sorted(measured) == sorted((s, p) for s in bed["shapes"] for p in range(2)), entry["config"]
        assert all(r.get("predicted_per_second") for r in entry["bench"]["requests"])
    assert next(e["server_config"] for e in entries if e["config"] == "twin1") == {"SPECDEC_TWIN": "1"}

    first = calibration.judge_runs([run])
    assert first["runs"] == 1 and first["starts"] == len(entries)
    assert set(first["verdicts"]) == {"twin1"}
    assert sum(first["verdicts"]["twin1"].values()) == 1  # one confirmatory verdict per config and run
    assert set(first["verdicts"]["twin1"]) <= set(calibration._design.VERDICTS)
    assert calibration.judge_runs([run]) == first  # seeded: the same data judged the same way

    calibration.print_real("tiny", first, 0.0)
    out = capsys.readouterr().out
    assert "tiny bed on the role's schedule: 1 runs" in out
    assert out.splitlines()[-2].startswith("| twin1 | ")
