"""llama.cpp's draft/target vocabulary rule, check by check, on hand-built headers."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from gguf_bytes import Builder, T

from ansible_collections.llmfleet.specdec.plugins.module_utils._gguf import read_header
from ansible_collections.llmfleet.specdec.plugins.module_utils._llamacpp import (
    are_compatible,
    compat_report,
    vocab_params,
)

BASE_TOKENS = [f"<t{i}>" for i in range(300)]


def _model(tmp_path: Path, name: str, *, tokens: list[str] | None = None, model: str = "gpt2",
           pre: str | None = "gpt-2", extra: dict[str, tuple[int, Any]] | None = None,
           merges: list[str] | None = None) -> Any:
    b = Builder().kv("general.architecture", T["str"], "llama").kv("llama.block_count", T["u32"], 2)
    b.kv("tokenizer.ggml.model", T["str"], model)
    if pre is not None:
        b.kv("tokenizer.ggml.pre", T["str"], pre)
    b.kv("tokenizer.ggml.tokens", T["arr"], (T["str"], tokens if tokens is not None else BASE_TOKENS))
    b.kv("tokenizer.ggml.merges", T["arr"], (T["str"], merges if merges is not None else ["a b"]))
    for key, (vtype, value) in (extra or {}).items():
        b.kv(key, vtype, value)
    p = tmp_path / f"{name}.gguf"
    p.write_bytes(b.build())
    return read_header(str(p))


def test_identical_tokenizers_are_compatible_and_identical(tmp_path: Path) -> None:
    t, d = _model(tmp_path, "t"), _model(tmp_path, "d")
    r = compat_report(t, d)
    assert r["compatible"] and r["reasons"] == [] and r["first_mismatch"] is None
    assert r["tokenizers_identical"] and r["tokens_sha256_2000_equal"]


def test_first_mismatching_token_is_named(tmp_path: Path) -> None:
    other = list(BASE_TOKENS)
    other[257] = "Ġhe"
    other[280] = "zz"
    r = compat_report(_model(tmp_path, "t"), _model(tmp_path, "d", tokens=other))
    assert not r["compatible"]
    assert r["first_mismatch"] == {"id": 257, "target": "<t257>", "draft": "Ġhe"}
    assert any("token 257 differs" in x for x in r["reasons"])
    assert not r["tokenizers_identical"] and not r["tokens_sha256_2000_equal"]


def test_tokens_below_id_5_are_not_compared(tmp_path: Path) -> None:
    # llama.cpp starts at SPEC_VOCAB_CHECK_START_TOKEN_ID = 5
    other = list(BASE_TOKENS)
    other[3] = "<different>"
    r = compat_report(_model(tmp_path, "t"), _model(tmp_path, "d", tokens=other))
    assert r["compatible"]
    assert not r["tokenizers_identical"]  # identity is stricter than llama.cpp's rule


def test_merges_differ_tokenizers_not_identical_but_compatible(tmp_path: Path) -> None:
    r = compat_report(_model(tmp_path, "t"), _model(tmp_path, "d", merges=["a b", "c d"]))
    assert r["compatible"] and not r["tokenizers_identical"] and r["tokens_sha256_2000_equal"]


def test_vocab_size_difference_over_128(tmp_path: Path) -> None:
    ok = compat_report(_model(tmp_path, "t"), _model(tmp_path, "d", tokens=BASE_TOKENS[:172]))
    assert ok["compatible"]  # a difference of exactly 128 passes
    bad = are_compatible(_model(tmp_path, "t"), _model(tmp_path, "d2", tokens=BASE_TOKENS[:171]))
    assert not bad["compatible"] and "differs by 129" in bad["reasons"][0]


def test_vocab_type_differs(tmp_path: Path) -> None:
    r = are_compatible(_model(tmp_path, "t"), _model(tmp_path, "d", model="llama", pre=None))
    assert not r["compatible"]
    assert r["reasons"][0].startswith("vocab type differs: target BPE (2), draft SPM (1)")


def test_add_bos_and_bos_id(tmp_path: Path) -> None:
    t = _model(tmp_path, "t", extra={"tokenizer.ggml.add_bos_token": (T["bool"], True),
                                     "tokenizer.ggml.bos_token_id": (T["u32"], 298)})
    same = _model(tmp_path, "s", extra={"tokenizer.ggml.add_bos_token": (T["bool"], True),
                                        "tokenizer.ggml.bos_token_id": (T["u32"], 298)})
    other_id = _model(tmp_path, "o", extra={"tokenizer.ggml.add_bos_token": (T["bool"], True),
                                            "tokenizer.ggml.bos_token_id": (T["u32"], 299)})
    no_add = _model(tmp_path, "n", extra={"tokenizer.ggml.bos_token_id": (T["u32"], 298)})
    assert are_compatible(t, same)["compatible"]
    assert "bos differs" in are_compatible(t, other_id)["reasons"][0]
    assert "bos differs" in are_compatible(t, no_add)["reasons"][0]
    # without add_bos the bos id is not compared
    assert are_compatible(no_add, _model(tmp_path, "n2", extra={"tokenizer.ggml.bos_token_id": (T["u32"], 1)}))["compatible"]


def test_eos_rule_and_defaults(tmp_path: Path) -> None:
    t = _model(tmp_path, "t", extra={"tokenizer.ggml.add_eos_token": (T["bool"], True),
                                     "tokenizer.ggml.eos_token_id": (T["u32"], 297)})
    d = _model(tmp_path, "d", extra={"tokenizer.ggml.add_eos_token": (T["bool"], True)})
    r = are_compatible(t, d)
    # the draft falls back to the BPE default eos id 11
    assert not r["compatible"] and "eos id target 297 / draft 11" in r["reasons"][0]


def test_vocab_params_follow_llama_vocab_defaults(tmp_path: Path) -> None:
    spm = vocab_params(_model(tmp_path, "spm", model="llama", pre=None))
    assert (spm["vocab_type"], spm["bos_id"], spm["eos_id"], spm["add_bos"], spm["add_eos"]) == ("SPM", 1, 2, True, False)
    llama3 = vocab_params(_model(tmp_path, "l3", pre="llama-bpe"))
    assert llama3["add_bos"] is True
    # an out-of-range header id keeps the default; an out-of-range default is disabled
    small = vocab_params(_model(tmp_path, "small", tokens=BASE_TOKENS[:8],
                                extra={"tokenizer.ggml.eos_token_id": (T["u32"], 5000)}))
    assert small["bos_id"] is None and small["eos_id"] is None
    unknown = vocab_params(_model(tmp_path, "u", model="sentencepiece-x"))
    assert unknown["vocab_type"] is None and "not a tokenizer" in unknown["problems"][0]


@pytest.mark.parametrize("order", ["<", ">"])
def test_byte_order_does_not_matter(tmp_path: Path, order: str) -> None:
    b = Builder(order).kv("general.architecture", T["str"], "llama").kv("tokenizer.ggml.model", T["str"], "gpt2")
    b.kv("tokenizer.ggml.pre", T["str"], "gpt-2").kv("tokenizer.ggml.tokens", T["arr"], (T["str"], BASE_TOKENS))
    b.kv("tokenizer.ggml.merges", T["arr"], (T["str"], ["a b"]))
    p = tmp_path / "o.gguf"
    p.write_bytes(b.build())
    r = compat_report(_model(tmp_path, "t"), read_header(str(p)))
    assert r["compatible"] and r["tokenizers_identical"]
