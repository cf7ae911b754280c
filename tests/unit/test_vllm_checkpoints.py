# spec_lint's vLLM rules that read the checkpoints, and the rules real vLLM 0.32.0 corrected (docs/vllm-oracle.md).
from __future__ import annotations

import json
from pathlib import Path

import pytest

from ansible_collections.llmfleet.specdec.plugins.module_utils.vllm import _vllm

LLAMA = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "num_hidden_layers": 2, "vocab_size": 512}


def checkpoint(root: Path, name: str, config: dict, vocab: dict | None = None) -> str:
    d = root / name
    d.mkdir()
    (d / "config.json").write_text(json.dumps(config))
    if vocab is not None:
        (d / "tokenizer.json").write_text(json.dumps({"model": {"type": "BPE", "vocab": vocab, "merges": []},
                                                      "added_tokens": []}))
    return str(d)


def lint(target: str, **spec) -> dict:
    return _vllm.lint_params({"flags": ["--model", target, "--speculative-config", json.dumps(spec)]})


def codes(result: dict, kind: str = "errors") -> list[str]:
    return [f["code"] for f in result[kind]]


def test_draft_path_missing_is_refused(tmp_path: Path) -> None:
    target = checkpoint(tmp_path, "t", LLAMA)
    assert codes(lint(target, method="draft_model", model=str(tmp_path / "nope"), num_speculative_tokens=3)) == [
        "draft-path-missing"]
    (tmp_path / "empty").mkdir()
    r = lint(target, method="draft_model", model=str(tmp_path / "empty"), num_speculative_tokens=3)
    assert codes(r) == ["draft-path-missing"] and "has no config.json" in r["errors"][0]["reason"]
    # legacy flags reach the same rule
    r = _vllm.lint_params({"flags": ["--model", target, "--spec-method", "draft_model", "--spec-model",
                                     "./not/here", "--spec-tokens", "2"]})
    assert codes(r) == ["draft-path-missing"]
    # a repository id cannot be checked offline: no verdict
    assert lint(target, method="draft_model", model="org/draft-1b", num_speculative_tokens=3)["errors"] == []
    assert codes(lint(target, method="draft_model", model="not a repo id!", num_speculative_tokens=3)) == [
        "draft-path-missing"]


def test_draft_vocab_size_and_tokenizer(tmp_path: Path) -> None:
    target = checkpoint(tmp_path, "t", LLAMA, {"a": 0, "b": 1})
    bigger = checkpoint(tmp_path, "big", {**LLAMA, "vocab_size": 640}, {"a": 0, "b": 1})
    other = checkpoint(tmp_path, "other", {**LLAMA, "num_hidden_layers": 1}, {"x": 0, "y": 1})
    same = checkpoint(tmp_path, "same", {**LLAMA, "num_hidden_layers": 1}, {"a": 0, "b": 1})
    r = lint(target, method="draft_model", model=bigger, num_speculative_tokens=3)
    assert codes(r) == ["draft-vocab-size"] and "vocab_size=512" in r["errors"][0]["reason"]
    # vLLM's way out: a heterogeneous vocabulary
    assert lint(target, method="draft_model", model=bigger, num_speculative_tokens=3,
                use_heterogeneous_vocab=True)["errors"] == []
    r = lint(target, method="draft_model", model=other, num_speculative_tokens=3)
    assert r["outcome"] == "serves-with-speculation" and codes(r, "warnings") == ["draft-tokenizer-differs"]
    assert lint(target, method="draft_model", model=same, num_speculative_tokens=3)["warnings"] == []
    # a model without method is inferred as draft_model, and shows in the chain that runs
    r = lint(target, model=same, num_speculative_tokens=3)
    assert r["effective_chain"] == ["draft_model"] and r["outcome"] == "serves-with-speculation"


def test_num_speculative_tokens_from_n_predict(tmp_path: Path) -> None:
    target = checkpoint(tmp_path, "t", LLAMA)
    plain = checkpoint(tmp_path, "d", LLAMA)
    with_n = checkpoint(tmp_path, "dn", {**LLAMA, "n_predict": 4})
    r = lint(target, method="draft_model", model=plain)
    assert codes(r) == ["num-speculative-tokens-missing"] and r["warnings"] == []
    assert lint(target, method="draft_model", model=with_n)["errors"] == []


def test_mtp_needs_mtp_layers(tmp_path: Path) -> None:
    llama = checkpoint(tmp_path, "llama", LLAMA)
    deepseek = checkpoint(tmp_path, "ds", {"model_type": "deepseek_v3", "num_nextn_predict_layers": 1,
                                           "vocab_size": 512})
    unknown_family = checkpoint(tmp_path, "fam", {"model_type": "some_new_family", "vocab_size": 512})
    assert codes(lint(llama, method="mtp", num_speculative_tokens=1)) == ["mtp-no-mtp-layers"]
    assert codes(lint(llama, method="deepseek_mtp", num_speculative_tokens=1)) == ["mtp-no-mtp-layers"]
    assert lint(deepseek, method="mtp", num_speculative_tokens=1)["errors"] == []
    # a family the collection does not know is not refused on a guess
    assert lint(unknown_family, method="mtp", num_speculative_tokens=1)["errors"] == []


@pytest.mark.parametrize("spec, code", [
    ({"method": "ngram", "num_speculative_tokens": 3, "lookahead_slots": 4}, "speculative-config-unknown-key"),
    ({"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_min": 0}, "prompt-lookup-min-range"),
    ({"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": -1}, "prompt-lookup-max-range"),
    ({"method": "ngram", "num_speculative_tokens": 3, "max_model_len": 0}, "max-model-len-range"),
    ({"method": "[ngram]", "num_speculative_tokens": 3}, "method-unknown"),
    ({"method": "ngram", "num_speculative_tokens": 3.5}, "num-speculative-tokens-type"),
])
def test_what_vllm_refuses_that_the_linter_used_to_pass(spec: dict, code: str) -> None:
    assert code in codes(_vllm.lint(["--speculative-config", json.dumps(spec)]))


@pytest.mark.parametrize("n", ["3", 3.0, True])
def test_integers_pydantic_reads_leniently_are_accepted(n) -> None:
    assert _vllm.lint(["--speculative-config", json.dumps({"method": "ngram", "num_speculative_tokens": n})])[
        "outcome"] == "serves-with-speculation"


def test_conflict_quotes_vllms_message() -> None:
    r = _vllm.lint(["--spec-tokens", "4", "--speculative-config", json.dumps({"method": "ngram",
                                                                              "num_speculative_tokens": 3})])
    assert "are mutually exclusive" in r["errors"][0]["reason"]


def test_vllm_renames_draft_model_by_the_drafts_name(tmp_path: Path) -> None:
    """Real vLLM 0.32.0 ran method draft_model with a folder named my-eagle3-draft as eagle3 (the oracle)."""
    target = checkpoint(tmp_path, "t", LLAMA)
    named = checkpoint(tmp_path, "my-eagle3-draft", LLAMA)
    r = lint(target, method="draft_model", model=named, num_speculative_tokens=3)
    assert r["effective_chain"] == ["eagle3"] and codes(r, "warnings") == ["method-from-draft-name"]
    medusa = checkpoint(tmp_path, "heads", {"model_type": "medusa", "vocab_size": 512})
    assert lint(target, method="draft_model", model=medusa, num_speculative_tokens=3)["effective_chain"] == ["medusa"]
    # explicit eagle3 stays eagle3 whatever the name
    assert lint(target, method="eagle3", model=str(tmp_path / "t"), num_speculative_tokens=3)["effective_chain"] == [
        "eagle3"]
