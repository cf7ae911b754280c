# Copyright: (c) 2026, llmfleet.specdec contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Applies, in place, the two mechanical fixes ansible-test's pylint asks of this code base, and nothing else.

- ``disallowed-name``: ansible-test's pylint configuration for collections forbids ``_`` as a name (ansible-core
  reserves it); a throw-away name bound as ``_`` (loop target, unpacking target, parameter) becomes ``_dummy``,
  which ruff and pylint both read as deliberately unused. A file that also reads ``_`` is left alone and named.
- ``subprocess-run-check``: ``subprocess.run(...)`` without ``check=`` gets ``check=False``, the behaviour it had
  (the callers look at ``returncode`` themselves).
Only the exact spans the syntax tree points at change, so reformatting never happens. Usage:
``pylint_fix.py FILE...`` (prints one line per file changed).
"""
from __future__ import annotations

import ast
import sys
from pathlib import Path

NEW_NAME = "_dummy"


def _offsets(text: str) -> list[int]:
    starts, pos = [], 0
    for line in text.splitlines(keepends=True):
        starts.append(pos)
        pos += len(line)
    starts.append(pos)
    return starts


def _char_offset(text: str, starts: list[int], lineno: int, col_utf8: int) -> int:
    """ast columns count UTF-8 bytes; turn one into a character offset in text."""
    line_start = starts[lineno - 1]
    line = text[line_start:starts[lineno]]
    return line_start + len(line.encode("utf-8")[:col_utf8].decode("utf-8"))


def edits_for(text: str) -> tuple[list[tuple[int, int, str]], bool]:
    tree = ast.parse(text)
    starts = _offsets(text)
    edits: list[tuple[int, int, str]] = []
    reads_underscore = False
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and node.id == "_":
            if isinstance(node.ctx, ast.Load):
                reads_underscore = True
            else:
                at = _char_offset(text, starts, node.lineno, node.col_offset)
                edits.append((at, at + 1, NEW_NAME))
        elif isinstance(node, ast.arg) and node.arg == "_":
            at = _char_offset(text, starts, node.lineno, node.col_offset)
            edits.append((at, at + 1, NEW_NAME))
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "run"
              and isinstance(node.func.value, ast.Name) and node.func.value.id == "subprocess"
              and not any(kw.arg == "check" for kw in node.keywords)
              and not any(kw.arg is None for kw in node.keywords)):
            close = _char_offset(text, starts, node.end_lineno, node.end_col_offset) - 1
            before = close - 1
            while text[before] in " \t\r\n":
                before -= 1
            insert = " check=False," if text[before] == "," else ", check=False"
            edits.append((before + 1, before + 1, insert))
    if reads_underscore:
        edits = [edit for edit in edits if edit[2] != NEW_NAME]
    return edits, reads_underscore


def main(paths: list[str]) -> int:
    for name in paths:
        path = Path(name)
        text = path.read_text(encoding="utf-8")
        edits, reads_underscore = edits_for(text)
        if reads_underscore:
            print(f"{name}: reads _ somewhere; its throw-away names were left as they are")
        for start, end, new in sorted(edits, reverse=True):
            text = text[:start] + new + text[end:]
        if edits:
            ast.parse(text)  # never write a file that no longer parses
            path.write_text(text, encoding="utf-8")
            print(f"{name}: {len(edits)} change(s)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
