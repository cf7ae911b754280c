"""spec_screen against the real llama-server: the replay's acceptance against the server's own counters with the
candidate loaded, on the same prompt tokens (the oracle: per-request draft_n / draft_n_accepted and /metrics)."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from ansible_collections.llmfleet.specdec.plugins.module_utils.bench._endpoint import Endpoint, plan_requests
from ansible_collections.llmfleet.specdec.plugins.module_utils.common._errors import SpecdecError
from ansible_collections.llmfleet.specdec.plugins.module_utils.screen import _screen

SIZES = {"prose": {"chars": 400, "n_predict": 48}, "echo": {"chars": 600, "n_predict": 96},
         "structured": {"chars": 300, "n_predict": 48}}
NGRAM_FLAGS = ["--spec-ngram-mod-n-match", "8", "--spec-ngram-mod-n-min", "2", "--spec-ngram-mod-n-max", "16"]


def _prompts(shapes: list[str]) -> list[dict[str, Any]]:
    _warm, schedule, _distinct = plan_requests(seed=0, sizes=SIZES, shapes=shapes, prompts_per_shape=2, repeats=1,
                                               warmup=0)
    return [{"shape": p.shape, "text": p.prompt, "n_predict": p.n_predict} for _r, p in schedule]


def _served(server: Any, conts: list[dict[str, Any]]) -> dict[str, float]:
    """The same prompt tokens sent to a server with the candidate loaded: its own counters, summed."""
    client = Endpoint(server.url, timeout=120)
    before = client.spec_counters()
    drafted = accepted = 0
    for cont in conts:
        reply = client._json("POST", "/completion", {"prompt": cont["prompt"], "n_predict": cont["budget"],
                                                     "temperature": 0.0, "cache_prompt": False,
                                                     "return_tokens": True})
        assert [int(t) for t in reply["tokens"]] == cont["tokens"]  # lossless: the replay's reference holds
        drafted += int(reply["timings"].get("draft_n") or 0)
        accepted += int(reply["timings"].get("draft_n_accepted") or 0)
    after = client.spec_counters()
    drafts = after["drafts"] - before["drafts"]
    return {"drafted": drafted, "accepted": accepted, "acceptance": accepted / drafted,
            "mean_accepted_len": 1.0 + (after["accepted_tokens"] - before["accepted_tokens"]) / drafts}


def _serving(model: Path) -> list[int]:
    """The processes running now whose command line names ``model`` (production, and any copy the screen left)."""
    import os

    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as handle:
                    words = handle.read().split(b"\0")
            except OSError:
                continue
            if str(model).encode() in words:
                found.append(int(entry))
    return sorted(found)


@pytest.fixture(scope="module")
def production(llama_server_bin: str, standard_models: dict[str, Path], tmp_path_factory: pytest.TempPathFactory):
    from testbed.server import LlamaServer

    with LlamaServer(standard_models["target.gguf"], binary=llama_server_bin, args=["-t", "1", "--metrics"],
                     log_dir=tmp_path_factory.mktemp("logs")) as server:
        conts = _screen.production_continuations(Endpoint(server.url, timeout=120), _prompts(["prose", "echo", "structured"]))
        yield server, conts


@pytest.mark.parametrize("k", [1, 3, 6])
def test_the_draft_replay_matches_the_servers_counters(production, start_server, standard_models, llama_server_bin,
                                                       k: int) -> None:
    _server, prod = production
    conts = prod["continuations"]
    port = _screen.free_port()
    side = _screen.SideServer("draft", [llama_server_bin, "-m", str(standard_models["draft.gguf"]), "--host",
                                        "127.0.0.1", "--port", str(port), "-c", "4096", "-np", "1", "-t", "1"],
                              port, launch="process")
    client = side.start()
    try:
        replayed = _screen.replay(conts, _screen.DraftModel(client, k).propose, k)
    finally:
        side.stop()
    real = _served(start_server(standard_models["target.gguf"], draft=standard_models["draft.gguf"],
                                args=["-t", "1", "--metrics", "--spec-type", "draft-simple", "--spec-draft-n-max",
                                      str(k)]), conts)
    assert replayed["drafted"] > 0
    assert abs(replayed["mean_accepted_len"] - real["mean_accepted_len"]) <= 0.10 * real["mean_accepted_len"], (replayed, real)
    assert abs(replayed["acceptance"] - real["acceptance"]) <= 0.10 * real["acceptance"], (replayed, real)


def test_the_ngram_mod_replay_matches_the_servers_counters_on_echo(production, start_server, standard_models) -> None:
    _server, prod = production
    echo = [c for c in prod["continuations"] if c["shape"] == "echo"]
    replayed = _screen.replay_ngram(echo, "ngram-mod", {"n_match": 8, "n_min": 2}, 16)
    real = _served(start_server(standard_models["target.gguf"],
                                args=["-t", "1", "--metrics", "--spec-type", "ngram-mod", *NGRAM_FLAGS]), echo)
    assert replayed["drafted"] > 0
    assert abs(replayed["mean_accepted_len"] - real["mean_accepted_len"]) <= 0.10 * real["mean_accepted_len"], (replayed, real)


def test_the_ngram_cache_replay_is_the_servers_own_counters(production, start_server, standard_models) -> None:
    server, prod = production
    client = Endpoint(server.url, timeout=120)
    # the token the target repeats most, as text, repeated in the prompts with "x"/"y" between: the context cache
    # learns n-grams the target then emits (on plain prompts the pinned tree's ngram-cache drafts nothing) and
    # meets two-way ties
    tokens = [t for c in prod["continuations"] for t in c["tokens"]]
    word = client._json("POST", "/detokenize", {"tokens": [max(set(tokens), key=tokens.count)]})["content"]
    prompts = [{"shape": "echo", "text": (word * 6 + " x") * 4 + word * 3, "n_predict": 48},
               {"shape": "echo", "text": (word * 3 + " x" + word * 3 + " y") * 4 + word, "n_predict": 48},
               {"shape": "echo", "text": (word + " x" + word + " y") * 6 + word * 2, "n_predict": 48}]
    conts = _screen.production_continuations(client, prompts)["continuations"]
    replayed = _screen.replay_ngram(conts, "ngram-cache", {}, 8)
    real = start_server(standard_models["target.gguf"], args=["-t", "1", "--metrics", "--spec-type", "ngram-cache"])
    rows = []
    for cont in conts:
        reply = Endpoint(real.url, timeout=120)._json("POST", "/completion", {
            "prompt": cont["prompt"], "n_predict": cont["budget"], "temperature": 0.0, "cache_prompt": False,
            "return_tokens": True})
        assert [int(t) for t in reply["tokens"]] == cont["tokens"]
        rows.append((int(reply["timings"].get("draft_n") or 0), int(reply["timings"].get("draft_n_accepted") or 0)))
    assert replayed["drafted"] > 0
    assert [(sum(d for d, _a in steps), sum(a for _d, a in steps)) for steps in replayed["requests"]] == rows


def test_the_module_contract_and_no_restart(production, standard_models, llama_server_bin) -> None:
    server, _prod = production
    pid = server.pid
    screen = _screen.run_screen(server.url, [
        {"name": "draft", "env": {"LLAMA_ARG_SPEC_TYPE": "draft-simple",
                                  "LLAMA_ARG_SPEC_DRAFT_MODEL": str(standard_models["draft.gguf"])}, "ks": [2, 4]},
        {"name": "ngram-mod", "env": {"LLAMA_ARG_SPEC_TYPE": "ngram-mod"}, "flags": NGRAM_FLAGS},
        {"name": "mtp", "env": {"LLAMA_ARG_SPEC_TYPE": "draft-mtp"}},
    ], llama_server=llama_server_bin, drafter_launch="process", shapes=["prose", "echo"], sizes=SIZES)
    assert screen["restarts"] == 0 and server.pid == pid and server.returncode is None and screen["elapsed_s"] > 0
    # every timing kept with its spread, and the host's other work read around each phase
    assert screen["production"]["spread"]["step"]["n"] == len(screen["production"]["step_ms"])
    assert screen["production"]["t_s_fastest_ms"] == min(screen["production"]["step_ms"])
    assert screen["production"]["load"][0]["phase"] == "production's timing"
    assert screen["production"]["t_s_ms"] > 0 and {"3", "5"} <= set(screen["production"]["verify_ms"])
    # the verification timed as real rounds on a copy of the target (production's own -t 1, on a loopback port),
    # stopped after: the rounds cost no less than the batches they verify
    copy = screen["production"]["verify_copy"]
    assert copy["used"] is True, copy
    # a fit of timings: on a busy machine the screen clamps a part that reads negative to 0, so what is asserted is
    # that the copy timed rounds and found them cost something, not which part (a CPU-bound neighbour read 0.0)
    assert copy["per_row_ms"] >= 0 and copy["per_round_ms"] >= 0 and copy["per_row_ms"] + copy["per_round_ms"] > 0
    assert copy["requests"] >= 6 and copy["rounds"] > 0, copy
    assert set(screen["production"]["verify_batch_ms"]) == set(screen["production"]["verify_ms"])
    assert sum(screen["production"]["verify_ms"].values()) >= sum(screen["production"]["verify_batch_ms"].values())
    assert _serving(standard_models["target.gguf"]) == [pid]
    draft = screen["candidates"]["draft"]
    assert draft["screenable"] is True and draft["best_k"] in (2, 4) and draft["d_s_ms"] > 0
    # and the drafter timed in the server's own rounds, on the copy run with the draft at depths 1 and 4
    fit = draft["drafter_copy"]  # a fit of timings too: either part may be clamped to 0 on a busy machine, not both
    assert fit["per_token_ms"] >= 0 and fit["per_round_ms"] >= 0 and fit["per_token_ms"] + fit["per_round_ms"] > 0, fit
    assert fit["requests"] >= 4, fit
    for k in ("2", "4"):
        row = draft["k"][k]
        assert 1.0 <= row["mean_accepted_len"] <= int(k) + 1 and len(row["accept_per_pos"]) == int(k)
        assert 0 < row["low"] <= row["predicted_tok_s"] <= row["high"]
        # the bound (the same counts at the fastest repeat of every timing) and a verdict on the timings
        # (unreliable, with why, on a busy host)
        assert row["bound_speedup"] > 0 and isinstance(row["unreliable"], bool)
        assert row["unreliable"] == bool(row["unreliable_why"])
    assert screen["candidates"]["ngram-mod"]["k"]["16"]["mean_accepted_len"] > 1.0
    assert screen["candidates"]["mtp"] == {"screenable": False, "chain": ["draft-mtp"], "ks": list(_screen.DEFAULT_KS),
                                           "why": screen["candidates"]["mtp"]["why"]}
    assert "hidden states" in screen["candidates"]["mtp"]["why"]


def test_bad_candidates_are_named_and_production_untouched(production, standard_models, llama_server_bin) -> None:
    server, _prod = production
    pid = server.pid
    other = {"name": "other-vocab", "env": {"LLAMA_ARG_SPEC_TYPE": "draft-simple",
                                            "LLAMA_ARG_SPEC_DRAFT_MODEL": str(standard_models["draft-othertok.gguf"])}}
    with pytest.raises(SpecdecError, match=r"candidate other-vocab: draft .* does not share production's vocabulary"):
        _screen.run_screen(server.url, [other], llama_server=llama_server_bin, drafter_launch="process",
                           shapes=["prose"], sizes=SIZES)
    taken = {"name": "d", "env": {"LLAMA_ARG_SPEC_TYPE": "draft-simple",
                                  "LLAMA_ARG_SPEC_DRAFT_MODEL": str(standard_models["draft.gguf"])}}
    with pytest.raises(SpecdecError, match=rf"candidate d: port {server.port} .* is taken"):
        _screen.run_screen(server.url, [taken], llama_server=llama_server_bin, drafter_launch="process",
                           drafter_port=server.port, shapes=["prose"], sizes=SIZES)
    with pytest.raises(SpecdecError, match="does not answer /health"):
        _screen.run_screen(f"http://127.0.0.1:{_screen.free_port()}", [taken], shapes=["prose"], sizes=SIZES)
    # as the A/B runs it: the bad candidate is reported, the others screened
    ngram = {"name": "ngram", "env": {"LLAMA_ARG_SPEC_TYPE": "ngram-mod"}, "flags": NGRAM_FLAGS}
    screen = _screen.run_screen(server.url, [other, ngram], llama_server=llama_server_bin, drafter_launch="process",
                                shapes=["prose"], sizes=SIZES, candidate_errors="report")
    bad = screen["candidates"]["other-vocab"]
    assert bad["screenable"] is False and "does not share production's vocabulary" in bad["error"]
    assert bad["why"].startswith("the screen failed for it: candidate other-vocab")
    assert screen["candidates"]["ngram"]["screenable"] is True and screen["candidates"]["ngram"]["best_k"] == 16
    assert server.pid == pid and server.returncode is None
