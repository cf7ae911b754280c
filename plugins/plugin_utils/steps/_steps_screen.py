# Copyright: (c) 2026, llmfleet.specdec contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# Controller-side steps for the A/B's screen: which candidates deserve a production restart. Called through filter
# llmfleet.specdec.internal by roles/spec_ab/tasks/screen.yml.
"""- ``serving_unit | llmfleet.specdec.internal('screen_binary')``: the llama-server binary production's unit runs
  (directly or through the collection's launcher), for the drafter's side server; None when the screen cannot say
  (a container, vLLM).
- ``configs | llmfleet.specdec.internal('screen_candidates', baseline, preflight_results)``: the configs spec_screen
  takes, each at its own depth, with the preflight's KV fit.
- ``screen | llmfleet.specdec.internal('screen_select', configs, baseline, min_speedup, rounds)``: which configs the
  rounds measure and which are SCREENED OUT, with the restarts that saves.
- ``candidates | llmfleet.specdec.internal('screen_estimate', shapes, prompts_per_shape, sizes, decode_rate)`` and
  ``estimate | llmfleet.specdec.internal('screen_estimate_line', elapsed_s)``: what the screen costs (requests,
  side servers, seconds at production's rate; never a restart), before it runs and after.
- ``spec_ab_traffic | llmfleet.specdec.internal('screen_traffic', mix, shapes, primary_shape, judge_on)``: the
  confirmatory endpoint the screen judges: its metric, its weights (``_confirm.weights_of``, as the verdict's), the
  built-in shapes it sends, and the line that says so.
- ``preflight_results | llmfleet.specdec.internal('first_lines', decision, rounds)``: per speculative candidate, what
  the preflight and the screen say, in the field notes' order (does the target already speculate, the break-even
  acceptance at K = 1, 3, 7 against the incumbent, the measured acceptance and the predicted rate, the fit, the one
  measurement that settles it).

Why choosing the family this way keeps the confirmatory error rate: the screen reads production alone, never a
candidate's measured rate, so which candidates enter the family is decided before, and independently of, the
measurements the verdicts rest on; the rounds then control the family-wise false WIN over the candidates that
enter (Dunnett over those), as for any family fixed in advance (docs/statistics.md).
"""
from __future__ import annotations

from typing import Any

from ansible.errors import AnsibleFilterError

_DEPTH_VARS = ("LLAMA_ARG_SPEC_DRAFT_N_MAX",)


def screen_traffic(traffic: Any, mix: Any, shapes: Any, primary_shape: Any = None, judge_on: Any = "e2e"
                   ) -> dict[str, Any]:
    """What the screen judges: the run's confirmatory endpoint (spec_ab_judge_on) over the weights its verdict uses
    (``_confirm.weights_of`` of the declared mix: spec_ab_mix with the traffic files' weights; else
    spec_ab_primary_shape; else equal weights over the measured shapes, the built-in mix). ``shapes``: the built-in
    shapes the rounds measure (spec_ab_shapes); the traffic files' shapes follow them, as spec_bench measures them."""
    from ansible_collections.llmfleet.specdec.plugins.module_utils.common._stats import ReportInputError, normalize_mix
    from ansible_collections.llmfleet.specdec.plugins.plugin_utils.steps._steps_traffic import ab_traffic_mix
    from ansible_collections.llmfleet.specdec.plugins.plugin_utils.verdicts._confirm import BUILT_IN, weights_of

    if judge_on not in ("e2e", "decode"):
        raise AnsibleFilterError(f"screen_traffic: spec_ab_judge_on {judge_on!r} is not e2e or decode")
    declared = dict(mix or {})
    declared.update(ab_traffic_mix(traffic))
    try:
        run_mix = normalize_mix(declared) if declared else None
    except ReportInputError as exc:
        raise AnsibleFilterError(f"screen_traffic: spec_ab_mix: {exc}") from None
    builtin = [str(s) for s in shapes or []]
    measured = builtin + [str(t["name"]) for t in traffic or [] if isinstance(t, dict) and t.get("name")]
    weights, source = weights_of(run_mix, measured, {"primary_shape": primary_shape or None})
    weights = {s: float(w) for s, w in weights.items() if w > 0}
    shown = ", ".join(f"{s} {w / sum(weights.values()):.0%}" for s, w in weights.items()) or "none"
    return {"metric": str(judge_on), "weights": weights, "weights_from": source, "declared": source != BUILT_IN,
            "shapes": [s for s in builtin if s in weights],
            "custom": [s for s in measured if s in weights and s not in builtin],
            "line": f"the screen judges endpoint {judge_on} tokens/s over {shown} ({source})"}


def screen_binary(unit: Any) -> str | None:
    if not isinstance(unit, dict) or unit.get("engine") not in (None, "llamacpp"):
        return None
    argv = [str(w) for w in unit.get("argv") or []]
    at = None
    if unit.get("kind") == "launcher" and unit.get("launcher") in argv:
        at = argv.index(unit["launcher"]) + 1
    elif unit.get("kind") == "direct" and isinstance(unit.get("server_at"), int):
        at = unit["server_at"]
    if at is not None and 0 <= at < len(argv):
        return argv[at]
    if unit.get("kind") in ("container",):
        return None
    # the launcher or a wrapper exec'd the server: the running process's own command line names it
    running = (unit.get("running") or {}).get("argv") or []
    first = str(running[0]) if running else ""
    return first if first.rsplit("/", 1)[-1].startswith("llama-server") else None


def screen_candidates(configs: Any, baseline: str, preflight: Any = None) -> list[dict[str, Any]]:
    """Each candidate as spec_screen takes it; with the preflight's results, its KV fit beside production
    (``fits``: a drafter kv_budget says does not fit is never started as a side server)."""
    if not isinstance(configs, list):
        raise AnsibleFilterError("screen_candidates: give the run's configs (a list)")
    fits = {r.get("name"): r.get("fits") for r in preflight or [] if isinstance(r, dict)}
    out = []
    for config in configs:
        if config.get("name") == baseline:
            continue
        item = {"name": config["name"], "env": dict(config.get("env") or {}), "flags": list(config.get("flags") or [])}
        depth = next((item["env"][v] for v in _DEPTH_VARS if item["env"].get(v) not in (None, "")), None)
        if depth is not None:
            item["ks"] = [int(depth)]
        if fits.get(config["name"]) is False:
            item["fits"] = False
        out.append(item)
    return out


def _bound_of(row: dict[str, Any], best: dict[str, Any], rate: float) -> tuple[float, float, list[str]]:
    """(the candidate's optimistic speedup, its rate, why its timings are unreliable) over every K it was timed at.
    A screen recorded before the bound existed gives its interval's upper end instead."""
    bounds = [(float(r["bound_speedup"]), float(r.get("bound_tok_s") or 0.0)) for r in row["k"].values()
              if isinstance(r, dict) and r.get("bound_speedup") is not None]
    if bounds:
        speedup, tok_s = max(bounds)
    else:
        tok_s = float(best.get("high") or 0.0)
        speedup = tok_s / rate
    why = [str(r["unreliable_why"]) for r in row["k"].values() if isinstance(r, dict) and r.get("unreliable")]
    return speedup, tok_s, list(dict.fromkeys(why))


def screen_select(screen: Any, configs: Any, baseline: str, min_speedup: float, rounds: int) -> dict[str, Any]:
    """Keep the baseline, every candidate the screen could not judge, every candidate whose timings the screen
    marked unreliable (the host was busy), and every one whose optimistic bound reaches ``min_speedup``: the rate
    at the fastest of every repeated timing over production at its own fastest step (``bound_speedup``,
    docs/statistics.md), which load cannot lower. The rest is SCREENED OUT, with its prediction and its bound.
    Nothing else screens a candidate out: a sweep's depths each go to the rounds when their bound reaches
    ``min_speedup`` (another depth's predicted low end is a prediction, which a busy host or the model's own error
    can raise above what that depth really does, and it once pushed a really faster depth out)."""
    if not isinstance(screen, dict) or not isinstance(configs, list):
        raise AnsibleFilterError("screen_select: give spec_screen's screen and the run's configs")
    production = screen.get("production") or {}
    # the rates are the confirmatory endpoint's where the screen judged it (production's own on that metric)
    rate = float((production.get("endpoint") or {}).get("tok_s") or production.get("tok_s") or 0.0)
    found = screen.get("candidates") or {}
    predicted: dict[str, dict[str, Any]] = {}
    for config in configs:
        row = found.get(config.get("name"))
        if row and row.get("screenable") and row.get("k") and rate > 0:
            best = row["k"][str(row["best_k"])]
            bound, bound_tok_s, unreliable = _bound_of(row, best, rate)
            tok_s = best.get("predicted_tok_s")
            predicted[config["name"]] = {"k": row["best_k"], "predicted_tok_s": tok_s,
                                         "low": best.get("low"), "high": best.get("high"),
                                         "speedup": tok_s / rate if tok_s else None,
                                         "speedup_high": best["high"] / rate if best.get("high") else None,
                                         "bound_speedup": bound, "bound_tok_s": bound_tok_s,
                                         "unreliable": unreliable,
                                         "mean_accepted_len": best["mean_accepted_len"]}
    out: dict[str, Any] = {"keep": [], "screened_out": [], "unscreened": [], "unreliable": [],
                           "production_tok_s": rate, "metric": (production.get("endpoint") or {}).get("metric", "decode")}

    def shown(p: dict[str, Any]) -> str:
        if p["predicted_tok_s"] is None:
            return f"no prediction at K={p['k']}"
        return (f"predicted {p['speedup']:.2f}x [{(p['low'] or 0.0) / rate:.2f}, {(p['speedup_high'] or 0.0):.2f}] of "
                f"production at K={p['k']}")

    for config in configs:
        name = config.get("name")
        if name == baseline:
            out["keep"].append(name)
            continue
        if name not in predicted:
            out["keep"].append(name)
            row = found.get(name) or {}
            out["unscreened"].append({"name": name, "why": row.get("why") or "not screened"})
            continue
        p = predicted[name]
        if p["unreliable"]:
            # a timing the screen cannot trust decides nothing: the rounds measure it
            out["keep"].append(name)
            out["unreliable"].append({"name": name, "why": "; ".join(p["unreliable"]),
                                      "bound_speedup": p["bound_speedup"], "speedup": p["speedup"]})
            continue
        why = None
        if p["bound_speedup"] < float(min_speedup):
            why = (f"{shown(p)}; even at the fastest of every repeated timing it reaches {p['bound_speedup']:.2f}x, "
                   f"below spec_ab_min_speedup {float(min_speedup):.2f}x")
        if why:
            out["screened_out"].append(dict(p, name=name, why=why))
        else:
            out["keep"].append(name)
    out["restarts_saved"] = len(out["screened_out"]) * int(rounds)
    return out


def screen_estimate(candidates: Any, shapes: Any, prompts_per_shape: Any, sizes: Any = None,
                    decode_rate: Any = None, seed: Any = 0, judged: Any = None, traffic: Any = None) -> dict[str, Any]:
    """What the screen will cost before it runs (the dry run prints it): the requests and tokens it sends to
    production, the batches it times there, the servers it starts beside production (each draft model's side server;
    the copy of the target twice, and twice more per draft model, where a copy fits) and their requests, and, with
    production's decode rate (``decode_rate``, tok/s; None when not known yet), about how many seconds that is.
    Never a production restart. ``candidates`` are screen_candidates' items; ``judged`` (screen_traffic's) and
    ``traffic`` (spec_ab_traffic) count the shapes the screen sends: those the endpoint weighs, the operator's
    files' at their own n_predict."""
    from ansible_collections.llmfleet.specdec.plugins.module_utils.bench._endpoint import plan_requests
    from ansible_collections.llmfleet.specdec.plugins.module_utils.screen import _screen

    if not isinstance(candidates, list):
        raise AnsibleFilterError("screen_estimate: give screen_candidates' list")
    judged = judged if isinstance(judged, dict) else {}
    builtin = judged["shapes"] if "shapes" in judged else shapes
    schedule = plan_requests(seed=int(seed or 0), sizes=sizes or None, shapes=builtin,
                             prompts_per_shape=int(prompts_per_shape), repeats=1, warmup=0)[1] if builtin else []
    budgets = {str(t.get("name")): int(t.get("n_predict") or 0) for t in traffic or [] if isinstance(t, dict)}
    custom = [budgets.get(name, 0) for name in judged.get("custom") or [] for _i in range(int(prompts_per_shape))]
    tokens = sum(int(p.n_predict) for _r, p in schedule) + sum(custom)
    plans = [_screen.candidate_plan(c) for c in candidates]
    screened = [p for p in plans if p["screenable"]]
    drafts = [p for p in screened if p["chain"] == ["draft-simple"]]
    ks = sorted({k for p in screened for k in p["ks"]})
    batches = 5 * len(_screen.verify_grid(ks)) + 1 if ks else 0
    # a draft model is asked once per prefix where it drafts: at most once per production token
    side_requests = len(drafts) * tokens
    side_batches = sum(5 * (max(p["ks"]) + 1) + 1 for p in drafts)
    copy_starts = (2 + 2 * len(drafts)) if screened else 0
    copy_tokens = copy_starts * tokens
    out: dict[str, Any] = {"requests": len(schedule) + len(custom), "tokens": tokens, "batches": batches,
                           "traffic": judged.get("line"),
                           "side_servers": len(drafts), "side_requests": side_requests + side_batches,
                           "copy_starts": copy_starts, "copy_tokens": copy_tokens, "restarts": 0, "seconds": None}
    rate = float(decode_rate or 0) if str(decode_rate or "").replace(".", "", 1).isdigit() else 0.0
    if rate > 0 and screened:
        # production's tokens and batches at its rate, the drafters' and the copies' as many again (an upper end:
        # a copy runs no faster than production, a side server's draft model far faster)
        out["seconds"] = round((tokens + batches + copy_tokens) / rate + side_requests / (4 * rate), 1)
    return out


def screen_estimate_line(estimate: Any, spent: Any = None) -> str:
    """The plan's line for the screen: its estimate, and what it took where it ran (``spent``: spec_screen's
    ``elapsed_s``)."""
    if not isinstance(estimate, dict):
        return "screen: not run"
    line = (f"screen (requests only, no production restart): {estimate['requests']} requests to production "
            f"({estimate['tokens']} tokens) and {estimate['batches']} batch timings, {estimate['side_servers']} drafter "
            f"side server(s), {estimate['copy_starts']} start(s) of a copy of the target where one fits")
    if estimate.get("seconds") is not None:
        line += f"; about {estimate['seconds']:.0f} s at production's rate"
    if estimate.get("traffic"):
        line += f"; {estimate['traffic']}"
    if isinstance(spent, (int, float)):
        line += f"; it took {float(spent):.0f} s"
    return line


def _breakeven_from_screen(t_s: float, d_s: float, incumbent: float) -> list[dict[str, Any]]:
    """Break-even acceptance at K = 1, 3, 7 from the screen's measured steps (target t_s, drafter d_s, in ms)."""
    from ansible_collections.llmfleet.specdec.plugins.module_utils.bench import _breakeven

    # an n-gram lookup's step is reported as 0 (it costs about nothing beside the target's): a microsecond here
    try:
        return [{"k": k, "breakeven_p": _breakeven.breakeven_p(k, max(d_s, 0.001), t_s, incumbent)} for k in (1, 3, 7)]
    except _breakeven.BreakevenError:  # a step the arithmetic cannot take: the line says it was not computed
        return []


def _fit_text(row: dict[str, Any]) -> str:
    fits = row.get("fits")
    mib = row.get("kv_bytes")
    size = "" if mib is None else f" ({mib / 1048576:.1f} MiB of KV)"
    if row.get("kv_error"):
        return f"not sized ({str(row['kv_error'])[:80]})"
    return {True: "fits beside the weights", False: "DOES NOT FIT", None: "unknown (no device memory given)"}[fits] + size


def first_lines(results: Any, decision: Any = None, rounds: Any = None) -> list[str]:
    """The answer first, per speculative candidate of the preflight, in the field notes' order. ``decision`` is
    screen_select's result (with ``screen``) where the screen ran; ``rounds`` the A/B's spec_ab_max_rounds."""
    if not isinstance(results, list):
        raise AnsibleFilterError("first_lines: give the preflight's results (a list)")
    decision = decision if isinstance(decision, dict) else {}
    screen = decision.get("screen") or {}
    found = screen.get("candidates") or {}
    out_names = {r.get("name"): r for r in decision.get("screened_out") or []}
    busy_names = {r.get("name") for r in decision.get("unreliable") or []}
    production = screen.get("production") or {}
    lines: list[str] = []
    for row in results:
        if not isinstance(row, dict) or not row.get("legal") or not row.get("effective_chain"):
            continue
        name = row.get("name")
        be = row.get("breakeven") or {}
        inc = be.get("incumbent") or {}
        if inc.get("speculates") is None:
            first = "1. does the target already speculate: unknown (no endpoint or counters to read)"
        elif inc["speculates"]:
            first = (f"1. the target already speculates: {inc.get('commit_per_round', 0):.2f} tokens a round "
                     f"({inc.get('commit_source')}): the candidate must beat that, not plain decoding")
        else:
            first = f"1. the target does not speculate ({inc.get('commit_source')}): the incumbent is plain decoding"
        if inc.get("rate") is not None:
            first += f"; incumbent {float(inc['rate']):.1f} tok/s ({inc.get('rate_source')})"
        rows = be.get("breakeven") or []
        cand = found.get(name) or {}
        if not rows and cand.get("screenable") and production.get("t_s_ms") and production.get("tok_s"):
            # no operator timings: the screen's own step times, measured on production with no restart
            rows = _breakeven_from_screen(float(production["t_s_ms"]), float(cand.get("d_s_ms") or 0.0),
                                          float(production["tok_s"]))
        if rows:
            second = "2. break-even acceptance against the incumbent: " + ", ".join(
                f"K={r['k']} p={'impossible' if r.get('breakeven_p') is None else format(r['breakeven_p'], '.2f')}"
                for r in rows)
        else:
            second = ("2. break-even acceptance: not computed (give specdec_breakeven t_s and d_s, or let the A/B's "
                      "screen time production)")
        if cand.get("screenable") and cand.get("k"):
            k = str(cand.get("best_k"))
            best = cand["k"][k]
            rate = float(production.get("tok_s") or 0.0)
            per_pos = ", ".join(format(a, ".2f") for a in best.get("accept_per_pos") or [])
            third = (f"3. measured on production with no restart: mean accepted length "
                     f"{best['mean_accepted_len']:.2f} at K={k} (acceptance by position {per_pos}); ")
            if best.get("predicted_tok_s"):
                ratio = f", {best['predicted_tok_s'] / rate:.2f}x production" if rate > 0 else ""
                third += (f"predicted {best['predicted_tok_s']:.1f} tok/s [{best['low']:.1f}, {best['high']:.1f}]"
                          f"{ratio}")
            else:
                third += "no prediction"
            if best.get("bound_speedup") is not None:
                third += f", at most {best['bound_speedup']:.2f}x at the fastest timings"
            if best.get("unreliable"):
                third += f" (UNRELIABLE: {best.get('unreliable_why')})"
        elif cand:
            third = f"3. acceptance not measured before the A/B: {cand.get('why')}"
        else:
            real = be.get("realistic") or {}
            third = ("3. acceptance not measured yet (the A/B's screen measures it on production with no restart)"
                     + (f"; the honest band p={real['band'][0]:g}-{real['band'][-1]:g} says "
                        f"{str(real.get('verdict')).upper()}" if real.get("band") else ""))
        fourth = "4. fit: " + _fit_text(row)
        if name in out_names:
            fifth = f"5. settled without a restart: SCREENED OUT ({out_names[name]['why']})"
        elif name in busy_names:
            fifth = ("5. what settles it: the confirming A/B on the production unit (the screen's timings were "
                     "unreliable, the host was busy: it decides nothing)")
        else:
            n = int(rounds) if str(rounds or "").isdigit() else None
            fifth = ("5. what settles it: the confirming A/B on the production unit"
                     + (f" (up to {n} restarts for this candidate)" if n else ""))
        lines += [f"{name}:", "  " + first, "  " + second, "  " + third, "  " + fourth, "  " + fifth]
    return lines
