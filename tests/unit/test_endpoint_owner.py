"""serving_unit_info's endpoint check: the process that listens on specdec_endpoint's port must be the unit's."""
from __future__ import annotations

import os
from pathlib import Path

from ansible_collections.llmfleet.specdec.plugins.modules.serving_unit_info import NO_SYSTEMD, endpoint_problem

HEADER = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"


def fake_proc(root: Path, port: int, owners: dict[int, str]) -> Path:
    """A /proc with one listener on ``port`` (inode 4242) held by each pid of ``owners`` (pid -> its cgroup)."""
    (root / "net").mkdir(parents=True)
    line = f"   0: 0100007F:{port:04X} 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 4242\n"
    (root / "net" / "tcp").write_text(HEADER + line)
    (root / "net" / "tcp6").write_text(HEADER)
    for pid, cgroup in owners.items():
        (root / str(pid) / "fd").mkdir(parents=True)
        os.symlink("socket:[4242]", root / str(pid) / "fd" / "3")
        (root / str(pid) / "cgroup").write_text(f"0::{cgroup}\n")
        (root / str(pid) / "comm").write_text("python3\n")
        (root / str(pid) / "cmdline").write_text("python3\x00-m\x00http.server\x00")
    return root


UNIT = {"unit": "llama-server.service", "kind": "direct", "running": {"pid": 100},
        "endpoint": {"url": "http://127.0.0.1:8080"}}


def systemctl(argv):
    assert argv[:2] == ["systemctl", "show"] and "ControlGroup" in argv
    return 0, "/system.slice/llama-server.service\n", ""


def test_another_process_on_the_port_is_named_with_the_fix(tmp_path: Path) -> None:
    proc = fake_proc(tmp_path / "proc", 8080, {200: "/user.slice/session-1.scope"})
    problem = endpoint_problem(UNIT, "http://127.0.0.1:8080", systemctl, proc=str(proc))
    assert problem.startswith("specdec_endpoint http://127.0.0.1:8080 is not llama-server.service's server: port "
                              "8080 at 127.0.0.1 is held by pid 200 (python3, unit session-1.scope: python3 -m http.server)")
    assert problem.endswith("set specdec_endpoint to the address llama-server.service listens on "
                            "(http://127.0.0.1:8080, from its command line), or stop the other process")


def test_the_units_own_process_or_one_in_its_cgroup_passes(tmp_path: Path) -> None:
    main = fake_proc(tmp_path / "a", 8080, {100: "/system.slice/llama-server.service"})
    assert endpoint_problem(UNIT, "http://127.0.0.1:8080", systemctl, proc=str(main)) == ""
    child = fake_proc(tmp_path / "b", 8080, {300: "/system.slice/llama-server.service/payload"})
    assert endpoint_problem(UNIT, "http://127.0.0.1:8080", systemctl, proc=str(child)) == ""


def test_nothing_local_on_the_port_a_container_or_a_stopped_unit_is_left_to_the_health_check(tmp_path: Path) -> None:
    proc = fake_proc(tmp_path / "proc", 9999, {200: "/user.slice"})
    assert endpoint_problem(UNIT, "http://127.0.0.1:8080", systemctl, proc=str(proc)) == ""
    other = fake_proc(tmp_path / "other", 8080, {200: "/user.slice"})
    assert endpoint_problem(dict(UNIT, kind="container"), "http://127.0.0.1:8080", systemctl, proc=str(other)) == ""
    assert endpoint_problem(dict(UNIT, running={"pid": 0}), "http://127.0.0.1:8080", systemctl, proc=str(other)) == ""


def test_a_host_without_systemd_is_recognised() -> None:
    assert NO_SYSTEMD.search("`systemctl show x` failed (rc 1): System has not been booted with systemd as init "
                             "system (PID 1). Can't operate.")
    assert not NO_SYSTEMD.search("systemd has no unit x.service (LoadState=not-found)")
