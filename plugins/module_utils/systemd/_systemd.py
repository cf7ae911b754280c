# Copyright: (c) 2026, llmfleet.specdec contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# Private to the collection: systemd unit names and paths, systemctl calls, the dead-man rollback script and timer.
"""What this collection asks of systemd itself, for ``unit_override`` and the modules that read a unit.

- names and paths: ``service_name`` normalises a unit, ``override_paths`` lists every file and transient
  unit ``unit_override`` writes for it (``/run/llmfleet-specdec/<unit>/``, the drop-in under
  ``/run/systemd/system/<unit>.d/``, the ``specdec-rollback-<unit stem>`` timer);
- ``Systemctl``: the systemctl, systemd-run and journalctl calls, through an injected runner;
- the dead-man: ``render_rollback_script`` (a self-contained script that removes the override and
  restarts the unit), ``rollback_interpreter`` (only an interpreter root alone can change may run as
  root) and ``timer_command`` (the ``systemd-run --on-calendar`` line that arms it).

Not here: env-file syntax and the candidate's rendering (``_envfile``), ``/proc`` and cgroup readers
(``_procview``), and the present/confirmed/absent manager with its health waits (``_unit_override``).
"""
from __future__ import annotations

import json
import math
import os
import re
import stat
import time
from typing import Any, Callable, Dict, List, NamedTuple, Sequence, Tuple

from ansible_collections.llmfleet.specdec.plugins.module_utils.common._errors import SpecdecError
from ansible_collections.llmfleet.specdec.plugins.module_utils.systemd._procview import parse_show

COLLECTION = "llmfleet.specdec"
STATE_DIR_NAME = "llmfleet-specdec"
# The A/B's transient drop-in sorts after every drop-in an operator writes by hand (``systemctl edit``'s
# override.conf, numbered ones): a drop-in that sorts later and sets ExecStart= would run instead of each candidate.
DROPIN_NAME = "zz-llmfleet-specdec.conf"
# What ran, kept as the way back past a pending change (_pin): sorts before the A/B's drop-in, after override.conf.
PIN_NAME = "zy-llmfleet-specdec-ran.conf"
# Its name before 0.2.x hosts were upgraded: still read and removed, never written.
LEGACY_DROPIN_NAMES = ("50-llmfleet-specdec.conf",)
ROLLBACK_PREFIX = "specdec-rollback-"
# While a changed candidate re-arms the dead-man, a second timer ("the bridge") is armed first and stopped last,
# so there is never a moment without an armed timer. Its prefix is not an extension of ROLLBACK_PREFIX, so a
# unit's name read back from a timer's name is never ambiguous.
BRIDGE_PREFIX = "specdec-rearm-"
# unit_deploy's dead-man (the previous unit file, launcher and env file put back): a run that holds the unit's
# lock is not stale while it is armed either.
DEPLOY_PREFIX = "specdec-deploy-rollback-"

Runner = Callable[[Sequence[str]], Tuple[int, str, str]]


class UnitOverrideError(SpecdecError):
    """Something went wrong with the unit; ``details`` travel into the module's fail_json."""

    def __init__(self, msg: str, **details: Any) -> None:
        super().__init__(msg)
        self.details = details


# ------------------------------------------------------------------ names and paths


_UNIT_STEM_RE = re.compile(r"[A-Za-z0-9:_.\-]+(?:@[A-Za-z0-9:_.\-]+)?\Z")


def service_name(unit: str) -> str:
    """``llama-server`` or ``llama-server.service`` → ``llama-server.service``; anything else is an error."""
    stem = unit[: -len(".service")] if unit.endswith(".service") else unit
    if not stem or stem.startswith((".", "-")) or not _UNIT_STEM_RE.match(stem) or len(stem) > 200:
        raise SpecdecError(
            f"unit {unit!r} is not a service name unit_override manages: use letters, digits and ':_.-' "
            "(one '@instance' allowed), for example llama-server or llama-server@qwen.service")
    return stem + ".service"


class OverridePaths(NamedTuple):
    unit: str
    state_dir: str
    env_file: str
    script: str
    meta: str
    dropin_dir: str
    dropin: str
    rollback_unit: str

    @property
    def timer(self) -> str:
        return self.rollback_unit + ".timer"

    @property
    def legacy_dropins(self) -> Tuple[str, ...]:
        """The drop-in under its former names (a host that still carries one from an earlier version)."""
        return tuple(os.path.join(self.dropin_dir, name) for name in LEGACY_DROPIN_NAMES)

    @property
    def all_dropins(self) -> Tuple[str, ...]:
        return (self.dropin, *self.legacy_dropins)

    @property
    def pin(self) -> str:
        """What ran, kept as the way back (``_pin``)."""
        return os.path.join(self.dropin_dir, PIN_NAME)

    def dropin_in_place(self, loaded: str = "") -> bool:
        """Whether the A/B's drop-in (under any of its names) is on disk or in ``loaded`` (systemd's DropInPaths)."""
        return any(os.path.exists(path) or path in loaded.split() for path in self.all_dropins)

    @property
    def rollback_service(self) -> str:
        return self.rollback_unit + ".service"

    @property
    def bridge_unit(self) -> str:
        """The second dead-man timer, armed only while the first is re-armed."""
        return BRIDGE_PREFIX + self.rollback_unit[len(ROLLBACK_PREFIX):]

    @property
    def dead_man_units(self) -> Tuple[str, str]:
        """Both dead-man timer bases: the rollback timer and its bridge."""
        return self.rollback_unit, self.bridge_unit


def override_paths(unit: str, run_dir: str = "/run") -> OverridePaths:
    """Every path and unit name ``present`` writes for ``unit`` (a normalised service name)."""
    state_dir = os.path.join(run_dir, STATE_DIR_NAME, unit)
    dropin_dir = os.path.join(run_dir, "systemd", "system", unit + ".d")
    return OverridePaths(
        unit=unit,
        state_dir=state_dir,
        env_file=os.path.join(state_dir, "override.env"),
        script=os.path.join(state_dir, "rollback.py"),
        meta=os.path.join(state_dir, "rollback.json"),
        dropin_dir=dropin_dir,
        dropin=os.path.join(dropin_dir, DROPIN_NAME),
        rollback_unit=ROLLBACK_PREFIX + unit[: -len(".service")],
    )


def unit_from_rollback_unit(name: str) -> str | None:
    """``specdec-rollback-llama-server.timer`` (or its bridge ``specdec-rearm-…``) → ``llama-server.service``;
    None for other units."""
    for prefix in (ROLLBACK_PREFIX, BRIDGE_PREFIX):
        for suffix in (".timer", ".service"):
            if name.startswith(prefix) and name.endswith(suffix):
                stem = name[len(prefix): -len(suffix)]
                return stem + ".service" if stem else None
    return None


def journal_tail(unit: str, lines: Sequence[str], count: int = 15) -> str:
    """The last journal lines, for the end of an error message."""
    if not lines:
        return ""
    return f"\nLast journal lines of {unit}:\n" + "\n".join(lines[-count:])


# ------------------------------------------------------------------ the dead-man script and timer

# The few lines every standalone dead-man script carries (this one, unit_deploy's and the build switch's): they run
# with the collection gone, so they cannot import; each template splices these in. No braces: they pass through
# str.format as values.
SCRIPT_NO_REDIRECT = '''class NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args, **kwargs):
        return None  # health is the answer of the server asked: a redirect is not health'''

SCRIPT_PUT_BACK = '''def put_back(path, text, mode):
    # atomically, through a temp name nobody can guess, with its final mode from its first byte
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path) or "/", prefix="." + os.path.basename(path) + ".")
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "w") as handle:
            handle.write(text)
        os.rename(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise'''

# The script runs standalone under systemd, from /run, with the controller and this collection gone: so it
# keeps its own few lines of urllib for /health instead of calling _http (the collection's one HTTP client).
_ROLLBACK_SCRIPT = r'''#!{python}
# Written by llmfleet.specdec.unit_override: the dead-man rollback of {unit} (run by {timer}).
# Removes the A/B override, restarts {unit} with its production config (what ran, when a pin keeps it) and checks
# /health.
# Self-contained on purpose: it must work with the controller gone. Prints to the journal.
import json
import math
import os
import subprocess
import sys
import tempfile
import time
import urllib.request

CONFIG = json.loads({config!r})


def say(message):
    print("llmfleet.specdec rollback of " + CONFIG["unit"] + ": " + message, flush=True)


def remove(path):
    try:
        os.unlink(path)
        return True
    except FileNotFoundError:
        return False


{no_redirect}


def healthy(pid_before):
    show = subprocess.run(["systemctl", "show", CONFIG["unit"], "-p", "MainPID", "--value"],
                          stdout=subprocess.PIPE, universal_newlines=True)
    pid = show.stdout.strip()
    if pid in ("", "0") or pid == pid_before:
        return None
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({{}}), NoRedirect())
    try:
        with opener.open(CONFIG["url"], timeout=2) as reply:
            return pid if reply.status == 200 else None
    except Exception:
        return None


{put_back}


def keep_what_ran():
    # a run forced past a change pending on disk: the restart below starts what ran, not that change
    if CONFIG["pin_text"] and not os.path.exists(CONFIG["pin"]):
        os.makedirs(CONFIG["dropin_dir"], mode=0o700, exist_ok=True)
        put_back(CONFIG["pin"], CONFIG["pin_text"], 0o600)
        say("put back " + CONFIG["pin"] + " (what ran, kept as the way back)")


def main():
    started = time.monotonic()
    keep_what_ran()
    removed = [path for path in [CONFIG["dropin"]] + CONFIG.get("legacy_dropins", []) + [CONFIG["env_file"]]
               if remove(path)]
    try:
        os.rmdir(CONFIG["dropin_dir"])
    except OSError:
        pass
    say("removed " + (", ".join(removed) or "nothing (no override was left)"))
    before = subprocess.run(["systemctl", "show", CONFIG["unit"], "-p", "MainPID", "--value"],
                            stdout=subprocess.PIPE, universal_newlines=True).stdout.strip()
    subprocess.call(["systemctl", "daemon-reload"])
    subprocess.call(["systemctl", "reset-failed", CONFIG["unit"]])
    rc = subprocess.call(["systemctl", "restart", CONFIG["unit"]])
    deadline = time.monotonic() + CONFIG["health_timeout"]
    pid = None
    while rc == 0 and time.monotonic() < deadline:
        pid = healthy(before if before != "0" else None)
        if pid:
            break
        time.sleep(0.5)
    if pid and remove(CONFIG["pin"]):
        # production answers on what ran (a run forced past a pending change): the pin goes, without a restart;
        # the change pending on disk stays pending, for the operator
        subprocess.call(["systemctl", "daemon-reload"])
        try:
            os.rmdir(CONFIG["dropin_dir"])
        except OSError:
            pass
        say("removed " + CONFIG["pin"] + " (what ran answers; the change pending on disk stays pending)")
    for path in (CONFIG["meta"], CONFIG["script"]):
        remove(path)
    try:
        os.rmdir(CONFIG["state_dir"])
    except OSError:
        pass
    if pid:
        say("production restored: pid %s answers %s after %.1f s" % (pid, CONFIG["url"], time.monotonic() - started))
        return 0
    say("PRODUCTION NOT HEALTHY: %s did not answer 200 within %d s (systemctl restart rc %d); last journal lines:"
        % (CONFIG["url"], CONFIG["health_timeout"], rc))
    sys.stdout.flush()
    subprocess.call(["journalctl", "-u", CONFIG["unit"], "-n", "30", "--no-pager", "-o", "cat"])
    return 1


if __name__ == "__main__":
    sys.exit(main())
'''


def render_rollback_script(paths: OverridePaths, python: str, url: str, health_timeout: int,
                           pin_text: str | None = None) -> str:
    """The dead-man's script; ``pin_text``: what ran (``_pin``), put back before the restart if it is gone."""
    config = json.dumps({
        "unit": paths.unit, "dropin": paths.dropin, "legacy_dropins": list(paths.legacy_dropins),
        "dropin_dir": paths.dropin_dir, "env_file": paths.env_file, "pin": paths.pin,
        "script": paths.script, "meta": paths.meta, "state_dir": paths.state_dir,
        "url": url, "health_timeout": int(health_timeout), "pin_text": pin_text or "",
    }, sort_keys=True)
    return _ROLLBACK_SCRIPT.format(python=python, unit=paths.unit, timer=paths.timer, config=config,
                                   no_redirect=SCRIPT_NO_REDIRECT, put_back=SCRIPT_PUT_BACK)


SYSTEM_PYTHON = "/usr/bin/python3"


def writable_by_others(path: str) -> str | None:
    """Why a non-root user could change what ``path`` runs (it or a directory above it is not root's, or is
    group/other-writable), following the path as given and as resolved; None when only root can."""
    seen = set()
    for candidate in (os.path.abspath(path), os.path.realpath(path)):
        current = candidate
        while current not in seen:
            seen.add(current)
            try:
                st = os.lstat(current)
            except OSError as exc:
                return f"{current} cannot be checked ({exc.strerror})"
            # A link's own owner and mode do not matter: replacing it takes write access to its directory.
            if not stat.S_ISLNK(st.st_mode):
                if st.st_uid != 0:
                    return f"{current} belongs to uid {st.st_uid}, not root"
                if st.st_mode & 0o022:
                    return f"{current} is writable by its group or by everyone (mode {st.st_mode & 0o7777:04o})"
            parent = os.path.dirname(current)
            if parent == current:
                break
            current = parent
    return None


def rollback_interpreter(python: str, fallback: str = SYSTEM_PYTHON) -> str:
    """The interpreter root's rollback timer runs: ``python`` when only root can change it, else ``fallback``
    (the script needs nothing but the standard library); an error naming both problems when neither is safe.

    The module's own interpreter is often a venv that belongs to the user Ansible logs in as; root running
    a file that user can replace (or a venv whose site-packages that user can write) is a privilege escalation.
    """
    problem = writable_by_others(python)
    if problem is None:
        return python
    fallback_problem = writable_by_others(fallback) if fallback != python else problem
    if fallback_problem is None:
        return fallback
    raise SpecdecError(
        f"the dead-man rollback runs as root, and no interpreter for it is root's alone: {python} (this module's "
        f"interpreter): {problem}; {fallback}: {fallback_problem}. Install python3 owned by root at {fallback}, or "
        "set ansible_python_interpreter to a root-owned python3 whose directories only root can write")


def calendar_spec(epoch: float) -> str:
    """An OnCalendar= value for one instant: ``2026-11-29 10:05:30 UTC`` (whole seconds, rounded up)."""
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(math.ceil(epoch)))


def timer_command(paths: OverridePaths, deadline_epoch: float, python: str, health_timeout: int,
                  unit_base: str | None = None) -> List[str]:
    """The systemd-run line that arms the dead-man: a wall-clock deadline, 1 s accuracy, a oneshot service.

    Not ``--on-active``: systemd (252) re-bases OnActiveSec= timers on every daemon-reload, so each
    reload would postpone the rollback (measured: a reload 5 s in moved a 12 s timer to 17 s). An
    OnCalendar= instant does not move. ``ConditionPathExists=`` on the script: once a restore removed the
    script (production healthy), a timer that still fires is skipped, not failed, and both units are gone after.
    ``unit_base`` is the rollback unit (default) or its bridge (``paths.bridge_unit``).
    """
    base = unit_base or paths.rollback_unit
    what = "dead-man rollback" if base == paths.rollback_unit else "dead-man rollback (bridge while re-arming)"
    return [
        "systemd-run",
        f"--unit={base}",
        f"--description={COLLECTION} {what} of {paths.unit}",
        f"--on-calendar={calendar_spec(deadline_epoch)}",
        "--timer-property=AccuracySec=1s",
        "--property=Type=oneshot",
        f"--property=TimeoutStartSec={int(health_timeout) + 60}",
        f"--property=ConditionPathExists={paths.script}",
        python,
        paths.script,
    ]


# ------------------------------------------------------------------ systemctl


class Systemctl:
    """The systemctl, systemd-run and journalctl calls, through an injected runner."""

    def __init__(self, run: Runner) -> None:
        self._run = run

    def call(self, argv: Sequence[str]) -> Tuple[int, str, str]:
        return self._run(list(argv))

    def must(self, argv: Sequence[str]) -> str:
        rc, out, err = self._run(list(argv))
        if rc != 0:
            raise UnitOverrideError(f"`{' '.join(argv)}` failed (rc {rc}): {(err or out).strip()[-600:]}")
        return out

    def show(self, unit: str, props: Sequence[str]) -> Dict[str, str]:
        argv = ["systemctl", "show", unit]
        for prop in props:
            argv += ["-p", prop]
        parsed = parse_show(self.must(argv))
        return {prop: (parsed.get(prop) or [""])[-1] for prop in props}

    def show_all(self, unit: str, prop: str) -> List[str]:
        return parse_show(self.must(["systemctl", "show", unit, "-p", prop])).get(prop, [])

    def daemon_reload(self) -> None:
        self.must(["systemctl", "daemon-reload"])

    def journal(self, unit: str, since_epoch: float | None, lines: int = 30) -> List[str]:
        argv = ["journalctl", "-u", unit, "-n", str(lines), "--no-pager", "-o", "short-iso"]
        if since_epoch is not None:
            argv += ["--since", f"@{int(since_epoch)}"]
        rc, out, err = self._run(argv)
        text = out if rc == 0 else (err or out)
        return [line for line in text.splitlines() if line.strip() and not line.startswith("-- ")]

    def list_units(self, pattern: str) -> List[str]:
        out = self.must(["systemctl", "list-units", "--all", "--plain", "--no-legend", pattern])
        return [line.split()[0] for line in out.splitlines() if line.split()]
