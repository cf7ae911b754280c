# Copyright: (c) 2026, llmfleet.specdec contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# Private to the collection: transient systemd drop-ins over a unit's env, the dead-man rollback timer, port and health waits.
"""The change vehicle behind ``unit_override``.

An A/B candidate runs as the production unit itself, changed only by a transient drop-in:

- ``/run/llmfleet-specdec/<unit>/override.env`` (0600) holds the candidate's variables, each quoted
  by ``_envfile`` so that systemd hands the process exactly the value given;
- ``/run/systemd/system/<unit>.d/50-llmfleet-specdec.conf`` (0600) adds that file after the unit's
  own ``EnvironmentFile=`` (a later file wins), plus ``UnsetEnvironment=`` for variables the
  candidate drops;
- ``/run/llmfleet-specdec/<unit>/rollback.py`` (0700) is a self-contained script that undoes both
  and restarts the unit; ``systemd-run --on-calendar=<now + N s>`` arms it as the transient timer
  ``specdec-rollback-<unit stem>.timer``. Transient units live in ``/run/systemd/transient`` and
  survive ``daemon-reload`` (a wall-clock deadline, because a reload re-bases ``--on-active``
  timers); everything under ``/run`` is forgotten by a reboot.

Health is decided by the server, never by a file: ``GET /health`` answers 200 *and* the socket
listening on the port belongs to the unit's new ``MainPID`` (``/proc/net/tcp*`` inode →
``/proc/<pid>/fd``) or to a process in the unit's own control group or below it
(``/proc/<pid>/cgroup`` against the unit's ``ControlGroup``): a container run by
``podman run --cgroups=split`` serves from a daemonized process in a sub-cgroup of the unit, while
``MainPID`` is the podman client. Before a candidate starts, the port must be free of listeners
(bounded wait); a port still held names the process that holds it.

The decisions (validation, rendering, what to change) are pure functions; ``Systemctl`` and the
``/proc`` readers are the only places that touch the host, so the tests drive the rest with fakes.
"""
from __future__ import annotations

import json
import math
import os
import re
import shlex
import stat
import tempfile
import time
import urllib.error
import urllib.request
from typing import Any, Callable, Dict, List, Mapping, NamedTuple, Sequence, Tuple

from ansible_collections.llmfleet.specdec.plugins.module_utils._endpoint_env import endpoint_names
from ansible_collections.llmfleet.specdec.plugins.module_utils._envfile import (
    EnvFileError,
    check_env_value,
    name_problem,
    read_env_text,
    render_lines,
)
from ansible_collections.llmfleet.specdec.plugins.module_utils._envfile import read_env_values as _read_env_values
from ansible_collections.llmfleet.specdec.plugins.module_utils._errors import SpecdecError

COLLECTION = "llmfleet.specdec"
STATE_DIR_NAME = "llmfleet-specdec"
DROPIN_NAME = "50-llmfleet-specdec.conf"
ROLLBACK_PREFIX = "specdec-rollback-"
# This collection's variable for llama-server flags that have no LLAMA_ARG_* name (see _flags.py);
# the serving unit splits it like a shell, so its quotes must pair like a shell's.
EXTRA_ARGS_ENV = "LLAMA_EXTRA_ARGS"
# llama.cpp's own defaults (common/common.h: hostname "127.0.0.1", port 8080).
DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8080

Runner = Callable[[Sequence[str]], Tuple[int, str, str]]
HttpGet = Callable[[str, float], Tuple[int, str]]


class UnitOverrideError(SpecdecError):
    """Something went wrong with the unit; ``details`` travel into the module's fail_json."""

    def __init__(self, msg: str, **details: Any) -> None:
        super().__init__(msg)
        self.details = details


class NotHealthyError(UnitOverrideError):
    """The unit did not become healthy (or its port was served by another process) in time."""


class PortBusyError(UnitOverrideError):
    """The port a candidate needs is still held by a process after the bounded wait."""


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
    def rollback_service(self) -> str:
        return self.rollback_unit + ".service"


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
    """``specdec-rollback-llama-server.timer`` → ``llama-server.service``; None for other units."""
    for suffix in (".timer", ".service"):
        if name.startswith(ROLLBACK_PREFIX) and name.endswith(suffix):
            stem = name[len(ROLLBACK_PREFIX): -len(suffix)]
            return stem + ".service" if stem else None
    return None


# ------------------------------------------------------------------ env files
# The syntax lives in _envfile.py (one home for the rules systemd applies to an EnvironmentFile=);
# here a candidate is a set of values as the process receives them, written through that module.

EnvValueError = EnvFileError


class EnvConfig(NamedTuple):
    """A candidate: variables in order (each value exactly as the process receives it) and variables it unsets."""

    assignments: Tuple[Tuple[str, str], ...]
    unset: Tuple[str, ...]

    def names(self) -> List[str]:
        return [name for name, _dummy in self.assignments] + list(self.unset)


def check_env_name(name: Any, where: str = "env") -> str:
    problem = name_problem(name)
    if problem:
        raise EnvValueError(f"{where}: {problem}; nothing was written")
    return name


def env_value_text(name: str, value: Any) -> str | None:
    """The string the process gets for one value (booleans as 1/0, numbers as digits, None = unset); validated."""
    return check_env_value(name, value)


def env_config_from_mapping(env: Mapping[str, Any]) -> EnvConfig:
    """Validates a mapping (module option ``env``); a None value becomes an unset."""
    assignments: List[Tuple[str, str]] = []
    unset: List[str] = []
    for name, value in env.items():
        text = check_env_value(name, value)
        if text is None:
            unset.append(name)
        else:
            assignments.append((name, text))
    if not assignments and not unset:
        raise EnvValueError("env is empty: give at least one variable the candidate changes")
    return EnvConfig(tuple(assignments), tuple(unset))


def env_config_from_text(text: str, source: str) -> EnvConfig:
    """Validates an env file (module option ``env_file``), read as systemd reads it."""
    assignments = read_env_text(text, source)
    if not assignments:
        raise EnvValueError(f"{source}: no variables in it; give at least one NAME=value line")
    return EnvConfig(tuple(assignments), ())


def read_env_values(text: str) -> Dict[str, str]:
    """Lenient reading of a base env file (for its port and host): what systemd passes on."""
    return _read_env_values(text)


def render_env_file(unit: str, config: EnvConfig) -> str:
    lines = [f"# Written by {COLLECTION}.unit_override: the A/B candidate layered over {unit}'s production env.",
             "# Lives in /run: removed by state=absent, by the dead-man rollback timer, or by a reboot.",
             "# Values are quoted so that systemd passes each one to the process unchanged."]
    lines += render_lines(dict(config.assignments))
    return "\n".join(lines) + "\n"


def render_dropin(paths: OverridePaths, config: EnvConfig) -> str:
    lines = [f"# Written by {COLLECTION}.unit_override: runs {paths.unit} with an A/B candidate's env.",
             "# Transient (/run): state=absent, the dead-man rollback timer or a reboot removes it.",
             "[Service]",
             f"EnvironmentFile={paths.env_file}"]
    if config.unset:
        lines.append("UnsetEnvironment=" + " ".join(config.unset))
    return "\n".join(lines) + "\n"


def config_matches_environ(config: EnvConfig, environ: Mapping[str, str]) -> bool:
    """Whether a process's environment carries the candidate: every value set, every unset absent."""
    for name, value in config.assignments:
        if environ.get(name) != value:
            return False
    return all(name not in environ for name in config.unset)


def effective_env(base: Mapping[str, str], config: EnvConfig | None) -> Dict[str, str]:
    env = dict(base)
    if config is not None:
        env.update(config.assignments)
        for name in config.unset:
            env.pop(name, None)
    return env


def endpoint_of(env: Mapping[str, str], unit: str) -> Tuple[str, int]:
    """Where to reach the server from the host itself: (host, port) from LLAMA_ARG_HOST/PORT (vLLM units:
    VLLM_SERVE_HOST/PORT, see _endpoint_env)."""
    host_name, port_name = endpoint_names(env)
    raw_port = env.get(port_name, "").strip()
    if raw_port:
        match = re.match(r"[+-]?\d+", raw_port)  # std::stoi reads leading digits
        port = int(match.group(0)) if match else -1
        if not 0 < port < 65536:
            raise UnitOverrideError(f"{unit}: {port_name}={raw_port!r} is not a TCP port (1-65535)")
    else:
        port = DEFAULT_PORT
    host = env.get(host_name, "").strip() or DEFAULT_HOST
    if host.endswith(".sock"):
        raise UnitOverrideError(f"{unit}: {host_name}={host} is a unix socket; unit_override checks health "
                                "over TCP, so serve on a TCP address for A/B runs")
    if host in ("0.0.0.0", "*"):
        host = "127.0.0.1"
    elif host in ("::", "[::]"):
        host = "::1"
    return host, port


def journal_tail(unit: str, lines: Sequence[str], count: int = 15) -> str:
    """The last journal lines, for the end of an error message."""
    if not lines:
        return ""
    return f"\nLast journal lines of {unit}:\n" + "\n".join(lines[-count:])


def health_url(host: str, port: int) -> str:
    shown = f"[{host}]" if ":" in host and not host.startswith("[") else host
    return f"http://{shown}:{port}/health"


# ------------------------------------------------------------------ decisions


class PresentPlan(NamedTuple):
    write_files: bool
    restart: bool
    arm_timer: bool

    @property
    def changed(self) -> bool:
        return self.write_files or self.restart or self.arm_timer


def plan_present(files_match: bool, serving_candidate: bool, timer_armed: bool, rollback_after: int | None) -> PresentPlan:
    """What ``present`` must do.

    ``serving_candidate``: the unit is active with our drop-in loaded, its MainPID's environment
    carries the candidate and it is healthy now. Only then is there nothing to restart. A changed
    candidate re-arms the timer with a fresh countdown; an unchanged one keeps the armed countdown
    (running ``present`` again must never postpone the dead-man).
    """
    restart = not serving_candidate
    arm = rollback_after is not None and (restart or not files_match or not timer_armed)
    return PresentPlan(write_files=not files_match, restart=restart, arm_timer=arm)


# ------------------------------------------------------------------ the dead-man script and timer

_ROLLBACK_SCRIPT = r'''#!{python}
# Written by llmfleet.specdec.unit_override: the dead-man rollback of {unit} (run by {timer}).
# Removes the A/B override, restarts {unit} with its production config and checks /health.
# Self-contained on purpose: it must work with the controller gone. Prints to the journal.
import json
import math
import os
import subprocess
import sys
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


def healthy(pid_before):
    show = subprocess.run(["systemctl", "show", CONFIG["unit"], "-p", "MainPID", "--value"],
                          stdout=subprocess.PIPE, universal_newlines=True)
    pid = show.stdout.strip()
    if pid in ("", "0") or pid == pid_before:
        return None
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({{}}))
    try:
        with opener.open(CONFIG["url"], timeout=2) as reply:
            return pid if reply.status == 200 else None
    except Exception:
        return None


def main():
    started = time.monotonic()
    removed = [path for path in (CONFIG["dropin"], CONFIG["env_file"]) if remove(path)]
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


def render_rollback_script(paths: OverridePaths, python: str, url: str, health_timeout: int) -> str:
    config = json.dumps({
        "unit": paths.unit, "dropin": paths.dropin, "dropin_dir": paths.dropin_dir, "env_file": paths.env_file,
        "script": paths.script, "meta": paths.meta, "state_dir": paths.state_dir,
        "url": url, "health_timeout": int(health_timeout),
    }, sort_keys=True)
    return _ROLLBACK_SCRIPT.format(python=python, unit=paths.unit, timer=paths.timer, config=config)


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


def timer_command(paths: OverridePaths, deadline_epoch: float, python: str, health_timeout: int) -> List[str]:
    """The systemd-run line that arms the dead-man: a wall-clock deadline, 1 s accuracy, a oneshot service.

    Not ``--on-active``: systemd (252) re-bases OnActiveSec= timers on every daemon-reload, so each
    reload would postpone the rollback (measured: a reload 5 s in moved a 12 s timer to 17 s). An
    OnCalendar= instant does not move.
    """
    return [
        "systemd-run",
        f"--unit={paths.rollback_unit}",
        f"--description={COLLECTION} dead-man rollback of {paths.unit}",
        f"--on-calendar={calendar_spec(deadline_epoch)}",
        "--timer-property=AccuracySec=1s",
        "--property=Type=oneshot",
        f"--property=TimeoutStartSec={int(health_timeout) + 60}",
        python,
        paths.script,
    ]


# ------------------------------------------------------------------ parsing what the host says


def parse_show(text: str) -> Dict[str, List[str]]:
    """``systemctl show`` output → property → values (EnvironmentFiles repeats one line per file)."""
    props: Dict[str, List[str]] = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep:
            props.setdefault(key, []).append(value)
    return props


def environment_files(values: Sequence[str]) -> List[Tuple[str, bool]]:
    """``EnvironmentFiles=/etc/x.env (ignore_errors=no)`` values → (path, ignore_errors)."""
    files = []
    for value in values:
        match = re.match(r"(.*) \(ignore_errors=(yes|no)\)\Z", value)
        if match:
            files.append((match.group(1), match.group(2) == "yes"))
        elif value:
            files.append((value, False))
    return files


def cgroup_path(text: str) -> str | None:
    """The cgroup systemd tracks a process in, from ``/proc/<pid>/cgroup``; None when there is none.

    The ``name=systemd`` hierarchy when there is one (cgroup v1 and hybrid: there the unified ``0::``
    line may name another tree), else the unified hierarchy's ``0::`` line (cgroup v2).
    """
    unified = None
    for line in text.splitlines():
        _dummy, _dummy, rest = line.partition(":")
        controllers, sep, path = rest.partition(":")
        if not sep:
            continue
        if "name=systemd" in controllers.split(","):
            return path
        if not controllers and line.startswith("0:"):
            unified = path
    return unified


def within_cgroup(path: str | None, control_group: str) -> bool:
    """Whether ``path`` is the unit's ``control_group`` or below it (a shared prefix is not enough)."""
    top = control_group.rstrip("/")
    if not path or not top:  # no unit cgroup (inactive) or the root: nothing is the unit's
        return False
    return path == top or path.startswith(top + "/")


class Listener(NamedTuple):
    address: str
    port: int
    inode: int


def parse_proc_net_tcp(text: str) -> List[Listener]:
    """The LISTEN sockets of a ``/proc/net/tcp`` or ``tcp6`` table."""
    listeners = []
    for line in text.splitlines()[1:]:
        fields = line.split()
        if len(fields) < 10 or fields[3] != "0A":
            continue
        address, _dummy, port_hex = fields[1].rpartition(":")
        try:
            listeners.append(Listener(address, int(port_hex, 16), int(fields[9])))
        except ValueError:
            continue
    return listeners


# ------------------------------------------------------------------ the host


def _read(path: str) -> str | None:
    # newline="": a carriage return inside a quoted env-file value is part of the value, not a line end
    try:
        with open(path, encoding="utf-8", errors="replace", newline="") as handle:
            return handle.read()
    except (FileNotFoundError, NotADirectoryError):
        return None


class ProcView:
    """Sockets, owners and environments from ``/proc`` (a root argument for the tests)."""

    def __init__(self, proc: str = "/proc") -> None:
        self.proc = proc
        self.unreadable = 0

    def listening_inodes(self, port: int) -> List[int]:
        inodes = []
        for table in ("net/tcp", "net/tcp6"):
            text = _read(os.path.join(self.proc, table))
            if text:
                inodes += [entry.inode for entry in parse_proc_net_tcp(text) if entry.port == port]
        return inodes

    def socket_owners(self, inodes: Sequence[int]) -> List[int]:
        """PIDs holding any of these socket inodes. ``self.unreadable`` counts processes whose fds were hidden."""
        wanted = {f"socket:[{inode}]" for inode in inodes}
        owners = []
        self.unreadable = 0
        for entry in os.listdir(self.proc):
            if not entry.isdigit():
                continue
            fd_dir = os.path.join(self.proc, entry, "fd")
            try:
                for fd in os.listdir(fd_dir):
                    try:
                        if os.readlink(os.path.join(fd_dir, fd)) in wanted:
                            owners.append(int(entry))
                            break
                    except FileNotFoundError:
                        continue
            except PermissionError:
                self.unreadable += 1
            except OSError:
                continue
        return sorted(owners)

    def owners_text(self, owners: Sequence[int]) -> str:
        if owners:
            return ", ".join(self.describe(pid) for pid in owners)
        if getattr(self, "unreadable", 0):
            return (f"a process whose file descriptors are hidden from this module ({self.unreadable} processes "
                    "unreadable: run it as root with CAP_SYS_PTRACE, which root has on a normal host)")
        return "no process found"

    def cgroup(self, pid: int) -> str | None:
        """The cgroup systemd tracks ``pid`` in (see ``cgroup_path``); None when it cannot be read."""
        return cgroup_path(_read(os.path.join(self.proc, str(pid), "cgroup")) or "")

    def describe(self, pid: int) -> str:
        comm = (_read(os.path.join(self.proc, str(pid), "comm")) or "?").strip()
        raw = _read(os.path.join(self.proc, str(pid), "cmdline")) or ""
        cmdline = " ".join(part for part in raw.split("\x00") if part)
        units = [part for part in (self.cgroup(pid) or "").split("/") if part.endswith((".service", ".scope"))]
        where = f", unit {units[-1]}" if units else ""
        return f"pid {pid} ({comm}{where}: {cmdline[:200]})"

    def environ(self, pid: int) -> Dict[str, str]:
        try:
            with open(os.path.join(self.proc, str(pid), "environ"), "rb") as handle:
                raw = handle.read()
        except OSError:
            return {}
        env = {}
        for item in raw.split(b"\x00"):
            name, sep, value = item.decode("utf-8", "replace").partition("=")
            if sep:
                env[name] = value
        return env


def http_get(url: str, timeout: float) -> Tuple[int, str]:
    """(status, start of body); status 0 when nothing answered. Never uses a proxy."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(url, timeout=timeout) as reply:
            return reply.status, reply.read(2048).decode("utf-8", "replace")
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read(2048).decode("utf-8", "replace") if exc.fp else ""
    except (urllib.error.URLError, OSError, ValueError) as exc:
        return 0, str(getattr(exc, "reason", exc))


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


# ------------------------------------------------------------------ the vehicle


def _file_state(path: str) -> Tuple[str | None, int | None]:
    try:
        mode = os.stat(path).st_mode & 0o7777
    except FileNotFoundError:
        return None, None
    return _read(path), mode


def _ensure_private_dir(path: str) -> None:
    if not os.path.isdir(path):
        os.makedirs(path, mode=0o700, exist_ok=True)
        os.chmod(path, 0o700)


def write_private(path: str, text: str, mode: int) -> None:
    """Atomically writes ``text`` with ``mode``: never a moment with other permissions or half a file."""
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix="." + os.path.basename(path) + ".")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fchmod(handle.fileno(), mode)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def _unlink(path: str) -> bool:
    try:
        os.unlink(path)
        return True
    except FileNotFoundError:
        return False


def _rmdir(path: str) -> None:
    try:
        os.rmdir(path)
    except OSError:
        pass


class UnitOverride:
    """present / confirmed / absent for one unit (or absent for every unit, ``unit='*'``)."""

    def __init__(self, *, run: Runner, check_mode: bool = False, run_dir: str = "/run", proc: str = "/proc",
                 python: str = "/usr/bin/python3", http: HttpGet = http_get,
                 clock: Callable[[], float] = time.monotonic, wall: Callable[[], float] = time.time,
                 sleep: Callable[[float], None] = time.sleep, health_timeout: int = 120, port_timeout: int = 30) -> None:
        self.sd = Systemctl(run)
        self.check_mode = check_mode
        self.run_dir = run_dir
        self.proc = ProcView(proc)
        self.python = python
        self.http = http
        self.clock = clock
        self.wall = wall
        self.sleep = sleep
        self.health_timeout = health_timeout
        self.port_timeout = port_timeout

    # ---------------------------------------------------------- facts

    def unit_info(self, unit: str) -> Dict[str, str]:
        return self.sd.show(unit, ["LoadState", "ActiveState", "SubState", "MainPID", "NRestarts", "Result",
                                   "NeedDaemonReload", "DropInPaths", "FragmentPath", "ControlGroup"])

    def base_env(self, paths: OverridePaths) -> Dict[str, str]:
        """The unit's own environment (Environment= then EnvironmentFile=s), our override left out."""
        env: Dict[str, str] = {}
        for value in self.sd.show_all(paths.unit, "Environment"):
            try:
                words = shlex.split(value)
            except ValueError:
                words = value.split()
            for word in words:
                name, sep, val = word.partition("=")
                if sep:
                    env[name] = val
        for path, _dummy in environment_files(self.sd.show_all(paths.unit, "EnvironmentFiles")):
            if os.path.abspath(path) == os.path.abspath(paths.env_file):
                continue
            text = _read(path)
            if text is not None:
                env.update(read_env_values(text))
        return env

    def timer_state(self, paths: OverridePaths) -> Dict[str, Any]:
        timer = self.sd.show(paths.timer, ["LoadState", "ActiveState", "SubState"])
        service = self.sd.show(paths.rollback_service, ["LoadState", "ActiveState"])
        armed = timer["ActiveState"] == "active" and timer["SubState"] == "waiting"
        due_in = None
        meta_text = _read(paths.meta)
        if armed and meta_text:
            try:
                due_in = max(0, math.ceil(float(json.loads(meta_text)["deadline"]) - self.wall()))
            except (ValueError, KeyError, TypeError):
                due_in = None
        return {"timer": paths.timer, "armed": armed, "due_in": due_in,
                "running": service["ActiveState"] in ("activating", "active", "deactivating"),
                "loaded": timer["LoadState"] == "loaded" or service["LoadState"] == "loaded"}

    def serving_pid_ok(self, pid: int, port: int, control_group: str = "") -> Tuple[bool, List[int]]:
        """Whether the port is served by the unit: its ``MainPID`` or a process in its ``control_group``."""
        owners = self.proc.socket_owners(self.proc.listening_inodes(port))
        ok = pid in owners or any(within_cgroup(self.proc.cgroup(owner), control_group) for owner in owners)
        return ok, owners

    def healthy_now(self, unit: str, info: Mapping[str, str], host: str, port: int) -> bool:
        pid = int(info.get("MainPID") or 0)
        if info.get("ActiveState") != "active" or pid == 0:
            return False
        status, _dummy = self.http(health_url(host, port), 2.0)
        return status == 200 and self.serving_pid_ok(pid, port, info.get("ControlGroup", ""))[0]

    # ---------------------------------------------------------- waits

    def wait_port_free(self, unit: str, port: int) -> None:
        deadline = self.clock() + self.port_timeout
        while True:
            inodes = self.proc.listening_inodes(port)
            if not inodes:
                return
            if self.clock() >= deadline:
                owners = self.proc.socket_owners(inodes)
                held_by = self.proc.owners_text(owners)
                raise PortBusyError(
                    f"{unit}: port {port} is still held by {held_by} {self.port_timeout} s after {unit} stopped; "
                    f"stop that process, or give the candidate another LLAMA_ARG_PORT, and run again",
                    port=port, port_owners=owners)
            self.sleep(0.2)

    def wait_healthy(self, unit: str, host: str, port: int, *, not_pid: int | None, since: float | None) -> Dict[str, Any]:
        """Until /health is 200 from the unit's own (new) MainPID; fails early when the unit dies."""
        url = health_url(host, port)
        started = self.clock()
        deadline = started + self.health_timeout
        baseline: int | None = None
        last = "not checked yet"
        while True:
            info = self.unit_info(unit)
            restarts = int(info.get("NRestarts") or 0)
            baseline = restarts if baseline is None else baseline
            pid = int(info.get("MainPID") or 0)
            if info["ActiveState"] == "failed":
                raise NotHealthyError(f"{unit} failed (Result={info.get('Result')}) before {url} answered",
                                      journal=self.sd.journal(unit, since), url=url)
            if restarts > baseline:
                raise NotHealthyError(f"{unit}'s process exited and systemd restarted it (NRestarts {baseline} -> "
                                      f"{restarts}) before {url} answered", journal=self.sd.journal(unit, since), url=url)
            if info["ActiveState"] == "active" and pid and pid != not_pid:
                status, body = self.http(url, 2.0)
                if status == 200:
                    control_group = info.get("ControlGroup", "")
                    ok, owners = self.serving_pid_ok(pid, port, control_group)
                    if ok:
                        return {"healthy": True, "main_pid": pid, "url": url, "port": port,
                                "seconds": round(self.clock() - started, 2)}
                    in_cgroup = f" or a process in its control group {control_group}" if control_group else ""
                    last = (f"{url} answered 200 but port {port} is served by {self.proc.owners_text(owners)}, "
                            f"not by {unit}'s pid {pid}{in_cgroup}")
                else:
                    last = f"{url} answered {status or 'nothing'}: {body.strip()[:120]}"
            else:
                last = f"{unit} is {info['ActiveState']}/{info['SubState']} (MainPID {pid})"
            if self.clock() >= deadline:
                raise NotHealthyError(f"{unit} was not healthy within {self.health_timeout} s: {last}",
                                      journal=self.sd.journal(unit, since), url=url)
            self.sleep(0.25)

    def restart_and_wait(self, unit: str, host: str, port: int) -> Dict[str, Any]:
        """Stop, wait for the port to be free, start, wait for health from the new process."""
        old_pid = int(self.unit_info(unit).get("MainPID") or 0) or None
        self.sd.must(["systemctl", "stop", unit])
        self.wait_port_free(unit, port)
        self.sd.call(["systemctl", "reset-failed", unit])
        since = self.wall() - 1
        rc, out, err = self.sd.call(["systemctl", "start", unit])
        if rc != 0:
            raise NotHealthyError(f"`systemctl start {unit}` failed (rc {rc}): {(err or out).strip()[-300:]}",
                                  journal=self.sd.journal(unit, since))
        return self.wait_healthy(unit, host, port, not_pid=old_pid, since=since)

    # ---------------------------------------------------------- the dead-man

    def arm(self, paths: OverridePaths, seconds: int, production_url: str) -> None:
        self.disarm(paths)
        _ensure_private_dir(os.path.dirname(paths.state_dir))
        _ensure_private_dir(paths.state_dir)
        write_private(paths.script, render_rollback_script(paths, self.python, production_url, self.health_timeout), 0o700)
        armed_at = self.wall()
        deadline = math.ceil(armed_at + int(seconds))
        write_private(paths.meta, json.dumps({"unit": paths.unit, "seconds": int(seconds), "armed_at": armed_at,
                                              "deadline": deadline}) + "\n", 0o600)
        try:
            self.sd.must(timer_command(paths, deadline, self.python, self.health_timeout))
        except UnitOverrideError:
            for path in (paths.script, paths.meta):
                _unlink(path)
            _rmdir(paths.state_dir)
            raise

    def disarm(self, paths: OverridePaths) -> bool:
        """Stops an armed timer; lets a rollback that is running right now finish. True when one was armed."""
        state = self.timer_state(paths)
        if state["armed"]:
            self.sd.must(["systemctl", "stop", paths.timer])
        deadline = self.clock() + self.health_timeout + 30
        while state["running"] and self.clock() < deadline:
            self.sleep(0.25)
            state = self.timer_state(paths)
        if state["loaded"]:
            self.sd.call(["systemctl", "reset-failed", paths.timer, paths.rollback_service])
        return bool(state["armed"])

    # ---------------------------------------------------------- states

    def _require_loaded(self, unit: str) -> Dict[str, str]:
        info = self.unit_info(unit)
        if info["LoadState"] != "loaded":
            raise UnitOverrideError(f"{unit} is not an installed unit (LoadState={info['LoadState']}); deploy it "
                                    "first (role llmfleet.specdec.llamacpp_serve)")
        return info

    def present(self, unit: str, config: EnvConfig, rollback_after: int | None) -> Dict[str, Any]:
        paths = override_paths(unit, self.run_dir)
        info = self._require_loaded(unit)
        want_env = render_env_file(unit, config)
        want_dropin = render_dropin(paths, config)
        env_now, env_mode = _file_state(paths.env_file)
        dropin_now, dropin_mode = _file_state(paths.dropin)
        files_match = env_now == want_env and dropin_now == want_dropin and env_mode == 0o600 and dropin_mode == 0o600
        base = self.base_env(paths)
        host, port = endpoint_of(effective_env(base, config), unit)
        prod_host, prod_port = endpoint_of(base, unit)
        pid = int(info.get("MainPID") or 0)
        serving = (files_match and paths.dropin in info.get("DropInPaths", "").split()
                   and config_matches_environ(config, self.proc.environ(pid) if pid else {})
                   and self.healthy_now(unit, info, host, port))
        timer = self.timer_state(paths)
        plan = plan_present(files_match, serving, timer["armed"], rollback_after)
        result: Dict[str, Any] = {
            "changed": plan.changed, "unit": unit, "state": "present", "restarted": False,
            "env_file": paths.env_file, "dropin": paths.dropin, "url": health_url(host, port), "port": port,
            "diff": [
                {"before_header": paths.dropin, "after_header": paths.dropin, "before": dropin_now or "", "after": want_dropin},
                {"before_header": paths.env_file, "after_header": paths.env_file, "before": env_now or "", "after": want_env},
            ],
        }
        if self.check_mode:
            result["rollback"] = self._rollback_report(paths, rollback_after if plan.arm_timer else None)
            return result
        if not plan.changed:
            result.update(healthy=True, main_pid=pid, rollback=self._rollback_report(paths, None))
            return result
        # The dead-man first: from here on, a controller that dies leaves a host that restores itself.
        if plan.arm_timer:
            self.arm(paths, int(rollback_after or 0), health_url(prod_host, prod_port))
        if plan.write_files:
            _ensure_private_dir(os.path.dirname(paths.state_dir))
            _ensure_private_dir(paths.state_dir)
            _ensure_private_dir(paths.dropin_dir)
            write_private(paths.env_file, want_env, 0o600)
            write_private(paths.dropin, want_dropin, 0o600)
        if plan.write_files or info.get("NeedDaemonReload") == "yes":
            self.sd.daemon_reload()
        if plan.restart:
            try:
                health = self.restart_and_wait(unit, host, port)
                if not config_matches_environ(config, self.proc.environ(health["main_pid"])):
                    raise NotHealthyError(f"{unit}: pid {health['main_pid']} answers {health['url']} but its "
                                          "environment does not carry the candidate (was the override removed meanwhile?)")
            except UnitOverrideError as exc:
                raise self._candidate_failed(paths, exc) from exc
            result.update(health, restarted=True)
        else:
            result.update(healthy=True, main_pid=pid)
        result["rollback"] = self._rollback_report(paths, None)
        return result

    def _candidate_failed(self, paths: OverridePaths, exc: UnitOverrideError) -> UnitOverrideError:
        """The candidate never became healthy: restore production, then say both things loudly."""
        journal = list(exc.details.get("journal") or self.sd.journal(paths.unit, None, 20))
        tail = journal_tail(paths.unit + " (the candidate)", journal)
        try:
            restored = self.absent(paths.unit)
        except UnitOverrideError as restore_exc:
            return UnitOverrideError(
                f"{paths.unit}: the candidate did not become healthy: {exc}. {restore_exc}{tail}",
                restored=False, journal=journal, production_journal=restore_exc.details.get("journal", []))
        return UnitOverrideError(
            f"{paths.unit}: the candidate did not become healthy: {exc}. Production restored and healthy "
            f"(pid {restored.get('main_pid')} answers {restored.get('url')}).{tail}",
            restored=True, main_pid=restored.get("main_pid"), journal=journal,
            **{k: v for k, v in exc.details.items() if k not in ("journal", "url")})

    def confirmed(self, unit: str) -> Dict[str, Any]:
        paths = override_paths(unit, self.run_dir)
        info = self._require_loaded(unit)
        exists = os.path.exists(paths.dropin) or os.path.exists(paths.env_file)
        timer = self.timer_state(paths)
        if not exists:
            raise UnitOverrideError(f"{unit} has no override to confirm (no {paths.dropin}); run state=present first")
        result: Dict[str, Any] = {"changed": bool(timer["armed"]), "unit": unit, "state": "confirmed",
                                  "env_file": paths.env_file, "dropin": paths.dropin}
        host, port = endpoint_of(self.effective_running_env(paths), unit)
        result.update(url=health_url(host, port), port=port)
        if not self.healthy_now(unit, info, host, port):
            due = f" (due in {timer['due_in']} s)" if timer["due_in"] is not None else ""
            armed = (f"the dead-man timer {paths.timer} stays armed{due} and will restore production"
                     if timer["armed"] else "no dead-man timer is armed: run state=absent to restore production")
            raise UnitOverrideError(f"not confirming {unit}: it is not healthy at {health_url(host, port)} "
                                    f"({info['ActiveState']}/{info['SubState']}); {armed}",
                                    journal=self.sd.journal(unit, None, 20))
        result.update(healthy=True, main_pid=int(info.get("MainPID") or 0))
        if timer["armed"] and not self.check_mode:
            self.disarm(paths)
            _unlink(paths.meta)
            _unlink(paths.script)
        result["rollback"] = self._rollback_report(paths, None) if not self.check_mode else {
            "timer": paths.timer, "armed": timer["armed"], "due_in": timer["due_in"]}
        return result

    def effective_running_env(self, paths: OverridePaths) -> Dict[str, str]:
        text = _read(paths.env_file)
        config = None
        if text is not None:
            try:
                config = env_config_from_text(text, paths.env_file)
            except EnvValueError:
                config = None
        return effective_env(self.base_env(paths), config)

    def found(self, paths: OverridePaths) -> List[str]:
        items = [f"{label} {path}" for label, path in (("drop-in", paths.dropin), ("env file", paths.env_file),
                                                       ("rollback script", paths.script), ("rollback meta", paths.meta))
                 if os.path.exists(path)]
        timer = self.timer_state(paths)
        if timer["armed"]:
            due = f" (due in {timer['due_in']} s)" if timer["due_in"] is not None else ""
            items.append(f"armed timer {paths.timer}{due}")
        elif timer["loaded"]:
            items.append(f"spent rollback units {paths.rollback_unit}.{{timer,service}}")
        return items

    def absent(self, unit: str) -> Dict[str, Any]:
        paths = override_paths(unit, self.run_dir)
        info = self.unit_info(unit)
        found = self.found(paths)
        dropin_now = _read(paths.dropin)
        env_now = _read(paths.env_file)
        # Only an override that was in place needs a restart; a spent timer or a stray script does not.
        overridden = dropin_now is not None or env_now is not None
        result: Dict[str, Any] = {
            "changed": bool(found), "unit": unit, "state": "absent", "found": found, "restarted": False,
            "env_file": paths.env_file, "dropin": paths.dropin,
            "diff": [
                {"before_header": paths.dropin, "after_header": paths.dropin, "before": dropin_now or "", "after": ""},
                {"before_header": paths.env_file, "after_header": paths.env_file, "before": env_now or "", "after": ""},
            ],
        }
        if info["LoadState"] != "loaded" and not found:
            raise UnitOverrideError(f"{unit} is not an installed unit (LoadState={info['LoadState']}) and this "
                                    "collection left nothing for it")
        if self.check_mode:
            return result
        if found:
            self.disarm(paths)
            for path in (paths.dropin, paths.env_file, paths.script, paths.meta):
                _unlink(path)
            _rmdir(paths.dropin_dir)
            _rmdir(paths.state_dir)
            _rmdir(os.path.dirname(paths.state_dir))
            self.sd.daemon_reload()
        if info["LoadState"] != "loaded":
            result.update(healthy=None, note=f"{unit} is not installed: removed what was left, restarted nothing")
            return result
        host, port = endpoint_of(self.base_env(paths), unit)
        result.update(url=health_url(host, port), port=port)
        try:
            if overridden:
                health = self.restart_and_wait(unit, host, port)
                result["restarted"] = True
            elif self.healthy_now(unit, info, host, port):
                health = {"healthy": True, "main_pid": int(info["MainPID"])}
            else:
                health = self.wait_healthy(unit, host, port, not_pid=None, since=None)
        except UnitOverrideError as exc:
            journal = list(exc.details.get("journal") or self.sd.journal(unit, None, 20))
            removed = f" after its override was removed (found: {'; '.join(found)})" if found else ""
            raise UnitOverrideError(
                f"PRODUCTION IS NOT HEALTHY: {unit} did not come back{removed}: {exc}"
                f"{journal_tail(unit, journal)}",
                found=found, journal=journal) from exc
        result.update(health)
        return result

    def leftover_units(self) -> List[str]:
        """Every unit this collection left something for: state dirs, drop-ins, rollback timers."""
        units = set()
        state_root = os.path.join(self.run_dir, STATE_DIR_NAME)
        if os.path.isdir(state_root):
            units.update(name for name in os.listdir(state_root) if name.endswith(".service"))
        dropin_root = os.path.join(self.run_dir, "systemd", "system")
        if os.path.isdir(dropin_root):
            for name in os.listdir(dropin_root):
                if name.endswith(".service.d") and os.path.exists(os.path.join(dropin_root, name, DROPIN_NAME)):
                    units.add(name[: -len(".d")])
        for name in self.sd.list_units(ROLLBACK_PREFIX + "*"):
            unit = unit_from_rollback_unit(name)
            if unit:
                units.add(unit)
        return sorted(units)

    def absent_everywhere(self) -> Dict[str, Any]:
        """``unit='*'``: absent for every leftover unit; failures are collected, then raised together."""
        reports: Dict[str, Any] = {}
        failures: List[str] = []
        for unit in self.leftover_units():
            try:
                report = self.absent(unit)
                report.pop("diff", None)
                reports[unit] = report
            except UnitOverrideError as exc:
                reports[unit] = {"failed": True, "msg": str(exc), **exc.details}
                failures.append(f"{unit}: {exc}")
        changed = any(report.get("changed") for report in reports.values())
        if failures:
            raise UnitOverrideError("; ".join(failures), units=reports, changed=changed)
        return {"changed": changed, "unit": "*", "state": "absent", "units": reports}

    def _rollback_report(self, paths: OverridePaths, would_arm: int | None) -> Dict[str, Any]:
        if would_arm is not None:
            return {"timer": paths.timer, "armed": True, "due_in": would_arm}
        state = self.timer_state(paths)
        return {"timer": paths.timer, "armed": state["armed"], "due_in": state["due_in"]}


# ------------------------------------------------------------------ the module's one call


def load_config(env: Mapping[str, Any] | None, env_file: str | None) -> EnvConfig:
    """The candidate from O(env) (a mapping) or O(env_file) (a file on the managed host), validated."""
    if env is not None:
        return env_config_from_mapping(env)
    if env_file is None:
        raise SpecdecError("state=present needs the candidate: give env (a mapping) or env_file (a path on the host)")
    text = _read(env_file)
    if text is None:
        raise SpecdecError(f"env_file {env_file} does not exist on the managed host")
    return env_config_from_text(text, env_file)


def run_unit_override(params: Mapping[str, Any], *, run: Runner, check_mode: bool, python: str) -> Dict[str, Any]:
    """Validates everything first (nothing is written for bad input), then does what O(state) says."""
    state = params["state"]
    health_timeout = int(params.get("health_timeout") or 120)
    port_timeout = int(params.get("port_timeout") or 30)
    rollback_after = params.get("rollback_after")
    every_unit = params["unit"] == "*"
    if every_unit and state != "absent":
        raise SpecdecError("unit='*' (every unit this collection overrode) only goes with state=absent")
    unit = None if every_unit else service_name(params["unit"])
    config = load_config(params.get("env"), params.get("env_file")) if state == "present" else None
    if state == "present" and rollback_after is not None and rollback_after <= health_timeout:
        raise SpecdecError(
            f"rollback_after ({rollback_after} s) must be longer than health_timeout ({health_timeout} s): the dead-man "
            "must not fire while the candidate may still be starting; raise rollback_after or lower health_timeout")
    if health_timeout < 1 or port_timeout < 0:
        raise SpecdecError("health_timeout must be at least 1 s and port_timeout at least 0 s")
    if os.geteuid() != 0:
        raise SpecdecError("unit_override writes under /run and drives systemd: run it as root (become: true)")
    if state == "present" and rollback_after is not None:
        python = rollback_interpreter(python)
    manager = UnitOverride(run=run, check_mode=check_mode, python=python,
                           health_timeout=health_timeout, port_timeout=port_timeout)
    if every_unit:
        return manager.absent_everywhere()
    if unit is None or (state == "present" and config is None):  # the module's required_if; survives python -O
        raise AssertionError("unit_override: unit (and config for state=present) must be given")
    if state == "present":
        return manager.present(unit, config, rollback_after)
    if state == "confirmed":
        return manager.confirmed(unit)
    return manager.absent(unit)
