# Copyright: (c) 2026, llmfleet.specdec contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# Private to the collection: how long a serving unit's last start and stop took, read from systemd and the journal.
"""A serving unit's last start, timed from what systemd and the journal already recorded (nothing is restarted).

systemd keeps, per unit, the monotonic instants of its last state changes (``systemctl show``):

- ``ActiveExitTimestampMonotonic`` -> ``InactiveEnterTimestampMonotonic``: the last stop (``ExecStop``, the
  signal, the wait for the process to exit);
- ``InactiveExitTimestampMonotonic``: the start began (``ExecStartPre=`` commands run from here);
- ``ExecMainStartTimestampMonotonic``: the server's own process started.

A server that does not notify systemd is "active" at once, so readiness comes from the journal of that one start
(``_SYSTEMD_INVOCATION_ID``): the first line saying the server is ready (llama-server's ``model loaded``,
uvicorn's ``Application startup complete.`` for vLLM), whose ``__MONOTONIC_TIMESTAMP`` is on the same clock.
The journal is read as a stream and abandoned at that line (or after :data:`MAX_LINES`): a long-running
production server's journal is never read whole.
"""
from __future__ import annotations

import json
import re
import subprocess
from typing import Any, Callable, Dict, Iterable, Iterator, List, Mapping, Optional, Sequence, Tuple

from ansible_collections.llmfleet.specdec.plugins.module_utils.common._errors import SpecdecError
from ansible_collections.llmfleet.specdec.plugins.module_utils.systemd._procview import parse_show

__all__ = ["READY_PATTERNS", "SHOW_PROPS", "StartInfoError", "journal_lines", "ready_entry", "start_info",
           "timing_from_show"]

SHOW_PROPS = ("Id", "ActiveState", "InvocationID", "ActiveExitTimestampMonotonic", "InactiveEnterTimestampMonotonic",
              "InactiveExitTimestampMonotonic", "ExecMainStartTimestampMonotonic", "ActiveEnterTimestampMonotonic")
# The line a server prints once it answers /health with 200 (the pinned llama.cpp tree's tools/server/server.cpp
# prints "model loaded" right after it marks itself ready; vLLM's API server is uvicorn).
READY_PATTERNS = {
    "llamacpp": r"\bmodel loaded\s*$",
    "vllm": r"Application startup complete\.",
}
MAX_LINES = 20000
_US = 1_000_000

JournalReader = Callable[[str], Iterable[str]]
Runner = Callable[[List[str]], Tuple[int, str, str]]


class StartInfoError(SpecdecError):
    """The unit's start cannot be read (bad input, systemctl failing)."""


def _mono(props: Mapping[str, str], name: str) -> Optional[int]:
    value = (props.get(name) or "").strip()
    return int(value) if value.isdigit() and int(value) > 0 else None


def timing_from_show(props: Mapping[str, str]) -> Dict[str, Any]:
    """What ``systemctl show`` alone says: the instants (microseconds, monotonic) and the last stop's seconds."""
    began = _mono(props, "InactiveExitTimestampMonotonic")
    main = _mono(props, "ExecMainStartTimestampMonotonic")
    stop_began = _mono(props, "ActiveExitTimestampMonotonic")
    stopped = _mono(props, "InactiveEnterTimestampMonotonic")
    stop_s = None
    # the last stop is the one before the current start (a unit stopped for good has no start after it)
    if stop_began and stopped and began and stop_began <= stopped <= began:
        stop_s = round((stopped - stop_began) / _US, 3)
    pre_s = round((main - began) / _US, 3) if began and main and main >= began else None
    return {"began_us": began, "main_started_us": main, "stop_s": stop_s, "pre_s": pre_s,
            "invocation_id": (props.get("InvocationID") or "").strip() or None,
            "active_state": (props.get("ActiveState") or "").strip() or None}


def _message(entry: Mapping[str, Any]) -> str:
    message = entry.get("MESSAGE")
    if isinstance(message, list):  # journalctl -o json writes a message that is not UTF-8 as its bytes
        try:
            return bytes(int(b) & 0xFF for b in message).decode("utf-8", errors="replace")
        except (TypeError, ValueError):
            return ""
    return message if isinstance(message, str) else ""


def ready_entry(lines: Iterable[str], pattern: str, max_lines: int = MAX_LINES) -> Tuple[Optional[int], Optional[str], int]:
    """(monotonic microseconds, message) of the first journal entry (``journalctl -o json`` lines) whose message
    matches ``pattern``, and how many lines were read; (None, None, n) when none of the first ``max_lines`` does."""
    regex = re.compile(pattern)
    read = 0
    for line in lines:
        read += 1
        if read > max_lines:
            break
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if not isinstance(entry, dict):
            continue
        text = _message(entry)
        if regex.search(text):
            mono = str(entry.get("__MONOTONIC_TIMESTAMP", "")).strip()
            return (int(mono) if mono.isdigit() else None), text.strip()[:300], read
    return None, None, min(read, max_lines)


def journal_lines(invocation_id: str) -> Iterator[str]:
    """The journal of one invocation of a unit, oldest first, as ``-o json`` lines, streamed (the caller stops
    reading when it found what it wanted; the process is ended then)."""
    argv = ["journalctl", f"_SYSTEMD_INVOCATION_ID={invocation_id}", "-o", "json", "--no-pager",
            "--output-fields=MESSAGE,__MONOTONIC_TIMESTAMP"]
    try:
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                                errors="replace")
    except OSError:
        return
    try:
        if proc.stdout is not None:
            yield from proc.stdout
    finally:
        proc.kill()
        proc.wait()


def start_info(unit: str, engine: str, run: Runner, read_journal: JournalReader = journal_lines,
               ready_pattern: Optional[str] = None, max_lines: int = MAX_LINES) -> Dict[str, Any]:
    """The unit's last start and stop, timed: ``load_s`` (start began -> ready line), ``pre_s`` (the
    ``ExecStartPre=`` part of it), ``stop_s``, ``ready_line`` and ``source``; ``load_s`` is None with ``note``
    saying why when the journal of that start holds no ready line."""
    if not isinstance(unit, str) or not unit.strip() or "\n" in unit:
        raise StartInfoError(f"unit: expected a unit name, got {unit!r}")
    pattern = ready_pattern or READY_PATTERNS.get(engine)
    if not pattern:
        raise StartInfoError(f"engine: expected one of {', '.join(READY_PATTERNS)} (or give ready_pattern), got {engine!r}")
    try:
        re.compile(pattern)
    except re.error as exc:
        raise StartInfoError(f"ready_pattern: {pattern!r} is not a regular expression: {exc}") from None
    argv = ["systemctl", "show", unit]
    for prop in SHOW_PROPS:
        argv += ["-p", prop]
    rc, out, err = run(argv)
    if rc != 0:
        raise StartInfoError(f"`{' '.join(argv)}` failed (rc {rc}): {(err or out).strip()[-400:]}")
    parsed = parse_show(out)
    props = {name: (parsed.get(name) or [""])[-1] for name in SHOW_PROPS}
    info = timing_from_show(props)
    info.update(unit=props.get("Id") or unit, load_s=None, ready_line=None, lines_read=0, pattern=pattern,
                source=None, note=None)
    if not info["began_us"] or not info["invocation_id"]:
        info["note"] = f"{info['unit']} has not been started since boot (no InvocationID or start time in systemd)"
        return info
    ready_us, line, read = ready_entry(read_journal(info["invocation_id"]), pattern, max_lines)
    info["lines_read"] = read
    if ready_us is None:
        info["note"] = (f"no line matching {pattern!r} in the first {read} journal lines of {info['unit']}'s last start "
                        f"(invocation {info['invocation_id']}): the journal was rotated, or the server logs elsewhere")
        return info
    if ready_us < info["began_us"]:
        info["note"] = "the ready line is older than the start (a clock or journal mismatch); not used"
        return info
    info.update(load_s=round((ready_us - info["began_us"]) / _US, 3), ready_line=line,
                source=f"the journal of {info['unit']}'s last start (invocation {info['invocation_id']})")
    return info


def model_sizes(paths: Sequence[str], stat: Callable[[str], Any]) -> Dict[str, Optional[int]]:
    """path -> size in bytes (None where the file cannot be read): what a config's load scales with."""
    sizes: Dict[str, Optional[int]] = {}
    for path in paths:
        if not isinstance(path, str) or not path:
            continue
        try:
            sizes[path] = int(stat(path).st_size)
        except (OSError, ValueError, TypeError):
            sizes[path] = None
    return sizes
