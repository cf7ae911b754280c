# Prints `make test`'s stage table (the rows tests/suite/stage.sh wrote) and fails when a stage failed.
"""Usage: python3 stage_table.py TABLE.tsv [WHAT]

TABLE.tsv holds one row per stage, ``name<TAB>start<TAB>seconds<TAB>result``, ``start`` being seconds after the
suite started and ``result`` ``ok`` or ``FAILED (exit N)``. A stage run inside another is named ``PARENT/NAME``
and printed indented under its parent; stages that ran side by side share their start. Exits 1 when a stage did
not pass or the table is empty, so `make test` fails after printing the whole table. Standard library only: it
runs with the system python3 even when the suite failed before the venv existed.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import NamedTuple


class Stage(NamedTuple):
    name: str
    start: int
    seconds: int
    result: str


def read_stages(path: Path) -> list[Stage]:
    """The table's rows, in the order they were written (a stage's row is written when it ends)."""
    stages = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        fields = line.split("\t")
        if len(fields) != 4:
            raise SystemExit(f"{path}:{number}: expected name, start, seconds, result (tab-separated): {line!r}")
        name, start, seconds, result = fields
        stages.append(Stage(name, int(start), int(seconds), result))
    return stages


def ordered(stages: list[Stage]) -> list[Stage]:
    """Parents before their children, each level by start time (then by name, for stages started together)."""
    def key(stage: Stage) -> tuple:
        parts = stage.name.split("/")
        path = []
        for depth in range(1, len(parts) + 1):
            prefix = "/".join(parts[:depth])
            own = next((s for s in stages if s.name == prefix), None)
            path.append((own.start if own else stage.start, prefix))
        return tuple(path)
    return sorted(stages, key=key)


def render(stages: list[Stage], what: str = "make test") -> list[str]:
    rows = [(("  " * s.name.count("/")) + s.name.rsplit("/", 1)[-1], str(s.start), str(s.seconds), s.result)
            for s in ordered(stages)]
    head = ("stage", "start", "seconds", "result")
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(4)]
    out = [f"{what}, stage by stage (start: seconds after it began; an indented stage ran inside the one "
           "above it; stages with the same start ran side by side)"]
    for row in [head, *rows]:
        out.append(f"{row[0]:<{widths[0]}}  {row[1]:>{widths[1]}}  {row[2]:>{widths[2]}}  {row[3]}")
    top = [s for s in stages if "/" not in s.name] or stages  # a lane cut short leaves only its scenarios' rows
    wall = max(s.start + s.seconds for s in top) - min(s.start for s in top)
    failed = [s.name for s in stages if s.result != "ok"]
    out.append(f"total: {wall} s ({wall / 60:.1f} minutes); "
               + (f"{len(failed)} failed: {', '.join(failed)}" if failed else "every stage passed"))
    warning = budget_warning(stages, wall, what, int(os.environ.get("SPECDEC_WARN_AFTER") or WARN_AFTER))
    if warning:
        out.append(warning)
    return out


# `make test` must end within 30 minutes warm and 45 cold on two cores, and CI stops at 90: past WARN_AFTER the
# table says so, naming where the time went, so that the next change sees the budget before CI does.
WARN_AFTER = 35 * 60


def budget_warning(stages: list[Stage], wall: int, what: str = "make test", limit: int = WARN_AFTER) -> str | None:
    """One line when the run took longer than ``limit`` seconds: the three slowest stages that ran no stage inside
    them (a Molecule scenario rather than its lane), each with its seconds."""
    if limit <= 0 or wall <= limit:  # 0: no budget (make test-full)
        return None
    parents = {s.name.rsplit("/", 1)[0] for s in stages if "/" in s.name}
    leaves = sorted((s for s in stages if s.name not in parents), key=lambda s: (-s.seconds, s.name))[:3]
    slowest = ", ".join(f"{s.name} {s.seconds} s" for s in leaves)
    return (f"WARNING: {what} took {wall / 60:.1f} minutes, past its {limit // 60}-minute warning line (budget: 30 "
            f"warm, 45 cold; CI stops at 90); the slowest stages: {slowest}. Move what is not needed on every change "
            "to make test-full (docs/testing.md).")


def main(argv: list[str]) -> int:
    if len(argv) not in (2, 3):
        print(__doc__, file=sys.stderr)
        return 2
    path = Path(argv[1])
    what = argv[2] if len(argv) == 3 else "make test"
    stages = read_stages(path) if path.exists() else []
    if not stages:
        print(f"{what}: no stage recorded in {path} (it stopped before its first stage ended)")
        return 1
    print("\n".join(render(stages, what)))
    return 0 if all(s.result == "ok" for s in stages) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
