# Copyright: (c) 2026, llmfleet.specdec contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# Private to the collection: KV-cache bytes per position, per context and per device, by llama.cpp's allocation rules.
"""Will a speculative llama-server config fit? KV cache and weights per device, and the fixes.

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
- The context size llama-server asks for (``common/arg.cpp``, ``common/fit.cpp``): ``-c`` defaults
  to 0, "the model's training context". With ``--fit`` on (the default) and ``-c`` 0,
  ``common_fit_params`` first sets ``n_ctx = n_ctx_train * n_streams`` (``n_streams`` = 1 with a
  unified cache, else the slot count), so every slot gets the full training context; it lowers
  that only when the projected memory use exceeds the free memory minus ``--fit-target`` (default
  1 GiB per device; a CPU-only server compares with the host's total RAM), down to
  ``--fit-ctx`` (4096) per stream, and never for an explicit ``-c 0``. With ``-fit off`` and
  ``-c`` 0 the context is ``n_ctx_train`` in total (``llama_context``). A given ``-c N`` is kept.
  ``--kv-unified-per-slot N`` without ``-c`` asks for ``slots * N``.
- Sliding-window models get two caches (``src/llama-kv-cache-iswa.cpp``): the full layers with
  ``kv_size`` cells, the SWA layers with
  ``GGML_PAD(min(kv_size, n_swa * (unified ? n_seq_max : 1) + n_ubatch), 256)`` cells (``--swa-full``:
  ``kv_size``). Both are created, and logged, even when one holds no layer.
- Which layers hold KV (``llama_model::create_memory``): the trunk layers that are not recurrent
  (the header facts' ``kv_layers``); an MTP context (``--spec-type draft-mtp``) holds only the
  nextn layers of the model it is built on, the draft model when ``-md`` is given, else the target.
- The draft context (``common/speculative.cpp``): ``cparams.n_ctx = llama_n_ctx(ctx_tgt)`` (no flag
  caps it), the same ``-np``/``-kvu``/``-fa``, cache types ``-ctkd``/``-ctvd`` (default f16, not the
  target's ``-ctk``), devices ``--spec-draft-device`` (default: the target's device list, and then
  the target's ``-ts`` too), ``-ngld``.
- Layers to devices (``llama_model_base::load_tensors``): layer ``il`` (and the output layer,
  ``il = n_layer``) goes to device ``upper_bound(splits, float(il - i_gpu_start) / act_gpu_layers)``
  where ``splits`` are the cumulative, normalised ``-ts`` values (default: each device's free memory),
  computed in single precision as llama.cpp does. The input layer (token embeddings) stays on the
  CPU. A layer's KV lands on its layer's device (``model.dev_layer(il)``), on the CPU with ``-nkvo``.

Every cache tensor holds a multiple of 256 cells, so its bytes are a multiple of 256 and no
buffer alignment (32 on the CPU, 128 on CUDA) pads it: a device's "KV buffer size" is the sum of
its tensors. What is not counted: compute buffers (graph scratch, the reason for ``headroom``), the
recurrent state of hybrid models (per slot, not per position), and MLA caches.
"""
from __future__ import annotations

import bisect
import math
import re
import struct
from dataclasses import dataclass, field, replace
from typing import Any, Iterable, Mapping

from ansible_collections.llmfleet.specdec.plugins.module_utils._errors import SpecdecError

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
_TS_SEARCH_LIMIT = 3000


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


# ---------------------------------------------------------------------------------------------
# devices


def device_name(dev: Mapping[str, Any]) -> str | None:
    """The llama.cpp name of a gpu_facts device: its ``llama_device`` key, else CUDA<index> for
    backend cuda, ROCm<index> for rocm, Vulkan<index> for vulkan, else its name."""
    explicit = dev.get("llama_device") or dev.get("device")
    if explicit:
        return str(explicit)
    prefix = {"cuda": "CUDA", "rocm": "ROCm", "hip": "ROCm", "vulkan": "Vulkan", "sycl": "SYCL",
              "metal": "Metal"}.get(str(dev.get("backend", "")).lower())
    if prefix is not None and dev.get("index") is not None:
        return f"{prefix}{int(dev['index'])}"
    name = dev.get("name")
    return str(name) if name else None


def device_pool(cfg: Config) -> dict[str, Mapping[str, Any]]:
    pool: dict[str, Mapping[str, Any]] = {}
    for i, dev in enumerate(cfg.devices):
        name = device_name(dev)
        if not name:
            raise SizingError(f"devices[{i}]: cannot tell its llama.cpp name; give it a llama_device key (e.g. CUDA0)")
        pool[name] = dev
    return pool


def default_devices(pool: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """llama.cpp's default device list: every discrete GPU; the integrated ones only when there is none."""
    gpus = [n for n, d in pool.items() if n != CPU and not d.get("apu")]
    return gpus or [n for n, d in pool.items() if n != CPU]


def _free_for_split(name: str, pool: Mapping[str, Mapping[str, Any]]) -> float:
    dev = pool.get(name) or {}
    for key in ("free_bytes", "total_bytes"):
        if dev.get(key):
            return float(dev[key])
    return 1.0


def assign_layers(n_layer_all: int, devices: list[str], tensor_split: Iterable[float] | None,
                  free: list[float], n_gpu_layers: int) -> list[str]:
    """The device of each layer slot 0..n_layer_all (the last one is the output layer), exactly as
    llama_model_base::load_tensors computes it, in single precision."""
    if not devices:
        return [CPU] * (n_layer_all + 1)
    n_dev = len(devices)
    ts = list(tensor_split or [])[:n_dev]
    ts += [0.0] * (n_dev - len(ts))
    splits = [_f32(v) for v in (free if all(v == 0.0 for v in ts) else ts)]
    total = 0.0
    for i in range(n_dev):
        total = _f32(total + splits[i])
        splits[i] = total
    splits = [_f32(s / total) if total else 0.0 for s in splits]
    ngl = n_layer_all + 1 if n_gpu_layers < 0 else n_gpu_layers
    start = max(n_layer_all + 1 - ngl, 0)
    act = min(ngl, n_layer_all + 1)
    out = []
    for il in range(n_layer_all + 1):
        if il < start or il - start >= act:
            out.append(CPU)
            continue
        x = _f32(_f32(float(il - start)) / _f32(float(act)))
        out.append(devices[min(bisect.bisect_right(splits, x), n_dev - 1)])
    return out


def _budget(dev: Mapping[str, Any] | None, basis: str) -> tuple[int | None, str | None]:
    if not dev:
        return None, None
    keys = ("usable_bytes", "total_bytes") if basis == "total" else ("usable_free_bytes", "free_bytes")
    for key in keys:
        if dev.get(key) is not None:
            return int(dev[key]), key
    return None, None


# ---------------------------------------------------------------------------------------------
# the plan


def _spec_types(cfg: Config, draft: Model | None) -> list[str]:
    if cfg.spec_type:
        return list(cfg.spec_type)
    if draft is not None:
        return [draft.spec_type_autodetect or "draft-simple"]
    return []


def _legality(model: Model, tk: str, tv: str, cfg: Config) -> list[str]:
    """Why llama.cpp would refuse these cache types for this model (llama_init_from_model)."""
    problems = []
    role = model.role
    if cfg.flash_attn == "off" and tv in QUANTIZED:
        problems.append(f"{role}: a quantized V cache ({tv}) needs flash attention, and flash_attn is off: "
                        "llama.cpp refuses the context (use -fa on or auto, or an f16/bf16/f32 V cache)")
    if cfg.flash_attn != "off":
        for t, head, what in ((tk, "head_k", "K"), (tv, "head_v", "V")):
            blck = CACHE_TYPES[t][0]
            bad = [layer for layer in model.layers[:model.n_layer_all - len(model.nextn_layers)]
                   if getattr(layer, head) % blck]
            if blck > 1 and bad:
                problems.append(f"{role}: {what} cache type {t} with block size {blck} does not divide "
                                f"n_embd_head_{what.lower()}={getattr(bad[0], head)} (layer {bad[0].index}); "
                                "llama.cpp refuses the context")
    return problems


def _place(model: Model, devices: list[str], cfg: Config, pool: Mapping[str, Mapping[str, Any]],
           n_gpu_layers: int) -> list[str]:
    free = [_free_for_split(d, pool) for d in devices]
    return assign_layers(model.n_layer_all, devices, cfg.tensor_split, free, n_gpu_layers)


def _weights_by_device(model: Model, layer_dev: list[str]) -> dict[str, int] | None:
    if model.weights_by_slot is None:
        return None
    out: dict[str, int] = {}
    for slot, n in model.weights_by_slot.items():
        dev = CPU if slot < 0 else layer_dev[min(slot, model.n_layer_all)]
        out[dev] = out.get(dev, 0) + n
    return out


def requested_context(target: Model, cfg: Config, notes: list[str] | None = None) -> int:
    """The n_ctx llama-server hands llama_context (before its padding), with llama-server's defaults.

    tools/server/server.cpp sizes the pool from --kv-unified-per-slot when -c is not given;
    otherwise -c 0 (the default) is resolved by common/fit.cpp (fit on: n_ctx_train per stream)
    or by llama_context (fit off: n_ctx_train in all)."""
    notes = notes if notes is not None else []
    if cfg.ctx_size is None and cfg.kv_unified_per_slot:
        n = cfg.slots * cfg.kv_unified_per_slot
        notes.append(f"ctx_size not given: --kv-unified-per-slot {cfg.kv_unified_per_slot} sizes the pool to "
                     f"{cfg.slots} x {cfg.kv_unified_per_slot} = {n}")
        return n
    if cfg.ctx_size:
        return cfg.ctx_size
    if not target.context_length:
        raise SizingError("ctx_size: not given (or 0) and the target's header has no context_length; give -c")
    train = int(target.context_length)
    said = "not given" if cfg.ctx_size is None else "0"
    if not cfg.fit:
        notes.append(f"ctx_size {said} with -fit off: llama-server uses the target's training context, "
                     f"{train}, for all slots together")
        return train
    streams = 1 if cfg.unified else cfg.slots
    n = train * streams
    lower = ("an explicit -c 0 forbids lowering it" if cfg.ctx_size == 0 else
             "when the projected memory exceeds free memory minus --fit-target (1 GiB) it lowers the "
             "context, not below --fit-ctx (4096) per stream; kv_budget sizes the unlowered context, "
             "so where it does not fit, give -c")
    notes.append(f"ctx_size {said}: llama-server's --fit (on by default) asks for the training context per "
                 f"stream, {train} x {streams} = {n}; {lower}. On a CPU-only server fit compares with "
                 "the host's RAM, which no device limit here describes")
    return n


def _plan(target: Model, draft: Model | None, cfg: Config) -> dict[str, Any]:
    pool = device_pool(cfg)
    notes = list(target.notes) + (list(draft.notes) if draft else [])
    ctx_size = requested_context(target, cfg, notes)
    if cfg.parallel is None:
        notes.append(f"parallel not given (or -1): llama-server runs {SERVER_AUTO_SLOTS} slots with a "
                     "unified KV cache")
    ctx_t = context_params(ctx_size, cfg)
    t_devices = list(cfg.device) if cfg.device is not None else default_devices(pool)
    t_layer_dev = _place(target, t_devices, cfg, pool, cfg.n_gpu_layers)
    problems = _legality(target, cfg.cache_type_k, cfg.cache_type_v, cfg)
    tgt = build_context(target, target.kv_layers, ctx_t, cfg.cache_type_k, cfg.cache_type_v, cfg, t_layer_dev, False)
    tgt["devices"] = t_devices
    tgt["layer_devices"] = _layer_summary(t_layer_dev)
    tgt["weights_by_device"] = _weights_by_device(target, t_layer_dev)

    types = _spec_types(cfg, draft)
    mtp = "draft-mtp" in types
    dft = None
    d_weights = None
    d_devices: list[str] = []
    if draft is not None or mtp:
        base = draft if draft is not None else target
        if draft is not None:
            d_devices = list(cfg.draft_device) if cfg.draft_device is not None else t_devices
            d_layer_dev = _place(draft, d_devices, cfg, pool, cfg.draft_n_gpu_layers)
            d_weights = _weights_by_device(draft, d_layer_dev)
        else:
            d_devices, d_layer_dev = t_devices, t_layer_dev
            if cfg.draft_device is not None:
                notes.append("draft_device has no effect on an MTP context built on the target: its KV "
                             "follows the target's nextn layers")
        ids = base.nextn_layers if mtp else base.kv_layers
        if mtp and not ids:
            problems.append(f"{base.role}: --spec-type draft-mtp builds its context on the "
                            f"{'draft' if draft is not None else 'target'} model, which has no MTP (nextn) "
                            "layers: llama-server stops with 'context type MTP requested but model doesn't "
                            "contain MTP layers'")
        ctx_d = context_params(int(ctx_t["n_ctx"]), cfg)
        problems += _legality(base, cfg.draft_cache_type_k, cfg.draft_cache_type_v, cfg)
        dft = build_context(base, ids, ctx_d, cfg.draft_cache_type_k, cfg.draft_cache_type_v, cfg, d_layer_dev, mtp)
        dft["model"] = "draft" if draft is not None else "target (MTP head)"
        dft["devices"] = d_devices
        dft["layer_devices"] = _layer_summary(d_layer_dev) if draft is not None else None
        dft["weights_by_device"] = d_weights
        dft["spec_type"] = types
    devices = _device_rows(tgt, dft, t_devices, d_devices, pool, cfg)
    weights_known = tgt["weights_by_device"] is not None and (draft is None or d_weights is not None)
    if not weights_known:
        notes.append("weights not counted for "
                     + " and ".join(r for r, w in (("the target", tgt["weights_by_device"]),
                                                   ("the draft", d_weights if draft else {})) if w is None)
                     + ": pass facts read with include_tensors (gguf_info) to include them")
    return {"target": tgt, "draft": dft, "devices": devices, "weights_included": weights_known,
            "problems": problems, "notes": notes, "config": _config_echo(cfg, ctx_size)}


def _layer_summary(layer_dev: list[str]) -> dict[str, list[int]]:
    """device -> layer slots on it (the last slot is the output layer)."""
    out: dict[str, list[int]] = {}
    for il, dev in enumerate(layer_dev):
        out.setdefault(dev, []).append(il)
    return out


def _device_rows(tgt: dict[str, Any], dft: dict[str, Any] | None, t_devices: list[str], d_devices: list[str],
                 pool: Mapping[str, Mapping[str, Any]], cfg: Config) -> list[dict[str, Any]]:
    parts: dict[str, dict[str, int]] = {}

    def add(dev: str, key: str, n: int) -> None:
        parts.setdefault(dev, {})
        parts[dev][key] = parts[dev].get(key, 0) + n

    for dev, n in tgt["kv_by_device"].items():
        add(dev, "target_kv_bytes", n)
    for dev, n in (tgt["weights_by_device"] or {}).items():
        add(dev, "target_weights_bytes", n)
    if dft is not None:
        for dev, n in dft["kv_by_device"].items():
            add(dev, "draft_kv_bytes", n)
        for dev, n in (dft["weights_by_device"] or {}).items():
            add(dev, "draft_weights_bytes", n)
    order: list[str] = []
    for dev in list(t_devices) + list(d_devices) + list(pool) + sorted(d for d in parts if d != CPU):
        if dev not in order and dev != CPU:
            order.append(dev)
    if CPU in parts or CPU in pool:
        order.append(CPU)
    rows = []
    for dev in order:
        p = parts.get(dev, {})
        row: dict[str, Any] = {"device": dev}
        for key in ("target_weights_bytes", "target_kv_bytes", "draft_weights_bytes", "draft_kv_bytes"):
            row[key] = p.get(key, 0)
        used = sum(row[k] for k in ("target_weights_bytes", "target_kv_bytes", "draft_weights_bytes", "draft_kv_bytes"))
        budget, basis = _budget(pool.get(dev), cfg.memory)
        row.update(needed_bytes=used, memory_bytes=budget, memory_basis=basis)
        if budget is None:
            row.update(headroom_bytes=None, available_bytes=None, fits=None, over_bytes=None, spare_bytes=None)
        else:
            avail = budget - cfg.headroom_bytes
            row.update(headroom_bytes=cfg.headroom_bytes, available_bytes=avail, fits=used <= avail,
                       over_bytes=max(0, used - avail), spare_bytes=max(0, avail - used))
        if dev in pool and pool[dev].get("name") and pool[dev].get("name") != dev:
            row["name"] = pool[dev]["name"]
        rows.append(row)
    return rows


def _config_echo(cfg: Config, ctx_size: int) -> dict[str, Any]:
    return {"ctx_size": ctx_size, "parallel": cfg.slots, "kv_unified": cfg.unified, "fit": cfg.fit,
            "cache_type_k": cfg.cache_type_k, "cache_type_v": cfg.cache_type_v,
            "draft_cache_type_k": cfg.draft_cache_type_k, "draft_cache_type_v": cfg.draft_cache_type_v,
            "flash_attn": cfg.flash_attn, "device": list(cfg.device) if cfg.device is not None else None,
            "draft_device": list(cfg.draft_device) if cfg.draft_device is not None else None,
            "tensor_split": list(cfg.tensor_split) if cfg.tensor_split else None,
            "n_gpu_layers": cfg.n_gpu_layers, "draft_n_gpu_layers": cfg.draft_n_gpu_layers,
            "kv_offload": cfg.kv_offload, "swa_full": cfg.swa_full, "batch_size": cfg.batch_size,
            "ubatch_size": cfg.ubatch_size, "headroom_bytes": cfg.headroom_bytes, "memory": cfg.memory}


def kv_plan(target_facts: Mapping[str, Any], draft_facts: Mapping[str, Any] | None = None,
            config: Mapping[str, Any] | Config | None = None) -> dict[str, Any]:
    """KV (and, with tensors, weight) bytes of the target and draft contexts and where they land.

    ``config`` keys are :class:`Config`'s fields. Returns ``target`` and ``draft`` (None without
    one): per-position bytes, total, SWA/full caches, the log lines llama.cpp prints, bytes per
    device; ``devices``: per-device rows against memory; ``problems``: what llama.cpp would refuse."""
    cfg = normalize_config(config)
    target = prepare_model(target_facts, "target")
    draft = prepare_model(draft_facts, "draft") if draft_facts is not None else None
    return _plan(target, draft, cfg)


def fits(plan: Mapping[str, Any]) -> bool | None:
    """True when every device with known memory fits, None when no device memory is known."""
    checked = [row["fits"] for row in plan["devices"] if row["fits"] is not None]
    return all(checked) if checked else None


# ---------------------------------------------------------------------------------------------
# fixes, in the field notes' order


def _overflowing(plan: Mapping[str, Any]) -> list[str]:
    return [row["device"] for row in plan["devices"] if row["fits"] is False]


def _device_numbers(plan: Mapping[str, Any]) -> list[dict[str, Any]]:
    keys = ("device", "needed_bytes", "available_bytes", "fits", "over_bytes", "spare_bytes",
            "target_weights_bytes", "target_kv_bytes", "draft_weights_bytes", "draft_kv_bytes")
    return [{k: row.get(k) for k in keys} for row in plan["devices"]]


def _fullest(plan: Mapping[str, Any]) -> float:
    worst = 0.0
    for row in plan["devices"]:
        if row["available_bytes"] is None:
            continue
        avail = row["available_bytes"]
        worst = max(worst, row["needed_bytes"] / avail if avail > 0 else math.inf)
    return worst


def _fix(kind: str, flags: list[str], change: dict[str, Any], plan: Mapping[str, Any], summary: str,
         **extra: Any) -> dict[str, Any]:
    ok = fits(plan) is not False and not plan["problems"]
    return {"fix": kind, "flags": flags, "change": change, "resolves": ok, "summary": summary,
            "devices": _device_numbers(plan), **extra}


def _compositions(total: int, parts: int) -> Iterable[tuple[int, ...]]:
    if parts == 1:
        yield (total,)
        return
    for first in range(total + 1):
        for rest in _compositions(total - first, parts - 1):
            yield (first, *rest)


def _n_combinations(total: int, parts: int) -> int:
    return math.comb(total + parts - 1, parts - 1)


def _greedy_split(target: Model, draft: Model | None, cfg: Config, devices: list[str]) -> tuple[int, ...] | None:
    """For many devices: the contiguous layer split that minimises the fullest device's share,
    by bisection on that share, with each device's other bytes held at their current value."""
    base = _plan(target, draft, cfg)
    act = min(target.n_layer_all + 1 if cfg.n_gpu_layers < 0 else cfg.n_gpu_layers, target.n_layer_all + 1)
    start = target.n_layer_all + 1 - act
    ctx_kv = {r["layer"]: r["bytes"] for c in base["target"]["caches"] for r in c["rows"]}
    weights = target.weights_by_slot or {}
    cost = [(ctx_kv.get(il, 0) if cfg.kv_offload else 0) + weights.get(il, 0) for il in range(start, start + act)]
    rows = {r["device"]: r for r in base["devices"]}
    fixed, avail = [], []
    for dev in devices:
        row = rows.get(dev)
        if row is None or row["available_bytes"] is None:
            return None
        fixed.append(row["needed_bytes"] - row["target_kv_bytes"] - row["target_weights_bytes"])
        avail.append(row["available_bytes"])

    def attempt(ratio: float) -> tuple[int, ...] | None:
        counts, i = [], 0
        for d in range(len(devices)):
            room = ratio * avail[d] - fixed[d]
            n, used = 0, 0
            while i < act and (d == len(devices) - 1 or used + cost[i] <= room):
                used += cost[i]
                n += 1
                i += 1
            if d == len(devices) - 1 and used > room:
                return None
            counts.append(n)
        return tuple(counts)

    lo, hi = 0.0, 1.0
    while attempt(hi) is None:   # nothing fits: still find the split that overflows least
        lo, hi = hi, hi * 2
        if hi > 1024:
            return None
    for _dummy in range(40):
        mid = (lo + hi) / 2
        lo, hi = (lo, mid) if attempt(mid) is not None else (mid, hi)
    return attempt(hi)


def _best_split(target: Model, draft: Model | None, cfg: Config,
                devices: list[str]) -> tuple[tuple[int, ...], dict[str, Any]] | None:
    act = min(target.n_layer_all + 1 if cfg.n_gpu_layers < 0 else cfg.n_gpu_layers, target.n_layer_all + 1)
    best = None
    if _n_combinations(act, len(devices)) <= _TS_SEARCH_LIMIT:
        candidates: Iterable[tuple[int, ...]] = _compositions(act, len(devices))
    else:
        greedy = _greedy_split(target, draft, cfg, devices)
        candidates = [greedy] if greedy else []
    now = _plan(target, draft, cfg)["target"]["layer_devices"]
    current = [len(now.get(d, [])) for d in devices]
    for counts in candidates:
        if not any(counts):
            continue
        plan = _plan(target, draft, replace(cfg, device=tuple(devices), tensor_split=tuple(float(c) for c in counts)))
        if plan["problems"]:
            continue
        # rank: fits first, then the least full fullest device, then the smallest move
        move = sum(abs(a - b) for a, b in zip(counts, current))
        key = (fits(plan) is False, round(_fullest(plan), 9), move)
        if best is None or key < best[0]:
            best = (key, counts, plan)
    return (best[1], best[2]) if best else None


def propose_fixes(target_facts: Mapping[str, Any] | Model, draft_facts: Mapping[str, Any] | Model | None,
                  config: Mapping[str, Any] | Config | None, plan: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
    """The fixes for an overflowing config, in the field notes' order: a skewed -ts, the drafter on
    another device, a quantized draft cache, and only then a context cut. Each is applied alone to
    the given config and carries the resulting per-device numbers and whether it resolves it."""
    cfg = normalize_config(config)
    target = target_facts if isinstance(target_facts, Model) else prepare_model(target_facts, "target")
    draft = (draft_facts if isinstance(draft_facts, Model) or draft_facts is None
             else prepare_model(draft_facts, "draft"))
    plan = plan or _plan(target, draft, cfg)
    if fits(plan) is not False:
        return []
    over = _overflowing(plan)
    fixes: list[dict[str, Any]] = []
    pool = device_pool(cfg)
    t_devices = plan["target"]["devices"]

    # 1. a skewed -ts: whole layers off the overflowing device
    if len(t_devices) >= 2:
        found = _best_split(target, draft, cfg, t_devices)
        if found:
            counts, new = found[0], found[1]
            ts = ",".join(str(c) for c in counts)
            moved = ", ".join(f"{d}: {len(new['target']['layer_devices'].get(d, []))} layer slots" for d in t_devices)
            fixes.append(_fix("tensor_split", ["-ts", ts], {"tensor_split": list(counts)}, new,
                              f"-ts {ts} puts whole layers where there is room ({moved}; the last slot is the "
                              "output layer)" + ("" if draft is None or cfg.draft_device is not None else
                                                 "; the drafter shares the device list and follows the same split")))

    # 2. the drafter on another device
    dft = plan["draft"]
    if dft is not None and draft is not None:
        current = set(dft["devices"])
        options = []
        for dev in [d for d in pool if d not in current and d != CPU]:
            new = _plan(target, draft, replace(cfg, draft_device=(dev,)))
            options.append((fits(new) is False, round(_fullest(new), 9), dev, new))
        if options:
            options.sort(key=lambda o: o[:3])
            _dummy, _dummy, dev, new = options[0]
            fixes.append(_fix("draft_device", ["--spec-draft-device", dev], {"draft_device": [dev]}, new,
                              f"--spec-draft-device {dev} moves the drafter's weights and its "
                              f"{fmt_bytes(dft['total_bytes'])} of KV off {', '.join(sorted(current)) or 'the CPU'}"))

    # 3. a quantized draft cache
    if dft is not None:
        for qt in ("q8_0", "q4_0"):
            k_new = qt if _smaller(qt, cfg.draft_cache_type_k) else cfg.draft_cache_type_k
            v_new = qt if cfg.flash_attn != "off" and _smaller(qt, cfg.draft_cache_type_v) else cfg.draft_cache_type_v
            if (k_new, v_new) == (cfg.draft_cache_type_k, cfg.draft_cache_type_v):
                continue
            new = _plan(target, draft, replace(cfg, draft_cache_type_k=k_new, draft_cache_type_v=v_new))
            flags = ["-ctkd", k_new] + (["-ctvd", v_new] if v_new != cfg.draft_cache_type_v else [])
            note = "" if cfg.flash_attn != "off" else " (V stays: a quantized V cache needs flash attention)"
            fixes.append(_fix("draft_cache_type", flags, {"draft_cache_type_k": k_new, "draft_cache_type_v": v_new},
                              new, f"{' '.join(flags)} shrinks the draft KV from {fmt_bytes(dft['total_bytes'])} to "
                              f"{fmt_bytes(new['draft']['total_bytes'])}{note}"))
            if fixes[-1]["resolves"]:
                break

    # 4. only then a context cut: the largest -c that fits
    cut = _largest_ctx(target, draft, cfg, plan)
    if cut is not None:
        ctx, new = cut
        fixes.append(_fix("ctx_size", ["-c", str(ctx)], {"ctx_size": ctx}, new,
                          f"-c {ctx} (from {plan['config']['ctx_size']}): {new['target']['context']['n_ctx_seq']} "
                          f"positions per slot; the drafter's context follows it"))
    else:
        fixes.append({"fix": "ctx_size", "flags": [], "change": {}, "resolves": False,
                      "summary": f"no context size fits: even -c {CELL_PAD * cfg.slots} overflows "
                                 f"{', '.join(over)} (the weights alone are too large there)",
                      "devices": []})
    for i, fix in enumerate(fixes, 1):
        fix["order"] = i
    return fixes


def _smaller(new: str, old: str) -> bool:
    blck_n, size_n = CACHE_TYPES[new]
    blck_o, size_o = CACHE_TYPES[old]
    return size_n / blck_n < size_o / blck_o


def _largest_ctx(target: Model, draft: Model | None, cfg: Config, plan: Mapping[str, Any]) -> tuple[int, dict[str, Any]] | None:
    """The largest -c (a whole number of 256-cell pages per slot) below the given one that fits."""
    step = CELL_PAD * (1 if cfg.unified else cfg.slots)
    current = int(plan["config"]["ctx_size"])
    lo, hi = 1, (current - 1) // step   # candidate = n * step
    best = None
    while lo <= hi:
        mid = (lo + hi) // 2
        new = _plan(target, draft, replace(cfg, ctx_size=mid * step))
        if fits(new) is not False:
            best = (mid * step, new)
            lo = mid + 1
        else:
            hi = mid - 1
    return best


def kv_budget(target_facts: Mapping[str, Any], draft_facts: Mapping[str, Any] | None = None,
              config: Mapping[str, Any] | Config | None = None) -> dict[str, Any]:
    """The whole answer: the plan, whether every device fits, and the fixes when one does not."""
    cfg = normalize_config(config)
    target = prepare_model(target_facts, "target")
    draft = prepare_model(draft_facts, "draft") if draft_facts is not None else None
    plan = _plan(target, draft, cfg)
    verdict = fits(plan)
    fixes = propose_fixes(target, draft, cfg, plan) if verdict is False else []
    result = dict(plan)
    result.update(fits=verdict, loads=not plan["problems"], fixes=fixes)
    result["summary"] = summarize(result)
    return result


def summarize(result: Mapping[str, Any]) -> list[str]:
    lines = []
    for role in ("target", "draft"):
        ctx = result.get(role)
        if not ctx:
            continue
        c = ctx["context"]
        lines.append(f"{role}: {fmt_bytes(ctx['per_position_bytes'])} per position over {len(ctx['kv_layers'])} KV "
                     f"layers ({ctx['cache_type_k']}/{ctx['cache_type_v']}), {fmt_bytes(ctx['total_bytes'])} at "
                     f"n_ctx {c['n_ctx']} ({c['n_seq_max']} slots, {c['n_stream']} streams)"
                     + (f"; sliding window {ctx['sliding_window']} on {len(ctx['swa_layers'])} layers"
                        if ctx["swa_layers"] else ""))
    for row in result["devices"]:
        if row["fits"] is None:
            lines.append(f"{row['device']}: needs {fmt_bytes(row['needed_bytes'])} (no memory given)")
        else:
            lines.append(f"{row['device']}: needs {fmt_bytes(row['needed_bytes'])} of {fmt_bytes(row['available_bytes'])} "
                         f"available ({row['memory_basis']} less {fmt_bytes(row['headroom_bytes'])} headroom): "
                         + ("fits" if row["fits"] else f"OVER by {fmt_bytes(row['over_bytes'])}"))
    for problem in result["problems"]:
        lines.append(f"will not load: {problem}")
    for fix in result["fixes"]:
        lines.append(f"fix {fix['order']} ({fix['fix']}): {fix['summary']} -> "
                     + ("resolves it" if fix["resolves"] else "not enough alone"))
    return lines
