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
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
for extra in (str(HERE), str(ROOT / ".build" / "collections")):
    if extra not in sys.path:
        sys.path.insert(0, extra)

from fakesystemd import FakeSystemd, HealthServer  # noqa: E402

from ansible_collections.llmfleet.specdec.plugins.module_utils import _deadman  # noqa: E402
from ansible_collections.llmfleet.specdec.plugins.module_utils import _host_state as hs  # noqa: E402
from ansible_collections.llmfleet.specdec.plugins.module_utils import _unit_override as uo  # noqa: E402
from ansible_collections.llmfleet.specdec.plugins.module_utils._envfile import env_config_from_mapping  # noqa: E402
from ansible_collections.llmfleet.specdec.plugins.module_utils._systemd import UnitOverrideError  # noqa: E402

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


class Faults:
    """Counts an operation's host-changing steps and kills it before step ``kill_at`` (1-based)."""

    def __init__(self, kill_at: Optional[int] = None) -> None:
        self.kill_at = kill_at
        self.labels: List[str] = []
        self.dead = False

    def step(self, label: str) -> None:
        if self.dead:
            raise Killed(label)
        self.labels.append(label)
        if self.kill_at is not None and len(self.labels) == self.kill_at:
            self.dead = True
            raise Killed(label)


_MUTATING = {"restart", "start", "stop", "daemon-reload", "reset-failed"}


def _label(argv: Sequence[str]) -> Optional[str]:
    argv = list(argv)
    if argv[0] == "systemd-run":
        unit = next(a.split("=", 1)[1] for a in argv if a.startswith("--unit="))
        return f"systemd-run {unit}.timer"
    if argv[0] == "systemctl":
        words = [a for a in argv[1:] if not a.startswith("--")]
        if words and words[0] in _MUTATING:
            return "systemctl " + " ".join(w.replace(".service", "") for w in words)
    return None


CURRENT: List[Host] = []  # the host under test, whose Faults the patched file helpers count into


class Host:
    """One fake host (units, /proc, /run, a lock directory) and the factories a path needs."""

    def __init__(self, root: Path, units: Sequence[str] = (UNIT,)) -> None:
        self.root = root
        self.fake = FakeSystemd(root)
        self.servers = {name: HealthServer.get(index, self.fake) for index, name in enumerate(units)}
        specs = {}
        for name, server in self.servers.items():
            env = root / "etc" / (name[: -len(".service")] + ".env")
            env.parent.mkdir(parents=True, exist_ok=True)
            env.write_text(f"LLAMA_ARG_PORT={server.port}\nLLAMA_ARG_MODEL=/m/target.gguf\n")
            specs[name] = {"env_files": [str(env)]}
        self.fake.create(specs)
        self.state_dir = str(root / "state")
        self.faults = Faults()
        CURRENT[:] = [self]

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
        return env is not None and env == self.production_env(unit)

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


@dataclass
class Cell:
    outcome: str
    restored_after: float
    problems: List[str]


def _who_restored(host: Host, before: Dict[str, Any], since: float) -> str:
    fired = [f for f in host.fake.state()["fired"][len(before["fired"]):] if f["outcome"] == "ran"]
    if fired:
        name = fired[0]["name"]
        return "bridge timer" if name.startswith("specdec-rearm-") else "dead-man timer"
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
            continue
        mine = {f for f in files if name in f}
        if _unit_state(host, name) == start["units"][name] and {f: files[f] for f in mine} == {
                f: c for f, c in start["files"].items() if name in f}:
            allowed |= mine  # the start state, untouched (a candidate the operator had confirmed)
            continue
        env = host.fake.serving(name)
        if path.keeps is not None and env == dict(host.production_env(name), **path.keeps):
            allowed |= {f for f in mine if f.endswith(("override.env", "50-llmfleet-specdec.conf"))}
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
    host = Host(root, path.units)
    try:
        path.setup(host)
        before = host.fake.state()
        start = {"units": {name: _unit_state(host, name) for name in path.units}, "files": _run_files(host)}
        started = host.fake.now()
        host.faults = Faults(kill_at if column != "controller killed" else None)
        died = failed = False
        try:
            path.operation(host)
        except Killed:
            died = True
        except UnitOverrideError:
            failed = True
        labels = list(host.faults.labels)
        host.faults = Faults()
        problems: List[str] = []
        if failed and not path.expect_failure:
            problems.append("the operation failed without a fault")
        if column == "connection dropped" and died:
            try:
                host.manager().absent_everywhere()
            except UnitOverrideError as exc:
                problems.append(f"rollback.yml failed: {exc}")
        at_once = all(host.serves_production(name) for name in path.units) and any(
            _unit_state(host, name) != start["units"][name] for name in path.units)
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
        host.fake.advance(LOCK_EXPIRES + 1)  # every timer that is still armed fires
        problems += _end_state(host, path, start)[1]
        try:
            host.lock("run-2")
        except hs.LockHeldError as exc:
            problems.append(f"lock not takeable: {exc}")
        if column == "controller killed" or not died:
            outcome = "the module (candidate failed, production restored)" if failed else "the module"
        elif column == "connection dropped":
            outcome = "rollback.yml"
        else:
            who = _who_restored(host, before, started)
            if at_once:
                outcome = "restart job" + (" (the armed dead-man restarts it once more)" if who else "")
            elif who:
                outcome = who
            elif all(_unit_state(host, n) == start["units"][n] for n in path.units):
                outcome = "nothing changed"
            else:
                outcome = "candidate kept (healthy)"
        return Cell(outcome, restored_at or 0.0, problems), labels
    finally:
        host.close()


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
                if column == "controller killed" and rows and rows[-1][0] == path.name:
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

In every cell, after time moved on: production active with production's config (within the path's dead-man time
at the latest), no file of ours in `/run` (a module killed right after creating a directory leaves it empty, 0700;
the next `unit_override` or `rollback.yml` removes it), no timer loaded, and the unit's lock released or stale and
taken over by a new run. A start state the operator chose (a confirmed candidate) may also stay as it was when the
module died before changing it. The model is `tests/unit/fakesystemd.py` (a restart is one job; drop-ins count from the last
`daemon-reload`; transient timers fire on the wall clock, honour `ConditionPathExists=` and run the real rollback
script). `molecule/deadman` repeats the decisive points on real systemd.

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
    failing = [(n, p, c) for n, p, cells in rows for c, cell in cells.items() if cell.problems]
    for name, point, column in failing:
        print(f"FAILS: {name} / {point} / {column}")
    return 1 if failing else 0


if __name__ == "__main__":
    sys.exit(main())
