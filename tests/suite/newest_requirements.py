# Writes requirements-test.txt with the newest ansible-core lane's pins in place of its own (make test-newest-ansible).
"""Writes requirements-test.txt for the newest ansible-core lane (`make test-newest-ansible`) to stdout.

pip refuses a constraint that contradicts a requirement's own pin (requirements-test.txt pins ansible==12.3.0, the
release for ansible-core 2.19), so every package that the given constraints file pins loses its exact pin here and
takes the constraint's version; ranges (requirements.txt's) are kept, so a constraint outside them still fails;
nested `-r FILE` lines are inlined the same way. The other pins are kept as they are.
Usage: newest_requirements.py REQUIREMENTS CONSTRAINTS
"""
from __future__ import annotations

import re
import sys
from pathlib import Path

NAME = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)(\[[^\]]*\])?\s*(.*)$")


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def pinned(constraints: Path) -> set[str]:
    names = set()
    for line in constraints.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        match = NAME.match(line)
        if line and match:
            names.add(canonical(match.group(1)))
    return names


def lines(requirements: Path, overridden: set[str]) -> list[str]:
    out = []
    for raw in requirements.read_text().splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        if line.startswith(("-r ", "--requirement ")):
            out += lines(requirements.parent / line.split(None, 1)[1], overridden)
            continue
        match = NAME.match(line)
        if match and canonical(match.group(1)) in overridden and match.group(3).startswith("=="):
            line = match.group(1) + (match.group(2) or "")
        out.append(line)
    return out


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        print("usage: newest_requirements.py REQUIREMENTS CONSTRAINTS", file=sys.stderr)
        return 2
    requirements, constraints = Path(argv[1]), Path(argv[2])
    for path in (requirements, constraints):
        if not path.is_file():
            print(f"newest_requirements.py: {path} does not exist (give requirements-test.txt and "
                  "constraints-newest.txt)", file=sys.stderr)
            return 2
    print("\n".join(lines(requirements, pinned(constraints))))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
