"""The calibrated verdicts: rounds (server starts) are the replicates, not requests."""
from __future__ import annotations

import math
import random

import pytest
from ab_runs import make_run

from ansible_collections.llmfleet.specdec.plugins.module_utils.common import _stats as st
from ansible_collections.llmfleet.specdec.plugins.plugin_utils.verdicts import _design as ds
from ansible_collections.llmfleet.specdec.plugins.plugin_utils.verdicts import _judge as jd

DRAFTER = {"chain": ["draft-simple"], "draft": (30, 20), "metrics": True, "drafts_per_request": 10,
           "per_pos": [9, 7, 4], "k": 3}


@pytest.mark.parametrize(("df", "q975"), [(1, 12.7062), (2, 4.3027), (3, 3.1824), (4, 2.7764), (9, 2.2622),
                                          (30, 2.0423)])
def test_t_quantiles_match_the_tables(df, q975):
    assert st.t_quantile(0.975, df) == pytest.approx(q975, abs=1e-4)
    assert st.t_quantile(0.025, df) == pytest.approx(-q975, abs=1e-4)
    assert st.t_cdf(q975, df) == pytest.approx(0.975, abs=1e-5)


def test_round_ratio_ci_is_the_t_interval_on_paired_log_ratios():
    # two requests per round and side; candidate/baseline per round: 1.1, 1.2, 1.3 (geometric means)
    base = {(r, p, 0): 40.0 * (1 + 0.1 * p) for r in range(3) for p in range(2)}
    cand = {(r, p, 0): v * (1.1 + 0.1 * r) for (r, p, _dummy), v in base.items()}
    ci = st.round_ratio_ci(cand, base)
    logs = [math.log(1.1), math.log(1.2), math.log(1.3)]
    mean = sum(logs) / 3
    sd = math.sqrt(sum((x - mean) ** 2 for x in logs) / 2)
    half = 4.302653 * sd / math.sqrt(3)
    assert ci.ratio == pytest.approx(math.exp(mean))
    assert ci.low == pytest.approx(math.exp(mean - half), rel=1e-5)
    assert ci.high == pytest.approx(math.exp(mean + half), rel=1e-5)
    assert (ci.rounds, ci.requests, ci.df, ci.n) == (3, 2, 2, "3x2")


def test_rounds_only_on_one_side_are_not_paired():
    base = {(r, 0, 0): 40.0 for r in range(3)} | {(r, 1, 0): 41.0 for r in range(3)}
    cand = {(r, 0, 0): 60.0 for r in (1, 2, 3)} | {(r, 1, 0): 61.0 for r in (1, 2, 3)}
    ci = st.round_ratio_ci(cand, base)
    assert ci.rounds == 2 and ci.candidate_requests == 4 and ci.baseline_requests == 4


def _aa_run(seed: int, rounds: int = 3) -> dict:
    """An A/A twin: the same config twice, each server start a few percent faster or slower."""
    rng = random.Random(seed)
    start = {name: {r: math.exp(rng.gauss(0.0, 0.05)) for r in range(rounds)} for name in ("baseline", "twin")}
    return make_run({"baseline": {"start": start["baseline"]},
                     "twin": {"start": start["twin"], "server_config": {"SPECDEC_TWIN": "1"}}},
                    rounds=rounds, prompts=2, repeats=2)


def test_an_aa_twin_with_start_to_start_spread_is_rarely_called_where_the_bootstrap_called_it():
    new_runs = old_calls = 0
    shapes = 0
    for seed in range(20):
        run = _aa_run(seed)
        judged = jd.judge(run, n_boot=200)
        old = jd.judge(run, n_boot=200, method="request-bootstrap")["configs"]["twin"]["shapes"]
        shapes += len(old)
        old_calls += sum(r["verdict"] in (st.WIN, st.LOSS) for r in old.values())
        # the start is the replicate: every shape of a run moves with its starts, so count runs
        new_runs += judged["confirmatory"]["verdicts"]["twin"]["verdict"] in (ds.WIN, ds.LOSS)
    # requests inside a start move together: the request bootstrap sees the starts' spread as a speedup
    assert old_calls > shapes // 4
    # a 5 % false WIN and a 5 % false LOSS rate: 2 of these 20 runs (benchmarks/calibration.py counts thousands)
    assert new_runs <= 3


def test_a_real_speedup_still_wins_through_the_start_to_start_spread():
    rng = random.Random(7)
    start = {r: math.exp(rng.gauss(0.0, 0.05)) for r in range(3)}
    run = make_run({"baseline": {}, "d": dict(DRAFTER, speedup=1.8, start=start)}, rounds=3)
    for row in jd.judge(run, n_boot=200)["configs"]["d"]["shapes"].values():
        assert row["verdict"] == ds.WIN and row["ci_low"] > 1.0 and row["n"] == "3x4"


def test_a_sliver_is_equivalent_within_the_margin_and_inconclusive_with_a_tighter_one():
    # a 1 % speedup measured through 1-2 % start-to-start spread: the interval straddles 1, inside 1 +- 5 %
    run = make_run({"baseline": {}, "d": dict(DRAFTER, speedup=1.01, start={0: 1.0, 1: 1.02, 2: 0.995})}, rounds=3)
    row = jd.judge(run, n_boot=200)["configs"]["d"]["shapes"]["prose"]
    assert row["ci_low"] < 1.0 < row["ci_high"] and row["verdict"] == ds.EQUIVALENT
    run["design"] = {"margin": 0.01, "sequential": False}
    row = jd.judge(run, n_boot=200)["configs"]["d"]["shapes"]["prose"]
    assert row["verdict"] == ds.INCONCLUSIVE and row["mde"] > 1.0 and row["noise"] > 0.0
    slow = make_run({"baseline": {}, "d": dict(DRAFTER, speedup=0.9)}, rounds=3)
    assert jd.judge(slow, n_boot=200)["configs"]["d"]["shapes"]["prose"]["verdict"] == ds.LOSS


def test_the_mix_recommendation_uses_the_rounds_and_shows_n():
    rng = random.Random(3)
    start = {r: math.exp(rng.gauss(0.0, 0.05)) for r in range(3)}
    run = make_run({"baseline": {}, "d": dict(DRAFTER, speedup=1.5, start=start),
                    "twin": {"start": {0: 1.08, 1: 0.95, 2: 1.03}, "server_config": {"SPECDEC_TWIN": "1"}}},
                   rounds=3, mix={"prose": 0.5, "echo": 0.5})
    rec = jd.judge(run, n_boot=200)["recommendation"]
    assert rec["config"] == "d" and rec["ci_low"] > 1.0
    assert [(c["config"], c["n"]) for c in rec["candidates"]] == [("d", "3 rounds")]
    # with one round nothing can be recommended: keep the baseline
    one = make_run({"baseline": {}, "d": dict(DRAFTER, speedup=1.5)}, rounds=1, mix={"prose": 1.0})
    rec = jd.judge(one, n_boot=200)["recommendation"]
    assert rec["keep_baseline"] and rec["candidates"][0]["verdict"] == ds.INCONCLUSIVE


def test_judge_refuses_an_unknown_method_or_margin():
    run = make_run({"baseline": {}, "d": dict(DRAFTER)}, rounds=2)
    with pytest.raises(st.ReportInputError, match="method"):
        jd.judge(run, method="vibes")
    with pytest.raises(st.ReportInputError, match="margin"):
        jd.judge(run, margin=-0.1)


def test_the_position_table_shows_only_drafted_positions_and_the_json_keeps_all():
    from ansible_collections.llmfleet.specdec.plugins.plugin_utils.report import _report as rp

    # ngram-mod exports a counter for each of its 64 positions; drafts here were 3 long (30 tokens / 10 drafts)
    per_pos = [9, 7, 4] + [0] * 61
    ngram = {"chain": ["ngram-mod"], "draft": (30, 20), "metrics": True, "drafts_per_request": 10,
             "per_pos": per_pos}
    run = make_run({"baseline": {}, "ngram-mod": ngram}, rounds=2)
    doc = rp.build_document(run, jd.judge(run, n_boot=100))
    c = doc["judged"]["configs"]["ngram-mod"]
    assert len(c["acceptance_by_position"]) == 64 and c["positions_drafted"] == 3
    md = rp.markdown(doc)
    section = md.split("## Acceptance by draft position")[1].split("\n## ")[0]
    assert "| pos 3 |" in section and "pos 4" not in section
    assert "ngram-mod: positions 4-64" in section
    # every verdict carries its n, in the JSON and in the overview
    assert all(v["n"] == "2x4" for v in doc["verdicts"])
    assert "(n 2x4)" in md.split("## Verdicts")[1].split("\n## ")[0]


def test_a_drafter_probe_measures_d_s_for_the_prediction_and_is_never_compared():
    draft = "/opt/specdec/models/draft.gguf"
    run = make_run({
        "baseline": {},
        "d": dict(DRAFTER, speedup=1.5, server_config={"LLAMA_ARG_SPEC_TYPE": "draft-simple",
                                                       "LLAMA_ARG_SPEC_DRAFT_MODEL": draft}),
        # the draft alone: 10x the target's rate, and of course another text
        "draft-alone": {"speedup": 10.0, "server_config": {"LLAMA_ARG_MODEL": draft},
                        "text": lambda shape, p, rnd, rep: f"draft text {shape} {p}"},
    }, rounds=2, mix={"prose": 1.0})
    j = jd.judge(run, d_s_ms=12.0, n_boot=200)
    probe = j["configs"]["draft-alone"]
    assert probe["status"] == jd.DRAFTER_PROBE and probe["probe_for"] == ["d"]
    assert probe["shapes"]["prose"]["verdict"] == "drafter probe" and probe["lossless"] is None
    pred = next(p for p in j["prediction"] if p["config"] == "d" and p["shape"] == "prose")
    assert pred["d_s_ms"] == pytest.approx(1000.0 / probe["shapes"]["prose"]["median_tok_s"])
    assert pred["d_s_source"].startswith("measured: draft-alone") and pred["d_s_given_ms"] == 12.0
    assert pred["t_s_source"].startswith("measured: the baseline on prose")
    rounds = 1000.0 * pred["expected_accepted"] / pred["measured_tok_s"]
    assert pred["implied_verify_steps"] == pytest.approx((rounds - 3 * pred["d_s_ms"]) / pred["t_s_ms"])
    rec = j["recommendation"]
    assert rec["config"] == "d"
    assert any(e["config"] == "draft-alone" and e["status"] == jd.DRAFTER_PROBE for e in rec["excluded"])
    # without a probe the inventory's d_s is used, and the prediction says so
    plain = make_run({"baseline": {}, "d": dict(DRAFTER, speedup=1.5)}, rounds=2)
    pred = jd.judge(plain, d_s_ms=12.0, n_boot=200)["prediction"][0]
    assert pred["d_s_ms"] == 12.0 and pred["d_s_source"].startswith("given (inventory)")
