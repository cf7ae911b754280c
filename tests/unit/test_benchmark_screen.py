"""`make benchmark-screen`'s column "measured winner sent to the rounds" (benchmarks/screen.py): the role's own
screen_select on each K of a sweep, and the sweep's measured winner against what it decided. No server, no timing."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _bench():
    spec = importlib.util.spec_from_file_location("benchmark_screen", ROOT / "benchmarks" / "screen.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["benchmark_screen"] = module
    spec.loader.exec_module(module)
    return module


B = _bench()


def _row(pred: float, low: float, bound_speedup: float, unreliable: bool = False) -> dict:
    return {"mean_accepted_len": 3.0, "predicted_tok_s": pred, "low": low, "high": pred * 1.1,
            "bound_speedup": bound_speedup, "bound_tok_s": bound_speedup * 25.0, "unreliable": unreliable,
            "unreliable_why": "the host was busy" if unreliable else None}


def _screen(rows: dict) -> dict:
    return {"production": {"tok_s": 25.0}, "candidates": {"draft": {"screenable": True, "k": rows, "best_k": 8}}}


def test_the_winner_is_the_fastest_k_only_where_it_reaches_the_planned_speedup() -> None:
    assert B.measured_winner({1: 30.0, 4: 50.0, 8: 45.0}, 25.0) == 4
    assert B.measured_winner({1: 26.0, 4: 29.0}, 25.0) is None  # 1.16x: below 1.2, the baseline wins
    assert B.measured_winner({1: 26.0, 4: 29.0}, 25.0, min_speedup=1.1) == 4
    assert B.measured_winner({}, 25.0) is None


def test_screen_select_decides_each_depth_of_the_sweep() -> None:
    # K=1 below 1.2 even at its bound: SCREENED OUT; K=2 unreliable: kept; K=4's bound (1.8x = 45 tok/s) reaches
    # 1.2x: kept, though under K=8's predicted low end (50) (a prediction screens nothing out); K=8: kept
    screen = _screen({"1": _row(20.0, 18.0, 1.1), "2": _row(30.0, 10.0, 1.3, unreliable=True),
                      "4": _row(40.0, 35.0, 1.8), "8": _row(55.0, 50.0, 2.5)})
    selection = B.sweep_selection(screen, "draft")
    assert B.decisions(selection, "draft") == {1: "SCREENED OUT", 2: "kept (unreliable)", 4: "kept", 8: "kept"}


def test_the_column_says_no_when_the_measured_winner_is_screened_out() -> None:
    decided = {1: "SCREENED OUT", 2: "kept (unreliable)", 4: "SCREENED OUT", 8: "kept"}
    assert B.winner_sent({1: 20.0, 2: 30.0, 4: 60.0, 8: 55.0}, 25.0, decided) == "NO (K=4 SCREENED OUT)"
    assert B.winner_sent({1: 20.0, 2: 30.0, 4: 50.0, 8: 55.0}, 25.0, decided) == "yes (K=8)"
    assert B.winner_sent({1: 20.0, 2: 40.0, 4: 30.0, 8: 35.0}, 25.0, decided) == "yes (K=2)"
    # nothing measured 1.2x production: the baseline is the winner and it always enters the rounds
    assert B.winner_sent({1: 29.0, 4: 28.0}, 25.0, {1: "SCREENED OUT", 4: "SCREENED OUT"}) == "yes (baseline)"
    # a K the screen never decided on was not sent
    assert B.winner_sent({4: 60.0}, 25.0, {}) == "NO (K=4 missing)"


def test_load_line_names_each_phase_and_the_load_average() -> None:
    screen = _screen({})
    screen["production"].update(load=[{"phase": "production's timing", "other_cores": 0.1, "busy": False,
                                       "loadavg_before": 0.5, "loadavg_after": 0.9},
                                      {"phase": "the copy", "other_cores": 0.2, "busy": False},
                                      {"phase": "the copy", "other_cores": 0.9, "busy": True}],
                                unreliable=["x"])
    screen["candidates"]["draft"]["load"] = {"phase": "draft's drafter", "other_cores": None, "busy": False}
    line = B.load_line(screen, "draft")
    assert line == ("other processes' cores: production's timing 0.10, the copy 0.20-0.90; load average 0.50-0.90; "
                    "1 of 4 phases busy; 1 reasons on production's timings")


def test_the_bound_alone_ignores_the_unreliable_marks() -> None:
    # K=2 unreliable, its bound 1.1x: kept with its mark, SCREENED OUT by the bound alone
    screen = _screen({"2": _row(30.0, 10.0, 1.1, unreliable=True), "8": _row(55.0, 50.0, 2.5)})
    assert B.decisions(B.sweep_selection(screen, "draft"), "draft") == {2: "kept (unreliable)", 8: "kept"}
    assert B.decisions(B.sweep_selection(screen, "draft", marks=False), "draft") == {2: "SCREENED OUT", 8: "kept"}
