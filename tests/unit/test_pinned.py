"""The pinned llama.cpp tree has one home, ``_llamacpp.PINNED``: every other place reads it or is checked against it."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import yaml

from ansible_collections.llmfleet.specdec.plugins.module_utils.build import _build
from ansible_collections.llmfleet.specdec.plugins.module_utils.lint import _lint
from ansible_collections.llmfleet.specdec.plugins.module_utils.llamacpp import _flags, _llamacpp
from testbed import pinned, server

ROOT = Path(__file__).resolve().parents[2]
VERSION, COMMIT = _llamacpp.PINNED["llama_cpp_python"], _llamacpp.PINNED["commit"]


def test_the_test_bed_and_the_shell_read_the_same_pin() -> None:
    assert pinned.pinned() == _llamacpp.PINNED
    assert server.LLAMA_CPP_PYTHON_VERSION == VERSION
    # as the Makefile and build_llama_server.sh run it: a plain interpreter, from any directory
    out = subprocess.run([sys.executable, "-I", str(ROOT / "tests/testbed/pinned.py")], cwd="/",
                         capture_output=True, text=True, check=True)
    assert out.stdout.strip() == VERSION


def test_source_tree_names_the_pin_everywhere() -> None:
    assert VERSION in _llamacpp.SOURCE_TREE and COMMIT in _llamacpp.SOURCE_TREE
    assert _flags.SOURCE_TREE is _llamacpp.SOURCE_TREE
    assert not hasattr(_build, "SOURCE_TREE") and not hasattr(_lint, "SPEC_TYPES")


def test_no_second_copy_of_the_version_in_the_makefile_or_the_build_script() -> None:
    for name in ("Makefile", "tests/testbed/build_llama_server.sh", "tests/testbed/server.py"):
        assert VERSION not in (ROOT / name).read_text(), f"{name} spells the pinned version; read it from _llamacpp"


def test_molecule_build_vars_agree_with_the_pin() -> None:
    # molecule vars are YAML and stay literal; this keeps them in step with PINNED
    v = yaml.safe_load((ROOT / "molecule/build/vars.yml").read_text())
    assert v["specdec_build_v1"] == f"sdist-{VERSION}"
    assert v["specdec_build_v2"].startswith(f"sdist-{VERSION}")
    assert v["llamacpp_build_commit"] == COMMIT
