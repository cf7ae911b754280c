"""playbooks/spec_watch.yml with an operator's own inventory (issue 24): the inventory is in charge, and a limit that
leaves nothing to watch fails saying so."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
PLAYBOOK = ROOT / "playbooks" / "spec_watch.yml"


def _run(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
    env.update(ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_NOCOLOR="1", ANSIBLE_SHOW_CUSTOM_STATS="0")
    return subprocess.run([str(BIN / "ansible-playbook"), str(PLAYBOOK), "-i", str(tmp_path / "hosts.yml"), *args],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, check=False)


def _inventory(tmp_path: Path) -> None:
    # local hosts without become (this test runs as whoever runs it); a state dir with no promotion, so the watch
    # answers no-evidence without asking systemd anything
    local = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable, "ansible_become": False}
    inventory = {"all": {"children": {
        "gpu": {"hosts": {"box-a": dict(local, specdec_watch_state_dir=str(tmp_path / "a-state"),
                                        specdec_watch_fail_on="never")}},
        "other": {"hosts": {"box-b": dict(local)}}}}}
    (tmp_path / "hosts.yml").write_text(yaml.safe_dump(inventory))
    (tmp_path / "a-state").mkdir()


def test_no_play_sets_what_the_inventory_should() -> None:
    for play in yaml.safe_load(PLAYBOOK.read_text()):
        assert "vars" not in play and "vars_files" not in play, play["name"]


def test_host_vars_reach_the_module_and_an_empty_target_fails(tmp_path: Path) -> None:
    _inventory(tmp_path)
    run = _run(tmp_path, "-l", "box-a", "-e", "specdec_watch_window=0")
    # box-a's own state dir and fail_on came from its host_vars: no promotion there, reported, and not failed
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
    assert f"{tmp_path / 'a-state'}/promoted/llama-server.json does not exist" in run.stdout
    assert "box-b" not in run.stdout.split("PLAY [Watch")[1]
    # the limit keeps box-b, the target names group gpu: nothing in common, and it says so
    none = _run(tmp_path, "-l", "box-b", "-e", "specdec_target_hosts=gpu")
    assert none.returncode != 0
    assert "nothing to watch: specdec_target_hosts=gpu and the limit box-b have no host in common" in none.stdout
