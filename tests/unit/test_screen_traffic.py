"""The screen judges the traffic the verdict judges (issue 45): the operator's traffic files and declared mix feed
the screen's prompts and weights, and it predicts, bounds and selects on the confirmatory endpoint's metric
(module_utils/screen/_mix.py, _screen.run_screen, _bound.optimistic; steps screen_traffic and screen_select)."""
from __future__ import annotations

import json
from typing import Any

import pytest

from ansible_collections.llmfleet.specdec.plugins.module_utils.screen import _mix, _screen
from ansible_collections.llmfleet.specdec.plugins.module_utils.screen._side import ScreenError
from ansible_collections.llmfleet.specdec.plugins.plugin_utils.report import _report
from ansible_collections.llmfleet.specdec.plugins.plugin_utils.steps import _steps_screen as ss
from ansible_collections.llmfleet.specdec.plugins.plugin_utils.verdicts import _confirm

SUPPORT = [f"Ticket {i}: the printer on floor {i} says paper jam, but the tray is empty. What now?" for i in range(5)]
CHAT = [{"messages": [{"role": "system", "content": "You are terse."}, {"role": "user", "content": f"Question {i}?"}]}
        for i in range(3)]
TRAFFIC = [{"name": "support", "source": "/ctl/support.jsonl", "n_predict": 48,
            "content": "\n".join(json.dumps({"prompt": p}) for p in SUPPORT)},
           {"name": "chat", "source": "/ctl/chat.jsonl", "n_predict": 32,
            "content": "\n".join(json.dumps(c) for c in CHAT)}]


def test_declared_traffic_reaches_the_screens_prompts_and_only_the_weighed_shapes_are_sent() -> None:
    got = _mix.screen_prompts(shapes=["prose", "echo"], prompts_per_shape=2, traffic=TRAFFIC,
                              weights={"support": 0.8, "chat": 0.2})
    # the first prompts of each file, as the rounds' first repeat sends them, at the file's own n_predict; no
    # built-in shape (their weight is 0): 2 requests a weighed shape, 4 in all
    assert [(p["shape"], p["text"], p["n_predict"]) for p in got if p["shape"] == "support"] == [
        ("support", SUPPORT[0], 48), ("support", SUPPORT[1], 48)]
    assert [p["shape"] for p in got] == ["support", "support", "chat", "chat"]
    assert got[2]["chat"] == [["system", "You are terse."], ["user", "Question 0?"]]
    # a declared mix that weighs a built-in shape too sends it too
    mixed = _mix.screen_prompts(shapes=["prose", "echo"], prompts_per_shape=3, traffic=TRAFFIC,
                                weights={"prose": 0.5, "support": 0.5})
    assert [p["shape"] for p in mixed] == ["prose"] * 3 + ["support"] * 3
    # no weights: every shape given, as before
    assert {p["shape"] for p in _mix.screen_prompts(shapes=["prose"], traffic=TRAFFIC)} == {"prose", "support", "chat"}
    with pytest.raises(ScreenError, match="shape\\(s\\) billing"):
        _mix.screen_prompts(shapes=["prose"], traffic=TRAFFIC, weights={"billing": 1.0})


class Production:
    """llama-server as the screen sees it: /tokenize, /apply-template, /completion with timings."""

    shown_url = base_url = "http://127.0.0.1:8080"
    timeout = 600

    def __init__(self) -> None:
        self.tokenized: list[str] = []
        self.templated: list[list[dict[str, str]]] = []

    def health(self) -> dict[str, Any]:
        return {"status": "ok"}

    def props(self) -> dict[str, Any]:
        return {}

    def slots(self) -> list[dict[str, Any]]:
        return [{"id": 0, "is_processing": False}]

    def request(self, method: str, path: str, body: Any = None) -> tuple[int, bytes]:
        return 404, b""

    def _json(self, method: str, path: str, body: Any = None, ok_missing: bool = False) -> Any:
        if path == "/apply-template":
            self.templated.append(body["messages"])
            return {"prompt": "<|sys|>" + "".join(m["content"] for m in body["messages"]) + "<|assistant|>"}
        if path == "/tokenize":
            self.tokenized.append(body["content"])
            return {"tokens": list(range(1, 1 + len(body["content"]) // 4))}
        n = int(body["n_predict"])
        # a repetitive answer (n-gram drafting finds it), its prefill at 2 ms a prompt token
        return {"tokens": [7, 8, 9, 10] * (n // 4), "timings": {
            "predicted_n": n, "predicted_ms": (n - 1) * 20.0, "prompt_n": len(body["prompt"]),
            "prompt_ms": 2.0 * len(body["prompt"])}}


def test_the_screen_sends_the_declared_traffic_and_reads_productions_own_prefill(monkeypatch) -> None:
    production = Production()
    monkeypatch.setattr(_screen, "Endpoint", lambda *_a, **_k: production)
    got = _screen.run_screen(candidates=[{"name": "ngram-mod", "env": {"LLAMA_ARG_SPEC_TYPE": "ngram-mod"}}],
                             shapes=["prose", "echo"], traffic=TRAFFIC, weights={"support": 0.75, "chat": 0.25},
                             metric="e2e", verify_copy="never", prompts_per_shape=2)
    # the operator's prompts went to production (the chat ones through its own template), no built-in one
    assert production.tokenized[:2] == SUPPORT[:2]
    assert production.templated[0][1] == {"role": "user", "content": "Question 0?"}
    assert production.tokenized[2].startswith("<|sys|>You are terse.Question 0?")
    endpoint = got["production"]["endpoint"]
    assert endpoint["metric"] == "e2e" and endpoint["weights"] == {"support": 0.75, "chat": 0.25}
    assert endpoint["shapes"] == ["support", "chat"] and endpoint["prefill_missing"] == 0
    assert endpoint["prefill_ms_per_token_fastest"] == pytest.approx(2.0)
    # production's own rate end to end: its prefill added, time-weighted over the declared shares
    per_shape = {}
    for shape, n_predict, prompts in (("support", 48, SUPPORT[:2]), ("chat", 32, None)):
        texts = prompts or production.tokenized[2:4]
        ms = sum(2.0 * (len(t) // 4) + (n_predict - 1) * 20.0 for t in texts)
        per_shape[shape] = ms / (2 * n_predict)
    assert endpoint["tok_s"] == pytest.approx(1000.0 / (0.75 * per_shape["support"] + 0.25 * per_shape["chat"]))
    assert got["production"]["tok_s"] == pytest.approx(50.0)  # its decode rate stays what it was
    row = got["candidates"]["ngram-mod"]["k"][str(got["candidates"]["ngram-mod"]["best_k"])]
    assert row["predicted_speedup"] == pytest.approx(row["predicted_tok_s"] / endpoint["tok_s"])


def test_the_mix_is_time_weighted_over_the_declared_shares_of_generated_tokens() -> None:
    mix = _mix.Mix(["a", "a", "b"], {"a": 3.0, "b": 1.0}, "decode")
    # shape a: 100 tokens in 1000 ms (100 tok/s); b: 50 tokens in 2000 ms (25 tok/s)
    got = mix.rate([(0, 60, 500.0), (1, 40, 500.0), (2, 50, 2000.0)])
    assert got == pytest.approx(1.0 / (0.75 / 100.0 + 0.25 / 25.0))
    # end to end: each request's prefill and its first token added
    e2e = _mix.Mix(["a", "b"], {"a": 1.0, "b": 1.0}, "e2e", [100.0, 300.0], [50, 100])
    assert e2e.rate([(0, 9, 900.0), (1, 9, 900.0)]) == pytest.approx(1.0 / (0.5 / (10 / 1.0) + 0.5 / (10 / 1.2)))
    # the bound's prefill: production's fastest per prompt token (2 ms here, not request b's 3) times each prompt
    assert e2e.at_fastest().prefill_ms == [100.0, 200.0]
    # no weights: pooled, the screen's older rule
    assert _mix.Mix(["a", "b"]).rate([(0, 60, 500.0), (1, 40, 1500.0)]) == pytest.approx(50.0)


def _result(requests: list[list[tuple]], k: int = 4) -> dict[str, Any]:
    rounds = sum(1 for r in requests for d, _a in r if d)
    drafted = sum(d for r in requests for d, _a in r)
    accepted = sum(a for r in requests for _d, a in r)
    return {"k": k, "rounds": rounds, "drafted": drafted, "accepted": accepted,
            "mean_accepted_len": 1 + accepted / max(rounds, 1), "acceptance": accepted / max(drafted, 1),
            "accept_per_pos": [0.0] * k, "requests": requests}


PLAN = {"name": "ngram-mod", "chain": ["ngram-mod"]}
STEPS = [10.0, 10.0, 10.0]
VERIFY = {1: [10.0] * 5, 5: [25.0] * 5}


def _screen_of(result: dict[str, Any], mix: _mix.Mix | None) -> dict[str, Any]:
    rows = _screen._timed(PLAN, {4: result}, {"step_ms": STEPS, "tok_s": 100.0}, VERIFY, [], {}, 0, None, mix=mix)
    counts = [_screen.tokens_of([r]) for r in result["requests"]]
    rate = mix.production_rate(counts, 10.0) if mix else 100.0
    return {"production": {"tok_s": 100.0, "endpoint": {"metric": mix.endpoint if mix else "decode", "tok_s": rate}},
            "candidates": {"ngram-mod": {"screenable": True, "k": rows, "best_k": _screen.best_k(rows)}}}


CONFIGS = [{"name": "baseline"}, {"name": "ngram-mod"}]


def _out(screen: dict[str, Any]) -> list[str]:
    return [r["name"] for r in ss.screen_select(screen, CONFIGS, "baseline", 1.2, 3)["screened_out"]]


def test_the_end_to_end_metric_screens_out_what_decode_alone_would_keep() -> None:
    # ten rounds of 4 accepted a request: 50 tokens in 250 ms of verification against production's 500 ms, 2x on
    # decode; but each prompt is 2,000 tokens that production prefills in 2,000 ms, the same on both sides: end to
    # end (2,000 + 500) / (2,000 + 250) = 1.11x, under the planned 1.2x even at the fastest timings
    result = _result([[(4, 4)] * 10, [(4, 4)] * 10])
    decode = _screen_of(result, _mix.Mix(["chat", "chat"], {"chat": 1.0}, "decode", [2000.0] * 2, [2000] * 2))
    e2e = _screen_of(result, _mix.Mix(["chat", "chat"], {"chat": 1.0}, "e2e", [2000.0] * 2, [2000] * 2))
    assert decode["candidates"]["ngram-mod"]["k"]["4"]["bound_speedup"] == pytest.approx(2.0)
    assert e2e["candidates"]["ngram-mod"]["k"]["4"]["bound_speedup"] == pytest.approx(2500 / 2250)
    assert _out(decode) == [] and _out(e2e) == ["ngram-mod"]
    why = ss.screen_select(e2e, CONFIGS, "baseline", 1.2, 3)["screened_out"][0]["why"]
    assert "predicted 1.11x" in why and "1.11x, below spec_ab_min_speedup 1.20x" in why


def test_the_declared_weights_decide_not_the_screens_own_sample() -> None:
    # the candidate doubles echo (weight 0 in the declared mix) and loses on chat, the operator's traffic: pooled
    # over the screen's own requests (echo's 500 tokens beside chat's 10) it reads 1.85x
    result = _result([[(4, 4)] * 100, [(4, 0)] * 10])
    shapes = ["echo", "chat"]
    pooled = _screen_of(result, None)
    declared = _screen_of(result, _mix.Mix(shapes, {"chat": 1.0}, "decode"))
    assert pooled["candidates"]["ngram-mod"]["k"]["4"]["bound_speedup"] > 1.2 and _out(pooled) == []
    assert declared["candidates"]["ngram-mod"]["k"]["4"]["bound_speedup"] == pytest.approx(10.0 / 25.0)
    assert _out(declared) == ["ngram-mod"]


@pytest.mark.parametrize("mix, primary, expect", [
    ({}, "", {"prose": 0.5, "echo": 0.5}),
    ({"prose": 2}, "", {"prose": 0.5, "support": 0.5}),
    ({}, "support", {"support": 1.0}),
])
def test_the_screens_weights_are_the_verdicts(mix: dict, primary: str, expect: dict) -> None:
    traffic = [{"name": "support", "file": "/ctl/support.jsonl", "n_predict": 48, "weight": 2}] if mix else []
    if primary:
        traffic = [{"name": "support", "file": "/ctl/support.jsonl", "n_predict": 48}]
    got = ss.screen_traffic(traffic, mix, ["prose", "echo"], primary, "e2e")
    assert got["weights"] == pytest.approx(expect) and got["metric"] == "e2e"
    run_mix = {**mix, **({"support": 2.0} if mix else {})}
    total = sum(run_mix.values())
    want, source = _confirm.weights_of({s: w / total for s, w in run_mix.items()} or None,
                                       ["prose", "echo", *(t["name"] for t in traffic)], {"primary_shape": primary})
    assert got["weights"] == pytest.approx(want) and got["weights_from"] == source
    assert got["declared"] is bool(mix or primary)
    if not mix and not primary:
        assert "the built-in mix" in got["line"] and got["shapes"] == ["prose", "echo"] and got["custom"] == []
    else:
        assert "support" in got["custom"]


def test_the_plan_and_the_report_say_which_traffic_and_metric_the_screen_judged() -> None:
    judged = ss.screen_traffic([{"name": "support", "file": "/ctl/s.jsonl", "n_predict": 48, "weight": 1}], {},
                               ["prose", "echo"], "", "e2e")
    candidates = [{"name": "ngram-mod", "env": {"LLAMA_ARG_SPEC_TYPE": "ngram-mod"}}]
    estimate = ss.screen_estimate(candidates, ["prose", "echo"], 2, None, None, 0, judged,
                                  [{"name": "support", "file": "/ctl/s.jsonl", "n_predict": 48, "weight": 1}])
    # two requests of the declared shape at its own n_predict; no built-in shape sent
    assert estimate["requests"] == 2 and estimate["tokens"] == 96
    line = ss.screen_estimate_line(estimate)
    assert "endpoint e2e tokens/s over support 100% (the declared traffic mix" in line
    built_in = ss.screen_traffic([], {}, ["prose", "echo"], "", "e2e")
    assert "the built-in mix" in ss.screen_estimate_line(ss.screen_estimate(candidates, ["prose", "echo"], 2,
                                                                            judged=built_in))
    result = _result([[(4, 4)] * 10, [(4, 4)] * 10])
    screen = _screen_of(result, _mix.Mix(["support", "support"], {"support": 1.0}, "e2e", [200.0] * 2, [200] * 2))
    decision = dict(ss.screen_select(screen, CONFIGS, "baseline", 1.2, 3), screen=screen, traffic=judged)
    assert decision["metric"] == "e2e"
    lines = _report._screen_lines({"screen": decision})
    assert "(e2e) on the screen's requests; the screen judges endpoint e2e tokens/s over support 100%" in lines[0]
    # a screen recorded before: the built-in shapes, decode, as before
    assert "(the built-in shapes, decode)" in _report._screen_lines({"screen": {k: v for k, v in decision.items()
                                                                                if k != "traffic"}})[0]
