"""A seeded sample of `make benchmark-calibration` (benchmarks/calibration.py): one A/A run on the tiny bed.

The benchmark's own pieces, on the real llama-server: ``one_run`` (rounds x configs in the protocol's order, each
config on its own server start, every shape measured by ``_endpoint.run_bench``), then ``tally`` (the run judged
by ``_judge.judge`` with the calibrated method and with the old bootstrap) and ``print_table``. Two rounds of
baseline and its twin: four server starts of the 1.5 MB target, seconds. What the twin is called is not asserted
(a calibrated method says "no difference" about 95 % of the time; the benchmark counts that over many runs):
the sample shows that the benchmark still runs end to end and judges the same data the same way twice.
"""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
VERDICTS = {"no difference", "win", "loss", "not called", "invalid"}


def _calibration():
    spec = importlib.util.spec_from_file_location("calibration", ROOT / "benchmarks" / "calibration.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["calibration"] = module
    spec.loader.exec_module(module)
    return module


def test_one_aa_run_of_the_tiny_bed_is_measured_in_order_and_judged(
        standard_models: dict[str, Path], llama_server_bin: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    calibration = _calibration()
    # the tiny bed reads <cache>/demo-models/target.gguf: the session's standard set is that set
    (tmp_path / "demo-models").symlink_to(standard_models["target.gguf"].parent, target_is_directory=True)
    monkeypatch.setattr(calibration, "CACHE", tmp_path)
    monkeypatch.setenv("LLAMA_SERVER_BIN", llama_server_bin)
    bed = calibration.beds(1)["tiny"]
    run = calibration.one_run(bed, ["baseline", "twin"], rounds=2, prompts=2, seed=3)

    # the protocol's order: every config once per round, rotated by one each round
    assert [(e["round"], e["config"]) for e in run["entries"]] == [
        (0, "baseline"), (0, "twin"), (1, "twin"), (1, "baseline")]
    shapes = list(calibration.SHAPES)
    for entry in run["entries"]:
        measured = [(r["shape"], r["prompt_index"]) for r in entry["bench"]["requests"]]
        assert sorted(measured) == sorted((s, p) for s in shapes for p in range(2)), entry["config"]
        assert all(r.get("predicted_per_second") for r in entry["bench"]["requests"])
    assert run["entries"][1]["server_config"] == calibration.TWIN_ENV

    for method, margin in (("rounds", calibration._stats.EQUIVALENCE_MARGIN), ("request-bootstrap", 0.0)):
        first = calibration.tally([run], method, margin)
        assert list(first) == ["twin"]
        assert sum(first["twin"].values()) == len(shapes)  # one verdict per shape
        assert set(first["twin"]) <= VERDICTS
        assert calibration.tally([run], method, margin) == first  # seeded: the same data judged the same way

    calibration.print_table({"tiny": [run], "win": []}, calibration._stats.EQUIVALENCE_MARGIN)
    table = capsys.readouterr().out.splitlines()
    assert [line.split(" | ")[:4] for line in table[2:]] == [
        ["| tiny", "twin", "no difference", "1"], ["| tiny", "twin", "no difference", "1"]]
