# Copyright: (c) 2026, llmfleet.specdec contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# Private to the collection: where an activation calls the speculation sentinel (before the switch, after it, the plan).
"""The activation's three moments with the sentinel (``bench._sentinel.Sentinel``, injected by the module: build
never measures speculation itself):

- :func:`judged_canary` - before the switch: a unit's canary serves its promoted config and is judged while it serves;
- :func:`speed_after_switch` - after ``current`` moved and the units answered ``/health``, still under the dead-man:
  where the canary ran on other hardware (``--n-gpu-layers 0``) its rate said nothing, so the promoted config's rate
  on the new build is measured on the unit itself against the evidence's interval; below it the activation's error
  rolls the switch back;
- :func:`plan_lines` - check mode: which of the two each unit gets, and why.

The activation's error class is passed in (``error``): this file does not import ``_activate``.
"""
from __future__ import annotations

import json
from typing import Any, Callable, Dict, List, Mapping, Sequence

from ansible_collections.llmfleet.specdec.plugins.module_utils.common._errors import SpecdecError


def _serving(item: Any, name: str) -> Dict[str, Any]:
    return {"unit": item.unit, "argv": item.process.argv, "env": item.process.env, "port": item.ports[0], "build": name}


def judged_canary(activation: Any, params: Mapping[str, Any], name: str, binary: str, item: Any,
                  result: Dict[str, Any], error: Callable[..., Exception]) -> Dict[str, Any]:
    """One unit's canary (``activation.canary``); with the sentinel it serves the promoted config and is judged before
    it stops. The plan is kept in ``activation.plans`` for the check after the switch."""
    sentinel = activation.sentinel
    try:
        plan = sentinel.plan(_serving(item, name)) if sentinel is not None else None
        if plan is None and sentinel is not None:
            result["notes"].append(f"{item.unit}: speculation not judged ({sentinel.skipped(item.unit)})")
        if plan is not None:
            activation.plans[item.unit] = plan
        judge = (lambda port: sentinel.judge(plan, port)) if plan else None
        answer = activation.canary(item.unit, binary, item.process.argv, item.process.env,
                                   (item.process.uid, item.process.gid, item.process.groups), item.process.cwd,
                                   max(int(params["canary_ctx_size"]), int((plan or {}).get("ctx_size") or 0)),
                                   [*(params.get("canary_args") or []), *((plan or {}).get("args") or [])],
                                   int(params["canary_timeout"]), judge, int((plan or {}).get("seconds") or 0))
    except SpecdecError as exc:
        if isinstance(exc, error):  # type: ignore[arg-type]
            raise
        raise error(f"build {name} refused at the canary: {exc}. Nothing was changed: 'current' still points at "
                    f"{result.get('previous')}", sentinel=getattr(exc, "verdict", None)) from None
    if answer.get("sentinel"):
        result.setdefault("sentinel", []).append(answer["sentinel"])
    return answer


def after_switch_seconds(activation: Any, params: Mapping[str, Any]) -> int:
    """What the dead-man must wait longer for: the check after the switch, where one is due."""
    due = params.get("speed_after_switch", True) and any(p.get("after_switch") for p in activation.plans.values())
    return int(params.get("sentinel_timeout") or 0) if due else 0


def speed_after_switch(activation: Any, params: Mapping[str, Any], name: str, served: Sequence[Any],
                       result: Dict[str, Any], error: Callable[..., Exception], facts_file: str | None,
                       facts: Mapping[str, Any] | None, write: Callable[[str, str, int], None]) -> None:
    """The promoted config's rate on the new build, measured on each unit whose canary could not show it; a
    regression raises ``error`` (the activation then points 'current' back). The verdicts join the build record."""
    if not params.get("speed_after_switch", True) or activation.sentinel is None:
        return
    for item in served:
        plan = activation.plans.get(item.unit)
        if not plan or not plan.get("after_switch"):
            continue
        try:
            verdict = activation.sentinel.after_switch(plan)
        except SpecdecError as exc:
            raise error(f"the promoted config's speed on build {name}, measured on {item.unit} after the switch "
                        f"(its canary ran on other hardware): {exc}", unit=item.unit,
                        sentinel=getattr(exc, "verdict", None)) from None
        result.setdefault("sentinel", []).append(verdict)
        if facts_file and facts is not None:
            write(facts_file, json.dumps(dict(facts, sentinel=result["sentinel"]), indent=4, sort_keys=True) + "\n",
                  0o644)


def plan_lines(activation: Any, name: str, served: Sequence[Any], speed_after: bool) -> List[str]:
    """Check mode: per unit, what the sentinel would do with this build, and why."""
    sentinel = activation.sentinel
    lines: List[str] = []
    for item in served:
        try:
            plan = sentinel.plan(_serving(item, name))
        except SpecdecError as exc:
            lines.append(f"{item.unit}: the build would be refused at the canary: {exc}")
            continue
        if plan is None:
            lines.append(f"{item.unit}: speculation not judged ({sentinel.skipped(item.unit)}); /health alone")
        elif plan.get("after_switch") and speed_after:
            lines.append(f"{item.unit}: config {plan['config']!r} judged at the canary on acceptance (its canary runs on "
                         "other hardware, --n-gpu-layers 0, so its rate says nothing), then its speed measured on the "
                         "unit after the switch under the dead-man, against the evidence's interval")
        elif plan.get("after_switch"):
            lines.append(f"{item.unit}: config {plan['config']!r} judged at the canary on acceptance; its speed is not "
                         "judged (a canary on other hardware, and this is not the rollout's first host)")
        else:
            lines.append(f"{item.unit}: config {plan['config']!r} judged at the canary on acceptance and speed, beside "
                         "production on the same hardware")
    return lines
