# Copyright: (c) 2026, llmfleet.specdec contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# Private to the collection, controller only: the A/B report's PNG plots, drawn with matplotlib when it is installed.
"""PNG plots of an A/B result document (``llmfleet.specdec/ab-report/1``).

matplotlib is a controller dependency and is imported lazily: without it :func:`render` returns no
images and a note saying why, and the report goes on without plots. Figures are drawn on the Agg
canvas directly (no pyplot, no global backend switch), and the same document gives the same bytes.
"""
from __future__ import annotations

import io
from typing import Any, Mapping

FOREST_PNG = "verdicts_forest.png"
SHAPES_FOREST_PNG = "per_shape_forest.png"
TOK_S_PNG = "tok_s_per_shape.png"
ACCEPTANCE_PNG = "acceptance_by_position.png"
SCREEN_PNG = "screen_predicted_vs_measured.png"
# A verdict's colour, the same in every picture.
VERDICT_COLOURS = {"WIN": "#1a9641", "LOSS": "#d7191c", "EQUIVALENT": "#2c7bb6", "INCONCLUSIVE": "#e08214"}
_MARKERS = "osD^vP*Xhp<>"
# Statuses whose bars are hatched: never winners.
_NOT_WINNERS = ("INVALID", "NOT ENGAGED", "FAILED", "INCOMPLETE")


def matplotlib_missing() -> str | None:
    """Why plots cannot be drawn here, or None when matplotlib imports."""
    try:
        import matplotlib  # noqa: F401
    except ImportError as exc:
        return (f"matplotlib is not installed on the controller ({exc}): the report is written without PNG "
                f"plots; install the controller requirements (requirements.txt) to get them")
    return None


def figures(document: Mapping[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """``({file name: matplotlib Figure}, notes)``, in the order a reader should see them (the confirmatory
    verdicts first); the caller must have checked :func:`matplotlib_missing`."""
    drawn: dict[str, Any] = {}
    notes: list[str] = []
    for name, draw, missing in (
            (FOREST_PNG, verdicts_forest, "no confirmatory comparison in this run: no verdicts plot"),
            (SHAPES_FOREST_PNG, per_shape_forest, None),
            (TOK_S_PNG, tok_s_per_shape, "no decode rates in this run: no tok/s plot"),
            (ACCEPTANCE_PNG, acceptance_by_position,
             "no per-position acceptance counters (/metrics deltas) in this run: no acceptance plot"),
            (SCREEN_PNG, screen_predicted_vs_measured, None)):
        fig = draw(document)
        if fig is not None:
            drawn[name] = fig
        elif missing:
            notes.append(missing)
    return drawn, notes


def render(document: Mapping[str, Any]) -> tuple[dict[str, bytes], list[str]]:
    """``({file name: PNG bytes}, notes)``; no files and a note when matplotlib is missing."""
    missing = matplotlib_missing()
    if missing:
        return {}, [missing]
    drawn, notes = figures(document)
    return {name: _png(fig) for name, fig in drawn.items()}, notes


def _figure(width: float, height: float) -> Any:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=110)
    FigureCanvasAgg(fig)
    return fig


def _png(fig: Any) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", metadata={"Software": None})
    return buf.getvalue()


def _label(name: str, status: str) -> str:
    return name if status in ("OK", "BASELINE") else f"{name} ({status})"


def _forest_rows(verdicts: Mapping[str, Mapping[str, Any]], order: list[str]) -> list[tuple[str, Mapping[str, Any]]]:
    """The candidates with a ratio, in the run's order."""
    return [(n, verdicts[n]) for n in order if n in verdicts and verdicts[n].get("ratio")]


def forest_limits(rows: list[tuple[str, Mapping[str, Any]]], margin: float, extra: list[float]) -> tuple[float, float]:
    """The log axis's range: every interval, the equivalence band, 1 and ``extra`` (the smallest findable
    effects, the planned speedup), with a margin either side."""
    values = [1.0, 1.0 + margin, 1.0 / (1.0 + margin), *extra]
    for _name, r in rows:
        values += [v for v in (r.get("ratio"), r.get("low"), r.get("high")) if v]
    lo, hi = min(v for v in values if v > 0), max(values)
    return lo / 1.15, hi * 1.15


def _forest(ax: Any, rows: list[tuple[str, Mapping[str, Any]]], margin: float, min_speedup: float | None,
            status_of: Mapping[str, str], mde: bool = True) -> tuple[float, float]:
    """One forest on ``ax``: a row per candidate, its ratio and simultaneous interval on a log axis, coloured by
    its verdict; the line at 1, the equivalence band, the planned speedup, each row's smallest findable effect."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    band = (1.0 / (1.0 + margin), 1.0 + margin)
    mdes = [r["mde"] for _n, r in rows if mde and r.get("mde")]
    limits = forest_limits(rows, margin, [*mdes, *([min_speedup] if min_speedup else [])])
    ax.axvspan(*band, color="lightgray", alpha=0.6, zorder=0, label=f"equivalence band (1 +- {margin:.0%})")
    ax.axvline(1.0, color="black", linewidth=1.0, zorder=1)
    if min_speedup:
        ax.axvline(min_speedup, color="dimgray", linewidth=0.8, linestyle=":", zorder=1,
                   label=f"planned speedup {min_speedup:.2f}x")
    for y, (_name, r) in enumerate(reversed(rows)):
        colour = VERDICT_COLOURS.get(r.get("verdict") or "", "gray")
        if r.get("low") and r.get("high"):
            ax.hlines(y, r["low"], r["high"], color=colour, linewidth=3.0, zorder=2)
        ax.plot([r["ratio"]], [y], marker="o", markersize=7, color=colour, markeredgecolor="black", zorder=3)
        if mde and r.get("mde"):
            ax.plot([r["mde"]], [y], marker="|", markersize=14, markeredgewidth=2.0, color="dimgray", zorder=3)
        text = f"{r['ratio']:.2f}x"
        if r.get("low") and r.get("high"):
            text += f" [{r['low']:.2f}, {r['high']:.2f}]"
        # the numbers in a column of their own right of the axes, never over an interval or a mark
        ax.annotate(f"{r.get('verdict') or ''}  {text}", (1.0, y), xycoords=("axes fraction", "data"), xytext=(8, 0),
                    textcoords="offset points", va="center", fontsize=8, color=colour if colour != "gray" else "black",
                    fontweight="bold")
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels([_label(n, status_of.get(n, "OK")) for n, _r in reversed(rows)], fontsize=8)
    ax.set_ylim(-0.7, len(rows) - 0.3)
    ax.set_xscale("log")
    ax.set_xlim(*limits)
    ax.xaxis.set_major_locator(LogLocator(base=10.0, subs=(1.0, 2.0, 5.0)))
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v:g}x"))
    ax.grid(axis="x", alpha=0.3)
    ax.set_axisbelow(True)
    return limits


def verdicts_forest(document: Mapping[str, Any]) -> Any:
    """The confirmatory verdicts as a forest plot: each candidate's speedup against the baseline on the run's
    endpoint with its simultaneous interval, on a log axis; the line at 1, the equivalence band, the verdict's
    colour and the smallest findable effect (|) of each row."""
    j = document["judged"]
    conf = j.get("confirmatory") or {}
    rows = _forest_rows(conf.get("verdicts") or {}, j["order"])
    if not rows:
        return None
    fig = _figure(10.0, 2.2 + 0.55 * len(rows))
    ax = fig.add_subplot(1, 1, 1)
    status_of = {n: j["configs"][n]["status"] for n in j["configs"]}
    _forest(ax, rows, float(conf.get("margin") or 0.0), conf.get("min_speedup"), status_of)
    weights = ", ".join(f"{s} {w:.0%}" for s, w in sorted((conf.get("weights") or {}).items()))
    ax.set_xlabel(f"speedup against {j['baseline']!r} ({conf.get('endpoint')} tok/s; log axis; simultaneous "
                  f"intervals, family-wise {float(conf.get('alpha') or 0.05):.0%} over candidates and looks; "
                  "|: smallest findable, an estimate)", fontsize=8)
    ax.set_title(f"{document['host']}, run {document['run_id']}: confirmatory verdicts\n"
                 f"endpoint {conf.get('endpoint')} over {weights} ({conf.get('weights_from')})", fontsize=9)
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.28 if len(rows) < 4 else -0.12), ncol=2,
              frameon=False)
    fig.tight_layout()
    return fig


def per_shape_forest(document: Mapping[str, Any]) -> Any:
    """Per shape, the same forest of the exploratory cells (small multiples sharing one log axis)."""
    j = document["judged"]
    shapes = list(j["shapes"])
    margin = float((j.get("confirmatory") or {}).get("margin") or 0.0)
    per_shape = {}
    for s in shapes:
        verdicts = {n: {"ratio": c["shapes"][s].get("speedup"), "low": c["shapes"][s].get("ci_low"),
                        "high": c["shapes"][s].get("ci_high"), "verdict": c["shapes"][s].get("ci_verdict"),
                        "mde": c["shapes"][s].get("mde")}
                    for n, c in j["configs"].items() if n != j["baseline"]}
        rows = _forest_rows(verdicts, j["order"])
        if rows:
            per_shape[s] = rows
    if not per_shape:
        return None
    status_of = {n: j["configs"][n]["status"] for n in j["configs"]}
    most = max(len(rows) for rows in per_shape.values())
    fig = _figure(10.0, 0.9 + len(per_shape) * (0.6 + 0.42 * most))
    every = [row for rows in per_shape.values() for row in rows]
    limits = forest_limits(every, margin, [])
    for i, (s, rows) in enumerate(per_shape.items()):
        ax = fig.add_subplot(len(per_shape), 1, i + 1)
        _forest(ax, rows, margin, None, status_of, mde=False)
        ax.set_xlim(*limits)
        ax.set_title(f"{s} (exploratory: each cell alone, not a verdict on the run)", fontsize=8, loc="left")
    fig.suptitle(f"{document['host']}, run {document['run_id']}: speedup per shape against {j['baseline']!r} "
                 "(decode tok/s, log axis)", fontsize=9)
    fig.tight_layout()
    return fig


def tok_s_per_shape(document: Mapping[str, Any]) -> Any:
    """Grouped bars: decode tok/s per shape per config (the geometric mean over rounds), whiskers = its 95 %
    interval at the block model's pooled residual."""
    j = document["judged"]
    shapes = list(j["shapes"])
    names = [n for n in j["order"] if any(j["configs"][n]["shapes"][s]["median_tok_s"] for s in shapes)]
    if not shapes or not names:
        return None
    from matplotlib import colormaps

    cmap = colormaps["tab10" if len(names) <= 10 else "tab20"]
    width = 0.8 / len(names)
    fig = _figure(max(7.0, 1.2 + len(shapes) * (0.45 * len(names) + 0.6)), 5.2)
    ax = fig.add_subplot(1, 1, 1)
    top = 0.0
    for i, name in enumerate(names):
        c = j["configs"][name]
        xs, ys, lo, hi = [], [], [], []
        for si, s in enumerate(shapes):
            r = c["shapes"][s]
            if not r["median_tok_s"]:
                continue
            xs.append(si - 0.4 + width * (i + 0.5))
            # the bar is the rate the interval belongs to (the mean over rounds), not the request median
            rate = r.get("tok_s") or r["median_tok_s"]
            ys.append(rate)
            lo.append(max(0.0, rate - (r["tok_s_ci_low"] if r["tok_s_ci_low"] is not None else rate)))
            hi.append(max(0.0, (r["tok_s_ci_high"] if r["tok_s_ci_high"] is not None else rate) - rate))
        ax.bar(xs, ys, width * 0.92, yerr=[lo, hi], capsize=3, color=cmap(i % cmap.N),
               hatch="//" if c["status"] in _NOT_WINNERS else None, edgecolor="black", linewidth=0.6,
               error_kw={"elinewidth": 1.0, "ecolor": "black"}, label=_label(name, c["status"]))
        for si, s in enumerate(shapes):
            r = c["shapes"][s]
            if r["median_tok_s"] and r["speedup"] is not None:
                x = si - 0.4 + width * (i + 0.5)
                y = r["tok_s_ci_high"] if r["tok_s_ci_high"] is not None else (r.get("tok_s") or r["median_tok_s"])
                ax.annotate(f"{r['speedup']:.2f}x", (x, y), xytext=(0, 3), textcoords="offset points",
                            ha="center", va="bottom", fontsize=7, rotation=90,
                            bbox={"boxstyle": "square,pad=0.1", "fc": "white", "ec": "none", "alpha": 0.8})
        top = max(top, *(y + h for y, h in zip(ys, hi)))
    base = j["configs"].get(j["baseline"])
    if base:
        for si, s in enumerate(shapes):
            m = base["shapes"][s].get("tok_s") or base["shapes"][s]["median_tok_s"]
            if m:
                ax.hlines(m, si - 0.42, si + 0.42, colors="dimgray", linestyles="dashed", linewidth=1.0)
    ax.set_xticks(range(len(shapes)))
    ax.set_xticklabels(shapes)
    ax.set_ylim(0, top * 1.25 if top > 0 else 1)
    ax.set_ylabel("decode tok/s (95 % CI, pooled residual)")
    ax.set_title(f"{document['host']}, run {document['run_id']}: decode rate per shape "
                 f"(dashed line: the baseline {j['baseline']!r}; labels: speedup against it)", fontsize=10)
    unplotted = [n for n in j["order"] if n not in names]
    if unplotted:
        fig.text(0.01, 0.01, "not plotted, no decode rate: " + ", ".join(
            _label(n, j["configs"][n]["status"]) for n in unplotted), fontsize=8, color="dimgray")
    ax.grid(axis="y", alpha=0.3)
    ax.set_axisbelow(True)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    fig.tight_layout()
    return fig


def acceptance_by_position(document: Mapping[str, Any]) -> Any:
    """Per config, the share of drafting rounds accepted at each draft position."""
    j = document["judged"]
    names = [n for n in j["order"] if j["configs"][n]["acceptance_by_position"]]
    if not names:
        return None
    from matplotlib import colormaps
    from matplotlib.ticker import MaxNLocator, PercentFormatter

    cmap = colormaps["tab10" if len(j["order"]) <= 10 else "tab20"]
    fig = _figure(8.0, 4.6)
    ax = fig.add_subplot(1, 1, 1)
    width = 1
    # each config a little to the side and with a marker of its own, so that no line hides another
    step = 0.5 / max(1, len(names))
    for i, name in enumerate(names):
        c = j["configs"][name]
        ys = c["acceptance_by_position"][: c.get("positions_drafted") or None]
        width = max(width, len(ys))
        xs = [x + (i - (len(names) - 1) / 2.0) * step for x in range(1, len(ys) + 1)]
        ax.plot(xs, ys, marker=_MARKERS[i % len(_MARKERS)], markersize=5, linewidth=1.4, alpha=0.9,
                color=cmap(j["order"].index(name) % cmap.N),
                linestyle="--" if c["status"] in _NOT_WINNERS else "-", label=_label(name, c["status"]))
    ax.set_xlim(0.5, width + 0.5)
    ax.set_ylim(0, 1.05)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.yaxis.set_major_formatter(PercentFormatter(1.0))
    ax.set_xlabel("draft position")
    ax.set_ylabel("accepted (share of drafting rounds)")
    ax.set_title(f"{document['host']}, run {document['run_id']}: acceptance by draft position", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    fig.tight_layout()
    return fig


def screen_rows(document: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Per screened candidate: the screen's predicted speedup of production with its interval, and, where the rounds
    measured it, the confirmatory ratio with its simultaneous interval and verdict."""
    env = document.get("environment") or {}
    decision = env.get("screen") if isinstance(env.get("screen"), Mapping) else {}
    rate = float(decision.get("production_tok_s") or 0.0)
    found = (decision.get("screen") or {}).get("candidates") or {}
    verdicts = ((document.get("judged") or {}).get("confirmatory") or {}).get("verdicts") or {}
    out_names = {r["name"] for r in decision.get("screened_out") or []}
    rows = []
    for name, row in found.items():
        if rate <= 0 or not row.get("screenable") or not row.get("k"):
            continue
        best = row["k"][str(row["best_k"])]
        measured = verdicts.get(name) or {}
        rows.append({"name": name, "k": row["best_k"], "predicted": best["predicted_tok_s"] / rate,
                     "low": best["low"] / rate, "high": best["high"] / rate, "screened_out": name in out_names,
                     "measured": measured.get("ratio"), "measured_low": measured.get("low"),
                     "measured_high": measured.get("high"), "verdict": measured.get("verdict")})
    return rows


def screen_predicted_vs_measured(document: Mapping[str, Any]) -> Any:
    """Where the screen ran: per candidate, its predicted speedup (hollow, gray interval) above what the rounds
    measured (filled, the verdict's colour, the simultaneous interval); a screened-out candidate has only its
    prediction."""
    rows = screen_rows(document)
    if not rows:
        return None
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    conf = (document.get("judged") or {}).get("confirmatory") or {}
    min_speedup = conf.get("min_speedup")
    fig = _figure(10.0, 2.4 + 0.7 * len(rows))
    ax = fig.add_subplot(1, 1, 1)
    values = [1.0, *([float(min_speedup)] if min_speedup else [])]
    for y, r in enumerate(reversed(rows)):
        ax.hlines(y + 0.15, r["low"], r["high"], color="gray", linewidth=3.0, zorder=2)
        ax.plot([r["predicted"]], [y + 0.15], marker="o", markersize=7, markerfacecolor="white",
                markeredgecolor="black", zorder=3)
        values += [r["low"], r["high"], r["predicted"]]
        said = f"predicted {r['predicted']:.2f}x [{r['low']:.2f}, {r['high']:.2f}] at K={r['k']}"
        if r["measured"]:
            colour = VERDICT_COLOURS.get(r["verdict"] or "", "black")
            if r["measured_low"] and r["measured_high"]:
                ax.hlines(y - 0.15, r["measured_low"], r["measured_high"], color=colour, linewidth=3.0, zorder=2)
                values += [r["measured_low"], r["measured_high"]]
            ax.plot([r["measured"]], [y - 0.15], marker="o", markersize=7, color=colour, markeredgecolor="black",
                    zorder=3)
            values.append(r["measured"])
            said += f"; measured {r['measured']:.2f}x {r['verdict'] or ''}"
        else:
            said += "; SCREENED OUT (no restart)" if r["screened_out"] else "; not measured"
        ax.annotate(said, (1.0, y), xycoords=("axes fraction", "data"), xytext=(8, 0), textcoords="offset points",
                    va="center", fontsize=8).set_in_layout(False)
    ax.axvline(1.0, color="black", linewidth=1.0, zorder=1)
    if min_speedup:
        ax.axvline(float(min_speedup), color="dimgray", linewidth=0.8, linestyle=":", zorder=1)
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels([r["name"] for r in reversed(rows)], fontsize=8)
    ax.set_ylim(-0.7, len(rows) - 0.3)
    ax.set_xscale("log")
    positive = [v for v in values if v and v > 0]
    ax.set_xlim(min(positive) / 1.15, max(positive) * 1.15)
    ax.xaxis.set_major_locator(LogLocator(base=10.0, subs=(1.0, 2.0, 5.0)))
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v:g}x"))
    ax.grid(axis="x", alpha=0.3)
    ax.set_xlabel("speedup of production (log axis)", fontsize=8)
    ax.set_title(f"{document['host']}, run {document['run_id']}: the screen's prediction against the A/B", fontsize=9,
                 loc="left")
    screen_metric = ((document.get("environment") or {}).get("screen") or {}).get("metric") or "decode"
    fig.text(0.01, 0.01, f"hollow, gray: the screen's prediction ({screen_metric}, before any restart); filled: the A/B's "
             f"confirmatory ratio ({conf.get('endpoint') or '?'}), in its verdict's colour; dotted: the planned speedup",
             fontsize=7, color="dimgray")
    # the numbers stand right of the axes, in a column of their own
    fig.tight_layout(rect=(0.0, 0.05, 0.6, 1.0))
    return fig
