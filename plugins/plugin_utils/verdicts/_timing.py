# Copyright: (c) 2026, llmfleet.specdec contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# Private to the collection: an A/B run's time, planned from the box before anything changes (controller only).
"""How long an A/B run will take on this box, and the timers sized from it.

Each slot of the schedule is a restart (the previous server's stop, then this config's load) and a measurement.

- **Load**: production's last start as the host recorded it (module ``unit_start_info``: systemd's start instant to
  the journal's ready line), else ``spec_ab_load_seconds`` from the inventory. A config whose models are larger
  than production's loads proportionally longer (the part after ``ExecStartPre=``, which is reading weights): a
  draft model adds its bytes. With neither known, the load is taken to be the whole health timeout.
- **Measurement**: the tokens the bench asks for (the same prompts ``spec_bench`` will send: warm-up, shapes x
  prompts x repeats, the load phase's bursts, the verification batches of a non-speculative start) at the
  baseline's measured rate (one request to production now, or ``spec_ab_decode_rate``). Prompts count at the
  measured prompt rate (or ten times the decode rate where the server does not say).
- **Timers**: the health timeout covers the slowest config's load 1.5 times plus a minute; each candidate's
  dead-man covers its slot (``_deadman.plan_dead_man``, x1.5); the lock covers the longest slot.
- **Budget**: the whole plan (every round of ``spec_ab_max_rounds``, the restore at the end) must fit in
  ``spec_ab_budget_minutes``, or the run is refused before anything changes, saying how many rounds fit.

Every number is an estimate and says where it came from; the report keeps the plan beside what happened.
"""
from __future__ import annotations

import math
from typing import Any, Dict, List, Mapping, Optional, Sequence

from ansible_collections.llmfleet.specdec.plugins.module_utils.bench._shapes import CHARS_PER_TOKEN, Prompt
from ansible_collections.llmfleet.specdec.plugins.module_utils.common._errors import SpecdecError

# With nothing known about the box: a production model's start (the example fleet gives a 27B 600 s).
FALLBACK_HEALTH_TIMEOUT = 600
FALLBACK_STOP_S = 10.0
# A candidate's least dead-man when its measuring time cannot be planned (no rate known).
FALLBACK_ROLLBACK_AFTER = 900
# Prefill is far faster than decode on every server we know; used only where the server does not say its rate.
PROMPT_RATE_FACTOR = 10.0
# Per request: the HTTP round trip and the reply's parsing, and the bench's /metrics and busy checks around it.
REQUEST_OVERHEAD_S = 0.2
# A burst of N streams takes about this much longer than one stream per extra stream (batched decode shares the
# weights' reads; not free).
BURST_STREAM_SHARE = 0.25
# The verification-cost timing of a non-speculative start: one cached prefix, then 5 repeats per batch size.
VERIFY_PREFIX_TOKENS = 96
VERIFY_REPEATS = 5

__all__ = ["TimingError", "health_timeout_for", "plan_timing", "request_seconds"]


class TimingError(SpecdecError):
    """The plan cannot be sized: an input is not what it must be."""


def _given(value: Any) -> Any:
    """None for a setting left at its default (0, "0", "", null: measure it), else the value."""
    return None if value is None or str(value).strip() in ("", "0", "0.0", "None") else value


def _positive(name: str, value: Any, allow_none: bool = True) -> Optional[float]:
    if value is None or value == "":
        if allow_none:
            return None
        raise TimingError(f"{name}: a number of seconds is needed")
    if isinstance(value, bool):
        raise TimingError(f"{name}: expected a number, got {value!r}")
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise TimingError(f"{name}: expected a number, got {value!r}") from None
    if not math.isfinite(number) or number <= 0:
        raise TimingError(f"{name}: expected a number > 0, got {value!r}")
    return number


def _setting(name: str, value: Any) -> Optional[int]:
    """A timer given as a whole number of seconds, or ``auto`` (None: derive it)."""
    if value is None or (isinstance(value, str) and value.strip().lower() in ("auto", "")):
        return None
    if isinstance(value, bool):
        raise TimingError(f"{name}: expected a whole number of seconds or auto, got {value!r}")
    try:
        number = int(str(value).strip())
    except ValueError:
        raise TimingError(f"{name}: expected a whole number of seconds or auto, got {value!r}") from None
    if number < 1:
        raise TimingError(f"{name}: expected a whole number of seconds >= 1 or auto, got {value!r}")
    return number


def request_seconds(prompt_tokens: float, n_predict: float, decode_rate: float, prompt_rate: float) -> float:
    """One request's expected wall time."""
    return prompt_tokens / prompt_rate + n_predict / decode_rate + REQUEST_OVERHEAD_S


def _prompt_tokens(prompt: Prompt, api: str) -> float:
    text = prompt.prompt if api == "llamacpp" else "".join(content for _role, content in prompt.chat or ()) or prompt.user
    return max(1.0, len(text) / CHARS_PER_TOKEN)


def measurement(warm: Sequence[Prompt], schedule: Sequence[Any], measured: Mapping[str, Sequence[Prompt]], *,
                api: str, decode_rate: float, prompt_rate: float, concurrency: int, bursts: int,
                verify_batches: int) -> Dict[str, Any]:
    """The bench's expected seconds and tokens for one slot (``warm``, ``schedule``, ``measured``: what
    ``_endpoint.plan_requests`` gives for the run's settings)."""
    seconds = 0.0
    generated = prompt_tokens = 0.0
    requests = 0
    for prompt in list(warm) + [p for _repeat, p in schedule]:
        tokens = _prompt_tokens(prompt, api)
        seconds += request_seconds(tokens, prompt.n_predict, decode_rate, prompt_rate)
        generated += prompt.n_predict
        prompt_tokens += tokens
        requests += 1
    if concurrency > 1:
        stretch = 1 + BURST_STREAM_SHARE * (concurrency - 1)
        for prompts in measured.values():
            if not prompts:
                continue
            longest = max(request_seconds(_prompt_tokens(p, api), p.n_predict, decode_rate, prompt_rate) for p in prompts)
            seconds += bursts * longest * stretch
            generated += bursts * concurrency * max(p.n_predict for p in prompts)
            requests += bursts * concurrency
    return {"seconds": seconds, "generated_tokens": int(generated), "prompt_tokens": int(prompt_tokens),
            "requests": requests, "verify_requests": 0, "verify_batches": verify_batches}


def _verify_seconds(batches: int, decode_rate: float, prompt_rate: float) -> tuple[float, int]:
    """The batch timings of a non-speculative start (``_endpoint.measure_batches``)."""
    if batches <= 0:
        return 0.0, 0
    sizes = batches + 1  # the batch sizes K + 1 and 1
    requests = 1 + VERIFY_REPEATS * sizes
    seconds = request_seconds(VERIFY_PREFIX_TOKENS, 1, decode_rate, prompt_rate) + VERIFY_REPEATS * sizes * (
        request_seconds(VERIFY_PREFIX_TOKENS / 4, 1, decode_rate, prompt_rate))
    return seconds, requests


def health_timeout_for(load_s: Optional[float]) -> int:
    """The health timeout a start that took ``load_s`` needs: 1.5 times it plus a minute; unknown: 600 s."""
    if load_s is None:
        return FALLBACK_HEALTH_TIMEOUT
    return math.ceil(load_s * 1.5 + 60)


def _config_load(name: str, base_load: Optional[float], pre_s: float, models: Mapping[str, Sequence[str]],
                 sizes: Mapping[str, Any], production: str) -> tuple[Optional[float], str]:
    """(seconds, why) for one config's load: production's, scaled by its models' bytes over production's."""
    if base_load is None:
        return None, "unknown"

    def total(paths: Sequence[str]) -> Optional[int]:
        values = [sizes.get(p) for p in paths or []]
        if not values or any(not isinstance(v, int) or isinstance(v, bool) or v <= 0 for v in values):
            return None
        return sum(values)

    mine, prods = total(models.get(name) or []), total(models.get(production) or [])
    if mine is None or prods is None or mine <= prods:
        return base_load, "production's"
    scaled = pre_s + (base_load - pre_s) * mine / prods
    return scaled, f"production's x {mine / prods:.2f} (its models' bytes)"


def plan_timing(configs: Sequence[str], baseline: str, schedule: Sequence[Mapping[str, Any]],
                requests: Mapping[str, Any], *, start: Optional[Mapping[str, Any]] = None,
                probe: Optional[Mapping[str, Any]] = None, load_s: Any = None, decode_rate: Any = None,
                models: Optional[Mapping[str, Sequence[str]]] = None, sizes: Optional[Mapping[str, Any]] = None,
                estimates: Optional[Mapping[str, Any]] = None, health_timeout: Any = "auto",
                rollback_after: Any = "auto", budget_minutes: Any = 0, speculative: Optional[Sequence[str]] = None,
                api: str = "llamacpp", concurrency: int = 1, bursts: int = 3, verify_batches: int = 0,
                max_rounds: Optional[int] = None) -> Dict[str, Any]:
    """The run's time, per config and in total, and the timers sized from it (see the module's docstring).

    ``requests``: ``{"warm": [...], "schedule": [...], "measured": {...}}`` from ``_endpoint.plan_requests``;
    ``start``: ``unit_start_info``'s ``start``; ``probe``: one request's record from ``spec_bench`` on production
    now; ``load_s`` / ``decode_rate``: the inventory's numbers, which win; ``models``: config -> its model paths,
    ``sizes``: path -> bytes; ``estimates``: the inventory's own slot estimates (config -> seconds), which win over
    the plan's; ``speculative``: the configs that draft (the others time the verification batches too).
    """
    names = [str(n) for n in configs]
    if baseline not in names:
        raise TimingError(f"the baseline {baseline!r} is not among the run's configs ({', '.join(names)})")
    start = dict(start or {})
    models = dict(models or {})
    sizes = dict(sizes or {})
    notes: List[str] = []

    # ---- the box: load, stop, rates
    given_load = _positive("spec_ab_load_seconds", _given(load_s))
    journal_load = _positive("the journal's load time", start.get("load_s")) if start.get("load_s") else None
    if given_load is not None:
        base_load, load_source = given_load, "spec_ab_load_seconds (inventory)"
    elif journal_load is not None:
        base_load, load_source = journal_load, str(start.get("source") or "the journal")
    else:
        base_load, load_source = None, "unknown"
        notes.append("production's load time is unknown (" + str(start.get("note") or "no start read")
                     + "): each load is taken to be the whole health timeout; set spec_ab_load_seconds to say it")
    pre_s = float(start.get("pre_s") or 0.0) if given_load is None else 0.0
    pre_s = min(pre_s, base_load) if base_load is not None else pre_s
    stop_s = _positive("the journal's stop time", start.get("stop_s")) if start.get("stop_s") else None
    stop_source = "the unit's last stop (systemd)" if stop_s is not None else f"assumed {FALLBACK_STOP_S:.0f} s"
    stop_s = stop_s if stop_s is not None else FALLBACK_STOP_S

    given_rate = _positive("spec_ab_decode_rate", _given(decode_rate))
    probe = dict(probe or {})
    probe_rate = probe.get("predicted_per_second")
    probe_rate = float(probe_rate) if isinstance(probe_rate, (int, float)) and not isinstance(probe_rate, bool) \
        and math.isfinite(probe_rate) and probe_rate > 0 else None
    rate: Optional[float]
    if given_rate is not None:
        rate, rate_source = given_rate, "spec_ab_decode_rate (inventory)"
    elif probe_rate is not None:
        rate, rate_source = probe_rate, f"one request to production now ({probe.get('predicted_n', '?')} tokens)"
    else:
        rate, rate_source = None, "unknown"
        notes.append("the baseline's rate is unknown (production did not answer one request"
                     + (f": {probe['error']}" if probe.get("error") else "") + "), so is each slot's measuring time: "
                     f"each candidate's dead-man is spec_ab_rollback_after (auto: {FALLBACK_ROLLBACK_AFTER} s); set "
                     "spec_ab_decode_rate (production's tokens per second) to plan it")
    prompt_n, ttft = probe.get("prompt_n"), probe.get("ttft_s")
    if rate is None:
        prompt_rate, prompt_source = None, "unknown"
    elif isinstance(prompt_n, int) and isinstance(ttft, (int, float)) and prompt_n > 0 and ttft > 0 \
            and given_rate is None:
        prompt_rate, prompt_source = prompt_n / ttft, "the probe's time to first token"
    else:
        prompt_rate, prompt_source = rate * PROMPT_RATE_FACTOR, f"assumed {PROMPT_RATE_FACTOR:.0f} x the decode rate"

    # ---- timers that depend on the load
    loads: Dict[str, tuple[Optional[float], str]] = {
        n: _config_load(n, base_load, pre_s, models, sizes, baseline) for n in names}
    slowest = max((v[0] for v in loads.values() if v[0] is not None), default=None)
    given_health = _setting("spec_ab_health_timeout", health_timeout)
    health = given_health if given_health is not None else health_timeout_for(slowest)
    health_source = "given" if given_health is not None else (
        "1.5 x the slowest load + 60 s" if slowest is not None else "the load is unknown")
    if slowest is not None and health < slowest:
        notes.append(f"spec_ab_health_timeout ({health} s) is shorter than the slowest config's expected load "
                     f"({slowest:.0f} s): that config will be judged failed while it is still loading")
    given_rollback = _setting("spec_ab_rollback_after", rollback_after)
    rollback = given_rollback if given_rollback is not None else (
        health + 60 if rate is not None else max(health + 60, FALLBACK_ROLLBACK_AFTER))

    # ---- per config: one slot's seconds (without a rate: the restart alone, a lower bound)
    if rate is not None and prompt_rate is not None:
        verify_s, verify_requests = _verify_seconds(int(verify_batches or 0), rate, prompt_rate)
        bench = measurement(requests.get("warm") or [], requests.get("schedule") or [],
                            requests.get("measured") or {}, api=api, decode_rate=rate, prompt_rate=prompt_rate,
                            concurrency=int(concurrency or 1), bursts=int(bursts or 0),
                            verify_batches=int(verify_batches or 0))
    else:
        verify_s, verify_requests = 0.0, 0
        bench = measurement(requests.get("warm") or [], requests.get("schedule") or [],
                            requests.get("measured") or {}, api=api, decode_rate=1.0, prompt_rate=1.0,
                            concurrency=int(concurrency or 1), bursts=int(bursts or 0),
                            verify_batches=int(verify_batches or 0))
        bench["seconds"] = 0.0
    drafting = set(speculative or [])
    given_estimates = {str(k): v for k, v in (estimates or {}).items()}
    unknown = sorted(set(given_estimates) - set(names))
    if unknown:
        raise TimingError(f"spec_ab_slot_estimates names configs the run does not have: {', '.join(unknown)}; "
                          f"its configs are {', '.join(names)}")
    per: Dict[str, Dict[str, Any]] = {}
    for name in names:
        load, why = loads[name]
        load_value = load if load is not None else float(health)
        measure_s = bench["seconds"] + (verify_s if name not in drafting else 0.0)
        slot = stop_s + load_value + measure_s
        if name in given_estimates:
            slot = _positive(f"spec_ab_slot_estimates[{name}]", given_estimates[name], allow_none=False)
            why = "spec_ab_slot_estimates (inventory)"
        per[name] = {"load_s": round(load_value, 1), "load_source": why if load is not None else "the health timeout",
                     "measure_s": round(measure_s, 1), "slot_s": round(slot, 1), "slots": 0, "serves_s": 0.0,
                     "requests": bench["requests"] + (verify_requests if name not in drafting else 0)}

    # ---- the schedule: every slot restarts; then the restore restarts production once more
    rounds: Dict[int, float] = {}
    for slot in schedule or []:
        name = str(slot.get("config"))
        if name not in per:
            raise TimingError(f"the schedule names {name!r}, which is not among the run's configs")
        per[name]["slots"] += 1
        rounds[int(slot.get("round", 0))] = rounds.get(int(slot.get("round", 0)), 0.0) + per[name]["slot_s"]
        if name != baseline:
            per[name]["serves_s"] += per[name]["slot_s"] - stop_s
    restore_s = stop_s + per[baseline]["load_s"]
    total_s = sum(rounds.values()) + restore_s
    candidate_s = sum(v["serves_s"] for k, v in per.items() if k != baseline)
    restarts = len(schedule or []) + 1

    # ---- the budget: the whole plan must fit
    budget = _positive("spec_ab_budget_minutes", budget_minutes) if budget_minutes not in (None, "", 0, "0") else None
    budget_s = budget * 60 if budget is not None else None
    fit = 0
    used = restore_s
    for r in sorted(rounds):
        used += rounds[r]
        if budget_s is not None and used > budget_s:
            break
        fit += 1
    over = budget_s is not None and total_s > budget_s
    if budget_s is not None and rate is None:
        raise TimingError(f"spec_ab_budget_minutes ({budget:g}) cannot be checked: production's rate is unknown "
                          "(it did not answer one request" + (f": {probe['error']}" if probe.get("error") else "")
                          + "); set spec_ab_decode_rate (its tokens per second) or start production first. "
                          "Nothing was changed")

    about = "about" if rate is not None else "at least"
    lines = [f"time plan on this box: {restarts} restarts ({len(schedule or [])} slots and the restore), {about} "
             f"{_minutes(total_s)} in all; production serves candidates for {about} {_minutes(candidate_s)}"
             + (f" (budget {budget:g} min: {'OVER' if over else 'fits'})" if budget is not None else " (no budget)"),
             "  load: " + (f"{base_load:.0f} s from {load_source}" if base_load is not None else "unknown")
             + (f" ({pre_s:.0f} s of it before the server's process)" if pre_s else "")
             + f"; stop {stop_s:.0f} s ({stop_source}); decode "
             + (f"{rate:.1f} tok/s from {rate_source}; prompts {prompt_rate:.0f} tok/s ({prompt_source})"
                if rate is not None and prompt_rate is not None else "rate unknown (measuring time not planned)"),
             f"  timers: health timeout {health} s ({health_source}); dead-man at least {rollback} s"]
    for name in names:
        v = per[name]
        lines.append(f"  {name}: {v['slots']} slot(s) x ({v['load_s']:.0f} s load [{v['load_source']}] + "
                     f"{v['measure_s']:.0f} s measuring, {v['requests']} requests) = {_minutes(v['slots'] * v['slot_s'])}")
    lines += [f"  note: {n}" for n in notes]
    return {
        "configs": per,
        "rounds": {str(r): round(s, 1) for r, s in sorted(rounds.items())},
        "restarts": restarts,
        "restore_s": round(restore_s, 1),
        "total_s": round(total_s, 1),
        "candidate_s": round(candidate_s, 1),
        "tokens": {"generated": bench["generated_tokens"], "prompt": bench["prompt_tokens"]},
        "box": {"load_s": base_load, "load_source": load_source, "pre_s": pre_s, "stop_s": stop_s,
                "stop_source": stop_source, "decode_rate": rate, "rate_source": rate_source,
                "prompt_rate": round(prompt_rate, 1) if prompt_rate is not None else None,
                "prompt_source": prompt_source},
        "health_timeout": int(health),
        "health_timeout_source": health_source,
        "rollback_after": int(rollback),
        # without a rate a slot's time is unknown: the dead-man is then rollback_after (the inventory's own
        # estimates still count)
        "slot_estimates": {name: math.ceil(per[name]["slot_s"]) for name in names
                           if rate is not None or name in given_estimates},
        "budget_s": budget_s,
        "over_budget": over,
        "rounds_that_fit": fit if budget_s is not None else len(rounds),
        "max_rounds": max_rounds,
        "notes": notes,
        "lines": lines,
    }


def _minutes(seconds: float) -> str:
    return f"{seconds / 60:.1f} min" if seconds >= 90 else f"{seconds:.0f} s"


def over_budget_message(plan: Mapping[str, Any], max_rounds: Any) -> str:
    """Why a plan over the budget is refused, and what to change."""
    fit = int(plan.get("rounds_that_fit") or 0)
    hint = (f"lower spec_ab_max_rounds to {fit}" if fit >= 2 else
            "no two rounds fit (a verdict needs two): measure less per slot (spec_ab_shapes, "
            "spec_ab_prompts_per_shape, spec_ab_sizes, spec_ab_load_bursts) or test fewer configs")
    return (f"the plan needs about {_minutes(float(plan['total_s']))} ({plan['restarts']} restarts, up to {max_rounds} "
            f"round(s)), over spec_ab_budget_minutes ({float(plan['budget_s']) / 60:g} min): raise "
            f"spec_ab_budget_minutes, or {hint}. Nothing was changed")
