# Copyright: (c) 2026, llmfleet.specdec contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# Private to the collection: what ran, kept as the way back while a forced run goes ahead past a pending change.
"""The way back is what ran, not what is on disk.

A run forced past a change pending on disk (``specdec_force=true``: the env file edited by hand, a deploy that waits
for the next restart, a unit file not reloaded) would otherwise make that change its way back: every restore removes
the A/B's drop-in and restarts the unit, which then starts the pending change, never the process that ran (and an
edit that cannot start leaves production down).

So, before the first change, ``unit_override keep_what_runs=true`` writes the *pin*: the runtime drop-in
``/run/systemd/system/<unit>.d/zy-llmfleet-specdec-ran.conf`` (0600), read from the running process itself
(``/proc/<MainPID>``):

- ``Environment=`` and ``EnvironmentFile=`` emptied (a drop-in's empty assignment drops the unit's own, the pending
  env file too), then one ``Environment=`` line per variable the process runs with (systemd's own per-start
  variables left out, systemd sets them again), each quoted so systemd hands back exactly that value;
- when the command line or the build differs too: ``ExecStart=`` emptied and the running command line, its program
  the binary that runs (``/proc/<pid>/exe``, a build that was switched on disk stays the one that ran).

It sorts before the A/B's ``zz-llmfleet-specdec.conf`` (a candidate's variables and command line still win) and
after an operator's ``override.conf``. Every way back restarts on it: this module's restore, the dead-man's script,
``rollback.yml``. Once production answered health on it, the pin goes (and systemd reloads, without a restart): the
host is as before the run, what ran running and the pending change still pending on disk, for the operator.

What the pin does not keep: other settings a pending unit file changes (``User=``, limits, ``ExecStartPre=``) come
from the disk; a binary removed since it started cannot be pinned (refused, before any change).
"""
from __future__ import annotations

import ast
import json
import os
from typing import Dict, List, Mapping, Sequence

from ansible_collections.llmfleet.specdec.plugins.module_utils.common._errors import SpecdecError
from ansible_collections.llmfleet.specdec.plugins.module_utils.systemd import _deadman
from ansible_collections.llmfleet.specdec.plugins.module_utils.systemd import _serving_unit as live_unit
from ansible_collections.llmfleet.specdec.plugins.module_utils.systemd._execstart import (
    UnitSyntaxError,
    quote_environment,
    quote_exec_argv,
)
from ansible_collections.llmfleet.specdec.plugins.module_utils.systemd._procview import ProcView
from ansible_collections.llmfleet.specdec.plugins.module_utils.systemd._systemd import OverridePaths, Runner, UnitOverrideError

# What systemd sets for each start of a service (systemd.exec(5), "Environment Variables in Spawned Processes"):
# never pinned, the next start gets its own.
PER_START = frozenset((
    "INVOCATION_ID", "JOURNAL_STREAM", "SYSTEMD_EXEC_PID", "MANAGERPID", "NOTIFY_SOCKET", "LISTEN_PID", "LISTEN_FDS",
    "LISTEN_FDNAMES", "WATCHDOG_PID", "WATCHDOG_USEC", "MAINPID", "RUNTIME_DIRECTORY", "STATE_DIRECTORY",
    "CACHE_DIRECTORY", "LOGS_DIRECTORY", "CONFIGURATION_DIRECTORY", "CREDENTIALS_DIRECTORY", "MEMORY_PRESSURE_WATCH",
    "MEMORY_PRESSURE_WRITE", "SERVICE_RESULT", "EXIT_CODE", "EXIT_STATUS", "MONITOR_SERVICE_RESULT",
    "MONITOR_EXIT_CODE", "MONITOR_EXIT_STATUS", "MONITOR_INVOCATION_ID", "MONITOR_UNIT", "TRIGGER_UNIT",
    "TRIGGER_PATH", "TRIGGER_TIMER_REALTIME_USEC", "TRIGGER_TIMER_MONOTONIC_USEC", "PIDFILE", "REMOTE_ADDR",
    "REMOTE_PORT", "FDSTORE",
))

# A build switch's own pin (llamacpp_activate keep_what_runs): its record and its dead-man own it, so the A/B's
# restore and rollback.yml leave it to them.
BUILD_PIN_NAME = "zy-llmfleet-specdec-build-ran.conf"
# A unit file's redeploy (unit_deploy keep_what_runs): its record and its dead-man own it, written on the way back only.
DEPLOY_PIN_NAME = "zy-llmfleet-specdec-deploy-ran.conf"

# Differences (serving_unit_info's pending_changes) that make the pin keep the command line too.
COMMAND_KINDS = ("command line", "build")


def _read(proc: str, pid: int, name: str) -> bytes | None:
    try:
        with open(os.path.join(proc, str(pid), name), "rb") as handle:
            return handle.read()
    except OSError:
        return None


def running_environ(proc: str, pid: int) -> Dict[str, str] | None:
    """The process's environment byte for byte (a byte that is not UTF-8 kept by surrogateescape); None unreadable."""
    raw = _read(proc, pid, "environ")
    if raw is None:
        return None
    env: Dict[str, str] = {}
    for item in raw.split(b"\x00"):
        name, sep, value = item.decode("utf-8", "surrogateescape").partition("=")
        if sep and name not in PER_START:
            env[name] = value
    return env


def running_command(proc: str, pid: int) -> List[str]:
    """The running command line, its program the binary that runs (a build switched on disk is not followed)."""
    raw = _read(proc, pid, "cmdline") or b""
    argv = [part.decode("utf-8", "surrogateescape") for part in raw.split(b"\x00")[:-1]]
    if not argv:
        raise UnitOverrideError(f"the command line of pid {pid} cannot be read ({proc}/{pid}/cmdline)")
    try:
        exe = os.readlink(os.path.join(proc, str(pid), "exe"))
    except OSError:
        exe = None
    if exe and exe.endswith(" (deleted)"):
        raise UnitOverrideError(f"pid {pid} runs {exe[:-10]}, which was replaced or removed on disk since it started: "
                                "what ran cannot be started again, so it cannot be the way back")
    if exe and os.path.isabs(argv[0]) and os.path.realpath(argv[0]) != exe and os.path.exists(exe):
        argv[0] = exe
    return argv


def render(unit: str, pid: int, env: Dict[str, str], argv: Sequence[str] | None, pending: str) -> str:
    """The pin's text; a value systemd could not hand back exactly is an error (nothing written yet)."""
    lines = [f"# Written by llmfleet.specdec: what {unit} ran (pid {pid}) before a run forced past a change pending",
             "# on disk; every way back restarts on it, and it goes once production answered health on it.",
             "# Pending: " + " ".join(pending.split())[:400].replace("\\", "/"),
             "[Service]", "Environment=", "EnvironmentFile="]
    try:
        lines += [f"Environment={quote_environment(name, value)}" for name, value in sorted(env.items())]
        if argv is not None:
            lines += ["ExecStart=", "ExecStart=" + quote_exec_argv(argv)]
    except UnitSyntaxError as exc:
        raise UnitOverrideError(f"what {unit} runs (pid {pid}) cannot be kept as the way back: {exc}") from None
    return "\n".join(lines) + "\n"


def keep(paths: OverridePaths, proc: str, pid: int, pending_kinds: Sequence[str], pending: str) -> str:
    """The pin for the process ``pid`` (read now), not written: the caller writes it once its dead-man is armed."""
    env = running_environ(proc, pid)
    if not env:
        raise UnitOverrideError(f"the environment of pid {pid} ({paths.unit}) cannot be read ({proc}/{pid}/environ): "
                                "what runs cannot be kept as the way back; nothing was changed")
    argv = running_command(proc, pid) if any(kind in COMMAND_KINDS for kind in pending_kinds) else None
    return render(paths.unit, pid, env, argv, pending)


def _ours_in_place(paths: OverridePaths, info: Mapping[str, str]) -> bool:
    """A pin, a dead-man's script or the A/B's drop-in in place: what runs is a candidate, or the way back is kept."""
    return (os.path.exists(paths.pin) or os.path.exists(paths.script)
            or paths.dropin_in_place(info.get("DropInPaths", "")))


def _environment_only(info: Mapping[str, str], base: Mapping[str, str], proc: str, pid: int,
                      why: str) -> Dict[str, object]:
    """``pending_changes`` for a unit this collection cannot read (``why``): each variable systemd gives the unit
    (``base``: Environment= and EnvironmentFile=) against the running process's, and unit files not loaded. A variable
    only the process has is not compared: without the unit's command line, a wrapper's own cannot be told apart."""
    differences: List[Dict[str, str]] = []
    if info.get("NeedDaemonReload") == "yes":
        differences.append({"what": "unit files", "detail": "the unit's files changed on disk since systemd loaded "
                            "them (NeedDaemonReload=yes)"})
    environ = ProcView(proc).environ(pid)
    if environ:  # empty: unreadable or gone
        names = sorted(n for n in base if environ.get(n) != base[n])
        differences += [{"what": "environment", "detail": f"{name}: running {live_unit.shown_value(name, environ.get(name))}, "
                         f"next start {live_unit.shown_value(name, base.get(name))}"} for name in names]
    return {"compared": True, "why": f"the unit's command line and build were not compared: {why}",
            "differences": differences}


def pending_now(paths: OverridePaths, info: Mapping[str, str], run: Runner, proc: str, run_dir: str,
                base: Mapping[str, str]) -> Dict[str, object] | None:
    """What a restart of production would start that its running process does not run (serving_unit_info's
    ``pending_changes``, the check role spec_ab makes before its lock), read now, before any change. None when
    there is nothing to compare: production not running, or this collection's drop-in, pin or dead-man in place (a
    candidate runs, or the way back is kept already). A unit ``read_unit`` cannot read is compared by its
    environment (``base``) and ``NeedDaemonReload`` only."""
    pid = int(info.get("MainPID") or 0)
    if not pid or info.get("ActiveState") not in ("active", "reloading") or _ours_in_place(paths, info):
        return None
    try:
        live = live_unit.read_unit(paths.unit, run, proc=proc, run_dir=run_dir)
    except SpecdecError as exc:
        return _environment_only(info, base, proc, pid, str(exc))
    return live_unit.pending_changes(live, proc=proc)


def needed(paths: OverridePaths, info: Mapping[str, str], run: Runner, proc: str, run_dir: str,
           command: bool = True) -> str | None:
    """Production running and no pin yet: the pin of what runs when a restart would start something else (read
    now, before any change; an error names what cannot be kept), else None. ``command=False``: the environment
    only (a build switch changes the binary on purpose)."""
    pid = int(info.get("MainPID") or 0)
    if not pid or _ours_in_place(paths, info):
        return None
    try:
        live = live_unit.read_unit(paths.unit, run, proc=proc, run_dir=run_dir)
    except SpecdecError as exc:
        raise UnitOverrideError(f"keep_what_runs: {exc}; nothing was changed") from None
    pending = live_unit.pending_changes(live, proc=proc)
    if not pending["differences"]:
        return None
    kinds = [d["what"] for d in pending["differences"]] if command else ["environment"]
    return keep(paths, proc, pid, kinds, live_unit.pending_text(pending))


# The module's ways past a change pending on disk (unit_override keep_what_runs, apply_pending).
WAY_ON = ("set keep_what_runs=true to go ahead with what runs kept as every way back (the change stays pending on disk), "
          "or apply_pending=true to start the change on disk knowingly")


def check_options(params: Mapping[str, object]) -> None:
    """unit_override's options about a change pending on disk, checked before anything is read or changed."""
    state, every_unit = params.get("state"), params.get("unit") == "*"
    if params.get("try_pending") and (state == "confirmed" or every_unit
                                      or (state == "present" and not params.get("keep_what_runs"))):
        raise SpecdecError("try_pending=true goes with state=present and keep_what_runs=true (the trial), or with "
                           "state=absent on one unit (production restarted on the committed disk)")
    if params.get("apply_pending") and params.get("keep_what_runs"):
        raise SpecdecError("apply_pending=true and keep_what_runs=true say opposite things about a change pending on "
                           "disk (start it, or keep what runs as the way back); set only one of them")


def start_from_running(paths: OverridePaths, info: Mapping[str, str], run: Runner, proc: str, run_dir: str,
                       base: Mapping[str, str] | None, *, keep: bool, apply: bool) -> str | None:
    """Before a restart of production (unit_override, check mode too): with ``keep`` the pin of what runs when one is
    needed (``needed``); with ``apply`` nothing (the restart starts the disk, as asked); else a restart that would
    start something else than what runs (``pending_now``) is refused naming the difference and both options."""
    if keep:
        return needed(paths, info, run, proc, run_dir)
    if apply:
        return None
    pending = pending_now(paths, info, run, proc, run_dir, base or {})
    if pending and pending["differences"]:
        raise UnitOverrideError(live_unit.refuse_pending(paths.unit, pending, way_on=WAY_ON))
    return None


def put_back(units: Sequence[Mapping[str, str]]) -> bool:
    """The pins a build switch's record keeps (``pin``, ``pin_text``), written where they are gone; True when one
    was (the caller reloads systemd)."""
    wrote = False
    for unit in units:
        if unit.get("pin_text") and not os.path.exists(unit["pin"]):
            _deadman.ensure_private_dir(os.path.dirname(unit["pin"]))
            _deadman.write_private(unit["pin"], unit["pin_text"], 0o600)
            wrote = True
    return wrote


def drop(units: Sequence[Mapping[str, str]]) -> bool:
    """Those pins removed once production answered on them; True when one was (the caller reloads systemd)."""
    gone = False
    for unit in units:
        if unit.get("pin_text") and _deadman.unlink(unit["pin"]):
            gone = True
            try:
                _deadman.rmdir(os.path.dirname(unit["pin"]))
            except OSError:
                pass
    return gone


def write(paths: OverridePaths, text: str) -> None:
    _deadman.ensure_private_dir(paths.dropin_dir)
    _deadman.write_private(paths.pin, text, 0o600)


def remove(paths: OverridePaths) -> bool:
    """The pin gone (True when there was one); the caller reloads systemd."""
    gone = _deadman.unlink(paths.pin)
    try:
        _deadman.rmdir(paths.dropin_dir)
    except OSError:
        pass
    return gone


def current(paths: OverridePaths) -> str | None:
    """The pin in place (its text), else what the armed dead-man's script keeps of it (a restore cut between the
    pin's removal and the script's: the script puts it back before its restart, and so does the next restore)."""
    try:
        with open(paths.pin, encoding="utf-8", errors="surrogateescape") as handle:
            return handle.read()
    except OSError:
        pass
    try:
        with open(paths.script, encoding="utf-8", errors="surrogateescape") as handle:
            line = next((line for line in handle if line.startswith("CONFIG = json.loads(")), "")
        return json.loads(ast.literal_eval(line.strip()[len("CONFIG = json.loads("):-1])).get("pin_text") or None
    except (OSError, ValueError, SyntaxError, AttributeError):
        return None
