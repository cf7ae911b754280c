"""unit_override's exec_start (form exec): the drop-in's ExecStart=, the command-line health check, bad input first.

The host is a fake runner and a fake /proc (as in test_systemd.py); molecule/units proves the same on real
systemd by reading /proc/<MainPID>/cmdline back after each candidate started.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Dict

import pytest
from test_systemd import FakeHost, _manager

from ansible_collections.llmfleet.specdec.plugins.module_utils.common._errors import SpecdecError
from ansible_collections.llmfleet.specdec.plugins.module_utils.systemd import _envfile as envfile
from ansible_collections.llmfleet.specdec.plugins.module_utils.systemd import _execstart as es
from ansible_collections.llmfleet.specdec.plugins.module_utils.systemd import _systemd as sd
from ansible_collections.llmfleet.specdec.plugins.module_utils.systemd import _unit_override as uo

LLAMA = "/opt/specdec/bin/llama-server"
PRODUCTION = [LLAMA, "-m", "/srv/t.gguf", "--spec-draft-n-max", "3", "--port", "8080"]
CANDIDATE = [LLAMA, "-m", "/srv/t.gguf", "--port", "8080", "--spec-draft-n-max", "6", "--alias", "50% of $5"]


def _hand_written(tmp_path: Path, pid: int = 77, dropins: Dict[str, str] | None = None, **extra: Any) -> FakeHost:
    unit_file = tmp_path / "etc" / "llama-server.service"
    unit_file.parent.mkdir(parents=True, exist_ok=True)
    unit_file.write_text("[Service]\nExecStart=" + " ".join(PRODUCTION) + "\n")
    paths = []
    for name, text in (dropins or {}).items():
        path = tmp_path / "etc" / "llama-server.service.d" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        paths.append(str(path))
    unit = {"LoadState": "loaded", "ActiveState": "active", "SubState": "running", "MainPID": str(pid),
            "NRestarts": "0", "NeedDaemonReload": "no", "DropInPaths": " ".join(paths), "FragmentPath": str(unit_file),
            "EnvironmentFiles": [], "Environment": "", "ControlGroup": "/system.slice/llama-server.service"}
    unit.update(extra)
    return FakeHost({"llama-server.service": unit})


def test_check_mode_shows_the_exec_start_drop_in_and_writes_nothing(tmp_path: Path) -> None:
    host = _hand_written(tmp_path)
    manager = _manager(tmp_path, host, {77: {"fds": ["socket:[31337]"], "cmdline": PRODUCTION}}, check_mode=True)
    command = es.check_exec_start(CANDIDATE, "-")
    result = manager.present("llama-server.service", envfile.EnvConfig((), ()), 600, command)
    assert result["changed"] is True and result["url"] == "http://127.0.0.1:8080/health"
    dropin = result["diff"][0]["after"]
    assert "ExecStart=\nExecStart=-/opt/specdec/bin/llama-server -m /srv/t.gguf" in dropin
    assert '--alias "50%% of $$5"' in dropin
    execs = [a.value for a in es.unit_assignments(dropin) if a.key == "ExecStart"]
    assert execs[0] == "" and es.expand_argv(es.parse_exec(execs[1], {})[0].argv, {}).argv == tuple(CANDIDATE)
    assert host.changing_calls() == [] and not (tmp_path / "run").exists()


def test_a_running_candidate_is_recognised_by_its_command_line(tmp_path: Path) -> None:
    config = envfile.EnvConfig((), ())
    command = es.check_exec_start(CANDIDATE)
    paths = sd.override_paths("llama-server.service", str(tmp_path / "run"))
    Path(paths.dropin_dir).mkdir(parents=True)
    Path(paths.state_dir).mkdir(parents=True)
    uo.write_private(paths.env_file, envfile.render_env_file(paths.unit, config), 0o600)
    uo.write_private(paths.dropin, envfile.render_dropin(paths, config) + command.lines(), 0o600)
    serving = {77: {"fds": ["socket:[31337]"], "cmdline": CANDIDATE}}
    host = _hand_written(tmp_path, dropins={}, DropInPaths=paths.dropin)
    assert _manager(tmp_path, host, serving).present(paths.unit, config, None, command)["changed"] is False
    assert host.changing_calls() == []
    # the same files, but the process still runs production's command line: a restart is due
    stale = {77: {"fds": ["socket:[31337]"], "cmdline": PRODUCTION}}
    check = _manager(tmp_path / "b", _hand_written(tmp_path, DropInPaths=paths.dropin), stale, check_mode=True)
    check.run_dir = str(tmp_path / "run")
    assert check.present(paths.unit, config, None, command)["changed"] is True


def test_a_drop_in_that_would_outrank_the_candidate_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    # systemctl edit's override.conf sorts before the A/B's drop-in; only a name past it is refused
    host = _hand_written(tmp_path, dropins={"zzz-local.conf": "[Service]\nExecStart=\nExecStart=" + LLAMA + " -t 2\n"})
    manager = _manager(tmp_path, host, {77: {"fds": ["socket:[31337]"], "cmdline": PRODUCTION}})
    with pytest.raises(sd.UnitOverrideError, match=r"zzz-local\.conf sets ExecStart= and sorts after"):
        manager.present("llama-server.service", envfile.EnvConfig((), ()), 600, es.check_exec_start(CANDIDATE))
    assert host.changing_calls() == [] and not (tmp_path / "run").exists()


def test_the_candidates_endpoint_comes_from_its_command_line(tmp_path: Path) -> None:
    manager = _manager(tmp_path, _hand_written(tmp_path), {}, check_mode=True)
    moved = [LLAMA, "-m", "/srv/t.gguf", "--port", "8099"]
    result = manager.present("llama-server.service", envfile.EnvConfig((), ()), None, es.check_exec_start(moved))
    assert result["port"] == 8099
    # production's restore URL is its own command line's, not the env's default
    paths = sd.override_paths("llama-server.service", manager.run_dir)
    assert manager.production_endpoint(paths, {"LLAMA_ARG_PORT": "9999"}) == ("127.0.0.1", 8080)


def test_variables_alone_on_a_unit_whose_line_runs_the_server_answer_on_its_port(tmp_path: Path) -> None:
    # found on real systemd (molecule/units): the health wait looked at the env's default port 8080, not the
    # --port of the unit's own line, and the candidate never counted as healthy
    moved = [LLAMA, "-m", "/srv/t.gguf", "--spec-draft-n-max", "3", "--port", "8094"]
    host = _hand_written(tmp_path)
    Path(host.units["llama-server.service"]["FragmentPath"]).write_text("[Service]\nExecStart=" + " ".join(moved) + "\n")
    manager = _manager(tmp_path, host, {77: {"fds": ["socket:[31337]"], "cmdline": moved}}, check_mode=True)
    result = manager.present("llama-server.service", envfile.EnvConfig((("GGML_SCHED_MAX_COPIES", "1"),), ()), None)
    assert result["port"] == 8094 and result["url"] == "http://127.0.0.1:8094/health"


@pytest.mark.parametrize("config", [
    envfile.EnvConfig((("LLAMA_ARG_SPEC_DRAFT_N_MAX", "1"),), ()),
    envfile.EnvConfig((), ("LLAMA_ARG_SPEC_DRAFT_N_MAX",)),
])
def test_a_variable_the_units_line_outranks_is_refused_before_anything_is_written(
        tmp_path: Path, config: envfile.EnvConfig) -> None:
    host = _hand_written(tmp_path)
    manager = _manager(tmp_path, host, {77: {"fds": ["socket:[31337]"], "cmdline": PRODUCTION}})
    with pytest.raises(SpecdecError, match=r"llama-server\.service: the candidate's LLAMA_ARG_SPEC_DRAFT_N_MAX would "
                                           r"never reach the server: llama-server\.service's ExecStart= line has "
                                           r"--spec-draft-n-max.*give the candidate as exec_start.*nothing was written"):
        manager.present("llama-server.service", config, 600)
    assert host.changing_calls() == [] and not (tmp_path / "run" / "systemd").exists()


@pytest.mark.parametrize("argv, prefix, match", [
    ([], "", "non-empty list"),
    (["relative/../x y"], "", "plain path"),
    ([LLAMA, "a\x00b"], "", "NUL"),
    ([LLAMA], ":", "prefix"),
    ("llama-server -m x", "", "non-empty list"),
])
def test_bad_exec_start_is_refused_first(argv: Any, prefix: str, match: str) -> None:
    with pytest.raises(SpecdecError, match=match):
        uo.run_unit_override({"unit": "llama-server", "state": "present", "exec_start": argv, "exec_prefix": prefix,
                              "env": {}}, run=_refuse, check_mode=False, python="/usr/bin/python3")


def _refuse(argv: Any) -> Any:
    raise AssertionError(f"nothing may run for bad input, ran {argv}")
