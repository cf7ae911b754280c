"""The confirmatory endpoint of a run: end-to-end against decode, its weights, the design's inputs, report.json's C3."""
from __future__ import annotations

import re

import pytest
from ab_runs import make_run

from ansible_collections.llmfleet.specdec.plugins.module_utils.common import _stats as st
from ansible_collections.llmfleet.specdec.plugins.plugin_utils.report import _report as rp
from ansible_collections.llmfleet.specdec.plugins.plugin_utils.verdicts import _confirm
from ansible_collections.llmfleet.specdec.plugins.plugin_utils.verdicts import _judge as jd

DRAFTER = {"chain": ["draft-simple"], "draft": (30, 20)}
START = {0: 1.0, 1: 1.03, 2: 0.98}


def _slow_prefill(run: dict, config: str, seconds: float) -> dict:
    """The config's every request spends ``seconds`` more before decoding (a draft model's own prefill)."""
    for e in run["entries"]:
        if e["config"] == config:
            for r in e["bench"]["requests"]:
                r["wall_s"] += seconds
    return run


def test_end_to_end_counts_what_decode_leaves_out():
    run = make_run({"baseline": {}, "d": dict(DRAFTER, speedup=1.5, start=START)}, rounds=3)
    run = _slow_prefill(_slow_prefill(run, "baseline", 0.05), "d", 2.05)
    judged = jd.judge(run, n_boot=100)
    conf = judged["confirmatory"]
    assert conf["endpoint"] == "e2e"
    # 1.5x faster decoding, but 2 s more before the first token: a loss for the whole request
    assert conf["verdicts"]["d"]["verdict"] == "LOSS" and conf["verdicts"]["d"]["ratio"] < 1.0
    prose = judged["configs"]["d"]["shapes"]["prose"]
    assert prose["verdict"] == "WIN" and prose["e2e"]["verdict"] == "LOSS"
    assert prose["ttft"]["value"] > 1900 and prose["ttft"]["speedup"] < 0.1  # ms; sooner is above 1
    assert judged["recommendation"]["keep_baseline"] is True
    # the operator judges on decode instead: the same run is a WIN, and the report says which
    run["design"] = {"endpoint": "decode", "sequential": False}
    decode = jd.judge(run, n_boot=100)
    assert decode["confirmatory"]["endpoint"] == "decode"
    assert decode["confirmatory"]["verdicts"]["d"]["verdict"] == "WIN"
    assert "**decode tokens/s" in rp.markdown(rp.build_document(run, decode))


def test_the_endpoint_weighs_the_measured_shapes_equally_a_declared_mix_or_one_shape():
    shapes = ["prose", "echo"]
    assert _confirm.weights_of(None, shapes, {})[0] == {"prose": 0.5, "echo": 0.5}
    assert _confirm.weights_of({"echo": 1.0}, shapes, {})[1].startswith("the declared traffic mix")
    assert _confirm.weights_of({"echo": 1.0}, shapes, {"primary_shape": "prose"})[0] == {"prose": 1.0}
    speedup = {"prose": 2.0, "echo": 1.0, "structured": 1.0, "identity": 1.0}
    run = make_run({"baseline": {}, "d": dict(DRAFTER, speedup=speedup, start=START)}, rounds=3)
    run["design"] = {"primary_shape": "prose", "sequential": False}
    conf = jd.judge(run, n_boot=100)["confirmatory"]
    assert conf["weights"] == {"prose": 1.0} and conf["verdicts"]["d"]["ratio"] == pytest.approx(2.0, rel=0.01)


@pytest.mark.parametrize(("design", "match"), [
    ({"endpoint": "tokens"}, "spec_ab_judge_on"), ({"max_rounds": 0}, "spec_ab_max_rounds"),
    ({"alpha": 0.7}, "alpha"), ({"min_speedup": 0.9}, "above 1"), ({"colour": "red"}, "unknown key"),
    ("sequential", "expected a mapping")])
def test_a_bad_design_is_refused_naming_the_key(design, match):
    run = make_run({"baseline": {}, "d": dict(DRAFTER)}, rounds=2)
    run["design"] = design
    with pytest.raises(st.ReportInputError, match=match):
        jd.judge(run, n_boot=100)


def test_report_json_carries_the_confirmatory_object_of_contract_c3():
    run = make_run({"baseline": {}, "d": dict(DRAFTER, speedup=1.6, start=START), "twin": {"start": START}},
                   rounds=3)
    run["design"] = {"max_rounds": 3, "sequential": True}
    doc = rp.build_document(run, jd.judge(run, n_boot=100))
    conf = doc["confirmatory"]
    assert {"endpoint", "weights", "method", "alpha", "verdicts", "recommendation"} <= set(conf)
    assert conf["endpoint"] in ("e2e", "decode") and conf["alpha"] == 0.05
    for row in conf["verdicts"].values():
        assert {"verdict", "ratio", "low", "high", "mde", "noise"} <= set(row)
        assert row["verdict"] in ("WIN", "LOSS", "EQUIVALENT", "INCONCLUSIVE")
    assert conf["verdicts"]["d"]["verdict"] == "WIN" and conf["recommendation"] == "d"
    assert conf["restarts"]["used"] == len(run["entries"])


def test_the_prediction_uses_the_verification_and_prefill_timed_within_the_starts():
    draft = "/opt/specdec/models/draft.gguf"
    run = make_run({
        "baseline": {},
        "d": dict(DRAFTER, speedup=1.5, k=4, metrics=True, drafts_per_request=8, per_pos=[8, 6, 4, 2],
                  server_config={"LLAMA_ARG_SPEC_TYPE": "draft-simple", "LLAMA_ARG_SPEC_DRAFT_MODEL": draft}),
        "draft-alone": {"speedup": 10.0, "server_config": {"LLAMA_ARG_MODEL": draft},
                        "text": lambda shape, p, rnd, rep: f"draft text {shape} {p}"},
    }, rounds=2)
    timed = {"baseline": {"1": 20.0, "5": 40.0}, "draft-alone": {"1": 2.0, "5": 4.0}}
    for e in run["entries"]:
        if e["config"] in timed:
            e["bench"]["verify"] = {"batches": timed[e["config"]], "k": [4]}
    judged = jd.judge(run, n_boot=100)
    p = next(x for x in judged["prediction"] if x["config"] == "d" and x["shape"] == "prose")
    a = p["expected_accepted"]
    prefill = 2.0 + (4.0 - 2.0) * (a - 1.0) / 4.0  # linear between the probe's batches of 1 and 5
    assert p["verify_ms"] == pytest.approx(40.0) and p["verify_source"].startswith("measured on the baseline's start")
    assert p["predicted_tok_s"] == pytest.approx(1000.0 * a / (prefill + 3 * p["d_s_ms"] + 40.0))
    assert "prefill" in p["draft_source"]
    # without the batch timings the arithmetic's 1.1 target steps stand in, and the row says so
    for e in run["entries"]:
        e["bench"].pop("verify", None)
    p = next(x for x in jd.judge(run, n_boot=100)["prediction"] if x["config"] == "d" and x["shape"] == "prose")
    assert p["verify_ms"] == pytest.approx(1.1 * p["t_s_ms"]) and p["verify_source"].startswith("assumed")


@pytest.mark.parametrize(("key", "value"), [
    ("wall_s", float("inf")), ("wall_s", float("nan")), ("wall_s", "0.4"), ("wall_s", -1.0), ("wall_s", True),
    ("predicted_per_second", float("inf")), ("predicted_per_second", float("nan")), ("predicted_per_second", "fast"),
    ("ttft_s", float("inf")), ("ttft_s", float("-inf")), ("ttft_s", "0.1"), ("ttft_s", -0.5)])
def test_a_non_finite_or_mistyped_request_value_is_a_named_input_error(key, value):
    run = make_run({"baseline": {}, "d": dict(DRAFTER, speedup=1.5, start=START)}, rounds=2)
    run["entries"][1]["bench"]["requests"][3][key] = value
    where = f"run.entries[1].bench.requests[3].{key}"
    with pytest.raises(st.ReportInputError, match="^" + re.escape(where) + ": expected a finite number >= 0"):
        jd.check_run(run)
    # the judge and the look after a round go through the same check: never a math error deep in _confirm
    with pytest.raises(st.ReportInputError, match=key):
        jd.judge(run, n_boot=100)


def test_finite_request_values_and_nulls_pass_the_check():
    run = make_run({"baseline": {}, "d": dict(DRAFTER, speedup=1.5, start=START)}, rounds=2)
    req = run["entries"][1]["bench"]["requests"][3]
    req.update(ttft_s=None, predicted_per_second=None, wall_s=0)
    checked = jd.check_run(run)["entries"][1]["bench"]["requests"][3]
    assert checked["wall_s"] == 0 and checked["ttft_s"] is None


def test_a_win_needs_its_lower_bound_above_the_practical_margin_to_be_recommended():
    run = make_run({"baseline": {"noise": 0.01}, "d": dict(DRAFTER, speedup=1.1, noise=0.01, start=START)}, rounds=4)
    run["design"] = {"sequential": False}
    judged = jd.judge(run, n_boot=100)
    row = judged["confirmatory"]["verdicts"]["d"]
    assert judged["confirmatory"]["win_margin"] == _confirm.WIN_MARGIN == 0.02
    assert row["verdict"] == "WIN" and row["low"] > 1.02 and row["practical"] is True
    assert judged["recommendation"]["config"] == "d"
    # the operator asks for more than this run proves (spec_ab_win_margin 0.2): still a WIN, never recommended
    run["design"] = {"sequential": False, "win_margin": 0.2}
    judged = jd.judge(run, n_boot=100)
    row = judged["confirmatory"]["verdicts"]["d"]
    assert row["verdict"] == "WIN" and row["practical"] is False and "below the practical margin" in row["why"]
    assert judged["recommendation"]["keep_baseline"] is True and "1 + 0.2" in judged["recommendation"]["reason"]
    document = rp.build_document(run, judged)
    section = rp.confirmatory_section(judged)
    assert section["win_margin"] == 0.2 and section["verdicts"]["d"]["practical"] is False
    assert any("d | WIN (below the practical margin)" in line for line in rp.summary_lines(document))
    assert "lower bound above 1 + 0.2 (spec_ab_win_margin)" in rp.markdown(document)
    run["design"] = {"win_margin": -0.1}
    with pytest.raises(st.ReportInputError, match="win_margin"):
        jd.judge(run, n_boot=100)


@pytest.mark.parametrize("speedup", [1.0, 1.004, 0.99])
def test_zero_residual_data_is_no_win_and_no_recommendation(speedup):
    # every round agrees exactly: a point interval, which must not read "1.00x [1.00, 1.00] WIN"
    run = make_run({"baseline": {}, "d": dict(DRAFTER, speedup=speedup)}, rounds=3)
    run["design"] = {"sequential": False, "win_margin": 0.0}
    judged = jd.judge(run, n_boot=100)
    row = judged["confirmatory"]["verdicts"]["d"]
    assert row["low"] == pytest.approx(row["high"])
    assert row["verdict"] == "EQUIVALENT" and "zero residual" in row["why"]
    assert judged["recommendation"]["keep_baseline"] is True


def test_each_configs_spread_is_reported_and_unequal_noise_is_warned_about():
    run = make_run({"baseline": {"noise": 0.3}, "d": dict(DRAFTER, speedup=1.3, noise=0.02),
                    "e": dict(DRAFTER, speedup=1.0, noise=0.02)}, rounds=4)
    run["design"] = {"sequential": False}
    judged = jd.judge(run, n_boot=100)
    conf = judged["confirmatory"]
    assert set(conf["spread"]) == {"baseline", "d", "e"}
    assert conf["spread"]["baseline"] > 1.5 * max(conf["spread"]["d"], conf["spread"]["e"])
    assert conf["spread_warning"].startswith("unequal noise: baseline's spread")
    document = rp.build_document(run, judged)
    assert "**Warning**: unequal noise" in rp.markdown(document)
    assert any(line.startswith("confirmatory | warning | unequal noise") for line in rp.summary_lines(document))
    assert rp.confirmatory_section(judged)["spread"] == conf["spread"]
    # equal noise: the spreads are there, no warning
    run = make_run({"baseline": {"noise": 0.05}, "d": dict(DRAFTER, speedup=1.3, noise=0.05)}, rounds=4)
    conf = jd.judge(run, n_boot=100)["confirmatory"]
    assert set(conf["spread"]) == {"baseline", "d"} and "spread_warning" not in conf


def test_the_headline_names_the_endpoint_and_its_weights_and_says_when_the_built_in_mix_decided():
    run = make_run({"baseline": {}, "d": dict(DRAFTER, speedup=1.5, start=START)}, rounds=3)
    conf = jd.judge(run, n_boot=100)["confirmatory"]
    assert conf["declared"] is False and conf["weights_from"] == _confirm.BUILT_IN
    assert conf["sizes"]["prose"] == {"prompt_n": 100, "predicted_n": 64}
    assert conf["headline"].startswith("endpoint e2e tokens/s over prose 25%, echo 25%, structured 25%, identity 25%: "
                                       "the BUILT-IN mix decided")
    assert "prose 100 prompt / 64 output tokens" in conf["headline"]
    judged = jd.judge(run, n_boot=100)
    assert conf["headline"] in judged["recommendation"]["reason"]
    # declared traffic: the headline names the weights and where they came from, no warning
    run = make_run({"baseline": {}, "d": dict(DRAFTER, speedup=1.5, start=START)}, rounds=3,
                   mix={"prose": 0.8, "identity": 0.2})
    conf = jd.judge(run, n_boot=100)["confirmatory"]
    assert conf["declared"] is True and "sizes" not in conf
    assert conf["headline"] == ("endpoint e2e tokens/s over prose 80%, identity 20% (the declared traffic mix "
                                "(spec_ab_mix, traffic weights))")


def test_a_smoke_run_measures_and_reports_without_any_verdict():
    # spec_ab_smoke: one round is allowed, the ratio is shown, and no candidate gets a verdict or a recommendation,
    # even when the data would give one (a 1.6x over three rounds)
    for rounds in (1, 3):
        run = make_run({"baseline": {}, "d": dict(DRAFTER, speedup=1.6, start=START)}, rounds=rounds)
        run["design"] = {"max_rounds": rounds, "sequential": True, "smoke": True}
        judged = jd.judge(run, n_boot=100)
        conf = judged["confirmatory"]
        row = conf["verdicts"]["d"]
        assert conf["smoke"] is True and conf["recommendation"] is None
        assert row["verdict"] == "INCONCLUSIVE" and row["low"] is None and row["practical"] is False
        assert row["why"].startswith("a smoke run (spec_ab_smoke)")
        doc = rp.build_document(run, judged)
        assert doc["confirmatory"]["smoke"] is True and doc["recommendation"]["keep_baseline"] is True
        assert "smoke run" in doc["recommendation"]["reason"]
        assert [c["config"] for c in judged["recommendation"]["candidates"]] == ["d"]  # still listed, with its ratio
        assert "**Smoke run, no verdict**" in rp.markdown(doc)
        assert any(line.startswith("confirmatory | warning | a smoke run") for line in rp.summary_lines(doc))
    assert run["design"]["smoke"] is True and row["ratio"] == pytest.approx(1.6, rel=0.05)
    # no look stops a candidate of a smoke run: after 3 of 5 rounds every candidate is measured again
    run["design"] = {"max_rounds": 5, "sequential": True, "smoke": True}
    assert jd.judge(run, n_boot=100)["confirmatory"]["active"] == ["d"]
    run["design"]["smoke"] = False
    assert jd.judge(run, n_boot=100)["confirmatory"]["active"] == []  # the 1.6x is decided at that look
    # the same data without it: a WIN
    run["design"] = {"max_rounds": 3, "sequential": True}
    assert jd.judge(run, n_boot=100)["confirmatory"]["verdicts"]["d"]["verdict"] == "WIN"
    # a value that is no boolean is refused naming the variable
    run["design"] = {"max_rounds": 3, "smoke": "maybe"}
    with pytest.raises(st.ReportInputError, match=r"run.design.smoke: .*spec_ab_smoke"):
        jd.judge(run, n_boot=100)


def test_a_run_whose_baseline_start_failed_recommends_nothing_in_every_section():
    """Issue 49, item 6: one baseline start failed (round 3 of 4), the drafter still wins on the three others; the
    confirmatory section, the recommendation section, the summary lines, report.json's history and the fleet report
    all say the same: no recommendation from partial baseline data."""
    from ansible_collections.llmfleet.specdec.plugins.plugin_utils.report import _fleet

    start = {0: 1.0, 1: 1.03, 2: 0.98, 3: 1.01}
    run = make_run({"baseline": {"fail_rounds": {2}, "start": {0: 1.0, 1: 0.99, 2: 1.0, 3: 1.02}},
                    "d": dict(DRAFTER, speedup=1.8, start=start)}, rounds=4, mix={"prose": 1.0})
    run["design"] = {"max_rounds": 4, "sequential": True}
    judged = jd.judge(run, n_boot=100)
    conf = judged["confirmatory"]
    assert conf["verdicts"]["d"]["verdict"] == "WIN" and conf["verdicts"]["d"]["practical"] is True
    assert conf["recommendation"] is None and "partial baseline data" in conf["recommendation_why"]
    assert judged["recommendation"]["config"] is None
    assert judged["recommendation"]["reason"] == conf["recommendation_why"]
    doc = rp.build_document(run, judged, {})
    assert doc["confirmatory"]["recommendation"] is None
    md = rp.markdown(doc)
    assert "**Recommendation: d**" not in md and "Recommended: d" not in md
    assert md.count("no recommendation from partial baseline data") >= 2  # the confirmatory and recommendation sections
    assert "recommendation: none (the baseline" in "\n".join(rp.summary_lines(doc))
    assert rp.history_record(doc)["recommendation"] is None
    assert rp.history_record(doc)["confirmatory"]["recommendation"] is None
    assert _fleet.host_summary(doc["host"], doc)["recommendation"] is None


def test_the_restarts_line_carries_the_power_by_the_verdicts_own_rule():
    import random

    rng = random.Random(3)
    table = {n: {r: rng.gauss(0.0, 0.08) for r in range(5)} for n in ("baseline", "a", "b", "c", "d")}
    judged = {"configs": {n: {"entries_ok": 5} for n in table}}
    design = {"alpha": 0.05, "min_speedup": 1.2, "max_rounds": 5, "sequential": True, "win_margin": 0.02}
    out = _confirm.restarts(judged, table, "baseline", ["a", "b", "c", "d"], design)
    fit = _confirm._design.fit_blocks(table, "baseline")
    spreads = _confirm.own_spreads(fit, "baseline", ["a", "b", "c", "d"])
    assert spreads is not None and spreads[0] == fit.spread["baseline"]
    assert out["power"] == _confirm._design.sequential_power(fit.s, 4, 5, 5, spreads=spreads)
    assert out["power_recommend"] == _confirm._design.sequential_power(fit.s, 4, 5, 5, spreads=spreads, win_margin=0.02)
    assert out["power_recommend"] < out["power"] < _confirm._design.sequential_power(fit.s, 4, 5, 5)
    assert out["used"] == 25 and out["fixed_design"] == 5 * out["fixed_rounds"]


def test_the_spread_warning_names_the_noisy_config_and_is_one_test_per_run():
    """Issue 49, item 3: one config 5x noisier among nine is named; equal noise that the old warning cried wolf on
    is quiet.
    (How often it fires and names: benchmarks/calibration.py's unequal-noise table, not a timed test.)"""
    import random

    rng = random.Random(0)
    names = ["baseline", *(f"c{i}" for i in range(8))]
    table = {n: {r: rng.gauss(0.0, 0.25 if n == "c3" else 0.05) for r in range(5)} for n in names}
    warning = _confirm.noise_by_config(table, "baseline")["spread_warning"]
    assert warning.startswith("unequal noise: c3's spread between starts")
    assert "at most 5 % of runs" in warning
    name, own, others, ratio = _confirm.noisier_config(table, "baseline")
    assert name == "c3" and own > 3 * others and ratio == pytest.approx((own / others) ** 2)
    # equal noise, 4 candidates, 4 rounds: in these seeded runs one config's spread read well apart from the
    # others' by chance, and one F test per config at 1 % warned (about c0, c2, c1); one test per run does not
    for seed in (0, 2, 12):
        rng = random.Random(seed)
        table = {n: {r: rng.gauss(0.0, 0.05) for r in range(4)} for n in names[:5]}
        assert "spread_warning" not in _confirm.noise_by_config(table, "baseline"), seed
    # the critical value is for exactly the cells measured: a candidate dropped after round 2 changes it
    full = _confirm._noisier_critical(tuple((0, 1, 2, 3, 4) for _n in names))
    dropped = _confirm._noisier_critical(tuple((0, 1) if i == 1 else (0, 1, 2, 3, 4) for i in range(len(names))))
    assert full is not None and dropped is not None and full != dropped
