# Copyright: (c) 2026, llmfleet.specdec contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# Private to the collection, controller only: Dunnett's many-to-one critical values (the multivariate t).
"""Dunnett's critical value (:func:`dunnett_c`): the one-sided (or two-sided) many-to-one critical value c with
P(max_i T_i <= c) = 1 - alpha for a multivariate t of equal correlation rho, by numerical integration over the
common normal factor and the chi variable of the pooled variance (Simpson's rule on both). ``_design`` builds the
run's intervals on it. Standard library only; pure and deterministic.
"""
from __future__ import annotations

import functools
import math

from ansible_collections.llmfleet.specdec.plugins.module_utils.common import _stats
from ansible_collections.llmfleet.specdec.plugins.module_utils.common._stats import ReportInputError

# The family-wise false-WIN rate across a run's candidates and looks (one-sided; LOSS has the same rate).
ALPHA = 0.05
t_quantile = functools.lru_cache(maxsize=8192)(_stats.t_quantile)


def _norm_cdf(x: float) -> float:
    return 0.5 * math.erfc(-x / math.sqrt(2.0))


def _simpson(lo: float, hi: float, n: int) -> list[tuple[float, float]]:
    """Nodes and weights of composite Simpson's rule on [lo, hi] with n (even) intervals."""
    h = (hi - lo) / n
    return [(lo + i * h, h / 3.0 * (1 if i in (0, n) else 4 if i % 2 else 2)) for i in range(n + 1)]


_Z_NODES = [(z, w * math.exp(-0.5 * z * z) / math.sqrt(2.0 * math.pi)) for z, w in _simpson(-8.0, 8.0, 64)]


@functools.lru_cache(maxsize=256)
def _chi_nodes(df: int) -> tuple[tuple[float, float], ...]:
    """Nodes and weights for E[g(S)], S = sqrt(chi2_df / df) (the pooled SD over the true SD)."""
    if df <= 0:
        raise ReportInputError(f"Dunnett: df must be at least 1, got {df}")
    log_const = (df / 2.0) * math.log(df) - math.lgamma(df / 2.0) - (df / 2.0 - 1.0) * math.log(2.0)

    def log_f(s: float) -> float:
        return log_const + (df - 1) * math.log(s) - df * s * s / 2.0

    peak = math.sqrt(max(df - 1, 0) / df)
    top = log_f(max(peak, 1e-9))
    hi = max(peak, 0.5)
    while log_f(hi) > top - 40.0:
        hi += 0.05 + hi / 10.0
    lo = 0.0
    if df > 2:
        lo = peak
        while lo > 1e-6 and log_f(lo) > top - 40.0:
            lo = max(lo * 0.9 - 0.01, 1e-6)
    nodes = []
    if df <= 2:
        # Few df: the critical value runs to tens (83.8 at m 8, alpha 0.01, df 1), so P(max T <= c | S = s) rises
        # from 0 to 1 over s of order 1 / c. Panels that double in width from 1e-4 resolve it at every c.
        edges = [0.0, 1e-4]
        while edges[-1] < hi:
            edges.append(min(edges[-1] * 2.0, hi))
        grid = [node for a, b in zip(edges, edges[1:]) for node in _simpson(a, b, 16)]
    else:
        grid = _simpson(lo, hi, 160 if df <= 5 else 80)
    for s, w in grid:
        if s > 0:
            nodes.append((s, w * math.exp(log_f(s))))
        elif df == 1:  # the half-normal density does not vanish at 0
            nodes.append((0.0, w * math.exp(log_const)))
    total = sum(w for _s, w in nodes)
    return tuple((s, w / total) for s, w in nodes)


def mvt_max_cdf(c: float, m: int, rho: float, df: int | None, two_sided: bool = False) -> float:
    """P(max_i T_i <= c) (or max_i |T_i| with ``two_sided``) for m t-variables with common correlation rho >= 0
    and ``df`` degrees of freedom (None: normal). T_i = (sqrt(rho) Z + sqrt(1 - rho) Z_i) / S."""
    rho = min(max(rho, 0.0), 0.999)
    a, b = math.sqrt(rho), math.sqrt(1.0 - rho)
    nodes = ((1.0, 1.0),) if df is None else _chi_nodes(int(df))
    total = 0.0
    for s, ws in nodes:
        inner = 0.0
        for z, wz in _Z_NODES:
            upper = _norm_cdf((c * s + a * z) / b)
            p = upper - _norm_cdf((-c * s + a * z) / b) if two_sided else upper
            inner += wz * p ** m
        total += ws * inner
    return total


@functools.lru_cache(maxsize=4096)
def _dunnett(m: int, df: int | None, alpha: float, rho: float, two_sided: bool) -> float:
    tail = alpha / 2.0 if two_sided else alpha
    lo = t_quantile(1.0 - tail, df) if df is not None else _z(1.0 - tail)
    hi = t_quantile(1.0 - tail / m, df) if df is not None else _z(1.0 - tail / m)
    hi += 1e-6
    target = 1.0 - alpha
    f_lo = mvt_max_cdf(lo, m, rho, df, two_sided) - target
    f_hi = mvt_max_cdf(hi, m, rho, df, two_sided) - target
    if f_lo >= 0:
        return lo
    for _dummy in range(60):  # Illinois regula falsi
        mid = hi - f_hi * (hi - lo) / (f_hi - f_lo)
        f_mid = mvt_max_cdf(mid, m, rho, df, two_sided) - target
        if abs(f_mid) < 1e-9 or hi - lo < 1e-7:
            return mid
        if (f_mid > 0) == (f_hi > 0):
            hi, f_hi = mid, f_mid
            f_lo /= 2.0
        else:
            lo, f_lo = mid, f_mid
            f_hi /= 2.0
    return 0.5 * (lo + hi)


@functools.lru_cache(maxsize=1024)
def _z(q: float) -> float:
    lo, hi = -40.0, 40.0
    for _dummy in range(200):
        mid = 0.5 * (lo + hi)
        if _norm_cdf(mid) < q:
            lo = mid
        else:
            hi = mid
    return 0.5 * (lo + hi)


def dunnett_c(m: int, df: int | None, alpha: float = ALPHA, rho: float = 0.5, two_sided: bool = False) -> float:
    """Dunnett's critical value for m comparisons with one control: P(max_i T_i <= c) = 1 - alpha (one-sided) or
    P(max_i |T_i| <= c) = 1 - alpha (``two_sided``). rho is the correlation between the comparisons (0.5 in a
    complete block design: each difference shares the control's half of the variance); a smaller rho gives a
    larger, safer c, so rho is rounded down to 3 decimals. ``df`` None is the normal limit."""
    if isinstance(m, bool) or not isinstance(m, int) or m < 1:
        raise ReportInputError(f"Dunnett: m must be a whole number of comparisons >= 1, got {m!r}")
    if not 0.0 < alpha < 1.0:
        raise ReportInputError(f"Dunnett: alpha must lie in (0, 1), got {alpha!r}")
    rho = math.floor(max(0.0, min(rho, 0.999)) * 1000.0 + 1e-6) / 1000.0
    return _dunnett(m, None if df is None else int(df), float(alpha), rho, bool(two_sided))
