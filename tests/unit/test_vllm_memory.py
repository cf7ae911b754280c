# vLLM's KV cache predicted from config.json and the budget: the arithmetic, the log line, the refusal, bad input.
from __future__ import annotations

import json
from pathlib import Path

import pytest

from ansible_collections.llmfleet.specdec.plugins.module_utils.vllm import _vllm_memory as vm

# The oracle test bed's target (tests/testbed/vllm_oracle_models.py): 2 layers, 2 KV heads of 32, bf16.
TARGET = {"model_type": "llama", "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
          "hidden_size": 128, "head_dim": 32, "torch_dtype": "bfloat16", "vocab_size": 512}
DRAFT = {**TARGET, "num_hidden_layers": 1}
GIB = 1024 ** 3


def test_recorded_real_lines() -> None:
    """Two lines real vLLM 0.32.0 printed on CPU (the oracle test re-checks them against live servers)."""
    with_draft = vm.plan(TARGET, DRAFT, max_model_len=1024, budget=1 * GIB)
    assert with_draft["log_line"] == ("CPU KV cache size: 1,398,016 tokens, Maximum concurrency for 1,024 tokens per "
                                      "request: 1365.25x")
    assert (with_draft["bytes_per_block"], with_draft["num_blocks"]) == (3 * 128 * 2 * 64 * 2, 10922)
    fp32 = vm.plan(TARGET, None, max_model_len=1000, dtype="float32", budget=2 * GIB)
    assert fp32["log_line"] == ("CPU KV cache size: 2,048,000 tokens, Maximum concurrency for 1,000 tokens per "
                                "request: 2048.00x")


def test_draft_layers_are_sized_in_the_targets_dtype() -> None:
    # SpeculativeConfig builds the draft's ModelConfig with dtype=target.dtype: a float32 draft checkpoint
    # costs what a bf16 one does
    fp32_draft = {**DRAFT, "torch_dtype": "float32"}
    assert vm.plan(TARGET, fp32_draft, max_model_len=1024, budget=GIB)["bytes_per_block"] == \
        vm.plan(TARGET, DRAFT, max_model_len=1024, budget=GIB)["bytes_per_block"]


def test_refusal_boundary_counts_the_null_block() -> None:
    base = vm.plan(TARGET, DRAFT, max_model_len=1024)
    exact = (base["blocks_per_request"] + 1) * base["bytes_per_block"]
    assert vm.plan(TARGET, DRAFT, max_model_len=1024, budget=exact)["fits"] is True
    short = vm.plan(TARGET, DRAFT, max_model_len=1024, budget=exact - 1)
    assert short["fits"] is False
    assert short["refusal"].startswith("To serve at least one request with the model's max seq len (1024)")
    assert short["max_model_len_that_fits"] == (base["blocks_per_request"] - 1) * 128
    assert "Largest --max-model-len that fits: 896" in " ".join(vm.summary(short))


def test_gpu_defaults_tp_and_fp8() -> None:
    gpu = vm.plan(TARGET, None, max_model_len=1000, platform="gpu", kv_cache_dtype="fp8", tensor_parallel_size=2,
                  budget=GIB)
    # block 16, one KV head a rank (2 // 2), 1-byte cache
    assert gpu["bytes_per_block"] == 2 * 16 * 1 * 64 * 1
    assert gpu["blocks_per_request"] == 63
    assert gpu["log_line"].startswith("GPU KV cache size:")
    # more ranks than KV heads: each keeps one head
    assert vm.plan(TARGET, None, max_model_len=16, platform="gpu", tensor_parallel_size=8)["models"][0][
        "kv_heads_per_rank"] == 1


def test_auto_dtype_serves_a_float32_checkpoint_in_16_bits() -> None:
    fp32 = {**TARGET, "torch_dtype": "float32"}
    assert vm.plan(fp32, None, max_model_len=128)["dtype"] == "bfloat16"
    assert vm.plan(fp32, None, max_model_len=128, dtype="float32")["cache_element_bytes"] == 4


def test_num_gpu_blocks_override() -> None:
    r = vm.plan(TARGET, None, max_model_len=1024, budget=GIB, num_gpu_blocks_override=9)
    assert (r["num_blocks"], r["fits"]) == (9, True)
    assert vm.plan(TARGET, None, max_model_len=1024, budget=GIB, num_gpu_blocks_override=8)["fits"] is False


def test_budget_sources() -> None:
    # on CPU the env wins over --kv-cache-memory-bytes (CpuPlatform's legacy setting)
    assert vm.budget_bytes("cpu", 5, "2")[0] == 2 * GIB
    assert vm.budget_bytes("cpu", 5, None)[0] == 5
    assert vm.budget_bytes("cpu")[0] is None
    assert vm.budget_bytes("gpu", None, None, 0.5, 80 * GIB, 10 * GIB)[0] == 30 * GIB
    assert vm.budget_bytes("gpu", None, None, 0.9, 80 * GIB)[0] is None


@pytest.mark.parametrize("call, needle", [
    (lambda: vm.budget_bytes("cpu", None, "1.5"), "VLLM_CPU_KVCACHE_SPACE='1.5'"),
    (lambda: vm.budget_bytes("cpu", 5, ""), "set but empty"),
    (lambda: vm.budget_bytes("gpu", None, None, 1.5, GIB), "gpu_memory_utilization=1.5"),
    (lambda: vm.plan({**TARGET, "sliding_window": 4096}, max_model_len=64), "sliding_window=4096"),
    (lambda: vm.plan({**TARGET, "kv_lora_rank": 512}, max_model_len=64), "kv_lora_rank"),
    (lambda: vm.plan({**TARGET, "num_hidden_layers": "2"}, max_model_len=64), "num_hidden_layers='2'"),
    (lambda: vm.plan(TARGET, max_model_len=0), "max_model_len=0"),
    (lambda: vm.plan(TARGET, max_model_len=64, dtype="float8"), "dtype 'float8'"),
    (lambda: vm.plan(TARGET, max_model_len=64, kv_cache_dtype="int3"), "kv_cache_dtype 'int3'"),
    (lambda: vm.plan(["not", "a", "config"], max_model_len=64), "config.json as a mapping"),
    (lambda: vm.plan_from_serve({"flags": ["--model", "x"]}, load_dir=lambda p, w: {"config": TARGET,
                                                                                    "weights_bytes": 1}),
     "--max-model-len is not set"),
    (lambda: vm.plan_from_serve({"flags": []}), "VLLM_SERVE_MODEL"),
    (lambda: vm.plan_from_serve({"flags": ["--max-model-len", "64", "--gpu-memory-utilization", "most"],
                                 "target": TARGET, "platform": "gpu"}), "--gpu-memory-utilization 'most'"),
    (lambda: vm.plan_from_serve({"flags": ["--max-model-len", "sixty"], "target": TARGET}), "--max-model-len"),
])
def test_bad_input_names_the_fix(call, needle: str) -> None:
    with pytest.raises(vm.VllmMemoryError, match=None) as exc:
        call()
    assert needle in str(exc.value)


def test_layer_types_of_only_full_attention_are_fine() -> None:
    assert vm.plan({**TARGET, "layer_types": ["full_attention"] * 2}, max_model_len=64)["bytes_per_block"] > 0


def test_plan_from_a_units_env_and_folders(tmp_path: Path) -> None:
    for name, cfg in (("target", TARGET), ("draft", DRAFT)):
        (tmp_path / name).mkdir()
        (tmp_path / name / "config.json").write_text(json.dumps(cfg))
        (tmp_path / name / "model.safetensors").write_bytes(b"\0" * 1000)
    env = {"VLLM_SERVE_MODEL": str(tmp_path / "target"), "VLLM_SERVE_ARGS": "--dtype bfloat16 --max-model-len 1024",
           "VLLM_SPECULATIVE_CONFIG": json.dumps({"method": "draft_model", "model": str(tmp_path / "draft"),
                                                  "num_speculative_tokens": 3}),
           "VLLM_CPU_KVCACHE_SPACE": "1"}
    r = vm.plan_from_serve({"env": env})
    assert r["kv_cache_tokens"] == 1398016
    assert r["weights_bytes"] == 2000
    out = vm.kv_budget_result({"env": env})
    assert out["fits"] is True and out["draft"]["kv_layers"] == 1
    assert out["target"]["total_bytes"] + out["draft"]["total_bytes"] == 10922 * r["bytes_per_block"]
    # an ngram config has no drafter layers
    env["VLLM_SPECULATIVE_CONFIG"] = json.dumps({"method": "ngram", "num_speculative_tokens": 3})
    assert vm.plan_from_serve({"env": env})["bytes_per_block"] == 2 * 128 * 2 * 64 * 2


def test_missing_or_broken_checkpoint(tmp_path: Path) -> None:
    with pytest.raises(vm.VllmMemoryError, match="cannot read"):
        vm.read_model_dir(str(tmp_path / "nope"))
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(vm.VllmMemoryError, match="is not JSON"):
        vm.read_model_dir(str(tmp_path))


def _run_kv_budget(args: dict, capsys: pytest.CaptureFixture[str]) -> dict:
    from ansible.module_utils.testing import patch_module_args

    from ansible_collections.llmfleet.specdec.plugins.modules import kv_budget

    with patch_module_args(args), pytest.raises(SystemExit):
        kv_budget.main()
    return json.loads(capsys.readouterr().out)


def test_kv_budget_module_backend_vllm(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "t").mkdir()
    (tmp_path / "t" / "config.json").write_text(json.dumps(TARGET))
    env = {"VLLM_SERVE_MODEL": str(tmp_path / "t"), "VLLM_SERVE_ARGS": "--max-model-len 1000 --dtype float32",
           "VLLM_CPU_KVCACHE_SPACE": "2"}
    out = _run_kv_budget({"engine": "vllm", "env": env, "_ansible_check_mode": True}, capsys)
    assert out["changed"] is False and out["kv_budget"]["fits"] is True
    assert out["kv_budget"]["vllm"]["kv_cache_tokens"] == 2048000
    # the preflight's "fits?" reads kv_budget.fits: a budget too small is a NO, not a "?"
    env["VLLM_SERVE_ARGS"] = "--max-model-len 4096 --dtype float32 --kv-cache-memory-bytes 1000000"
    del env["VLLM_CPU_KVCACHE_SPACE"]
    out = _run_kv_budget({"engine": "vllm", "platform": "cpu", "env": env}, capsys)
    assert out["kv_budget"]["fits"] is False and out["kv_budget"]["problems"]
    # bad input: the module fails with the fix named
    out = _run_kv_budget({"engine": "vllm", "env": {"VLLM_SERVE_MODEL": str(tmp_path / "t")}}, capsys)
    assert out["failed"] and "--max-model-len is not set" in out["msg"]


def test_preflight_table_answers_fits_for_vllm() -> None:
    """The preflight's 'fits?' column was '?' for every vLLM config; it now reads kv_budget's vLLM answer."""
    from ansible_collections.llmfleet.specdec.plugins.plugin_utils.steps._steps_preflight import (
        preflight_results,
        preflight_table,
    )

    env = {"VLLM_SERVE_ARGS": "--max-model-len 1024", "VLLM_CPU_KVCACHE_SPACE": "1"}
    ok = vm.kv_budget_result({"env": env, "target": TARGET, "draft": DRAFT})
    short = vm.kv_budget_result({"env": {"VLLM_SERVE_ARGS": "--max-model-len 1024 --kv-cache-memory-bytes 100000"},
                                 "target": TARGET})
    lint = {"ok": True, "effective_chain": ["draft_model"]}
    rows = preflight_results([{"name": "draft"}, {"name": "tiny-budget"}], [lint, lint],
                             [{"kv_budget": ok}, {"kv_budget": short}], [])
    assert [r["fits"] for r in rows] == [True, False]
    assert rows[0]["kv_bytes"] == 10922 * ok["vllm"]["bytes_per_block"]
    table = preflight_table(rows)
    assert table[1].split(" | ")[3].startswith("yes (") and table[2].split(" | ")[3].startswith("NO (")
