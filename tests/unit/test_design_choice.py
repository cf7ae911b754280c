"""The plan's choice of design (issue 49, item 5): the sequential design or the fewest fixed rounds with its power to
recommend the planned effect, whichever needs fewer expected starts; spec_ab_sequential auto / true / false."""
from __future__ import annotations

import functools

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.llmfleet.specdec.plugins.module_utils.common._stats import ReportInputError
from ansible_collections.llmfleet.specdec.plugins.plugin_utils.steps._steps_ab import ab_design_choice
from ansible_collections.llmfleet.specdec.plugins.plugin_utils.verdicts import _choose, _confirm

CONFIGS = [{"name": n} for n in ("baseline", "a", "b", "c", "d")]
SETTINGS = {"baseline": "baseline", "max_rounds": "5", "min_speedup": "1.2", "alpha": 0.05, "win_margin": "0.02",
            "noise": "", "smoke": False}


@functools.cache
def _chosen(noise: float) -> dict:
    return _choose.choose(4, effect=1.2, alpha=0.05, win_margin=0.02, max_rounds=5, noise=noise)


def _consistent(got: dict) -> None:
    """The pick agrees with the chooser's own figures: fixed only when it reaches the sequential design's power
    (less the tolerance) with fewer starts; sequential otherwise."""
    seq, fixed = got["sequential_design"], got["fixed_design"]
    goal = seq["power"] - min(_choose.POWER_TOLERANCE, _choose.POWER_SHARE * seq["power"])
    if got["sequential"]:
        assert fixed is None or fixed["starts"] >= seq["starts"] or fixed["power"] < goal, got
        assert got["starts"] == round(seq["starts"], 1) and got["power"] == seq["power"]
        assert got["line"].startswith("design: sequential, ")
    else:
        assert fixed is not None and fixed["power"] >= goal and fixed["starts"] < seq["starts"], got
        assert got["rounds"] == fixed["rounds"] and got["starts"] == fixed["starts"]
        assert got["line"].startswith(f"design: fixed {fixed['rounds']} rounds, ")
        # the fewest such rounds: every fewer fixed rounds was simulated and fell short
        fewer = {int(r): v for r, v in got["fixed_by_rounds"].items() if int(r) < fixed["rounds"]}
        assert sorted(fewer) == list(range(2, fixed["rounds"])) and all(v["power"] < goal for v in fewer.values())
    assert f"expected starts {got['starts']:.1f} against {got['other_starts']:.1f}" in got["line"]
    assert f"recommendation power {got['power']:.1%} at the planned 1.2x" in got["line"]


def test_at_sigma_0_10_four_fixed_rounds_have_the_sequential_power_with_fewer_starts() -> None:
    # the case: 4 fixed rounds (20 starts) against the sequential design's 22
    got = _chosen(0.10)
    assert got["sequential"] is False and got["rounds"] <= 4, got["line"]
    assert got["starts"] < got["sequential_design"]["starts"]
    _consistent(got)


def test_at_sigma_0_05_the_pick_agrees_with_its_own_figures() -> None:
    got = _chosen(0.05)
    _consistent(got)
    # a power near 1 leaves no room for fewer fixed rounds: the sequential design stops most nulls early
    assert got["sequential"] is True, got["line"]


def test_the_choice_is_seeded_the_same_plan_gives_the_same_design() -> None:
    one = _choose.choose(2, effect=1.5, noise=0.08, max_rounds=4, runs=60)
    assert one == _choose.choose(2, effect=1.5, noise=0.08, max_rounds=4, runs=60)


@pytest.mark.parametrize("bad", [{"noise": -0.1}, {"noise": float("nan")}, {"effect": 1.0}, {"alpha": 0.0},
                                 {"max_rounds": 1}, {"win_margin": True}])
def test_a_bad_input_is_a_named_error(bad: dict) -> None:
    kwargs = {"effect": 1.2, "alpha": 0.05, "win_margin": 0.02, "max_rounds": 5, "noise": 0.05, "runs": 20, **bad}
    with pytest.raises(ReportInputError, match=next(iter(bad))):
        _choose.simulate(4, **kwargs)


def test_many_candidates_are_bounded_by_the_cell_budget() -> None:
    got = _choose.simulate(16, effect=3.0, alpha=0.05, win_margin=0.02, max_rounds=2, noise=0.02, runs=200)
    assert got["runs"] == 58
    many = [{"name": "baseline"}, *({"name": f"c{i}"} for i in range(17))]
    got = ab_design_choice(many, "auto", SETTINGS)
    assert got["sequential"] is True and "17 candidates, more than the 16 the plan simulates" in got["line"]
    assert ab_design_choice(many, False, SETTINGS)["sequential"] is False


def test_auto_chooses_and_the_report_is_told_why() -> None:
    got = ab_design_choice(CONFIGS, "auto", dict(SETTINGS, noise="0.10"))
    assert got["sequential"] is False and got["rounds"] <= 4
    assert got["chosen_by"].startswith("spec_ab_sequential auto: design: fixed ")
    assert "noise 0.1 from spec_ab_planned_noise" in got["line"]
    assert ab_design_choice(CONFIGS, "auto", SETTINGS)["noise_from"] == "the default 0.05 (spec_ab_planned_noise empty)"
    got = ab_design_choice(CONFIGS, "auto", dict(SETTINGS, noise="last", noise_last=True))
    assert got["noise_from"] == "the default 0.05: no earlier run of this unit reported on this controller"


@pytest.mark.parametrize("value,sequential", [(True, True), ("yes", True), (False, False),
                                              ("no", False)])
def test_true_and_false_force_the_design_and_still_give_the_figures(value, sequential) -> None:
    got = ab_design_choice(CONFIGS, value, dict(SETTINGS, noise="0.10"))
    assert got["sequential"] is sequential and got["rounds"] == 5
    assert got["chosen_by"].startswith(f"spec_ab_sequential {str(sequential).lower()}: design: ")
    assert "(forced)" in got["line"] and "auto would choose fixed" in got["line"]
    if not sequential:
        assert got["starts"] == 25.0 and got["other_starts"] == round(got["sequential_design"]["starts"], 1)


@pytest.mark.parametrize("value", ["maybe", "", None, 2, 0.5, ["auto"]])
def test_a_bad_spec_ab_sequential_is_named(value) -> None:
    with pytest.raises(AnsibleFilterError, match=r"spec_ab_sequential: expected auto, true or false, got "):
        ab_design_choice(CONFIGS, value, SETTINGS)


@pytest.mark.parametrize("key,variable", [("noise", "spec_ab_planned_noise"), ("min_speedup", "spec_ab_min_speedup"),
                                          ("max_rounds", "spec_ab_max_rounds")])
def test_a_bad_setting_is_named(key, variable) -> None:
    with pytest.raises(AnsibleFilterError, match=variable):
        ab_design_choice(CONFIGS, "auto", dict(SETTINGS, **{key: "loud"}))


def test_a_smoke_run_or_no_candidate_has_nothing_to_choose() -> None:
    got = ab_design_choice(CONFIGS, "auto", dict(SETTINGS, smoke=True, max_rounds=1))
    assert got["sequential"] is True and got["rounds"] == 1 and "nothing to choose" in got["chosen_by"]
    got = ab_design_choice(CONFIGS[:1], "false", SETTINGS)
    assert got["sequential"] is False and "no candidate" in got["line"]


def test_the_design_carries_chosen_by_into_the_confirmatory_section() -> None:
    design = _confirm.design_of({"design": {"sequential": False, "max_rounds": 4, "chosen_by": "auto: fixed"}}, 4)
    assert design["chosen_by"] == "auto: fixed" and design["sequential"] is False
    assert _confirm.design_of({}, 3)["chosen_by"] is None


def test_the_report_says_which_design_and_why() -> None:
    from ab_runs import make_run

    from ansible_collections.llmfleet.specdec.plugins.plugin_utils.report import _report
    from ansible_collections.llmfleet.specdec.plugins.plugin_utils.verdicts import _judge

    run = make_run({"baseline": {}, "d": {"chain": ["draft-simple"], "draft": (10, 5), "speedup": 1.2}}, rounds=3)
    why = "spec_ab_sequential auto: design: fixed 3 rounds, expected starts 6.0 against 6.3"
    run["design"] = {"sequential": False, "max_rounds": 3, "chosen_by": why}
    document = _report.build_document(run, _judge.judge(run, n_boot=100))
    assert document["judged"]["confirmatory"]["chosen_by"] == why
    assert f"The design: {why}." in _report.markdown(document)


def test_the_last_runs_pooled_noise_is_read_from_its_report() -> None:
    import json
    import math

    from ansible_collections.llmfleet.specdec.plugins.plugin_utils.steps._steps_ab import ab_report_noise

    document = {"run_id": "20261207T000000Z-x", "judged": {"confirmatory": {"looks": [
        {"after_round": 2, "noise": 0.08}, {"after_round": 3, "noise": 0.0612}, {"after_round": 4, "why": "nothing"}]}}}
    got = ab_report_noise(json.dumps(document))
    assert math.isclose(got["noise"], math.log1p(0.0612)) and "20261207T000000Z-x (pooled noise 6.1%)" in got["from"]
    assert ab_report_noise(document) == got
    for nothing in ("", "not json", "[]", {"judged": {}}, None, {"judged": {"confirmatory": {"looks": [{"noise": None}]}}}):
        assert ab_report_noise(nothing) == {"noise": None, "from": ""}
    chosen = ab_design_choice(CONFIGS, "auto", dict(SETTINGS, noise=got["noise"], noise_from=got["from"]))
    assert chosen["line"].endswith(f"(noise {got['noise']:.3g} from {got['from']})")


def test_where_nothing_is_findable_no_power_is_given_away() -> None:
    # at a round noise of 0.5 the sequential design still finds a 1.2x now and then; a fixed design that never does
    # is not the same power, however few starts it needs
    got = _choose.choose(4, effect=1.2, noise=0.5, runs=100)
    assert got["power"] >= 0.75 * got["sequential_design"]["power"], got["line"]
    assert got["sequential"] or got["power"] > 0, got["line"]
