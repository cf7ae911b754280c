# Copyright: (c) 2026, llmfleet.specdec contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# Private to the collection, controller only: the plan's choice between the sequential design and fixed rounds.
"""Which design needs the fewer expected server starts at the power it has to recommend the planned effect.

The sequential design (:func:`_design.sequential`, a look after every round from round 2) stops a candidate once
it is decided, but its O'Brien-Fleming spending keeps most of alpha for the last look; a fixed design (every
config in every one of N rounds, one look at the whole alpha) can reach the same power with fewer starts where
noise is high (issue 49: at sigma 0.10 four fixed rounds had the sequential design's power with 20 starts against
22.2). :func:`choose` simulates both on the same draws: m candidates, one at the planned effect and the rest null,
a config's round value ``log rate = its true log speedup + N(0, noise)``, seeded, so the same plan always gives
the same choice. Both designs are judged by the project's own code (``_design.sequential`` with looks for the
sequential design, without for the fixed one), power counted as the share of runs that **recommend** the real
candidate (its WIN's lower bound above 1 + win_margin). The fixed design is the fewest rounds (at most
max_rounds) whose simulated power reaches the sequential design's less POWER_TOLERANCE (5 points: what the plan's
200 runs resolve, a rate's standard error there being up to 3.5 points; a fixed design that close is the same
power as far as the plan can tell), and never less a quarter of it (where nothing is findable, 4 % is not the same
power as 0 %); the one with fewer expected starts is chosen, the sequential design on a tie
or when no fixed design within max_rounds reaches its power.

The simulation replaces the analytic power line (:func:`_design.fixed_rounds`) here because the choice turns on a
few points of power, about what that line misreads (docs/statistics.md: 5-7 points high for a 3-round fixed
design at sigma 0.05). Standard library only; pure and deterministic.
"""
from __future__ import annotations

import math
import random
from typing import Any

from ansible_collections.llmfleet.specdec.plugins.module_utils.common._stats import ReportInputError
from ansible_collections.llmfleet.specdec.plugins.plugin_utils.verdicts import _design

# The noise the plan assumes when it has no measured one: the log-scale SD of one config's round value (5 %, the
# middle of what the calibration simulates and about what the eligible-twins bed measured, 6.4 % on average).
DEFAULT_NOISE = 0.05
RUNS = 200  # simulated runs per design (docs/statistics.md, "Choosing the design", says what they cost)
MAX_RUNS = 5000
# The work is bounded: runs x configs at most CELL_BUDGET (200 runs up to 4 candidates, 111 with 8, never fewer
# than 40), and at most MAX_CANDIDATES candidates are simulated (16: about 5 s on the shared 2-core machine); a run
# with more keeps the sequential design (ab_design_choice says so).
MAX_CANDIDATES = 16
CELL_BUDGET = 1000
# Two powers closer than this are the same power to the plan, and never more than this share of the sequential
# design's apart (see the module's docstring).
POWER_TOLERANCE = 0.05
POWER_SHARE = 0.25


def _number(name: str, value: Any, low: float, high: float, low_open: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
            or value < low or value > high or (low_open and value == low):
        raise ReportInputError(f"{name}: expected a number in {'(' if low_open else '['}{low:g}, {high:g}], "
                               f"got {value!r}")
    return float(value)


def _whole(name: str, value: Any, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ReportInputError(f"{name}: expected a whole number in [{low}, {high}], got {value!r}")
    return value


def _recommended(out: dict[str, Any], win_margin: float) -> bool:
    row = out["verdicts"]["real"]
    return row["verdict"] == _design.WIN and row["low"] is not None and row["low"] > 1.0 + win_margin


def simulate(m: int, *, effect: float, alpha: float, win_margin: float, max_rounds: int, noise: float,
             runs: int = RUNS, seed: int = 0, through: int = 0, cell_budget: int | None = CELL_BUDGET) -> dict[str, Any]:
    """Both designs on the same seeded runs (``runs``, fewer where runs x configs would pass ``cell_budget``; None:
    no bound, for the benchmark). Returns
    ``{"sequential": {"starts", "power", "power_win"}, "fixed": {rounds: {"starts", "power"}}, "goal", "runs"}``;
    the fixed rounds evaluated are 2 .. max_rounds, in order, until one reaches the sequential design's power (less
    POWER_TOLERANCE or a quarter of it, ``goal``) and at least ``through``, so later ones may be missing."""
    m = _whole("candidates", m, 1, MAX_CANDIDATES)
    max_rounds = _whole("max_rounds", max_rounds, _design.FIRST_LOOK, 50)
    runs = _whole("runs", runs, 20, MAX_RUNS)
    runs = runs if cell_budget is None else min(runs, max(40, cell_budget // (m + 1)))
    effect = _number("effect (spec_ab_min_speedup)", effect, 1.0, 100.0, low_open=True)
    alpha = _number("alpha", alpha, 0.0, 0.5, low_open=True)
    win_margin = _number("win_margin", win_margin, 0.0, 1.0)
    noise = max(_number("noise", noise, 0.0, 2.0), 1e-4)  # no measured start is steadier than this
    names = ["real", *(f"null{i}" for i in range(1, m))]
    rng = random.Random(f"design-choice:{seed}")
    draws = []
    starts = recommended = won = 0
    for _run in range(runs):
        d = {"baseline": [rng.gauss(0.0, noise) for _r in range(max_rounds)]}
        d.update({n: [(math.log(effect) if n == "real" else 0.0) + rng.gauss(0.0, noise) for _r in range(max_rounds)]
                  for n in names})
        draws.append(d)
        cells: dict[str, dict[int, float]] = {n: {} for n in d}
        active, out = list(names), None
        for r in range(max_rounds):
            if not active:
                break
            for n in ["baseline", *active]:
                cells[n][r] = d[n][r]
                starts += 1
            if r + 1 >= _design.FIRST_LOOK:
                out = _design.sequential(cells, "baseline", names, max_rounds=max_rounds, alpha=alpha,
                                         min_speedup=effect, win_margin=win_margin)
                active = out["active"]
        recommended += _recommended(out, win_margin)
        won += out["verdicts"]["real"]["verdict"] == _design.WIN
    seq = {"starts": starts / runs, "power": recommended / runs, "power_win": won / runs}
    goal = seq["power"] - min(POWER_TOLERANCE, POWER_SHARE * seq["power"])
    fixed: dict[int, dict[str, Any]] = {}
    for rounds in range(_design.FIRST_LOOK, max_rounds + 1):
        hits = 0
        for d in draws:
            out = _design.sequential({n: dict(enumerate(v[:rounds])) for n, v in d.items()}, "baseline", names,
                                     max_rounds=rounds, alpha=alpha, min_speedup=effect, win_margin=win_margin,
                                     looks=False)
            hits += _recommended(out, win_margin)
        fixed[rounds] = {"starts": (m + 1) * rounds, "power": hits / runs}
        if hits / runs >= goal and rounds >= through:
            break
    return {"sequential": seq, "fixed": fixed, "goal": goal, "runs": runs}


def choose(m: int, *, effect: float = _design.MIN_SPEEDUP, alpha: float = _design.ALPHA, win_margin: float = 0.02,
           max_rounds: int = _design.MAX_ROUNDS, noise: float | None = None, noise_from: str = "",
           runs: int = RUNS, seed: int = 0, force: bool | None = None,
           cell_budget: int | None = CELL_BUDGET) -> dict[str, Any]:
    """The design with the fewer expected starts at the sequential design's power to recommend a true ``effect``
    among ``m`` candidates (the rest null), with a config's round noise ``noise`` (log-scale SD; None:
    DEFAULT_NOISE). ``force``: True or False takes the sequential or the fixed design (of max_rounds rounds)
    whatever the figures say, and still gives them. Returns ``{"sequential": bool, "rounds": the rounds to plan,
    "starts", "power" (the chosen design's), "other_starts", "sequential_design": {...}, "fixed_design":
    {"rounds", "starts", "power"} or None, "noise", "noise_from", "effect", "runs", "why", "line"}``."""
    s = DEFAULT_NOISE if noise is None else noise
    source = noise_from or ("the default" if noise is None else "the plan")
    sim = simulate(m, effect=effect, alpha=alpha, win_margin=win_margin, max_rounds=max_rounds, noise=s,
                   runs=runs, seed=seed, through=max_rounds if force is False else 0, cell_budget=cell_budget)
    seq = sim["sequential"]
    reach = [r for r, v in sim["fixed"].items() if v["power"] >= sim["goal"]]
    fixed = dict(sim["fixed"][reach[0]], rounds=reach[0]) if reach else None
    pick_fixed = fixed is not None and fixed["starts"] < seq["starts"]
    if force is not None:
        return _forced(force, m, max_rounds, sim, fixed, effect, s, source, pick_fixed)
    if pick_fixed:
        why = (f"fixed {fixed['rounds']} rounds reach the sequential design's power ({fixed['power']:.1%} against "
               f"{seq['power']:.1%}) with {fixed['starts']} starts against {seq['starts']:.1f}")
    elif fixed is not None:
        why = (f"the sequential design needs {seq['starts']:.1f} starts where the fewest fixed rounds with its power "
               f"({fixed['rounds']}, {fixed['power']:.1%} against {seq['power']:.1%}) need {fixed['starts']}")
    else:
        longest = max(sim["fixed"])
        why = (f"no fixed design within {max_rounds} rounds reaches the sequential design's power ({seq['power']:.1%};"
               f" {longest} fixed rounds: {sim['fixed'][longest]['power']:.1%})")
    starts, power = (fixed["starts"], fixed["power"]) if pick_fixed else (seq["starts"], seq["power"])
    other = seq["starts"] if pick_fixed else (fixed["starts"] if fixed else (m + 1) * max_rounds)
    name = f"fixed {fixed['rounds']} rounds" if pick_fixed else "sequential"
    return {"sequential": not pick_fixed, "rounds": fixed["rounds"] if pick_fixed else max_rounds,
            "starts": round(float(starts), 1), "power": power, "other_starts": round(float(other), 1),
            "sequential_design": seq, "fixed_design": fixed, "fixed_by_rounds": _by_rounds(sim), "noise": s,
            "noise_from": source, "effect": effect, "runs": sim["runs"], "why": why,
            "line": (f"design: {name}, expected starts {float(starts):.1f} against {float(other):.1f}, recommendation "
                     f"power {power:.1%} at the planned {effect:g}x (noise {s:.3g} from {source})")}


def _by_rounds(sim: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Each fixed design simulated, by its rounds (as text: the answer goes through JSON), with the goal it had."""
    return {str(r): dict(v, reaches=v["power"] >= sim["goal"]) for r, v in sim["fixed"].items()}


def _forced(sequential: bool, m: int, max_rounds: int, sim: dict[str, Any], fixed: dict[str, Any] | None,
            effect: float, s: float, source: str, pick_fixed: bool) -> dict[str, Any]:
    """The design the operator forced (spec_ab_sequential true or false), with the figures the choice would use."""
    seq = sim["sequential"]
    whole = dict(sim["fixed"][max_rounds], rounds=max_rounds) if not sequential else None
    chosen = f"fixed {fixed['rounds']} rounds" if pick_fixed and fixed else "sequential"
    if sequential:
        starts, power, name = seq["starts"], seq["power"], "sequential"
        other = fixed["starts"] if fixed else (m + 1) * max_rounds
    else:
        starts, power, name = whole["starts"], whole["power"], f"fixed {max_rounds} rounds"
        other = seq["starts"]
    return {"sequential": sequential, "rounds": max_rounds, "starts": round(float(starts), 1), "power": power,
            "other_starts": round(float(other), 1), "sequential_design": seq, "fixed_design": fixed,
            "fixed_by_rounds": _by_rounds(sim), "noise": s, "noise_from": source, "effect": effect, "runs": sim["runs"],
            "why": f"forced; the figures would choose {chosen}",
            "line": (f"design: {name} (forced), expected starts {float(starts):.1f} against {float(other):.1f}, "
                     f"recommendation power {power:.1%} at the planned {effect:g}x (noise {s:.3g} from {source}); "
                     f"auto would choose {chosen}")}
