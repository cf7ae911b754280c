# Proves the test bed against the real llama-server: the models load, speculate, stay lossless, and refuse right.
from __future__ import annotations

from pathlib import Path
from typing import Callable

import pytest

from testbed.server import LlamaServer

pytestmark = pytest.mark.integration

SIMPLE = ("--spec-type", "draft-simple")
PROMPTS = ("The quick brown fox", "Speculative decoding lets a small draft model", "Old lighthouse keepers")
N_PREDICT = 64

StartServer = Callable[..., LlamaServer]


def acceptance(server: LlamaServer) -> tuple[float, int]:
    """draft_n_accepted / draft_n over PROMPTS, and draft_n."""
    drafted = accepted = 0
    for prompt in PROMPTS:
        timings = server.completion(prompt, n_predict=N_PREDICT)["timings"]
        drafted += timings.get("draft_n", 0)
        accepted += timings.get("draft_n_accepted", 0)
    assert drafted > 0, server.log_text()[-2000:]
    return accepted / drafted, drafted


@pytest.fixture(scope="module")
def plain_texts(llama_server_bin: str, standard_models: dict[str, Path],
                tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """target.gguf's greedy texts with no draft: the reference every speculative run must equal."""
    with LlamaServer(standard_models["target.gguf"], binary=llama_server_bin,
                     log_dir=tmp_path_factory.mktemp("plain")) as server:
        return {p: server.completion(p, n_predict=N_PREDICT)["content"] for p in PROMPTS}


def test_target_loads_and_greedy_text_is_repeatable(start_server: StartServer, standard_models, plain_texts):
    server = start_server(standard_models["target.gguf"])
    assert server.get("/health") == {"status": "ok"}
    first = server.completion(PROMPTS[0], n_predict=N_PREDICT)
    second = server.completion(PROMPTS[0], n_predict=N_PREDICT)
    assert first["content"].strip()
    assert first["content"] == second["content"] == plain_texts[PROMPTS[0]]
    assert first["timings"]["predicted_n"] == N_PREDICT  # no early end-of-generation
    assert first["content"].isascii()  # only printable bytes are ever generated
    chat = server.post("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}],
                                                "max_tokens": 8, "temperature": 0})
    assert chat["choices"][0]["message"]["content"]


def test_draft_speculates_and_stays_byte_identical(start_server: StartServer, standard_models, plain_texts):
    server = start_server(standard_models["target.gguf"], draft=standard_models["draft.gguf"], args=SIMPLE)
    assert [slot["speculative"] for slot in server.slots()] == [True]
    for prompt in PROMPTS:
        out = server.completion(prompt, n_predict=N_PREDICT)
        assert out["timings"]["draft_n"] > 0
        assert 0 < out["timings"]["draft_n_accepted"] <= out["timings"]["draft_n"]
        assert out["content"] == plain_texts[prompt], prompt
    metrics = server.metrics()
    assert metrics["llamacpp:spec_decode_num_draft_tokens_total"] > 0
    assert 0 < metrics["llamacpp:spec_decode_num_accepted_tokens_total"] <= \
        metrics["llamacpp:spec_decode_num_draft_tokens_total"]
    assert "draft acceptance = " in server.log_text()


def test_draft_without_spec_type_is_loaded_but_unused(start_server: StartServer, standard_models):
    server = start_server(standard_models["target.gguf"], draft=standard_models["draft.gguf"])
    assert "loading draft model" in server.log_text()
    assert [slot["speculative"] for slot in server.slots()] == [False]
    assert "draft_n" not in server.completion(PROMPTS[0], n_predict=16)["timings"]


def test_acceptance_knob_is_monotonic(start_server: StartServer, standard_models, plain_texts):
    rates = {}
    for name in ("draft.gguf", "draft-lowaccept.gguf"):
        server = start_server(standard_models["target.gguf"], draft=standard_models[name], args=SIMPLE)
        rates[name], drafted = acceptance(server)
        assert server.completion(PROMPTS[1], n_predict=N_PREDICT)["content"] == plain_texts[PROMPTS[1]]
        server.stop()
        print(f"acceptance {name}: {rates[name]:.3f} over {drafted} drafted tokens")
    assert rates["draft.gguf"] > 0.7
    assert rates["draft.gguf"] > rates["draft-lowaccept.gguf"] + 0.3


def test_other_tokenizer_serves_without_speculation(start_server: StartServer, standard_models, plain_texts):
    server = start_server(standard_models["target.gguf"], draft=standard_models["draft-othertok.gguf"], args=SIMPLE)
    assert [slot["speculative"] for slot in server.slots()] == [False]
    out = server.completion(PROMPTS[0], n_predict=N_PREDICT)
    assert out["content"] == plain_texts[PROMPTS[0]]
    assert "draft_n" not in out["timings"]
    log = server.log_text()
    assert "the target and draft vocabs are not compatible" in log
    assert "failed to initialize speculative decoding context" in log
    assert server.returncode is None  # still serving


@pytest.mark.parametrize("name, spec_type", [("draft-dflash.gguf", "draft-dflash"),
                                             ("draft-dspark.gguf", "draft-dspark")])
def test_dflash_drafts_are_typed_from_their_header(start_server: StartServer, standard_models, plain_texts,
                                                   name, spec_type):
    server = start_server(standard_models["target.gguf"], draft=standard_models[name])
    assert f"auto-detected speculative type '{spec_type}'" in server.log_text()
    assert [slot["speculative"] for slot in server.slots()] == [True]
    out = server.completion(PROMPTS[0], n_predict=N_PREDICT)
    assert out["timings"]["draft_n"] > 0
    assert out["content"] == plain_texts[PROMPTS[0]]


@pytest.mark.parametrize("name", ["target-swa.gguf", "target-kvarray.gguf", "target-mtp.gguf"])
def test_header_variant_targets_serve(start_server: StartServer, standard_models, name):
    server = start_server(standard_models[name])
    assert server.completion(PROMPTS[0], n_predict=16)["content"].strip()


def test_refusals_end_the_process_with_the_reason_in_the_log(start_server: StartServer, standard_models):
    mtp = start_server(standard_models["target-mtp.gguf"], args=("--spec-type", "draft-mtp"), wait=False)
    assert mtp.wait_exit(30) != 0
    assert "failed to create MTP context" in mtp.log_text()
    alone = start_server(standard_models["draft-dflash.gguf"], wait=False)
    assert alone.wait_exit(30) != 0
    assert "dflash requires ctx_other" in alone.log_text()


def test_stop_ends_the_process(start_server: StartServer, standard_models):
    server = start_server(standard_models["target.gguf"])
    pid = server.pid
    assert pid and server.returncode is None
    assert server.stop() is not None
    assert server.returncode is not None
    with pytest.raises(OSError):
        server.get("/health", timeout=2)
