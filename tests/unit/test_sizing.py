"""kv_budget's arithmetic: the field notes' numbers, llama.cpp's allocation rules, placement, fixes, bad input."""
from __future__ import annotations

import bisect
import json
from pathlib import Path
from typing import Any

import pytest
from ansible.module_utils.testing import patch_module_args
from hypothesis import given, settings
from hypothesis import strategies as st

from ansible_collections.llmfleet.specdec.plugins.module_utils.common._errors import SpecdecError
from ansible_collections.llmfleet.specdec.plugins.module_utils.gguf._gguf import read_header
from ansible_collections.llmfleet.specdec.plugins.module_utils.gguf._model_facts import model_facts
from ansible_collections.llmfleet.specdec.plugins.module_utils.lint import _lint_rules as lint
from ansible_collections.llmfleet.specdec.plugins.module_utils.memory import _kv as kv
from ansible_collections.llmfleet.specdec.plugins.module_utils.memory import _placement as placement
from ansible_collections.llmfleet.specdec.plugins.module_utils.memory import _sizing as sizing
from ansible_collections.llmfleet.specdec.plugins.modules import kv_budget as kv_budget_module
from testbed.models import ModelSpec, write_model

KIB, MIB, GIB = kv.KIB, kv.MIB, kv.GIB


def facts(n_layer: int, n_kv: int | list[int], head: int, *, arch: str = "llama", window: int | None = None,
          pattern: list[bool] | None = None, kv_layers: list[int] | None = None, nextn: int = 0,
          layer_bytes: int | None = None, embd_bytes: int = 0, output_bytes: int = 0,
          ctx: int = 262144) -> dict[str, Any]:
    """Header facts in the shape gguf_info returns (only what sizing reads)."""
    n_trunk = n_layer - nextn
    f: dict[str, Any] = {
        "architecture": arch, "block_count": n_layer, "context_length": ctx, "embedding_length": 4096,
        "head_count": 32, "head_count_kv": n_kv, "key_length": head, "value_length": head,
        "sliding_window": window, "sliding_window_pattern": pattern,
        "kv_layers": list(range(n_trunk)) if kv_layers is None else kv_layers,
        "recurrent_layers": [] if kv_layers is None else [i for i in range(n_trunk) if i not in kv_layers],
        "mtp": {"nextn_predict_layers": nextn, "nextn_layers": list(range(n_trunk, n_layer)),
                "tensors": [], "has_mtp": bool(nextn)},
        "spec_type_autodetect": None,
    }
    if layer_bytes is not None:
        tensors = [{"name": f"blk.{i}.ffn_down.weight", "n_bytes": layer_bytes} for i in range(n_layer)]
        if embd_bytes:
            tensors.append({"name": "token_embd.weight", "n_bytes": embd_bytes})
        if output_bytes:
            tensors.append({"name": "output.weight", "n_bytes": output_bytes})
        f["tensors"] = tensors
    return f


def dspark(**kw: Any) -> dict[str, Any]:
    """The field notes' DSpark drafter: 5 layers, 8 KV heads of 128, no sliding window."""
    return facts(5, 8, 128, arch="dflash", **kw)


def dflash(**kw: Any) -> dict[str, Any]:
    """The field notes' DFlash drafter: the same shape, but every layer slides over a 2048 window."""
    return facts(5, 8, 128, arch="dflash", window=2048, pattern=[True] * 5, **kw)


def gpu(index: int, total_gib: float, free_gib: float | None = None, **extra: Any) -> dict[str, Any]:
    total = int(total_gib * GIB)
    free = total if free_gib is None else int(free_gib * GIB)
    return {"index": index, "name": f"GPU {index}", "backend": "cuda", "total_bytes": total,
            "free_bytes": free, "used_bytes": total - free, **extra}


# ------------------------------------------------------------------------------ the field notes


def test_dspark_drafter_is_20_kib_per_position_and_5_gib_at_262144() -> None:
    # 5 layers x 2 (K and V) x 8 KV heads x 128 dims x 2 bytes (f16)
    assert kv.kv_bytes_per_position(dspark(), "f16", "f16") == 5 * 2 * 8 * 128 * 2 == 20 * KIB
    plan = placement.kv_plan(facts(4, 2, 64), dspark(), {"ctx_size": 262144, "parallel": 1})
    draft = plan["draft"]
    assert draft["per_position_bytes"] == 20 * KIB
    assert draft["total_bytes"] == 5 * GIB                      # 262144 x 20 KiB, no window to cap it
    assert draft["context"]["n_ctx"] == plan["target"]["context"]["n_ctx"] == 262144
    assert draft["swa_layers"] == [] and "swa_window_bytes" not in draft


def test_draft_context_follows_the_target_with_no_cap() -> None:
    """cparams.n_ctx = llama_n_ctx(ctx_tgt): the drafter's KV grows with the target's context."""
    sizes = [placement.kv_plan(facts(4, 2, 64), dspark(), {"ctx_size": c, "parallel": 1})["draft"]["total_bytes"]
             for c in (4096, 65536, 262144)]
    assert sizes == [4096 * 20 * KIB, 65536 * 20 * KIB, 262144 * 20 * KIB]


def test_dflash_window_2048_is_about_40_mib() -> None:
    """The notes' ~40 MiB is the window alone: 2048 positions x 20 KiB. llama.cpp's SWA cache holds
    min(n_ctx, window x sequences + n_ubatch) cells padded to 256, so at one slot it allocates
    2048 + 512 = 2560 cells = 50 MiB, whatever the target's context."""
    for ctx in (32768, 262144):
        d = placement.kv_plan(facts(4, 2, 64), dflash(), {"ctx_size": ctx, "parallel": 1})["draft"]
        assert d["per_position_bytes"] == 20 * KIB
        assert d["swa_window_bytes"] == 2048 * 20 * KIB == 40 * MIB
        assert [c["cache"] for c in d["caches"]] == ["full", "swa"]
        full, swa = d["caches"]
        assert full["layers"] == [] and full["bytes"] == 0          # created and logged, holds nothing
        assert swa["layers"] == [0, 1, 2, 3, 4] and swa["cells"] == 2560
        assert d["total_bytes"] == 2560 * 20 * KIB == 50 * MIB
    # the window caps it: 100x less than the DSpark drafter at the same context
    assert placement.kv_plan(facts(4, 2, 64), dspark(), {"ctx_size": 262144, "parallel": 1})["draft"]["total_bytes"] \
        > 100 * 50 * MIB


def test_dflash_window_with_slots() -> None:
    # unified (server default: 4 slots): the window of every sequence in one stream, plus one ubatch
    auto = placement.kv_plan(facts(4, 2, 64), dflash(), {"ctx_size": 262144})["draft"]
    assert auto["context"]["n_seq_max"] == 4 and auto["context"]["n_stream"] == 1
    assert auto["caches"][1]["cells"] == kv.pad(2048 * 4 + 512) == 8704
    assert auto["total_bytes"] == 8704 * 20 * KIB
    # -np 4 without -kvu: four streams of one window + ubatch each
    split = placement.kv_plan(facts(4, 2, 64), dflash(), {"ctx_size": 262144, "parallel": 4})["draft"]
    assert split["caches"][1]["cells"] == 2560 and split["caches"][1]["streams"] == 4
    assert split["total_bytes"] == 4 * 2560 * 20 * KIB
    # --swa-full sizes the window layers like full ones
    full = placement.kv_plan(facts(4, 2, 64), dflash(), {"ctx_size": 8192, "parallel": 1, "swa_full": True})["draft"]
    assert full["total_bytes"] == 8192 * 20 * KIB


def test_swa_cache_never_exceeds_the_context() -> None:
    d = placement.kv_plan(facts(4, 2, 64), dflash(), {"ctx_size": 1000, "parallel": 1})["draft"]
    assert d["context"]["n_ctx"] == 1024 and d["caches"][1]["cells"] == 1024


# ------------------------------------------------------------------------------ layer shapes


def test_per_layer_kv_heads() -> None:
    f = facts(4, [2, 1, 2, 1], 32)
    # K row of layer il = heads(il) x 32 x 2 bytes; V the same with flash attention
    assert kv.kv_bytes_per_position(f) == (2 + 1 + 2 + 1) * 32 * 2 * 2
    assert kv.kv_bytes_per_position(f, layers=[1]) == 1 * 32 * 2 * 2
    # -fa off: V is transposed and every layer's V row is padded to the widest (2 heads)
    assert kv.kv_bytes_per_position(f, flash_attn=False) == (2 + 1 + 2 + 1) * 64 + 4 * 2 * 32 * 2
    plan = placement.kv_plan(f, None, {"ctx_size": 1024, "parallel": 1, "flash_attn": "off"})
    assert plan["target"]["v_trans"] is True
    assert [r["v_row_bytes"] for r in plan["target"]["caches"][0]["rows"]] == [128, 128, 128, 128]
    assert [r["k_row_bytes"] for r in plan["target"]["caches"][0]["rows"]] == [128, 64, 128, 64]
    # -fa auto sizes like on: llama.cpp creates the cache before it resolves auto
    auto = placement.kv_plan(f, None, {"ctx_size": 1024, "parallel": 1})["target"]
    assert auto["v_trans"] is False and auto["v_bytes"] == auto["k_bytes"]


def test_head_size_defaults_to_embedding_over_heads_and_swa_head_sizes() -> None:
    f = facts(2, 4, 128)
    f.update(key_length=None, value_length=None, embedding_length=2048, head_count=16)
    assert kv.kv_bytes_per_position(f) == 2 * 2 * 4 * (2048 // 16) * 2
    g = facts(2, 2, 128, window=512, pattern=[True, False])
    g["key_length_swa"] = g["value_length_swa"] = 64
    assert kv.kv_bytes_per_position(g) == (2 * 64 * 2) * 2 + (2 * 128 * 2) * 2


def test_hybrid_model_counts_only_attention_layers(tmp_path: Path) -> None:
    """A qwen35 hybrid header: llama.cpp makes every 4th layer full attention, the rest linear
    attention (no KV cache)."""
    spec = ModelSpec(arch="qwen35", n_layer=8, n_head=4, n_head_kv=2, n_embd=128)
    f = model_facts(read_header(str(write_model(tmp_path / "hybrid.gguf", spec))))
    assert f["kv_layers"] == [3, 7]
    per_layer = 2 * (2 * 32 * 2)
    assert kv.kv_bytes_per_position(f) == 2 * per_layer
    plan = placement.kv_plan(f, None, {"ctx_size": 4096, "parallel": 1})
    assert plan["target"]["kv_layers"] == [3, 7] and plan["target"]["total_bytes"] == 4096 * 2 * per_layer
    assert any("recurrent layers hold no KV cache" in n for n in plan["notes"])


def test_window_without_pattern_is_assumed_everywhere_and_said() -> None:
    f = facts(3, 2, 64, window=128)
    plan = placement.kv_plan(f, None, {"ctx_size": 4096, "parallel": 1})
    assert plan["target"]["swa_layers"] == [0, 1, 2]
    assert any("no per-layer pattern" in n for n in plan["notes"])


# ------------------------------------------------------------------------------ cache types


@pytest.mark.parametrize(("cache_type", "block", "block_bytes"), [
    ("f32", 1, 4), ("f16", 1, 2), ("bf16", 1, 2), ("q8_0", 32, 34), ("q4_0", 32, 18), ("q4_1", 32, 20),
    ("q5_0", 32, 22), ("q5_1", 32, 24), ("iq4_nl", 32, 18),
])
def test_every_cache_type_block_arithmetic(cache_type: str, block: int, block_bytes: int) -> None:
    assert kv.row_bytes(cache_type, 1024) == 1024 // block * block_bytes
    f = facts(2, 8, 128)
    per_pos = kv.kv_bytes_per_position(f, cache_type, cache_type)
    assert per_pos == 2 * 2 * (8 * 128 // block) * block_bytes
    plan = placement.kv_plan(f, None, {"ctx_size": 4096, "parallel": 1, "cache_type_k": cache_type,
                                       "cache_type_v": cache_type, "flash_attn": "on"})
    assert plan["target"]["total_bytes"] == 4096 * per_pos
    assert f"K ({cache_type})" in plan["target"]["log_lines"][0]


@pytest.fixture(scope="module")
def gguf_facts(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Header facts of a real GGUF file: 4 layers with 2, 1, 2, 1 KV heads of 64 values."""
    spec = ModelSpec(n_layer=4, n_embd=256, n_head=4, n_head_kv=[2, 1, 2, 1])
    return model_facts(read_header(str(write_model(tmp_path_factory.mktemp("kv") / "m.gguf", spec))))


@pytest.mark.parametrize("cache_k", sorted(kv.CACHE_TYPES))
@pytest.mark.parametrize("cache_v", sorted(kv.CACHE_TYPES))
def test_lint_and_kv_budget_agree_on_bytes_per_position(gguf_facts: dict[str, Any], cache_k: str, cache_v: str) -> None:
    """One home for bytes per cache type: lint's drafter-KV estimate and kv_budget's arithmetic
    give the same bytes per position for every pair of cache types."""
    per_pos = kv.kv_bytes_per_position(gguf_facts, cache_k, cache_v)
    assert per_pos > 0
    assert lint._kv_bytes_per_position(gguf_facts, cache_k, cache_v) == per_pos
    plan = sizing.kv_budget(gguf_facts, None, {"ctx_size": 256, "parallel": 1, "cache_type_k": cache_k,
                                               "cache_type_v": cache_v, "flash_attn": "on"})
    assert plan["target"]["per_position_bytes"] == per_pos


def test_q8_0_is_34_bytes_per_32_values_not_one_byte_each() -> None:
    assert kv.kv_bytes_per_position(dspark(), "q8_0", "q8_0") == 5 * 2 * (8 * 128 // 32) * 34 == 10880
    assert kv.kv_bytes_per_position(dspark(), "q4_0", "f16") == 5 * ((1024 // 32) * 18 + 1024 * 2)


def test_quantized_row_must_hold_whole_blocks() -> None:
    with pytest.raises(kv.SizingError, match="q8_0 stores blocks of 32 values, but the row has 48"):
        kv.row_bytes("q8_0", 48)
    with pytest.raises(kv.SizingError, match="layer 0 K"):
        placement.kv_plan(facts(1, 1, 48), None, {"ctx_size": 512, "parallel": 1, "cache_type_k": "q4_0",
                                                  "flash_attn": "off"})


# ------------------------------------------------------------------------------ context and slots


@pytest.mark.parametrize(("ctx", "np_", "unified", "n_ctx", "n_ctx_seq", "streams"), [
    (4096, None, None, 4096, 4096, 1),       # server default: 4 slots, unified
    (4096, 1, None, 4096, 4096, 1),
    (4096, 2, None, 4096, 2048, 2),          # explicit -np: one stream per slot
    (4096, 3, None, 4608, 1536, 3),          # 4096 / 3 = 1365 -> padded to 1536 per slot
    (4096, 3, True, 4096, 4096, 1),          # -kvu: one shared stream
    (1000, 1, None, 1024, 1024, 1),          # -c padded to 256
    (300, 4, None, 1024, 256, 4),
])
def test_context_and_slots(ctx: int, np_: int | None, unified: bool | None, n_ctx: int, n_ctx_seq: int,
                           streams: int) -> None:
    f = facts(2, 2, 64)
    t = placement.kv_plan(f, None, {"ctx_size": ctx, "parallel": np_, "kv_unified": unified})["target"]
    c = t["context"]
    assert (c["n_ctx"], c["n_ctx_seq"], c["n_stream"]) == (n_ctx, n_ctx_seq, streams)
    assert t["total_bytes"] == n_ctx_seq * streams * kv.kv_bytes_per_position(f)


def test_swa_ubatch_follows_batch_and_context() -> None:
    f = facts(2, 2, 64, window=100, pattern=[True, True])
    # n_batch = min(-c, -b), n_ubatch = min(n_batch, -ub): -c 300 -> ubatch 300 -> 100 + 300 -> 512 cells
    assert placement.kv_plan(f, None, {"ctx_size": 300, "parallel": 1})["target"]["caches"][1]["cells"] == 512
    assert placement.kv_plan(f, None, {"ctx_size": 8192, "parallel": 1, "ubatch_size": 64})["target"]["caches"][1]["cells"] == 256


def test_log_line_format_matches_llama_cpp() -> None:
    t = placement.kv_plan(facts(4, 2, 32), None, {"ctx_size": 1024, "parallel": 1})["target"]
    assert t["log_lines"] == ["llama_kv_cache: size =    1.00 MiB (  1024 cells,   4 layers,  1/1 seqs), "
                              "K (f16):    0.50 MiB, V (f16):    0.50 MiB"]
    # 0.125 MiB prints as 0.12: printf rounds the exact binary value half to even, as Python does
    one = placement.kv_plan(facts(1, 2, 32), None, {"ctx_size": 1024, "parallel": 1})["target"]
    assert "K (f16):    0.12 MiB" in one["log_lines"][0]


# ------------------------------------------------------------------------------ MTP


def test_mtp_context_on_the_target_holds_only_nextn_layers() -> None:
    f = facts(5, 2, 64, nextn=1)
    plan = placement.kv_plan(f, None, {"ctx_size": 2048, "parallel": 1, "spec_type": ["draft-mtp"],
                                       "draft_cache_type_k": "q8_0", "draft_cache_type_v": "q8_0"})
    assert plan["target"]["kv_layers"] == [0, 1, 2, 3]
    d = plan["draft"]
    assert d["model"] == "target (MTP head)" and d["context_type"] == "mtp"
    assert d["kv_layers"] == [4] and d["cache_type_k"] == "q8_0"
    assert d["total_bytes"] == 2048 * 2 * (128 // 32 * 34)


def test_mtp_with_a_draft_model_is_built_on_the_draft() -> None:
    plan = placement.kv_plan(facts(5, 2, 64, nextn=1), facts(2, 2, 64), {"ctx_size": 2048, "parallel": 1,
                                                                         "spec_type": "draft-mtp,ngram-mod"})
    assert plan["draft"]["kv_layers"] == []
    assert any("doesn't contain MTP layers" in p for p in plan["problems"])


def test_draft_cache_types_do_not_follow_the_target() -> None:
    plan = placement.kv_plan(facts(2, 2, 64), dspark(), {"ctx_size": 4096, "parallel": 1, "cache_type_k": "q8_0",
                                                         "cache_type_v": "q8_0", "flash_attn": "on"})
    assert plan["target"]["cache_type_k"] == "q8_0" and plan["draft"]["cache_type_k"] == "f16"


# ------------------------------------------------------------------------------ legality


def test_quantized_v_without_flash_attention_will_not_load() -> None:
    r = sizing.kv_budget(facts(2, 2, 64), None, {"ctx_size": 4096, "parallel": 1, "cache_type_v": "q8_0",
                                                 "flash_attn": "off"})
    assert r["loads"] is False
    assert any("quantized V cache (q8_0) needs flash attention" in p for p in r["problems"])
    ok = sizing.kv_budget(facts(2, 2, 64), None, {"ctx_size": 4096, "parallel": 1, "cache_type_v": "q8_0"})
    assert ok["loads"] is True and ok["problems"] == []


def test_quantized_k_with_flash_attention_needs_the_block_to_divide_the_head() -> None:
    r = sizing.kv_budget(facts(2, 2, 48), None, {"ctx_size": 4096, "parallel": 1, "cache_type_k": "q4_0",
                                                 "flash_attn": "on"})
    assert r["loads"] is False and any("does not divide n_embd_head_k=48" in p for p in r["problems"])


# ------------------------------------------------------------------------------ placement


def test_layers_split_like_llama_cpp() -> None:
    # 4 layers + the output layer = 5 slots; equal split points 0.5, 1.0; slot il at il / 5
    assert placement.assign_layers(4, ["A", "B"], [1, 1], [0, 0], -1) == ["A", "A", "A", "B", "B"]
    assert placement.assign_layers(4, ["A", "B"], [3, 2], [0, 0], -1) == ["A", "A", "A", "B", "B"]
    assert placement.assign_layers(4, ["A", "B"], [1, 4], [0, 0], -1) == ["A", "B", "B", "B", "B"]
    # no -ts: by free memory
    assert placement.assign_layers(4, ["A", "B"], None, [1.0, 4.0], -1) == ["A", "B", "B", "B", "B"]
    # -ngl 2: the first layers stay on the CPU, the last two slots (layer 3 and output) go out
    assert placement.assign_layers(4, ["A", "B"], [1, 1], [0, 0], 2) == ["CPU", "CPU", "CPU", "A", "B"]
    assert placement.assign_layers(4, [], None, [], -1) == ["CPU"] * 5


def test_single_precision_split_points() -> None:
    """-ts 0.1,0.2,0.7 over 9 layers (10 slots): in float, 0.1f + 0.2f rounds to 0.3f, the very value
    of slot 3's position 3.0f / 10, so upper_bound moves slot 3 to the third device. In double
    precision 0.1 + 0.2 = 0.30000000000000004 lies above 3 / 10 and slot 3 would stay on the second."""
    got = placement.assign_layers(9, ["A", "B", "C"], [0.1, 0.2, 0.7], [0, 0, 0], -1)
    assert got[:4] == ["A", "B", "B", "C"]
    splits, total = [], 0.0
    for v in (0.1, 0.2, 0.7):
        total += v
        splits.append(total)
    in_double = ["ABC"[bisect.bisect_right([s / total for s in splits], il / 10)] for il in range(4)]
    assert in_double == ["A", "B", "B", "B"]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=40), min_size=2, max_size=4).filter(lambda c: sum(c) > 0))
def test_layer_counts_as_tensor_split_place_exactly_those_counts(counts: list[int]) -> None:
    """What propose_fixes relies on: -ts given as layer-slot counts puts exactly that many slots on each device."""
    n_layer = sum(counts) - 1
    devs = [f"D{i}" for i in range(len(counts))]
    if n_layer < 1:
        return
    got = placement.assign_layers(n_layer, devs, [float(c) for c in counts], [0.0] * len(counts), -1)
    assert [got.count(d) for d in devs] == counts


def test_kv_and_weights_land_on_their_layers_devices() -> None:
    t = facts(4, 2, 64, layer_bytes=100 * MIB, embd_bytes=50 * MIB, output_bytes=70 * MIB)
    plan = placement.kv_plan(t, None, {"ctx_size": 4096, "parallel": 1, "device": "CUDA0,CUDA1", "tensor_split": "3,2",
                                       "devices": [gpu(0, 24), gpu(1, 24)], "headroom_bytes": 0})
    per_layer = 4096 * kv.kv_bytes_per_position(t, layers=[0])
    rows = {r["device"]: r for r in plan["devices"]}
    assert plan["target"]["layer_devices"] == {"CUDA0": [0, 1, 2], "CUDA1": [3, 4]}
    assert rows["CUDA0"]["target_kv_bytes"] == 3 * per_layer and rows["CUDA1"]["target_kv_bytes"] == per_layer
    assert rows["CUDA0"]["target_weights_bytes"] == 300 * MIB
    assert rows["CUDA1"]["target_weights_bytes"] == 100 * MIB + 70 * MIB      # layer 3 + output
    assert rows["CPU"]["target_weights_bytes"] == 50 * MIB                    # the input layer stays home
    assert rows["CUDA0"]["fits"] is True and plan["weights_included"] is True
    # -nkvo keeps every cache on the host
    nkvo = placement.kv_plan(t, None, {"ctx_size": 4096, "parallel": 1, "device": "CUDA0", "kv_offload": False})
    assert nkvo["target"]["kv_by_device"] == {"CPU": 4 * per_layer}


def test_tied_output_is_loaded_again_on_the_output_device() -> None:
    t = facts(2, 2, 64, layer_bytes=10 * MIB, embd_bytes=40 * MIB)
    plan = placement.kv_plan(t, None, {"ctx_size": 512, "parallel": 1, "device": "CUDA0"})
    assert plan["target"]["weights_by_device"] == {"CUDA0": 20 * MIB + 40 * MIB, "CPU": 40 * MIB}


def test_drafter_follows_the_target_devices_and_split_unless_told() -> None:
    devs = [gpu(0, 24), gpu(1, 24)]
    cfg = {"ctx_size": 8192, "parallel": 1, "device": ["CUDA0", "CUDA1"], "tensor_split": [1, 5], "devices": devs}
    shared = placement.kv_plan(facts(11, 2, 64), dspark(), cfg)
    assert shared["draft"]["devices"] == ["CUDA0", "CUDA1"]
    assert shared["draft"]["layer_devices"] == {"CUDA0": [0], "CUDA1": [1, 2, 3, 4, 5]}   # 6 slots at 1:5
    moved = placement.kv_plan(facts(11, 2, 64), dspark(), {**cfg, "draft_device": "CUDA0"})
    assert moved["draft"]["kv_by_device"] == {"CUDA0": 8192 * 20 * KIB}


def test_default_devices_skip_integrated_gpus_when_a_discrete_one_exists() -> None:
    apu = {"index": 0, "name": "Strix Halo", "backend": "rocm", "total_bytes": 96 * GIB, "free_bytes": 96 * GIB,
           "apu": True, "usable_bytes": 120 * GIB}
    plan = placement.kv_plan(facts(2, 2, 64), None, {"ctx_size": 512, "parallel": 1, "devices": [apu, gpu(0, 24)]})
    assert plan["target"]["devices"] == ["CUDA0"]
    only_apu = placement.kv_plan(facts(2, 2, 64), None, {"ctx_size": 512, "parallel": 1, "devices": [apu]})
    assert only_apu["target"]["devices"] == ["ROCm0"]
    assert only_apu["devices"][0]["memory_bytes"] == 120 * GIB          # usable = VRAM + GTT
    named = placement.kv_plan(facts(2, 2, 64), None, {"ctx_size": 512, "parallel": 1,
                                                      "devices": [{**gpu(0, 8), "llama_device": "Vulkan1"}]})
    assert named["target"]["devices"] == ["Vulkan1"]


def test_memory_basis_free_or_total() -> None:
    t = facts(2, 2, 64, layer_bytes=3 * GIB)
    cfg = {"ctx_size": 512, "parallel": 1, "devices": [gpu(0, 24, free_gib=4)], "headroom_bytes": 0}
    assert sizing.kv_budget(t, None, cfg)["fits"] is True
    assert sizing.kv_budget(t, None, {**cfg, "memory": "free"})["fits"] is False
    assert sizing.kv_budget(t, None, {"ctx_size": 512, "parallel": 1})["fits"] is None   # no memory given


def test_weights_missing_is_said() -> None:
    plan = placement.kv_plan(facts(2, 2, 64), dspark(), {"ctx_size": 512, "parallel": 1})
    assert plan["weights_included"] is False
    assert any("weights not counted for the target and the draft" in n for n in plan["notes"])


# ------------------------------------------------------------------------------ fixes


def _overflow_case() -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """Two 16 GiB cards; a hybrid target (10 attention layers of 20 KiB per position, 450 MiB per layer)
    split evenly; the DSpark drafter pinned to CUDA1 caches the whole 262144 window there."""
    kv = list(range(3, 40, 4))
    target = facts(40, 2, 256, kv_layers=kv, layer_bytes=450 * MIB, embd_bytes=800 * MIB, output_bytes=800 * MIB)
    draft = dspark(layer_bytes=200 * MIB)
    cfg = {"ctx_size": 262144, "parallel": 1, "device": ["CUDA0", "CUDA1"], "draft_device": ["CUDA1"],
           "devices": [gpu(0, 16), gpu(1, 16)]}
    return target, draft, cfg


def test_overflow_is_found_and_fixes_come_in_the_field_notes_order() -> None:
    target, draft, cfg = _overflow_case()
    r = sizing.kv_budget(target, draft, cfg)
    rows = {row["device"]: row for row in r["devices"]}
    assert r["fits"] is False and rows["CUDA1"]["fits"] is False and rows["CUDA0"]["fits"] is True
    assert rows["CUDA1"]["draft_kv_bytes"] == 5 * GIB
    kinds = [f["fix"] for f in r["fixes"]]
    assert kinds[0] == "tensor_split" and kinds[-1] == "ctx_size"
    assert kinds.index("draft_device") < kinds.index("draft_cache_type") < kinds.index("ctx_size")
    assert [f["order"] for f in r["fixes"]] == list(range(1, len(kinds) + 1))
    assert r["summary"][-1].startswith(f"fix {len(kinds)} (ctx_size)")


def test_skewed_split_moves_layers_off_the_full_card_and_its_numbers_hold() -> None:
    target, draft, cfg = _overflow_case()
    ts = sizing.kv_budget(target, draft, cfg)["fixes"][0]
    assert ts["resolves"] is True and ts["flags"][0] == "-ts"
    counts = ts["change"]["tensor_split"]
    assert sum(counts) == 41 and counts[0] > counts[1]        # more layers on CUDA0, the drafter's card keeps fewer
    assert all(d["fits"] for d in ts["devices"] if d["available_bytes"] is not None)
    # the numbers are what the flags give
    again = sizing.kv_budget(target, draft, {**cfg, "tensor_split": counts})
    assert again["fits"] is True
    assert [d["needed_bytes"] for d in again["devices"]] == [d["needed_bytes"] for d in ts["devices"]]


def test_context_cut_is_the_largest_that_fits() -> None:
    target, draft, cfg = _overflow_case()
    cut = sizing.kv_budget(target, draft, cfg)["fixes"][-1]
    ctx = cut["change"]["ctx_size"]
    assert cut["resolves"] is True and ctx % 256 == 0 and ctx < 262144
    assert sizing.kv_budget(target, draft, {**cfg, "ctx_size": ctx})["fits"] is True
    assert sizing.kv_budget(target, draft, {**cfg, "ctx_size": ctx + 256})["fits"] is False


def test_quantized_draft_cache_fix_tries_q8_0_then_q4_0() -> None:
    target, draft, cfg = _overflow_case()
    quant = [f for f in sizing.kv_budget(target, draft, cfg)["fixes"] if f["fix"] == "draft_cache_type"]
    assert [f["change"]["draft_cache_type_k"] for f in quant] == ["q8_0", "q4_0"]
    assert [f["resolves"] for f in quant] == [False, True]
    assert quant[0]["flags"] == ["-ctkd", "q8_0", "-ctvd", "q8_0"]
    # with -fa off only K can be quantized
    off = sizing.kv_budget(target, draft, {**cfg, "flash_attn": "off"})
    k_only = next(f for f in off["fixes"] if f["fix"] == "draft_cache_type")
    assert k_only["flags"] == ["-ctkd", "q8_0"] and "needs flash attention" in k_only["summary"]


def test_moving_the_drafter_resolves_when_another_card_has_room() -> None:
    target, draft, cfg = _overflow_case()
    cfg = {**cfg, "devices": [gpu(0, 16), gpu(1, 16), gpu(2, 8)]}
    move = next(f for f in sizing.kv_budget(target, draft, cfg)["fixes"] if f["fix"] == "draft_device")
    assert move["flags"] == ["--spec-draft-device", "CUDA2"] and move["resolves"] is True
    assert move["order"] == 2


def test_no_fix_without_overflow_and_a_note_when_nothing_fits() -> None:
    target, draft, cfg = _overflow_case()
    assert sizing.kv_budget(target, draft, {**cfg, "devices": [gpu(0, 80), gpu(1, 80)]})["fixes"] == []
    tiny = sizing.kv_budget(target, draft, {**cfg, "devices": [gpu(0, 2), gpu(1, 2)]})
    assert tiny["fits"] is False and not any(f["resolves"] for f in tiny["fixes"])
    assert "no context size fits" in tiny["fixes"][-1]["summary"]


def test_split_search_for_many_devices() -> None:
    """Four cards: too many splits to try them all, so the bisection on the fullest share answers."""
    target = facts(80, 8, 128, layer_bytes=300 * MIB, output_bytes=500 * MIB)
    cfg = {"ctx_size": 32768, "parallel": 1, "device": ["CUDA0", "CUDA1", "CUDA2", "CUDA3"],
           "tensor_split": [1, 1, 1, 1], "devices": [gpu(0, 24), gpu(1, 24), gpu(2, 6), gpu(3, 24)]}
    r = sizing.kv_budget(target, None, cfg)
    assert r["fits"] is False
    ts = r["fixes"][0]
    assert ts["fix"] == "tensor_split" and ts["resolves"] is True
    assert ts["change"]["tensor_split"][2] < ts["change"]["tensor_split"][0]
    assert sizing.kv_budget(target, None, {**cfg, "tensor_split": ts["change"]["tensor_split"]})["fits"] is True
    # when no split can fit, the least-overflowing one is still shown, marked as not enough
    small = sizing.kv_budget(target, None, {**cfg, "devices": [gpu(i, 6) for i in range(4)]})
    assert small["fixes"][0]["fix"] == "tensor_split" and small["fixes"][0]["resolves"] is False


# ------------------------------------------------------------------------------ bad input


@pytest.mark.parametrize(("config", "message"), [
    ({"cache_type_k": "q3_k"}, "cache_type_k: unknown KV cache type 'q3_k'"),
    ({"draft_cache_type_v": "fp8"}, "draft_cache_type_v: unknown KV cache type 'fp8'"),
    ({"ctx_size": -4096}, "ctx_size: -4096; give a context size, or 0 for the model's training context"),
    ({"ctx_size": "lots"}, "ctx_size: expected a whole number, got 'lots'"),
    ({"parallel": 0}, "parallel: 0 is refused by llama-server"),
    ({"fit": "maybe"}, "fit: 'maybe'; llama-server accepts 'on' or 'off'"),
    ({"kv_unified_per_slot": -1}, "kv_unified_per_slot: -1 must be >= 0"),
    ({"parallel": 300}, "parallel: 300 slots; llama.cpp allows at most 256"),
    ({"flash_attn": "maybe"}, "flash_attn: 'maybe'"),
    ({"tensor_split": "3,x"}, "tensor_split: 'x' is not a number"),
    ({"memory": "peak"}, "memory: 'peak'"),
    ({"headroom_bytes": -1}, "headroom_bytes"),
    ({"bogus": 1}, "config: unknown keys ['bogus']"),
])
def test_bad_input_names_the_input(config: dict[str, Any], message: str) -> None:
    with pytest.raises(SpecdecError, match=message.replace("[", r"\[").replace("]", r"\]")):
        sizing.kv_budget(facts(2, 2, 64), None, {"ctx_size": 512, **config})


def test_bad_facts_name_the_model() -> None:
    with pytest.raises(kv.SizingError, match="draft: the header facts lack block_count"):
        placement.kv_plan(facts(2, 2, 64), {"architecture": "llama"}, {"ctx_size": 512})
    with pytest.raises(kv.SizingError, match="target: expected header facts"):
        placement.kv_plan("model.gguf", None, {"ctx_size": 512})  # type: ignore[arg-type]
    no_ctx = facts(2, 2, 64)
    no_ctx["context_length"] = None
    with pytest.raises(kv.SizingError, match=r"ctx_size: not given \(or 0\) and the target's header has no context_length"):
        placement.kv_plan(no_ctx, None, {})


def test_device_flag_none_means_cpu_only() -> None:
    plan = placement.kv_plan(facts(2, 2, 64), None, {"ctx_size": 512, "parallel": 1, "device": "none",
                                                     "devices": [gpu(0, 24)]})
    assert plan["target"]["devices"] == [] and set(plan["target"]["kv_by_device"]) == {"CPU"}


# ------------------------------------------------------------------------------ the module


def _run(args: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    with patch_module_args(args), pytest.raises(SystemExit):
        kv_budget_module.main()
    return json.loads(capsys.readouterr().out)


def test_module_with_facts_reports_the_overflow_and_fixes(capsys: pytest.CaptureFixture[str]) -> None:
    target, draft, cfg = _overflow_case()
    out = _run({"target": {"gguf": target}, "draft": draft, "ctx_size": 262144, "parallel": 1,
                "device": ["CUDA0", "CUDA1"], "draft_device": ["CUDA1"], "devices": cfg["devices"],
                "_ansible_check_mode": True}, capsys)
    assert out["changed"] is False
    kb = out["kv_budget"]
    assert kb["fits"] is False and kb["draft"]["total_bytes"] == 5 * GIB
    assert kb["fixes"][0]["fix"] == "tensor_split"


def test_module_reads_paths(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    target = write_model(tmp_path / "t.gguf", ModelSpec(n_layer=4))
    draft = write_model(tmp_path / "d.gguf", ModelSpec(n_layer=2))
    out = _run({"target": str(target), "draft": str(draft), "ctx_size": 2048, "parallel": 2}, capsys)
    kb = out["kv_budget"]
    assert kb["target"]["total_bytes"] == 2048 * 4 * 2 * (2 * 32 * 2)
    assert kb["draft"]["total_bytes"] == 2048 * 2 * 2 * (2 * 32 * 2)
    assert kb["weights_included"] is True and kb["fits"] is None
    assert kb["target"]["log_lines"][0].startswith("llama_kv_cache: size =    2.00 MiB (  1024 cells,   4 layers,  2/2 seqs)")


@pytest.mark.parametrize(("args", "message"), [
    ({"ctx_size": -1}, "ctx_size: -1; give a context size, or 0"),
    ({"ctx_size": 512, "parallel": 0}, "parallel: 0 is refused by llama-server"),
    ({"ctx_size": 512, "cache_type_k": "q3_k"}, "cache_type_k"),
])
def test_module_bad_input(args: dict[str, Any], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    out = _run({"target": facts(2, 2, 64), **args}, capsys)
    assert out["failed"] is True and message in out["msg"]


def test_module_missing_model_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = _run({"target": str(tmp_path / "absent.gguf"), "ctx_size": 512}, capsys)
    assert out["failed"] is True and "absent.gguf" in out["msg"]


def test_module_reads_the_config_from_flags_and_env(tmp_path, capsys) -> None:
    """kv_budget given flags/env equals kv_budget given the same config as options."""
    from ansible_collections.llmfleet.specdec.plugins.modules import kv_budget as mod
    from testbed.models import write_standard_set

    files = write_standard_set(tmp_path)

    def run(args):
        with patch_module_args(args), pytest.raises(SystemExit):
            mod.main()
        return json.loads(capsys.readouterr().out)

    by_flags = run({"flags": ["-m", str(files["target.gguf"]), "-md", str(files["draft.gguf"]), "-c", "2048",
                              "-np", "2", "-ctk", "q8_0", "-fa", "on", "--spec-type", "draft-simple"],
                    "env": {"LLAMA_ARG_CACHE_TYPE_V": "q8_0"}})
    by_options = run({"target": str(files["target.gguf"]), "draft": str(files["draft.gguf"]), "ctx_size": 2048,
                      "parallel": 2, "cache_type_k": "q8_0", "cache_type_v": "q8_0", "flash_attn": "on",
                      "spec_type": ["draft-simple"]})
    assert by_flags["kv_budget"]["target"] == by_options["kv_budget"]["target"]
    assert by_flags["kv_budget"]["draft"] == by_options["kv_budget"]["draft"]
    explicit = run({"flags": ["-m", str(files["target.gguf"]), "-c", "2048"], "ctx_size": 4096})
    assert explicit["kv_budget"]["target"] != by_options["kv_budget"]["target"]
    missing = run({"flags": ["-c", "2048"]})
    assert missing["failed"] and "target" in missing["msg"]


# ------------------------------------------------------------------------------ llama-server's defaults
# tools/server/server.cpp (-np auto), common/arg.cpp (-c 0), common/fit.cpp (n_ctx_train per stream)


@pytest.mark.parametrize(("config", "n_ctx", "n_ctx_seq", "n_stream"), [
    # -c omitted, -np 3: fit asks for the training context (4096) per slot
    ({"parallel": 3}, 12288, 4096, 3),
    ({"ctx_size": 0, "parallel": 2}, 8192, 4096, 2),
    # a unified cache is one stream: the training context in all
    ({"parallel": 3, "kv_unified": True}, 4096, 4096, 1),
    # -fit off: llama_context's own default, the training context shared by the slots
    ({"parallel": 4, "fit": False}, 4096, 1024, 4),
    ({"parallel": 4, "fit": "off"}, 4096, 1024, 4),
    # -np -1 (and any negative) is auto: 4 slots, unified, even with -no-kvu
    ({"parallel": -1}, 4096, 4096, 1),
    ({"parallel": -1, "kv_unified": False, "ctx_size": 8192}, 8192, 8192, 1),
    ({}, 4096, 4096, 1),
    # --kv-unified-per-slot without -c: slots x N, which fit leaves alone
    ({"parallel": 2, "kv_unified_per_slot": 1024}, 2048, 1024, 2),
    ({"parallel": 2, "kv_unified_per_slot": 1024, "ctx_size": 0}, 8192, 4096, 2),
    # a given -c is kept
    ({"parallel": 2, "ctx_size": 4096}, 4096, 2048, 2),
])
def test_server_defaults_size_the_context(config: dict[str, Any], n_ctx: int, n_ctx_seq: int, n_stream: int) -> None:
    f = facts(2, 2, 64, ctx=4096)
    ctx = placement.kv_plan(f, None, config)["target"]["context"]
    assert (ctx["n_ctx"], ctx["n_ctx_seq"], ctx["n_stream"]) == (n_ctx, n_ctx_seq, n_stream)


def test_fit_note_says_what_fit_may_lower() -> None:
    omitted = placement.kv_plan(facts(2, 2, 64, ctx=4096), None, {"parallel": 2})["notes"]
    assert any("4096 x 2 = 8192" in n and "lowers the context" in n and "CPU-only" in n for n in omitted)
    explicit = placement.kv_plan(facts(2, 2, 64, ctx=4096), None, {"parallel": 2, "ctx_size": 0})["notes"]
    assert any("explicit -c 0 forbids lowering" in n for n in explicit)


def test_module_reads_fit_and_auto_slots_from_flags(capsys: pytest.CaptureFixture[str]) -> None:
    out = _run({"target": facts(2, 2, 64, ctx=4096), "flags": ["-np", "-1", "-fit", "off", "-c", "0"]}, capsys)
    assert out["kv_budget"]["config"]["parallel"] == 4 and out["kv_budget"]["config"]["fit"] is False
    assert out["kv_budget"]["target"]["context"]["n_ctx"] == 4096
    out = _run({"target": facts(2, 2, 64, ctx=4096), "env": {"LLAMA_ARG_N_PARALLEL": "2"}}, capsys)
    assert out["kv_budget"]["target"]["context"]["n_ctx"] == 8192
