# Copyright: (c) 2026, llmfleet.specdec contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# Private to the collection: the load gate (texts under concurrent load must equal the single-stream texts) and the load verdicts.
"""The load gate and the numbers under load, for the bench (on the host) and the judge (on the controller).

At temperature 0 a stream served while other streams share the batch must give the same text as the
same prompt served alone on the same server. The gate checks every stream of the bench's ``load``
entry (``_load``) against that prompt's single-stream text from the same bench:

- ``PASSED``: every stream equals its reference;
- ``INVALID``: a stream differs. ``truncated`` when its text is a strict prefix of the reference (a
  premature end, the field notes' corrupted multi-slot output), ``altered`` otherwise; with the stream,
  the shape, the prompt and the first differing character;
- ``FAILED``: a stream got no answer (the server died, reset the connection, answered an error status
  or nothing within the timeout); with the stream, its error and what ``/health`` said afterwards. The
  A/B role adds the unit's journal lines to the entry (``journal``).

:func:`judge_status` turns the gates of a config's rounds into its status for the A/B (a config that
fails the gate is never a candidate), :func:`load_section` computes the aggregate and per-stream
rates with the intervals and verdicts of ``_stats``.
"""
from __future__ import annotations

import re
from typing import Any, Iterable, Mapping

from ansible_collections.llmfleet.specdec.plugins.module_utils.common import _stats

PASSED = "PASSED"
INVALID = "INVALID"
FAILED = "FAILED"
NOT_MEASURED = "NOT MEASURED"
_CONTEXT = 24


def _divergence(reference: str, text: str) -> dict[str, Any]:
    limit = min(len(reference), len(text))
    pos = next((i for i in range(limit) if reference[i] != text[i]), limit)
    start = max(0, pos - _CONTEXT)
    kind = "truncated" if len(text) < len(reference) and reference.startswith(text) else "altered"
    return {"kind": kind, "position": pos, "context_start": start, "reference": reference[start:pos + _CONTEXT],
            "under_load": text[start:pos + _CONTEXT], "reference_len": len(reference), "load_len": len(text)}


def references(requests: Iterable[Mapping[str, Any]]) -> dict[str, Mapping[str, Any]]:
    """prompt sha256 -> the first single-stream request that answered it."""
    out: dict[str, Mapping[str, Any]] = {}
    for r in requests:
        sha = r.get("prompt_sha256")
        if sha and sha not in out and isinstance(r.get("text"), str):
            out[sha] = r
    return out


def gate(load: Mapping[str, Any] | None, requests: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """The gate's verdict on one bench's load entry against that bench's single-stream requests."""
    if not load or not load.get("streams"):
        return {"status": NOT_MEASURED, "streams_checked": 0, "mismatches": [], "failures": [], "unreferenced": 0}
    refs = references(requests)
    mismatches = []
    failures = []
    checked = unreferenced = 0
    for s in load["streams"]:
        where = {"shape": s.get("shape"), "burst": s.get("burst"), "stream": s.get("stream"),
                 "prompt_index": s.get("prompt_index"), "prompt_sha256": s.get("prompt_sha256")}
        if s.get("error"):
            failures.append(dict(where, error=s["error"]))
            continue
        ref = refs.get(s.get("prompt_sha256"))
        if ref is None:
            unreferenced += 1
            continue
        checked += 1
        text = s.get("text") if isinstance(s.get("text"), str) else ""
        if text != ref["text"]:
            d = _divergence(ref["text"], text)
            d.update(where, reference_predicted_n=ref.get("predicted_n"), load_predicted_n=s.get("predicted_n"))
            mismatches.append(d)
    status = FAILED if failures else INVALID if mismatches else PASSED if checked else NOT_MEASURED
    return {"status": status, "concurrency": load.get("concurrency"), "streams_checked": checked,
            "mismatches": mismatches, "failures": failures, "unreferenced": unreferenced,
            "health_after_failure": load.get("health_after_failure")}


# How a dying server shows in its unit's journal (systemd's own lines and llama.cpp's aborts).
_DEATH = re.compile(r"SEGV|signal|dumped|core|abort|illegal|fault|exited|failed|error", re.IGNORECASE)


def journal_excerpt(journal: Any, limit: int = 6) -> list[str]:
    """The journal lines that say how the server died, else its last lines: the unit restarts at once, so the
    tail is often the next process starting up, not the death."""
    lines = [str(x) for x in journal] if isinstance(journal, list) else []
    telling = [line for line in lines if _DEATH.search(line)]
    return (telling or lines)[-limit:]


def describe(g: Mapping[str, Any], round_: Any = None, journal: Any = None) -> str:
    """One line for the report's problems: what failed under load, where, and how."""
    at = f" (round {round_})" if round_ is not None else ""
    n = g.get("concurrency")
    if g["status"] == FAILED:
        f = g["failures"][0]
        health = g.get("health_after_failure")
        text = (f"under load ({n} streams){at}: the server stopped answering: stream {f['stream']} on {f['shape']} "
                f"prompt {f['prompt_index']} (burst {f['burst']}): {f['error']}; /health afterwards: "
                f"{health or 'not asked'}")
        lines = journal_excerpt(journal)
        if lines:
            text += "; journal: " + " | ".join(lines)
        return text
    m = g["mismatches"][0]
    more = f" ({len(g['mismatches'])} of {g['streams_checked']} streams differ)"
    return (f"under load ({n} streams){at}: stream {m['stream']} on {m['shape']} prompt {m['prompt_index']} "
            f"(burst {m['burst']}) is {m['kind']}: its text differs from the single-stream text at char "
            f"{m['position']} (lengths {m['reference_len']} alone, {m['load_len']} under load){more}")


def config_gate(entries: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """A config's gate over its rounds: the worst status, every round's gate, and the first problem."""
    rounds = []
    for e in entries:
        bench = e.get("bench") if isinstance(e.get("bench"), Mapping) else None
        load = bench.get("load") if bench else None
        if not isinstance(load, Mapping):
            continue
        g = load.get("gate") if isinstance(load.get("gate"), Mapping) else gate(load, bench.get("requests") or [])
        # the judge re-checks the texts itself rather than trusting the host's verdict
        g = gate(load, bench.get("requests") or []) if load.get("streams") else g
        rounds.append({"round": e.get("round"), "gate": g, "journal": e.get("journal")})
    if not rounds:
        return {"status": NOT_MEASURED, "concurrency": None, "rounds": [], "problem": None}
    order = (FAILED, INVALID, PASSED, NOT_MEASURED)
    worst = min(rounds, key=lambda r: order.index(r["gate"]["status"]))
    status = worst["gate"]["status"]
    problem = describe(worst["gate"], worst["round"], worst["journal"]) if status in (FAILED, INVALID) else None
    first = None
    if status == INVALID:
        first = dict(worst["gate"]["mismatches"][0], round=worst["round"])
    elif status == FAILED:
        first = dict(worst["gate"]["failures"][0], round=worst["round"])
    return {"status": status, "concurrency": worst["gate"].get("concurrency"),
            "rounds": [{"round": r["round"], "status": r["gate"]["status"],
                        "streams_checked": r["gate"]["streams_checked"]} for r in rounds],
            "problem": problem, "first": first,
            "journal": worst["journal"] if status == FAILED else None}


def judge_status(status: str, problems: list[str], load_gate: Mapping[str, Any], is_baseline: bool,
                 statuses: Mapping[str, str]) -> tuple[str, list[str]]:
    """The config's status once the load gate is counted: FAILED or INVALID under load, never a candidate.

    The baseline keeps its status (it is production's own config); its failure under load becomes a warning.
    ``statuses``: the A/B's status names (``_judge.FAILED``, ``_judge.INVALID``).
    """
    if is_baseline or load_gate["status"] not in (FAILED, INVALID):
        return status, problems
    problems = [load_gate["problem"], *problems]
    if load_gate["status"] == FAILED:
        return statuses["FAILED"], problems
    if status == statuses["FAILED"]:
        return status, problems
    return statuses["INVALID"], problems


def _samples(entries: Iterable[Mapping[str, Any]], shape: str) -> tuple[dict[tuple, float], dict[tuple, float]]:
    """(aggregate tok/s per (round, burst, 0), decode tok/s per (round, burst, stream)) of one shape."""
    agg: dict[tuple, float] = {}
    per: dict[tuple, float] = {}
    for e in entries:
        bench = e.get("bench") if isinstance(e.get("bench"), Mapping) else None
        load = bench.get("load") if bench else None
        if not isinstance(load, Mapping):
            continue
        for b in load.get("bursts") or []:
            rate = b.get("aggregate_tok_s")
            if b.get("shape") == shape and isinstance(rate, (int, float)) and rate > 0:
                agg[(e.get("round", 0), b.get("burst", 0), 0)] = float(rate)
        for s in load.get("streams") or []:
            rate = s.get("predicted_per_second")
            if s.get("shape") == shape and not s.get("error") and not s.get("contaminated") \
                    and isinstance(rate, (int, float)) and rate > 0:
                per[(e.get("round", 0), s.get("burst", 0), s.get("stream", 0))] = float(rate)
    return agg, per


def aggregate_by_round(entries: Iterable[Mapping[str, Any]], shape: str) -> dict[Any, list[float]]:
    """round -> the aggregate tok/s of each of that round's bursts of one shape (what the verdict under load
    compares; a burst whose streams did not all answer has none)."""
    out: dict[Any, list[float]] = {}
    for (rnd, _burst, _zero), rate in sorted(_samples(entries, shape)[0].items(), key=repr):
        out.setdefault(rnd, []).append(rate)
    return out


def load_section(entries_by_config: Mapping[str, list[Mapping[str, Any]]], baseline: str, shapes: list[str],
                 single_stream: Mapping[str, Mapping[str, Any]], boot: Mapping[str, Any]) -> dict[str, Any] | None:
    """Per config and shape: aggregate and per-stream tok/s under load with intervals, speedups against the
    baseline under the same load, and verdicts (``_stats``' interval and verdict functions, as they are).

    ``single_stream``: config -> shape -> the judged single-stream row, shown beside the load numbers.
    None when no config was measured under load.
    """
    samples = {name: {s: _samples(entries, s) for s in shapes} for name, entries in entries_by_config.items()}
    if not any(a or p for by_shape in samples.values() for a, p in by_shape.values()):
        return None
    out: dict[str, Any] = {}
    for name, by_shape in samples.items():
        rows = {}
        for s, (agg, per) in by_shape.items():
            base_agg, base_per = samples.get(baseline, {}).get(s, ({}, {}))
            row: dict[str, Any] = {"n_bursts": len(agg), "n_streams": len(per),
                                   "single_stream_tok_s": (single_stream.get(name, {}).get(s) or {}).get("median_tok_s")}
            for label, mine, theirs in (("aggregate", agg, base_agg), ("stream", per, base_per)):
                seed = f"{boot['seed']}:{name}:{s}:load:{label}"
                cell: dict[str, Any] = {"tok_s": None, "tok_s_ci_low": None, "tok_s_ci_high": None, "speedup": None,
                                        "ci_low": None, "ci_high": None, "verdict": None, "n": len(mine)}
                if boot.get("method", "rounds") == "rounds":
                    # the single-stream method: rounds (server starts) are the replicates, bursts and streams
                    # inside one start are its requests
                    if mine:
                        cell["tok_s"], cell["tok_s_ci_low"], cell["tok_s_ci_high"] = _stats.round_rate_ci(
                            mine, alpha=boot["alpha"])
                    if name != baseline and mine and theirs:
                        rci = _stats.round_ratio_ci(mine, theirs, alpha=boot["alpha"])
                        cell.update(speedup=rci.ratio, ci_low=rci.low, ci_high=rci.high,
                                    verdict=_stats.round_verdict(rci, boot.get("margin", _stats.EQUIVALENCE_MARGIN)),
                                    n_rounds=rci.rounds)
                else:
                    if mine:
                        cell["tok_s"], cell["tok_s_ci_low"], cell["tok_s_ci_high"] = _stats.bootstrap_median_ci(
                            mine, n=boot["n"], seed=seed, alpha=boot["alpha"])
                    if name != baseline and mine and theirs:
                        ci = _stats.bootstrap_ratio_ci(mine, theirs, n=boot["n"], seed=seed, alpha=boot["alpha"])
                        enough = len(mine) >= _stats.MIN_REQUESTS and len(theirs) >= _stats.MIN_REQUESTS
                        cell.update(speedup=ci.ratio, ci_low=ci.low, ci_high=ci.high,
                                    verdict=_stats.verdict(ci.low, ci.high) if enough else "too few requests")
                row[label] = cell
            rows[s] = row
        out[name] = rows
    return out
