# Private to the collection: what GGUF header keys mean — layers, heads, SWA, hybrid layers, MTP, tokenizer fingerprint.
"""Turn a parsed :class:`GGUFHeader` into the facts the rest of the collection reasons with.

No I/O here. Where llama.cpp derives a fact (recurrent layers of a hybrid, the speculative type it
would infer from a draft), the rule is the one in the llama.cpp tree the project pins, cited inline.
"""
from __future__ import annotations

import hashlib
import struct
from typing import Any

from ansible_collections.llmfleet.specdec.plugins.module_utils._gguf import (
    Array,
    GGUFHeader,
    ValueType,
    encode_string,
    encode_value,
    tokens_sha256,
)

TOKENS_SHA_PREFIX = 2000

# src/llama-arch.cpp llm_arch_is_recurrent(): every layer is recurrent, none holds a KV cache.
RECURRENT_ARCHS = frozenset({"mamba", "mamba2", "rwkv6", "rwkv6qwen2", "rwkv7", "arwkv7"})
# src/models/qwen35.cpp, qwen35moe.cpp, qwen3next.cpp: without attention.recurrent_layers, every
# layer i < n_layer (trunk, not nextn) with (i + 1) % full_attention_interval != 0 is linear attention.
FULL_ATTENTION_INTERVAL_ARCHS = {"qwen35": 4, "qwen35moe": 4, "qwen3next": 4}


def _per_layer(value: Any, n_layer: int) -> list[Any] | None:
    if value is None or n_layer <= 0:
        return None
    if isinstance(value, Array):
        items = value.to_list()
        return items[:n_layer] + [items[-1] if items else 0] * max(0, n_layer - len(items))
    return [value] * n_layer


def _scalar_or_list(value: Any) -> Any:
    return value.to_list() if isinstance(value, Array) else value


def recurrent_layers(hdr: GGUFHeader, arch: str, n_layer_all: int, n_nextn: int) -> list[int]:
    """Layers without a KV cache (SSM / linear attention), by llama.cpp's per-architecture rule."""
    if n_layer_all <= 0:
        return []
    if arch in RECURRENT_ARCHS:
        return list(range(n_layer_all))
    explicit = hdr.get(f"{arch}.attention.recurrent_layers")
    if explicit is not None:
        flags = _per_layer(explicit, n_layer_all) or []
        return [i for i, f in enumerate(flags) if f]
    n_trunk = n_layer_all - n_nextn
    if arch in FULL_ATTENTION_INTERVAL_ARCHS:
        interval = hdr.get(f"{arch}.full_attention_interval", FULL_ATTENTION_INTERVAL_ARCHS[arch]) or 1
        return [i for i in range(n_layer_all) if i < n_trunk and (i + 1) % interval != 0]
    # lfm2, granitehybrid, nemotron_h, jamba, falcon-h1 ...: a layer with zero KV heads is recurrent
    kv_heads = _per_layer(hdr.get(f"{arch}.attention.head_count_kv"), n_layer_all)
    if kv_heads and isinstance(hdr.get(f"{arch}.attention.head_count_kv"), Array):
        return [i for i, h in enumerate(kv_heads) if h == 0]
    return []


def swa_pattern(hdr: GGUFHeader, arch: str, n_layer: int) -> list[bool] | None:
    """Per-layer sliding-window flags: the bool array, or the u32 period llama.cpp expands
    (set_swa_pattern: every n-th layer is dense, the rest SWA; period 0 or 1 = no dense layers)."""
    raw = hdr.get(f"{arch}.attention.sliding_window_pattern")
    if raw is None or n_layer <= 0:
        return None
    if isinstance(raw, Array):
        flags = _per_layer(raw, n_layer) or []
        return [bool(f) for f in flags]
    period = int(raw)
    if period <= 1:
        return [True] * n_layer
    return [(i % period) < (period - 1) for i in range(n_layer)]


def spec_type_autodetect(hdr: GGUFHeader) -> tuple[str | None, str]:
    """The speculative type llama.cpp infers from this file used as a draft, and why.

    common/speculative.cpp common_speculative_types_from_gguf(): architecture "dflash" gives
    draft-dspark when the Markov head tensor markov_w1.weight is present, else draft-dflash; any
    other architecture gives draft-mtp when blk.<block_count-1>.nextn.eh_proj.weight exists, else
    nothing: the type list stays at its default, none, and a plain draft given with -md alone is
    loaded but never drafts (common/arg.cpp spec_types_is_default) — name --spec-type draft-simple.
    """
    arch_kv = hdr.kv.get("general.architecture")
    if arch_kv is None or arch_kv.vtype != ValueType.STRING:
        return None, "no general.architecture string: llama.cpp infers nothing"
    arch = arch_kv.value
    if arch == "dflash":
        if hdr.has_tensor("markov_w1.weight"):
            return "draft-dspark", "architecture dflash with the Markov head markov_w1.weight"
        return "draft-dflash", "architecture dflash without markov_w1.weight"
    bc = hdr.kv.get(f"{arch}.block_count")
    if bc is None or bc.vtype != ValueType.UINT32:
        return None, (f"{arch}.block_count is missing or not a u32: llama.cpp's gguf_get_val_u32 "
                      "asserts here and the server aborts when this file is given as a draft without --spec-type")
    name = f"blk.{bc.value - 1}.nextn.eh_proj.weight"
    if hdr.has_tensor(name):
        return "draft-mtp", f"tensor {name} present"
    return None, (f"architecture {arch} and no {name}: no type inferred; as a draft without --spec-type "
                  "it is loaded but speculation stays off (pass --spec-type draft-simple)")


def tokenizer_facts(hdr: GGUFHeader) -> dict[str, Any]:
    tokens = hdr.get("tokenizer.ggml.tokens")
    merges = hdr.get("tokenizer.ggml.merges")
    facts: dict[str, Any] = {
        "model": hdr.get("tokenizer.ggml.model"),
        "pre": hdr.get("tokenizer.ggml.pre"),
        "vocab_size": len(tokens) if isinstance(tokens, Array) else 0,
        "merges_count": len(merges) if isinstance(merges, Array) else 0,
        "bos_token_id": hdr.get("tokenizer.ggml.bos_token_id"),
        "eos_token_id": hdr.get("tokenizer.ggml.eos_token_id"),
        "add_bos_token": hdr.get("tokenizer.ggml.add_bos_token"),
        "add_eos_token": hdr.get("tokenizer.ggml.add_eos_token"),
        "tokens_sha256_2000": None,
        "tokens_sha256": None,
        "fingerprint": None,
    }
    if isinstance(tokens, Array) and tokens.elem_type == ValueType.STRING:
        facts["tokens_sha256_2000"] = tokens_sha256(tokens, TOKENS_SHA_PREFIX)
        facts["tokens_sha256"] = tokens_sha256(tokens)
    facts["fingerprint"] = tokenizer_fingerprint(hdr)
    return facts


def tokenizer_fingerprint(hdr: GGUFHeader) -> str | None:
    """sha256 over every ``tokenizer.ggml.*`` key, sorted by name, each as key string, u32 value
    type and value in little-endian GGUF encoding: equal exactly when the tokenizers are byte-identical."""
    keys = sorted(k for k in hdr.kv if k.startswith("tokenizer.ggml."))
    if not keys:
        return None
    h = hashlib.sha256()
    for key in keys:
        kv = hdr.kv[key]
        h.update(encode_string(key))
        h.update(struct.pack("<I", kv.vtype))
        if kv.vtype == ValueType.ARRAY:
            h.update(struct.pack("<IQ", kv.value.elem_type, kv.value.count))
            h.update(kv.value.canonical_bytes())
        elif kv.vtype == ValueType.STRING:
            h.update(encode_string(kv.value))
        else:
            h.update(encode_value(kv.vtype, kv.value))
    return h.hexdigest()


def model_facts(hdr: GGUFHeader, *, include_tensors: bool = False, keys: list[str] | None = None) -> dict[str, Any]:
    """The facts dict ``gguf_info`` returns under ``gguf``."""
    arch = hdr.get("general.architecture")
    arch = arch if isinstance(arch, str) else None
    a = (arch or "") + "."
    n_layer_all = hdr.get(a + "block_count")
    n_layer_all = n_layer_all if isinstance(n_layer_all, int) else None
    n_nextn = hdr.get(a + "nextn_predict_layers") or 0
    n_nextn = n_nextn if isinstance(n_nextn, int) else 0
    n_layers = n_layer_all or 0

    recurrent = recurrent_layers(hdr, arch or "", n_layers, n_nextn)
    nextn_ids = list(range(n_layers - n_nextn, n_layers)) if n_nextn else []
    kv_layers = [i for i in range(n_layers - n_nextn) if i not in set(recurrent)]

    nextn_tensors = sorted(t.name for t in hdr.tensors if ".nextn." in t.name)
    autodetect, why = spec_type_autodetect(hdr)
    facts: dict[str, Any] = {
        "version": hdr.version,
        "byte_order": hdr.byte_order,
        "header_bytes": hdr.header_bytes,
        "data_offset": hdr.data_offset,
        "file_size": hdr.file_size,
        "bytes_read": hdr.bytes_read,
        "requests": hdr.requests,
        "alignment": hdr.alignment,
        "architecture": arch,
        "name": hdr.get("general.name"),
        "tensor_count": hdr.tensor_count,
        "kv_count": hdr.kv_count,
        "block_count": n_layer_all,
        "context_length": hdr.get(a + "context_length"),
        "embedding_length": hdr.get(a + "embedding_length"),
        "feed_forward_length": _scalar_or_list(hdr.get(a + "feed_forward_length")),
        "head_count": _scalar_or_list(hdr.get(a + "attention.head_count")),
        "head_count_kv": _scalar_or_list(hdr.get(a + "attention.head_count_kv")),
        "key_length": hdr.get(a + "attention.key_length"),
        "value_length": hdr.get(a + "attention.value_length"),
        "key_length_swa": hdr.get(a + "attention.key_length_swa"),
        "value_length_swa": hdr.get(a + "attention.value_length_swa"),
        "sliding_window": hdr.get(a + "attention.sliding_window"),
        "sliding_window_pattern": swa_pattern(hdr, arch or "", n_layers - n_nextn),
        "recurrent_layers": recurrent,
        "kv_layers": kv_layers,
        "expert_count": hdr.get(a + "expert_count"),
        "mtp": {
            "nextn_predict_layers": n_nextn,
            "nextn_layers": nextn_ids,
            "tensors": nextn_tensors,
            "has_mtp": bool(n_nextn and nextn_tensors),
        },
        "spec_type_autodetect": autodetect,
        "spec_type_autodetect_reason": why,
        "tokenizer": tokenizer_facts(hdr),
    }
    if include_tensors:
        facts["tensors"] = [t.as_dict() for t in hdr.tensors]
    if keys:
        facts["values"] = {k: (hdr.python(k) if k in hdr.kv else None) for k in keys}
    return facts
