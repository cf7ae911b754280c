# Copyright: (c) 2026, llmfleet.specdec contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# Private to the collection: what GGUF header keys mean — layers, heads, SWA, hybrid layers, MTP, tokenizer fingerprint.
"""Turn a parsed :class:`GGUFHeader` into the facts the rest of the collection reasons with.

No I/O here, but for ``facts_or_path``, the one loader of a model given either as header facts or
as a GGUF path or URL (spec_lint and kv_budget both take it that way): it reads the header through
``_gguf.read_header`` and hands the result to ``model_facts``. Where llama.cpp derives a fact
(recurrent layers of a hybrid, the speculative type it would infer from a draft), the rule is the one
in the llama.cpp tree the project pins, cited inline.

Nothing read from the header is trusted: every key a fact comes from is checked for its type and
range before it is used, and no per-layer structure is longer than llama.cpp's own layer limit.
A key of the wrong type or out of range is a :class:`GGUFError` naming the key, what it holds, the
file and the byte offset; only ``general.architecture`` that is not a string reads as unknown (null).
"""
from __future__ import annotations

import hashlib
import os
import re
import struct
from typing import Any, Mapping

from ansible_collections.llmfleet.specdec.plugins.module_utils.common._errors import GGUFError, SpecdecError
from ansible_collections.llmfleet.specdec.plugins.module_utils.gguf._gguf import (
    KV,
    MAX_KEY_BYTES,
    Array,
    GGUFHeader,
    ValueType,
    encode_string,
    encode_value,
    read_header,
    tokens_sha256,
)

TOKENS_SHA_PREFIX = 2000
# Bounds on what a module returns from a header, whatever the header holds (issue 22): a string fact is
# shown clipped past MAX_TEXT bytes; the values of O(keys) stop at MAX_VALUE_ITEMS elements and
# MAX_VALUE_BYTES bytes of strings in all (real models: a 262,144-token vocabulary fits).
MAX_TEXT = 4096
MAX_VALUE_ITEMS = 1 << 18
MAX_VALUE_BYTES = 32 * 1024 * 1024
_NO_KEY = "\udc80"  # a key prefix no decoded key can start with (a lone surrogate is never valid UTF-8)
# src/llama-hparams.h LLAMA_MAX_LAYERS; src/llama-model.cpp load_hparams asserts
# 0 < block_count <= LLAMA_MAX_LAYERS, and get_key_or_arr refuses a per-layer array longer than it.
LLAMA_MAX_LAYERS = 512

# src/llama-arch.cpp llm_arch_is_recurrent(): every layer is recurrent, none holds a KV cache.
RECURRENT_ARCHS = frozenset({"mamba", "mamba2", "rwkv6", "rwkv6qwen2", "rwkv7", "arwkv7"})
# src/models/qwen35.cpp, qwen35moe.cpp, qwen3next.cpp: without attention.recurrent_layers, every
# layer i < n_layer (trunk, not nextn) with (i + 1) % full_attention_interval != 0 is linear attention.
FULL_ATTENTION_INTERVAL_ARCHS = {"qwen35": 4, "qwen35moe": 4, "qwen3next": 4}

_INT_TYPES = frozenset({ValueType.UINT8, ValueType.INT8, ValueType.UINT16, ValueType.INT16, ValueType.UINT32,
                        ValueType.INT32, ValueType.UINT64, ValueType.INT64})
_TYPE_NAMES = {ValueType.UINT8: "u8", ValueType.INT8: "i8", ValueType.UINT16: "u16", ValueType.INT16: "i16",
               ValueType.UINT32: "u32", ValueType.INT32: "i32", ValueType.FLOAT32: "f32", ValueType.BOOL: "bool",
               ValueType.STRING: "string", ValueType.ARRAY: "array", ValueType.UINT64: "u64",
               ValueType.INT64: "i64", ValueType.FLOAT64: "f64"}


# ---------------------------------------------------------------------------------------------
# Typed reads: the one place a header value becomes a fact


def _describe(kv: KV) -> str:
    """What a key holds, short enough for an error message whatever its size."""
    if kv.vtype == ValueType.ARRAY:
        return f"an array of {kv.value.count} {_TYPE_NAMES[kv.value.elem_type]}"
    if kv.vtype == ValueType.STRING:
        size = kv.byte_length()
        text = kv.raw_bytes(40).decode("utf-8", "replace") + ("..." if size > 40 else "")
        return f"a string ({size} bytes) {text!r}"
    return f"a {_TYPE_NAMES[kv.vtype]} {kv.value!r}"


def _refuse(hdr: GGUFHeader, kv: KV, problem: str) -> GGUFError:
    return GGUFError(hdr.source, kv.offset, f"key {kv.key!r} {problem}; llama.cpp does not load such a file: "
                                            "fix the key or reconvert the model")


def _wrong_type(hdr: GGUFHeader, kv: KV, expected: str) -> GGUFError:
    return _refuse(hdr, kv, f"is {_describe(kv)} where {expected} is expected")


def _check_int(hdr: GGUFHeader, kv: KV, value: int, maximum: int | None, why: str) -> int:
    if value < 0:
        raise _refuse(hdr, kv, f"is {value}, a negative count")
    if maximum is not None and value > maximum:
        raise _refuse(hdr, kv, f"is {value}, more than {maximum}{why}")
    return value


def _uint(hdr: GGUFHeader, key: str, maximum: int | None = None, why: str = "") -> int | None:
    """A non-negative integer key (any integer width), or None when absent."""
    kv = hdr.kv.get(key)
    if kv is None:
        return None
    if kv.vtype not in _INT_TYPES:
        raise _wrong_type(hdr, kv, "an integer")
    return _check_int(hdr, kv, kv.value, maximum, why)


def _int_any(hdr: GGUFHeader, key: str) -> int | None:
    """An integer key of any width and sign (token ids: their range is the tokenizer's business)."""
    kv = hdr.kv.get(key)
    if kv is None:
        return None
    if kv.vtype not in _INT_TYPES:
        raise _wrong_type(hdr, kv, "an integer")
    return kv.value


def _flag(hdr: GGUFHeader, key: str) -> bool | int | None:
    """A bool key; an integer is passed on as stored (whether llama.cpp accepts it is spec_compat's call)."""
    kv = hdr.kv.get(key)
    if kv is None:
        return None
    if kv.vtype != ValueType.BOOL and kv.vtype not in _INT_TYPES:
        raise _wrong_type(hdr, kv, "a bool")
    return kv.value


def _string(hdr: GGUFHeader, key: str) -> str | None:
    """A string key, decoded; past MAX_TEXT bytes its head and its size (no copy of a hostile string)."""
    kv = hdr.kv.get(key)
    if kv is None:
        return None
    if kv.vtype != ValueType.STRING:
        raise _wrong_type(hdr, kv, "a string")
    return kv.text(MAX_TEXT)


def architecture(hdr: GGUFHeader) -> tuple[str | None, str]:
    """(the architecture to show, the prefix of its keys): None and a prefix no key has when
    general.architecture is absent or not a string; one longer than any key is shown clipped and
    prefixes no key."""
    kv = hdr.kv.get("general.architecture")
    if kv is None or kv.vtype != ValueType.STRING:
        return None, _NO_KEY
    if kv.byte_length() > MAX_KEY_BYTES:
        return kv.text(MAX_TEXT), _NO_KEY
    return kv.value, kv.value


def _string_array(hdr: GGUFHeader, key: str) -> Array | None:
    kv = hdr.kv.get(key)
    if kv is None:
        return None
    if kv.vtype != ValueType.ARRAY or kv.value.elem_type != ValueType.STRING:
        raise _wrong_type(hdr, kv, "an array of strings")
    return kv.value


def _per_layer_ints(hdr: GGUFHeader, key: str, n_layer: int | None, *, flags: bool = False) -> int | list[int] | None:
    """A key llama.cpp reads with get_key_or_arr: one value for every layer, or an array with exactly
    one entry per layer (src/llama-model-loader.cpp: "wrong array length", "n > N_MAX")."""
    kv = hdr.kv.get(key)
    if kv is None:
        return None
    allowed = _INT_TYPES | {ValueType.BOOL} if flags else _INT_TYPES
    what = "a bool or integer" if flags else "an integer"
    if kv.vtype != ValueType.ARRAY:
        if kv.vtype not in allowed:
            raise _wrong_type(hdr, kv, f"{what} or an array of them, one per layer")
        return _check_int(hdr, kv, kv.value, None, "")
    arr = kv.value
    if arr.elem_type not in allowed:
        raise _wrong_type(hdr, kv, f"{what} or an array of them, one per layer")
    if n_layer is None:
        if arr.count > LLAMA_MAX_LAYERS:
            raise _refuse(hdr, kv, f"has {arr.count} entries, more than llama.cpp's {LLAMA_MAX_LAYERS} layers")
    elif arr.count != n_layer:
        raise _refuse(hdr, kv, f"has {arr.count} entries but block_count is {n_layer}: it needs one per layer")
    values = arr.to_list()
    for v in values:
        _check_int(hdr, kv, v, None, "")
    return [int(v) for v in values]


def _as_list(value: int | list[int] | None, n_layer: int) -> list[int] | None:
    if value is None:
        return None
    return list(value) if isinstance(value, list) else [value] * n_layer


# ---------------------------------------------------------------------------------------------
# Facts


def recurrent_layers(hdr: GGUFHeader, arch: str, n_layer_all: int, n_nextn: int) -> list[int]:
    """Layers without a KV cache (SSM / linear attention), by llama.cpp's per-architecture rule.

    ``n_layer_all`` is a checked block_count (at most LLAMA_MAX_LAYERS)."""
    if n_layer_all <= 0:
        return []
    if arch in RECURRENT_ARCHS:
        return list(range(n_layer_all))
    explicit = _per_layer_ints(hdr, f"{arch}.attention.recurrent_layers", n_layer_all, flags=True)
    if explicit is not None:
        flags = _as_list(explicit, n_layer_all) or []
        return [i for i, f in enumerate(flags) if f]
    n_trunk = n_layer_all - n_nextn
    if arch in FULL_ATTENTION_INTERVAL_ARCHS:
        interval = _uint(hdr, f"{arch}.full_attention_interval")
        if interval is None:
            interval = FULL_ATTENTION_INTERVAL_ARCHS[arch]
        interval = interval or 1
        return [i for i in range(n_layer_all) if i < n_trunk and (i + 1) % interval != 0]
    # lfm2, granitehybrid, nemotron_h, jamba, falcon-h1 ...: a layer with zero KV heads is recurrent
    kv_heads = _per_layer_ints(hdr, f"{arch}.attention.head_count_kv", n_layer_all)
    if isinstance(kv_heads, list):
        return [i for i, h in enumerate(kv_heads) if h == 0]
    return []


def swa_pattern(hdr: GGUFHeader, arch: str, n_layer: int) -> list[bool] | None:
    """Per-layer sliding-window flags: the bool array, or the u32 period llama.cpp expands
    (set_swa_pattern: every n-th layer is dense, the rest SWA; period 0 or 1 = no dense layers).

    ``n_layer`` is the trunk's checked layer count (at most LLAMA_MAX_LAYERS)."""
    key = f"{arch}.attention.sliding_window_pattern"
    kv = hdr.kv.get(key)
    if kv is None or n_layer <= 0:
        return None
    if kv.vtype == ValueType.ARRAY:
        arr = kv.value
        if arr.elem_type != ValueType.BOOL and arr.elem_type not in _INT_TYPES:
            raise _wrong_type(hdr, kv, "a period (integer) or an array of bools, one per layer")
        if arr.count > LLAMA_MAX_LAYERS:
            raise _refuse(hdr, kv, f"has {arr.count} entries, more than llama.cpp's {LLAMA_MAX_LAYERS} layers")
        items = arr.to_list(n_layer)
        flags = items + [items[-1] if items else 0] * (n_layer - len(items))
        return [bool(f) for f in flags]
    period = _uint(hdr, key)
    if period is None:  # pragma: no cover - the key exists
        return None
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
    shown, arch = architecture(hdr)
    if shown is None:
        return None, "no general.architecture string: llama.cpp infers nothing"
    if arch == "dflash":
        if hdr.has_tensor("markov_w1.weight"):
            return "draft-dspark", "architecture dflash with the Markov head markov_w1.weight"
        return "draft-dflash", "architecture dflash without markov_w1.weight"
    bc = hdr.kv.get(f"{arch}.block_count")
    if bc is None or bc.vtype != ValueType.UINT32:
        return None, (f"{shown}.block_count is missing or not a u32: llama.cpp's gguf_get_val_u32 "
                      "asserts here and the server aborts when this file is given as a draft without --spec-type")
    name = f"blk.{bc.value - 1}.nextn.eh_proj.weight"
    if hdr.has_tensor(name):
        return "draft-mtp", f"tensor {name} present"
    return None, (f"architecture {shown} and no {name}: no type inferred; as a draft without --spec-type "
                  "it is loaded but speculation stays off (pass --spec-type draft-simple)")


def tokenizer_facts(hdr: GGUFHeader) -> dict[str, Any]:
    tokens = _string_array(hdr, "tokenizer.ggml.tokens")
    merges = _string_array(hdr, "tokenizer.ggml.merges")
    facts: dict[str, Any] = {
        "model": _string(hdr, "tokenizer.ggml.model"),
        "pre": _string(hdr, "tokenizer.ggml.pre"),
        "vocab_size": len(tokens) if tokens is not None else 0,
        "merges_count": len(merges) if merges is not None else 0,
        "bos_token_id": _int_any(hdr, "tokenizer.ggml.bos_token_id"),
        "eos_token_id": _int_any(hdr, "tokenizer.ggml.eos_token_id"),
        "add_bos_token": _flag(hdr, "tokenizer.ggml.add_bos_token"),
        "add_eos_token": _flag(hdr, "tokenizer.ggml.add_eos_token"),
        "tokens_sha256_2000": None,
        "tokens_sha256": None,
        "fingerprint": None,
    }
    if tokens is not None:
        facts["tokens_sha256_2000"] = tokens_sha256(tokens, TOKENS_SHA_PREFIX)
        facts["tokens_sha256"] = tokens_sha256(tokens)
    facts["fingerprint"] = tokenizer_fingerprint(hdr)
    return facts


def tokenizer_fingerprint(hdr: GGUFHeader) -> str | None:
    """sha256 over every ``tokenizer.ggml.*`` key, sorted by name, each as key string, u32 value
    type and value in little-endian GGUF encoding: equal exactly when the tokenizers are byte-identical.

    Strings are hashed as the bytes stored in the file, never as decoded text: two byte strings that
    are not valid UTF-8 would decode to the same replacement characters."""
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
            kv.value.feed(h)
        elif kv.vtype == ValueType.STRING:
            h.update(struct.pack("<Q", kv.byte_length()))
            kv.feed_raw(h)  # in place: a hostile string is not copied
        else:
            h.update(encode_value(kv.vtype, kv.value))
    return h.hexdigest()


class _Budget:
    """What is left of MAX_VALUE_ITEMS and MAX_VALUE_BYTES for the values of one call."""

    def __init__(self) -> None:
        self.items = MAX_VALUE_ITEMS
        self.bytes = MAX_VALUE_BYTES
        self.cut = False


def _bounded_list(arr: Array, budget: _Budget) -> list[Any]:
    n = min(arr.count, budget.items)
    if n < arr.count:
        budget.cut = True
    budget.items -= n
    if arr.elem_type == ValueType.ARRAY:
        out: list[Any] = []
        for inner in arr.iter_arrays(n):
            if budget.items <= 0 or budget.bytes <= 0:
                budget.cut = True
                break
            out.append(_bounded_list(inner, budget))
        return out
    if arr.elem_type == ValueType.STRING:
        texts = []
        for raw in arr.iter_bytes(n):
            if len(raw) > budget.bytes:
                budget.cut = True
                break
            budget.bytes -= len(raw)
            texts.append(raw.decode("utf-8", "replace"))
        return texts
    return arr.to_list(n)


def _header_value(kv: KV, budget: _Budget) -> Any:
    """A header value as plain JSON-able data (arrays decoded, nested ones too), within ``budget``."""
    if kv.vtype == ValueType.ARRAY:
        return _bounded_list(kv.value, budget)
    if kv.vtype == ValueType.STRING:
        size = kv.byte_length()
        if size > min(budget.bytes, MAX_VALUE_BYTES):
            budget.cut = True
            return kv.text(max(min(budget.bytes, MAX_VALUE_BYTES), MAX_TEXT))
        budget.bytes -= size
    return kv.value


def header_values(hdr: GGUFHeader, keys: list[str]) -> tuple[dict[str, Any], list[str]]:
    """The raw values of ``keys`` (None when absent), and the keys whose values were cut short."""
    values: dict[str, Any] = {}
    cut: list[str] = []
    budget = _Budget()
    for key in keys:
        kv = hdr.kv.get(key)
        budget.cut = False
        values[key] = None if kv is None else _header_value(kv, budget)
        if budget.cut:
            cut.append(key)
    return values, cut


def model_facts(hdr: GGUFHeader, *, include_tensors: bool = False, keys: list[str] | None = None) -> dict[str, Any]:
    """The facts dict ``gguf_info`` returns under ``gguf``: plain data only (str, int, float, bool,
    None, lists and dicts of them), never a reader object."""
    arch, key_arch = architecture(hdr)
    key_arch = key_arch if arch is not None else ""
    a = key_arch + "."
    n_layer_all = _uint(hdr, a + "block_count", LLAMA_MAX_LAYERS,
                        ", llama.cpp's layer limit (LLAMA_MAX_LAYERS in src/llama-hparams.h)")
    n_layers = n_layer_all or 0
    n_nextn = _uint(hdr, a + "nextn_predict_layers", n_layers if n_layer_all is not None else LLAMA_MAX_LAYERS,
                    f", the block_count {n_layers} it is part of" if n_layer_all is not None
                    else f", llama.cpp's layer limit ({LLAMA_MAX_LAYERS})") or 0

    recurrent = recurrent_layers(hdr, key_arch, n_layers, n_nextn)
    nextn_ids = list(range(n_layers - n_nextn, n_layers)) if n_layer_all else []
    recurrent_set = set(recurrent)
    kv_layers = [i for i in range(n_layers - n_nextn) if i not in recurrent_set]

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
        "name": _string(hdr, "general.name"),
        "tensor_count": hdr.tensor_count,
        "kv_count": hdr.kv_count,
        "block_count": n_layer_all,
        "context_length": _uint(hdr, a + "context_length"),
        "embedding_length": _uint(hdr, a + "embedding_length"),
        "feed_forward_length": _per_layer_ints(hdr, a + "feed_forward_length", n_layer_all),
        "head_count": _per_layer_ints(hdr, a + "attention.head_count", n_layer_all),
        "head_count_kv": _per_layer_ints(hdr, a + "attention.head_count_kv", n_layer_all),
        "key_length": _uint(hdr, a + "attention.key_length"),
        "value_length": _uint(hdr, a + "attention.value_length"),
        "key_length_swa": _uint(hdr, a + "attention.key_length_swa"),
        "value_length_swa": _uint(hdr, a + "attention.value_length_swa"),
        "sliding_window": _uint(hdr, a + "attention.sliding_window"),
        "sliding_window_pattern": swa_pattern(hdr, key_arch, n_layers - n_nextn),
        "recurrent_layers": recurrent,
        "kv_layers": kv_layers,
        "expert_count": _uint(hdr, a + "expert_count"),
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
        facts["values"], cut = header_values(hdr, keys)
        if cut:
            facts["values_cut"] = cut
    return facts


def facts_or_path(value: Any, what: str, read_options: Mapping[str, Any] | None = None, *,
                  keys: list[str] | None = None, include_tensors: bool = False
                  ) -> tuple[dict[str, Any] | None, GGUFHeader | None]:
    """A model given as header facts or as a GGUF path or http(s) URL: ``(facts, header)``.

    Facts are gguf_info's (``architecture`` at least), alone or as a whole gguf_info result with
    them under ``gguf``; the header is then None. A path must name an existing file; ``keys`` and
    ``include_tensors`` go to ``model_facts``, and the facts carry the location as ``path``.
    None gives ``(None, None)``. ``what`` names the input in the errors."""
    if value is None:
        return None, None
    if isinstance(value, Mapping):
        facts = value["gguf"] if "gguf" in value else value
        if not isinstance(facts, Mapping) or "architecture" not in facts:
            raise SpecdecError(f"{what}: a facts dict needs at least 'architecture' (as gguf_info returns under "
                               "'gguf'); give the path of the GGUF file instead")
        return dict(facts), None
    if not isinstance(value, str) or not value.strip():
        raise SpecdecError(f"{what}: expected header facts (a dict from gguf_info) or a GGUF path or URL, "
                           f"got {value!r}")
    location = value
    if not re.match(r"^https?://", location, re.I) and not os.path.isfile(location):
        raise SpecdecError(f"{what}={location}: no such file; give the path of an existing GGUF file "
                           "(or its facts from gguf_info)")
    header = read_header(location, **dict(read_options or {}))
    facts = model_facts(header, include_tensors=include_tensors, keys=keys)
    facts["path"] = location
    return facts, header
