#!/usr/bin/env python3
"""Collection sanity checks, in the spirit of ansible-test sanity, that run without containers.

- every module's documentation renders with ansible-doc, and its EXAMPLES parse and use FQCNs;
- meta/runtime.yml's action group names exactly the modules that exist;
- module_utils and modules import only the standard library, ansible.module_utils and this
  collection (they run on fleet hosts with plain python3), and parse as Python 3.9;
- every changelog fragment is a mapping of known sections to lists of strings.
Prints one line per check and a closing 'N passed, N failed' line; exits non-zero on failure.
"""
from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
FQCN = "llmfleet.specdec"
STDLIB = set(sys.stdlib_module_names)
SECTIONS = {"major_changes", "minor_changes", "breaking_changes", "deprecated_features", "removed_features",
            "security_fixes", "bugfixes", "known_issues", "trivial"}
results: list[tuple[str, str | None]] = []


def check(name: str, problem: str | None) -> None:
    results.append((name, problem))
    print(("ok   " if problem is None else "FAIL ") + name + ("" if problem is None else f": {problem}"))


def modules() -> list[str]:
    return sorted(p.stem for p in (ROOT / "plugins/modules").glob("*.py") if not p.name.startswith("_"))


def check_imports(path: Path) -> str | None:
    tree = ast.parse(path.read_text(), filename=str(path), feature_version=(3, 9))
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        for name in names:
            top = name.split(".")[0]
            if top == "__future__" or top in STDLIB:
                continue
            if name.startswith("ansible.module_utils") or name.startswith(f"ansible_collections.{FQCN}.plugins.module_utils"):
                continue
            return f"imports {name!r}, which a fleet host's plain python3 does not have"
    return None


def main() -> int:
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_NOCOLOR="1")
    bindir = Path(sys.executable).parent
    names = modules()
    runtime = yaml.safe_load((ROOT / "meta/runtime.yml").read_text())
    group = sorted(runtime.get("action_groups", {}).get("specdec", []))
    check("meta/runtime.yml action group lists every module",
          None if group == names else f"group {group} != modules {names}")
    check("meta/runtime.yml requires_ansible", None if runtime.get("requires_ansible") else "missing")

    for name in names:
        proc = subprocess.run([str(bindir / "ansible-doc"), "-t", "module", "--json", f"{FQCN}.{name}"],
                              capture_output=True, text=True, env=env, cwd=ROOT, check=False)
        problem = None
        if proc.returncode != 0 or "WARNING" in proc.stderr:
            problem = (proc.stderr or proc.stdout).strip()[-400:]
        else:
            doc = json.loads(proc.stdout)[f"{FQCN}.{name}"]
            if not doc["doc"].get("short_description"):
                problem = "no short_description"
            examples = yaml.safe_load(doc.get("examples") or "") or []
            tasks = [t for t in examples if isinstance(t, dict)]
            if not tasks:
                problem = "EXAMPLES are empty or not YAML tasks"
            elif not any(f"{FQCN}.{name}" in t for t in tasks):
                problem = f"EXAMPLES never call {FQCN}.{name} by its FQCN"
            elif not doc.get("return"):
                problem = "RETURN is empty"
        check(f"ansible-doc renders {FQCN}.{name}", problem)

    for path in sorted((ROOT / "plugins/module_utils").rglob("*.py")) + sorted((ROOT / "plugins/modules").glob("*.py")):
        try:
            problem = check_imports(path)
        except SyntaxError as exc:
            problem = f"not Python 3.9 syntax: {exc}"
        first = path.read_text().splitlines()[0:2]
        if not any(line.startswith("#") and len(line) > 10 for line in first):
            problem = problem or "no one-line comment saying what the file is for"
        check(f"host-safe imports in {path.relative_to(ROOT)}", problem)

    for frag in sorted((ROOT / "changelogs/fragments").glob("*.y*ml")):
        data = yaml.safe_load(frag.read_text())
        problem = None
        if not isinstance(data, dict) or not data:
            problem = "not a mapping"
        else:
            for key, value in data.items():
                if key not in SECTIONS:
                    problem = f"unknown section {key!r}"
                elif not (isinstance(value, list) and all(isinstance(v, str) for v in value)):
                    problem = f"{key} is not a list of strings"
        check(f"changelog fragment {frag.name}", problem)

    failed = sum(1 for _dummy, p in results if p is not None)
    print(f"sanity: {len(results) - failed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
