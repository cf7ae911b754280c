# Copyright: (c) 2026, llmfleet.specdec contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# Private to the collection: is production still the winner? Findings from the promoted evidence against the host now.
"""Drift, as pure functions over plain data (the host reads live in ``_drift_host``).

The promoted evidence (``<state dir>/promoted/<unit>.json``, written by playbooks/promote.yml) holds the run's whole
report: the promoted config's rendering (the env its process received), its measured requests, and, since this
collection records it, ``environment.measured_on``: the build record, the served binary and the model files'
fingerprints as they were while the A/B measured. A watch compares each of those with what the host has now and
turns every difference into a finding with its numbers and what to do. Nothing here changes anything.
"""
from __future__ import annotations

import datetime as _dt
import shlex
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from ansible_collections.llmfleet.specdec.plugins.module_utils.common._errors import SpecdecError
from ansible_collections.llmfleet.specdec.plugins.module_utils.common._secrets import MASK, is_masked, looks_secret
from ansible_collections.llmfleet.specdec.plugins.module_utils.state import _evidence
from ansible_collections.llmfleet.specdec.plugins.module_utils.systemd import _unit_command as uc

SNAPSHOT_SCHEMA = "llmfleet.specdec/measured-on/1"
WATCH_SCHEMA = "llmfleet.specdec/watch/1"
EVIDENCE_SCHEMA = _evidence.EVIDENCE_SCHEMA

# Every kind a watch can report. "drift" kinds mean production may no longer be the winner; "info" kinds mean the
# watch could not judge something (no traffic in the window, an A/B run holds the unit) and say why.
DRIFT_KINDS = ("build-changed", "binary-changed", "model-changed", "model-missing", "live-config-differs",
               "pending-config-differs", "override-active", "unit-not-running", "acceptance-out-of-band",
               "mean-length-out-of-band", "proposer-stopped", "evidence-too-old", "no-evidence",
               "evidence-incomplete")
INFO_KINDS = ("window-skipped", "too-little-traffic", "ab-in-progress", "restarted-in-window", "stale-lock")
RERUN = "re-run the A/B (playbooks/spec_ab.yml) and promote its winner (playbooks/promote.yml)"

# The variables a llama.cpp or vLLM launcher reads: compared even when the promoted rendering lacks them.
WATCHED_PREFIXES = ("LLAMA_ARG_", "LLAMA_EXTRA_ARGS", "VLLM_")
MODEL_VARS = ("LLAMA_ARG_MODEL", "LLAMA_ARG_SPEC_DRAFT_MODEL", "LLAMA_ARG_MODEL_DRAFT")
_MODEL_FLAGS = ("-m", "--model", "-md", "--model-draft", "--spec-draft-model")
BUILD_KEYS = ("fingerprint", "version", "build", "commit", "backend", "backends")
MODEL_KEYS = ("size", "header_sha256", "data_sample_sha256", "tokenizer_fingerprint")


class DriftInputError(SpecdecError):
    """An option or a piece of evidence the watch cannot use; the message names it and what to change."""


def finding(kind: str, message: str, action: str, **numbers: Any) -> Dict[str, Any]:
    severity = "drift" if kind in DRIFT_KINDS else "info"
    return {"kind": kind, "severity": severity, "message": message, "action": action, "numbers": numbers}


# ------------------------------------------------------------------ the unit's lock


def judge_lock(state: Mapping[str, Any], unit: str) -> Tuple[str, Optional[Dict[str, Any]]]:
    """Whether an A/B holds the unit, from ``ab_lock state=query``'s answer (``_host_state.query``): ``("free",
    None)``, ``("held", ab-in-progress)`` or ``("stale", stale-lock)``.

    Held: the run may still be measuring (its expiry lies ahead, or its dead-man timer is armed and its candidate
    serves until the timer fires), so the live config and acceptance are its candidates'. Stale (an expiry passed,
    a holder provably gone, a lock file that is not a record) is what a killed run leaves: production is then
    judged as usual, and an override it left active is still found. The record is passed on whole, whatever
    fields it holds."""
    record = state.get("holder")
    path = state.get("path")
    if record is None:
        return "free", None
    shown = dict(record)
    if state.get("held"):
        return "held", finding("ab-in-progress", f"an A/B run holds {unit} (lock {path}: run {record.get('run_id')}, "
                               f"started {record.get('started')}, expires {record.get('expires')}"
                               f"{'; its dead-man timer is armed' if 'armed' in str(state.get('why')) else ''}): the "
                               "live config and acceptance are its candidates', not production's, and were not judged",
                               "watch again after the run", lock=shown)
    run = record.get("run_id")
    what = f"the lock of run {run} ({path}, started {record.get('started')})" if run else f"the lock file {path}"
    return "stale", finding("stale-lock", f"{what} is stale: {state.get('why')}. The run that took it is gone "
                            "without releasing it (killed, or its controller died), so production was judged as usual",
                            "nothing is needed to run again (the next A/B takes a stale lock over); to tidy up, see "
                            f"override-active below and remove {path}", lock=shown, why=state.get("why"))


# ------------------------------------------------------------------ the evidence


def check_evidence(evidence: Any, where: str) -> Dict[str, Any]:
    """The promoted evidence document, checked enough to be read; an unusable one fails naming the file."""
    return _evidence.check_evidence(evidence, where, DriftInputError)


promoted_config = _evidence.promoted_config


def promoted_env(evidence: Mapping[str, Any]) -> Dict[str, str]:
    """The env the promoted config's process received while it was measured (its rendering)."""
    return _evidence.promoted_env(evidence, DriftInputError)


def server_part(promoted: Mapping[str, str], evidence: Mapping[str, Any]) -> Dict[str, str]:
    """A wrapper's promoted env without what its process got from systemd and its shell on that start
    (``INVOCATION_ID``, ``JOURNAL_STREAM``, ``PWD`` and the like, which a wrapper's rendering read from ``/proc``):
    the server's own variables and those the promoted config sets."""
    override = (promoted_config(evidence).get("rendering") or {}).get("override") or {}
    return {k: v for k, v in promoted.items() if k.startswith(WATCHED_PREFIXES) or k in override}


def promoted_model_env(evidence: Mapping[str, Any]) -> Dict[str, str]:
    """The env whose model variables name the promoted config's model files: its rendering's effective env (a
    hand-written unit's command line as LLAMA_ARG_*, ``-m`` included) when the report kept one, else its env."""
    config = promoted_config(evidence)
    effective = (config.get("rendering") or {}).get("effective_env")
    if isinstance(effective, Mapping):
        return {str(k): str(v) for k, v in effective.items()}
    return promoted_env(evidence)


def model_paths(env: Mapping[str, Any]) -> List[str]:
    """The model files a llama-server with this env loads: its model variables, then -m / -md in LLAMA_EXTRA_ARGS."""
    paths: List[str] = []
    for var in MODEL_VARS:
        value = str(env.get(var) or "").strip()
        if value and value not in paths:
            paths.append(value)
    try:
        extra = shlex.split(str(env.get("LLAMA_EXTRA_ARGS") or ""))
    except ValueError:
        extra = []
    for i, arg in enumerate(extra):
        flag, eq, value = arg.partition("=")
        if flag in _MODEL_FLAGS:
            value = value if eq else (extra[i + 1] if i + 1 < len(extra) else "")
            if value and value not in paths:
                paths.append(value)
    return paths


def parse_time(text: Any) -> Optional[_dt.datetime]:
    if not isinstance(text, str) or not text:
        return None
    try:
        moment = _dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return moment if moment.tzinfo else moment.replace(tzinfo=_dt.timezone.utc)


# ------------------------------------------------------------------ what the A/B measured


def _cell_counts(requests: Sequence[Mapping[str, Any]]) -> Tuple[int, int, int, bool]:
    """(drafts, draft tokens, accepted tokens, every request had a /metrics delta) over some requests."""
    drafts = tokens = accepted = 0
    all_deltas = True
    for r in requests:
        delta = r.get("metrics_delta")
        if isinstance(delta, Mapping):
            drafts += int(delta.get("drafts") or 0)
            tokens += int(delta.get("draft_tokens") or 0)
            accepted += int(delta.get("accepted_tokens") or 0)
        else:
            all_deltas = False
            tokens += int(r.get("draft_n") or 0)
            accepted += int(r.get("draft_n_accepted") or 0)
    return drafts, tokens, accepted, all_deltas


def measured_band(evidence: Mapping[str, Any]) -> Dict[str, Any]:
    """What the A/B measured for the promoted config: acceptance and mean accepted length per (round, shape) cell
    that drafted, their lowest and highest (the band live traffic is compared with) and the pooled values.

    A cell is one server start (round) on one traffic shape: the band holds both the shapes' spread (live traffic
    is a mix of them) and the spread between server starts. The numbers are the report's own definitions:
    acceptance = accepted / drafted tokens, mean accepted length = 1 + accepted / drafts (llama.cpp's mean len).
    """
    name = evidence["config"]
    config = promoted_config(evidence)
    chain = list(config.get("chain") or [])
    cells: Dict[Tuple[Any, str], List[Mapping[str, Any]]] = {}
    for entry in evidence["report"].get("entries") or []:
        if not isinstance(entry, Mapping) or entry.get("config") != name or not isinstance(entry.get("bench"), Mapping):
            continue
        for r in entry["bench"].get("requests") or []:
            if isinstance(r, Mapping):
                cells.setdefault((entry.get("round"), str(r.get("shape"))), []).append(r)
    acc: List[float] = []
    mlen: List[float] = []
    shown = []
    total = [0, 0, 0]
    for (rnd, shape), reqs in sorted(cells.items(), key=lambda kv: (str(kv[0][0]), kv[0][1])):
        drafts, tokens, accepted, deltas = _cell_counts(reqs)
        total[0] += drafts
        total[1] += tokens
        total[2] += accepted
        cell = {"round": rnd, "shape": shape, "acceptance": None, "mean_accepted_len": None}
        if tokens:
            cell["acceptance"] = accepted / tokens
            acc.append(cell["acceptance"])
        if deltas and drafts:
            cell["mean_accepted_len"] = 1.0 + accepted / drafts
            mlen.append(cell["mean_accepted_len"])
        shown.append(cell)
    return {
        "config": name, "chain": chain, "speculative": bool(chain) or total[1] > 0,
        "cells": shown,
        "acceptance_low": min(acc) if acc else None, "acceptance_high": max(acc) if acc else None,
        "mean_len_low": min(mlen) if mlen else None, "mean_len_high": max(mlen) if mlen else None,
        "acceptance": total[2] / total[1] if total[1] else None,
        "mean_accepted_len": 1.0 + total[2] / total[0] if total[0] else None,
    }


# ------------------------------------------------------------------ the comparisons


def compare_build(then: Optional[Mapping[str, Any]], now: Optional[Mapping[str, Any]], path: str) -> List[Dict[str, Any]]:
    """The build record (role llamacpp_build's) as measured against the one on the host now."""
    if not then and not now:
        return []
    if then and not now:
        return [finding("build-changed", f"the build record {path} the A/B was measured with is gone "
                        f"(it named {then.get('version')} {then.get('backend')}, fingerprint {then.get('fingerprint')})",
                        f"find out which llama-server serves now, then {RERUN}",
                        measured=dict(then), now=None)]
    if now and not then:
        return [finding("build-changed", f"a build record {path} appeared after the A/B ({now.get('version')} "
                        f"{now.get('backend')}, fingerprint {now.get('fingerprint')}): the build was installed since",
                        RERUN, measured=None, now=dict(now))]
    changed = {k: {"measured": then.get(k), "now": now.get(k)} for k in BUILD_KEYS if then.get(k) != now.get(k)}
    if not changed:
        return []
    parts = ", ".join(f"{k} {v['measured']} -> {v['now']}" for k, v in changed.items())
    return [finding("build-changed", f"llama.cpp build changed since the A/B measured: {parts}",
                    f"{RERUN}; a build can change acceptance and speed (back to the measured build: "
                    f"playbooks/build.yml -e specdec_llamacpp_build={then.get('version')})", changed=changed)]


def compare_binary(then: Optional[Mapping[str, Any]], now: Optional[Mapping[str, Any]]) -> List[Dict[str, Any]]:
    """The served binary's bytes: catches a build replaced outside role llamacpp_build (no record changes)."""
    if not then or not now or not then.get("sha256") or not now.get("sha256"):
        return []
    if then["sha256"] == now["sha256"]:
        return []
    return [finding("binary-changed", f"the served binary changed since the A/B measured: {then.get('path')} "
                    f"sha256 {str(then['sha256'])[:16]} ({then.get('size')} bytes) -> {now.get('path')} sha256 "
                    f"{str(now['sha256'])[:16]} ({now.get('size')} bytes)", RERUN, measured=dict(then), now=dict(now))]


def compare_models(then: Mapping[str, Any], now: Mapping[str, Any], paths: Sequence[str]) -> List[Dict[str, Any]]:
    """Each model file of the promoted config: its fingerprints as measured against the file now."""
    out = []
    for path in paths:
        was, is_ = then.get(path), now.get(path)
        if not isinstance(was, Mapping) or was.get("error"):
            continue  # not fingerprinted (or not readable) while measured: nothing to compare with
        if not isinstance(is_, Mapping) or is_.get("error"):
            why = is_.get("error") if isinstance(is_, Mapping) else "not read"
            out.append(finding("model-missing", f"model {path} of the promoted config cannot be read now: {why}",
                               f"put the measured file back at {path}, or {RERUN}", path=path, measured=dict(was)))
            continue
        changed = {k: {"measured": was.get(k), "now": is_.get(k)} for k in MODEL_KEYS
                   if was.get(k) is not None and was.get(k) != is_.get(k)}
        if changed:
            what = ", ".join(f"{k} {str(v['measured'])[:16]} -> {str(v['now'])[:16]}" for k, v in changed.items())
            out.append(finding("model-changed", f"model {path} is not the file the A/B measured: {what}",
                               f"{RERUN}; a swapped target or draft changes acceptance (and a draft with another "
                               "tokenizer turns speculation off)", path=path, changed=changed))
    return out


def watched_keys(promoted: Mapping[str, str], live: Mapping[str, str]) -> List[str]:
    return sorted(set(promoted) | {k for k in live if k.startswith(WATCHED_PREFIXES)})


def env_differences(promoted: Mapping[str, str], live: Mapping[str, str]) -> Dict[str, Dict[str, Optional[str]]]:
    """Variable -> {promoted, live} for every watched variable whose value differs (None: not set). A promoted value
    the report masked (its name looks secret) is not compared with a set one, and a secret's values are never
    returned, only ``MASK`` for one that is set."""
    out: Dict[str, Dict[str, Optional[str]]] = {}
    for k in watched_keys(promoted, live):
        then, now = promoted.get(k), live.get(k)
        if then == now or (is_masked(then) and now is not None):
            continue
        out[k] = ({"promoted": then and MASK, "live": now and MASK} if looks_secret(k) else {"promoted": then, "live": now})
    return out


def _shown(diff: Mapping[str, Mapping[str, Optional[str]]], limit: int = 6) -> str:
    def val(v: Optional[str]) -> str:
        return "(unset)" if v is None else repr(v if len(v) <= 80 else v[:77] + "...")
    items = [f"{k}: {val(v['promoted'])} -> {val(v['live'])}" for k, v in sorted(diff.items())]
    more = f" and {len(items) - limit} more" if len(items) > limit else ""
    return "; ".join(items[:limit]) + more


def compare_live(promoted: Mapping[str, str], live: Optional[Mapping[str, str]], pending: Optional[Mapping[str, str]],
                 unit: str, env_files: Sequence[str]) -> List[Dict[str, Any]]:
    """The running process's env, and the env its next start would get, against the promoted rendering."""
    out = []
    if live is not None:
        diff = env_differences(promoted, live)
        if diff:
            out.append(finding("live-config-differs", f"{unit} runs with another config than the promoted one: "
                               f"{_shown(diff)}", "restore the promotion (playbooks/promote.yml with the same config "
                               f"and run) or, if the change is wanted, {RERUN}", differences=diff))
    if pending is not None:
        pdiff = env_differences(promoted, pending)
        ldiff = env_differences(promoted, live) if live is not None else None
        if pdiff and pdiff != ldiff:
            out.append(finding("pending-config-differs", f"{', '.join(env_files) or 'the env file'} no longer holds the "
                               f"promoted config, and {unit}'s next restart will apply it: {_shown(pdiff)}",
                               f"put the promoted env file back (playbooks/promote.yml), or {RERUN} before the next "
                               "restart", differences=pdiff))
    return out


def judge_window(band: Mapping[str, Any], delta: Optional[Mapping[str, Any]], *, acceptance_tolerance: float,
                 mean_len_tolerance: float, min_draft_tokens: int, min_tokens: int) -> List[Dict[str, Any]]:
    """Live acceptance and mean accepted length over the window against the measured band; a proposer that
    stopped drafting while tokens flow. ``delta``: counter differences between the window's two reads."""
    if delta is None:
        return []
    tokens = int(delta.get("tokens_predicted") or 0)
    drafts = int(delta.get("drafts") or 0)
    dtoks = int(delta.get("draft_tokens") or 0)
    acc = int(delta.get("accepted_tokens") or 0)
    seconds = delta.get("seconds")
    live = {"window_s": seconds, "tokens_predicted": tokens, "drafts": drafts, "draft_tokens": dtoks,
            "accepted_tokens": acc}
    if not band.get("speculative"):
        return []
    if tokens < min_tokens and dtoks < min_draft_tokens:
        return [finding("too-little-traffic", f"{tokens} tokens generated and {dtoks} drafted in the {seconds} s window "
                        f"(at least {min_tokens} generated or {min_draft_tokens} drafted are needed to judge)",
                        "widen the window (specdec_watch_window) or watch at a busier hour", **live)]
    chain = ",".join(band.get("chain") or []) or "its proposer"
    if drafts == 0 and tokens >= min_tokens:
        ngram_only = bool(band.get("chain")) and all(str(t).startswith("ngram") for t in band["chain"])
        why = (" (an n-gram proposer drafts only where text repeats: this traffic may not repeat)" if ngram_only
               else "")
        return [finding("proposer-stopped", f"{tokens} tokens generated in {seconds} s and not one draft: {chain} "
                        f"is not drafting{why}; the A/B measured acceptance {_pct(band.get('acceptance'))}",
                        "check the unit's journal for a draft that failed to load or was refused (spec_compat, "
                        f"spec_lint on the live env), then {RERUN}", measured_acceptance=band.get("acceptance"), **live)]
    out: List[Dict[str, Any]] = []
    if dtoks < min_draft_tokens:
        return [finding("too-little-traffic", f"only {dtoks} tokens drafted in the {seconds} s window (at least "
                        f"{min_draft_tokens} needed to judge acceptance)",
                        "widen the window (specdec_watch_window) or watch at a busier hour", **live)]
    live_acc = acc / dtoks
    low, high = band.get("acceptance_low"), band.get("acceptance_high")
    if low is not None and high is not None and not low - acceptance_tolerance <= live_acc <= high + acceptance_tolerance:
        side = "below" if live_acc < low else "above"
        out.append(finding("acceptance-out-of-band", f"live acceptance {_pct(live_acc)} ({acc} of {dtoks} drafted "
                           f"tokens in {seconds} s) is {side} what the A/B measured for {band['config']}: "
                           f"{_pct(low)}-{_pct(high)} over its rounds and shapes (tolerance "
                           f"{acceptance_tolerance:.2f})", _band_action(side), live_acceptance=live_acc,
                           measured_low=low, measured_high=high, tolerance=acceptance_tolerance, **live))
    mlow, mhigh = band.get("mean_len_low"), band.get("mean_len_high")
    if drafts and mlow is not None and mhigh is not None:
        live_len = 1.0 + acc / drafts
        if not mlow - mean_len_tolerance <= live_len <= mhigh + mean_len_tolerance:
            side = "below" if live_len < mlow else "above"
            out.append(finding("mean-length-out-of-band", f"live mean accepted length {live_len:.2f} ({drafts} drafts in "
                               f"{seconds} s) is {side} the A/B's {mlow:.2f}-{mhigh:.2f} for {band['config']} "
                               f"(tolerance {mean_len_tolerance:.2f})", _band_action(side),
                               live_mean_accepted_len=live_len, measured_low=mlow, measured_high=mhigh,
                               tolerance=mean_len_tolerance, **live))
    return out


def _band_action(side: str) -> str:
    if side == "below":
        return (f"the traffic no longer looks like the A/B's shapes, or the proposer degraded: {RERUN}, with the "
                "operator's own traffic as a shape (spec_ab_traffic) so the verdict reflects it")
    return (f"the traffic drafts better than the A/B's shapes did, so the margins may have moved: {RERUN}, with "
            "the operator's own traffic as a shape (spec_ab_traffic)")


def _pct(value: Any) -> str:
    return "-" if value is None else f"{100.0 * float(value):.1f} %"


def judge_age(measured_at: Optional[_dt.datetime], promoted_at: Optional[_dt.datetime], now: _dt.datetime,
              max_age_days: float) -> List[Dict[str, Any]]:
    if max_age_days <= 0:
        return []
    if measured_at is None:
        return [finding("evidence-too-old", "the evidence carries no measurement time: its age is unknown", RERUN,
                        max_age_days=max_age_days)]
    age = (now - measured_at).total_seconds() / 86400.0
    if age <= max_age_days:
        return []
    when = f", promoted {promoted_at.isoformat()}" if promoted_at else ""
    shown = f"{age:.1f} days" if age >= 1 else f"{age * 24:.2f} hours"
    return [finding("evidence-too-old", f"the promoted config was measured {shown} ago "
                    f"({measured_at.isoformat()}{when}), more than specdec_watch_max_age_days = {max_age_days:g}",
                    RERUN, age_days=round(age, 4), age_hours=round(age * 24, 2), max_age_days=max_age_days)]


def summary_line(host: str, findings: Sequence[Mapping[str, Any]], config: Optional[str]) -> str:
    drift = [f["kind"] for f in findings if f["severity"] == "drift"]
    what = f"promoted config {config!r}" if config else "no promotion"
    if not drift:
        return f"{host}: {what} - no drift"
    return f"{host}: {what} - DRIFT: {', '.join(dict.fromkeys(drift))}"


def check_number(name: str, value: Any, minimum: float = 0.0) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < minimum:
        raise DriftInputError(f"{name}: expected a number of at least {minimum:g}, got {value!r}")
    return float(value)


def command_drift(rendering: Mapping[str, Any] | None, live: Mapping[str, Any]) -> List[Dict[str, Any]]:
    """A promoted form ``exec`` config against the unit now: the running process's command line and the one its
    next start runs (``read_unit``), each against the promoted ``exec_start``; findings in the watch's shape."""
    promoted = list((rendering or {}).get("exec_start") or [])
    if not promoted:
        return []
    unit = str(live.get("unit") or "the unit")
    if not live.get("installed"):
        return [finding("unit-not-running", f"{unit}: {live.get('why')}", f"install {unit} again, or {RERUN}")]
    out = []
    running = (live.get("running") or {}).get("argv")
    # a prefix (env, nice, taskset, numactl) exec'd the server: its process runs the line's tail
    if running is not None and not uc.runs_line(running, promoted):
        out.append(finding(
            "live-config-differs", f"{unit} runs another command line than the promoted one: promoted "
            f"{' '.join(promoted)[:300]}; running {' '.join(running)[:300]}",
            f"restore the promotion (playbooks/promote.yml with the same config and run) or, if the change is wanted, "
            f"{RERUN}", promoted=promoted, live=list(running)))
    if list(live.get("argv") or []) != promoted and list(live.get("argv") or []) != list(running or []):
        out.append(finding(
            "pending-config-differs", f"{unit}'s unit no longer runs the promoted command line, and its next restart "
            f"will apply it: {' '.join(live.get('argv') or [])[:300]} ({live.get('exec_start_source')})",
            f"put the promoted drop-in back (playbooks/promote.yml), or {RERUN} before the next restart",
            promoted=promoted, pending=list(live.get("argv") or [])))
    return out


# ------------------------------------------------------------------ the build era (spec_watch, the fleet report)


def _build_name(record: Optional[Mapping[str, Any]]) -> Optional[str]:
    if not isinstance(record, Mapping):
        return None
    name = " ".join(str(record[k]) for k in ("version", "backend") if record.get(k))
    return f"{name or 'a build'} (fingerprint {record.get('fingerprint') or '-'})"


def build_era(then: Optional[Mapping[str, Any]], now: Optional[Mapping[str, Any]], unit: str,
              verdicts: Optional[Sequence[Any]] = None) -> Dict[str, Any]:
    """The unit's build era: the build its evidence was measured on, the build it runs, and, when they differ,
    whether the build sentinel judged that upgrade (its verdict for this unit in the build record, ``verdicts``, else
    ``now``'s own ``sentinel``) and with what numbers; ``line`` says it in words."""
    measured, runs = _build_name(then), _build_name(now)
    same = bool(then and now) and all((then or {}).get(k) == (now or {}).get(k) for k in BUILD_KEYS)
    found = (now or {}).get("sentinel") if verdicts is None else verdicts
    verdict = next((v for v in found or [] if isinstance(v, Mapping) and v.get("unit") == unit), None)
    judged = None if verdict is None else {
        "build": verdict.get("build"), "config": verdict.get("config"),
        "accepted_slower": bool(verdict.get("accepted_slower")), "regressions": list(verdict.get("regressions") or []),
        "canary_acceptance": (verdict.get("canary") or {}).get("acceptance"),
        "production_acceptance": (verdict.get("production") or {}).get("acceptance")}
    if same:
        said = "the same build"
    elif judged is None:
        said = "an upgrade the sentinel did NOT judge (no verdict for this unit in the build record)"
    else:
        def pct(value: Any) -> str:
            return "-" if value is None else f"{100.0 * float(value):.1f} %"
        numbers = f"acceptance {pct(judged['canary_acceptance'])} against {pct(judged['production_acceptance'])}"
        said = (f"an upgrade the sentinel judged on config {judged['config']!r}: {numbers}"
                + (", ACCEPTED SLOWER (-e specdec_build_accept_slower)" if judged["accepted_slower"] else ", passed"))
    return {"measured_on": measured, "runs": runs, "same_build": same, "sentinel": judged,
            "line": f"{unit}: measured on {measured or 'an unrecorded build'}, runs {runs or 'an unrecorded build'}: {said}"}


# ------------------------------------------------------------------ for unit_override (form exec)
