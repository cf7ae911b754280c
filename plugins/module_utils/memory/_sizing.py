# Copyright: (c) 2026, llmfleet.specdec contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# Private to the collection: the fixes for a config that does not fit, and the whole kv_budget answer.
"""Will a speculative llama-server config fit? The fixes when it does not, and the whole answer.

This room holds the fix search, in the field notes' order (a skewed -ts found by an exhaustive or
greedy split, the drafter on another device, a quantized draft cache, the largest context that
fits), ``kv_budget`` (the plan, the verdict and the fixes, which module ``kv_budget`` returns) and
``summarize``. The KV arithmetic is ``_kv``'s and the per-device plan is ``_placement``'s.
"""
from __future__ import annotations

import math
from dataclasses import replace
from typing import Any, Iterable, Mapping

from ansible_collections.llmfleet.specdec.plugins.module_utils.memory._kv import (
    CACHE_TYPES,
    CELL_PAD,
    CPU,
    Config,
    Model,
    fmt_bytes,
    normalize_config,
    prepare_model,
)
from ansible_collections.llmfleet.specdec.plugins.module_utils.memory._placement import _plan, device_pool, fits

_TS_SEARCH_LIMIT = 3000


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
