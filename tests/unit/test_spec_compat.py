"""llama.cpp's draft/target vocabulary rule, check by check, on hand-built headers."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from gguf_bytes import Builder, T

from ansible_collections.llmfleet.specdec.plugins.module_utils.gguf._gguf import read_header
from ansible_collections.llmfleet.specdec.plugins.module_utils.llamacpp._llamacpp import (
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
    assert unknown["loads"] is False and "unknown tokenizer: 'sentencepiece-x'" in unknown["load_error"]


@pytest.mark.parametrize("order", ["<", ">"])
def test_byte_order_does_not_matter(tmp_path: Path, order: str) -> None:
    b = Builder(order).kv("general.architecture", T["str"], "llama").kv("tokenizer.ggml.model", T["str"], "gpt2")
    b.kv("tokenizer.ggml.pre", T["str"], "gpt-2").kv("tokenizer.ggml.tokens", T["arr"], (T["str"], BASE_TOKENS))
    b.kv("tokenizer.ggml.merges", T["arr"], (T["str"], ["a b"]))
    p = tmp_path / "o.gguf"
    p.write_bytes(b.build())
    r = compat_report(_model(tmp_path, "t"), read_header(str(p)))
    assert r["compatible"] and r["tokenizers_identical"]


# ------------------------------------------------------------------ llama-vocab.cpp's loader rules


def _hdr(tmp_path: Path, name: str, *, tokens: list[str | bytes] | None = None, model: str = "gpt2",
         pre: str | None = "gpt-2", merges: bool = True, extra: dict[str, tuple[int, Any]] | None = None,
         arch: str = "llama") -> Any:
    b = Builder().kv("general.architecture", T["str"], arch).kv("tokenizer.ggml.model", T["str"], model)
    if pre is not None:
        b.kv("tokenizer.ggml.pre", T["str"], pre)
    b.kv("tokenizer.ggml.tokens", T["arr"], (T["str"], tokens if tokens is not None else BASE_TOKENS))
    if merges:
        b.kv("tokenizer.ggml.merges", T["arr"], (T["str"], ["a b"]))
    for key, (vtype, value) in (extra or {}).items():
        b.kv(key, vtype, value)
    p = tmp_path / f"{name}.gguf"
    p.write_bytes(b.build())
    return read_header(str(p))


def test_a_pre_tokenizer_treated_like_gemma4_forces_add_bos(tmp_path: Path) -> None:
    # LLAMA_VOCAB_PRE_TYPE_GEMMA4 covers granite-embed-multi-311m too; the override comes after add_bos_token
    v = vocab_params(_hdr(tmp_path, "g", pre="granite-embed-multi-311m",
                          extra={"tokenizer.ggml.add_bos_token": (T["bool"], False)}))
    assert v["loads"] and v["add_bos"] is True
    plain = _hdr(tmp_path, "p", extra={"tokenizer.ggml.add_bos_token": (T["bool"], False)})
    r = are_compatible(plain, _hdr(tmp_path, "g2", pre="granite-embed-multi-311m"))
    assert not r["compatible"] and r["reasons"][0].startswith("bos differs: add_bos target False / draft True")


def test_default_bos_eos_are_cleared_only_for_the_gemma4_model(tmp_path: Path) -> None:
    by_pre = vocab_params(_hdr(tmp_path, "pre", pre="gemma4"))
    assert (by_pre["bos_id"], by_pre["eos_id"], by_pre["add_bos"]) == (11, 11, True)
    by_model = vocab_params(_hdr(tmp_path, "model", model="gemma4", pre="gpt-2"))
    # the gemma4 model clears the defaults and overrides the pre-tokenizer to gemma4 (so add_bos is forced)
    assert (by_model["bos_id"], by_model["eos_id"], by_model["add_bos"]) == (None, None, True)
    assert by_model["vocab_type"] == "BPE"


def test_empty_token_loads_as_empty_marker(tmp_path: Path) -> None:
    empty, named = list(BASE_TOKENS), list(BASE_TOKENS)
    empty[7], named[7] = "", "[EMPTY_7]"
    assert are_compatible(_hdr(tmp_path, "e", tokens=empty), _hdr(tmp_path, "n", tokens=named))["compatible"]
    r = are_compatible(_hdr(tmp_path, "e2", tokens=empty), _hdr(tmp_path, "t"))
    assert r["first_mismatch"] == {"id": 7, "target": "[EMPTY_7]", "draft": "<t7>"}


def test_token_text_is_cut_at_nul(tmp_path: Path) -> None:
    a, b = list(BASE_TOKENS), list(BASE_TOKENS)
    a[9], b[9] = b"<t9>\x00tail-a", b"<t9>\x00other"
    assert are_compatible(_hdr(tmp_path, "a", tokens=a), _hdr(tmp_path, "b", tokens=b))["compatible"]
    assert are_compatible(_hdr(tmp_path, "a2", tokens=a), _hdr(tmp_path, "base"))["compatible"]


def test_hybriddna_kmer_marker_is_stripped(tmp_path: Path) -> None:
    # stripped only after <oov>, and only from a text longer than the marker
    head = [f"<c{i}>" for i in range(10)] + ["m\ue000", "<oov>"]
    dna = [*head, "ACG\ue000", "TTA\ue000", "\ue000"]
    plain = [*head, "ACG", "TTA", "\ue000"]
    r = are_compatible(_hdr(tmp_path, "dna", model="hybriddna", pre=None, tokens=dna),
                       _hdr(tmp_path, "plain", pre=None, tokens=plain))
    assert r["compatible"], r["reasons"]
    before = [f"<c{i}>" for i in range(10)] + ["m", "<oov>"] + plain[12:]
    r = are_compatible(_hdr(tmp_path, "dna2", model="hybriddna", pre=None, tokens=dna),
                       _hdr(tmp_path, "p2", pre=None, tokens=before))
    assert r["first_mismatch"] == {"id": 10, "target": "m\ue000", "draft": "m"}
    r = are_compatible(_hdr(tmp_path, "dna3", model="hybriddna", pre=None, tokens=dna),
                       _hdr(tmp_path, "p3", pre=None, tokens=dna))
    assert r["first_mismatch"]["id"] == 12  # the gpt2 draft keeps its markers


def test_tokenizer_model_none_ignores_tokens_and_add_bos(tmp_path: Path) -> None:
    v = vocab_params(_hdr(tmp_path, "none", model="none", pre=None, merges=False,
                          extra={"tokenizer.ggml.add_bos_token": (T["bool"], True),
                                 "llama.vocab_size": (T["u32"], 5)}))
    assert (v["vocab_type"], v["n_tokens"], v["add_bos"], v["bos_id"], v["loads"]) == ("NONE", 5, False, None, True)
    big = _hdr(tmp_path, "big", model="none", pre=None, merges=False, extra={"llama.vocab_size": (T["u32"], 300)})
    r = are_compatible(big, big)
    assert not r["compatible"] and r["server_outcome"] == "aborts-at-start"


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"merges": False}, "cannot find tokenizer merges"),
    ({"pre": "gpt-9000"}, "unknown pre-tokenizer type: 'gpt-9000'"),
    ({"extra": {"tokenizer.ggml.bos_token_id": (T["i32"], 1)}},
     "key tokenizer.ggml.bos_token_id has wrong type int32 but expected type uint32"),
    ({"extra": {"tokenizer.ggml.add_bos_token": (T["u8"], 1)}},
     "key tokenizer.ggml.add_bos_token has wrong type uint8 but expected type bool"),
    ({"extra": {"tokenizer.ggml.token_type": (T["arr"], (T["i32"], [1] * 299))}},
     "Index out of array bounds for toktypes (299 < 300)"),
    ({"extra": {"tokenizer.ggml.scores": (T["arr"], (T["f64"], [0.0] * 300))}},
     "invalid gguf type for tokenizer.ggml.scores"),
    ({"model": "sentencepiece"}, "unknown tokenizer: 'sentencepiece'"),
])
def test_files_llama_cpp_refuses_are_not_compatible(tmp_path: Path, kwargs: dict[str, Any], message: str) -> None:
    bad = _hdr(tmp_path, "bad", **kwargs)
    v = vocab_params(bad)
    assert v["loads"] is False and message in v["load_error"] and v["load_failure"] == "throws"
    for target, draft, side in ((_hdr(tmp_path, "ok"), bad, "draft"), (bad, _hdr(tmp_path, "ok2"), "target")):
        r = compat_report(target, draft)
        assert r["compatible"] is False and r["loads"] is False and r["server_outcome"] == "refuses-to-start"
        assert r["reasons"][0].startswith(f"{side}: will not load: ") and message in r["reasons"][0]
        assert "exits" in r["reasons"][0]


def test_kimi_k2_needs_no_merges(tmp_path: Path) -> None:
    assert vocab_params(_hdr(tmp_path, "k", pre="kimi-k2", merges=False))["loads"] is True
    # the gemma4 model has no such exception
    assert vocab_params(_hdr(tmp_path, "g", model="gemma4", pre="kimi-k2", merges=False))["loads"] is False


def test_duplicate_loaded_texts_abort(tmp_path: Path) -> None:
    dup = list(BASE_TOKENS)
    dup[20] = b"<t10>\x00x"  # cut at NUL it equals token 10
    r = compat_report(_hdr(tmp_path, "t"), _hdr(tmp_path, "d", tokens=dup))
    assert r["server_outcome"] == "aborts-at-start" and not r["compatible"]
    assert "tokens 10 and 20 load with the same text" in r["reasons"][0]
