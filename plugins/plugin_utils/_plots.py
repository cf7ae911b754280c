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

TOK_S_PNG = "tok_s_per_shape.png"
ACCEPTANCE_PNG = "acceptance_by_position.png"
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


def render(document: Mapping[str, Any]) -> tuple[dict[str, bytes], list[str]]:
    """``({file name: PNG bytes}, notes)``; no files and a note when matplotlib is missing."""
    missing = matplotlib_missing()
    if missing:
        return {}, [missing]
    files: dict[str, bytes] = {}
    notes: list[str] = []
    png = tok_s_per_shape(document)
    if png is None:
        notes.append("no decode rates in this run: no tok/s plot")
    else:
        files[TOK_S_PNG] = png
    png = acceptance_by_position(document)
    if png is None:
        notes.append("no per-position acceptance counters (/metrics deltas) in this run: no acceptance plot")
    else:
        files[ACCEPTANCE_PNG] = png
    return files, notes


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


def tok_s_per_shape(document: Mapping[str, Any]) -> bytes | None:
    """Grouped bars: median decode tok/s per shape per config, whiskers = the median's 95 % interval."""
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
            m = base["shapes"][s]["median_tok_s"]
            if m:
                ax.hlines(m, si - 0.42, si + 0.42, colors="dimgray", linestyles="dashed", linewidth=1.0)
    ax.set_xticks(range(len(shapes)))
    ax.set_xticklabels(shapes)
    ax.set_ylim(0, top * 1.25 if top > 0 else 1)
    ax.set_ylabel("decode tok/s (median, 95 % CI)")
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
    return _png(fig)


def acceptance_by_position(document: Mapping[str, Any]) -> bytes | None:
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
    for name in names:
        c = j["configs"][name]
        ys = c["acceptance_by_position"]
        width = max(width, len(ys))
        ax.plot(range(1, len(ys) + 1), ys, marker="o", linewidth=1.6, color=cmap(j["order"].index(name) % cmap.N),
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
    return _png(fig)
