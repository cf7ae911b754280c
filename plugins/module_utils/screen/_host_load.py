# Copyright: (c) 2026, llmfleet.specdec contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# Private to the collection: the host's other work while the screen times something, and the spread of repeated timings.
"""Whether a timing the screen took can be trusted: the host's other work around it, and the spread of its repeats.

A timing is the cost plus whatever else the host was doing. Two cheap readings say when that was a lot:

- :class:`HostLoad`: ``/proc/loadavg`` before and after, and the CPU the host spent on anything but the
  processes the screen knows (production, the screen itself, the side server it started), from ``/proc/stat`` and
  each known process's ``/proc/<pid>/stat``; a phase during which others took half a core or more on average is
  ``busy``.
- :func:`spread`: the fastest, median and slowest of one timing's repeats; repeats whose median is far above
  their fastest, or one of them several times the fastest, say that the host was busy for some of them (busy time
  only ever adds), whatever the load readings say.

Reading only; nothing here decides a screen-out (``_screen`` does, from counts and the fastest repeats).
"""
from __future__ import annotations

import os
import time
from typing import Any, Callable, Dict, List, Mapping, Sequence

# others' CPU, in cores on average over a phase, from which the phase's timings are marked busy
OTHER_CORES_BUSY = 0.5
# the spread of one timing's repeats that says some ran while the host was busy
MEDIAN_OVER_FASTEST = 1.5
SLOWEST_OVER_FASTEST = 3.0


def spread(samples: Sequence[float], what: str) -> Dict[str, Any]:
    """``n``, ``fastest``, ``median``, ``slowest`` of a timing's repeats, and ``busy`` with ``why`` when their
    spread says the host was busy for some of them: the median above :data:`MEDIAN_OVER_FASTEST` times the fastest,
    or one repeat above :data:`SLOWEST_OVER_FASTEST` times it (e.g. four steps near 13 ms and four at 520-830 ms:
    busy, not a 268 ms step). Fewer than two repeats cannot show a spread: ``busy`` is False and ``why`` says so."""
    values = sorted(float(v) for v in samples if v is not None)
    if not values:
        return {"n": 0, "fastest": None, "median": None, "slowest": None, "busy": False, "why": f"{what}: no samples"}
    mid = len(values) // 2
    median = values[mid] if len(values) % 2 else 0.5 * (values[mid - 1] + values[mid])
    out: Dict[str, Any] = {"n": len(values), "fastest": values[0], "median": median, "slowest": values[-1],
                           "busy": False, "why": None}
    if len(values) < 2:
        out["why"] = f"{what}: one sample, no spread to read"
        return out
    if values[0] <= 0:
        out.update(busy=True, why=f"{what}: a sample of {values[0]:.3g} ms is not a timing")
    elif median > MEDIAN_OVER_FASTEST * values[0]:
        out.update(busy=True, why=f"{what}: median {median:.3g} ms is {median / values[0]:.1f}x its fastest "
                                  f"{values[0]:.3g} ms over {len(values)} repeats (the host was busy for some)")
    elif values[-1] > SLOWEST_OVER_FASTEST * values[0]:
        out.update(busy=True, why=f"{what}: slowest {values[-1]:.3g} ms is {values[-1] / values[0]:.1f}x its fastest "
                                  f"{values[0]:.3g} ms over {len(values)} repeats (the host was busy for some)")
    return out


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return handle.read()
    except OSError:
        return None


def cpu_ticks(text: str | None) -> tuple[int, int] | None:
    """(total, busy) clock ticks of all CPUs from ``/proc/stat``'s ``cpu`` line (busy: all but idle and iowait)."""
    for line in (text or "").splitlines():
        parts = line.split()
        if parts and parts[0] == "cpu" and len(parts) >= 5:
            try:
                values = [int(p) for p in parts[1:]]
            except ValueError:
                return None
            total = sum(values[:8])  # guest time is already in user
            return total, total - values[3] - (values[4] if len(values) > 4 else 0)
    return None


def pid_ticks(text: str | None) -> int | None:
    """utime + stime of one process from ``/proc/<pid>/stat`` (its name may hold spaces and parentheses)."""
    if not text or ")" not in text:
        return None
    rest = text.rsplit(")", 1)[1].split()
    try:
        return int(rest[11]) + int(rest[12])
    except (IndexError, ValueError):
        return None


class HostLoad:
    """The host's other work over one phase of the screen: :meth:`start`, then :meth:`stop` gives the reading.

    ``ports``: where the servers it times listen (production, a side server, the copy); their processes' CPU, the
    screen's own and that of ``pids`` (called at start and at stop) is the screen's business, everything else is
    the host's other work. A port whose process cannot be found here (another network or PID namespace) leaves its
    CPU among the others': the reading is then not judged (``busy`` False, ``why`` says so)."""

    def __init__(self, what: str, pids: Callable[[], Sequence[int]] = lambda: (), proc: str = "/proc",
                 clock: Callable[[], float] = time.monotonic, ports: Sequence[int] = ()) -> None:
        self.what, self.pids, self.proc, self.clock, self.ports = what, pids, proc, clock, [int(p) for p in ports]
        self.before: Dict[str, Any] = {}

    def _snapshot(self) -> Dict[str, Any]:
        by_port = {port: pids_on_port(port, self.proc) for port in self.ports}
        known = sorted({os.getpid(), *[int(p) for p in self.pids() or ()], *[p for v in by_port.values() for p in v]})
        ticks = {pid: pid_ticks(_read(os.path.join(self.proc, str(pid), "stat"))) for pid in known}
        load = (_read(os.path.join(self.proc, "loadavg")) or "").split()
        return {"cpu": cpu_ticks(_read(os.path.join(self.proc, "stat"))), "pids": ticks,
                "loadavg": float(load[0]) if load else None, "t": self.clock(),
                "unseen": [port for port, found in by_port.items() if not found]}

    def start(self) -> HostLoad:
        self.before = self._snapshot()
        return self

    def stop(self) -> Dict[str, Any]:
        return reading(self.what, self.before, self._snapshot(), os.cpu_count() or 1)


def reading(what: str, before: Mapping[str, Any], after: Mapping[str, Any], cpus: int) -> Dict[str, Any]:
    """One phase's reading: ``loadavg_before``/``_after``, ``other_cores`` (others' CPU in cores on average; None
    when /proc/stat is not readable), ``busy`` and ``why``."""
    out: Dict[str, Any] = {"phase": what, "loadavg_before": before.get("loadavg"), "loadavg_after": after.get("loadavg"),
                           "seconds": round(float(after.get("t", 0.0)) - float(before.get("t", 0.0)), 3),
                           "other_cores": None, "busy": False, "why": None}
    cpu0, cpu1 = before.get("cpu"), after.get("cpu")
    if not cpu0 or not cpu1 or cpu1[0] <= cpu0[0]:
        out["why"] = f"{what}: /proc/stat not readable here, the host's other work was not measured"
        return out
    total, busy = cpu1[0] - cpu0[0], cpu1[1] - cpu0[1]
    own = 0
    pids0: Mapping[int, Any] = before.get("pids") or {}
    for pid, ticks in (after.get("pids") or {}).items():
        start = pids0.get(pid)
        if isinstance(ticks, int) and isinstance(start, int) and ticks >= start:
            own += ticks - start
        elif isinstance(ticks, int) and start is None:
            own += ticks  # started during the phase (a side server): all of its CPU is the phase's
    wall = total / max(int(cpus), 1)  # ticks of one CPU over the phase
    other = max(busy - own, 0) / wall if wall > 0 else 0.0
    out["other_cores"] = round(other, 3)
    unseen = sorted({*(before.get("unseen") or ()), *(after.get("unseen") or ())})
    if unseen:
        out["why"] = (f"{what}: no process listening on port {', '.join(str(p) for p in unseen)} is visible here, so "
                      "its CPU cannot be told from other work: the host's load is not judged")
    elif other >= OTHER_CORES_BUSY:
        out.update(busy=True, why=f"{what}: other processes took {other:.2f} cores on average while it was timed "
                                  f"(load average {out['loadavg_before']} before, {out['loadavg_after']} after)")
    return out


def pids_on_port(port: int, proc: str = "/proc") -> List[int]:
    """The processes listening on a loopback or any-address TCP port (production, a side server)."""
    from ansible_collections.llmfleet.specdec.plugins.module_utils.systemd._procview import ProcView

    try:
        view = ProcView(proc)
        return list(view.socket_owners(view.listening_inodes(int(port))))
    except (OSError, ValueError):
        return []


def production_spreads(step_ms: Sequence[float], verify_samples: Mapping[int, Sequence[float]]) -> Dict[str, Any]:
    """The spread of production's step samples and of each verification batch's repeats (``_host_load.spread``)."""
    return {"step": spread(step_ms, "production's step"),
            "verify": {str(b): spread(v, f"production's verification batch of {b}")
                       for b, v in sorted(verify_samples.items(), key=lambda item: int(item[0]))}}


def drafter_spreads(name: str, d_s: Sequence[float], prefill_samples: Mapping[int, Sequence[float]]) -> Dict[str, Any]:
    """The spread of a draft model's step samples and of its side server's prefill batches."""
    return {"step": spread(d_s, f"{name}'s drafter step"),
            "prefill": {str(b): spread(v, f"{name}'s drafter prefill of {b}")
                        for b, v in sorted(prefill_samples.items(), key=lambda item: int(item[0]))}}


def busy_reasons(found: Any) -> List[str]:
    """Every ``why`` of a reading marked ``busy`` in a spread, a load reading, or a dict or list of them; the load
    readings of one phase taken several times (the copy of the target, started once per depth) in one line."""
    out: List[str] = []
    phases: Dict[str, List[Mapping[str, Any]]] = {}

    def walk(item: Any) -> None:
        if isinstance(item, Mapping):
            if "busy" in item:
                if item["busy"] and "phase" in item and "other_cores" in item:
                    phases.setdefault(str(item["phase"]), []).append(item)
                elif item["busy"]:
                    out.append(str(item["why"]))
                return
            sized = [(k, v) for k, v in item.items() if str(k).isdigit() and isinstance(v, Mapping) and v.get("busy")]
            if len(sized) > 1 and all(str(k).isdigit() for k in item):
                # one timing's batch sizes (production's verification, a drafter's prefill): one line
                worst = max(sized, key=lambda kv: float(kv[1].get("slowest") or 0.0) / float(kv[1].get("fastest") or 1.0))
                out.append(f"{len(sized)} batch sizes ({', '.join(str(k) for k, _v in sized)}) spread over their "
                           f"repeats, the worst {worst[1]['why']}")
                return
            for value in item.values():
                walk(value)
        elif isinstance(item, (list, tuple)):
            for value in item:
                walk(value)

    walk(found)
    for phase, readings in phases.items():
        if len(readings) == 1:
            out.append(str(readings[0]["why"]))
            continue
        cores = sorted(float(r["other_cores"]) for r in readings)
        out.append(f"{phase}: other processes took {cores[0]:.2f}-{cores[-1]:.2f} cores on average in {len(readings)} "
                   f"of its timings (load average up to "
                   f"{max(float(r.get('loadavg_after') or 0.0) for r in readings):.2f})")
    return out
