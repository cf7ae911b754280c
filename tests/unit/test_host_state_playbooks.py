"""The host keeps its own results: report_partial.yml and promote.yml work from the host's state directory alone,
with an empty controller results/ (a new job container), through ansible-playbook on the local demo host.

The state directory is put under tmp_path with specdec_state_dir; the run is the recorded real llama-server run
in tests/unit/fixtures/ab. Real systemd (the promote's restart, the A/B itself) is in molecule/ab and
molecule/abfaults.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
RUN_ID = "20261130T120000Z"


def playbook(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_NOCOLOR="1",
               ANSIBLE_COLLECTIONS_PATH=str(ROOT / ".build" / "collections"), ANSIBLE_CALLBACK_RESULT_FORMAT="json")
    return subprocess.run([str(BIN / "ansible-playbook"), *args], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=300, check=False)


@pytest.fixture
def host_state(tmp_path: Path) -> Path:
    """A host state directory holding only the partial results of a run whose controller died."""
    run = json.loads((ROOT / "tests/unit/fixtures/ab/llamacpp_run.json").read_text())
    run.update(run_id=RUN_ID, schema="llmfleet.specdec/ab-partial/1", slots_planned=12,
               started="2026-11-30T12:00:00+00:00")
    run_dir = tmp_path / "state" / "runs" / RUN_ID
    run_dir.mkdir(parents=True)
    (run_dir / "partial.json").write_text(json.dumps(run))
    return tmp_path / "state"


def test_report_partial_reports_from_the_hosts_partial_results_when_the_controller_has_none(
        host_state: Path, tmp_path: Path) -> None:
    results = tmp_path / "results"  # a new job's controller: nothing at all
    proc = playbook("playbooks/report_partial.yml", "-l", "specdec-demo", "-e", f"specdec_state_dir={host_state}",
                    "-e", f"specdec_results_dir={results}", "-e", "specdec_report_plots=false")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    local = results / "specdec-demo" / RUN_ID
    report = json.loads((local / "report.json").read_text())
    assert report["run_id"] == RUN_ID and "the controller stopped after 8 of 12 planned" in report["run_error"]
    assert (local / "partial.json").read_bytes() == (host_state / "runs" / RUN_ID / "partial.json").read_bytes()
    # prompts and model output: private on the controller as on the host
    private = [local, *local.iterdir(), results / "specdec-demo" / "history.jsonl", host_state / "history.jsonl"]
    modes = {p.name: p.stat().st_mode & 0o777 for p in private}
    assert modes["partial.json"] == modes["report.json"] == modes["report.md"] == modes["history.jsonl"] == 0o600, modes
    assert modes[RUN_ID] == 0o700, modes
    # the report and its history line went back to the host
    assert json.loads((host_state / "runs" / RUN_ID / "report.json").read_text()) == report
    history = [json.loads(line) for line in (host_state / "history.jsonl").read_text().splitlines()]
    assert [h["run_id"] for h in history] == [RUN_ID]
    # run again: the report is there now, so there is nothing left to report, and the message says where it looked
    again = playbook("playbooks/report_partial.yml", "-l", "specdec-demo", "-e", f"specdec_state_dir={host_state}",
                     "-e", f"specdec_results_dir={tmp_path / 'results2'}", "-e", "specdec_report_plots=false")
    assert again.returncode != 0 and f"{host_state}/runs on the host" in again.stdout


def test_promote_finds_the_run_in_the_hosts_history_and_fetches_its_report(host_state: Path, tmp_path: Path) -> None:
    first = playbook("playbooks/report_partial.yml", "-l", "specdec-demo", "-e", f"specdec_state_dir={host_state}",
                     "-e", f"specdec_results_dir={tmp_path / 'ab-job'}", "-e", "specdec_report_plots=false")
    assert first.returncode == 0, first.stdout[-2000:]
    env_file = tmp_path / "prod.env"
    env_file.write_text("LLAMA_ARG_PORT=8080\n")
    results = tmp_path / "promote-job"  # the promote job's controller: empty
    args = ["playbooks/promote.yml", "-l", "specdec-demo", "--check", "--diff", "-e", f"specdec_state_dir={host_state}",
            "-e", f"specdec_results_dir={results}", "-e", f"specdec_env_file={env_file}",
            "-e", "specdec_promote_config=draft-n3"]
    # the tiny models' draft has no WIN on the run's confirmatory endpoint: refused, naming its verdict
    refused = playbook(*args)
    assert refused.returncode != 0 and "has no WIN on run" in refused.stdout and "specdec_promote_force" in refused.stdout
    proc = playbook(*args, "-e", "specdec_promote_force=true")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert "FORCED (specdec_promote_force=true)" in proc.stdout
    fetched = results / "specdec-demo" / RUN_ID / "report.json"
    assert json.loads(fetched.read_text())["run_id"] == RUN_ID
    assert "# promoted: draft-n3" in proc.stdout and f"# run {RUN_ID} on specdec-demo" in proc.stdout
    assert env_file.read_text() == "LLAMA_ARG_PORT=8080\n"  # check mode
    assert not (host_state / "promoted").exists()


@pytest.mark.parametrize("bad", ["../../etc", "a/b"])
def test_promote_refuses_a_run_id_that_would_leave_the_results(host_state: Path, tmp_path: Path, bad: str) -> None:
    proc = playbook("playbooks/promote.yml", "-l", "specdec-demo", "--check", "-e", f"specdec_state_dir={host_state}",
                    "-e", f"specdec_results_dir={tmp_path / 'r'}", "-e", f"specdec_env_file={tmp_path / 'e.env'}",
                    "-e", "specdec_promote_config=draft-n3", "-e", f"specdec_promote_run={bad}")
    assert proc.returncode != 0
    assert "specdec_promote_run" in proc.stdout and "cannot name a results folder" in proc.stdout
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize("pb", ["spec-ab.yml", "playbooks/promote.yml", "playbooks/rollback.yml", "playbooks/build.yml",
                                "playbooks/deploy.yml"])
def test_playbooks_that_change_hosts_refuse_the_whole_inventory(pb: str) -> None:
    proc = playbook(pb)
    assert proc.returncode != 0
    assert "no hosts were named" in proc.stdout and "-l <host or group>" in proc.stdout
    assert "frank-dragoon, frank-zealot" in proc.stdout  # the message names the hosts it would have run on
    assert "specdec-demo" in proc.stdout  # the local demo host is not run on silently either


def test_require_unit_free_refuses_naming_the_holder_and_specdec_force_goes_ahead(tmp_path: Path) -> None:
    """playbooks/tasks/require_unit_free.yml (deploy, build and promote include it): an A/B's lock stops the host
    before anything changes, naming the run; -e specdec_force=true goes ahead; a dead run's lock does not count."""
    from ansible_collections.llmfleet.specdec.plugins.module_utils.state import _host_state as hs

    state = tmp_path / "state"
    hs.acquire({"unit": "llama-server", "state_dir": str(state), "expires_after": 3600, "state_mode": 0o700,
                "owner": {"run_id": "20261130T120000Z-a1b2c3", "controller": "ctl-7", "pid": 4242}},
               run=lambda argv: (3, "inactive\n", ""), check_mode=False)
    book = tmp_path / "busy.yml"
    book.write_text(f"""---
- hosts: specdec-demo
  gather_facts: false
  tasks:
    - ansible.builtin.include_tasks: {ROOT}/playbooks/tasks/require_unit_free.yml
    - ansible.builtin.debug:
        msg: WENT AHEAD
""")
    refused = playbook(str(book), "-e", f"specdec_state_dir={state}")
    assert refused.returncode != 0 and "WENT AHEAD" not in refused.stdout
    assert "llama-server.service on specdec-demo is busy: held by run 20261130T120000Z-a1b2c3 from controller ctl-7" in (
        refused.stdout.replace("\\n", " "))
    forced = playbook(str(book), "-e", f"specdec_state_dir={state}", "-e", "specdec_force=true")
    assert forced.returncode == 0 and "WENT AHEAD" in forced.stdout and "specdec_force=true: going ahead" in forced.stdout
    lock = json.loads((state / "locks" / "llama-server.json").read_text())
    assert lock["run_id"] == "20261130T120000Z-a1b2c3"  # a query never takes or changes the lock
