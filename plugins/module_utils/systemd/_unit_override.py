# Copyright: (c) 2026, llmfleet.specdec contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# Private to the collection: the unit_override manager (present / confirmed / absent), its health and port waits.
"""The change vehicle behind ``unit_override``.

An A/B candidate runs as the production unit itself, changed only by a transient drop-in:

- ``/run/llmfleet-specdec/<unit>/override.env`` (0600) holds the candidate's variables, each quoted by ``_envfile``
  so that systemd hands the process exactly the value given;
- ``/run/systemd/system/<unit>.d/zz-llmfleet-specdec.conf`` (0600) adds that file after the unit's own
  ``EnvironmentFile=`` (a later file wins), plus ``UnsetEnvironment=`` for variables the candidate drops;
- ``/run/llmfleet-specdec/<unit>/rollback.py`` (0700) is a self-contained script that undoes both and restarts the
  unit; ``systemd-run --on-calendar=<now + N s>`` arms it as the transient timer ``specdec-rollback-<unit stem>.timer``.
  Transient units live in ``/run/systemd/transient`` and survive ``daemon-reload`` (a wall-clock deadline, because a
  reload re-bases ``--on-active`` timers); everything under ``/run`` is forgotten by a reboot.

Health is decided by the server, never by a file: ``GET /health`` answers 200 *and* the socket listening on the
port belongs to the unit's new ``MainPID`` (``/proc/net/tcp*`` inode → ``/proc/<pid>/fd``) or to a process in the
unit's own control group or below it (``/proc/<pid>/cgroup`` against the unit's ``ControlGroup``): a container run
by ``podman run --cgroups=split`` serves from a daemonized process in a sub-cgroup of the unit, while
``MainPID`` is the podman client. Before a candidate starts, the port must be free of listeners (bounded wait); a
port still held names the process that holds it.

The decisions (validation, rendering, what to change) are pure functions; ``Systemctl`` and the ``/proc`` readers
are the only places that touch the host, so the tests drive the rest with fakes.

This room: the manager (``UnitOverride``, ``plan_present``, ``run_unit_override``) and its waits; a unit must stay
failed ``FAILED_SETTLE_S`` before the health wait gives up (a restart whose stop ended in a kill shows it failed for
a moment). Elsewhere: names, paths, systemctl, the rollback script (``_systemd``), env files (``_envfile``), /proc.
"""
from __future__ import annotations

import os
import re
import shlex
import time
from typing import Any, Callable, Dict, List, Mapping, NamedTuple, Tuple

from ansible_collections.llmfleet.specdec.plugins.module_utils.common._errors import SpecdecError
from ansible_collections.llmfleet.specdec.plugins.module_utils.common._http import probe
from ansible_collections.llmfleet.specdec.plugins.module_utils.systemd import _deadman, _pin
from ansible_collections.llmfleet.specdec.plugins.module_utils.systemd import _serving_unit as live_unit
from ansible_collections.llmfleet.specdec.plugins.module_utils.systemd._endpoint_env import endpoint_names
from ansible_collections.llmfleet.specdec.plugins.module_utils.systemd._envfile import (
    EnvConfig,
    EnvValueError,
    carries_candidate,
    config_matches_environ,
    effective_env,
    env_config_from_text,
    load_config,
    read_env_files,
    render_dropin,
    render_env_file,
)
from ansible_collections.llmfleet.specdec.plugins.module_utils.systemd._execstart import ExecStart, check_exec_start
from ansible_collections.llmfleet.specdec.plugins.module_utils.systemd._procview import (
    ProcView,
    environment_files,
    read_text,
    within_cgroup,
)
from ansible_collections.llmfleet.specdec.plugins.module_utils.systemd._systemd import (
    BRIDGE_PREFIX,
    ROLLBACK_PREFIX,
    STATE_DIR_NAME,
    OverridePaths,
    Runner,
    Systemctl,
    UnitOverrideError,
    journal_tail,
    override_paths,
    rollback_interpreter,
    service_name,
    unit_from_rollback_unit,
)
from ansible_collections.llmfleet.specdec.plugins.module_utils.systemd._unit_wrapper import environ_mismatch, server_pid

# llama.cpp's own defaults (common/common.h: hostname "127.0.0.1", port 8080).
DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8080
FAILED_SETTLE_S = 5.0

HttpGet = Callable[[str, float], Tuple[int, str]]


class NotHealthyError(UnitOverrideError):
    """The unit did not become healthy (or its port was served by another process) in time."""


class PortBusyError(UnitOverrideError):
    """The port a candidate needs is still held by a process after the bounded wait."""


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


# ------------------------------------------------------------------ HTTP


# The health probe: the collection's one HTTP client, no proxy, no redirect (the dead-man script has its own urllib).
http_get = probe


# ------------------------------------------------------------------ the vehicle

# The dead-man that guards a change when the caller asked for none (present without rollback_after, a restore
# with no timer armed): long enough for the port wait and the health wait, so it never fires mid-change.
GUARD_MARGIN = 60

write_private = _deadman.write_private


def _file_state(path: str) -> Tuple[str | None, int | None]:
    try:
        mode = os.stat(path).st_mode & 0o7777
    except FileNotFoundError:
        return None, None
    return read_text(path), mode


def _rmdir(path: str) -> None:
    try:
        _deadman.rmdir(path)
    except OSError:
        pass


class UnitOverride:
    """present / confirmed / absent for one unit (or absent for every unit, ``unit='*'``).

    The invariant (docs/architecture.md, "Production is never left down"): from the first change on the host
    until production answers health with its own config, something on the host brings production back by itself:
    the dead-man timer (armed before the first change, re-armed through its bridge, disarmed last), or a
    ``systemctl restart`` job, which systemd completes without its caller. There is no stop-then-start that only
    this module could finish.
    """

    def __init__(self, *, run: Runner, check_mode: bool = False, run_dir: str = "/run", proc: str = "/proc",
                 python: str = "/usr/bin/python3", http: HttpGet = http_get,
                 clock: Callable[[], float] = time.monotonic, wall: Callable[[], float] = time.time,
                 sleep: Callable[[float], None] = time.sleep, health_timeout: int = 120, port_timeout: int = 30) -> None:
        self.sd = Systemctl(run)
        self.run = run
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
        self.deadman = _deadman.DeadMan(self.sd, python=python, health_timeout=health_timeout, wall=wall,
                                        clock=clock, sleep=sleep)
        self.keep_what_runs = False  # O(keep_what_runs): a pending change on disk is not the way back (_pin)
        self.try_pending = False  # O(try_pending): the candidate runs on the pending change, what ran is only the way back
        self.apply_pending = False  # O(apply_pending): a restart may start a change pending on disk (else refused)

    @property
    def guard_seconds(self) -> int:
        return self.health_timeout + self.port_timeout + GUARD_MARGIN

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
        files = [path for path, _dummy in environment_files(self.sd.show_all(paths.unit, "EnvironmentFiles"))
                 if os.path.abspath(path) != os.path.abspath(paths.env_file)]
        env.update(read_env_files(files))
        return env

    def production_endpoint(self, paths: OverridePaths, base: Mapping[str, str]) -> Tuple[str, int]:
        """A hand-written unit's from its command line (form exec), else from its env."""
        return (live_unit.production_endpoint(paths.unit, self.run, proc=self.proc.proc, run_dir=self.run_dir)
                or endpoint_of(base, paths.unit))

    def timer_state(self, paths: OverridePaths) -> Dict[str, Any]:
        state = self.deadman.state(paths)
        return {key: state[key] for key in ("timer", "armed", "due_in", "running", "loaded")}

    def unit_owns(self, pid: int, owner: int, control_group: str) -> bool:
        return owner == pid or within_cgroup(self.proc.cgroup(owner), control_group)

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

    def require_port(self, unit: str, port: int, info: Mapping[str, str], *, what: str) -> None:
        """Before anything changes: ``port`` must be free, or held only by the unit itself (which its restart
        frees). Another holder is waited for up to ``port_timeout`` s, then refused naming it; nothing changed."""
        deadline = self.clock() + self.port_timeout
        pid = int(info.get("MainPID") or 0)
        control_group = info.get("ControlGroup", "")
        while True:
            owners = self.proc.socket_owners(self.proc.listening_inodes(port))
            others = [owner for owner in owners if not self.unit_owns(pid, owner, control_group)]
            if not others and (owners or not self.proc.listening_inodes(port)):
                return
            if self.clock() >= deadline:
                held_by = self.proc.owners_text(others) if others else "a process this host does not show"
                raise PortBusyError(
                    f"{unit}: port {port}, which {what} listens on, is held by {held_by}, not by {unit}; nothing was "
                    f"changed ({unit} still serves as before). Stop that process, or give the candidate another "
                    "LLAMA_ARG_PORT, and run again", port=port, port_owners=others)
            self.sleep(0.2)

    def wait_healthy(self, unit: str, host: str, port: int, *, not_pid: int | None, since: float | None) -> Dict[str, Any]:
        """Until /health is 200 from the unit's own (new) MainPID; fails early when the unit dies."""
        url = health_url(host, port)
        started = self.clock()
        deadline = started + self.health_timeout
        baseline: int | None = None
        failed_since: float | None = None
        last = "not checked yet"
        while True:
            info = self.unit_info(unit)
            restarts = int(info.get("NRestarts") or 0)
            baseline = restarts if baseline is None else baseline
            pid = int(info.get("MainPID") or 0)
            failed_since = (self.clock() if failed_since is None else failed_since) if info["ActiveState"] == "failed" else None
            if failed_since is not None and self.clock() - failed_since >= FAILED_SETTLE_S:
                raise NotHealthyError(f"{unit} failed (Result={info.get('Result')}) before {url} answered"
                                      f"{self._port_note(port, pid, info)}", journal=self.sd.journal(unit, since), url=url)
            if restarts > baseline:
                raise NotHealthyError(f"{unit}'s process exited and systemd restarted it (NRestarts {baseline} -> "
                                      f"{restarts}) before {url} answered{self._port_note(port, pid, info)}",
                                      journal=self.sd.journal(unit, since), url=url)
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
                note = "" if "is served by" in last else self._port_note(port, pid, info)
                raise NotHealthyError(f"{unit} was not healthy within {self.health_timeout} s: {last}{note}",
                                      journal=self.sd.journal(unit, since), url=url)
            self.sleep(0.25)

    def _port_note(self, port: int, pid: int, info: Mapping[str, str]) -> str:
        """Names a process outside the unit that holds the port (why the unit could not listen), if any."""
        owners = self.proc.socket_owners(self.proc.listening_inodes(port))
        others = [owner for owner in owners if not self.unit_owns(pid, owner, info.get("ControlGroup", ""))]
        return f"; port {port} is held by {self.proc.owners_text(others)}" if others else ""

    def restart_and_wait(self, unit: str, host: str, port: int) -> Dict[str, Any]:
        """One ``systemctl restart`` job, then the health wait for the new process.

        A job, not a stop and a start: systemd runs a queued job to its end whatever happens to its caller, so
        a module killed after this call leaves a unit that starts by itself. ``--no-block``: the wait that
        follows is bounded by ``health_timeout``, whatever the unit's own start timeout.
        """
        old_pid = int(self.unit_info(unit).get("MainPID") or 0) or None
        self.sd.call(["systemctl", "reset-failed", unit])
        since = self.wall() - 1
        rc, out, err = self.sd.call(["systemctl", "restart", "--no-block", unit])
        if rc != 0:
            raise NotHealthyError(f"`systemctl restart {unit}` failed (rc {rc}): {(err or out).strip()[-300:]}",
                                  journal=self.sd.journal(unit, since))
        return self.wait_healthy(unit, host, port, not_pid=old_pid, since=since)

    # ---------------------------------------------------------- states

    def _require_loaded(self, unit: str) -> Dict[str, str]:
        info = self.unit_info(unit)
        if info["LoadState"] != "loaded":
            raise UnitOverrideError(f"{unit} is not an installed unit (LoadState={info['LoadState']}); deploy it "
                                    "first (role llmfleet.specdec.llamacpp_serve)")
        return info

    def pin_needed(self, paths: OverridePaths, info: Mapping[str, str], base: Mapping[str, str] | None = None) -> str | None:
        """The pin of what runs (keep_what_runs); with ``base``, a pending change refused (``_pin.start_from_running``)."""
        return _pin.start_from_running(paths, info, self.run, self.proc.proc, self.run_dir, base, keep=self.keep_what_runs,
                                       apply=self.apply_pending or self.try_pending or base is None)

    def present(self, unit: str, config: EnvConfig, rollback_after: int | None,
                exec_start: ExecStart | None = None) -> Dict[str, Any]:
        paths = override_paths(unit, self.run_dir)
        info = self._require_loaded(unit)
        want_env = render_env_file(unit, config)
        want_dropin = render_dropin(paths, config) + (exec_start.lines() if exec_start else "")
        env_now, env_mode = _file_state(paths.env_file)
        dropin_now, dropin_mode = _file_state(paths.dropin)
        files_match = env_now == want_env and dropin_now == want_dropin and env_mode == 0o600 and dropin_mode == 0o600
        base = self.base_env(paths)
        if exec_start:  # form exec: both endpoints from the command lines; an unreadable one fails before any change
            try:
                host, port, prod_host, prod_port = live_unit.exec_endpoints(
                    unit, self.run, effective_env(base, config), exec_start.argv, proc=self.proc.proc, run_dir=self.run_dir)
            except SpecdecError as exc:
                raise UnitOverrideError(f"{exc}; nothing was written") from None
        else:  # a server behind a wrapper or on the unit's own line answers where its command line says
            served, own = effective_env(base, config), dict(config.assignments, **dict.fromkeys(config.unset))
            host, port = (live_unit.wrapper_endpoint(unit, self.run, served, proc=self.proc.proc, run_dir=self.run_dir,
                                                     candidate=own) or endpoint_of(served, unit))
            prod_host, prod_port = self.production_endpoint(paths, base)
        pid = int(info.get("MainPID") or 0)
        serving = (files_match and paths.dropin in info.get("DropInPaths", "").split()
                   and config_matches_environ(config, self.proc.environ(pid) if pid else {})
                   and self.runs_command(pid, exec_start, info) and self.healthy_now(unit, info, host, port))
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
        pin = self.pin_needed(paths, info, base) if plan.restart else None
        if self.check_mode:
            result["rollback"] = self._rollback_report(paths, rollback_after if plan.arm_timer else None)
            return result
        if not plan.changed:
            result.update(healthy=True, main_pid=pid, rollback=self._rollback_report(paths, None))
            return result
        if plan.restart:
            # Before anything changes: a port held by another process is refused now, production untouched.
            self.require_port(unit, port, info, what="the candidate")
        # The dead-man first: from here on, a module, link or controller that dies leaves a host that restores
        # itself. Without rollback_after, a guard of the same kind covers the switch until the candidate is
        # healthy, then goes (the operator keeps the candidate, as with state=confirmed).
        guarded = plan.restart and rollback_after is None and not timer["armed"]
        if plan.arm_timer or guarded or pin:
            self.deadman.arm(paths, int(rollback_after or self.guard_seconds), health_url(prod_host, prod_port),
                             pin or _pin.current(paths))
        if pin and not self.try_pending:  # the way back is what ran (armed first: the dead-man restarts on it)
            _pin.write(paths, pin)
            result["pinned"] = paths.pin
        elif pin:  # try_pending: the candidate runs on the disk; only the dead-man's script keeps what ran
            result["kept_for_way_back"] = True
        if plan.write_files:
            for directory in (os.path.dirname(paths.state_dir), paths.state_dir, paths.dropin_dir):
                _deadman.ensure_private_dir(directory)
            _deadman.write_private(paths.env_file, want_env, 0o600)
            _deadman.write_private(paths.dropin, want_dropin, 0o600)
        if plan.write_files or pin or info.get("NeedDaemonReload") == "yes":
            self.sd.daemon_reload()
        if plan.restart:
            try:
                health = self.restart_and_wait(unit, host, port)
                server = server_pid(self.proc.proc, health["main_pid"], self.unit_info(unit).get("ControlGroup", ""))
                unseen = environ_mismatch(config.assignments, config.unset, self.proc.environ(server))
                if unseen:
                    raise NotHealthyError(f"{unit}: pid {server} answers {health['url']} but does not see the "
                                          f"candidate's variables ({'; '.join(unseen)}): a wrapper that sets them "
                                          "itself, or the override removed meanwhile")
                if not self.runs_command(health["main_pid"], exec_start, self.unit_info(unit)):
                    raise NotHealthyError(f"{unit}: pid {health['main_pid']} answers {health['url']} but does not run "
                                          f"the candidate's command line ({self.proc.describe(health['main_pid'])})")
            except UnitOverrideError as exc:
                raise self._candidate_failed(paths, exc) from exc
            result.update(health, restarted=True)
        else:
            result.update(healthy=True, main_pid=pid)
        if guarded:
            self._forget_dead_man(paths)
        result["rollback"] = self._rollback_report(paths, None)
        return result

    def runs_command(self, pid: int, exec_start: ExecStart | None, info: Mapping[str, str]) -> bool:
        """Form exec: the unit's process (or one in its control group) runs exactly the candidate's command line."""
        return exec_start is None or live_unit.cmdline_matches(self.proc.proc, pid, exec_start.argv,
                                                               info.get("ControlGroup", ""))

    def _forget_dead_man(self, paths: OverridePaths) -> None:
        """The meta and the script first (a timer that fires without its script is skipped), the timer last."""
        for path in (paths.meta, paths.script):
            _deadman.unlink(path)
        self.deadman.disarm(paths)

    def _candidate_failed(self, paths: OverridePaths, exc: UnitOverrideError) -> UnitOverrideError:
        """The candidate never became healthy: restore production, then say both things loudly."""
        journal = list(exc.details.get("journal") or self.sd.journal(paths.unit, None, 20))
        tail = journal_tail(paths.unit + " (the candidate)", journal)
        self.try_pending = False  # a trial that failed: the way back is what ran, kept by the dead-man's script
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
        env = self.effective_running_env(paths)
        host, port = live_unit.dropin_endpoint(read_text(paths.dropin) or "", env, unit) or endpoint_of(env, unit)
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
            self._forget_dead_man(paths)
        result["rollback"] = self._rollback_report(paths, None) if not self.check_mode else {
            "timer": paths.timer, "armed": timer["armed"], "due_in": timer["due_in"]}
        return result

    def candidate_config(self, paths: OverridePaths) -> Tuple[EnvConfig | None, bool]:
        """(the candidate in /run, whether its env file exists); a file that does not parse counts as unknown."""
        text = read_text(paths.env_file)
        if text is None:
            return None, False
        try:
            return env_config_from_text(text, paths.env_file), True
        except EnvValueError:
            return None, True

    def effective_running_env(self, paths: OverridePaths) -> Dict[str, str]:
        return effective_env(self.base_env(paths), self.candidate_config(paths)[0])

    def found(self, paths: OverridePaths) -> List[str]:
        named = [*(("drop-in", path) for path in paths.all_dropins), ("what ran, kept", paths.pin), ("env file", paths.env_file),
                 ("rollback script", paths.script), ("rollback meta", paths.meta)]
        items = [f"{label} {path}" for label, path in named if os.path.exists(path)]
        timer = self.deadman.state(paths)
        if timer["armed"]:
            due = f" (due in {timer['due_in']} s)" if timer["due_in"] is not None else ""
            names = [name + ".timer" for name, armed in ((paths.rollback_unit, timer["primary_armed"]),
                                                         (paths.bridge_unit, timer["bridge_armed"])) if armed]
            items.append(f"armed timer {' and '.join(names)}{due}")
        elif timer["loaded"]:
            items.append(f"spent rollback units {paths.rollback_unit}.{{timer,service}}")
        return items

    def runs_override(self, paths: OverridePaths, info: Mapping[str, str], base: Mapping[str, str]) -> bool:
        """Whether the unit may run something other than production now: our drop-in on disk or loaded, a change
        that did not finish, or a process carrying the candidate of the env file left in /run (one that cannot be
        read counts)."""
        if paths.dropin_in_place(info.get("DropInPaths", "")):
            return True
        if os.path.exists(paths.script):
            # A change that did not finish (its dead-man's script is still there): the process may run a candidate
            # the env cannot show (a command-line drop-in), so production is restarted rather than trusted.
            return True
        config, env_file_exists = self.candidate_config(paths)
        if not env_file_exists:
            return False
        pid = int(info.get("MainPID") or 0)
        return config is None or (pid != 0 and carries_candidate(self.proc.environ(pid), base, config))

    def absent(self, unit: str, restart: bool = False) -> Dict[str, Any]:
        """Production back: the restore (an override in place), or with ``restart`` a fresh start of production.

        Order, so that the host alone finishes whatever a death at any step leaves: the port checked (nothing
        changed yet); a dead-man armed if none is; the drop-in removed and reloaded; one restart job; the health
        wait for production's own config; then the env file, the script and its meta removed; the timer disarmed last.
        """
        paths = override_paths(unit, self.run_dir)
        info = self.unit_info(unit)
        found = self.found(paths)
        dropin_now = read_text(paths.dropin)
        env_now = read_text(paths.env_file)
        loaded = info["LoadState"] == "loaded"
        if not loaded and not found:
            raise UnitOverrideError(f"{unit} is not an installed unit (LoadState={info['LoadState']}) and this "
                                    "collection left nothing for it")
        base = self.base_env(paths) if loaded else {}
        overridden = loaded and self.runs_override(paths, info, base)
        host, port = self.production_endpoint(paths, base) if loaded else (DEFAULT_HOST, DEFAULT_PORT)
        # Something of ours is left and production does not answer (a candidate that failed, a restore cut short
        # between its reload and its restart): production is started too.
        down = loaded and bool(found) and not overridden and not self.healthy_now(unit, info, host, port)
        need_restart = loaded and (overridden or restart or down)
        result: Dict[str, Any] = {
            "changed": bool(found) or need_restart, "unit": unit, "state": "absent", "found": found,
            "restarted": False, "env_file": paths.env_file, "dropin": paths.dropin,
            "diff": [
                {"before_header": paths.dropin, "after_header": paths.dropin, "before": dropin_now or "", "after": ""},
                {"before_header": paths.env_file, "after_header": paths.env_file, "before": env_now or "", "after": ""},
            ],
        }
        if not loaded:
            if not self.check_mode:
                _pin.remove(paths)
                self._remove_override(paths, reload=True)
                self._remove_state(paths)
                self.deadman.disarm(paths)
            result.update(healthy=None, note=f"{unit} is not installed: removed what was left, restarted nothing")
            return result
        result.update(url=health_url(host, port), port=port)
        # a fresh start of a production that serves starts from what runs; one that is down is brought back
        pin = self.pin_needed(paths, info, None if down else base) if need_restart and not overridden else None
        if self.check_mode:
            return result
        if need_restart:
            self.require_port(unit, port, info, what="production")
        pin, kept = (None, None) if self.try_pending else (pin, pin or (_pin.current(paths) if need_restart else None))
        dropped = self.try_pending and _pin.remove(paths)  # the tried change was committed: the disk is production
        if (overridden or pin) and not self.deadman.state(paths)["armed"]:
            self.deadman.arm(paths, self.guard_seconds, health_url(host, port), kept)
        if kept and not os.path.exists(paths.pin):  # a fresh start of production restarts what ran, not the disk
            _pin.write(paths, kept)
            pin = kept
        self._remove_override(paths, reload=overridden or bool(pin) or dropped or info.get("NeedDaemonReload") == "yes")
        try:
            if need_restart:
                health = self.restart_and_wait(unit, host, port)
                result["restarted"] = True
                self._require_production(paths, self.base_env(paths), health)  # as loaded now: a commit since
            elif self.healthy_now(unit, info, host, port):
                health = {"healthy": True, "main_pid": int(info["MainPID"]), "url": health_url(host, port), "port": port}
            else:
                health = self.wait_healthy(unit, host, port, not_pid=None, since=None)
        except UnitOverrideError as exc:
            journal = list(exc.details.get("journal") or self.sd.journal(unit, None, 20))
            removed = f" after its override was removed (found: {'; '.join(found)})" if found else ""
            left = self.deadman.state(paths)
            due = f" (due in {left['due_in']} s)" if left["due_in"] is not None else ""
            retry = f" The dead-man timer {paths.timer} stays armed{due} and will restart {unit} again." if left["armed"] else ""
            raise UnitOverrideError(
                f"PRODUCTION IS NOT HEALTHY: {unit} did not come back{removed}: {exc}.{retry}"
                f"{journal_tail(unit, journal)}",
                found=found, journal=journal) from exc
        # Production answers with its own config: what is left goes (the pin: what ran answers, the change pending
        # on disk stays pending), the dead-man last.
        if _pin.remove(paths):
            self.sd.daemon_reload()
        self._remove_state(paths)
        disarmed = self.deadman.disarm(paths)
        if disarmed["ran"] or int(self.unit_info(unit).get("MainPID") or 0) != health["main_pid"]:
            health = self.wait_healthy(unit, host, port, not_pid=None, since=None)
        result.update(health)
        return result

    def _remove_override(self, paths: OverridePaths, reload: bool) -> None:
        """The drop-in (what makes a restart start the candidate), then daemon-reload."""
        _deadman.unlink_all(paths.all_dropins)  # a former name's too
        _rmdir(paths.dropin_dir)
        if reload:
            self.sd.daemon_reload()

    def _remove_state(self, paths: OverridePaths) -> None:
        """The env file, the meta, then the script (a timer that fires after this is skipped), then the dirs."""
        for path in (paths.env_file, paths.meta, paths.script):
            _deadman.unlink(path)
        _rmdir(paths.state_dir)
        _rmdir(os.path.dirname(paths.state_dir))

    def _require_production(self, paths: OverridePaths, base: Mapping[str, str], health: Mapping[str, Any]) -> None:
        config, _dummy = self.candidate_config(paths)
        if carries_candidate(self.proc.environ(health["main_pid"]), base, config):
            raise NotHealthyError(f"{paths.unit}: pid {health['main_pid']} answers {health['url']} but still carries "
                                  f"the candidate of {paths.env_file} (was the drop-in put back meanwhile?)")

    def leftover_units(self) -> List[str]:
        """Every unit this collection left something for: state dirs, drop-ins, rollback timers and bridges."""
        units = set()
        state_root = os.path.join(self.run_dir, STATE_DIR_NAME)
        if os.path.isdir(state_root):
            units.update(name for name in os.listdir(state_root) if name.endswith(".service"))
        dropin_root = os.path.join(self.run_dir, "systemd", "system")
        if os.path.isdir(dropin_root):
            for name in os.listdir(dropin_root):
                left = override_paths(name[:-2], self.run_dir)
                if name.endswith(".service.d") and (left.dropin_in_place() or os.path.exists(left.pin)):
                    units.add(name[: -len(".d")])
        for prefix in (ROLLBACK_PREFIX, BRIDGE_PREFIX):
            for name in self.sd.list_units(prefix + "*"):
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


def run_unit_override(params: Mapping[str, Any], *, run: Runner, check_mode: bool, python: str) -> Dict[str, Any]:
    """Validates everything first (nothing is written for bad input), then does what O(state) says."""
    state = params["state"]
    health_timeout = int(params.get("health_timeout") or 120)
    port_timeout = int(params.get("port_timeout") or 30)
    rollback_after = params.get("rollback_after")
    every_unit = params["unit"] == "*"
    if every_unit and state != "absent":
        raise SpecdecError("unit='*' (every unit this collection overrode) only goes with state=absent")
    if params.get("restart") and state != "absent":
        raise SpecdecError(f"restart=true goes with state=absent (a fresh start of production); state={state} "
                           "restarts the unit whenever its candidate changes")
    if params.get("restart") and every_unit:
        raise SpecdecError("restart=true needs one unit: unit='*' restores every overridden unit and restarts only those")
    _pin.check_options(params)  # keep_what_runs, try_pending, apply_pending
    unit = None if every_unit else service_name(params["unit"])
    exec_start = (check_exec_start(params["exec_start"], params.get("exec_prefix"))
                  if state == "present" and params.get("exec_start") is not None else None)
    if exec_start is not None and not params.get("env") and params.get("env_file") is None:
        config: EnvConfig | None = EnvConfig((), ())  # form exec: the command line is the candidate
    else:
        config = load_config(params.get("env"), params.get("env_file")) if state == "present" else None
    if state == "present" and rollback_after is not None and rollback_after <= health_timeout:
        raise SpecdecError(
            f"rollback_after ({rollback_after} s) must be longer than health_timeout ({health_timeout} s): the dead-man "
            "must not fire while the candidate may still be starting; raise rollback_after or lower health_timeout")
    if health_timeout < 1 or port_timeout < 0:
        raise SpecdecError("health_timeout must be at least 1 s and port_timeout at least 0 s")
    if os.geteuid() != 0:
        raise SpecdecError("unit_override writes under /run and drives systemd: run it as root (become: true)")
    # Every switch is guarded by a dead-man until the unit is healthy (a guard when rollback_after is not given),
    # so present checks the interpreter root's timer runs before anything changes; absent arms one only when it
    # finds an override without a timer, and fails then (still before its first change).
    python_problem = None
    if state == "present":
        python = rollback_interpreter(python)
    elif state == "absent":
        try:
            python = rollback_interpreter(python)
        except SpecdecError as exc:
            python_problem = str(exc)
    manager = UnitOverride(run=run, check_mode=check_mode, python=python,
                           health_timeout=health_timeout, port_timeout=port_timeout)
    manager.deadman.python_problem = python_problem
    manager.keep_what_runs, manager.try_pending, manager.apply_pending = (
        bool(params.get(name)) for name in ("keep_what_runs", "try_pending", "apply_pending"))
    if every_unit:
        return manager.absent_everywhere()
    if unit is None or (state == "present" and config is None):  # the module's required_if; survives python -O
        raise AssertionError("unit_override: unit (and config for state=present) must be given")
    if state == "present":
        return manager.present(unit, config, rollback_after, exec_start)
    if state == "confirmed":
        return manager.confirmed(unit)
    return manager.absent(unit, restart=bool(params.get("restart")))
