# Copyright: (c) 2026, llmfleet.specdec contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# Private to the collection: the screen's optimistic bound, the only number that may screen a candidate out.
"""The optimistic bound on a candidate's speedup that a screen-out must stay below (docs/statistics.md).

It is built from what load cannot inflate: the replay's counts against production's own tokens, and the fastest
repeat of every timing (production's step, each verification batch, the drafter's step and prefill). Busy time
only ever adds, so busy time that hit some repeats of a timing changes nothing here, and a host uniformly slower
scales numerator and denominator alike. The prediction (medians, the copy's correction, fits) never enters it.
"""
from __future__ import annotations

import math
from typing import Any, Dict, Mapping, Sequence


def tokens_of(reqs: Sequence[Sequence[tuple]]) -> int:
    """Tokens the replayed rounds yield (each round its accepted tokens and the target's own, a plain step one)."""
    return sum(sum(a + 1 for d, a in steps if d) + sum(1 for d, _a in steps if not d) for steps in reqs)


def fastest_floor(samples: Mapping[Any, Sequence[float]]) -> Dict[int, float]:
    """Per timed batch size, the fastest repeat of that size or of any larger one (a batch of more rows does not
    cost less: a faster larger batch says the smaller one's fastest still carried busy time)."""
    fastest = {int(b): min(float(x) for x in v) for b, v in samples.items() if v}
    out: Dict[int, float] = {}
    low = math.inf
    for b in sorted(fastest, reverse=True):
        low = min(low, fastest[b])
        out[b] = low
    return out


def _floor_at(floor: Mapping[int, float], size: int) -> float | None:
    """The floor's cost of a batch of ``size``: that of the largest timed size not above it (the smallest timed
    one's for a smaller batch)."""
    if not floor:
        return None
    below = [b for b in floor if b <= size]
    return floor[max(below)] if below else floor[min(floor)]


def optimistic(result: Mapping[str, Any], t_fast: float, verify_floor: Mapping[int, float], d_fast: float,
               prefill_floor: Mapping[int, float], passes_per_token: int, mix: Any = None) -> Dict[str, Any]:
    """The candidate's rate at the fastest of every repeated timing, and its speedup over production at its own
    fastest step: the optimistic bound a screen-out must stay below (docs/statistics.md).

    From what load cannot inflate: the replay's counts (rounds, drafted and accepted tokens, plain steps) and the
    fastest repeat of production's step ``t_fast``, of each verification batch (:func:`fastest_floor`; no copy
    correction: a real round costs at least its batch) and of the drafter's step and prefill (its side server's;
    never a fit). Every cost in it is the fastest one seen, so busy time that hit only some repeats changes
    nothing, and a host uniformly slower scales every term and the speedup not at all.

    ``mix`` (``_mix.Mix``), where the screen judges the confirmatory endpoint's metric and weights: the requests
    add up as the verdict's do, each with production's fastest prefill sample on an end-to-end endpoint
    (``Mix.at_fastest``; the prefill adds the same time to production and to the candidate, so the least of it
    gives the largest speedup a faster candidate can show)."""
    reqs = result["requests"]
    tokens = tokens_of(reqs)
    ms = 0.0
    per_request = []
    for steps in reqs:
        before = ms
        since = 1
        for drafted, accepted in steps:
            if drafted == 0:
                ms += t_fast
                since += 1
                continue
            ms += _floor_at(verify_floor, drafted + 1) or t_fast
            if passes_per_token:
                pre = _floor_at(prefill_floor, since)
                ms += min(pre, d_fast) if pre is not None and d_fast > 0 else (pre or d_fast)
                ms += max(drafted - 1, 0) * d_fast
            since = accepted + 1
        per_request.append(ms - before)
    if ms <= 0 or tokens <= 0 or t_fast <= 0:
        return {"bound_tok_s": None, "bound_speedup": None}
    if mix is not None:
        fast = mix.at_fastest()
        counts = [tokens_of([steps]) for steps in reqs]
        bound = fast.rate([(i, n, m) for i, (n, m) in enumerate(zip(counts, per_request))])
        production = fast.production_rate(counts, t_fast)
        if not bound or not production:
            return {"bound_tok_s": None, "bound_speedup": None}
        return {"bound_tok_s": bound, "bound_speedup": bound / production}
    bound = 1000.0 * tokens / ms
    return {"bound_tok_s": bound, "bound_speedup": bound * t_fast / 1000.0}
