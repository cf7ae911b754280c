"""spec_watch shows each unit's build era: the build its evidence was measured on, the build it runs, and whether the
build sentinel judged that upgrade (its verdict for the unit in the build record llamacpp_activate wrote)."""
from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any, Dict

from test_drift import _evidence, _Systemd

from ansible_collections.llmfleet.specdec.plugins.module_utils.watch import _drift as drift
from ansible_collections.llmfleet.specdec.plugins.module_utils.watch import _drift_host as host
from ansible_collections.llmfleet.specdec.plugins.plugin_utils.steps._steps_drift import watch_lines

OLD = {"version": "b10100", "build": "b10100", "backend": "cuda", "fingerprint": "aaaa", "commit": "c1",
       "backends": ["cpu", "cuda"]}
NEW = dict(OLD, version="b10200", build="b10200", fingerprint="bbbb", commit="c2")
VERDICT = {"unit": "llama-server.service", "build": "b10200-cuda", "config": "draft-n3", "accepted_slower": False,
           "regressions": [], "canary": {"acceptance": 0.912}, "production": {"acceptance": 0.912}}


def test_an_upgrade_the_sentinel_passed_names_both_builds_and_its_numbers() -> None:
    era = host.build_era(OLD, dict(NEW, sentinel=[VERDICT]), "llama-server.service")
    assert era["measured_on"] == "b10100 cuda (fingerprint aaaa)" and era["runs"] == "b10200 cuda (fingerprint bbbb)"
    assert not era["same_build"] and era["sentinel"]["config"] == "draft-n3"
    assert era["line"].endswith("an upgrade the sentinel judged on config 'draft-n3': acceptance 91.2 % against "
                                "91.2 %, passed")


def test_a_forced_upgrade_and_an_unjudged_one_say_so() -> None:
    forced = dict(VERDICT, accepted_slower=True, regressions=["acceptance ..."], canary={"acceptance": 0.649})
    era = host.build_era(OLD, dict(NEW, sentinel=[forced]), "llama-server.service")
    assert "acceptance 64.9 % against 91.2 %, ACCEPTED SLOWER" in era["line"] and era["sentinel"]["accepted_slower"]
    # a verdict for another unit is not this unit's; no verdict at all: not judged
    other = host.build_era(OLD, dict(NEW, sentinel=[dict(VERDICT, unit="other.service")]), "llama-server.service")
    assert other["sentinel"] is None and "the sentinel did NOT judge" in other["line"]
    assert host.build_era(OLD, dict(OLD), "llama-server.service")["line"].endswith(": the same build")
    assert "measured on an unrecorded build" in host.build_era(None, NEW, "llama-server.service")["line"]


def test_the_watch_reports_the_era_and_its_lines_show_it(tmp_path: Path) -> None:
    evidence: Dict[str, Any] = _evidence()
    record = tmp_path / "llamacpp-build.json"
    record.write_text(json.dumps(dict(NEW, sentinel=[VERDICT])))
    evidence["report"]["environment"] = {"measured_on": {"schema": drift.SNAPSHOT_SCHEMA, "build": OLD, "binary": None,
                                                         "models": {}, "build_record_path": str(record)}}
    (tmp_path / "promoted").mkdir()
    (tmp_path / "promoted" / "llama-server.json").write_text(json.dumps(evidence))
    result = host.watch({"unit": "llama-server", "state_dir": str(tmp_path), "window": 0, "max_age_days": 0},
                        run=_Systemd(dropin=False), now=lambda: dt.datetime(2026, 12, 1, tzinfo=dt.timezone.utc))
    assert result["build_era"]["sentinel"]["build"] == "b10200-cuda"
    assert "build-changed" in [f["kind"] for f in result["findings"]]  # the watch's finding stays as it was
    lines = watch_lines(result)
    assert lines[1].startswith("build era - llama-server.service: measured on b10100 cuda (fingerprint aaaa), runs "
                               "b10200 cuda (fingerprint bbbb): an upgrade the sentinel judged")
