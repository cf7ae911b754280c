"""spec_ab's first check (roles/spec_ab/tasks/main.yml): spec_ab_max_rounds below 2 can never give a verdict and
is refused naming the fix, unless spec_ab_smoke asks for a one-round smoke run (a real ansible-playbook run of
the role's own assert task, over its own defaults, controller-side only)."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
ROLE = ROOT / "roles" / "spec_ab"

CONFIGS = [{"name": "baseline", "env": {}}, {"name": "ngram", "env": {"LLAMA_ARG_SPEC_TYPE": "ngram-mod"}}]
HOSTS = {
    "one_round": {"spec_ab_max_rounds": 1},
    "one_round_string": {"spec_ab_max_rounds": "1"},  # as -e gives it
    "smoke": {"spec_ab_max_rounds": 1, "spec_ab_smoke": True},
    "smoke_string": {"spec_ab_max_rounds": "1", "spec_ab_smoke": "true"},
    "two_rounds": {"spec_ab_max_rounds": 2},
    "defaults": {},
    "zero_smoke": {"spec_ab_max_rounds": 0, "spec_ab_smoke": True},
}


def first_check() -> dict:
    """The role's first task: the stop on the run's settings (its message and its condition, as one fail task:
    tasks/stop.yml fails with spec_ab_stop when the role runs outside spec-ab.yml)."""
    tasks = yaml.safe_load((ROLE / "tasks" / "main.yml").read_text())
    check = tasks[0]["block"][0]
    assert check["name"].startswith("Stop when the run's settings make no sense")
    assert check["ansible.builtin.include_tasks"] == "stop.yml"
    return {"name": check["name"], "ansible.builtin.fail": {"msg": "{{ spec_ab_stop }}"}, "vars": check["vars"],
            "when": check["when"]}


def test_one_round_is_refused_naming_the_fix_unless_it_is_a_smoke_run(tmp_path):
    defaults = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())
    assert defaults["spec_ab_smoke"] is False
    hosts = {h: dict(v, ansible_connection="local", ansible_python_interpreter=sys.executable, specdec_configs=CONFIGS)
             for h, v in HOSTS.items()}
    (tmp_path / "hosts.yml").write_text(yaml.safe_dump({"all": {"vars": defaults, "hosts": hosts}}))
    play = [{"name": "Check", "hosts": "all", "gather_facts": False,
             "tasks": [first_check(), {"name": "Passed", "ansible.builtin.debug": {"msg": "passed"}}]}]
    (tmp_path / "play.yml").write_text(yaml.safe_dump(play, sort_keys=False))
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_NOCOLOR="1",
               ANSIBLE_STDOUT_CALLBACK="default")
    proc = subprocess.run([str(Path(sys.executable).parent / "ansible-playbook"), "-i", "hosts.yml", "play.yml"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300, check=False)
    out = proc.stdout + proc.stderr
    failed = {m.group(1): json.loads(m.group(2))["msg"]
              for m in re.finditer(r"^fatal: \[([^\]]+)\]: FAILED! => (\{.*\})$", out, re.M)}
    passed = set(re.findall(r"^ok: \[([^\]]+)\] => \{\s*\n\s*\"msg\": \"passed\"", out, re.M))
    assert set(failed) == {"one_round", "one_round_string", "zero_smoke"}, out[-3000:]
    assert passed == {"smoke", "smoke_string", "two_rounds", "defaults"}, out[-3000:]
    for host in ("one_round", "one_round_string"):
        msg = failed[host]
        assert "spec_ab_max_rounds (1) must be 2 or more" in msg and "spec_ab_smoke: true" in msg, msg
        assert msg.endswith("Nothing was changed.") and "no configs" not in msg
    # a smoke run still needs a round
    assert "spec_ab_max_rounds (0) must be 1 or more" in failed["zero_smoke"]
