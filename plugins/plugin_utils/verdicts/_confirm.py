# Copyright: (c) 2026, llmfleet.specdec contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# Private to the collection, controller only: a run's confirmatory verdict, its exploratory per-shape cells, the recommendation.
"""From a gathered run to the numbers ``_design`` analyses, and back to verdicts.

- :func:`design_of`: the run's design (endpoint, budget, alpha, margins) with defaults, checked, naming the bad key;
- :func:`cells`: per config and round the mean log rate of one shape, or of the traffic mix (time-weighted);
- :func:`shape_analysis`: the exploratory per-shape rows (decode, end-to-end, time to first token), one
  Dunnett family per shape and metric, no sequential adjustment;
- :func:`confirmatory`: the one confirmatory endpoint of the run (contract C3 of report.json): the sequential
  verdict of every candidate on the traffic mix, the recommendation, the restarts used against a fixed design;
- :func:`recommend`: the old ``recommendation`` section of the report, now resting on the confirmatory verdict.

Rates per request: decode is ``predicted_per_second`` (the server's own decode timing); end-to-end is
``predicted_n / wall_s`` (the whole request as the client saw it: prompt processing, the draft's prefill and
decode); time to first token is ``ttft_s`` where the bench recorded it, else ``wall_s`` less the decode time.
"""
from __future__ import annotations

import functools
import math
import random
from typing import Any, Mapping, Sequence

from ansible_collections.llmfleet.specdec.plugins.module_utils.bench import _loadgate, _quality
from ansible_collections.llmfleet.specdec.plugins.module_utils.common._stats import (
    MIX_COMBINATION,
    ReportInputError,
    mix_rate,
)
from ansible_collections.llmfleet.specdec.plugins.plugin_utils.verdicts import _design

ENDPOINTS = ("e2e", "decode")
METRICS = ("decode", "e2e", "ttft")
DEFAULT_DESIGN = {"endpoint": "e2e", "max_rounds": None, "sequential": True, "alpha": _design.ALPHA,
                  "margin": _design.EQUIVALENCE_MARGIN, "min_speedup": _design.MIN_SPEEDUP, "beta": _design.BETA,
                  "primary_shape": None, "win_margin": None, "smoke": False, "chosen_by": None}
# A smoke run (spec_ab_smoke): the role's functional check. It measures and reports, may use one round, and gives
# no verdict: every candidate is INCONCLUSIVE, nothing is recommended and promote.yml refuses it, force or not.
SMOKE_WHY = ("a smoke run (spec_ab_smoke): measured and reported without a verdict; it is never recommended or "
             "promoted (measure again without spec_ab_smoke and with spec_ab_max_rounds 2 or more)")
# A WIN is recommended or promoted only when its lower bound is above 1 + this share (spec_ab_win_margin): a
# speedup the interval proves but too small to act on (a true 1.02x at very low noise) stays a WIN, not a change.
WIN_MARGIN = 0.02


def design_of(run: Mapping[str, Any], rounds_measured: int) -> dict[str, Any]:
    """The run's ``design`` with defaults. A run without one (written before the sequential design) is one
    fixed look at the rounds it measured."""
    given = run.get("design")
    if given is None:
        given = {"sequential": False}
    if not isinstance(given, Mapping):
        raise ReportInputError(f"run.design: expected a mapping, got {type(given).__name__}")
    unknown = sorted(set(given) - set(DEFAULT_DESIGN) - {"seed", "schedule", "max_minutes", "order"})
    if unknown:
        raise ReportInputError(f"run.design: unknown key(s) {', '.join(unknown)} (known: {', '.join(DEFAULT_DESIGN)})")
    d = dict(DEFAULT_DESIGN)
    d.update({k: v for k, v in given.items() if v is not None and k in DEFAULT_DESIGN})
    if d["endpoint"] not in ENDPOINTS:
        raise ReportInputError(f"run.design.endpoint: expected one of {', '.join(ENDPOINTS)} (spec_ab_judge_on), "
                               f"got {d['endpoint']!r}")
    if d["max_rounds"] is None:
        d["max_rounds"] = max(rounds_measured, 1)
    if d["win_margin"] is None:
        d["win_margin"] = WIN_MARGIN
    for key, lo, hi in (("alpha", 0.0, 0.5), ("margin", 0.0, 1.0), ("beta", 0.0, 0.5), ("win_margin", 0.0, 1.0)):
        v = d[key]
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not lo <= v < hi or (key == "alpha" and v == 0):
            raise ReportInputError(f"run.design.{key}: expected a share in ({lo:g}, {hi:g}), got {v!r}")
    v = d["min_speedup"]
    if isinstance(v, bool) or not isinstance(v, (int, float)) or v <= 1.0:
        raise ReportInputError(f"run.design.min_speedup: expected a speedup above 1 (such as 1.2), got {v!r}")
    v = d["max_rounds"]
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise ReportInputError(f"run.design.max_rounds: expected a whole number of rounds >= 1 "
                               f"(spec_ab_max_rounds), got {v!r}")
    d["sequential"] = bool(d["sequential"])
    smoke = d["smoke"]
    if isinstance(smoke, str) and smoke.strip().lower() in ("true", "false", "yes", "no"):
        smoke = smoke.strip().lower() in ("true", "yes")
    if not isinstance(smoke, bool):
        raise ReportInputError(f"run.design.smoke: expected true or false (spec_ab_smoke), got {smoke!r}")
    d["smoke"] = smoke
    return d


def practical(row: Mapping[str, Any], win_margin: float) -> bool:
    """A WIN that can be recommended or promoted: its lower bound above 1 + ``win_margin``."""
    low = row.get("low")
    return row.get("verdict") == _design.WIN and isinstance(low, (int, float)) and low > 1.0 + win_margin


def request_rate(request: Mapping[str, Any], metric: str) -> float | None:
    """One request's rate for ``metric`` (higher is better; ttft as first tokens per second)."""
    if metric == "decode":
        rate = request.get("predicted_per_second")
        return float(rate) if isinstance(rate, (int, float)) and rate > 0 else None
    wall = request.get("wall_s")
    if not isinstance(wall, (int, float)) or wall <= 0:
        return None
    if metric == "e2e":
        n = request.get("predicted_n")
        return n / wall if isinstance(n, int) and n > 0 else None
    ttft = request.get("ttft_s")
    if not isinstance(ttft, (int, float)):
        rate, n = request.get("predicted_per_second"), request.get("predicted_n")
        if not (isinstance(rate, (int, float)) and rate > 0 and isinstance(n, int) and n > 0):
            return None
        ttft = wall - n / rate
    return 1.0 / ttft if ttft > 0 else None


def shape_cells(requests: Sequence[Mapping[str, Any]], metric: str) -> dict[int, float]:
    """round -> mean log rate of the requests of that round."""
    sums: dict[int, list[float]] = {}
    for r in requests:
        rate = request_rate(r, metric)
        if rate is not None:
            sums.setdefault(r["round"], []).append(math.log(rate))
    return {rnd: sum(v) / len(v) for rnd, v in sums.items()}


def pooled_noise(gathered: Mapping[str, Any], baseline: str, names: Sequence[str], shape: str,
                 metric: str = "decode") -> tuple[float, int] | None:
    """One shape's pooled residual SD (of a round's mean log rate) and its degrees of freedom, from the block model
    over every config measured: the noise every config's absolute rate on that shape is read at. None when the
    run has no residual degrees of freedom yet."""
    table = {n: shape_cells(gathered[n]["shape_requests"].get(shape, []), metric) for n in names if n in gathered}
    fit = _design.fit_blocks(table, baseline)
    if fit is None or fit.s is None or fit.df <= 0:
        return None
    return fit.s, fit.df


def cells(gathered: Mapping[str, Any], names: Sequence[str], weights: Mapping[str, float], metric: str
          ) -> dict[str, dict[int, float]]:
    """config -> round -> log of the mix rate (time-weighted over ``weights``; a round that misses one of the
    mix's shapes has no value)."""
    out: dict[str, dict[int, float]] = {}
    for name in names:
        per_shape = {s: shape_cells(gathered[name]["shape_requests"].get(s, []), metric) for s in weights}
        rounds = set.intersection(*(set(v) for v in per_shape.values())) if per_shape else set()
        out[name] = {r: math.log(mix_rate({s: math.exp(per_shape[s][r]) for s in weights}, weights))
                     for r in sorted(rounds)}
    return out


def load_cells(gathered: Mapping[str, Any], names: Sequence[str], weights: Mapping[str, float]
               ) -> dict[str, dict[int, float]] | None:
    """config -> round -> log of the mix of aggregate tok/s under concurrent load (per round and shape the mean
    log rate of its bursts, combined over ``weights`` like :func:`cells`); None when the run measured no load."""
    out: dict[str, dict[int, float]] = {}
    for name in names:
        entries = (gathered.get(name) or {}).get("entries") or []
        per_shape = {}
        for s in weights:
            by_round = _loadgate.aggregate_by_round(entries, s)
            per_shape[s] = {r: sum(math.log(v) for v in vals) / len(vals) for r, vals in by_round.items()
                            if isinstance(r, int) and not isinstance(r, bool)}
        rounds = set.intersection(*(set(v) for v in per_shape.values())) if per_shape else set()
        out[name] = {r: math.log(mix_rate({s: math.exp(per_shape[s][r]) for s in weights}, weights))
                     for r in sorted(rounds)}
    return out if any(out.values()) else None


def streams_of(configs: Mapping[str, Any], baseline: str) -> int | None:
    """The concurrency the run's load phase used (the baseline's load gate, else any config's)."""
    for name in (baseline, *configs):
        n = ((configs.get(name) or {}).get("load_gate") or {}).get("concurrency")
        if isinstance(n, int) and not isinstance(n, bool) and n > 1:
            return n
    return None


def load_why(row: Mapping[str, Any], streams: int | None, margin: float) -> str:
    """Why a WIN on one stream is not recommended: its aggregate under load against the baseline's."""
    at = f"{streams} concurrent streams" if streams else "the production unit's concurrency"
    if row.get("low") is None:
        return (f"a WIN on one stream, not recommended: its aggregate rate at {at} could not be compared with the "
                f"baseline's ({row.get('why') or 'no interval'})")
    numbers = f"{row['ratio']:.2f}x the baseline's [{row['low']:.2f}, {row['high']:.2f}]"
    if row.get("verdict") == _design.INFERIOR:
        return (f"a WIN on one stream that LOSES under load, not recommended: its aggregate rate at {at} is "
                f"{numbers}, below 1 / (1 + {margin:g}) = {1.0 / (1.0 + margin):.3f}x")
    return (f"a WIN on one stream, not recommended: its aggregate rate at {at} ({numbers}) is not shown within "
            f"{margin:.0%} of the baseline's (non-inferiority needs its lower bound at or above "
            f"{1.0 / (1.0 + margin):.3f}x)")


def family(judged_configs: Mapping[str, Any], baseline: str) -> list[str]:
    """The candidates of the run's family: every config but the baseline and the drafter probes."""
    return [n for n, c in judged_configs.items() if n != baseline and c.get("status") != "DRAFTER PROBE"]


def shape_analysis(gathered: Mapping[str, Any], baseline: str, candidates: Sequence[str], shape: str,
                   design: Mapping[str, Any]) -> dict[str, dict[str, dict[str, Any]]]:
    """metric -> config -> row, for one shape: the exploratory cells, one look at everything measured."""
    out: dict[str, dict[str, dict[str, Any]]] = {}
    names = [baseline, *candidates]
    for metric in METRICS:
        table = {n: shape_cells(gathered[n]["shape_requests"].get(shape, []), metric) for n in names if n in gathered}
        out[metric] = _design.fixed_analysis(table, baseline, candidates, alpha=design["alpha"],
                                             margin=design["margin"])
    return out


def weights_of(run_mix: Mapping[str, float] | None, shapes: Sequence[str], design: Mapping[str, Any]
               ) -> tuple[dict[str, float], str]:
    """The confirmatory endpoint's weights and where they came from."""
    primary = design.get("primary_shape")
    if primary:
        return {str(primary): 1.0}, f"the primary shape {primary} (spec_ab_primary_shape)"
    if run_mix:
        return dict(run_mix), "the declared traffic mix (spec_ab_mix, traffic weights)"
    return ({s: 1.0 / len(shapes) for s in shapes} if shapes else {}), BUILT_IN


BUILT_IN = "the built-in mix (no traffic declared): equal weights over the measured shapes"


def sizes_of(gathered: Mapping[str, Any], baseline: str, shapes: Sequence[str]) -> dict[str, dict[str, float]]:
    """shape -> the baseline's mean prompt and output tokens per request (what the built-in mix measured)."""
    out: dict[str, dict[str, float]] = {}
    for shape in shapes:
        reqs = (gathered.get(baseline) or {}).get("shape_requests", {}).get(shape, [])
        sizes = {}
        for key in ("prompt_n", "predicted_n"):
            vals = [r[key] for r in reqs if isinstance(r.get(key), int) and not isinstance(r.get(key), bool)]
            if vals:
                sizes[key] = sum(vals) / len(vals)
        out[shape] = sizes
    return out


def headline(conf: Mapping[str, Any]) -> str:
    """The line every verdict carries: the endpoint's metric and weights, and who decided them."""
    weights = ", ".join(f"{s} {w:.0%}" for s, w in (conf.get("weights") or {}).items()) or "none"
    line = f"endpoint {conf.get('endpoint')} tokens/s over {weights}"
    if conf.get("declared") is False:
        sizes = "; ".join(f"{s} {v.get('prompt_n', 0):.0f} prompt / {v.get('predicted_n', 0):.0f} output tokens"
                          for s, v in (conf.get("sizes") or {}).items() if v)
        line += (": the BUILT-IN mix decided, not your traffic (declare it with spec_ab_traffic, spec_ab_mix or "
                 "spec_ab_primary_shape)" + (f"; its sizes: {sizes}" if sizes else ""))
    else:
        line += f" ({conf.get('weights_from')})"
    return line


def confirmatory(judged: Mapping[str, Any], gathered: Mapping[str, Any], design: Mapping[str, Any]) -> dict[str, Any]:
    """The confirmatory section of report.json (contract C3)."""
    baseline = judged["baseline"]
    configs = judged["configs"]
    candidates = family(configs, baseline)
    weights, source = weights_of(judged.get("mix"), judged["shapes"], design)
    out: dict[str, Any] = {
        "endpoint": design["endpoint"], "weights": weights, "weights_from": source, "method": _design.METHOD,
        "combination": MIX_COMBINATION, "alpha": design["alpha"], "margin": design["margin"],
        "min_speedup": design["min_speedup"], "beta": design["beta"], "max_rounds": design["max_rounds"],
        "win_margin": design["win_margin"], "chosen_by": design["chosen_by"],
        "sequential": design["sequential"], "verdicts": {}, "recommendation": None, "active": [], "looks": [],
        "declared": source != BUILT_IN, "smoke": design["smoke"],
    }
    if source == BUILT_IN:
        out["sizes"] = sizes_of(gathered, baseline, list(weights))
    out["headline"] = headline(out)
    missing = [s for s in weights if s not in judged["shapes"]]
    if missing or not weights:
        out["why"] = (f"the endpoint's shape(s) {', '.join(missing)} were not measured (measured: "
                      f"{', '.join(judged['shapes']) or 'none'})" if missing else "no shape was measured")
        for n in candidates:
            out["verdicts"][n] = {"verdict": _design.INCONCLUSIVE, "ratio": None, "low": None, "high": None,
                                  "mde": None, "noise": None, "why": out["why"]}
        return out
    table = cells(gathered, [baseline, *candidates], weights, design["endpoint"])
    under_load = None if design["smoke"] else load_cells(gathered, [baseline, *candidates], weights)
    result = _design.sequential(table, baseline, candidates, max_rounds=design["max_rounds"], alpha=design["alpha"],
                                margin=design["margin"], min_speedup=design["min_speedup"], beta=design["beta"],
                                looks=design["sequential"], win_margin=design["win_margin"], load=under_load)
    if under_load is not None:
        out["streams"] = streams_of(configs, baseline)
        out["load_rule"] = (f"aggregate tokens/s at {out['streams'] or 'the production unit'} concurrent streams "
                            f"(the load phase, over the endpoint's weights) not below 1 / (1 + {design['margin']:g}) "
                            "of the baseline's, one-sided at the look's alpha over the candidates: tested once a "
                            "candidate's WIN clears the practical margin, and a candidate not shown non-inferior "
                            "is not recommended")
    for name, row in result["verdicts"].items():
        row["status"] = configs[name]["status"]
        if design["smoke"]:  # measured and shown, never a verdict
            row.update(verdict=_design.INCONCLUSIVE, low=None, high=None, mde=None, why=SMOKE_WHY)
            row.pop("stopped", None)
        row["practical"] = practical(row, design["win_margin"])
        if row["practical"] and under_load is not None and (row.get("load") or {}).get("verdict") != \
                _design.NON_INFERIOR:
            row["practical"] = False
            got = row.get("load") or {"verdict": _design.NOT_SHOWN}
            row.setdefault("load", got)
            row["why"] = load_why(got, out.get("streams"), design["margin"])
        elif row["verdict"] == _design.WIN and not row["practical"]:
            row["why"] = (f"a WIN below the practical margin: its lower bound {row['low']:.3f}x is not above "
                          f"{1.0 + design['win_margin']:.3f}x (1 + spec_ab_win_margin), too small to recommend or "
                          "promote")
        out["verdicts"][name] = row
    # a smoke run decides nothing, so no look stops a candidate: each is measured in every round of its budget
    active = ([] if result["final"] else list(candidates)) if design["smoke"] else result["active"]
    out.update(active=active, looks=result["looks"], final=result["final"],
               rounds_measured=result["rounds_measured"])
    eligible = [n for n, r in out["verdicts"].items() if r["practical"] and configs[n]["status"] == "OK"
                and (configs[n].get("judging") or {}).get("judging") != _quality.LOSSY]
    partial = partial_baseline(judged)
    if partial:  # one recommendation per run: the recommendation section, the fleet and promote.yml read this one
        out["recommendation_why"] = partial
    elif eligible:
        out["recommendation"] = max(eligible, key=lambda n: out["verdicts"][n]["ratio"])
    out["restarts"] = restarts(judged, table, baseline, candidates, design)
    out.update(noise_by_config(table, baseline))
    return out


SPREAD_WARN = 1.5  # configs whose residual spreads differ by more than this factor: unequal noise


def noise_by_config(table: Mapping[str, Mapping[int, float]], baseline: str) -> dict[str, Any]:
    """Each config's own residual spread (as a share) and a warning naming the config whose spread is beyond the
    others' (:func:`noisier_config`) by more than SPREAD_WARN: the pooled noise then hides a noisier baseline or
    candidate."""
    fit = _design.fit_blocks(table, baseline)
    if fit is None or fit.s is None:
        return {"spread": {}}
    spread = {n: (_design.exp_safe(v) - 1.0 if v is not None else None) for n, v in fit.spread.items()}
    out: dict[str, Any] = {"spread": spread}
    found = noisier_config(table, baseline)
    if found is not None:
        name, own, others, ratio = found
        if math.sqrt(ratio) > SPREAD_WARN:
            out["spread_warning"] = (f"unequal noise: {name}'s spread between starts ({_design.exp_safe(own) - 1.0:.1%}) "
                                     f"is {math.sqrt(ratio):.1f}x the other configs' ({_design.exp_safe(others) - 1.0:.1%}), "
                                     "beyond chance (a test that warns in at most 5 % of runs where every config's "
                                     "noise is the same); the pooled noise hides it, so each comparison uses the "
                                     "larger of the pooled error and one from the baseline's own spread (a noisy "
                                     "candidate's own)")
    return out


# The warning test's nominal level: with the candidates a sequential run drops its false alarm per run stays under 5 %
SPREAD_LEVEL = 0.03
_SPREAD_DRAWS = 2000


def _largest_ratio(index: Sequence[tuple[str, Any]], maker: Sequence[Sequence[float]], y: Sequence[float]
                   ) -> tuple[float, str | None, float, float]:
    """The config whose residual variance (its squared residuals over their expected share, 1 - leverage) is
    the largest multiple of the others' pooled one: (log of that multiple, config, its variance, the others')."""
    rss: dict[str, float] = {}
    dof: dict[str, float] = {}
    for (name, _r), row, own in zip(index, maker, (maker[i][i] for i in range(len(y)))):
        e = sum(a * b for a, b in zip(row, y))
        rss[name] = rss.get(name, 0.0) + e * e
        dof[name] = dof.get(name, 0.0) + own
    total, total_dof = sum(rss.values()), sum(dof.values())
    best: tuple[float, str | None, float, float] = (-math.inf, None, 0.0, 0.0)
    for name in rss:
        rest_dof = total_dof - dof[name]
        if dof[name] < 0.5 or rest_dof < 0.5:
            continue
        own_var, rest_var = rss[name] / dof[name], (total - rss[name]) / rest_dof
        if own_var <= 0.0:
            continue
        stat = math.inf if rest_var <= 0.0 else math.log(own_var / rest_var)
        if stat > best[0]:
            best = (stat, name, own_var, rest_var)
    return best


@functools.lru_cache(maxsize=1024)
def _noisier_critical(pattern: tuple[tuple[int, ...], ...]) -> float | None:
    """The critical value of the largest log variance ratio under equal noise, for the cells present
    (``pattern``: per config, the baseline first, the rounds it has), by seeded simulation of normal starts."""
    cells = {f"k{i}": {r: 0.0 for r in rounds} for i, rounds in enumerate(pattern)}
    made = _design.residual_maker(cells, "k0")
    if made is None:
        return None
    index, maker = made
    rng = random.Random(49)
    stats = sorted(_largest_ratio(index, maker, [rng.gauss(0.0, 1.0) for _dummy in index])[0]
                   for _dummy in range(_SPREAD_DRAWS))
    # the simulated quantile is itself an estimate: take the order statistic at its one-sided 95 % upper bound,
    # so that the warning's level is at most SPREAD_LEVEL whatever the draws (1,000 draws at the plain quantile
    # fired in 7 % of equal-noise runs)
    level = 1.0 - SPREAD_LEVEL + 1.645 * math.sqrt(SPREAD_LEVEL * (1.0 - SPREAD_LEVEL) / _SPREAD_DRAWS)
    return stats[min(_SPREAD_DRAWS, math.ceil(level * _SPREAD_DRAWS)) - 1]


def noisier_config(table: Mapping[str, Mapping[int, float]], baseline: str) -> tuple[str, float, float, float] | None:
    """The config whose spread between starts is beyond the others' by more than chance allows, or None: (name,
    its residual SD, the others' pooled residual SD, the variance ratio). One test per run, not one per config:
    the largest ratio against its simulated null distribution for exactly these cells, so that under equal noise
    it names a config in at most SPREAD_LEVEL of runs (one F test per config at 1 % did in 19-44 %)."""
    made = _design.residual_maker(table, baseline)
    base = table.get(baseline) or {}
    if made is None or len(table) < 3:
        return None
    index, maker = made
    names = list(dict.fromkeys(n for n, _r in index))
    pattern = tuple(tuple(sorted(r for r in table[n] if r in base)) for n in names)
    critical = _noisier_critical(pattern)
    stat, name, own, others = _largest_ratio(index, maker, [table[n][r] for n, r in index])
    if critical is None or name is None or not stat > critical:
        return None
    return name, math.sqrt(own), math.sqrt(others), (math.exp(min(stat, 700.0)))


def restarts(judged: Mapping[str, Any], table: Mapping[str, Mapping[int, float]], baseline: str,
             candidates: Sequence[str], design: Mapping[str, Any]) -> dict[str, Any]:
    """Server starts this run used against a fixed design with the same power at the planned speedup."""
    used = sum(c.get("entries_ok", 0) + c.get("entries_failed", 0) for c in judged["configs"].values())
    fit = _design.fit_blocks(table, baseline)
    out: dict[str, Any] = {"used": used, "fixed_rounds": None, "fixed_design": None, "saved": None}
    if fit is None or fit.s is None or not candidates:
        out["why"] = "no pooled noise estimate: no fixed design to compare with"
        return out
    configs = len(judged["configs"])
    # The power by the verdicts' own rule: the error and df each comparison gets (the baseline's spread beside the
    # candidates' pooled one, at their Welch df; the pooled ones with two configs), for a WIN and for a
    # recommendation (a lower bound above 1 + the win margin). The fixed design compared has the same power to be
    # recommended, by the same rule, not a power the run never had.
    spreads = own_spreads(fit, baseline, candidates)
    common = {"alpha": design["alpha"], "effect": design["min_speedup"], "spreads": spreads}
    m, k = len(candidates), len(candidates) + 1
    power = _design.sequential_power(fit.s, m, k, design["max_rounds"], looks=design["sequential"], **common)
    power_rec = _design.sequential_power(fit.s, m, k, design["max_rounds"], looks=design["sequential"],
                                         win_margin=design["win_margin"], **common)
    out.update(power=power, power_recommend=power_rec, effect=design["min_speedup"], win_margin=design["win_margin"])
    rounds = _design.fixed_rounds(fit.s, m, k, power=power_rec, win_margin=design["win_margin"], **common)
    if rounds is None:
        out["why"] = f"a fixed design would need more than 50 rounds at this noise ({_design.exp_safe(fit.s) - 1:.1%})"
        return out
    out.update(fixed_rounds=rounds, fixed_design=rounds * configs, saved=rounds * configs - used)
    return out


def own_spreads(fit: _design.Fit, baseline: str, candidates: Sequence[str]) -> tuple[float, float] | None:
    """The baseline's own spread and the candidates' pooled one (log scale), as :func:`_design.fit_blocks` forms a
    comparison's error from them; None with fewer than three configs (the pooled error alone)."""
    a = fit.spread.get(baseline)
    others = [v for n, v in fit.spread.items() if n != baseline and v is not None]
    if a is None or not others or len(fit.spread) < 3:
        return None
    return a, math.sqrt(sum(v * v for v in others) / len(others))


def partial_baseline(judged: Mapping[str, Any]) -> str | None:
    """Why the run's baseline cannot carry a recommendation (a failed or incomplete start), or None."""
    baseline = judged["baseline"]
    base = judged["configs"][baseline]
    if base["status"] != "BASELINE" or base["problems"]:
        return (f"the baseline {baseline!r} is {base['status']}"
                + (f" with problems ({'; '.join(base['problems'])})" if base["problems"] else "")
                + ": no recommendation from partial baseline data")
    return None


def under_load_clause(load: Mapping[str, Any] | None, streams: int | None) -> str:
    """The recommendation's second number: the aggregate rate under load (empty when the run measured none)."""
    if not load or load.get("low") is None:
        return ""
    return (f"; at {streams or 'the production unit'} concurrent streams its aggregate rate is {load['ratio']:.2f}x "
            f"[{load['low']:.2f}, {load['high']:.2f}], not below the baseline's beyond the equivalence margin")


def recommend(judged: Mapping[str, Any]) -> dict[str, Any]:
    """The recommendation section: the confirmatory endpoint's best WIN among eligible configs, else keep the
    baseline; the configs that could not be candidates are listed with why."""
    conf = judged["confirmatory"]
    baseline = judged["baseline"]
    out: dict[str, Any] = {"mix": dict(conf["weights"]), "weights_are": "shares of generated tokens per shape",
                           "weights_from": conf["weights_from"], "endpoint": conf["endpoint"],
                           "combination": MIX_COMBINATION, "config": None, "keep_baseline": False, "speedup": None,
                           "ci_low": None, "ci_high": None, "candidates": [], "excluded": []}
    if conf.get("why"):
        out["reason"] = f"{conf['why']}: no recommendation"
        return out
    partial = partial_baseline(judged)
    if partial:
        out["reason"] = partial
        return out
    for name, c in judged["configs"].items():
        row = conf["verdicts"].get(name)
        if name == baseline:
            continue
        if row is None or c["status"] != "OK" or (c.get("judging") or {}).get("judging") == _quality.LOSSY:
            reason = (_quality.NOT_RECOMMENDED
                      if c["status"] == "OK" and row is not None else "; ".join(c["problems"]) or (
                          "a control, not a candidate" if c["status"] == "NEGATIVE CONTROL" else
                          "measures a draft model's step, not a candidate" if c["status"] == "DRAFTER PROBE"
                          else c["status"]))
            out["excluded"].append({"config": name, "status": c["status"], "reason": reason})
            continue
        out["candidates"].append({"config": name, "speedup": row["ratio"], "ci_low": row["low"],
                                  "ci_high": row["high"], "verdict": row["verdict"], "mde": row["mde"],
                                  "noise": row["noise"], "n": f"{row.get('rounds', 0)} rounds",
                                  **({"wide": True} if row.get("wide") else {}),
                                  **({"under_load": dict(row["load"])} if row.get("load") else {})})
    pick = conf.get("recommendation")
    if pick:
        row = conf["verdicts"][pick]
        out.update(config=pick, speedup=row["ratio"], ci_low=row["low"], ci_high=row["high"],
                   reason=(f"{pick} is {row['ratio']:.2f}x the baseline on the confirmatory endpoint "
                           f"({conf.get('headline') or conf['endpoint'] + ' over ' + conf['weights_from']}) "
                           f"[{row['low']:.2f}, {row['high']:.2f}], "
                           f"a WIN with the family-wise error held at {conf['alpha']:g}, its lower bound above "
                           f"1 + {conf.get('win_margin', WIN_MARGIN):g} (spec_ab_win_margin)"
                           + under_load_clause(row.get("load"), conf.get("streams"))))
        if row.get("load"):
            out["under_load"] = dict(row["load"], streams=conf.get("streams"))
    elif conf.get("smoke"):  # its rows still list the candidates and the excluded, with why
        out.update(config=baseline, keep_baseline=True, reason=f"{SMOKE_WHY}: no recommendation")
    else:
        out.update(config=baseline, keep_baseline=True,
                   reason="no eligible config has a WIN above the practical margin (lower bound above 1 + "
                          f"{conf.get('win_margin', WIN_MARGIN):g}, spec_ab_win_margin) on the confirmatory "
                          "endpoint: keep the baseline")
    return out
