# Tests for tests/sanity/conventions.py, the check that names files missing a license header or documentation.
from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def conventions(tmp_path, monkeypatch):
    """The check, pointed at a minimal copy of the collection in tmp_path."""
    spec = importlib.util.spec_from_file_location("conventions", ROOT / "tests" / "sanity" / "conventions.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    for name in ("galaxy.yml", "LICENSE"):
        shutil.copy(ROOT / name, tmp_path / name)
    shutil.copytree(ROOT / "plugins" / "filter", tmp_path / "plugins" / "filter")
    shutil.copytree(ROOT / "roles" / "spec_preflight", tmp_path / "roles" / "spec_preflight")
    monkeypatch.setattr(module, "ROOT", tmp_path)
    return module


def test_the_collection_as_committed_has_no_problems(capsys):
    spec = importlib.util.spec_from_file_location("conventions", ROOT / "tests" / "sanity" / "conventions.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.main([]) == 0, capsys.readouterr().out


def test_a_copy_of_the_collection_passes(conventions, capsys):
    assert conventions.main([]) == 0, capsys.readouterr().out


def test_a_new_plugin_without_header_is_named_and_fixed(conventions, tmp_path, capsys):
    new = tmp_path / "plugins" / "module_utils" / "_new.py"
    new.parent.mkdir(parents=True)
    new.write_text("# Private to the collection: something new.\nfrom __future__ import annotations\n")
    assert conventions.main([]) == 1
    assert "plugins/module_utils/_new.py: no license header" in capsys.readouterr().out
    assert conventions.main(["--fix-headers"]) == 0
    lines = new.read_text().splitlines()
    assert lines[0].startswith("# Copyright") and "GNU General Public License v3.0+" in lines[1]
    assert lines[2] == "# Private to the collection: something new."


def test_a_new_filter_without_documentation_is_named(conventions, tmp_path, capsys):
    (tmp_path / "plugins" / "filter" / "extra.py").write_text(
        "class FilterModule:\n    def filters(self):\n        return {'brand_new': len}\n")
    assert conventions.main([]) == 1
    assert "plugins/filter/brand_new.yml: missing (filter brand_new of extra.py" in capsys.readouterr().out


def test_a_role_without_readme_is_named(conventions, tmp_path, capsys):
    (tmp_path / "roles" / "spec_preflight" / "README.md").unlink()
    assert conventions.main([]) == 1
    assert "roles/spec_preflight/README.md: missing" in capsys.readouterr().out
