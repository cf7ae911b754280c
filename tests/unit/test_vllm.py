"""vLLM's --speculative-config: built, validated, and mapped from the legacy --spec-* flags.

vLLM cannot run here; the expectations are vLLM's own validation messages (vllm/config/speculative.py),
the legacy-alias pull request (vllm-project/vllm#42476) and the field notes.
"""
from __future__ import annotations

import json

import pytest

from ansible_collections.llmfleet.specdec.plugins.module_utils.common._errors import SpecdecError
from ansible_collections.llmfleet.specdec.plugins.module_utils.vllm import _vllm

DFLASH = {"method": "dflash", "model": "z-lab/Qwen3.6-35B-A3B-DFlash", "num_speculative_tokens": 15,
          "attention_backend": "flash_attn"}


def codes(findings: dict, kind: str = "errors") -> list[str]:
    return [f["code"] for f in findings[kind]]


# ---------------------------------------------------------------- building


def test_build_the_field_notes_dflash_config() -> None:
    cfg = _vllm.build_speculative_config("dflash", "z-lab/Qwen3.6-35B-A3B-DFlash", 15, attention_backend="flash_attn")
    assert cfg == DFLASH
    assert _vllm.to_cli(cfg) == ["--speculative-config",
                                 '{"attention_backend":"flash_attn","method":"dflash",'
                                 '"model":"z-lab/Qwen3.6-35B-A3B-DFlash","num_speculative_tokens":15}']


def test_build_passes_extra_keys_and_refuses_what_vllm_refuses() -> None:
    assert _vllm.build_speculative_config("ngram", None, 4, prompt_lookup_max=4) == {
        "method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4}
    with pytest.raises(SpecdecError, match="needs a draft model"):
        _vllm.build_speculative_config("eagle3", None, 3)
    with pytest.raises(SpecdecError, match="greater than zero"):
        _vllm.build_speculative_config("mtp", None, 0)


# ---------------------------------------------------------------- legacy flags


def test_legacy_flags_map_to_the_config_keys() -> None:
    parsed = _vllm.from_legacy_flags(["serve", "Qwen/Qwen3.6-35B-A3B", "--spec-method", "dflash",
                                      "--spec-model", "z-lab/Qwen3.6-35B-A3B-DFlash", "--spec-tokens", "8",
                                      "--attention-backend", "flash_attn", "--max-num-batched-tokens", "32768"])
    assert parsed["speculative_config"] == {"method": "dflash", "model": "z-lab/Qwen3.6-35B-A3B-DFlash",
                                            "num_speculative_tokens": 8}
    assert parsed["attention_backend"] == "flash_attn" and parsed["problems"] == []
    assert parsed["legacy_flags"] == ["--spec-method", "--spec-model", "--spec-tokens"]


def test_equals_form_underscores_and_dotted_config_keys() -> None:
    parsed = _vllm.from_legacy_flags(["--spec_method=ngram", "--spec-tokens=5",
                                      "--speculative-config.prompt_lookup_max", "4"])
    assert parsed["speculative_config"] == {"prompt_lookup_max": 4, "method": "ngram", "num_speculative_tokens": 5}


def test_a_key_set_both_ways_is_vllms_conflict_error() -> None:
    parsed = _vllm.from_legacy_flags(["--speculative-config", json.dumps({"method": "eagle3", "model": "m"}),
                                      "--spec-method", "dflash", "--spec-tokens", "4"])
    assert codes(parsed, "problems") == ["conflicting-speculative-config"]
    assert "--spec-method and --speculative-config both set 'method'" in parsed["problems"][0]["reason"]
    assert parsed["speculative_config"]["method"] == "eagle3" and parsed["speculative_config"]["num_speculative_tokens"] == 4


def test_bad_json_and_missing_value_are_problems() -> None:
    assert codes(_vllm.from_legacy_flags(["--speculative-config", "{method: ngram}"]), "problems") == [
        "speculative-config-json"]
    assert codes(_vllm.from_legacy_flags(["--speculative-config", "[1]"]), "problems") == ["speculative-config-json"]
    assert codes(_vllm.from_legacy_flags(["--spec-tokens"]), "problems") == ["missing-value"]
    with pytest.raises(SpecdecError, match="list"):
        _vllm.from_legacy_flags("--spec-method ngram")


# ---------------------------------------------------------------- validation


def test_the_field_notes_dflash_config_is_valid_on_0_20_1() -> None:
    r = _vllm.validate(DFLASH, "0.20.1")
    assert r["errors"] == [] and r["warnings"] == []


# A pre-release or development build of 0.20.1 comes before 0.20.1 (PEP 440): it does not pass the gate.
@pytest.mark.parametrize("version, ok", [("0.20.0", False), ("v0.19.3", False), ("0.20.1", True),
                                         ("0.21.0rc1", True), ("0.20.1.dev3+gabc", False), ("0.20.1rc1", False),
                                         ("0.20.1.dev42", False), ("0.20.1a1", False), ("0.20.1.post1", True),
                                         ("0.20.1+cpu", True), ("0.20.2.dev1", True), (None, True)])
def test_dflash_minimum_version(version: str | None, ok: bool) -> None:
    r = _vllm.validate(DFLASH, version)
    assert (r["errors"] == []) is ok
    if not ok:
        assert codes(r) == ["vllm-too-old"] and "0.20.1" in r["errors"][0]["fix"]


def test_dflash_attention_backend() -> None:
    auto = dict(DFLASH)
    del auto["attention_backend"]
    assert codes(_vllm.validate(auto), "warnings") == ["dflash-attention-backend-auto"]
    assert _vllm.validate(auto, attention_backend="FLASH_ATTN")["warnings"] == []  # global --attention-backend
    r = _vllm.validate(dict(DFLASH, attention_backend="triton_attn"))
    assert codes(r) == ["dflash-causal-backend"]
    assert codes(_vllm.validate(dict(DFLASH, attention_backend="auto")), "warnings") == ["dflash-attention-backend-auto"]


def test_unknown_method_and_deprecated_mtp_names() -> None:
    assert codes(_vllm.validate({"method": "medusa2", "model": "m", "num_speculative_tokens": 2})) == ["method-unknown"]
    r = _vllm.validate({"method": "qwen3_5_mtp", "num_speculative_tokens": 1})
    assert r["errors"] == [] and codes(r, "warnings") == ["method-deprecated"]


def test_method_is_inferred_from_model() -> None:
    r = _vllm.validate({"model": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B", "num_speculative_tokens": 3})
    assert r["errors"] == [] and codes(r, "warnings") == ["method-inferred"]
    # ...and the name makes it eagle3, as vLLM's SpeculativeConfig.__post_init__ detects it
    assert _vllm.lint(["--speculative-config", json.dumps({"model": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B",
                                                           "num_speculative_tokens": 3})])["effective_chain"] == ["eagle3"]
    assert codes(_vllm.validate({"num_speculative_tokens": 3})) == ["method-missing"]


@pytest.mark.parametrize("config, code", [
    ({"method": "eagle3", "num_speculative_tokens": 3}, "model-missing"),
    ({"method": "ngram"}, "num-speculative-tokens-missing"),
    ({"method": "mtp"}, "num-speculative-tokens-missing"),
    ({"method": "ngram", "num_speculative_tokens": 0}, "num-speculative-tokens-range"),
    ({"method": "ngram", "num_speculative_tokens": "four"}, "num-speculative-tokens-type"),
    ({"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_min": 5, "prompt_lookup_max": 3}, "ngram-window"),
    ({"method": "ngram", "num_speculative_tokens": 4, "tensor_parallel_size": 2}, "tensor-parallel-size-key"),
    ({"method": "eagle3", "model": "m", "num_speculative_tokens": 3, "enable_adaptive_verification": True},
     "adaptive-verification-method"),
    ({"method": "ngram", "num_speculative_tokens": 4, "rejection_sample_method": "strict"}, "rejection-method-unknown"),
    ({"method": "ngram", "num_speculative_tokens": 4, "synthetic_acceptance_length": 2.0}, "synthetic-keys-without-method"),
])
def test_configs_vllm_refuses(config: dict, code: str) -> None:
    assert code in codes(_vllm.validate(config))


def test_model_optional_methods() -> None:
    for method in ("mtp", "dspark", "ngram"):
        assert "model-missing" not in codes(_vllm.validate({"method": method, "num_speculative_tokens": 2}))
    r = _vllm.validate({"method": "eagle3", "model": "m"})
    assert r["errors"] == [] and codes(r, "warnings") == ["num-speculative-tokens-from-draft"]


def test_synthetic_acceptance_is_benchmark_only_and_checked() -> None:
    base = {"method": "ngram", "num_speculative_tokens": 3, "rejection_sample_method": "synthetic"}
    ok = _vllm.validate(dict(base, synthetic_acceptance_rates=[0.9, 0.7, 0.5]))
    assert ok["errors"] == [] and codes(ok, "warnings") == ["synthetic-acceptance"]
    for bad in ({}, {"synthetic_acceptance_rates": [0.9, 0.7]}, {"synthetic_acceptance_rates": [0.5, 0.7, 0.1]},
                {"synthetic_acceptance_length": 5.0},
                {"synthetic_acceptance_length": 2.0, "synthetic_acceptance_rates": [0.9, 0.7, 0.5]}):
        assert codes(_vllm.validate(dict(base, **bad))) == ["synthetic-invalid"]


def test_mtp_multi_step_warning() -> None:
    assert codes(_vllm.validate({"method": "mtp", "num_speculative_tokens": 3}), "warnings") == ["mtp-multi-step"]


def test_versions_that_no_source_records_are_warnings_not_guesses() -> None:
    r = _vllm.validate({"method": "dspark", "model": "deepseek-ai/dspark_qwen3_8b_block7", "num_speculative_tokens": 7},
                       "0.25.0")
    assert r["errors"] == [] and codes(r, "warnings") == ["vllm-min-version-unknown"]
    r = _vllm.validate({"method": "ngram", "num_speculative_tokens": 4}, "0.25.0", legacy_flags=["--spec-method"])
    assert codes(r, "warnings") == ["legacy-flags-min-version-unknown"]


def test_bad_version_and_bad_config_type() -> None:
    with pytest.raises(SpecdecError, match="vllm_version='latest'"):
        _vllm.validate(DFLASH, "latest")
    with pytest.raises(SpecdecError, match="mapping"):
        _vllm.validate(["dflash"])  # type: ignore[arg-type]


# ---------------------------------------------------------------- spec_lint shape


def test_lint_from_flags_gives_outcome_chain_and_cli() -> None:
    r = _vllm.lint(["--spec-method", "dflash", "--spec-model", "z-lab/X-DFlash", "--spec-tokens", "8",
                    "--attention-backend", "flash_attn"], "0.20.1")
    assert r["outcome"] == "serves-with-speculation" and r["effective_chain"] == ["dflash"]
    assert r["cli"][0] == "--speculative-config" and json.loads(r["cli"][1])["num_speculative_tokens"] == 8
    assert codes(r, "warnings") == ["legacy-flags-min-version-unknown"]


def test_lint_refusal_and_no_speculation() -> None:
    r = _vllm.lint(["--spec-method", "dflash", "--spec-tokens", "8"], "0.20.1")
    assert r["outcome"] == "refuses" and r["cli"] == [] and "model-missing" in codes(r)
    r = _vllm.lint(["--max-model-len", "4096"])
    assert r["outcome"] == "serves-without-speculation" and r["speculative_config"] is None


def test_lint_params_merges_speculative_config_after_flags() -> None:
    r = _vllm.lint_params({"flags": ["--attention-backend", "flash_attn"], "vllm_version": "0.20.1",
                           "speculative_config": json.dumps({"method": "dflash", "model": "m", "num_speculative_tokens": 7})})
    assert r["errors"] == [] and r["warnings"] == [] and r["effective_chain"] == ["dflash"]
    with pytest.raises(SpecdecError, match="speculative_config is not JSON"):
        _vllm.lint_params({"speculative_config": "{bad"})


def test_lint_params_reads_a_vllm_units_env_as_its_launcher_does() -> None:
    spec = json.dumps({"method": "dflash", "model": "m", "num_speculative_tokens": 7})
    # the speculative config from VLLM_SPECULATIVE_CONFIG; the engine flags from VLLM_SERVE_ARGS count
    alone = _vllm.lint_params({"env": {"VLLM_SPECULATIVE_CONFIG": spec}, "vllm_version": "0.20.1"})
    assert alone["effective_chain"] == ["dflash"]
    assert [w["code"] for w in alone["warnings"]] == ["dflash-attention-backend-auto"]
    served = _vllm.lint_params({"env": {"VLLM_SPECULATIVE_CONFIG": spec,
                                        "VLLM_SERVE_ARGS": "--attention-backend flash_attn --max-model-len 4096"},
                                "vllm_version": "0.20.1"})
    assert served["errors"] == [] and served["warnings"] == [] and served["speculative_config"]["model"] == "m"
    # an explicit speculative_config wins over the env's; an empty one means no speculation
    explicit = _vllm.lint_params({"env": {"VLLM_SPECULATIVE_CONFIG": spec},
                                  "speculative_config": {"method": "ngram", "num_speculative_tokens": 4,
                                                         "prompt_lookup_max": 4}})
    assert explicit["effective_chain"] == ["ngram"]
    assert _vllm.lint_params({"env": {"VLLM_SPECULATIVE_CONFIG": " "}})["outcome"] == "serves-without-speculation"
    with pytest.raises(SpecdecError, match=r"env\.VLLM_SPECULATIVE_CONFIG is not JSON"):
        _vllm.lint_params({"env": {"VLLM_SPECULATIVE_CONFIG": "{method: ngram}"}})
    with pytest.raises(SpecdecError, match=r"env\.VLLM_SERVE_ARGS: No closing quotation"):
        _vllm.lint_params({"env": {"VLLM_SERVE_ARGS": "--served-model-name 'x"}})
