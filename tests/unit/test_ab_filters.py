"""The A/B role's filters: sweep expansion, the rotated schedule, env rendering, step 0's counters."""
from __future__ import annotations

from pathlib import Path

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.llmfleet.specdec.plugins.filter.ab import (
    ab_env,
    ab_expand,
    ab_report_configs,
    ab_schedule,
    spec_counters,
)

FIXTURES = Path(__file__).parent / "fixtures" / "breakeven"


def test_sweep_expands_into_one_config_per_value() -> None:
    configs = ab_expand([
        {"name": "baseline", "env": {}},
        {"name": "draft", "env": {"LLAMA_ARG_SPEC_TYPE": "draft-simple"},
         "sweep": {"LLAMA_ARG_SPEC_DRAFT_N_MAX": [3, 7]}},
    ])
    assert [c["name"] for c in configs] == ["baseline", "draft@spec_draft_n_max=3", "draft@spec_draft_n_max=7"]
    assert configs[2]["env"] == {"LLAMA_ARG_SPEC_TYPE": "draft-simple", "LLAMA_ARG_SPEC_DRAFT_N_MAX": "7"}
    assert configs[2]["base"] == "draft" and "sweep" not in configs[2]


def test_two_dimensional_sweep_and_errors() -> None:
    configs = ab_expand([{"name": "baseline"}, {"name": "ng", "sweep": {"A": [1, 2], "B": ["x", "y"]}}])
    assert len(configs) == 5
    with pytest.raises(AnsibleFilterError, match="no config named 'baseline'"):
        ab_expand([{"name": "x"}])
    with pytest.raises(AnsibleFilterError, match="two configs are named"):
        ab_expand([{"name": "baseline"}, {"name": "a"}, {"name": "a"}])
    with pytest.raises(AnsibleFilterError, match="cannot sweep"):
        ab_expand([{"name": "baseline", "sweep": {"A": [1]}}])
    with pytest.raises(AnsibleFilterError, match="sweep"):
        ab_expand([{"name": "baseline"}, {"name": "a", "sweep": {"A": []}}])


def test_schedule_rotates_and_includes_the_baseline_every_round() -> None:
    plan = ab_schedule(["baseline", "a", "b"], 3)
    rounds = [[p["config"] for p in plan if p["round"] == r] for r in range(3)]
    assert rounds == [["baseline", "a", "b"], ["a", "b", "baseline"], ["b", "baseline", "a"]]
    assert all(sorted(r) == ["a", "b", "baseline"] for r in rounds)
    with pytest.raises(AnsibleFilterError):
        ab_schedule(["baseline"], 0)


def test_configs_with_one_server_side_run_together_and_restart_once() -> None:
    draft = {"LLAMA_ARG_SPEC_TYPE": "draft-simple", "LLAMA_ARG_SPEC_DRAFT_MODEL": "/m/d.gguf"}
    configs = [{"name": "baseline", "env": {}},
               {"name": "a", "env": dict(draft, LLAMA_ARG_SPEC_DRAFT_N_MAX="3")},
               {"name": "b", "env": {"LLAMA_ARG_SPEC_TYPE": "ngram-mod"}},
               # the same env file as a once rendered (a flag given as a flag): no restart between them
               {"name": "a-twin", "env": draft, "flags": ["--spec-draft-n-max", "3"]}]
    plan = ab_schedule(configs, 3)
    rounds = [[p["config"] for p in plan if p["round"] == r] for r in range(3)]
    assert rounds == [["baseline", "a", "a-twin", "b"], ["a", "a-twin", "b", "baseline"],
                      ["b", "baseline", "a", "a-twin"]]
    assert [p["order"] for p in plan if p["round"] == 1] == [0, 1, 2, 3]
    # production serves when the run starts: its slot needs no restart; a-twin follows a on one server
    restarts = [(p["round"], p["config"]) for p in plan if p["restart"]]
    assert restarts == [(0, "a"), (0, "b"), (1, "a"), (1, "b"), (1, "baseline"), (2, "b"), (2, "baseline"),
                        (2, "a")]
    distinct = len({p["server"] for p in plan})
    assert distinct == 3 and len(restarts) <= distinct * 3
    # names alone: every config is its own server side
    assert [p["restart"] for p in ab_schedule(["baseline", "x"], 1)] == [False, True]


def test_env_rendering_puts_unnamed_flags_in_extra_args() -> None:
    env = ab_env({"LLAMA_ARG_SPEC_TYPE": "ngram-mod"}, ["--spec-ngram-mod-n-min", "16", "--spec-draft-n-max", "5"])
    assert env["LLAMA_ARG_SPEC_TYPE"] == "ngram-mod"
    assert env["LLAMA_ARG_SPEC_DRAFT_N_MAX"] == "5"
    assert "--spec-ngram-mod-n-min 16" in env["LLAMA_EXTRA_ARGS"]
    with pytest.raises(AnsibleFilterError, match="--no-such-flag"):
        ab_env({}, ["--no-such-flag"])


def test_report_configs_carry_chain_and_depth() -> None:
    out = ab_report_configs([{"name": "d", "env": {"LLAMA_ARG_SPEC_DRAFT_N_MAX": "7"}}, {"name": "baseline"}],
                            {"d": ["draft-simple"], "baseline": []})
    assert out[0] == {"name": "d", "chain": ["draft-simple"], "server_config": {"LLAMA_ARG_SPEC_DRAFT_N_MAX": "7"}, "k": 7}
    assert out[1]["chain"] == [] and "k" not in out[1]


def test_step0_counters_from_a_recorded_metrics_page() -> None:
    spec = spec_counters((FIXTURES / "llamacpp_metrics_spec.txt").read_text())
    plain = spec_counters((FIXTURES / "llamacpp_metrics_plain.txt").read_text())
    assert spec and plain is not None
    assert spec != plain
    assert spec_counters("") == {} and spec_counters(None) == {}
