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
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "architecture.md").write_text(MINIMAL_ARCHITECTURE)
    monkeypatch.setattr(module, "ROOT", tmp_path)
    return module


# docs/architecture.md for the minimal copy: no module_utils, plugin_utils, modules or action plugins, one role.
MINIMAL_ARCHITECTURE = """# Architecture

### plugins/module_utils (host code)

| file | holds | runs on |
| --- | --- | --- |

### plugins/plugin_utils (controller only)

| file | holds | runs on |
| --- | --- | --- |

### Modules

### Action plugins

### Roles

| role | what it does |
| --- | --- |
| `spec_preflight` | judges each config before anything is loaded |
"""


def _row(tmp_path, heading: str, row: str) -> None:
    """Adds ``row`` to the table under ``heading`` of the copy's docs/architecture.md."""
    doc = tmp_path / "docs" / "architecture.md"
    lines = doc.read_text().splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("#") and heading in line)
    while at + 1 < len(lines) and not lines[at + 1].startswith("#"):
        at += 1
    lines.insert(at, row)
    doc.write_text("\n".join(lines) + "\n")


def test_the_collection_as_committed_has_no_problems(capsys):
    spec = importlib.util.spec_from_file_location("conventions", ROOT / "tests" / "sanity" / "conventions.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.main([]) == 0, capsys.readouterr().out


def test_a_copy_of_the_collection_passes(conventions, capsys):
    assert conventions.main([]) == 0, capsys.readouterr().out


def test_a_new_plugin_without_header_is_named_and_fixed(conventions, tmp_path, capsys):
    new = tmp_path / "plugins" / "module_utils" / "bench" / "_new.py"
    new.parent.mkdir(parents=True)
    new.write_text("# Private to the collection: something new.\nfrom __future__ import annotations\n")
    _helper(tmp_path, "module_utils/bench", "__init__.py")
    _row(tmp_path, "plugins/module_utils", "| `bench/` | measuring | - | - |")
    _row(tmp_path, "plugins/module_utils", "| `bench/_new.py` | something new | hosts |")
    assert conventions.main([]) == 1
    assert "plugins/module_utils/bench/_new.py: no license header" in capsys.readouterr().out
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


def _helper(tmp_path, folder: str, name: str):
    path = tmp_path / "plugins" / folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("# Copyright: (c) 2026, llmfleet.specdec contributors\n"
                    "# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)\n")
    return path


def test_a_module_util_the_architecture_page_leaves_out_is_named(conventions, tmp_path, capsys):
    _helper(tmp_path, "module_utils/memory", "__init__.py")
    _helper(tmp_path, "module_utils/memory", "_kv.py")
    assert conventions.main([]) == 1
    out = capsys.readouterr().out
    assert "plugins/module_utils/memory/_kv.py: module_util memory/_kv.py not in the plugins/module_utils table" in out
    assert "plugins/module_utils/memory/: module_util memory/ not in the plugins/module_utils table" in out
    _row(tmp_path, "plugins/module_utils", "| `memory/` | memory | a server | kv_budget |")
    _row(tmp_path, "plugins/module_utils", "| `memory/_kv.py` | KV arithmetic | hosts |")
    assert conventions.main([]) == 0, capsys.readouterr().out


def test_a_module_util_tabled_under_its_old_flat_name_is_named(conventions, tmp_path, capsys):
    # The file moved into its package; a row that still names it flat describes a file that is not there.
    _helper(tmp_path, "module_utils/memory", "__init__.py")
    _helper(tmp_path, "module_utils/memory", "_kv.py")
    _row(tmp_path, "plugins/module_utils", "| `memory/` | memory | a server | kv_budget |")
    _row(tmp_path, "plugins/module_utils", "| `_kv.py` | KV arithmetic | hosts |")
    assert conventions.main([]) == 1
    out = capsys.readouterr().out
    assert "the plugins/module_utils table names module_util _kv.py, but there is no plugins/module_utils/_kv.py" in out
    assert "plugins/module_utils/memory/_kv.py: module_util memory/_kv.py not in the plugins/module_utils table" in out


def test_a_helper_listed_under_the_wrong_folder_is_named(conventions, tmp_path, capsys):
    # The page says the report moved to the controller's plugin_utils; the file is still in module_utils.
    _helper(tmp_path, "module_utils", "_report.py")
    _row(tmp_path, "plugins/plugin_utils", "| `report/_report.py` | the report | controller |")
    assert conventions.main([]) == 1
    out = capsys.readouterr().out
    assert "plugins/module_utils/_report.py: module_util _report.py not in the plugins/module_utils table" in out
    assert ("the plugins/plugin_utils table names plugin_util report/_report.py, but there is no "
            "plugins/plugin_utils/report/_report.py") in out


def test_a_file_the_page_names_that_does_not_exist_is_named(conventions, tmp_path, capsys):
    doc = tmp_path / "docs" / "architecture.md"
    doc.write_text(doc.read_text() + "\nShape names live in `_shapes.py` (SHAPES).\n")
    assert conventions.main([]) == 1
    assert "docs/architecture.md: names _shapes.py, which is in neither" in capsys.readouterr().out
    _helper(tmp_path, "module_utils/bench", "__init__.py")
    _helper(tmp_path, "module_utils/bench", "_shapes.py")
    _row(tmp_path, "plugins/module_utils", "| `bench/` | measuring | - | - |")
    _row(tmp_path, "plugins/module_utils", "| `bench/_shapes.py` | shape names | hosts |")
    assert conventions.main([]) == 0, capsys.readouterr().out


def test_modules_action_plugins_and_roles_must_match_their_tables(conventions, tmp_path, capsys):
    _helper(tmp_path, "modules", "kv_budget.py")
    _helper(tmp_path, "action", "spec_report.py")
    _row(tmp_path, "Roles", "| `spec_ab` | the A/B protocol |")
    assert conventions.main([]) == 1
    out = capsys.readouterr().out
    assert "plugins/modules/kv_budget.py: module kv_budget not in the Modules table" in out
    assert "plugins/action/spec_report.py: action plugin spec_report not in the Action plugins table" in out
    assert "the Roles table names role spec_ab, but there is no roles/spec_ab" in out
    _row(tmp_path, "Modules", "| `kv_budget` | sizes the KV cache | host |")
    _row(tmp_path, "Action plugins", "| `spec_report` | judges a run |")
    (tmp_path / "roles" / "spec_ab").mkdir()
    for needed in ("README.md", "meta/main.yml", "meta/argument_specs.yml"):
        (tmp_path / "roles" / "spec_ab" / needed).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "roles" / "spec_ab" / needed).write_text("---\n")
    assert conventions.main([]) == 0, capsys.readouterr().out


def test_a_collection_without_the_architecture_page_is_named(conventions, tmp_path, capsys):
    (tmp_path / "docs" / "architecture.md").unlink()
    assert conventions.main([]) == 1
    assert "docs/architecture.md: missing" in capsys.readouterr().out


def test_a_runs_on_cell_that_the_imports_contradict_is_named():
    spec = importlib.util.spec_from_file_location("conventions_real", ROOT / "tests" / "sanity" / "conventions.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    text = (ROOT / "docs" / "architecture.md").read_text()
    assert module.runs_on_problems(text) == []
    # _stats.py runs on hosts too (spec_bench -> _load -> _loadgate -> _stats): a page saying "controller" is wrong.
    assert module.runs_on()["common/_stats.py"] == {"hosts", "controller"}
    row = next(line for line in text.splitlines() if line.startswith("| `common/_stats.py` |"))
    wrong = text.replace(row, row[:row.rindex("|", 0, len(row) - 1)] + "| controller |")
    problems = module.runs_on_problems(wrong)
    assert len(problems) == 1 and "common/_stats.py runs on controller and hosts" in problems[0]
    # A module with an action plugin of its name is documentation only: what it imports does not run on hosts.
    assert module.runs_on()["common/_report_args.py"] == {"controller"}


def test_a_room_over_the_line_limit_is_named_but_a_generated_table_is_not(conventions, tmp_path):
    mu = tmp_path / "plugins" / "module_utils"
    mu.mkdir(parents=True)
    header = "# Copyright: (c) 2026, llmfleet.specdec contributors\n"
    (mu / "bench").mkdir()
    (mu / "bench" / "_big.py").write_text(header + "x = 1\n" * conventions.MAX_ROOM_LINES)
    (mu / "_table.py").write_text(header + "# GENERATED - do not edit\n" + "x = 1\n" * 2000)
    (mu / "_small.py").write_text(header + "x = 1\n" * 10)
    problems = conventions.size_problems()
    assert len(problems) == 1 and problems[0].startswith("plugins/module_utils/bench/_big.py: 751 lines, over 750")
