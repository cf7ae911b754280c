"""Hostile header values in the facts layer: sizes, signs and types are checked, never trusted."""
from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

import pytest
from gguf_bytes import Builder, T

from ansible_collections.llmfleet.specdec.plugins.module_utils.common._errors import GGUFError
from ansible_collections.llmfleet.specdec.plugins.module_utils.gguf._gguf import read_header
from ansible_collections.llmfleet.specdec.plugins.module_utils.gguf._model_facts import model_facts


def _write(tmp_path: Path, arch: str, kvs: list[tuple[str, int, Any]], order: str = "<") -> Path:
    b = Builder(order=order).kv("general.architecture", T["str"], arch)
    for key, vtype, value in kvs:
        b.kv(key, vtype, value)
    p = tmp_path / "m.gguf"
    p.write_bytes(b.build())
    return p


def _facts(tmp_path: Path, arch: str, kvs: list[tuple[str, int, Any]], **kw: Any) -> dict[str, Any]:
    return model_facts(read_header(str(_write(tmp_path, arch, kvs))), **kw)


def _refused(tmp_path: Path, arch: str, kvs: list[tuple[str, int, Any]], key: str) -> str:
    with pytest.raises(GGUFError) as exc:
        _facts(tmp_path, arch, kvs)
    msg = str(exc.value)
    assert str(tmp_path / "m.gguf") in msg and repr(key) in msg, msg  # names the file and the key
    assert "reconvert" in msg  # and what to do
    return msg


@pytest.mark.parametrize(("vtype", "value", "shown"), [
    (T["u32"], 40000, "40000, more than 512"),           # was: a per-layer set rebuilt 40,000 times
    (T["u64"], 2**64 - 1, "18446744073709551615"),        # was: a u64 layer count allocating without bound
    (T["i32"], -7, "-7, a negative count"),
    (T["str"], "32", "a string (2 bytes) '32'"),
    (T["arr"], (T["u32"], [1, 2]), "an array of 2 u32"),
    (T["f32"], 4.0, "a f32 4.0"),
])
def test_block_count_is_checked(tmp_path: Path, vtype: int, value: Any, shown: str) -> None:
    msg = _refused(tmp_path, "qwen35", [("qwen35.block_count", vtype, value)], "qwen35.block_count")
    assert shown in msg


@pytest.mark.parametrize(("value", "shown"), [(-1, "negative"), (5, "more than 4"), (2**31 - 1, "more than 4")])
def test_nextn_predict_layers_is_checked(tmp_path: Path, value: int, shown: str) -> None:
    msg = _refused(tmp_path, "qwen35", [("qwen35.block_count", T["u32"], 4),
                                        ("qwen35.nextn_predict_layers", T["i32"], value)],
                   "qwen35.nextn_predict_layers")
    assert shown in msg


@pytest.mark.parametrize("key", ["llama.context_length", "llama.attention.sliding_window", "llama.expert_count",
                                 "llama.embedding_length", "llama.attention.key_length",
                                 "tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id"])
def test_an_array_where_a_number_is_expected(tmp_path: Path, key: str) -> None:
    # was: the reader's Array object reached the module result and exit_json failed on it
    msg = _refused(tmp_path, "llama", [("llama.block_count", T["u32"], 2), (key, T["arr"], (T["u32"], [1, 2, 3]))], key)
    assert "an array of 3 u32 where an integer is expected" in msg


@pytest.mark.parametrize("key", ["llama.attention.head_count", "llama.attention.head_count_kv",
                                 "llama.feed_forward_length"])
def test_per_layer_keys(tmp_path: Path, key: str) -> None:
    base = [("llama.block_count", T["u32"], 3)]
    f = _facts(tmp_path, "llama", [*base, (key, T["arr"], (T["u32"], [4, 2, 4]))])
    assert [4, 2, 4] in f.values()
    msg = _refused(tmp_path, "llama", [*base, (key, T["str"], "4")], key)  # was: TypeError
    assert "a string (1 bytes) '4' where an integer or an array" in msg
    msg = _refused(tmp_path, "llama", [*base, (key, T["arr"], (T["u32"], [4] * 100000))], key)
    assert "100000 entries but block_count is 3" in msg
    msg = _refused(tmp_path, "llama", [*base, (key, T["arr"], (T["str"], ["a", "b", "c"]))], key)
    assert "an array of 3 string" in msg
    msg = _refused(tmp_path, "llama", [*base, (key, T["arr"], (T["i32"], [4, -2, 4]))], key)
    assert "-2, a negative count" in msg


def test_string_where_a_string_is_expected_only(tmp_path: Path) -> None:
    for key in ("general.name", "tokenizer.ggml.model", "tokenizer.ggml.pre"):
        msg = _refused(tmp_path, "llama", [(key, T["arr"], (T["u8"], [1]))], key)
        assert "where a string is expected" in msg
    msg = _refused(tmp_path, "llama", [("tokenizer.ggml.tokens", T["str"], "abc")], "tokenizer.ggml.tokens")
    assert "where an array of strings is expected" in msg
    msg = _refused(tmp_path, "llama", [("tokenizer.ggml.add_bos_token", T["str"], "yes")],
                   "tokenizer.ggml.add_bos_token")
    assert "where a bool is expected" in msg


def test_huge_sliding_window_pattern_and_recurrent_arrays(tmp_path: Path) -> None:
    base = [("qwen35.block_count", T["u32"], 4)]
    key = "qwen35.attention.sliding_window_pattern"
    msg = _refused(tmp_path, "qwen35", [*base, (key, T["arr"], (T["bool"], [True] * 200000))], key)
    assert "200000 entries, more than llama.cpp's 512 layers" in msg
    key = "qwen35.attention.recurrent_layers"
    msg = _refused(tmp_path, "qwen35", [*base, (key, T["arr"], (T["bool"], [True] * 5))], key)
    assert "5 entries but block_count is 4" in msg


def test_a_long_string_is_described_briefly(tmp_path: Path) -> None:
    msg = _refused(tmp_path, "llama", [("llama.block_count", T["str"], "9" * 100000)], "llama.block_count")
    assert "100000 bytes" in msg and len(msg) < 600


def test_good_header_values_stay_plain_data(tmp_path: Path) -> None:
    f = _facts(tmp_path, "qwen35", [
        ("qwen35.block_count", T["u64"], 5), ("qwen35.nextn_predict_layers", T["u8"], 1),
        ("qwen35.context_length", T["u64"], 2**40), ("tokenizer.ggml.bos_token_id", T["i32"], 7),
        ("tokenizer.ggml.add_bos_token", T["u8"], 1),
        ("t.nested", T["arr"], (T["arr"], [(T["str"], ["x", "y"]), (T["f64"], [float("nan")])])),
    ], keys=["t.nested", "missing"])
    assert f["block_count"] == 5 and f["mtp"]["nextn_layers"] == [4] and f["context_length"] == 2**40
    assert f["kv_layers"] == [3] and f["recurrent_layers"] == [0, 1, 2]
    assert f["tokenizer"]["bos_token_id"] == 7 and f["tokenizer"]["add_bos_token"] == 1
    assert f["values"]["t.nested"][0] == ["x", "y"] and f["values"]["missing"] is None
    json.dumps(f)  # nothing but plain data


def test_nextn_without_block_count_names_no_negative_layers(tmp_path: Path) -> None:
    f = _facts(tmp_path, "qwen35", [("qwen35.nextn_predict_layers", T["u32"], 2)])
    assert f["mtp"]["nextn_layers"] == [] and f["kv_layers"] == []


# ------------------------------------------------------------------------------------------------
# Fingerprints hash the stored bytes, never decoded text


def _tokenizer_file(tmp_path: Path, name: str, pre: bytes, token: bytes, order: str = "<") -> Path:
    b = Builder(order=order).kv("general.architecture", T["str"], "llama")
    b.kv("tokenizer.ggml.model", T["str"], "gpt2")
    b.raw_kv(b.s("tokenizer.ggml.pre") + struct.pack(order + "I", T["str"]) + b.s(pre))
    b.raw_kv(b.s("tokenizer.ggml.tokens") + struct.pack(order + "IIQ", T["arr"], T["str"], 2)
             + b.s(b"a") + b.s(token))
    b.kv("tokenizer.ggml.x", T["arr"], (T["arr"], [(T["u16"], [1, 2]), (T["f32"], [0.5])]))
    p = tmp_path / name
    p.write_bytes(b.build())
    return p


def _tok(path: Path) -> dict[str, Any]:
    return model_facts(read_header(str(path)))["tokenizer"]


def test_fingerprint_tells_apart_invalid_utf8_that_decodes_alike(tmp_path: Path) -> None:
    a = _tok(_tokenizer_file(tmp_path, "a.gguf", b"gpt\xff", b"b"))
    b = _tok(_tokenizer_file(tmp_path, "b.gguf", b"gpt\xfe", b"b"))
    assert a["pre"] == b["pre"] == "gpt\ufffd"  # the same text once decoded...
    assert a["fingerprint"] != b["fingerprint"]  # ...but different bytes: different tokenizers
    assert a["tokens_sha256"] == b["tokens_sha256"]


def test_token_hashes_tell_apart_invalid_utf8(tmp_path: Path) -> None:
    a = _tok(_tokenizer_file(tmp_path, "a.gguf", b"gpt2", b"\xc3"))
    b = _tok(_tokenizer_file(tmp_path, "b.gguf", b"gpt2", b"\xc4"))
    assert a["tokens_sha256"] != b["tokens_sha256"] and a["tokens_sha256_2000"] != b["tokens_sha256_2000"]
    assert a["fingerprint"] != b["fingerprint"]


def test_fingerprint_is_the_same_in_both_byte_orders_with_nested_arrays(tmp_path: Path) -> None:
    le = _tok(_tokenizer_file(tmp_path, "le.gguf", b"gpt\xff", b"\xc3"))
    be = _tok(_tokenizer_file(tmp_path, "be.gguf", b"gpt\xff", b"\xc3", order=">"))
    assert le["fingerprint"] == be["fingerprint"] and le["tokens_sha256"] == be["tokens_sha256"]
