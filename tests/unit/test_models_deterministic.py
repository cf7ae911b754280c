# Checks that the test bed's GGUF writer is byte-deterministic and writes the header features it promises.
from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import gguf
import numpy as np
import pytest

from testbed import models
from testbed.models import ModelSpec, write_model, write_standard_set

TESTS_DIR = Path(__file__).resolve().parents[1]


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def field(reader: gguf.GGUFReader, key: str):
    assert key in reader.fields, f"{key} missing; have {sorted(reader.fields)}"
    return reader.fields[key].contents()


def tensors(reader: gguf.GGUFReader) -> dict[str, gguf.ReaderTensor]:
    return {t.name: t for t in reader.tensors}


@pytest.fixture(scope="module")
def std_set(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return write_standard_set(tmp_path_factory.mktemp("std"))


@pytest.fixture(scope="module")
def readers(std_set: dict[str, Path]) -> dict[str, gguf.GGUFReader]:
    return {name: gguf.GGUFReader(path) for name, path in std_set.items()}


# ------------------------------------------------------------------ determinism

def test_standard_set_is_byte_identical_when_written_twice(std_set, tmp_path):
    again = write_standard_set(tmp_path / "again")
    assert sorted(again) == sorted(std_set)
    for name in std_set:
        assert sha256(again[name]) == sha256(std_set[name]), name
    first_index = (std_set["target.gguf"].parent / "index.json").read_text()
    assert (tmp_path / "again" / "index.json").read_text() == first_index


def test_every_option_combination_is_deterministic(tmp_path):
    spec = ModelSpec(n_layer=3, n_head_kv=[2, 1, 2], sliding_window=64, sliding_window_pattern=[True, False, True],
                     nextn_layers=1, markov_head=True, key_length=48, value_length=16,
                     extra_kv={"llmfleet.note": "x", "llmfleet.list": [1, 2]}, big_endian=True, scale_extra=0.5,
                     draft_noise=0.3, matrix_type="f16")
    a = write_model(tmp_path / "a.gguf", spec)
    b = write_model(tmp_path / "b.gguf", spec)
    assert a.read_bytes() == b.read_bytes()


def test_seed_changes_the_weights_but_not_the_header(tmp_path):
    a = gguf.GGUFReader(write_model(tmp_path / "a.gguf", ModelSpec(seed=1)))
    b = gguf.GGUFReader(write_model(tmp_path / "b.gguf", ModelSpec(seed=2)))
    assert field(a, "tokenizer.ggml.tokens") == field(b, "tokenizer.ggml.tokens")
    assert not np.array_equal(tensors(a)["blk.0.attn_q.weight"].data, tensors(b)["blk.0.attn_q.weight"].data)


def test_cli_writes_the_standard_set_and_prints_the_index(tmp_path, std_set):
    env = {**os.environ, "PYTHONPATH": str(TESTS_DIR)}
    out = subprocess.run([sys.executable, "-m", "testbed.models", str(tmp_path)], env=env, check=True,
                         capture_output=True, text=True, timeout=120).stdout
    index = json.loads(out)
    assert set(index) == set(models.STANDARD_SET)
    for name, entry in index.items():
        assert sha256(tmp_path / name) == entry["sha256"] == sha256(std_set[name])  # same bytes in another process
        assert entry["header_only"] is (not entry["loadable"])


def test_cli_without_outdir_prints_usage():
    env = {**os.environ, "PYTHONPATH": str(TESTS_DIR)}
    proc = subprocess.run([sys.executable, "-m", "testbed.models"], env=env, capture_output=True, text=True,
                          timeout=60, check=False)
    assert proc.returncode == 2
    assert "usage" in proc.stderr


# ------------------------------------------------------------------ tokenizer

def test_target_tokenizer_is_gpt2_bytes_merges_then_controls(readers):
    r = readers["target.gguf"]
    tokens = field(r, "tokenizer.ggml.tokens")
    types = field(r, "tokenizer.ggml.token_type")
    merges = field(r, "tokenizer.ggml.merges")
    assert field(r, "tokenizer.ggml.model") == "gpt2"
    assert field(r, "tokenizer.ggml.pre") == "gpt-2"
    assert len(merges) >= models.N_MERGES
    assert len(tokens) == 256 + models.N_MERGES + 2
    assert tokens[ord("A")] == "A" and tokens[ord(" ")] == "\u0120"  # GPT-2 byte-to-unicode
    assert tokens[-2:] == ["<|bos|>", "<|endoftext|>"]
    assert types[-2:] == [3, 3] and set(types[:-2]) == {1}
    assert field(r, "tokenizer.ggml.bos_token_id") == len(tokens) - 2
    assert field(r, "tokenizer.ggml.eos_token_id") == len(tokens) - 1
    assert field(r, "tokenizer.ggml.add_bos_token") is True
    assert "messages" in field(r, "tokenizer.chat_template")
    for merge in merges:  # every merge's result is a token, so llama.cpp can apply it
        left, right = merge.split(" ")
        assert left + right in tokens


def test_variant_b_differs_from_id_256_on(readers):
    a = field(readers["target.gguf"], "tokenizer.ggml.tokens")
    b = field(readers["draft-othertok.gguf"], "tokenizer.ggml.tokens")
    assert a[:256] == b[:256]
    assert a[256] != b[256]
    assert len(a) == len(b)  # same size: only the texts differ (llama.cpp's size rule alone would pass)
    assert a[-2:] == b[-2:]


@pytest.mark.parametrize("name", ["draft.gguf", "draft-lowaccept.gguf", "draft-dflash.gguf", "draft-dspark.gguf",
                                  "target-swa.gguf", "target-kvarray.gguf", "target-mtp.gguf"])
def test_same_tokenizer_files_carry_the_targets_tokens(readers, name):
    for key in ("tokenizer.ggml.tokens", "tokenizer.ggml.merges", "tokenizer.ggml.bos_token_id",
                "tokenizer.ggml.eos_token_id"):
        assert field(readers[name], key) == field(readers["target.gguf"], key), key


def test_unknown_tokenizer_variant_is_refused(tmp_path):
    with pytest.raises(ValueError, match="tokenizer variant 'c'"):
        write_model(tmp_path / "x.gguf", ModelSpec(tokenizer="c"))


# ------------------------------------------------------------------ the draft/target recipe

def test_draft_is_an_exact_copy_of_the_targets_shared_tensors(readers):
    target, draft = tensors(readers["target.gguf"]), tensors(readers["draft.gguf"])
    assert field(readers["draft.gguf"], "llama.block_count") == 2
    assert not any(n.startswith(("blk.2.", "blk.3.")) for n in draft)
    for name, t in draft.items():
        assert np.array_equal(t.data, target[name].data), name


def test_target_extra_layers_output_projections_are_scaled(tmp_path, readers):
    plain = tensors(gguf.GGUFReader(write_model(tmp_path / "plain.gguf", ModelSpec())))
    target = tensors(readers["target.gguf"])
    for name in ("blk.2.attn_output.weight", "blk.3.ffn_down.weight"):
        np.testing.assert_allclose(target[name].data, plain[name].data * models.TARGET_SCALE, rtol=1e-6)
    for name in ("blk.1.attn_output.weight", "blk.2.attn_q.weight", "blk.3.ffn_up.weight"):
        assert np.array_equal(target[name].data, plain[name].data), name


def test_write_pair_writes_a_scaled_target_and_its_draft(tmp_path):
    tgt, dft = models.write_pair(tmp_path, 0.5)
    t, d = tensors(gguf.GGUFReader(tgt)), tensors(gguf.GGUFReader(dft))
    assert np.array_equal(t["blk.1.ffn_down.weight"].data, d["blk.1.ffn_down.weight"].data)
    zero, _dummy = models.write_pair(tmp_path / "zero", 0.0)
    assert not np.any(tensors(gguf.GGUFReader(zero))["blk.3.attn_output.weight"].data)


def test_lowaccept_draft_differs_only_in_output_projections(readers):
    clean, noisy = tensors(readers["draft.gguf"]), tensors(readers["draft-lowaccept.gguf"])
    for name, t in clean.items():
        same = np.array_equal(t.data, noisy[name].data)
        assert same is not name.endswith(("attn_output.weight", "ffn_down.weight")), name


def test_control_and_unprintable_byte_rows_of_the_output_head_are_zero(readers):
    out = tensors(readers["target.gguf"])["output.weight"].data
    assert not np.any(out[-2:]) and not np.any(out[0x00]) and not np.any(out[0x80])
    assert np.any(out[ord("a")]) and np.any(out[0x0A]) and np.any(out[300])


# ------------------------------------------------------------------ header features

def test_swa_target_has_window_and_per_layer_bool_pattern(readers):
    r = readers["target-swa.gguf"]
    assert field(r, "general.architecture") == "granite_swa"
    assert field(r, "granite_swa.attention.sliding_window") == 256
    assert field(r, "granite_swa.attention.sliding_window_pattern") == [True, True, True, False]
    assert r.fields["granite_swa.attention.sliding_window_pattern"].types[-1] == gguf.GGUFValueType.BOOL


def test_kvarray_target_writes_per_layer_head_count_kv_and_matching_tensors(readers):
    r = readers["target-kvarray.gguf"]
    assert field(r, "deci.attention.head_count_kv") == [2, 1, 2, 1]
    ts = tensors(r)
    for layer, n_kv in enumerate([2, 1, 2, 1]):
        assert ts[f"blk.{layer}.attn_k.weight"].data.shape == (n_kv * 32, 128)


def test_mtp_target_counts_nextn_blocks_inside_block_count(readers):
    r = readers["target-mtp.gguf"]
    assert field(r, "glm4.block_count") == 4
    assert field(r, "glm4.nextn_predict_layers") == 1
    names = set(tensors(r))
    for suffix in ("eh_proj", "enorm", "hnorm", "shared_head_norm"):
        assert f"blk.3.nextn.{suffix}.weight" in names
        assert f"blk.2.nextn.{suffix}.weight" not in names
    assert "blk.3.attn_q.weight" in names  # the nextn block is a full block too
    assert tensors(r)["blk.3.nextn.eh_proj.weight"].data.shape == (128, 256)


def test_llama_nextn_layers_option(tmp_path):
    r = gguf.GGUFReader(write_model(tmp_path / "m.gguf", ModelSpec(nextn_layers=2)))
    assert field(r, "llama.nextn_predict_layers") == 2
    names = set(tensors(r))
    assert {"blk.2.nextn.eh_proj.weight", "blk.3.nextn.eh_proj.weight"} <= names
    assert "blk.1.nextn.eh_proj.weight" not in names


@pytest.mark.parametrize("name, markov", [("draft-dflash.gguf", False), ("draft-dspark.gguf", True)])
def test_dflash_drafts_look_like_what_llama_cpp_loads(readers, name, markov):
    r = readers[name]
    assert field(r, "general.architecture") == "dflash"
    assert field(r, "dflash.block_count") == 1
    assert field(r, "dflash.attention.sliding_window") == 2048
    assert field(r, "dflash.attention.sliding_window_pattern") == [True]
    assert field(r, "dflash.target_layers") == [1, 2]
    assert field(r, "dflash.block_size") == 16
    assert field(r, "tokenizer.ggml.mask_token_id") == field(r, "tokenizer.ggml.eos_token_id")
    names = set(tensors(r))
    assert {"fc.weight", "enc.output_norm.weight", "output_norm.weight", "blk.0.attn_q_norm.weight"} <= names
    assert ("markov_w1.weight" in names) is markov
    assert "token_embd.weight" not in names  # the head is shared with the target
    assert tensors(r)["fc.weight"].data.shape == (128, 256)  # ne {2 * n_embd, n_embd}


def test_dflash_draft_options(tmp_path):
    path = models.write_dflash_draft(tmp_path / "d.gguf", n_layer=2, sliding_window=None, markov_head=True)
    r = gguf.GGUFReader(path)
    assert field(r, "dflash.block_count") == 2
    assert "dflash.attention.sliding_window" not in r.fields
    assert "markov_w1.weight" in set(tensors(r))


def test_markov_head_on_a_plain_model_adds_the_dspark_marker(tmp_path):
    r = gguf.GGUFReader(write_model(tmp_path / "m.gguf", ModelSpec(markov_head=True)))
    assert "markov_w1.weight" in set(tensors(r))


def test_key_and_value_length_are_written_only_when_given(tmp_path, readers):
    assert "llama.attention.key_length" not in readers["target.gguf"].fields
    r = gguf.GGUFReader(write_model(tmp_path / "kv.gguf", ModelSpec(key_length=64, value_length=16)))
    assert field(r, "llama.attention.key_length") == 64
    assert field(r, "llama.attention.value_length") == 16
    ts = tensors(r)
    assert ts["blk.0.attn_k.weight"].data.shape == (2 * 64, 128)
    assert ts["blk.0.attn_v.weight"].data.shape == (2 * 16, 128)
    assert ts["blk.0.attn_output.weight"].data.shape == (128, 4 * 16)


def test_extra_kv_is_written_verbatim(tmp_path):
    extra = {"llmfleet.flag": True, "llmfleet.count": 7, "llmfleet.ratio": 0.5, "llmfleet.name": "x",
             "llmfleet.ids": [3, 4], "llama.rope.freq_base": (500000.0, gguf.GGUFValueType.FLOAT32)}
    r = gguf.GGUFReader(write_model(tmp_path / "x.gguf", ModelSpec(extra_kv=extra)))
    assert field(r, "llmfleet.flag") is True
    assert field(r, "llmfleet.count") == 7
    assert field(r, "llmfleet.ratio") == 0.5
    assert field(r, "llmfleet.name") == "x"
    assert field(r, "llmfleet.ids") == [3, 4]
    assert field(r, "llama.rope.freq_base") == 500000.0


def test_big_endian_file_reads_back_with_the_same_values(tmp_path):
    little = gguf.GGUFReader(write_model(tmp_path / "le.gguf", ModelSpec()))
    path = write_model(tmp_path / "be.gguf", ModelSpec(big_endian=True))
    raw = path.read_bytes()
    assert raw[:4] == b"GGUF" and int.from_bytes(raw[4:8], "big") == 3
    big = gguf.GGUFReader(path)
    assert big.endianess == gguf.GGUFEndian.BIG
    assert field(big, "llama.block_count") == 4
    assert field(big, "tokenizer.ggml.tokens") == field(little, "tokenizer.ggml.tokens")
    le_q, be_q = tensors(little)["blk.0.attn_q.weight"].data, tensors(big)["blk.0.attn_q.weight"].data
    assert np.array_equal(le_q, be_q.astype(le_q.dtype))


@pytest.mark.parametrize("spec, message", [
    (ModelSpec(n_head_kv=[2, 2]), "n_head_kv has 2 values for 4 layers"),
    (ModelSpec(sliding_window_pattern=[True]), "sliding_window_pattern has 1 values"),
    (ModelSpec(nextn_layers=5), "nextn_layers=5"),
    (ModelSpec(matrix_type="q4"), "matrix_type='q4'"),
])
def test_impossible_specs_are_refused_with_the_field_named(tmp_path, spec, message):
    with pytest.raises(ValueError, match=message.replace("[", r"\[")):
        write_model(tmp_path / "bad.gguf", spec)


def test_index_says_what_each_file_is_for(std_set):
    index = json.loads((std_set["target.gguf"].parent / "index.json").read_text())
    assert index["target.gguf"]["role"] == "target" and index["target.gguf"]["loadable"] is True
    assert index["draft-dspark.gguf"]["spec_type"] == "draft-dspark"
    assert all(entry["purpose"] for entry in index.values())
