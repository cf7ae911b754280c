"""The change vehicle's logic: names, env validation and rendering, drop-ins, decisions, timer text, /proc reading.

Everything here runs without systemd: the host is a fake runner, a fake /proc tree and a fake
clock. What systemd and llama-server really do with these files is checked by the Molecule
scenarios (molecule/), which boot systemd in podman containers.
"""
from __future__ import annotations

import ast
import http.server
import json
import os
import stat
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any, Callable, Dict, List, Sequence, Tuple

import pytest
from ansible.module_utils.testing import patch_module_args

from ansible_collections.llmfleet.specdec.plugins.module_utils.common._errors import SpecdecError
from ansible_collections.llmfleet.specdec.plugins.module_utils.systemd import _envfile as envfile
from ansible_collections.llmfleet.specdec.plugins.module_utils.systemd import _procview as procview
from ansible_collections.llmfleet.specdec.plugins.module_utils.systemd import _systemd as sd
from ansible_collections.llmfleet.specdec.plugins.module_utils.systemd import _unit_override as uo
from ansible_collections.llmfleet.specdec.plugins.modules import unit_override

# ------------------------------------------------------------------ names and paths


@pytest.mark.parametrize("given, expected", [
    ("llama-server", "llama-server.service"),
    ("llama-server.service", "llama-server.service"),
    ("llama@qwen3", "llama@qwen3.service"),
    ("frank_dragoon:8080", "frank_dragoon:8080.service"),
])
def test_service_name_normalises(given: str, expected: str) -> None:
    assert sd.service_name(given) == expected


@pytest.mark.parametrize("bad", ["", ".service", "-x", "a b", "a/b", "../etc", "a@b@c", "llama\\x2dserver", "x;y"])
def test_service_name_rejects_what_it_does_not_manage(bad: str) -> None:
    with pytest.raises(SpecdecError, match="not a service name"):
        sd.service_name(bad)


def test_override_paths_and_the_rollback_unit_round_trip() -> None:
    p = sd.override_paths("llama@qwen.service", run_dir="/run")
    assert p.env_file == "/run/llmfleet-specdec/llama@qwen.service/override.env"
    assert p.script == "/run/llmfleet-specdec/llama@qwen.service/rollback.py"
    assert p.dropin == "/run/systemd/system/llama@qwen.service.d/zz-llmfleet-specdec.conf"
    assert p.timer == "specdec-rollback-llama@qwen.timer"
    assert p.rollback_service == "specdec-rollback-llama@qwen.service"
    assert sd.unit_from_rollback_unit(p.timer) == "llama@qwen.service"
    assert sd.unit_from_rollback_unit(p.rollback_service) == "llama@qwen.service"
    assert sd.unit_from_rollback_unit("apt-daily.timer") is None


# ------------------------------------------------------------------ env validation


@pytest.mark.parametrize("value, problem", [
    ("a\x00b", "NUL"),
    ("bad \udc80 text", "lone surrogate"),
    ("x" * 140000, "bytes long"),
])
def test_env_values_that_cannot_reach_a_process_are_errors_naming_the_variable(value: str, problem: str) -> None:
    with pytest.raises(envfile.EnvValueError) as info:
        envfile.env_config_from_mapping({"LLAMA_ARG_ALIAS": value})
    assert "LLAMA_ARG_ALIAS" in str(info.value) and problem in str(info.value)
    assert "nothing was written" in str(info.value)


@pytest.mark.parametrize("value", ["plain", "a b c", '"a b"', "'x y'", 'a\\"b', "it's", '""', "", "a\nb", "a\rb",
                                   "blk\\.(\\d+)\\.ffn_.*_exps\\.=CPU", "trailing\\", " lead and trail ",
                                   "--spec-draft-device 'CUDA0' --x \"y z\"", "/srv/models/q.gguf", "50%", "$HOME #x"])
def test_env_values_are_kept_exactly_as_the_process_will_get_them(value: str) -> None:
    config = envfile.env_config_from_mapping({"V": value})
    assert config.assignments == (("V", value),)
    written = envfile.render_env_file("u.service", config)
    assert envfile.read_env_values(written) == {"V": value}


def test_env_mapping_types_and_unsets() -> None:
    config = envfile.env_config_from_mapping({"A": True, "B": False, "C": 4096, "D": None, "E": "x"})
    assert config.assignments == (("A", "1"), ("B", "0"), ("C", "4096"), ("E", "x"))
    assert config.unset == ("D",)
    assert config.names() == ["A", "B", "C", "E", "D"]


@pytest.mark.parametrize("env, match", [
    ({}, "env is empty"),
    ({"1BAD": "x"}, "not an environment variable name"),
    ({"A-B": "x"}, "not an environment variable name"),
    ({"A": ["list"]}, "env A: a list cannot be an environment variable's value"),
    ({"LLAMA_EXTRA_ARGS": '--x "y'}, "does not split into arguments like a shell"),
])
def test_env_mapping_errors(env: Dict[str, Any], match: str) -> None:
    with pytest.raises(envfile.EnvValueError, match=match):
        envfile.env_config_from_mapping(env)


def test_env_file_text_is_read_like_systemd_reads_it() -> None:
    text = ("# candidate\n\n; also a comment\nLLAMA_ARG_SPEC_TYPE=draft-simple\r\n  LLAMA_ARG_CTX_SIZE = 4096\n"
            "X=\"a b\"\nY='blk\\.(\\d+)'\n")
    config = envfile.env_config_from_text(text, "/tmp/c.env")
    assert config.assignments == (("LLAMA_ARG_SPEC_TYPE", "draft-simple"), ("LLAMA_ARG_CTX_SIZE", "4096"),
                                  ("X", "a b"), ("Y", "blk\\.(\\d+)"))
    assert config.unset == ()


@pytest.mark.parametrize("text, match", [
    ("A=1\nA=2\n", "line 2: A is set twice"),
    ("A=1\njust words\n", "line 2: not a NAME=value line"),
    ("export A=1\n", "line 1: 'export A' is not an environment variable name"),
    ("A='x\nB=2\n", "line 1: A's quote is never closed"),
    ("# nothing\n", "no variables"),
    ("A=\x00\n", "NUL"),
    ("LLAMA_EXTRA_ARGS=\"--alias 'x\"\n", "line 1: LLAMA_EXTRA_ARGS does not split"),
])
def test_env_file_errors_name_the_line(text: str, match: str) -> None:
    with pytest.raises(envfile.EnvValueError, match=match):
        envfile.env_config_from_text(text, "/etc/c.env")


def test_read_env_values_reads_what_systemd_passes_on() -> None:
    values = envfile.read_env_values("LLAMA_ARG_PORT=8081\nBAD LINE\nLLAMA_ARG_HOST='0.0.0.0'\nQ=\"open\n")
    assert values == {"LLAMA_ARG_PORT": "8081", "LLAMA_ARG_HOST": "0.0.0.0", "Q": "open\n"}


# ------------------------------------------------------------------ rendering


def test_render_env_file_and_dropin() -> None:
    paths = sd.override_paths("llama-server.service", run_dir="/run")
    config = envfile.env_config_from_mapping({"LLAMA_ARG_SPEC_TYPE": "draft-simple", "LLAMA_ARG_SPEC_DRAFT_MODEL": None,
                                              "LLAMA_ARG_CACHE_TYPE_K": None})
    env = envfile.render_env_file(paths.unit, config)
    assert env.splitlines()[3:] == ["LLAMA_ARG_SPEC_TYPE=draft-simple"]
    assert all(line.startswith("#") for line in env.splitlines()[:3])
    dropin = envfile.render_dropin(paths, config)
    assert dropin.splitlines()[2:] == [
        "[Service]",
        "EnvironmentFile=/run/llmfleet-specdec/llama-server.service/override.env",
        "UnsetEnvironment=LLAMA_ARG_SPEC_DRAFT_MODEL LLAMA_ARG_CACHE_TYPE_K",
    ]
    no_unset = envfile.render_dropin(paths, envfile.env_config_from_mapping({"A": "1"}))
    assert "UnsetEnvironment" not in no_unset


def test_config_matches_environ() -> None:
    config = envfile.env_config_from_mapping({"A": '"x y"', "B": None})
    assert envfile.config_matches_environ(config, {"A": '"x y"', "C": "1"})
    assert not envfile.config_matches_environ(config, {"A": "x y"})
    assert not envfile.config_matches_environ(config, {"A": '"x y"', "B": ""})


@pytest.mark.parametrize("env, endpoint", [
    ({}, ("127.0.0.1", 8080)),
    ({"LLAMA_ARG_PORT": "8081", "LLAMA_ARG_HOST": "0.0.0.0"}, ("127.0.0.1", 8081)),
    ({"LLAMA_ARG_HOST": "::"}, ("::1", 8080)),
    ({"LLAMA_ARG_HOST": "10.0.0.5", "LLAMA_ARG_PORT": "9000abc"}, ("10.0.0.5", 9000)),
])
def test_endpoint_of(env: Dict[str, str], endpoint: Tuple[str, int]) -> None:
    assert uo.endpoint_of(env, "u.service") == endpoint


@pytest.mark.parametrize("env, match", [
    ({"LLAMA_ARG_PORT": "http"}, "not a TCP port"),
    ({"LLAMA_ARG_PORT": "70000"}, "not a TCP port"),
    ({"LLAMA_ARG_HOST": "/run/llama.sock"}, "unix socket"),
])
def test_endpoint_errors(env: Dict[str, str], match: str) -> None:
    with pytest.raises(sd.UnitOverrideError, match=match):
        uo.endpoint_of(env, "u.service")


def test_effective_env_layers_and_unsets() -> None:
    base = {"LLAMA_ARG_PORT": "8080", "LLAMA_ARG_SPEC_DRAFT_MODEL": "/d.gguf"}
    config = envfile.env_config_from_mapping({"LLAMA_ARG_PORT": "8090", "LLAMA_ARG_SPEC_DRAFT_MODEL": None})
    assert envfile.effective_env(base, config) == {"LLAMA_ARG_PORT": "8090"}
    assert uo.health_url("::1", 8090) == "http://[::1]:8090/health"


# ------------------------------------------------------------------ decisions


@pytest.mark.parametrize("files_match, serving, armed, rollback_after, plan", [
    # a new candidate: write, restart, arm
    (False, False, False, 600, (True, True, True)),
    # the same candidate, serving: nothing at all
    (True, True, False, None, (False, False, False)),
    # the same candidate, serving, countdown already armed: nothing (never postpone the dead-man)
    (True, True, True, 600, (False, False, False)),
    # the same candidate, serving, no countdown yet but one is asked for: arm only
    (True, True, False, 600, (False, False, True)),
    # files in place but the process does not carry them (crashed, or never restarted): restart, re-arm
    (True, False, True, 600, (False, True, True)),
    # a different candidate while armed, no rollback_after this time: the old countdown stays
    (False, False, True, None, (True, True, False)),
])
def test_plan_present(files_match: bool, serving: bool, armed: bool, rollback_after: int | None,
                      plan: Tuple[bool, bool, bool]) -> None:
    got = uo.plan_present(files_match, serving, armed, rollback_after)
    assert (got.write_files, got.restart, got.arm_timer) == plan
    assert got.changed is any(plan)


# ------------------------------------------------------------------ the dead-man


def test_timer_command_arms_a_wall_clock_deadline() -> None:
    paths = sd.override_paths("llama-server.service")
    # 2026-11-29 10:05:30.2 UTC: rounded up to the next whole second
    assert sd.timer_command(paths, 1795946730.2, "/usr/bin/python3", 120) == [
        "systemd-run",
        "--unit=specdec-rollback-llama-server",
        "--description=llmfleet.specdec dead-man rollback of llama-server.service",
        "--on-calendar=2026-11-29 10:05:31 UTC",
        "--timer-property=AccuracySec=1s",
        "--property=Type=oneshot",
        "--property=TimeoutStartSec=180",
        "--property=ConditionPathExists=/run/llmfleet-specdec/llama-server.service/rollback.py",
        "/usr/bin/python3",
        "/run/llmfleet-specdec/llama-server.service/rollback.py",
    ]


def _script_config(script: str) -> Dict[str, Any]:
    for node in ast.parse(script).body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "CONFIG":
            return json.loads(ast.literal_eval(node.value.args[0]))
    raise AssertionError("no CONFIG in the rollback script")


def test_rollback_script_is_python39_and_carries_its_paths() -> None:
    paths = sd.override_paths("llama-server.service")
    script = sd.render_rollback_script(paths, "/usr/bin/python3", "http://127.0.0.1:8080/health", 60)
    assert script.startswith("#!/usr/bin/python3\n")
    ast.parse(script, feature_version=(3, 9))
    config = _script_config(script)
    assert config["dropin"] == paths.dropin and config["env_file"] == paths.env_file
    assert config["url"] == "http://127.0.0.1:8080/health" and config["health_timeout"] == 60


class _Health(http.server.BaseHTTPRequestHandler):
    status = 200

    def do_GET(self) -> None:
        self.send_response(self.status)
        self.end_headers()
        self.wfile.write(b'{"status":"ok"}')

    def log_message(self, *args: Any) -> None:
        pass


def _fake_bin(tmp_path: Path) -> Path:
    """systemctl/journalctl stand-ins: log every call; MainPID changes on restart."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "systemctl").write_text(
        "#!/bin/sh\n"
        f'echo "systemctl $*" >> {tmp_path}/calls\n'
        f'pid={tmp_path}/pid; [ -f "$pid" ] || echo 100 > "$pid"\n'
        'case "$1" in\n'
        '  restart) echo $(( $(cat "$pid") + 1 )) > "$pid" ;;\n'
        '  show) cat "$pid" ;;\n'
        "esac\n")
    (bindir / "journalctl").write_text(f'#!/bin/sh\necho "journalctl $*" >> {tmp_path}/calls\necho "a journal line"\n')
    for tool in ("systemctl", "journalctl"):
        (bindir / tool).chmod(0o755)
    return bindir


@pytest.mark.parametrize("status, rc, said", [(200, 0, "production restored: pid 101"), (503, 1, "PRODUCTION NOT HEALTHY")])
def test_rollback_script_restores_with_the_controller_gone(tmp_path: Path, status: int, rc: int, said: str) -> None:
    handler = type("H", (_Health,), {"status": status})
    server = http.server.HTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        paths = sd.override_paths("llama-server.service", run_dir=str(tmp_path / "run"))
        for directory in (paths.state_dir, paths.dropin_dir):
            os.makedirs(directory)
        for path in (paths.env_file, paths.dropin, *paths.legacy_dropins, paths.meta):  # a former name's too
            Path(path).write_text("x\n")
        url = f"http://127.0.0.1:{server.server_port}/health"
        Path(paths.script).write_text(sd.render_rollback_script(paths, sys.executable, url, 2 if status != 200 else 10))
        env = dict(os.environ, PATH=f"{_fake_bin(tmp_path)}:{os.environ['PATH']}")
        proc = subprocess.run([sys.executable, paths.script], env=env, capture_output=True, text=True, timeout=60, check=False)
    finally:
        server.shutdown()
    assert proc.returncode == rc, proc.stdout + proc.stderr
    assert said in proc.stdout
    assert paths.legacy_dropins and not any(os.path.exists(p) for p in (
        *paths.all_dropins, paths.env_file, paths.script, paths.meta, paths.dropin_dir))
    calls = (tmp_path / "calls").read_text().splitlines()
    assert "systemctl daemon-reload" in calls and "systemctl restart llama-server.service" in calls
    assert calls.index("systemctl daemon-reload") < calls.index("systemctl restart llama-server.service")
    assert "systemctl reset-failed llama-server.service" in calls
    assert ("journalctl -u llama-server.service -n 30 --no-pager -o cat" in calls) is (status != 200)


# ------------------------------------------------------------------ what the host says


def test_parse_show_and_environment_files() -> None:
    text = ("EnvironmentFiles=/etc/llmfleet-specdec/llama-server.env (ignore_errors=no)\n"
            "EnvironmentFiles=/run/x.env (ignore_errors=yes)\nMainPID=42\nDescription=a=b\n")
    props = procview.parse_show(text)
    assert props["MainPID"] == ["42"] and props["Description"] == ["a=b"]
    assert procview.environment_files(props["EnvironmentFiles"]) == [
        ("/etc/llmfleet-specdec/llama-server.env", False), ("/run/x.env", True)]


# Real /proc/net/tcp and tcp6 lines: 127.0.0.1:8080 and [::]:8081 listening, one ESTABLISHED and one TIME_WAIT.
PROC_NET_TCP = """\
  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000   999        0 31337 1 0000000000000000 100 0 0 10 0
   1: 0100007F:1F90 0100007F:D2F0 01 00000000:00000000 00:00000000 00000000   999        0 31338 1 0000000000000000 20 4 30 10 -1
   2: 0100007F:1F90 0100007F:D2F2 06 00000000:00000000 03:00000D3A 00000000     0        0 0 3 0000000000000000
"""
PROC_NET_TCP6 = (
    "  sl  local_address                         remote_address                        st tx_queue rx_queue"
    " tr tm->when retrnsmt   uid  timeout inode\n"
    "   0: 00000000000000000000000000000000:1F91 00000000000000000000000000000000:0000 0A 00000000:00000000"
    " 00:00000000 00000000     0        0 4242 1 0000000000000000 100 0 0 10 0\n"
)


def test_parse_proc_net_tcp_keeps_listeners_only() -> None:
    assert procview.parse_proc_net_tcp(PROC_NET_TCP) == [procview.Listener("0100007F", 8080, 31337)]
    assert procview.parse_proc_net_tcp(PROC_NET_TCP6) == [procview.Listener("0" * 32, 8081, 4242)]


def _fake_proc(tmp_path: Path, procs: Dict[int, Dict[str, Any]]) -> Path:
    proc = tmp_path / "proc"
    (proc / "net").mkdir(parents=True)
    (proc / "net" / "tcp").write_text(PROC_NET_TCP)
    (proc / "net" / "tcp6").write_text(PROC_NET_TCP6)
    for pid, info in procs.items():
        d = proc / str(pid)
        (d / "fd").mkdir(parents=True)
        for n, target in enumerate(info.get("fds", [])):
            os.symlink(target, d / "fd" / str(n))
        (d / "comm").write_text(info.get("comm", "x") + "\n")
        (d / "cmdline").write_text("\x00".join(info.get("cmdline", ["x"])) + "\x00")
        (d / "cgroup").write_text(info.get("cgroup", "0::/user.slice\n"))
        (d / "environ").write_bytes(b"\x00".join(f"{k}={v}".encode() for k, v in info.get("env", {}).items()) + b"\x00")
    return proc


def test_proc_view_finds_the_owner_of_a_port(tmp_path: Path) -> None:
    proc = _fake_proc(tmp_path, {
        77: {"fds": ["/dev/null", "socket:[31337]"], "comm": "python3", "cmdline": ["python3", "-m", "http.server", "8080"],
             "cgroup": "0::/system.slice/squatter.service\n", "env": {"A": "1", "B": "x=y"}},
        78: {"fds": ["socket:[1]"], "comm": "other"},
    })
    view = procview.ProcView(str(proc))
    assert view.listening_inodes(8080) == [31337]
    assert view.listening_inodes(8081) == [4242]
    assert view.listening_inodes(9999) == []
    assert view.socket_owners([31337]) == [77]
    assert view.describe(77) == "pid 77 (python3, unit squatter.service: python3 -m http.server 8080)"
    assert view.environ(77) == {"A": "1", "B": "x=y"}
    assert view.owners_text([]) == "no process found"


# ------------------------------------------------------------------ whose cgroup serves the port

UNIT_CG = "/system.slice/vllm-dflash.service"


@pytest.mark.parametrize("text, path", [
    ("0::/system.slice/vllm-dflash.service/libpod-payload-abc\n", "/system.slice/vllm-dflash.service/libpod-payload-abc"),
    # cgroup v1: the name=systemd hierarchy is where systemd tracks units
    ("4:memory:/system.slice\n1:name=systemd:/system.slice/vllm-dflash.service\n", UNIT_CG),
    # hybrid, as in a systemd container on a v1 host: the 0:: line names the container, not the unit
    ("9:name=systemd:/libpod_parent/libpod-1/system.slice/x.service\n0::/libpod_parent/libpod-1\n",
     "/libpod_parent/libpod-1/system.slice/x.service"),
    ("0::/system.slice/a:b.service\n", "/system.slice/a:b.service"),
    ("4:memory:/system.slice/x.service\n", None),
    ("", None),
])
def test_cgroup_path_prefers_the_hierarchy_systemd_tracks(text: str, path: str | None) -> None:
    assert procview.cgroup_path(text) == path


@pytest.mark.parametrize("path, control_group, inside", [
    (UNIT_CG, UNIT_CG, True),
    (UNIT_CG + "/libpod-payload-abc", UNIT_CG, True),
    (UNIT_CG + "/supervisor", UNIT_CG + "/", True),
    (UNIT_CG + "-evil/payload", UNIT_CG, False),      # shares a prefix, is another cgroup
    ("/system.slice/vllm-dflash.serviceX", UNIT_CG, False),
    ("/system.slice", UNIT_CG, False),                 # the parent is not the unit
    ("/system.slice/other.service", UNIT_CG, False),
    (UNIT_CG, "", False),                              # an inactive unit has no control group
    ("/", "/", False),                                 # the root cgroup is nobody's unit
    (None, UNIT_CG, False),
])
def test_within_cgroup_is_the_unit_or_below(path: str | None, control_group: str, inside: bool) -> None:
    assert procview.within_cgroup(path, control_group) is inside


def _vllm_unit(tmp_path: Path, control_group: str) -> FakeHost:
    # MainPID 90 is the container engine's client (podman run), in the unit's own cgroup
    return FakeHost({"vllm-dflash.service": _production(tmp_path, pid=90, ControlGroup=control_group)["llama-server.service"]})


def _serving(owner_cgroup: str) -> Dict[int, Dict[str, Any]]:
    return {
        90: {"fds": ["/dev/null"], "comm": "podman", "cmdline": ["podman", "run", "--cgroups=split", "vllm/vllm-openai"],
             "cgroup": f"0::{UNIT_CG}\n"},
        4242: {"fds": ["socket:[31337]"], "comm": "python3", "cmdline": ["python3", "-m", "vllm.entrypoints.openai"],
               "cgroup": owner_cgroup},
    }


@pytest.mark.parametrize("owner_cgroup", [
    f"0::{UNIT_CG}/libpod-payload-abc\n",                         # podman run --cgroups=split
    f"0::{UNIT_CG}\n",                                            # in the unit's cgroup itself
    f"2:cpu:/\n1:name=systemd:{UNIT_CG}/libpod-payload-abc\n0::/\n",  # cgroup v1
])
def test_a_port_served_from_the_units_cgroup_is_the_unit(tmp_path: Path, owner_cgroup: str) -> None:
    manager = _manager(tmp_path, _vllm_unit(tmp_path, UNIT_CG), _serving(owner_cgroup), health_timeout=5)
    health = manager.wait_healthy("vllm-dflash.service", "127.0.0.1", 8080, not_pid=77, since=None)
    assert health["healthy"] is True and health["main_pid"] == 90
    info = manager.unit_info("vllm-dflash.service")
    assert info["ControlGroup"] == UNIT_CG
    assert manager.healthy_now("vllm-dflash.service", info, "127.0.0.1", 8080) is True


@pytest.mark.parametrize("owner_cgroup, named", [
    ("0::/system.slice/other.service\n", "unit other.service"),
    ("0::/machine.slice/libpod-abc.scope/container\n", "unit libpod-abc.scope"),   # podman without --cgroups=split
    ("0::/system.slice/docker-abc.scope\n", "unit docker-abc.scope"),              # docker: dockerd's scope
    (f"0::{UNIT_CG}-evil/payload\n", "pid 4242 (python3: python3 -m vllm"),      # a shared prefix is not below
    ("1:name=systemd:/system.slice/other.service\n0::/\n", "unit other.service"),  # cgroup v1
])
def test_a_port_served_from_outside_the_units_cgroup_is_not_healthy(tmp_path: Path, owner_cgroup: str,
                                                                    named: str) -> None:
    manager = _manager(tmp_path, _vllm_unit(tmp_path, UNIT_CG), _serving(owner_cgroup), health_timeout=2)
    with pytest.raises(uo.NotHealthyError) as info:
        manager.wait_healthy("vllm-dflash.service", "127.0.0.1", 8080, not_pid=77, since=None)
    msg = str(info.value)
    assert "port 8080 is served by pid 4242 (python3" in msg and named in msg
    assert f"not by vllm-dflash.service's pid 90 or a process in its control group {UNIT_CG}" in msg
    unit_info = manager.unit_info("vllm-dflash.service")
    assert manager.healthy_now("vllm-dflash.service", unit_info, "127.0.0.1", 8080) is False


def test_without_a_control_group_only_the_main_pid_counts(tmp_path: Path) -> None:
    # systemd shows no ControlGroup: the owner in what would be the unit's cgroup is not taken on trust
    manager = _manager(tmp_path, _vllm_unit(tmp_path, ""), _serving(f"0::{UNIT_CG}/libpod-payload-abc\n"),
                       health_timeout=2)
    with pytest.raises(uo.NotHealthyError, match=r"not by vllm-dflash\.service's pid 90\Z") as info:
        manager.wait_healthy("vllm-dflash.service", "127.0.0.1", 8080, not_pid=77, since=None)
    assert "control group" not in str(info.value)
    # and the MainPID itself serving passes as before, whatever its cgroup
    procs = {90: {"fds": ["socket:[31337]"], "cgroup": "0::/somewhere/else\n"}}
    manager = _manager(tmp_path / "b", _vllm_unit(tmp_path, UNIT_CG), procs)
    assert manager.wait_healthy("vllm-dflash.service", "127.0.0.1", 8080, not_pid=77, since=None)["main_pid"] == 90


# ------------------------------------------------------------------ the vehicle with a fake host


class FakeHost:
    """Answers the systemctl calls UnitOverride makes; records the rest."""

    def __init__(self, units: Dict[str, Dict[str, str]]) -> None:
        self.units = units
        self.calls: List[List[str]] = []

    def __call__(self, argv: Sequence[str]) -> Tuple[int, str, str]:
        argv = list(argv)
        self.calls.append(argv)
        if argv[:2] == ["systemctl", "show"]:
            unit = self.units.get(argv[2], {"LoadState": "not-found", "ActiveState": "inactive"})
            props = [argv[i + 1] for i, a in enumerate(argv) if a == "-p"]
            lines = []
            for prop in props:
                value = unit.get(prop, "")
                for item in (value if isinstance(value, list) else [value]):
                    lines.append(f"{prop}={item}")
            return 0, "\n".join(lines) + "\n", ""
        if argv[:2] == ["systemctl", "list-units"]:
            return 0, "", ""
        if argv[0] == "journalctl":
            return 0, "line one\nline two\n", ""
        return 0, "", ""

    def changing_calls(self) -> List[List[str]]:
        return [c for c in self.calls if c[:2] not in (["systemctl", "show"], ["systemctl", "list-units"])
                and c[0] != "journalctl"]


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def _manager(tmp_path: Path, host: FakeHost, procs: Dict[int, Dict[str, Any]] | None = None,
             http: Callable[[str, float], Tuple[int, str]] = lambda url, timeout: (200, "{}"),
             check_mode: bool = False, **kwargs: Any) -> uo.UnitOverride:
    clock = FakeClock()
    return uo.UnitOverride(run=host, check_mode=check_mode, run_dir=str(tmp_path / "run"),
                           proc=str(_fake_proc(tmp_path, procs or {})), python="/usr/bin/python3", http=http,
                           clock=clock, wall=lambda: 1.7e9, sleep=clock.sleep, **kwargs)


def _production(tmp_path: Path, pid: int = 77, **extra: str) -> Dict[str, Dict[str, Any]]:
    base = tmp_path / "base.env"
    base.write_text("LLAMA_ARG_PORT=8080\nLLAMA_ARG_MODEL=/m/target.gguf\n")
    unit = {"LoadState": "loaded", "ActiveState": "active", "SubState": "running", "MainPID": str(pid),
            "NRestarts": "0", "NeedDaemonReload": "no", "DropInPaths": "",
            "EnvironmentFiles": [f"{base} (ignore_errors=no)"], "Environment": ""}
    unit.update(extra)
    return {"llama-server.service": unit}


def test_present_in_check_mode_writes_nothing_and_shows_the_diff(tmp_path: Path) -> None:
    host = FakeHost(_production(tmp_path))
    running = {"LLAMA_ARG_PORT": "8080", "LLAMA_ARG_MODEL": "/m/target.gguf"}  # production runs its env file
    manager = _manager(tmp_path, host, {77: {"fds": ["socket:[31337]"], "env": running}}, check_mode=True)
    config = envfile.env_config_from_mapping({"LLAMA_ARG_SPEC_TYPE": "draft-simple"})
    result = manager.present("llama-server.service", config, 600)
    assert result["changed"] is True and result["restarted"] is False
    assert result["rollback"] == {"timer": "specdec-rollback-llama-server.timer", "armed": True, "due_in": 600}
    dropin, env = result["diff"]
    assert dropin["before"] == "" and "EnvironmentFile=" in dropin["after"]
    assert env["after"].endswith("LLAMA_ARG_SPEC_TYPE=draft-simple\n")
    assert not (tmp_path / "run").exists()
    assert host.changing_calls() == []


@pytest.mark.parametrize("alias", ["plain", "carriage\rreturn\r\n and newline\n"])
def test_present_is_a_no_op_when_the_unit_already_serves_the_candidate(tmp_path: Path, alias: str) -> None:
    config = envfile.env_config_from_mapping({"LLAMA_ARG_SPEC_TYPE": "draft-simple", "LLAMA_ARG_ALIAS": alias})
    paths = sd.override_paths("llama-server.service", run_dir=str(tmp_path / "run"))
    os.makedirs(paths.state_dir)
    os.makedirs(paths.dropin_dir)
    uo.write_private(paths.env_file, envfile.render_env_file(paths.unit, config), 0o600)
    uo.write_private(paths.dropin, envfile.render_dropin(paths, config), 0o600)
    host = FakeHost(_production(tmp_path, DropInPaths=paths.dropin))
    procs = {77: {"fds": ["socket:[31337]"], "env": {"LLAMA_ARG_SPEC_TYPE": "draft-simple", "LLAMA_ARG_ALIAS": alias}}}
    result = _manager(tmp_path, host, procs).present("llama-server.service", config, None)
    assert result["changed"] is False and result["main_pid"] == 77
    assert host.changing_calls() == []
    # the same files, but the running process lacks the candidate: that is a restart
    host2 = FakeHost(_production(tmp_path, DropInPaths=paths.dropin))
    procs2 = {77: {"fds": ["socket:[31337]"], "env": {"LLAMA_ARG_SPEC_TYPE": "none"}}}
    plan_check = _manager(tmp_path / "b", host2, procs2, check_mode=True)
    plan_check.run_dir = str(tmp_path / "run")
    assert plan_check.present("llama-server.service", config, None)["changed"] is True


def test_written_files_are_private(tmp_path: Path) -> None:
    path = tmp_path / "d" / "f.env"
    path.parent.mkdir()
    uo.write_private(str(path), "A=1\n", 0o600)
    uo.write_private(str(path), "A=2\n", 0o600)
    assert path.read_text() == "A=2\n"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert [p.name for p in path.parent.iterdir()] == ["f.env"]


def test_a_port_held_by_another_process_is_named_before_anything_changes(tmp_path: Path) -> None:
    host = FakeHost(_production(tmp_path))
    squatter = {"fds": ["socket:[31337]"], "comm": "python3", "cmdline": ["python3", "-m", "http.server", "8080"]}
    manager = _manager(tmp_path, host, {4242: squatter}, port_timeout=3)
    config = envfile.env_config_from_mapping({"LLAMA_ARG_SPEC_TYPE": "draft-simple"})
    with pytest.raises(uo.PortBusyError) as info:
        manager.present("llama-server.service", config, 600)
    msg = str(info.value)
    assert "port 8080, which the candidate listens on, is held by pid 4242 (python3" in msg and "http.server 8080" in msg
    assert "nothing was changed" in msg
    assert info.value.details["port_owners"] == [4242]
    assert host.changing_calls() == [] and not (tmp_path / "run").exists()
    # the unit's own process on the port is no obstacle: its restart frees it
    (tmp_path / "b").mkdir()
    host = FakeHost(_production(tmp_path / "b", pid=4242))
    manager = _manager(tmp_path / "b", host, {4242: squatter}, port_timeout=3)
    manager.require_port("llama-server.service", 8080, manager.unit_info("llama-server.service"), what="production")
    assert host.changing_calls() == []


def test_wait_healthy_wants_the_units_own_new_pid(tmp_path: Path) -> None:
    # /health answers, but the socket belongs to another process: never healthy
    host = FakeHost(_production(tmp_path, pid=90))
    manager = _manager(tmp_path, host, {4242: {"fds": ["socket:[31337]"], "comm": "imposter"}}, health_timeout=5)
    with pytest.raises(uo.NotHealthyError) as info:
        manager.wait_healthy("llama-server.service", "127.0.0.1", 8080, not_pid=77, since=None)
    assert "served by pid 4242 (imposter" in str(info.value) and "not by llama-server.service's pid 90" in str(info.value)
    assert info.value.details["journal"] == ["line one", "line two"]
    # the old pid answering is not the new process
    manager = _manager(tmp_path / "b", FakeHost(_production(tmp_path, pid=77)), {77: {"fds": ["socket:[31337]"]}},
                       health_timeout=2)
    with pytest.raises(uo.NotHealthyError, match="not healthy within 2 s"):
        manager.wait_healthy("llama-server.service", "127.0.0.1", 8080, not_pid=77, since=None)
    # the new pid owns the socket and answers 200
    manager = _manager(tmp_path / "c", FakeHost(_production(tmp_path, pid=90)), {90: {"fds": ["socket:[31337]"]}})
    assert manager.wait_healthy("llama-server.service", "127.0.0.1", 8080, not_pid=77, since=None)["main_pid"] == 90


@pytest.mark.parametrize("unit, match", [
    ({"ActiveState": "failed", "Result": "exit-code"}, r"failed \(Result=exit-code\)"),
    ({"NRestarts": "1"}, "exited and systemd restarted it"),
])
def test_wait_healthy_stops_early_when_the_unit_dies(tmp_path: Path, unit: Dict[str, str], match: str) -> None:
    production = _production(tmp_path, pid=90)
    host = FakeHost(production)
    calls = {"n": 0}

    def http(url: str, timeout: float) -> Tuple[int, str]:
        calls["n"] += 1
        production["llama-server.service"].update(unit)  # dies after the first look
        return 503, '{"error":"Loading model"}'

    manager = _manager(tmp_path, host, {}, http=http, health_timeout=600)
    with pytest.raises(uo.NotHealthyError, match=match):
        manager.wait_healthy("llama-server.service", "127.0.0.1", 8080, not_pid=77, since=None)
    assert calls["n"] == 1


def test_wait_healthy_gives_a_unit_seen_failed_a_moment_to_be_started_by_its_restart_job(tmp_path: Path) -> None:
    """A restart whose stop ended in a kill (Result=timeout: a process that ignores SIGTERM) shows the unit failed
    for a moment before the same restart job starts it: that is not a failed candidate."""
    production = _production(tmp_path, pid=77)
    unit = production["llama-server.service"]
    unit.update({"ActiveState": "failed", "SubState": "failed", "Result": "timeout", "MainPID": "0"})
    looks = {"n": 0}
    real_info = uo.UnitOverride.unit_info

    def unit_info(self: uo.UnitOverride, name: str) -> Dict[str, str]:
        looks["n"] += 1
        if looks["n"] == 3:  # the restart job goes on: the new process starts
            unit.update({"ActiveState": "active", "SubState": "running", "Result": "success", "MainPID": "90"})
        return real_info(self, name)

    manager = _manager(tmp_path, FakeHost(production), {90: {"fds": ["socket:[31337]"]}}, health_timeout=600)
    manager.unit_info = unit_info.__get__(manager)  # type: ignore[method-assign]
    assert manager.wait_healthy("llama-server.service", "127.0.0.1", 8080, not_pid=77, since=None)["main_pid"] == 90
    # a unit that stays failed is a failure, FAILED_SETTLE_S after it was first seen failed (not the health timeout)
    (tmp_path / "b").mkdir()
    stays = _production(tmp_path / "b", pid=77)
    stays["llama-server.service"].update({"ActiveState": "failed", "Result": "exit-code", "MainPID": "0"})
    manager = _manager(tmp_path / "b", FakeHost(stays), {}, health_timeout=600)
    t0 = manager.clock()
    with pytest.raises(uo.NotHealthyError, match=r"failed \(Result=exit-code\)"):
        manager.wait_healthy("llama-server.service", "127.0.0.1", 8080, not_pid=77, since=None)
    assert uo.FAILED_SETTLE_S <= manager.clock() - t0 < uo.FAILED_SETTLE_S + 1


# ------------------------------------------------------------------ validation before anything happens


def _refusing_runner(argv: Sequence[str]) -> Tuple[int, str, str]:
    raise AssertionError(f"nothing may run for bad input, ran {argv}")


@pytest.mark.parametrize("params, match", [
    # a lone surrogate cannot be written as UTF-8: refused before the dead-man is armed or a file written
    ({"unit": "llama-server", "state": "present", "env": {"LLAMA_ARG_ALIAS": "a\udc80b"}, "rollback_after": 600},
     "env LLAMA_ARG_ALIAS: .* lone surrogate"),
    ({"unit": "llama-server", "state": "present", "env": {"LLAMA_ARG_ALIAS": "a\x00b"}}, "env LLAMA_ARG_ALIAS: .*NUL"),
    ({"unit": "llama-server", "state": "present", "env": {"A": "1"}, "rollback_after": 60}, "must be longer than"),
    ({"unit": "*", "state": "present", "env": {"A": "1"}}, "only goes with state=absent"),
    ({"unit": "a b", "state": "absent"}, "not a service name"),
    ({"unit": "llama-server", "state": "present"}, "give env"),
    ({"unit": "llama-server", "state": "present", "env": {"A": "1"}, "restart": True}, "restart=true goes with state=absent"),
    ({"unit": "*", "state": "absent", "restart": True}, "restart=true needs one unit"),
])
def test_bad_input_fails_before_touching_the_host(params: Dict[str, Any], match: str) -> None:
    with pytest.raises(SpecdecError, match=match):
        uo.run_unit_override({"health_timeout": 120, "port_timeout": 30, "rollback_after": None, **params},
                             run=_refusing_runner, check_mode=False, python="/usr/bin/python3")


def test_env_file_on_the_host_is_validated(tmp_path: Path) -> None:
    bad = tmp_path / "c.env"
    bad.write_text("LLAMA_ARG_SPEC_TYPE=draft-simple\nLLAMA_ARG_ALIAS=\"open\n")
    with pytest.raises(envfile.EnvValueError, match="line 2: LLAMA_ARG_ALIAS's quote is never closed"):
        uo.load_config(None, str(bad))
    with pytest.raises(SpecdecError, match="does not exist on the managed host"):
        uo.load_config(None, str(tmp_path / "missing.env"))


def test_module_fails_naming_the_variable(capsys: pytest.CaptureFixture[str]) -> None:
    with patch_module_args({"unit": "llama-server", "env": {"LLAMA_ARG_SPEC_TYPE": "draft-simple\x00"},
                            "rollback_after": 600}), pytest.raises(SystemExit):
        unit_override.main()
    out = json.loads(capsys.readouterr().out)
    assert out["failed"] is True
    assert out["msg"].startswith("env LLAMA_ARG_SPEC_TYPE: the value") and "NUL byte" in out["msg"]


def test_module_requires_a_candidate_for_present(capsys: pytest.CaptureFixture[str]) -> None:
    with patch_module_args({"unit": "llama-server", "env": {"A": "1"}, "env_file": "/x.env"}), pytest.raises(SystemExit):
        unit_override.main()
    out = json.loads(capsys.readouterr().out)
    assert out["failed"] is True and "mutually exclusive" in out["msg"]


def test_leftover_units_come_from_state_dirs_dropins_and_timers(tmp_path: Path) -> None:
    run = tmp_path / "run"
    (run / "llmfleet-specdec" / "a.service").mkdir(parents=True)
    (run / "systemd" / "system" / "b.service.d").mkdir(parents=True)
    (run / "systemd" / "system" / "b.service.d" / sd.DROPIN_NAME).write_text("[Service]\n")
    (run / "systemd" / "system" / "d.service.d").mkdir(parents=True)  # the drop-in's former name
    (run / "systemd" / "system" / "d.service.d" / "50-llmfleet-specdec.conf").write_text("[Service]\n")
    (run / "systemd" / "system" / "other.service.d").mkdir(parents=True)
    (run / "systemd" / "system" / "other.service.d" / "10-someone-else.conf").write_text("[Service]\n")

    class Timers(FakeHost):
        def __call__(self, argv: Sequence[str]) -> Tuple[int, str, str]:
            if list(argv[:2]) == ["systemctl", "list-units"]:
                return 0, "specdec-rollback-c@x.timer loaded active waiting llmfleet.specdec dead-man rollback\n", ""
            return super().__call__(argv)

    manager = uo.UnitOverride(run=Timers({}), run_dir=str(run), proc=str(_fake_proc(tmp_path, {})))
    assert manager.leftover_units() == ["a.service", "b.service", "c@x.service", "d.service"]


# ------------------------------------------------------------------ the interpreter root's timer runs


def _tree(root: Path, owner: int, mode: int) -> Path:
    venv = root / "home" / "deploy" / "venv" / "bin"
    venv.mkdir(parents=True)
    for directory in (root, root / "home"):
        os.chown(directory, 0, 0)
        directory.chmod(0o755)
    for directory in (root / "home" / "deploy", root / "home" / "deploy" / "venv", venv):
        os.chown(directory, owner, owner)
        directory.chmod(mode)
    python = venv / "python3"
    python.write_text("#!/bin/sh\n")
    os.chown(python, owner, owner)
    python.chmod(0o755)
    return python


@pytest.mark.skipif(os.geteuid() != 0, reason="making files of another owner needs root")
def test_a_venv_of_another_user_is_not_what_root_runs(tmp_path: Path) -> None:
    root = tmp_path / "srv"
    python = _tree(root, owner=1000, mode=0o755)
    tmp_path.chmod(0o755)
    safe = os.path.realpath("/bin/sh")  # root's, in root's directories: a stand-in path, never executed
    assert "belongs to uid 1000, not root" in (sd.writable_by_others(str(python)) or "")
    assert sd.rollback_interpreter(str(python), fallback=safe) == safe
    with pytest.raises(SpecdecError) as info:
        sd.rollback_interpreter(str(python), fallback=str(python.parent / "missing"))
    assert str(python) in str(info.value) and "root-owned python3" in str(info.value)


@pytest.mark.skipif(os.geteuid() != 0, reason="making files of another owner needs root")
def test_a_group_writable_directory_above_the_interpreter_is_refused(tmp_path: Path) -> None:
    python = _tree(tmp_path / "srv", owner=0, mode=0o775)
    assert f"{python.parent} is writable by its group or by everyone (mode 0775)" == sd.writable_by_others(str(python))
    link = tmp_path / "srv" / "python-link"
    link.symlink_to(python)
    # a root-owned link in a root directory still leads to a file others can change
    assert sd.writable_by_others(str(link)) is not None


def test_roots_own_interpreter_is_kept() -> None:
    safe = os.path.realpath("/bin/sh")
    assert sd.writable_by_others(safe) is None
    assert sd.rollback_interpreter(safe, fallback="/nonexistent/python3") == safe


def test_a_fresh_baseline_start_restarts_production_with_nothing_in_place(tmp_path: Path) -> None:
    """C2: absent with restart=true restarts production (one restart job, no stop-then-start) and checks it."""
    import crash_matrix as cm

    cm.install()
    host = cm.Host(tmp_path / "h")
    try:
        before = host.fake.state()["units"][cm.UNIT]["pid"]
        plain = host.manager().absent(cm.UNIT)
        assert plain["changed"] is False and plain["restarted"] is False and plain["main_pid"] == before
        fresh = host.manager().absent(cm.UNIT, restart=True)
        assert fresh["changed"] is True and fresh["restarted"] is True and fresh["main_pid"] != before
        assert host.serves_production() and host.leftovers() == []
        calls = [c for c in host.fake.state()["calls"] if c[:2] == ["systemctl", "restart"]]
        assert calls == [["systemctl", "restart", "--no-block", cm.UNIT]]
        assert not [c for c in host.fake.state()["calls"] if c[:2] in (["systemctl", "stop"], ["systemctl", "start"])]
        # a busy production port is refused before anything changes, naming the holder
        squatter = host.fake.squat(host.servers[cm.UNIT].port)
        host.fake.run(["systemctl", "stop", cm.UNIT])
        with pytest.raises(uo.PortBusyError, match=f"is held by pid {squatter} .*nothing was changed"):
            host.manager().absent(cm.UNIT, restart=True)
    finally:
        host.close()
