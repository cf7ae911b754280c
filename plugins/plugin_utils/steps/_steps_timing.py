# Copyright: (c) 2026, llmfleet.specdec contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# Controller-side steps for the A/B role: the run's time planned from the box (the timers sized from it), and
# the requests measured beside other clients' traffic.
# Not filters of their own: roles and playbooks call them through filter llmfleet.specdec.internal.
from __future__ import annotations

import math
from typing import Any, Mapping

from ansible.errors import AnsibleFilterError

from ansible_collections.llmfleet.specdec.plugins.module_utils.bench._endpoint import plan_requests
from ansible_collections.llmfleet.specdec.plugins.module_utils.bench._traffic import load_traffic
from ansible_collections.llmfleet.specdec.plugins.module_utils.common._errors import SpecdecError
from ansible_collections.llmfleet.specdec.plugins.module_utils.watch._drift import model_paths
from ansible_collections.llmfleet.specdec.plugins.plugin_utils.verdicts._timing import over_budget_message, plan_timing

_SETTINGS = {"baseline", "schedule", "rendered", "chains", "start", "probe", "sizes", "load_s", "decode_rate",
             "estimates", "health_timeout", "rollback_after", "budget_minutes", "bench", "max_rounds"}
_BENCH = {"api", "shapes", "prompts_per_shape", "repeats", "warmup", "sizes", "seed", "traffic", "concurrency",
          "load_bursts", "verify_k", "busy_check", "busy_retries", "busy_wait"}


def _int(name: str, value: Any, minimum: int) -> int:
    try:
        number = int(value)
    except (TypeError, ValueError):
        raise AnsibleFilterError(f"{name}: expected a whole number, got {value!r}") from None
    if isinstance(value, bool) or number < minimum:
        raise AnsibleFilterError(f"{name}: expected a whole number >= {minimum}, got {value!r}")
    return number


def _models(names: list[str], rendered: Any) -> dict[str, list[str]]:
    """config -> the model files its server loads (the rendering's env as the process gets it)."""
    out: dict[str, list[str]] = {}
    for name in names:
        one = rendered.get(name) if isinstance(rendered, Mapping) else None
        one = one if isinstance(one, Mapping) else {}
        env = one.get("effective_env") or one.get("env") or {}
        out[name] = model_paths(env) if isinstance(env, Mapping) else []
    return out


def ab_model_files(configs: Any, rendered: Any) -> list[str]:
    """Every model file the run's configs load, once each (their sizes scale each config's load time)."""
    names = [c["name"] if isinstance(c, Mapping) else str(c) for c in configs or []]
    files: list[str] = []
    for paths in _models(names, rendered).values():
        files += [p for p in paths if p not in files]
    return files


def ab_timing_record(plan: Any, entries: Any) -> dict[str, Any]:
    """The plan's time beside what happened, for the report: per config the planned load and measurement and the
    starts the run saw (each slot's stop, load and health, ``entries[].start_s``)."""
    if not isinstance(plan, Mapping):
        return {}
    seen: dict[str, list[float]] = {}
    for entry in entries or []:
        if isinstance(entry, Mapping) and isinstance(entry.get("start_s"), (int, float)):
            seen.setdefault(str(entry.get("config")), []).append(round(float(entry["start_s"]), 1))
    keep = ("restarts", "total_s", "candidate_s", "restore_s", "box", "health_timeout", "health_timeout_source",
            "rollback_after", "budget_s", "rounds_that_fit", "notes")
    record = {k: plan.get(k) for k in keep}
    record["configs"] = {name: {"load_s": v.get("load_s"), "load_source": v.get("load_source"),
                                "measure_s": v.get("measure_s"), "slot_s": v.get("slot_s"),
                                "starts_seen_s": seen.get(name, [])}
                         for name, v in (plan.get("configs") or {}).items()}
    return record


def ab_busy_counts(entries: Any) -> dict[str, Any]:
    """Per config and in total: the measured requests that ran beside other clients' requests (spec_bench's
    ``busy``): checked, contaminated, sent again, excluded; and the configs whose server could not be checked."""
    per: dict[str, dict[str, int]] = {}
    unchecked: list[str] = []
    for entry in entries or []:
        bench = entry.get("bench") if isinstance(entry, Mapping) else None
        busy = bench.get("busy") if isinstance(bench, Mapping) else None
        if not isinstance(busy, Mapping):
            continue
        name = str(entry.get("config"))
        row = per.setdefault(name, {"checked": 0, "contaminated": 0, "repeated": 0, "excluded": 0})
        for key in row:
            value = busy.get(key)
            row[key] += value if isinstance(value, int) and not isinstance(value, bool) else 0
        if busy.get("mode") is None and not busy.get("token_counter") and name not in unchecked:
            unchecked.append(name)
    total = {key: sum(row[key] for row in per.values()) for key in ("checked", "contaminated", "repeated", "excluded")}
    return {"configs": per, "total": total, "unchecked": unchecked}


def ab_timing(configs: Any, settings: Mapping[str, Any]) -> dict[str, Any]:
    """The run's plan in seconds (``_timing.plan_timing``) from the role's settings: per config its load, its
    measurement, its slots; in total the restarts, the minutes and how long candidates serve; the health timeout,
    the least dead-man and each slot's estimate for ``ab_dead_man``; whether the plan is over the budget."""
    if not isinstance(settings, Mapping):
        raise AnsibleFilterError("ab_timing: expected a mapping of settings")
    unknown = sorted(set(settings) - _SETTINGS)
    if unknown:
        raise AnsibleFilterError(f"ab_timing: unknown settings {', '.join(unknown)}")
    bench = dict(settings.get("bench") or {})
    unknown = sorted(set(bench) - _BENCH)
    if unknown:
        raise AnsibleFilterError(f"ab_timing: unknown bench settings {', '.join(unknown)}")
    names = [c["name"] if isinstance(c, Mapping) else str(c) for c in configs or []]
    rendered = settings.get("rendered") or {}
    chains = settings.get("chains") or {}
    api = str(bench.get("api") or "llamacpp")
    try:
        custom = load_traffic(list(bench.get("traffic") or []), api) or None
        warm, schedule, measured = plan_requests(
            _int("spec_ab_seed", bench.get("seed", 0), 0), bench.get("sizes") or {}, bench.get("shapes"),
            _int("spec_ab_prompts_per_shape", bench.get("prompts_per_shape", 1), 1),
            _int("spec_ab_repeats", bench.get("repeats", 1), 1), _int("spec_ab_warmup", bench.get("warmup", 0), 0),
            False, custom)
        models = _models(names, rendered)
        plan = plan_timing(
            names, str(settings.get("baseline") or "baseline"), list(settings.get("schedule") or []),
            {"warm": warm, "schedule": schedule, "measured": measured},
            start=settings.get("start") or {}, probe=settings.get("probe") or {}, load_s=settings.get("load_s"),
            decode_rate=settings.get("decode_rate"), models=models, sizes=settings.get("sizes") or {},
            estimates=settings.get("estimates") or {}, health_timeout=settings.get("health_timeout", "auto"),
            rollback_after=settings.get("rollback_after", "auto"), budget_minutes=settings.get("budget_minutes") or 0,
            speculative=[n for n in names if chains.get(n)], api=api,
            concurrency=_int("spec_ab_concurrency", bench.get("concurrency", 1), 0) or 1,
            bursts=_int("spec_ab_load_bursts", bench.get("load_bursts", 0), 0),
            verify_batches=len(list(bench.get("verify_k") or [])), max_rounds=settings.get("max_rounds"))
    except SpecdecError as exc:
        raise AnsibleFilterError(f"ab_timing: {exc}") from None
    plan["models"] = models
    # The bench's busy re-sends (spec_bench's busy check): a request that ran beside another client's is sent again
    # after waiting up to busy_wait s for the server to go idle, busy_retries times at most. The plan's slots leave
    # them out (they are rare); the lock's expiry must not: it covers a slot where every request is sent again.
    retries = _int("spec_ab_busy_retries", bench.get("busy_retries", 0), 0) if bench.get("busy_check") else 0
    wait = _int("spec_ab_busy_wait", bench.get("busy_wait", 0), 0)
    plan["busy_resend_s"] = {}
    plan["lock_slot_estimates"] = {}
    for name, row in (plan.get("configs") or {}).items():
        requests = int(row.get("requests") or 0)
        each = float(row.get("measure_s") or 0.0) / requests if requests else 0.0
        plan["busy_resend_s"][name] = math.ceil(retries * (wait + each) * requests)
        plan["lock_slot_estimates"][name] = math.ceil(float(row.get("slot_s") or 0.0)) + plan["busy_resend_s"][name]
    plan["refusal"] = over_budget_message(plan, settings.get("max_rounds")) if plan["over_budget"] else None
    return plan
