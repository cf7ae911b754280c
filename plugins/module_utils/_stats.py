# Copyright: (c) 2026, llmfleet.specdec contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# Private to the collection: the A/B statistics (medians, bootstrap intervals, verdicts) and the judging of a run.
"""Statistics and judging for the A/B protocol of the field notes, on the controller.

A *run* is what the A/B role collects (see :func:`check_run` for its exact form): one entry per
(config, round) holding spec_bench's ``bench`` document (``llmfleet.specdec/bench/1``) or, when that
measurement failed, ``bench: null`` and an ``error``. :func:`judge` turns a run into verdicts:

- losslessness: at temperature 0 every config's text on every prompt must equal the baseline's;
  a difference makes the config INVALID (a correctness bug, never a winner) with the first
  diverging position; an empty answer makes the comparison vacuous and is counted as such;
- proposer engaged: a speculative config whose ``draft_n`` stays 0 where it should draft is
  NOT ENGAGED whatever its flags say; a config with an empty chain and no drafts is the
  NEGATIVE CONTROL (it should show no difference from the baseline);
- per shape: median decode tok/s, acceptance, mean accepted length, speedup against the baseline
  with a 95 % t-interval over rounds (the unit of replication is a server start, see
  :func:`round_ratio_ci`), its n (rounds x requests per side) and a verdict (win / loss / no
  difference, or "too few rounds/requests to call");
- prediction against measurement with the break-even arithmetic of ``_breakeven``;
- an overall recommendation only from a traffic mix the caller declares.

Everything here is pure and deterministic (bootstrap draws come from seeded generators).
"""
from __future__ import annotations

import math
import random
from typing import Any, Iterable, Mapping, NamedTuple, Sequence

from ansible_collections.llmfleet.specdec.plugins.module_utils import _breakeven as be
from ansible_collections.llmfleet.specdec.plugins.module_utils import _quality
from ansible_collections.llmfleet.specdec.plugins.module_utils._errors import SpecdecError

BENCH_SCHEMA = "llmfleet.specdec/bench/1"
SHAPE_ORDER = ("prose", "echo", "structured", "identity")

OK = "OK"
BASELINE = "BASELINE"
INVALID = "INVALID"
NOT_ENGAGED = "NOT ENGAGED"
NEGATIVE_CONTROL = "NEGATIVE CONTROL"
INCOMPLETE = "INCOMPLETE"
FAILED = "FAILED"
# A config that serves a candidate's draft model alone: it measures the drafter's step d_s and is never
# compared (its text is the draft's, not the target's) nor recommended.
DRAFTER_PROBE = "DRAFTER PROBE"
STATUSES = (BASELINE, OK, NEGATIVE_CONTROL, INCOMPLETE, NOT_ENGAGED, INVALID, FAILED, DRAFTER_PROBE)
DRAFT_MODEL_VARS = ("LLAMA_ARG_SPEC_DRAFT_MODEL", "LLAMA_ARG_MODEL_DRAFT")
# Statuses whose numbers may carry a recommendation. A negative control is a control, not a candidate.
ELIGIBLE = (OK,)

WIN = "win"
LOSS = "loss"
NO_DIFFERENCE = "no difference"
VACUOUS = "vacuous"
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
METHODS = ("rounds", "request-bootstrap")
DEFAULT_K = 3  # llama.cpp's default --spec-draft-n-max

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
P_ESTIMATE = (
    "p solves A(p, K) = measured mean accepted length (1 + accepted / drafts from /metrics deltas), "
    "or, without /metrics, A(p, K) - 1 = acceptance * K; the plain p = acceptance would understate p "
    "because acceptance falls with the draft position")

MEAN_LEN_METHOD = (
    "tokens committed per target pass: from /metrics deltas when every request of the shape carries one, "
    "1 + accepted_tokens / drafts over the rounds that drafted (llama.cpp's own mean len); otherwise from the "
    "per-request counters, which give no round count, sum(predicted_n) / sum(predicted_n - draft_n_accepted), "
    "counting a step that drafted nothing as a round of one")


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


# ---------------------------------------------------------------------------------------------
# speculation counters


def request_drafts(request: Mapping[str, Any]) -> tuple[int, int]:
    """(drafted, accepted) tokens of one request: its reply's draft_n / draft_n_accepted, or, when the
    reply carries none (vLLM has no timings), the request's /metrics delta."""
    drafted = int(request.get("draft_n") or 0)
    accepted = int(request.get("draft_n_accepted") or 0)
    delta = request.get("metrics_delta")
    if not drafted and isinstance(delta, Mapping) and delta.get("draft_tokens"):
        return int(delta["draft_tokens"]), int(delta.get("accepted_tokens") or 0)
    return drafted, accepted


def acceptance(requests: Iterable[Mapping[str, Any]]) -> float | None:
    """sum(accepted) / sum(drafted) over the requests (see :func:`request_drafts`); None when nothing was drafted."""
    drafted = accepted = 0
    for r in requests:
        d, a = request_drafts(r)
        drafted += d
        accepted += a
    return accepted / drafted if drafted else None


def mean_accepted_length(requests: Sequence[Mapping[str, Any]]) -> tuple[float | None, str]:
    """Tokens committed per target pass, and where the number came from.

    From /metrics deltas when every request carries one: 1 + accepted_tokens / drafts, over the rounds
    that drafted (llama.cpp's own "mean len"). Otherwise from the per-request counters, which give no
    round count: sum(predicted_n) / sum(predicted_n - draft_n_accepted), i.e. tokens per target pass
    counting a step that drafted nothing as a round of one.
    """
    if not requests:
        return None, "no requests"
    deltas = [r.get("metrics_delta") for r in requests]
    if all(isinstance(d, Mapping) for d in deltas):
        drafts = sum(int(d.get("drafts") or 0) for d in deltas)
        accepted = sum(int(d.get("accepted_tokens") or 0) for d in deltas)
        if drafts:
            return 1.0 + accepted / drafts, "metrics: 1 + accepted_tokens / drafts"
        return 1.0, "metrics: no drafts"
    produced = sum(int(r.get("predicted_n") or 0) for r in requests)
    accepted = sum(request_drafts(r)[1] for r in requests)
    passes = produced - accepted
    if produced <= 0 or passes <= 0:
        return None, "requests: nothing generated"
    return produced / passes, "requests: predicted_n / (predicted_n - draft_n_accepted)"


def acceptance_by_position(deltas: Iterable[Mapping[str, Any] | None]) -> list[float]:
    """Share of drafting rounds whose token at each draft position was accepted (accepted_per_pos / drafts)."""
    drafts = 0
    per_pos: list[int] = []
    for d in deltas:
        if not isinstance(d, Mapping):
            continue
        drafts += int(d.get("drafts") or 0)
        for i, v in enumerate(d.get("accepted_per_pos") or []):
            if i >= len(per_pos):
                per_pos.extend([0] * (i + 1 - len(per_pos)))
            per_pos[i] += int(v or 0)
    if not drafts:
        return []
    # positions the server exports with 0 accepted stay: a depth that never pays is the finding
    return [v / drafts for v in per_pos]


# ---------------------------------------------------------------------------------------------
# losslessness


def is_empty(request: Mapping[str, Any]) -> bool:
    """An answer that says nothing: flagged empty by spec_bench, or only whitespace."""
    text = request.get("text")
    return bool(request.get("empty")) or not isinstance(text, str) or not text.strip()


def first_divergence(a: str, b: str, context: int = 24) -> dict[str, Any] | None:
    """Where two texts first differ (character position) with a short context of each; None when equal."""
    if a == b:
        return None
    limit = min(len(a), len(b))
    pos = next((i for i in range(limit) if a[i] != b[i]), limit)
    start = max(0, pos - context)
    return {
        "position": pos,
        "baseline": a[start:pos + context],
        "candidate": b[start:pos + context],
        "context_start": start,
        "baseline_len": len(a),
        "candidate_len": len(b),
    }


# ---------------------------------------------------------------------------------------------
# the run: checks


def _need(cond: bool, where: str, what: str) -> None:
    if not cond:
        raise ReportInputError(f"{where}: {what}")


def _check_request(req: Any, where: str) -> dict[str, Any]:
    _need(isinstance(req, Mapping), where, f"expected a request mapping, got {type(req).__name__}")
    _need(isinstance(req.get("shape"), str) and req["shape"], f"{where}.shape", "expected the shape's name")
    for key in ("prompt_index", "repeat"):
        v = req.get(key, 0)
        _need(isinstance(v, int) and not isinstance(v, bool), f"{where}.{key}", f"expected a whole number, got {v!r}")
    text = req.get("text")
    _need(text is None or isinstance(text, str), f"{where}.text", f"expected a string, got {type(text).__name__}")
    rate = req.get("predicted_per_second")
    _need(rate is None or (isinstance(rate, (int, float)) and not isinstance(rate, bool)),
          f"{where}.predicted_per_second", f"expected a number or null, got {rate!r}")
    for key in ("draft_n", "draft_n_accepted", "predicted_n"):
        v = req.get(key) or 0
        _need(isinstance(v, int) and not isinstance(v, bool) and v >= 0, f"{where}.{key}",
              f"expected a whole number >= 0, got {v!r}")
    delta = req.get("metrics_delta")
    _need(delta is None or isinstance(delta, Mapping), f"{where}.metrics_delta", "expected a mapping or null")
    return dict(req)


def check_run(run: Any) -> dict[str, Any]:
    """The run in the form the A/B role hands over, checked; raises ReportInputError naming the bad field.

    ::

        {"host": str, "run_id": str?, "started": str?, "finished": str?, "baseline": str,
         "mix": {shape: weight}?, "error": str?,            # error: why the run stopped early, if it did
         "environment": {...}?,                               # kept in the report as it is
         "configs": [{"name": str, "chain": [spec type, ...] | null, "server_config": {...},
                      "k": int?, "drafter": str?}, ...],     # optional; taken from the entries if absent
         "entries": [{"config": str, "round": int, "order": int, "server_config": {...},
                      "bench": <llmfleet.specdec/bench/1> | null, "error": str | null}, ...]}
    """
    _need(isinstance(run, Mapping), "run", f"expected a mapping, got {type(run).__name__}")
    entries = run.get("entries")
    _need(isinstance(entries, list), "run.entries", "expected a list of {config, round, order, bench, error} entries")
    baseline = run.get("baseline")
    _need(isinstance(baseline, str) and baseline, "run.baseline", "name the baseline config")
    out_entries = []
    for i, e in enumerate(entries):
        where = f"run.entries[{i}]"
        _need(isinstance(e, Mapping), where, "expected a mapping")
        _need(isinstance(e.get("config"), str) and e["config"], f"{where}.config", "expected the config's name")
        rnd = e.get("round", 0)
        _need(isinstance(rnd, int) and not isinstance(rnd, bool), f"{where}.round", f"expected a whole number, got {rnd!r}")
        bench = e.get("bench")
        entry = dict(e)
        entry["round"] = rnd
        entry["order"] = e.get("order", i)
        if bench is not None:
            _need(isinstance(bench, Mapping), f"{where}.bench", "expected spec_bench's bench document or null")
            schema = bench.get("schema", BENCH_SCHEMA)
            _need(schema == BENCH_SCHEMA, f"{where}.bench.schema", f"expected {BENCH_SCHEMA!r}, got {schema!r}")
            reqs = bench.get("requests")
            _need(isinstance(reqs, list), f"{where}.bench.requests", "expected a list of requests")
            entry["bench"] = dict(bench)
            entry["bench"]["requests"] = [_check_request(r, f"{where}.bench.requests[{j}]") for j, r in enumerate(reqs)]
        out_entries.append(entry)

    configs = run.get("configs")
    out_configs: list[dict[str, Any]] = []
    if configs is not None:
        _need(isinstance(configs, list), "run.configs", "expected a list of {name, chain, server_config}")
        for i, c in enumerate(configs):
            where = f"run.configs[{i}]"
            _need(isinstance(c, Mapping) and isinstance(c.get("name"), str) and c["name"], where,
                  "expected a mapping with the config's name")
            chain = c.get("chain")
            _need(chain is None or (isinstance(chain, list) and all(isinstance(x, str) for x in chain)),
                  f"{where}.chain", "expected the effective chain as a list of spec types, or null when unknown")
            out_configs.append(dict(c))
    names = [c["name"] for c in out_configs]
    _need(len(set(names)) == len(names), "run.configs", f"config names must be unique, got {names}")
    for e in out_entries:
        if e["config"] not in names:
            names.append(e["config"])
            out_configs.append({"name": e["config"], "chain": None, "server_config": e.get("server_config") or {}})
    _need(baseline in names, "run.baseline", f"{baseline!r} is not one of the configs {names}")

    out = dict(run)
    out["entries"] = out_entries
    out["configs"] = out_configs
    mix = run.get("mix")
    out["mix"] = normalize_mix(mix) if mix else None
    return out


# ---------------------------------------------------------------------------------------------
# the run: judging


def _shapes_in(run: Mapping[str, Any]) -> list[str]:
    seen: list[str] = []
    for e in run["entries"]:
        bench = e.get("bench") or {}
        for s in list(bench.get("shapes") or {}) + [r["shape"] for r in bench.get("requests", [])]:
            if s not in seen:
                seen.append(s)
    known = [s for s in SHAPE_ORDER if s in seen]
    return known + [s for s in seen if s not in known]


def _should_draft(chain: list[str] | None, shape: str) -> bool:
    """Where a chain must draft: a model-backed drafter on every shape, an n-gram lookup on echo."""
    if not chain:
        return False
    if any(t.startswith("draft-") for t in chain):
        return True
    return shape == "echo" and any(t.startswith("ngram-") for t in chain)


def _requests_of(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every request with its round and the entry's order attached, in measurement order."""
    out = []
    for e in sorted(entries, key=lambda x: (x["round"], x["order"])):
        for r in e["bench"]["requests"]:
            req = dict(r)
            req["round"] = e["round"]
            out.append(req)
    return out


def _rate_samples(requests: list[dict[str, Any]]) -> dict[tuple[int, int, int], float]:
    out = {}
    for r in requests:
        rate = r.get("predicted_per_second")
        if isinstance(rate, (int, float)) and rate > 0:
            out[(r["round"], r.get("prompt_index", 0), r.get("repeat", 0))] = float(rate)
    return out


def _text_key(r: Mapping[str, Any]) -> tuple[str, Any]:
    """Which prompt a request answered: its fingerprint when the bench recorded one (rounds and repeats
    may send different prompts under the same index), else its shape and index."""
    return (r["shape"], r.get("prompt_sha256") or r.get("prompt_index", 0))


def _reference_texts(requests: list[dict[str, Any]]) -> tuple[dict[tuple[str, Any], str], list[str]]:
    """The baseline's first non-empty text per (shape, prompt) and where the baseline disagrees with itself."""
    ref: dict[tuple[str, Any], str] = {}
    warnings = []
    for r in requests:
        if is_empty(r):
            continue
        key = _text_key(r)
        if key not in ref:
            ref[key] = r["text"]
        elif r["text"] != ref[key]:
            d = first_divergence(ref[key], r["text"])
            warnings.append(f"the baseline is not deterministic on {key[0]} prompt {r.get('prompt_index', 0)} "
                            f"(round {r['round']}, "
                            f"repeat {r.get('repeat', 0)}, char {d['position']}): losslessness verdicts on this "
                            f"prompt are unreliable; is temperature 0 really in force?")
    return ref, warnings


def _compare_texts(requests: list[dict[str, Any]], ref: Mapping[tuple[str, Any], str]) -> dict[str, Any]:
    compared = vacuous = differ = 0
    first = None
    for r in requests:
        key = _text_key(r)
        if is_empty(r) or key not in ref:
            vacuous += 1
            continue
        compared += 1
        d = first_divergence(ref[key], r["text"])
        if d is not None:
            differ += 1
            if first is None:
                first = dict(d, shape=key[0], prompt_index=r.get("prompt_index", 0), round=r["round"],
                             repeat=r.get("repeat", 0))
    lossless: bool | str = False if differ else (VACUOUS if not compared else True)
    return {"lossless": lossless, "compared": compared, "vacuous": vacuous, "differ": differ,
            "first_divergence": first}


def _config_k(config: Mapping[str, Any], deltas: list[Mapping[str, Any]]) -> tuple[int, str]:
    """The draft depth K for the arithmetic, and where it came from."""
    k = config.get("k")
    if k is not None:
        return be.check_k(k, f"configs.{config['name']}.k"), "given in the run's configs"
    env = config.get("server_config") or {}
    if isinstance(env, Mapping) and any(t.startswith("draft-") for t in (config.get("chain") or [])):
        for name in ("LLAMA_ARG_SPEC_DRAFT_N_MAX", "LLAMA_ARG_DRAFT_MAX", "LLAMA_ARG_DRAFT_N_MAX"):
            if str(env.get(name, "")).strip().isdigit() and int(env[name]) >= 1:
                return int(env[name]), f"server_config {name}"
    drafts = sum(int(d.get("drafts") or 0) for d in deltas)
    tokens = sum(int(d.get("draft_tokens") or 0) for d in deltas)
    if drafts and tokens:
        return max(1, math.ceil(tokens / drafts - 1e-9)), "measured: draft_tokens / drafts, rounded up"
    return DEFAULT_K, "default: llama.cpp's --spec-draft-n-max 3"


def _positions_drafted(config: Mapping[str, Any], gathered: Mapping[str, Any], by_pos: list[float]) -> int:
    """How many draft positions were drafted: the deepest position that was ever accepted, or the depth K
    the config drafts to, whichever is deeper. llama-server exports a counter for every position up to
    its n_max (64 for ngram-mod) whether or not a draft ever got that long; a position inside K that
    never pays is a finding, a position past every draft is noise."""
    if not by_pos:
        return 0
    last = max((i + 1 for i, v in enumerate(by_pos) if v > 0), default=0)
    deltas = [r["metrics_delta"] for r in gathered["requests"] if isinstance(r.get("metrics_delta"), Mapping)]
    k, source = _config_k(config, deltas)
    if source.startswith("default"):
        k = 0  # a guess says nothing about this run
    return min(len(by_pos), max(last, k))


def _drafter_of(config: Mapping[str, Any]) -> str | None:
    if config.get("drafter"):
        return str(config["drafter"])
    chain = config.get("chain") or []
    return next((t for t in chain if t.startswith("draft-")), next((t for t in chain if t.startswith("ngram-")), None))


def solve_p(mean_accepted_len: float, k: int) -> float:
    """The per-position acceptance p with A(p, K) = mean accepted length (clamped to [0, 1])."""
    k = be.check_k(k)
    if mean_accepted_len <= 1.0:
        return 0.0
    if mean_accepted_len >= k + 1:
        return 1.0
    lo, hi = 0.0, 1.0
    for _dummy in range(100):
        mid = 0.5 * (lo + hi)
        if be.expected_accepted(mid, k) < mean_accepted_len:
            lo = mid
        else:
            hi = mid
    return 0.5 * (lo + hi)


def _status(cfg: dict[str, Any], is_baseline: bool, all_rounds: set[int]) -> tuple[str, list[str]]:
    problems = list(cfg["problems"])
    for e in cfg["errors"]:
        kept = f" (kept the {e['partial_requests']} requests measured before it)" if e["partial_requests"] else ""
        problems.append(f"round {e['round']}: {e['error']}{kept}")
    missing = sorted(all_rounds - cfg["rounds_ok"] - {e["round"] for e in cfg["errors"]})
    if missing:
        problems.append(f"no entry for round(s) {', '.join(map(str, missing))}: the run stopped before it")
    if not cfg["requests"]:
        return FAILED, problems or ["not measured: the run has no entry for this config"]
    incomplete = bool(cfg["errors"]) or not all_rounds <= cfg["rounds_ok"]
    if is_baseline:
        return BASELINE, problems
    if cfg.get("probe_for"):
        return DRAFTER_PROBE, problems
    if cfg["texts"]["lossless"] is False:
        d = cfg["texts"]["first_divergence"]
        problems.insert(0, f"output differs from the baseline on {d['shape']} prompt {d['prompt_index']} "
                           f"(round {d['round']}) at char {d['position']}: a correctness bug")
        return INVALID, problems
    expected = [s for s in cfg["shape_requests"] if _should_draft(cfg["chain"], s)]
    if cfg["chain"] and (cfg["drafted"] == 0 or (expected and all(cfg["drafted_by_shape"][s] == 0 for s in expected))):
        problems.insert(0, f"chain {','.join(cfg['chain'])} drafted nothing (draft_n 0) where it should draft: "
                           f"the proposer is not engaged whatever the flags say")
        return NOT_ENGAGED, problems
    if incomplete:
        return INCOMPLETE, problems
    if not cfg["speculative"] and not cfg.get("knob"):
        return NEGATIVE_CONTROL, problems
    return OK, problems


def _gather(run: Mapping[str, Any], config: Mapping[str, Any]) -> dict[str, Any]:
    name = config["name"]
    entries = [e for e in run["entries"] if e["config"] == name]
    # A bench that comes with an error holds the requests measured before the failure: they are kept
    # (and judged), but that round does not count as complete.
    measured = [e for e in entries if e.get("bench") is not None]
    errors = [{"round": e["round"], "order": e["order"], "error": e.get("error") or "no bench document",
               "partial_requests": len(e["bench"]["requests"]) if e.get("bench") else 0}
              for e in entries if e.get("error") or e.get("bench") is None]
    requests = _requests_of(measured)
    by_shape: dict[str, list[dict[str, Any]]] = {}
    for r in requests:
        by_shape.setdefault(r["shape"], []).append(r)
    drafted_by_shape = {s: sum(request_drafts(r)[0] for r in rs) for s, rs in by_shape.items()}
    chain = config.get("chain")
    drafted = sum(drafted_by_shape.values())
    problems = []
    notes: list[str] = []
    for e in measured:
        for note in e["bench"].get("notes") or []:
            if isinstance(note, str) and note not in notes:
                notes.append(note)
    sources = sorted({str(r["rate_source"]) for r in requests
                      if r.get("rate_source") and r["rate_source"] != "timings.predicted_per_second"})
    if sources:
        notes.append(f"decode rates from {', '.join(sources)}, not the server's decode timings: they include "
                     f"prefill, so compare them only with configs measured the same way")
    if chain is not None and not chain and drafted:
        problems.append(f"drafted {drafted} tokens although its chain is empty: something speculates "
                        f"(a draft head the target carries?)")
    return {
        "name": name, "chain": chain, "entries": entries, "errors": errors, "requests": requests,
        "shape_requests": by_shape, "drafted_by_shape": drafted_by_shape, "drafted": drafted,
        "speculative": bool(chain) or drafted > 0,
        "rounds_ok": {e["round"] for e in measured if not e.get("error")},
        "problems": problems, "notes": notes,
        "total_deltas": [e["bench"].get("metrics_total_delta") for e in measured],
    }


def _row(cfg: dict[str, Any], shape: str, base: dict[str, Any] | None, status: str, is_baseline: bool,
         ref: Mapping[tuple[str, int], str], boot: dict[str, Any]) -> dict[str, Any]:
    reqs = cfg["shape_requests"].get(shape, [])
    samples = _rate_samples(reqs)
    row: dict[str, Any] = {"config": cfg["name"], "shape": shape, "n_requests": len(samples),
                           "n_rounds": len({k[0] for k in samples}), "median_tok_s": None,
                           "tok_s": None, "tok_s_ci_low": None, "tok_s_ci_high": None, "speedup": None,
                           "ci_low": None,
                           "ci_high": None, "ci_scheme": None, "ci_verdict": None}
    seed = f"{boot['seed']}:{cfg['name']}:{shape}"
    per_round = round_log_means(samples) if samples else {}
    row["n_per_round"] = {str(r): n for r, (_m, n) in sorted(per_round.items(), key=lambda kv: repr(kv[0]))}
    row["n"] = f"{len(per_round)}x{min(n for _m, n in per_round.values())}" if per_round else "0x0"
    if samples and boot["method"] == "rounds":
        row["median_tok_s"] = median(samples.values())
        row["tok_s"], row["tok_s_ci_low"], row["tok_s_ci_high"] = round_rate_ci(samples, alpha=boot["alpha"])
    elif samples:
        row["median_tok_s"], row["tok_s_ci_low"], row["tok_s_ci_high"] = bootstrap_median_ci(
            samples, n=boot["n"], seed=seed, alpha=boot["alpha"])
        row["tok_s"] = row["median_tok_s"]
    row["acceptance"] = acceptance(reqs)
    row["mean_accepted_len"], row["mean_accepted_len_source"] = mean_accepted_length(reqs)
    row["draft_n"] = sum(request_drafts(r)[0] for r in reqs)
    row["draft_n_accepted"] = sum(request_drafts(r)[1] for r in reqs)
    row["acceptance_by_position"] = acceptance_by_position(r.get("metrics_delta") for r in reqs)
    row["should_draft"] = _should_draft(cfg["chain"], shape)
    engage_known = (cfg["speculative"] or (is_baseline and bool(cfg["chain"]))) and bool(reqs)
    row["engaged"] = (row["draft_n"] > 0) if engage_known else None
    row["empty"] = sum(1 for r in reqs if is_empty(r))
    if is_baseline:
        texts = {"lossless": "reference", "compared": 0, "vacuous": row["empty"], "differ": 0, "first_divergence": None}
    elif status == DRAFTER_PROBE:
        texts = {"lossless": None, "compared": 0, "vacuous": 0, "differ": 0, "first_divergence": None}
    else:
        texts = _compare_texts(reqs, cfg.get("reference_texts") or ref)
        if cfg.get("lossy"):  # lossy by design (_quality): differences are measured, not a bug
            texts = _quality.as_lossy(texts)
    row["lossless"] = texts["lossless"]
    row["texts_compared"] = texts["compared"]
    row["texts_vacuous"] = texts["vacuous"]
    row["first_divergence"] = texts["first_divergence"]

    base_samples = _rate_samples(base["shape_requests"].get(shape, [])) if base else {}
    if not is_baseline and samples and base_samples and boot["method"] == "rounds":
        rci = round_ratio_ci(samples, base_samples, alpha=boot["alpha"])
        row.update(speedup=rci.ratio, ci_low=rci.low, ci_high=rci.high, ci_scheme=f"paired rounds, t df {rci.df}",
                   n=rci.n, n_paired_rounds=rci.rounds, n_requests_per_round=rci.requests,
                   ci_verdict=round_verdict(rci, boot["margin"]))
    elif not is_baseline and samples and base_samples:
        ci = bootstrap_ratio_ci(samples, base_samples, n=boot["n"], seed=seed, alpha=boot["alpha"])
        row.update(speedup=ci.ratio, ci_low=ci.low, ci_high=ci.high, ci_scheme=ci.scheme)
        enough = len(samples) >= MIN_REQUESTS and len(base_samples) >= MIN_REQUESTS
        row["ci_verdict"] = verdict(ci.low, ci.high) if enough else "too few requests"
    row["verdict"] = _row_verdict(row, status, is_baseline, bool(base_samples))
    return row


def _row_verdict(row: dict[str, Any], status: str, is_baseline: bool, has_base: bool) -> str:
    if is_baseline:
        return "baseline"
    if status == FAILED:
        return "failed"
    if status == DRAFTER_PROBE:
        return "drafter probe"
    if not row["n_requests"]:
        return "no data"
    if not has_base:
        return "no baseline"
    if status == INVALID or row["lossless"] is False:
        return "invalid"
    if status == NOT_ENGAGED or (row["should_draft"] and row["engaged"] is False):
        return "not engaged"
    if status == INCOMPLETE:
        return "incomplete"
    return row["ci_verdict"]


def _model_path(value: Any) -> str | None:
    text = str(value).strip() if value not in (None, "") else ""
    return text.rstrip("/") or None


def drafter_probes(configs: Sequence[Mapping[str, Any]], baseline: str) -> dict[str, list[str]]:
    """Configs that serve another config's draft model alone: probe name -> the configs it measures d_s for.

    A probe is a config with no speculation of its own whose ``LLAMA_ARG_MODEL`` is the
    ``LLAMA_ARG_SPEC_DRAFT_MODEL`` of a speculative config in the same run: the draft model decoding on
    its own, one token per pass, is the drafter's step d_s on this host.
    """
    drafts: dict[str, list[str]] = {}
    for c in configs:
        env = c.get("server_config") or {}
        if not isinstance(env, Mapping):
            continue
        for var in DRAFT_MODEL_VARS:
            path = _model_path(env.get(var))
            if path:
                drafts.setdefault(path, []).append(str(c["name"]))
    out: dict[str, list[str]] = {}
    for c in configs:
        env = c.get("server_config") or {}
        if c["name"] == baseline or not isinstance(env, Mapping) or c.get("chain"):
            continue
        if any(_model_path(env.get(v)) for v in DRAFT_MODEL_VARS) or env.get("LLAMA_ARG_SPEC_TYPE"):
            continue
        served = drafts.get(_model_path(env.get("LLAMA_ARG_MODEL")) or "")
        if served:
            out[str(c["name"])] = served
    return out


def _prediction(cfg: dict[str, Any], config: Mapping[str, Any], shape: str, row: dict[str, Any],
                base_row: dict[str, Any], d_s_ms: Any, probe: Mapping[str, Any] | None = None
                ) -> dict[str, Any] | None:
    reqs = cfg["shape_requests"].get(shape, [])
    if not row["median_tok_s"] or not base_row or not base_row.get("median_tok_s"):
        return None
    deltas = [r["metrics_delta"] for r in reqs if isinstance(r.get("metrics_delta"), Mapping)]
    k, k_source = _config_k(config, deltas)
    drafter = _drafter_of(config)
    try:
        passes = be.draft_passes_for(drafter, k)
    except be.BreakevenError:
        passes = k
    measured_len = row["mean_accepted_len"] if row["mean_accepted_len_source"].startswith("metrics") else None
    if measured_len is not None:
        p = solve_p(measured_len, k)
        p_source = "A(p, K) = 1 + accepted / drafts (metrics)"
    else:
        acc = row["acceptance"] or 0.0
        p = solve_p(1.0 + acc * k, k)
        p_source = "A(p, K) - 1 = acceptance * K (per-request counters)"
    base_commit = base_row.get("mean_accepted_len") or 1.0
    t_s = be.target_step_from_rate(base_row["median_tok_s"], max(1.0, base_commit))
    a = be.expected_accepted(p, k)
    out: dict[str, Any] = {
        "config": cfg["name"], "shape": shape, "k": k, "k_source": k_source, "drafter": drafter,
        "draft_passes": passes, "p": p, "p_source": p_source, "expected_accepted": a,
        "t_s_ms": t_s, "measured_tok_s": row["median_tok_s"], "measured_speedup": row["speedup"],
        "ci_low": row["ci_low"], "ci_high": row["ci_high"], "baseline_tok_s": base_row["median_tok_s"],
        "t_s_source": (f"measured: the baseline on {shape}, 1000 / ({base_row['median_tok_s']:.1f} tok/s / "
                       f"{max(1.0, base_commit):.2f} tokens per pass)"),
    }
    d_s = d_s_ms.get(cfg["name"]) if isinstance(d_s_ms, Mapping) else d_s_ms
    if passes == 0:
        d_s, out["d_s_source"] = 0.0, "n-gram lookup: no drafter passes"
    elif probe is not None:
        # measured on this host beats any number from inventory
        d_s = 1000.0 / probe["shapes"][shape]["median_tok_s"]
        out["d_s_source"] = (f"measured: {probe['name']} (the draft model served alone) on {shape}, "
                             f"1000 / {probe['shapes'][shape]['median_tok_s']:.1f} tok/s")
        out["d_s_given_ms"] = d_s_ms.get(cfg["name"]) if isinstance(d_s_ms, Mapping) else d_s_ms
    elif d_s is not None:
        d_s, out["d_s_source"] = be.check_positive("d_s_ms", d_s, "ms"), "given (inventory), not measured"
    if d_s is not None:
        predicted = be.rate(p, k, d_s, t_s, draft_passes=passes)
        # what verifying K+1 tokens cost, in target steps, if d_s is right: the arithmetic assumes 1.1 (a GPU
        # verifies a short batch for about the price of one step); a CPU pays more per extra token
        implied_verify = (1000.0 * a / row["median_tok_s"] - passes * d_s) / t_s if t_s > 0 else None
        out.update(d_s_ms=d_s, predicted_tok_s=predicted, predicted_speedup=predicted / base_row["median_tok_s"],
                   implied_d_s_ms=None, implied_verify_steps=implied_verify)
    else:
        # the d_s at which the arithmetic reproduces the measured rate
        implied = (1000.0 * a / row["median_tok_s"] - be.VERIFY_FACTOR * t_s) / passes
        out.update(d_s_ms=None, d_s_source="not given: implied by the measured rate", predicted_tok_s=None,
                   predicted_speedup=None, implied_d_s_ms=implied)
        if implied < 0:
            out["note"] = ("measured faster than the arithmetic allows even at d_s = 0: verification costs "
                           "less than 1.1 target steps here, or K is smaller than assumed")
    return out


def judge(run: Any, *, d_s_ms: float | Mapping[str, float] | None = None, n_boot: int = 2000, seed: int = 0,
          alpha: float = 0.05, method: str = "rounds", margin: float = EQUIVALENCE_MARGIN) -> dict[str, Any]:
    """Every verdict of a run: per config a status, per shape a row, the prediction and a recommendation.

    ``d_s_ms``: the drafter's step in ms (one number for all configs, or per config name); without it
    the prediction reports the d_s the measured rate implies.
    ``method``: ``rounds`` (the calibrated t-interval over rounds, :func:`round_ratio_ci`, with the
    practical-equivalence ``margin``) or ``request-bootstrap`` (the old percentile bootstrap over
    requests, which ignores the variance between server starts; kept to compare the two, see
    benchmarks/calibration.py). ``n_boot`` and ``seed`` only matter to the bootstrap.
    """
    from ansible_collections.llmfleet.specdec.plugins.module_utils import _loadgate  # it imports this module

    run = check_run(run)
    if method not in METHODS:
        raise ReportInputError(f"method: expected one of {', '.join(METHODS)}, got {method!r}")
    if isinstance(margin, bool) or not isinstance(margin, (int, float)) or not 0.0 <= margin < 1.0:
        raise ReportInputError(f"margin: expected a share in [0, 1), such as 0.02, got {margin!r}")
    boot = {"n": n_boot, "seed": seed, "alpha": alpha, "method": method,
            "margin": float(margin) if method == "rounds" else 0.0}
    _check_boot(n_boot, alpha)
    shapes = _shapes_in(run)
    all_rounds = {e["round"] for e in run["entries"]}
    baseline_name = run["baseline"]
    gathered = {c["name"]: _gather(run, c) for c in run["configs"]}
    probes = drafter_probes(run["configs"], baseline_name)
    for name, served_for in probes.items():
        gathered[name]["probe_for"] = served_for
    base = gathered[baseline_name]
    ref, warnings = _reference_texts(base["requests"])
    judging = _quality.plan(run["configs"], baseline_name, list(probes))
    for g in gathered.values():
        if g["name"] != baseline_name:
            _quality.setup(g, judging[g["name"]], gathered, baseline_name, ref, warnings)
            g["texts"] = (_compare_texts(g["requests"], g.get("reference_texts") or ref) if not g.get("probe_for") else
                          {"lossless": None, "compared": 0, "vacuous": 0, "differ": 0, "first_divergence": None})
            if g.get("lossy"):
                g["texts"] = _quality.as_lossy(g["texts"])

    configs: dict[str, Any] = {}
    for c in run["configs"]:
        g = gathered[c["name"]]
        is_base = c["name"] == baseline_name
        status, problems = _status(g, is_base, all_rounds)
        load_gate = _loadgate.config_gate(g["entries"])  # texts under concurrent load (issue 13)
        status, problems = _loadgate.judge_status(status, problems, load_gate, is_base,
                                                  {"FAILED": FAILED, "INVALID": INVALID})
        rows = {s: _row(g, s, base if base["requests"] else None, status, is_base, ref, boot) for s in shapes}
        for s, r in rows.items():
            if r["should_draft"] and r["engaged"] is False and status not in (NOT_ENGAGED, FAILED):
                problems.append(f"drafted nothing on {s}, where {','.join(g['chain'])} should draft")
        by_pos = acceptance_by_position(r.get("metrics_delta") for r in g["requests"])
        by_pos_source = "metrics_delta per request"
        if not by_pos and g["drafted"]:
            by_pos = acceptance_by_position(g["total_deltas"])
            by_pos_source = "metrics_total_delta per call (all shapes)" if by_pos else "not available"
        positions_shown = _positions_drafted(c, g, by_pos)
        if status == FAILED:
            g["texts"] = {"lossless": None, "compared": 0, "vacuous": 0, "differ": 0, "first_divergence": None}
            for r in rows.values():
                r["lossless"] = None
        texts = g.get("texts") or {"lossless": "reference", "compared": 0, "vacuous": 0, "differ": 0,
                                   "first_divergence": None}
        configs[c["name"]] = {
            "name": c["name"], "status": status, "role": "baseline" if is_base else (
                "drafter probe" if status == DRAFTER_PROBE else "speculative" if g["speculative"] else
                "knob" if g.get("knob") else "control"),
            "probe_for": g.get("probe_for") or [],
            "chain": g["chain"], "speculative": g["speculative"], "problems": problems, "notes": g["notes"],
            "errors": g["errors"],
            "entries_ok": len([e for e in g["entries"] if e.get("bench") is not None and not e.get("error")]),
            "entries_failed": len(g["errors"]), "rounds_ok": sorted(g["rounds_ok"]),
            "lossless": texts["lossless"], "texts_compared": texts["compared"], "texts_vacuous": texts["vacuous"],
            "first_divergence": texts["first_divergence"],
            "engaged": (g["drafted"] > 0) if (g["speculative"] or g["chain"]) and g["requests"] else None,
            "draft_n": g["drafted"], "acceptance": acceptance(g["requests"]),
            "acceptance_by_position": by_pos, "acceptance_by_position_source": by_pos_source if by_pos else "not available",
            "positions_drafted": positions_shown,
            "shapes": rows, "load_gate": load_gate,
            "judging": judging[c["name"]], "quality": g.get("quality"),
        }
    base_judged = configs[baseline_name]
    if base_judged["status"] == FAILED:
        warnings.insert(0, f"the baseline {baseline_name!r} has no measurement: nothing can be compared")
    elif base_judged["problems"]:
        warnings.insert(0, f"the baseline {baseline_name!r} is incomplete ({'; '.join(base_judged['problems'])}): "
                           f"speedups rest on partial baseline data and no recommendation is made")
    for name, j in configs.items():
        if j["status"] == NEGATIVE_CONTROL:
            moved = [s for s, r in j["shapes"].items() if r["ci_verdict"] in (WIN, LOSS)]
            if moved:
                warnings.append(f"the negative control {name!r} differs from the baseline on {', '.join(moved)} "
                                f"without drafting: that difference is noise, drift or another knob, not speculation; "
                                f"read the other verdicts with that margin in mind")
        if j["lossless"] == VACUOUS and j["role"] != "baseline" and j["status"] != FAILED:
            warnings.append(f"{name!r}: every text comparison was vacuous (empty answers): losslessness is unproven")

    if base_judged["load_gate"]["status"] in (_loadgate.FAILED, _loadgate.INVALID):
        warnings.append(f"the baseline {baseline_name!r} itself fails the load gate ({base_judged['load_gate']['problem']}): "
                        f"production is not safe at this concurrency either")

    prediction = []
    for c in run["configs"]:
        j = configs[c["name"]]
        if j["role"] != "speculative" or j["status"] not in (OK, INCOMPLETE):
            continue
        for s in shapes:
            if not j["shapes"][s]["draft_n"]:
                continue  # nothing drafted: no acceptance to predict from
            probe = next((configs[n] for n, served in probes.items() if c["name"] in served
                          and configs[n]["shapes"].get(s, {}).get("median_tok_s")), None)
            p = _prediction(gathered[c["name"]], c, s, j["shapes"][s], base_judged["shapes"].get(s), d_s_ms, probe)
            if p is not None:
                prediction.append(p)

    judged = {
        "baseline": baseline_name, "shapes": shapes, "rounds": sorted(all_rounds),
        "order": [c["name"] for c in run["configs"]], "configs": configs, "prediction": prediction,
        "load": _loadgate.load_section({n: g["entries"] for n, g in gathered.items()}, baseline_name, shapes,
                                       {n: j["shapes"] for n, j in configs.items()}, boot),
        "warnings": warnings, "run_error": run.get("error"), "mix": run["mix"],
        "bootstrap": {"n": n_boot, "seed": seed, "alpha": alpha, "scheme": BOOTSTRAP_SCHEME,
                      "min_requests": MIN_REQUESTS},
        "statistics": {"method": method, "alpha": alpha, "margin": boot["margin"],
                       "scheme": ROUNDS_SCHEME if method == "rounds" else BOOTSTRAP_SCHEME,
                       "min_rounds": MIN_ROUNDS if method == "rounds" else 1,
                       "min_requests_per_round": MIN_REQUESTS_PER_ROUND if method == "rounds" else None,
                       "min_requests": None if method == "rounds" else MIN_REQUESTS},
        "method": {"mix": MIX_COMBINATION, "p": P_ESTIMATE,
                   "mean_accepted_len": MEAN_LEN_METHOD},
    }
    judged["recommendation"] = recommend(judged, gathered, boot)
    return judged


def recommend(judged: Mapping[str, Any], gathered: Mapping[str, Any], boot: Mapping[str, Any]) -> dict[str, Any] | None:
    """The config to run for the declared traffic mix, or None when no mix was declared.

    Only OK configs are candidates (never INVALID, NOT ENGAGED, FAILED, INCOMPLETE or the negative
    control); a candidate must beat the baseline over the mix with the whole interval above 1 (plus the
    equivalence margin), judged with the same method as the per-shape verdicts (:func:`round_mix_ci`),
    otherwise the recommendation is to keep the baseline.
    """
    mix = judged["mix"]
    if not mix:
        return None
    baseline = judged["baseline"]
    out: dict[str, Any] = {"mix": dict(mix), "weights_are": "shares of generated tokens per shape",
                           "combination": MIX_COMBINATION, "config": None, "keep_baseline": False,
                           "speedup": None, "ci_low": None, "ci_high": None, "candidates": [], "excluded": []}
    unknown = [s for s in mix if s not in judged["shapes"]]
    base_j = judged["configs"][baseline]
    if unknown:
        out["reason"] = (f"the mix names shape(s) {', '.join(unknown)} that no config measured "
                         f"(measured: {', '.join(judged['shapes']) or 'none'}): no recommendation")
        return out
    missing = [s for s in mix if not base_j["shapes"][s]["n_requests"]]
    if base_j["status"] != BASELINE or base_j["problems"] or missing:
        out["reason"] = (f"the baseline {baseline!r} is {base_j['status']}"
                         + (f" with problems ({'; '.join(base_j['problems'])})" if base_j["problems"] else "")
                         + (f" and has no rate on {', '.join(missing)}" if missing else "")
                         + ": no recommendation from partial baseline data")
        return out
    base_samples = {s: _rate_samples(gathered[baseline]["shape_requests"].get(s, [])) for s in mix}
    for name, j in judged["configs"].items():
        if name == baseline:
            continue
        if j["status"] in ELIGIBLE and (j.get("judging") or {}).get("judging") == _quality.LOSSY:
            out["excluded"].append({"config": name, "status": j["status"], "reason": _quality.NOT_RECOMMENDED})
            continue
        if j["status"] not in ELIGIBLE:
            reason = "; ".join(j["problems"]) or ("a control, not a candidate" if j["status"] == NEGATIVE_CONTROL
                                                  else "measures a draft model's step, not a candidate"
                                                  if j["status"] == DRAFTER_PROBE else j["status"])
            out["excluded"].append({"config": name, "status": j["status"], "reason": reason})
            continue
        bad = [s for s in mix if j["shapes"][s]["verdict"] in ("not engaged", "invalid", "no data")]
        if bad:
            out["excluded"].append({"config": name, "status": j["status"],
                                    "reason": f"not judged on {', '.join(bad)}"})
            continue
        samples = {s: _rate_samples(gathered[name]["shape_requests"].get(s, [])) for s in mix}
        if boot.get("method", "rounds") == "rounds":
            rci = round_mix_ci(samples, base_samples, mix, alpha=boot["alpha"])
            out["candidates"].append({
                "config": name, "mix_tok_s": mix_rate({s: j["shapes"][s]["tok_s"] for s in mix}, mix),
                "speedup": rci.ratio, "ci_low": rci.low, "ci_high": rci.high, "n": rci.n,
                "verdict": round_verdict(rci, boot["margin"])})
            continue
        ci = bootstrap_mix_ci(samples, base_samples, mix, n=boot["n"], seed=f"{boot['seed']}:{name}:mix",
                              alpha=boot["alpha"])
        enough = all(len(samples[s]) >= MIN_REQUESTS and len(base_samples[s]) >= MIN_REQUESTS for s in mix)
        out["candidates"].append({
            "config": name, "mix_tok_s": mix_rate({s: j["shapes"][s]["median_tok_s"] for s in mix}, mix),
            "speedup": ci.ratio, "ci_low": ci.low, "ci_high": ci.high, "n": f"{len(samples)} requests",
            "verdict": verdict(ci.low, ci.high) if enough else "too few requests"})
    out["baseline_mix_tok_s"] = mix_rate({s: base_j["shapes"][s]["tok_s"] for s in mix}, mix)
    winners = [c for c in out["candidates"] if c["verdict"] == WIN]
    if winners:
        best = max(winners, key=lambda c: c["speedup"])
        out.update(config=best["config"], speedup=best["speedup"], ci_low=best["ci_low"], ci_high=best["ci_high"],
                   n=best["n"],
                   reason=(f"{best['config']} is {best['speedup']:.2f}x the baseline over this mix "
                           f"[{best['ci_low']:.2f}, {best['ci_high']:.2f}] (n {best['n']}), the fastest config "
                           f"whose whole interval lies above 1" + (f" + {boot['margin']:g}" if boot.get("margin")
                                                                   else "")))
    else:
        out.update(config=baseline, keep_baseline=True,
                   reason="no eligible config beats the baseline over this mix with its whole interval above 1: "
                          "keep the baseline")
    return out
