# Regenerates plugins/module_utils/llamacpp/_flags_table.py from the pinned tree's common/arg.cpp (and reads arg.cpp for tests).
"""llama-server's option table, read from ``common/arg.cpp`` of the pinned llama.cpp tree.

``server_option_rows`` walks every ``add_opt(common_arg(...))`` that ``common_params_parser_init``
keeps for llama-server, in arg.cpp's order; ``server_options_from_arg_cpp`` is the same as a set,
for ``tests/integration/test_lint_server.py``'s check against ``_flags``. Run as a script it
writes ``plugins/module_utils/llamacpp/_flags_table.py`` (after a change of ``_llamacpp.PINNED`` and
``make llama-server``, which unpacks the tree)::

    python3 tests/testbed/flags_table.py [PATH/TO/common/arg.cpp]

Standard library only; the default arg.cpp is the cached tree of the pinned version.
"""
from __future__ import annotations

import os
import re
import sys
from pathlib import Path

if not __package__:  # run as a script (see the docstring): make the test bed importable as it is under pytest
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from testbed.pinned import LLAMA_CPP_PYTHON_VERSION

ROOT = Path(__file__).resolve().parents[2]
TABLE = ROOT / "plugins" / "module_utils" / "llamacpp" / "_flags_table.py"


def _skip_string(s: str, i: int) -> int:
    j = i + 1
    while s[j] != '"':
        j += 2 if s[j] == "\\" else 1
    return j + 1


def _code(s: str, i: int = 0):
    """(index, character) of the C++ code from s[i] on, with strings, char literals and // comments
    skipped: brackets and commas inside them do not count."""
    j = i
    while j < len(s):
        c = s[j]
        if c == '"':
            j = _skip_string(s, j)
        elif c == "'":
            j += 4 if s[j + 1] == "\\" else 3
        elif s.startswith("//", j):
            j = s.index("\n", j)
        else:
            yield j, c
            j += 1


def _close(s: str, i: int) -> int:
    """Index of the bracket closing the one at s[i]."""
    depth = 0
    for j, c in _code(s, i):
        if c in "({[":
            depth += 1
        elif c in ")}]":
            depth -= 1
            if depth == 0:
                return j
    raise ValueError("unbalanced")


def _top_level_params(s: str) -> list[str]:
    parts, depth, start = [], 0, 0
    for j, c in _code(s):
        if c in "({[":
            depth += 1
        elif c in ")}]":
            depth -= 1
        elif c == "," and depth == 0:
            parts.append(s[start:j].strip())
            start = j + 1
    return [*parts, s[start:].strip()]


def server_options_from_arg_cpp(text: str) -> tuple[set[tuple[str, str, str, str | None]], dict[str, str]]:
    """Every add_opt(common_arg(...)) llama-server keeps, as _flags rows; and the removed ones' advice."""
    rows, removed = server_option_rows(text)
    return set(rows), removed


def server_option_rows(text: str) -> tuple[list[tuple[str, str, str, str | None]], dict[str, str]]:
    """``server_options_from_arg_cpp`` in arg.cpp's order, the order llama.cpp applies env values in."""
    strings = re.compile(r'"((?:[^"\\]|\\.)*)"')
    rows: list[tuple[str, str, str, str | None]] = []
    removed: dict[str, str] = {}
    for m in re.finditer(r"add_opt\(common_arg\(", text):
        inner_open = m.end() - 1
        inner_close = _close(text, inner_open)
        chain = text[inner_close + 1:_close(text, m.start() + len("add_opt"))]
        params = [re.sub(r"//[^\n]*", "", p) for p in _top_level_params(text[inner_open + 1:inner_close])]
        names = strings.findall(params[0])
        neg: list[str] = []
        if params[1].startswith("{"):
            neg, kind = strings.findall(params[1]), "bool"
        elif len(params) == 3:
            kind = "flag"
        elif len(params) == 4:
            kind = "int" if re.search(r"\bint value\b", params[3]) else "value"
        else:
            kind = "value2"
        examples = re.search(r"set_examples\(\{([^}]*)\}", chain)
        excludes = re.search(r"set_excludes\(\{([^}]*)\}", chain)
        in_server = (examples is None or "LLAMA_EXAMPLE_SERVER" in examples.group(1)
                     or "LLAMA_EXAMPLE_COMMON" in examples.group(1))
        if not in_server or (excludes and "LLAMA_EXAMPLE_SERVER" in excludes.group(1)):
            continue
        env = re.search(r'set_env\("([^"]+)"\)', chain)
        advice = re.search(r'arg_removed\("([^"]*)"\)', text[inner_open:inner_close])
        if advice:
            removed[names[0]] = advice.group(1)
            kind = "value"  # the removed handlers take an (ignored) value; the table records them as such
        rows.append((",".join(names), ",".join(neg), kind, env.group(1) if env else None))
    return rows, removed


def default_arg_cpp() -> Path:
    """common/arg.cpp of the pinned version, where ``make llama-server`` unpacked it."""
    cache = Path(os.environ.get("LLMFLEET_CACHE") or Path.home() / ".cache" / "llmfleet-specdec")
    return cache / f"src-{LLAMA_CPP_PYTHON_VERSION}" / "vendor" / "llama.cpp" / "common" / "arg.cpp"


def render_table(rows: list[tuple[str, str, str, str | None]], removed: dict[str, str], current: str) -> str:
    """``current`` (the text of _flags_table.py) with its ``_OPTIONS`` rows and ``REMOVED`` advice replaced."""
    # arg.cpp declares -np/--parallel twice with the same row (one for the server, one for the rest): one row
    opts = "".join(f"    {row!r},\n" for row in dict.fromkeys(rows))
    rem = "".join(f"    {name!r}: {advice!r},\n".replace("'", '"') for name, advice in removed.items())
    text = re.sub(r"(_OPTIONS: [^\n]*= \(\n).*?(^\)\n)", lambda m: m.group(1) + opts + m.group(2), current,
                  count=1, flags=re.S | re.M)
    return re.sub(r"(REMOVED: [^\n]*= \{\n).*?(^\}\n)", lambda m: m.group(1) + rem + m.group(2), text,
                  count=1, flags=re.S | re.M)


def main(argv: list[str]) -> int:
    arg_cpp = Path(argv[1]) if len(argv) > 1 else default_arg_cpp()
    if not arg_cpp.is_file():
        print(f"{arg_cpp}: no such file; run `make llama-server` (it unpacks the pinned tree) or give the path of "
              "common/arg.cpp", file=sys.stderr)
        return 1
    rows, removed = server_option_rows(arg_cpp.read_text(encoding="utf-8"))
    TABLE.write_text(render_table(rows, removed, TABLE.read_text(encoding="utf-8")), encoding="utf-8")
    print(f"{TABLE}: {len(rows)} options, {len(removed)} removed, from {arg_cpp}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
