"""Wrapper units (module_utils/systemd/_unit_wrapper.py): a script that ends in `exec llama-server ...`, `sh -c '... exec
llama-server ...'`, a wrapper that keeps the server as a child. The server is read from a fake /proc; candidates
go in form env, refused when the server would not see them, and verified on the new process's environ;
molecule/units runs the same on a real systemd.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from ansible_collections.llmfleet.specdec.plugins.module_utils.systemd import _render as render
from ansible_collections.llmfleet.specdec.plugins.module_utils.systemd import _serving_unit as su
from ansible_collections.llmfleet.specdec.plugins.module_utils.systemd import _unit_wrapper as uw

LLAMA = "/opt/specdec/bin/llama-server"
CGROUP = "/system.slice/llama.service"


class Systemd:
    """`systemctl show` of a unit whose ExecStart= is ``exec_start`` (systemd 252's answer)."""

    def __init__(self, tmp: Path, exec_start: str, *, pid: int, env: str = "") -> None:
        self.fragment = tmp / "etc" / "llama.service"
        self.fragment.parent.mkdir(parents=True, exist_ok=True)
        self.fragment.write_text(f"[Service]\n{env}ExecStart={exec_start}\n")
        self.pid = pid

    def __call__(self, argv: list[str]) -> tuple[int, str, str]:
        assert argv[:2] == ["systemctl", "show"], argv
        return 0, (f"LoadState=loaded\nFragmentPath={self.fragment}\nDropInPaths=\nNeedDaemonReload=no\n"
                   f"MainPID={self.pid}\nActiveState=active\nType=simple\nControlGroup={CGROUP}\n"), ""


def process(tmp: Path, pid: int, argv: list[str], env: dict[str, str], *, parent: int = 1,
            cgroup: str = CGROUP) -> None:
    d = tmp / "proc" / str(pid)
    d.mkdir(parents=True, exist_ok=True)
    (d / "cmdline").write_bytes(b"\0".join(w.encode() for w in argv) + b"\0")
    (d / "environ").write_bytes(b"\0".join(f"{k}={v}".encode() for k, v in env.items()) + b"\0")
    (d / "cgroup").write_text(f"0::{cgroup}\n")
    (d / "stat").write_text(f"{pid} ({Path(argv[0]).name[:15]}) S {parent} {pid} {pid} 0 -1\n")


def script(tmp: Path, body: str) -> Path:
    path = tmp / "run-llama.sh"
    path.write_text("#!/bin/sh\n" + body)
    return path


def read(tmp: Path, systemd: Systemd) -> dict[str, Any]:
    table = {"n": "llama.service", "N": "llama", "p": "llama", "i": "", "t": "/run", "H": "box"}
    return su.read_unit("llama", systemd, run_dir=str(tmp / "run"), proc=str(tmp / "proc"),
                        specifiers=lambda unit, fragment: table)


def test_a_script_that_execs_llama_server_is_read_from_its_running_process(tmp_path: Path) -> None:
    wrapper = script(tmp_path, f"export GGML_X=1\nexec {LLAMA} -m /m.gguf --port 8091 -c 4096\n")
    process(tmp_path, 42, [LLAMA, "-m", "/m.gguf", "--port", "8091", "-c", "4096"],
            {"LLAMA_ARG_THREADS": "4", "GGML_X": "1", "PATH": "/usr/bin"})
    u = read(tmp_path, Systemd(tmp_path, str(wrapper), pid=42, env="Environment=LLAMA_ARG_THREADS=4\n"))
    assert (u["form"], u["kind"], u["engine"]) == ("env", "wrapper", "llamacpp")
    assert u["server_args"] == ["-m", "/m.gguf", "--port", "8091", "-c", "4096"]
    assert u["server_env"]["GGML_X"] == "1" and u["wrapper"]["exec"] is True and u["wrapper"]["pid"] == 42
    assert u["wrapper"]["set_by_wrapper"] == {"GGML_X": "1"}  # the unit does not set it: the wrapper does
    assert u["endpoint"]["port"] == 8091  # from the server's real command line, not the env's default
    assert u["running"]["matches"] is True
    # nothing to compare on what a wrapper will run: no pending change from the variables it exports itself
    assert su.pending_changes(u, proc=str(tmp_path / "proc"))["differences"] == []


def test_sh_c_with_a_child_server_is_found_in_the_units_control_group(tmp_path: Path) -> None:
    line = f"/bin/sh -c 'ulimit -n 4096; {LLAMA} -m /m.gguf'"
    process(tmp_path, 42, ["/bin/sh", "-c", f"ulimit -n 4096; {LLAMA} -m /m.gguf"], {})
    process(tmp_path, 43, [LLAMA, "-m", "/m.gguf"], {"LLAMA_ARG_PORT": "8092"}, parent=42)
    process(tmp_path, 44, [LLAMA, "-m", "/other.gguf"], {}, cgroup="/system.slice/other.service")
    u = read(tmp_path, Systemd(tmp_path, line, pid=42))
    assert (u["kind"], u["wrapper"]["shape"], u["wrapper"]["pid"], u["wrapper"]["exec"]) == ("wrapper", "shell", 43, False)
    assert u["endpoint"]["port"] == 8092
    assert uw.server_pid(str(tmp_path / "proc"), 42, CGROUP) == 43


@pytest.mark.parametrize("pid, says", [
    (0, r"llama.service is not running\. Start it"),
    (42, r"neither its MainPID 42 \(`/bin/sh -c sleep 1000`\) nor exactly one process .* End the wrapper with `exec"),
])
def test_a_wrapper_whose_server_cannot_be_read_is_refused_saying_what_to_do(tmp_path: Path, pid: int, says: str) -> None:
    process(tmp_path, 42, ["/bin/sh", "-c", "sleep 1000"], {})
    with pytest.raises(su.UnitReadError, match=says):
        read(tmp_path, Systemd(tmp_path, "/bin/sh -c 'sleep 1000'", pid=pid))


def test_two_servers_in_the_cgroup_are_not_guessed_between(tmp_path: Path) -> None:
    process(tmp_path, 42, ["/bin/sh", "-c", "x"], {})
    process(tmp_path, 43, [LLAMA, "--port", "1"], {}, parent=42)
    process(tmp_path, 44, [LLAMA, "--port", "2"], {}, parent=42)
    assert uw.server_process(str(tmp_path / "proc"), 42, CGROUP) is None
    process(tmp_path, 44, [LLAMA, "--port", "2"], {}, parent=43)  # a child of the server is not a second server
    assert uw.server_process(str(tmp_path / "proc"), 42, CGROUP)[0] == 43


def test_candidates_go_in_form_env_and_what_the_server_would_not_see_is_refused_naming_it(tmp_path: Path) -> None:
    wrapper = script(tmp_path, "exec llama-server ...\n")
    process(tmp_path, 42, [LLAMA, "-m", "/m.gguf", "--spec-draft-n-max", "8"],
            {"LLAMA_ARG_CTX_SIZE": "2048", "LLAMA_ARG_THREADS": "4"})
    u = read(tmp_path, Systemd(tmp_path, str(wrapper), pid=42,
                               env="Environment=LLAMA_ARG_CTX_SIZE=8192 LLAMA_ARG_THREADS=4\n"))
    ok = render.render_candidate(u["server_env"], {"LLAMA_ARG_SPEC_DRAFT_P_MIN": "0.5"}, [], "pmin", "llamacpp", u)
    assert ok["refused"] == [] and ok["form"] == "env" and ok["env_file"] == ["LLAMA_ARG_SPEC_DRAFT_P_MIN=0.5"]
    assert ok["host_argv"] == ["-m", "/m.gguf", "--spec-draft-n-max", "8"]  # the server's own, for the lint
    flag = render.render_candidate(u["server_env"], {"LLAMA_ARG_SPEC_DRAFT_N_MAX": "4"}, [], "d4", "llamacpp", u)
    assert [r["flag"] for r in flag["refused"]] == ["--spec-draft-n-max"]
    assert f"the server's command line (its wrapper {wrapper} writes it) has --spec-draft-n-max 8. Remove " \
        "--spec-draft-n-max from the server's command line" in flag["refused"][0]["message"]
    sets = render.render_candidate(u["server_env"], {"LLAMA_ARG_CTX_SIZE": "4096"}, [], "ctx", "llamacpp", u)
    assert [r["code"] for r in sets["refused"]] == ["wrapper-sets"]
    assert "wrapper sets LLAMA_ARG_CTX_SIZE itself (the server sees '2048', the unit's environment says '8192')" \
        in sets["refused"][0]["message"]
    flags = render.render_candidate(u["server_env"], {}, ["--spec-draft-n-min", "2"], "f", "llamacpp", u)
    assert [r["code"] for r in flags["refused"]] == ["wrapper-flags"] and "--spec-draft-n-min 2" in flags["refused"][0]["message"]


def test_a_vllm_wrapper_refuses_the_launchers_variables(tmp_path: Path) -> None:
    wrapper = script(tmp_path, "exec vllm serve /m --port 8000\n")
    process(tmp_path, 42, ["/opt/vllm/bin/vllm", "serve", "/m", "--port", "8000"], {})
    u = read(tmp_path, Systemd(tmp_path, str(wrapper), pid=42))
    assert (u["engine"], u["server_args"]) == ("vllm", ["/m", "--port", "8000"])
    got = render.render_candidate({}, {"VLLM_SPECULATIVE_CONFIG": "{}"}, [], "s", "vllm", u)
    assert [r["code"] for r in got["refused"]] == ["wrapper-launcher-var"]


def test_the_new_servers_environ_names_each_variable_it_does_not_see() -> None:
    assert uw.environ_mismatch([("A", "1"), ("B", "2")], ["C"], {"A": "1", "B": "3", "C": "x"}) == [
        "B: the server sees '3', the drop-in set '2'", "C: the server sees 'x', the drop-in unsets it"]
    assert uw.environ_mismatch([("A", "1")], [], {}) == ["A: the server has none, the drop-in set '1'"]
    assert uw.environ_mismatch([("A", "1")], ["C"], {"A": "1"}) == []


def test_shapes() -> None:
    assert uw.wrapper_shape(["/bin/bash", "-ec", "exec x"]) == "shell"
    assert uw.wrapper_shape(["/bin/bash", "--login"]) is None
    assert uw.wrapper_shape(["/nonexistent/run.sh"]) is None


def test_a_wrapper_that_sets_the_candidates_variable_itself_fails_the_candidate_naming_it(tmp_path: Path) -> None:
    """On the crash matrix's fake host: the wrapper exports LLAMA_ARG_SPEC_DRAFT_N_MAX=16 over the unit's
    environment; the candidate's 4 never reaches the new server, whose environ says so; production is put back."""
    import crash_matrix as cm

    from ansible_collections.llmfleet.specdec.plugins.module_utils.systemd import _envfile as envfile
    from ansible_collections.llmfleet.specdec.plugins.module_utils.systemd import _unit_override as uo

    cm.install()
    host = cm.Host(tmp_path / "h")
    try:
        def wrap(st: dict) -> None:
            st["units"][cm.UNIT]["wrapper_env"] = {"LLAMA_ARG_SPEC_DRAFT_N_MAX": "16"}
        host.fake._mutate(wrap)  # pylint: disable=protected-access
        config = envfile.env_config_from_mapping({"LLAMA_ARG_SPEC_DRAFT_N_MAX": "4", "LLAMA_ARG_SPEC_DRAFT_P_MIN": "0.5"})
        with pytest.raises(uo.UnitOverrideError) as info:
            host.manager().present(cm.UNIT, config, 600)
        msg = str(info.value)
        assert "does not see the candidate's variables (LLAMA_ARG_SPEC_DRAFT_N_MAX: the server sees '16', the " \
               "drop-in set '4')" in msg and "Production restored" in msg
        serving = host.fake.serving(cm.UNIT)
        assert serving is not None and "LLAMA_ARG_SPEC_DRAFT_P_MIN" not in serving and host.leftovers() == []
        # without the wrapper's export the same candidate runs, and its server's environ carries it

        def unwrap(st: dict) -> None:
            st["units"][cm.UNIT]["wrapper_env"] = {}
        host.fake._mutate(unwrap)  # pylint: disable=protected-access
        done = host.manager().present(cm.UNIT, config, 600)
        assert done["restarted"] is True and host.fake.serving(cm.UNIT)["LLAMA_ARG_SPEC_DRAFT_N_MAX"] == "4"
        host.manager().absent(cm.UNIT)
    finally:
        host.close()


def test_a_failed_candidate_of_a_wrapper_unit_is_restored_on_the_endpoint_its_dead_man_was_armed_with(
        tmp_path: Path) -> None:
    """No server runs (the candidate never started one), so the wrapper cannot be read: the restore waits where
    production answered when the dead-man was armed, not on the env's default port."""
    from ansible_collections.llmfleet.specdec.plugins.module_utils.systemd import _systemd as sd

    wrapper = script(tmp_path, f"exec {LLAMA} --port 8092\n")
    process(tmp_path, 42, ["/bin/sh", str(wrapper)], {})  # the candidate's wrapper, its server gone
    systemd = Systemd(tmp_path, str(wrapper), pid=42)
    run_dir = str(tmp_path / "run")
    assert su.production_endpoint("llama", systemd, proc=str(tmp_path / "proc"), run_dir=run_dir) is None
    paths = sd.override_paths("llama.service", run_dir)
    Path(paths.script).parent.mkdir(parents=True)
    Path(paths.script).write_text(sd.render_rollback_script(paths, "/usr/bin/python3", "http://127.0.0.1:8092/health", 60))
    assert su.production_endpoint("llama", systemd, proc=str(tmp_path / "proc"), run_dir=run_dir) == ("127.0.0.1", 8092)
    # a unit whose reading fails for another reason: the armed dead-man's endpoint too, else the caller's fallback
    bad = Systemd(tmp_path / "b", f"{LLAMA} -m $NOPE", pid=42)
    assert su.production_endpoint("llama", bad, proc=str(tmp_path / "proc"), run_dir=run_dir) == ("127.0.0.1", 8092)
    assert su.production_endpoint("llama", bad, proc=str(tmp_path / "proc"), run_dir=str(tmp_path / "none")) is None
