# Copyright: (c) 2026, llmfleet.specdec contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# Private to the collection: which device each layer and its KV land on, and the per-device plan against memory.
"""Devices and placement: which device each layer, its weights and its KV land on, and the plan.

This room holds llama.cpp's device names and default device list, the layer-to-device split
(``assign_layers``), each device's memory budget, what llama.cpp would refuse (``_legality``), the
context size llama-server asks for (``requested_context``) and the per-device plan of the target
and draft contexts (``kv_plan``, ``fits``). The bytes themselves come from ``_kv``; the fixes for a
plan that does not fit are ``_sizing``'s.

Every rule here is the one in the llama.cpp tree the project pins (llama-cpp-python 0.3.36,
``vendor/llama.cpp``); the file and function are cited where the rule is applied.

- The context size llama-server asks for (``common/arg.cpp``, ``common/fit.cpp``): ``-c`` defaults
  to 0, "the model's training context". With ``--fit`` on (the default) and ``-c`` 0,
  ``common_fit_params`` first sets ``n_ctx = n_ctx_train * n_streams`` (``n_streams`` = 1 with a
  unified cache, else the slot count), so every slot gets the full training context; it lowers
  that only when the projected memory use exceeds the free memory minus ``--fit-target`` (default
  1 GiB per device; a CPU-only server compares with the host's total RAM), down to
  ``--fit-ctx`` (4096) per stream, and never for an explicit ``-c 0``. With ``-fit off`` and
  ``-c`` 0 the context is ``n_ctx_train`` in total (``llama_context``). A given ``-c N`` is kept.
  ``--kv-unified-per-slot N`` without ``-c`` asks for ``slots * N``.
- The draft context (``common/speculative.cpp``): ``cparams.n_ctx = llama_n_ctx(ctx_tgt)`` (no flag
  caps it), the same ``-np``/``-kvu``/``-fa``, cache types ``-ctkd``/``-ctvd`` (default f16, not the
  target's ``-ctk``), devices ``--spec-draft-device`` (default: the target's device list, and then
  the target's ``-ts`` too), ``-ngld``.
- Layers to devices (``llama_model_base::load_tensors``): layer ``il`` (and the output layer,
  ``il = n_layer``) goes to device ``upper_bound(splits, float(il - i_gpu_start) / act_gpu_layers)``
  where ``splits`` are the cumulative, normalised ``-ts`` values (default: each device's free memory),
  computed in single precision as llama.cpp does. The input layer (token embeddings) stays on the
  CPU. A layer's KV lands on its layer's device (``model.dev_layer(il)``), on the CPU with ``-nkvo``.
"""
from __future__ import annotations

import bisect
from typing import Any, Iterable, Mapping

from ansible_collections.llmfleet.specdec.plugins.module_utils.memory._kv import (
    CACHE_TYPES,
    CPU,
    QUANTIZED,
    SERVER_AUTO_SLOTS,
    Config,
    Model,
    SizingError,
    _f32,
    build_context,
    context_params,
    normalize_config,
    prepare_model,
)

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
