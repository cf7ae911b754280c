"""spec_watch's node_exporter textfile (issue 25), read back with Prometheus' own parser, and the example alert rules."""
from __future__ import annotations

import datetime as dt
import json
import os
import re
import shutil
import stat
import subprocess
from pathlib import Path

import pytest
import yaml
from ansible.module_utils.testing import patch_module_args
from prometheus_client.parser import text_string_to_metric_families
from test_drift import _evidence, _Systemd

from ansible_collections.llmfleet.specdec.plugins.module_utils.common._errors import SpecdecError
from ansible_collections.llmfleet.specdec.plugins.module_utils.watch import _drift_host as host
from ansible_collections.llmfleet.specdec.plugins.module_utils.watch import _drift_textfile as textfile
from ansible_collections.llmfleet.specdec.plugins.modules import spec_watch

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "examples" / "prometheus" / "llmfleet-specdec-rules.yml"
NOW = dt.datetime(2026, 12, 1, tzinfo=dt.timezone.utc)


def _families(text: str) -> dict:
    return {f.name: f for f in text_string_to_metric_families(text)}


def _value(families: dict, name: str, **labels) -> float:
    [sample] = [s for s in families[name].samples if all(s.labels.get(k) == v for k, v in labels.items())]
    return sample.value


def _watch(tmp_path: Path, lock: dict | None = None) -> dict:
    (tmp_path / "promoted").mkdir(exist_ok=True)
    (tmp_path / "promoted" / "llama-server.json").write_text(json.dumps(_evidence()))
    if lock is not None:
        (tmp_path / "locks").mkdir(exist_ok=True)
        (tmp_path / "locks" / "llama-server.json").write_text(json.dumps(lock))
    return host.watch({"unit": "llama-server", "state_dir": str(tmp_path), "window": 0, "max_age_days": 0,
                       "build_record": str(tmp_path / "none.json")}, run=_Systemd(), now=lambda: NOW)


def test_a_watch_result_parses_as_prometheus_reads_it(tmp_path: Path) -> None:
    stale = {"run_id": "r0", "expires_epoch": int(NOW.timestamp()) - 86400}
    result = _watch(tmp_path, stale)
    # a window's counters, as a watch with window > 0 records them
    result["live"] = {"window": {"delta": {"draft_tokens": 200, "accepted_tokens": 150, "drafts": 50, "seconds": 300}}}
    fam = _families(textfile.render(result, NOW.timestamp()))
    unit = "llama-server.service"
    assert _value(fam, "llmfleet_specdec_watch_timestamp_seconds", unit=unit) == NOW.timestamp()
    assert _value(fam, "llmfleet_specdec_promoted_info", unit=unit, config="draft-n3",
                  run_id="20261130T120000Z") == 1
    # the band of test_drift's evidence: 0.6-0.9 acceptance over its rounds and shapes
    assert _value(fam, "llmfleet_specdec_measured_acceptance", unit=unit, bound="low") == pytest.approx(0.6)
    assert _value(fam, "llmfleet_specdec_measured_acceptance", unit=unit, bound="high") == pytest.approx(0.9)
    assert _value(fam, "llmfleet_specdec_measured_mean_accepted_length", unit=unit, bound="high") == pytest.approx(3.7)
    assert _value(fam, "llmfleet_specdec_live_acceptance", unit=unit) == 0.75
    assert _value(fam, "llmfleet_specdec_live_mean_accepted_length", unit=unit) == 4.0
    assert _value(fam, "llmfleet_specdec_evidence_age_seconds", unit=unit) == (NOW - dt.datetime(
        2026, 11, 30, 12, 10, tzinfo=dt.timezone.utc)).total_seconds()
    findings = {s.labels["finding"]: (s.labels["severity"], s.value) for s in fam["llmfleet_specdec_finding"].samples}
    assert set(findings) == set(textfile.kinds())  # one series per kind, found or not
    found = {k for k, (_sev, v) in findings.items() if v == 1}
    assert found == {f["kind"] for f in result["findings"]} >= {"stale-lock", "override-active", "unit-not-running"}
    assert findings["stale-lock"][0] == "info" and findings["override-active"][0] == "drift"
    assert _value(fam, "llmfleet_specdec_drift", unit=unit) == 1
    assert all(f.type == "gauge" and f.documentation for f in fam.values())
    promtool = shutil.which("promtool")
    if promtool:  # where promtool is installed (Debian's prometheus package), its linter reads the file too
        done = subprocess.run([promtool, "check", "metrics"], input=textfile.render(result, NOW.timestamp()),
                              capture_output=True, text=True, check=False)
        assert done.returncode == 0, done.stdout + done.stderr


def test_labels_are_escaped_and_a_bare_result_still_parses() -> None:
    odd = 'a "quoted"\\config\nwith a newline'
    result = {"unit": "llama-server.service", "config": odd, "run_id": "r1", "findings": [], "measured": None}
    fam = _families(textfile.render(result, 1.5))
    assert _value(fam, "llmfleet_specdec_promoted_info", config=odd) == 1
    assert "llmfleet_specdec_live_acceptance" not in fam  # no window, no live series (not a made-up 0)
    bare = _families(textfile.render({"unit": "u.service", "findings": [{"kind": "no-evidence"}]}, 2.0))
    assert _value(bare, "llmfleet_specdec_promoted_info", config="") == 0
    assert _value(bare, "llmfleet_specdec_finding", finding="no-evidence") == 1


def test_the_file_is_written_whole_and_readable_by_node_exporter(tmp_path: Path) -> None:
    out = textfile.write(str(tmp_path), "llama-server.service", "x 1\n")
    path = tmp_path / "llmfleet_specdec_llama-server.prom"
    assert out == {"path": str(path), "written": True} and path.read_text() == "x 1\n"
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    textfile.write(str(tmp_path), "llama-server.service", "x 2\n")
    assert path.read_text() == "x 2\n" and sorted(os.listdir(tmp_path)) == [path.name]  # replaced, no temp left
    assert textfile.write(str(tmp_path), "other", "y 1\n", check_mode=True)["written"] is False
    assert not (tmp_path / "llmfleet_specdec_other.prom").exists()
    with pytest.raises(SpecdecError, match="must be an absolute path"):
        textfile.write("relative", "u", "")
    with pytest.raises(SpecdecError, match="no such directory"):
        textfile.write(str(tmp_path / "missing"), "u", "")


def test_a_symlink_swapped_in_for_the_temp_file_gets_no_chmod(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # the collector directory is often writable by node_exporter's user: between the write and the rename, that
    # user swaps the temp name for a link to a file of root's; the watch (as root) must not change that file's mode
    victim = tmp_path / "victim"
    victim.write_text("secret")
    victim.chmod(0o600)
    collector = tmp_path / "collector"
    collector.mkdir()
    real_fsync = os.fsync

    def swap(fd: int) -> None:
        real_fsync(fd)
        (temp,) = [p for p in collector.iterdir() if p.name.endswith(".tmp")]
        temp.unlink()
        temp.symlink_to(victim)

    monkeypatch.setattr(textfile.os, "fsync", swap)
    textfile.write(str(collector), "llama-server.service", "x 1\n")
    assert stat.S_IMODE(victim.stat().st_mode) == 0o600 and victim.read_text() == "secret"


def test_the_module_refuses_a_missing_directory_before_it_watches(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = {"state_dir": str(tmp_path), "window": 300, "textfile_dir": str(tmp_path / "nope")}
    with patch_module_args(args), pytest.raises(SystemExit):
        spec_watch.main()  # would wait 300 s, and call systemctl, if it watched first
    out = json.loads(capsys.readouterr().out)
    assert out["failed"] and "textfile_dir" in out["msg"] and "no such directory" in out["msg"]


def _rule_metrics(expr: str) -> set[str]:
    return set(re.findall(r"\b(llmfleet_specdec_[a-z_]+)", expr))


def test_the_example_alert_rules_read_series_the_file_has(tmp_path: Path) -> None:
    rules = yaml.safe_load(RULES.read_text())["groups"][0]["rules"]
    result = _watch(tmp_path)
    result["live"] = {"window": {"delta": {"draft_tokens": 200, "accepted_tokens": 150, "drafts": 50}}}
    written = set(_families(textfile.render(result, NOW.timestamp())))
    kinds = set(textfile.kinds())
    for rule in rules:
        assert rule["alert"].startswith("Specdec") and rule["labels"]["severity"] in ("critical", "warning", "info")
        used = _rule_metrics(rule["expr"])
        assert used and used <= written, (rule["alert"], used - written)
        for kind in re.findall(r'finding="([^"]+)"', rule["expr"]):
            assert kind in kinds, (rule["alert"], kind)
    assert {r["alert"] for r in rules} >= {"SpecdecDrift", "SpecdecOverrideLeftActive", "SpecdecWatchStopped"}
    promtool = shutil.which("promtool")
    if promtool:  # where promtool is installed (Debian's prometheus package), the rules are checked by it too
        done = subprocess.run([promtool, "check", "rules", str(RULES)], capture_output=True, text=True, check=False)
        assert done.returncode == 0, done.stdout + done.stderr
