# Copyright: (c) 2026, llmfleet.specdec contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# Private to the collection: what a config's knobs do to memory against the baseline (KV cache and weights).
"""A config's memory beside the baseline's, from two :func:`_sizing.kv_budget` results.

A KV cache type change halves (q8_0: 34 bytes per 32 values against f16's 64, so 0.53x) or quarters
(q4_0: 18 against 64, 0.28x) the cache; a quant rung changes the weights (Q4_0 of an F32 model is
about a seventh of its matrices); a drafter adds its own weights and KV. The preflight table prints
this beside the speed verdict, so it answers "faster, smaller, and how different".
"""
from __future__ import annotations

from typing import Any, Mapping

from ansible_collections.llmfleet.specdec.plugins.module_utils.memory._kv import fmt_bytes


def kv_bytes(budget: Mapping[str, Any]) -> int:
    """Target and draft KV bytes together."""
    return sum(int((budget.get(role) or {}).get("total_bytes") or 0) for role in ("target", "draft"))


def weight_bytes(budget: Mapping[str, Any]) -> int | None:
    """Target and draft weights together; None when the facts carried no tensor list."""
    total = 0
    for role in ("target", "draft"):
        ctx = budget.get(role)
        if not ctx:
            continue
        by_device = ctx.get("weights_by_device")
        if by_device is None:
            return None
        total += sum(int(v) for v in by_device.values())
    return total


def _ratio(new: int | None, old: int | None) -> float | None:
    return None if new is None or not old else new / old


def _part(what: str, new: int | None, old: int | None) -> str:
    ratio = _ratio(new, old)
    if ratio is None:
        return f"{what} ?"
    if new == old:
        return f"{what} same"
    return f"{what} {ratio:.2f}x ({fmt_bytes(old)} -> {fmt_bytes(new)})"


def memory_change(budget: Mapping[str, Any], baseline: Mapping[str, Any]) -> dict[str, Any]:
    """KV and weight bytes of a config against the baseline's, with ratios and one summary line."""
    kv, base_kv = kv_bytes(budget), kv_bytes(baseline)
    w, base_w = weight_bytes(budget), weight_bytes(baseline)
    target = budget.get("target") or {}
    return {
        "kv_bytes": kv, "baseline_kv_bytes": base_kv, "kv_ratio": _ratio(kv, base_kv),
        "weights_bytes": w, "baseline_weights_bytes": base_w, "weights_ratio": _ratio(w, base_w),
        "cache_types": f"{target.get('cache_type_k', '-')}/{target.get('cache_type_v', '-')}",
        "summary": f"{_part('KV', kv, base_kv)}; {_part('weights', w, base_w)}",
    }
