#!/usr/bin/env python3
"""Calibration of the A/B verdicts, counted per run: the family-wise false-WIN rate, the false-recommendation
rate, the power, and the server starts the sequential design uses.

Two parts.

**Simulation** (``--sim-runs``, thousands of runs in minutes): the project's own method (``_design.sequential``,
the code the report and the role's look run) on simulated rounds. Per (config, round) every shape's mean log
rate is the config's true log speedup on that shape, plus the start's own offset (normal, sigma 0.02 / 0.05 /
0.10: the spread between server starts of one config's round mean log rate), plus a little per-shape noise
(sigma / 4). The endpoint is the time-weighted traffic mix of those shapes, as ``_confirm.cells`` forms it:
equal weights over four shapes (no mix declared) or a declared mix {prose 0.7, echo 0.3}. Each round measures
the baseline and the candidates the last look kept, so the starts counted are the starts a real run makes.
Scenarios (4 or 5 candidates beside the baseline):

- ``null``: 4 null twins. Any WIN is a false WIN; any recommendation a false one.
- ``one 1.10x``: 4 nulls and one true 1.10x (the issue's case): a recommendation naming a null is false.
- ``one 1.2x``, ``one 2x``: 3 nulls and one true effect: power (that one called WIN), false WINs among the nulls.

**The design's choice** (``--design-runs``): ``_choose.choose``, what ``spec_ab_sequential: auto`` runs in the
plan, at sigma 0.05 and 0.10 and planned effects 1.2x and 2x: the sequential design's expected starts and power to
be recommended, the fewest fixed rounds with that power, and which the plan takes.

**Unequal noise and skewed starts** (``--noise-runs``): 4 or 8 null candidates with equal noise, a baseline 2x or
3x noisier than them, one candidate 3x noisier, a rare fast start mode (probability 0.15, +15 %), skewed starts
(a slow tail); per scenario the family-wise false WIN with its 95 % Clopper-Pearson interval.

**Real servers** (``--tiny-runs``, ``--win-runs``, ``--predict-rounds``): a real llama-server (tests/testbed) on
the *real role's schedule*: the plan of filter ``ab_schedule`` (every config, the baseline included, on a fresh
start per round, in the seeded order), each round's slots from ``ab_round`` for the configs the last look kept,
and the look after each round from ``ab_look`` (the same ``_judge`` the report uses); each slot starts its own
server, as ``unit_override`` restarts the unit, and measures with spec_bench's code path (``_endpoint.run_bench``).
The tiny bed runs 4 null twins beside the baseline (family-wise false WIN per run, and the pooled start-to-start
noise the simulation assumes); the win bed a draft at depth 4 (a true ~1.4-2x) and the same server slowed by a
second thread on a shared machine (a true effect below 1); the prediction run times the verification of K + 1
tokens within the baseline's own start and the drafter probe's, for draft-simple at K 2, 4 and 8. The eligible bed
(``--eligible-runs``) makes production itself speculative (the tiny draft at depth 4) and its four null twins the
same config with a harmless env difference: eligible candidates, so a twin recommended is a false recommendation as
``promote.yml`` would act on it. Every real-bed rate is printed with its 95 % Clopper-Pearson interval.

Run: make benchmark-calibration   (needs the llama-server build; writes the win bed once into the cache)
     python benchmarks/calibration.py --sim-runs 2000 --tiny-runs 0 --win-runs 0 --predict-rounds 0
     python benchmarks/calibration.py --sim-runs 0 --noise-runs 1000 --tiny-runs 0 --win-runs 0 --predict-rounds 0
"""
from __future__ import annotations

import argparse
import json
import math
import os
import random
import sys
import time
from pathlib import Path
from typing import Any

from ansible_collections.llmfleet.specdec.plugins.module_utils.bench import _endpoint
from ansible_collections.llmfleet.specdec.plugins.module_utils.common import _stats
from ansible_collections.llmfleet.specdec.plugins.plugin_utils.steps import _steps_ab as ab_filters
from ansible_collections.llmfleet.specdec.plugins.plugin_utils.verdicts import _choose, _confirm, _design, _judge

CACHE = Path(os.environ.get("LLMFLEET_CACHE") or Path.home() / ".cache" / "llmfleet-specdec")
SIM_SHAPES = ("prose", "echo", "structured", "identity")
DECLARED_MIX = {"prose": 0.7, "echo": 0.3}
FIXED_ROUNDS_TODAY = 3  # the role's fixed design before the sequential one: every config, 3 rounds

# ---------------------------------------------------------------------------------------------
# simulation


def start_offset(rng: random.Random, sd: float, kind: str = "normal", mode: tuple[float, float] | None = None
                 ) -> float:
    """One server start's offset of its round mean log rate: normal with SD ``sd``, or ``skewed`` (a centred
    exponential with SD ``sd``, skewness 2 toward slow starts: now and then a start far slower than the rest);
    with ``mode`` (probability, speedup) a start is that much faster with that probability (a rare fast mode)."""
    off = -sd * (rng.expovariate(1.0) - 1.0) if kind == "skewed" else rng.gauss(0.0, sd)
    if mode and rng.random() < mode[0]:
        off += math.log(mode[1])
    return off


def sim_run(effects: dict[str, float], sigma: float, seed: Any, weights: dict[str, float], *,
            max_rounds: int = _design.MAX_ROUNDS, sequential: bool = True, noise: dict[str, float] | None = None,
            kind: str = "normal", mode: tuple[float, float] | None = None,
            win_margin: float = _confirm.WIN_MARGIN, spread_warning: bool = False) -> dict[str, Any]:
    """One simulated run through the sequential design: the verdicts, the recommendation, the starts used.
    ``noise``: a config's start SD as a multiple of ``sigma`` (unequal noise; 1 where not named). The
    recommendation is what the role recommends and promote.yml promotes: the WIN with the largest estimate among
    those whose lower bound clears 1 + ``win_margin`` (spec_ab_win_margin), as ``_confirm.practical`` decides."""
    rng = random.Random(seed)
    names = ["baseline", *effects]
    mu = {"baseline": 0.0, **{n: math.log(e) for n, e in effects.items()}}
    cells: dict[str, dict[int, float]] = {n: {} for n in names}
    active = list(effects)
    starts = 0
    for rnd in range(max_rounds):
        if not active:
            break
        for name in ["baseline", *active]:
            start = start_offset(rng, sigma * (noise or {}).get(name, 1.0), kind, mode)
            rates = {s: math.exp(mu[name] + start + rng.gauss(0.0, sigma / 4)) for s in weights}
            cells[name][rnd] = math.log(_stats.mix_rate(rates, weights))
            starts += 1
        if sequential and rnd + 1 >= _design.FIRST_LOOK:
            active = _design.sequential(cells, "baseline", list(effects), max_rounds=max_rounds,
                                        win_margin=win_margin)["active"]
    out = _design.sequential(cells, "baseline", list(effects), max_rounds=max_rounds, looks=sequential,
                             win_margin=win_margin)
    wins = [n for n, v in out["verdicts"].items() if v["verdict"] == _design.WIN]
    practical = [n for n in wins if _confirm.practical(out["verdicts"][n], win_margin)]
    pick = max(practical, key=lambda n: out["verdicts"][n]["ratio"]) if practical else None
    warning = _confirm.noisier_config(cells, "baseline") if spread_warning else None
    return {"wins": wins, "pick": pick, "pick_ratio": out["verdicts"][pick]["ratio"] if pick else None,
            "spread_warning": (warning[0] if warning and math.sqrt(warning[3]) > _confirm.SPREAD_WARN else None),
            "starts": starts, "verdicts": {n: v["verdict"] for n, v in out["verdicts"].items()}}


SCENARIOS = {
    "null": {"t1": 1.0, "t2": 1.0, "t3": 1.0, "t4": 1.0},
    "one 1.10x": {"t1": 1.0, "t2": 1.0, "t3": 1.0, "t4": 1.0, "real": 1.10},
    "one 1.2x": {"t1": 1.0, "t2": 1.0, "t3": 1.0, "real": 1.2},
    "one 2x": {"t1": 1.0, "t2": 1.0, "t3": 1.0, "real": 2.0},
}


def simulate(runs: int, sigmas: list[float], max_rounds: int, only: list[str] | None = None,
             sequential: bool = True) -> list[dict[str, Any]]:
    rows = []
    for scenario, effects in SCENARIOS.items():
        if only and scenario not in only:
            continue
        for sigma in sigmas:
            for mix_name, weights in (("equal", {s: 0.25 for s in SIM_SHAPES}), ("declared", DECLARED_MIX)):
                if scenario in ("one 1.2x", "one 2x") and mix_name == "declared":
                    continue  # the true effect is the same on every shape: the mix changes nothing
                false_win = false_rec = power = recommended = 0
                starts = 0
                picked_real: list[float] = []
                t0 = time.monotonic()
                for i in range(runs):
                    r = sim_run(effects, sigma, f"{scenario}:{sigma}:{mix_name}:{i}", weights,
                                max_rounds=max_rounds, sequential=sequential)
                    nulls = [n for n in r["wins"] if effects[n] <= 1.0]
                    false_win += bool(nulls)
                    false_rec += r["pick"] is not None and effects[r["pick"]] <= 1.0
                    power += "real" in r["wins"]
                    recommended += r["pick"] == "real"
                    starts += r["starts"]
                    if r["pick"] == "real":
                        picked_real.append(r["pick_ratio"])
                # what the report's power line says for this design at this noise (the verdicts' own error and
                # df, the last look alone): the round value's SD is the start's and the mix of the shapes' own noise
                s_round = math.sqrt(sigma ** 2 + (sigma / 4) ** 2 * sum(w * w for w in weights.values()))
                own = {"spreads": (s_round, s_round), "looks": sequential, "effect": max(effects.values())}
                rows.append({
                    "report_power_win": (_design.sequential_power(s_round, len(effects), len(effects) + 1, max_rounds,
                                                                  **own) if "real" in effects else None),
                    "report_power": (_design.sequential_power(s_round, len(effects), len(effects) + 1, max_rounds,
                                                              win_margin=_confirm.WIN_MARGIN, **own)
                                     if "real" in effects else None),
                    "scenario": scenario, "sigma": sigma, "mix": mix_name, "runs": runs, "sequential": sequential,
                    "candidates": len(effects), "false_win": false_win / runs, "false_recommendation": false_rec / runs,
                    "power_win": power / runs if "real" in effects else None,
                    "power": recommended / runs if "real" in effects else None,
                    "reported_when_picked": (math.exp(sum(math.log(x) for x in picked_real) / len(picked_real))
                                             if picked_real else None),
                    "starts_per_run": starts / runs,
                    "starts_fixed_today": (len(effects) + 1) * FIXED_ROUNDS_TODAY,
                    "seconds": round(time.monotonic() - t0, 1)})
                print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    return rows


def _nulls(m: int) -> dict[str, float]:
    return {f"t{i}": 1.0 for i in range(1, m + 1)}


# Unequal noise and skewed starts, all candidates null: the family-wise false WIN must stay at most alpha in each.
NOISE_SCENARIOS: dict[str, dict[str, Any]] = {
    **{f"equal noise, {m} candidates": {"effects": _nulls(m)} for m in (4, 8)},
    **{f"baseline {k}x noisier, {m} candidates": {"effects": _nulls(m), "noise": {"baseline": float(k)}}
       for k in (2, 3) for m in (4, 8)},
    **{f"one candidate 3x noisier, {m} candidates": {"effects": _nulls(m), "noise": {"t1": 3.0}} for m in (4, 8)},
    **{f"rare fast mode (p 0.15, +15 %), {m} candidates": {"effects": _nulls(m), "mode": (0.15, 1.15)}
       for m in (4, 8)},
    **{f"skewed starts (slow tail, skewness 2), {m} candidates": {"effects": _nulls(m), "kind": "skewed"}
       for m in (4, 8)},
}


def simulate_noise(runs: int, sigma: float, max_rounds: int) -> list[dict[str, Any]]:
    """The family-wise false WIN per unequal-noise / skewed-start scenario, with its 95 % Clopper-Pearson interval."""
    rows = []
    weights = {s: 0.25 for s in SIM_SHAPES}
    for scenario, spec in NOISE_SCENARIOS.items():
        hits = recs = warned = named = 0
        noisy = [n for n, k in (spec.get("noise") or {}).items() if k != 1.0]
        t0 = time.monotonic()
        for i in range(runs):
            r = sim_run(spec["effects"], sigma, f"noise:{scenario}:{i}", weights, max_rounds=max_rounds,
                        noise=spec.get("noise"), kind=spec.get("kind", "normal"), mode=spec.get("mode"),
                        spread_warning=True)
            hits += bool(r["wins"])
            recs += r["pick"] is not None
            warned += r["spread_warning"] is not None
            named += r["spread_warning"] is not None and r["spread_warning"] in noisy
        low, high = _design.rate_interval(hits, runs)
        rows.append({"scenario": scenario, "sigma": sigma, "runs": runs, "false_win_runs": hits,
                     "false_win": hits / runs, "low": low, "high": high, "false_recommendation_runs": recs,
                     "spread_warning_runs": warned, "noisy": noisy, "named_runs": named if noisy else None,
                     "seconds": round(time.monotonic() - t0, 1)})
        print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    return rows


DESIGN_EFFECTS = (1.2, 2.0)


def simulate_design(runs: int, sigmas: list[float], max_rounds: int) -> list[dict[str, Any]]:
    """The plan's choice of design (``_choose.choose``, what spec_ab_sequential auto runs) at 4 candidates, one
    real at the planned effect and three null: both designs' expected starts and power to be recommended."""
    rows = []
    for sigma in sigmas:
        for effect in DESIGN_EFFECTS:
            t0 = time.monotonic()
            got = _choose.choose(4, effect=effect, alpha=_design.ALPHA, win_margin=_confirm.WIN_MARGIN,
                                 max_rounds=max_rounds, noise=sigma, runs=runs, cell_budget=None)
            rows.append({"sigma": sigma, "effect": effect, "runs": got["runs"], "sequential": got["sequential"],
                         "rounds": got["rounds"], "line": got["line"], "why": got["why"],
                         "sequential_design": got["sequential_design"], "fixed_design": got["fixed_design"],
                         "fixed_by_rounds": got["fixed_by_rounds"], "seconds": round(time.monotonic() - t0, 1)})
            print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    return rows


def print_design(rows: list[dict[str, Any]], max_rounds: int) -> None:
    print(f"\nThe design's choice (spec_ab_sequential auto; at most {max_rounds} rounds, 4 candidates, one real at the "
          "planned effect, the rest null): expected starts and power to be recommended, the sequential design against "
          "the fewest fixed rounds with its power (less one standard error of the simulated rate), on the same runs.\n")
    print("| sigma | planned effect | runs | sequential: starts | sequential: recommended (WIN) | fixed: rounds for "
          "the same power | fixed: starts | fixed: recommended | fixed rounds simulated (recommended) | chosen |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in rows:
        seq, fixed = r["sequential_design"], r["fixed_design"]
        tried = ", ".join(f"{k}: {100 * v['power']:.1f} %" for k, v in r["fixed_by_rounds"].items())
        chosen = "sequential" if r["sequential"] else f"fixed {r['rounds']} rounds"
        print(f"| {r['sigma']:g} | {r['effect']:g}x | {r['runs']} | {seq['starts']:.1f} | {100 * seq['power']:.1f} % "
              f"({100 * seq['power_win']:.1f} %) | " + (f"{fixed['rounds']} | {fixed['starts']} | "
                                                        f"{100 * fixed['power']:.1f} %" if fixed else "none | - | -")
              + f" | {tried} | {chosen} |")


def print_noise(rows: list[dict[str, Any]], max_rounds: int) -> None:
    print(f"\nUnequal noise and skewed starts, every candidate null (at most {max_rounds} rounds, alpha "
          f"{_design.ALPHA}): runs with any false WIN, with the 95 % Clopper-Pearson interval.\n")
    print("The unequal-spread warning: runs in which it fired (a false alarm where every config's noise is the "
          "same), and runs in which it named the config that is truly noisier.\n")
    print("| scenario | start SD | runs | family-wise false WIN | 95 % interval | false recommendation | "
          "spread warning | names the noisy config |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in rows:
        recs, warned, named = r.get("false_recommendation_runs"), r.get("spread_warning_runs"), r.get("named_runs")
        print(f"| {r['scenario']} | {r['sigma']:g} | {r['runs']} | {r['false_win_runs']} "
              f"({100 * r['false_win']:.1f} %) | [{100 * r['low']:.1f}, {100 * r['high']:.1f}] % | "
              + ("-" if recs is None else f"{recs} ({100 * recs / r['runs']:.1f} %)") + " | "
              + ("-" if warned is None else f"{warned} ({100 * warned / r['runs']:.1f} %)") + " | "
              + ("-" if named is None else f"{named} ({100 * named / r['runs']:.1f} %)") + " |")


def print_sim(rows: list[dict[str, Any]], max_rounds: int) -> None:
    if rows and rows[0].get("sequential") is False:
        print(f"Simulation: the project's fixed design ({max_rounds} complete rounds, one look at alpha "
              f"{_design.ALPHA}), counted per run.\n")
    else:
        print(f"Simulation: the project's sequential design (at most {max_rounds} rounds, looks from round "
              f"{_design.FIRST_LOOK}, alpha {_design.ALPHA}, futility against {_design.MIN_SPEEDUP}x), counted per "
              "run.\n")
    print("Power is the share of runs in which the real one is **recommended** (a WIN whose lower bound clears "
          f"1 + spec_ab_win_margin, {_confirm.WIN_MARGIN:g}: what promote.yml acts on); WIN is the share in which it "
          "is called a WIN at all.\n")
    print("| scenario | candidates | sigma | endpoint weights | runs | family-wise false WIN | false recommendation | "
          "power (recommended) | WIN | the report's power line (recommended / WIN) | reported x when the real one is "
          "picked | starts per run | fixed 3 rounds |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in rows:
        power = "-" if r["power"] is None else f"{100 * r['power']:.1f} %"
        win = "-" if r.get("power_win") is None else f"{100 * r['power_win']:.1f} %"
        line = ("-" if r.get("report_power") is None else
                f"{100 * r['report_power']:.1f} % / {100 * r['report_power_win']:.1f} %")
        rep = "-" if r["reported_when_picked"] is None else f"{r['reported_when_picked']:.3f}"
        print(f"| {r['scenario']} | {r['candidates']} | {r['sigma']:g} | {r['mix']} | {r['runs']} | "
              f"{100 * r['false_win']:.1f} % | {100 * r['false_recommendation']:.1f} % | {power} | {win} | {line} | {rep} | "
              f"{r['starts_per_run']:.1f} | {r['starts_fixed_today']} |")


# ---------------------------------------------------------------------------------------------
# real servers on the role's schedule


def beds(threads: int) -> dict[str, dict[str, Any]]:
    tiny = CACHE / "demo-models"
    win = CACHE / "win-models"
    return {
        "tiny": {
            "target": tiny / "target.gguf", "threads": ["-t", "1"], "shapes": ["prose", "identity"],
            "sizes": {"prose": {"chars": 600, "n_predict": 32}, "identity": {"n_predict": 24}},
            "configs": {"baseline": {}, **{f"twin{i}": {"env": {"SPECDEC_TWIN": str(i)}} for i in range(1, 5)}},
        },
        # production itself speculative (the tiny draft at depth 4), its twins the same config with a harmless env
        # difference: eligible candidates (a speculative config is recommendable), so a WIN among them is a false
        # recommendation as the role would promote it
        "eligible": {
            "target": tiny / "target.gguf", "threads": ["-t", "1"], "shapes": ["prose", "identity"],
            "sizes": {"prose": {"chars": 600, "n_predict": 32}, "identity": {"n_predict": 24}},
            "configs": {"baseline": draft_config(tiny / "draft.gguf", 4),
                        **{f"draft-twin{i}": draft_config(tiny / "draft.gguf", 4, env={"SPECDEC_TWIN": str(i)})
                           for i in range(1, 5)}},
        },
        "win": {
            # short prompts and outputs: a request on this bed costs seconds on a shared 2-core machine
            "target": win / "target-win.gguf", "threads": ["-t", str(threads)], "shapes": ["prose", "structured"],
            "sizes": {"prose": {"chars": 200, "n_predict": 16}, "structured": {"chars": 200, "n_predict": 16}},
            "configs": {
                "baseline": {},
                "twin": {"env": {"SPECDEC_TWIN": "1"}},
                "draft-n4": draft_config(win / "draft-win.gguf", 4),
                # the same server, slowed by a second thread that spins against the machine's other jobs
                "two-threads": {"args": ["-t", str(threads + 1)], "server_config": {"LLAMA_ARG_THREADS": str(threads + 1)}},
            },
        },
    }


def draft_config(draft: Path, k: int, extra: list[str] | None = None,
                 env: dict[str, str] | None = None) -> dict[str, Any]:
    """draft-simple at depth k; server_config says the same in the env names the A/B role would write."""
    return {"args": ["--spec-type", "draft-simple", "-md", str(draft), "--spec-draft-n-max", str(k), *(extra or [])],
            "chain": ["draft-simple"], "k": k, **({"env": env} if env else {}),
            "server_config": {"LLAMA_ARG_SPEC_TYPE": "draft-simple", "LLAMA_ARG_SPEC_DRAFT_MODEL": str(draft),
                              "LLAMA_ARG_SPEC_DRAFT_N_MAX": str(k)}}


def prediction_bed(threads: int) -> dict[str, Any]:
    """The win bed with the draft model served alone (a drafter probe: d_s and its prefill measured), depths 2, 4, 8."""
    win = CACHE / "win-models"
    bed = dict(beds(threads)["win"], shapes=["prose"], sizes={"prose": {"chars": 200, "n_predict": 48}})
    draft = win / "draft-win.gguf"
    bed["configs"] = {
        "baseline": {},
        "drafter-alone": {"model": draft, "server_config": {"LLAMA_ARG_MODEL": str(draft)}},
        **{f"draft-n{k}": draft_config(draft, k) for k in (2, 4, 8)},
    }
    return bed


def server_config(config: dict[str, Any]) -> dict[str, str]:
    return {**config.get("env", {}), **config.get("server_config", {})}


def role_run(bed: dict[str, Any], *, max_rounds: int, prompts: int, seed: int, sequential: bool = True,
             verify_k: list[int] | None = None) -> dict[str, Any]:
    """One run on the role's schedule: ab_schedule's plan, ab_round's slots, ab_look after each round."""
    from testbed.server import LlamaServer

    names = list(bed["configs"])
    configs = [{"name": n, "chain": bed["configs"][n].get("chain", []), "server_config": server_config(bed["configs"][n]),
                **({"k": bed["configs"][n]["k"]} if "k" in bed["configs"][n] else {})} for n in names]
    plan = ab_filters.ab_schedule(names, max_rounds, "baseline", seed)
    run: dict[str, Any] = {"host": "calibration", "baseline": "baseline", "configs": configs, "entries": [],
                           "design": {"max_rounds": max_rounds, "sequential": sequential, "endpoint": "e2e"}}
    active, previous = names, None
    for rnd in range(max_rounds):
        if not active:
            break
        for slot in ab_filters.ab_round(plan, rnd, active, previous):
            config = bed["configs"][slot["config"]]
            args = [*bed["threads"], *config.get("args", [])]
            with LlamaServer(config.get("model") or bed["target"], args=args, env=config.get("env"),
                             ctx_size=2048) as server:  # a fresh start per slot, as unit_override restarts the unit
                bench = _endpoint.run_bench(server.url, shapes=bed["shapes"], prompts_per_shape=prompts, repeats=1,
                                            warmup=1, seed=seed * 100 + rnd, sizes=bed["sizes"], timeout=600,
                                            verify_k=verify_k if not config.get("chain") else None)
            run["entries"].append(dict(slot, bench=bench, error=None, server_config=server_config(config)))
            previous = slot["server"]
        look = ab_filters.ab_look(run)
        active = look["active"]
    return run


def judge_runs(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Per run: false WINs among the twins, the picks, the starts, the pooled noise of the confirmatory endpoint."""
    out = {"runs": len(runs), "false_win_runs": 0, "false_recommendation_runs": 0, "starts": 0, "noise": [],
           "verdicts": {}, "picks": {}}
    for run in runs:
        judged = _judge.judge(run, n_boot=100)
        conf = judged["confirmatory"]
        twins = [n for n in conf["verdicts"] if "twin" in n]  # null twins: negative controls or eligible ones
        out["false_win_runs"] += any(conf["verdicts"][n]["verdict"] == _design.WIN for n in twins)
        out["false_recommendation_runs"] += (judged["recommendation"].get("config") or "baseline") in twins
        out["starts"] += len(run["entries"])
        noise = [look.get("noise") for look in conf["looks"] if look.get("noise") is not None]
        if noise:
            out["noise"].append(noise[-1])
        for n, v in conf["verdicts"].items():
            out["verdicts"].setdefault(n, {}).setdefault(v["verdict"], 0)
            out["verdicts"][n][v["verdict"]] += 1
        pick = conf["recommendation"] or "baseline"
        out["picks"][pick] = out["picks"].get(pick, 0) + 1
    return out


def print_real(bed: str, summary: dict[str, Any], seconds: float) -> None:
    n = summary["runs"]
    noise = summary["noise"]
    mean_noise = sum(noise) / len(noise) if noise else None

    def rate(hits: int) -> str:
        low, high = _design.rate_interval(hits, n)
        return f"{hits} of {n} runs ({100 * hits / max(n, 1):.1f} %, 95 % interval [{100 * low:.1f}, {100 * high:.1f}] %)"

    print(f"\n{bed} bed on the role's schedule: {n} runs, {summary['starts']} server starts "
          f"({summary['starts'] / max(n, 1):.1f} per run), {seconds:.0f} s; family-wise false WIN among the twins in "
          f"{rate(summary['false_win_runs'])}; a twin recommended in "
          f"{rate(summary.get('false_recommendation_runs', 0))}; pooled start-to-start noise of the endpoint "
          + (f"{100 * mean_noise:.1f} % on average (per run: {', '.join(f'{100 * x:.1f}' for x in noise)} %)"
             if noise else "not estimated"))
    print("| config | " + " | ".join(_design.VERDICTS) + " | WIN rate [95 % interval] |")
    print("| --- |" + " --- |" * (len(_design.VERDICTS) + 1))
    for name, counts in summary["verdicts"].items():
        wins, total = counts.get(_design.WIN, 0), sum(counts.values())
        low, high = _design.rate_interval(wins, total)
        print(f"| {name} | " + " | ".join(str(counts.get(v, 0)) for v in _design.VERDICTS)
              + f" | {100 * wins / max(total, 1):.1f} % [{100 * low:.1f}, {100 * high:.1f}] |")
    print(f"recommendations: {summary['picks']}")


def print_prediction(run: dict[str, Any]) -> None:
    judged = _judge.judge(run)
    print("\n| config | shape | K | p | t_s ms | d_s ms | verify (target steps) | drafter (d_s steps) | predicted tok/s "
          "| measured tok/s | measured / predicted |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for p in judged["prediction"]:
        if not p.get("predicted_tok_s"):
            print(f"| {p['config']} | {p['shape']} | no d_s: {p['d_s_source']} |")
            continue
        print(f"| {p['config']} | {p['shape']} | {p['k']} | {p['p']:.3f} | {p['t_s_ms']:.1f} | {p['d_s_ms']:.2f} | "
              f"{p['verify_steps']:.2f} | {p['draft_steps']:.2f} | {p['predicted_tok_s']:.1f} | "
              f"{p['measured_tok_s']:.1f} | {p['measured_tok_s'] / p['predicted_tok_s']:.2f} |")
    for line in sorted({p.get("verify_source", "") for p in judged["prediction"]}):
        print(f"\nverification: {line}")


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    ap.add_argument("--sim-runs", type=int, default=2000, help="simulated runs per scenario, sigma and mix; 0 skips")
    ap.add_argument("--sigmas", default="0.02,0.05,0.10")
    ap.add_argument("--scenarios", default="", help="only these simulation scenarios (comma-separated names, such as "
                    "'null,one 1.2x'); all when empty")
    ap.add_argument("--noise-runs", type=int, default=1000,
                    help="simulated runs per unequal-noise / skewed-start scenario; 0 skips")
    ap.add_argument("--noise-sigma", type=float, default=0.05, help="the steady configs' start SD there")
    ap.add_argument("--max-rounds", type=int, default=_design.MAX_ROUNDS)
    ap.add_argument("--fixed", action="store_true",
                    help="simulate the fixed design (spec_ab_sequential: false): every candidate measured in all "
                         "--max-rounds rounds, one look at the whole alpha")
    ap.add_argument("--design-runs", type=int, default=1000,
                    help="simulated runs per row of the design's choice (sigma 0.05 and 0.10, 1.2x and 2x); 0 skips")
    ap.add_argument("--design-sigmas", default="0.05,0.10")
    ap.add_argument("--tiny-runs", type=int, default=10, help="real runs on the tiny bed (4 null twins); 0 skips")
    ap.add_argument("--eligible-runs", type=int, default=0,
                    help="real runs on the tiny bed with production speculative and 4 eligible null twins (a false "
                         "recommendation is counted); 0 skips")
    ap.add_argument("--win-runs", type=int, default=2, help="real runs on the win bed; 0 skips")
    ap.add_argument("--prompts", type=int, default=2, help="prompts per shape per server start")
    ap.add_argument("--first-seed", type=int, default=0, help="seed of the first real run (to add runs to a saved set)")
    # one thread: with two on a machine whose cores are shared, llama.cpp's spinning thread barrier makes every
    # step wait for a descheduled thread
    ap.add_argument("--threads", type=int, default=1, help="threads of the win bed's server")
    ap.add_argument("--predict-rounds", type=int, default=2,
                    help="rounds of the prediction run (baseline, the draft alone, draft-simple at 2, 4, 8); 0 skips")
    ap.add_argument("--save", default=str(Path("results") / "calibration.json"), help="where the raw runs go (JSON)")
    ap.add_argument("--load", nargs="+",
                    help="re-judge saved runs instead of measuring (several files: their real runs are pooled)")
    args = ap.parse_args(argv)

    if args.load:
        saved = json.loads(Path(args.load[0]).read_text())
        for more in args.load[1:]:
            extra = json.loads(Path(more).read_text())
            for bed, runs in (extra.get("runs") or {}).items():
                saved.setdefault("runs", {}).setdefault(bed, []).extend(runs)
            saved["simulation"] = saved.get("simulation") or extra.get("simulation")
            saved["prediction"] = saved.get("prediction") or extra.get("prediction")
        if saved.get("simulation"):
            print_sim(saved["simulation"], saved.get("args", {}).get("max_rounds", _design.MAX_ROUNDS))
        if saved.get("noise"):
            print_noise(saved["noise"], saved.get("args", {}).get("max_rounds", _design.MAX_ROUNDS))
        if saved.get("design"):
            print_design(saved["design"], saved.get("args", {}).get("max_rounds", _design.MAX_ROUNDS))
        for bed, runs in (saved.get("runs") or {}).items():
            if runs:
                print_real(bed, judge_runs(runs), 0.0)
        if saved.get("prediction"):
            print_prediction(saved["prediction"])
        return 0

    saved: dict[str, Any] = {"args": vars(args), "runs": {"tiny": [], "eligible": [], "win": []}}

    def save() -> None:
        Path(args.save).parent.mkdir(parents=True, exist_ok=True)
        Path(args.save).write_text(json.dumps(saved))

    if args.sim_runs:
        sigmas = [float(s) for s in args.sigmas.split(",")]
        saved["simulation"] = simulate(args.sim_runs, sigmas, args.max_rounds,
                                       [x.strip() for x in args.scenarios.split(",")] if args.scenarios else None,
                                       sequential=not args.fixed)
        save()
        print_sim(saved["simulation"], args.max_rounds)
    if args.noise_runs:
        saved["noise"] = simulate_noise(args.noise_runs, args.noise_sigma, args.max_rounds)
        save()
        print_noise(saved["noise"], args.max_rounds)
    if args.design_runs:
        saved["design"] = simulate_design(args.design_runs, [float(x) for x in args.design_sigmas.split(",")],
                                          args.max_rounds)
        save()
        print_design(saved["design"], args.max_rounds)
    if args.tiny_runs or args.eligible_runs or args.win_runs or args.predict_rounds:
        from testbed import models

        models.write_win_set(CACHE / "win-models")
    bed_defs = beds(args.threads)
    if args.predict_rounds:
        t0 = time.monotonic()
        pbed = prediction_bed(args.threads)
        saved["prediction"] = role_run(pbed, max_rounds=args.predict_rounds, prompts=args.prompts, seed=77,
                                       sequential=False, verify_k=[2, 4, 8])
        save()
        print(f"\nprediction against measurement on the win bed ({time.monotonic() - t0:.0f} s; verification and the "
              f"drafter's prefill measured within their own starts):")
        print_prediction(saved["prediction"])
    for bed, count in (("tiny", args.tiny_runs), ("eligible", args.eligible_runs), ("win", args.win_runs)):
        if not count:
            continue
        t0 = time.monotonic()
        for i in range(count):
            saved["runs"][bed].append(role_run(bed_defs[bed], max_rounds=args.max_rounds, prompts=args.prompts,
                                               seed={"win": 1000, "eligible": 2000}.get(bed, 0) + args.first_seed + i))
            print(f"{bed} run {i + 1}: {len(saved['runs'][bed][-1]['entries'])} starts", file=sys.stderr, flush=True)
            save()
        print_real(bed, judge_runs(saved["runs"][bed]), time.monotonic() - t0)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
