# Copyright: (c) 2026, llmfleet.specdec contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# Private to the collection: the bench under concurrent load: N streams at once per shape, from the host (stdlib threads).
"""Measure one running config with N requests in flight at once, the way production is loaded.

The field notes' worst failures only show under parallel load (an illegal memory access with two
concurrent long prompts; multi-slot output corrupted into a premature end): "concurrency is the
trigger, not size". So after the single-stream bench, every shape is sent again as *bursts*: N
threads wait on a barrier and send one request each at the same moment, N being the production
unit's slot count. Each stream's prompt is one the single-stream bench already measured, so its
greedy text can be checked against that prompt's single-stream text (``_loadgate``).

Per burst: the aggregate rate is the tokens all streams generated over the burst's wall time (first
send to last reply, prefill included); the per-stream decode rate is each reply's own
``timings.predicted_per_second`` (the slot's decode time, which under load includes waiting for the
batch it shares). A stream that fails (connection refused or reset, an error status, no answer within
the timeout) ends the load phase: the server is asked for ``/health`` once more and what it answered
is recorded, and no further burst is sent to a server that may be down.
"""
from __future__ import annotations

import threading
import time
from typing import Any, Callable, Mapping

from ansible_collections.llmfleet.specdec.plugins.module_utils.bench._busy import BusyWatch
from ansible_collections.llmfleet.specdec.plugins.module_utils.bench._endpoint import Endpoint
from ansible_collections.llmfleet.specdec.plugins.module_utils.bench._loadgate import FAILED, gate
from ansible_collections.llmfleet.specdec.plugins.module_utils.bench._shapes import Prompt
from ansible_collections.llmfleet.specdec.plugins.module_utils.common._errors import SpecdecError

LOAD_SCHEMA = "llmfleet.specdec/load/1"
MAX_CONCURRENCY = 256


class LoadError(SpecdecError):
    """The load phase cannot be planned (a bad concurrency, a server whose slot count is unknown)."""


def resolve_concurrency(requested: Any, server: Mapping[str, Any]) -> tuple[int, str, int | None]:
    """(streams, where the number came from, the server's own slot count or None).

    ``requested``: 0 = the server's slot count (llama-server's ``/props`` ``total_slots``, which is what
    ``-np`` / ``LLAMA_ARG_N_PARALLEL`` or the auto default gave it); 1 = no load phase; N > 1 = N streams.
    """
    if isinstance(requested, bool) or not isinstance(requested, int) or not 0 <= requested <= MAX_CONCURRENCY:
        raise LoadError(f"concurrency: expected a whole number from 0 to {MAX_CONCURRENCY} (0 = the server's slot "
                        f"count, 1 = no load phase), got {requested!r}")
    props = server.get("props") if isinstance(server.get("props"), Mapping) else {}
    slots = props.get("total_slots")
    slots = slots if isinstance(slots, int) and not isinstance(slots, bool) and slots > 0 else None
    if requested:
        return requested, "given", slots
    if slots is None:
        raise LoadError("concurrency: 0 asks for the server's slot count, but the server does not say it (no "
                        "/props total_slots; vLLM has none); give the number of concurrent streams, e.g. "
                        "concurrency: 4 (spec_ab_concurrency)")
    return slots, "the server's /props total_slots", slots


def plan_streams(measured: Mapping[str, list[Prompt]], concurrency: int, bursts: int) -> list[tuple[str, int, list[Prompt]]]:
    """[(shape, burst, one prompt per stream)]: the shape's measured prompts in turn, so that with as many
    prompts as streams every stream of a burst sends a different prompt."""
    plan = []
    for shape, prompts in measured.items():
        for burst in range(bursts):
            plan.append((shape, burst, [prompts[(burst * concurrency + i) % len(prompts)] for i in range(concurrency)]))
    return plan


def _burst(make_client: Callable[[], Any], prompts: list[Prompt], api: str, engine: str,
           model: str | None, origin: float) -> list[dict[str, Any]]:
    """Sends one request per prompt, all at once; one record per stream, in stream order."""
    n = len(prompts)
    barrier = threading.Barrier(n)
    records: list[dict[str, Any]] = [{} for _dummy in range(n)]
    clients = [make_client() for _dummy in range(n)]  # one client each: nothing shared between the threads

    def stream(i: int) -> None:
        rec = records[i]
        try:
            barrier.wait(timeout=60)
        except threading.BrokenBarrierError:  # pragma: no cover - a thread that never started
            rec["error"] = "the streams could not start together"
            return
        rec["started_s"] = time.perf_counter() - origin
        try:
            rec.update(clients[i].complete(prompts[i], api, engine, model))
        except SpecdecError as exc:
            rec["error"] = str(exc)
        rec["ended_s"] = time.perf_counter() - origin

    threads = [threading.Thread(target=stream, args=(i,), daemon=True) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return records


def burst_summary(shape: str, burst: int, streams: list[dict[str, Any]]) -> dict[str, Any]:
    """A burst's aggregate: tokens over wall time, and whether its streams really were in flight together."""
    ok = [s for s in streams if not s.get("error")]
    starts = [s["started_s"] for s in streams if "started_s" in s]
    ends = [s["ended_s"] for s in streams if "ended_s" in s]
    wall = (max(ends) - min(starts)) if starts and ends else None
    tokens = sum(int(s.get("predicted_n") or 0) for s in ok)
    return {
        "shape": shape, "burst": burst, "streams": len(streams), "failed_streams": len(streams) - len(ok),
        "tokens": tokens, "wall_s": round(wall, 6) if wall is not None else None,
        "aggregate_tok_s": tokens / wall if wall and not len(ok) < len(streams) else None,
        # every stream was sent before the first one was answered: all were in flight together (decoded
        # together when the server has as many slots; with fewer, the server queues the rest)
        "overlapped": bool(starts and ends and max(starts) < min(ends)),
    }


def run_load(make_client: Callable[[], Any], server: Mapping[str, Any], api: str, model: str | None,
             measured: Mapping[str, list[Prompt]], requests: list[Mapping[str, Any]], concurrency: int,
             bursts: int = 3, source: str = "given", server_slots: int | None = None,
             watch: Any = None) -> dict[str, Any]:
    """The bench's ``load`` entry: every shape's bursts, their streams, and the gate's verdict.

    ``requests``: the single-stream bench's requests, whose texts are the references of the gate. ``watch``: a
    started ``_busy.BusyWatch``; a burst that ran beside another client's requests is marked ``contaminated`` (its
    aggregate rate left out, its streams marked so the judge leaves their rates out) and counted in ``busy``.
    """
    if isinstance(bursts, bool) or not isinstance(bursts, int) or bursts < 1:
        raise LoadError(f"load_bursts: expected a whole number >= 1, got {bursts!r}")
    engine = server.get("engine") or "llamacpp"
    notes: list[str] = []
    if server_slots is not None and concurrency > server_slots:
        notes.append(f"{concurrency} streams on a server with {server_slots} slot(s): the extra streams queue, "
                     "they are not decoded together")
    origin = time.perf_counter()
    streams: list[dict[str, Any]] = []
    summaries: list[dict[str, Any]] = []
    health_after = None
    contaminated = 0
    for shape, burst, prompts in plan_streams(measured, concurrency, bursts):
        before = watch.reading() if watch is not None else None
        records = _burst(make_client, prompts, api, engine, model, origin)
        summary = burst_summary(shape, burst, records)
        reason = watch.verdict(before, watch.reading(), summary["tokens"]) \
            if watch is not None and not summary["failed_streams"] else None
        if reason is not None:
            contaminated += 1
            summary.update(contaminated=reason, aggregate_tok_s=None)
        for i, (rec, prompt) in enumerate(zip(records, prompts)):
            rec.update(shape=shape, burst=burst, stream=i, prompt_index=prompt.index, prompt_sha256=prompt.sha256)
            if reason is not None:
                rec["contaminated"] = reason
            streams.append(rec)
        summaries.append(summary)
        if any(r.get("error") for r in records):
            try:
                make_client().health()
                health_after = "ok"
            except SpecdecError as exc:
                health_after = str(exc)
            notes.append(f"stopped after {shape} burst {burst}: a stream failed; no further burst was sent")
            break
    load = {
        "schema": LOAD_SCHEMA, "concurrency": concurrency, "concurrency_source": source,
        "server_slots": server_slots, "bursts_per_shape": bursts, "shapes": list(measured),
        "streams": streams, "bursts": summaries, "health_after_failure": health_after,
        "elapsed_s": round(time.perf_counter() - origin, 3), "notes": notes,
    }
    if watch is not None:
        load["busy"] = {"bursts": len(summaries), "contaminated_bursts": contaminated}
        if contaminated:
            notes.append(f"{contaminated} of {len(summaries)} bursts ran beside other clients' requests: their rates "
                         "are left out (contaminated)")
    load["gate"] = gate(load, requests)
    return load


def load_failed(load: Mapping[str, Any] | None) -> bool:
    """True when the server died or stopped answering under load (the bench then fails its task)."""
    return bool(load) and (load.get("gate") or {}).get("status") == FAILED


def measured_prompts(params: Mapping[str, Any], custom: Mapping[str, Any] | None) -> dict[str, list[Prompt]]:
    """shape -> the prompts a bench with these arguments measured (the plan is deterministic)."""
    from ansible_collections.llmfleet.specdec.plugins.module_utils.bench._endpoint import plan_requests

    return plan_requests(params.get("seed", 0), params.get("sizes"), params.get("shapes"),
                         params.get("prompts_per_shape", 1), params.get("repeats", 3), params.get("warmup", 1),
                         params.get("reuse_prompts", False), custom)[2]


def bench_under_load(bench: dict[str, Any], params: Mapping[str, Any], measured: Mapping[str, list[Prompt]],
                     concurrency: int, bursts: int) -> dict[str, Any] | None:
    """spec_bench's hook: the load phase after a finished single-stream bench, added as ``bench["load"]``.

    ``params``: the arguments the bench ran with; ``measured``: its prompts (:func:`measured_prompts`).
    Returns the load entry, or None when ``concurrency`` resolves to 1 (what the bench already did).
    """
    streams, source, slots = resolve_concurrency(concurrency, bench["server"])
    if streams <= 1:
        return None

    def make_client() -> Any:
        # params' endpoint, not bench["endpoint"]: the bench records the URL redacted
        return Endpoint(params.get("endpoint") or bench["endpoint"], timeout=params.get("timeout", 600),
                        validate_certs=params.get("validate_certs", True), api_key=params.get("api_key"),
                        total_timeout=params.get("total_timeout"))

    model = params.get("model") or bench["server"].get("model")
    watch = BusyWatch(make_client(), bench["server"].get("engine") or "llamacpp").start() \
        if params.get("busy_check") else None
    load = run_load(make_client, bench["server"], bench["api"], model, measured, bench["requests"], streams,
                    bursts, source, slots, watch)
    bench["load"] = load
    return load
