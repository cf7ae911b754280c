"""spec_ab.yml (and the root spec-ab.yml), preflight.yml, rollback.yml, report_partial.yml and fleet_report.yml: the
inventory is in charge, the named hosts are the targets, and a play with nothing to do fails saying what is missing.

Through ansible-playbook on the local demo host and --list-hosts on one's own inventory; the real runs on systemd
are molecule/ab (the A/B, its dry run and the slow box), molecule/abfaults (report_partial) and molecule/deadman
(rollback).
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from testbed.models import write_standard_set

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
PLAYBOOKS = ["spec-ab.yml", "playbooks/spec_ab.yml", "playbooks/preflight.yml", "playbooks/rollback.yml",
             "playbooks/report_partial.yml", "playbooks/fleet_report.yml"]
CHANGING = ["playbooks/spec_ab.yml", "playbooks/rollback.yml", "playbooks/report_partial.yml"]


def playbook(*args: str, inventory: str | None = None, cache: Path | None = None) -> subprocess.CompletedProcess:
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_NOCOLOR="1",
               ANSIBLE_COLLECTIONS_PATH=str(ROOT / ".build" / "collections"))
    if cache is not None:
        env["LLMFLEET_CACHE"] = str(cache)
    argv = [str(BIN / "ansible-playbook"), *(["-i", inventory] if inventory else []), *args]
    return subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, check=False)


def said(proc: subprocess.CompletedProcess) -> str:
    return " ".join((proc.stdout + proc.stderr).split())


@pytest.mark.parametrize("pb", PLAYBOOKS)
def test_no_play_sets_vars_that_would_outrank_the_inventory(pb: str) -> None:
    for play in yaml.safe_load((ROOT / pb).read_text()):
        assert "vars" not in play and "vars_files" not in play, f"{pb}: play {play.get('name')!r} sets vars"


@pytest.mark.parametrize("pb", CHANGING)
def test_the_first_play_checks_the_named_hosts(pb: str) -> None:
    first = yaml.safe_load((ROOT / pb).read_text())[0]
    assert first["hosts"] == "all"
    imports = [t.get("ansible.builtin.import_tasks") for t in first["tasks"]]
    # then the operator variables' check (tests/unit/test_check_vars.py) where the playbook changes hosts
    assert imports in (["tasks/require_hosts.yml"], ["tasks/require_hosts.yml", "tasks/check_vars.yml"])


def test_the_fleet_report_reads_every_host_unless_told_but_refuses_a_pattern_naming_none() -> None:
    proc = playbook("playbooks/fleet_report.yml", "-e", "specdec_target_hosts=frank-dragon")
    assert proc.returncode != 0 and "specdec_target_hosts=frank-dragon names no host" in said(proc), said(proc)


@pytest.fixture
def own_inventory(tmp_path: Path) -> str:
    """An operator's own inventory: no group named 'fleet', one host in a GPU family group of its own."""
    path = tmp_path / "hosts.yml"
    path.write_text(yaml.safe_dump({"all": {"children": {"gpu_sm89": {"hosts": {"my-box": {
        "ansible_host": "my-box.example.invalid"}, "other-box": {"ansible_host": "other-box.example.invalid"}}}}}}))
    return str(path)


def test_a_limit_of_ones_own_inventory_is_what_each_play_targets(own_inventory: str) -> None:
    # one ansible-playbook lists them all, in turn
    proc = playbook(*PLAYBOOKS, "-l", "my-box", "--list-hosts", inventory=own_inventory)
    assert proc.returncode == 0, said(proc)
    books = proc.stdout.split("\nplaybook: ")[1:]
    assert len(books) == len(PLAYBOOKS), proc.stdout
    for book in books:
        plays = book.split("play #")[1:]
        assert plays and all("my-box" in block and "other-box" not in block for block in plays), book


@pytest.mark.parametrize("pb", CHANGING)
def test_no_named_host_and_a_pattern_naming_none_are_refused(pb: str) -> None:
    proc = playbook(pb)
    assert proc.returncode != 0 and "no hosts were named" in said(proc), said(proc)
    proc = playbook(pb, "-l", "specdec-demo", "-e", "specdec_target_hosts=frank-dragon")
    assert proc.returncode != 0 and "specdec_target_hosts=frank-dragon names no host" in said(proc), said(proc)


def test_rollback_keeps_its_older_host_variable() -> None:
    proc = playbook("playbooks/rollback.yml", "-e", "specdec_rollback_hosts=specdec-demo", "--list-hosts")
    assert proc.returncode == 0 and "specdec-demo" in proc.stdout, said(proc)


def test_a_preflight_with_no_configs_fails_saying_what_is_missing() -> None:
    proc = playbook("playbooks/preflight.yml", "-l", "specdec-demo", "-e", '{"specdec_configs": []}')
    assert proc.returncode != 0
    assert "specdec-demo has no configs to preflight: give specdec_configs" in said(proc)


def test_a_preflight_with_no_device_and_no_env_fails_naming_both(tmp_path: Path) -> None:
    write_standard_set(tmp_path / "demo-models")
    proc = playbook("playbooks/preflight.yml", "-l", "specdec-demo", "-e", "specdec_cpu_only=false",
                    "-e", '{"specdec_base_env": {}}', "-e", f"specdec_env_file={tmp_path}/none.env", cache=tmp_path)
    text = said(proc)
    assert proc.returncode != 0, text
    # (this machine has no GPU: gpu_info finds none)
    assert "no device to size against: no GPU was found" in text and "specdec_cpu_only: true" in text
    assert f"no production env: no env file at {tmp_path}/none.env" in text
    # the table names no source for a base env that is not there
    assert "production: inventory (spec_preflight_base_env)" not in text
    assert f"production: none - no live unit read, no env file at {tmp_path}/none.env" in text


def test_host_vars_decide_the_a_b_timers(tmp_path: Path) -> None:
    """A host_var wins over the role's defaults (the issue: a host_var of 600 still gave 120): the dry run's plan
    uses the inventory's health timeout and budget, and a plan over that budget is refused before anything."""
    write_standard_set(tmp_path / "demo-models")
    inventory = tmp_path / "inventory"
    (inventory / "host_vars").mkdir(parents=True)
    (inventory / "hosts.yml").write_text((ROOT / "inventory" / "hosts.yml").read_text())
    demo = yaml.safe_load((ROOT / "inventory" / "host_vars" / "specdec-demo.yml").read_text())
    demo.update(spec_ab_health_timeout=77, spec_ab_rollback_after=700, spec_ab_decode_rate=50,
                spec_ab_load_seconds=3, spec_ab_budget_minutes=1, specdec_state_dir=str(tmp_path / "state"),
                spec_ab_results_dir=str(tmp_path / "results"), ansible_become=False)
    demo["specdec_configs"] = [c for c in demo["specdec_configs"] if c["name"] in ("baseline", "ngram-mod")]
    (inventory / "host_vars" / "specdec-demo.yml").write_text(yaml.safe_dump(demo))
    proc = playbook("--check", "spec-ab.yml", "-l", "specdec-demo", inventory=str(inventory / "hosts.yml"),
                    cache=tmp_path)
    text = said(proc)
    assert "timers: health timeout 77 s (given); dead-man at least 700 s" in text
    assert "decode 50.0 tok/s from spec_ab_decode_rate (inventory)" in text
    assert "load: 3 s from spec_ab_load_seconds (inventory)" in text
    assert proc.returncode != 0 and "over spec_ab_budget_minutes (1 min)" in text and "Nothing was changed" in text
    # the last task's name is true in check mode: nothing ran, no partial report was kept
    assert "TASK [This host's dry run failed (check mode - nothing was started, changed or kept)]" in text
    last = proc.stdout.split("TASK [This host's dry run failed")[-1].split("PLAY RECAP")[0]
    assert "fatal: [specdec-demo]" in last and "over spec_ab_budget_minutes" in last, last
    assert not (tmp_path / "state").exists() and not (tmp_path / "results").exists()
