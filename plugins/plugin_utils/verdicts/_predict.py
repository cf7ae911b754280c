# Copyright: (c) 2026, llmfleet.specdec contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# Private to the collection, controller only: the break-even prediction of a speculative config against its measured rate.
"""Prediction against measurement: the break-even arithmetic of ``module_utils/bench/_breakeven`` fed with what the run
measured (acceptance, the baseline's step t_s, the drafter's step d_s from a drafter probe, and the cost of
verifying K + 1 tokens timed within the baseline's own start), beside the measured rate.
"""
from __future__ import annotations

import math
from typing import Any, Mapping

from ansible_collections.llmfleet.specdec.plugins.module_utils.bench import _breakeven as be

DEFAULT_K = 3  # llama.cpp's default --spec-draft-n-max
P_ESTIMATE = (
    "p solves A(p, K) = measured mean accepted length (1 + accepted / drafts from /metrics deltas), "
    "or, without /metrics, A(p, K) - 1 = acceptance * K; the plain p = acceptance would understate p "
    "because acceptance falls with the draft position")


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


def batch_costs(gathered: Mapping[str, Any]) -> dict[int, float]:
    """Batch size -> ms to process that many tokens on a cached prefix, the median over the config's server starts
    (spec_bench's ``verify``, measured within each start); empty when the run measured none."""
    per: dict[int, list[float]] = {}
    for e in gathered.get("entries") or []:
        verify = (e.get("bench") or {}).get("verify") if isinstance(e.get("bench"), Mapping) else None
        batches = verify.get("batches") if isinstance(verify, Mapping) else None
        if not isinstance(batches, Mapping):
            continue
        for size, ms in batches.items():
            if str(size).isdigit() and isinstance(ms, (int, float)) and not isinstance(ms, bool) and ms > 0:
                per.setdefault(int(size), []).append(float(ms))
    return {b: sorted(v)[len(v) // 2] if len(v) % 2 else 0.5 * (sorted(v)[len(v) // 2 - 1] + sorted(v)[len(v) // 2])
            for b, v in sorted(per.items())}


def interpolate(costs: Mapping[int, float], size: float) -> float | None:
    """The cost of a batch of ``size`` tokens, linear between the measured sizes (extrapolated from the two
    nearest beyond them); None without at least one measured size."""
    if not costs:
        return None
    sizes = sorted(costs)
    if len(sizes) == 1:
        return costs[sizes[0]] * size / sizes[0]
    lo = max([b for b in sizes if b <= size] or sizes[:1])
    hi = min([b for b in sizes if b > lo and b >= size] or sizes[-1:])
    if hi == lo:
        lo, hi = sizes[-2], sizes[-1]
    return costs[lo] + (costs[hi] - costs[lo]) * (size - lo) / (hi - lo)


def prediction(cfg: dict[str, Any], config: Mapping[str, Any], shape: str, row: dict[str, Any],
               base_row: dict[str, Any], d_s_ms: Any, probe: Mapping[str, Any] | None = None,
               base_costs: Mapping[int, float] | None = None, probe_costs: Mapping[int, float] | None = None
               ) -> dict[str, Any] | None:
    """The break-even arithmetic fed with this run's measurements, against the measured rate.

    A round costs the target's verification of K + 1 tokens and the drafter's work. Verification is measured
    within the baseline's own start: the time of a batch of K + 1 tokens on a cached prefix; without that
    measurement the arithmetic's 1.1 target steps (a GPU) stand in. The drafter's work is its prefill of the
    tokens a round accepts (measured the same way on the drafter probe) and its K - 1 further single steps d_s;
    without the probe's batches, K steps of d_s.
    """
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
    verify_ms, out["verify_source"] = be.VERIFY_FACTOR * t_s, "assumed: 1.1 target steps (no batch timing in this run)"
    measured_verify = interpolate(base_costs or {}, k + 1) if base_costs else None
    if measured_verify is not None:
        verify_ms = measured_verify
        out["verify_source"] = (f"measured on the baseline's start: a batch of {k + 1} tokens on a cached prefix "
                                f"{measured_verify:.2f} ms" + (f" (a batch of 1: {base_costs[1]:.2f} ms)"
                                                               if base_costs.get(1) else ""))
    out["verify_ms"], out["verify_steps"] = verify_ms, verify_ms / t_s if t_s > 0 else None
    prefill_ms = interpolate(probe_costs, a) if passes and probe_costs else None
    if prefill_ms is not None:
        out["draft_source"] = (f"the drafter's prefill of {a:.2f} accepted tokens measured on the probe "
                               f"({prefill_ms:.2f} ms) + {max(passes - 1, 0)} steps of d_s")

    def draft_ms(step: float) -> float:
        return prefill_ms + max(passes - 1, 0) * step if prefill_ms is not None else passes * step

    if d_s is not None:
        predicted = 1000.0 * a / (draft_ms(d_s) + verify_ms)
        # what verifying K+1 tokens would cost, in target steps, if the drafter's part is right
        implied_verify = (1000.0 * a / row["median_tok_s"] - draft_ms(d_s)) / t_s if t_s > 0 else None
        out.update(d_s_ms=d_s, predicted_tok_s=predicted, predicted_speedup=predicted / base_row["median_tok_s"],
                   implied_d_s_ms=None, implied_verify_steps=implied_verify,
                   draft_steps=draft_ms(d_s) / d_s if d_s > 0 else None)
    else:
        # the d_s at which the arithmetic reproduces the measured rate
        implied = (1000.0 * a / row["median_tok_s"] - verify_ms) / max(passes, 1e-9)
        out.update(d_s_ms=None, d_s_source="not given: implied by the measured rate", predicted_tok_s=None,
                   predicted_speedup=None, implied_d_s_ms=implied, draft_steps=float(passes))
        if implied < 0:
            out["note"] = (f"measured faster than the arithmetic allows even at d_s = 0: verification costs "
                           f"less than {verify_ms:.1f} ms here, or K is smaller than assumed")
    return out
