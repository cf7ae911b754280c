"""What header keys mean: layers, KV heads, sliding windows, hybrid layers, MTP, the spec type llama.cpp infers."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from gguf_bytes import Builder, T

from ansible_collections.llmfleet.specdec.plugins.module_utils.gguf._gguf import read_header
from ansible_collections.llmfleet.specdec.plugins.module_utils.gguf._model_facts import model_facts


def _facts(tmp_path: Path, arch: str, kvs: dict[str, tuple[int, Any]], tensors: list[str] = ()) -> dict:
    b = Builder().kv("general.architecture", T["str"], arch)
    for key, (vtype, value) in kvs.items():
        b.kv(key, vtype, value)
    for i, name in enumerate(tensors):
        b.tensor(name, [32], offset=i * 128)
    p = tmp_path / "m.gguf"
    p.write_bytes(b.build(b"\0" * 128 * max(len(tensors), 1)))
    return model_facts(read_header(str(p)))


def test_dense_model(tmp_path: Path) -> None:
    f = _facts(tmp_path, "llama", {"llama.block_count": (T["u32"], 4), "llama.context_length": (T["u32"], 4096),
                                   "llama.embedding_length": (T["u32"], 128), "llama.attention.head_count": (T["u32"], 4),
                                   "llama.attention.head_count_kv": (T["u32"], 2)})
    assert (f["block_count"], f["context_length"], f["head_count"], f["head_count_kv"]) == (4, 4096, 4, 2)
    assert f["kv_layers"] == [0, 1, 2, 3] and f["recurrent_layers"] == []
    assert f["spec_type_autodetect"] is None and f["mtp"]["has_mtp"] is False


def test_per_layer_kv_heads_with_recurrent_zeros(tmp_path: Path) -> None:
    f = _facts(tmp_path, "lfm2", {"lfm2.block_count": (T["u32"], 4),
                                  "lfm2.attention.head_count_kv": (T["arr"], (T["u32"], [0, 8, 0, 8]))})
    assert f["head_count_kv"] == [0, 8, 0, 8]
    assert f["recurrent_layers"] == [0, 2] and f["kv_layers"] == [1, 3]


def test_qwen35_hybrid_layers_and_mtp(tmp_path: Path) -> None:
    # qwen35: 8 trunk layers + 1 nextn layer; every 4th trunk layer is full attention
    f = _facts(tmp_path, "qwen35", {"qwen35.block_count": (T["u32"], 9), "qwen35.nextn_predict_layers": (T["u32"], 1)},
               tensors=["blk.8.nextn.eh_proj.weight", "blk.8.nextn.enorm.weight"])
    assert f["recurrent_layers"] == [0, 1, 2, 4, 5, 6]
    assert f["kv_layers"] == [3, 7]
    assert f["mtp"] == {"nextn_predict_layers": 1, "nextn_layers": [8],
                        "tensors": ["blk.8.nextn.eh_proj.weight", "blk.8.nextn.enorm.weight"], "has_mtp": True}
    assert f["spec_type_autodetect"] == "draft-mtp"


def test_qwen35_explicit_recurrent_layers_and_interval(tmp_path: Path) -> None:
    f = _facts(tmp_path, "qwen35", {"qwen35.block_count": (T["u32"], 6), "qwen35.full_attention_interval": (T["u32"], 2)})
    assert f["recurrent_layers"] == [0, 2, 4]
    f = _facts(tmp_path, "qwen35", {"qwen35.block_count": (T["u32"], 3),
                                    "qwen35.attention.recurrent_layers": (T["arr"], (T["bool"], [True, False, True]))})
    assert f["recurrent_layers"] == [0, 2]


def test_recurrent_architecture_has_no_kv(tmp_path: Path) -> None:
    f = _facts(tmp_path, "mamba2", {"mamba2.block_count": (T["u32"], 3)})
    assert f["kv_layers"] == [] and f["recurrent_layers"] == [0, 1, 2]


def test_sliding_window_pattern_forms(tmp_path: Path) -> None:
    f = _facts(tmp_path, "gemma3", {"gemma3.block_count": (T["u32"], 6), "gemma3.attention.sliding_window": (T["u32"], 1024),
                                    "gemma3.attention.sliding_window_pattern": (T["u32"], 3)})
    assert f["sliding_window"] == 1024
    assert f["sliding_window_pattern"] == [True, True, False, True, True, False]
    f = _facts(tmp_path, "gemma3", {"gemma3.block_count": (T["u32"], 3),
                                    "gemma3.attention.sliding_window_pattern": (T["arr"], (T["bool"], [True, False, True]))})
    assert f["sliding_window_pattern"] == [True, False, True]


@pytest.mark.parametrize(
    ("arch", "kvs", "tensors", "expected"),
    [
        ("dflash", {"dflash.block_count": (T["u32"], 5)}, [], "draft-dflash"),
        ("dflash", {"dflash.block_count": (T["u32"], 5)}, ["markov_w1.weight"], "draft-dspark"),
        ("qwen35", {"qwen35.block_count": (T["u32"], 2)}, ["blk.1.nextn.eh_proj.weight"], "draft-mtp"),
        # nextn tensor not on the LAST block: llama.cpp looks only at blk.<block_count-1>
        ("qwen35", {"qwen35.block_count": (T["u32"], 3)}, ["blk.1.nextn.eh_proj.weight"], None),
        ("llama", {"llama.block_count": (T["u32"], 2)}, ["markov_w1.weight"], None),
    ],
)
def test_spec_type_autodetect(tmp_path: Path, arch: str, kvs: dict, tensors: list[str], expected: str | None) -> None:
    assert _facts(tmp_path, arch, kvs, tensors)["spec_type_autodetect"] == expected


def test_autodetect_without_block_count_says_llama_cpp_aborts(tmp_path: Path) -> None:
    f = _facts(tmp_path, "llama", {})
    assert f["spec_type_autodetect"] is None and "aborts" in f["spec_type_autodetect_reason"]
