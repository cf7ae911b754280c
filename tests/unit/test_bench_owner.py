"""The bench measures only the unit's own server (issue 31, MEDIUM 6): the port's owner, before and after."""
from __future__ import annotations

from pathlib import Path

import pytest
from fakesystemd import FakeSystemd

from ansible_collections.llmfleet.specdec.plugins.module_utils.bench import _bench_owner as bo
from ansible_collections.llmfleet.specdec.plugins.module_utils.systemd._procview import ProcView

UNIT = "llama-server.service"
ENDPOINT = "http://127.0.0.1:8080"


@pytest.fixture()
def host(tmp_path: Path) -> FakeSystemd:
    env_file = tmp_path / "llama-server.env"
    env_file.write_text("LLAMA_ARG_PORT=8080\n")
    fake = FakeSystemd(tmp_path)
    fake.create({UNIT: {"env_files": [str(env_file)]}})
    return fake


def check(fake: FakeSystemd, endpoint: str = ENDPOINT) -> dict:
    return bo.check_owner(UNIT, endpoint, fake.run, ProcView(str(fake.proc)))


def test_the_units_own_server_passes(host: FakeSystemd) -> None:
    owner = check(host)
    pid = int(host.state()["units"][UNIT]["pid"])
    assert owner == {"unit": UNIT, "port": 8080, "main_pid": pid, "owners": [pid]}


def test_another_process_on_the_port_is_refused_by_name(host: FakeSystemd) -> None:
    host.run(["systemctl", "stop", UNIT])
    squatter = host.squat(8080)
    with pytest.raises(bo.BenchOwnerError, match=f"{UNIT} is inactive"):
        check(host)
    host.run(["systemctl", "start", UNIT])  # the unit runs again, but on 8080 the squatter listens as well
    with pytest.raises(bo.BenchOwnerError) as err:
        check(host)
    assert f"pid {squatter} (squatter" in str(err.value) and "not by llama-server.service's server" in str(err.value)


def test_nothing_listening_here_is_refused(host: FakeSystemd) -> None:
    with pytest.raises(bo.BenchOwnerError, match="no process on this host listens on port 9090"):
        check(host, "http://127.0.0.1:9090")


def test_a_squatter_on_another_port_is_not_the_unit(host: FakeSystemd) -> None:
    """A candidate that moved the port: its endpoint's port is held by someone else's server."""
    squatter = host.squat(8081)
    with pytest.raises(bo.BenchOwnerError, match=f"pid {squatter} "):
        check(host, "http://127.0.0.1:8081")


def test_hidden_fds_are_refused_not_trusted(host: FakeSystemd) -> None:
    pid = host.state()["units"][UNIT]["pid"]
    fd_dir = host.proc / str(pid) / "fd"
    fd_dir.chmod(0o000)
    try:
        if _readable(fd_dir):  # root reads it anyway: nothing is hidden then
            assert check(host)["owners"] == [pid]
        else:
            with pytest.raises(bo.BenchOwnerError, match="hidden from this module"):
                check(host)
    finally:
        fd_dir.chmod(0o755)


def _readable(path: Path) -> bool:
    try:
        list(path.iterdir())
        return True
    except PermissionError:
        return False


def test_a_restart_between_the_checks_is_refused(host: FakeSystemd) -> None:
    before = check(host)
    host.run(["systemctl", "restart", UNIT])
    with pytest.raises(bo.BenchOwnerError, match=r"changed while it was measured \(MainPID"):
        bo.check_same_owner(before, UNIT, ENDPOINT, host.run, ProcView(str(host.proc)))
    again = check(host)
    assert bo.check_same_owner(again, UNIT, ENDPOINT, host.run, ProcView(str(host.proc)))["main_pid"] == again["main_pid"]


@pytest.mark.parametrize("endpoint,port", [("http://h:81/x", 81), ("https://h", 443), ("http://[::1]:8000", 8000)])
def test_endpoint_port(endpoint: str, port: int) -> None:
    assert bo.endpoint_port(endpoint) == port


@pytest.mark.parametrize("endpoint", ["127.0.0.1:8080", "http://h:99999", "unix:///x.sock"])
def test_a_bad_endpoint_is_named(endpoint: str) -> None:
    with pytest.raises(bo.BenchOwnerError, match=r"endpoint .* give http://HOST:PORT"):
        bo.endpoint_port(endpoint)


# ------------------------------------------------------------------ the module: refused before the first request


def _module(monkeypatch: pytest.MonkeyPatch, fake: FakeSystemd, sent: list, restart_midway: bool = False) -> None:
    from ansible_collections.llmfleet.specdec.plugins.modules import spec_bench

    view = ProcView(str(fake.proc))
    monkeypatch.setattr(spec_bench, "check_owner", lambda unit, endpoint, _run: bo.check_owner(unit, endpoint, fake.run, view))
    monkeypatch.setattr(spec_bench, "check_same_owner",
                        lambda before, unit, endpoint, _run: bo.check_same_owner(before, unit, endpoint, fake.run, view))

    def bench(**params: object) -> dict:
        sent.append(params["endpoint"])
        if restart_midway:
            fake.run(["systemctl", "restart", UNIT])
        return {"schema": "llmfleet.specdec/bench/1", "requests": []}
    monkeypatch.setattr(spec_bench, "run_bench", bench)
    monkeypatch.setattr(spec_bench, "measured_prompts", lambda *a: [])
    monkeypatch.setattr(spec_bench, "add_ngram_checks", lambda *a: None)
    monkeypatch.setattr(spec_bench, "bench_under_load", lambda *a: None)
    monkeypatch.setattr(spec_bench, "load_failed", lambda load: False)


def _run_module(capsys: pytest.CaptureFixture[str]) -> dict:
    import json

    from ansible.module_utils.testing import patch_module_args

    from ansible_collections.llmfleet.specdec.plugins.modules import spec_bench
    with patch_module_args({"endpoint": ENDPOINT, "unit": UNIT}), pytest.raises(SystemExit):
        spec_bench.main()
    return json.loads(capsys.readouterr().out)


def test_the_module_sends_nothing_to_another_server(host: FakeSystemd, monkeypatch: pytest.MonkeyPatch,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    host.run(["systemctl", "stop", UNIT])
    squatter = host.squat(8080)
    host.run(["systemctl", "start", UNIT])
    sent: list = []
    _module(monkeypatch, host, sent)
    out = _run_module(capsys)
    assert out["failed"] and f"pid {squatter} (squatter" in out["msg"] and sent == [] and "bench" not in out


def test_the_module_keeps_no_numbers_of_a_server_restarted_while_measured(
        host: FakeSystemd, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    sent: list = []
    _module(monkeypatch, host, sent, restart_midway=True)
    out = _run_module(capsys)
    assert out["failed"] and "changed while it was measured" in out["msg"] and sent == [ENDPOINT]
    assert "bench" not in out


def test_the_module_returns_the_owner_it_checked(host: FakeSystemd, monkeypatch: pytest.MonkeyPatch,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    sent: list = []
    _module(monkeypatch, host, sent)
    out = _run_module(capsys)
    pid = int(host.state()["units"][UNIT]["pid"])
    assert not out.get("failed") and out["owner"]["main_pid"] == pid and out["bench"]["requests"] == []
