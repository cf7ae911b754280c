# Copyright: (c) 2026, llmfleet.specdec contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# Private to the collection: the A/B statistics (medians, bootstrap and round intervals, verdict words and margins), host-safe.
"""Statistics of the A/B protocol: medians, quantiles, bootstrap and round intervals, the t distribution,
and the verdict words and margins that turn an interval into win / loss / no difference.

Host-safe (standard library only): ``_loadgate`` calls these under ``spec_bench`` on fleet hosts, so
nothing here may import controller code. What it does not hold: the judging of a run (statuses,
check_run, acceptance and drafting numbers, losslessness, the per-shape verdict tables), which lives
on the controller in ``plugin_utils/verdicts/_judge.py``; the texts of a run (which prompt an answer
answered, empty answers, the baseline's reference texts) in ``_quality``.

Everything here is pure and deterministic (bootstrap draws come from seeded generators).
"""
from __future__ import annotations

import math
import random
from typing import Any, Iterable, Mapping, NamedTuple, Sequence

from ansible_collections.llmfleet.specdec.plugins.module_utils.common._errors import SpecdecError

WIN = "win"
LOSS = "loss"
NO_DIFFERENCE = "no difference"
TOO_FEW_ROUNDS = "too few rounds to call"
TOO_FEW_REQUESTS = "too few requests to call"
# Below these no verdict is given. Rounds are the replicates (each config gets its own server start per
# round), so one round gives no estimate of the start-to-start variance at all; requests are averaged
# within a round, and a single request per side per round lets one slow reply decide the round.
MIN_ROUNDS = 2
MIN_REQUESTS_PER_ROUND = 2
# The old request-level bootstrap's minimum (kept for method="request-bootstrap").
MIN_REQUESTS = 3
# Practical equivalence: a verdict needs the whole interval beyond 1 +- this share. Chosen from the A/A
# calibration benchmark (benchmarks/calibration.py): see README, "Calibration".
EQUIVALENCE_MARGIN = 0.02
ROUNDS_SCHEME = (
    "paired by round: per (config, round) a shape is summarised by the mean of the log per-request decode "
    "rates (each config has its own server start in every round, so a round is one replicate); each "
    "candidate round is paired with the baseline's round; a Student t-interval (df = rounds - 1) on the mean "
    "paired log ratio, exp() back to a ratio. The spread between server starts and rounds is in that "
    "interval; a percentile bootstrap over requests ignores it")
BOOTSTRAP_SCHEME = (
    "percentile bootstrap, stratified by round: in every round the requests are resampled with "
    "replacement, paired by (prompt_index, repeat) when candidate and baseline have exactly the same "
    "requests in that round (so prompt difficulty and the round's drift cancel), otherwise each side "
    "independently; the statistic is the ratio of the pooled medians (candidate / baseline)")
MIX_COMBINATION = (
    "time-weighted (weighted harmonic mean): weights are shares of generated tokens per shape, so the "
    "mix rate is 1 / sum(w_s / rate_s); time per token is what adds up across a mix, a plain weighted "
    "mean of rates would let a fast shape hide a slow one")


class ReportInputError(SpecdecError):
    """A run handed to the report that is not in the form the A/B role produces."""


# ---------------------------------------------------------------------------------------------
# basic statistics


def median(values: Iterable[float]) -> float:
    """The median of the values (mean of the two middle ones for an even count)."""
    data = sorted(float(v) for v in values)
    if not data:
        raise ReportInputError("median: no values")
    mid = len(data) // 2
    return data[mid] if len(data) % 2 else 0.5 * (data[mid - 1] + data[mid])


def quantile(sorted_values: Sequence[float], q: float) -> float:
    """Linear-interpolation quantile of already sorted values (numpy's default method)."""
    if not sorted_values:
        raise ReportInputError("quantile: no values")
    pos = q * (len(sorted_values) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


def verdict(ci_low: float | None, ci_high: float | None, margin: float = 0.0) -> str:
    """``win`` when the whole interval lies above 1 + margin, ``loss`` when below 1 / (1 + margin),
    otherwise ``no difference``."""
    if ci_low is None or ci_high is None:
        return NO_DIFFERENCE
    if ci_low > 1.0 + margin:
        return WIN
    if ci_high < 1.0 / (1.0 + margin):
        return LOSS
    return NO_DIFFERENCE


class RatioCI(NamedTuple):
    """A ratio (candidate / baseline) with its bootstrap interval and how it was resampled."""

    ratio: float
    low: float
    high: float
    scheme: str  # "paired", "independent" or "mixed" (paired in some rounds only)


class _Side:
    """One side's samples grouped by stratum (round). Keyed input may pair; a plain list never does."""

    def __init__(self, values: Mapping[Any, float] | Sequence[float], name: str) -> None:
        self.keyed = isinstance(values, Mapping)
        self.strata: dict[Any, dict[Any, float]] = {}
        items = values.items() if isinstance(values, Mapping) else enumerate(values)
        for key, value in items:
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                raise ReportInputError(f"{name}[{key!r}]: expected a finite number, got {value!r}")
            stratum = key[0] if self.keyed and isinstance(key, tuple) and key else None
            self.strata.setdefault(stratum, {})[key] = float(value)
        if not self.strata:
            raise ReportInputError(f"{name}: no values to resample")


def _plan(cand: _Side, base: _Side) -> tuple[list[tuple[str, list[float], list[float]]], str]:
    """Per stratum: resample paired (same keys both sides) or each side independently."""
    plan = []
    kinds = set()
    for stratum in sorted(set(cand.strata) | set(base.strata), key=repr):
        a = cand.strata.get(stratum, {})
        b = base.strata.get(stratum, {})
        if cand.keyed and base.keyed and a and set(a) == set(b):
            keys = sorted(a, key=repr)
            plan.append(("paired", [a[k] for k in keys], [b[k] for k in keys]))
            kinds.add("paired")
        else:
            plan.append(("independent", [a[k] for k in sorted(a, key=repr)], [b[k] for k in sorted(b, key=repr)]))
            kinds.add("independent")
    scheme = kinds.pop() if len(kinds) == 1 else "mixed"
    return plan, scheme


def _draw(rng: random.Random, plan: list[tuple[str, list[float], list[float]]]) -> tuple[list[float], list[float]]:
    cand: list[float] = []
    base: list[float] = []
    for kind, a, b in plan:
        if kind == "paired":
            idx = rng.choices(range(len(a)), k=len(a))
            cand.extend(a[i] for i in idx)
            base.extend(b[i] for i in idx)
        else:
            if a:
                cand.extend(rng.choices(a, k=len(a)))
            if b:
                base.extend(rng.choices(b, k=len(b)))
    return cand, base


def _check_boot(n: int, alpha: float) -> None:
    if isinstance(n, bool) or not isinstance(n, int) or n < 100:
        raise ReportInputError(f"bootstrap: n must be a whole number >= 100 resamples, got {n!r}")
    if not 0.0 < alpha < 1.0:
        raise ReportInputError(f"bootstrap: alpha must lie in (0, 1), got {alpha!r}")


def _interval(stats: list[float], alpha: float) -> tuple[float, float]:
    stats.sort()
    return quantile(stats, alpha / 2.0), quantile(stats, 1.0 - alpha / 2.0)


def bootstrap_ratio_ci(candidate_values: Mapping[Any, float] | Sequence[float],
                       baseline_values: Mapping[Any, float] | Sequence[float], *,
                       n: int = 2000, seed: int | str = 0, alpha: float = 0.05) -> RatioCI:
    """Ratio of medians (candidate / baseline) with a percentile bootstrap interval.

    Each side is either a plain sequence of numbers (one stratum, always resampled independently) or a
    mapping ``{(round, prompt_index, repeat): value}``: the first element of each key is the stratum.
    In every stratum the requests are resampled with replacement; when both sides hold exactly the
    same keys in a stratum they are resampled *paired* (the same draws on both sides, so a prompt's
    difficulty and the round's drift cancel), otherwise each side independently. The statistic is
    median(pooled candidate draws) / median(pooled baseline draws); the interval is its
    ``alpha/2`` and ``1 - alpha/2`` percentiles over ``n`` resamples. Deterministic for a given
    ``seed`` (an int or a str).
    """
    _check_boot(n, alpha)
    cand = _Side(candidate_values, "candidate")
    base = _Side(baseline_values, "baseline")
    point_base = median(v for s in base.strata.values() for v in s.values())
    if point_base <= 0:
        raise ReportInputError(f"baseline: median {point_base} is not a positive rate")
    point = median(v for s in cand.strata.values() for v in s.values()) / point_base
    plan, scheme = _plan(cand, base)
    rng = random.Random(seed)
    ratios = []
    for _dummy in range(n):
        a, b = _draw(rng, plan)
        mb = median(b)
        if mb > 0:
            ratios.append(median(a) / mb)
    low, high = _interval(ratios, alpha)
    return RatioCI(point, low, high, scheme)


def bootstrap_median_ci(values: Mapping[Any, float] | Sequence[float], *, n: int = 2000, seed: int | str = 0,
                        alpha: float = 0.05) -> tuple[float, float, float]:
    """(median, low, high) of one config's values, resampled within strata as in :func:`bootstrap_ratio_ci`."""
    _check_boot(n, alpha)
    side = _Side(values, "values")
    plan = [("independent", list(s.values()), []) for _dummy, s in sorted(side.strata.items(), key=lambda kv: repr(kv[0]))]
    rng = random.Random(seed)
    meds = [median(_draw(rng, plan)[0]) for _dummy in range(n)]
    low, high = _interval(meds, alpha)
    return median(v for s in side.strata.values() for v in s.values()), low, high


def normalize_mix(mix: Mapping[str, Any]) -> dict[str, float]:
    """Weights per shape scaled to sum to 1; raises when a weight is not a number >= 0 or all are 0."""
    if not isinstance(mix, Mapping) or not mix:
        raise ReportInputError(f"mix: expected a mapping of shape to weight, such as {{prose: 0.7, echo: 0.3}}, "
                               f"got {mix!r}")
    out: dict[str, float] = {}
    for shape, weight in mix.items():
        if isinstance(weight, bool) or not isinstance(weight, (int, float)) or not math.isfinite(weight) or weight < 0:
            raise ReportInputError(f"mix.{shape}: expected a weight >= 0 (a share of generated tokens), got {weight!r}")
        out[str(shape)] = float(weight)
    total = sum(out.values())
    if total <= 0:
        raise ReportInputError("mix: every weight is 0; give at least one shape a positive share")
    return {shape: w / total for shape, w in out.items() if w > 0}


def mix_rate(rates: Mapping[str, float], weights: Mapping[str, float]) -> float:
    """Tokens per second over a traffic mix: 1 / sum(w_s / rate_s) (weights normalised to sum to 1).

    Weights are shares of generated tokens, so the time a mix takes per token is the weighted sum of
    each shape's time per token: the weighted *harmonic* mean of the rates.
    """
    total = sum(weights.values())
    return 1.0 / sum((w / total) / rates[s] for s, w in weights.items())


def bootstrap_mix_ci(candidate: Mapping[str, Mapping[Any, float] | Sequence[float]],
                     baseline: Mapping[str, Mapping[Any, float] | Sequence[float]],
                     weights: Mapping[str, float], *, n: int = 2000, seed: int | str = 0,
                     alpha: float = 0.05) -> RatioCI:
    """Speedup over a traffic mix, mix_rate(candidate) / mix_rate(baseline), with a bootstrap interval.

    Every shape is resampled as in :func:`bootstrap_ratio_ci` within the same bootstrap draw, and
    the per-shape medians are combined with :func:`mix_rate`.
    """
    _check_boot(n, alpha)
    shapes = [s for s in weights if weights[s] > 0]
    plans = {}
    schemes = set()
    point_c: dict[str, float] = {}
    point_b: dict[str, float] = {}
    for s in shapes:
        if s not in candidate or s not in baseline:
            raise ReportInputError(f"mix.{s}: no measurement of this shape on both sides")
        c = _Side(candidate[s], f"candidate.{s}")
        b = _Side(baseline[s], f"baseline.{s}")
        plans[s], scheme = _plan(c, b)
        schemes.add(scheme)
        point_c[s] = median(v for st in c.strata.values() for v in st.values())
        point_b[s] = median(v for st in b.strata.values() for v in st.values())
    point = mix_rate(point_c, weights) / mix_rate(point_b, weights)
    rng = random.Random(seed)
    ratios = []
    for _dummy in range(n):
        mc: dict[str, float] = {}
        mb: dict[str, float] = {}
        for s in shapes:
            a, b = _draw(rng, plans[s])
            mc[s], mb[s] = median(a), median(b)
        if all(v > 0 for v in mc.values()) and all(v > 0 for v in mb.values()):
            ratios.append(mix_rate(mc, weights) / mix_rate(mb, weights))
    low, high = _interval(ratios, alpha)
    scheme = schemes.pop() if len(schemes) == 1 else "mixed"
    return RatioCI(point, low, high, scheme)


# ---------------------------------------------------------------------------------------------
# the calibrated method: rounds are the replicates


def _betacf(a: float, b: float, x: float) -> float:
    """Continued fraction of the regularized incomplete beta function (modified Lentz)."""
    tiny = 1e-300
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 300):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < 1e-15:
            break
    return h


def _betainc(a: float, b: float, x: float) -> float:
    """I_x(a, b), the regularized incomplete beta function."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x))
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _betacf(a, b, x) / a
    return 1.0 - front * _betacf(b, a, 1.0 - x) / b


def t_cdf(t: float, df: float) -> float:
    """P(T <= t) for Student's t with ``df`` degrees of freedom."""
    if df <= 0:
        raise ReportInputError(f"t distribution: df must be > 0, got {df!r}")
    tail = 0.5 * _betainc(df / 2.0, 0.5, df / (df + t * t))
    return 1.0 - tail if t >= 0 else tail


def t_quantile(q: float, df: float) -> float:
    """The q quantile of Student's t with ``df`` degrees of freedom (bisection on :func:`t_cdf`)."""
    if not 0.0 < q < 1.0:
        raise ReportInputError(f"t quantile: q must lie in (0, 1), got {q!r}")
    if q < 0.5:
        return -t_quantile(1.0 - q, df)
    lo, hi = 0.0, 1.0
    while t_cdf(hi, df) < q:
        hi *= 2.0
    for _dummy in range(200):
        mid = 0.5 * (lo + hi)
        if t_cdf(mid, df) < q:
            lo = mid
        else:
            hi = mid
        if hi - lo <= 1e-13 * hi:  # converged to double precision's useful digits
            break
    return 0.5 * (lo + hi)


def round_log_means(values: Mapping[Any, float]) -> dict[Any, tuple[float, int]]:
    """Per round (the first element of each key): (mean of log rate, number of requests).

    A round's geometric-mean rate is exp() of its mean; the mean of logs keeps one slow request from
    weighing more than one fast one, and makes a ratio a difference.
    """
    sums: dict[Any, list[float]] = {}
    for key, value in values.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
            raise ReportInputError(f"rate[{key!r}]: expected a positive finite number, got {value!r}")
        rnd = key[0] if isinstance(key, tuple) and key else None
        sums.setdefault(rnd, []).append(math.log(value))
    return {r: (sum(v) / len(v), len(v)) for r, v in sums.items()}


class RoundCI(NamedTuple):
    """A ratio (candidate / baseline) with its t-interval over rounds, and the n behind it."""

    ratio: float | None
    low: float | None  # None below MIN_ROUNDS: no interval
    high: float | None
    rounds: int  # rounds measured on both sides
    requests: int  # fewest requests on one side in one of those rounds
    candidate_requests: int
    baseline_requests: int
    df: int

    @property
    def n(self) -> str:
        """n as shown with a verdict: rounds x requests per side per round."""
        return f"{self.rounds}x{self.requests}"


def _t_interval(diffs: Sequence[float], alpha: float) -> tuple[float, float | None, float | None]:
    """(mean, low, high) of the differences: mean +- t(1 - alpha/2, R - 1) * sd / sqrt(R); no interval below 2."""
    r = len(diffs)
    mean = sum(diffs) / r
    if r < 2:
        return mean, None, None
    sd = math.sqrt(sum((d - mean) ** 2 for d in diffs) / (r - 1))
    half = t_quantile(1.0 - alpha / 2.0, r - 1) * sd / math.sqrt(r)
    return mean, mean - half, mean + half


def _check_alpha(alpha: float) -> None:
    if not isinstance(alpha, (int, float)) or isinstance(alpha, bool) or not 0.0 < alpha < 1.0:
        raise ReportInputError(f"alpha must lie in (0, 1), got {alpha!r}")


def round_ratio_ci(candidate_values: Mapping[Any, float], baseline_values: Mapping[Any, float], *,
                   alpha: float = 0.05) -> RoundCI:
    """Speedup (candidate / baseline) with a t-interval over rounds.

    Both sides map ``(round, prompt_index, repeat) -> decode tok/s``. Per round and side the requests are
    summarised by the mean log rate; the rounds measured on both sides are paired (candidate round r
    against baseline round r: the same prompts, the same stretch of the machine's day); the interval is
    the Student t-interval with df = rounds - 1 on the mean paired log ratio, exp() back to a ratio.
    Only the rounds carry degrees of freedom: requests within a round share that round's server start,
    so they are not independent replicates of the comparison.
    """
    _check_alpha(alpha)
    cand = round_log_means(candidate_values)
    base = round_log_means(baseline_values)
    common = sorted(set(cand) & set(base), key=repr)
    if not common:
        return RoundCI(None, None, None, 0, 0, sum(n for _dummy, n in cand.values()),
                       sum(n for _dummy, n in base.values()), 0)
    diffs = [cand[r][0] - base[r][0] for r in common]
    mean, low, high = _t_interval(diffs, alpha)
    fewest = min(min(cand[r][1], base[r][1]) for r in common)
    return RoundCI(math.exp(mean), None if low is None else math.exp(low), None if high is None else math.exp(high),
                   len(common), fewest, sum(cand[r][1] for r in common), sum(base[r][1] for r in common),
                   len(common) - 1)


def round_rate_ci(values: Mapping[Any, float], *, alpha: float = 0.05) -> tuple[float, float | None, float | None]:
    """One config's decode rate: (geometric mean over rounds of the round means, t-interval low, high)."""
    _check_alpha(alpha)
    means = [m for _dummy, (m, _n) in sorted(round_log_means(values).items(), key=lambda kv: repr(kv[0]))]
    if not means:
        raise ReportInputError("rate: no values")
    mean, low, high = _t_interval(means, alpha)
    return math.exp(mean), None if low is None else math.exp(low), None if high is None else math.exp(high)


def round_mix_ci(candidate: Mapping[str, Mapping[Any, float]], baseline: Mapping[str, Mapping[Any, float]],
                 weights: Mapping[str, float], *, alpha: float = 0.05) -> RoundCI:
    """Speedup over a traffic mix with the same method as :func:`round_ratio_ci`.

    Per round and side every shape's geometric-mean rate is combined with :func:`mix_rate`; the rounds
    in which both sides measured every shape of the mix are paired and a t-interval (df = rounds - 1)
    is taken on the mean log ratio of the mix rates.
    """
    _check_alpha(alpha)
    shapes = [s for s in weights if weights[s] > 0]
    per_c: dict[str, dict[Any, tuple[float, int]]] = {}
    per_b: dict[str, dict[Any, tuple[float, int]]] = {}
    for s in shapes:
        if s not in candidate or s not in baseline:
            raise ReportInputError(f"mix.{s}: no measurement of this shape on both sides")
        per_c[s] = round_log_means(candidate[s])
        per_b[s] = round_log_means(baseline[s])
    rounds = set.intersection(*(set(per_c[s]) & set(per_b[s]) for s in shapes)) if shapes else set()
    common = sorted(rounds, key=repr)
    if not common:
        return RoundCI(None, None, None, 0, 0, 0, 0, 0)
    diffs = []
    for r in common:
        mc = mix_rate({s: math.exp(per_c[s][r][0]) for s in shapes}, weights)
        mb = mix_rate({s: math.exp(per_b[s][r][0]) for s in shapes}, weights)
        diffs.append(math.log(mc) - math.log(mb))
    mean, low, high = _t_interval(diffs, alpha)
    fewest = min(min(per_c[s][r][1], per_b[s][r][1]) for s in shapes for r in common)
    return RoundCI(math.exp(mean), None if low is None else math.exp(low), None if high is None else math.exp(high),
                   len(common), fewest, sum(per_c[s][r][1] for s in shapes for r in common),
                   sum(per_b[s][r][1] for s in shapes for r in common), len(common) - 1)


def round_verdict(ci: RoundCI, margin: float = EQUIVALENCE_MARGIN) -> str:
    """The verdict of a :class:`RoundCI`, or why none is called (too few rounds or requests)."""
    if ci.rounds < MIN_ROUNDS or ci.low is None:
        return TOO_FEW_ROUNDS
    if ci.requests < MIN_REQUESTS_PER_ROUND:
        return TOO_FEW_REQUESTS
    return verdict(ci.low, ci.high, margin)
