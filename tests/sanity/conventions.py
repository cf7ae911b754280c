# Copyright: (c) 2026, llmfleet.specdec contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Names every file that misses one of the collection's conventions, so a new file added by anyone is caught.

- every Python file under plugins/ and every script under roles/*/files/ carries the GPL-3.0-or-later header
  (``--fix-headers`` inserts it, after a shebang, before the file's own first line);
- every filter a FilterModule exports has DOCUMENTATION, EXAMPLES and RETURN (plugins/filter/NAME.yml), so
  ``ansible-doc -t filter llmfleet.specdec.NAME`` renders;
- every role has README.md, meta/main.yml and meta/argument_specs.yml;
- galaxy.yml's license is the LICENSE file's.
Prints one line per file that misses something, then 'N problems'; exits non-zero on any.
"""
from __future__ import annotations

import ast
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
HEADER = [
    "# Copyright: (c) 2026, llmfleet.specdec contributors",
    "# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)",
]
# validate-modules looks for this phrase in a module's first 20 lines; the rest of the project follows suit.
LICENSE_PHRASE = "GNU General Public License v3.0+"


def header_files() -> list[Path]:
    files = sorted((ROOT / "plugins").rglob("*.py"))
    for script in sorted(ROOT.glob("roles/*/files/*")):
        if script.is_file() and script.read_bytes().startswith(b"#!"):
            files.append(script)
    return [path for path in files if "__pycache__" not in path.parts]


def has_header(path: Path) -> bool:
    return any(LICENSE_PHRASE in line for line in path.read_text(encoding="utf-8").splitlines()[:20])


def add_header(path: Path) -> None:
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    at = 1 if lines and lines[0].startswith("#!") else 0
    lines[at:at] = [line + "\n" for line in HEADER]
    path.write_text("".join(lines), encoding="utf-8")


def exported_filters(path: Path) -> list[str]:
    """The names a filter plugin's FilterModule.filters() returns, read from its source without importing it."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and node.name == "filters":
            for ret in ast.walk(node):
                if isinstance(ret, ast.Return) and isinstance(ret.value, ast.Dict):
                    return [key.value for key in ret.value.keys if isinstance(key, ast.Constant)]
    return []


def filter_problems() -> list[str]:
    problems = []
    for plugin in sorted((ROOT / "plugins" / "filter").glob("*.py")):
        for name in exported_filters(plugin):
            doc = plugin.parent / f"{name}.yml"
            if not doc.exists():
                problems.append(f"{doc.relative_to(ROOT)}: missing (filter {name} of {plugin.name} has no documentation)")
                continue
            data = yaml.safe_load(doc.read_text(encoding="utf-8")) or {}
            for key in ("DOCUMENTATION", "EXAMPLES", "RETURN"):
                if not data.get(key):
                    problems.append(f"{doc.relative_to(ROOT)}: no {key}")
            if (data.get("DOCUMENTATION") or {}).get("name") != name:
                problems.append(f"{doc.relative_to(ROOT)}: DOCUMENTATION.name is not {name}")
    return problems


def role_problems() -> list[str]:
    problems = []
    for role in sorted(path for path in (ROOT / "roles").iterdir() if path.is_dir()):
        for needed in ("README.md", "meta/main.yml", "meta/argument_specs.yml"):
            if not (role / needed).exists():
                problems.append(f"{(role / needed).relative_to(ROOT)}: missing")
    return problems


def license_problems() -> list[str]:
    galaxy = yaml.safe_load((ROOT / "galaxy.yml").read_text(encoding="utf-8"))
    problems = []
    if galaxy.get("license") != ["GPL-3.0-or-later"]:
        problems.append("galaxy.yml: license must be [GPL-3.0-or-later], the LICENSE file's")
    if "GNU GENERAL PUBLIC LICENSE" not in (ROOT / "LICENSE").read_text(encoding="utf-8")[:200]:
        problems.append("LICENSE: not the GPL-3.0 text")
    return problems


def main(argv: list[str]) -> int:
    fix = "--fix-headers" in argv
    problems = []
    for path in header_files():
        if not has_header(path):
            if fix:
                add_header(path)
                print(f"{path.relative_to(ROOT)}: license header added")
            else:
                problems.append(f"{path.relative_to(ROOT)}: no license header (run tests/sanity/conventions.py --fix-headers)")
    problems += filter_problems() + role_problems() + license_problems()
    for problem in problems:
        print(problem)
    print(f"{len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
