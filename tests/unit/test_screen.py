"""The screen's replay (module_utils/screen/_screen.py, _ngram.py) against a recorded real run: production's greedy tokens
and the real llama-server's own per-request draft_n / draft_n_accepted with each n-gram proposer loaded
(tests/unit/fixtures/screen/ngram_run.json, recorded by tests/testbed/record_screen.py); and the replay's rules."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from ansible_collections.llmfleet.specdec.plugins.module_utils.llamacpp import _ngram
from ansible_collections.llmfleet.specdec.plugins.module_utils.screen import _screen

RUN = json.loads((Path(__file__).parent / "fixtures" / "screen" / "ngram_run.json").read_text())


def _flag(args: list[str], name: str) -> int:
    return int(args[args.index(name) + 1])


def test_ngram_mod_replays_the_servers_own_counters() -> None:
    args = RUN["served"]["ngram-mod"]["args"]
    replayed = _screen.replay_ngram(RUN["continuations"], "ngram-mod",
                                    {"n_match": _flag(args, "--spec-ngram-mod-n-match"),
                                     "n_min": _flag(args, "--spec-ngram-mod-n-min")},
                                    _flag(args, "--spec-ngram-mod-n-max"))
    served = RUN["served"]["ngram-mod"]["requests"]
    got = [(sum(d for d, _a in steps), sum(a for _d, a in steps)) for steps in replayed["requests"]]
    assert got == [(r["draft_n"], r["draft_n_accepted"]) for r in served]


def test_ngram_simple_replays_the_servers_own_counters() -> None:
    args = RUN["served"]["ngram-simple"]["args"]
    replayed = _screen.replay_ngram(RUN["continuations"], "ngram-simple",
                                    {"size_n": _flag(args, "--spec-ngram-simple-size-n")},
                                    _flag(args, "--spec-ngram-simple-size-m"))
    served = RUN["served"]["ngram-simple"]["requests"]
    got = [(sum(d for d, _a in steps), sum(a for _d, a in steps)) for steps in replayed["requests"]]
    assert got == [(r["draft_n"], r["draft_n_accepted"]) for r in served]


@pytest.mark.parametrize("spec_type", ["ngram-map-k", "ngram-map-k4v"])
def test_ngram_map_replays_the_servers_own_counters(spec_type: str) -> None:
    args = RUN["served"][spec_type]["args"]
    plan = _screen.candidate_plan({"name": spec_type, "flags": args})  # the flags read as the screen reads them
    assert plan["screenable"] is True and plan["ks"] == [_flag(args, f"--spec-{spec_type}-size-m")]
    assert plan["ngram"][spec_type]["size_n"] == _flag(args, f"--spec-{spec_type}-size-n")
    replayed = _screen.replay_ngram(RUN["continuations"], spec_type, plan["ngram"][spec_type], plan["ks"][0])
    served = RUN["served"][spec_type]["requests"]
    got = [(sum(d for d, _a in steps), sum(a for _d, a in steps)) for steps in replayed["requests"]]
    assert got == [(r["draft_n"], r["draft_n_accepted"]) for r in served]


def test_ngram_map_k4v_min_hits_changes_what_is_drafted() -> None:
    # the recorded k4v run asks two hits of a key: it drafts less than map-k on the same tokens
    k4v = [r["draft_n"] for r in RUN["served"]["ngram-map-k4v"]["requests"]]
    k = [r["draft_n"] for r in RUN["served"]["ngram-map-k"]["requests"]]
    assert sum(k4v) < sum(k)


def test_ngram_map_rules_are_llama_cpps() -> None:
    # hash: uint32 LCG with factor 2654435761, then mod 2^18 slots
    assert _ngram._map_hash([5, 7], 0, 2) == (5 * 2654435761 + 7) % (1 << 32)
    ngram = _ngram.NgramMap(size_n=2, size_m=2, key_only=True)
    history = [9, 1, 2, 3, 4, 8, 8, 8, 1]  # key (1, 2) at 1 is followed by 3, 4
    ngram.begin(history[:6])  # the prompt: searched from its end back, as llama.cpp does
    assert ngram.draft(history[:5], 0) == []  # fewer than 2n + m tokens: nothing
    assert ngram.draft(history, 2) == [3, 4]
    ngram.accept(1)  # the key's next draft is capped at what was accepted
    assert ngram.draft([*history, 2, 7], 1) == []  # (7, 1) unknown
    assert ngram.draft([*history, 2, 7, 1], 2) == [3]
    ngram.accept(0)
    assert ngram.draft([*history, 2, 7, 1, 2, 5, 1], 2) == []  # accepted nothing last time: drafts nothing


def test_ngram_cache_replays_the_servers_own_counters() -> None:
    args = RUN["served"]["ngram-cache"]["args"]
    plan = _screen.candidate_plan({"name": "cache", "flags": args})
    assert plan["screenable"] is True and plan["ks"] == [8]  # n_draft is fixed at 8 in the pinned tree
    replayed = _screen.replay_ngram(RUN["continuations"], "ngram-cache", plan["ngram"]["ngram-cache"], 8)
    served = RUN["served"]["ngram-cache"]["requests"]
    got = [(sum(d for d, _a in steps), sum(a for _d, a in steps)) for steps in replayed["requests"]]
    # the server drafts nothing on this run: its context cache learns the prompt, then only the tokens past its
    # size in batches (one token a step when nothing is accepted, too few for any n-gram), and the demo target's
    # continuations repeat no n-gram of their prompts; the port must draft nothing either
    assert got == [(r["draft_n"], r["draft_n_accepted"]) for r in served]


def test_ngram_cache_rules_are_llama_cpps() -> None:
    cache = _ngram.NgramCache()
    history = [1, 2, 3, 4, 1, 2, 3, 5, 1, 2, 3, 4, 1, 2, 3, 5, 1, 2, 3, 4]
    # the longest n-gram with a clear majority wins at each step: (1, 2, 3, 4) -> 1, ..., (4, 1, 2, 3) -> 5
    assert cache.draft(history[:-1], history[-1]) == [1, 2, 3, 5, 1, 2, 3, 4]
    assert cache.cache_size == len(history)
    # one new token: no n-gram inside it, so the cache learns nothing (as llama.cpp's update of the new tokens)
    assert cache.draft(history, 9) == []
    assert cache.draft([*history, 9], 9) == []
    assert _ngram.NgramCache().draft([], 7) == []  # fewer than two tokens: nothing


def test_ngram_cache_tie_goes_to_the_token_seen_later() -> None:
    cache = _ngram.NgramCache()
    # (7, 8) was followed by 1 then by 2: 50 % each passes the 2-gram's lax threshold; libstdc++ lists 2 first
    assert cache.draft([7, 8, 1, 7, 8, 2, 5, 7], 8)[:1] == [2]


def test_ngram_cache_with_cache_files_is_not_screened() -> None:
    plan = _screen.candidate_plan({"name": "c", "env": {"LLAMA_ARG_SPEC_TYPE": "ngram-cache"},
                                   "flags": ["--lookup-cache-static", "/srv/static.bin"]})
    assert plan["screenable"] is False and "--lookup-cache-static" in plan["why"]
    with pytest.raises(_screen.ScreenError, match="lookup-cache"):
        _screen.ngram_proposer("ngram-cache", {"files": 1}, 8)


def test_every_k_of_a_sweep_from_one_set_of_proposals() -> None:
    # a drafter whose greedy continuation is always the target's next 2 tokens, then wrong ones
    target = list(range(100, 140))
    cont = [{"prompt": [1, 2, 3], "tokens": target, "budget": len(target)}]
    asked = []

    def propose(context, k, room):
        asked.append(len(context))
        i = len(context) - 3
        return (target[i:i + 2] + [0] * 8)[:k]

    one = _screen.replay(cont, propose, 1)
    three = _screen.replay(cont, propose, 3)
    assert one["accept_per_pos"] == [1.0] and one["mean_accepted_len"] == 2.0
    assert three["accept_per_pos"] == [1.0, 1.0, 0.0] and three["mean_accepted_len"] == 3.0
    # the budget: no draft longer than what is left less one, and the slot moves by accepted + 1
    assert sum(a + 1 for d, a in three["requests"][0] if d) + sum(1 for d, _a in three["requests"][0] if not d) == 39
    assert all(d <= 3 for d, _a in three["requests"][0])


def test_draft_model_stopping_rules_and_caching() -> None:
    class Client:
        calls = 0

        def _json(self, method, path, body):
            Client.calls += 1
            return {"tokens": [7, 8, 9, 10], "timings": {"predicted_n": 4, "predicted_ms": 8.0},
                    "completion_probabilities": [{"top_logprobs": [{"logprob": -0.01}]},
                                                 {"top_logprobs": [{"logprob": -0.02}]},
                                                 {"top_logprobs": [{"logprob": -3.0}]},
                                                 {"top_logprobs": [{"logprob": -0.01}]}]}

    model = _screen.DraftModel(Client(), 4, p_min=0.5, n_min=0)
    assert model.propose([1, 2], 4, 4) == [7, 8]  # stopped at the first token below p_min
    assert model.propose([1, 2], 1, 4) == [7] and Client.calls == 1  # cached: one request per prefix
    # 4 tokens in 8 ms: the first came from the prefill, so the timing covers 3 steps
    assert model.step_ms == [8.0 / 3]
    strict = _screen.DraftModel(Client(), 4, p_min=0.5, n_min=3)
    assert strict.propose([1, 2, 3], 4, 4) == []  # shorter than n_min: no draft


@pytest.mark.parametrize("env, why", [
    ({"LLAMA_ARG_SPEC_TYPE": "draft-eagle3"}, "hidden states"),
    ({"LLAMA_ARG_SPEC_TYPE": "draft-mtp"}, "hidden states"),
    ({"LLAMA_ARG_SPEC_TYPE": "ngram-map-k,ngram-mod"}, "chain"),
    ({"LLAMA_ARG_SPEC_TYPE": "ngram-mod,draft-simple"}, "chain"),
    ({"LLAMA_ARG_SPEC_TYPE": "draft-simple"}, "without a draft model"),
    ({}, "nothing to screen"),
])
def test_what_cannot_be_screened_says_why(env: dict, why: str) -> None:
    plan = _screen.candidate_plan({"name": "c", "env": env})
    assert plan["screenable"] is False and why in plan["why"]


def test_a_drafter_that_does_not_fit_beside_production_gets_no_side_server() -> None:
    env = {"LLAMA_ARG_SPEC_TYPE": "draft-simple", "LLAMA_ARG_SPEC_DRAFT_MODEL": "/m/d.gguf"}
    plan = _screen.candidate_plan({"name": "big", "env": env, "fits": False})
    assert plan["screenable"] is False and "candidate big: kv_budget" in plan["why"] and "does not fit" in plan["why"]
    assert _screen.candidate_plan({"name": "ok", "env": env, "fits": True})["screenable"] is True
    assert _screen.candidate_plan({"name": "ok", "env": env})["screenable"] is True  # unknown fit: screened
    # an n-gram proposer needs no side server: its fit is the A/B's question, not the screen's
    assert _screen.candidate_plan({"name": "n", "env": {"LLAMA_ARG_SPEC_TYPE": "ngram-mod"}, "fits": False})["screenable"]


def test_candidate_errors_takes_fail_or_report() -> None:
    with pytest.raises(_screen.ScreenError, match="candidate_errors: 'skip' is not fail or report"):
        _screen.run_screen("http://127.0.0.1:9", [{"name": "a"}], candidate_errors="skip")


def test_the_ngram_mod_hash_is_llama_cpps() -> None:
    mod = _ngram.NgramMod(n_match=2, n_max=4, n_min=1)
    # res = (0 * LCG + 5) * LCG + 7 mod 2^64, then mod the table's size
    expected = ((5 * 6364136223846793005 + 7) % (1 << 64)) % (4 * 1024 * 1024)
    assert mod._idx([5, 7], 0) == expected
    mod.begin([5, 7, 9, 5, 7])
    assert mod.draft([1, 5], 7) == [9, 5, 7, 9]  # (5, 7) -> 9, (7, 9) -> 5, (9, 5) -> 7, (5, 7) -> 9: n_max 4
    assert mod.draft([1, 3], 4) == []  # (3, 4) unknown before n_min: no draft


def test_a_step_is_the_decode_time_over_the_tokens_after_the_first() -> None:
    # 65 tokens in 64 ms: the first came from the prefill, 64 decode steps of 1 ms
    assert _screen.step_of({"predicted_n": 65, "predicted_ms": 64.0}) == 1.0
    assert _screen.step_of({"predicted_n": 1, "predicted_ms": 5.0}) is None
    assert _screen.step_of({"predicted_n": 9, "predicted_ms": 0.0}) is None


def test_a_spread_of_repeats_says_busy_not_a_median() -> None:
    from ansible_collections.llmfleet.specdec.plugins.module_utils.screen._host_load import spread

    # the production step: four near 13 ms, four at 520-830 ms
    steps = [13.1, 12.9, 13.4, 13.0, 520.0, 610.0, 700.0, 830.0]
    got = spread(steps, "production's step")
    assert got["busy"] and got["fastest"] == 12.9 and "production's step" in got["why"]
    assert not spread([13.1, 12.9, 13.4, 13.0, 14.2, 13.8], "quiet")["busy"]
    one_slow = spread([13.0, 13.2, 13.1, 13.3, 45.0], "one slow")
    assert one_slow["busy"] and "slowest" in one_slow["why"]
    assert not spread([13.0], "one")["busy"] and "no spread" in spread([13.0], "one")["why"]


def test_the_hosts_other_work_is_read_from_proc(tmp_path: Path) -> None:
    from ansible_collections.llmfleet.specdec.plugins.module_utils.screen import _host_load

    assert _host_load.cpu_ticks("cpu  100 0 50 800 50 0 0 0 0 0\ncpu0 1 2 3 4\n") == (1000, 150)
    assert _host_load.pid_ticks("42 (llama (server)) S 1 2 3 4 5 6 7 8 9 10 70 30 0 0") == 100
    # two CPUs over 100 ticks of wall time each; 150 busy ticks of which production and the screen took 40
    before = {"cpu": (1000, 100), "pids": {7: 10, 8: 0}, "loadavg": 0.5, "t": 0.0}
    after = {"cpu": (1200, 250), "pids": {7: 40, 8: 10, 9: 0}, "loadavg": 1.5, "t": 1.0}
    got = _host_load.reading("production's timing", before, after, cpus=2)
    assert got["other_cores"] == pytest.approx(1.1) and got["busy"] and "1.10 cores" in got["why"]
    quiet = _host_load.reading("q", before, {**after, "cpu": (1200, 140)}, cpus=2)
    assert quiet["other_cores"] == 0.0 and not quiet["busy"]
    unread = _host_load.reading("q", {"cpu": None}, {"cpu": None}, cpus=2)
    assert unread["other_cores"] is None and not unread["busy"] and "not measured" in unread["why"]
    # a real reading of this host: numbers, whatever they are
    (tmp_path / "stat").write_text("cpu  100 0 50 800 50 0 0 0 0 0\n")
    (tmp_path / "loadavg").write_text("0.25 0.20 0.10 1/100 4242\n")
    load = _host_load.HostLoad("fake", proc=str(tmp_path)).start()
    assert load.stop()["loadavg_before"] == 0.25


def test_a_prediction_is_never_a_rate_of_zero() -> None:
    result = {"k": 2, "requests": [[(2, 2), (0, 0)]] * 3}
    got = _screen.predict(result, [0.0], {1: [0.0], 3: [0.0]}, [], {}, 0)
    assert got["predicted_tok_s"] is None and got["low"] is None and "no time per token" in got["invalid"]
    fine = _screen.predict(result, [1.0], {1: [1.0], 3: [2.0]}, [], {}, 0)
    assert fine["low"] > 0 and "invalid" not in fine


def test_a_busy_timing_marks_every_k_unreliable_and_keeps_the_bound() -> None:
    plan = {"name": "d", "chain": ["ngram-mod"]}
    replays = {2: {"k": 2, "requests": [[(2, 2), (2, 1), (0, 0)]] * 4, "rounds": 8, "drafted": 16, "accepted": 12,
                   "mean_accepted_len": 2.5, "acceptance": 0.75, "accept_per_pos": [1.0, 0.5]}}
    prod = {"step_ms": [1.0, 1.1], "tok_s": 1000.0 / 1.05}
    rows = _screen._timed(plan, replays, prod, {1: [1.0], 3: [2.0]}, [], {}, 0, busy=["production's step: busy"])
    assert rows["2"]["unreliable"] and rows["2"]["unreliable_why"] == "production's step: busy"
    assert rows["2"]["bound_speedup"] == pytest.approx(6 / 5.0)
    quiet = _screen._timed(plan, replays, prod, {1: [1.0], 3: [2.0]}, [], {}, 0)
    assert quiet["2"]["unreliable"] is False and quiet["2"]["unreliable_why"] is None


def test_productions_steps_and_its_other_clients_are_read_per_request() -> None:
    # production as the screen sees it (the replies' shape is llama-server's): another client's request starts
    # while the second is decoding (/slots says so from then on)
    class Production:
        shown_url = "http://127.0.0.1:8080"
        sent = 0

        def slots(self):
            return [{"id": 0, "is_processing": False}, {"id": 1, "is_processing": self.sent == 2}]

        def request(self, method, path, body=None):
            return 404, b""

        def _json(self, method, path, body=None, ok_missing=False):
            if path == "/tokenize":
                return {"tokens": [1, 2, 3]}
            self.sent += 1
            return {"tokens": list(range(65)), "timings": {"predicted_n": 65, "predicted_ms": 64 * 13.0}}

    prompts = [{"shape": "prose", "text": "a", "n_predict": 65}, {"shape": "prose", "text": "b", "n_predict": 65},
               {"shape": "prose", "text": "c", "n_predict": 65}]
    got = _screen.production_continuations(Production(), prompts)
    assert got["step_ms"] == [13.0, 13.0, 13.0] and got["rates"] == [1000 / 13.0] * 3
    # the other client's request was in flight when the second ended and when the third was sent
    assert got["concurrent"][0] is None
    assert "1 other request(s) in flight when it ended" in got["concurrent"][1]
    assert "1 other request(s) in flight when it was sent" in got["concurrent"][2]


def test_a_server_whose_process_is_not_visible_leaves_the_hosts_load_unjudged(tmp_path: Path) -> None:
    from ansible_collections.llmfleet.specdec.plugins.module_utils.screen import _host_load

    proc = tmp_path / "proc"
    (proc / "net").mkdir(parents=True)
    line = f"   0: 0100007F:{8093:04X} 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 777 1"
    (proc / "net" / "tcp").write_text("  sl  local_address rem_address   st\n" + line + "\n")
    (proc / "net" / "tcp6").write_text("header\n")
    (proc / "4242" / "fd").mkdir(parents=True)
    (proc / "4242" / "fd" / "3").symlink_to("socket:[777]")
    (proc / "4242" / "stat").write_text("4242 (llama-server) S 1 2 3 4 5 6 7 8 9 10 500 100 0 0")
    (proc / "stat").write_text("cpu  100 0 50 800 50 0 0 0 0 0\n")
    (proc / "loadavg").write_text("3.5 3.0 2.0 1/100 4242\n")
    assert _host_load.pids_on_port(8093, str(proc)) == [4242]
    seen = _host_load.HostLoad("production's timing", proc=str(proc), ports=[8093]).start()
    assert seen.before["pids"][4242] == 600 and seen.before["unseen"] == []
    unseen = _host_load.HostLoad("production's timing", proc=str(proc), ports=[8094]).start()
    # production in another namespace: its own CPU would count as others', so the load is not judged
    got = _host_load.reading("production's timing", {**unseen.before, "cpu": (1000, 100)},
                             {**unseen.before, "cpu": (1200, 300)}, cpus=2)
    assert got["other_cores"] == 2.0 and got["busy"] is False and "port 8094" in got["why"]
