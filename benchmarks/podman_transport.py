"""The test bed's transport into the Molecule containers against containers.podman's own, side by side.

One container booting systemd from the test bed's host image (what every Molecule scenario boots); the same
playbook (30 commands, three copies, a slurp, a fetch, a template, a systemd query: what scenarios do) run through
containers.podman's `podman` connection (no pipelining: per task a mount and four execs) and through
tests/testbed/connection_plugins/podman.py (pipelining: one exec), alternately, and one table: wall seconds and the
machine's CPU seconds (all processes, from /proc/stat: podman, conmon and the container's python count too) for
each, and their ratio. Run it on a quiet machine.

Run: make benchmark-transport   (it builds or reuses the host image, like make molecule)
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
NAME = "specdec-benchmark-transport"

PLAYBOOK = """- hosts: all
  gather_facts: false
  tasks:
    - ansible.builtin.command: "true"
      loop: "{{ range(30) | list }}"
      changed_when: false
    - ansible.builtin.copy:
        content: "hello {{ item }}\\n"
        dest: /root/transport-benchmark
        mode: "0644"
      loop: [1, 2, 3]
    - ansible.builtin.slurp:
        src: /root/transport-benchmark
      register: read_back
    - ansible.builtin.assert:
        that: (read_back.content | b64decode) == "hello 3\\n"
    - ansible.builtin.fetch:
        src: /root/transport-benchmark
        dest: "{{ fetch_dir }}/"
    - ansible.builtin.template:
        src: /etc/hostname
        dest: /root/transport-benchmark-template
        mode: "0644"
    - ansible.builtin.systemd_service:
        name: systemd-journald
      register: journald
    - ansible.builtin.assert:
        that: journald.status.ActiveState == 'active'
"""


def cpu_ticks() -> int:
    fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    user, nice, system, _idle, _iowait, irq, softirq = (int(f) for f in fields[:7])
    return user + nice + system + irq + softirq


def run(work: Path, ours: bool) -> tuple[float, float]:
    env = dict(os.environ, ANSIBLE_PIPELINING="true", ANSIBLE_NOCOLOR="1", ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"))
    env.pop("ANSIBLE_CONNECTION_PLUGINS", None)
    if ours:
        env["ANSIBLE_CONNECTION_PLUGINS"] = str(ROOT / "tests/testbed/connection_plugins")
    ticks, start = cpu_ticks(), time.monotonic()
    proc = subprocess.run([str(BIN / "ansible-playbook"), "-i", f"{NAME},", "-c", "podman",
                           "-e", "ansible_python_interpreter=/usr/bin/python3", "-e", f"fetch_dir={work / 'fetched'}",
                           str(work / "play.yml")], env=env, capture_output=True, text=True, check=False)
    wall, cpu = time.monotonic() - start, (cpu_ticks() - ticks) / os.sysconf("SC_CLK_TCK")
    if proc.returncode != 0:
        sys.exit(f"benchmark playbook failed ({'test bed' if ours else 'containers.podman'} transport):\n"
                 + proc.stdout[-3000:] + proc.stderr[-2000:])
    return wall, cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=2, help="runs of each transport, alternating (default 2)")
    args = parser.parse_args()
    image = os.environ.get("SPECDEC_HOST_IMAGE")
    if not image:
        sys.exit("SPECDEC_HOST_IMAGE is not set: run this through `make benchmark-transport`")
    subprocess.run(["podman", "rm", "-f", NAME], capture_output=True, check=False)
    subprocess.run(["podman", "run", "-d", "--name", NAME, "--network", "none", "--systemd", "always", image,
                    "/sbin/init"], check=True, capture_output=True)
    try:
        subprocess.run(["podman", "exec", NAME, "systemctl", "is-system-running", "--wait"], capture_output=True,
                       check=False)
        with tempfile.TemporaryDirectory() as tmp:
            work = Path(tmp)
            (work / "play.yml").write_text(PLAYBOOK)
            results: dict[bool, list[tuple[float, float]]] = {False: [], True: []}
            for _run in range(args.runs):
                for ours in (False, True):
                    results[ours].append(run(work, ours))
    finally:
        subprocess.run(["podman", "rm", "-f", NAME], capture_output=True, check=False)
    tasks = 30 + 3 + 1 + 1 + 1 + 1 + 1 + 1
    print(f"one playbook of {tasks} tasks into a systemd container, {args.runs} runs each, alternating (medians)")
    print(f"{'transport':<40} {'wall s':>8} {'CPU s':>8}")
    med = {}
    for ours, label in ((False, "containers.podman.podman (no pipelining)"), (True, "test bed (pipelining)")):
        walls = sorted(w for w, _c in results[ours])
        cpus = sorted(c for _w, c in results[ours])
        med[ours] = (walls[len(walls) // 2], cpus[len(cpus) // 2])
        print(f"{label:<40} {med[ours][0]:>8.1f} {med[ours][1]:>8.1f}")
    print(f"{'ratio test bed / containers.podman':<40} {med[True][0] / med[False][0]:>8.2f} "
          f"{med[True][1] / med[False][1]:>8.2f}")


if __name__ == "__main__":
    main()
