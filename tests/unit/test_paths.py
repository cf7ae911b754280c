"""Paths built from a host name or run id: one check (the report's safe_name), applied before anything is written."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from ansible_collections.llmfleet.specdec.plugins.module_utils.common._stats import ReportInputError
from ansible_collections.llmfleet.specdec.plugins.plugin_utils.report import _report as rp
from ansible_collections.llmfleet.specdec.plugins.plugin_utils.steps import _steps_paths as path_filters

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


@pytest.mark.parametrize("bad", ["host\n", "20261130T101010Z\n", "../../x", "a/b", "..", "", "x" * 129, "a\x00b",
                                 "-leading-dash", ".hidden"])
def test_safe_name_refuses_what_is_not_one_path_component(bad: str) -> None:
    with pytest.raises(ReportInputError, match="cannot name a results folder"):
        rp.safe_name(bad, "run.host")
    with pytest.raises(Exception, match=r"inventory_hostname: .* cannot name a results folder"):
        path_filters.safe_name(bad, "inventory_hostname")


@pytest.mark.parametrize("good", ["frank-dragoon", "gpu01.lab.example", "20261130T101010Z", "a@b+c_d"])
def test_safe_name_keeps_a_good_name(good: str) -> None:
    assert rp.safe_name(good, "run.host") == good == path_filters.safe_name(good, "inventory_hostname")


def test_spec_ab_stops_before_writing_for_a_host_named_like_a_path(tmp_path: Path) -> None:
    results = tmp_path / "deep" / "er" / "results"
    results.mkdir(parents=True)
    inventory = tmp_path / "hosts.ini"
    inventory.write_text("../../x ansible_connection=local ansible_python_interpreter=" + sys.executable + "\n")
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_NOCOLOR="1",
               ANSIBLE_COLLECTIONS_PATH=str(ROOT / ".build" / "collections"))
    proc = subprocess.run([str(BIN / "ansible-playbook"), "-i", str(inventory), str(ROOT / "tests/unit/paths/ab_host.yml"),
                           "-e", f"specdec_test_results={results}"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, check=False)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert "inventory_hostname: '../../x' cannot name a results folder" in out, out[-3000:]
    # nothing was written anywhere under the tree the raw name would have reached
    assert sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*")) == [
        "deep", "deep/er", "deep/er/results", "hosts.ini"]
