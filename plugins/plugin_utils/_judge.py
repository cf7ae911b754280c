# Copyright: (c) 2026, llmfleet.specdec contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# Private to the collection, controller only: judging an A/B run (statuses, checks, acceptance, losslessness, verdict tables).
"""Judging an A/B run for the protocol of the field notes, on the controller.

A *run* is what the A/B role collects (see ``_run_check.check_run`` for its exact form): one entry per
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

What it does not hold: the statistics (medians, intervals, the t distribution, verdict words and
margins) live in ``module_utils/_stats.py``, host-safe because ``_loadgate`` uses them under
``spec_bench``; the texts of a run (prompt keys, empty answers, the baseline's reference texts, the
first divergence) live in ``module_utils/_quality.py``, which also judges lossy-by-design knobs; the
shape names in ``module_utils/_shapes.py``; the report document and its Markdown in ``_report``.

Everything here is pure and deterministic (bootstrap draws come from seeded generators).
"""
from __future__ import annotations

import math
from typing import Any, Iterable, Mapping, Sequence

from ansible_collections.llmfleet.specdec.plugins.module_utils import _breakeven as be
from ansible_collections.llmfleet.specdec.plugins.module_utils import _loadgate, _quality
from ansible_collections.llmfleet.specdec.plugins.module_utils._quality import (
    _reference_texts,
    _text_key,
    first_divergence,
    is_empty,
)
from ansible_collections.llmfleet.specdec.plugins.module_utils._shapes import SHAPES
from ansible_collections.llmfleet.specdec.plugins.module_utils._stats import (
    BOOTSTRAP_SCHEME,
    EQUIVALENCE_MARGIN,
    LOSS,
    MIN_REQUESTS,
    MIN_REQUESTS_PER_ROUND,
    MIN_ROUNDS,
    MIX_COMBINATION,
    ROUNDS_SCHEME,
    WIN,
    ReportInputError,
    _check_boot,
    bootstrap_median_ci,
    bootstrap_mix_ci,
    bootstrap_ratio_ci,
    median,
    mix_rate,
    round_log_means,
    round_mix_ci,
    round_rate_ci,
    round_ratio_ci,
    round_verdict,
    verdict,
)
from ansible_collections.llmfleet.specdec.plugins.plugin_utils._run_check import check_run

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

VACUOUS = "vacuous"
METHODS = ("rounds", "request-bootstrap")
DEFAULT_K = 3  # llama.cpp's default --spec-draft-n-max
P_ESTIMATE = (
    "p solves A(p, K) = measured mean accepted length (1 + accepted / drafts from /metrics deltas), "
    "or, without /metrics, A(p, K) - 1 = acceptance * K; the plain p = acceptance would understate p "
    "because acceptance falls with the draft position")

MEAN_LEN_METHOD = (
    "tokens committed per target pass: from /metrics deltas when every request of the shape carries one, "
    "1 + accepted_tokens / drafts over the rounds that drafted (llama.cpp's own mean len); otherwise from the "
    "per-request counters, which give no round count, sum(predicted_n) / sum(predicted_n - draft_n_accepted), "
    "counting a step that drafted nothing as a round of one")


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
        for i, v in enumerate(d.get(be.PER_POSITION_KEY) or []):
            if i >= len(per_pos):
                per_pos.extend([0] * (i + 1 - len(per_pos)))
            per_pos[i] += int(v or 0)
    if not drafts:
        return []
    # positions the server exports with 0 accepted stay: a depth that never pays is the finding
    return [v / drafts for v in per_pos]


# ---------------------------------------------------------------------------------------------
# the run: judging


def _shapes_in(run: Mapping[str, Any]) -> list[str]:
    seen: list[str] = []
    for e in run["entries"]:
        bench = e.get("bench") or {}
        for s in list(bench.get("shapes") or {}) + [r["shape"] for r in bench.get("requests", [])]:
            if s not in seen:
                seen.append(s)
    known = [s for s in SHAPES if s in seen]
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
