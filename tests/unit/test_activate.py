"""A llama.cpp build becomes 'current' only after it served production's model (module llamacpp_activate).

The host is simulated: a fake systemd (units, transient canary units, the dead-man timer) whose restarted units run
whatever build the real 'current' link (in tmp_path) points at, a fake /proc and fake /health answers. A build that
cannot load the model fails its canary, or crash-loops after a restart. The crash points kill the module (a
BaseException from the runner or a file write, as SIGKILL would stop it there) and then run the dead-man script it
armed, for real, with a stand-in systemctl on PATH and a real HTTP server as production's /health. What real
systemd does with all this is checked in molecule/build.
"""
from __future__ import annotations

import http.server
import json
import os
import re
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any, Dict, Iterator, List, Sequence, Tuple

import pytest
from ansible.module_utils.testing import patch_module_args

from ansible_collections.llmfleet.specdec.plugins.module_utils.build import _activate as act
from ansible_collections.llmfleet.specdec.plugins.module_utils.common._errors import SpecdecError
from ansible_collections.llmfleet.specdec.plugins.modules import llamacpp_activate

UNIT = "llama-server.service"


class Killed(BaseException):
    """The module dies here (SIGKILL, a dropped link): nothing after it runs, no except/finally of ours is trusted."""


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


class Host:
    """systemd, /proc and /health of one host whose units serve from <root>/current."""

    def __init__(self, tmp: Path, port: int = 8080, loads: Dict[str, bool] | None = None) -> None:
        self.root = tmp / "opt" / "llama.cpp"
        for build in ("old-cpu", "new-cpu"):
            binary = self.root / build / "bin" / "llama-server"
            binary.parent.mkdir(parents=True)
            binary.write_text("#!/bin/sh\n")
            binary.chmod(0o755)
        os.symlink("old-cpu", self.root / "current")
        self.loads = loads or {"old-cpu": True, "new-cpu": True}
        self.port = port
        self.next_pid = 100
        self.units: Dict[str, Dict[str, Any]] = {}
        self.start(UNIT, port)
        self.calls: List[List[str]] = []
        self.kill_on: Tuple[str, ...] | None = None
        self.kill_skip = 0  # how many matching calls to let through first
        self.timer_armed = False
        self.canary_specs: List[Dict[str, Any]] = []
        self.armed_overrides: List[str] = []  # unit_override's dead-man timers that run

    def build_of(self, binary: str) -> str:
        return os.path.relpath(os.path.realpath(binary), self.root).split(os.sep)[0]

    def start(self, unit: str, port: int, binary: str | None = None, restarts: int = 0) -> None:
        binary = binary or str(self.root / "current" / "bin" / "llama-server")
        build = self.build_of(binary)
        self.next_pid += 1
        ok = self.loads[build]
        self.units[unit] = {"ActiveState": "active" if ok else "activating", "SubState": "running" if ok else "auto-restart",
                            "MainPID": self.next_pid if ok else 0, "NRestarts": restarts if ok else restarts + 1,
                            "Result": "success" if ok else "exit-code", "LoadState": "loaded",
                            "ControlGroup": f"/system.slice/{unit}", "port": port if ok else None, "build": build,
                            "argv": [binary, "--model", "/m/target.gguf", "--port", str(port)]}

    # -- the runner
    def __call__(self, argv: Sequence[str]) -> Tuple[int, str, str]:
        argv = list(argv)
        self.calls.append(argv)
        if self.kill_on and tuple(argv[: len(self.kill_on)]) == self.kill_on:
            if self.kill_skip == 0:
                raise Killed(" ".join(argv))
            self.kill_skip -= 1
        if argv[:2] == ["systemctl", "show"]:
            unit = self.units.get(argv[2], {"LoadState": "not-found", "ActiveState": "inactive"})
            props = [argv[i + 1] for i, a in enumerate(argv) if a == "-p"]
            return 0, "".join(f"{p}={unit.get(p, '')}\n" for p in props), ""
        if argv[:2] == ["systemctl", "restart"]:
            old = self.units[argv[2]]
            self.start(argv[2], self.port, restarts=int(old["NRestarts"]))
            return 0, "", ""
        if argv[:2] == ["systemctl", "is-active"]:
            armed = self.timer_armed and any(a.startswith("specdec-build-rollback-") for a in argv[2:])
            armed = armed or any(a in self.armed_overrides for a in argv[2:])
            return (0, "active\n", "") if armed else (3, "inactive\n", "")
        if argv[:2] == ["systemctl", "stop"]:
            if argv[2].endswith(".timer"):
                self.timer_armed = False
            elif argv[2] in self.units:
                self.units[argv[2]].update(ActiveState="inactive", MainPID=0, port=None)
            return 0, "", ""
        if argv[0] == "systemd-run":
            unit = next(a.split("=", 1)[1] for a in argv if a.startswith("--unit="))
            if unit.startswith("specdec-build-rollback-"):
                self.timer_armed = True
                return 0, "", ""
            if unit.endswith("-spec"):  # the canary spec's cleanup timer
                assert argv[-3:-1] == ["-c", act.SPEC_REMOVER]
                return 0, "", ""
            spec = json.loads(Path(argv[-1]).read_text())
            assert argv[-3:-1] == ["-c", act.CANARY_LOADER]
            self.canary_specs.append(spec)
            port = int(spec["argv"][spec["argv"].index("--port", len(spec["argv"]) - 6) + 1])
            self.start(unit + ".service", port, binary=spec["argv"][0])
            if not self.loads[self.units[unit + ".service"]["build"]]:
                self.units[unit + ".service"].update(ActiveState="failed", Result="exit-code")
            return 0, "", ""
        if argv[0] == "journalctl":
            return 0, "llama_model_load: error loading model: unknown model architecture\n", ""
        return 0, "", ""

    # -- /proc and /health
    def info(self, pid: int) -> act.ProcessInfo | None:
        for unit in self.units.values():
            if unit.get("MainPID") == pid and "argv" in unit:
                exe = os.path.realpath(unit["argv"][0])
                return act.ProcessInfo(pid, exe, list(unit["argv"]), {"LLAMA_ARG_N_GPU_LAYERS": "99", "INVOCATION_ID": "x"},
                                       998, 997, [997, 44], "/")
        return None

    def listening_ports(self, pid: int, control_group: str = "") -> List[int]:
        return [u["port"] for u in self.units.values() if u["MainPID"] == pid and u.get("port")]

    def serves(self, port: int, pid: int, control_group: str = "") -> bool:
        return port in self.listening_ports(pid)

    def http(self, url: str, timeout: float) -> Tuple[int, str]:
        port = int(url.rsplit(":", 1)[1].split("/")[0])
        up = any(u.get("port") == port and u["ActiveState"] == "active" for u in self.units.values())
        return (200, '{"status":"ok"}') if up else (0, "connection refused")

    @property
    def current(self) -> str:
        return os.readlink(self.root / "current")

    def changing(self) -> List[List[str]]:
        reads = (["systemctl", "show"], ["systemctl", "is-active"])
        return [c for c in self.calls if c[:2] not in reads and c[0] != "journalctl"]


def _activation(tmp: Path, host: Host, check_mode: bool = False) -> act.Activation:
    clock = Clock()
    return act.Activation(run=host, check_mode=check_mode, run_dir=str(tmp / "run"), processes=host,  # type: ignore[arg-type]
                          python=sys.executable, http=host.http, clock=clock, wall=lambda: 1.7e9, sleep=clock.sleep,
                          port=lambda: 40123)


def _params(host: Host, tmp: Path, **extra: Any) -> Dict[str, Any]:
    params = {"root": str(host.root), "name": "new-cpu", "current": None, "binary": "bin/llama-server", "units": ["llama-server"],
              "facts_file": str(tmp / "llamacpp-build.json"), "facts": {"version": "new"}, "canary": True,
              "canary_ctx_size": 512, "canary_args": [], "canary_model": None, "canary_timeout": 30,
              "health_timeout": 20, "rollback_after": 300, "state_dir": str(tmp / "state"), "lock_wait": 0}
    params.update(extra)
    return params


@pytest.fixture
def host(tmp_path: Path) -> Host:
    (tmp_path / "llamacpp-build.json").write_text('{"version": "old"}\n')
    return Host(tmp_path)


# ------------------------------------------------------------------ the good path and its refusals


def test_a_good_build_serves_a_canary_then_production_and_the_dead_man_is_disarmed(tmp_path: Path, host: Host) -> None:
    before = host.units[UNIT]["MainPID"]
    result = _activation(tmp_path, host).activate(_params(host, tmp_path))
    assert result["changed"] and result["previous"] == "old-cpu" and host.current == "new-cpu"
    assert result["restarted"] == [UNIT] and result["health"][UNIT]["pid"] != before
    assert host.units[UNIT]["build"] == "new-cpu"
    # the canary ran production's command line on the new binary, as production's user, on the spare port
    spec = host.canary_specs[0]
    assert spec["argv"][0] == str(host.root / "new-cpu" / "bin" / "llama-server")
    assert spec["argv"][1:5] == ["--model", "/m/target.gguf", "--port", "8080"]
    assert spec["argv"][-6:] == ["--host", "127.0.0.1", "--port", "40123", "--ctx-size", "512"]
    assert (spec["uid"], spec["gid"], spec["groups"]) == (998, 997, [997, 44])
    assert spec["env"] == {"LLAMA_ARG_N_GPU_LAYERS": "99"}  # systemd's own per-service variables left out
    assert not list((tmp_path / "run").rglob("*.json"))  # the canary's spec is gone (it held production's env)
    # the order: canary, then the dead-man, then the restart; the timer stopped at the end, the record gone
    changing = [" ".join(c[:2]) for c in host.changing()]
    assert changing.index("systemd-run --unit=specdec-canary-llama-server") < changing.index(
        "systemd-run --unit=specdec-build-rollback-" + act.link_stem(str(host.root / "current")))
    assert changing.index("systemctl restart") > changing.index("systemctl stop")  # the canary stopped before
    assert not host.timer_armed
    assert json.loads((tmp_path / "llamacpp-build.json").read_text()) == {"version": "new"}
    assert not os.path.exists(act.build_paths(str(host.root / "current"), str(tmp_path / "run")).meta)


def test_the_same_build_again_restarts_nothing(tmp_path: Path, host: Host) -> None:
    _activation(tmp_path, host).activate(_params(host, tmp_path))
    host.calls.clear()
    again = _activation(tmp_path, host).activate(_params(host, tmp_path))
    assert not again["changed"] and host.changing() == []


def test_check_mode_says_what_would_restart_and_starts_nothing(tmp_path: Path, host: Host) -> None:
    result = _activation(tmp_path, host, check_mode=True).activate(_params(host, tmp_path))
    assert result["changed"] and result["would_restart"] == [UNIT] and result["canary"] == []
    assert host.current == "old-cpu" and host.changing() == []


def test_a_build_that_cannot_load_the_model_fails_its_canary_and_nothing_changes(tmp_path: Path) -> None:
    (tmp_path / "llamacpp-build.json").write_text('{"version": "old"}\n')
    host = Host(tmp_path, loads={"old-cpu": True, "new-cpu": False})
    pid = host.units[UNIT]["MainPID"]
    with pytest.raises(act.ActivateError, match=r"canary of .*new-cpu.* exited before") as err:
        _activation(tmp_path, host).activate(_params(host, tmp_path))
    assert "unknown model architecture" in " ".join(err.value.details["journal"])
    assert host.current == "old-cpu" and host.units[UNIT]["MainPID"] == pid
    assert not any(c[:2] == ["systemctl", "restart"] for c in host.calls) and not host.timer_armed
    assert ["systemctl", "stop", "specdec-canary-llama-server.service"] in host.calls
    assert json.loads((tmp_path / "llamacpp-build.json").read_text()) == {"version": "old"}


def test_without_a_canary_a_failed_restart_points_current_back_and_production_serves_on_the_old_build(
        tmp_path: Path) -> None:
    (tmp_path / "llamacpp-build.json").write_text('{"version": "old"}\n')
    host = Host(tmp_path, loads={"old-cpu": True, "new-cpu": False})
    with pytest.raises(act.ActivateError, match="BUILD new-cpu WAS ROLLED BACK") as err:
        _activation(tmp_path, host).activate(_params(host, tmp_path, canary=False))
    assert err.value.details["rolled_back"] and err.value.details["healthy"]
    assert "production is healthy on it" in str(err.value) and "unknown model architecture" in str(err.value)
    assert host.current == "old-cpu" and host.units[UNIT]["build"] == "old-cpu"
    assert host.units[UNIT]["ActiveState"] == "active" and not host.timer_armed
    assert json.loads((tmp_path / "llamacpp-build.json").read_text()) == {"version": "old"}


def test_when_the_old_build_does_not_come_back_either_it_says_so_in_capitals_and_the_dead_man_stays(
        tmp_path: Path) -> None:
    host = Host(tmp_path, loads={"old-cpu": True, "new-cpu": False})
    host.loads["old-cpu"] = False  # e.g. the GPU went away meanwhile: nothing serves
    host.units[UNIT].update(ActiveState="active", MainPID=55, port=8080, build="old-cpu")
    with pytest.raises(act.ActivateError, match="PRODUCTION IS NOT HEALTHY") as err:
        _activation(tmp_path, host).activate(_params(host, tmp_path, canary=False))
    assert err.value.details["healthy"] is False and host.current == "old-cpu" and host.timer_armed


def test_units_that_do_not_serve_from_current_are_left_alone(tmp_path: Path, host: Host) -> None:
    host.units["other.service"] = dict(host.units[UNIT], MainPID=4242, argv=["/usr/local/bin/llama-server"], port=9000)
    host.units["stopped.service"] = {"LoadState": "loaded", "ActiveState": "inactive", "MainPID": 0}
    result = _activation(tmp_path, host).activate(_params(host, tmp_path, units=["llama-server", "other", "stopped"]))
    assert result["restarted"] == [UNIT]
    assert any("other.service runs" in note for note in result["notes"])
    assert any("stopped.service is inactive" in note for note in result["notes"])
    assert host.units["other.service"]["MainPID"] == 4242


def test_a_first_build_moves_the_link_after_a_canary_of_the_named_model(tmp_path: Path) -> None:
    host = Host(tmp_path)
    os.unlink(host.root / "current")
    host.units.clear()
    result = _activation(tmp_path, host).activate(_params(host, tmp_path, canary_model="/m/target.gguf"))
    assert host.current == "new-cpu" and result["restarted"] == [] and not host.timer_armed
    assert host.canary_specs[0]["argv"][1:3] == ["--model", "/m/target.gguf"] and host.canary_specs[0]["uid"] == 0


def test_a_current_that_is_not_a_link_is_refused(tmp_path: Path, host: Host) -> None:
    os.unlink(host.root / "current")
    (host.root / "current").mkdir()
    with pytest.raises(act.ActivateError, match="is not a link"):
        _activation(tmp_path, host).activate(_params(host, tmp_path))


@pytest.mark.parametrize("change, match", [
    ({"name": "../etc"}, "not a build directory name"),
    ({"binary": "/usr/bin/llama-server"}, "path inside the build"),
    ({"rollback_after": 60, "health_timeout": 20}, "twice health_timeout"),
    ({"units": ["bad unit"]}, "not a service name"),
    ({"root": "opt/llama.cpp"}, "absolute path"),
])
def test_bad_input_fails_before_anything_runs(tmp_path: Path, host: Host, change: Dict[str, Any], match: str) -> None:
    params = _params(host, tmp_path, **change)
    with pytest.raises(SpecdecError, match=match):
        act.run_activation(params, run=host, check_mode=False, python=sys.executable)
    assert host.calls == []


def test_the_module_fails_naming_the_option(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    with patch_module_args({"root": "/opt/llama.cpp", "name": "b1-cpu", "rollback_after": 10}):
        with pytest.raises(SystemExit):
            llamacpp_activate.main()
    out = json.loads(capsys.readouterr().out)
    assert out["failed"] and "rollback_after (10 s)" in out["msg"]


# ------------------------------------------------------------------ crash points: the module dies, the host restores


class _Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200)
        self.end_headers()
        self.wfile.write(b'{"status":"ok"}')

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def health_port() -> Iterator[int]:
    server = http.server.HTTPServer(("127.0.0.1", 0), _Health)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server.server_port
    server.shutdown()


def _run_dead_man(tmp: Path, paths: act.BuildPaths) -> subprocess.CompletedProcess:
    bindir = tmp / "bin"
    bindir.mkdir(exist_ok=True)
    for tool in ("systemctl", "journalctl"):
        (bindir / tool).write_text(f'#!/bin/sh\necho "{tool} $*" >> {tmp}/calls\n')
        (bindir / tool).chmod(0o755)
    env = dict(os.environ, PATH=f"{bindir}:{os.environ['PATH']}")
    return subprocess.run([sys.executable, paths.script], env=env, capture_output=True, text=True, timeout=60, check=False)


POINTS = {
    "after the dead-man, before the link": ("link", None),
    "after the link, before the record": ("facts", None),
    "after the record, before the restart": (None, ("systemctl", "restart")),
    "after the restart, before health": (None, ("systemctl", "show", UNIT, "-p", "ActiveState")),
    "in the module's own rollback, before the old build restarts": ("rollback", None),
}


@pytest.mark.parametrize("point", POINTS)
def test_a_module_killed_mid_switch_leaves_a_host_that_puts_the_old_build_back(
        tmp_path: Path, health_port: int, point: str, monkeypatch) -> None:
    (tmp_path / "llamacpp-build.json").write_text('{"version": "old"}\n')
    host = Host(tmp_path, port=health_port, loads={"old-cpu": True, "new-cpu": point.startswith("in the module's") is False})
    where, call = POINTS[point]
    real_point, real_write = act.point_link, act.write_atomic

    def point_link(current: str, target: str) -> None:
        if where == "link" or (where == "rollback" and target == "old-cpu"):
            raise Killed(point)
        real_point(current, target)

    def write_atomic(path: str, text: str, mode: int) -> None:
        if where == "facts" and path.endswith("llamacpp-build.json"):
            raise Killed(point)
        real_write(path, text, mode)

    monkeypatch.setattr(act, "point_link", point_link)
    monkeypatch.setattr(act, "write_atomic", write_atomic)
    if where == "rollback":
        host.loads["new-cpu"] = False
    host.kill_on = call
    with pytest.raises(Killed):
        _activation(tmp_path, host).activate(_params(host, tmp_path, canary=False))
    paths = act.build_paths(str(host.root / "current"), str(tmp_path / "run"))
    assert host.timer_armed and os.path.exists(paths.meta)  # the dead-man was armed before anything moved
    monkeypatch.undo()
    proc = _run_dead_man(tmp_path, paths)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert host.current == "old-cpu"
    assert json.loads((tmp_path / "llamacpp-build.json").read_text()) == {"version": "old"}
    calls = (tmp_path / "calls").read_text().splitlines()
    assert f"systemctl restart {UNIT}" in calls and f"{UNIT} answers" in proc.stdout
    assert not os.path.exists(paths.meta) and not os.path.exists(paths.script)


def test_a_module_killed_after_health_while_disarming_keeps_the_new_build(tmp_path: Path, health_port: int) -> None:
    host = Host(tmp_path, port=health_port)
    paths = act.build_paths(str(host.root / "current"), str(tmp_path / "run"))
    host.kill_on = ("systemctl", "stop", paths.timer)  # the record and the script are gone when the timer is stopped
    host.kill_skip = 1  # arming stops an earlier timer first
    with pytest.raises(Killed):
        _activation(tmp_path, host).activate(_params(host, tmp_path))
    # the timer that still fires is skipped by systemd (ConditionPathExists= on its script): nothing moves back
    arm = next(c for c in host.calls if c[0] == "systemd-run" and c[1] == f"--unit={paths.rollback_unit}")
    assert f"--property=ConditionPathExists={paths.script}" in arm
    assert not os.path.exists(paths.script) and not os.path.exists(paths.meta)
    assert host.current == "new-cpu" and not (tmp_path / "calls").exists()


def test_a_timer_that_fires_after_the_record_went_does_nothing_and_removes_its_script(tmp_path: Path) -> None:
    host = Host(tmp_path)
    paths = act.build_paths(str(host.root / "current"), str(tmp_path / "run"))
    os.makedirs(paths.state_dir)
    act.write_atomic(paths.script, act.render_rollback_script(paths, sys.executable), 0o700)
    proc = _run_dead_man(tmp_path, paths)
    assert proc.returncode == 0 and "nothing to do" in proc.stdout and not os.path.exists(paths.script)
    assert host.current == "old-cpu" and not (tmp_path / "calls").exists()


def test_the_next_activation_undoes_an_interrupted_one_first(tmp_path: Path, host: Host) -> None:
    host.kill_on = ("systemctl", "restart")
    with pytest.raises(Killed):
        _activation(tmp_path, host).activate(_params(host, tmp_path, canary=False))
    assert host.current == "new-cpu"  # moved, never confirmed
    host.kill_on = None
    result = _activation(tmp_path, host).activate(_params(host, tmp_path, name="old-cpu"))
    assert any("interrupted switch to new-cpu was undone" in note for note in result["notes"])
    assert host.current == "old-cpu" and not host.timer_armed
    assert json.loads((tmp_path / "llamacpp-build.json").read_text()) == {"version": "old"}


def test_a_second_cut_while_undoing_an_interrupted_switch_leaves_the_dead_man_armed(tmp_path: Path, host: Host) -> None:
    host.kill_on = ("systemctl", "restart")
    with pytest.raises(Killed):
        _activation(tmp_path, host).activate(_params(host, tmp_path, canary=False))
    paths = act.build_paths(str(host.root / "current"), str(tmp_path / "run"))
    assert host.current == "new-cpu" and host.timer_armed
    host.calls.clear()
    with pytest.raises(Killed):  # the undo's own restart is cut too
        _activation(tmp_path, host).activate(_params(host, tmp_path, name="old-cpu"))
    assert host.current == "old-cpu"
    assert host.timer_armed and os.path.exists(paths.meta) and os.path.exists(paths.script)
    assert ["systemctl", "stop", paths.timer] not in host.calls  # never disarmed before the undo answered health
    host.kill_on = None
    result = _activation(tmp_path, host).activate(_params(host, tmp_path, name="old-cpu"))
    assert any("interrupted switch to new-cpu was undone" in note for note in result["notes"])
    assert not host.timer_armed and not os.path.exists(paths.meta)
    stops = [i for i, c in enumerate(host.calls) if c == ["systemctl", "stop", paths.timer]]
    restarts = [i for i, c in enumerate(host.calls) if c[:2] == ["systemctl", "restart"]]
    assert stops and restarts and max(restarts) < min(stops)


def test_an_interrupted_switch_whose_dead_man_is_gone_is_armed_again_before_the_undo(tmp_path: Path, host: Host) -> None:
    host.kill_on = ("systemctl", "restart")
    with pytest.raises(Killed):
        _activation(tmp_path, host).activate(_params(host, tmp_path, canary=False))
    host.timer_armed = False  # stopped by hand, or an older version's undo cut after its stop
    host.calls.clear()
    with pytest.raises(Killed):
        _activation(tmp_path, host).activate(_params(host, tmp_path, name="old-cpu"))
    armed = [i for i, c in enumerate(host.calls) if c[0] == "systemd-run"]
    assert host.timer_armed and armed and armed[0] < len(host.calls) - 1
    assert host.calls[-1][:2] == ["systemctl", "restart"]


# ------------------------------------------------------------------ the host-wide guard: no switch under a live A/B


def _ab_holds(tmp: Path, run_id: str = "20261204T040000Z") -> Path:
    from ansible_collections.llmfleet.specdec.plugins.module_utils.state import _host_state
    _host_state.acquire({"unit": UNIT, "owner": {"run_id": run_id, "controller": "ctl-1", "pid": 4242},
                         "expires_after": 900, "state_dir": str(tmp / "state")}, run=lambda argv: (3, "inactive\n", ""),
                        check_mode=False, now=lambda: 1.7e9)
    return tmp / "state" / "locks" / "llama-server.json"


def test_a_unit_an_ab_holds_is_refused_naming_the_run_and_nothing_changes(tmp_path: Path, host: Host) -> None:
    lock = _ab_holds(tmp_path)
    with pytest.raises(act.ActivateError, match=r"refused: unit llama-server\.service is locked by run 20261204T040000Z"):
        _activation(tmp_path, host).activate(_params(host, tmp_path))
    assert host.current == "old-cpu" and not host.canary_specs and not host.timer_armed
    assert json.loads(lock.read_text())["run_id"] == "20261204T040000Z"  # the A/B's lock is left as it was
    assert not [c for c in host.changing() if c[:2] == ["systemctl", "restart"]]


@pytest.mark.parametrize("name", ["zz-llmfleet-specdec.conf", "50-llmfleet-specdec.conf"])  # the name, the former
def test_a_live_override_is_refused_naming_it_and_the_guard_is_given_back(tmp_path: Path, host: Host, name: str) -> None:
    dropin = tmp_path / "run" / "systemd" / "system" / (UNIT + ".d")
    dropin.mkdir(parents=True)
    (dropin / name).write_text("[Service]\n")
    from ansible_collections.llmfleet.specdec.plugins.module_utils.systemd._systemd import override_paths
    assert str(dropin / name) in override_paths(UNIT, str(tmp_path / "run")).all_dropins
    with pytest.raises(act.ActivateError, match=r"live override of unit_override \(drop-in .*" + re.escape(name)):
        _activation(tmp_path, host).activate(_params(host, tmp_path))
    assert host.current == "old-cpu" and not host.canary_specs and not host.timer_armed
    assert not (tmp_path / "state" / "locks" / "llama-server.json").exists()


def test_an_armed_override_dead_man_is_refused(tmp_path: Path, host: Host) -> None:
    from ansible_collections.llmfleet.specdec.plugins.module_utils.systemd._systemd import override_paths
    host.armed_overrides.append(override_paths(UNIT).timer)
    with pytest.raises(act.ActivateError, match="armed dead-man timer"):
        _activation(tmp_path, host).activate(_params(host, tmp_path))
    assert host.current == "old-cpu" and not host.canary_specs


def test_the_switch_holds_the_guard_until_it_returns_and_renews_it_before_the_dead_man(tmp_path: Path, host: Host) -> None:
    lock = tmp_path / "state" / "locks" / "llama-server.json"
    seen: List[Dict[str, Any]] = []
    real = host.__call__

    def spy(argv: Sequence[str]) -> Tuple[int, str, str]:
        if argv[0] == "systemd-run" or list(argv[:2]) == ["systemctl", "restart"]:
            seen.append(json.loads(lock.read_text()))
        return real(argv)

    activation = _activation(tmp_path, host)
    activation.sd._run = spy  # type: ignore[assignment]
    result = activation.activate(_params(host, tmp_path))
    assert host.current == "new-cpu" and result["restarted"] == [UNIT]
    assert seen and all(record["run_id"].startswith("build-") for record in seen)
    assert not lock.exists()  # released once production answered on the new build


def test_a_killed_switch_keeps_the_guard_and_the_next_activation_of_that_link_takes_it_back(tmp_path: Path, host: Host) -> None:
    host.kill_on = ("systemctl", "restart")
    with pytest.raises(Killed):
        _activation(tmp_path, host).activate(_params(host, tmp_path, canary=False))
    lock = tmp_path / "state" / "locks" / "llama-server.json"
    record = json.loads(lock.read_text())
    assert record["run_id"].startswith("build-") and "boot_id" not in record  # only its expiry frees it
    assert record["expires_after"] >= 300 + 2 * 20
    from ansible_collections.llmfleet.specdec.plugins.module_utils.state import _host_state
    with pytest.raises(_host_state.LockHeldError, match="build-"):  # an A/B is kept off while the dead-man waits
        _host_state.acquire({"unit": UNIT, "owner": {"run_id": "ab-1"}, "expires_after": 60,
                             "state_dir": str(tmp_path / "state")}, run=host, check_mode=False, now=lambda: 1.7e9 + 10)
    host.kill_on = None
    result = _activation(tmp_path, host).activate(_params(host, tmp_path, name="old-cpu"))
    assert any("undone" in note for note in result["notes"]) and not lock.exists()
