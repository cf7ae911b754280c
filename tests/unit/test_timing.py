"""The A/B run's time planned from the box (plugin_utils/verdicts/_timing.py, filters ab_timing and ab_dead_man)."""
from __future__ import annotations

import math

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.llmfleet.specdec.plugins.module_utils.bench._endpoint import plan_requests
from ansible_collections.llmfleet.specdec.plugins.plugin_utils.steps._steps_ab import ab_schedule
from ansible_collections.llmfleet.specdec.plugins.plugin_utils.steps._steps_host_state import ab_dead_man
from ansible_collections.llmfleet.specdec.plugins.plugin_utils.steps._steps_timing import (
    ab_busy_counts,
    ab_model_files,
    ab_timing,
    ab_timing_record,
)
from ansible_collections.llmfleet.specdec.plugins.plugin_utils.verdicts import _timing

CONFIGS = [{"name": "baseline", "env": {}},
           {"name": "draft", "env": {"LLAMA_ARG_SPEC_TYPE": "draft-simple", "LLAMA_ARG_SPEC_DRAFT_MODEL": "/m/d.gguf"}},
           {"name": "ngram", "env": {"LLAMA_ARG_SPEC_TYPE": "ngram-mod"}}]
RENDERED = {"baseline": {"env": {"LLAMA_ARG_MODEL": "/m/t.gguf"}},
            "draft": {"env": {"LLAMA_ARG_MODEL": "/m/t.gguf", "LLAMA_ARG_SPEC_DRAFT_MODEL": "/m/d.gguf"}},
            "ngram": {"env": {"LLAMA_ARG_MODEL": "/m/t.gguf"}}}
CHAINS = {"baseline": [], "draft": ["draft-simple"], "ngram": ["ngram-mod"]}
# A 27B-class box: a start of 300 s (20 s of it ExecStartPre), an 8 s stop, 8 tok/s decode, a 16 GB target.
START = {"load_s": 300.0, "pre_s": 20.0, "stop_s": 8.0, "source": "the journal of llama-server.service's last start"}
PROBE = {"predicted_per_second": 8.0, "predicted_n": 32, "prompt_n": 500, "ttft_s": 2.5}
SIZES = {"/m/t.gguf": 16 * 10**9, "/m/d.gguf": 4 * 10**9}
BENCH = {"api": "llamacpp", "shapes": ["prose", "echo", "structured", "identity"], "prompts_per_shape": 2,
         "repeats": 1, "warmup": 1, "sizes": {}, "seed": 0, "concurrency": 1, "load_bursts": 3, "verify_k": [3]}


def plan(**over):
    settings = {"baseline": "baseline", "schedule": ab_schedule(CONFIGS, 3, "baseline", 0), "rendered": RENDERED,
                "chains": CHAINS, "start": START, "probe": PROBE, "sizes": SIZES, "bench": BENCH,
                "health_timeout": "auto", "rollback_after": "auto", "budget_minutes": 0, "max_rounds": 3}
    settings.update(over)
    return ab_timing(CONFIGS, settings)


def test_each_config_gets_its_load_and_its_measurement_from_the_box() -> None:
    p = plan()
    warm, schedule, _measured = plan_requests(0, {}, BENCH["shapes"], 2, 1, 1)
    generated = sum(pr.n_predict for pr in warm) + sum(pr.n_predict for _r, pr in schedule)
    assert p["tokens"]["generated"] == generated
    # the decode alone at 8 tok/s is a floor of the measurement; prompts at the probe's 200 tok/s come on top
    base = p["configs"]["baseline"]
    assert base["measure_s"] >= generated / 8.0
    assert base["load_s"] == 300.0 and base["load_source"] == "production's"
    # the draft model adds its bytes to the weights read: (300 - 20) x 20/16 + 20
    assert p["configs"]["draft"]["load_s"] == pytest.approx(20 + 280 * 1.25, abs=0.1)
    # a non-speculative start also times the verification batches (verify_k): more requests
    assert base["requests"] > p["configs"]["ngram"]["requests"] == len(warm) + len(schedule)
    assert p["configs"]["draft"]["measure_s"] == p["configs"]["ngram"]["measure_s"] < base["measure_s"]
    # 3 rounds x 3 configs and the restore
    assert p["restarts"] == 10 and all(v["slots"] == 3 for v in p["configs"].values())
    slots = sum(3 * v["slot_s"] for v in p["configs"].values())
    assert p["total_s"] == pytest.approx(slots + 8.0 + 300.0, abs=0.5)
    assert p["candidate_s"] == pytest.approx(sum(3 * (p["configs"][n]["slot_s"] - 8.0) for n in ("draft", "ngram")), abs=0.5)
    # timers: 1.5 x the slowest load + 60; the least dead-man a minute above
    assert p["health_timeout"] == math.ceil(1.5 * p["configs"]["draft"]["load_s"] + 60)
    assert p["rollback_after"] == p["health_timeout"] + 60
    assert p["slot_estimates"]["draft"] == math.ceil(p["configs"]["draft"]["slot_s"])
    assert p["over_budget"] is False and p["refusal"] is None
    assert p["lines"][0].startswith("time plan on this box: 10 restarts (9 slots and the restore), about ")


def test_the_dead_man_and_the_lock_follow_a_slow_box() -> None:
    fast = plan(start={"load_s": 2.0, "stop_s": 1.0}, probe={"predicted_per_second": 400.0})
    slow = plan(start={"load_s": 60.0, "pre_s": 40.0, "stop_s": 1.0}, probe={"predicted_per_second": 20.0})
    names = [c["name"] for c in CONFIGS]
    dm_fast = ab_dead_man(names, "baseline", fast["slot_estimates"], fast["rollback_after"], fast["health_timeout"], 3600)
    dm_slow = ab_dead_man(names, "baseline", slow["slot_estimates"], slow["rollback_after"], slow["health_timeout"], 3600)
    # the slowest load is the draft's: the ExecStartPre part stays, the weights' part grows by its bytes
    assert slow["configs"]["draft"]["load_s"] == pytest.approx(40 + 20 * 1.25, abs=0.1)
    assert slow["health_timeout"] == math.ceil(1.5 * 65 + 60) > fast["health_timeout"] == math.ceil(1.5 * 2.5 + 60)
    for name in ("draft", "ngram"):
        assert dm_slow["per_config"][name] > dm_fast["per_config"][name]
        # the dead-man outlasts the slot it guards
        assert dm_slow["per_config"][name] >= 1.5 * slow["configs"][name]["slot_s"]
    assert dm_slow["lock_expires_after"] > dm_fast["lock_expires_after"]


def test_a_plan_over_the_budget_is_refused_saying_how_many_rounds_fit() -> None:
    p = plan()
    minutes = (p["total_s"] - p["rounds"]["2"] + 30) / 60  # two rounds and the restore fit, not three
    over = plan(budget_minutes=minutes)
    assert over["over_budget"] is True and over["rounds_that_fit"] == 2
    assert "over spec_ab_budget_minutes" in over["refusal"] and "lower spec_ab_max_rounds to 2" in over["refusal"]
    assert "Nothing was changed" in over["refusal"]
    tiny = plan(budget_minutes=1)
    assert tiny["over_budget"] and "no two rounds fit" in tiny["refusal"]
    assert plan(budget_minutes=p["total_s"] / 60 + 1)["over_budget"] is False


def test_the_inventory_wins_over_the_box() -> None:
    p = plan(load_s=30, decode_rate=100, health_timeout=45, rollback_after=700, estimates={"draft": 1234})
    assert p["box"]["load_s"] == 30 and p["box"]["decode_rate"] == 100
    assert p["health_timeout"] == 45 and p["health_timeout_source"] == "given" and p["rollback_after"] == 700
    assert p["slot_estimates"]["draft"] == 1234
    assert "spec_ab_load_seconds" in p["lines"][1] and "spec_ab_decode_rate" in p["lines"][1]
    # a health timeout shorter than a load is said
    short = plan(health_timeout=100)
    assert any("shorter than the slowest config's expected load" in n for n in short["notes"])


def test_an_unknown_box_is_planned_pessimistically_and_said() -> None:
    p = plan(start={"note": "no line matching"}, probe={"error": "connection refused"})
    assert p["health_timeout"] == 600 and p["configs"]["draft"]["load_source"] == "the health timeout"
    assert p["rollback_after"] == 900 and p["slot_estimates"] == {}
    assert any("rate is unknown" in n and "connection refused" in n for n in p["notes"])
    assert "at least" in p["lines"][0]
    with pytest.raises(AnsibleFilterError, match=r"spec_ab_budget_minutes .* cannot be checked"):
        plan(start={}, probe={}, budget_minutes=60)


@pytest.mark.parametrize(("setting", "value", "match"), [
    ("health_timeout", "soon", "spec_ab_health_timeout"), ("rollback_after", 0, "spec_ab_rollback_after"),
    ("load_s", -3, "spec_ab_load_seconds"), ("decode_rate", "fast", "spec_ab_decode_rate"),
    ("budget_minutes", "lots", "spec_ab_budget_minutes"), ("estimates", {"nope": 3}, "spec_ab_slot_estimates"),
    ("bench", dict(BENCH, shapes=["prosa"]), "prosa"), ("bench", dict(BENCH, warmup=-1), "spec_ab_warmup"),
])
def test_bad_input_names_the_variable(setting: str, value: object, match: str) -> None:
    with pytest.raises(AnsibleFilterError, match=match):
        plan(**{setting: value})


def test_the_load_phase_counts_its_bursts() -> None:
    one = plan()
    four = plan(bench=dict(BENCH, concurrency=4, load_bursts=3))
    assert four["configs"]["ngram"]["requests"] == one["configs"]["ngram"]["requests"] + 4 * 3 * 4
    assert four["configs"]["ngram"]["measure_s"] > one["configs"]["ngram"]["measure_s"]


def test_model_files_and_the_report_record() -> None:
    assert ab_model_files(CONFIGS, RENDERED) == ["/m/t.gguf", "/m/d.gguf"]
    p = plan()
    entries = [{"config": "draft", "start_s": 301.5}, {"config": "draft", "start_s": 290},
               {"config": "baseline", "start_s": None}]
    record = ab_timing_record(p, entries)
    assert record["configs"]["draft"]["starts_seen_s"] == [301.5, 290.0]
    assert record["configs"]["baseline"]["starts_seen_s"] == []
    assert record["restarts"] == 10


def test_busy_counts_per_config() -> None:
    entries = [{"config": "draft", "bench": {"busy": {"mode": "slots", "checked": 8, "contaminated": 2, "repeated": 2,
                                                      "excluded": 0}}},
               {"config": "draft", "bench": {"busy": {"mode": "slots", "checked": 8, "contaminated": 3, "repeated": 2,
                                                      "excluded": 1}}},
               {"config": "baseline", "bench": {"busy": {"mode": None, "token_counter": False, "checked": 0}}},
               {"config": "ngram", "bench": None}]
    counts = ab_busy_counts(entries)
    assert counts["configs"]["draft"] == {"checked": 16, "contaminated": 5, "repeated": 4, "excluded": 1}
    assert counts["total"]["contaminated"] == 5 and counts["unchecked"] == ["baseline"]


def test_minutes_are_readable() -> None:
    assert _timing._minutes(45) == "45 s" and _timing._minutes(600) == "10.0 min"


@pytest.mark.parametrize("unset", [0, "0", "", None])
def test_zero_means_read_the_box(unset: object) -> None:
    p = plan(load_s=unset, decode_rate=unset)
    assert p["box"]["load_source"].startswith("the journal") and p["box"]["rate_source"].startswith("one request")


def test_the_lock_covers_a_slot_whose_every_request_the_bench_sends_again() -> None:
    quiet = plan()
    busy = plan(bench=dict(BENCH, busy_check=True, busy_retries=2, busy_wait=30))
    names = [c["name"] for c in CONFIGS]
    for name in names:
        row = busy["configs"][name]
        each = row["measure_s"] / row["requests"]
        assert busy["busy_resend_s"][name] == math.ceil(2 * (30 + each) * row["requests"])
        assert busy["lock_slot_estimates"][name] == math.ceil(row["slot_s"]) + busy["busy_resend_s"][name]
        assert quiet["busy_resend_s"][name] == 0  # no busy check: no re-sends
    # the slots themselves (and so the candidates' dead-man) are planned as before
    assert busy["slot_estimates"] == quiet["slot_estimates"]
    args = (names, "baseline", busy["slot_estimates"], busy["rollback_after"], busy["health_timeout"], 10**6)
    without, with_busy = ab_dead_man(*args), ab_dead_man(*args, busy["lock_slot_estimates"])
    assert with_busy["per_config"] == without["per_config"]
    longest_busy = max(busy["lock_slot_estimates"].values())
    assert with_busy["lock_expires_after"] == math.ceil(longest_busy * with_busy["margin"]) + busy["health_timeout"] + 60
    assert with_busy["lock_expires_after"] > without["lock_expires_after"]
    # the baseline's slot (no dead-man: only the lock keeps a waiting run out) is covered too
    assert with_busy["lock_expires_after"] > busy["lock_slot_estimates"]["baseline"] + busy["health_timeout"]


def test_a_lock_estimate_that_is_no_number_is_refused_naming_it() -> None:
    p = plan()
    names = [c["name"] for c in CONFIGS]
    with pytest.raises(AnsibleFilterError, match="lock estimate of draft"):
        ab_dead_man(names, "baseline", p["slot_estimates"], p["rollback_after"], p["health_timeout"], 10**6, {"draft": "x"})
