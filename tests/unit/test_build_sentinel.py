"""A new llama.cpp build's canary is judged on the promoted config's speculation (bench/_sentinel) against production's
on the same prompts, before 'current' moves: the plan from the evidence, bad input in one line, the verdict, and the
activation that stops before the switch or records the verdict in the build record.

The host is test_activate's simulated one (fake systemd, /proc and /health); the sentinel's judging is driven with
recorded replies here and against two real llama-server builds in tests/integration/test_build_sentinel_server.py.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict, List, Sequence, Tuple

import pytest
from test_activate import UNIT, Host, _activation, _params

from ansible_collections.llmfleet.specdec.plugins.module_utils.bench import _sentinel as sen
from ansible_collections.llmfleet.specdec.plugins.module_utils.build import _activate as act
from ansible_collections.llmfleet.specdec.plugins.modules import llamacpp_activate

# ------------------------------------------------------------------ the sentinel: evidence and plan

PROD_ARGV = ["/opt/llama.cpp/current/bin/llama-server", "--model", "/m/target.gguf", "--port", "8080",
             "-md", "/m/draft.gguf", "--spec-type", "draft-simple", "--spec-draft-n-max", "3"]


def _req(shape: str, i: int, drafted: int, accepted: int) -> Dict[str, Any]:
    return {"shape": shape, "prompt_index": i, "draft_n": drafted, "draft_n_accepted": accepted, "predicted_n": 48,
            "text": "x", "predicted_per_second": 100.0}


def _evidence(model: str = "/m/target.gguf", shapes: Dict[str, Any] | None = None) -> Dict[str, Any]:
    shapes = shapes or {"prose": {"n_predict": 48, "prompt_chars": 468, "checks": {}},
                        "identity": {"n_predict": 16, "prompt_chars": 54, "checks": {}}}
    env = {"LLAMA_ARG_MODEL": model, "LLAMA_EXTRA_ARGS": "-md /m/draft.gguf --spec-type draft-simple --spec-draft-n-max 3"}
    report = {"run_id": "r1", "configs": [{"name": "baseline", "chain": [], "rendering": {"env": {"LLAMA_ARG_MODEL": model}}},
                                          {"name": "draft-n3", "chain": ["draft-simple"], "rendering": {"env": env}}],
              "entries": [{"config": "draft-n3", "round": 0, "bench": {"api": "llamacpp", "shapes": shapes,
                                                                       "requests": [_req("prose", 0, 30, 27)]}}]}
    return {"schema": "llmfleet.specdec/promoted/1", "config": "draft-n3", "run_id": "r1", "report": report}


def _state(tmp_path: Path, evidence: Any, name: str = "llama-server") -> str:
    (tmp_path / "state" / "promoted").mkdir(parents=True, exist_ok=True)
    text = evidence if isinstance(evidence, str) else json.dumps(evidence)
    (tmp_path / "state" / "promoted" / f"{name}.json").write_text(text)
    return str(tmp_path / "state")


def _serving(argv: Sequence[str] | None = None, env: Dict[str, str] | None = None) -> Dict[str, Any]:
    return {"unit": UNIT, "argv": list(PROD_ARGV if argv is None else argv), "env": env or {}, "port": 8080,
            "build": "new-cpu"}


def test_the_plan_replays_the_promoted_runs_shapes_at_their_budgets_on_a_canary_with_counters(tmp_path: Path) -> None:
    sentinel = sen.Sentinel(state_dir=_state(tmp_path, _evidence()), prompts=3)
    plan = sentinel.plan(_serving())
    assert plan is not None and plan["config"] == "draft-n3" and plan["run_id"] == "r1"
    assert [p.shape for p in plan["prompts"]] == ["prose"] * 3 + ["identity"] * 3
    assert {p.n_predict for p in plan["prompts"] if p.shape == "prose"} == {48}
    assert plan["args"] == ["--metrics", "--parallel", "1"] and plan["ctx_size"] % 256 == 0
    assert plan["ctx_size"] >= max(len(p.prompt) for p in plan["prompts"]) // 2 + 48
    assert plan["production"] == "http://127.0.0.1:8080" and plan["measured_acceptance"] == pytest.approx(0.9)


def test_no_evidence_or_a_config_that_does_not_speculate_is_not_judged_and_says_why(tmp_path: Path) -> None:
    sentinel = sen.Sentinel(state_dir=str(tmp_path / "state"))
    assert sentinel.plan(_serving()) is None and "no promotion is recorded" in sentinel.skipped(UNIT)
    evidence = _evidence()
    evidence["config"] = "baseline"
    sentinel = sen.Sentinel(state_dir=_state(tmp_path, evidence))
    assert sentinel.plan(_serving()) is None and "does not speculate" in sentinel.skipped(UNIT)


@pytest.mark.parametrize("case, expected", [
    ("other-model", r"is evidence of model /m/other\.gguf, but llama-server\.service serves /m/target\.gguf: evidence "
                    r"from another model"),
    ("drifted", r"does not run the promoted config 'draft-n3'.*draft_n_max 3 -> 8.*restore the promotion"),
    ("not-json", r"is not JSON .*run playbooks/promote\.yml again"),
    ("not-evidence", r"is not a llmfleet\.specdec/promoted/1 document"),
    ("traffic-gone", r"declared traffic 'mine' \(/srv/traffic/mine\.jsonl\), which was not given or is gone: give the "
                     r"same files"),
])
def test_bad_input_is_one_line_naming_the_cause_and_the_fix(tmp_path: Path, case: str, expected: str) -> None:
    argv = list(PROD_ARGV)
    evidence: Any = _evidence()
    if case == "other-model":
        evidence = _evidence(model="/m/other.gguf")
    elif case == "drifted":
        argv[-1] = "8"
    elif case == "not-json":
        evidence = "{not json"
    elif case == "not-evidence":
        evidence = {"schema": "something/else"}
    elif case == "traffic-gone":
        evidence = _evidence(shapes={"mine": {"n_predict": 32, "prompt_chars": 80,
                                              "checks": {"source": "/srv/traffic/mine.jsonl"}}})
    sentinel = sen.Sentinel(state_dir=_state(tmp_path, evidence))
    with pytest.raises(sen.SentinelError, match=expected) as err:
        sentinel.plan(_serving(argv))
    assert "\n" not in str(err.value)


def test_declared_traffic_given_as_spec_bench_takes_it_is_replayed(tmp_path: Path) -> None:
    evidence = _evidence(shapes={"mine": {"n_predict": 32, "prompt_chars": 80, "checks": {"source": "/srv/mine.jsonl"}}})
    traffic = [{"name": "mine", "content": '{"prompt": "first request"}\n"second request"\n', "n_predict": 32}]
    plan = sen.Sentinel(state_dir=_state(tmp_path, evidence), traffic=traffic, prompts=2).plan(_serving())
    assert plan is not None and [p.prompt for p in plan["prompts"]] == ["first request", "second request"]


# ------------------------------------------------------------------ the sentinel: the verdict


def _plan(tmp_path: Path) -> Dict[str, Any]:
    plan = sen.Sentinel(state_dir=_state(tmp_path, _evidence()), prompts=2).plan(_serving())
    assert plan is not None
    return plan


def _replies(pairs: Sequence[Tuple[int, int]], text: str = "same", rate: float = 100.0) -> List[Dict[str, Any]]:
    return [{"draft_n": d, "draft_n_accepted": a, "text": text, "predicted_per_second": rate} for d, a in pairs]


def _delta(drafts: int, tokens: int, accepted: int, per_pos: Sequence[int]) -> Dict[str, Any]:
    return {"drafts": drafts, "draft_tokens": tokens, "accepted_tokens": accepted, "accepted_per_pos": list(per_pos)}


def test_the_same_acceptance_passes_with_both_sides_numbers(tmp_path: Path) -> None:
    plan = _plan(tmp_path)
    prod = _replies([(30, 27), (30, 28), (30, 26), (30, 27)])
    verdict = sen.Sentinel(state_dir="/x").verdict(plan, prod, _replies([(30, 27), (30, 28), (30, 26), (30, 27)]),
                                                   _delta(40, 120, 108, [38, 36, 34]), _delta(40, 120, 108, [38, 36, 34]))
    assert verdict["regressions"] == [] and not verdict["accepted_slower"]
    assert verdict["canary"]["acceptance"] == pytest.approx(0.9) and verdict["canary"]["mean_accepted_len"] == 3.7
    assert verdict["canary"]["per_position"] == [0.95, 0.9, 0.85]
    assert verdict["acceptance_difference"]["difference"] == 0 and verdict["acceptance_difference"]["low"] == 0


def test_lower_acceptance_is_refused_naming_the_build_the_config_and_both_numbers(tmp_path: Path) -> None:
    plan = _plan(tmp_path)
    prod = _replies([(30, 27), (30, 28), (30, 26), (30, 27)])
    canary = _replies([(30, 18), (30, 20), (30, 17), (30, 19)])
    with pytest.raises(sen.SentinelError) as err:
        sen.Sentinel(state_dir="/x").verdict(plan, prod, canary, _delta(40, 120, 108, [38, 36, 34]),
                                             _delta(40, 120, 74, [35, 25, 14]))
    msg = str(err.value)
    assert "build new-cpu with config 'draft-n3' on llama-server.service" in msg
    assert "acceptance 61.7 % against production's 90.0 %" in msg and "margin 0.05" in msg
    assert "mean accepted length 2.85 against production's 3.70" in msg and "interval" in msg
    assert err.value.verdict is not None and len(err.value.verdict["regressions"]) == 2
    # within the margin it passes: 88.3 % against 90.0 %
    sen.Sentinel(state_dir="/x").verdict(plan, prod, _replies([(30, 26), (30, 27), (30, 26), (30, 27)]), None, None)


def test_accept_slower_goes_ahead_and_says_so_in_the_verdict(tmp_path: Path) -> None:
    verdict = sen.Sentinel(state_dir="/x", accept_slower=True).verdict(
        _plan(tmp_path), _replies([(30, 27)] * 2), _replies([(30, 12)] * 2), None, None)
    assert verdict["accepted_slower"] and "acceptance 40.0 %" in verdict["regressions"][0]


def test_a_changed_text_an_idle_drafter_and_a_slower_decode_are_regressions(tmp_path: Path) -> None:
    plan = _plan(tmp_path)
    prod = _replies([(30, 27)] * 4)
    with pytest.raises(sen.SentinelError, match=r"not lossless: its text differs from production's on 4 of 4 prompts "
                                                r"\(first at character 0\)"):
        sen.Sentinel(state_dir="/x").verdict(plan, prod, _replies([(30, 27)] * 4, text="other"), None, None)
    with pytest.raises(sen.SentinelError, match=r"not engaged: production drafted 120 tokens.*the canary none"):
        sen.Sentinel(state_dir="/x").verdict(plan, prod, _replies([(0, 0)] * 4), None, None)
    with pytest.raises(sen.SentinelError, match=r"decode rate 0\.50x production's"):
        sen.Sentinel(state_dir="/x").verdict(plan, prod, _replies([(30, 27)] * 4, rate=50.0), None, None)


def test_a_cpu_canary_judges_neither_speed_nor_texts_and_says_why(tmp_path: Path) -> None:
    sentinel = sen.Sentinel(state_dir="/x", canary_args=["--n-gpu-layers", "0"])
    verdict = sentinel.verdict(_plan(tmp_path), _replies([(30, 27)] * 2), _replies([(30, 27)] * 2, "x", 5.0), None, None)
    assert verdict["regressions"] == [] and not verdict["speed_judged"] and not verdict["lossless_required"]
    assert any("says nothing of speed" in note for note in verdict["notes"])


def test_production_counters_moved_by_others_are_not_taken_for_its_mean_length(tmp_path: Path) -> None:
    prod = _replies([(30, 27)] * 2)
    verdict = sen.Sentinel(state_dir="/x").verdict(_plan(tmp_path), prod, _replies([(30, 27)] * 2),
                                                   _delta(99, 400, 300, [90, 80, 70]), _delta(20, 60, 54, [19, 18, 17]))
    assert verdict["production"]["mean_accepted_len"] is None and verdict["canary"]["mean_accepted_len"] == 3.7


# ------------------------------------------------------------------ the activation with a sentinel


@pytest.fixture
def host(tmp_path: Path) -> Host:
    (tmp_path / "llamacpp-build.json").write_text('{"version": "old"}\n')
    return Host(tmp_path)


class FakeSentinel:
    def __init__(self, refuse: bool) -> None:
        self.refuse = refuse
        self.judged: List[int] = []

    def plan(self, serving: Dict[str, Any]) -> Dict[str, Any]:
        return {"args": ["--metrics"], "ctx_size": 2048, "seconds": 60, "unit": serving["unit"]}

    def skipped(self, unit: str) -> str:
        return "-"

    def judge(self, plan: Dict[str, Any], port: int) -> Dict[str, Any]:
        self.judged.append(port)
        if self.refuse:
            # a message and its details: the '%' is text, not a format (pylint reads it as one)
            raise sen.SentinelError(  # pylint: disable=raising-format-tuple
                "build new-cpu with config 'draft-n3' is a regression: acceptance 61.7 % against production's 90.0 %",
                {"regressions": ["acceptance"]})
        return {"unit": plan["unit"], "accepted_slower": False, "regressions": []}


def test_a_regression_stops_the_rollout_before_current_moves_and_production_is_untouched(tmp_path: Path,
                                                                                         host: Host) -> None:
    pid = host.units[UNIT]["MainPID"]
    activation = _activation(tmp_path, host)
    activation.sentinel = FakeSentinel(refuse=True)
    with pytest.raises(act.ActivateError, match=r"build new-cpu refused at the canary: build new-cpu with config "
                       r"'draft-n3' is a regression: acceptance 61\.7 % against production's 90\.0 %\. Nothing was "
                       r"changed: 'current' still points at old-cpu") as err:
        activation.activate(_params(host, tmp_path))
    assert err.value.details["sentinel"] == {"regressions": ["acceptance"]}
    assert activation.sentinel.judged == [40123]  # judged on the canary's port, while it served
    assert host.current == "old-cpu" and host.units[UNIT]["MainPID"] == pid and not host.timer_armed
    assert ["systemctl", "stop", "specdec-canary-llama-server.service"] in host.calls
    spec = host.canary_specs[0]
    run = next(c for c in host.calls if c[0] == "systemd-run" and "--unit=specdec-canary-llama-server" in c)
    assert "--property=RuntimeMaxSec=120" in run  # canary_timeout 30 + 30 + the sentinel's 60 s
    # the sentinel's arguments after the canary's own, and its context when larger than canary_ctx_size
    assert spec["argv"][-7:] == ["--host", "127.0.0.1", "--port", "40123", "--ctx-size", "2048", "--metrics"]


def test_a_judged_canary_is_recorded_in_the_build_record(tmp_path: Path, host: Host) -> None:
    activation = _activation(tmp_path, host)
    activation.sentinel = FakeSentinel(refuse=False)
    result = activation.activate(_params(host, tmp_path, sentinel_timeout=60))
    assert host.current == "new-cpu" and result["sentinel"] == [{"unit": UNIT, "accepted_slower": False, "regressions": []}]
    record = json.loads((tmp_path / "llamacpp-build.json").read_text())
    assert record["version"] == "new" and record["sentinel"][0]["unit"] == UNIT


def test_the_module_builds_the_sentinel_from_its_options_and_none_without_a_canary() -> None:
    params = {name: spec.get("default") for name, spec in llamacpp_activate.ARGUMENT_SPEC.items()}
    params.update(state_dir="/var/lib/x", canary_args=["--n-gpu-layers", "0"], sentinel_margin=0.1, accept_slower=True)
    sentinel = llamacpp_activate.sentinel_of(params)
    assert isinstance(sentinel, sen.Sentinel) and sentinel.margin == 0.1 and sentinel.accept_slower
    assert sentinel.other_hardware() and sentinel.state_dir == "/var/lib/x"
    assert llamacpp_activate.sentinel_of(dict(params, canary=False)) is None
    assert llamacpp_activate.sentinel_of(dict(params, sentinel=False)) is None
    assert llamacpp_activate.ARGUMENT_SPEC["sentinel_traffic"]["no_log"] is True


# ------------------------------------------------------------------ the speed after the switch (a CPU canary)


class RateClient:
    """An Endpoint stand-in answering every completion with one decode rate."""

    def __init__(self, rate: float) -> None:
        self.rate = rate
        self.sent = 0

    def complete(self, prompt: Any, api: str = "llamacpp") -> Dict[str, Any]:
        self.sent += 1
        return {"text": "t", "draft_n": 30, "draft_n_accepted": 27, "predicted_per_second": self.rate}


def _cpu_plan(tmp_path: Path, rates: Sequence[float] = (40.0, 44.0)) -> Dict[str, Any]:
    evidence = _evidence()
    evidence["report"]["entries"] = [
        {"config": "draft-n3", "round": i, "bench": {"api": "llamacpp", "shapes": evidence["report"]["entries"][0]["bench"]
                                                     ["shapes"], "requests": [dict(_req("prose", 0, 30, 27),
                                                                                   predicted_per_second=r)]}}
        for i, r in enumerate(rates)]
    sentinel = sen.Sentinel(state_dir=_state(tmp_path, evidence), canary_args=["--n-gpu-layers", "0"], prompts=1)
    plan = sentinel.plan(_serving())
    assert plan is not None
    return plan


def test_a_cpu_canary_plans_the_speed_after_the_switch_against_the_evidences_rates(tmp_path: Path) -> None:
    plan = _cpu_plan(tmp_path)
    assert plan["after_switch"] and (plan["rate_low"], plan["rate_high"]) == (40.0, 44.0)
    # on the same hardware the canary shows speed itself
    same = sen.Sentinel(state_dir=str(tmp_path / "state")).plan(_serving())
    assert same is not None and not same["after_switch"]


def test_the_speed_after_the_switch_passes_within_the_margin_and_refuses_below_it(tmp_path: Path) -> None:
    plan = _cpu_plan(tmp_path)
    client = RateClient(35.0)  # 40 * (1 - 0.2) = 32: within the margin
    sentinel = sen.Sentinel(state_dir="/x", canary_args=["-ngl", "0"], client=lambda url, timeout: client)
    verdict = sentinel.after_switch(plan)
    assert verdict["regressions"] == [] and verdict["rate"] == 35.0 and client.sent == len(plan["prompts"])
    client.rate = 20.0
    with pytest.raises(sen.SentinelError, match=r"build new-cpu with config 'draft-n3' on llama-server.service is "
                       r"slower than the promoted run measured: decode rate 20\.0 tok/s on the new build against "
                       r"40\.0-44\.0 tok/s"):
        sentinel.after_switch(plan)
    forced = sen.Sentinel(state_dir="/x", accept_slower=True, client=lambda url, timeout: client).after_switch(plan)
    assert forced["accepted_slower"]


class AfterSwitchSentinel(FakeSentinel):
    def plan(self, serving: Dict[str, Any]) -> Dict[str, Any]:
        return dict(super().plan(serving), after_switch=True, config="draft-n3")

    def after_switch(self, plan: Dict[str, Any]) -> Dict[str, Any]:
        raise sen.SentinelError("build new-cpu with config 'draft-n3' is slower than the promoted run measured: "
                                "decode rate 20.0 tok/s against 40.0-44.0 tok/s", {"regressions": ["speed"]})


def test_a_slower_build_after_the_switch_is_rolled_back_under_its_longer_dead_man(tmp_path: Path, host: Host) -> None:
    activation = _activation(tmp_path, host)
    activation.sentinel = AfterSwitchSentinel(refuse=False)
    with pytest.raises(act.ActivateError, match=r"BUILD new-cpu WAS ROLLED BACK: .*the promoted config's speed on build "
                       r"new-cpu, measured on llama-server.service after the switch .*20\.0 tok/s") as err:
        activation.activate(_params(host, tmp_path, sentinel_timeout=60))
    assert err.value.details["rolled_back"] and err.value.details["healthy"]
    assert host.current == "old-cpu" and host.units[UNIT]["build"] == "old-cpu" and not host.timer_armed
    assert json.loads((tmp_path / "llamacpp-build.json").read_text()) == {"version": "old"}
    # the dead-man waited rollback_after + the sentinel's time: 1.7e9 + 300 + 60
    armed = next(c for c in host.calls if c[0] == "systemd-run" and any("specdec-build-rollback-" in a for a in c))
    assert f"--on-calendar={act.calendar_spec(1.7e9 + 360)}" in armed
    # not on the rollout's other hosts: the switch stays
    host2 = Host(tmp_path / "second")
    (tmp_path / "second" / "llamacpp-build.json").write_text('{"version": "old"}\n')
    second = _activation(tmp_path / "second", host2)
    second.sentinel = AfterSwitchSentinel(refuse=False)
    second.activate(_params(host2, tmp_path / "second", speed_after_switch=False))
    assert host2.current == "new-cpu"


def test_check_mode_says_which_check_each_unit_gets_and_why(tmp_path: Path, host: Host) -> None:
    (tmp_path / "state" / "promoted").mkdir(parents=True)
    (tmp_path / "state" / "promoted" / "llama-server.json").write_text(json.dumps(_evidence(model="/m/target.gguf")))
    activation = _activation(tmp_path, host, check_mode=True)
    activation.sentinel = sen.Sentinel(state_dir=str(tmp_path / "state"), canary_args=["--n-gpu-layers", "0"])
    result = activation.activate(_params(host, tmp_path, speed_after_switch=True))
    # production's command line lacks the promoted draft: the plan says the build would be refused, and why
    assert result["sentinel_plan"] == [line for line in result["sentinel_plan"] if "would be refused" in line]
    host.units[UNIT]["argv"] = [host.units[UNIT]["argv"][0], *PROD_ARGV[1:]]
    again = _activation(tmp_path, host, check_mode=True)
    again.sentinel = activation.sentinel
    plan = again.activate(_params(host, tmp_path, speed_after_switch=True))["sentinel_plan"]
    assert len(plan) == 1 and "then its speed measured on the unit after the switch under the dead-man" in plan[0]
    assert host.current == "old-cpu" and host.canary_specs == []


# ------------------------------------------------------------------ crash points of the sentinel's steps
#
# Moved to the crash matrix (tests/unit/crash_matrix.py, "the build sentinel's steps"; pinned in
# tests/unit/test_crash_matrix.py, rows in docs/crash-matrix.md): the module killed while the sentinel judges the
# canary (nothing changed, the canary ends by its own timers, the record as it was) and while it measures speed after
# the switch (the build's dead-man, armed for rollback_after + sentinel_timeout, puts the old build back), each under
# the matrix's three faults, and the unit's guard outliving that longer dead-man.


class DeadClient:
    """A server that never answers a completion (a canary stuck after /health): the request times out."""

    def __init__(self) -> None:
        self.api_key: str | None = None

    def spec_counters(self) -> Dict[str, Any]:
        return {"drafts": 0, "draft_tokens": 0, "accepted_tokens": 0, "accepted_per_pos": []}

    def complete(self, prompt: Any, api: str = "llamacpp") -> Dict[str, Any]:
        raise sen.SpecdecError("POST http://127.0.0.1:40123/completion: timed out after 120 s")

    def url(self, path: str) -> str:
        return "http://127.0.0.1:40123" + path


def test_a_canary_that_never_answers_is_one_line_and_production_keeps_its_key(tmp_path: Path) -> None:
    clients: List[DeadClient] = []

    def client(url: str, timeout: float) -> DeadClient:
        clients.append(DeadClient())
        return clients[-1]

    argv = [*PROD_ARGV, "--api-key", "k1,k2"]
    sentinel = sen.Sentinel(state_dir=_state(tmp_path, _evidence()), client=client)
    plan = sentinel.plan(_serving(argv))
    assert plan is not None and plan["api_key"] == "k1"
    with pytest.raises(sen.SentinelError, match=r"^build new-cpu with config 'draft-n3' on llama-server.service: the "
                       r"canary could not be judged: .*timed out after 120 s; production was not changed$"):
        sentinel.judge(plan, 40123)
    assert [c.api_key for c in clients] == ["k1", "k1"]  # the canary runs production's command line: the same key
    assert sen._api_key({"argv": PROD_ARGV, "env": {"LLAMA_API_KEY": "e1"}}) == "e1"
