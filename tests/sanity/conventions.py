# Copyright: (c) 2026, llmfleet.specdec contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Names every file that misses one of the collection's conventions, so a new file added by anyone is caught.

- every Python file under plugins/ and every script under roles/*/files/ carries the GPL-3.0-or-later header
  (``--fix-headers`` inserts it, after a shebang, before the file's own first line);
- every filter a FilterModule exports has DOCUMENTATION, EXAMPLES and RETURN (plugins/filter/NAME.yml), so
  ``ansible-doc -t filter llmfleet.specdec.NAME`` renders;
- every role has README.md, meta/main.yml and meta/argument_specs.yml;
- galaxy.yml's license is the LICENSE file's;
- docs/architecture.md lists every package and file of plugins/module_utils and plugins/plugin_utils (``bench/``,
  ``bench/_endpoint.py``) and every module, action plugin and role, each in the first column of the table under its
  heading (``_TABLES``), and everything those
  tables list exists; a private helper file named anywhere else on the page exists too; and each module_util's
  "runs on" cell says what the imports say (``runs_on``: "hosts" when a module imports it, directly or through
  other module_utils, since AnsiballZ ships it to the host; "controller" when an action, filter or plugin_util
  does).
- no file of plugins/module_utils or plugins/plugin_utils passes ``MAX_ROOM_LINES`` lines, but a generated table
  (its header says GENERATED): a room that grows past it is split along its seams (docs/architecture.md).
Prints one line per file that misses something, then 'N problems'; exits non-zero on any.
"""
from __future__ import annotations

import ast
import re
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


ARCHITECTURE = "docs/architecture.md"
# A private helper's file name as the page writes it (`_kv.py`, plugin_utils/verdicts/_judge.py), not part of a longer name.
_PRIVATE_FILE = re.compile(r"(?<![\w.-])(_[a-z0-9][a-z0-9_]*\.py)\b")
_HEADING = re.compile(r"^#+\s+(.*?)\s*$")
_FIRST_CELL = re.compile(r"^\|\s*`([^`]+)`\s*\|")
# The page's tables, by the start of the heading above each: what they list and where that lives.
_TABLES = {
    "plugins/module_utils": ("module_util", "plugins/module_utils/{}"),
    "plugins/plugin_utils": ("plugin_util", "plugins/plugin_utils/{}"),
    "Modules": ("module", "plugins/modules/{}.py"),
    "Action plugins": ("action plugin", "plugins/action/{}.py"),
    "Roles": ("role", "roles/{}"),
}


def tabled_names(text: str) -> dict[str, set[str]]:
    """The names in the first column of the tables under the headings of ``_TABLES``, by heading."""
    named: dict[str, set[str]] = {heading: set() for heading in _TABLES}
    current = None
    for line in text.splitlines():
        heading = _HEADING.match(line)
        if heading:
            current = next((key for key in _TABLES if heading.group(1).startswith(key)), None)
            continue
        cell = _FIRST_CELL.match(line)
        if current and cell:
            named[current].add(cell.group(1))
    return named


def _present(kind: str, folder: Path) -> set[str]:
    if not folder.is_dir():
        return set()
    if kind == "role":
        return {path.name for path in folder.iterdir() if path.is_dir()}
    if kind in ("module_util", "plugin_util"):
        # a package's own row is its folder (`bench/`), a file's is its path in the package (`bench/_endpoint.py`)
        return {str(path.relative_to(folder)) for path in folder.rglob("*.py")
                if path.name != "__init__.py" and "__pycache__" not in path.parts} | \
            {f"{path.parent.relative_to(folder)}/" for path in folder.rglob("__init__.py") if path.parent != folder}
    return {path.stem for path in folder.glob("*.py") if path.name != "__init__.py"}


_MU_PREFIX = "ansible_collections.llmfleet.specdec.plugins.module_utils."
_ROW = re.compile(r"^\|\s*`([^`]+)`\s*\|.*\|\s*([^|]+?)\s*\|\s*$")


def _module_util_file(dotted: str) -> str | None:
    """``bench._endpoint`` (after the module_utils prefix) as the file's path in module_utils, ``bench/_endpoint.py``."""
    parts = dotted.split(".")
    return "/".join(parts[:2]) + ".py" if len(parts) >= 2 else None


def _module_util_imports(path: Path) -> set[str]:
    """The module_utils a Python file imports, at any depth of the file (AnsiballZ's finder walks the whole tree), as
    paths in module_utils (``bench/_endpoint.py``)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith(_MU_PREFIX):
            package = node.module[len(_MU_PREFIX):]
            if "." in package:
                names.add(_module_util_file(package) or "")
            else:
                names |= {f"{package}/{alias.name}.py" for alias in node.names}
        elif isinstance(node, ast.Import):
            names |= {_module_util_file(a.name[len(_MU_PREFIX):]) or "" for a in node.names if a.name.startswith(_MU_PREFIX)}
    return names - {""}


def runs_on() -> dict[str, set[str]]:
    """For each module_util file: {"hosts"} when a module reaches it through imports, {"controller"} when an action
    plugin, filter or plugin_util does, both when both do."""
    mu = ROOT / "plugins" / "module_utils"
    graph = {str(path.relative_to(mu)): _module_util_imports(path) for path in mu.rglob("*.py")
             if path.name != "__init__.py" and "__pycache__" not in path.parts}

    def closure(start: set[str]) -> set[str]:
        seen: set[str] = set()
        todo = [n for n in start if n in graph]
        while todo:
            name = todo.pop()
            if name not in seen:
                seen.add(name)
                todo += [n for n in graph[name] if n in graph]
        return seen

    where: dict[str, set[str]] = {name: set() for name in graph}
    sides = {"hosts": ["modules"], "controller": ["action", "filter", "plugin_utils", "lookup", "callback"]}
    # A module with an action plugin of its name never runs on a host (the action does the work); its file is
    # documentation, whatever it imports for that.
    actions = {path.name for path in (ROOT / "plugins" / "action").glob("*.py")}
    for side, folders in sides.items():
        for folder in folders:
            for path in (ROOT / "plugins" / folder).rglob("*.py"):
                if folder == "modules" and path.name in actions:
                    continue
                for name in closure(_module_util_imports(path)):
                    where[name].add(side)
    return where


def runs_on_problems(text: str) -> list[str]:
    """The "runs on" cell of each plugins/module_utils row against ``runs_on()``."""
    problems = []
    where = runs_on()
    current = None
    for line in text.splitlines():
        heading = _HEADING.match(line)
        if heading:
            current = heading.group(1).startswith("plugins/module_utils")
            continue
        row = _ROW.match(line)
        if not (current and row) or row.group(1) not in where:
            continue
        name, cell = row.group(1), row.group(2)
        said = {side for side in ("hosts", "controller") if side in cell}
        real = where[name]
        if real and said != real:
            problems.append(f"{ARCHITECTURE}: {name} runs on {' and '.join(sorted(real))} by its importers, the page says "
                            f"{cell!r} (correct the cell)")
    return problems


def architecture_problems() -> list[str]:
    """docs/architecture.md against the tree: a file, module, action plugin or role it leaves out, or one it names
    that does not exist, means the page no longer describes the code."""
    doc = ROOT / ARCHITECTURE
    if not doc.exists():
        return [f"{ARCHITECTURE}: missing (it describes every module_util, plugin_util, module, action plugin and role)"]
    text = doc.read_text(encoding="utf-8")
    problems = []
    tabled = tabled_names(text)
    helpers: set[str] = set()
    for heading, (kind, pattern) in _TABLES.items():
        present = _present(kind, (ROOT / pattern.format("x")).parent)
        if kind in ("module_util", "plugin_util"):
            helpers |= {name.rsplit("/", 1)[-1] for name in present}
        for name in sorted(present - tabled[heading]):
            problems.append(f"{pattern.format(name)}: {kind} {name} not in the {heading} table of {ARCHITECTURE} "
                            "(add a row saying what it holds)")
        for name in sorted(tabled[heading] - present):
            problems.append(f"{ARCHITECTURE}: the {heading} table names {kind} {name}, but there is no "
                            f"{pattern.format(name)} (correct the page or add the {kind})")
    # Files named anywhere else on the page (the data flow, where each fact lives) must exist too.
    in_tables = tabled["plugins/module_utils"] | tabled["plugins/plugin_utils"]
    for name in sorted(set(_PRIVATE_FILE.findall(text)) - helpers - in_tables):
        problems.append(f"{ARCHITECTURE}: names {name}, which is in neither plugins/module_utils nor "
                        "plugins/plugin_utils (correct the page or add the file)")
    return problems + runs_on_problems(text)


MAX_ROOM_LINES = 750


def size_problems() -> list[str]:
    """Rooms over ``MAX_ROOM_LINES`` lines, a generated table aside."""
    problems = []
    for folder in ("module_utils", "plugin_utils"):
        for path in sorted((ROOT / "plugins" / folder).rglob("*.py")):
            lines = path.read_text(encoding="utf-8").splitlines()
            if len(lines) > MAX_ROOM_LINES and not any("GENERATED" in line for line in lines[:5]):
                problems.append(f"{path.relative_to(ROOT)}: {len(lines)} lines, over {MAX_ROOM_LINES} (split it along its "
                                "seams and give the new room a row in docs/architecture.md)")
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
    problems += filter_problems() + role_problems() + license_problems() + architecture_problems() + size_problems()
    for problem in problems:
        print(problem)
    print(f"{len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
