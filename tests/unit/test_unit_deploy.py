"""Module unit_deploy on the crash matrix's fake host (fakesystemd): a changed unit file, launcher or env file under a
dead-man that puts the previous ones back. The crash points themselves are rows of the crash matrix
(tests/unit/crash_matrix.py, docs/crash-matrix.md); these are the module's own cases."""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Dict, Iterator, List

import crash_matrix as cm
import pytest
from ansible.module_utils.testing import patch_module_args

from ansible_collections.llmfleet.specdec.plugins.module_utils.common._errors import SpecdecError
from ansible_collections.llmfleet.specdec.plugins.module_utils.systemd import _unit_deploy as ud
from ansible_collections.llmfleet.specdec.plugins.modules import unit_deploy

UNIT = cm.UNIT


@pytest.fixture
def host(tmp_path: Path) -> Iterator[cm.Host]:
    cm.install()
    made = cm.Host(tmp_path / "host", unit_files=True)
    cm._with_launcher(made)
    made.faults = cm.Faults()
    yield made
    made.close()


def _files(host: cm.Host, unit_env: str = "FAKE_UNIT=v2", extra_env: str = "") -> List[Dict[str, Any]]:
    unit_file = Path(host.fake.state()["units"][UNIT]["unit_file"])
    env_path = cm._env_path(host)
    return [{"path": str(host.root / "launcher"), "content": "v2\n", "mode": 0o755},
            {"path": str(env_path), "content": env_path.read_text() + extra_env, "mode": 0o640},
            {"path": str(unit_file), "mode": 0o644,
             "content": unit_file.read_text().replace("ExecStart=", f"Environment={unit_env}\nExecStart=")}]


def _deploy(host: cm.Host, files: List[Dict[str, Any]], check_mode: bool = False) -> Dict[str, Any]:
    return ud.UnitDeploy(host.manager(check_mode=check_mode)).deploy(UNIT, files, cm.ROLLBACK_AFTER)


def _changing(host: cm.Host) -> List[List[str]]:
    return [c for c in host.fake.state()["calls"] if c[0] == "systemd-run" or (
        c[0] == "systemctl" and c[1] in ("restart", "daemon-reload", "stop", "start"))]


def test_a_new_unit_file_serves_after_health_and_nothing_is_left(host: cm.Host) -> None:
    pid = host.fake.state()["units"][UNIT]["pid"]
    result = _deploy(host, _files(host, extra_env="LLAMA_ARG_THREADS=4\n"))
    assert result["changed"] and result["restarted"] and result["main_pid"] != pid
    assert host.fake.serving(UNIT) == dict(host.production_env(), FAKE_UNIT="v2", LLAMA_ARG_THREADS="4")
    assert (host.root / "launcher").read_text() == "v2\n" and os.stat(host.root / "launcher").st_mode & 0o777 == 0o755
    assert host.leftovers() == [] and host.fake.armed() == []
    # the dead-man was armed before the first file was written, with the previous files in its record
    calls = host.fake.state()["calls"]
    assert calls.index(next(c for c in calls if c[0] == "systemd-run")) < calls.index(["systemctl", "daemon-reload"])


def test_the_same_files_again_change_and_restart_nothing(host: cm.Host) -> None:
    files = _files(host)
    _deploy(host, files)
    before = len(_changing(host))
    again = _deploy(host, files)
    assert not again["changed"] and not again["restarted"] and len(_changing(host)) == before


def test_check_mode_shows_each_file_and_touches_nothing(host: cm.Host) -> None:
    unit_text = Path(host.fake.state()["units"][UNIT]["unit_file"]).read_text()
    result = _deploy(host, _files(host), check_mode=True)
    assert result["changed"] and len(result["files"]) == 3
    assert {d["before_header"] for d in result["diff"]} == set(result["files"])
    assert Path(host.fake.state()["units"][UNIT]["unit_file"]).read_text() == unit_text
    assert _changing(host) == [] and host.leftovers() == []


def test_a_unit_file_that_cannot_start_is_rolled_back_and_production_serves_on_the_previous_files(host: cm.Host) -> None:
    unit_file = Path(host.fake.state()["units"][UNIT]["unit_file"])
    before = unit_file.read_text()
    with pytest.raises(ud.DeployError, match="WAS ROLLED BACK") as err:
        _deploy(host, _files(host, unit_env="FAKE_FAIL_START=1"))
    assert err.value.details["healthy"] and err.value.details["rolled_back"]
    assert unit_file.read_text() == before and (host.root / "launcher").read_text() == "v1\n"
    assert host.serves_production() and host.fake.env_on_disk(UNIT) == host.production_env()
    assert host.leftovers() == []


def test_a_unit_that_does_not_serve_gets_its_files_and_no_restart(host: cm.Host) -> None:
    host.fake.run(["systemctl", "stop", UNIT])
    result = _deploy(host, _files(host))
    assert result["changed"] and not result["serving"] and not result["restarted"]
    assert host.fake.state()["units"][UNIT]["active"] == "inactive" and host.fake.armed() == []
    assert host.fake.env_on_disk(UNIT)["FAKE_UNIT"] == "v2" and host.leftovers() == []


def test_a_unit_with_a_live_override_is_refused_before_anything_changes(host: cm.Host) -> None:
    host.manager().present(UNIT, cm._config(cm.CANDIDATE_A), cm.ROLLBACK_AFTER)
    unit_text = Path(host.fake.state()["units"][UNIT]["unit_file"]).read_text()
    with pytest.raises(ud.DeployError, match="runs an override of unit_override now"):
        _deploy(host, _files(host))
    assert Path(host.fake.state()["units"][UNIT]["unit_file"]).read_text() == unit_text


def test_a_port_held_by_another_process_is_refused_before_anything_changes(host: cm.Host) -> None:
    pid = host.fake.squat(40999)
    files = _files(host, extra_env="LLAMA_ARG_PORT=40999\n")
    with pytest.raises(ud.UnitOverrideError, match=f"port 40999.*pid {pid}"):
        _deploy(host, files)
    assert host.fake.armed() == [] and (host.root / "launcher").read_text() == "v1\n"


def test_the_next_deploy_undoes_an_interrupted_one_first(host: cm.Host) -> None:
    files = _files(host, unit_env="FAKE_UNIT=v3")
    again = _files(host)
    real = host.fake.run
    seen: List[str] = []

    def die_at_restart(argv: Any) -> Any:
        if list(argv[:2]) == ["systemctl", "restart"] and not seen:
            seen.append("x")
            raise cm.Killed("restart")
        return real(argv)

    host.fake.run = die_at_restart  # type: ignore[method-assign]
    with pytest.raises(cm.Killed):
        _deploy(host, files)
    host.fake.run = real  # type: ignore[method-assign]
    meta = json.loads(Path(ud.deploy_paths(UNIT, str(host.fake.run_dir)).meta).read_text())
    assert [item["path"] for item in meta["files"]] == [f["path"] for f in files]
    result = _deploy(host, again)
    assert any("interrupted deploy" in note for note in result["notes"])
    assert host.fake.serving(UNIT)["FAKE_UNIT"] == "v2" and host.leftovers() == []


@pytest.mark.parametrize("change, match", [
    ({"files": []}, "at least one file"),
    ({"files": [{"path": "etc/x", "content": "", "mode": "0644"}]}, "absolute"),
    ({"files": [{"path": "/nonexistent-dir/x", "content": "", "mode": "0644"}]}, "does not exist"),
    ({"files": [{"path": "/tmp/x", "content": "", "mode": "rw"}]}, "octal mode"),
    ({"rollback_after": 100, "health_timeout": 40}, "twice health_timeout"),
    ({"unit": "bad unit"}, "not a service name"),
])
def test_bad_input_fails_before_anything_runs(change: Dict[str, Any], match: str) -> None:
    params = {"unit": "llama-server", "files": [{"path": "/tmp/x", "content": "", "mode": "0644"}],
              "rollback_after": 300, "health_timeout": 20, "port_timeout": 5}
    params.update(change)
    calls: List[Any] = []
    with pytest.raises(SpecdecError, match=match):
        ud.run_unit_deploy(params, run=lambda argv: calls.append(argv) or (0, "", ""), check_mode=False,
                           python="/usr/bin/python3")
    assert calls == []


def test_the_module_fails_naming_the_option(capsys: pytest.CaptureFixture[str]) -> None:
    with patch_module_args({"unit": "llama-server", "files": [{"path": "/tmp/x", "content": "", "mode": "0644"}],
                            "rollback_after": 60, "health_timeout": 20}):
        with pytest.raises(SystemExit):
            unit_deploy.main()
    out = json.loads(capsys.readouterr().out)
    assert out["failed"] and "rollback_after (60 s)" in out["msg"]
