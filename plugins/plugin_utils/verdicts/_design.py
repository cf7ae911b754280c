# Copyright: (c) 2026, llmfleet.specdec contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# Private to the collection, controller only: the run as one block design, Dunnett's many-to-one intervals, the sequential looks.
"""The confirmatory analysis of an A/B run (docs/statistics.md says why each step is what it is).

- :func:`fit_blocks`: the run as a randomized complete block design on log rates. Rounds are blocks, configs
  are treatments, ``y[config][round] = mu + tau_config + beta_round + e`` fitted by least squares over every
  cell the run measured (a config dropped after round 2 still gives its two rounds to the residual); the
  residual variance is pooled across all configs, with ``df = cells - configs - rounds + 1``.
- :func:`dunnett_c`: the one-sided many-to-one critical value, P(max_i T_i <= c) = 1 - alpha for
  multivariate t with equal correlation rho, computed by numerical integration (the common factor and the
  chi variable of the pooled variance, Simpson's rule on both).
- :func:`verdict`: WIN / LOSS / EQUIVALENT / INCONCLUSIVE from a simultaneous interval and a margin.
- :func:`sequential`: looks after rounds 2 .. max_rounds; at each look the undecided candidates are tested
  against the baseline with the critical value of that look's share of alpha (alpha spent by an O'Brien-Fleming-
  type function of the share of the planned rounds, the looks' shares adding up to alpha), and a candidate
  whose optimistic bound cannot reach halfway to the smallest speedup worth having is stopped as futile (its
  own small share of beta). A decided candidate is measured no more.

Standard library only; pure and deterministic.
"""
from __future__ import annotations

import functools
import math
from typing import Any, Mapping, NamedTuple, Sequence

from ansible_collections.llmfleet.specdec.plugins.module_utils.common import _stats
from ansible_collections.llmfleet.specdec.plugins.module_utils.common._stats import ReportInputError
from ansible_collections.llmfleet.specdec.plugins.plugin_utils.verdicts._dunnett import ALPHA, _norm_cdf, _z, dunnett_c

# the t distribution's tail and quantile, remembered: a run's looks ask for the same few values again and again
t_cdf = functools.lru_cache(maxsize=8192)(_stats.t_cdf)
t_quantile = functools.lru_cache(maxsize=8192)(_stats.t_quantile)

WIN = "WIN"
LOSS = "LOSS"
EQUIVALENT = "EQUIVALENT"
INCONCLUSIVE = "INCONCLUSIVE"
VERDICTS = (WIN, LOSS, EQUIVALENT, INCONCLUSIVE)

# ALPHA (from _dunnett): the family-wise false-WIN rate across the run's candidates and looks (one-sided; LOSS has
# the same rate).
# EQUIVALENT: the whole interval within 1 +- this share.
EQUIVALENCE_MARGIN = 0.05
# The design's planned effect: the smallest speedup worth a change. A candidate that cannot reach it any more is
# stopped (futile); the fixed design it is compared with is the one with POWER at this effect.
MIN_SPEEDUP = 1.2
POWER = 0.8
# The share of power the futility stops may cost at most (spent across looks like alpha).
BETA = 0.2
_TIE = 1e-9  # rounding, not a speedup: a run without any noise gives a point interval
_ZERO_NOISE = 1e-6  # a pooled SD (log scale) at or below this is rounding, not noise: no measured start is this steady
# A candidate's own spread replaces the candidates' pooled one in its error where an F test says it is larger at
# this level: a candidate 3x noisier than the others is then judged on its own noise.
NOISY_CANDIDATE = 0.05
# In a comparison's Welch-Satterthwaite df the candidates' side counts at most this many times the baseline's df.
OTHER_DF = 2.0
FIRST_LOOK = 2  # no look before two rounds: one round gives no variance between starts
MAX_ROUNDS = 5

METHOD = (
    "randomized complete block design on log rates (rounds are blocks, configs treatments, fitted by least "
    "squares over every measured cell; residual variance pooled across configs); each comparison's error the "
    "larger of the pooled one and the one from the baseline's own spread beside the candidates' pooled spread "
    "(Shukla's per-config variances; a candidate's own where an F test says it is the noisier), at "
    "Welch-Satterthwaite's df (the baseline's part counted at least as large as the other's, the other's df at "
    "most twice the baseline's); "
    "many-to-one comparisons against the baseline with Dunnett's one-sided critical value (multivariate t, "
    "equal correlation, computed by numerical integration) for every candidate of the run; sequential looks "
    "from round 2, alpha spent by an "
    "O'Brien-Fleming-type function of the share of planned rounds (the looks' shares add up to alpha); futility "
    "when the optimistic bound cannot reach halfway (log scale) to the planned speedup")


# ---------------------------------------------------------------------------------------------
# the block design


class Fit(NamedTuple):
    """The least-squares fit of one endpoint: per candidate the log ratio to the baseline and its standard
    error, the pooled residual SD ``s`` of one config's round value and its ``df``, the correlation between
    the comparisons (``corr[a][b]``), and how many rounds each config has in the fit.

    ``spread`` is each config's own residual SD (log scale). With three configs or more ``se`` is the larger of
    the pooled standard error (``pooled_se``) and the one from the baseline's own spread beside the candidates'
    pooled spread (the candidate's own where an F test at NOISY_CANDIDATE says it is the noisier), and ``df_of``
    is always those two's Welch-Satterthwaite degrees of freedom (:func:`welch_df`), whichever error is larger:
    the comparison's critical value is taken at them. With two configs the pair's error is the pooled one, at
    the pooled df."""

    estimate: dict[str, float]
    se: dict[str, float]
    corr: dict[str, dict[str, float]]
    s: float | None
    df: int
    rounds: dict[str, int]
    blocks: int
    spread: dict[str, float | None]
    pooled_se: dict[str, float]
    df_of: dict[str, float]


def _solve_inverse(matrix: list[list[float]]) -> list[list[float]] | None:
    """The inverse by Gauss-Jordan with partial pivoting; None when singular."""
    n = len(matrix)
    a = [row[:] + [1.0 if i == j else 0.0 for j in range(n)] for i, row in enumerate(matrix)]
    for col in range(n):
        pivot = max(range(col, n), key=lambda r: abs(a[r][col]))
        if abs(a[pivot][col]) < 1e-12:
            return None
        a[col], a[pivot] = a[pivot], a[col]
        p = a[col][col]
        a[col] = [v / p for v in a[col]]
        for r in range(n):
            if r != col and a[r][col] != 0.0:
                f = a[r][col]
                a[r] = [x - f * y for x, y in zip(a[r], a[col])]
    return [row[n:] for row in a]


def _layout(cells: Mapping[str, Mapping[Any, float]], baseline: str) -> tuple | None:
    """The block model's columns, one place for the fit and its residual maker: the baseline's cells, its rounds (the
    blocks), the configs measured in one of them, each config's column, each block's column but the first, and the
    number of parameters. None when the baseline has no value at all."""
    base = cells.get(baseline) or {}
    blocks = sorted(base, key=repr)
    if not blocks:
        return None
    names = [baseline] + [n for n in cells if n != baseline and any(r in base for r in cells[n])]
    col = {n: i for i, n in enumerate(names)}
    bcol = {r: len(names) + i - 1 for i, r in enumerate(blocks) if i > 0}
    return base, blocks, names, col, bcol, len(names) + len(blocks) - 1


def fit_blocks(cells: Mapping[str, Mapping[Any, float]], baseline: str) -> Fit | None:
    """Fit ``y = tau_config + beta_round + e`` to ``cells`` ({config: {round: y}}) by least squares.

    Only the rounds in which the baseline has a value are blocks (a comparison needs the baseline in its
    block). None when the baseline has no value at all.
    """
    layout = _layout(cells, baseline)
    if layout is None:
        return None
    base, blocks, names, col, bcol, p = layout
    xtx = [[0.0] * p for _dummy in range(p)]
    xty = [0.0] * p
    yy = 0.0
    count = 0
    rounds: dict[str, int] = {}
    for n in names:
        for r, y in cells[n].items():
            if r not in base:
                continue
            if not isinstance(y, (int, float)) or isinstance(y, bool) or not math.isfinite(y):
                raise ReportInputError(f"cell {n}/{r}: expected a finite number, got {y!r}")
            idx = [col[n]] + ([bcol[r]] if r in bcol else [])
            for i in idx:
                xty[i] += y
                for j in idx:
                    xtx[i][j] += 1.0
            yy += y * y
            count += 1
            rounds[n] = rounds.get(n, 0) + 1
    inv = _solve_inverse(xtx)
    if inv is None:
        return None
    beta = [sum(inv[i][j] * xty[j] for j in range(p)) for i in range(p)]
    df = count - p
    sse = max(0.0, yy - sum(b * v for b, v in zip(beta, xty)))
    s = math.sqrt(sse / df) if df > 0 else None
    b0 = col[baseline]
    estimate, var = {}, {}
    for n in names[1:]:
        i = col[n]
        estimate[n] = beta[i] - beta[b0]
        var[n] = inv[i][i] + inv[b0][b0] - 2.0 * inv[i][b0]
    corr: dict[str, dict[str, float]] = {}
    for a in names[1:]:
        corr[a] = {}
        for b in names[1:]:
            if a != b:
                cov = inv[col[a]][col[b]] - inv[col[a]][b0] - inv[b0][col[b]] + inv[b0][b0]
                corr[a][b] = cov / math.sqrt(var[a] * var[b])
    pooled = {n: (s * math.sqrt(v) if s is not None else math.nan) for n, v in var.items()}
    spread, share = _spread(cells, names, base, beta, col, bcol, df, count)
    se, df_of = dict(pooled), {n: float(df) for n in pooled}
    # The variance model: the baseline's own spread (its Shukla estimate, blocks - 1 df), the candidates' spread
    # pooled (their Shukla variances averaged, the residual df less the baseline's), and a candidate's own spread
    # only where an F test at NOISY_CANDIDATE says it is beyond the candidates' pooled one.
    others = [spread[n] for n in names[1:] if spread[n] is not None]
    rest = math.sqrt(sum(x * x for x in others) / len(others)) if others else None
    rest_df = max(float(share[baseline]), float(df) - share[baseline])
    for n in pooled:
        a, own = spread[baseline], spread[n]
        # each config's own variance is identifiable only with three configs or more (Shukla): with two, a round's
        # two residuals are each other's negatives, the pair's error is the pooled one, and a rounding difference
        # must not swap the pooled df for one degree of freedom
        if s is None or a is None or own is None or rest is None or len(names) < 3:
            continue
        # A baseline noisier than the rest is shared by every comparison: the pooled error, mostly the steady
        # candidates', is too small for all of them at once (8.4 % and 11.6 % false WIN at a 3x noisier baseline
        # with 4 and 8 candidates). So the error is the larger of the pooled one and the one from the baseline's
        # own spread beside the candidates' pooled spread, at Welch-Satterthwaite's df of those two: the
        # candidates' pooled spread has many df, so with equal noise the df stay near the pooled ones, where the
        # pair's own spreads (blocks - 1 df each) cost a true 1.2x its recommendation in a fifth of the runs.
        other, other_df = rest, rest_df
        if own > rest and (rest <= 0 or _f_upper(own * own / (rest * rest), share[n], rest_df) < NOISY_CANDIDATE):
            other, other_df = own, share[n]  # this candidate is the noisy one: its own spread, at its own df
        se[n] = max(pooled[n], math.sqrt(var[n] / 2.0 * (a * a + other * other)))
        # Welch-Satterthwaite trusts a baseline spread that read low by chance (1 to 4 df) and hands the pooled
        # candidates' df to an error that is then too small for every comparison at once: the baseline's part
        # counts at least as much as the other's, and the other side at most OTHER_DF times the baseline's df.
        guard = max(a, other)
        df_of[n] = welch_df(guard * guard, other * other, share[baseline], min(other_df, OTHER_DF * share[baseline]),
                            float(df))
    return Fit(estimate, se, corr, s, df, rounds, len(blocks), spread, pooled, df_of)


def _f_upper(x: float, d1: float, d2: float) -> float:
    """P(F > x) for an F distribution with (d1, d2) degrees of freedom."""
    if not x > 0:
        return 1.0
    if not math.isfinite(x):
        return 0.0
    return _stats._betainc(d2 / 2.0, d1 / 2.0, d2 / (d2 + d1 * x))


def residual_maker(cells: Mapping[str, Mapping[Any, float]], baseline: str
                   ) -> tuple[list[tuple[str, Any]], list[list[float]]] | None:
    """The cells the block model fits (as (config, round), in a fixed order) and its residual-maker matrix
    I - X (X'X)^-1 X': residuals = M y. None where the model cannot be fitted."""
    layout = _layout(cells, baseline)
    if layout is None:
        return None
    base, _dummy, names, col, bcol, p = layout
    index = [(n, r) for n in names for r in sorted(cells[n], key=repr) if r in base]
    rows = [[col[n]] + ([bcol[r]] if r in bcol else []) for n, r in index]
    xtx = [[0.0] * p for _dummy in range(p)]
    for idx in rows:
        for i in idx:
            for j in idx:
                xtx[i][j] += 1.0
    inv = _solve_inverse(xtx)
    if inv is None or len(index) <= p:
        return None
    m = [[(1.0 if a == b else 0.0) - sum(inv[i][j] for i in ra for j in rb) for b, rb in enumerate(rows)]
         for a, ra in enumerate(rows)]
    return index, m


def welch_df(var_a: float, var_b: float, df_a: float, df_b: float, pooled_df: float) -> float:
    """Welch-Satterthwaite's degrees of freedom of ``var_a + var_b`` (two variance estimates with ``df_a`` and
    ``df_b``), between the smaller of the two and their sum, never above ``pooled_df``; rounded down to a tenth
    (a smaller df is a larger, safer critical value)."""
    low = min(df_a, df_b)
    top = max(var_a, var_b)
    if top > 0 and low > 0:  # on the larger variance's scale: squares of 1e-200 must not underflow to 0 / 0
        a, b = var_a / top, var_b / top
        ws = (a + b) * (a + b) / (a * a / df_a + b * b / df_b)
    else:
        ws = low
    return math.floor(min(pooled_df, max(low, min(ws, df_a + df_b))) * 10.0 + 1e-9) / 10.0


def _spread(cells: Mapping[str, Mapping[Any, float]], names: Sequence[str], base: Mapping[Any, float],
            beta: Sequence[float], col: Mapping[str, int], bcol: Mapping[Any, int], df: int, count: int
            ) -> tuple[dict[str, float | None], dict[str, float]]:
    """Each config's residual SD (log scale): its squared residuals over its share of the residual df; and
    that share."""
    out: dict[str, float | None] = {}
    shares: dict[str, float] = {}
    for n in names:
        res = [y - beta[col[n]] - (beta[bcol[r]] if r in bcol else 0.0) for r, y in cells[n].items() if r in base]
        shares[n] = df * len(res) / count if count else 0.0
        out[n] = math.sqrt(sum(e * e for e in res) / shares[n]) if shares[n] > 0 else None
    k, blocks = len(names), len(base)
    if k >= 3 and blocks >= 2 and df > 0:  # Shukla's unbiased per-config variance in a two-way layout
        mean_sq = {n: sum((y - beta[col[n]] - (beta[bcol[r]] if r in bcol else 0.0)) ** 2
                          for r, y in cells[n].items() if r in base) / max(1, sum(r in base for r in cells[n]))
                   for n in names}
        total = sum(mean_sq.values())
        for n in names:
            v = (k * (k - 1) * mean_sq[n] - total) * blocks / ((blocks - 1) * (k - 1) * (k - 2))
            out[n] = math.sqrt(max(v, 0.0))
            shares[n] = float(blocks - 1)
    return out, shares


# ---------------------------------------------------------------------------------------------
# verdicts


def verdict(low: float | None, high: float | None, margin: float = EQUIVALENCE_MARGIN) -> str:
    """WIN: the whole interval above 1; LOSS: below 1; EQUIVALENT: the whole interval within
    [1 / (1 + margin), 1 + margin]; otherwise INCONCLUSIVE."""
    if low is None or high is None:
        return INCONCLUSIVE
    if low > 1.0 + _TIE:
        return WIN
    if high < 1.0 - _TIE:
        return LOSS
    if low >= 1.0 / (1.0 + margin) and high <= 1.0 + margin:
        return EQUIVALENT
    return INCONCLUSIVE


def _power_t(df: float) -> float:
    return t_quantile(POWER, df)


# An interval whose upper end is more than this many times its lower end says nothing an operator can act on
# (a pair's Welch df of 1 puts the critical value near 1,000: [4.5e-05, 19771]): it is reported as too wide,
# never as numbers, and its verdict is INCONCLUSIVE.
WIDE = 100.0
_LOG_MAX = 700.0  # math.exp overflows just above 709.78


def exp_safe(x: float) -> float:
    """exp(x) that never overflows (capped at exp(700)); for bounds a caller has checked are meaningful."""
    return math.exp(min(x, _LOG_MAX))


def _t_tail(t: float, df: float) -> float:
    """P(T > t) for Student's t with ``df`` (float) degrees of freedom, accurate far into the tail (no 1 - x)."""
    tail = 0.5 * _stats._betainc(df / 2.0, 0.5, df / (df + t * t)) if math.isfinite(t) else 0.0
    return tail if t >= 0 else 1.0 - tail


@functools.lru_cache(maxsize=8192)
def carry_c(c: float, df: float, df_to: float) -> float:
    """The critical value at ``df_to`` degrees of freedom with the same one-sided level as ``c`` at ``df``
    (bisection on the tail itself, so a level of 1e-20 is as good as one of 0.05). math.inf where the level
    underflows: such a comparison can call nothing."""
    if not (math.isfinite(c) and df > 0 and df_to > 0):
        return math.inf
    if df_to == df:
        return c
    tail = _t_tail(c, df)
    if tail <= 0.0:
        return math.inf
    if tail >= 0.5:
        return c  # no level to carry (c at or below the centre, or within rounding of it)
    return t_critical(tail, df_to)


def t_critical(level: float, df: float) -> float:
    """The one-sided critical value of Student's t at ``level`` with ``df`` (float) degrees of freedom, by
    bisection on the tail itself, so a level of 1e-20 is as good as one of 0.05. math.inf where none is finite."""
    if not 0.0 < level < 0.5 or df <= 0:
        return math.inf
    lo, hi = 0.0, 1.0
    while _t_tail(hi, df) > level:
        hi *= 2.0
        if hi > 1e150:
            return math.inf
    for _dummy in range(200):
        mid = 0.5 * (lo + hi)
        if _t_tail(mid, df) > level:
            lo = mid
        else:
            hi = mid
        if hi - lo <= 1e-13 * hi:
            break
    return 0.5 * (lo + hi)


def comparison(fit: Fit, name: str, c: float, margin: float = EQUIVALENCE_MARGIN) -> dict[str, Any]:
    """One candidate's row from a fit and a critical value: ratio, simultaneous interval, verdict, the noise
    (the pooled SD of one config's round value, as a share) and the smallest speedup this fit could find with
    POWER (``mde``)."""
    d = fit.estimate[name]
    row: dict[str, Any] = {"ratio": exp_safe(d), "low": None, "high": None, "verdict": INCONCLUSIVE,
                           "mde": None, "noise": None if fit.s is None else exp_safe(fit.s) - 1.0,
                           "df": fit.df, "rounds": fit.rounds.get(name, 0), "c": c}
    if fit.s is None or not math.isfinite(fit.se[name]):
        row["why"] = "no residual degrees of freedom: too few rounds to call"
        return row
    se = fit.se[name]
    df_eff = max(1.0, fit.df_of.get(name, float(fit.df)))
    power_t = _power_t(fit.df)
    if df_eff < fit.df:  # unequal noise: the same one-sided level at the pair's own degrees of freedom
        c = carry_c(c, float(fit.df), df_eff)
        power_t = _power_t(df_eff)
        row.update(c=c, df_welch=df_eff)
    row["se"] = se
    half = c * se if se > 0 else 0.0
    if not math.isfinite(half) or 2.0 * half > math.log(WIDE) or abs(d) + half > _LOG_MAX:
        row.update(wide=True, why=(
            f"the interval is too wide to mean anything (it spans more than {WIDE:g}x: critical value "
            f"{c:.3g} at {df_eff:g} degrees of freedom, noise {exp_safe(fit.s) - 1.0:.1%}); "
            "measure more rounds"))
        return row
    row.update(low=math.exp(d - half), high=math.exp(d + half), mde=exp_safe((c + power_t) * se))
    row["verdict"] = verdict(row["low"], row["high"], margin)
    if fit.s <= _ZERO_NOISE:  # a point interval proves nothing about a sliver: within the margin it is a tie
        row["why"] = ("zero residual: every round agrees exactly (copied or synthetic data?); the interval is a "
                      "point, so a ratio within the equivalence margin is EQUIVALENT, never a WIN or a LOSS")
        if 1.0 / (1.0 + margin) <= row["ratio"] <= 1.0 + margin:
            row["verdict"] = EQUIVALENT
    return row


def _rho(fit: Fit, names: Sequence[str]) -> float:
    vals = [fit.corr[a][b] for a in names for b in names if a != b]
    return max(0.0, min(vals)) if vals else 0.5


def fixed_analysis(cells: Mapping[str, Mapping[Any, float]], baseline: str, candidates: Sequence[str], *,
                   alpha: float = ALPHA, margin: float = EQUIVALENCE_MARGIN) -> dict[str, dict[str, Any]]:
    """One look at everything measured: every candidate with a value against the baseline, Dunnett's c for the
    candidates of the family (``candidates``). Per-shape cells use this (exploratory)."""
    fit = fit_blocks(cells, baseline)
    out: dict[str, dict[str, Any]] = {}
    if fit is None:
        return out
    present = [n for n in candidates if n in fit.estimate]
    if not present:
        return out
    c = dunnett_c(max(1, len(candidates)), fit.df, alpha, _rho(fit, present)) if fit.df > 0 else math.inf
    for n in present:
        out[n] = comparison(fit, n, c, margin)
    return out


def rate_interval(hits: int, runs: int, level: float = 0.95) -> tuple[float, float]:
    """Clopper-Pearson's exact interval for a rate seen in ``hits`` of ``runs`` (a calibration's false-WIN
    rate): the beta quantiles, by bisection on the regularized incomplete beta function."""
    if runs < 1 or not 0 <= hits <= runs:
        raise ReportInputError(f"rate_interval: expected 0 <= hits <= runs and runs >= 1, got {hits} of {runs}")
    tail = (1.0 - level) / 2.0

    def quantile(q: float, a: float, b: float) -> float:
        lo, hi = 0.0, 1.0
        for _dummy in range(60):
            mid = 0.5 * (lo + hi)
            if _stats._betainc(a, b, mid) < q:
                lo = mid
            else:
                hi = mid
        return 0.5 * (lo + hi)

    low = 0.0 if hits == 0 else quantile(tail, hits, runs - hits + 1)
    high = 1.0 if hits == runs else quantile(1.0 - tail, hits + 1, runs - hits)
    return low, high


# ---------------------------------------------------------------------------------------------
# the sequential design


def cumulative(t: float, total: float, shape: str = "obf") -> float:
    """The share of ``total`` spent by information fraction t (rounds run / planned rounds). ``obf``: Lan and
    DeMets' O'Brien-Fleming-type function 2 - 2 Phi(z_(1 - total/2) / sqrt(t)), which keeps almost all of alpha
    for the last looks, where the looks' correlated statistics have the most rounds; ``linear``: total * t."""
    if t <= 0.0:
        return 0.0
    if t >= 1.0:
        return total
    if shape == "linear":
        return total * t
    return min(total, 2.0 * (1.0 - _norm_cdf(_z(1.0 - total / 2.0) / math.sqrt(t))))


def spent(n: int, max_rounds: int, total: float, shape: str = "obf") -> float:
    """The share of ``total`` spent at the look after round n when every look before it tested (the first look,
    at FIRST_LOOK, spends its cumulative share; the look after round max_rounds what is left)."""
    if n < FIRST_LOOK:
        return 0.0
    previous = 0.0 if n == FIRST_LOOK else cumulative((n - 1) / max_rounds, total, shape)
    return cumulative(min(n, max_rounds) / max_rounds, total, shape) - previous


def futility_goal(min_speedup: float) -> float:
    """What a candidate's optimistic bound must still reach to be measured on: halfway (on the log scale) to the
    planned speedup. A goal at the planned speedup itself stops most candidates just under it (a true 1.15x at a
    planned 1.2x lost a third of its power); halfway keeps them and still stops what is no faster."""
    return math.sqrt(min_speedup)


def planned_power(s: float, m: int, configs: int, rounds: int, share: float, *, effect: float = MIN_SPEEDUP,
                  win_margin: float = 0.0, spreads: tuple[float | None, float | None] | None = None) -> float:
    """The power of one look after ``rounds`` complete rounds that spends ``share`` of alpha, by the rule the
    verdicts use: the pooled error at the pooled df, or with ``spreads`` (the baseline's own spread and the
    candidates' pooled one, log scale; three configs or more) the larger of the pooled error and theirs, at
    Welch-Satterthwaite's df as :func:`fit_blocks` forms them, with Dunnett's level carried there. ``win_margin``:
    the power to clear 1 + win_margin (to be recommended) rather than 1 (a WIN)."""
    rounds = max(int(rounds), FIRST_LOOK)
    df = (configs - 1) * (rounds - 1)
    if df <= 0:
        return 0.0
    se = s * math.sqrt(2.0 / rounds)
    c = dunnett_c(m, df, share)
    df_eff = float(df)
    delta = math.log(effect) - math.log1p(win_margin)
    if spreads is not None and configs >= 3 and spreads[0] is not None and spreads[1] is not None:
        # The verdicts' error and df rest on the baseline's spread as the run reads it, with rounds - 1 df: the
        # power is averaged over that reading (16 equally likely values of chi2 / df, Wilson-Hilferty), each with
        # the error, the Welch df and the critical value carried there that fit_blocks and comparison would use.
        a, rest = spreads
        own_df = float(rounds - 1)
        other_df = min(max(own_df, df - own_df), OTHER_DF * own_df)
        true_se = math.sqrt((a * a + rest * rest) / rounds)
        if not true_se > 0:
            return 1.0 if delta > 0 else 0.0
        total = 0.0
        for i in range(_READINGS):
            z = _z((i + 0.5) / _READINGS)
            h = 2.0 / (9.0 * own_df)
            read = a * math.sqrt(max(0.0, 1.0 - h + z * math.sqrt(h)) ** 3)
            se_i = max(se, math.sqrt((read * read + rest * rest) / rounds))
            guard = max(read, rest)
            df_i = max(1.0, welch_df(guard * guard, rest * rest, own_df, other_df, float(df)))
            c_i = carry_c(c, float(df), df_i)
            total += 0.0 if not math.isfinite(c_i) else _norm_cdf((delta - c_i * se_i) / true_se)
        return total / _READINGS
    return approximate_power(delta, se, c, df_eff)


_READINGS = 16


def sequential_power(s: float, m: int, configs: int, max_rounds: int, *, alpha: float = ALPHA,
                     effect: float = MIN_SPEEDUP, looks: bool = True, win_margin: float = 0.0,
                     spreads: tuple[float | None, float | None] | None = None) -> float:
    """The power of the run's design at ``effect`` with the pooled noise ``s``, counting its last look only
    (every candidate measured all ``max_rounds`` rounds, the alpha that look spends): a lower bound, the earlier
    looks can only add WINs. What the fixed design it is compared with must match. ``spreads`` and
    ``win_margin``: see :func:`planned_power` (the verdicts' own error and df; the power to be recommended)."""
    rounds = max(max_rounds, FIRST_LOOK)
    share = spent(rounds, rounds, alpha) if looks else alpha
    if s * math.sqrt(2.0 / rounds) <= 0:
        return 1.0
    return planned_power(s, m, configs, rounds, share, effect=effect, win_margin=win_margin, spreads=spreads)


def approximate_power(delta: float, se: float, c: float, df: int) -> float:
    """P(estimate - c * se > 0) when the true log ratio is delta (a shifted t, close to the noncentral t). A
    probability at any input: no noise finds every positive delta, an infinite critical value finds nothing."""
    if not math.isfinite(c) or math.isnan(se) or se == math.inf:
        return 0.0
    if se <= 0:
        return 1.0 if delta > 0 else 0.0
    x = c - delta / se
    if not math.isfinite(x):
        return 1.0 if x < 0 else 0.0
    return min(1.0, max(0.0, 1.0 - t_cdf(x, df)))


def fixed_rounds(s: float, m: int, configs: int, *, alpha: float = ALPHA, effect: float = MIN_SPEEDUP,
                 power: float = POWER, limit: int = 50, win_margin: float = 0.0,
                 spreads: tuple[float | None, float | None] | None = None) -> int | None:
    """The rounds a fixed design needs for ``power`` at ``effect`` with the pooled noise ``s``: the design the
    sequential one is compared with for the restarts it saved. None past ``limit``. ``spreads`` and
    ``win_margin`` as in :func:`planned_power`."""
    for r in range(FIRST_LOOK, limit + 1):
        if s <= 0 or planned_power(s, m, configs, r, alpha, effect=effect, win_margin=win_margin,
                                   spreads=spreads) >= power:
            return r
    return None


# The candidate's aggregate rate under load (the production unit's slot count) against the baseline's: non-inferior
# when its one-sided lower bound is at or above 1 / (1 + margin), inferior when its upper bound is below it.
NON_INFERIOR = "NON-INFERIOR"
INFERIOR = "INFERIOR"
NOT_SHOWN = "NOT SHOWN"


def load_comparison(fit: Fit | None, name: str, level: float, margin: float = EQUIVALENCE_MARGIN) -> dict[str, Any]:
    """A candidate's non-inferiority under load: its aggregate tokens/s against the baseline's under the same
    load, one-sided at ``level`` (the look's alpha share per candidate). ``verdict``: NON-INFERIOR (lower bound at
    or above 1 / (1 + margin)), INFERIOR (upper bound below it) or NOT SHOWN (neither, or too few rounds)."""
    bound = 1.0 / (1.0 + margin)
    row: dict[str, Any] = {"ratio": None, "low": None, "high": None, "verdict": NOT_SHOWN, "level": level,
                           "bound": bound, "rounds": 0}
    if fit is None or fit.s is None or fit.df <= 0 or name not in fit.estimate or not math.isfinite(fit.se[name]):
        row["why"] = "too few rounds under load to compare with the baseline's"
        return row
    got = comparison(fit, name, t_critical(level, float(fit.df)), margin)
    row.update(ratio=got["ratio"], low=got["low"], high=got["high"], rounds=got["rounds"])
    if got["low"] is None:
        row["why"] = got.get("why") or "no interval under load"
    elif got["low"] >= bound:
        row["verdict"] = NON_INFERIOR
    elif got["high"] < bound:
        row["verdict"] = INFERIOR
    return row


def _look(fit: Fit, active: Sequence[str], n: int, m: int, a_n: float, b_n: float, margin: float,
          min_speedup: float, win_margin: float, futility: bool) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """What one look records, and its rows. A candidate stops on a WIN whose lower
    bound clears 1 + ``win_margin`` (a WIN that only clears 1 is measured on: at a later look it may clear the
    margin, which is what a recommendation needs), on a LOSS, or as futile."""
    goal = futility_goal(min_speedup)
    c = dunnett_c(m, fit.df, a_n, _rho(fit, [x for x in active if x in fit.estimate]))
    record = {"alpha": a_n, "c": c, "df": fit.df, "noise": exp_safe(fit.s) - 1.0 if fit.s is not None else None}
    rows: dict[str, dict[str, Any]] = {}
    for name in active:
        if name not in fit.estimate:
            continue
        row = comparison(fit, name, c, margin)
        row.update(look=n, alpha_spent=a_n, level=1.0 - 2.0 * a_n)
        if row["verdict"] == LOSS or (row["verdict"] == WIN and row["low"] > 1.0 + win_margin):
            row["stopped"] = row["verdict"].lower()
        elif row["verdict"] != WIN and futility and b_n > 0:
            optimistic = fit.estimate[name] + t_quantile(1.0 - b_n, fit.df) * fit.se[name]
            if optimistic < math.log(goal):
                row["stopped"] = "futile"
                row["why"] = (f"stopped after round {n}: even its optimistic bound "
                              f"({exp_safe(optimistic):.3f}x) cannot reach {goal:.3f}x "
                              f"(halfway to the planned {min_speedup:g}x)"
                              + (f"; {row['why']}" if row.get("wide") else ""))
        rows[name] = row
    return record, rows


def sequential(cells: Mapping[str, Mapping[Any, float]], baseline: str, candidates: Sequence[str], *,
               max_rounds: int = MAX_ROUNDS, alpha: float = ALPHA, margin: float = EQUIVALENCE_MARGIN,
               min_speedup: float = MIN_SPEEDUP, beta: float = BETA, looks: bool = True,
               win_margin: float = 0.0, load: Mapping[str, Mapping[Any, float]] | None = None) -> dict[str, Any]:
    """Replay the looks of a run over ``cells`` ({config: {round index: y}}, rounds numbered 0, 1, ...).

    ``load``: the same table of the aggregate rate under concurrent load (the production's slot count), or None
    when the run measured none. Then a candidate whose WIN clears 1 + ``win_margin`` is also tested for
    non-inferiority under load (:func:`load_comparison`, at that look's alpha over the candidates, one-sided),
    and measured on until that test is decided or the rounds run out; each row then carries ``load``.

    With ``looks`` the run is sequential: a look after every round from FIRST_LOOK to ``max_rounds``; else one
    look after the last round measured, with all of alpha. Returns ``{"verdicts": {name: row}, "active":
    [names still undecided], "looks": [...], "final": bool}``. A candidate tested at a look is one not decided
    before with a value in that look's latest round (a config stopped for another reason has none).
    """
    if isinstance(max_rounds, bool) or not isinstance(max_rounds, int) or max_rounds < 1:
        raise ReportInputError(f"max_rounds: expected a whole number of rounds >= 1, got {max_rounds!r}")
    # Looks follow the schedule's rounds (round index n - 1 is the n-th round), not the baseline's count: a round
    # whose baseline start failed is still a round of the budget, and the look after it still comes (its data
    # without that round's block), so the look after the last planned round is the final one.
    seen = sorted({r for v in cells.values() for r in (v or {}) if isinstance(r, int) and not isinstance(r, bool)})
    measured = seen[-1] + 1 if seen else 0
    m = max(1, len(candidates))
    verdicts: dict[str, dict[str, Any]] = {}
    history: list[dict[str, Any]] = []
    points = list(range(FIRST_LOOK, min(measured, max_rounds) + 1)) if looks else (
        [min(measured, max_rounds)] if measured >= FIRST_LOOK else [])
    decided: set[str] = set()
    won: dict[str, dict[str, Any]] = {}  # a practical WIN whose test under load is not decided yet
    ni_spent: dict[str, float] = {}  # per candidate, the level its tests under load used at earlier looks
    used_alpha = used_beta = 0.0  # a look that could not test spends nothing: its share goes to the next look
    for n in points:
        final = n >= max_rounds or not looks
        sub = {c: {r: y for r, y in v.items() if r < n} for c, v in cells.items()}
        fit = fit_blocks(sub, baseline)
        active = [c for c in candidates if c not in decided and c not in won and (n - 1) in (cells.get(c) or {})]
        pending = [c for c in won if c not in decided and (n - 1) in (load or {}).get(c, {})]
        look: dict[str, Any] = {"after_round": n, "tested": active, "decided": {}}
        if pending:
            look["tested_under_load"] = pending
        history.append(look)
        if (fit is None or fit.df <= 0 or not active) and not pending:
            look["why"] = "no residual degrees of freedom" if fit is not None and active else "nothing to test"
            continue
        a_n = alpha if not looks else cumulative(n / max_rounds, alpha) - used_alpha
        b_n = cumulative(n / max_rounds, beta, "linear") - used_beta if looks else 0.0
        try:
            record, rows = _look(fit, active, n, m, a_n, b_n, margin, min_speedup, win_margin, looks and not final) \
                if fit is not None and fit.df > 0 and active else ({"alpha": a_n}, {})
            if load is not None:
                fit_load = fit_blocks({c: {r: y for r, y in v.items() if r < n} for c, v in load.items()}, baseline)
                for name in pending:
                    rows[name] = dict(won[name])
                for name, row in rows.items():
                    if row.get("stopped") == "win":
                        # its share of alpha (alpha / m), spent like the WIN's until the last look, which
                        # gets what is left of it: the share the candidate's own WIN passes on
                        level = alpha / m - ni_spent.get(name, 0.0) if final else a_n / m
                        ni_spent[name] = ni_spent.get(name, 0.0) + level
                        row["load"] = load_comparison(fit_load, name, level, margin)
        except (ArithmeticError, ValueError, ReportInputError) as exc:
            # no input should get here; if one does, the look says so, spends nothing and its candidates go on
            look["why"] = (f"the look could not be computed ({type(exc).__name__}: {exc}): it spent no alpha, and "
                           "its candidates are measured in the next round")
            continue
        used_alpha, used_beta = used_alpha + a_n, used_beta + b_n
        look.update(record)
        for name, row in rows.items():
            verdicts[name] = row
            if row.get("stopped") == "win" and "load" in row and row["load"]["verdict"] == NOT_SHOWN and not final:
                # a WIN on one stream, not yet shown not to lose at the operator's concurrency: measured on
                won[name] = {k: v for k, v in row.items() if k != "load"}
                row.pop("stopped")
                row["why"] = ("a WIN on one stream, measured on: its aggregate rate under load is not yet shown "
                              f"within {margin:.0%} of the baseline's")
                continue
            if row.get("stopped"):
                decided.add(name)
                look["decided"][name] = row["stopped"] + (f" (under load: {row['load']['verdict']})"
                                                          if "load" in row else "")
    active = [c for c in candidates if c not in decided]
    final = measured >= max_rounds or (bool(points) and not looks)
    base_rounds = len([r for r in (cells.get(baseline) or {}) if isinstance(r, int)])
    why = (f"too few rounds to call: {measured} measured, the first look is after round {FIRST_LOOK}"
           if measured < FIRST_LOOK else
           f"too few rounds to call: the baseline has {base_rounds} round(s), a comparison needs {FIRST_LOOK}"
           if base_rounds < FIRST_LOOK else "no look tested it (no value in a look's latest round)")
    for name in candidates:
        verdicts.setdefault(name, {"ratio": None, "low": None, "high": None, "verdict": INCONCLUSIVE,
                                   "mde": None, "noise": None, "rounds": len(cells.get(name) or {}), "why": why})
    return {"verdicts": verdicts, "active": [] if final else active, "looks": history, "final": final,
            "rounds_measured": measured, "max_rounds": max_rounds, "sequential": looks}
