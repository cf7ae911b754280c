# Copyright: (c) 2026, llmfleet.specdec contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# Private to the collection: KV-cache bytes per position and per context, by llama.cpp's allocation rules.
"""llama.cpp's KV arithmetic: bytes per cache type, per position, per context and per cache.

This room holds the units (KIB/MIB/GIB), ``CACHE_TYPES`` (the collection's one home of the bytes
per cache type: lint and kv_budget both read it), the llama-server config as far as memory is
concerned (``Config``, ``normalize_config`` and the value parsers), a model's layer table from
its header facts (``Layer``, ``Model``, ``prepare_model``) and the caches of one context
(``kv_bytes_per_position``, ``context_params``, ``swa_cells``, ``build_context``). It does not
place layers on devices or compare with memory (``_placement``), nor search for fixes
(``_sizing``).

Every rule here is the one in the llama.cpp tree the project pins (llama-cpp-python 0.3.36,
``vendor/llama.cpp``); the file and function are cited where the rule is applied.

One context's KV cache (``src/llama-kv-cache.cpp``, the ``llama_kv_cache`` constructor)::

    for each layer il the memory keeps (see below):
        K = ggml_new_tensor_3d(type_k, n_embd_k_gqa(il), kv_size, n_stream)
        V = ggml_new_tensor_3d(type_v, v_trans ? n_embd_v_gqa_max : n_embd_v_gqa(il), kv_size, n_stream)
    n_embd_k_gqa(il) = n_embd_head_k(il) * n_head_kv(il)            (src/llama-hparams.cpp)
    bytes = ggml_row_size(type, width) * kv_size * n_stream           (width / block * block bytes)

- ``v_trans = !flash_attn`` and ``flash_attn`` is true for ``-fa on`` and for ``-fa auto`` when the
  cache is created (``src/llama-context.cpp``); only ``-fa off`` transposes V, and then every layer's V
  row is padded to the widest layer's (``n_embd_v_gqa_max`` over all layers, "padding V cache").
- The context (``llama_context`` constructor): ``n_ctx = GGML_PAD(-c, 256)``; with a unified cache
  ``kv_size = n_ctx`` and one stream; otherwise ``n_ctx_seq = GGML_PAD(n_ctx / -np, 256)``,
  ``n_ctx = n_ctx_seq * -np`` and one stream per slot (``n_stream = n_seq_max``).
  ``n_batch = min(-c, -b)``, ``n_ubatch = min(n_batch, -ub)``.
- llama-server (``tools/server/server.cpp``): ``-np`` defaults to -1, and any negative ``-np`` is
  "auto": 4 slots with a unified cache (``kv_unified`` is forced on, ``-no-kvu`` notwithstanding);
  ``-np 0`` is refused; a positive ``-np`` keeps ``kv_unified`` off unless ``-kvu``.
- Sliding-window models get two caches (``src/llama-kv-cache-iswa.cpp``): the full layers with
  ``kv_size`` cells, the SWA layers with
  ``GGML_PAD(min(kv_size, n_swa * (unified ? n_seq_max : 1) + n_ubatch), 256)`` cells (``--swa-full``:
  ``kv_size``). Both are created, and logged, even when one holds no layer.
- Which layers hold KV (``llama_model::create_memory``): the trunk layers that are not recurrent
  (the header facts' ``kv_layers``); an MTP context (``--spec-type draft-mtp``) holds only the
  nextn layers of the model it is built on, the draft model when ``-md`` is given, else the target.

Every cache tensor holds a multiple of 256 cells, so its bytes are a multiple of 256 and no
buffer alignment (32 on the CPU, 128 on CUDA) pads it: a device's "KV buffer size" is the sum of
its tensors. What is not counted: compute buffers (graph scratch, the reason for ``headroom``), the
recurrent state of hybrid models (per slot, not per position), and MLA caches.
"""
from __future__ import annotations

import math
import re
import struct
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

from ansible_collections.llmfleet.specdec.plugins.module_utils.common._errors import SpecdecError

KIB = 1024
MIB = 1024 * KIB
GIB = 1024 * MIB

# ggml/src/ggml.c type_traits: (elements per block, bytes per block) for every type common/arg.cpp
# accepts as a KV cache type (kv_cache_types).
CACHE_TYPES: dict[str, tuple[int, int]] = {
    "f32": (1, 4),
    "f16": (1, 2),
    "bf16": (1, 2),
    "q8_0": (32, 34),
    "q4_0": (32, 18),
    "q4_1": (32, 20),
    "iq4_nl": (32, 18),
    "q5_0": (32, 22),
    "q5_1": (32, 24),
}
QUANTIZED = frozenset(t for t, (blck, _dummy) in CACHE_TYPES.items() if blck > 1)
# Bytes per stored value of each cache type (block bytes / values per block), for estimates that do
# not round rows to whole blocks (lint's drafter-KV warning); derived so that no second table drifts.
BYTES_PER_VALUE: dict[str, float] = {t: size / blck for t, (blck, size) in CACHE_TYPES.items()}
CELL_PAD = 256          # GGML_PAD(n_ctx, 256), GGML_PAD(n_ctx_seq, 256), the SWA cache's pad
LLAMA_MAX_SEQ = 256     # src/llama-cparams.h
SERVER_AUTO_SLOTS = 4   # tools/server/server.cpp: -np auto -> 4 slots, kv_unified on
DEFAULT_HEADROOM = GIB  # llama.cpp's own --fit-target margin per device
FLASH_ATTN = ("on", "off", "auto")
MEMORY_BASES = ("total", "free")
CPU = "CPU"
# Architectures whose cache is MLA-shaped (K only, latent width): not modelled here.
MLA_ARCHS = frozenset({"deepseek2", "deepseek32", "glm_dsa", "kimi_linear", "minimax_m3", "deepseek4"})
_INPUT_TENSORS = ("token_embd.", "position_embd.", "token_types.", "per_layer_token_embd.")
_BLK = re.compile(r"^blk\.(\d+)\.")


class SizingError(SpecdecError):
    """An input to the KV sizing that cannot be used as given."""


# ---------------------------------------------------------------------------------------------
# small helpers


def _f32(x: float) -> float:
    """x rounded to single precision: one float op on float inputs, computed in double, then rounded,
    equals the single-precision result exactly, so llama.cpp's float arithmetic is reproduced."""
    return struct.unpack("<f", struct.pack("<f", x))[0]


def pad(n: int, to: int = CELL_PAD) -> int:
    """GGML_PAD(n, to)."""
    return (n + to - 1) // to * to


def fmt_bytes(n: int | None) -> str:
    if n is None:
        return "unknown"
    for unit, size in (("GiB", GIB), ("MiB", MIB), ("KiB", KIB)):
        if abs(n) >= size:
            return f"{n / size:.2f} {unit}"
    return f"{n} B"


def cache_type(name: str, value: Any) -> str:
    """A KV cache type name as llama.cpp spells it, or a SizingError naming the input."""
    if not isinstance(value, str) or value.strip().lower() not in CACHE_TYPES:
        raise SizingError(f"{name}: unknown KV cache type {value!r}; llama.cpp accepts "
                          f"{', '.join(CACHE_TYPES)}")
    return value.strip().lower()


def row_bytes(type_name: str, n_elements: int, what: str = "row") -> int:
    """ggml_row_size: the bytes of ``n_elements`` values of a cache type (whole blocks only)."""
    blck, size = CACHE_TYPES[cache_type("cache type", type_name)]
    if n_elements % blck:
        raise SizingError(f"{what}: {type_name} stores blocks of {blck} values, but the row has {n_elements} "
                          f"values; llama.cpp cannot create this cache (ggml_row_size asserts) - use f16, bf16 or f32")
    return n_elements // blck * size


def _positive_int(name: str, value: Any) -> int:
    if isinstance(value, bool):
        raise SizingError(f"{name}: expected a positive whole number, got {value!r}")
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value.strip())
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if not isinstance(value, int) or value <= 0:
        raise SizingError(f"{name}: expected a positive whole number, got {value!r}")
    return value


def _int(name: str, value: Any) -> int:
    if isinstance(value, bool):
        raise SizingError(f"{name}: expected a whole number, got {value!r}")
    try:
        return int(str(value).strip()) if isinstance(value, str) else int(value)
    except (TypeError, ValueError):
        raise SizingError(f"{name}: expected a whole number, got {value!r}") from None


def _on_off(name: str, value: Any) -> bool:
    """-fit's value as common/arg.cpp reads it: 'on' or 'off' (booleans accepted)."""
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("on", "off"):
        return text == "on"
    raise SizingError(f"{name}: {value!r}; llama-server accepts 'on' or 'off'")


def _name_list(name: str, value: Any) -> list[str] | None:
    """A device list as llama.cpp's --device reads it: comma-separated names, ``none`` = no device."""
    if value is None:
        return None
    items = value.split(",") if isinstance(value, str) else list(value)
    out = [str(v).strip() for v in items if str(v).strip()]
    if not out:
        raise SizingError(f"{name}: empty device list; give names such as CUDA0,CUDA1 or 'none'")
    if [v.lower() for v in out] == ["none"]:
        return []
    return out


def _split_list(value: Any) -> list[float] | None:
    """-ts as llama.cpp reads it: numbers separated by ',' or '/'."""
    if value is None:
        return None
    items = re.split(r"[,/]", value) if isinstance(value, str) else list(value)
    out: list[float] = []
    for v in items:
        try:
            f = float(v)
        except (TypeError, ValueError):
            raise SizingError(f"tensor_split: {v!r} is not a number; give proportions such as 3,1") from None
        if f < 0 or math.isnan(f) or math.isinf(f):
            raise SizingError(f"tensor_split: {v!r} must be a finite number >= 0")
        out.append(f)
    if not out:
        raise SizingError("tensor_split: empty; give proportions such as 3,1")
    return out


# ---------------------------------------------------------------------------------------------
# the config


@dataclass(frozen=True)
class Config:
    """A llama-server config, as far as memory is concerned (flag names in comments)."""

    ctx_size: int | None = None          # -c (None or 0: the target's training context, see fit)
    parallel: int | None = None          # -np (None: the server's auto, 4 slots, unified)
    kv_unified: bool | None = None       # -kvu / -no-kvu (None: off; -np auto forces it on)
    fit: bool = True                     # -fit on|off: with -c 0, n_ctx_train per stream
    kv_unified_per_slot: int | None = None  # --kv-unified-per-slot: without -c, slots * N
    cache_type_k: str = "f16"            # -ctk
    cache_type_v: str = "f16"            # -ctv
    draft_cache_type_k: str = "f16"      # -ctkd
    draft_cache_type_v: str = "f16"      # -ctvd
    flash_attn: str = "auto"             # -fa
    device: tuple[str, ...] | None = None        # --device
    draft_device: tuple[str, ...] | None = None  # --spec-draft-device / -devd
    tensor_split: tuple[float, ...] | None = None  # -ts
    n_gpu_layers: int = -1               # -ngl (-1: all)
    draft_n_gpu_layers: int = -1         # -ngld (-1: all)
    kv_offload: bool = True              # -nkvo turns it off
    swa_full: bool = False               # --swa-full
    batch_size: int = 2048               # -b
    ubatch_size: int = 512               # -ub
    spec_type: tuple[str, ...] = ()      # --spec-type (empty: what llama.cpp infers from -md)
    devices: tuple[Mapping[str, Any], ...] = ()  # gpu_facts devices (memory per device)
    headroom_bytes: int = DEFAULT_HEADROOM
    memory: str = "total"                # compare against each device's total or free memory

    @property
    def slots(self) -> int:
        return self.parallel if self.parallel is not None else SERVER_AUTO_SLOTS

    @property
    def unified(self) -> bool:
        # tools/server/server.cpp: -np auto sets kv_unified = true whatever -kvu/-no-kvu said
        return True if self.parallel is None else bool(self.kv_unified)


_CONFIG_KEYS = frozenset(Config.__dataclass_fields__)


def config_from_parsed(parsed: Mapping[str, Any]) -> dict[str, Any]:
    """The memory-relevant part of a config parsed by ``_flags.parse`` (flags and/or LLAMA_ARG_*)."""
    out = {k: v for k, v in parsed.items() if k in _CONFIG_KEYS and v is not None}
    options = parsed.get("options") or {}
    if "--swa-full" in options:
        out["swa_full"] = bool(options["--swa-full"])
    if "--kv-offload" in options:
        out["kv_offload"] = bool(options["--kv-offload"])
    if options.get("--fit") is not None:
        out["fit"] = options["--fit"]
    if options.get("--kv-unified-per-slot") is not None:
        out["kv_unified_per_slot"] = options["--kv-unified-per-slot"]
    if parsed.get("spec_types"):
        out["spec_type"] = list(parsed["spec_types"])
    for key in ("n_gpu_layers", "draft_n_gpu_layers"):
        if isinstance(out.get(key), str):
            value = out[key].strip().lower()
            out[key] = -1 if value in ("all", "auto", "-1") else _int(key, value)
    return out  # device lists and -ts strings are read by normalize_config as llama.cpp reads them


def normalize_config(config: Mapping[str, Any] | Config | None) -> Config:
    """Check every input and fill llama-server's defaults; errors name the input."""
    if isinstance(config, Config):
        return config
    raw = {k: v for k, v in dict(config or {}).items() if v is not None}
    unknown = sorted(set(raw) - _CONFIG_KEYS)
    if unknown:
        raise SizingError(f"config: unknown keys {unknown}; known: {sorted(_CONFIG_KEYS)}")
    out: dict[str, Any] = {}
    if "ctx_size" in raw:
        out["ctx_size"] = _int("ctx_size", raw["ctx_size"])
        if out["ctx_size"] < 0:
            raise SizingError(f"ctx_size: {raw['ctx_size']!r}; give a context size, or 0 for the model's "
                              "training context (llama-server's default)")
    if "parallel" in raw:
        n = _int("parallel", raw["parallel"])
        if n == 0:
            raise SizingError("parallel: 0 is refused by llama-server ('invalid value for n_parallel'); "
                              "give a slot count, or -1 for its auto setting (4 slots, unified cache)")
        if n > LLAMA_MAX_SEQ:
            raise SizingError(f"parallel: {n} slots; llama.cpp allows at most {LLAMA_MAX_SEQ}")
        out["parallel"] = n if n > 0 else None  # any negative -np is llama-server's auto
    if "fit" in raw:
        out["fit"] = _on_off("fit", raw["fit"])
    if "kv_unified_per_slot" in raw:
        out["kv_unified_per_slot"] = _int("kv_unified_per_slot", raw["kv_unified_per_slot"])
        if out["kv_unified_per_slot"] < 0:
            raise SizingError(f"kv_unified_per_slot: {raw['kv_unified_per_slot']!r} must be >= 0 (0 = unset)")
    for key in ("kv_unified", "kv_offload", "swa_full"):
        if key in raw:
            out[key] = bool(raw[key])
    for key in ("cache_type_k", "cache_type_v", "draft_cache_type_k", "draft_cache_type_v"):
        if key in raw:
            out[key] = cache_type(key, raw[key])
    if "flash_attn" in raw:
        fa = raw["flash_attn"]
        fa = {True: "on", False: "off"}.get(fa, fa) if isinstance(fa, bool) else str(fa).strip().lower()
        fa = {"enabled": "on", "true": "on", "1": "on", "disabled": "off", "false": "off", "0": "off"}.get(fa, fa)
        if fa not in FLASH_ATTN:
            raise SizingError(f"flash_attn: {raw['flash_attn']!r}; use one of {', '.join(FLASH_ATTN)}")
        out["flash_attn"] = fa
    for key in ("device", "draft_device"):
        if key in raw:
            names = _name_list(key, raw[key])
            out[key] = tuple(names) if names is not None else None
    if "tensor_split" in raw:
        out["tensor_split"] = tuple(_split_list(raw["tensor_split"]) or ())
    for key in ("n_gpu_layers", "draft_n_gpu_layers"):
        if key in raw:
            out[key] = _int(key, raw[key])
    for key in ("batch_size", "ubatch_size"):
        if key in raw:
            out[key] = _positive_int(key, raw[key])
    if "spec_type" in raw:
        st = raw["spec_type"]
        items = st.split(",") if isinstance(st, str) else list(st)
        out["spec_type"] = tuple(str(s).strip() for s in items if str(s).strip())
    if "devices" in raw:
        devs = raw["devices"]
        if not isinstance(devs, (list, tuple)) or not all(isinstance(d, Mapping) for d in devs):
            raise SizingError("devices: expected a list of device dicts as gpu_facts returns them")
        out["devices"] = tuple(devs)
    if "headroom_bytes" in raw:
        out["headroom_bytes"] = _int("headroom_bytes", raw["headroom_bytes"])
        if out["headroom_bytes"] < 0:
            raise SizingError(f"headroom_bytes: {raw['headroom_bytes']!r} must be >= 0")
    if "memory" in raw:
        if raw["memory"] not in MEMORY_BASES:
            raise SizingError(f"memory: {raw['memory']!r}; use one of {', '.join(MEMORY_BASES)}")
        out["memory"] = raw["memory"]
    return Config(**out)


# ---------------------------------------------------------------------------------------------
# model shapes from the header facts


@dataclass(frozen=True)
class Layer:
    index: int
    n_head_kv: int
    head_k: int
    head_v: int
    swa: bool

    @property
    def k_width(self) -> int:
        return self.head_k * self.n_head_kv

    @property
    def v_width(self) -> int:
        return self.head_v * self.n_head_kv


@dataclass
class Model:
    """What sizing needs from one model's header facts, prepared once."""

    role: str
    architecture: str | None
    n_layer_all: int
    layers: list[Layer]
    kv_layers: list[int]
    nextn_layers: list[int]
    n_swa: int
    context_length: int | None
    spec_type_autodetect: str | None
    weights_by_slot: dict[int, int] | None   # layer index (n_layer_all = output) -> bytes; -1 = input
    notes: list[str] = field(default_factory=list)

    @property
    def has_swa(self) -> bool:
        return self.n_swa > 0 and any(layer.swa for layer in self.layers)

    @property
    def v_width_max(self) -> int:
        return max((layer.v_width for layer in self.layers), default=0)


def _per_layer(name: str, value: Any, n: int) -> list[int]:
    if isinstance(value, (list, tuple)):
        if not value:
            raise SizingError(f"{name}: empty per-layer list")
        vals = [int(v) for v in value]
        return vals[:n] + [vals[-1]] * max(0, n - len(vals))
    return [int(value)] * n


def _need(role: str, facts: Mapping[str, Any], key: str) -> Any:
    value = facts.get(key)
    if value is None:
        raise SizingError(f"{role}: the header facts lack {key}; pass what gguf_info returns under gguf")
    return value


def prepare_model(facts: Mapping[str, Any], role: str) -> Model:
    """The layer table of one model (role names it in errors: target or draft)."""
    if not isinstance(facts, Mapping):
        raise SizingError(f"{role}: expected header facts (a dict as gguf_info returns under gguf), got {type(facts).__name__}")
    n_layer_all = _need(role, facts, "block_count")
    if not isinstance(n_layer_all, int) or n_layer_all <= 0:
        raise SizingError(f"{role}: block_count {n_layer_all!r} must be a positive whole number")
    mtp = facts.get("mtp") or {}
    nextn = list(mtp.get("nextn_layers") or [])
    if not nextn and mtp.get("nextn_predict_layers"):
        n = int(mtp["nextn_predict_layers"])
        nextn = list(range(n_layer_all - n, n_layer_all))
    n_trunk = n_layer_all - len(nextn)
    head_count_kv = facts.get("head_count_kv", None)
    if head_count_kv is None:
        head_count_kv = _need(role, facts, "head_count")   # llama.cpp: n_head_kv defaults to n_head
    kv_heads = _per_layer(f"{role}: head_count_kv", head_count_kv, n_layer_all)
    key_len, val_len = facts.get("key_length"), facts.get("value_length")
    if key_len is None or val_len is None:
        n_embd = _need(role, facts, "embedding_length")
        heads0 = _per_layer(f"{role}: head_count", _need(role, facts, "head_count"), n_layer_all)[0]
        if heads0 <= 0:
            raise SizingError(f"{role}: head_count is 0, so the head size cannot be derived; the header needs key_length")
        default = n_embd // heads0   # src/llama-model.cpp: n_embd_head_k = n_embd / n_head()
        key_len = default if key_len is None else key_len
        val_len = default if val_len is None else val_len
    key_swa = facts.get("key_length_swa") or key_len
    val_swa = facts.get("value_length_swa") or val_len
    window = facts.get("sliding_window") or 0
    pattern = facts.get("sliding_window_pattern")
    notes: list[str] = []
    if window and pattern is None:
        swa_flags = [True] * n_trunk
        notes.append(f"{role}: the header declares sliding_window = {window} but no per-layer pattern; every "
                     "trunk layer is sized as a sliding-window layer (llama.cpp sets some architectures' "
                     "patterns in code: check the load log's is_swa lines)")
    elif window:
        swa_flags = [bool(v) for v in pattern][:n_trunk]
        swa_flags += [False] * (n_trunk - len(swa_flags))
    else:
        swa_flags = [False] * n_trunk
    swa_flags += [False] * len(nextn)   # llama_hparams::set_swa_pattern: nextn layers never slide
    layers = [Layer(il, kv_heads[il], key_swa if swa_flags[il] else key_len, val_swa if swa_flags[il] else val_len,
                    swa_flags[il]) for il in range(n_layer_all)]
    kv_layers = facts.get("kv_layers")
    if kv_layers is None:
        recurrent = set(facts.get("recurrent_layers") or [])
        kv_layers = [il for il in range(n_trunk) if il not in recurrent]
    arch = facts.get("architecture")
    if arch in MLA_ARCHS:
        notes.append(f"{role}: architecture {arch} keeps an MLA-shaped cache (latent K, no V); the sizes here "
                     "use plain K/V heads and overstate it")
    if facts.get("recurrent_layers"):
        notes.append(f"{role}: {len(facts['recurrent_layers'])} recurrent layers hold no KV cache; their state "
                     "(per slot, not per position) is not counted")
    return Model(role=role, architecture=arch, n_layer_all=n_layer_all, layers=layers,
                 kv_layers=[int(i) for i in kv_layers], nextn_layers=nextn, n_swa=int(window) if window else 0,
                 context_length=facts.get("context_length"),
                 spec_type_autodetect=facts.get("spec_type_autodetect"),
                 weights_by_slot=_weights_by_slot(facts.get("tensors"), n_layer_all), notes=notes)


def _weights_by_slot(tensors: Any, n_layer_all: int) -> dict[int, int] | None:
    """Tensor bytes per layer slot: blk.N -> N, input tensors -> -1 (always the CPU), the rest ->
    the output slot n_layer_all. A model without output.weight ties it to token_embd, which
    llama.cpp then loads a second time on the output device (TENSOR_DUPLICATED)."""
    if not tensors:
        return None
    slots: dict[int, int] = {}
    names = set()
    embd = 0
    for t in tensors:
        name, n_bytes = str(t.get("name", "")), int(t.get("n_bytes") or 0)
        names.add(name)
        m = _BLK.match(name)
        if m:
            slot = int(m.group(1))
        elif name.startswith(_INPUT_TENSORS):
            slot = -1
            if name == "token_embd.weight":
                embd = n_bytes
        else:
            slot = n_layer_all
        slots[slot] = slots.get(slot, 0) + n_bytes
    if "output.weight" not in names and embd:
        slots[n_layer_all] = slots.get(n_layer_all, 0) + embd
    return slots


def kv_bytes_per_position(facts: Mapping[str, Any] | Model, cache_type_k: str = "f16", cache_type_v: str = "f16",
                          layers: Iterable[int] | None = None, *, flash_attn: bool = True) -> int:
    """K + V bytes one position costs in one stream, over ``layers`` (default: the KV layers).

    With ``flash_attn`` False (``-fa off``) V is stored transposed and each layer's V row is padded
    to the widest layer's, as llama.cpp does."""
    model = facts if isinstance(facts, Model) else prepare_model(facts, "model")
    tk, tv = cache_type("cache_type_k", cache_type_k), cache_type("cache_type_v", cache_type_v)
    ids = model.kv_layers if layers is None else list(layers)
    total = 0
    for il in ids:
        k, v = _layer_rows(model, il, tk, tv, v_trans=not flash_attn)
        total += k + v
    return total


def _layer_rows(model: Model, il: int, tk: str, tv: str, v_trans: bool) -> tuple[int, int]:
    if not 0 <= il < model.n_layer_all:
        raise SizingError(f"{model.role}: layer {il} does not exist (block_count {model.n_layer_all})")
    layer = model.layers[il]
    v_width = model.v_width_max if v_trans else layer.v_width
    return (row_bytes(tk, layer.k_width, f"{model.role} layer {il} K ({layer.n_head_kv} KV heads x {layer.head_k})"),
            row_bytes(tv, v_width, f"{model.role} layer {il} V ({v_width} values)"))


# ---------------------------------------------------------------------------------------------
# contexts


def context_params(ctx_size: int, cfg: Config) -> dict[str, int | bool]:
    """llama_context's n_ctx, n_ctx_seq, streams and n_ubatch for a requested -c."""
    n_seq = cfg.slots
    n_ctx = pad(ctx_size)
    if cfg.unified:
        n_ctx_seq = n_ctx
    else:
        n_ctx_seq = pad(n_ctx // n_seq)
        n_ctx = n_ctx_seq * n_seq
    n_batch = min(ctx_size, cfg.batch_size)
    return {"requested": ctx_size, "n_ctx": n_ctx, "n_ctx_seq": n_ctx_seq, "n_seq_max": n_seq,
            "n_stream": 1 if cfg.unified else n_seq, "kv_unified": cfg.unified,
            "n_batch": n_batch, "n_ubatch": min(n_batch, cfg.ubatch_size)}


def swa_cells(model: Model, ctx: Mapping[str, Any], swa_full: bool) -> int:
    """llama_kv_cache_iswa: the SWA cache's cells."""
    if swa_full:
        return int(ctx["n_ctx_seq"])
    seqs = ctx["n_seq_max"] if ctx["kv_unified"] else 1
    return pad(min(ctx["n_ctx_seq"], model.n_swa * seqs + ctx["n_ubatch"]))


def _log_line(cache: Mapping[str, Any], tk: str, tv: str, n_seq_max: int) -> str:
    """The line llama_kv_cache prints for this cache, formatted as llama.cpp formats it
    ((float) bytes / (1024.0f * 1024.0f), printed %7.2f)."""
    def mib(n: int) -> float:
        return _f32(float(n)) / MIB
    k, v = cache["k_bytes"], cache["v_bytes"]
    return (f"llama_kv_cache: size = {mib(k + v):7.2f} MiB ({cache['cells']:6d} cells, {len(cache['layers']):3d} layers, "
            f"{n_seq_max:2d}/{cache['streams']} seqs), K ({tk}): {mib(k):7.2f} MiB, V ({tv}): {mib(v):7.2f} MiB")


def build_context(model: Model, layer_ids: list[int], ctx: Mapping[str, Any], tk: str, tv: str, cfg: Config,
                  layer_dev: list[str], mtp: bool) -> dict[str, Any]:
    """One context's caches with their cells, bytes, per-layer rows and device of each layer."""
    v_trans = cfg.flash_attn == "off"
    streams = int(ctx["n_stream"])
    kinds = [("full", False), ("swa", True)] if model.has_swa else [("kv", None)]
    caches = []
    per_device: dict[str, int] = {}
    for name, is_swa in kinds:
        ids = [il for il in layer_ids if is_swa is None or model.layers[il].swa == is_swa]
        cells = swa_cells(model, ctx, cfg.swa_full) if is_swa else int(ctx["n_ctx_seq"])
        rows = []
        k_bytes = v_bytes = 0
        for il in ids:
            k_row, v_row = _layer_rows(model, il, tk, tv, v_trans)
            dev = layer_dev[il] if cfg.kv_offload else CPU
            lk, lv = k_row * cells * streams, v_row * cells * streams
            k_bytes += lk
            v_bytes += lv
            per_device[dev] = per_device.get(dev, 0) + lk + lv
            rows.append({"layer": il, "device": dev, "k_row_bytes": k_row, "v_row_bytes": v_row,
                         "bytes": lk + lv})
        cache = {"cache": name, "layers": ids, "cells": cells, "streams": streams, "k_bytes": k_bytes,
                 "v_bytes": v_bytes, "bytes": k_bytes + v_bytes,
                 "per_position_bytes": sum(r["k_row_bytes"] + r["v_row_bytes"] for r in rows), "rows": rows}
        cache["log_line"] = _log_line(cache, tk, tv, int(ctx["n_seq_max"]))
        caches.append(cache)
    per_pos = sum(c["per_position_bytes"] for c in caches)
    out = {
        "model": model.role, "architecture": model.architecture, "context_type": "mtp" if mtp else "default",
        "cache_type_k": tk, "cache_type_v": tv, "v_trans": v_trans, "context": dict(ctx),
        "kv_layers": list(layer_ids),
        "swa_layers": [il for il in layer_ids if model.layers[il].swa],
        "full_layers": [il for il in layer_ids if not model.layers[il].swa],
        "sliding_window": model.n_swa or None,
        "per_position_bytes": per_pos,
        "total_bytes": sum(c["bytes"] for c in caches),
        "k_bytes": sum(c["k_bytes"] for c in caches),
        "v_bytes": sum(c["v_bytes"] for c in caches),
        "caches": caches,
        "kv_by_device": per_device,
        "log_lines": [c["log_line"] for c in caches],
    }
    swa = [c for c in caches if c["cache"] == "swa"]
    if swa and swa[0]["layers"]:
        # What the window alone would cost (window x per-position bytes x streams); llama.cpp
        # allocates more: room for the window of every sequence plus one ubatch, padded to 256.
        out["swa_window_bytes"] = model.n_swa * swa[0]["per_position_bytes"] * streams
    return out
