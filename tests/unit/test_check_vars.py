"""playbooks/tasks/check_vars.yml: the operator variables given for a host are checked for type and range at play
start, an optional one left out is never required, and a bad value is refused naming the variable, the value and
the fix before any task touches the host (real ansible-playbook runs, controller-side only)."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
CHECK = ROOT / "playbooks" / "tasks" / "check_vars.yml"

# One good value of every kind the check knows, in the types an inventory gives them (and -e's strings).
GOOD = {
    "specdec_target_hosts": "gpu_sm86",
    "specdec_unit": "llama-server@a_1:b.service",
    "specdec_endpoint": "https://gpu-box-1.example:8443/v1",
    "specdec_engine": "vllm",
    "specdec_backend": "vllm",
    "specdec_api": "openai",
    "specdec_configs": [{"name": "baseline", "env": {}}, {"name": "ngram", "env": {"LLAMA_ARG_SPEC_TYPE": "ngram"}}],
    "specdec_base_env": {"LLAMA_ARG_CTX_SIZE": "4096"},
    "specdec_env_file": "/etc/llmfleet-specdec/llama-server.env",
    "specdec_state_dir": "/var/lib/llmfleet-specdec",
    "specdec_cpu_only": "yes",
    "specdec_become": True,
    "specdec_gpu_tools": ["nvidia-smi"],
    "specdec_ab_batch": "25%",
    "specdec_ab_budget_minutes": 12.5,
    "specdec_ab_concurrency": 0,
    "specdec_ab_health_timeout": "auto",
    "specdec_ab_rollback_after": "600",
    "specdec_ab_lock_wait": 300,
    "specdec_ab_mix": {"prose": 0.6},
    "specdec_ab_win_margin": 0.02,
    "specdec_promote_force": "false",
    "specdec_promote_accept_lossy": False,
    "specdec_promote_health_timeout": 10,
    "specdec_force": "no",
    "specdec_build_batch": [1, "100%"],
    "specdec_llamacpp_build": "b10133",
    "specdec_ab_drain_tasks": "",
    "specdec_fleet_run": "20261201T020000Z-ab12",
    "specdec_watch_window": 0,
    "specdec_watch_acceptance_tolerance": 0.05,
    "specdec_watch_fail_on": "never",
    "specdec_watch_ignore": ["stale"],
    "specdec_fleet_min_hosts": 2,
    "specdec_fleet_fail_on_disagreement": "on",
}

# One bad value per variable (a wrong type or out of range), each on a host of its own.
BAD = [
    ("specdec_force", "maybe"),
    ("specdec_promote_force", "sure"),
    ("specdec_promote_accept_lossy", 2),
    ("specdec_engine", "tensorrt"),
    ("specdec_backend", "tensorrt"),
    ("specdec_api", "grpc"),
    ("specdec_unit", "llama server;rm"),
    ("specdec_watch_unit", ""),
    ("specdec_endpoint", "127.0.0.1:8080"),
    ("specdec_watch_endpoint", "ftp://host/"),
    ("specdec_configs", [{"env": {}}]),
    ("specdec_configs", {"name": "baseline"}),
    ("specdec_configs", ["baseline"]),
    ("specdec_base_env", ["LLAMA_ARG_CTX_SIZE=4096"]),
    ("specdec_ab_batch", "half"),
    ("specdec_ab_batch", "0"),
    ("specdec_ab_batch", "150%"),
    ("specdec_build_batch", [1, "half"]),
    ("specdec_ab_health_timeout", -5),
    ("specdec_ab_health_timeout", "soon"),
    ("specdec_ab_rollback_after", 12.5),
    ("specdec_ab_lock_wait", True),
    ("specdec_ab_budget_minutes", "-1"),
    ("specdec_ab_win_margin", "-0.1"),
    ("specdec_promote_health_timeout", 0),
    ("specdec_promote_rollback_after", "auto"),
    ("specdec_watch_window", "5m"),
    ("specdec_watch_acceptance_tolerance", -0.1),
    ("specdec_watch_fail_on", "always"),
    ("specdec_watch_ignore", "stale"),
    ("specdec_state_dir", "var/lib/llmfleet-specdec"),
    ("specdec_env_file", "llama-server.env"),
    ("specdec_fleet_min_hosts", 0),
    ("specdec_target_hosts", ""),
    ("specdec_cpu_only", "cpu"),
    ("specdec_llamacpp_build", 10133),
    ("specdec_fleet_state_dir", "state"),
    ("specdec_ab_undrain_tasks", ["undrain.yml"]),
]

PLAY = f"""
- name: Check
  hosts: all
  gather_facts: false
  tasks:
    - name: The check
      ansible.builtin.import_tasks: {CHECK}
    - name: Passed
      ansible.builtin.debug:
        msg: "passed {{{{ inventory_hostname }}}}"
"""


def ansible_playbook(args: list[str], cwd: Path, **env: str) -> subprocess.CompletedProcess:
    full_env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_NOCOLOR="1", **env)
    return subprocess.run([str(Path(sys.executable).parent / "ansible-playbook"), *args], cwd=cwd, env=full_env,
                          capture_output=True, text=True, timeout=300, check=False)


def failures(out: str) -> dict[str, list[tuple[str, str]]]:
    """host -> [(variable, msg)] of each variable the check refused: one failed task per host, whose message
    names each refused variable (``<host>: <name>=<value> is not valid: ...``) in turn."""
    found: dict[str, list[tuple[str, str]]] = {}
    for m in re.finditer(r"^fatal: \[([^\]]+)\]: FAILED! => (.*)$", out, re.M):
        # the collection's callback prints a stop's message as it is; Ansible's default, as JSON
        host, msg = m.group(1), json.loads(m.group(2))["msg"] if m.group(2).startswith("{") else m.group(2)
        parts = re.split(rf"(?:^| )(?={re.escape(host)}: [a-z_]+=)", msg)
        for part in filter(None, parts):
            name = re.match(rf"{re.escape(host)}: ([a-z_]+)=", part)
            found.setdefault(host, []).append((name.group(1) if name else "?", part))
    return found


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """One run over a host with every good value, a host with none, and a host per bad value."""
    work = tmp_path_factory.mktemp("check_vars")
    hosts = {"good": dict(GOOD), "bare": {}}
    for i, (name, value) in enumerate(BAD):
        hosts[f"bad{i}"] = {name: value}
    for h in hosts.values():
        h["ansible_connection"] = "local"
    # the good host's specdec_target_hosts must still name the hosts checked: every host of this inventory
    hosts["good"]["specdec_target_hosts"] = "all"
    (work / "hosts.yml").write_text(yaml.safe_dump({"all": {"hosts": hosts}}))
    (work / "play.yml").write_text(PLAY)
    proc = ansible_playbook(["-i", "hosts.yml", "play.yml"], work)
    return proc, proc.stdout + proc.stderr


def test_good_values_and_no_values_pass(run):
    _proc, out = run
    found = failures(out)
    assert "good" not in found and "bare" not in found, found.get("good") or found.get("bare")
    assert "ok: [good] => passed good" in out and "ok: [bare] => passed bare" in out
    # the good host's values were checked, not skipped: every one of its variables was an item
    for name in GOOD:
        assert f"ok: [good] => (item={name})" in out, name
    assert "(item=" not in "\n".join(line for line in out.splitlines() if "[bare]" in line)


@pytest.mark.parametrize("i", range(len(BAD)), ids=[f"{n}={v!r}" for n, v in BAD])
def test_each_bad_value_is_refused_naming_the_variable_the_value_and_the_fix(run, i):
    proc, out = run
    name, value = BAD[i]
    assert proc.returncode != 0
    found = failures(out)
    assert [pair[0] for pair in found.get(f"bad{i}", [])] == [name], out[-3000:]
    msg = found[f"bad{i}"][0][1]
    assert msg.startswith(f"bad{i}: {name}={json.dumps(value)} is not valid: {name} takes "), msg
    assert "nothing was changed" in msg and "Fix it where it is set" in msg
    assert f"=> passed bad{i}" not in out


def ansible_repo(args: list[str]) -> tuple[subprocess.CompletedProcess, str]:
    proc = ansible_playbook(args, ROOT)
    return proc, proc.stdout + proc.stderr


def test_rollback_refuses_a_bad_boolean_before_touching_the_host():
    proc, out = ansible_repo(["playbooks/rollback.yml", "-l", "specdec-demo", "-e", "specdec_force=maybe"])
    assert proc.returncode != 0
    assert 'specdec-demo: specdec_force="maybe" is not valid: specdec_force takes a boolean' in out
    # only the controller-side check play ran: the rollback play never started
    assert "PLAY [Roll back every llmfleet.specdec override]" not in out
    assert "TASK [Remove what llmfleet.specdec left on this host" not in out


def test_the_check_runs_in_check_mode_and_under_any_tags():
    proc, out = ansible_repo(["spec-ab.yml", "-l", "specdec-demo", "--check", "--tags", "no-such-tag",
                              "-e", "specdec_engine=tensorrt"])
    assert proc.returncode != 0
    assert 'specdec_engine="tensorrt" is not valid: specdec_engine takes llamacpp or vllm' in out
    assert "PLAY [A/B the hosts' speculative configs]" not in out
    assert "TASK [llmfleet.specdec." not in out


@pytest.mark.parametrize("playbook", ["spec_ab", "promote", "rollback", "deploy", "build", "preflight", "spec_watch"])
def test_each_host_changing_playbook_runs_the_check_first(playbook):
    plays = yaml.safe_load((ROOT / "playbooks" / f"{playbook}.yml").read_text())
    first = next(p for p in plays if "hosts" in p)
    if playbook == "spec_watch":  # its first play only finds the hosts (run_once); the watch play reads them
        first = plays[1]
    tasks = first.get("pre_tasks") or first["tasks"]
    names = [t.get("ansible.builtin.import_tasks") for t in tasks]
    assert "tasks/check_vars.yml" in names
    at = names.index("tasks/check_vars.yml")
    assert names[:at] in ([], ["tasks/require_hosts.yml"])
    assert tasks[at].get("tags") == ["always"]
