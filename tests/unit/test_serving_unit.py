"""Reading a serving unit as systemd will run it (module_utils/systemd/_serving_unit.py, module serving_unit_info).

systemctl is a fake runner that answers `systemctl show` like systemd 252 (the unit files are real files in a
temporary directory); molecule/units runs the same reading against a real systemd.
"""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from ansible.module_utils.testing import patch_module_args

from ansible_collections.llmfleet.specdec.plugins.module_utils.systemd import _serving_unit as su
from ansible_collections.llmfleet.specdec.plugins.modules import serving_unit_info

LLAMA = "/opt/specdec/bin/llama-server"


class FakeSystemd:
    def __init__(self, tmp: Path, unit_text: str, dropins: dict[str, str] | None = None, *, pid: int = 0,
                 show_argv: str | None = None, load: str = "loaded", reload: str = "no",
                 active: str = "active") -> None:
        self.fragment = tmp / "etc" / "llama.service"
        self.fragment.parent.mkdir(parents=True, exist_ok=True)
        self.fragment.write_text(unit_text)
        self.dropins = []
        for name, text in (dropins or {}).items():
            path = tmp / "etc" / "llama.service.d" / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
            self.dropins.append(str(path))
        self.pid = pid
        self.show_argv = show_argv
        self.load = load
        self.reload = reload
        self.active = active
        self.calls: list[list[str]] = []

    def __call__(self, argv: list[str]) -> tuple[int, str, str]:
        self.calls.append(list(argv))
        assert argv[:2] == ["systemctl", "show"], argv
        lines = [f"LoadState={self.load}", f"FragmentPath={self.fragment}", f"DropInPaths={' '.join(self.dropins)}",
                 f"NeedDaemonReload={self.reload}", f"MainPID={self.pid}", f"ActiveState={self.active}", "Type=exec"]
        if self.show_argv is not None:
            lines.append(f"ExecStart={{ path={self.show_argv.split()[0]} ; argv[]={self.show_argv} ; "
                         "ignore_errors=no ; start_time=[n/a] ; stop_time=[n/a] ; pid=0 ; code=(null) ; status=0/0 }")
        return 0, "\n".join(lines) + "\n", ""


def read(tmp: Path, systemd: FakeSystemd, **kw: Any) -> dict:
    table = {"n": "llama.service", "N": "llama", "p": "llama", "i": "", "t": "/run", "H": "box"}
    return su.read_unit("llama", systemd, run_dir=str(tmp / "run"), proc=str(tmp / "proc"),
                        specifiers=lambda unit, fragment: table, **kw)


def test_a_hand_written_unit_with_env_files_drop_ins_and_expansion(tmp_path: Path) -> None:
    env = tmp_path / "llama.env"
    env.write_text('MODEL=/srv/t.gguf\nEXTRA="--metrics -t 1"\n')
    unit = ("[Unit]\nDescription=mine\n[Service]\nEnvironment=PORT=8081 \"NAME=my server\"\n"
            f"EnvironmentFile={env}\nEnvironmentFile=-/nonexistent/optional.env\n"
            f"ExecStart=/bin/false\nExecStart=\nExecStart=-{LLAMA} -m ${{MODEL}} --port $PORT \\\n"
            "   --spec-draft-n-max 3 $EXTRA --alias '%N on %H' --log-prefix 100%%\n")
    proc = tmp_path / "proc" / "42"
    proc.mkdir(parents=True)
    expanded = [LLAMA, "-m", "/srv/t.gguf", "--port", "8081", "--spec-draft-n-max", "3", "--metrics", "-t", "1",
                "--alias", "llama on box", "--log-prefix", "100%"]
    (proc / "cmdline").write_bytes(b"\0".join(w.encode() for w in expanded) + b"\0")
    systemd = FakeSystemd(tmp_path, unit, {"10-threads.conf": "[Service]\nEnvironment=THREADS=2\n"}, pid=42,
                          show_argv=f"{LLAMA} -m ${{MODEL}} --port $PORT --spec-draft-n-max 3 $EXTRA --alias "
                                    "llama on box --log-prefix 100%")
    u = read(tmp_path, systemd)
    assert (u["form"], u["kind"], u["engine"], u["exec_prefix"]) == ("exec", "direct", "llamacpp", "-")
    assert u["argv"] == expanded and u["server_at"] == 1
    assert u["env"] == {"PORT": "8081", "NAME": "my server", "THREADS": "2", "MODEL": "/srv/t.gguf",
                        "EXTRA": "--metrics -t 1"}
    assert u["environment_files"] == [{"path": str(env), "optional": False, "exists": True},
                                      {"path": "/nonexistent/optional.env", "optional": True, "exists": False}]
    assert u["running"] == {"pid": 42, "argv": expanded, "matches": True}
    assert u["endpoint"] == {"host": "127.0.0.1", "port": 8081, "url": "http://127.0.0.1:8081"}
    assert u["exec_start_source"].endswith("llama.service line 9")


@pytest.mark.parametrize("name", ["zz-llmfleet-specdec.conf", "50-llmfleet-specdec.conf"])
def test_the_ab_drop_in_is_left_out_and_a_promotion_is_read(tmp_path: Path, name: str) -> None:
    # the A/B's drop-in under its name and under the former one a host may still carry
    ab = tmp_path / "run" / "systemd" / "system" / "llama.service.d" / name
    ab.parent.mkdir(parents=True)
    ab.write_text(f"[Service]\nExecStart=\nExecStart={LLAMA} --candidate\n")
    systemd = FakeSystemd(tmp_path, f"[Service]\nExecStart={LLAMA} -m /a\n",
                          {su.PROMOTED_DROPIN: f"[Service]\nExecStart=\nExecStart={LLAMA} -m /promoted\n"})
    systemd.dropins.append(str(ab))
    u = read(tmp_path, systemd)
    assert u["argv"] == [LLAMA, "-m", "/promoted"] and u["override_active"] is True
    assert u["promoted_dropin"].endswith(su.PROMOTED_DROPIN)


def test_a_late_promotion_is_read_after_override_conf(tmp_path: Path) -> None:
    """A systemctl edit unit's promotion (zx-...) sorts after override.conf: its line is the unit's."""
    systemd = FakeSystemd(tmp_path, f"[Service]\nExecStart={LLAMA} -m /a\n",
                          {"override.conf": f"[Service]\nExecStart=\nExecStart={LLAMA} -m /edited\n",
                           su.es.PROMOTED_DROPIN_LATE: f"[Service]\nExecStart=\nExecStart={LLAMA} -m /promoted\n"})
    u = read(tmp_path, systemd)
    assert u["argv"] == [LLAMA, "-m", "/promoted"]
    assert u["promoted_dropin"].endswith(su.es.PROMOTED_DROPIN_LATE)


def test_a_renamed_promotion_before_the_reload_restores_where_the_dead_man_waits(tmp_path: Path) -> None:
    """promote.yml renames zx- to 40- and restarts through unit_override, whose daemon-reload comes after it reads
    production's endpoint: the file systemd still lists is gone, so the reading refuses (run daemon-reload), and the
    restore waits where the armed dead-man does, never on the default port (found on real systemd: 8080)."""
    from ansible_collections.llmfleet.specdec.plugins.module_utils.systemd import _systemd as sd

    systemd = FakeSystemd(tmp_path, f"[Service]\nExecStart={LLAMA} -m /a --port 8093\n",
                          {su.es.PROMOTED_DROPIN_LATE: f"[Service]\nExecStart=\nExecStart={LLAMA} -m /p --port 8093\n"})
    os.replace(systemd.dropins[0], systemd.dropins[0].replace(su.es.PROMOTED_DROPIN_LATE, su.es.PROMOTED_DROPIN))
    with pytest.raises(su.UnitReadError, match="daemon-reload"):
        read(tmp_path, systemd)
    run_dir = str(tmp_path / "run")
    assert su.production_endpoint("llama", systemd, proc=str(tmp_path / "proc"), run_dir=run_dir) is None
    paths = sd.override_paths("llama.service", run_dir)
    Path(paths.script).parent.mkdir(parents=True)
    Path(paths.script).write_text(sd.render_rollback_script(paths, "/usr/bin/python3", "http://127.0.0.1:8093/health", 60))
    assert su.production_endpoint("llama", systemd, proc=str(tmp_path / "proc"), run_dir=run_dir) == ("127.0.0.1", 8093)


@pytest.mark.parametrize("unit_text, dropins, says", [
    (f"[Service]\nExecStart={LLAMA} -m $MODEL\n", {}, r"uses \$MODEL, which the unit's Environment="),
    (f"[Service]\nEnvironment=M=/m\nExecStart={LLAMA} -m $M/t.gguf\n", {}, r"drops the whole word; write \$\{M\}"),
    ("[Service]\nExecStart=/bin/bash -c 'exec llama-server'\n", {}, r"runs a wrapper .* is not running\. Start it"),
    (f"[Service]\nExecStart={LLAMA} 'unclosed\n", {}, "unbalanced quoting"),
    (f"[Service]\nExecStart={LLAMA} -m %q\n", {}, "specifier %q"),
    (f"[Service]\nType=oneshot\nExecStart={LLAMA}\nExecStart={LLAMA}\n", {}, "runs 2 ExecStart= commands"),
    ("[Service]\nEnvironmentFile=/nonexistent.env\nExecStart=/x\n", {}, "does not exist, so systemd would not"),
    (f"[Service]\nExecStart={LLAMA}\n", {"zzz-mine.conf": f"[Service]\nExecStart=\nExecStart={LLAMA} -t 2\n"},
     "rename it to sort before zz-llmfleet-specdec.conf"),
    (f"[Service]\nExecStart=@{LLAMA} name -m /a\n", {}, "another argv"),
    ("[Unit]\nDescription=no exec\n", {}, "has no ExecStart"),
])
def test_bad_units_are_refused_naming_the_unit_and_the_fix(tmp_path: Path, unit_text: str, dropins: dict,
                                                           says: str) -> None:
    with pytest.raises(su.UnitReadError, match=says) as info:
        read(tmp_path, FakeSystemd(tmp_path, unit_text, dropins))
    assert "llama.service" in str(info.value)


def test_a_reading_systemd_disagrees_with_is_refused(tmp_path: Path) -> None:
    systemd = FakeSystemd(tmp_path, f"[Service]\nExecStart={LLAMA} -m /a\n", show_argv=f"{LLAMA} -m /b")
    with pytest.raises(su.UnitReadError, match="systemd has"):
        read(tmp_path, systemd)


def test_a_collection_unit_is_form_env_and_a_missing_unit_is_not_installed(tmp_path: Path) -> None:
    env = tmp_path / "llama.env"
    env.write_text("LLAMA_ARG_PORT=9090\n")
    text = f"[Service]\nEnvironmentFile={env}\nExecStart=/usr/bin/python3 /usr/local/libexec/llamacpp-serve-exec {LLAMA}\n"
    u = read(tmp_path, FakeSystemd(tmp_path, text))
    assert (u["form"], u["kind"], u["endpoint"]["port"]) == ("env", "launcher", 9090)
    gone = read(tmp_path, FakeSystemd(tmp_path, "", load="not-found"))
    assert gone["installed"] is False and "not-found" in gone["why"]


def test_the_module_is_read_only_and_fails_for_a_required_unit(monkeypatch: pytest.MonkeyPatch,
                                                               capsys: pytest.CaptureFixture) -> None:
    import json

    monkeypatch.setattr(serving_unit_info.AnsibleModule, "get_bin_path", lambda self, name: "/bin/systemctl")
    monkeypatch.setattr(serving_unit_info.AnsibleModule, "run_command",
                        lambda self, argv: (0, "LoadState=not-found\nFragmentPath=\n", ""))
    with patch_module_args({"unit": "llama", "_ansible_check_mode": True}), pytest.raises(SystemExit):
        serving_unit_info.main()
    out = json.loads(capsys.readouterr().out)
    assert out["failed"] and "llama.service" in out["msg"] and "specdec_unit" in out["msg"]
    with patch_module_args({"unit": "llama", "required": False}), pytest.raises(SystemExit):
        serving_unit_info.main()
    out = json.loads(capsys.readouterr().out)
    assert out["changed"] is False and out["serving_unit"]["installed"] is False


def test_a_unit_customised_with_systemctl_edit_is_adopted_with_its_override(tmp_path: Path) -> None:
    # systemctl edit's override.conf sorts before the A/B's drop-in: its ExecStart= is production's, and each
    # candidate's (written later) replaces it
    assert "override.conf" < su.DROPIN_NAME and "99-local.conf" < su.DROPIN_NAME
    systemd = FakeSystemd(tmp_path, f"[Service]\nExecStart={LLAMA} -m /a\n",
                          {"override.conf": f"[Service]\nExecStart=\nExecStart={LLAMA} -m /a -t 2\n"})
    u = read(tmp_path, systemd)
    assert u["argv"] == [LLAMA, "-m", "/a", "-t", "2"] and u["override_active"] is False


def test_systemd_is_not_asked_while_the_ab_drop_in_or_unreloaded_files_are_loaded(tmp_path: Path) -> None:
    # systemctl show then has the candidate's (or the old) ExecStart=: the files are the truth, read as production
    ab = tmp_path / "run" / "systemd" / "system" / "llama.service.d" / su.DROPIN_NAME
    ab.parent.mkdir(parents=True)
    ab.write_text(f"[Service]\nExecStart=\nExecStart={LLAMA} -m /a --spec-draft-n-max 1\n")
    systemd = FakeSystemd(tmp_path, f"[Service]\nExecStart={LLAMA} -m /a\n", show_argv=f"{LLAMA} -m /a --spec-draft-n-max 1")
    systemd.dropins.append(str(ab))
    assert read(tmp_path, systemd)["argv"] == [LLAMA, "-m", "/a"]


# ------------------------------------------------------------------ start from what runs (issue 31)


def _process(tmp: Path, pid: int, argv: list[str], env: dict[str, str], exe: str | None = None) -> None:
    """A process in the fake /proc as the kernel shows it: cmdline, environ (as systemd gave it), exe."""
    d = tmp / "proc" / str(pid)
    d.mkdir(parents=True, exist_ok=True)
    (d / "cmdline").write_bytes(b"\0".join(w.encode() for w in argv) + b"\0")
    (d / "environ").write_bytes(b"\0".join(f"{k}={v}".encode() for k, v in env.items()) + b"\0")
    if exe:
        os.symlink(exe, d / "exe")


def _builds(tmp: Path) -> tuple[Path, Path, Path]:
    """Two llama.cpp builds and a `current` link on the first, as role llamacpp_build lays them out."""
    b1, b2 = tmp / "llama" / "b1", tmp / "llama" / "b2"
    for b in (b1, b2):
        (b / "bin").mkdir(parents=True)
        (b / "bin" / "llama-server").write_text("")
    current = tmp / "llama" / "current"
    current.symlink_to(b1)
    return b1, b2, current


def _launcher_unit(tmp: Path, env_text: str) -> tuple[Path, str, str]:
    env = tmp / "llama.env"
    env.write_text(env_text)
    _b1, _b2, current = _builds(tmp)
    binary = str(current / "bin" / "llama-server")
    unit = f"[Service]\nEnvironmentFile={env}\nExecStart=/usr/bin/python3 /usr/local/libexec/llamacpp-serve-exec {binary}\n"
    return env, binary, unit


def pending(tmp: Path, systemd: FakeSystemd) -> dict:
    return su.pending_changes(read(tmp, systemd), proc=str(tmp / "proc"))


def test_a_unit_that_runs_what_its_files_say_has_no_pending_change(tmp_path: Path) -> None:
    _env, binary, unit = _launcher_unit(tmp_path, "LLAMA_ARG_PORT=9090\nLLAMA_EXTRA_ARGS=--metrics\n")
    # the launcher execs llama-server: the process is [binary, *LLAMA_EXTRA_ARGS], its environment the env file's
    _process(tmp_path, 42, [binary, "--metrics"], {"PATH": "/usr/bin", "LLAMA_ARG_PORT": "9090",
                                                   "LLAMA_EXTRA_ARGS": "--metrics", "INVOCATION_ID": "x"},
             exe=os.path.realpath(binary))
    got = pending(tmp_path, FakeSystemd(tmp_path, unit, pid=42))
    assert got == {"compared": True, "why": None, "differences": []}


def test_a_hand_edit_of_the_env_file_without_restart_is_named_and_refused(tmp_path: Path) -> None:
    env, binary, unit = _launcher_unit(tmp_path, "LLAMA_ARG_PORT=9090\nLLAMA_ARG_CTX_SIZE=4096\nHF_TOKEN=sekrit1\n")
    _process(tmp_path, 42, [binary], {"LLAMA_ARG_PORT": "9090", "LLAMA_ARG_CTX_SIZE": "4096", "HF_TOKEN": "sekrit1",
                                      "LLAMA_ARG_FLASH_ATTN": "on"}, exe=os.path.realpath(binary))
    env.write_text("LLAMA_ARG_PORT=9090\nLLAMA_ARG_CTX_SIZE=8192\nHF_TOKEN=sekrit2\n")  # by hand, no restart
    got = pending(tmp_path, FakeSystemd(tmp_path, unit, pid=42))
    details = [d["detail"] for d in got["differences"]]
    assert [d["what"] for d in got["differences"]] == ["environment"] * 3
    assert details == ["HF_TOKEN: running (hidden), next start (hidden)",
                       "LLAMA_ARG_CTX_SIZE: running '4096', next start '8192'",
                       "LLAMA_ARG_FLASH_ATTN: running 'on', next start unset"]
    msg = su.refuse_pending("llama.service", got, "frank-zealot")
    assert "\n" not in msg and "sekrit" not in msg
    assert msg.startswith("llama.service on frank-zealot: what a restart would start differs from what runs")
    assert "LLAMA_ARG_CTX_SIZE: running '4096', next start '8192'" in msg
    assert "Nothing was changed" in msg and "systemctl restart llama.service" in msg and "specdec_force=true" in msg


def test_unreloaded_files_a_changed_command_line_and_a_switched_build_are_each_named(tmp_path: Path) -> None:
    b1, b2, current = _builds(tmp_path)
    binary = str(current / "bin" / "llama-server")
    _process(tmp_path, 42, [binary, "-m", "/a"], {}, exe=str(b1 / "bin" / "llama-server"))
    (current).unlink()
    current.symlink_to(b2)  # 'current' switched without a restart
    systemd = FakeSystemd(tmp_path, f"[Service]\nExecStart={binary} -m /b\n", pid=42, reload="yes")
    got = pending(tmp_path, systemd)
    assert [d["what"] for d in got["differences"]] == ["unit files", "command line", "build"]
    assert "NeedDaemonReload=yes" in got["differences"][0]["detail"]
    assert f"running `{binary} -m /a`, next start `{binary} -m /b`" in got["differences"][1]["detail"]
    assert got["differences"][2]["detail"] == (f"running {b1}/bin/llama-server, next start {b2}/bin/llama-server "
                                               f"({binary})")
    # a binary replaced in place: the kernel marks the running one deleted
    (tmp_path / "proc" / "42" / "exe").unlink()
    os.symlink(f"{b2}/bin/llama-server (deleted)", tmp_path / "proc" / "42" / "exe")
    got = pending(tmp_path, FakeSystemd(tmp_path, f"[Service]\nExecStart={binary} -m /a\n", pid=42))
    assert [d["what"] for d in got["differences"]] == ["build"] and "replaced or removed" in got["differences"][0]["detail"]


def test_a_script_server_runs_under_its_interpreter_and_is_not_a_pending_change(tmp_path: Path) -> None:
    # ExecStart= names a #! script: the kernel's cmdline and exe name the interpreter first
    script = tmp_path / "llama-server"
    script.write_text("#!/usr/bin/python3\n")
    _process(tmp_path, 42, ["/usr/bin/python3", str(script), "-m", "/a"], {}, exe="/usr/bin/python3.11")
    assert pending(tmp_path, FakeSystemd(tmp_path, f"[Service]\nExecStart={script} -m /a\n", pid=42))["differences"] == []
    got = pending(tmp_path, FakeSystemd(tmp_path, f"[Service]\nExecStart={script} -m /b\n", pid=42))
    assert [d["what"] for d in got["differences"]] == ["command line"]
    # a binary (no #!) is still held to the exact words
    (tmp_path / "elf").mkdir()
    binary = tmp_path / "elf" / "llama-server"
    binary.write_bytes(b"\x7fELF")
    _process(tmp_path, 43, ["/usr/bin/python3", str(binary), "-m", "/a"], {}, exe=str(binary))
    got = pending(tmp_path, FakeSystemd(tmp_path, f"[Service]\nExecStart={binary} -m /a\n", pid=43))
    assert [d["what"] for d in got["differences"]] == ["command line"]


def test_nothing_to_compare_for_a_stopped_unit_or_a_live_candidate(tmp_path: Path) -> None:
    text = f"[Service]\nExecStart={LLAMA} -m /a\n"
    stopped = pending(tmp_path, FakeSystemd(tmp_path, text, pid=0, active="inactive"))
    assert stopped["compared"] is False and "not running" in stopped["why"] and stopped["differences"] == []
    _process(tmp_path, 42, [LLAMA, "-m", "/candidate"], {})
    ab = tmp_path / "run" / "systemd" / "system" / "llama.service.d" / "50-llmfleet-specdec.conf"
    ab.parent.mkdir(parents=True)
    ab.write_text(f"[Service]\nExecStart=\nExecStart={LLAMA} -m /candidate\n")
    live = pending(tmp_path, FakeSystemd(tmp_path, text, pid=42))
    assert live["compared"] is False and "candidate" in live["why"]
    assert su.pending_changes(su.not_installed("llama.service", "gone"))["compared"] is False


def test_the_module_refuses_a_pending_change_in_check_mode_and_force_goes_ahead(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    import functools
    import json

    env, binary, unit = _launcher_unit(tmp_path, "LLAMA_ARG_PORT=9090\n")
    _process(tmp_path, 42, [binary], {"LLAMA_ARG_PORT": "9090"}, exe=os.path.realpath(binary))
    systemd = FakeSystemd(tmp_path, unit, pid=42)
    table = {"n": "llama.service", "N": "llama", "p": "llama", "i": "", "t": "/run", "H": "box"}
    monkeypatch.setattr(serving_unit_info.AnsibleModule, "get_bin_path", lambda self, name: "/bin/systemctl")
    monkeypatch.setattr(serving_unit_info.AnsibleModule, "run_command", lambda self, argv: systemd(argv))
    monkeypatch.setattr(serving_unit_info, "read_unit", functools.partial(
        su.read_unit, run_dir=str(tmp_path / "run"), proc=str(tmp_path / "proc"), specifiers=lambda u, f: table))
    monkeypatch.setattr(serving_unit_info, "pending_changes",
                        functools.partial(su.pending_changes, proc=str(tmp_path / "proc")))

    def main(**args: Any) -> dict:
        with patch_module_args({"unit": "llama", "_ansible_check_mode": True, **args}), pytest.raises(SystemExit):
            serving_unit_info.main()
        return json.loads(capsys.readouterr().out)

    assert main(start_from_running=True)["pending_change"] == ""
    env.write_text("LLAMA_ARG_PORT=9191\n")  # a pending change: the next start moves the port
    out = main()
    assert not out.get("failed") and out["pending_change"] == "environment: LLAMA_ARG_PORT: running '9090', next start '9191'"
    out = main(start_from_running=True)
    assert out["failed"] and "LLAMA_ARG_PORT: running '9090', next start '9191'" in out["msg"] and "\n" not in out["msg"]
    out = main(start_from_running=True, force=True)
    assert not out.get("failed") and out["changed"] is False and "LLAMA_ARG_PORT" in out["pending_change"]
    assert [c[:2] for c in systemd.calls] == [["systemctl", "show"]] * len(systemd.calls)  # read only


def test_on_the_fake_host_a_hand_edit_is_pending_until_the_operator_restarts(tmp_path: Path) -> None:
    """fakesystemd (the crash matrix's host): a started unit's /proc is what systemd gave it; an env file edited
    by hand, or a unit file changed without daemon-reload, is named; the fix the refusal names clears it."""
    from fakesystemd import FakeSystemd as Host

    binary = tmp_path / "opt" / "llama-server"
    binary.parent.mkdir(parents=True)
    binary.write_text("#!/bin/sh\n")
    env = tmp_path / "etc" / "llama-server.env"
    env.parent.mkdir(parents=True)
    env.write_text("LLAMA_ARG_PORT=8080\nLLAMA_ARG_MODEL=/m/target.gguf\n")
    unit_file = tmp_path / "etc" / "llama-server.service"
    unit_file.write_text(f"[Service]\nEnvironmentFile={env}\nExecStart={binary} --port 8080\n")
    host = Host(tmp_path)
    host.create({"llama-server.service": {"unit_file": str(unit_file), "binary": str(binary), "fragment": True}})

    def now() -> dict:
        live = su.read_unit("llama-server", host.run, proc=str(host.proc), run_dir=str(host.run_dir),
                            specifiers=lambda unit, fragment: {})
        return su.pending_changes(live, proc=str(host.proc))

    assert now() == {"compared": True, "why": None, "differences": []}
    pid = host.state()["units"]["llama-server.service"]["pid"]
    env.write_text("LLAMA_ARG_PORT=8080\nLLAMA_ARG_MODEL=/m/other.gguf\n")  # by hand, no restart
    assert [d["detail"] for d in now()["differences"]] == [
        "LLAMA_ARG_MODEL: running '/m/target.gguf', next start '/m/other.gguf'"]
    env.write_text("LLAMA_ARG_PORT=8080\nLLAMA_ARG_MODEL=/m/target.gguf\n")
    unit_file.write_text(unit_file.read_text() + "Environment=LLAMA_ARG_THREADS=4\n")  # no daemon-reload
    assert [d["what"] for d in now()["differences"]] == ["unit files", "environment"]
    # the check changed nothing: the same process serves, no restart was asked of systemd
    assert host.state()["units"]["llama-server.service"]["pid"] == pid
    calls = host.state()["calls"]
    assert calls and all(call[:2] == ["systemctl", "show"] for call in calls)
    # the fix the refusal names: daemon-reload and restart; production then runs what its files say
    host.run(["systemctl", "daemon-reload"])
    host.run(["systemctl", "restart", "llama-server.service"])
    assert now() == {"compared": True, "why": None, "differences": []}


def test_a_prefixed_server_is_found_on_real_proc_with_the_prefix_s_environment(tmp_path: Path) -> None:
    # a real child started as a unit would start it: env, nice and taskset exec the "server" (a copy of sleep
    # named llama-server), so its /proc/<pid>/cmdline is the server's own and its environ carries env's variable
    server = tmp_path / "llama-server"
    shutil.copy(shutil.which("sleep") or "/bin/sleep", server)
    argv = ["env", "SPECDEC_PREFIX_TEST=1", "nice", "-n", "1", "taskset", "-c", "0", str(server), "60"]
    child = subprocess.Popen([shutil.which(argv[0]) or "/usr/bin/env", *argv[1:]])
    try:
        cmdline = Path(f"/proc/{child.pid}/cmdline")
        for _attempt in range(500):  # until the prefixes have exec'd the server (no timing asserted)
            if cmdline.read_bytes().split(b"\0")[0] == str(server).encode():
                break
            subprocess.run(["true"], check=False)
        assert su.cmdline_matches("/proc", child.pid, argv) is True
        assert su.cmdline_matches("/proc", child.pid, [*argv[:-1], "61"]) is False
        environ = Path(f"/proc/{child.pid}/environ").read_bytes().split(b"\0")
        assert b"SPECDEC_PREFIX_TEST=1" in environ
    finally:
        child.kill()
        child.wait()


def test_a_unit_with_exec_prefixes_is_adopted_in_form_exec(tmp_path: Path) -> None:
    systemd = FakeSystemd(tmp_path, f"[Service]\nExecStart=/usr/bin/env GGML_X=1 /usr/bin/nice -n 5 {LLAMA} -m /a\n")
    u = read(tmp_path, systemd)
    assert (u["form"], u["kind"], u["server_args"]) == ("exec", "prefixed", ["-m", "/a"])
    assert u["server_env"]["GGML_X"] == "1"


def test_a_prefixed_unit_that_runs_what_its_files_say_has_no_pending_change(tmp_path: Path) -> None:
    # env/nice exec'd the server: its cmdline is the server's words, its environ carries env's variable
    unit = ("[Service]\nEnvironment=LLAMA_ARG_PORT=9090\n"
            f"ExecStart=/usr/bin/env LLAMA_ARG_THREADS=4 /usr/bin/nice -n 5 {LLAMA} -m /a\n")
    _process(tmp_path, 42, [LLAMA, "-m", "/a"], {"LLAMA_ARG_PORT": "9090", "LLAMA_ARG_THREADS": "4"})
    assert pending(tmp_path, FakeSystemd(tmp_path, unit, pid=42)) == {"compared": True, "why": None, "differences": []}
    _process(tmp_path, 42, [LLAMA, "-m", "/b"], {"LLAMA_ARG_PORT": "9090", "LLAMA_ARG_THREADS": "8"})
    got = pending(tmp_path, FakeSystemd(tmp_path, unit, pid=42))
    assert [d["what"] for d in got["differences"]] == ["command line", "environment"]
    assert got["differences"][1]["detail"] == "LLAMA_ARG_THREADS: running '8', next start '4'"
