"""The crash matrix (issue 22): every host-changing path killed at every step boundary, three ways.

The harness is ``crash_matrix.py`` (on the model ``fakesystemd.py``); the table it renders is
docs/crash-matrix.md, which must equal this run. Regenerate it with ``python tests/unit/crash_matrix.py``.
"""
from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any, Iterator, List

import crash_matrix as cm
import pytest


@pytest.fixture(scope="module")
def rows() -> Iterator[List[Any]]:
    cm.install()
    with tempfile.TemporaryDirectory(dir=cm.scratch()) as tmp:
        yield cm.matrix(Path(tmp))


def test_every_point_of_every_path_ends_with_production_and_nothing_left(rows: List[Any]) -> None:
    failing = [f"{name} / {point} / {column}: {cell.problems}"
               for name, point, cells in rows for column, cell in cells.items() if cell.problems]
    assert not failing, "\n".join(failing)
    assert {name for name, _point, _cells in rows} == {path.name for path in cm.PATHS}
    # every path has points before its steps, not only its end
    for path in cm.PATHS:
        assert sum(1 for name, _p, _c in rows if name == path.name) >= 3, path.name


def test_the_host_alone_restores_what_a_killed_module_left(rows: List[Any]) -> None:
    """The decisive column: after a SIGKILL, production comes back by the dead-man or the restart job, or nothing
    had changed yet; never "the module" (it is dead)."""
    for name, point, cells in rows:
        if point.startswith("before"):
            assert not cells["module SIGKILL"].outcome.startswith("the module"), (name, point)
    outcomes = {cells["module SIGKILL"].outcome for _n, _p, cells in rows}
    assert {"dead-man timer", "nothing changed"} <= outcomes
    assert any(o.startswith("restart job") for o in outcomes)


def test_the_re_arm_keeps_a_timer_armed_at_every_step(rows: List[Any]) -> None:
    switch = [(point, cells) for name, point, cells in rows if name == "A/B candidate switch, from another candidate"]
    points = [point for point, _cells in switch]
    assert "before systemctl stop specdec-rollback-llama-server.timer" in points
    assert points.index("before systemd-run specdec-rearm-llama-server.timer") < points.index(
        "before systemctl stop specdec-rollback-llama-server.timer") < points.index(
        "before systemctl stop specdec-rearm-llama-server.timer")


def test_the_table_in_the_docs_is_this_run(rows: List[Any]) -> None:
    doc = cm.DOC.read_text(encoding="utf-8")
    assert doc == cm.HEADER + cm.render(rows), "docs/crash-matrix.md is stale: run python tests/unit/crash_matrix.py"
