# Copyright: (c) 2026, llmfleet.specdec contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# Private to the collection: moving a llama.cpp build's 'current' link only after it served production's model.
"""The activation of a llama.cpp build behind module ``llamacpp_activate``.

A build becomes ``current`` on a host only after it has served production's own model:

1. **Canary.** For every unit in ``units`` that serves from the build ``current`` points at now (its
   ``MainPID`` runs a binary inside that build), the new build's server is started beside it as a transient
   systemd unit (``specdec-canary-<unit stem>``) with production's own command line and environment, as
   production's user, on a spare loopback port and with a small context, and must answer ``/health`` (the
   model loaded, llama-server's warm-up decode ran) from its own process. ``RuntimeMaxSec=`` bounds it, so
   a module that dies leaves no canary behind for long. A canary that fails changes nothing.
2. **The dead-man first.** Before ``current`` moves, a self-contained script and a transient timer
   (``specdec-build-rollback-<link>``, a wall-clock instant as in ``_systemd.timer_command``) are armed: unless
   the activation finishes, the host points ``current`` back, puts the build record back and restarts the
   units, whatever happens to the module, the link or the controller.
3. **Switch, restart, health.** ``current`` moves (an atomic rename of a relative link), the build record is
   written, the serving units restart (one ``systemctl restart`` job each), and each must answer ``/health`` on
   its own port from its own new process. Then the script and its record are removed first (a timer that fires
   now finds nothing to do) and the timer is stopped.
4. **On failure** ``current`` goes back, the record is restored, the units restart on the previous build and
   must be healthy again; the error says which build failed, why (the journal), and whether production is back
   (in capitals when it is not).

An activation interrupted before it finished (its record is still in ``/run``) is finished backwards by the
next one before anything else: the previous build is put back first.

The host is reached through an injected runner (systemctl, systemd-run, journalctl), a ``Processes`` view of
``/proc`` and an HTTP getter, so the tests drive every step and every crash point with fakes.
"""
from __future__ import annotations

import fcntl
import json
import math
import os
import re
import socket
import time
from typing import Any, Callable, Dict, List, Mapping, NamedTuple, Sequence, Tuple

from ansible_collections.llmfleet.specdec.plugins.module_utils.build import _build_help, _build_sentinel
from ansible_collections.llmfleet.specdec.plugins.module_utils.build._build_deadman import (
    render_rollback_script,
    timer_command,
)
from ansible_collections.llmfleet.specdec.plugins.module_utils.common._errors import SpecdecError
from ansible_collections.llmfleet.specdec.plugins.module_utils.common._http import probe
from ansible_collections.llmfleet.specdec.plugins.module_utils.state import _host_state
from ansible_collections.llmfleet.specdec.plugins.module_utils.systemd import _pin
from ansible_collections.llmfleet.specdec.plugins.module_utils.systemd._procview import (
    ProcView,
    parse_proc_net_tcp,
    read_text,
    within_cgroup,
)
from ansible_collections.llmfleet.specdec.plugins.module_utils.systemd._systemd import (
    STATE_DIR_NAME,
    Runner,
    Systemctl,
    calendar_spec,
    journal_tail,
    override_paths,
    service_name,
)

HttpGet = Callable[[str, float], Tuple[int, str]]
# bench._sentinel.Sentinel, injected by the module (build never measures): plan(unit) -> None or {"args", "ctx_size",
# "seconds"}, judge(plan, canary port) -> its verdict, or a SpecdecError that stops the rollout.
Sentinel = Any
# What systemd puts into a service's environment for that service alone: a canary must not inherit it.
_SERVICE_ONLY_ENV = ("LISTEN_FDS", "LISTEN_PID", "LISTEN_FDNAMES", "NOTIFY_SOCKET", "INVOCATION_ID", "JOURNAL_STREAM",
                     "SYSTEMD_EXEC_PID", "MAINPID", "MANAGERPID", "WATCHDOG_PID", "WATCHDOG_USEC", "RUNTIME_DIRECTORY",
                     "STATE_DIRECTORY", "CACHE_DIRECTORY", "LOGS_DIRECTORY", "CONFIGURATION_DIRECTORY", "CREDENTIALS_DIRECTORY")
_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]*\Z")


class ActivateError(SpecdecError):
    """The activation failed; ``details`` travel into fail_json."""

    def __init__(self, msg: str, **details: Any) -> None:
        super().__init__(msg)
        self.details = details


# ------------------------------------------------------------------ names and paths


class BuildPaths(NamedTuple):
    root: str
    current: str
    state_dir: str
    meta: str
    script: str
    lock: str
    rollback_unit: str

    @property
    def timer(self) -> str:
        return self.rollback_unit + ".timer"

    @property
    def rollback_service(self) -> str:
        return self.rollback_unit + ".service"


def link_stem(current: str) -> str:
    """``/opt/llama.cpp/current`` -> ``opt-llama.cpp-current``: one name per link, usable in a unit name."""
    stem = re.sub(r"[^A-Za-z0-9:_.-]", "-", os.path.normpath(current).strip("/")).strip("-.")
    return stem[:120] or "root"


def build_paths(current: str, run_dir: str = "/run") -> BuildPaths:
    stem = link_stem(current)
    state_dir = os.path.join(run_dir, STATE_DIR_NAME, "llamacpp-build", stem)
    return BuildPaths(root=os.path.dirname(os.path.normpath(current)), current=os.path.normpath(current),
                      state_dir=state_dir, meta=os.path.join(state_dir, "activation.json"),
                      script=os.path.join(state_dir, "rollback.py"), lock=state_dir,
                      rollback_unit="specdec-build-rollback-" + stem)


def canary_unit(unit: str) -> str:
    return "specdec-canary-" + unit[: -len(".service")]


# ------------------------------------------------------------------ files


def _private_dir(path: str) -> None:
    os.makedirs(path, mode=0o700, exist_ok=True)
    os.chmod(path, 0o700)


def write_atomic(path: str, text: str, mode: int) -> None:
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w", encoding="utf-8") as handle:
        handle.write(text)
        handle.flush()
        os.fchmod(handle.fileno(), mode)
        os.fsync(handle.fileno())
    os.replace(tmp, path)


def point_link(current: str, target: str) -> None:
    """``current`` -> ``target`` (relative), by an atomic rename: never a moment without a link."""
    tmp = f"{current}.{os.getpid()}.tmp"
    if os.path.lexists(tmp):
        os.unlink(tmp)
    os.symlink(target, tmp)
    os.replace(tmp, current)


def link_target(current: str) -> str | None:
    try:
        return os.readlink(current)
    except (FileNotFoundError, OSError):
        return None


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


# ------------------------------------------------------------------ the host's processes


class ProcessInfo(NamedTuple):
    pid: int
    exe: str
    argv: List[str]
    env: Dict[str, str]
    uid: int
    gid: int
    groups: List[int]
    cwd: str


class Processes:
    """What ``/proc`` says about a process: its binary, command line, environment, ids and its listening ports."""

    def __init__(self, proc: str = "/proc") -> None:
        self.proc = proc
        self.view = ProcView(proc)

    def info(self, pid: int) -> ProcessInfo | None:
        base = os.path.join(self.proc, str(pid))
        try:
            exe = os.path.realpath(os.readlink(os.path.join(base, "exe")))
            with open(os.path.join(base, "cmdline"), "rb") as handle:
                argv = [part.decode("utf-8", "surrogateescape") for part in handle.read().split(b"\x00")[:-1]]
            cwd = os.readlink(os.path.join(base, "cwd"))
        except OSError:
            return None
        status = read_text(os.path.join(base, "status")) or ""
        ids: Dict[str, List[int]] = {}
        for line in status.splitlines():
            key, _sep, value = line.partition(":")
            if key in ("Uid", "Gid", "Groups"):
                ids[key] = [int(v) for v in value.split() if v.isdigit()]
        return ProcessInfo(pid=pid, exe=exe, argv=argv, env=self.view.environ(pid), uid=(ids.get("Uid") or [0])[0],
                           gid=(ids.get("Gid") or [0])[0], groups=ids.get("Groups") or [], cwd=cwd)

    def listening_ports(self, pid: int, control_group: str = "") -> List[int]:
        """The TCP ports that ``pid``, or a process in ``control_group`` or below it, listens on."""
        listeners = []
        for table in ("net/tcp", "net/tcp6"):
            listeners += parse_proc_net_tcp(read_text(os.path.join(self.proc, table)) or "")
        ports = []
        for listener in listeners:
            if listener.port not in ports and self.serves(listener.port, pid, control_group):
                ports.append(listener.port)
        return sorted(ports)

    def serves(self, port: int, pid: int, control_group: str = "") -> bool:
        owners = self.view.socket_owners(self.view.listening_inodes(port))
        return pid in owners or any(within_cgroup(self.view.cgroup(owner), control_group) for owner in owners)


http_get = probe  # the health probe: no proxy, no redirect


def free_port() -> int:
    """A loopback port nothing listens on now (the kernel's choice)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# ------------------------------------------------------------------ the canary


# Runs as root under systemd-run, reads the canary's spec from a root-only file, drops to production's user and
# execs the new server with production's command line and environment. No dollar sign and no percent sign in this
# text: systemd expands them in a command line.
CANARY_LOADER = (
    "import json,os,sys\n"
    "p=sys.argv[1]\n"
    "s=json.load(open(p))\n"
    "os.unlink(p)\n"
    "os.setgroups(s['groups'])\n"
    "os.setgid(s['gid'])\n"
    "os.setuid(s['uid'])\n"
    "os.chdir(s['cwd'])\n"
    "os.execve(s['argv'][0],s['argv'],s['env'])\n"
)


# Run by the spec's cleanup timer (no dollar or percent sign: systemd expands them in a command line).
SPEC_REMOVER = "import os,sys\ntry:\n os.unlink(sys.argv[1])\nexcept FileNotFoundError:\n pass\n"


def canary_argv(binary: str, production_argv: Sequence[str], port: int, ctx_size: int, extra: Sequence[str]) -> List[str]:
    """The new binary with production's arguments, then the canary's own endpoint and context, which win:
    llama-server reads its arguments in order (a later value replaces an earlier one) and a flag outranks its
    LLAMA_ARG_* variable."""
    return [binary, *production_argv[1:], "--host", "127.0.0.1", "--port", str(port),
            "--ctx-size", str(int(ctx_size)), *[str(arg) for arg in extra]]


def canary_env(production_env: Mapping[str, str]) -> Dict[str, str]:
    return {k: v for k, v in production_env.items() if k not in _SERVICE_ONLY_ENV}


# the dead-man script and its timer live in _build_deadman (re-exported here)


# ------------------------------------------------------------------ the activation


class Serving(NamedTuple):
    """A unit that serves from the build 'current' points at now."""
    unit: str
    process: ProcessInfo
    ports: List[int]
    restarts: int

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.ports[0]}/health"


class Activation:
    """Canary, dead-man, switch, health; or back."""

    def __init__(self, *, run: Runner, check_mode: bool = False, run_dir: str = "/run",
                 processes: Processes | None = None, python: str = "/usr/bin/python3", http: HttpGet = http_get,
                 clock: Callable[[], float] = time.monotonic, wall: Callable[[], float] = time.time,
                 sleep: Callable[[float], None] = time.sleep, port: Callable[[], int] = free_port,
                 sentinel: Sentinel = None) -> None:
        self.sd = Systemctl(run)
        self.check_mode = check_mode
        self.run_dir = run_dir
        self.procs = processes or Processes()
        self.python = python
        self.http = http
        self.clock = clock
        self.wall = wall
        self.sleep = sleep
        self.port = port
        self.sentinel = sentinel
        self.plans: Dict[str, Dict[str, Any]] = {}  # the sentinel's plan per unit, for the check after the switch

    # ---------------------------------------------------------- what serves now

    def serving(self, units: Sequence[str], build_dir: str | None) -> Tuple[List[Serving], List[str]]:
        """The units whose server runs from ``build_dir`` (resolved), and a note for each unit that does not."""
        found: List[Serving] = []
        notes: List[str] = []
        for unit in units:
            info = self.sd.show(unit, ["LoadState", "ActiveState", "MainPID", "ControlGroup", "NRestarts"])
            pid = int(info.get("MainPID") or 0)
            if info["ActiveState"] != "active" or not pid:
                notes.append(f"{unit} is {info['ActiveState'] or 'not installed'}: not restarted")
                continue
            process = self.procs.info(pid)
            if process is None:
                raise ActivateError(f"{unit}: pid {pid} cannot be read in /proc (run as root); nothing was changed")
            if build_dir is None or not (process.exe == build_dir or process.exe.startswith(build_dir.rstrip("/") + "/")):
                notes.append(f"{unit} runs {process.exe}, not a binary of the build 'current' points at: not restarted")
                continue
            ports = self.procs.listening_ports(pid, info.get("ControlGroup", ""))
            if not ports:
                raise ActivateError(f"{unit} (pid {pid}) serves from 'current' but listens on no TCP port, so its health "
                                    "cannot be checked; wait until it serves, or take it out of the units to restart. "
                                    "Nothing was changed")
            found.append(Serving(unit, process, ports, int(info.get("NRestarts") or 0)))
        return found, notes

    # ---------------------------------------------------------- the canary

    def canary(self, unit_name: str, binary: str, argv: Sequence[str], env: Mapping[str, str], ids: Tuple[int, int, List[int]],
               cwd: str, ctx_size: int, extra: Sequence[str], timeout: int,
               judge: Callable[[int], Dict[str, Any]] | None = None, judge_s: int = 0) -> Dict[str, Any]:
        name = canary_unit(unit_name)
        port = self.port()
        spec_dir = os.path.join(self.run_dir, STATE_DIR_NAME, "canary")
        _private_dir(os.path.dirname(spec_dir))
        _private_dir(spec_dir)
        spec_path = os.path.join(spec_dir, name + ".json")
        full_argv = canary_argv(binary, argv, port, ctx_size, extra)
        # The spec holds production's environment: a timer armed before it is written removes it if the canary never
        # starts (the module died in between); the loader deletes it as the canary starts; the timer goes after.
        cleanup = name + "-spec"
        self.sd.call(["systemctl", "stop", cleanup + ".timer"])
        self.sd.call(["systemctl", "reset-failed", cleanup + ".timer", cleanup + ".service"])
        self.sd.call(["systemd-run", f"--unit={cleanup}", f"--description=llmfleet.specdec: remove {spec_path}",
                      f"--on-calendar={calendar_spec(self.wall() + int(timeout) + 60)}", "--timer-property=AccuracySec=1s",
                      "--property=Type=oneshot", f"--property=ConditionPathExists={spec_path}",
                      self.python, "-c", SPEC_REMOVER, spec_path])
        write_atomic(spec_path, json.dumps({"argv": full_argv, "env": canary_env(env), "uid": ids[0], "gid": ids[1],
                                            "groups": ids[2], "cwd": cwd or "/"}), 0o600)
        url = f"http://127.0.0.1:{port}/health"
        since = self.wall() - 1
        self.sd.call(["systemctl", "reset-failed", name + ".service"])
        rc, out, err = self.sd.call(["systemd-run", f"--unit={name}", "--collect", "--quiet",
                                     f"--description=llmfleet.specdec canary of {binary} for {unit_name}",
                                     "--property=Type=exec", f"--property=RuntimeMaxSec={int(timeout) + 30 + judge_s}",
                                     "--property=KillMode=control-group",
                                     self.python, "-c", CANARY_LOADER, spec_path])
        started = self.clock()
        try:
            if rc != 0:
                raise ActivateError(f"the canary of {binary} for {unit_name} did not start: `systemd-run` failed "
                                    f"(rc {rc}): {(err or out).strip()[-300:]}")
            deadline = started + timeout
            last = "not checked yet"
            while True:
                info = self.sd.show(name + ".service", ["ActiveState", "SubState", "MainPID", "Result", "ControlGroup"])
                pid = int(info.get("MainPID") or 0)
                if info["ActiveState"] in ("failed", "inactive", ""):
                    raise ActivateError(f"the canary of {binary} (production's model and command line of {unit_name}) "
                                        f"exited before {url} answered (Result={info.get('Result') or '?'})",
                                        journal=self.sd.journal(name + ".service", since))
                if info["ActiveState"] == "active" and pid:
                    status, body = self.http(url, 2.0)
                    if status == 200 and self.procs.serves(port, pid, info.get("ControlGroup", "")):
                        answer = {"unit": unit_name, "canary": name, "port": port, "pid": pid, "argv": full_argv,
                                  "seconds": round(self.clock() - started, 2)}
                        if judge is not None:  # the sentinel, while the canary still serves
                            answer["sentinel"] = judge(port)
                        return answer
                    last = f"{url} answered {status or 'nothing'}: {body.strip()[:120]}"
                if self.clock() >= deadline:
                    raise ActivateError(f"the canary of {binary} for {unit_name} was not healthy within {timeout} s: {last}",
                                        journal=self.sd.journal(name + ".service", since))
                self.sleep(0.5)
        finally:
            self.sd.call(["systemctl", "stop", name + ".service"])
            _unlink(spec_path)
            self.sd.call(["systemctl", "stop", cleanup + ".timer"])
            self.sd.call(["systemctl", "reset-failed", cleanup + ".timer", cleanup + ".service"])

    def flag_table(self, name: str, binary: str, served: Sequence[Serving]) -> None:
        """The new build's --help against each unit's command line and environment (``_build_help``)."""
        for unit, why in _build_help.check(self.sd.call, binary, [(i.unit, i.process.exe, i.process.argv, i.process.env)
                                                                  for i in served]):
            raise ActivateError(f"build {name} refused at the canary: {unit} runs a config it does not take: "
                                f"{'; '.join(why)}. Nothing was changed; change the promoted config first "
                                "(playbooks/promote.yml) or stay on the running build", refused=why)

    # ---------------------------------------------------------- health of a restarted unit

    def wait_healthy(self, served: Sequence[Serving], timeout: int, since: float) -> Dict[str, Any]:
        """Each unit answers /health on its port from a new process of its own; the first that cannot, raises."""
        deadline = self.clock() + timeout
        done: Dict[str, Any] = {}
        while True:
            for item in served:
                if item.unit in done:
                    continue
                info = self.sd.show(item.unit, ["ActiveState", "SubState", "MainPID", "NRestarts", "Result", "ControlGroup"])
                pid = int(info.get("MainPID") or 0)
                if info["ActiveState"] == "failed" or int(info.get("NRestarts") or 0) > item.restarts:
                    raise ActivateError(f"{item.unit} exited (Result={info.get('Result') or '?'}, NRestarts "
                                        f"{info.get('NRestarts')}) before {item.url} answered",
                                        unit=item.unit, journal=self.sd.journal(item.unit, since))
                if info["ActiveState"] == "active" and pid and pid != item.process.pid:
                    status, _body = self.http(item.url, 2.0)
                    if status == 200 and self.procs.serves(item.ports[0], pid, info.get("ControlGroup", "")):
                        done[item.unit] = {"pid": pid, "url": item.url}
            if len(done) == len(served):
                return done
            if self.clock() >= deadline:
                late = [item.unit for item in served if item.unit not in done]
                raise ActivateError(f"{', '.join(late)} did not answer /health from a new process within {timeout} s",
                                    unit=late[0], journal=self.sd.journal(late[0], since))
            self.sleep(0.5)

    def restart(self, served: Sequence[Serving]) -> None:
        for item in served:
            self.sd.call(["systemctl", "reset-failed", item.unit])
            rc, out, err = self.sd.call(["systemctl", "restart", item.unit])
            if rc != 0:
                raise ActivateError(f"`systemctl restart {item.unit}` failed (rc {rc}): {(err or out).strip()[-300:]}",
                                    unit=item.unit, journal=self.sd.journal(item.unit, None))

    def pins(self, params: Mapping[str, Any], served: Sequence[Serving]) -> Dict[str, Dict[str, Any]]:
        """keep_what_runs (a switch forced past a change pending on disk): each unit's environment as it runs, kept
        as its pin (``_pin``, environment only: the binary changes on purpose), read before any change."""
        out: Dict[str, Dict[str, Any]] = {}
        for item in served if params.get("keep_what_runs") else ():
            paths = override_paths(item.unit, self.run_dir)
            try:
                text = _pin.needed(paths, self.sd.show(item.unit, ["MainPID", "DropInPaths"]), self.sd.call,
                                   self.procs.proc, self.run_dir, command=False)
            except SpecdecError as exc:
                raise ActivateError(f"{exc}; nothing was changed") from None
            if text:
                out[item.unit] = {"pin": os.path.join(paths.dropin_dir, _pin.BUILD_PIN_NAME), "pin_text": text}
        return out

    def pinned(self, meta: Mapping[str, Any], keep: bool) -> None:
        """The record's pins put back (``keep``) before a restart, or dropped once production answered on them."""
        if (_pin.put_back if keep else _pin.drop)(meta.get("units") or []):
            self.sd.daemon_reload()

    # ---------------------------------------------------------- the dead-man

    def arm(self, paths: BuildPaths, meta: Dict[str, Any], seconds: int, health_timeout: int) -> None:
        """The timer first (skipped while its script is missing), then the script, then the record: a module that
        dies at any of these leaves nothing in /run that the timer does not remove, and nothing has moved yet."""
        deadline = math.ceil(self.wall() + int(seconds))
        self.sd.call(["systemctl", "stop", paths.timer])
        self.sd.call(["systemctl", "reset-failed", paths.timer, paths.rollback_service])
        rc, out, err = self.sd.call(timer_command(paths, deadline, self.python, health_timeout))
        if rc != 0:
            raise ActivateError(f"the dead-man of the build switch could not be armed, so 'current' was not moved: "
                                f"`systemd-run` failed (rc {rc}): {(err or out).strip()[-300:]}")
        write_atomic(paths.script, render_rollback_script(paths, self.python), 0o700)
        write_atomic(paths.meta, json.dumps(dict(meta, deadline=deadline, script=paths.script), sort_keys=True) + "\n", 0o600)

    def disarm(self, paths: BuildPaths) -> None:
        """The record first, then the script (a timer that fires in between finds nothing to do, or is skipped),
        then the timer."""
        _unlink(paths.meta)
        _unlink(paths.script)
        self.sd.call(["systemctl", "stop", paths.timer])
        self.sd.call(["systemctl", "reset-failed", paths.timer, paths.rollback_service])

    def timer_active(self, paths: BuildPaths) -> bool:
        _rc, out, _err = self.sd.call(["systemctl", "is-active", paths.timer])
        return out.strip() in ("active", "activating")

    def finish_interrupted(self, paths: BuildPaths, health_timeout: int, rollback_after: int = 0) -> str | None:
        """An activation that never finished left its record: put its previous build back first.

        The dead-man stays armed until the undo answered health (one that is no longer armed is armed again first):
        a second cut anywhere in here leaves a timer that puts the previous build back on its own."""
        text = read_text(paths.meta)
        if text is None:
            return None
        try:
            meta = json.loads(text)
        except ValueError:
            meta = None
        if not isinstance(meta, dict) or not meta.get("previous"):
            self.disarm(paths)
            return f"removed an unreadable activation record {paths.meta}"
        if not self.timer_active(paths) or not os.path.exists(paths.script):
            self.arm(paths, {k: v for k, v in meta.items() if k not in ("deadline", "script")},
                     rollback_after or 2 * int(health_timeout) + 60, health_timeout)
        if link_target(paths.current) == meta.get("new"):
            point_link(paths.current, meta["previous"])
        self.restore_facts(meta)
        units = [Serving(u["unit"], ProcessInfo(0, "", [], {}, 0, 0, [], "/"), [int(u["port"])], 0)
                 for u in meta.get("units") or []]
        self.pinned(meta, keep=True)
        for item in units:
            self.sd.call(["systemctl", "reset-failed", item.unit])
            self.sd.call(["systemctl", "restart", item.unit])
        if units:
            try:
                self.wait_healthy([item._replace(restarts=self.restarts(item.unit)) for item in units],
                                  health_timeout, self.wall() - 1)
            except ActivateError as exc:
                raise ActivateError(f"PRODUCTION IS NOT HEALTHY: an interrupted switch to {meta.get('new')} was undone "
                                    f"('current' points at {meta['previous']} again) but {exc}. Its dead-man "
                                    f"{paths.timer} stays armed and restarts it once more", **exc.details) from exc
        self.pinned(meta, keep=False)
        self.disarm(paths)
        return (f"an interrupted switch to {meta.get('new')} was undone first: 'current' points at {meta['previous']} "
                f"again and {', '.join(item.unit for item in units) or 'no unit'} restarted on it")

    def restarts(self, unit: str) -> int:
        return int(self.sd.show(unit, ["NRestarts"]).get("NRestarts") or 0)

    @staticmethod
    def restore_facts(meta: Mapping[str, Any]) -> None:
        facts = meta.get("facts_file")
        if not facts:
            return
        if meta.get("facts_before") is None:
            _unlink(facts)
        else:
            write_atomic(facts, meta["facts_before"], 0o644)

    # ---------------------------------------------------------- the host-wide guard of the units

    @staticmethod
    def guard(params: Mapping[str, Any], paths: BuildPaths, expires_after: int) -> Dict[str, Any]:
        """The guard's parameters: one run id for every activation of the link (the next one refreshes a lock
        left by a killed one, and undoes that switch first), and no process identity on purpose: a killed
        activation's lock stays until its expiry, which outlasts its dead-man."""
        owner = {"run_id": "build-" + link_stem(paths.current).replace(":", "-"), "pid": os.getpid(),
                 "controller": f"{socket.gethostname()} (llamacpp_activate of {paths.current})"}
        return {"owner": owner, "expires_after": expires_after, "wait": int(params.get("lock_wait") or 0), "poll": 2,
                "state_dir": params.get("state_dir") or _host_state.DEFAULT_STATE_DIR, "state_mode": 0o700}

    def take_units(self, params: Mapping[str, Any], paths: BuildPaths, units: Sequence[str], renew: bool = False) -> List[str]:
        """The host-wide guard of every unit before anything changes (``_host_state.hold``), its expiry covering the
        canaries, the dead-man's wait and its restart; renewed (``renew``) just before the dead-man is armed. The wait
        grows by the sentinel's time where its speed is measured after the switch (the dead-man waits that long too):
        a guard that expired first would let an A/B take the unit while the dead-man may still restart it."""
        tail = int(params["rollback_after"]) + 2 * int(params["health_timeout"]) + 60 \
            + _build_sentinel.after_switch_seconds(self, params)
        each = int(params["canary_timeout"]) + int(params.get("sentinel_timeout") or 0)  # the sentinel judges in it
        canaries = 0 if renew or not params.get("canary", True) else each * max(1, len(units))
        try:
            return _host_state.hold(units, self.guard(params, paths, canaries + tail), run=self.sd.call, now=self.wall,
                                    sleep=self.sleep, run_dir=self.run_dir, renew=renew)
        except _host_state.LockHeldError as exc:
            raise ActivateError(f"build switch of {paths.current} refused: {exc}; nothing was changed",
                                holder=exc.holder) from None
        except SpecdecError as exc:
            raise ActivateError(f"build switch of {paths.current} refused: {exc}") from None

    def release_units(self, params: Mapping[str, Any], paths: BuildPaths, held: Sequence[str]) -> None:
        """Given back unless the dead-man is still armed (a failed rollback): then it stays until it expires."""
        if not os.path.exists(paths.meta):
            _host_state.let_go(held, self.guard(params, paths, 1))

    # ---------------------------------------------------------- the whole

    def activate(self, params: Mapping[str, Any]) -> Dict[str, Any]:
        name = params["name"]
        paths = build_paths(params.get("current") or os.path.join(params["root"], "current"), self.run_dir)
        build_dir = os.path.join(paths.root, name)
        binary = os.path.join(build_dir, params["binary"])
        units = [service_name(unit) for unit in params.get("units") or []]
        health_timeout = int(params["health_timeout"])
        result: Dict[str, Any] = {"changed": False, "current": name, "canary": [], "restarted": [], "notes": []}
        if not self.check_mode:
            if not (os.path.isfile(binary) and os.access(binary, os.X_OK)):
                raise ActivateError(f"{binary} is not an executable file: build {name} is not installed; nothing was changed")
            for directory in (os.path.dirname(os.path.dirname(paths.state_dir)), os.path.dirname(paths.state_dir),
                              paths.state_dir):
                _private_dir(directory)
            # flock() on the link's own state directory, held until the activation returns: no lock file is left
            lock = os.open(paths.lock, os.O_RDONLY | os.O_DIRECTORY)
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                os.close(lock)
                raise ActivateError(f"another activation of {paths.current} is running on this host (it holds "
                                    f"{paths.lock}); nothing was changed") from None
            try:
                held = self.take_units(params, paths, units)
                try:
                    note = self.finish_interrupted(paths, health_timeout, int(params["rollback_after"]))
                    if note:
                        result["notes"].append(note)
                        result["changed"] = True
                    return self._activate(params, paths, name, build_dir, binary, units, result)
                finally:
                    self.release_units(params, paths, held)
            finally:
                os.close(lock)
        return self._activate(params, paths, name, build_dir, binary, units, result)

    def _activate(self, params: Mapping[str, Any], paths: BuildPaths, name: str, build_dir: str, binary: str,
                  units: List[str], result: Dict[str, Any]) -> Dict[str, Any]:
        if os.path.lexists(paths.current) and not os.path.islink(paths.current):
            raise ActivateError(f"{paths.current} is not a link, so it cannot be pointed at {name}: move it away (the "
                                "role keeps each build in its own directory and 'current' as a relative link); "
                                "nothing was changed")
        previous = link_target(paths.current)
        result["previous"] = previous
        if previous == name:
            result["notes"].append(f"'current' already points at {name}: nothing restarted")
            return result
        previous_dir = os.path.realpath(os.path.join(paths.root, previous)) if previous else None
        served, notes = self.serving(units, previous_dir)
        result["notes"] += notes
        result["changed"] = True
        result["would_restart"] = [item.unit for item in served]
        if self.check_mode:
            if self.sentinel is not None:
                result["sentinel_plan"] = _build_sentinel.plan_lines(self, name, served,
                                                                     bool(params.get("speed_after_switch", True)))
            return result
        health_timeout = int(params["health_timeout"])
        # 1. the canary: production's model on the new build, beside production; its flag table, its speculation
        if params.get("flag_table"):
            self.flag_table(name, binary, served)
        if params.get("canary", True):
            for item in served:
                result["canary"].append(_build_sentinel.judged_canary(self, params, name, binary, item, result,
                                                                      ActivateError))
            if not served and params.get("canary_model"):
                result["canary"].append(self.canary(
                    "first-build.service", binary, [binary, "--model", params["canary_model"]], {}, (0, 0, []), "/",
                    int(params["canary_ctx_size"]), params.get("canary_args") or [], int(params["canary_timeout"])))
        facts_file = params.get("facts_file")
        facts = dict(params["facts"], sentinel=result["sentinel"]) if result.get("sentinel") and params.get("facts") \
            is not None else params.get("facts")
        facts_text = json.dumps(facts, indent=4, sort_keys=True) + "\n" if facts is not None else None
        facts_before = read_text(facts_file) if facts_file else None
        if not served:
            point_link(paths.current, name)
            if facts_file and facts_text is not None:
                write_atomic(facts_file, facts_text, 0o644)
            return result
        # 2. the dead-man, then 3. switch, record, restart, health
        pins = self.pins(params, served)
        meta = {"current": paths.current, "previous": previous, "new": name, "health_timeout": health_timeout,
                "facts_file": facts_file if facts_text is not None else None, "facts_before": facts_before,
                "units": [dict({"unit": item.unit, "port": item.ports[0], "url": item.url}, **pins.get(item.unit, {}))
                          for item in served]}
        self.take_units(params, paths, units, renew=True)
        self.arm(paths, meta, int(params["rollback_after"]) + _build_sentinel.after_switch_seconds(self, params),
                 health_timeout)
        self.pinned(meta, keep=True)  # after the dead-man: its script puts them back too, and drops them
        since = self.wall() - 1
        try:
            point_link(paths.current, name)
            if facts_file and facts_text is not None:
                write_atomic(facts_file, facts_text, 0o644)
            self.restart(served)
            result["restarted"] = [item.unit for item in served]
            result["health"] = self.wait_healthy(served, health_timeout, since)
            _build_sentinel.speed_after_switch(self, params, name, served, result, ActivateError, facts_file, facts,
                                               write_atomic)
        except (ActivateError, OSError) as exc:
            raise self.roll_back(paths, meta, served, exc, since) from exc
        self.pinned(meta, keep=False)
        self.disarm(paths)
        result["kept_what_ran"] = sorted(pins)
        return result

    def roll_back(self, paths: BuildPaths, meta: Mapping[str, Any], served: Sequence[Serving], exc: Exception,
                  since: float) -> ActivateError:
        """The new build did not serve: 'current' back, the record back, the units restarted on the old build."""
        details = dict(getattr(exc, "details", {}))
        failed_journal = list(details.pop("journal", []) or [])
        failed_unit = details.pop("unit", served[0].unit)
        if link_target(paths.current) != meta["previous"]:
            point_link(paths.current, meta["previous"])
        self.restore_facts(meta)
        tail = journal_tail(f"{failed_unit} on build {meta['new']}", failed_journal)
        again = [item._replace(process=item.process._replace(pid=0), restarts=self.restarts(item.unit)) for item in served]
        try:
            self.restart(again)
            health = self.wait_healthy(again, int(meta["health_timeout"]), self.wall() - 1)
        except ActivateError as back:
            # the dead-man stays armed: it tries once more on its own
            return ActivateError(
                f"build {meta['new']} did not serve production: {exc}. 'current' points at {meta['previous']} again, "
                f"but PRODUCTION IS NOT HEALTHY on it: {back}. The dead-man {paths.timer} will restart it once more; "
                f"see journalctl -u {failed_unit}.{tail}", rolled_back=True, healthy=False, journal=failed_journal,
                production_journal=back.details.get("journal", []))
        self.pinned(meta, keep=False)
        self.disarm(paths)
        pids = ", ".join(f"{unit} pid {h['pid']}" for unit, h in health.items())
        return ActivateError(
            f"BUILD {meta['new']} WAS ROLLED BACK: it did not serve production ({exc}). 'current' points at "
            f"{meta['previous']} again and production is healthy on it ({pids}).{tail}",
            rolled_back=True, healthy=True, journal=failed_journal)


def run_activation(params: Mapping[str, Any], *, run: Runner, check_mode: bool, python: str,
                   sentinel: Sentinel = None) -> Dict[str, Any]:
    """Validates everything first (nothing changes for bad input), then activates."""
    name = params["name"]
    if not _NAME_RE.match(name or "") or name in (".", ".."):
        raise SpecdecError(f"name {name!r} is not a build directory name (letters, digits and '._+-')")
    if not os.path.isabs(params["root"]):
        raise SpecdecError(f"root {params['root']!r} must be an absolute path")
    binary = params.get("binary") or ""
    if os.path.isabs(binary) or ".." in binary.split("/") or not binary:
        raise SpecdecError(f"binary {binary!r} must be a path inside the build, such as bin/llama-server")
    health_timeout = int(params["health_timeout"])
    if health_timeout < 1 or int(params["canary_timeout"]) < 1 or int(params["canary_ctx_size"]) < 64:
        raise SpecdecError("health_timeout and canary_timeout must be at least 1 s and canary_ctx_size at least 64")
    if int(params["rollback_after"]) <= 2 * health_timeout + 30:
        raise SpecdecError(
            f"rollback_after ({params['rollback_after']} s) must be longer than twice health_timeout ({health_timeout} s) "
            "plus 30 s: the dead-man must not fire while the units load the new build, or the old one again after a "
            "failed switch; raise rollback_after or lower health_timeout")
    for unit in params.get("units") or []:
        service_name(unit)
    if os.geteuid() != 0 and not check_mode:
        raise SpecdecError("llamacpp_activate moves a link under the build root and drives systemd: run it as root "
                           "(become: true)")
    return Activation(run=run, check_mode=check_mode, python=python, sentinel=sentinel).activate(params)
