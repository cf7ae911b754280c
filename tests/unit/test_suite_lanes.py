"""Every Molecule scenario runs somewhere, once: in a lane of `make test`, or in `make test-full` only, named there with
what in `make test` still covers its feature against the real part (docs/testing.md, "make test and make test-full")."""
from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LISTS = ("MOLECULE_LANE_A", "MOLECULE_LANE_B", "MOLECULE_AB_LANE_A", "MOLECULE_AB_LANE_B", "MOLECULE_ALONE",
         "MOLECULE_FULL_ONLY")
# scenarios with a target of their own: molecule/build (make molecule-build, a stage of make test), molecule/load (make
# test-load, a stage of make test-full)
OWN_TARGET = {"build": "molecule-build", "load": "test-load"}


def _lists() -> dict[str, list[str]]:
    text = (ROOT / "Makefile").read_text(encoding="utf-8")
    return {name: re.search(rf"^{name} \?= (.*)$", text, re.M).group(1).split() for name in LISTS}


def test_every_scenario_is_in_exactly_one_list_or_has_its_own_target() -> None:
    scenarios = sorted(p.parent.name for p in (ROOT / "molecule").glob("*/molecule.yml"))
    placed = [s for names in _lists().values() for s in names]
    assert len(placed) == len(set(placed)), placed  # once
    for scenario in scenarios:
        assert (scenario in placed) != (scenario in OWN_TARGET), scenario
    assert set(placed) <= set(scenarios)


def test_make_test_full_runs_what_make_test_leaves_out() -> None:
    text = (ROOT / "Makefile").read_text(encoding="utf-8")
    stages = text[text.index("test-full-stages:\n"):]
    stages = stages[:stages.index("\n\n")]
    for target in ("MOLECULE_FULL_ONLY", "test-load", "test-vocab-pairs", "test-vllm-oracle", "fuzz",
                   "benchmark-calibration", "test-newest-ansible"):
        assert target in stages, target
    # molecule/build's sentinel part (issue 47) runs only there: make test's molecule-build leaves it out
    assert "SPECDEC_BUILD_SENTINEL=1 $(MAKE) --no-print-directory molecule-build" in stages
    verify = (ROOT / "molecule" / "build" / "verify.yml").read_text(encoding="utf-8")
    assert "include_tasks: sentinel.yml\n      when: lookup('ansible.builtin.env', 'SPECDEC_BUILD_SENTINEL') == '1'" in verify
    # each scenario make test leaves out says what still covers its feature in make test
    block = text[:text.index("MOLECULE_FULL_ONLY ?=")].rsplit("\n\n", 1)[-1]
    for scenario in _lists()["MOLECULE_FULL_ONLY"]:
        assert f"# {scenario} (" in block, scenario
