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
``link()`` of a fully written temporary file, so nobody ever reads half a record. Every decision about the
lock (free, ours, stale, someone else's) is taken while holding ``flock(LOCK_EX)`` on ``locks/<unit>.guard``,
so two runs that both find a dead run's lock cannot both take it over; the kernel drops an flock when its
process dies, so a killed taker never blocks the next one. A lock is stale when its expiry passed and the
unit's dead-man timer is no longer armed (the dead run's candidate was rolled back), or when its holder ran
on this very machine and its process is gone.
"""
from __future__ import annotations

import datetime as _dt
import errno
import fcntl
import json
import os
import re
import socket
import time
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from ansible_collections.llmfleet.specdec.plugins.module_utils._errors import SpecdecError
from ansible_collections.llmfleet.specdec.plugins.module_utils._systemd import override_paths, service_name

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
    """history.jsonl with ``line`` appended, or replacing the line of an earlier report of the same run.

    Lines that are not JSON are kept as they are: the history belongs to the operator, not to this code.
    """
    try:
        run_id = json.loads(line).get("run_id")
    except (ValueError, AttributeError):
        raise SpecdecError(f"history line is not a JSON object: {line[:80]!r}") from None
    out: List[str] = []
    replaced = False
    for text in existing.splitlines():
        try:
            same = run_id is not None and json.loads(text).get("run_id") == run_id
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


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except OSError as exc:
        return exc.errno == errno.EPERM
    return True


def timer_armed(unit: str, run: Runner) -> bool:
    """Whether the unit's dead-man timer waits to fire (a dead run's candidate may still serve)."""
    timer = override_paths(service_name(unit)).timer
    try:
        rc, out, _dummy = run(["systemctl", "is-active", timer])
    except OSError:
        return False
    return rc == 0 and out.strip() in ("active", "activating")


def why_stale(record: Mapping[str, Any], now: float, armed: bool, hostname: str,
              alive: Callable[[int], bool] = pid_alive) -> Optional[str]:
    """Why ``record`` belongs to a dead run, or None while its run may still be alive."""
    if not record or "run_id" not in record:
        return "the lock file is not a lock record (unreadable or from something else)"
    pid = record.get("pid")
    if record.get("controller") == hostname and isinstance(pid, int) and pid > 0 and not alive(pid):
        return f"its controller process {pid} on this machine is gone"
    try:
        expires = float(record.get("expires_epoch"))
    except (TypeError, ValueError):
        return "the lock record has no expiry"
    if now < expires:
        return None
    if armed:
        return None  # the dead run's candidate still serves: its dead-man has not restored production yet
    return f"it expired at {iso(expires)} and the unit's dead-man timer is not armed"


def _write_new(path: str, record: Mapping[str, Any], replace: bool) -> None:
    """Write ``record`` at ``path`` whole: link() a complete temp file (fails if one exists) or rename over."""
    tmp = f"{path}.{os.getpid()}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
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


class _Guard:
    """flock(LOCK_EX) on the unit's guard file for the length of one decision."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.fd = -1

    def __enter__(self) -> _Guard:
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        fcntl.flock(self.fd, fcntl.LOCK_EX)
        return self

    def __exit__(self, *exc: Any) -> None:
        fcntl.flock(self.fd, fcntl.LOCK_UN)
        os.close(self.fd)


def _ensure_dirs(state_dir: str, mode: int) -> None:
    if not os.path.isdir(state_dir):
        os.makedirs(state_dir, mode=mode)
        os.chmod(state_dir, mode)
    locks = os.path.join(state_dir, "locks")
    if not os.path.isdir(locks):
        os.mkdir(locks, 0o700)


def acquire(params: Mapping[str, Any], run: Runner, check_mode: bool, now: Callable[[], float] = time.time,
            sleep: Callable[[float], None] = time.sleep, hostname: Optional[str] = None,
            alive: Callable[[int], bool] = pid_alive) -> Dict[str, Any]:
    """Take (or refresh) the unit's lock for ``params['owner']``; wait up to ``params['wait']`` s for a live holder."""
    owner = dict(params.get("owner") or {})
    run_id = safe_path_component(owner.get("run_id"), "owner.run_id")
    expires_after = int(params.get("expires_after") or 0)
    if expires_after <= 0:
        raise SpecdecError("expires_after must be a number of seconds greater than 0: the dead-man rollback "
                           "time plus a health timeout, so a dead run's lock expires after its candidate is gone")
    wait = max(0, int(params.get("wait") or 0))
    poll = max(1, int(params.get("poll") or 2))
    unit = params["unit"]
    path, guard = lock_paths(params["state_dir"], unit)
    hostname = hostname or socket.gethostname()
    result: Dict[str, Any] = {"path": path, "changed": False, "waited": 0, "taken_over": None}
    if check_mode and not os.path.isdir(os.path.dirname(path)):
        result.update(changed=True, lock=None, msg=f"would create {path} and take it for run {run_id}")
        return result
    if not check_mode:
        _ensure_dirs(params["state_dir"], int(params.get("state_mode") or 0o750))
    started_wait = now()
    while True:
        held: Optional[Dict[str, Any]] = None
        with _Guard(guard) if not check_mode else _NoGuard():
            current = read_record(path)
            t = now()
            stale = None
            if current is not None and current.get("run_id") != run_id:
                stale = why_stale(current, t, timer_armed(unit, run), hostname, alive)
            if current is None or current.get("run_id") == run_id or stale:
                record = {
                    "schema": LOCK_SCHEMA, "unit": service_name(unit), "run_id": run_id,
                    "controller": str(owner.get("controller") or "unknown"),
                    "pid": owner.get("pid") if isinstance(owner.get("pid"), int) else None,
                    "started": (current or {}).get("started") if current and current.get("run_id") == run_id
                    else iso(t),
                    "expires": iso(t + expires_after), "expires_epoch": int(t + expires_after),
                    "expires_after": expires_after,
                }
                if stale:
                    result["taken_over"] = dict(current or {}, why=stale)
                result.update(changed=True, lock=record, refreshed=bool(current and current.get("run_id") == run_id))
                if not check_mode:
                    try:
                        _write_new(path, record, replace=current is not None)
                    except FileExistsError:
                        continue  # created by a writer outside the guard meanwhile: decide again
                return result
            held = current
        waited = int(now() - started_wait)
        if check_mode or waited >= wait:
            msg = (f"unit {service_name(unit)} is locked by {describe(held)}; the lock expires at "
                   f"{held.get('expires', '?')} unless that run refreshes it"
                   + (f" (waited {waited} s)" if waited else "")
                   + ". Wait for that run to finish or give it longer (spec_ab_lock_wait); a lock left by a dead "
                     "run is taken over by itself once it expires and the unit's dead-man timer has fired")
            if check_mode:
                result.update(lock=None, holder=held, msg=msg)
                return result
            raise LockHeldError(msg, held)
        result["waited"] = waited
        sleep(min(poll, max(1, wait - waited)))


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
