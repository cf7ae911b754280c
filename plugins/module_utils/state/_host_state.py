# Copyright: (c) 2026, llmfleet.specdec contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# Private to the collection: the host's own A/B state (safe path names, history lines) and the per-unit A/B lock.
"""The host is the source of truth for its A/B runs, so two things live here, on the host, stdlib only.

State directory (``/var/lib/llmfleet-specdec`` by default, root-owned)::

    runs/<run id>/partial.json     after every measured config
    runs/<run id>/report.json      the judged run (and report.md)
    history.jsonl                  one line per judged run
    promoted/<unit>.json           the evidence of the last promotion
    locks/<unit>.json              the A/B lock of a unit (this module)
    locks/<unit>.guard             flock() target that serialises deciding about that lock

The lock. A run holds ``locks/<unit>.json`` while it changes the unit. Creating it is an ``O_EXCL``-style
``link()`` of a fully written temporary file (a unique name, so no leftover can block it), so nobody ever reads
half a record. Every decision about the lock (free, ours, stale, someone else's) is taken while holding
``flock(LOCK_EX)`` on ``locks/<unit>.guard`` (waited for with a bound, never forever), so two runs that both find
a dead run's lock cannot both take it over; the kernel drops an flock when its process dies, so a killed taker
never blocks the next one.

A lock is stale only while the unit's dead-man is not armed (a dead run's candidate may still serve: its timer
restores production first), and then when its expiry passed, or when its holder is provably gone: the record
names the controller's boot id, pid namespace, pid and that process's start time, and this host shares the
boot and the namespace (a controller on the host itself) but that pid is gone or belongs to a later process. A
host name proves nothing (every container of one image shares it), so it is only shown, never trusted.

``query`` answers, without changing anything, whether a run holds the unit's lock and whether an override of
``unit_override`` is live in /run (``playbooks/tasks/require_unit_free.yml``).

History. ``history.jsonl`` gets one line per judged run, keyed by its unit and run id, appended (or the same
run's line replaced) under ``flock`` of ``history.lock``, mode 0600: two runs on two units of one host never
lose each other's line, and promote and the watch read a unit's own lines.
"""
from __future__ import annotations

import datetime as _dt
import fcntl
import glob
import json
import os
import re
import tempfile
import time
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from ansible_collections.llmfleet.specdec.plugins.module_utils.common._errors import SpecdecError
from ansible_collections.llmfleet.specdec.plugins.module_utils.systemd._systemd import DEPLOY_PREFIX, override_paths, service_name

# The longest a decision about the lock waits for the guard held by another process (a decision takes
# milliseconds; a process stuck holding it longer is named, never waited for without end).
GUARD_WAIT = 30

LOCK_SCHEMA = "llmfleet.specdec/ab-lock/1"
DEFAULT_STATE_DIR = "/var/lib/llmfleet-specdec"
_SAFE_COMPONENT = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@+-]{0,127}\Z")

Runner = Callable[[Sequence[str]], Tuple[int, str, str]]


class LockHeldError(SpecdecError):
    """Another live run holds the unit's lock; ``holder`` is its record."""

    def __init__(self, msg: str, holder: Mapping[str, Any]) -> None:
        super().__init__(msg)
        self.holder = dict(holder)


def safe_path_component(value: Any, what: str) -> str:
    """A host name, run id or unit usable as one path component on the host: no separator, no '..'.

    The same rule as the controller's results folders use (letters, digits and ``. _ @ + -``), kept here so
    host code needs nothing from the controller side.
    """
    text = "" if value is None else str(value)
    if not _SAFE_COMPONENT.match(text) or ".." in text:
        raise SpecdecError(f"{what}: {text!r} cannot name a results folder or a file under the state directory; "
                           "use letters, digits and . _ @ + - (no '/' and no '..'), at most 128 characters")
    return text


def merge_history(existing: str, line: str) -> str:
    """history.jsonl with ``line`` appended, or replacing the line of an earlier report of the same run (the same
    run id, and the same unit when both lines name one).

    Lines that are not JSON are kept as they are: the history belongs to the operator, not to this code.
    """
    try:
        new = json.loads(line)
        run_id, unit = new.get("run_id"), new.get("unit")
    except (ValueError, AttributeError):
        raise SpecdecError(f"history line is not a JSON object: {line[:80]!r}") from None
    out: List[str] = []
    replaced = False
    for text in existing.splitlines():
        try:
            old = json.loads(text)
            same = run_id is not None and old.get("run_id") == run_id and (
                unit is None or old.get("unit") in (None, unit))
        except (ValueError, AttributeError):
            same = False
        if same and not replaced:
            out.append(line)
            replaced = True
        elif not same:
            out.append(text)
    if not replaced:
        out.append(line)
    return "\n".join(out) + "\n"


# ------------------------------------------------------------------ the lock


def iso(epoch: float) -> str:
    return _dt.datetime.fromtimestamp(int(epoch), tz=_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def lock_paths(state_dir: str, unit: str) -> Tuple[str, str]:
    """(the lock record, the guard file) of ``unit`` under ``state_dir``."""
    if not os.path.isabs(state_dir):
        raise SpecdecError(f"state_dir {state_dir!r} must be an absolute path, for example {DEFAULT_STATE_DIR}")
    stem = service_name(unit)[: -len(".service")]
    locks = os.path.join(state_dir, "locks")
    return os.path.join(locks, stem + ".json"), os.path.join(locks, stem + ".guard")


def describe(record: Mapping[str, Any]) -> str:
    """'run R from controller C (pid P), started S' for messages."""
    return (f"run {record.get('run_id', '?')} from controller {record.get('controller', '?')} "
            f"(pid {record.get('pid', '?')}), started {record.get('started', '?')}")


def read_record(path: str) -> Optional[Dict[str, Any]]:
    """The lock record, None when there is none; a file that is not a record reads as an empty dict."""
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def armed_timers(unit: str, run: Runner) -> List[str]:
    """The unit's dead-man timers that wait to fire (its rollback timer, the bridge of a re-arm, or unit_deploy's,
    which puts the previous files back): while one does, a dead run's candidate or unverified files may serve."""
    paths = override_paths(service_name(unit))
    timers = [paths.timer, paths.bridge_unit + ".timer", DEPLOY_PREFIX + service_name(unit)[: -len(".service")] + ".timer"]
    try:
        _rc, out, _dummy = run(["systemctl", "is-active", *timers])
    except OSError:
        return []
    return [timer for timer, line in zip(timers, out.splitlines()) if line.strip() in ("active", "activating")]


def timer_armed(unit: str, run: Runner) -> bool:
    """Whether one of the unit's dead-man timers (``armed_timers``) waits to fire."""
    return bool(armed_timers(unit, run))


def process_start(pid: int, proc: str = "/proc") -> Optional[int]:
    """The start time of ``pid`` (clock ticks after boot, field 22 of /proc/<pid>/stat); None when it is gone."""
    try:
        with open(os.path.join(proc, str(pid), "stat"), encoding="utf-8", errors="replace") as fh:
            text = fh.read()
        return int(text[text.rindex(")") + 2:].split()[19])
    except (OSError, ValueError, IndexError):
        return None


def process_identity(pid: int, proc: str = "/proc") -> Dict[str, Any]:
    """What proves later that ``pid`` is gone: this machine's boot id, the pid namespace, the start time."""
    identity: Dict[str, Any] = {"boot_id": None, "pid_ns": None, "start_ticks": process_start(pid, proc)}
    try:
        with open(os.path.join(proc, "sys", "kernel", "random", "boot_id"), encoding="utf-8") as fh:
            identity["boot_id"] = fh.read().strip() or None
    except OSError:
        pass
    try:
        identity["pid_ns"] = os.readlink(os.path.join(proc, "self", "ns", "pid"))
    except OSError:
        pass
    return identity


def holder_gone(record: Mapping[str, Any], proc: str = "/proc") -> Optional[str]:
    """Why the lock's holder is provably gone, or None (alive, or nothing can be proved from here)."""
    pid, start = record.get("pid"), record.get("start_ticks")
    if not (record.get("boot_id") and record.get("pid_ns") and isinstance(pid, int) and pid > 0
            and isinstance(start, int)):
        return None
    here = process_identity(pid, proc)
    if here["boot_id"] != record["boot_id"] or here["pid_ns"] != record["pid_ns"]:
        return None  # another machine, another boot or another pid namespace: its pids mean nothing here
    if here["start_ticks"] is None:
        return f"its controller process {pid} is gone (same boot, same pid namespace)"
    if here["start_ticks"] != start:
        return f"its controller's pid {pid} now belongs to a later process (started at tick {here['start_ticks']}, not {start})"
    return None


def why_stale(record: Mapping[str, Any], now: float, armed: bool, gone: Optional[str] = None) -> Optional[str]:
    """Why ``record`` belongs to a dead run, or None while its run may still be alive.

    Never while the unit's dead-man is armed: a dead run's candidate may still serve, and its timer restores
    production first. Then: a file that is not a record, a holder provably gone (``holder_gone``), an expiry passed.
    """
    if armed:
        return None
    if not record or "run_id" not in record:
        return "the lock file is not a lock record (unreadable or from something else)"
    if gone:
        return f"{gone}, and the unit's dead-man timer is not armed"
    try:
        expires = float(record.get("expires_epoch"))
    except (TypeError, ValueError):
        return "the lock record has no expiry"
    if now < expires:
        return None
    return f"it expired at {iso(expires)} and the unit's dead-man timer is not armed"


def _write_new(path: str, record: Mapping[str, Any], replace: bool) -> None:
    """Write ``record`` at ``path`` whole: link() a complete temp file (fails if one exists) or rename over.

    The temporary file has a unique name (``mkstemp``): a leftover of a killed writer, whatever its name, can
    never make this fail; leftovers are removed under the guard (``_remove_leftovers``).
    """
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=f".{os.path.basename(path)}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            os.fchmod(fh.fileno(), 0o600)
            json.dump(record, fh, sort_keys=True, indent=1)
            fh.write("\n")
            fh.flush()
            os.fsync(fh.fileno())
        if replace:
            os.replace(tmp, path)
        else:
            os.link(tmp, path)  # EEXIST if someone created it meanwhile: never overwrite a live lock
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def _remove_leftovers(path: str) -> None:
    """Temporary files of writers that died (only a writer holding the guard makes them, and we hold it)."""
    pattern = os.path.join(os.path.dirname(path), glob.escape(os.path.basename(path)))
    for leftover in glob.glob(pattern + ".*.tmp") + glob.glob(os.path.join(
            os.path.dirname(path), "." + glob.escape(os.path.basename(path)) + ".*.tmp")):
        try:
            os.unlink(leftover)
        except OSError:
            pass


class _Guard:
    """flock(LOCK_EX) on the unit's guard file for the length of one decision, waited for at most ``wait`` s."""

    def __init__(self, path: str, wait: float = GUARD_WAIT, now: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.path = path
        self.fd = -1
        self.wait, self.now, self.sleep = wait, now, sleep

    def __enter__(self) -> _Guard:
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        deadline = self.now() + self.wait
        while True:
            try:
                fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return self
            except BlockingIOError:
                if self.now() >= deadline:
                    os.close(self.fd)
                    raise SpecdecError(f"{self.path} has been held by another process for more than {self.wait:.0f} s "
                                       "(a decision about the lock takes milliseconds): find it with "
                                       f"`fuser -v {self.path}` and end it") from None
                self.sleep(0.05)

    def __exit__(self, *exc: Any) -> None:
        fcntl.flock(self.fd, fcntl.LOCK_UN)
        os.close(self.fd)


def _ensure_dirs(state_dir: str, mode: int) -> None:
    if not os.path.isdir(state_dir):
        os.makedirs(state_dir, mode=mode)
        os.chmod(state_dir, mode)
    elif os.stat(state_dir).st_mode & 0o777 & ~mode:
        os.chmod(state_dir, os.stat(state_dir).st_mode & 0o777 & mode)  # it holds prompts and model output
    locks = os.path.join(state_dir, "locks")
    if not os.path.isdir(locks):
        os.mkdir(locks, 0o700)


def _owner_record(unit: str, run_id: str, owner: Mapping[str, Any], current: Optional[Mapping[str, Any]], t: float,
                  expires_after: int) -> Dict[str, Any]:
    record: Dict[str, Any] = {
        "schema": LOCK_SCHEMA, "unit": service_name(unit), "run_id": run_id,
        "controller": str(owner.get("controller") or "unknown"),
        "pid": owner.get("pid") if isinstance(owner.get("pid"), int) else None,
        "started": (current or {}).get("started") if current and current.get("run_id") == run_id else iso(t),
        "expires": iso(t + expires_after), "expires_epoch": int(t + expires_after), "expires_after": expires_after,
    }
    for key in ("boot_id", "pid_ns"):
        if isinstance(owner.get(key), str) and owner[key]:
            record[key] = owner[key]
    if isinstance(owner.get("start_ticks"), int):
        record["start_ticks"] = owner["start_ticks"]
    return record


def acquire(params: Mapping[str, Any], run: Runner, check_mode: bool, now: Callable[[], float] = time.time,
            sleep: Callable[[float], None] = time.sleep, proc: str = "/proc") -> Dict[str, Any]:
    """Take (or refresh) the unit's lock for ``params['owner']``; wait up to ``params['wait']`` s for a live holder.

    Every wait is bounded by ``wait`` (plus the guard's own bound): a lock created behind the guard's back, a
    guard held by a stuck process, a holder that never leaves.
    """
    owner = dict(params.get("owner") or {})
    run_id = safe_path_component(owner.get("run_id"), "owner.run_id")
    expires_after = int(params.get("expires_after") or 0)
    if expires_after <= 0:
        raise SpecdecError("expires_after must be a number of seconds greater than 0: the longest slot's dead-man "
                           "time plus a health timeout, so a dead run's lock expires after its candidate is gone")
    wait = max(0, int(params.get("wait") or 0))
    poll = max(1, int(params.get("poll") or 2))
    unit = params["unit"]
    path, guard = lock_paths(params["state_dir"], unit)
    result: Dict[str, Any] = {"path": path, "changed": False, "waited": 0, "taken_over": None}
    if check_mode and not os.path.isdir(os.path.dirname(path)):
        result.update(changed=True, lock=None, msg=f"would create {path} and take it for run {run_id}")
        return result
    if not check_mode:
        _ensure_dirs(params["state_dir"], int(params.get("state_mode") or 0o700))
    started_wait = now()
    while True:
        held: Optional[Dict[str, Any]] = None
        with _Guard(guard, now=now, sleep=sleep) if not check_mode else _NoGuard():
            if not check_mode:
                _remove_leftovers(path)
            current = read_record(path)
            t = now()
            stale = None
            if current is not None and current.get("run_id") != run_id:
                # takeover_armed: a caller that removes the dead run's override itself (the rollback) need not wait
                # for its dead-man
                armed = timer_armed(unit, run) and not params.get("takeover_armed")
                stale = why_stale(current, t, armed, holder_gone(current, proc))
            if current is None or current.get("run_id") == run_id or stale:
                record = _owner_record(unit, run_id, owner, current, t, expires_after)
                if stale:
                    result["taken_over"] = dict(current or {}, why=stale)
                result.update(changed=True, lock=record, refreshed=bool(current and current.get("run_id") == run_id))
                created_meanwhile = False
                if not check_mode:
                    try:
                        _write_new(path, record, replace=current is not None)
                    except FileExistsError:
                        created_meanwhile = True  # by a writer outside the guard: decide again, within the bound
                if not created_meanwhile:
                    return result
                result["changed"], result["taken_over"] = False, None
                held = read_record(path) or {}
            else:
                held = current
        waited = int(now() - started_wait)
        if check_mode or waited >= wait:
            msg = (f"unit {service_name(unit)} is locked by {describe(held)}; the lock expires at "
                   f"{held.get('expires', '?')} unless that run refreshes it"
                   + (f" (waited {waited} s)" if waited else "")
                   + ". Wait for that run to finish or give it longer (spec_ab_lock_wait); a lock left by a dead "
                     "run is taken over by itself once its dead-man timer is no longer armed and it expired (or its "
                     "controller process, on this host, is provably gone)")
            if check_mode:
                result.update(lock=None, holder=held, msg=msg)
                return result
            raise LockHeldError(msg, held)
        result["waited"] = waited
        sleep(min(poll, max(1, wait - waited)))


def query(params: Mapping[str, Any], run: Runner, now: Callable[[], float] = time.time, proc: str = "/proc",
          run_dir: str = "/run") -> Dict[str, Any]:
    """Read-only: does a run hold the unit's lock, is it stale, is an override of unit_override live in /run."""
    unit = service_name(params["unit"])
    path, _guard = lock_paths(params["state_dir"], unit)
    record = read_record(path)
    timers = armed_timers(unit, run)
    armed = bool(timers)
    stale = why_stale(record, now(), armed, holder_gone(record, proc)) if record is not None else None
    held = record is not None and stale is None
    paths = override_paths(unit, run_dir)
    named = [*(("drop-in", path) for path in paths.all_dropins), ("env file", paths.env_file)]
    found = [f"{what} {where}" for what, where in named
             if os.path.exists(where)]
    if armed:
        found.append(f"armed dead-man timer {' and '.join(timers)}")
    why = stale
    if held:
        why = (f"held by {describe(record or {})}, until {(record or {}).get('expires', '?')}"
               + (" (its dead-man timer is armed)" if armed else ""))
    return {"changed": False, "path": path, "unit": unit, "held": held, "holder": record, "stale": stale is not None,
            "why": why, "override_live": bool(found), "override": found}


def hold(units: Sequence[str], params: Mapping[str, Any], run: Runner, now: Callable[[], float] = time.time,
         sleep: Callable[[float], None] = time.sleep, run_dir: str = "/run", renew: bool = False) -> List[str]:
    """The host-wide guard of a play that changes ``units``: each unit's lock taken (or, with ``renew``, refreshed,
    never waited for) for ``params['owner']``, and a unit on which an override of unit_override is live refused,
    naming it: a restart now would restart that override, not production. What was taken is given back when one
    is refused. Raises ``LockHeldError`` naming the holder, or ``SpecdecError`` naming the override."""
    held: List[str] = []
    try:
        for unit in units:
            lock_params = dict(params, unit=unit, wait=0 if renew else params.get("wait", 0))
            try:
                acquire(lock_params, run=run, check_mode=False, now=now, sleep=sleep)
            except LockHeldError as exc:
                if renew:
                    raise LockHeldError(f"the guard of {service_name(unit)} is no longer this play's: {exc}",
                                        exc.holder) from None
                raise
            held.append(unit)
            live = query(lock_params, run=run, now=now, run_dir=run_dir)
            if live["override_live"]:
                raise SpecdecError(
                    f"{live['unit']} has a live override of unit_override ({'; '.join(live['override'])}), so its "
                    "restart would start that override, not production. Nothing was changed. Wait for the A/B to "
                    "finish, or run playbooks/rollback.yml on this host to remove a leftover override")
    except BaseException:
        if not renew:
            let_go(held, params)
        raise
    return held


def let_go(units: Sequence[str], params: Mapping[str, Any]) -> None:
    """Release the guard of ``units`` that ``params['owner']`` still holds (another run's lock stays)."""
    for unit in units:
        release(dict(params, unit=unit), check_mode=False)


def add_history(state_dir: str, unit: str, record: Mapping[str, Any], check_mode: bool) -> Dict[str, Any]:
    """The judged run's line in ``<state_dir>/history.jsonl``, keyed by its unit and run id, under ``flock`` of
    ``history.lock``; the file is 0600 (it names configs and verdicts of the operator's traffic)."""
    if not os.path.isabs(state_dir):
        raise SpecdecError(f"state_dir {state_dir!r} must be an absolute path, for example {DEFAULT_STATE_DIR}")
    unit = service_name(unit)
    line_record = dict(record, unit=unit)
    safe_path_component(line_record.get("run_id"), "the history line's run_id")
    line = json.dumps(line_record, sort_keys=True, separators=(",", ":"), default=str)
    path = os.path.join(state_dir, "history.jsonl")
    result: Dict[str, Any] = {"path": path, "changed": False, "line": line_record}
    if check_mode:
        old = read_text_or_empty(path)
        result["changed"] = merge_history(old, line) != old
        return result
    _ensure_dirs(state_dir, 0o700)
    with _Guard(os.path.join(state_dir, "history.lock")):
        old = read_text_or_empty(path)
        new = merge_history(old, line)
        if new != old or (os.path.exists(path) and os.stat(path).st_mode & 0o077):
            fd, tmp = tempfile.mkstemp(dir=state_dir, prefix=".history.jsonl.", suffix=".tmp")
            try:
                with os.fdopen(fd, "w", encoding="utf-8") as fh:
                    os.fchmod(fh.fileno(), 0o600)
                    fh.write(new)
                    fh.flush()
                    os.fsync(fh.fileno())
                os.replace(tmp, path)
            finally:
                if os.path.exists(tmp):
                    os.unlink(tmp)
            result["changed"] = True
    return result


def read_text_or_empty(path: str) -> str:
    try:
        with open(path, encoding="utf-8") as fh:
            return fh.read()
    except FileNotFoundError:
        return ""


class _NoGuard:
    def __enter__(self) -> _NoGuard:
        return self

    def __exit__(self, *exc: Any) -> None:
        return None


def release(params: Mapping[str, Any], check_mode: bool) -> Dict[str, Any]:
    """Remove the unit's lock if ``owner.run_id`` holds it (or with ``force``); someone else's stays."""
    owner = dict(params.get("owner") or {})
    force = bool(params.get("force"))
    run_id = owner.get("run_id")
    if not force:
        run_id = safe_path_component(run_id, "owner.run_id")
    path, guard = lock_paths(params["state_dir"], params["unit"])
    result: Dict[str, Any] = {"path": path, "changed": False, "lock": None}
    if not os.path.isdir(os.path.dirname(path)):
        return result
    with _Guard(guard) if not check_mode else _NoGuard():
        current = read_record(path)
        if current is None:
            return result
        if not force and current.get("run_id") != run_id:
            result.update(holder=current, msg=f"left the lock of {describe(current)}: run {run_id} no longer holds it")
            return result
        result.update(changed=True, released=current)
        if not check_mode:
            os.unlink(path)
    return result
