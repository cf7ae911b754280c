"""The fleet report shows each host's build era (issue 47): the build that measured its unit's promoted config, the
build the unit runs, and whether the build sentinel judged that upgrade; the steps that read it from the host's
promoted evidence and build record, the report's JSON and Markdown, and fleet_report.yml end to end on a local host.
spec_watch's own era is tests/unit/test_watch_build_era.py."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml
from test_fleet import entry, report

from ansible_collections.llmfleet.specdec.plugins.module_utils.build._build import FACTS_FILE
from ansible_collections.llmfleet.specdec.plugins.module_utils.watch import _drift
from ansible_collections.llmfleet.specdec.plugins.plugin_utils.report import _fleet
from ansible_collections.llmfleet.specdec.plugins.plugin_utils.steps._steps_fleet import fleet_build_era, fleet_build_record

ROOT = Path(__file__).resolve().parents[2]
OLD = {"version": "b10100", "build": "b10100", "backend": "cuda", "fingerprint": "aaaa", "commit": "c1",
       "backends": ["cpu", "cuda"]}
NEW = dict(OLD, version="b10200", build="b10200", fingerprint="bbbb", commit="c2")
VERDICT = {"unit": "llama-server.service", "build": "b10200-cuda", "config": "draft-n3", "accepted_slower": False,
           "regressions": [], "canary": {"acceptance": 0.912}, "production": {"acceptance": 0.912}}


def evidence(build: dict[str, Any] | None = None, record_path: str = "/etc/llmfleet-specdec/llamacpp-build.json") -> str:
    """The text of a promoted evidence file (promote.yml's), measured on ``build`` (default: the old build)."""
    build = OLD if build is None else build
    measured = {"schema": _drift.SNAPSHOT_SCHEMA, "build": build, "binary": None, "models": {},
                "build_record_path": record_path}
    return json.dumps({"schema": "llmfleet.specdec/promoted/1", "unit": "llama-server", "config": "draft-n3",
                       "report": {"run_id": "r1", "environment": {"measured_on": measured}}})


def test_the_step_reads_the_era_from_the_evidence_and_the_build_record() -> None:
    passed = fleet_build_era(evidence(), json.dumps(dict(NEW, sentinel=[VERDICT])), "llama-server")
    assert passed is not None and passed["config"] == "draft-n3" and passed["sentinel"]["config"] == "draft-n3"
    assert passed["measured_on"] == "b10100 cuda (fingerprint aaaa)" and passed["runs"] == "b10200 cuda (fingerprint bbbb)"
    forced = dict(VERDICT, accepted_slower=True, canary={"acceptance": 0.649})
    assert "ACCEPTED SLOWER" in fleet_build_era(evidence(), json.dumps(dict(NEW, sentinel=[forced])))["line"]
    unjudged = fleet_build_era(evidence(), json.dumps(NEW), "llama-server.service")
    assert unjudged["sentinel"] is None and "the sentinel did NOT judge" in unjudged["line"]
    assert fleet_build_era(evidence(), json.dumps(OLD))["same_build"]
    # no promotion: no era; a broken evidence or record: a line that says so
    assert fleet_build_era("", json.dumps(NEW)) is None
    assert "promoted evidence cannot be read (not JSON" in fleet_build_era("{", "")["line"]
    broken = fleet_build_era(evidence(), "[1]")
    assert broken["runs"] is None and broken["line"].endswith("(its build record cannot be read: not a JSON object)")
    # where the record is: the operator's, else the one the evidence was measured with, else the role's default
    assert fleet_build_record(evidence(record_path="/opt/b.json")) == "/opt/b.json"
    assert fleet_build_record(evidence(), "/srv/mine.json") == "/srv/mine.json"
    assert fleet_build_record("") == FACTS_FILE


def test_the_report_has_a_build_era_per_host_and_names_the_unjudged_upgrades() -> None:
    doc = report("a")
    runs = [entry("a", ["gpu_x"], doc, build_era=fleet_build_era(evidence(), json.dumps(dict(NEW, sentinel=[VERDICT])))),
            entry("b", ["gpu_x"], doc, build_era=fleet_build_era(evidence(), json.dumps(NEW))),
            entry("c", ["gpu_x"], doc, build_era=fleet_build_era(evidence(), json.dumps(OLD))),
            entry("d", ["gpu_x"], doc)]
    document = _fleet.build(runs)
    eras = {h["host"]: h["build_era"] for h in document["hosts"]}
    assert eras["a"]["sentinel"]["canary_acceptance"] == 0.912 and eras["d"] is None
    assert document["unjudged_upgrades"] == ["b"]
    assert json.loads(_fleet.to_json(document))["hosts"][0]["build_era"]["runs"] == "b10200 cuda (fingerprint bbbb)"
    md = _fleet.markdown(document)
    table = md.split("## Build era", 1)[1]
    assert ("| a | draft-n3 | b10100 cuda (fingerprint aaaa) | b10200 cuda (fingerprint bbbb) | passed the build "
            "sentinel on draft-n3: acceptance 91.2 % against 91.2 % |") in table
    assert "| b | draft-n3 | b10100 cuda (fingerprint aaaa) | b10200 cuda (fingerprint bbbb) | **an upgrade the build " \
           "sentinel did NOT judge** |" in table
    assert "| c | draft-n3 | b10100 cuda (fingerprint aaaa) | b10100 cuda (fingerprint aaaa) | the same build |" in table
    assert "| d | - | - | - | no promoted config |" in table
    assert _fleet.summary_lines(document)[-1].startswith("build era: the units of b run a build the build sentinel")
    # a report with no promotion anywhere says so; a malformed era is refused naming the host
    assert "No host has a promoted config" in _fleet.markdown(_fleet.build([entry("d", ["gpu_x"], doc)]))
    try:
        _fleet.build([entry("e", ["gpu_x"], doc, build_era="b10200")])
    except _fleet.FleetError as exc:
        assert "host e: its build_era is str" in str(exc)
    else:
        raise AssertionError("a build_era that is no era was accepted")


def test_fleet_report_yml_reads_the_era_from_the_hosts_state(tmp_path: Path) -> None:
    """The playbook on a local host: its A/B report, its promoted evidence and the build record that evidence names."""
    state = tmp_path / "state"
    doc = report("box1")
    (state / "runs" / str(doc["run_id"])).mkdir(parents=True)
    (state / "runs" / str(doc["run_id"]) / "report.json").write_text(json.dumps(doc))
    record = tmp_path / "llamacpp-build.json"
    record.write_text(json.dumps(dict(NEW, sentinel=[dict(VERDICT, accepted_slower=True, canary={"acceptance": 0.649})])))
    (state / "promoted").mkdir()
    (state / "promoted" / "llama-server.json").write_text(evidence(record_path=str(record)))
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(yaml.safe_dump({"all": {"children": {"gpu_x": {"hosts": {"box1": {
        "ansible_connection": "local", "ansible_python_interpreter": sys.executable, "ansible_become": False,
        "specdec_state_dir": str(state), "specdec_results_dir": str(tmp_path / "results")}}}}}}))
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_NOCOLOR="1",
               ANSIBLE_COLLECTIONS_PATH=str(ROOT / ".build" / "collections"))
    proc = subprocess.run([str(Path(sys.executable).parent / "ansible-playbook"), "-i", str(inventory), "-l", "box1",
                           str(ROOT / "playbooks" / "fleet_report.yml"), "-e", f"specdec_fleet_run={doc['run_id']}",
                           "-e", "specdec_fleet_name=era"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    written = json.loads((tmp_path / "results" / "_fleet" / "era" / "fleet.json").read_text())
    era = written["hosts"][0]["build_era"]
    assert era["config"] == "draft-n3" and era["sentinel"]["accepted_slower"] and era["sentinel"]["canary_acceptance"] == 0.649
    assert "**ACCEPTED SLOWER**" in (tmp_path / "results" / "_fleet" / "era" / "fleet.md").read_text()
