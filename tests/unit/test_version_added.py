"""Every module's and option's ``version_added`` is a release this collection has reached (galaxy.yml's version).

A ``version_added`` ahead of galaxy.yml's version tells an operator a module or option is newer than the collection
they run; ansible-doc prints it as written.
"""
from __future__ import annotations

import ast
from pathlib import Path

import yaml

from ansible_collections.llmfleet.specdec.plugins.module_utils.common._version import parse

ROOT = Path(__file__).resolve().parents[2]
PLUGIN_DIRS = ("plugins/modules", "plugins/filter", "plugins/lookup", "plugins/action", "plugins/callback")


def _documentation(path: Path) -> dict:
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "DOCUMENTATION" for t in node.targets):
            return yaml.safe_load(ast.literal_eval(node.value)) or {}
    return {}


def _versions_added(doc: dict, where: str):
    if "version_added" in doc:
        yield where, str(doc["version_added"])
    for name, option in (doc.get("options") or {}).items():
        if isinstance(option, dict):
            yield from _versions_added(option, f"{where} option {name}")
    for name, option in (doc.get("suboptions") or {}).items():
        if isinstance(option, dict):
            yield from _versions_added(option, f"{where} suboption {name}")


def _all_versions_added():
    found = []
    for folder in PLUGIN_DIRS:
        for path in sorted((ROOT / folder).glob("*.py")):
            if path.name != "__init__.py":
                found += _versions_added(_documentation(path), f"{folder}/{path.name}")
    return found


def test_version_added_is_at_most_the_collection_version() -> None:
    galaxy = parse(str(yaml.safe_load((ROOT / "galaxy.yml").read_text(encoding="utf-8"))["version"]))
    found = _all_versions_added()
    assert any(where.startswith("plugins/modules/serving_unit_info.py") for where, _added in found)
    ahead = [f"{where}: {added}" for where, added in found if parse(added) > galaxy]
    assert not ahead, f"version_added ahead of galaxy.yml's version {galaxy}: {ahead}"
