#!/usr/bin/env python3
"""Runs a job inside the execution environment the way AWX does, and checks what its artifacts hold.

    run_job.py WORK IMAGE

WORK is molecule/ssh's operator directory (prepare.yml writes it: the key pair, the pinned host key, the
vault-encrypted become password and the host's variables). For each job this lays out an ansible-runner private
data directory as AWX does: ``project/`` (a clone of this repository, as a project sync makes it), ``inventory/``,
``env/ssh_key`` (the Machine credential's key, loaded into an ssh-agent inside the container), ``env/passwords``
(the become password, answered at ansible-playbook's prompt) and ``env/cmdline``; then runs it as AWX's receptor
does: ``ansible-runner transmit`` streams the directory into ``podman run -i IMAGE ansible-runner worker`` (the
job runs inside the execution environment, as the image's own user) and ``ansible-runner process`` writes the
artifacts back on the controller. Two jobs: the preflight, then a short A/B.
Each must succeed, and its artifacts (``artifacts/<ident>/``: status, rc, stdout, job events with the
playbook's custom stats) must hold the verdicts and where the full results live. Prints one line per job.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
HOST = "fleet-ssh"


def fail(msg: str) -> None:
    print(f"run_job: {msg}", file=sys.stderr)
    sys.exit(1)


def become_password(work: Path) -> str:
    """The become password, read back from the operator's vault (it exists nowhere else in clear)."""
    bindir = Path(sys.executable).parent
    vault = shutil.which("ansible-vault", path=f"{bindir}:{os.environ.get('PATH', '')}")
    out = subprocess.run([vault or "ansible-vault", "view", "--vault-password-file", str(work / "vault-pass"),
                          str(work / "inventory" / "group_vars" / "ssh_fleet" / "vault.yml")],
                         capture_output=True, text=True, check=True).stdout
    return out.split(":", 1)[1].strip()


def host_vars(work: Path) -> dict[str, Any]:
    """The host's variables as the operator's inventory has them, without the vault reference: in AWX the
    Machine credential answers the become prompt instead."""
    import yaml  # the test venv's; this script runs on the controller, never on a host

    variables = yaml.safe_load((work / "inventory" / "group_vars" / "ssh_fleet" / "main.yml").read_text())
    variables.pop("ansible_become_password")
    hosts = yaml.safe_load((work / "inventory" / "hosts.yml").read_text())
    host = dict(hosts["all"]["children"]["ssh_fleet"]["hosts"][HOST])
    host.pop("ansible_ssh_private_key_file")
    # The private data directory is /runner inside the container.
    host["ansible_ssh_common_args"] = "-o UserKnownHostsFile=/runner/known_hosts"
    return {**variables, **host}


def private_data_dir(work: Path, ident: str) -> Path:
    pdd = work / f"awx-{ident}"
    shutil.rmtree(pdd, ignore_errors=True)
    (pdd / "env").mkdir(parents=True)
    (pdd / "inventory").mkdir()
    subprocess.run(["git", "clone", "-q", str(ROOT), str(pdd / "project")], check=True)
    inventory = {"all": {"children": {"ssh_fleet": {"hosts": {HOST: host_vars(work)}}}}}
    (pdd / "inventory" / "hosts.json").write_text(json.dumps(inventory, indent=2))
    # Beside, not inside, inventory/: every file there is read as an inventory source.
    shutil.copy(work / "home" / ".ssh" / "known_hosts", pdd / "known_hosts")
    (pdd / "env" / "ssh_key").write_text((work / "id_fleet").read_text())
    (pdd / "env" / "passwords").write_text(json.dumps({r"^BECOME password:\s*?$": become_password(work)}))
    (pdd / "env" / "cmdline").write_text(f"--ask-become-pass --limit {HOST}")
    (pdd / "env" / "settings").write_text(json.dumps({"job_timeout": 900}))
    return pdd


def run(work: Path, ident: str, playbook: str, image: str) -> dict[str, Any]:
    pdd = private_data_dir(work, ident)
    runner = shutil.which("ansible-runner", path=f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}")
    if not runner:
        fail("ansible-runner is not installed (it is in requirements-test.txt)")
    # Nothing of the calling harness (Molecule's ANSIBLE_* settings) may reach the job: AWX gives it none.
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(work / "home"), "LANG": "C.UTF-8",
           "CONTAINERS_CONF": os.environ.get("CONTAINERS_CONF", "")}
    transmit = subprocess.Popen([runner, "transmit", str(pdd), "--ident", ident, "-p", playbook],
                                stdout=subprocess.PIPE, env=env)
    # The test host's sshd is published on the controller's loopback only: the job shares its network.
    worker = subprocess.Popen(["podman", "run", "--rm", "-i", "--network=host", image,
                               "ansible-runner", "worker", "--private-data-dir=/runner"],
                              stdin=transmit.stdout, stdout=subprocess.PIPE, env=env)
    assert transmit.stdout and worker.stdout
    transmit.stdout.close()
    proc = subprocess.run([runner, "process", str(pdd), "--ident", ident], stdin=worker.stdout,
                          capture_output=True, text=True, timeout=1200, env=env, check=False)
    worker.wait(timeout=60)
    transmit.wait(timeout=60)
    artifacts = pdd / "artifacts" / ident
    status = (artifacts / "status").read_text().strip() if (artifacts / "status").exists() else "missing"
    if proc.returncode != 0 or status != "successful":
        stdout = (artifacts / "stdout").read_text() if (artifacts / "stdout").exists() else proc.stdout
        fail(f"job {ident} ({playbook}) ended {status}, rc {proc.returncode}:\n{stdout[-4000:]}\n{proc.stderr[-2000:]}")
    events = [json.loads(p.read_text()) for p in sorted((artifacts / "job_events").glob("*.json"))]
    stats = [e for e in events if e.get("event") == "playbook_on_stats"]
    if len(stats) != 1:
        fail(f"job {ident}: {len(stats)} playbook_on_stats events in {artifacts / 'job_events'}")
    return {"artifacts": artifacts, "custom": stats[0]["event_data"].get("artifact_data") or {},
            "stdout": (artifacts / "stdout").read_text(), "events": events}


def main() -> None:
    work, image = Path(sys.argv[1]), sys.argv[2]
    preflight = run(work, "preflight", "playbooks/preflight.yml", image)
    verdicts = {v["name"]: v for v in preflight["custom"].get("specdec_preflight", {}).get(HOST, [])}
    if set(verdicts) != {"baseline", "draft"} or not all(v["legal"] for v in verdicts.values()):
        fail(f"preflight job: custom stats specdec_preflight lack the two legal configs: {preflight['custom']}")
    print(f"EE job preflight: successful; custom stats hold {sorted(verdicts)} ({preflight['artifacts']})")

    ab = run(work, "ab", "playbooks/spec_ab.yml", image)
    summary = ab["custom"].get("specdec_ab", {}).get(HOST)
    if not summary:
        fail(f"A/B job: no custom stats specdec_ab for {HOST}: {ab['custom']}")
    text = json.dumps(summary)
    if "draft" not in text or "BASELINE" not in text or not summary.get("report_dir"):
        fail(f"A/B job: the custom stats lack the verdicts or the report's place: {text[:2000]}")
    if "BECOME password" in ab["stdout"] and "ok:" not in ab["stdout"]:
        fail("A/B job: the become prompt was not answered")
    print(f"EE job ab: successful; custom stats specdec_ab name report_dir {summary['report_dir']} "
          f"({ab['artifacts']})")
    print(json.dumps({"preflight": str(preflight["artifacts"]), "ab": str(ab["artifacts"]),
                      "specdec_ab": summary}, indent=1, default=str)[:3000])


if __name__ == "__main__":
    main()
