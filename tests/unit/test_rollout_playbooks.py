"""build.yml, deploy.yml and promote.yml: the inventory is in charge, the named hosts are the targets, a play with
nothing to do fails saying what is missing, and a unit an A/B run holds is refused naming the holder.

Through ansible-playbook on the local demo host (and --list-hosts for the example fleet, which nothing reaches);
the builds, restarts and promotions themselves run on real systemd in molecule/build, molecule/ab and
molecule/envfile.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
PLAYBOOKS = ["playbooks/build.yml", "playbooks/deploy.yml", "playbooks/promote.yml"]


def playbook(*args: str, inventory: str | None = None) -> subprocess.CompletedProcess:
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_NOCOLOR="1",
               ANSIBLE_COLLECTIONS_PATH=str(ROOT / ".build" / "collections"))
    argv = [str(BIN / "ansible-playbook"), *(["-i", inventory] if inventory else []), *args]
    return subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, check=False)


def said(proc: subprocess.CompletedProcess) -> str:
    return " ".join((proc.stdout + proc.stderr).split())


@pytest.mark.parametrize("pb", PLAYBOOKS)
def test_no_play_sets_vars_that_would_outrank_the_inventory(pb: str) -> None:
    for play in yaml.safe_load((ROOT / pb).read_text()):
        assert "vars" not in play and "vars_files" not in play, f"{pb}: play {play.get('name')!r} sets vars"


@pytest.fixture
def own_inventory(tmp_path: Path) -> str:
    """An operator's own inventory: no group named 'fleet', one host in a group of its own."""
    path = tmp_path / "hosts.yml"
    path.write_text(yaml.safe_dump({"all": {"children": {"gpu_boxes": {"hosts": {"my-box": {
        "ansible_host": "my-box.example.invalid", "specdec_llamacpp_build": "b10133"}}}}}}))
    return str(path)


@pytest.mark.parametrize("pb", PLAYBOOKS)
def test_a_limit_of_ones_own_inventory_is_what_each_play_targets(pb: str, own_inventory: str) -> None:
    proc = playbook(pb, "-l", "my-box", "--list-hosts", inventory=own_inventory)
    assert proc.returncode == 0, said(proc)
    plays = proc.stdout.split("play #")[1:]
    assert plays and all("my-box" in block for block in plays), proc.stdout


@pytest.mark.parametrize("pb", PLAYBOOKS)
def test_a_target_pattern_that_names_no_host_fails_saying_so(pb: str) -> None:
    proc = playbook(pb, "-l", "specdec-demo", "-e", "specdec_target_hosts=frank-dragon", "-e",
                    "specdec_promote_config=x")
    assert proc.returncode != 0
    assert "specdec_target_hosts=frank-dragon names no host within -l specdec-demo" in said(proc)


def test_build_fails_on_a_host_that_names_no_build(tmp_path: Path) -> None:
    proc = playbook("playbooks/build.yml", "-l", "specdec-demo", "--check", "-e", f"specdec_state_dir={tmp_path}")
    assert proc.returncode != 0
    assert "specdec-demo: no llama.cpp build is named, so nothing can be built; set specdec_llamacpp_build" in said(proc)


def test_build_fails_on_a_host_with_nothing_to_build(tmp_path: Path) -> None:
    proc = playbook("playbooks/build.yml", "-l", "specdec-demo", "--check", "-e", "specdec_engine=vllm")
    assert proc.returncode != 0
    assert "specdec-demo has nothing to build: build.yml builds llama.cpp and this host's specdec_engine is vllm" in said(proc)


def _lock(state_dir: Path) -> None:
    (state_dir / "locks").mkdir(parents=True)
    (state_dir / "locks" / "llama-server.json").write_text(json.dumps({
        "run_id": "20261201T080000Z-a1", "controller": "awx-job-17", "pid": 4242, "started": "2026-12-01T08:00:00Z",
        "expires": "2099-01-01T00:00:00Z", "expires_epoch": 4070908800}))


@pytest.mark.parametrize("pb, extra", [
    ("playbooks/build.yml", ["-e", "specdec_llamacpp_build=b10133"]),
    ("playbooks/promote.yml", ["-e", "specdec_promote_config=draft-n3", "-e", "specdec_promote_run=20261130T120000Z",
                               "-e", "specdec_promote_force=true"]),  # past the WIN gate, to the lock
])
def test_a_unit_an_ab_run_holds_is_refused_naming_the_holder(pb: str, extra: list, tmp_path: Path) -> None:
    state = tmp_path / "state"
    _lock(state)
    results = tmp_path / "results" / "specdec-demo" / "20261130T120000Z"
    results.mkdir(parents=True)
    report = json.loads((ROOT / "tests/unit/fixtures/ab/llamacpp_run.json").read_text())
    (results / "report.json").write_text(json.dumps(dict(report, run_id="20261130T120000Z")))
    env_file = tmp_path / "prod.env"
    env_file.write_text("LLAMA_ARG_PORT=8080\n")
    proc = playbook(pb, "-l", "specdec-demo", "--check", "-e", f"specdec_state_dir={state}", "-e",
                    f"specdec_results_dir={tmp_path / 'results'}", "-e", f"specdec_env_file={env_file}", *extra)
    assert proc.returncode != 0
    text = said(proc)
    assert "llama-server" in text and "on specdec-demo is busy" in text
    assert "run 20261201T080000Z-a1 from controller awx-job-17" in text
    assert "specdec_force=true" in text
    assert env_file.read_text() == "LLAMA_ARG_PORT=8080\n"


def test_promote_takes_its_health_timeout_from_the_inventory(tmp_path: Path) -> None:
    """A host_var of 600 is what promote.yml waits (here: what the dead-man is checked against)."""
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(yaml.safe_dump({"all": {"hosts": {"my-box": {
        "ansible_connection": "local", "ansible_python_interpreter": sys.executable,
        "llamacpp_serve_health_timeout": 600}}}}))
    proc = playbook("playbooks/promote.yml", "-l", "my-box", "--check", "-e", "specdec_promote_config=x",
                    "-e", "specdec_promote_rollback_after=1000", inventory=str(inventory))
    assert proc.returncode != 0
    assert "specdec_promote_rollback_after (1000 s) must be longer than twice the health timeout (600 s)" in said(proc)


def _task_names(path: str) -> list:
    """The task names of a playbook (every play) or task file, in order, blocks flattened."""
    data = yaml.safe_load((ROOT / path).read_text())
    plays = data if data and "hosts" in data[0] else [{"tasks": data}]
    names: list = []

    def walk(tasks: list) -> None:
        for task in tasks or []:
            names.append(task.get("name", ""))
            for key in ("block", "rescue", "always"):
                walk(task.get(key))
    for play in plays:
        walk(play.get("tasks"))
    return names


@pytest.mark.parametrize(("path", "first_change"), [
    ("playbooks/promote.yml", "Take the unit's lock (no A/B run starts on it while it is promoted)"),
    ("playbooks/deploy.yml", "The llama-server unit"),
    ("playbooks/tasks/build_host.yml", None),
    ("playbooks/build.yml", "Install the tarball its family's first host exported, and switch 'current'"),
    ("roles/spec_ab/tasks/main.yml", "Preflight every config"),
])
def test_every_host_changing_path_starts_from_what_runs_before_its_first_change(path: str, first_change: str) -> None:
    """Issue 31: the running process is compared with what a restart would start before the path changes anything
    (and before the A/B's dry run stops, so that --check is refused too)."""
    names = _task_names(path)
    checks = [i for i, name in enumerate(names) if name.startswith("Start from what runs")]
    assert checks, f"{path} does not start from what runs"
    if first_change is not None:
        assert checks[0] < names.index(first_change)
    text = (ROOT / path).read_text()
    assert "require_start_from_running.yml" in text or "start_from_running: true" in text
    shared = yaml.safe_load((ROOT / "playbooks/tasks/require_start_from_running.yml").read_text())
    check = shared[0]["llmfleet.specdec.serving_unit_info"]
    assert check["start_from_running"] is True and "specdec_force" in check["force"]
    assert shared[0]["check_mode"] is False  # the dry run is refused too
