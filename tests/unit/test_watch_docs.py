"""The operator guide's drift-watching section (docs/operating.md): its AWX schedule example uses options awx.awx
accepts, and every specdec_watch_* variable it names is one playbooks/spec_watch.yml reads."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def _section() -> str:
    text = (ROOT / "docs" / "operating.md").read_text()
    start = text.index("## Watching for drift")
    end = text.find("\n## ", start + 1)
    return text[start:] if end < 0 else text[start:end]


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
    env.update(ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_NOCOLOR="1")
    return env


def test_awx_example_uses_options_awx_accepts() -> None:
    block = re.search(r"```yaml\n(.*?)```", _section(), re.S).group(1)
    tasks = yaml.safe_load(block)
    used = {name: set(args) for t in tasks for name, args in t.items() if name.startswith("awx.awx.")}
    assert set(used) == {"awx.awx.job_template", "awx.awx.schedule"}
    for name, args in used.items():
        proc = subprocess.run([str(BIN / "ansible-doc"), "-j", name], env=_env(), capture_output=True, text=True,
                              timeout=120, check=False)
        options = set(json.loads(proc.stdout)[name]["doc"]["options"])
        assert args <= options, (name, sorted(args - options))
    template = next(t["awx.awx.job_template"] for t in tasks if "awx.awx.job_template" in t)
    assert (ROOT / template["playbook"]).is_file()


def test_every_variable_named_is_read_by_the_playbook() -> None:
    playbook = (ROOT / "playbooks" / "spec_watch.yml").read_text()
    named = set(re.findall(r"specdec_watch_[a-z_]+", _section()))
    assert named and all(name in playbook for name in named), sorted(n for n in named if n not in playbook)


def test_playbook_syntax() -> None:
    proc = subprocess.run([str(BIN / "ansible-playbook"), "--syntax-check", "playbooks/spec_watch.yml"], cwd=ROOT,
                          env=_env(), capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
