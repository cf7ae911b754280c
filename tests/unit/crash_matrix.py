"""The crash matrix harness: every host-changing path, killed at every step boundary, three ways.

A *path* is what one playbook task does to a host (``unit_override`` present, absent, ``rollback.yml``...),
from a start state. Its *steps* are the host changes it makes, in order: each file written or removed
(``_deadman``'s file helpers) and each systemctl / systemd-run call that changes something. A *point* is the
boundary before a step (the module dies before that step happens), or after the last one.

For each point, three faults (the columns):

- ``module SIGKILL``: the module dies at the point; nobody acts afterwards, only the host's systemd (the
  strongest case: a controller that survives would also run its restore);
- ``controller killed``: the controller dies while the module is at the point; the module runs on to its end,
  and no later task ever comes (no next slot, no restore, no lock release);
- ``connection dropped``: the SSH link drops at the point; the module dies with it (SIGHUP, no pipelining) and
  the controller runs nothing more on the host; the operator then runs ``rollback.yml`` when the host answers.

Afterwards, on the fake host (``fakesystemd``) with time moved on: production active with production's config
(by the dead-man's time at the latest), nothing of ours left in /run and no timer, and the unit's lock released
or stale and takeable by a new run. The outcome of a cell says what brought production back.

Another engineer's path (promote, build activation, deploy) is a ``MatrixPath`` whose ``operation`` drives its
own steps through ``Faults.step`` (or through the host's runner and the patched file helpers), registered in
``PATHS``; the table in docs/crash-matrix.md is generated from the run (``python tests/unit/crash_matrix.py``).
"""
from __future__ import annotations

import os
import re
import shutil
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
for extra in (str(HERE), str(ROOT / ".build" / "collections")):
    if extra not in sys.path:
        sys.path.insert(0, extra)

from fakesystemd import FakeSystemd, HealthServer  # noqa: E402
from fakesystemd import _dropin_exec as fakesystemd_exec  # noqa: E402

from ansible_collections.llmfleet.specdec.plugins.module_utils.bench import _sentinel as sen  # noqa: E402
from ansible_collections.llmfleet.specdec.plugins.module_utils.build import _activate as act  # noqa: E402
from ansible_collections.llmfleet.specdec.plugins.module_utils.common._errors import SpecdecError  # noqa: E402
from ansible_collections.llmfleet.specdec.plugins.module_utils.state import _host_state as hs  # noqa: E402
from ansible_collections.llmfleet.specdec.plugins.module_utils.systemd import _deadman, _render  # noqa: E402
from ansible_collections.llmfleet.specdec.plugins.module_utils.systemd import _execstart as es  # noqa: E402
from ansible_collections.llmfleet.specdec.plugins.module_utils.systemd import _serving_unit as su  # noqa: E402
from ansible_collections.llmfleet.specdec.plugins.module_utils.systemd import _unit_override as uo  # noqa: E402
from ansible_collections.llmfleet.specdec.plugins.module_utils.systemd._envfile import env_config_from_mapping  # noqa: E402
from ansible_collections.llmfleet.specdec.plugins.module_utils.systemd._systemd import UnitOverrideError  # noqa: E402
from ansible_collections.llmfleet.specdec.plugins.module_utils.systemd._unit_deploy import UnitDeploy  # noqa: E402
from ansible_collections.llmfleet.specdec.plugins.plugin_utils.steps._steps_envfile import env_file_changes  # noqa: E402

UNIT = "llama-server.service"
ALT = "llama-alt.service"
ROLLBACK_AFTER = 300
HEALTH_TIMEOUT = 20
PORT_TIMEOUT = 5
LOCK_EXPIRES = ROLLBACK_AFTER + HEALTH_TIMEOUT + 60  # the role's spec_ab_lock_expires_after
CANDIDATE_A = {"LLAMA_ARG_SPEC_TYPE": "draft-simple", "LLAMA_ARG_SPEC_DRAFT_MODEL": "/m/draft.gguf"}
CANDIDATE_B = {"LLAMA_ARG_SPEC_TYPE": "ngram-mod", "LLAMA_ARG_SPEC_DRAFT_N_MAX": "8"}
BROKEN = {"LLAMA_ARG_SPEC_TYPE": "draft-simple", "FAKE_FAIL_START": "1"}
COLUMNS = ("module SIGKILL", "controller killed", "connection dropped")


class Killed(BaseException):
    """The module process is gone (SIGKILL, SIGHUP): nothing after this runs, not even a finally."""


class ControllerGone(BaseException):
    """The controller is gone: the module that ran finished, no later task of the play starts."""


class Faults:
    """Counts an operation's host-changing steps and kills it before step ``kill_at`` (1-based); or, with
    ``controller_at``, lets the module at that step run on and starts no later task (``Host.task``)."""

    def __init__(self, kill_at: Optional[int] = None, controller_at: Optional[int] = None,
                 clock: Optional[Callable[[], float]] = None, tasks_only: bool = False) -> None:
        self.kill_at = kill_at
        self.controller_at = controller_at
        self.labels: List[str] = []
        self.dead = False
        self.controller_dead = False
        self.clock = clock
        self.cut_at: Optional[float] = None  # when the fault came (the host's clock), None without one
        self.tasks_only = tasks_only  # only task starts are points (a whole play; its modules' steps are elsewhere)

    def step(self, label: str, task: bool = False) -> None:
        if self.dead:
            raise Killed(label)
        if self.tasks_only and not task:
            return
        self.labels.append(label)
        if self.controller_at is not None and len(self.labels) == self.controller_at:
            self.controller_dead = True
            self._cut()
        if self.kill_at is not None and len(self.labels) == self.kill_at:
            self.dead = True
            self._cut()
            raise Killed(label)

    def _cut(self) -> None:
        if self.clock is not None and self.cut_at is None:
            self.cut_at = self.clock()


_MUTATING = {"restart", "start", "stop", "daemon-reload", "reset-failed"}


def _stable(name: str) -> str:
    """A build's dead-man is named after its link's path (the case's scratch directory): one name in the table."""
    return re.sub(r"specdec-build-rollback-[^ .]*(\.[a-z]+)?", lambda m: "specdec-build-rollback-<link>" + (m.group(1) or ""),
                  name.replace(".cpp-current", "-cpp-current"))


def _label(argv: Sequence[str]) -> Optional[str]:
    argv = list(argv)
    if argv[0] == "systemd-run":
        unit = next(a.split("=", 1)[1] for a in argv if a.startswith("--unit="))
        return _stable(f"systemd-run {unit}" + (".timer" if any(a.startswith("--on-calendar=") for a in argv) else ".service"))
    if argv[0] == "systemctl":
        words = [a for a in argv[1:] if not a.startswith("--")]
        if words and words[0] in _MUTATING:
            return _stable("systemctl " + " ".join(w.replace(".service", "") for w in words))
    return None


CURRENT: List[Host] = []  # the host under test, whose Faults the patched file helpers count into


class Host:
    """One fake host (units, /proc, /run, a lock directory) and the factories a path needs."""

    def __init__(self, root: Path, units: Sequence[str] = (UNIT,), unit_files: bool = False,
                 binary_under: Optional[str] = None, real_unit: bool = False) -> None:
        binary = str(root / binary_under / "current" / "bin" / "llama-server") if binary_under else None
        if real_unit and binary is None:  # a unit file that runs a server binary, as serving_unit_info reads one
            binary = str(root / "opt" / "llama-server")
            Path(binary).parent.mkdir(parents=True, exist_ok=True)
            Path(binary).write_bytes(b"\x7fELF")
            Path(binary).chmod(0o755)
        self.root = root
        self.fake = FakeSystemd(root)
        self.servers = {name: HealthServer.get(index, self.fake) for index, name in enumerate(units)}
        specs: Dict[str, Dict[str, Any]] = {}
        for name, server in self.servers.items():
            env = root / "etc" / (name[: -len(".service")] + ".env")
            env.parent.mkdir(parents=True, exist_ok=True)
            env.write_text(f"LLAMA_ARG_PORT={server.port}\nLLAMA_ARG_MODEL=/m/target.gguf\n")
            specs[name] = {"env_files": [str(env)]}
            if unit_files or real_unit:  # a unit file of its own, as role llamacpp_serve writes one
                unit_file = root / "etc" / "systemd" / name
                unit_file.parent.mkdir(parents=True, exist_ok=True)
                # real_unit: ExecStart= the binary the fake process runs, so serving_unit_info compares it
                command = f"{binary} --port {server.port}" if real_unit else "/usr/bin/python3 /launcher"
                unit_file.write_text(f"[Service]\nEnvironmentFile={env}\nExecStart={command}\n")
                specs[name]["unit_file"] = str(unit_file)
                specs[name]["fragment"] = real_unit
            if binary:
                specs[name]["binary"] = binary
        if binary_under:
            self.build_host(Path(binary).parents[2])
        self.fake.create(specs)
        self.state_dir = str(root / "state")
        self.faults = Faults()
        # What each unit may serve at the end: production's config, or one a path verified and committed.
        self.accepted: Dict[str, List[Dict[str, str]]] = {name: [self.production_env(name)] for name in units}
        CURRENT[:] = [self]

    @staticmethod
    def build_host(root: Path) -> None:
        """Two llama.cpp builds under ``root`` and ``current`` pointing at the old one."""
        for build in ("old-cpu", "new-cpu"):
            binary = root / build / "bin" / "llama-server"
            binary.parent.mkdir(parents=True, exist_ok=True)
            binary.write_text("#!/bin/sh\n")
            binary.chmod(0o755)
        os.symlink("old-cpu", root / "current")

    def task(self, label: str, call: Callable[[], Any]) -> Any:
        """One task of a play: its start is a step boundary; a controller that is gone starts no task."""
        self.faults.step(label, task=True)
        if self.faults.controller_dead:
            raise ControllerGone(label)
        return call()

    def close(self) -> None:
        for server in self.servers.values():
            server.fake = None

    def runner(self, argv: Sequence[str]) -> Tuple[int, str, str]:
        label = _label(argv)
        if label is not None or self.faults.dead:
            self.faults.step(label or "a call after death")
        return self.fake.run(argv)

    def manager(self, **kw: Any) -> uo.UnitOverride:
        return uo.UnitOverride(run=self.runner, run_dir=str(self.fake.run_dir), proc=str(self.fake.proc),
                               python=sys.executable, http=uo.http_get, clock=self.fake.now, wall=self.fake.now,
                               sleep=self.fake.advance, health_timeout=HEALTH_TIMEOUT, port_timeout=PORT_TIMEOUT, **kw)

    def production_env(self, unit: str = UNIT) -> Dict[str, str]:
        return {"LLAMA_ARG_PORT": str(self.servers[unit].port), "LLAMA_ARG_MODEL": "/m/target.gguf"}

    def serves_production(self, unit: str = UNIT) -> bool:
        env = self.fake.serving(unit)
        return env is not None and env in self.accepted.get(unit, [self.production_env(unit)])

    def leftovers(self) -> List[str]:
        run = self.fake.run_dir
        # Files and timers; an empty 0700 directory (a module that died right after creating it) is no state.
        files = [str(p.relative_to(run)) for p in run.rglob("*") if p.is_file() or p.is_symlink()]
        return sorted(files) + [f"unit {name}" for name in self.fake.loaded_transient()]

    def lock(self, run_id: str, **kw: Any) -> Dict[str, Any]:
        params = {"unit": UNIT, "state_dir": self.state_dir, "expires_after": LOCK_EXPIRES, "wait": 0, "poll": 1,
                  "owner": {"run_id": run_id, "controller": "ctl"}, "state_mode": 0o700}
        params.update(kw)
        return hs.acquire(params, run=self.fake.run, check_mode=False, now=self.fake.now, sleep=self.fake.advance)

    def unlock(self, run_id: str) -> None:
        hs.release({"unit": UNIT, "state_dir": self.state_dir, "owner": {"run_id": run_id}}, check_mode=False)


def _config(env: Dict[str, str]) -> Any:
    return env_config_from_mapping(env)


def _applying(host: Host, apply: bool) -> uo.UnitOverride:
    """unit_override apply_pending: a play's restart on the files it just wrote (a commit, or its rescue's put-back)."""
    manager = host.manager()
    manager.apply_pending = apply
    return manager


@dataclass
class MatrixPath:
    """A host-changing path: its start state and the one operation that is killed."""

    name: str
    setup: Callable[[Host], None]
    operation: Callable[[Host], Any]
    units: Tuple[str, ...] = (UNIT,)
    expect_failure: bool = False  # the operation itself fails (a broken candidate), after restoring
    dead_man: int = ROLLBACK_AFTER  # the longest a host alone may take to restore production
    keeps: Optional[Dict[str, str]] = None  # a candidate the operation keeps once healthy (present without a dead-man)
    notes: List[str] = field(default_factory=list)
    tasks: bool = False  # a play of several module calls (``Host.task``): the controller may die between them
    lock_expires: int = LOCK_EXPIRES  # the operation's own lock, if it takes one
    host: Dict[str, Any] = field(default_factory=dict)  # how the fake host is made (``Host`` keywords)
    check: Optional[Callable[[Host], List[str]]] = None  # what else must hold at the end (files, links, records)
    tasks_only: bool = False  # a whole play: only its tasks' starts are points (its modules' steps have their rows)
    pending_start: bool = False  # starts with a change on disk that does not run (it may stay pending, untouched)
    finding: Optional[str] = None  # a known way this path fails (docs/crash-matrix.md names it; a test pins it)


def _from_production(host: Host) -> None:
    host.lock("run-1")


def _from_candidate(host: Host) -> None:
    host.lock("run-1")
    host.manager().present(UNIT, _config(CANDIDATE_A), ROLLBACK_AFTER)


def _from_confirmed(host: Host) -> None:
    host.lock("run-1")
    manager = host.manager()
    manager.present(UNIT, _config(CANDIDATE_A), ROLLBACK_AFTER)
    manager.confirmed(UNIT)


def _two_units(host: Host) -> None:
    manager = host.manager()
    manager.present(UNIT, _config(CANDIDATE_A), ROLLBACK_AFTER)
    manager.present(ALT, _config(CANDIDATE_B), None)


GUARD = HEALTH_TIMEOUT + PORT_TIMEOUT + uo.GUARD_MARGIN

PATHS: List[MatrixPath] = [
    MatrixPath("A/B candidate switch, from production", _from_production,
               lambda h: h.manager().present(UNIT, _config(CANDIDATE_A), ROLLBACK_AFTER)),
    MatrixPath("A/B candidate switch, from another candidate", _from_candidate,
               lambda h: h.manager().present(UNIT, _config(CANDIDATE_B), ROLLBACK_AFTER)),
    MatrixPath("failed candidate (never healthy), restored by present itself", _from_production,
               lambda h: h.manager().present(UNIT, _config(BROKEN), ROLLBACK_AFTER), expect_failure=True),
    MatrixPath("baseline slot after a candidate (absent restart=true)", _from_candidate,
               lambda h: h.manager().absent(UNIT, restart=True)),
    MatrixPath("baseline slot, fresh start of production (absent restart=true)", _from_production,
               lambda h: h.manager().absent(UNIT, restart=True), dead_man=0),
    MatrixPath("restore (absent)", _from_candidate, lambda h: h.manager().absent(UNIT)),
    MatrixPath("restore of a confirmed candidate (absent)", _from_confirmed, lambda h: h.manager().absent(UNIT),
               dead_man=GUARD),
    MatrixPath("present without rollback_after (guarded switch)", _from_production,
               lambda h: h.manager().present(UNIT, _config(CANDIDATE_A), None), dead_man=GUARD, keeps=CANDIDATE_A),
    MatrixPath("rollback.yml (unit=*, two units)", _two_units, lambda h: h.manager().absent_everywhere(),
               units=(UNIT, ALT)),
]


def _at_each_cut(path: MatrixPath, name: str, second: Callable[[Host], List[str]]) -> MatrixPath:
    """Two plays on one unit: ``second`` (another play, whole, on a host whose faults are spent) starts right at
    each cut of ``path``; what it returns are problems (it got the unit, or it changed something while refused)."""
    seen: List[str] = []

    def operation(host: Host) -> Any:
        seen.clear()
        try:
            return path.operation(host)
        finally:
            faults, host.faults = host.faults, Faults()
            try:
                seen.extend(second(host))
            finally:
                host.faults = faults

    def check(host: Host) -> List[str]:
        return (path.check(host) if path.check is not None else []) + list(seen)

    return replace(path, name=name, operation=operation, check=check)


def _second_run(host: Host) -> List[str]:
    try:
        host.lock("run-2")
    except hs.LockHeldError:
        return []
    host.unlock("run-2")
    return ["a second A/B took the unit's lock at the cut of the first"]


def _second_ab(path: MatrixPath, name: str) -> MatrixPath:
    """A/B x A/B: a second run (run-2) tries to take the unit right at each cut of ``path`` (run-1's step): it must
    be refused while run-1's lock lives or its dead-man is armed (the cut run's candidate may still serve)."""
    return _at_each_cut(path, name, _second_run)


PATHS += [
    _second_ab(PATHS[0], "A/B x A/B: a second run at each cut of a candidate switch (refused, run-1's lock lives)"),
    _second_ab(PATHS[3], "A/B x A/B: a second run at each cut of a baseline slot (refused: no dead-man, the lock)"),
]

# ------------------------------------------------------------------ plays of several modules: promote, deploy, build
#
# Each is the host-changing tasks of its playbook or role, in order, with the rescue the play runs when a module
# fails (``Host.task``: a task's start is a step boundary; a controller that is gone starts no task).

PROMOTED = {"LLAMA_ARG_SPEC_TYPE": "ngram-mod", "LLAMA_ARG_SPEC_NGRAM_SIZE_N": "4"}
PROMOTED_BROKEN = {"LLAMA_ARG_SPEC_TYPE": "ngram-mod", "FAKE_FAIL_START": "1"}
NEW_UNIT = {"FAKE_UNIT": "v2"}  # what the model reads of a new unit file (a new ExecStart=, launcher or venv)


def _write(path: Path, text: str) -> None:
    """ansible.builtin.copy: one atomic rename, so the task's start is its only step boundary."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def _env_path(host: Host) -> Path:
    return host.root / "etc" / "llama-server.env"


def _with(host: Host, *extra: Dict[str, str]) -> Dict[str, str]:
    env = host.production_env()
    for item in extra:
        env.update(item)
    return env


def _accepting(*extra: Dict[str, str]) -> Callable[[Host], None]:
    """A start state of production, where the new config is production too once it answered (committed)."""
    def setup(host: Host) -> None:
        host.accepted[UNIT].append(_with(host, *extra))
    return setup


def _vehicle_play(new_vars: Dict[str, str], owner: str, record: bool, forced: bool = False,
                  rendered: bool = False) -> Callable[[Host], None]:
    """playbooks/promote.yml (``record``), or roles llamacpp_serve / vllm_serve redeploying a changed env file
    (tasks/files.yml): lock; the change as an override under the dead-man and health; the commit; the override
    removed, production restarted on the new file and checked; on failure the previous files back; the lock
    released in any case. ``forced``: past a change pending on disk (specdec_force), the trial tries it with the
    change (keep_what_runs, try_pending: what ran is only the dead-man's way back) and the restart on the committed
    file is try_pending too; the rescue restores what ran. ``rendered``: the new file is rendered from the inventory
    (a deploy), not the file on disk with the change added (a promotion)."""
    def trial(host: Host) -> uo.UnitOverride:
        manager = host.manager()
        manager.keep_what_runs = manager.try_pending = forced
        return manager

    def play(host: Host) -> None:
        env_path = _env_path(host)
        old_text = env_path.read_text()
        base_text = "".join(f"{k}={v}\n" for k, v in host.production_env().items()) if rendered else old_text
        new_text = base_text + "".join(f"{name}={value}\n" for name, value in new_vars.items())
        record_path = host.root / "etc" / "llama-server.promoted.json"
        host.task("ab_lock state=present", lambda: host.lock(owner))
        committed = False
        error: Optional[UnitOverrideError] = None
        try:
            changes = env_file_changes(new_text, old_text)
            host.task("unit_override state=present", lambda: trial(host).present(UNIT, _config(changes), ROLLBACK_AFTER))
            host.task("copy: commit the env file", lambda: _write(env_path, new_text))
            committed = True
            if record:
                host.task("copy: commit the promotion record", lambda: _write(record_path, '{"config": "winner"}\n'))
            host.task("unit_override state=absent", lambda: trial(host).absent(UNIT))
        except UnitOverrideError as exc:
            error = exc
            if committed:
                host.task("copy: put the previous env file back", lambda: _write(env_path, old_text))
                if record:
                    host.task("file: remove the failed promotion's record", record_path.unlink)
            try:
                host.task("unit_override state=absent (rescue)",
                          lambda: _applying(host, committed).absent(UNIT, restart=committed))
            except UnitOverrideError:
                pass  # ignore_errors: the next task says whether production is back
        host.task("ab_lock state=absent", lambda: host.unlock(owner))
        if error is not None:
            raise error
    return play


def _unit_file_play(new_unit: Dict[str, str], new_vars: Dict[str, str], keep: bool = False) -> Callable[[Host], None]:
    """Roles llamacpp_serve / vllm_serve redeploying a changed unit file, launcher and env file (module
    unit_deploy under the unit's lock); ``keep``: forced past a pending change (keep_what_runs)."""
    def play(host: Host) -> None:
        unit_file = Path(host.fake.state()["units"][UNIT]["unit_file"])
        env_path = _env_path(host)
        launcher = host.root / "launcher"
        lines = "".join(f"Environment={name}={value}\n" for name, value in new_unit.items())
        files = [{"path": str(launcher), "content": "v2\n", "mode": 0o755},
                 {"path": str(env_path), "mode": 0o640,
                  "content": env_path.read_text() + "".join(f"{k}={v}\n" for k, v in new_vars.items())},
                 {"path": str(unit_file), "mode": 0o644,
                  "content": unit_file.read_text().replace("ExecStart=", lines + "ExecStart=")}]
        host.task("ab_lock state=present", lambda: host.lock("deploy-1"))
        error: Optional[UnitOverrideError] = None
        try:
            host.task("unit_deploy", lambda: UnitDeploy(host.manager(), keep_what_runs=keep).deploy(UNIT, files,
                                                                                                    ROLLBACK_AFTER))
        except UnitOverrideError as exc:
            error = exc
        host.task("ab_lock state=absent", lambda: host.unlock("deploy-1"))
        if error is not None:
            raise error
    return play


def _with_launcher(host: Host) -> None:
    (host.root / "launcher").write_text("v1\n")
    (host.root / "launcher").chmod(0o755)


def _unit_files_back(new_ok: bool) -> Callable[[Host], List[str]]:
    """The launcher and the unit file are the previous ones, or the new ones only with the verified config."""
    def check(host: Host) -> List[str]:
        serving = host.fake.serving(UNIT) or {}
        launcher = (host.root / "launcher").read_text()
        new = serving.get("FAKE_UNIT") == "v2"
        if new and not new_ok:
            return ["the unit serves a change that never answered"]
        if launcher != ("v2\n" if new else "v1\n"):
            return [f"the launcher is {launcher!r} while the unit serves {'new' if new else 'previous'} files"]
        return []
    return check


BUILD_ROOT = Path("opt") / "llama.cpp"


class _Build:
    """llamacpp_build's activation (one module, llamacpp_activate) on the fake host: the unit serves from
    <root>/opt/llama.cpp/current, its canary answers on a second loopback port."""

    def __init__(self, canary: bool, broken: bool, keep: bool = False, sentinel: Optional[_Sentinel] = None) -> None:
        self.canary = canary
        self.broken = broken
        self.keep = keep  # keep_what_runs: build.yml forced past a change pending on disk
        self.sentinel = sentinel  # the build sentinel (a unit with a promoted config): its measuring is a point too

    def setup(self, host: Host) -> None:
        root = host.root / BUILD_ROOT
        (host.root / "etc" / "llamacpp-build.json").write_text('{"version": "old"}\n')
        if self.broken:
            (root / "new-cpu" / "BROKEN").write_text("cannot load the model\n")

    def operation(self, host: Host) -> Any:
        root = host.root / BUILD_ROOT
        canary_port = HealthServer.get(len(host.servers), host.fake).port
        activation = act.Activation(run=host.runner, run_dir=str(host.fake.run_dir),
                                    processes=act.Processes(str(host.fake.proc)), python=sys.executable,
                                    http=uo.http_get, clock=host.fake.now, wall=host.fake.now, sleep=host.fake.advance,
                                    port=lambda: canary_port, sentinel=self.sentinel)
        params = {"root": str(root), "name": "new-cpu", "current": None, "binary": "bin/llama-server",
                  "units": [UNIT], "facts_file": str(host.root / "etc" / "llamacpp-build.json"),
                  "facts": {"version": "new"}, "canary": self.canary, "canary_ctx_size": 512, "canary_args": [],
                  "canary_model": None, "canary_timeout": HEALTH_TIMEOUT, "health_timeout": HEALTH_TIMEOUT,
                  "rollback_after": ROLLBACK_AFTER, "state_dir": host.state_dir, "keep_what_runs": self.keep,
                  "sentinel_timeout": SENTINEL_TIMEOUT if self.sentinel else 0, "speed_after_switch": True}
        try:
            return activation.activate(params)
        except act.ActivateError as exc:
            raise UnitOverrideError(str(exc)) from exc

    def check(self, host: Host) -> List[str]:
        """'current', the record and the serving binary agree; the new build only when it can serve."""
        root = host.root / BUILD_ROOT
        current = os.readlink(root / "current")
        record = (host.root / "etc" / "llamacpp-build.json").read_text()
        state = host.fake.state()
        exe = state["procs"][str(state["units"][UNIT]["pid"])].get("exe") if state["units"][UNIT]["pid"] else None
        problems = []
        if current == "new-cpu" and self.broken:
            problems.append("'current' points at a build that cannot serve")
        if current == "new-cpu" and self.sentinel is not None and self.sentinel.slower:
            problems.append("'current' points at a build the sentinel refused")
        if exe != os.path.realpath(root / current / "bin" / "llama-server"):
            problems.append(f"the unit runs {exe} while 'current' points at {current} (a change waits for a restart)")
        if (current == "new-cpu") != ('"new"' in record):
            problems.append(f"the build record {record.strip()} does not name {current}")
        return problems


def _build_path(name: str, canary: bool, broken: bool) -> MatrixPath:
    build = _Build(canary, broken)
    return MatrixPath(name, build.setup, build.operation, expect_failure=broken, check=build.check,
                      host={"binary_under": str(BUILD_ROOT)}, lock_expires=_build_guard_expires(canary))


def _build_guard_expires(canary: bool) -> int:
    """The host-wide guard a killed switch leaves: the canary, its dead-man's wait, its restart and health."""
    return (HEALTH_TIMEOUT if canary else 0) + ROLLBACK_AFTER + 2 * HEALTH_TIMEOUT + 60


# ------------------------------------------------------------------ the build sentinel's steps (issue 47)
#
# A unit with a promoted config has its new build's canary judged by the sentinel (bench/_sentinel.py) while the
# canary serves, and, where the canary ran on other hardware, its speed measured on the unit after the switch, the
# dead-man armed for the longer wait (rollback_after + sentinel_timeout). Measuring changes nothing on the host, but
# the module can die while it sends the promoted traffic: each is a point of these rows (the cuts that used to be
# tests/unit/test_build_sentinel.py's two crash-point tests; the sentinel's verdicts themselves are tested there).
SENTINEL_TIMEOUT = 600  # llamacpp_activate's default: the dead-man's wait after the switch grows by it
AT_THE_CANARY = "the sentinel's traffic to the canary and production"
AFTER_THE_SWITCH = "the sentinel's traffic to the unit on the new build"


class _Sentinel:
    """bench._sentinel.Sentinel's face to the activation (plan, skipped, judge, after_switch) on the fake host: each
    measurement is a step of the matrix; ``slower`` refuses at the canary, or (``after_switch``) after the switch."""

    def __init__(self, after_switch: bool, slower: bool) -> None:
        self.after = after_switch
        self.slower = slower

    def plan(self, serving: Dict[str, Any]) -> Dict[str, Any]:
        return {"unit": serving["unit"], "config": "draft-n3", "args": ["--metrics"], "ctx_size": 512,
                "seconds": SENTINEL_TIMEOUT, "after_switch": self.after}

    def skipped(self, unit: str) -> str:
        return "-"

    def _verdict(self, plan: Dict[str, Any], where: str) -> Dict[str, Any]:
        CURRENT[-1].faults.step(where)
        if self.slower and (where == AFTER_THE_SWITCH) == self.after:
            raise sen.SentinelError(f"build new-cpu with config 'draft-n3' is a regression ({where})",
                                    {"regressions": ["acceptance" if where == AT_THE_CANARY else "speed"]})
        return {"unit": plan["unit"], "build": "new-cpu", "config": "draft-n3", "accepted_slower": False,
                "regressions": []}

    def judge(self, plan: Dict[str, Any], port: int) -> Dict[str, Any]:
        return self._verdict(plan, AT_THE_CANARY)

    def after_switch(self, plan: Dict[str, Any]) -> Dict[str, Any]:
        return self._verdict(plan, AFTER_THE_SWITCH)


def _sentinel_path(name: str, after_switch: bool, slower: bool) -> MatrixPath:
    build = _Build(canary=True, broken=False, sentinel=_Sentinel(after_switch, slower))
    return MatrixPath(name, build.setup, build.operation, expect_failure=slower, check=build.check,
                      host={"binary_under": str(BUILD_ROOT)}, dead_man=ROLLBACK_AFTER + SENTINEL_TIMEOUT,
                      lock_expires=_build_guard_expires(True) + 2 * SENTINEL_TIMEOUT)


class _KillAtLabel(Faults):
    """Kills at the first step whose label starts with ``prefix`` (to make a start state)."""

    def __init__(self, prefix: str) -> None:
        super().__init__()
        self.prefix = prefix

    def step(self, label: str) -> None:
        if not self.dead and label.startswith(self.prefix):
            self.dead = True
            raise Killed(label)
        super().step(label)


class _AfterInterrupted(_Build):
    """The start state an activation killed at its restart leaves ('current' moved, the unit not restarted, the
    record and the dead-man in /run, the unit's lock held): the next activation undoes it first, then switches."""

    def __init__(self) -> None:
        super().__init__(canary=False, broken=False)

    def setup(self, host: Host) -> None:
        super().setup(host)
        faults, host.faults = host.faults, _KillAtLabel("systemctl restart")
        try:
            super().operation(host)
        except Killed:
            pass
        finally:
            host.faults = faults
        assert os.readlink(host.root / BUILD_ROOT / "current") == "new-cpu"


class _BuildUnderAB(_Build):
    """Two plays interleaved on one unit (the host-wide guard, ``ab_lock``'s lock).

    ``ab_first``: an A/B holds the lock and its candidate serves when the build switch comes: the switch is refused
    and nothing changes. Else: the build switch runs (cut at each step) and an A/B tries to start right after it
    (at the cut): it must not get the unit while the switch's record, or its dead-man, is pending."""

    def __init__(self, ab_first: bool) -> None:
        super().__init__(canary=True, broken=False)
        self.ab_first = ab_first
        self.seen: List[str] = []

    def setup(self, host: Host) -> None:
        super().setup(host)
        self.seen = []
        if self.ab_first:
            _from_candidate(host)

    def operation(self, host: Host) -> Any:
        try:
            return super().operation(host)
        finally:
            if not self.ab_first:
                self.second_play(host)

    def second_play(self, host: Host) -> None:
        faults, host.faults = host.faults, Faults()
        try:
            paths = act.build_paths(str(host.root / BUILD_ROOT / "current"), str(host.fake.run_dir))
            pending = os.path.exists(paths.meta)
            try:
                host.lock("ab-2")
            except hs.LockHeldError:
                return
            if pending:
                self.seen.append("an A/B took the unit's lock while the build switch was pending")
            host.unlock("ab-2")
        finally:
            host.faults = faults

    def check(self, host: Host) -> List[str]:
        problems = super().check(host) + self.seen
        current = os.readlink(host.root / BUILD_ROOT / "current")
        if self.ab_first and current != "old-cpu":
            problems.append(f"the build switch went ahead under a live A/B: 'current' points at {current}")
        return problems


def _interleaved_path(name: str, ab_first: bool) -> MatrixPath:
    plays = _BuildUnderAB(ab_first)
    return MatrixPath(name, plays.setup, plays.operation, expect_failure=ab_first, check=plays.check,
                      host={"binary_under": str(BUILD_ROOT)}, lock_expires=_build_guard_expires(True))


PLAYS: List[MatrixPath] = [
    MatrixPath("promote.yml (lock, override, commit, restart on the new base file, release)", _accepting(PROMOTED),
               _vehicle_play(PROMOTED, "promote-1", record=True), tasks=True),
    MatrixPath("promote.yml of a config that cannot start", lambda h: None,
               _vehicle_play(PROMOTED_BROKEN, "promote-1", record=True), tasks=True, expect_failure=True),
    MatrixPath("deploy: redeploy of a changed env file (lock, override, commit, restart, release)",
               _accepting(PROMOTED), _vehicle_play(PROMOTED, "deploy-1", record=False), tasks=True),
    MatrixPath("deploy: redeploy of an env file that cannot start", lambda h: None,
               _vehicle_play(PROMOTED_BROKEN, "deploy-1", record=False), tasks=True, expect_failure=True),
    MatrixPath("deploy: redeploy of a changed unit file, launcher and env file (unit_deploy under the lock)",
               lambda h: (_with_launcher(h), _accepting(NEW_UNIT, PROMOTED)(h)),
               _unit_file_play(NEW_UNIT, PROMOTED), tasks=True, host={"unit_files": True},
               check=_unit_files_back(True)),
    MatrixPath("deploy: redeploy of a unit file that cannot start", _with_launcher,
               _unit_file_play({"FAKE_FAIL_START": "1"}, PROMOTED), tasks=True, host={"unit_files": True},
               expect_failure=True, check=_unit_files_back(False)),
    _build_path("build activation (canary, then the switch)", canary=True, broken=False),
    _build_path("build activation of a build that cannot serve, without a canary (the switch is undone)",
                canary=False, broken=True),
    MatrixPath("build activation starting from an interrupted one (undone first, its dead-man armed until health)",
               _AfterInterrupted().setup, _AfterInterrupted().operation, check=_AfterInterrupted().check,
               host={"binary_under": str(BUILD_ROOT)}, lock_expires=_build_guard_expires(False)),
    _sentinel_path("build activation judged by the sentinel at the canary (the promoted config), then the switch",
                   after_switch=False, slower=False),
    _sentinel_path("build activation refused by the sentinel at the canary (nothing changes)",
                   after_switch=False, slower=True),
    _sentinel_path("build activation with a CPU canary: its speed measured after the switch under the dead-man",
                   after_switch=True, slower=False),
    _sentinel_path("build activation slower after the switch (the switch is undone)", after_switch=True, slower=True),
    _interleaved_path("A/B x build: the build switch while an A/B's candidate serves (refused, nothing changes)",
                      ab_first=True),
    _interleaved_path("build x A/B: an A/B that starts at each cut of a build switch (kept off while it is pending)",
                      ab_first=False),
]

# ------------------------------------------------------------------ two plays on one unit: A/B x promote, A/B x deploy
#
# The second play starts right at each cut of the first (the first one's faults spent), as the playbooks in main
# have it: promote.yml and deploy.yml ask require_unit_free.yml (ab_lock state=query) and then
# require_start_from_running.yml before anything, and take the unit's lock for their vehicle (promote.yml itself,
# the roles' tasks/files.yml for a redeploy); role spec_ab asks serving_unit_info (start_from_running) and then
# takes the lock. A deploy's redeploy of a changed env file is promote.yml's vehicle without the record: the
# deploy x A/B rows cut the other vehicle, unit_deploy.


class RefusedError(UnitOverrideError):
    """A play stopped before its first change: the unit is busy, or a change waits on disk."""


def _lock_file(host: Host) -> Path:
    return Path(hs.lock_paths(host.state_dir, UNIT)[0])


def _snapshot(host: Host) -> Any:
    """What a refused play must leave as it found it: /run, the env file, the unit's process, timers, the lock."""
    lock = _lock_file(host)
    return (_run_files(host), _env_path(host).read_text(), _unit_state(host, UNIT), host.fake.loaded_transient(),
            lock.read_text() if lock.exists() else None)


def _require_unit_free(host: Host) -> None:
    """playbooks/tasks/require_unit_free.yml: refused while a run holds the unit's lock or an override is live."""
    free = hs.query({"unit": UNIT, "state_dir": host.state_dir}, run=host.fake.run, now=host.fake.now,
                    proc=str(host.fake.proc), run_dir=str(host.fake.run_dir))
    if free["held"] or free["override_live"]:
        raise RefusedError(f"{UNIT} is busy: {free['why'] or '; '.join(free['override'])}")


def _start_from_running(host: Host, force: bool = False) -> str:
    """serving_unit_info start_from_running=true (require_start_from_running.yml, role spec_ab): what a restart would
    start that does not run, refused unless forced (then it is named in the play's record)."""
    try:
        live = su.read_unit(UNIT, host.fake.run, proc=str(host.fake.proc), run_dir=str(host.fake.run_dir),
                            specifiers=lambda unit, fragment: {})
    except SpecdecError as exc:
        raise RefusedError(str(exc)) from None
    pending = su.pending_changes(live, proc=str(host.fake.proc))
    if pending["differences"] and not force:
        raise RefusedError(su.refuse_pending(UNIT, pending))
    return su.pending_text(pending)


def _promote_and_deploy(host: Host) -> List[str]:
    """A promote play and a deploy play (a changed env file through the vehicle), each from its start."""
    problems = []
    for name, play in (("promote.yml", _vehicle_play(PROMOTED, "promote-2", record=True)),
                       ("deploy.yml", _vehicle_play(PROMOTED, "deploy-2", record=False))):
        before = _snapshot(host)
        try:
            _require_unit_free(host)
            _start_from_running(host)
            play(host)
        except (RefusedError, hs.LockHeldError):
            if _snapshot(host) != before:
                problems.append(f"{name}, refused, changed the host")
            continue
        except SpecdecError as exc:
            problems.append(f"{name} went ahead at the cut and failed: {exc}")
            continue
        problems.append(f"{name} went ahead at the cut")
    return problems


def _pending(host: Host) -> str:
    """What of the first play may still act or wait: files of ours in /run, timers, a change on disk not running."""
    what = []
    files = sorted(_run_files(host))
    if files:
        what.append("in /run: " + ", ".join(files))
    if host.fake.loaded_transient():
        what.append("loaded: " + ", ".join(host.fake.loaded_transient()))
    if host.fake.serving(UNIT) != host.fake.env_on_disk(UNIT):
        what.append("what runs differs from its files on disk")
    return "; ".join(what)


def _ab_start(host: Host) -> List[str]:
    """An A/B's start (serving_unit_info start_from_running, then the lock): kept off while anything is pending."""
    pending = _pending(host)
    try:
        _start_from_running(host)
        host.lock("ab-2")
    except (RefusedError, hs.LockHeldError):
        return []
    host.unlock("ab-2")
    return [f"an A/B took the unit's lock while the first play left {pending}"] if pending else []


_REAL = {"real_unit": True}  # serving_unit_info reads the unit file (the second play's start-from-running check)
INTERLEAVED: List[MatrixPath] = [
    _at_each_cut(replace(PATHS[0], host=_REAL), "A/B x promote, A/B x deploy: each at every cut of a candidate switch "
                 "(refused while the A/B's lock lives, nothing changed)", _promote_and_deploy),
    _at_each_cut(replace(PATHS[3], host=_REAL), "A/B x promote, A/B x deploy: each at every cut of a baseline slot "
                 "(refused while the A/B's lock lives, nothing changed)", _promote_and_deploy),
]


def _deploy_start(host: Host) -> List[str]:
    """deploy.yml's start (require_unit_free.yml, the start-from-running check, then the lock), at a cut of another
    play (an interrupted deploy or promotion): kept off while anything of that play is pending."""
    pending = _pending(host)
    try:
        _require_unit_free(host)
        _start_from_running(host)
        host.lock("deploy-2")
    except (RefusedError, hs.LockHeldError):
        return []
    host.unlock("deploy-2")
    return [f"a deploy took the unit's lock while the first play left {pending}"] if pending else []


def _ab_then_deploy(host: Host) -> List[str]:
    return _ab_start(host) + _deploy_start(host)


# promote x A/B, deploy x A/B and deploy x deploy: an A/B, then a deploy, starts at every cut of promote.yml and of
# a unit file's redeploy (each cut is a start state of an interrupted play); their own rows carry it.
for _at, _play in ((0, "promote x A/B, promote x deploy"), (4, "deploy x A/B, deploy x deploy")):
    PLAYS[_at] = _at_each_cut(replace(PLAYS[_at], host=_REAL), f"{PLAYS[_at].name}; {_play}: an A/B and a deploy at "
                              "every cut (kept off while the lock lives or a change is pending)", _ab_then_deploy)
PATHS += PLAYS + INTERLEAVED

# ------------------------------------------------------------------ form exec: a hand-written unit's promotion
#
# playbooks/tasks/promote_exec.yml on a unit whose own ExecStart= runs the server (form exec): the winner's command
# line as an override (unit_override exec_start) under the dead-man; then the commit, as filter exec_promotion
# renders it: the winner's variables in an env file named by its content (written first, under a name no drop-in
# names yet), then the persistent drop-in /etc/systemd/system/<unit>.d/40-llmfleet-specdec-promoted.conf naming it
# (one atomic rename switches to the new pair), the record; production restarted on it and read back (it runs the
# promoted command line); the earlier promotion's env file removed only then. On failure the previous drop-in and
# env file are put back (or removed) and production restarted.

EXEC_FLAGS = ["--spec-type", "ngram-mod"]
EXEC_VARS = {"LLAMA_ARG_SPEC_NGRAM_SIZE_N": "4"}
EARLIER_FLAGS = ["--spec-type", "ngram-simple"]
EARLIER_VARS = {"LLAMA_ARG_DRAFT_MAX": "8"}


def _unit_argv(host: Host) -> List[str]:
    """The unit file's own command line (what serving_unit_info reads as the unit's argv)."""
    text = Path(host.fake.state()["units"][UNIT]["unit_file"]).read_text()
    return next(line.split("=", 1)[1].split() for line in text.splitlines() if line.startswith("ExecStart="))


def _running_argv(host: Host) -> Optional[List[str]]:
    pid = host.fake.state()["units"][UNIT]["pid"]
    if not pid:
        return None
    return (host.fake.proc / str(pid) / "cmdline").read_text().split("\x00")[:-1]


def _promotion(host: Host, flags: List[str], env: Dict[str, Optional[str]], run_id: str) -> Dict[str, Any]:
    """filter exec_promotion's rendering of a winner measured on this unit (paths under the fake host's root)."""
    argv = _unit_argv(host)
    report = {"run_id": run_id, "baseline": "baseline", "configs": [
        {"name": "baseline", "rendering": {"form": "exec", "exec_start": argv}},
        {"name": "winner", "rendering": {"form": "exec", "exec_start": argv + flags, "override": env}}]}
    promo = _render.exec_promotion(report, "winner", {"unit": UNIT, "form": "exec", "argv": argv},
                                   env_dir=str(host.root / "etc" / "llmfleet-specdec"))
    promo["dropin"] = str(host.root / "etc" / "systemd" / "system" / f"{UNIT}.d" / es.PROMOTED_DROPIN)
    promo["other_dropin"] = str(host.root / "etc" / "systemd" / "system" / f"{UNIT}.d" / es.PROMOTED_DROPIN_LATE)
    return promo


def _variables_promotion(host: Host, env: Dict[str, Optional[str]], run_id: str) -> Dict[str, Any]:
    """filter exec_promotion's rendering of a wrapper unit's winner: its variables alone (the drop-in keeps the
    unit's ExecStart=; the fake's unit stands for the wrapper's, whose server the variables reach)."""
    argv = _unit_argv(host)
    report = {"run_id": run_id, "baseline": "baseline", "configs": [
        {"name": "baseline", "rendering": {"form": "env", "exec_start": None, "argv": argv[1:], "override": {}}},
        {"name": "winner", "rendering": {"form": "env", "exec_start": None, "argv": argv[1:], "override": env}}]}
    promo = _render.exec_promotion(report, "winner", {"unit": UNIT, "form": "env", "kind": "wrapper",
                                                      "argv": ["/usr/local/bin/run-llama.sh"], "server_args": argv[1:]},
                                   env_dir=str(host.root / "etc" / "llmfleet-specdec"))
    promo["dropin"] = str(host.root / "etc" / "systemd" / "system" / f"{UNIT}.d" / es.PROMOTED_DROPIN)
    promo["other_dropin"] = str(host.root / "etc" / "systemd" / "system" / f"{UNIT}.d" / es.PROMOTED_DROPIN_LATE)
    return promo


def _earlier_promotion(host: Host, late: bool = False) -> None:
    """An earlier promotion (its drop-in and env file) that production runs: the start state of a re-promotion.
    ``late``: under the late name (``zx-``), as on a unit whose operator drop-in (override.conf) sorted after the
    usual one then and is gone now, so the new promotion takes the usual name and removes this one."""
    promo = _promotion(host, EARLIER_FLAGS, EARLIER_VARS, "run-0")
    if late:
        promo["dropin"] = promo["other_dropin"]
    Path(promo["env_file"]).parent.mkdir(parents=True, exist_ok=True)
    Path(promo["env_file"]).write_text(promo["env_text"])
    Path(promo["dropin"]).parent.mkdir(parents=True, exist_ok=True)
    Path(promo["dropin"]).write_text(promo["text"])
    host.fake.run(["systemctl", "daemon-reload"])
    host.fake.run(["systemctl", "restart", UNIT])
    assert _running_argv(host) == _unit_argv(host) + EARLIER_FLAGS
    host.accepted[UNIT] = [_with(host, EARLIER_VARS)]


def _exec_promote_play(flags: List[str], env: Dict[str, Optional[str]], wrapper: bool = False) -> Callable[[Host], None]:
    def play(host: Host) -> None:
        promo = _variables_promotion(host, env, "run-1") if wrapper else _promotion(host, flags, env, "run-1")
        dropin, env_file, other = Path(promo["dropin"]), Path(promo["env_file"]), Path(promo["other_dropin"])
        before = {path: path.read_text() if path.exists() else None for path in (dropin, env_file, other)}
        record = host.root / "etc" / "llama-server.promoted.json"
        command = es.check_exec_start(promo["exec_start"]) if promo["exec_start"] is not None else None

        def read_back() -> None:
            if wrapper:  # step env_carries: the new server's environ carries the promoted variables
                serving = host.fake.serving(UNIT) or {}
                if any(serving.get(k) != v for k, v in promo["env"].items()):
                    raise UnitOverrideError(f"{UNIT}'s server runs with {serving}, not the promoted variables")
            elif _running_argv(host) != promo["exec_start"]:
                raise UnitOverrideError(f"{UNIT} runs {_running_argv(host)}, not the promoted command line")

        def stale() -> None:
            for path in Path(promo["env_dir"]).glob(promo["env_pattern"]):
                if path != env_file:
                    path.unlink()

        host.task("ab_lock state=present", lambda: host.lock("promote-1"))
        committed = False
        error: Optional[UnitOverrideError] = None
        try:
            host.task("unit_override state=present" + (" exec_start" if command else ""),
                      lambda: host.manager().present(UNIT, _config({k: v for k, v in env.items() if v is not None}),
                                                     ROLLBACK_AFTER, command))
            host.task("ab_lock state=present (renewal)", lambda: host.lock("promote-1"))
            host.task("file: the drop-in's and the env file's folders",
                      lambda: (dropin.parent.mkdir(parents=True, exist_ok=True), env_file.parent.mkdir(exist_ok=True)))
            committed = True
            if promo["env_text"]:
                host.task("copy: commit the winner's variables", lambda: _write(env_file, promo["env_text"]))
            if before[other] is None:
                host.task("copy: commit the promoted drop-in", lambda: _write(dropin, promo["text"]))
            else:  # overwritten under the earlier promotion's name, then renamed: never both side by side
                host.task("copy: commit the promoted drop-in", lambda: _write(other, promo["text"]))
                host.task("command: mv the promoted drop-in to its name", lambda: os.replace(other, dropin))
            host.task("copy: commit the promotion record", lambda: _write(record, '{"form": "exec"}\n'))
            host.task("unit_override state=absent restart=true", lambda: _applying(host, True).absent(UNIT, restart=True))
            host.task("serving_unit_info: runs the promoted " + ("variables" if wrapper else "command line"), read_back)
            host.task("file: remove earlier promotions' env files", stale)
        except UnitOverrideError as exc:
            error = exc
            if committed:
                for path, text in before.items():
                    if text is None and not path.exists():
                        continue  # nothing was there and nothing was written: the playbook's task changes nothing
                    if text is None:
                        host.task(f"file: remove {path.name}", lambda p=path: p.unlink(missing_ok=True))
                    else:
                        host.task(f"copy: put {path.name} back", lambda p=path, t=text: _write(p, t))
                host.task("file: remove the failed promotion's record", lambda: record.unlink(missing_ok=True))
            try:
                host.task("unit_override state=absent (rescue)",
                          lambda: _applying(host, committed).absent(UNIT, restart=committed))
            except UnitOverrideError:
                pass
        host.task("ab_lock state=absent", lambda: host.unlock("promote-1"))
        if error is not None:
            raise error
    return play


def _exec_consistent(host: Host) -> List[str]:
    """What runs and what a restart would start agree on the command line, and it goes with its variables."""
    running = _running_argv(host)
    on_disk = fakesystemd_exec(host.fake._dropins_on_disk(UNIT)) or _unit_argv(host)
    problems = []
    if running is not None and running != on_disk:
        problems.append(f"{UNIT} runs {running} but a restart would start {on_disk}")
    serving = host.fake.serving(UNIT) or {}
    for flags, env in ((EXEC_FLAGS, EXEC_VARS), (EARLIER_FLAGS, EARLIER_VARS)):
        if running is not None and (running[-len(flags):] == flags) != all(serving.get(k) == v for k, v in env.items()):
            problems.append(f"{UNIT} runs {running} with {serving}: a command line without its variables")
    return problems


def _wrapper_consistent(host: Host) -> List[str]:
    """A wrapper's promotion never touches the command line, and what runs has the variables a restart would give."""
    running = _running_argv(host)
    serving = host.fake.serving(UNIT)
    problems = []
    if running is not None and running != _unit_argv(host):
        problems.append(f"{UNIT} runs {running}, not its unit's own command line {_unit_argv(host)}")
    on_disk = host.fake.env_on_disk(UNIT)
    if serving is not None and any(serving.get(k) != on_disk.get(k) for k in set(EXEC_VARS) | set(on_disk)):
        problems.append(f"{UNIT} runs with {serving} but a restart would give it {on_disk}")
    return problems


def _exec_accepting(earlier: bool, late: bool = False) -> Callable[[Host], None]:
    def setup(host: Host) -> None:
        if earlier:
            _earlier_promotion(host, late)
        host.accepted[UNIT].append(_with(host, EXEC_VARS))
    return setup


EXEC_PLAYS: List[MatrixPath] = [
    MatrixPath("promote.yml of a hand-written unit (form exec: the winner's command line as a persistent drop-in)",
               _exec_accepting(False), _exec_promote_play(EXEC_FLAGS, EXEC_VARS), tasks=True, host=_REAL,
               check=_exec_consistent),
    MatrixPath("promote.yml of a hand-written unit over an earlier promotion (form exec: the pair replaced, the "
               "earlier env file removed once production answered)", _exec_accepting(True),
               _exec_promote_play(EXEC_FLAGS, EXEC_VARS), tasks=True, host=_REAL, check=_exec_consistent),
    MatrixPath("promote.yml of a hand-written unit over an earlier promotion, a command line that cannot start",
               _exec_accepting(True), _exec_promote_play(EXEC_FLAGS, dict(EXEC_VARS, FAKE_FAIL_START="1")),
               tasks=True, host=_REAL, expect_failure=True, check=_exec_consistent),
    MatrixPath("promote.yml of a wrapper unit (its winner's variables alone, in a persistent drop-in that keeps "
               "ExecStart=)", _exec_accepting(False), _exec_promote_play([], EXEC_VARS, wrapper=True), tasks=True,
               host=_REAL, check=_wrapper_consistent),
    MatrixPath("promote.yml of a wrapper unit, variables its server cannot start with", _exec_accepting(False),
               _exec_promote_play([], dict(EXEC_VARS, FAKE_FAIL_START="1"), wrapper=True), tasks=True, host=_REAL,
               expect_failure=True, check=_wrapper_consistent),
    MatrixPath("promote.yml of a hand-written unit over an earlier promotion under the late name (zx-, its operator "
               "drop-in gone since): the new one under the usual name, the late one removed in the same commit",
               _exec_accepting(True, late=True), _exec_promote_play(EXEC_FLAGS, EXEC_VARS), tasks=True, host=_REAL,
               check=_exec_consistent),
]
PATHS += EXEC_PLAYS

# ------------------------------------------------------------------ start states where the disk differs from what runs
#
# The env file was edited by hand (or written by a deploy with llamacpp_serve_restart_on_change=false) and the unit
# not restarted: a restart would start a config that never ran, here one that cannot start. Each play's first task
# is its start-from-running check; without specdec_force it refuses before the first change; with it, the play goes
# ahead, and the way back (the play's own restore, the dead-man, rollback.yml) must be what ran.

HAND_EDIT = {"LLAMA_ARG_MODEL": "/m/missing.gguf", "FAKE_FAIL_START": "1"}  # a typo: the server cannot start


def _hand_edited(host: Host) -> None:
    env = _env_path(host)
    env.write_text(env.read_text().replace("LLAMA_ARG_MODEL=/m/target.gguf\n", "") + "".join(
        f"{name}={value}\n" for name, value in HAND_EDIT.items()))
    assert host.fake.env_on_disk(UNIT) != host.fake.serving(UNIT)


def _checked(force: bool, play: Callable[[Host], Any]) -> Callable[[Host], Any]:
    """The play's start-from-running check as its first task, then the play."""
    def operation(host: Host) -> Any:
        host.task("serving_unit_info start_from_running", lambda: _start_from_running(host, force))
        return play(host)
    return operation


def _ab_first_slot(host: Host) -> Any:
    """Role spec_ab from its check on: the lock, then its first slot (a candidate)."""
    host.task("ab_lock state=present", lambda: host.lock("ab-1"))
    return host.task("unit_override state=present",
                     lambda: host.manager().present(UNIT, _config(CANDIDATE_A), ROLLBACK_AFTER))


def _keeping(host: Host) -> uo.UnitOverride:
    manager = host.manager()
    manager.keep_what_runs = True  # role spec_ab passes keep_what_runs when specdec_force went past a pending change
    return manager


def _ab_forced(host: Host) -> Any:
    """Role spec_ab forced past the pending change (keep_what_runs on every slot): the lock, a candidate, the
    baseline's fresh start, a second candidate, the restore, the release."""
    host.task("ab_lock state=present", lambda: host.lock("ab-1"))
    host.task("unit_override state=present",
              lambda: _keeping(host).present(UNIT, _config(CANDIDATE_A), ROLLBACK_AFTER))
    host.task("unit_override state=absent restart=true", lambda: _keeping(host).absent(UNIT, restart=True))
    host.task("unit_override state=present",
              lambda: _keeping(host).present(UNIT, _config(CANDIDATE_B), ROLLBACK_AFTER))
    host.task("unit_override state=absent", lambda: _keeping(host).absent(UNIT))
    return host.task("ab_lock state=absent", lambda: host.unlock("ab-1"))


def _build_switch(host: Host) -> Any:
    return host.task("llamacpp_activate", lambda: _Build(canary=False, broken=False).operation(host))


def _build_switch_forced(host: Host) -> Any:
    return host.task("llamacpp_activate", lambda: _Build(canary=False, broken=False, keep=True).operation(host))


def _broken_build_switch_forced(host: Host) -> Any:
    """The new build cannot start: the undo restarts the previous build, with what ran (not the hand edit)."""
    return host.task("llamacpp_activate", lambda: _Build(canary=False, broken=True, keep=True).operation(host))


def _hand_edited_build(broken: bool) -> Callable[[Host], None]:
    def setup(host: Host) -> None:
        _Build(canary=False, broken=broken).setup(host)
        _hand_edited(host)
    return setup


_PENDING_PLAYS: List[Tuple[str, Callable[[Host], Any], Dict[str, Any]]] = [
    ("an A/B", _ab_first_slot, _REAL),
    ("promote.yml", _vehicle_play(PROMOTED, "promote-1", record=True), _REAL),
    ("deploy.yml (a changed env file)", _vehicle_play(PROMOTED, "deploy-1", record=False), _REAL),
    ("a build activation", _build_switch, dict(_REAL, binary_under=str(BUILD_ROOT))),
]


def _pending_path(what: str, play: Callable[[Host], Any], host: Dict[str, Any], force: bool) -> MatrixPath:
    if not force:
        name = f"disk differs from what runs: {what} after a hand edit (refused before its first change)"
        return MatrixPath(name, _hand_edited, _checked(False, play), tasks=True, expect_failure=True,
                          pending_start=True, host=host)
    name = f"disk differs from what runs: {what} after a hand edit, specdec_force=true (the way back is what ran)"
    # keep_what_runs: every way back restarts on the pin of what ran
    if what == "an A/B":
        return MatrixPath(name, _hand_edited, _checked(True, _ab_forced), tasks=True, pending_start=True, host=host)
    return MatrixPath(name, _hand_edited_build(False), _checked(True, _build_switch_forced), tasks=True, pending_start=True,
                      host=host, check=_Build(False, False).check, lock_expires=_build_guard_expires(False))


HAND_EDIT_OK = {"LLAMA_ARG_CTX_SIZE": "8192"}  # an edit that starts: a forced promotion commits it with its winner


def _hand_edited_ok(host: Host) -> None:
    _env_path(host).write_text(_env_path(host).read_text() + "".join(f"{k}={v}\n" for k, v in HAND_EDIT_OK.items()))
    host.accepted[UNIT].append(_with(host, HAND_EDIT_OK, PROMOTED))


def _hand_edited_deploy(host: Host) -> None:
    _hand_edited(host)
    host.accepted[UNIT].append(_with(host, PROMOTED))  # the deploy renders the file anew: the hand edit goes


# Forced: the A/B (unit_override's dead-man) and the build activation (its own dead-man); promote.yml and an env
# file's redeploy through the vehicle try the pending change with their own (try_pending), what ran the way back.
START_STATES: List[MatrixPath] = [_pending_path(what, play, host, False) for what, play, host in _PENDING_PLAYS] + [
    _pending_path(what, play, host, True) for what, play, host in _PENDING_PLAYS if what in ("an A/B", "a build activation")]
START_STATES.append(MatrixPath(
    "disk differs from what runs: a build activation of a build that cannot start, after a hand edit, "
    "specdec_force=true (the undo restarts what ran)", _hand_edited_build(True), _checked(True, _broken_build_switch_forced),
    tasks=True, expect_failure=True, pending_start=True, host=dict(_REAL, binary_under=str(BUILD_ROOT)),
    check=_Build(False, True).check, lock_expires=_build_guard_expires(False)))
_FORCED = "specdec_force=true"
START_STATES += [
    MatrixPath(f"disk differs from what runs: promote.yml after a hand edit that cannot start, {_FORCED} (the trial "
               "tries the edit with the winner and fails; the way back is what ran)", _hand_edited,
               _checked(True, _vehicle_play(PROMOTED, "promote-1", record=True, forced=True)), tasks=True,
               expect_failure=True, pending_start=True, host=_REAL),
    MatrixPath(f"disk differs from what runs: promote.yml after a hand edit that starts, {_FORCED} (the edit is "
               "committed with the winner once both answered; before that the way back is what ran)", _hand_edited_ok,
               _checked(True, _vehicle_play(PROMOTED, "promote-1", record=True, forced=True)), tasks=True,
               pending_start=True, host=_REAL),
    MatrixPath(f"disk differs from what runs: deploy.yml (a changed unit file and launcher) after a hand edit that cannot "
               f"start, {_FORCED} (unit_deploy keep_what_runs: its way back restarts what ran)",
               lambda h: (_with_launcher(h), _hand_edited(h)),
               _checked(True, _unit_file_play(NEW_UNIT, PROMOTED, keep=True)), tasks=True, expect_failure=True,
               pending_start=True, host=_REAL, check=_unit_files_back(False)),
    MatrixPath(f"disk differs from what runs: deploy.yml (a changed env file, rendered anew) after a hand edit, {_FORCED} "
               "(the new file is tried; the way back is what ran)", _hand_edited_deploy,
               _checked(True, _vehicle_play(PROMOTED, "deploy-1", record=False, forced=True, rendered=True)), tasks=True,
               pending_start=True, host=_REAL),
]
PATHS += START_STATES

# ------------------------------------------------------------------ the A/B play as a whole
#
# Role spec_ab's host-changing tasks in order (roles/spec_ab/tasks: main.yml, state_begin.yml, measure.yml,
# state_slot.yml, state_end.yml), for one round of three slots (a candidate, the baseline, another candidate): the
# controller dies at each task's start, and the host's systemd and dead-man alone act from there. The modules' own
# steps are the rows of the single paths above; here only task starts are points.

# A slot's measuring (spec_bench), on the host's clock: three of them outlast the lock's expiry, so only the
# renewals keep it this run's (a second A/B tries at every cut while the lock file is there).
BENCH_S = 150
assert 3 * BENCH_S > LOCK_EXPIRES and BENCH_S + HEALTH_TIMEOUT < ROLLBACK_AFTER
SCHEDULE: Tuple[Tuple[str, Optional[Dict[str, str]]], ...] = (
    ("draft", CANDIDATE_A), ("baseline", None), ("ngram", CANDIDATE_B))


class _WholeAB:
    """The A/B play from its start-from-running check to its history, with its rescue and its always."""

    owner = "ab-whole"

    def __init__(self) -> None:
        self.seen: List[str] = []

    def setup(self, host: Host) -> None:
        self.seen = []

    def operation(self, host: Host) -> Any:
        runs = Path(host.state_dir) / "runs" / self.owner
        host.task("serving_unit_info start_from_running", lambda: _start_from_running(host))
        host.task("ab_lock state=present (take)", lambda: host.lock(self.owner))
        host.task("file: the run's folder", lambda: runs.mkdir(parents=True, exist_ok=True))
        error: Optional[UnitOverrideError] = None
        try:
            for name, config in SCHEDULE:
                if config is None:
                    host.task(f"{name}: unit_override state=absent restart=true",
                              lambda: host.manager().absent(UNIT, restart=True))
                else:
                    host.task(f"{name}: unit_override state=present",
                              lambda c=config: host.manager().present(UNIT, _config(c), ROLLBACK_AFTER))
                host.task(f"{name}: ab_lock state=present (renewal in the slot)", lambda: host.lock(self.owner))
                host.task(f"{name}: spec_bench", lambda: host.fake.advance(BENCH_S))
                host.task(f"{name}: copy: the partial run", lambda n=name: _write(runs / "partial.json", n + "\n"))
                host.task(f"{name}: ab_lock state=present (renewal after the slot)", lambda: host.lock(self.owner))
        except UnitOverrideError as exc:
            error = exc  # the rescue notes why; the always below runs
        now = host.task("ab_lock state=query (still this run's?)", lambda: hs.query(
            {"unit": UNIT, "state_dir": host.state_dir}, run=host.fake.run, now=host.fake.now,
            proc=str(host.fake.proc), run_dir=str(host.fake.run_dir)))
        if now["holder"] is None or now["holder"].get("run_id") == self.owner:
            host.task("unit_override state=absent (restore)", lambda: host.manager().absent(UNIT))
        host.task("ab_lock state=absent (release)", lambda: host.unlock(self.owner))
        if _lock_file(host).exists():
            self.seen.append("the A/B ended and its lock is still there")
        host.task("copy: the report and the history", lambda: _write(Path(host.state_dir) / "history.jsonl", "{}\n"))
        if error is not None:
            raise error

    def check(self, host: Host) -> List[str]:
        return list(self.seen)


def _while_held(host: Host) -> List[str]:
    """A second A/B at the cut, while the first run's lock file is there: refused (renewed, or its dead-man armed)."""
    return _second_run(host) if _lock_file(host).exists() else []


_WHOLE = _WholeAB()
WHOLE_PLAYS: List[MatrixPath] = [
    _at_each_cut(MatrixPath("", _WHOLE.setup, _WHOLE.operation, tasks=True, tasks_only=True, host=_REAL,
                            check=_WHOLE.check),
                 "the A/B play as a whole (lock, three slots with renewals, restore, release), the controller dies at "
                 "each task", _while_held),
]
PATHS += WHOLE_PLAYS


@dataclass
class Cell:
    outcome: str
    restored_after: float
    problems: List[str]
    ends_on: int = 0  # which accepted config the first unit serves at the end: 0 production's previous, 1 the new one


def _who_restored(host: Host, before: Dict[str, Any], since: float) -> str:
    fired = [f for f in host.fake.state()["fired"][len(before["fired"]):] if f["outcome"] == "ran"]
    if fired:
        name = fired[0]["name"]
        if name.startswith("specdec-rearm-"):
            return "bridge timer"
        if name.startswith("specdec-deploy-rollback-"):
            return "the deploy's dead-man timer"
        if name.startswith("specdec-build-rollback-"):
            return "the build's dead-man timer"
        if name.startswith("specdec-canary-"):
            return "nothing changed (the canary spec's timer removes it)"
        return "dead-man timer"
    return ""


def _run_files(host: Host) -> Dict[str, str]:
    run = host.fake.run_dir
    return {str(p.relative_to(run)): p.read_text() for p in sorted(run.rglob("*")) if p.is_file()}


def _unit_state(host: Host, name: str) -> Any:
    unit = host.fake.state()["units"][name]
    return unit["active"], unit["pid"]


def _end_state(host: Host, path: MatrixPath, start: Dict[str, Any]) -> Tuple[Optional[str], List[str]]:
    """What each unit ended as ('production', 'unchanged', 'kept candidate') or None, and what is left over."""
    problems: List[str] = []
    files = _run_files(host)
    allowed: set = set()
    for name in path.units:
        if host.serves_production(name):
            waiting = host.fake.env_on_disk(name)
            if path.pending_start and waiting == start["disk"][name]:
                continue  # the operator's own change, pending since before the play, left as it was
            if path.pending_start and waiting in host.accepted.get(name, []):
                continue  # a forced play's commit of it, which answered health, cut before production restarted on it
            if waiting != host.fake.serving(name):
                problems.append(f"{name} serves {host.fake.serving(name)} but its files on disk would start {waiting} "
                                "(a change that never answered health waits for the next restart)")
            continue
        mine = {f for f in files if name in f}
        if _unit_state(host, name) == start["units"][name] and {f: files[f] for f in mine} == {
                f: c for f, c in start["files"].items() if name in f}:
            allowed |= mine  # the start state, untouched (a candidate the operator had confirmed)
            continue
        env = host.fake.serving(name)
        if path.keeps is not None and env == dict(host.production_env(name), **path.keeps):
            allowed |= {f for f in mine if f.endswith(("override.env", "zz-llmfleet-specdec.conf"))}
            continue
        problems.append(f"{name} serves neither production nor its start state: {env}")
    left = [f for f in files if f not in allowed] + [f"unit {n}" for n in host.fake.loaded_transient()]
    if left:
        problems.append(f"left behind: {left}")
    return None, problems


def run_point(path: MatrixPath, root: Path, kill_at: Optional[int], column: str) -> Tuple[Cell, List[str]]:
    """One cell: ``kill_at`` None runs the path whole (the labels of its steps come back)."""
    if root.exists():
        shutil.rmtree(root)
    root.mkdir(parents=True)
    host = Host(root, path.units, **path.host)
    try:
        path.setup(host)
        before = host.fake.state()
        start = {"units": {name: _unit_state(host, name) for name in path.units}, "files": _run_files(host),
                 "disk": {name: host.fake.env_on_disk(name) for name in path.units}}
        started = host.fake.now()
        controller = column == "controller killed"
        host.faults = Faults(None if controller else kill_at, kill_at if controller and path.tasks else None,
                             clock=host.fake.now, tasks_only=path.tasks_only)
        died = failed = gone = refused = False
        try:
            path.operation(host)
        except Killed:
            died = True
        except ControllerGone:
            gone = True
        except RefusedError:
            failed = refused = True
        except UnitOverrideError:
            failed = True
        labels = list(host.faults.labels)
        lock_at_cut = _lock_file(host).exists()
        if host.faults.cut_at is not None:
            started = host.faults.cut_at  # a play that ran a while before its cut: the dead-man counts from the cut
        host.faults = Faults()
        problems: List[str] = []
        if failed and not path.expect_failure:
            problems.append("the operation failed without a fault")
        rolled_back = False
        if column == "connection dropped" and died:
            try:
                rolled_back = bool(host.manager().absent_everywhere()["changed"])
            except UnitOverrideError as exc:
                problems.append(f"rollback.yml failed: {exc}")
        at_once = all(host.serves_production(name) for name in path.units) and any(
            _unit_state(host, name) != start["units"][name] for name in path.units)
        served_at_once = _served(host, path)
        # Now only the host acts: time moves on to each timer in turn until every unit serves production again.
        restored_at = None
        while host.fake.now() - started <= path.dead_man + HEALTH_TIMEOUT:
            if all(host.serves_production(name) for name in path.units):
                restored_at = host.fake.now() - started
                break
            due = [t["deadline"] for t in host.fake.state()["transient"].values() if t.get("timer")]
            if not due:
                break  # nothing on the host will ever act
            host.fake.advance(max(0.0, min(due) - host.fake.now()))
        if restored_at is not None and restored_at > path.dead_man + 2:
            problems.append(f"production back only {restored_at:.0f} s after the fault (dead-man {path.dead_man} s)")
        host.fake.advance(path.lock_expires + 1)  # every timer that is still armed fires, every lock expires
        problems += _end_state(host, path, start)[1]
        if path.check is not None:
            problems += path.check(host)
        try:
            host.lock("run-2")
        except hs.LockHeldError as exc:
            problems.append(f"lock not takeable: {exc}")
        if refused:
            outcome = "refused, nothing changed"
        elif path.tasks:
            outcome = _play_outcome(host, before, started, start, path, died or gone, failed, rolled_back, at_once,
                                    lock_at_cut)
        elif column == "controller killed" or not died:
            outcome = "the module (candidate failed, production restored)" if failed else "the module"
        elif column == "connection dropped" and rolled_back:
            outcome = "rollback.yml"
        else:
            who = _who_restored(host, before, started)
            if at_once and who.startswith(("the deploy's", "the build's")):
                # production answered on the new config; the dead-man's record was still there
                outcome = "restart job; " + who + (" puts the previous config back" if _served(host, path) != served_at_once
                                                   else " finds nothing to do")
            elif at_once:
                outcome = "restart job" + (" (the armed dead-man restarts it once more)" if who else "")
            elif who:
                outcome = who
            elif all(_unit_state(host, n) == start["units"][n] for n in path.units):
                outcome = "nothing changed"
            else:
                outcome = "candidate kept (healthy)"
        env = host.fake.serving(path.units[0])
        accepted = host.accepted.get(path.units[0], [])
        ends_on = accepted.index(env) if env in accepted else -1
        return Cell(outcome, restored_at or 0.0, problems, ends_on), labels
    finally:
        host.close()


def _served(host: Host, path: MatrixPath) -> List[Any]:
    """What each unit serves: its env and the binary its process runs."""
    state = host.fake.state()
    out = []
    for name in path.units:
        pid = state["units"][name]["pid"]
        out.append((host.fake.serving(name), state["procs"].get(str(pid), {}).get("exe") if pid else None))
    return out


def _play_outcome(host: Host, before: Dict[str, Any], started: float, start: Dict[str, Any], path: MatrixPath,
                  cut: bool, failed: bool, rolled_back: bool, at_once: bool, locked: bool = True) -> str:
    """What brought production back after a play of several tasks was cut (or ran to its end)."""
    if not cut:
        return "the play's rescue" if failed else "the play"
    if rolled_back:
        return "rollback.yml"
    who = _who_restored(host, before, started)
    if who:
        return who
    if all(_unit_state(host, n) == start["units"][n] for n in path.units):
        return "nothing changed"
    if at_once:
        return "done before the cut; the lock " + ("expires" if locked else "released")
    return "restart job"


def points(path: MatrixPath, root: Path) -> List[str]:
    """The labels of the path's steps (a whole run, no fault)."""
    return run_point(path, root, None, "module SIGKILL")[1]


def matrix(root: Path, paths: Sequence[MatrixPath] = ()) -> List[Tuple[str, str, Dict[str, Cell]]]:
    """Every path x point x column: (path name, point label, {column: cell})."""
    rows = []
    for path in paths or PATHS:
        labels = points(path, root / "whole")
        for index, label in enumerate([*labels, "(completes)"], start=1):
            kill_at = index if index <= len(labels) else None
            cells = {}
            for column in COLUMNS:
                if column == "controller killed" and not path.tasks and rows and rows[-1][0] == path.name:
                    cells[column] = rows[-1][2][column]  # the module runs on whatever the point: one run per path
                    continue
                cells[column] = run_point(path, root / "case", kill_at, column)[0]
            rows.append((path.name, "before " + label if kill_at else "after the last step", cells))
    return rows


def render(rows: Sequence[Tuple[str, str, Dict[str, Cell]]]) -> str:
    out = ["| path | point | " + " | ".join(COLUMNS) + " |", "| --- | --- | " + " | ".join("---" for _column in COLUMNS) + " |"]
    for name, point, cells in rows:
        out.append(f"| {name} | {point} | " + " | ".join(
            cells[c].outcome if not cells[c].problems else "**FAILS**" for c in COLUMNS) + " |")
    return "\n".join(out) + "\n"


def _patch_files(faults_of: Callable[[], Faults]) -> None:
    """``_deadman``'s file helpers count as steps (effective changes only), as the crash matrix needs."""
    write, unlink, rmdir, ensure = (_deadman.write_private, _deadman.unlink, _deadman.rmdir,
                                    _deadman.ensure_private_dir)

    def write_private(path: str, text: str, mode: int) -> None:
        faults_of().step(f"write {Path(path).name}")
        write(path, text, mode)

    def unlink_(path: str) -> bool:
        if Path(path).exists() or faults_of().dead:
            faults_of().step(f"remove {Path(path).name}")
        return unlink(path)

    def rmdir_(path: str) -> None:
        if faults_of().dead:
            faults_of().step("rmdir")
        rmdir(path)

    def ensure_(path: str) -> None:
        if not Path(path).is_dir() or faults_of().dead:
            faults_of().step(f"mkdir {Path(path).name}")
        ensure(path)

    _deadman.write_private, _deadman.unlink, _deadman.rmdir, _deadman.ensure_private_dir = (
        write_private, unlink_, rmdir_, ensure_)

    # llamacpp_activate's own file helpers: the link, the record, the dead-man's script and record.
    write_atomic, point_link, act_unlink, private_dir = act.write_atomic, act.point_link, act._unlink, act._private_dir

    def write_atomic_(path: str, text: str, mode: int) -> None:
        faults_of().step(f"write {Path(path).name}")
        write_atomic(path, text, mode)

    def point_link_(current: str, target: str) -> None:
        faults_of().step(f"point {Path(current).name} at {target}")
        point_link(current, target)

    def act_unlink_(path: str) -> None:
        if Path(path).exists() or faults_of().dead:
            faults_of().step(f"remove {Path(path).name}")
        act_unlink(path)

    def private_dir_(path: str) -> None:
        if not Path(path).is_dir() or faults_of().dead:
            faults_of().step("mkdir " + ("<link>" if path.endswith("current") else Path(path).name))
        private_dir(path)

    act.write_atomic, act.point_link, act._unlink, act._private_dir = write_atomic_, point_link_, act_unlink_, private_dir_


def install() -> None:
    """Routes the file helpers' steps to the host under test (idempotent)."""
    if getattr(_deadman, "_crash_matrix_patched", False):
        return
    _patch_files(lambda: CURRENT[-1].faults if CURRENT else Faults())
    _deadman._crash_matrix_patched = True  # type: ignore[attr-defined]


DOC = ROOT / "docs" / "crash-matrix.md"
HEADER = """# The crash matrix

Generated by `python tests/unit/crash_matrix.py` from the run of `tests/unit/test_crash_matrix.py`, which fails
when this table and the run differ. Each host-changing path this collection has is killed before each of its
steps (and after the last), three ways; each cell says what brought production back with production's own config.

- **module SIGKILL**: the module dies at the point; nothing acts afterwards but the host's systemd.
- **controller killed**: the controller dies with the module at the point; the module runs to its end and no
  later task comes (no next slot, no restore, no lock release).
- **connection dropped**: the module dies with the SSH link at the point (SIGHUP); the controller runs nothing
  more on the host; the operator runs `rollback.yml` once the host answers.

Promote and deploy are plays of several modules (the lock, the override or `unit_deploy`, the commit, the restore,
the release): each task's start is a point too, and a controller killed during a task lets that module finish and
starts no later task (no rescue, no release). Build activation is one module (`llamacpp_activate`); it holds the
unit's lock (the host-wide guard) from before its first change to its end, and a killed one's lock expires only
after its dead-man restored production.

**The build sentinel's steps** (issue 47): a unit with a promoted config has the new build's canary judged by the
sentinel while the canary serves (the promoted traffic to the canary and to production), passing or refusing the
build before `current` moves; with a canary on other hardware, the promoted config's speed is measured on the unit
after the switch, its dead-man armed for `rollback_after` plus the sentinel's time (600 s), and a slower build is
switched back. Measuring changes nothing on the host, but the module can die while it does: each measurement is a
point of these rows. The unit's guard lasts as long as that longer dead-man.

Two plays interleaved on one unit: **A/B x build** (the build switch comes while an A/B's candidate serves under
the A/B's lock: refused before it changes anything) and **build x A/B** (an A/B starts right at each cut of a build
switch: it must not get the unit's lock while the switch's record or its dead-man is pending).
**A/B x A/B**: a second run tries to take the unit at each cut of a candidate switch and of a baseline slot
(refused while the first run's lock lives). **A/B x promote, A/B x deploy**: at each cut of a candidate switch and
of a baseline slot, `promote.yml` and then `deploy.yml` (a changed env file) start from their first task, as main
has them (`require_unit_free.yml`, then `require_start_from_running.yml`, then the lock for the vehicle): each is
refused and leaves /run, the env file, the unit's process, the timers and the lock as it found them.
**promote x A/B, deploy x A/B, and a deploy after either** (in the rows of `promote.yml` and of a unit file's
redeploy): an A/B starts (its start-from-running check, then the lock), then `deploy.yml` (its unit-free check, its
start-from-running check, then the lock), at each of their cuts (`unit_deploy`; an env file's redeploy is promote's
vehicle without the record): each cut is the start state of an interrupted play. Neither may get the unit while the
play's lock lives or anything of it is pending (a file of ours in /run, a timer, a change on disk that does not run).

One start state that is not production's: an activation killed at its restart (`current` moved, the unit not
restarted, its record and dead-man in /run); the next activation undoes it with that dead-man still armed, then
switches.

**The A/B play as a whole**: role `spec_ab`'s host-changing tasks for one round of three slots (a candidate, the
baseline, another candidate): its start-from-running check, the lock, the run's folder, each slot's switch, the
lock's renewal in the slot, the measuring (150 s on the host's clock: three slots outlast the lock's expiry, so
only the renewals keep it), the partial run and the renewal after the slot; then the query whether the lock is
still this run's, the restore, the release and the history. The controller dies at each task's start (the
modules' own steps are the rows of the single paths above); from there the host's systemd and dead-man alone act.
A second A/B tries to take the unit at every cut while the lock file is there, and must be refused. At the end:
production with its config, and the lock released (the play ran to its end) or stale and taken over.

**Disk differs from what runs**: the env file edited by hand (here a model path that does not exist: the server
cannot start on it) and the unit not restarted, before an A/B, `promote.yml`, `deploy.yml` or a build activation
starts. Each play's first task is its start-from-running check (`serving_unit_info start_from_running`): each is
refused before its first change, production keeps running what ran and the operator's edit stays on disk as it
was. With `specdec_force=true` the play goes ahead, and the way back must be what ran. The forced A/B (a candidate,
the baseline's fresh start, a second candidate, the restore) passes `keep_what_runs`: before its first restart
`unit_override` keeps what ran (read from `/proc`) as the runtime drop-in `zy-llmfleet-specdec-ran.conf`, and the
dead-man's script carries a copy that it puts back before its restart; every way back (the dead-man, the candidate's
own restore, the play's, `rollback.yml`) restarts on it and removes it once production answered, leaving the hand
edit pending on disk as it was. The forced build activation (`llamacpp_activate keep_what_runs`) keeps the units'
environment as it ran (`zy-llmfleet-specdec-build-ran.conf`, in its record, which its dead-man and an interrupted
switch's undo read): the new build starts with it, and so does the previous one when the new one cannot start.
promote.yml and an env file's redeploy, forced, commit the pending change with their own, so their trial tries it
(`unit_override try_pending`: the override runs on the disk plus the winner, or on the file rendered anew, and what
ran is kept only in the dead-man's script); every way back before production answered on the committed file (the
trial's own restore, the dead-man, `rollback.yml`, the play's rescue) restarts what ran. Forced after an edit that
cannot start, the trial fails and what ran comes back; after an edit that starts, both are committed, and a cut
after the commit may leave that verified change on disk for the next restart, with what ran running. A unit file's
redeploy, forced (`unit_deploy keep_what_runs`), keeps what ran in its record: its rollback, its dead-man and an
interrupted deploy's undo put the previous files back with that pin (`zy-llmfleet-specdec-deploy-ran.conf`).

**A hand-written unit's promotion** (form exec, `playbooks/tasks/promote_exec.yml`; a first one, one over an
earlier promotion, one whose command line cannot start, and one over an earlier promotion under the late name
`zx-llmfleet-specdec-promoted.conf`, which is overwritten where it is and then renamed, never left beside the new
one): the winner's command line as an override under the
dead-man, then the commits in their order (the winner's variables in an env file named by its content, the
persistent drop-in `/etc/systemd/system/<unit>.d/40-llmfleet-specdec-promoted.conf` naming it, the record), the
restart on them, the read-back of the running command line, and only then the earlier promotion's env file removed;
on failure the previous pair put back. The model runs a drop-in's `ExecStart=` as the process's command line and
refuses to start a unit whose mandatory `EnvironmentFile=` is missing, as systemd does; each cell also checks that
what runs and what a restart would start have the same command line, with its variables.

In every cell, after time moved on: production active with production's config (the previous one, or a new one
that answered health and was committed; within the path's dead-man time at the latest), nothing on disk that differs
from what runs (the env file, the unit file, the launcher, `current` and the build record: no unverified change
waits for the next restart), no file of ours in `/run` (a module killed right after creating a directory leaves it empty, 0700;
the next `unit_override` or `rollback.yml` removes it), no timer loaded, and the unit's lock released or stale and
taken over by a new run. A start state the operator chose (a confirmed candidate) may also stay as it was when the
module died before changing it, and so may an edit pending on disk before the play. The dead-man's time counts from
the cut (a whole play has measured for minutes before it). The model is `tests/unit/fakesystemd.py` (a restart is
one job; drop-ins count from the last `daemon-reload`; transient timers fire on the wall clock, honour
`ConditionPathExists=` and run the real rollback script, whose own waits run on a clock of their own).
`molecule/deadman` repeats the decisive points on real systemd.

"""


def scratch() -> str | None:
    """Where the cases run: a memory file system when there is one (each case writes and removes a small tree)."""
    return "/dev/shm" if os.access("/dev/shm", os.W_OK) else None


def main() -> int:
    import tempfile

    install()
    with tempfile.TemporaryDirectory(dir=scratch()) as tmp:
        rows = matrix(Path(tmp))
    DOC.write_text(HEADER + render(rows), encoding="utf-8")
    known = {path.name for path in PATHS if path.finding}
    failing = [(n, p, c) for n, p, cells in rows for c, cell in cells.items() if cell.problems]
    for name, point, column in failing:
        print(f"{'FINDING' if name in known else 'FAILS'}: {name} / {point} / {column}")
    return 1 if [f for f in failing if f[0] not in known] else 0


if __name__ == "__main__":
    sys.exit(main())
