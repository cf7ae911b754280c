# Copyright: (c) 2026, llmfleet.specdec contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# Private to the collection: the "is it worth it?" arithmetic of speculative decoding, against the incumbent.
"""Break-even arithmetic for a drafter, from the field notes' "Is it worth it?" section.

Units throughout: step times in milliseconds, rates in tokens per second, ``p`` the per-position
acceptance probability, ``k`` the number of drafted tokens per round.

    round_time = draft_passes * d_s + verify_factor * t_s     (draft_passes = k for a plain model)
    A          = (1 - p^(k+1)) / (1 - p)                      (k + 1 at p = 1)
    rate       = A / round_time
    break-even : the p where rate equals the incumbent's rate

Step 0 (does the target already speculate?) reads the engine's Prometheus counters; see
:func:`parse_spec_counters`. Everything here is pure: no I/O.
"""
from __future__ import annotations

import math
import re
from typing import Any, Iterable

from ansible_collections.llmfleet.specdec.plugins.module_utils.common._errors import SpecdecError
from ansible_collections.llmfleet.specdec.plugins.module_utils.llamacpp._llamacpp import SPEC_TYPES as LLAMACPP_SPEC_TYPES

VERIFY_FACTOR = 1.1
DEFAULT_KS = (1, 3, 7)
DEFAULT_BAND = (0.4, 0.5, 0.6)
# How close two rates must be before the verdict calls them even.
_EVEN_TOLERANCE = 1e-9


class BreakevenError(SpecdecError):
    """An input to the break-even arithmetic that cannot be used as given."""


# ---------------------------------------------------------------------------------------------
# input checks


def _number(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        try:
            value = float(value)
        except (TypeError, ValueError):
            raise BreakevenError(f"{name}: expected a number, got {value!r}") from None
    value = float(value)
    if math.isnan(value) or math.isinf(value):
        raise BreakevenError(f"{name}: expected a finite number, got {value!r}")
    return value


def check_k(k: Any, name: str = "k") -> int:
    """``k`` as an int >= 1, or a BreakevenError naming it."""
    if isinstance(k, bool):
        raise BreakevenError(f"{name}: expected a whole number of drafted tokens >= 1, got {k!r}")
    if isinstance(k, float) and k.is_integer():
        k = int(k)
    if isinstance(k, str) and k.strip().lstrip("-").isdigit():
        k = int(k)
    if not isinstance(k, int):
        raise BreakevenError(f"{name}: expected a whole number of drafted tokens >= 1, got {k!r}")
    if k < 1:
        raise BreakevenError(f"{name}: drafted tokens per round must be >= 1, got {k} (K = 0 is plain decoding)")
    return k


def check_p(p: Any, name: str = "p") -> float:
    """``p`` as a float in [0, 1], or a BreakevenError naming it."""
    p = _number(name, p)
    if not 0.0 <= p <= 1.0:
        raise BreakevenError(f"{name}: acceptance probability must lie in [0, 1], got {p}")
    return p


def check_positive(name: str, value: Any, unit: str) -> float:
    """A strictly positive finite number, or a BreakevenError naming the input and its unit."""
    value = _number(name, value)
    if value <= 0:
        raise BreakevenError(f"{name}: must be greater than 0 {unit}, got {value}")
    return value


# ---------------------------------------------------------------------------------------------
# Step 2: the arithmetic


def round_time(k: int, d_s: float, t_s: float, verify_factor: float = VERIFY_FACTOR,
               draft_passes: int | None = None) -> float:
    """Milliseconds per speculative round: the drafter's passes plus one verification of K+1 tokens.

    ``draft_passes`` defaults to ``k`` (a plain model drafts token by token); a one-pass block
    drafter (DFlash, DSpark) uses 1 and an n-gram lookup 0, in which case ``d_s`` may be 0.
    """
    k = check_k(k)
    passes = k if draft_passes is None else int(draft_passes)
    if passes < 0:
        raise BreakevenError(f"draft_passes: must be >= 0, got {passes}")
    t_s = check_positive("t_s", t_s, "ms")
    verify_factor = check_positive("verify_factor", verify_factor, "(target passes per verification)")
    if passes == 0:
        d_s = _number("d_s", d_s if d_s is not None else 0.0)
        if d_s < 0:
            raise BreakevenError(f"d_s: must be >= 0 ms, got {d_s}")
        return verify_factor * t_s
    d_s = check_positive("d_s", d_s, "ms")
    return passes * d_s + verify_factor * t_s


def expected_accepted(p: float, k: int) -> float:
    """Expected tokens committed per round, A = 1 + p + ... + p^k = (1 - p^(k+1)) / (1 - p).

    Summed term by term so that p -> 1 tends smoothly to the limit k + 1.
    """
    p = check_p(p)
    k = check_k(k)
    total, term = 0.0, 1.0
    for _dummy in range(k + 1):
        total += term
        term *= p
    return total


def rate(p: float, k: int, d_s: float, t_s: float, verify_factor: float = VERIFY_FACTOR,
         draft_passes: int | None = None) -> float:
    """Tokens per second of a drafter at acceptance ``p`` and depth ``k`` (A / round_time)."""
    return 1000.0 * expected_accepted(p, k) / round_time(k, d_s, t_s, verify_factor, draft_passes)


def breakeven_p(k: int, d_s: float, t_s: float, incumbent_rate: float,
                verify_factor: float = VERIFY_FACTOR, draft_passes: int | None = None) -> float | None:
    """The acceptance p at which the drafter exactly matches ``incumbent_rate``.

    Returns 0.0 when even p = 0 (one token per round) already matches or beats the incumbent,
    and None when even p = 1 (A = k + 1) cannot reach it. Solved by bisection on [0, 1], where
    A(p) is strictly increasing, to the last bit a double can tell apart.
    """
    k = check_k(k)
    incumbent_rate = check_positive("incumbent_rate", incumbent_rate, "tok/s")
    needed = incumbent_rate * round_time(k, d_s, t_s, verify_factor, draft_passes) / 1000.0
    if needed <= 1.0:
        return 0.0
    if needed > k + 1:
        return None
    lo, hi = 0.0, 1.0
    for _dummy in range(200):
        mid = 0.5 * (lo + hi)
        if mid in (lo, hi):
            break
        if expected_accepted(mid, k) < needed:
            lo = mid
        else:
            hi = mid
    # both ends now bracket the root within one ulp; return the closer one
    return lo if abs(expected_accepted(lo, k) - needed) <= abs(expected_accepted(hi, k) - needed) else hi


def target_step_from_rate(client_tok_s: float, commit_per_round: float = 1.0) -> float:
    """Step 1: the target's step in ms, t_s = 1 / (client-visible tok/s ÷ commit-per-round).

    Use the rate the operator SEES at the client; engine-internal decode-only numbers run
    about 1.7-2x optimistic.
    """
    client_tok_s = check_positive("client_rate", client_tok_s, "tok/s")
    commit_per_round = _number("commit_per_round", commit_per_round)
    if commit_per_round < 1.0:
        raise BreakevenError(
            f"commit_per_round: every round commits at least one token, so it must be >= 1, got {commit_per_round}")
    return 1000.0 / (client_tok_s / commit_per_round)


# ---------------------------------------------------------------------------------------------
# Step 3: classify the drafter by what a round costs

_PLAIN = {
    "class": "plain model",
    "cost_per_round": "K sequential forwards of the draft model",
    "needs": "a drafter 10-50x faster per token than the target",
}
_NGRAM = {
    "class": "n-gram / prompt lookup",
    "cost_per_round": "~0, no model",
    "needs": "repeated context (agent edit loops, code edits, echoes)",
}
_HEAD = {
    "class": "trained head",
    "cost_per_round": "~1 pass",
    "needs": "the head must exist FOR THAT CHECKPOINT: it consumes the target's hidden states",
}

# spec type -> (base row, draft passes per round as a function of K, what it is)
_DRAFTERS: dict[str, tuple[dict[str, str], str, str]] = {
    "draft-simple": (_PLAIN, "k", "a separate small model (-md) sharing the target's tokenizer"),
    "draft-mtp": (_HEAD, "k", "the target's own multi-token-prediction (nextn) layers, one head step per drafted token"),
    "draft-eagle3": (_HEAD, "k", "an EAGLE-3 head over the target's hidden states, one head step per drafted token"),
    "draft-dflash": (_HEAD, "1", "a DFlash block-diffusion drafter: the whole block in one parallel pass"),
    "draft-dspark": (_HEAD, "1", "a DSpark block drafter: the whole block in one parallel pass"),
    "ngram-simple": (_NGRAM, "0", "n-gram lookup in the context"),
    "ngram-map-k": (_NGRAM, "0", "n-gram map lookup in the context"),
    "ngram-map-k4v": (_NGRAM, "0", "n-gram map lookup in the context"),
    "ngram-mod": (_NGRAM, "0", "n-gram lookup in the context"),
    "ngram-cache": (_NGRAM, "0", "n-gram cache lookup (context plus static/dynamic cache files)"),
}
SPEC_TYPES = tuple(_DRAFTERS)


def spec_types_drift(llamacpp_types: Iterable[str] = LLAMACPP_SPEC_TYPES) -> dict[str, list[str]]:
    """Where the cost rows and llama.cpp's spec types (``_llamacpp.SPEC_TYPES``, the one list) disagree.

    ``missing``: types llama.cpp names that have no cost row here (all but ``none``, which drafts
    nothing, need one); ``unknown``: rows for types llama.cpp does not name. Both empty when in step."""
    named = [t for t in llamacpp_types if t != "none"]
    return {"missing": [t for t in named if t not in _DRAFTERS],
            "unknown": [t for t in _DRAFTERS if t not in named]}


def classify_drafter(kind: str) -> dict[str, Any]:
    """Step 3 of the field notes: what one round of this drafter costs and what it needs to pay."""
    if not isinstance(kind, str) or kind.strip() not in _DRAFTERS:
        if isinstance(kind, str) and "," in kind:
            raise BreakevenError(
                f"drafter: give the one spec type whose cost you are weighing, not a chain ({kind!r})")
        raise BreakevenError(f"drafter: unknown spec type {kind!r}; expected one of {', '.join(SPEC_TYPES)}")
    kind = kind.strip()
    row, passes, what = _DRAFTERS[kind]
    out: dict[str, Any] = {"spec_type": kind, "what": what, "draft_passes_per_round": passes}
    out.update(row)
    if kind in ("draft-mtp", "draft-eagle3"):
        out["cost_per_round"] = "~1 pass (K sequential steps of a one-layer head)"
    elif kind in ("draft-dflash", "draft-dspark"):
        out["cost_per_round"] = "~1 pass (one parallel pass drafts the whole block)"
    return out


def draft_passes_for(kind: str | None, k: int) -> int:
    """Drafter forward passes per round at depth ``k`` (``k`` when the drafter is not named)."""
    if kind is None:
        return k
    passes = classify_drafter(kind)["draft_passes_per_round"]
    return k if passes == "k" else int(passes)


# ---------------------------------------------------------------------------------------------
# Step 0: read the engine's own speculation counters from its Prometheus /metrics text

_SAMPLE_RE = re.compile(
    r"^(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)"
    r"(?:\{(?P<labels>[^}]*)\})?"
    r"\s+(?P<value>\S+)"
    r"(?:\s+(?P<ts>-?\d+))?\s*$"
)
_LABEL_RE = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*(?:,|$)')

# engine -> (prefix, counter names without prefix)
_ENGINES = {
    "llama.cpp": "llamacpp:",
    "vllm": "vllm:",
}
_DRAFTS = "spec_decode_num_drafts_total"
_DRAFT_TOKENS = "spec_decode_num_draft_tokens_total"
_ACCEPTED = "spec_decode_num_accepted_tokens_total"
_PER_POS = "spec_decode_num_accepted_tokens_per_pos_total"
# The speculation counters carry these key names in every room: parse_spec_counters below, spec_bench's
# metrics_delta and metrics_total_delta (_endpoint), the judge (plugin_utils/verdicts/_judge) and the watch
# (_drift_host). This is the one mapping from the engines' counter names to them.
COUNTER_NAMES = {_DRAFTS: "drafts", _DRAFT_TOKENS: "draft_tokens", _ACCEPTED: "accepted_tokens"}
COUNTER_KEYS = tuple(COUNTER_NAMES.values())
PER_POSITION_KEY = "accepted_per_pos"  # accepted tokens per draft position, from _PER_POS
EXPORTED_KEY = "exported"  # whether the engine exports _DRAFTS at all
# No drafter proposes this many tokens per round; a position label past it would only allocate a huge list.
MAX_DRAFT_POSITIONS = 4096


def _parse_labels(text: str, line_no: int) -> dict[str, str]:
    labels: dict[str, str] = {}
    pos = 0
    text = text.strip()
    while pos < len(text):
        m = _LABEL_RE.match(text, pos)
        if not m:
            raise BreakevenError(f"/metrics line {line_no}: cannot read the labels {{{text}}}")
        labels[m.group(1)] = m.group(2)
        pos = m.end()
    return labels


def parse_prometheus(text: str) -> list[tuple[str, dict[str, str], float]]:
    """Samples of a Prometheus text exposition as (name, labels, value); comments are skipped."""
    if not isinstance(text, str):
        raise BreakevenError(f"/metrics: expected text, got {type(text).__name__}")
    samples = []
    for line_no, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        m = _SAMPLE_RE.match(line)
        if not m:
            raise BreakevenError(f"/metrics line {line_no}: not a Prometheus sample: {line[:120]!r}")
        try:
            value = float(m.group("value"))
        except ValueError:
            raise BreakevenError(f"/metrics line {line_no}: value {m.group('value')!r} is not a number") from None
        labels = _parse_labels(m.group("labels") or "", line_no)
        samples.append((m.group("name"), labels, value))
    return samples


def metrics_url(endpoint: str) -> str:
    """The /metrics URL of a server given by its base URL (or already by its /metrics URL)."""
    if not isinstance(endpoint, str) or not endpoint.startswith(("http://", "https://")):
        raise BreakevenError(f"endpoint: expected an http:// or https:// URL, got {endpoint!r}")
    url = endpoint.rstrip("/")
    return url if url.endswith("/metrics") else url + "/metrics"


def parse_spec_counters(text: str) -> dict[str, Any]:
    """Step 0 from an engine's /metrics text: does the target already speculate, and how well?

    Reads llama.cpp's ``llamacpp:spec_decode_*`` and vLLM's ``vllm:spec_decode_*`` counters
    (drafts = verification rounds, draft tokens, accepted tokens, accepted per draft position),
    summed over label sets (vLLM labels each engine). Counters run from server start. The counters
    come under the collection's one set of names (:data:`COUNTER_KEYS`, :data:`PER_POSITION_KEY`,
    :data:`EXPORTED_KEY`), the same the bench records in its ``metrics_delta``.
    """
    samples = parse_prometheus(text)
    names = {name for name, _dummy, _dummy in samples}
    engine = None
    for candidate, prefix in _ENGINES.items():
        if any(n.startswith(prefix) for n in names):
            engine = candidate
            break
    if engine is None:
        raise BreakevenError(
            "/metrics: no llama.cpp (llamacpp:*) or vLLM (vllm:*) metrics in the text; "
            "is this the inference server's /metrics, and is llama-server started with --metrics?")
    prefix = _ENGINES[engine]
    totals = {_DRAFTS: None, _DRAFT_TOKENS: None, _ACCEPTED: None}
    per_pos: dict[int, float] = {}
    for name, labels, value in samples:
        if not name.startswith(prefix):
            continue
        short = name[len(prefix):]
        if short in totals:
            totals[short] = (totals[short] or 0.0) + value
        elif short == _PER_POS:
            try:
                pos = int(labels["position"])
            except (KeyError, ValueError):
                raise BreakevenError(
                    f"/metrics: {name} sample without an integer position label: {labels}") from None
            if not 0 <= pos < MAX_DRAFT_POSITIONS:
                raise BreakevenError(
                    f"/metrics: {name} has position {labels['position'][:40]}, outside 0..{MAX_DRAFT_POSITIONS - 1}; "
                    "no draft is that long, so these are not a speculating server's metrics")
            per_pos[pos] = per_pos.get(pos, 0.0) + value
    exported = totals[_DRAFTS] is not None
    drafts = totals[_DRAFTS] or 0.0
    draft_tokens = totals[_DRAFT_TOKENS] or 0.0
    accepted = totals[_ACCEPTED] or 0.0
    accepted_per_pos = [per_pos.get(i, 0.0) for i in range(max(per_pos) + 1)] if per_pos else []
    speculates = drafts > 0
    out: dict[str, Any] = {
        "engine": engine,
        EXPORTED_KEY: exported,
        **{COUNTER_NAMES[name]: value or 0.0 for name, value in totals.items()},
        PER_POSITION_KEY: accepted_per_pos,
        "speculates": speculates,
        "commit_per_round": 1.0 + accepted / drafts if speculates else 1.0,
        "acceptance_rate": accepted / draft_tokens if draft_tokens > 0 else None,
        "mean_draft_length": draft_tokens / drafts if speculates else None,
        "acceptance_per_position": [a / drafts for a in accepted_per_pos] if speculates else [],
    }
    if not exported:
        out["note"] = (f"{engine} exports no {prefix}{_DRAFTS}: speculation is not configured on this server"
                       if engine == "vllm" else
                       f"no {prefix}{_DRAFTS} in the text: this llama-server build does not export spec counters")
    return out


# ---------------------------------------------------------------------------------------------
# the report, in the field notes' order


def _src(value: Any, source: str, **extra: Any) -> dict[str, Any]:
    out = {"value": value, "source": source}
    out.update(extra)
    return out


def _verdict(band_rates: list[float], incumbent: float) -> str:
    if max(band_rates) < incumbent - _EVEN_TOLERANCE:
        return "loss"
    if min(band_rates) > incumbent + _EVEN_TOLERANCE:
        return "win"
    return "depends on p"


def _check_list(name: str, values: Iterable[Any], check) -> list:
    values = list(values)
    if not values:
        raise BreakevenError(f"{name}: give at least one value")
    return [check(v, f"{name}[{i}]") for i, v in enumerate(values)]


def _resolve_inputs(t_s, d_s, incumbent_rate, client_rate, commit_per_round, drafter, counters,
                    metrics_source: str) -> dict[str, dict[str, Any]]:
    """Every input with its value and where it came from; raises on what cannot be resolved."""
    inputs: dict[str, dict[str, Any]] = {}

    if commit_per_round is not None:
        commit = _number("commit_per_round", commit_per_round)
        if commit < 1.0:
            raise BreakevenError(f"commit_per_round: must be >= 1 (every round commits a token), got {commit}")
        extra = {}
        if counters and counters["speculates"]:
            extra["measured"] = counters["commit_per_round"]
        inputs["commit_per_round"] = _src(commit, "given", **extra)
    elif counters is not None:
        if counters["speculates"]:
            inputs["commit_per_round"] = _src(
                counters["commit_per_round"],
                f"measured: {metrics_source} (1 + accepted / drafts = 1 + "
                f"{counters['accepted_tokens']:g} / {counters['drafts']:g})")
        else:
            inputs["commit_per_round"] = _src(1.0, f"measured: {metrics_source} shows no drafts")
    else:
        inputs["commit_per_round"] = _src(
            1.0, "default: assumes the target does not speculate (give endpoint or commit_per_round)")
    commit = inputs["commit_per_round"]["value"]

    if client_rate is not None:
        inputs["client_rate"] = _src(check_positive("client_rate", client_rate, "tok/s"), "given")

    if t_s is not None:
        inputs["t_s"] = _src(check_positive("t_s", t_s, "ms"), "given")
    elif client_rate is not None:
        inputs["t_s"] = _src(
            target_step_from_rate(client_rate, commit),
            "derived: t_s = 1 / (client_rate / commit_per_round)")
    else:
        raise BreakevenError(
            "t_s: give the target's step time in ms, or client_rate (the tok/s a client sees) "
            "so that t_s = 1 / (client_rate / commit_per_round)")
    t_s_ms = inputs["t_s"]["value"]

    if incumbent_rate is not None:
        inputs["incumbent_rate"] = _src(check_positive("incumbent_rate", incumbent_rate, "tok/s"), "given")
    elif client_rate is not None:
        inputs["incumbent_rate"] = _src(inputs["client_rate"]["value"], "given as client_rate (what the operator sees)")
    elif commit > 1.0:
        inputs["incumbent_rate"] = _src(
            1000.0 * commit / t_s_ms,
            "derived: commit_per_round / t_s, counting no drafting cost (an upper bound on the incumbent); "
            "give client_rate for the measured rate")
    else:
        inputs["incumbent_rate"] = _src(1000.0 / t_s_ms, "derived: 1 / t_s (the target does not speculate)")

    passes0 = draft_passes_for(drafter, 1) if drafter is not None else 1
    if d_s is not None:
        d = _number("d_s", d_s)
        if passes0 == 0:
            if d < 0:
                raise BreakevenError(f"d_s: must be >= 0 ms, got {d}")
        else:
            d = check_positive("d_s", d, "ms")
        inputs["d_s"] = _src(d, "given")
    elif passes0 == 0:
        inputs["d_s"] = _src(0.0, "default: an n-gram lookup runs no model")
    else:
        raise BreakevenError(
            "d_s: give the drafter's step time in ms (llama.cpp's per-task eval time lines for the draft "
            "model on the same box)")

    if drafter is not None:
        inputs["drafter"] = _src(classify_drafter(drafter)["spec_type"], "given")
    return inputs


def assess(t_s: float | None = None, d_s: float | None = None, incumbent_rate: float | None = None,
           client_rate: float | None = None, commit_per_round: float | None = None,
           ks: Iterable[int] = DEFAULT_KS, band: Iterable[float] = DEFAULT_BAND,
           drafter: str | None = None, counters: dict[str, Any] | None = None,
           verify_factor: float = VERIFY_FACTOR, metrics_source: str = "/metrics") -> dict[str, Any]:
    """The whole worth-it report, in the field notes' order.

    1. does the target already draft (the incumbent), 2. break-even p at each K versus the
    incumbent, 3. the realistic band's rates and verdict, 4. the drafter's class, and
    ``inputs``: each input's value and its source.
    """
    ks = _check_list("ks", ks, check_k)
    band = _check_list("band", band, check_p)
    verify_factor = check_positive("verify_factor", verify_factor, "(target passes per verification)")
    inputs = _resolve_inputs(t_s, d_s, incumbent_rate, client_rate, commit_per_round, drafter, counters,
                             metrics_source)
    inputs["verify_factor"] = _src(verify_factor, "given" if verify_factor != VERIFY_FACTOR else "default")
    inputs["ks"] = _src(ks, "given" if tuple(ks) != DEFAULT_KS else "default")
    inputs["band"] = _src(band, "given" if tuple(band) != DEFAULT_BAND else "default: the honest 40-60 % band")

    t = inputs["t_s"]["value"]
    d = inputs["d_s"]["value"]
    inc = inputs["incumbent_rate"]["value"]
    commit = inputs["commit_per_round"]["value"]

    known = not inputs["commit_per_round"]["source"].startswith("default")
    incumbent = {
        # None: nobody said (no endpoint, no commit_per_round), so plain decoding was assumed
        "speculates": (commit > 1.0) if known else None,
        "commit_per_round": commit,
        "commit_source": inputs["commit_per_round"]["source"],
        "rate": inc,
        "rate_source": inputs["incumbent_rate"]["source"],
        "baseline": ("A_incumbent / t_s: the target already drafts, so a new drafter must beat that"
                     if commit > 1.0 else "1 / t_s: plain decoding"),
    }
    if counters is not None:
        incumbent["counters"] = counters

    breakeven = []
    realistic = []
    for k in ks:
        passes = draft_passes_for(drafter, k)
        rt = round_time(k, d, t, verify_factor, passes)
        p_star = breakeven_p(k, d, t, inc, verify_factor, passes)
        row: dict[str, Any] = {"k": k, "round_time_ms": rt, "draft_passes": passes,
                               "accepted_needed": inc * rt / 1000.0, "breakeven_p": p_star,
                               "rate_at_p1": rate(1.0, k, d, t, verify_factor, passes)}
        if p_star is None:
            row["note"] = (f"even p = 1 (A = {k + 1} tokens per round) gives {row['rate_at_p1']:.2f} tok/s, "
                           f"below the incumbent's {inc:.2f} tok/s: no acceptance can pay at K = {k}")
        elif p_star == 0.0:
            row["note"] = "any acceptance pays: one token per round already matches the incumbent"
        breakeven.append(row)
        rates = [rate(p, k, d, t, verify_factor, passes) for p in band]
        realistic.append({"k": k, "rates": [{"p": p, "rate": r, "speedup": r / inc} for p, r in zip(band, rates)],
                          "verdict": _verdict(rates, inc)})

    verdicts = {r["verdict"] for r in realistic}
    if verdicts == {"loss"}:
        verdict = "loss"
    elif "win" in verdicts:
        verdict = "win"
    else:
        verdict = "depends on p"
    mid = band[len(band) // 2]
    best = max(realistic, key=lambda r: r["rates"][len(band) // 2]["rate"])

    report = {
        "incumbent": incumbent,
        "breakeven": breakeven,
        "realistic": {
            "band": band,
            "by_k": realistic,
            "best_k_at_mid": best["k"],
            "best_rate_at_mid": best["rates"][len(band) // 2]["rate"],
            "mid_p": mid,
            "verdict": verdict,
        },
        "classification": classify_drafter(drafter) if drafter is not None else None,
        "settle_with": _settle_with(verdict, drafter),
        "inputs": inputs,
    }
    report["summary"] = _summary(report)
    return report


def _settle_with(verdict: str, drafter: str | None) -> str:
    if verdict == "loss":
        return ("nothing in the honest band pays at these step times: only a much cheaper drafter "
                "(smaller d_s, fewer passes) or a slower target changes that; re-measure d_s before dropping it")
    if drafter is not None and drafter.startswith("ngram"):
        return "measure acceptance on the real traffic shape (n-gram lookups pay only on repeated context)"
    return ("measure p: greedy continuation agreement on identical prompts at temperature 0 (two API calls), "
            "or llama.cpp's --spec-synth-rates projection")


def _summary(report: dict[str, Any]) -> list[str]:
    inc = report["incumbent"]
    lines = []
    rate_part = f"incumbent {inc['rate']:.2f} tok/s ({inc['rate_source']})"
    if inc["speculates"] is None:
        lines.append("1. whether the target already drafts is unknown (give endpoint or commit_per_round); "
                     + rate_part)
    elif inc["speculates"]:
        lines.append(f"1. the target already drafts: {inc['commit_per_round']:.2f} tokens/round "
                     f"({inc['commit_source']}); " + rate_part)
    else:
        lines.append(f"1. the target does not draft ({inc['commit_source']}); " + rate_part)
    parts = []
    for row in report["breakeven"]:
        p = row["breakeven_p"]
        parts.append(f"K={row['k']}: " + ("impossible" if p is None else f"p={p:.3f}"))
    lines.append("2. break-even versus the incumbent: " + ", ".join(parts))
    real = report["realistic"]
    spans = []
    for r in real["by_k"]:
        lo, hi = r["rates"][0]["rate"], r["rates"][-1]["rate"]
        spans.append(f"K={r['k']}: {lo:.1f}-{hi:.1f} tok/s")
    lines.append(f"3. realistic band p={real['band'][0]:g}-{real['band'][-1]:g}: " + ", ".join(spans)
                 + f" -> {real['verdict'].upper()}")
    cls = report["classification"]
    if cls:
        lines.append(f"4. drafter {cls['spec_type']} ({cls['class']}): costs {cls['cost_per_round']}; "
                     f"needs {cls['needs']}")
    lines.append("5. VRAM fit and attachment surface: not assessed here (gpu_facts with kv_budget, and spec_lint)")
    lines.append(f"6. the measurement that settles it: {report['settle_with']}")
    return lines
