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
- per shape (exploratory): median decode tok/s, acceptance, mean accepted length, speedup against the
  baseline with a simultaneous interval from the run's block design (``_confirm.shape_analysis``), its
  n (rounds x requests per side), noise, smallest findable effect and a verdict (WIN / LOSS / EQUIVALENT
  / INCONCLUSIVE); end-to-end tok/s and time to first token beside it, judged the same way;
- prediction against measurement with the break-even arithmetic of ``_breakeven``;
- the confirmatory verdict of every candidate on the run's one endpoint, with the sequential looks
  (``_confirm.confirmatory``), and the recommendation resting on it.

What it does not hold: the statistics (medians, intervals, the t distribution, verdict words and
margins) live in ``module_utils/common/_stats.py``, host-safe because ``_loadgate`` uses them under
``spec_bench``; the texts of a run (prompt keys, empty answers, the baseline's reference texts, the
first divergence) live in ``module_utils/bench/_quality.py``, which also judges lossy-by-design knobs; the
shape names in ``module_utils/bench/_shapes.py``; the report document and its Markdown in ``_report``.

Everything here is pure and deterministic (bootstrap draws come from seeded generators).
"""
from __future__ import annotations

import math
from typing import Any, Iterable, Mapping, Sequence

from ansible_collections.llmfleet.specdec.plugins.module_utils.bench import _breakeven as be
from ansible_collections.llmfleet.specdec.plugins.module_utils.bench import _loadgate, _quality
from ansible_collections.llmfleet.specdec.plugins.module_utils.bench._quality import (
    _reference_texts,
    _text_key,
    first_divergence,
    is_empty,
)
from ansible_collections.llmfleet.specdec.plugins.module_utils.bench._shapes import SHAPES
from ansible_collections.llmfleet.specdec.plugins.module_utils.common._stats import (
    BOOTSTRAP_SCHEME,
    EQUIVALENCE_MARGIN,
    LOSS,
    MIN_REQUESTS,
    MIN_REQUESTS_PER_ROUND,
    MIN_ROUNDS,
    MIX_COMBINATION,
    TOO_FEW_REQUESTS,
    WIN,
    ReportInputError,
    _check_boot,
    bootstrap_median_ci,
    bootstrap_ratio_ci,
    median,
    round_log_means,
    round_rate_ci,
    round_ratio_ci,
    t_quantile,
    verdict,
)
from ansible_collections.llmfleet.specdec.plugins.plugin_utils.verdicts import _confirm, _design, _predict
from ansible_collections.llmfleet.specdec.plugins.plugin_utils.verdicts._design import INCONCLUSIVE
from ansible_collections.llmfleet.specdec.plugins.plugin_utils.verdicts._predict import P_ESTIMATE, _config_k
from ansible_collections.llmfleet.specdec.plugins.plugin_utils.verdicts._run_check import check_run

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
SHAPE_SCHEME = (
    "exploratory, one look at everything measured: per shape and metric the run's block design (rounds are "
    "blocks, configs treatments) on the mean log rate of each config's round, residual variance pooled across "
    "configs, and Dunnett's simultaneous interval against the baseline for the run's candidates; the "
    "confirmatory verdict is the one on the run's endpoint (see confirmatory)")
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


def _status(cfg: dict[str, Any], is_baseline: bool, all_rounds: set[int]) -> tuple[str, list[str]]:
    """The config's status; ``all_rounds`` are the rounds it should have (see :func:`_expected_rounds`)."""
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


def _expected_rounds(run: Mapping[str, Any], design: Mapping[str, Any], cfg: Mapping[str, Any], is_baseline: bool,
                     all_rounds: set[int]) -> set[int]:
    """The rounds a config should have: every round of the run, but in a sequential run that did not stop early
    a candidate the design stopped (or a look dropped) has its rounds up to its last one."""
    if is_baseline or not design.get("sequential") or run.get("error"):
        return all_rounds
    own = {e["round"] for e in cfg["entries"]}
    return {r for r in all_rounds if r <= max(own)} if own else all_rounds


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
         ref: Mapping[tuple[str, int], str], boot: dict[str, Any],
         analysis: Mapping[str, Mapping[str, Any]] | None = None,
         pooled: tuple[float, int] | None = None) -> dict[str, Any]:
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
        row["tok_s"], row["tok_s_ci_low"], row["tok_s_ci_high"] = _block_rate(samples, pooled, boot["alpha"])
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
    _other_metrics(row, reqs, cfg["name"], analysis, is_baseline)
    if not is_baseline and samples and base_samples and boot["method"] == "rounds":
        rci = round_ratio_ci(samples, base_samples, alpha=boot["alpha"])
        row.update(n=rci.n, n_paired_rounds=rci.rounds, n_requests_per_round=rci.requests, exploratory=True)
        _analysed(row, (analysis or {}).get("decode", {}).get(cfg["name"]), rci.requests)
    elif not is_baseline and samples and base_samples:
        ci = bootstrap_ratio_ci(samples, base_samples, n=boot["n"], seed=seed, alpha=boot["alpha"])
        row.update(speedup=ci.ratio, ci_low=ci.low, ci_high=ci.high, ci_scheme=ci.scheme)
        enough = len(samples) >= MIN_REQUESTS and len(base_samples) >= MIN_REQUESTS
        row["ci_verdict"] = verdict(ci.low, ci.high) if enough else "too few requests"
    row["verdict"] = _row_verdict(row, status, is_baseline, bool(base_samples))
    return row


def _block_rate(samples: Mapping[Any, float], pooled: tuple[float, int] | None,
                alpha: float) -> tuple[float, float | None, float | None]:
    """A config's rate on one shape: the geometric mean over rounds of its round means, with its interval at the
    block model's pooled residual (``pooled``: SD and df from every config of the run), not at the config's own
    few rounds (two rounds give one degree of freedom: an interval from a twentieth to thirty times the rate).
    Without residual degrees of freedom yet, the config's own t interval (none at one round)."""
    if pooled is None:
        return round_rate_ci(samples, alpha=alpha)
    s, df = pooled
    means = [m for m, _n in round_log_means(samples).values()]
    mean = sum(means) / len(means)
    half = t_quantile(1.0 - alpha / 2.0, df) * s / math.sqrt(len(means))
    return _design.exp_safe(mean), _design.exp_safe(mean - half), _design.exp_safe(mean + half)


def _analysed(row: dict[str, Any], a: Mapping[str, Any] | None, fewest: int) -> None:
    """A row's speedup, simultaneous interval and verdict from the shape's block-design analysis."""
    if a is None:
        row.update(ci_verdict=INCONCLUSIVE, why="no comparison: no round shared with the baseline")
        return
    row.update(speedup=a["ratio"], ci_low=a["low"], ci_high=a["high"], noise=a["noise"], mde=a["mde"],
               ci_scheme=f"block design over rounds, Dunnett c {a['c']:.2f}, df {a['df']}" if a["low"] else None,
               ci_verdict=a["verdict"])
    if a.get("why"):
        row["why"] = a["why"]
    if fewest < MIN_REQUESTS_PER_ROUND:
        row.update(ci_verdict=INCONCLUSIVE, why=f"{TOO_FEW_REQUESTS}: a round has {fewest} request(s) on one side")


def _other_metrics(row: dict[str, Any], reqs: list[dict[str, Any]], name: str,
                   analysis: Mapping[str, Mapping[str, Any]] | None, is_baseline: bool) -> None:
    """End-to-end tok/s and time to first token beside decode, judged the same way (``_confirm``)."""
    for metric in ("e2e", "ttft"):
        rates = [x for x in (_confirm.request_rate(r, metric) for r in reqs) if x]
        cell: dict[str, Any] = {"value": None, "speedup": None, "ci_low": None, "ci_high": None,
                                "verdict": None, "noise": None, "mde": None}
        if rates:
            geo = math.exp(sum(math.log(x) for x in rates) / len(rates))
            cell["value"] = geo if metric == "e2e" else 1000.0 / geo  # tok/s, or ms to the first token
        a = (analysis or {}).get(metric, {}).get(name)
        if a is not None and not is_baseline:
            cell.update(speedup=a["ratio"], ci_low=a["low"], ci_high=a["high"], verdict=a["verdict"],
                        noise=a["noise"], mde=a["mde"])
        row[metric] = cell


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

    design = _confirm.design_of(run, len(all_rounds))
    family = [c["name"] for c in run["configs"] if c["name"] != baseline_name and c["name"] not in probes]
    per_shape = ({s: _confirm.shape_analysis(gathered, baseline_name, family, s, design) for s in shapes}
                 if method == "rounds" else {})
    pooled = ({s: _confirm.pooled_noise(gathered, baseline_name, [baseline_name, *family], s) for s in shapes}
              if method == "rounds" else {})
    configs: dict[str, Any] = {}
    for c in run["configs"]:
        g = gathered[c["name"]]
        is_base = c["name"] == baseline_name
        status, problems = _status(g, is_base, _expected_rounds(run, design, g, is_base, all_rounds))
        load_gate = _loadgate.config_gate(g["entries"])  # texts under concurrent load (issue 13)
        status, problems = _loadgate.judge_status(status, problems, load_gate, is_base,
                                                  {"FAILED": FAILED, "INVALID": INVALID})
        rows = {s: _row(g, s, base if base["requests"] else None, status, is_base, ref, boot, per_shape.get(s),
                        pooled.get(s))
                for s in shapes}
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
            moved = [s for s, r in j["shapes"].items() if r["ci_verdict"] in (WIN, LOSS, _design.WIN, _design.LOSS)]
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
    base_costs = _predict.batch_costs(gathered[baseline_name])
    for c in run["configs"]:
        j = configs[c["name"]]
        if j["role"] != "speculative" or j["status"] not in (OK, INCOMPLETE):
            continue
        for s in shapes:
            if not j["shapes"][s]["draft_n"]:
                continue  # nothing drafted: no acceptance to predict from
            probe = next((configs[n] for n, served in probes.items() if c["name"] in served
                          and configs[n]["shapes"].get(s, {}).get("median_tok_s")), None)
            p = _predict.prediction(gathered[c["name"]], c, s, j["shapes"][s], base_judged["shapes"].get(s), d_s_ms,
                                    probe, base_costs, _predict.batch_costs(gathered[probe["name"]]) if probe else None)
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
        "statistics": {"method": method, "alpha": design["alpha"] if method == "rounds" else alpha,
                       "margin": design["margin"] if method == "rounds" else 0.0,
                       "scheme": SHAPE_SCHEME if method == "rounds" else BOOTSTRAP_SCHEME,
                       "min_rounds": MIN_ROUNDS if method == "rounds" else 1,
                       "min_requests_per_round": MIN_REQUESTS_PER_ROUND if method == "rounds" else None,
                       "min_requests": None if method == "rounds" else MIN_REQUESTS},
        "method": {"mix": MIX_COMBINATION, "p": P_ESTIMATE,
                   "mean_accepted_len": MEAN_LEN_METHOD},
    }
    judged["design"] = design
    judged["confirmatory"] = _confirm.confirmatory(judged, gathered, design)
    judged["recommendation"] = _confirm.recommend(judged)
    return judged
