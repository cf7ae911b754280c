"""spec_bench against the real llama-server: plain, a draft model, and ngram-mod, over both APIs.

What the test bed's tiny models make measurable, and what they do not:

- the counters: every request's /metrics deltas equal its own ``timings.draft_n`` /
  ``draft_n_accepted``, per-position acceptance is exported, a plain server drafts nothing;
- losslessness: at temperature 0 the speculative texts equal the plain ones byte for byte;
- thinking: a real thinking template (Qwen3.5's) puts the whole answer in ``reasoning_content``
  unless the request disables thinking, which spec_bench does.

The tiny target cannot follow instructions: its greedy output hardly depends on the prompt and
falls into loops, so it does not echo the passage. ngram-mod's drafts here come from text it has
already seen (its own looping output, and earlier requests: its table lives as long as the
server), not from the passage; the tests assert exactly that, not an echo win.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from ansible.module_utils.testing import patch_module_args

from ansible_collections.llmfleet.specdec.plugins.module_utils.bench import _endpoint as ep
from ansible_collections.llmfleet.specdec.plugins.modules import spec_bench
from testbed.server import LlamaServer

pytestmark = pytest.mark.integration

SIZES = {"prose": {"chars": 400, "n_predict": 24}, "echo": {"chars": 600, "n_predict": 96},
         "structured": {"chars": 300, "n_predict": 48}, "identity": {"n_predict": 16}}
BENCH = {"prompts_per_shape": 1, "repeats": 2, "warmup": 1, "sizes": SIZES}
APIS = ("llamacpp", "openai")
NGRAM_WINDOW = ["--spec-ngram-mod-n-match", "8", "--spec-ngram-mod-n-min", "2", "--spec-ngram-mod-n-max", "16"]
# config -> (draft model, llama-server args)
CONFIGS: dict[str, tuple[str | None, list[str]]] = {
    "plain": (None, []),
    "draft-simple": ("draft.gguf", ["--spec-type", "draft-simple"]),
    "ngram-mod": (None, ["--spec-type", "ngram-mod", *NGRAM_WINDOW]),
}
THINKING_TEMPLATE = Path(__file__).parents[1] / "unit" / "fixtures" / "bench" / "Qwen3.5-4B.jinja"


def server_for(binary: str, models: dict[str, Path], log_dir: Path, config: str, args: list[str] = ()) -> LlamaServer:
    draft, flags = CONFIGS[config]
    return LlamaServer(models["target.gguf"], draft=models[draft] if draft else None, args=[*flags, *args],
                       binary=binary, log_dir=log_dir, ctx_size=4096)


@pytest.fixture(scope="module")
def benches(llama_server_bin: str, standard_models: dict[str, Path],
            tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, str], dict[str, Any]]:
    """(config, api) -> the bench of a fresh server of that config (n-gram memory starts empty)."""
    log_dir = tmp_path_factory.mktemp("spec-bench-logs")
    out = {}
    for config in CONFIGS:
        for api in APIS:
            with server_for(llama_server_bin, standard_models, log_dir, config) as server:
                out[(config, api)] = ep.run_bench(server.url, api=api, **BENCH)
    return out


def key(rec: dict[str, Any]) -> tuple[str, int, int]:
    return rec["shape"], rec["prompt_index"], rec["repeat"]


def assert_counters_agree(bench: dict[str, Any]) -> None:
    """Each request's /metrics deltas are its own draft counts; the total is their sum."""
    totals = {"drafts": 0, "draft_tokens": 0, "accepted_tokens": 0}
    for rec in bench["requests"]:
        delta = rec["metrics_delta"]
        assert delta["draft_tokens"] == rec["draft_n"], key(rec)
        assert delta["accepted_tokens"] == rec["draft_n_accepted"], key(rec)
        assert delta["accepted_tokens"] <= delta["draft_tokens"]
        assert sum(delta["accepted_per_pos"]) == delta["accepted_tokens"]
        for name in totals:
            totals[name] += delta[name]
    total = bench["metrics_total_delta"]
    assert {k: total[k] for k in totals} == totals


@pytest.mark.parametrize("api", APIS)
def test_every_request_is_measured(benches, api):
    bench = benches[("plain", api)]
    assert bench["schema"] == "llmfleet.specdec/bench/1" and bench["api"] == api
    assert bench["server"]["engine"] == "llamacpp"
    assert bench["server"]["model"].endswith("target.gguf")
    assert bench["warmup"] == 1
    assert [key(r) for r in bench["requests"]] == [
        (shape, repeat, repeat) for repeat in (0, 1) for shape in ("prose", "echo", "structured", "identity")]
    for rec in bench["requests"]:
        # the tiny model never emits end-of-generation: every budget is spent in full
        assert rec["predicted_n"] == SIZES[rec["shape"]]["n_predict"]
        assert rec["predicted_per_second"] > 0 and rec["rate_source"] == "timings.predicted_per_second"
        assert rec["prompt_n"] > 0 and rec["wall_s"] > 0
        assert rec["text"] and not rec["empty"] and not rec["used_reasoning_content"]
    assert bench["shapes"]["echo"]["checks"]["longest_repeated_words"] < 8
    assert bench["shapes"]["echo"]["prompt_chars"] > 600


@pytest.mark.parametrize("api", APIS)
def test_a_plain_server_drafts_nothing(benches, api):
    bench = benches[("plain", api)]
    assert bench["server"]["speculative"] is False
    for rec in bench["requests"]:
        assert (rec["draft_n"], rec["draft_n_accepted"]) == (0, 0)
        assert rec["metrics_delta"] == {"drafts": 0, "draft_tokens": 0, "accepted_tokens": 0, "accepted_per_pos": []}
    assert bench["metrics_total_delta"]["drafts"] == 0


@pytest.mark.parametrize("api", APIS)
def test_a_draft_model_drafts_on_every_shape(benches, api):
    bench = benches[("draft-simple", api)]
    assert bench["server"]["speculative"] is True
    assert_counters_agree(bench)
    for rec in bench["requests"]:
        assert rec["draft_n"] > 0, key(rec)
        per_pos = rec["metrics_delta"]["accepted_per_pos"]
        assert len(per_pos) == 3                          # --spec-draft-n-max defaults to 3
        assert per_pos == sorted(per_pos, reverse=True)  # accepted past position i implies past i-1
        assert per_pos[0] <= rec["metrics_delta"]["drafts"]
    total = bench["metrics_total_delta"]
    assert total["accepted_tokens"] / total["draft_tokens"] > 0.8   # draft.gguf: ~0.9 against target.gguf


@pytest.mark.parametrize("api", APIS)
def test_ngram_mod_drafts_only_from_text_it_has_seen(benches, api):
    bench = benches[("ngram-mod", api)]
    assert bench["server"]["speculative"] is True
    assert_counters_agree(bench)
    first = bench["requests"][0]
    # the first measured request: 24 tokens nothing before continued (the warm-up's 24 are too few for
    # ngram-mod to store: it adds generated n-grams in chunks of 32)
    assert key(first) == ("prose", 0, 0) and first["draft_n"] == 0
    echoes = [r for r in bench["requests"] if r["shape"] == "echo"]
    assert all(r["draft_n"] > 0 for r in echoes)          # the looping output feeds the lookup
    total = bench["metrics_total_delta"]
    assert total["drafts"] > 0
    # proposals are also rejected, and verification is paid for them anyway
    assert total["accepted_tokens"] < total["draft_tokens"]
    assert len(total["accepted_per_pos"]) == 16          # one position per token up to --spec-ngram-mod-n-max


@pytest.mark.parametrize("config", ["draft-simple", "ngram-mod"])
@pytest.mark.parametrize("api", APIS)
def test_speculation_is_lossless(benches, api, config):
    plain = {key(r): r["text"] for r in benches[("plain", api)]["requests"]}
    spec = {key(r): r["text"] for r in benches[(config, api)]["requests"]}
    assert spec == plain
    assert all(plain.values())
    # the same prompts went to both (the fingerprints prove it without trusting the order)
    assert benches[("plain", api)]["shapes"] == benches[(config, api)]["shapes"]


def test_ngram_mod_remembers_answers_across_requests(llama_server_bin, standard_models, tmp_path):
    """Why spec_bench sends new prompts in every repeat by default (reuse_prompts: false)."""
    accepted = {}
    for reuse in (True, False):
        # the default window (n-match 24, n-min 48, n-max 64), as a fleet would run it
        with LlamaServer(standard_models["target.gguf"], args=["--spec-type", "ngram-mod"], binary=llama_server_bin,
                         log_dir=tmp_path, ctx_size=4096) as server:
            bench = ep.run_bench(server.url, shapes=["echo"], repeats=2, warmup=0, sizes=SIZES, reuse_prompts=reuse)
        first, second = bench["requests"]
        assert first["draft_n"] == 0                      # a fresh server has seen nothing
        assert second["draft_n"] > 0
        assert (first["prompt_index"], second["prompt_index"]) == ((0, 0) if reuse else (0, 1))
        accepted[reuse] = second["draft_n_accepted"]
    # the same prompt again is drafted from its own earlier answer: far more accepted than for a new
    # prompt (whose answer, on this tiny model, only shares its looping tail with the first)
    assert accepted[True] > accepted[False]


def test_thinking_is_disabled_per_request(llama_server_bin, standard_models, tmp_path):
    with LlamaServer(standard_models["target.gguf"], args=["--chat-template-file", str(THINKING_TEMPLATE)],
                     binary=llama_server_bin, log_dir=tmp_path, ctx_size=4096) as server:
        bench = ep.run_bench(server.url, api="openai", shapes=["prose", "identity"], repeats=1, warmup=0, sizes=SIZES)
        for rec in bench["requests"]:
            assert rec["text"] and rec["used_reasoning_content"] is False
        # without the switch this template opens <think>: content "" and the answer in reasoning_content
        client = ep.Endpoint(server.url)
        status, raw = client.request("POST", "/v1/chat/completions", {
            "messages": [{"role": "user", "content": "What is 8 plus 48?"}], "max_tokens": 16, "temperature": 0})
        assert status == 200
        body = json.loads(raw)
        assert body["choices"][0]["message"]["content"] == ""
        rec = ep.parse_reply(body, "openai", 0.1)
        assert rec["used_reasoning_content"] is True and rec["text"] and not rec["empty"]


def test_the_module_in_check_mode_against_the_real_server(start_server, standard_models, capsys):
    server = start_server(standard_models["target.gguf"], draft=standard_models["draft.gguf"],
                          args=["--spec-type", "draft-simple"], ctx_size=4096)
    with patch_module_args({"endpoint": server.url, "api": "openai", "shapes": ["identity", "structured"],
                            "repeats": 1, "warmup": 0, "sizes": SIZES, "_ansible_check_mode": True}), \
            pytest.raises(SystemExit):
        spec_bench.main()
    out = json.loads(capsys.readouterr().out)
    assert out["changed"] is False
    assert [r["shape"] for r in out["bench"]["requests"]] == ["identity", "structured"]
    assert all(r["draft_n"] > 0 for r in out["bench"]["requests"])
    assert out["bench"]["metrics_total_delta"]["draft_tokens"] == sum(r["draft_n"] for r in out["bench"]["requests"])


def test_the_module_fails_cleanly_without_metrics(llama_server_bin, standard_models, tmp_path, capsys):
    # the test bed always adds --metrics; a server started without it answers 501
    server = LlamaServer(standard_models["target.gguf"], binary=llama_server_bin, log_dir=tmp_path)
    server.command = lambda: [server.binary, "-m", str(server.model), "--host", "127.0.0.1",  # type: ignore[method-assign]
                              "--port", str(server.port), "-t", "1", "-c", "1024", "--no-webui"]
    with server:
        with patch_module_args({"endpoint": server.url, "sizes": SIZES}), pytest.raises(SystemExit):
            spec_bench.main()
        out = json.loads(capsys.readouterr().out)
        assert out["failed"] is True
        assert "HTTP 501" in out["msg"] and "--metrics" in out["msg"]
        with patch_module_args({"endpoint": server.url, "sizes": SIZES, "metrics": False, "repeats": 1,
                                "shapes": ["identity"], "warmup": 0}), pytest.raises(SystemExit):
            spec_bench.main()
        out = json.loads(capsys.readouterr().out)
        assert out["bench"]["requests"][0]["metrics_delta"] is None


def test_end_to_end_and_the_verification_cost_measured_within_the_start(llama_server_bin, standard_models, tmp_path):
    """Each request's end-to-end rate and time to first token; a batch of K + 1 tokens timed on a cached prefix."""
    with server_for(llama_server_bin, standard_models, tmp_path, "plain") as server:
        bench = ep.run_bench(server.url, shapes=["prose"], prompts_per_shape=2, repeats=1, warmup=1, sizes=SIZES,
                             verify_k=[2, 4])
    for rec in bench["requests"]:
        # the whole request as the client saw it: slower than the decode timing alone (the prompt is processed too)
        assert 0 < rec["e2e_tok_s"] < rec["predicted_per_second"]
        assert rec["e2e_tok_s"] == pytest.approx(rec["predicted_n"] / rec["wall_s"])
        assert 0 < rec["ttft_s"] < rec["wall_s"]
    verify = bench["verify"]
    assert verify["k"] == [2, 4] and set(verify["batches"]) == {"1", "3", "5"}
    assert all(ms > 0 for ms in verify["batches"].values()) and verify["notes"] == []
    assert verify["step_ms"] == verify["batches"]["1"]
    assert all(len(v) == 5 for v in verify["samples"].values())  # every batch was processed as exactly b tokens
