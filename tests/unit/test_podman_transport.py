"""The test bed's transport into the Molecule containers (tests/testbed/connection_plugins/podman.py): with the
Makefile's environment the short name ``podman`` finds it, and a module travels in one ``podman exec --interactive``
per task, with no temporary file and no mount; without it, containers.podman's plugin takes four execs and a
mount. Real ansible-playbook runs, real modules; ``podman`` on PATH is a recorder that runs what it is asked to run
here (this machine stands in for the container, whose root is ``/``)."""
from __future__ import annotations

import os
import re
import stat
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent

RECORDER = """#!/bin/sh
# podman as the connection plugins call it, recorded; exec runs the command here, mount answers '/'
printf '%s\\n' "$*" >> "$PODMAN_LOG"
case $1 in
  exec) shift
        case $1 in --interactive|-i) shift;; esac
        [ "$1" = --user ] && shift 2
        shift
        exec "$@";;
  mount) echo /;;
esac
"""

# one exec with the module on stdin: ours says --interactive, containers.podman 1.17+ says -i
PIPELINED = re.compile(r"exec (--interactive|-i) specdec-transport /bin/sh -c")


def parent_pipelines() -> bool:
    """Whether the installed containers.podman's own podman connection pipelines (1.17+, the `ansible` 13+ package)."""
    for entry in sys.path:
        plugin = Path(entry) / "ansible_collections/containers/podman/plugins/connection/podman.py"
        if plugin.is_file():
            return re.search(r"^\s+has_pipelining = True$", plugin.read_text(), re.M) is not None
    raise AssertionError("containers.podman is not installed (requirements-test.txt's `ansible` package brings it)")


PLAYBOOK = """- hosts: all
  gather_facts: false
  tasks:
    - ansible.builtin.ping:
    - ansible.builtin.command: echo through the transport
      register: echoed
      changed_when: false
    - ansible.builtin.assert:
        that: echoed.stdout == 'through the transport'
"""


def _run(tmp_path: Path, *, ours: bool) -> list[str]:
    fake = tmp_path / "bin"
    fake.mkdir(exist_ok=True)
    (fake / "podman").write_text(RECORDER)
    (fake / "podman").chmod(0o755 | stat.S_IXUSR)
    (tmp_path / "play.yml").write_text(PLAYBOOK)
    log = tmp_path / ("ours.log" if ours else "plain.log")
    env = dict(os.environ, PATH=f"{fake}:{os.environ['PATH']}", PODMAN_LOG=str(log), ANSIBLE_NOCOLOR="1",
               ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_PIPELINING="true",
               ANSIBLE_REMOTE_TMP=str(tmp_path / "remote"), ANSIBLE_LOCAL_TEMP=str(tmp_path / "local"))
    env.pop("ANSIBLE_CONNECTION_PLUGINS", None)
    if ours:
        env["ANSIBLE_CONNECTION_PLUGINS"] = str(ROOT / "tests/testbed/connection_plugins")
    proc = subprocess.run([str(BIN / "ansible-playbook"), "-i", "specdec-transport,", "-c", "podman",
                           "-e", f"ansible_python_interpreter={sys.executable}", str(tmp_path / "play.yml")],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    return log.read_text().splitlines()


def test_the_test_bed_transport_pipelines_one_exec_per_task(tmp_path: Path) -> None:
    calls = _run(tmp_path, ours=True)
    # ping and command: one exec each, the module on stdin, nothing written first, nothing mounted
    assert len(calls) == 2, calls
    assert all(PIPELINED.match(c) for c in calls), calls


def test_without_it_containers_podman_takes_a_temporary_file_and_a_mount(tmp_path: Path) -> None:
    calls = _run(tmp_path, ours=False)
    if parent_pipelines():
        # containers.podman 1.17+ (the `ansible` 13+ package, ansible-core 2.20+) pipelines by itself, as ours does
        assert len(calls) == 2 and all(PIPELINED.match(c) for c in calls), calls
        return
    execs = [c for c in calls if c.startswith("exec ")]
    # per task: mkdir the temporary directory, chmod, run the module file, remove it; and a mount for the copy
    assert calls.count("mount specdec-transport") == 2, calls
    assert len(execs) == 8 and not any("--interactive" in c for c in execs), calls
