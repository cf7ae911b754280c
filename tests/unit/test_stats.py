"""The A/B statistics and the judging of a run, on synthetic runs whose answers are known."""
from __future__ import annotations

import copy
import json
import random
from pathlib import Path

import pytest
from ab_runs import BASE_RATE, greedy_text, make_run, request

from ansible_collections.llmfleet.specdec.plugins.module_utils.bench import _breakeven as be
from ansible_collections.llmfleet.specdec.plugins.module_utils.bench import _quality as q
from ansible_collections.llmfleet.specdec.plugins.module_utils.bench._shapes import SHAPES
from ansible_collections.llmfleet.specdec.plugins.module_utils.common import _stats as st
from ansible_collections.llmfleet.specdec.plugins.module_utils.common._errors import SpecdecError
from ansible_collections.llmfleet.specdec.plugins.plugin_utils.verdicts import _judge as jd
from ansible_collections.llmfleet.specdec.plugins.plugin_utils.verdicts import _predict as pr

DRAFTER = {"chain": ["draft-simple"], "draft": (30, 20), "metrics": True, "drafts_per_request": 10,
           "per_pos": [9, 7, 4], "k": 3}


def drafter(**kw):
    spec = copy.deepcopy(DRAFTER)
    spec.update(kw)
    return spec


# ---------------------------------------------------------------------------------------------
# basic statistics


def test_median_and_quantile():
    assert st.median([3, 1, 2]) == 2
    assert st.median([4, 1, 3, 2]) == 2.5
    assert st.quantile([0.0, 10.0], 0.25) == 2.5
    assert st.quantile([1.0, 2.0, 3.0, 4.0, 5.0], 0.5) == 3.0
    with pytest.raises(st.ReportInputError):
        st.median([])


@pytest.mark.parametrize(("low", "high", "expected"), [
    (1.01, 1.5, "win"), (0.5, 0.99, "loss"), (0.9, 1.1, "no difference"),
    (1.0, 1.2, "no difference"), (0.8, 1.0, "no difference"), (None, None, "no difference")])
def test_verdict(low, high, expected):
    assert st.verdict(low, high) == expected


def _keyed(values_by_round):
    return {(r, i, 0): v for r, vals in enumerate(values_by_round) for i, v in enumerate(vals)}


def test_exactly_twice_as_fast_paired_gives_an_interval_of_exactly_two():
    rng = random.Random(1)
    base = [[40 * (1 + 0.1 * rng.uniform(-1, 1)) for _dummy in range(6)] for _dummy in range(3)]
    cand = [[2 * v for v in row] for row in base]
    ci = st.bootstrap_ratio_ci(_keyed(cand), _keyed(base), n=500, seed=3)
    assert ci.scheme == "paired"
    assert ci.ratio == pytest.approx(2.0)
    # paired draws: every resample's candidate median is exactly twice its baseline median
    assert ci.low == pytest.approx(2.0) and ci.high == pytest.approx(2.0)
    assert st.verdict(ci.low, ci.high) == "win"


def test_twice_as_fast_with_independent_noise_is_a_win_around_two():
    rng = random.Random(7)
    base = [40 * (1 + 0.15 * rng.uniform(-1, 1)) for _dummy in range(30)]
    cand = [80 * (1 + 0.15 * rng.uniform(-1, 1)) for _dummy in range(30)]
    ci = st.bootstrap_ratio_ci(cand, base, n=2000, seed=0)
    assert ci.scheme == "independent"
    assert 1.7 < ci.low < 2.0 < ci.high < 2.3
    assert st.verdict(ci.low, ci.high) == "win"


def test_identical_configs_make_no_difference():
    rng = random.Random(11)
    values = [40 * (1 + 0.1 * rng.uniform(-1, 1)) for _dummy in range(24)]
    other = list(values)
    random.Random(5).shuffle(other)  # same distribution, different order: no pairing, only noise
    ci = st.bootstrap_ratio_ci(other, values, n=2000, seed=0)
    assert ci.ratio == pytest.approx(1.0)
    assert ci.low < 1.0 < ci.high
    assert st.verdict(ci.low, ci.high) == "no difference"


def test_half_as_fast_is_a_loss():
    rng = random.Random(2)
    base = [40 * (1 + 0.1 * rng.uniform(-1, 1)) for _dummy in range(20)]
    cand = [20 * (1 + 0.1 * rng.uniform(-1, 1)) for _dummy in range(20)]
    ci = st.bootstrap_ratio_ci(cand, base, seed=0)
    assert ci.high < 1.0
    assert st.verdict(ci.low, ci.high) == "loss"


def test_bootstrap_is_deterministic_for_a_seed_and_moves_with_it():
    rng = random.Random(3)
    base = [40 * (1 + 0.2 * rng.uniform(-1, 1)) for _dummy in range(15)]
    cand = [50 * (1 + 0.2 * rng.uniform(-1, 1)) for _dummy in range(15)]
    a = st.bootstrap_ratio_ci(cand, base, n=1000, seed=42)
    b = st.bootstrap_ratio_ci(cand, base, n=1000, seed=42)
    c = st.bootstrap_ratio_ci(cand, base, n=1000, seed=43)
    assert a == b
    assert (a.low, a.high) != (c.low, c.high)
    assert a.ratio == c.ratio  # the point estimate never depends on the draws


def test_strata_pair_only_where_both_sides_have_the_same_requests():
    base = {(0, 0, 0): 40.0, (0, 1, 0): 41.0, (1, 0, 0): 39.0, (1, 1, 0): 40.0}
    cand = {(0, 0, 0): 60.0, (0, 1, 0): 61.0, (1, 0, 0): 59.0}  # round 1 lost a request
    assert st.bootstrap_ratio_ci(cand, base, n=200).scheme == "mixed"


def test_bootstrap_rejects_bad_input():
    with pytest.raises(st.ReportInputError, match="candidate"):
        st.bootstrap_ratio_ci([], [1.0, 2.0])
    with pytest.raises(st.ReportInputError, match="finite number"):
        st.bootstrap_ratio_ci([1.0, float("nan")], [1.0, 2.0])
    with pytest.raises(st.ReportInputError, match="resamples"):
        st.bootstrap_ratio_ci([1.0], [1.0], n=10)
    assert issubclass(st.ReportInputError, SpecdecError)


def test_median_ci_brackets_the_median():
    med, low, high = st.bootstrap_median_ci([38.0, 39.0, 40.0, 41.0, 42.0, 40.5, 39.5], seed=1)
    assert med == 40.0
    assert low <= med <= high
    assert low >= 38.0 and high <= 42.0


def test_mix_rate_is_the_time_weighted_harmonic_mean():
    # half the tokens at 10 tok/s, half at 30: 0.05 + 0.0167 s per token -> 15 tok/s, not 20
    assert st.mix_rate({"a": 10.0, "b": 30.0}, {"a": 0.5, "b": 0.5}) == pytest.approx(15.0)
    assert st.mix_rate({"a": 10.0, "b": 30.0}, {"a": 1.0, "b": 0.0}) == pytest.approx(10.0)


def test_normalize_mix():
    assert st.normalize_mix({"prose": 3, "echo": 1, "identity": 0}) == {"prose": 0.75, "echo": 0.25}
    with pytest.raises(st.ReportInputError, match=r"mix\.echo"):
        st.normalize_mix({"prose": 1, "echo": -1})
    with pytest.raises(st.ReportInputError, match="every weight is 0"):
        st.normalize_mix({"prose": 0})
    with pytest.raises(st.ReportInputError, match="mix"):
        st.normalize_mix(["prose"])


# ---------------------------------------------------------------------------------------------
# counters and texts


def test_acceptance_and_mean_accepted_length_from_metrics_and_from_requests():
    with_metrics = [request("prose", 0, 0, 40.0, draft_n=30, accepted=20,
                            metrics={"drafts": 10, "draft_tokens": 30, "accepted_tokens": 20,
                                     "accepted_per_pos": [9, 7, 4]})] * 2
    assert jd.acceptance(with_metrics) == pytest.approx(20 / 30)
    value, source = jd.mean_accepted_length(with_metrics)
    assert value == pytest.approx(3.0) and source.startswith("metrics")
    without = [request("prose", 0, 0, 40.0, draft_n=30, accepted=20, predicted_n=64)]
    value, source = jd.mean_accepted_length(without)
    assert value == pytest.approx(64 / 44) and source.startswith("requests")
    assert jd.acceptance([request("prose", 0, 0, 40.0)]) is None
    assert jd.acceptance_by_position(r["metrics_delta"] for r in with_metrics) == pytest.approx([0.9, 0.7, 0.4])
    assert jd.acceptance_by_position([None, {"drafts": 0, "accepted_per_pos": []}]) == []


def test_first_divergence():
    assert q.first_divergence("same text", "same text") is None
    d = q.first_divergence("The cat sat on the mat.", "The cat sat in the mat.")
    assert d["position"] == 12
    assert d["baseline"].endswith("on the mat.") and d["candidate"].endswith("in the mat.")
    d = q.first_divergence("abcdef", "abc")  # a truncated answer diverges where it stops
    assert d["position"] == 3 and d["candidate_len"] == 3
    long_a = "x" * 100 + "A" + "y" * 100
    long_b = "x" * 100 + "B" + "y" * 100
    d = q.first_divergence(long_a, long_b, context=10)
    assert d["position"] == 100 and d["context_start"] == 90
    assert d["baseline"] == "x" * 10 + "A" + "y" * 9


def test_solve_p_inverts_expected_accepted():
    for k in (1, 3, 7):
        for p in (0.1, 0.45, 0.8):
            assert pr.solve_p(be.expected_accepted(p, k), k) == pytest.approx(p, abs=1e-9)
    assert pr.solve_p(1.0, 3) == 0.0
    assert pr.solve_p(9.0, 3) == 1.0


# ---------------------------------------------------------------------------------------------
# judging a run


def test_twice_as_fast_drafter_wins_every_shape_with_an_interval_at_two():
    j = jd.judge(make_run({"baseline": {}, "draft-n3": drafter(speedup=2.0)}), n_boot=300)
    c = j["configs"]["draft-n3"]
    assert c["status"] == "OK" and c["lossless"] is True and c["engaged"] is True
    for shape in ("prose", "echo", "structured", "identity"):
        row = c["shapes"][shape]
        assert row["speedup"] == pytest.approx(2.0)
        assert row["ci_low"] == pytest.approx(2.0) and row["ci_high"] == pytest.approx(2.0)
        assert row["ci_scheme"].startswith("block design over rounds, Dunnett c") and row["ci_scheme"].endswith("df 2")
        assert row["n"] == "3x4" and row["exploratory"] is True
        assert row["verdict"] == "WIN"
        assert row["median_tok_s"] == pytest.approx(2 * BASE_RATE[shape])
        assert row["acceptance"] == pytest.approx(20 / 30)
        assert row["mean_accepted_len"] == pytest.approx(3.0)
        assert row["n_requests"] == 3 * 2 * 2
    assert c["acceptance_by_position"] == pytest.approx([0.9, 0.7, 0.4])
    assert j["configs"]["baseline"]["status"] == "BASELINE"
    # no mix declared: the confirmatory endpoint weighs the measured shapes equally
    assert j["confirmatory"]["weights"] == {s: 0.25 for s in ("prose", "echo", "structured", "identity")}
    assert j["confirmatory"]["verdicts"]["draft-n3"]["verdict"] == "WIN"
    assert j["recommendation"]["config"] == "draft-n3"


def test_per_shape_verdicts_differ_by_shape():
    j = jd.judge(make_run({"baseline": {}, "d": drafter(speedup={"prose": 1.5, "echo": 1.0, "identity": 0.7,
                                                                 "structured": 1.0})}), n_boot=300)
    verdicts = {s: r["verdict"] for s, r in j["configs"]["d"]["shapes"].items()}
    # exact synthetic data (no noise at all): a ratio of exactly 1 is EQUIVALENT
    assert verdicts == {"prose": "WIN", "echo": "EQUIVALENT", "structured": "EQUIVALENT", "identity": "LOSS"}


def test_diverging_text_is_invalid_with_the_first_position():
    def text(shape, prompt, rnd, rep):
        if shape == "echo" and prompt == 1 and rnd == 2 and rep == 1:
            good = greedy_text(shape, prompt)
            return good[:17] + "#" + good[18:]
        return None

    j = jd.judge(make_run({"baseline": {}, "fast-but-wrong": drafter(speedup=3.0, text=text)}), n_boot=200)
    c = j["configs"]["fast-but-wrong"]
    assert c["status"] == "INVALID"
    assert c["lossless"] is False
    d = c["first_divergence"]
    assert (d["shape"], d["prompt_index"], d["round"], d["repeat"], d["position"]) == ("echo", 1, 2, 1, 17)
    assert d["candidate"][17] == "#" and d["baseline"][17] == greedy_text("echo", 1)[17]
    assert c["shapes"]["echo"]["lossless"] is False
    assert c["shapes"]["prose"]["lossless"] is True
    # every shape's verdict says invalid, however fast: a correctness bug is never a winner
    assert {r["verdict"] for r in c["shapes"].values()} == {"invalid"}
    assert c["shapes"]["prose"]["ci_verdict"] == "WIN"
    assert "char 17" in c["problems"][0]


def test_empty_answers_make_the_comparison_vacuous():
    j = jd.judge(make_run({"baseline": {}, "mute": drafter(text=lambda *a: "")}), n_boot=200)
    c = j["configs"]["mute"]
    assert c["lossless"] == "vacuous"
    assert c["status"] != "INVALID"
    assert c["texts_compared"] == 0 and c["texts_vacuous"] == 48
    assert any("vacuous" in w and "mute" in w for w in j["warnings"])
    # some empty answers only: the rest is compared, the empty ones are counted as vacuous
    j = jd.judge(make_run({"baseline": {}, "some": drafter(text=lambda s, p, r, rep: "" if s == "prose" else None)}),
                 n_boot=200)
    c = j["configs"]["some"]
    assert c["lossless"] is True and c["texts_vacuous"] == 12
    assert c["shapes"]["prose"]["lossless"] == "vacuous"
    assert c["shapes"]["echo"]["lossless"] is True


def test_empty_baseline_answers_are_vacuous_too():
    run = make_run({"baseline": {"text": lambda s, p, r, rep: "" if s == "identity" else None}, "d": drafter()})
    j = jd.judge(run, n_boot=200)
    assert j["configs"]["d"]["shapes"]["identity"]["lossless"] == "vacuous"


def test_chain_without_drafts_is_not_engaged_and_empty_chain_is_the_negative_control():
    run = make_run({"baseline": {}, "flags-only": {"chain": ["draft-simple"], "speedup": 1.0},
                    "control": {"chain": []}})
    j = jd.judge(run, n_boot=200)
    off = j["configs"]["flags-only"]
    assert off["status"] == "NOT ENGAGED" and off["engaged"] is False
    assert {r["verdict"] for r in off["shapes"].values()} == {"not engaged"}
    ctl = j["configs"]["control"]
    assert ctl["status"] == "NEGATIVE CONTROL" and ctl["role"] == "control"
    assert {r["verdict"] for r in ctl["shapes"].values()} == {"EQUIVALENT"}
    assert not any("negative control" in w for w in j["warnings"])


def test_negative_control_that_moves_is_called_out():
    j = jd.judge(make_run({"baseline": {}, "control": {"speedup": 1.3}}), n_boot=200)
    assert j["configs"]["control"]["status"] == "NEGATIVE CONTROL"
    assert any("negative control 'control' differs" in w for w in j["warnings"])


def test_ngram_must_draft_on_echo_only_and_a_drafter_everywhere():
    run = make_run({
        "baseline": {},
        "ngram": {"chain": ["ngram-mod"], "draft": {"echo": (40, 35)}, "speedup": {"echo": 1.8}},
        "ngram-dead": {"chain": ["ngram-mod"], "draft": {"prose": (5, 1)}},
        "drafter-gap": drafter(draft={"prose": (30, 20), "echo": (30, 20), "structured": (30, 20)}),
    })
    j = jd.judge(run, n_boot=200)
    ngram = j["configs"]["ngram"]
    assert ngram["status"] == "OK"
    assert ngram["shapes"]["prose"]["engaged"] is False and ngram["shapes"]["prose"]["verdict"] == "EQUIVALENT"
    assert ngram["shapes"]["echo"]["verdict"] == "WIN"
    # drafting on prose but never on echo, where an n-gram lookup must: not engaged
    assert j["configs"]["ngram-dead"]["status"] == "NOT ENGAGED"
    gap = j["configs"]["drafter-gap"]
    assert gap["status"] == "OK"
    assert gap["shapes"]["identity"]["verdict"] == "not engaged"
    assert any("identity" in p for p in gap["problems"])


def test_drafts_with_an_empty_chain_make_a_config_speculative():
    j = jd.judge(make_run({"baseline": {}, "hidden-head": {"chain": [], "draft": (10, 5), "speedup": 1.2}}), n_boot=200)
    c = j["configs"]["hidden-head"]
    assert c["speculative"] is True and c["status"] == "OK"
    assert "chain is empty" in c["problems"][0]


def test_failed_and_partial_entries_are_kept_and_never_win():
    run = make_run({
        "baseline": {},
        "never-healthy": drafter(speedup=2.0, fail_rounds={0, 1, 2}),
        "crashed": drafter(speedup=2.0, partial_rounds={1}),
        "one-round-down": drafter(speedup=2.0, fail_rounds={2}),
    }, mix={"prose": 1.0})
    j = jd.judge(run, n_boot=200)
    dead = j["configs"]["never-healthy"]
    assert dead["status"] == "FAILED"
    assert dead["entries_failed"] == 3 and dead["entries_ok"] == 0
    assert all("status 134" in p for p in dead["problems"])
    assert {r["verdict"] for r in dead["shapes"].values()} == {"failed"}
    crashed = j["configs"]["crashed"]
    assert crashed["status"] == "INCOMPLETE"
    # round 1's bench died after 8 of its 16 requests (prose and echo): kept, so 3 rounds of prose, 2 of identity
    assert "kept the 8 requests" in crashed["problems"][0]
    assert crashed["shapes"]["prose"]["n_requests"] == 12
    assert crashed["shapes"]["identity"]["n_requests"] == 8
    assert crashed["shapes"]["prose"]["ci_verdict"] == "WIN"
    assert crashed["shapes"]["prose"]["verdict"] == "incomplete"
    assert j["configs"]["one-round-down"]["status"] == "INCOMPLETE"
    rec = j["recommendation"]
    assert rec["keep_baseline"] is True and rec["config"] == "baseline"
    assert {e["config"] for e in rec["excluded"]} == {"never-healthy", "crashed", "one-round-down"}


def test_a_run_stopped_before_a_config_reports_it_failed_and_missing_rounds_incomplete():
    run = make_run({"baseline": {}, "a": drafter(speedup=1.5), "b": drafter(speedup=1.5)})
    run["entries"] = [e for e in run["entries"] if not (e["round"] == 2 and e["config"] == "a")]
    run["configs"].append({"name": "c", "chain": ["draft-simple"], "server_config": {}})
    run["error"] = "controller interrupted"
    j = jd.judge(run, n_boot=200)
    assert j["configs"]["a"]["status"] == "INCOMPLETE"
    assert "no entry for round(s) 2" in j["configs"]["a"]["problems"][0]
    assert j["configs"]["b"]["status"] == "OK"
    assert j["configs"]["c"]["status"] == "FAILED"
    assert j["configs"]["c"]["problems"] == ["no entry for round(s) 0, 1, 2: the run stopped before it"]
    assert j["run_error"] == "controller interrupted"


def test_a_failed_baseline_judges_nothing():
    run = make_run({"baseline": {"fail_rounds": {0, 1, 2}}, "d": drafter(speedup=2.0)}, mix={"prose": 1})
    j = jd.judge(run, n_boot=200)
    assert j["configs"]["baseline"]["status"] == "FAILED"
    assert {r["verdict"] for r in j["configs"]["d"]["shapes"].values()} == {"no baseline"}
    assert j["configs"]["d"]["lossless"] == "vacuous"
    assert "nothing can be compared" in j["warnings"][0]
    assert j["recommendation"]["config"] is None


def test_an_incomplete_baseline_withholds_the_recommendation():
    run = make_run({"baseline": {"partial_rounds": {0}}, "d": drafter(speedup=2.0)}, mix={"prose": 1})
    j = jd.judge(run, n_boot=200)
    assert j["configs"]["baseline"]["status"] == "BASELINE"
    assert j["recommendation"]["config"] is None
    assert "partial baseline" in j["recommendation"]["reason"]
    assert "incomplete" in j["warnings"][0]


def test_a_nondeterministic_baseline_is_called_out():
    run = make_run({"baseline": {"text": lambda s, p, r, rep: "drift" if (s, p, r) == ("prose", 0, 1) else None},
                    "d": drafter()})
    j = jd.judge(run, n_boot=200)
    assert any("not deterministic on prose prompt 0" in w for w in j["warnings"])


def test_one_round_gives_no_verdict_however_many_requests():
    # one round is one server start per config: nothing measures the start-to-start spread
    run = make_run({"baseline": {}, "d": drafter(speedup=2.0)}, rounds=1, prompts=4, repeats=3)
    j = jd.judge(run, n_boot=200)
    row = j["configs"]["d"]["shapes"]["prose"]
    assert row["n_requests"] == 12 and row["n"] == "1x12"
    assert row["verdict"] == "INCONCLUSIVE" and "too few rounds" in row["why"]
    assert row["ci_low"] is None and row["speedup"] == pytest.approx(2.0)
    assert j["confirmatory"]["verdicts"]["d"]["verdict"] == "INCONCLUSIVE"
    assert j["recommendation"]["keep_baseline"] is True
    # the old request-level bootstrap called it from that one start
    old = jd.judge(run, n_boot=200, method="request-bootstrap")["configs"]["d"]["shapes"]["prose"]
    assert old["verdict"] == "win"


def test_one_request_per_round_gives_no_verdict():
    run = make_run({"baseline": {}, "d": drafter(speedup=2.0)}, rounds=4, prompts=1, repeats=1)
    row = jd.judge(run, n_boot=200)["configs"]["d"]["shapes"]["prose"]
    assert row["n"] == "4x1" and row["verdict"] == "INCONCLUSIVE" and "too few requests" in row["why"]


def test_mix_recommendation_excludes_invalid_and_picks_the_fastest_winner():
    wrong = drafter(speedup=3.0, text=lambda s, p, r, rep: "nope" if (s, p, r, rep) == ("prose", 0, 0, 0) else None)
    run = make_run({
        "baseline": {},
        "wrong": wrong,
        "ok-fast": drafter(speedup={"prose": 1.6, "echo": 1.2, "structured": 1.0, "identity": 1.0}),
        "ok-slow": drafter(speedup={"prose": 1.2, "echo": 1.1, "structured": 1.0, "identity": 1.0}),
        "flags-only": {"chain": ["draft-simple"], "speedup": 5.0},
        "control": {"speedup": 1.0},
    }, mix={"prose": 3, "echo": 1})
    j = jd.judge(run, n_boot=300)
    rec = j["recommendation"]
    assert rec["mix"] == {"prose": 0.75, "echo": 0.25}
    assert rec["config"] == "ok-fast" and rec["keep_baseline"] is False
    expected = (0.75 / 40 + 0.25 / 42) / (0.75 / 64 + 0.25 / 50.4)
    assert rec["speedup"] == pytest.approx(expected)
    assert rec["ci_low"] > 1.0
    assert [c["config"] for c in rec["candidates"]] == ["ok-fast", "ok-slow"]
    excluded = {e["config"]: e["status"] for e in rec["excluded"]}
    assert excluded == {"wrong": "INVALID", "flags-only": "NOT ENGAGED", "control": "NEGATIVE CONTROL"}


def test_mix_with_only_losers_keeps_the_baseline_and_unknown_shapes_give_none():
    run = make_run({"baseline": {}, "slow": drafter(speedup=0.8)}, mix={"prose": 1})
    rec = jd.judge(run, n_boot=200)["recommendation"]
    assert rec["keep_baseline"] is True and rec["config"] == "baseline"
    assert rec["candidates"][0]["verdict"] == "LOSS"
    run = make_run({"baseline": {}, "d": drafter(speedup=2.0)}, mix={"chat": 1})
    rec = jd.judge(run, n_boot=200)["recommendation"]
    assert rec["config"] is None and "chat" in rec["reason"]


def test_prediction_with_a_given_d_s_uses_the_breakeven_arithmetic():
    run = make_run({"baseline": {}, "d": drafter(speedup=1.5)})
    j = jd.judge(run, d_s_ms=3.0, n_boot=200)
    rows = {p["shape"]: p for p in j["prediction"]}
    p = rows["prose"]
    assert p["k"] == 3 and p["k_source"].startswith("given")
    assert p["draft_passes"] == 3 and p["drafter"] == "draft-simple"
    assert be.expected_accepted(p["p"], 3) == pytest.approx(3.0)  # measured mean accepted length
    assert p["t_s_ms"] == pytest.approx(1000 / 40)
    assert p["predicted_tok_s"] == pytest.approx(be.rate(p["p"], 3, 3.0, 25.0))
    assert p["predicted_speedup"] == pytest.approx(p["predicted_tok_s"] / 40)
    assert p["measured_speedup"] == pytest.approx(1.5)
    assert j["configs"]["d"]["status"] == "OK"


def test_prediction_without_d_s_reports_the_d_s_the_measurement_implies():
    run = make_run({"baseline": {}, "d": drafter(speedup=1.5)})
    j = jd.judge(run, d_s_ms={"other": 5.0}, n_boot=200)
    p = next(r for r in j["prediction"] if r["shape"] == "prose")
    assert p["predicted_tok_s"] is None
    assert be.rate(p["p"], p["k"], p["implied_d_s_ms"], p["t_s_ms"]) == pytest.approx(p["measured_tok_s"])


def test_prediction_k_comes_from_the_server_config_then_the_counters():
    spec = drafter(speedup=1.2)
    del spec["k"]
    spec["server_config"] = {"LLAMA_ARG_SPEC_DRAFT_N_MAX": "5"}
    j = jd.judge(make_run({"baseline": {}, "d": spec}), n_boot=200)
    assert j["prediction"][0]["k"] == 5 and "LLAMA_ARG_SPEC_DRAFT_N_MAX" in j["prediction"][0]["k_source"]
    spec = drafter(speedup=1.2)
    del spec["k"]
    j = jd.judge(make_run({"baseline": {}, "d": spec}), n_boot=200)
    assert j["prediction"][0]["k"] == 3 and j["prediction"][0]["k_source"].startswith("measured")


def test_judge_is_deterministic():
    run = make_run({"baseline": {"noise": 0.05}, "d": drafter(speedup=1.3, noise=0.05)}, mix={"prose": 1})
    assert jd.judge(run, n_boot=300) == jd.judge(copy.deepcopy(run), n_boot=300)


@pytest.mark.parametrize(("mutate", "message"), [
    (lambda r: r.pop("baseline"), "run.baseline"),
    (lambda r: r.update(baseline="nope"), "'nope' is not one of the configs"),
    (lambda r: r.update(entries={}), "run.entries"),
    (lambda r: r["entries"][1].update(round="x"), r"run.entries\[1\].round"),
    (lambda r: r["entries"][0]["bench"].update(schema="other/1"), r"run.entries\[0\].bench.schema"),
    (lambda r: r["entries"][0]["bench"]["requests"][2].update(draft_n=-1), r"requests\[2\].draft_n"),
    (lambda r: r["entries"][0]["bench"]["requests"][0].update(predicted_per_second="fast"), "predicted_per_second"),
    (lambda r: r["configs"][1].update(chain="draft-simple"), r"run.configs\[1\].chain"),
    (lambda r: r.update(mix={"prose": "lots"}), r"mix\.prose"),
])
def test_malformed_runs_are_refused_naming_the_field(mutate, message):
    run = make_run({"baseline": {}, "d": drafter()}, rounds=1)
    mutate(run)
    with pytest.raises(st.ReportInputError, match=message):
        jd.judge(run, n_boot=100)


def test_configs_may_be_left_to_the_entries():
    run = make_run({"baseline": {}, "d": drafter(speedup=2.0)})
    del run["configs"]
    j = jd.judge(run, n_boot=200)
    assert j["order"] == ["baseline", "d"]
    assert j["configs"]["d"]["chain"] is None
    assert j["configs"]["d"]["status"] == "OK"  # it drafted, so it speculates


def test_vllm_requests_count_drafts_from_their_metrics_delta():
    # vLLM replies have no timings: draft_n / draft_n_accepted are 0 and the counters live in metrics_delta
    run = make_run({"baseline": {}, "eagle": drafter(speedup=1.4, draft=(0, 0), metrics=True, drafts_per_request=10)})
    for e in run["entries"]:
        e["bench"]["notes"] = ["vLLM replies carry no timings"]
        for r in e["bench"]["requests"]:
            r["rate_source"] = "usage.completion_tokens / wall_s (includes prefill)"
            if e["config"] == "eagle":
                r["metrics_delta"].update(draft_tokens=30, accepted_tokens=20)
    j = jd.judge(run, n_boot=200)
    c = j["configs"]["eagle"]
    assert c["status"] == "OK" and c["engaged"] is True
    assert c["shapes"]["prose"]["acceptance"] == pytest.approx(20 / 30)
    assert c["shapes"]["prose"]["draft_n"] == 12 * 30
    assert c["notes"][0] == "vLLM replies carry no timings"
    assert "include prefill" in c["notes"][1]


def test_a_recorded_llamacpp_run_is_judged_from_spec_bench_output_as_it_is():
    run = json.loads((Path(__file__).parent / "fixtures" / "ab" / "llamacpp_run.json").read_text())
    j = jd.judge(run, n_boot=300)
    assert j["shapes"] == ["prose", "echo", "structured", "identity"] and j["rounds"] == [0, 1]
    assert {n: c["status"] for n, c in j["configs"].items()} == {
        "baseline": "BASELINE", "draft-n3": "OK", "draft-low-n7": "OK", "ngram-mod": "OK"}
    for name in ("draft-n3", "draft-low-n7", "ngram-mod"):
        c = j["configs"][name]
        # greedy speculation on the real server is byte-identical to plain decoding, and every text was compared
        assert c["lossless"] is True and c["texts_vacuous"] == 0 and c["texts_compared"] == 32
        assert c["engaged"] is True
        for row in c["shapes"].values():
            assert row["mean_accepted_len_source"].startswith("metrics")
            assert row["n_requests"] == 8
    n3 = j["configs"]["draft-n3"]
    assert len(n3["acceptance_by_position"]) == 3
    assert n3["acceptance_by_position"][0] > n3["acceptance_by_position"][2]
    # the low-acceptance draft at depth 7: the server exports every position, the deep ones at 0
    low = j["configs"]["draft-low-n7"]["acceptance_by_position"]
    assert len(low) == 7 and low[-1] == 0.0 and low[0] > 0.3
    # two rounds: the baseline's own spread has one degree of freedom, and each comparison's critical value is
    # taken at Welch's df of it and the candidates' pooled spread (under 3), so only a loss both starts agree on
    # is called: the slow deep draft at about 0.2x in both starts on structured and echo; nothing is called where
    # the two server starts disagree (draft-n3 on echo: 0.40x in one start, 0.79x in the other)
    low_rows = j["configs"]["draft-low-n7"]["shapes"]
    assert low_rows["structured"]["verdict"] == "LOSS" and low_rows["structured"]["n"] == "2x4"
    assert low_rows["structured"]["ci_high"] < 1.0 and low_rows["echo"]["ci_high"] < 1.0
    assert all(r["verdict"] in ("LOSS", "INCONCLUSIVE", "EQUIVALENT") for r in low_rows.values())
    n3_echo = n3["shapes"]["echo"]
    assert n3_echo["verdict"] == "INCONCLUSIVE" and n3_echo["ci_low"] < 1.0 < n3_echo["ci_high"]
    # per request, the reply's draft counters and the /metrics delta agree on the real server
    for e in run["entries"]:
        for r in e["bench"]["requests"]:
            d = r["metrics_delta"]
            assert (r["draft_n"], r["draft_n_accepted"]) == (d["draft_tokens"], d["accepted_tokens"])
    assert {p["k"] for p in j["prediction"] if p["config"] == "draft-n3"} == {3}


def test_texts_are_compared_prompt_by_prompt_across_rounds() -> None:
    """Rounds may send different prompts under the same index (the A/B role seeds each round): a
    candidate's round-1 text is compared with the baseline's round-1 answer to that same prompt."""
    from ansible_collections.llmfleet.specdec.plugins.module_utils.bench import _quality
    from ansible_collections.llmfleet.specdec.plugins.plugin_utils.verdicts import _judge

    def req(rnd: int, text: str) -> dict:
        return {"shape": "echo", "prompt_index": 0, "repeat": 0, "round": rnd, "text": text,
                "prompt_sha256": f"prompt-of-round-{rnd}"}

    ref, warnings = _quality._reference_texts([req(0, "alpha"), req(1, "beta")])
    assert warnings == []  # two prompts, not a non-deterministic baseline
    same = _judge._compare_texts([req(0, "alpha"), req(1, "beta")], ref)
    assert same["lossless"] is True and same["differ"] == 0
    wrong = _judge._compare_texts([req(1, "alpha")], ref)
    assert wrong["lossless"] is False and wrong["first_divergence"]["round"] == 1


def test_judged_shapes_follow_the_one_shape_order_then_an_operators_own():
    """Shape names have one home (_shapes.SHAPES): the judge lists the built-in shapes in that order whatever
    order the bench recorded them in, and an operator's own shape after them."""
    run = make_run({"baseline": {}, "draft": {"speedup": 1.2}}, rounds=2, shapes=tuple(reversed(SHAPES)))
    for entry in run["entries"]:  # an operator's shape, recorded first, in place of identity
        bench = entry["bench"]
        bench["shapes"] = {("tickets" if s == "identity" else s): v for s, v in (bench.get("shapes") or {}).items()}
        for r in bench["requests"]:
            r["shape"] = "tickets" if r["shape"] == "identity" else r["shape"]
    assert jd.judge(run)["shapes"] == [*SHAPES[:-1], "tickets"]
