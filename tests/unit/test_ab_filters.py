"""The A/B role's filters: sweep expansion, the rotated schedule, env rendering, step 0's counters."""
from __future__ import annotations

from pathlib import Path

import pytest
from ab_runs import make_run
from ansible.errors import AnsibleFilterError

from ansible_collections.llmfleet.specdec.plugins.module_utils.lint._lint import lint
from ansible_collections.llmfleet.specdec.plugins.module_utils.llamacpp._flags import parse as parse_flags
from ansible_collections.llmfleet.specdec.plugins.module_utils.systemd import _envfile as envfile
from ansible_collections.llmfleet.specdec.plugins.plugin_utils.steps._steps_ab import (
    ab_env,
    ab_expand,
    ab_look,
    ab_render,
    ab_report_configs,
    ab_round,
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


def test_sweep_values_follow_the_env_file_rules() -> None:
    """A sweep value is an env value: the same rules as every other (it used to go through str())."""
    configs = ab_expand([{"name": "baseline"},
                         {"name": "w", "sweep": {"LLAMA_ARG_SWA_FULL": [True, False, None]}}])
    # llama.cpp reads booleans as 1/true/on/enabled, never "True"; null unsets the variable
    assert [c["env"]["LLAMA_ARG_SWA_FULL"] for c in configs[1:]] == ["1", "0", None]
    with pytest.raises(AnsibleFilterError, match=r"specdec_configs\[bad\]\.sweep LLAMA_ARG_ALIAS: a dict cannot be"):
        ab_expand([{"name": "baseline"}, {"name": "bad", "sweep": {"LLAMA_ARG_ALIAS": [{"a": 1}]}}])
    with pytest.raises(AnsibleFilterError, match="NUL byte"):
        ab_expand([{"name": "baseline"}, {"name": "bad", "sweep": {"LLAMA_ARG_ALIAS": ["a\x00b"]}}])
    with pytest.raises(AnsibleFilterError, match="'LLAMA-ARG' is not an environment variable name"):
        ab_expand([{"name": "baseline"}, {"name": "bad", "sweep": {"LLAMA-ARG": [1]}}])


def test_schedule_is_every_config_every_round_on_a_fresh_start_in_a_seeded_order() -> None:
    plan = ab_schedule(["baseline", "a", "b", "c"], 40, "baseline", 7)
    rounds = [[p["config"] for p in plan if p["round"] == r] for r in range(40)]
    assert all(sorted(r) == ["a", "b", "baseline", "c"] for r in rounds)
    assert all(p["restart"] for p in plan)
    # the same seed repeats the plan, another seed gives another
    assert ab_schedule(["baseline", "a", "b", "c"], 40, "baseline", 7) == plan
    assert ab_schedule(["baseline", "a", "b", "c"], 40, "baseline", 8) != plan
    # never the same candidate twice in a row, not even across a round's boundary: a start is never shared (the
    # baseline's slot restarts production itself, so it may follow itself)
    flat = [p["config"] for p in plan]
    assert all(x != y or x == "baseline" for x, y in zip(flat, flat[1:]))
    assert [p["baseline"] for p in plan] == [p["config"] == "baseline" for p in plan]
    # with two configs, both orders still occur (a rule against the baseline following itself would fix them)
    two = ab_schedule(["baseline", "d"], 20, "baseline", 5)
    orders = {tuple(p["config"] for p in two if p["round"] == r) for r in range(20)}
    assert orders == {("baseline", "d"), ("d", "baseline")}
    # positions balance: over 40 rounds every config takes every position (a rotation by one never gave the
    # baseline the first slot of round 1 with 3 rounds and 4 configs)
    for name in ("baseline", "a", "b", "c"):
        assert {r.index(name) for r in rounds} == {0, 1, 2, 3}
    with pytest.raises(AnsibleFilterError):
        ab_schedule(["baseline"], 0)


def test_configs_with_one_server_side_never_follow_each_other() -> None:
    draft = {"LLAMA_ARG_SPEC_TYPE": "draft-simple", "LLAMA_ARG_SPEC_DRAFT_MODEL": "/m/d.gguf"}
    configs = [{"name": "baseline", "env": {}},
               {"name": "a", "env": dict(draft, LLAMA_ARG_SPEC_DRAFT_N_MAX="3")},
               {"name": "b", "env": {"LLAMA_ARG_SPEC_TYPE": "ngram-mod"}},
               # the same server side as a once rendered, under another name: applied over a, it would not restart
               {"name": "a-twin", "env": dict(draft, LLAMA_ARG_SPEC_DRAFT_N_MAX=3)}]
    plan = ab_schedule(configs, 12, "baseline", 1)
    assert len({p["server"] for p in plan}) == 3
    servers = [p["server"] for p in plan]
    assert all(x != y for x, y in zip(servers, servers[1:]))


def test_a_round_keeps_the_configs_still_measured_and_their_starts_apart() -> None:
    plan = ab_schedule(["baseline", "a", "b", "c"], 3, "baseline", 3)
    round1 = [p["config"] for p in plan if p["round"] == 1]
    kept = ab_round(plan, 1, ["baseline", "b", "c"])
    assert [p["config"] for p in kept] == [n for n in round1 if n != "a"]
    assert [p["order"] for p in kept] == [0, 1, 2]
    # the first slot would repeat the server measured last: it moves
    first = kept[0]
    moved = ab_round(plan, 1, ["baseline", "b", "c"], first["server"])
    assert moved[0]["config"] != first["config"] and sorted(p["config"] for p in moved) == ["b", "baseline", "c"]


def test_the_look_after_a_round_drops_decided_and_never_winning_configs() -> None:
    drafter = {"chain": ["draft-simple"], "draft": (30, 20)}
    run = make_run({"baseline": {}, "fast": dict(drafter, speedup=2.0, start={0: 1.0, 1: 1.01, 2: 0.99}),
                    "maybe": dict(drafter, speedup=1.15, start={0: 1.25, 1: 0.85, 2: 1.1}),
                    "lazy": {"chain": ["draft-simple"], "speedup": 1.0}}, rounds=3)
    # the look after round 3 of a budget of 4 (after round 2 each config's own spread has one degree of freedom,
    # and a comparison's critical value is taken at the pair's Welch df: only an extreme result is decided there)
    run["design"] = {"max_rounds": 4, "sequential": True}
    look = ab_look(run)
    assert look["decided"] == {"fast": "win"}
    assert look["dropped"] == {"lazy": "NOT ENGAGED"}
    assert look["active"] == ["baseline", "maybe"] and look["stop"] is False
    assert any("fast WIN (win)" in line for line in look["lines"])
    run["design"]["max_rounds"] = 3
    assert ab_look(run) == dict(ab_look(run), active=[], stop=True)


PRODUCTION = {"LLAMA_ARG_MODEL": "/m/t.gguf", "LLAMA_ARG_SPEC_DRAFT_MODEL": "/m/d.gguf",
              "LLAMA_EXTRA_ARGS": "--spec-draft-device CUDA1"}


def test_flags_are_appended_as_llama_server_appends_them() -> None:
    """env SPEC_TYPE=ngram-mod plus --spec-type draft-simple: linted and served as ngram-mod,draft-simple."""
    config = {"name": "both", "env": {"LLAMA_ARG_SPEC_TYPE": "ngram-mod"}, "flags": ["--spec-type", "draft-simple"]}
    rendering = ab_render([config], PRODUCTION)["both"]
    assert rendering["override"] == {"LLAMA_ARG_SPEC_TYPE": "ngram-mod",
                                     "LLAMA_EXTRA_ARGS": "--spec-draft-device CUDA1 --spec-type draft-simple"}
    assert rendering["env"]["LLAMA_ARG_SPEC_TYPE"] == "ngram-mod"
    assert rendering["argv"] == ["--spec-draft-device", "CUDA1", "--spec-type", "draft-simple"]
    # what the preflight lints is this rendering's env, and it is what llama-server resolves
    parsed = parse_flags([], rendering["env"])
    assert parsed["spec_types"] == ["ngram-mod", "draft-simple"] and parsed["problems"] == []
    assert parsed["options"]["--spec-draft-device"] == "CUDA1"
    assert lint("llamacpp", parsed)["effective_chain"] == ["ngram-mod", "draft-simple"]


def test_productions_extra_args_stay_under_every_candidate_with_a_flag() -> None:
    rendering = ab_render([{"name": "ng", "flags": ["--spec-ngram-mod-n-min", "16"]}], PRODUCTION)["ng"]
    assert rendering["argv"] == ["--spec-draft-device", "CUDA1", "--spec-ngram-mod-n-min", "16"]
    assert ab_env({}, ["--spec-ngram-mod-n-min", "16"], PRODUCTION) == rendering["override"]
    # a candidate that sets LLAMA_EXTRA_ARGS itself replaces production's, and its flags follow its own
    own = ab_render([{"name": "own", "env": {"LLAMA_EXTRA_ARGS": "--spec-draft-device CUDA0"},
                      "flags": ["--spec-draft-n-max", "5"]}], PRODUCTION)["own"]
    assert own["argv"] == ["--spec-draft-device", "CUDA0", "--spec-draft-n-max", "5"]


def test_null_unsets_a_production_variable_end_to_end() -> None:
    rendering = ab_render([{"name": "nodraft", "env": {"LLAMA_ARG_SPEC_DRAFT_MODEL": None,
                                                       "LLAMA_ARG_SPEC_TYPE": "ngram-mod"}}], PRODUCTION)["nodraft"]
    assert rendering["override"] == {"LLAMA_ARG_SPEC_DRAFT_MODEL": None, "LLAMA_ARG_SPEC_TYPE": "ngram-mod"}
    assert "LLAMA_ARG_SPEC_DRAFT_MODEL" not in rendering["env"] and rendering["unset"] == ["LLAMA_ARG_SPEC_DRAFT_MODEL"]
    assert rendering["env_file"] == ["LLAMA_ARG_SPEC_TYPE=ngram-mod"]
    # unit_override gets the override, where null means UnsetEnvironment=
    config = envfile.env_config_from_mapping(rendering["override"])
    assert config.unset == ("LLAMA_ARG_SPEC_DRAFT_MODEL",)
    # the report records it as null, not as an empty string
    report = ab_report_configs([{"name": "nodraft"}], {"nodraft": ["ngram-mod"]}, {"nodraft": rendering})
    assert report[0]["server_config"]["LLAMA_ARG_SPEC_DRAFT_MODEL"] is None
    assert report[0]["rendering"] == rendering


def test_values_that_cannot_run_are_refused_naming_the_config() -> None:
    with pytest.raises(AnsibleFilterError, match=r"config bad: env LLAMA_ARG_ALIAS: .*lone surrogate"):
        ab_render([{"name": "bad", "env": {"LLAMA_ARG_ALIAS": "x\udc80"}}], PRODUCTION)
    with pytest.raises(AnsibleFilterError, match=r"config q: flags LLAMA_EXTRA_ARGS: .*NUL"):
        ab_render([{"name": "q", "flags": ["--alias", "a\x00b"]}], PRODUCTION)
    with pytest.raises(AnsibleFilterError, match="the baseline is production as it runs"):
        ab_render([{"name": "baseline", "env": {"LLAMA_ARG_SPEC_TYPE": "ngram-mod"}}], PRODUCTION, "baseline")


def test_report_configs_carry_chain_and_depth() -> None:
    renderings = ab_render([{"name": "d", "env": {"LLAMA_ARG_SPEC_DRAFT_N_MAX": "7"}},
                            {"name": "f", "flags": ["--spec-draft-n-max", "5"]}, {"name": "baseline"}], {})
    out = ab_report_configs([{"name": "d"}, {"name": "f"}, {"name": "baseline"}],
                            {"d": ["draft-simple"], "baseline": []}, renderings)
    assert {k: out[0][k] for k in ("name", "chain", "server_config", "k")} == {
        "name": "d", "chain": ["draft-simple"], "server_config": {"LLAMA_ARG_SPEC_DRAFT_N_MAX": "7"}, "k": 7}
    assert out[1]["k"] == 5  # a depth given as a flag is the depth llama-server uses
    assert out[2]["chain"] == [] and "k" not in out[2]


def test_step0_counters_from_a_recorded_metrics_page() -> None:
    spec = spec_counters((FIXTURES / "llamacpp_metrics_spec.txt").read_text())
    plain = spec_counters((FIXTURES / "llamacpp_metrics_plain.txt").read_text())
    assert spec and plain is not None
    assert spec != plain
    assert spec_counters("") == {} and spec_counters(None) == {}
