# Copyright: (c) 2026, llmfleet.specdec contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# Controller-side steps for the operator's own traffic in the A/B role: the bench's payload and the mix weights.
# Not filters of their own: roles and playbooks call them through filter llmfleet.specdec.internal.
from __future__ import annotations

import math
from typing import Any

from ansible.errors import AnsibleFilterError

KEYS = {"name", "file", "n_predict", "weight"}


def _items(traffic: Any) -> list[dict[str, Any]]:
    if not traffic:
        return []
    if not isinstance(traffic, list):
        raise AnsibleFilterError(f"spec_ab_traffic: expected a list of {{name, file, n_predict, weight}}, "
                                 f"got {type(traffic).__name__}")
    out = []
    for i, item in enumerate(traffic):
        if not isinstance(item, dict) or not item.get("name") or not item.get("file") or "n_predict" not in item:
            raise AnsibleFilterError(f"spec_ab_traffic[{i}]: give name, file (a JSONL file on the controller) and "
                                     "n_predict; weight is optional")
        unknown = set(item) - KEYS
        if unknown:
            raise AnsibleFilterError(f"spec_ab_traffic[{i}] ({item['name']}): unknown key(s) "
                                     f"{', '.join(sorted(unknown))}; expected {', '.join(sorted(KEYS))}")
        weight = item.get("weight", 0)
        if isinstance(weight, bool) or not isinstance(weight, (int, float)) or not math.isfinite(weight) or weight < 0:
            raise AnsibleFilterError(f"spec_ab_traffic[{i}] ({item['name']}).weight: expected a share of generated "
                                     f"tokens >= 0, got {weight!r}")
        out.append(item)
    return out


def ab_traffic(traffic: Any, contents: Any) -> list[dict[str, Any]]:
    """spec_bench's ``traffic`` option: each item of spec_ab_traffic with its file's text (read on the controller
    with the file lookup, in the same order). The text travels as data and is never logged (no_log)."""
    items = _items(traffic)
    if not isinstance(contents, list) or len(contents) != len(items):
        raise AnsibleFilterError("ab_traffic: give one file text per spec_ab_traffic item")
    return [{"name": it["name"], "source": str(it["file"]), "content": text, "n_predict": it["n_predict"]}
            for it, text in zip(items, contents)]


def ab_traffic_mix(traffic: Any) -> dict[str, float]:
    """The custom shapes' weights for the A/B mix (shape -> weight), leaving out weights of 0."""
    return {it["name"]: float(it["weight"]) for it in _items(traffic) if it.get("weight")}
