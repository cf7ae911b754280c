"""The A/B's screen steps (plugin_utils/steps/_steps_screen.py): which candidates the rounds measure."""
from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.llmfleet.specdec.plugins.plugin_utils.steps import _steps_screen as ss


def _row(tok_s: float, low: float, high: float, k: int = 4, length: float = 3.0) -> dict:
    return {"screenable": True, "best_k": k, "k": {str(k): {"predicted_tok_s": tok_s, "low": low, "high": high,
                                                            "mean_accepted_len": length}}}


CONFIGS = [{"name": "baseline", "env": {}},
           {"name": "d@n=2", "base": "d", "env": {"LLAMA_ARG_SPEC_TYPE": "draft-simple", "LLAMA_ARG_SPEC_DRAFT_N_MAX": "2"}},
           {"name": "d@n=4", "base": "d", "env": {"LLAMA_ARG_SPEC_TYPE": "draft-simple", "LLAMA_ARG_SPEC_DRAFT_N_MAX": "4"}},
           {"name": "d@n=8", "base": "d", "env": {"LLAMA_ARG_SPEC_TYPE": "draft-simple", "LLAMA_ARG_SPEC_DRAFT_N_MAX": "8"}},
           {"name": "slow", "env": {"LLAMA_ARG_SPEC_TYPE": "ngram-mod"}},
           {"name": "mtp", "env": {"LLAMA_ARG_SPEC_TYPE": "draft-mtp"}}]


def test_only_candidates_that_can_win_get_restarts_and_a_sweep_keeps_every_depth_its_bound_allows() -> None:
    screen = {"production": {"tok_s": 20.0}, "restarts": 0, "candidates": {
        "d@n=2": _row(30.0, 28.0, 32.0, 2), "d@n=4": _row(40.0, 37.0, 43.0), "d@n=8": _row(38.0, 35.0, 41.0, 8),
        "slow": _row(19.0, 17.0, 21.0, 16), "mtp": {"screenable": False, "why": "hidden states"}}}
    out = ss.screen_select(screen, CONFIGS, "baseline", 1.2, 3)
    # every depth whose bound reaches 1.2x goes to the rounds, whatever the best depth's prediction says (issue 45:
    # only a bound load cannot lower screens out; d@n=2's bound is under d@n=4's predicted low end and still kept)
    assert out["keep"] == ["baseline", "d@n=2", "d@n=4", "d@n=8", "mtp"]  # mtp cannot be replayed
    assert [r["name"] for r in out["screened_out"]] == ["slow"]
    assert "below spec_ab_min_speedup" in out["screened_out"][0]["why"]
    assert out["unscreened"] == [{"name": "mtp", "why": "hidden states"}] and out["restarts_saved"] == 3


def test_the_configs_go_to_the_screen_at_their_own_depth() -> None:
    got = ss.screen_candidates(CONFIGS, "baseline")
    assert [c["name"] for c in got] == ["d@n=2", "d@n=4", "d@n=8", "slow", "mtp"]
    assert got[0]["ks"] == [2] and "ks" not in got[3]
    with pytest.raises(AnsibleFilterError):
        ss.screen_candidates("nope", "baseline")


def test_the_preflights_kv_fit_goes_to_the_screen() -> None:
    preflight = [{"name": "d@n=2", "fits": False}, {"name": "d@n=4", "fits": True}, {"name": "slow", "fits": None}]
    got = {c["name"]: c for c in ss.screen_candidates(CONFIGS, "baseline", preflight)}
    assert got["d@n=2"]["fits"] is False
    assert "fits" not in got["d@n=4"] and "fits" not in got["slow"] and "fits" not in got["mtp"]


@pytest.mark.parametrize("unit, binary", [
    ({"kind": "launcher", "engine": "llamacpp", "launcher": "/usr/local/libexec/x/llamacpp-serve-exec",
      "argv": ["/usr/bin/python3", "/usr/local/libexec/x/llamacpp-serve-exec", "/opt/llama.cpp/current/bin/llama-server"]},
     "/opt/llama.cpp/current/bin/llama-server"),
    ({"kind": "direct", "engine": "llamacpp", "server_at": 0, "argv": ["/opt/bin/llama-server", "-m", "/m.gguf"]},
     "/opt/bin/llama-server"),
    ({"kind": "container", "engine": "llamacpp", "argv": ["/usr/bin/podman", "run", "img"]}, None),
    ({"kind": "direct", "engine": "vllm", "server_at": 0, "argv": ["/usr/bin/vllm", "serve"]}, None),
    ({}, None),
])
def test_the_drafter_runs_productions_own_binary(unit: dict, binary: str | None) -> None:
    assert ss.screen_binary(unit) == binary


def test_the_answer_comes_first_in_the_field_notes_order() -> None:
    from ansible_collections.llmfleet.specdec.plugins.module_utils.bench import _breakeven as be

    report = be.assess(t_s=40.0, d_s=5.0, incumbent_rate=25.0, ks=[1, 3, 7], drafter="draft-simple")
    results = [{"name": "baseline", "legal": True, "effective_chain": []},
               {"name": "d", "legal": True, "effective_chain": ["draft-simple"], "fits": True, "kv_bytes": 2 * 1048576,
                "breakeven": report},
               {"name": "slow", "legal": True, "effective_chain": ["ngram-mod"], "fits": False, "breakeven": {}},
               {"name": "mtp", "legal": True, "effective_chain": ["draft-mtp"], "fits": None},
               {"name": "bad", "legal": False, "effective_chain": ["draft-simple"]}]
    row = _row(60.0, 50.0, 70.0, k=3, length=2.5)
    row["k"]["3"]["accept_per_pos"] = [0.8, 0.6, 0.4]
    decision = {"screen": {"production": {"tok_s": 30.0},
                           "candidates": {"d": row, "mtp": {"screenable": False, "why": "reads the hidden states"},
                                          "slow": _row(20.0, 18.0, 22.0, k=16)}},
                "screened_out": [{"name": "slow", "why": "its upper bound is below spec_ab_min_speedup"}]}
    lines = ss.first_lines(results, decision, 5)
    assert [line for line in lines if not line.startswith("  ")] == ["d:", "slow:", "mtp:"]  # speculative, legal
    d = lines[1:6]
    assert [line.strip()[:2] for line in d] == ["1.", "2.", "3.", "4.", "5."]
    assert "incumbent 25.0 tok/s" in d[0]
    assert "K=1 p=" in d[1] and "K=3 p=" in d[1] and "K=7 p=" in d[1]
    assert "mean accepted length 2.50 at K=3" in d[2] and "0.80, 0.60, 0.40" in d[2] and "2.00x production" in d[2]
    assert d[3] == "  4. fit: fits beside the weights (2.0 MiB of KV)"
    assert d[4] == "  5. what settles it: the confirming A/B on the production unit (up to 5 restarts for this candidate)"
    slow = lines[7:12]
    assert "not computed" in slow[1] and "DOES NOT FIT" in slow[3] and "SCREENED OUT" in slow[4]
    assert "reads the hidden states" in lines[15] and "unknown" in lines[16]
    # the preflight alone (no screen): the acceptance is said to be unmeasured, with the honest band's word
    alone = ss.first_lines(results)
    assert "acceptance not measured yet" in alone[3] and "honest band" in alone[3]
    assert alone[5] == "  5. what settles it: the confirming A/B on the production unit"
    with pytest.raises(AnsibleFilterError):
        ss.first_lines("nope")


def test_a_launcher_that_names_no_binary_gives_the_running_servers_own() -> None:
    unit = {"kind": "launcher", "engine": "llamacpp", "launcher": "/usr/local/libexec/x/llamacpp-serve-exec",
            "argv": ["/usr/local/libexec/x/llamacpp-serve-exec"],
            "running": {"pid": 7, "argv": ["/opt/llama.cpp/b1/bin/llama-server", "--port", "8080"]}}
    assert ss.screen_binary(unit) == "/opt/llama.cpp/b1/bin/llama-server"
    assert ss.screen_binary(dict(unit, running={"argv": ["/usr/bin/python3", "x"]})) is None
    assert ss.screen_binary(dict(unit, running=None)) is None


def test_without_operator_timings_the_break_even_comes_from_the_screens_own_steps() -> None:
    results = [{"name": "d", "legal": True, "effective_chain": ["draft-simple"], "fits": True, "breakeven": {}}]
    row = _row(60.0, 50.0, 70.0, k=3, length=2.5)
    row["d_s_ms"] = 5.0
    decision = {"screen": {"production": {"tok_s": 25.0, "t_s_ms": 40.0}, "candidates": {"d": row}}}
    lines = ss.first_lines(results, decision, 3)
    assert "K=1 p=" in lines[2] and "K=3 p=" in lines[2] and "K=7 p=" in lines[2], lines


def test_an_ngram_candidate_whose_step_is_zero_still_gets_its_break_even() -> None:
    results = [{"name": "n", "legal": True, "effective_chain": ["ngram-mod"], "fits": True, "breakeven": {}}]
    row = _row(60.0, 50.0, 70.0, k=16, length=3.0)
    row["d_s_ms"] = 0.0  # what the screen reports for an n-gram proposer
    decision = {"screen": {"production": {"tok_s": 25.0, "t_s_ms": 40.0}, "candidates": {"n": row}}}
    lines = ss.first_lines(results, decision, 3)
    assert "K=1 p=" in lines[2] and "K=7 p=" in lines[2], lines
    # production's own step missing or zero: not computed, never an error that stops the run
    decision["screen"]["production"]["t_s_ms"] = 0.0
    assert "not computed" in ss.first_lines(results, decision, 3)[2]


def _bounded(tok_s: float, low: float, high: float, bound: float, k: int = 4, why: str | None = None) -> dict:
    row = _row(tok_s, low, high, k)
    row["k"][str(k)].update(bound_tok_s=bound * 20.0, bound_speedup=bound, unreliable=why is not None,
                            unreliable_why=why)
    return row


def test_only_the_bound_screens_out_and_an_unreliable_timing_goes_to_the_rounds() -> None:
    configs = [{"name": "baseline", "env": {}}, {"name": "busy", "env": {}}, {"name": "low-but-bound", "env": {}},
               {"name": "hopeless", "env": {}}]
    screen = {"production": {"tok_s": 20.0}, "restarts": 0, "candidates": {
        # the win bed on a busy host: predicted 0.15x, but its timings were spread
        "busy": _bounded(3.0, 2.0, 13.0, 0.6, why="production's step: median 268 ms is 20.6x its fastest"),
        # a prediction below the planned speedup whose bound at the fastest timings still reaches it
        "low-but-bound": _bounded(18.0, 16.0, 21.0, 1.3),
        "hopeless": _bounded(10.0, 9.0, 11.0, 0.9)}}
    out = ss.screen_select(screen, configs, "baseline", 1.2, 3)
    assert out["keep"] == ["baseline", "busy", "low-but-bound"]
    assert [r["name"] for r in out["screened_out"]] == ["hopeless"]
    assert "0.90x" in out["screened_out"][0]["why"] and "fastest of every repeated timing" in out["screened_out"][0]["why"]
    assert out["unreliable"] == [{"name": "busy", "why": "production's step: median 268 ms is 20.6x its fastest",
                                  "bound_speedup": 0.6, "speedup": 0.15}]
    assert out["restarts_saved"] == 3


def test_a_candidate_without_a_prediction_is_never_screened_on_it() -> None:
    configs = [{"name": "baseline", "env": {}}, {"name": "x", "env": {}}]
    row = _bounded(1.0, 1.0, 1.0, 2.0, why="the replay's rounds timed at no time per token: no prediction")
    row["k"]["4"].update(predicted_tok_s=None, low=None, high=None)
    out = ss.screen_select({"production": {"tok_s": 20.0}, "candidates": {"x": row}}, configs, "baseline", 1.2, 3)
    assert out["keep"] == ["baseline", "x"] and out["unreliable"][0]["name"] == "x"


def test_the_screens_cost_is_planned_before_it_runs_and_said_after() -> None:
    drafts = [dict(c, env={**c["env"], "LLAMA_ARG_SPEC_DRAFT_MODEL": "/m/d.gguf"}) if c.get("base") else c
              for c in CONFIGS]
    candidates = ss.screen_candidates(drafts, "baseline")  # three draft depths, an n-gram, an MTP head
    sizes = {"prose": {"chars": 400, "n_predict": 64}, "structured": {"chars": 300, "n_predict": 32}}
    plan = ss.screen_estimate(candidates, ["prose", "structured"], 2, sizes, None)
    assert plan["requests"] == 4 and plan["tokens"] == 2 * 64 + 2 * 32 and plan["restarts"] == 0
    # the three drafts are one side server each (no model file is read here), the copy twice plus twice per draft
    assert plan["side_servers"] == 3 and plan["copy_starts"] == 2 + 2 * 3 and plan["seconds"] is None
    # ngram-mod's own K 64: batches 1..17 and 65, five repeats each, after the prefix
    assert plan["batches"] == 5 * (17 + 1) + 1
    timed = ss.screen_estimate(candidates, ["prose", "structured"], 2, sizes, "60.0")
    assert timed["seconds"] > (plan["tokens"] + plan["copy_tokens"]) / 60.0
    line = ss.screen_estimate_line(timed, 41.7)
    assert "no production restart" in line and "4 requests to production (192 tokens)" in line
    assert line.endswith("it took 42 s") and ss.screen_estimate_line(None) == "screen: not run"


def test_the_report_says_which_kept_candidates_the_host_was_too_busy_to_time() -> None:
    import json
    from pathlib import Path

    from ansible_collections.llmfleet.specdec.plugins.plugin_utils.report import _report

    # the recorded win-bed screen (busy host): every candidate unreliable, so none screened out even at 1.2x
    screen = json.loads((Path(__file__).parent / "fixtures" / "screen" / "win_screen.json").read_text())["screen"]
    configs = [{"name": "baseline", "env": {}}, *({"name": n, "env": {}} for n in screen["candidates"])]
    decision = dict(ss.screen_select(screen, configs, "baseline", 1.2, 3), screen=screen)
    assert decision["screened_out"] == [] and len(decision["unreliable"]) == 3
    rows = {line.split(" | ", maxsplit=1)[0][2:]: line for line in _report._screen_lines({"screen": decision})
            if "| measured |" in line}
    assert set(rows) == set(screen["candidates"]) and all("UNRELIABLE, the host was busy" in r for r in rows.values())
    # the same screen on a host it could trust: the noisy draft's bound (1.11x) is below 1.2x, the others' above
    for row in screen["candidates"].values():
        for k in row["k"].values():
            k.update(unreliable=False, unreliable_why=None)
    decision = dict(ss.screen_select(screen, configs, "baseline", 1.2, 3), screen=screen)
    assert [r["name"] for r in decision["screened_out"]] == ["draft-noisy-n4"]
    lines = _report._screen_lines({"screen": decision})
    assert any("draft-n4 | measured" in line and "at most 3.64x at the fastest timings" in line for line in lines)
