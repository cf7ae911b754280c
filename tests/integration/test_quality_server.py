"""Lossless versus lossy-by-design judging on the real llama-server: a KV cache type, a quant rung, speculation on it.

Every config is a server start per round, measured by spec_bench's own code (``_endpoint.run_bench``) and
judged by the report's code. The configs are given as the env the serving unit would get (one rendering):
the server reads the same LLAMA_ARG_* variables the judge classifies.

- ``kv-q8_0``: a q8_0 K and V cache (flash attention on, which a quantized V cache needs) - lossy by design,
  with its quality numbers (on this test bed its greedy text happens to stay identical);
- ``q4_0``: ``target-q4_0.gguf``, the target's weights quantized to Q4_0 with gguf's quantizers - lossy by
  design, and its greedy text really differs from the F32 target's;
- ``q4_0+draft``: draft-simple on the quantized target - lossless against ``q4_0`` (the same numerics
  without speculation), while still differing from the baseline;
- ``q4_0+synthetic``: a drafter whose acceptance is faked (``--spec-synth-rates``) on the quantized
  target: INVALID against ``q4_0``, whatever it does against the baseline.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from ansible_collections.llmfleet.specdec.plugins.module_utils.bench import _endpoint as ep
from ansible_collections.llmfleet.specdec.plugins.module_utils.bench import _quality as q
from ansible_collections.llmfleet.specdec.plugins.plugin_utils.report import _report as rp
from ansible_collections.llmfleet.specdec.plugins.plugin_utils.verdicts import _judge as jd
from testbed.server import LlamaServer

pytestmark = pytest.mark.integration

SIZES = {"prose": {"chars": 400, "n_predict": 32}, "identity": {"n_predict": 24}}
BENCH = {"shapes": list(SIZES), "prompts_per_shape": 3, "repeats": 1, "warmup": 1, "sizes": SIZES}
ROUNDS = 2


def configs(models: dict[str, Path]) -> dict[str, dict[str, str]]:
    target, quant, draft = (str(models[n]) for n in ("target.gguf", "target-q4_0.gguf", "draft.gguf"))
    spec = {"LLAMA_ARG_SPEC_TYPE": "draft-simple", "LLAMA_ARG_SPEC_DRAFT_MODEL": draft}
    return {
        "baseline": {"LLAMA_ARG_MODEL": target},
        "kv-q8_0": {"LLAMA_ARG_MODEL": target, "LLAMA_ARG_CACHE_TYPE_K": "q8_0", "LLAMA_ARG_CACHE_TYPE_V": "q8_0",
                    "LLAMA_ARG_FLASH_ATTN": "on"},
        "q4_0": {"LLAMA_ARG_MODEL": quant},
        "q4_0+draft": {"LLAMA_ARG_MODEL": quant, **spec},
        "q4_0+synthetic": {"LLAMA_ARG_MODEL": quant, **spec, "LLAMA_ARG_SPEC_SYNTH_RATES": "0.9,0.9,0.9"},
    }


@pytest.fixture(scope="module")
def judged(llama_server_bin: str, standard_models: dict[str, Path],
           tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], dict[str, Any]]:
    log_dir = tmp_path_factory.mktemp("quality-logs")
    envs = configs(standard_models)
    entries = []
    for rnd in range(ROUNDS):
        names = list(envs)[rnd % len(envs):] + list(envs)[:rnd % len(envs)]
        for order, name in enumerate(names):
            env = envs[name]
            rest = {k: v for k, v in env.items() if k != "LLAMA_ARG_MODEL"}
            with LlamaServer(env["LLAMA_ARG_MODEL"], env=rest, binary=llama_server_bin, log_dir=log_dir) as server:
                slots = server.slots()
                bench = ep.run_bench(server.url, api="llamacpp", **BENCH)
            assert slots[0]["speculative"] == ("LLAMA_ARG_SPEC_TYPE" in env), name
            entries.append({"config": name, "round": rnd, "order": order, "server_config": env, "bench": bench,
                            "error": None})
    run = {"host": "quality-server", "run_id": "quality-server", "baseline": "baseline", "entries": entries,
           "configs": [{"name": n, "chain": ["draft-simple"] if "LLAMA_ARG_SPEC_TYPE" in env else [],
                        "server_config": env, "rendering": {"env": env, "override": env}}
                       for n, env in envs.items()]}
    j = jd.judge(run)
    return run, j


def test_kv_cache_type_is_lossy_by_design_with_quality_numbers(judged):
    _run, j = judged
    c = j["configs"]["kv-q8_0"]
    assert c["status"] == jd.OK, c["problems"]
    assert c["judging"]["judging"] == q.LOSSY
    assert {n["kind"] for n in c["judging"]["numerics"]} == {"KV cache type", "backend kernels"}
    overall = c["quality"]["overall"]
    assert overall["prompts"] == 6 and overall["vacuous"] == 0
    assert overall["identical_share"] is not None and overall["token_agreement"] is not None
    for shape in SIZES:
        assert c["shapes"][shape]["verdict"] not in ("invalid", "no data")
        assert c["quality"]["shapes"][shape]["prompts"] == 3


def test_quant_rung_really_changes_greedy_text_and_is_judged_lossy(judged):
    _run, j = judged
    c = j["configs"]["q4_0"]
    assert c["status"] == jd.OK, c["problems"]
    assert c["judging"]["judging"] == q.LOSSY and c["lossless"] == q.LOSSY_LABEL
    overall = c["quality"]["overall"]
    assert overall["identical"] < overall["prompts"]
    assert overall["token_agreement"] < 1.0
    assert overall["first_difference_chars"] is not None
    assert all(c["shapes"][s]["speedup"] is not None for s in SIZES)


def test_speculation_on_the_quant_rung_is_lossless_against_the_quant_baseline(judged):
    _run, j = judged
    c = j["configs"]["q4_0+draft"]
    assert c["judging"]["judging"] == q.LOSSLESS and c["judging"]["reference"] == "q4_0"
    assert c["status"] == jd.OK, c["problems"]
    assert c["lossless"] is True and c["texts_compared"] == 12
    assert c["draft_n"] > 0
    # it still differs from production: the quality against the baseline is the quant rung's
    assert c["quality"]["overall"] == j["configs"]["q4_0"]["quality"]["overall"]


def test_fake_acceptance_on_the_quant_rung_is_invalid_against_its_reference(judged):
    _run, j = judged
    c = j["configs"]["q4_0+synthetic"]
    assert c["judging"]["reference"] == "q4_0"
    assert c["status"] == jd.INVALID and c["lossless"] is False


def test_report_names_references_and_shows_quality(judged):
    run, j = judged
    md = rp.markdown(rp.build_document(run, j))
    assert "## Lossless or lossy by design" in md
    assert "- q4_0+draft: **lossless** (inferred: speculation layered on model file" in md and "reference: q4_0" in md
    assert "| q4_0 | prose | 3 |" in md
    assert j["recommendation"] is None or all(
        c["config"] not in ("kv-q8_0", "q4_0") for c in j["recommendation"]["candidates"])
