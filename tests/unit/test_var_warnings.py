"""check_vars.yml's warnings: a name of the collection's prefixes that it does not know names the nearest known one;
an older name of a setting names the one to use (and keeps working)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from ansible_collections.llmfleet.specdec.plugins.plugin_utils.steps._steps_vars import DEPRECATED, known_names, var_notes

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def test_a_misspelt_setting_names_the_nearest_known_one() -> None:
    notes = var_notes(["spec_ab_max_round", "specdec_endpont", "specdec_engine", "ansible_host"], "box1")
    assert notes == [
        "spec_ab_max_round (given for box1) is not a variable of llmfleet.specdec and is ignored; did you mean "
        "spec_ab_max_rounds?",
        "specdec_endpont (given for box1) is not a variable of llmfleet.specdec and is ignored; did you mean "
        "specdec_endpoint?"]


def test_a_name_far_from_every_known_one_points_to_the_variable_page() -> None:
    assert var_notes(["vllm_serve_zzzzzzzzzzzz"]) == [
        "vllm_serve_zzzzzzzzzzzz is not a variable of llmfleet.specdec and is ignored; see docs/variables.md for the "
        "variables it reads"]


def test_every_older_name_warns_with_the_one_to_use_and_the_one_is_known() -> None:
    known = known_names()
    for old, new in DEPRECATED.items():
        assert new in known and old in known, (old, new)  # both still read by the roles and playbooks
        assert var_notes([old]) == [f"{old} is deprecated, use {new}: it still works, and is removed in 1.0.0"]


def test_every_setting_of_the_variable_page_and_the_roles_is_known() -> None:
    import re

    import yaml

    known = known_names()
    page = set(re.findall(r"^\| `([a-z0-9_]+)`", (ROOT / "docs" / "variables.md").read_text(), re.M))
    defaults = {name for path in ROOT.glob("roles/*/defaults/main.yml")
                for name in (yaml.safe_load(path.read_text()) or {})}
    assert page and defaults and (page | defaults) - known == set()
    assert var_notes(page | defaults) == [n for n in var_notes(page | defaults) if "deprecated" in n]


def test_the_example_inventory_spells_each_a_b_setting_as_the_variable_page_does() -> None:
    """The inventory an operator copies uses the page's names (specdec_ab_*), not the roles' own spelling of the same
    setting (spec_ab_*, spec_preflight_*), nor an older name."""
    import re

    import yaml

    page = set(re.findall(r"^\| `([a-z0-9_]+)`", (ROOT / "docs" / "variables.md").read_text(), re.M))
    given = set()
    for path in (ROOT / "inventory").rglob("*.yml"):
        data = yaml.safe_load(path.read_text()) or {}
        stack = [data]
        while stack:
            node = stack.pop()
            if isinstance(node, dict):
                given.update(k for k in node if isinstance(k, str))
                stack.extend(node.values())
    assert {"specdec_ab_health_timeout", "specdec_ab_rollback_after", "specdec_configs"} <= given & page
    roles_spelling = sorted(n for n in given if n.startswith(("spec_ab_", "spec_preflight_")))
    assert roles_spelling == [], [(n, "specdec_" + n.split("_", 1)[1].replace("preflight_", "")) for n in roles_spelling]
    assert sorted(given & set(DEPRECATED)) == []


def test_the_play_warns_in_check_mode_and_goes_on(tmp_path: Path) -> None:
    """spec-ab.yml --check with a misspelt and an older name: both warned by the first play, which then goes on."""
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_NOCOLOR="1",
               LLMFLEET_CACHE=str(tmp_path))
    proc = subprocess.run([str(BIN / "ansible-playbook"), "spec-ab.yml", "-l", "specdec-demo", "--check",
                           "--tags", "no-such-tag", "-e", "spec_ab_max_round=2", "-e", "specdec_backend=llamacpp",
                           "-e", "specdec_endpont=http://127.0.0.1:1"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, check=False)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    assert ("[WARNING]: spec_ab_max_round (given for specdec-demo) is not a variable of llmfleet.specdec and is "
            "ignored; did you mean spec_ab_max_rounds?") in out
    assert "[WARNING]: specdec_endpont (given for specdec-demo) is not a variable" in out
    assert "did you mean specdec_endpoint?" in out
    assert "[WARNING]: specdec_backend is deprecated, use specdec_engine (given for specdec-demo)" in out
