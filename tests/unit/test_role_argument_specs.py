"""Every role's meta/argument_specs.yml parses into options with only argument-spec keys.

A flow-style description with a comma (``{description: Warm-up requests, not measured.}``) cuts the
sentence and adds a stray key (``not measured.``) that ansible-doc renders and the spec check ignores.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
SPEC_KEYS = {"type", "default", "description", "choices", "elements", "required", "options", "no_log",
             "aliases", "version_added", "required_if", "mutually_exclusive", "required_together",
             "required_one_of", "apply_defaults"}
ROLES = sorted(p.parent.parent.name for p in ROOT.glob("roles/*/meta/argument_specs.yml"))


def _options(options: dict[str, Any], where: str) -> list[tuple[str, dict[str, Any]]]:
    out = []
    for name, spec in options.items():
        out.append((f"{where}.{name}", spec))
        if isinstance(spec, dict) and isinstance(spec.get("options"), dict):
            out += _options(spec["options"], f"{where}.{name}")
    return out


@pytest.mark.parametrize("role", ROLES)
def test_options_hold_only_argument_spec_keys(role: str) -> None:
    spec = yaml.safe_load((ROOT / "roles" / role / "meta" / "argument_specs.yml").read_text())
    for entry, body in spec["argument_specs"].items():
        for name, option in _options(body.get("options") or {}, f"{role}:{entry}"):
            assert isinstance(option, dict), name
            stray = sorted(set(option) - SPEC_KEYS)
            assert stray == [], f"{name}: stray keys {stray} (a flow-style description cut at a comma?)"
            description = option.get("description")
            assert isinstance(description, (str, list)) and description, name


def test_spec_ab_warmup_description_is_whole() -> None:
    spec = yaml.safe_load((ROOT / "roles" / "spec_ab" / "meta" / "argument_specs.yml").read_text())
    assert spec["argument_specs"]["main"]["options"]["spec_ab_warmup"]["description"] == \
        "Warm-up requests, not measured."


@pytest.mark.parametrize("role", ROLES)
def test_a_default_is_one_of_its_choices(role: str) -> None:
    spec = yaml.safe_load((ROOT / "roles" / role / "meta" / "argument_specs.yml").read_text())
    for entry, body in spec["argument_specs"].items():
        for name, option in _options(body.get("options") or {}, f"{role}:{entry}"):
            if "choices" in option and option.get("default") is not None:
                assert option["default"] in option["choices"], name


BAD_VALUE = """
- name: A bad value for a role variable
  hosts: localhost
  gather_facts: false
  tasks:
    - name: The role, with the bad value
      ansible.builtin.include_role:
        name: llmfleet.specdec.llamacpp_build
      vars:
        llamacpp_build_version: b10133
        llamacpp_build_backend: metal
"""


def test_a_value_outside_the_choices_fails_at_the_roles_start_naming_the_variable(tmp_path: Path) -> None:
    import os
    import subprocess
    import sys

    (tmp_path / "bad.yml").write_text(BAD_VALUE)
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_NOCOLOR="1",
               ANSIBLE_COLLECTIONS_PATH=str(ROOT / ".build" / "collections"))
    proc = subprocess.run([str(Path(sys.executable).parent / "ansible-playbook"), "--check", "-i", "localhost,",
                           "-c", "local", str(tmp_path / "bad.yml")], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=120, check=False)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert "Validating arguments against arg spec" in out and "llamacpp_build_backend" in out and "metal" in out
    assert "Check the toolchain" not in out  # nothing after the validation ran
