# Copyright: (c) 2026, llmfleet.specdec contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# Private to the collection, controller only: the A/B result document (versioned JSON), its Markdown report and its history line.
"""Pure rendering of a judged A/B run: no I/O, no plotting.

:func:`build_document` makes the versioned JSON document (``llmfleet.specdec/ab-report/1``) that holds
the configs, the environment, every raw request and every verdict; :func:`markdown` renders it as a
report; :func:`history_line` is the one-line summary appended to the host's ``history.jsonl``;
:func:`summary_lines` is the per-shape verdict table as plain lines for playbook output.
"""
from __future__ import annotations

import hashlib
import json
import re
from typing import Any, Mapping

from ansible_collections.llmfleet.specdec.plugins.module_utils.bench import _quality, _traffic
from ansible_collections.llmfleet.specdec.plugins.module_utils.common._errors import SpecdecError
from ansible_collections.llmfleet.specdec.plugins.module_utils.common._stats import ReportInputError
from ansible_collections.llmfleet.specdec.plugins.module_utils.state._host_state import safe_path_component
from ansible_collections.llmfleet.specdec.plugins.plugin_utils.verdicts import _judge

SCHEMA = "llmfleet.specdec/ab-report/1"
HISTORY_SCHEMA = "llmfleet.specdec/ab-history/1"
# \Z, not $: "$" also matches before a trailing newline, which would let "host\n" through.


def safe_name(value: Any, what: str) -> str:
    """A host name or run id usable as one path component (no separators, no '..', no control characters).

    The one check for every path built from a host name or run id (the report, spec_ab's run folder and
    partial results, promote.yml, report_partial.yml through the ``safe_name`` filter), applied before
    anything is written. The rule itself is :func:`_host_state.safe_path_component`, the one the host's own
    state directory uses, so a name is good on both sides or on neither."""
    try:
        return safe_path_component(value, what)
    except SpecdecError as exc:
        raise ReportInputError(str(exc)) from None


def run_id_for(run: Mapping[str, Any]) -> str:
    """The run's id: the one given, else its start time (compact UTC) plus a digest of the entries.

    Derived from the content, never from the clock, so rebuilding the report of the same run gives the
    same folder and the same bytes.
    """
    given = run.get("run_id")
    if given:
        return safe_name(given, "run.run_id")
    digest = hashlib.sha256(json.dumps(run.get("entries"), sort_keys=True, default=str).encode()).hexdigest()[:10]
    started = re.sub(r"[^0-9TZ]", "", str(run.get("started") or ""))
    return f"{started}-{digest}" if started else f"run-{digest}"


def build_document(run: Any, judged: Mapping[str, Any], environment: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The versioned result document: configs, environment, every raw request and every verdict."""
    checked = _judge.check_run(run)
    host = safe_name(checked.get("host"), "run.host")
    verdicts = []
    for name in judged["order"]:
        j = judged["configs"][name]
        for shape in judged["shapes"]:
            r = j["shapes"][shape]
            verdicts.append({"config": name, "shape": shape, "status": j["status"], "verdict": r["verdict"],
                             "ci_verdict": r["ci_verdict"], "n": r.get("n"), "median_tok_s": r["median_tok_s"],
                             "speedup": r["speedup"], "ci_low": r["ci_low"], "ci_high": r["ci_high"],
                             "noise": r.get("noise"), "mde": r.get("mde"), "exploratory": True,
                             "e2e": r.get("e2e"), "ttft": r.get("ttft"),
                             "lossless": r["lossless"], "engaged": r["engaged"]})
    env = dict(checked.get("environment") or {})
    env.update(environment or {})
    return {
        "schema": SCHEMA,
        "run_id": run_id_for(checked),
        "host": host,
        "started": checked.get("started"),
        "finished": checked.get("finished"),
        "baseline": judged["baseline"],
        "mix": judged["mix"],
        "run_error": checked.get("error"),
        "configs": checked["configs"],
        "environment": env,
        "entries": checked["entries"],
        "judged": dict(judged),
        "verdicts": verdicts,
        "confirmatory": confirmatory_section(judged),
        "recommendation": judged["recommendation"],
    }


def confirmatory_section(judged: Mapping[str, Any]) -> dict[str, Any]:
    """report.json's ``confirmatory`` object (contract C3): the run's one endpoint, its weights and method, every
    candidate's verdict with its interval, noise and smallest findable effect, and the recommendation."""
    conf = judged.get("confirmatory") or {}
    keys = ("verdict", "ratio", "low", "high", "mde", "noise")
    extra = ("rounds", "look", "stopped", "why", "df", "status", "practical", "wide", "load")
    return {
        "endpoint": conf.get("endpoint"), "weights": conf.get("weights") or {}, "method": conf.get("method"),
        "alpha": conf.get("alpha"),
        "verdicts": {n: {**{k: v.get(k) for k in keys}, **{k: v[k] for k in extra if k in v}}
                     for n, v in (conf.get("verdicts") or {}).items()},
        "recommendation": conf.get("recommendation"), "recommendation_why": conf.get("recommendation_why"),
        "weights_from": conf.get("weights_from"), "margin": conf.get("margin"), "win_margin": conf.get("win_margin"),
        "min_speedup": conf.get("min_speedup"), "max_rounds": conf.get("max_rounds"),
        "sequential": conf.get("sequential"), "chosen_by": conf.get("chosen_by"), "looks": conf.get("looks") or [],
        "restarts": conf.get("restarts"),
        "why": conf.get("why"), "spread": conf.get("spread") or {}, "spread_warning": conf.get("spread_warning"),
        "declared": conf.get("declared"), "sizes": conf.get("sizes"), "headline": conf.get("headline"),
        "smoke": bool(conf.get("smoke")),
        **({"streams": conf.get("streams"), "load_rule": conf["load_rule"]} if conf.get("load_rule") else {}),
    }


def to_json(document: Mapping[str, Any]) -> str:
    """The document as stable, indented JSON text (sorted keys, so equal runs give equal bytes)."""
    return json.dumps(document, indent=2, sort_keys=True, default=str) + "\n"


# ---------------------------------------------------------------------------------------------
# formatting


def _num(value: Any, fmt: str = "{:.2f}") -> str:
    return "-" if value is None else fmt.format(value)


def _pct(value: Any) -> str:
    return "-" if value is None else f"{100.0 * value:.1f} %"


def _ci(value: Any, low: Any, high: Any, fmt: str = "{:.2f}", suffix: str = "") -> str:
    if value is None:
        return "-"
    text = fmt.format(value) + suffix
    if low is not None and high is not None:
        text += f" [{fmt.format(low)}, {fmt.format(high)}]"
    return text


TOO_WIDE = "interval too wide to mean anything"


def _conf_ci(v: Mapping[str, Any]) -> str:
    """A confirmatory row's speedup and interval; an interval too wide to mean anything is said so, not printed."""
    if v.get("ratio") is None:
        return "-"
    if v.get("wide"):
        return f"{v['ratio']:.2f}x [{TOO_WIDE}]"
    return _ci(v["ratio"], v.get("low"), v.get("high"), "{:.2f}", "x")


def _lossless(value: Any, row: Mapping[str, Any] | None = None) -> str:
    if value is True:
        vac = row.get("texts_vacuous") if row else 0
        return "yes" + (f" ({vac} vacuous)" if vac else "")
    if value is False:
        return "**NO**"
    if value is None:
        return "-"
    return str(value)


def _engaged(value: Any) -> str:
    return {True: "yes", False: "no", None: "-"}[value]


def _cell(text: Any) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _code(text: str) -> str:
    """A Markdown code span that survives backticks and newlines in the text."""
    text = json.dumps(text, ensure_ascii=False)[1:-1]
    ticks = "`" * (max((len(m) for m in re.findall(r"`+", text)), default=0) + 1)
    return f"{ticks} {text} {ticks}"


def _table(header: list[str], rows: list[list[Any]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(" --- " for _dummy in header) + "|"]
    lines += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]
    return lines


# ---------------------------------------------------------------------------------------------
# the Markdown report


def markdown(document: Mapping[str, Any], images: list[str] | None = None) -> str:
    """The report: verdicts, status, one table per shape, acceptance by position, prediction, recommendation.

    ``images``: PNG file names written beside the report, linked in a Plots section.
    """
    j = document["judged"]
    out: list[str] = [f"# Speculative-decoding A/B: {document['host']}, run {document['run_id']}", ""]
    out.append(f"Baseline **{j['baseline']}**; {len(j['order'])} configs; rounds {len(j['rounds'])}; "
               f"shapes {', '.join(j['shapes']) or 'none'}; started {document.get('started') or '-'}, "
               f"finished {document.get('finished') or '-'}.")
    if document.get("run_error"):
        out += ["", f"> **The run stopped early:** {document['run_error']}. The results below are partial."]
    _section(out, "Confirmatory verdict", _confirmatory(j))
    screen = _screen_lines(document.get("environment") or {})
    if screen:
        _section(out, "The screen before the rounds (no production restart)", screen)
    _section(out, "Verdicts per shape (exploratory)", _overview(j))
    _section(out, "Status", _status_section(j))
    box = _box_lines(document.get("environment") or {})
    if box:
        _section(out, "Time and live traffic", box)
    for shape in j["shapes"]:
        _section(out, f"Shape: {shape}", _shape_table(j, shape))
    judging = _quality.markdown_lines(j)
    if judging:
        _section(out, "Lossless or lossy by design", judging)
    if j.get("load"):
        _section(out, "Under concurrent load", _load_tables(j))
    ngram = _traffic.ngram_rows(document.get("entries") or [], j["baseline"])
    if ngram:
        _section(out, "Can n-gram drafting help? (prompts against their answers)", _ngram_table(ngram))
    _section(out, "Acceptance by draft position", _positions(j))
    _section(out, "Prediction against measurement", _prediction(j))
    _section(out, "Recommendation", _recommendation(j))
    if images:
        _section(out, "Plots", [f"![{name.rsplit('.', 1)[0].replace('_', ' ')}]({name})" for name in images])
    _section(out, "Method", _method(j))
    _section(out, "Configs", _configs(document))
    out += ["", "## Environment", "", "```json",
            json.dumps(document.get("environment") or {}, indent=2, sort_keys=True, default=str), "```", ""]
    return "\n".join(out)


def _screen_lines(env: Mapping[str, Any]) -> list[str]:
    """What spec_screen predicted from production alone, which candidates it kept out of the rounds (SCREENED OUT,
    never a verdict) and the restarts that saved."""
    decision = env.get("screen") if isinstance(env.get("screen"), Mapping) else None
    if not decision:
        return []
    rate = float(decision.get("production_tok_s") or 0.0)
    judged = decision.get("traffic") if isinstance(decision.get("traffic"), Mapping) else {}
    said = (f"Production ran at {rate:.1f} tok/s ({decision.get('metric', 'decode')}) on the screen's requests; "
            f"{judged['line']}." if judged.get("line") else
            f"Production decoded {rate:.1f} tok/s on the screen's requests (the built-in shapes, decode).")
    lines = [f"{said} Predicted from production's own tokens "
             "(each candidate's drafting replayed against them) and its measured step costs:", "",
             "| config | screen | K | mean accepted length | predicted speedup [95 % interval] | why |",
             "| --- | --- | --- | --- | --- | --- |"]
    found = (decision.get("screen") or {}).get("candidates") or {}
    for row in decision.get("screened_out") or []:
        lines.append(f"| {row['name']} | **SCREENED OUT** | {row['k']} | {row['mean_accepted_len']:.2f} | "
                     f"{row['speedup']:.2f}x [{row['low'] / rate:.2f}, {row['speedup_high']:.2f}] | {row['why']} |")
    busy = {r.get("name"): r for r in decision.get("unreliable") or [] if isinstance(r, Mapping)}
    for name in decision.get("keep") or []:
        row = found.get(name)
        if row and row.get("screenable") and row.get("k") and rate > 0:
            best = row["k"][str(row["best_k"])]
            bound = (f" (at most {best['bound_speedup']:.2f}x at the fastest timings)"
                     if isinstance(best.get("bound_speedup"), (int, float)) else "")
            why = (f"UNRELIABLE, the host was busy ({busy[name].get('why')}): the rounds measure it" if name in busy
                   else f"can reach the planned speedup{bound}: the rounds confirm it")
            lines.append(f"| {name} | measured | {row['best_k']} | {best['mean_accepted_len']:.2f} | "
                         f"{best['predicted_tok_s'] / rate:.2f}x [{best['low'] / rate:.2f}, {best['high'] / rate:.2f}]"
                         f" | {why} |")
    for row in decision.get("unscreened") or []:
        lines.append(f"| {row['name']} | not screened | - | - | - | {row['why']} |")
    lines += ["", f"Production restarts saved: {decision.get('restarts_saved', 0)}. A screened-out config has no verdict: "
              "the screen only chooses which candidates the rounds measure."]
    first = [str(line) for line in decision.get("first") or []]
    if first:
        lines += ["", "Per candidate, before any restart (does the target already speculate, the break-even acceptance "
                  "against the incumbent, the acceptance measured on production and the predicted rate, the fit, what "
                  "settles it):", "", "```text", *first, "```"]
    return lines


def _box_lines(env: Mapping[str, Any]) -> list[str]:
    """The run's time plan against what the starts took, and the requests measured beside other clients'."""
    lines: list[str] = []
    timing = env.get("timing") if isinstance(env.get("timing"), Mapping) else {}
    if timing:
        lines.append(f"- Planned: {timing.get('restarts')} restarts, about {float(timing.get('total_s') or 0) / 60:.1f} "
                     f"min, candidates serving about {float(timing.get('candidate_s') or 0) / 60:.1f} min; health "
                     f"timeout {timing.get('health_timeout')} s ({timing.get('health_timeout_source')}).")
        for name, row in (timing.get("configs") or {}).items():
            seen = row.get("starts_seen_s") or []
            lines.append(f"- {name}: planned load {row.get('load_s')} s ({row.get('load_source')}), measuring "
                         f"{row.get('measure_s')} s; starts seen: {', '.join(f'{s:g} s' for s in seen) or 'none'}")
    live = env.get("live_traffic") if isinstance(env.get("live_traffic"), Mapping) else {}
    total = live.get("total") if isinstance(live.get("total"), Mapping) else {}
    if live:
        lines.append(f"- Live traffic: {'drained' if live.get('drained') else 'not drained'}; "
                     f"{total.get('contaminated', 0)} of {total.get('checked', 0)} measured requests ran beside other "
                     f"clients' requests ({total.get('repeated', 0)} sent again, {total.get('excluded', 0)} excluded)"
                     + (f"; not checkable on: {', '.join(live['unchecked'])}" if live.get("unchecked") else "") + ".")
        for name, row in (live.get("configs") or {}).items():
            if row.get("contaminated"):
                lines.append(f"  - {name}: {row['contaminated']} contaminated, {row.get('excluded', 0)} excluded")
    return lines


def _section(out: list[str], title: str, lines: list[str]) -> None:
    out.extend(["", f"## {title}", ""])
    out.extend(lines)


def _overview(j: Mapping[str, Any]) -> list[str]:
    header = ["config", "status", "lossless", "engaged", *j["shapes"]]
    rows = []
    for name in j["order"]:
        c = j["configs"][name]
        cells = [name, c["status"], _lossless(c["lossless"]), _engaged(c["engaged"])]
        for s in j["shapes"]:
            r = c["shapes"][s]
            text = r["verdict"] if r["speedup"] is None else f"{r['verdict']} {r['speedup']:.2f}x"
            cells.append(f"{text} (n {r['n']})" if r.get("n") and name != j["baseline"] else text)
        rows.append(cells)
    return [*_table(header, rows), "", "Decode speedups per shape, exploratory (the confirmatory verdict is above). "
            "n = rounds x requests per side per round (the fewest in any round); each round is one server start "
            "per config."]


def _load_cell(load: Mapping[str, Any] | None) -> str:
    """A candidate's aggregate under load against the baseline's: ratio [interval] and the non-inferiority call."""
    if not load:
        return "-"
    if load.get("low") is None:
        return f"{load.get('verdict', '-')} ({load.get('why') or 'no interval'})"
    return f"{load['ratio']:.2f}x [{load['low']:.2f}, {load['high']:.2f}] {load['verdict']}"


def _confirmatory(j: Mapping[str, Any]) -> list[str]:
    conf = j.get("confirmatory") or {}
    if not conf:
        return ["No confirmatory analysis in this run."]
    endpoint = {"e2e": "end-to-end tokens/s (the whole request: prompt processing, the draft's prefill, decode)",
                "decode": "decode tokens/s (the server's decode timing)"}.get(conf["endpoint"], conf["endpoint"])
    weights = ", ".join(f"{s} {w:.0%}" for s, w in conf["weights"].items()) or "none"
    out = [f"One endpoint decides: **{endpoint}** over {conf['weights_from']} ({weights}), against the baseline "
           f"{j['baseline']}. Family-wise false-WIN rate at most {conf['alpha']:g} across the run's candidates"
           + (f" and its looks (a look after every round from 2 to {conf['max_rounds']})" if conf["sequential"]
              else f" (one look after {conf.get('rounds_measured', '?')} rounds)")
           + f"; EQUIVALENT means the whole interval lies within 1 +- {conf['margin']:g}"
           + (f"; a WIN is recommended only with its lower bound above 1 + {conf['win_margin']:g} (spec_ab_win_margin)"
              if conf.get("win_margin") is not None else "") + "."]
    if conf.get("chosen_by"):
        out += ["", f"The design: {conf['chosen_by']}."]
    if conf.get("declared") is False:
        out += ["", f"**Not your traffic**: {conf['headline']}. promote.yml refuses a winner of this run unless "
                    "specdec_promote_force=true (recorded)."]
    if conf.get("why"):
        return [*out, "", f"**No confirmatory verdict**: {conf['why']}."]
    if conf.get("smoke"):
        out += ["", "**Smoke run, no verdict**: this run (spec_ab_smoke) measured and reports every config's speed; "
                    "no candidate is judged, recommended or promoted."]
    rows = []
    loaded = bool(conf.get("load_rule"))
    if loaded:
        out += ["", f"At the operator's concurrency: {conf['load_rule']}."]
    for name, v in conf["verdicts"].items():
        rows.append([name, v.get("status", "-"), f"**{v['verdict']}**",
                     _conf_ci(v), *([_load_cell(v.get("load"))] if loaded else []),
                     _pct(v["noise"]), _num(v["mde"], "{:.2f}x"), v.get("rounds", "-"),
                     {"win": "WIN", "loss": "LOSS", "futile": "futile"}.get(v.get("stopped") or "", "-")
                     + (f" after round {v['look']}" if v.get("stopped") else ""), v.get("why") or ""])
    out += ["", *_table(["config", "status", "verdict", "speedup [simultaneous interval]",
                         *([f"aggregate at {conf.get('streams') or 'N'} streams [one-sided]"] if loaded else []),
                         "noise", "smallest findable (estimate)", "rounds", "stopped", "note"], rows)]
    planned = conf.get("min_speedup")
    optimistic = [n for n, v in conf["verdicts"].items() if v["verdict"] == "INCONCLUSIVE" and planned
                  and v.get("mde") is not None and v["mde"] < planned]
    if optimistic:
        out += ["", f"**Warning**: {', '.join(optimistic)} INCONCLUSIVE with a smallest findable effect below the "
                    f"planned {planned:g}x. That figure is an estimate from this run's own noise, which reads low "
                    f"after a miss: it does not show that a {planned:g}x would have been found, nor that there is "
                    "none."]
    if conf.get("spread"):
        out += ["", "Each config's own spread between starts: "
                + ", ".join(f"{n} {_pct(v)}" for n, v in conf["spread"].items()) + "."]
    if conf.get("spread_warning"):
        out += ["", f"**Warning**: {conf['spread_warning']}."]
    pick = conf.get("recommendation")
    pv = conf["verdicts"].get(pick) or {} if pick else {}
    out += ["", f"**Recommendation: {pick}** ({_conf_ci(pv)} on one stream"
                + (f"; {_load_cell(pv.get('load'))} aggregate at {conf.get('streams') or 'N'} streams"
                   if pv.get("load") else "") + ")" if pick else
            f"**No recommendation**: {conf['recommendation_why']}." if conf.get("recommendation_why") else
            "**Recommendation: keep the baseline** (no eligible config has a WIN above the practical margin on this "
            "endpoint)."]
    r = conf.get("restarts") or {}
    if r.get("fixed_design") is not None and r.get("power_recommend") is not None:
        out += ["", f"Server starts: {r['used']} used. This design's own power at {r['effect']:g}x at this run's "
                    f"noise, by the error and degrees of freedom its verdicts use (its last look alone): a WIN "
                    f"{r['power']:.0%}, recommended (lower bound above 1 + {r['win_margin']:g}) "
                    f"{r['power_recommend']:.0%}; a fixed design with the same power to be recommended needs "
                    f"{r['fixed_rounds']} rounds, {r['fixed_design']} starts "
                    f"({'saved ' + str(r['saved']) if r['saved'] >= 0 else 'used ' + str(-r['saved']) + ' more'})."]
    elif r.get("fixed_design") is not None:  # a report written before the power to be recommended
        out += ["", f"Server starts: {r['used']} used; a fixed design with this design's own power at "
                    f"{r['effect']:g}x at this run's noise ({r['power']:.0%}, its last look alone) needs "
                    f"{r['fixed_rounds']} rounds, {r['fixed_design']} starts "
                    f"({'saved ' + str(r['saved']) if r['saved'] >= 0 else 'used ' + str(-r['saved']) + ' more'})."]
    elif r:
        out += ["", f"Server starts: {r['used']} used ({r.get('why', '')})."]
    levels = sorted({round(v["level"], 4) for v in conf["verdicts"].values() if v.get("level") is not None})
    out += ["", "noise: the pooled spread of one config's round value between server starts; smallest findable: "
                "an estimate, from this run's own noise, of the speedup it would have called a WIN with 80 % power; "
                "each interval is simultaneous at 1 - 2 x the alpha its look spent"
                + (f" ({', '.join(f'{x:.1%}' for x in levels)})" if levels else "") + "."]
    return out


def _status_section(j: Mapping[str, Any]) -> list[str]:
    out: list[str] = []
    for name in j["order"]:
        c = j["configs"][name]
        gate = c.get("load_gate") or {}
        if c["status"] in (_judge.INVALID, _judge.FAILED) and gate.get("problem") and c["problems"][:1] == [gate["problem"]]:
            out.append(f"- **{name}: {c['status']} under load**, never a winner: {gate['problem']}.")
            rest = c["problems"][1:]
        elif c["status"] == _judge.INVALID:
            d = c["first_divergence"]
            out.append(f"- **{name}: INVALID**, a correctness bug, never a winner: its text differs from the "
                       f"baseline's on {d['shape']} prompt {d['prompt_index']} (round {d['round']}, repeat "
                       f"{d['repeat']}) at character {d['position']}:")
            out.append(f"  - baseline:  {_code(d['baseline'])}")
            out.append(f"  - candidate: {_code(d['candidate'])}")
            out.append(f"  - (context from character {d['context_start']}; lengths {d['baseline_len']} and "
                       f"{d['candidate_len']})")
            rest = c["problems"][1:]
        elif c["status"] == _judge.NOT_ENGAGED:
            out.append(f"- **{name}: NOT ENGAGED**: {c['problems'][0]}.")
            rest = c["problems"][1:]
        elif c["status"] in (_judge.FAILED, _judge.INCOMPLETE):
            note = "no measurement at all" if c["status"] == _judge.FAILED else "partial: never a winner"
            out.append(f"- **{name}: {c['status']}** ({note}).")
            rest = c["problems"]
        elif c["status"] == _judge.DRAFTER_PROBE:
            out.append(f"- {name}: DRAFTER PROBE: serves the draft model of {', '.join(c['probe_for'])} alone; "
                       f"its rate gives the drafter's step d_s for the prediction (never compared or recommended).")
            rest = c["problems"]
        elif c["status"] == _judge.NEGATIVE_CONTROL:
            out.append(f"- {name}: NEGATIVE CONTROL (no chain, no drafts): it should show no difference "
                       f"from the baseline.")
            rest = c["problems"]
        else:
            rest = c["problems"]
            if rest:
                out.append(f"- {name}: {c['status']}.")
        out += [f"  - {p}" for p in rest]
        if c.get("notes"):
            out.append(f"- {name}: notes from its bench:")
            out += [f"  - {n}" for n in c["notes"]]
    for w in j["warnings"]:
        out.append(f"- warning: {w}")
    if not out:
        out.append("- every config measured completely, lossless against the baseline, and drafting where it should.")
    return out


def _shape_table(j: Mapping[str, Any], shape: str) -> list[str]:
    header = ["config", "status", "decode tok/s [95 % CI]", "median tok/s", "decode speedup", "verdict", "noise",
              "smallest findable", "e2e tok/s", "e2e speedup", "e2e verdict", "TTFT ms", "TTFT speedup",
              "acceptance", "mean accepted len", "n", "lossless", "engaged", "requests"]
    rows = []
    for name in j["order"]:
        c = j["configs"][name]
        r = c["shapes"][shape]
        rate = r.get("tok_s", r["median_tok_s"])
        e2e, ttft = r.get("e2e") or {}, r.get("ttft") or {}
        rows.append([name, c["status"], _ci(rate, r["tok_s_ci_low"], r["tok_s_ci_high"], "{:.1f}"),
                     _num(r["median_tok_s"], "{:.1f}"),
                     _ci(r["speedup"], r["ci_low"], r["ci_high"], "{:.2f}", "x") if r["speedup"] is not None else "-",
                     r["verdict"], _pct(r.get("noise")), _num(r.get("mde"), "{:.2f}x"),
                     _num(e2e.get("value"), "{:.1f}"),
                     _ci(e2e.get("speedup"), e2e.get("ci_low"), e2e.get("ci_high"), "{:.2f}", "x"),
                     e2e.get("verdict") or "-", _num(ttft.get("value"), "{:.0f}"),
                     _ci(ttft.get("speedup"), ttft.get("ci_low"), ttft.get("ci_high"), "{:.2f}", "x"),
                     _pct(r["acceptance"]), _num(r["mean_accepted_len"]), r.get("n") or "-",
                     _lossless(r["lossless"], r), _engaged(r["engaged"]), r["n_requests"]])
    return [*_table(header, rows), "", "Exploratory: one look at this shape, Dunnett's interval across the run's "
            "candidates. TTFT speedup is the baseline's time to first token over the config's (above 1: sooner)."]


def _load_tables(j: Mapping[str, Any]) -> list[str]:
    """Aggregate and per-stream rates under load beside the single-stream rate, per shape; the gate per config."""
    load = j["load"]
    out = ["Every shape sent again as bursts of N requests at once (N: the production unit's slot count). "
           "Aggregate: all streams' tokens over the burst's wall time; per stream: each reply's decode rate. "
           "Speedups are against the baseline under the same load.", ""]
    out.extend(_table(["config", "load gate", "streams", "rounds"],
                      [[n, (j["configs"][n].get("load_gate") or {}).get("status", "-"),
                        (j["configs"][n].get("load_gate") or {}).get("concurrency") or "-",
                        ", ".join(f"{r['round']}: {r['status']} ({r['streams_checked']} checked)"
                                  for r in (j["configs"][n].get("load_gate") or {}).get("rounds", [])) or "-"]
                       for n in j["order"]]))
    for shape in j["shapes"]:
        rows = []
        for n in j["order"]:
            r = (load.get(n) or {}).get(shape)
            if not r:
                continue
            a, st = r["aggregate"], r["stream"]
            rows.append([n, _num(r["single_stream_tok_s"], "{:.1f}"),
                         _ci(a["tok_s"], a["tok_s_ci_low"], a["tok_s_ci_high"], "{:.1f}"),
                         _ci(a["speedup"], a["ci_low"], a["ci_high"], "{:.2f}", "x"), a["verdict"] or "-",
                         _ci(st["tok_s"], st["tok_s_ci_low"], st["tok_s_ci_high"], "{:.1f}"),
                         _ci(st["speedup"], st["ci_low"], st["ci_high"], "{:.2f}", "x"), st["verdict"] or "-",
                         f"{a['n']} / {st['n']}"])
        if rows:
            out += ["", f"**{shape}**", ""]
            out.extend(_table(["config", "tok/s alone", "aggregate tok/s [95 % CI]", "aggregate speedup",
                               "verdict", "per-stream tok/s [95 % CI]", "per-stream speedup", "verdict",
                               "n bursts / streams"], rows))
    return out


def _ngram_table(rows: list[Mapping[str, Any]]) -> list[str]:
    threshold = rows[0]["ngram_threshold_chars"]
    return [f"From the baseline's answers: the longest stretch an answer shares with its prompt (what prompt-lookup "
            f"drafters copy) and repeats inside itself (what ngram-mod and ngram-cache copy); {threshold} characters "
            f"or more means an n-gram drafter has spans to propose.", "",
            *_table(["shape", "source", "answers", "prompt/answer overlap (chars)", "repeated in answer (chars)",
                     "n-gram can help"],
                    [[r["shape"], r["source"], r["answers_checked"], _num(r["prompt_output_overlap_chars"], "{}"),
                      _num(r["output_repeated_chars"], "{}"),
                      {True: "yes", False: "no", None: "-"}[r["ngram_can_help"]]] for r in rows])]


def _positions(j: Mapping[str, Any]) -> list[str]:
    rows = [(n, j["configs"][n]) for n in j["order"] if j["configs"][n]["acceptance_by_position"]]
    if not rows:
        return ["No per-position counters (llama-server's /metrics deltas) in this run."]

    def shown(c: Mapping[str, Any]) -> int:
        drafted = c.get("positions_drafted")
        return len(c["acceptance_by_position"]) if drafted is None else drafted

    width = max(shown(c) for _dummy, c in rows)
    header = ["config", *(f"pos {i + 1}" for i in range(width)), "source"]
    body = []
    hidden = []
    for n, c in rows:
        cells = [_pct(v) for v in c["acceptance_by_position"][:shown(c)]]
        body.append([n, *cells, *["-"] * (width - len(cells)), c["acceptance_by_position_source"]])
        if len(c["acceptance_by_position"]) > shown(c):
            hidden.append(f"{n}: positions {shown(c) + 1}-{len(c['acceptance_by_position'])}")
    out = ["Share of drafting rounds whose token at each draft position was accepted "
           "(accepted_per_pos / drafts), for the positions that were drafted: up to the config's depth K or "
           "the deepest position ever accepted.", "", *_table(header, body)]
    if hidden:
        out += ["", f"Never drafted, so not shown (every position is in the JSON): {'; '.join(hidden)}."]
    return out


def _prediction(j: Mapping[str, Any]) -> list[str]:
    rows = j["prediction"]
    if not rows:
        return ["No speculative config with measurements on both sides: nothing to predict."]
    header = ["config", "shape", "K", "p", "t_s ms", "d_s ms", "verify (target steps)", "predicted tok/s",
              "measured tok/s", "measured / predicted", "predicted speedup", "measured speedup [95 % CI]"]
    body = []
    for p in rows:
        d_s = _num(p["d_s_ms"]) if p["d_s_ms"] is not None else f"implied {_num(p['implied_d_s_ms'])}"
        body.append([p["config"], p["shape"], p["k"], _num(p["p"], "{:.3f}"), _num(p["t_s_ms"]), d_s,
                     _num(p.get("verify_steps")),
                     _num(p["predicted_tok_s"], "{:.1f}"), _num(p["measured_tok_s"], "{:.1f}"),
                     _num(p["measured_tok_s"] / p["predicted_tok_s"] if p["predicted_tok_s"] else None),
                     _num(p["predicted_speedup"], "{:.2f}x"),
                     _ci(p["measured_speedup"], p["ci_low"], p["ci_high"], "{:.2f}", "x")])
    notes = sorted({f"{p['config']}: K = {p['k']} ({p['k_source']})" for p in rows})
    notes += sorted({f"{p['config']} on {p['shape']}: t_s {_num(p['t_s_ms'])} ms, {p['t_s_source']}; d_s "
                     + (f"{_num(p['d_s_ms'])} ms, {p['d_s_source']}" if p.get("d_s_ms") is not None
                        else p.get("d_s_source", "not given"))
                     for p in rows if p.get("t_s_source")})
    notes += sorted({f"{p['config']}: verification {p['verify_source']}" for p in rows if p.get("verify_source")})
    notes += sorted({f"{p['config']} on {p['shape']}: drafter {p['draft_source']}" for p in rows
                     if p.get("draft_source")})
    notes += sorted({f"{p['config']} on {p['shape']}: {p['note']}" for p in rows if p.get("note")})
    return (["The break-even arithmetic (round_time = drafter steps * d_s + verify steps * t_s, A = (1 - p^(K+1)) "
             "/ (1 - p)) fed with the measured acceptance and the baseline's step t_s = 1000 / (baseline tok/s / its "
             "tokens per pass). Verification is measured within the baseline's own start (a batch of K + 1 tokens "
             "on a cached prefix, over a batch of 1); the drafter's step d_s and its prefill of the accepted tokens "
             "on a drafter probe (a config serving the draft model alone), else d_s from inventory; without either "
             "the table shows the d_s that the measured rate implies. Where each input came from is listed below "
             "the table.", ""]
            + _table(header, body) + [""] + [f"- {n}" for n in notes])


def _recommendation(j: Mapping[str, Any]) -> list[str]:
    rec = j["recommendation"]
    if not rec:
        return ["No recommendation in this run."]
    mix = ", ".join(f"{s} {w:.0%}" for s, w in rec["mix"].items())
    out = [f"On the confirmatory endpoint ({rec.get('endpoint', '-')}): traffic mix {mix or 'none'} "
           f"({rec.get('weights_from', rec['weights_are'])}; combined {rec['combination'].split(':')[0]})."]
    if rec["config"] is None:
        return [*out, "", f"**No recommendation**: {rec['reason']}."]
    if rec["keep_baseline"]:
        out += ["", f"**Keep the baseline ({rec['config']})**: {rec['reason']}."]
    else:
        out += ["", f"**Recommended: {rec['config']}**, {rec['speedup']:.2f}x the baseline "
                    f"[{rec['ci_low']:.2f}, {rec['ci_high']:.2f}] (the estimate of the best of several candidates "
                    f"runs high: expect a little less in production)."]
    if rec["candidates"]:
        out.append("")
        out.extend(_table(["config", "speedup [simultaneous interval]", "verdict", "noise", "smallest findable", "n"],
                          [[c["config"], _conf_ci({"ratio": c["speedup"], "low": c["ci_low"], "high": c["ci_high"],
                                                   "wide": c.get("wide")}), c["verdict"],
                            _pct(c.get("noise")), _num(c.get("mde"), "{:.2f}x"), c.get("n") or "-"]
                           for c in rec["candidates"]]))
    if rec["excluded"]:
        out.append("")
        out.extend(f"- not a candidate: {e['config']} ({e['status']}): {e['reason']}" for e in rec["excluded"])
    return out


def _method(j: Mapping[str, Any]) -> list[str]:
    b = j["bootstrap"]
    st = j.get("statistics") or {"method": "request-bootstrap"}
    if st["method"] == "rounds":
        margin = st["margin"]
        conf = j.get("confirmatory") or {}
        intervals = [
            f"- Confirmatory verdict: {conf.get('method', '-')}. WIN when the whole simultaneous interval lies above "
            f"1, LOSS when below, EQUIVALENT when within 1 +- {margin:g}, otherwise INCONCLUSIVE "
            f"(docs/statistics.md).",
            f"- Per-shape speedups: {st['scheme']}. Fewer than {st['min_rounds']} rounds, or fewer than "
            f"{st['min_requests_per_round']} requests per side in a round, gives INCONCLUSIVE.",
            "- Decode rate: each request's predicted_per_second (llama-server's timings); tok/s is the geometric "
            "mean over rounds of each round's geometric mean, with its t-interval over rounds; the median over "
            "requests is shown beside it."]
    else:
        intervals = [
            f"- Speedup intervals: {b['scheme']}; {b['n']} resamples, seed {b['seed']}, "
            f"{100 * (1 - b['alpha']):.0f} % interval. Verdict: win when the whole interval lies above 1, loss when "
            f"below, otherwise no difference; fewer than {b['min_requests']} requests on a side gives none.",
            "- Decode rate: each request's predicted_per_second (llama-server's timings); median over requests and "
            "rounds."]
    return [
        *intervals,
        "- Acceptance: sum(draft_n_accepted) / sum(draft_n) over the shape's requests (a request whose reply "
        "carries no draft counters, as vLLM's, counts its /metrics delta instead).",
        f"- Mean accepted length: {j['method']['mean_accepted_len']}.",
        f"- Prediction: {j['method']['p']}.",
        f"- Traffic mix: {j['method']['mix']}.",
        "- Losslessness: at temperature 0 each text must equal the baseline's first non-empty text for the same "
        "shape and prompt (a speculative config layered on a knob that changes the numbers: its reference's, "
        "see \"Lossless or lossy by design\"); an empty answer on either side makes that comparison vacuous.",
    ]


def _configs(document: Mapping[str, Any]) -> list[str]:
    rows = []
    for c in document["configs"]:
        env = c.get("server_config") or {}
        env_text = ", ".join(f"{k}={v}" for k, v in sorted(env.items())) if isinstance(env, Mapping) else str(env)
        chain = c.get("chain")
        rows.append([c["name"], "unknown" if chain is None else (",".join(chain) or "none"), env_text or "-"])
    return _table(["config", "effective chain", "server_config"], rows)


# ---------------------------------------------------------------------------------------------
# one-line forms


def history_record(document: Mapping[str, Any]) -> dict[str, Any]:
    """Per config per shape: speedup, interval and verdict; the status and the recommendation."""
    j = document["judged"]
    configs = {}
    for name in j["order"]:
        c = j["configs"][name]
        configs[name] = {
            "status": c["status"],
            "shapes": {s: {"median_tok_s": r["median_tok_s"], "speedup": r["speedup"], "ci_low": r["ci_low"],
                           "ci_high": r["ci_high"], "verdict": r["verdict"], "n": r.get("n")}
                       for s, r in c["shapes"].items()},
        }
    rec = document.get("recommendation")
    conf = j.get("confirmatory") or {}
    return {"schema": HISTORY_SCHEMA, "run_id": document["run_id"], "host": document["host"],
            "time": document.get("finished") or document.get("started"), "baseline": j["baseline"],
            "mix": j["mix"], "recommendation": rec["config"] if rec else None, "configs": configs,
            "confirmatory": {"endpoint": conf.get("endpoint"), "recommendation": conf.get("recommendation"),
                             "verdicts": {n: {k: v.get(k) for k in ("verdict", "ratio", "low", "high")}
                                          for n, v in (conf.get("verdicts") or {}).items()}}}


def history_line(document: Mapping[str, Any]) -> str:
    """One JSON line (no newline) for the host's history.jsonl."""
    return json.dumps(history_record(document), sort_keys=True, separators=(",", ":"), default=str)


def summary_lines(document: Mapping[str, Any]) -> list[str]:
    """The per-shape verdict table as plain lines, for playbook output and job stats."""
    j = document["judged"]
    conf = j.get("confirmatory") or {}
    lines = []
    if conf:
        weights = ", ".join(f"{s} {w:.0%}" for s, w in (conf.get("weights") or {}).items()) or "none"
        lines.append(f"confirmatory ({conf['endpoint']}, {conf['weights_from']}: {weights}) "
                     "| config | verdict | speedup [simultaneous interval] | noise | smallest findable")
        if conf.get("declared") is False:
            lines.append(f"confirmatory | warning | {conf['headline']}")
        if conf.get("smoke"):
            lines.append("confirmatory | warning | a smoke run (spec_ab_smoke): measured without a verdict, never "
                         "promoted")
        for name, v in conf["verdicts"].items():
            stopped = f" ({v['stopped']}, round {v['look']})" if v.get("stopped") else ""
            below = " (below the practical margin)" if v["verdict"] == "WIN" and v.get("practical") is False else ""
            lines.append(" | ".join(["confirmatory", name, v["verdict"] + below + stopped,
                                     _conf_ci(v), _pct(v["noise"]),
                                     _num(v["mde"], "{:.2f}x")]
                                    + ([f"under load {_load_cell(v['load'])}"] if v.get("load") else [])))
        if conf.get("spread_warning"):
            lines.append(f"confirmatory | warning | {conf['spread_warning']}")
    lines.append("shape (exploratory) | config | status | tok/s | speedup | verdict | n")
    for shape in j["shapes"]:
        for name in j["order"]:
            c = j["configs"][name]
            r = c["shapes"][shape]
            lines.append(" | ".join([shape, name, c["status"], _num(r["median_tok_s"], "{:.1f}"),
                                     _ci(r["speedup"], r["ci_low"], r["ci_high"], "{:.2f}", "x"), r["verdict"],
                                     str(r.get("n") or "-")]))
    lines += _quality.summary_lines(j)
    rec = j["recommendation"]
    if rec is None:
        lines.append("recommendation: none")
    elif rec["config"] is None:
        lines.append(f"recommendation: none ({rec['reason']})")
    else:
        lines.append(f"recommendation: {rec['config']} ({rec['reason']})")
    return lines
