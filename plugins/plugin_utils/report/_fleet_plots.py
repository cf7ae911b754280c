# Copyright: (c) 2026, llmfleet.specdec contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# Private to the collection, controller only: the fleet report's PNG, drawn with the A/B report's plot helpers.
"""One grid for the fleet document (``llmfleet.specdec/fleet-report/1``): a row per host, grouped by GPU family,
a column per shape; each cell the host's pick on that shape and its speedup. matplotlib is optional, as for
the A/B report (:mod:`._plots`): without it no image and a note."""
from __future__ import annotations

from typing import Any, Mapping

from ansible_collections.llmfleet.specdec.plugins.plugin_utils.report._plots import _figure, _png, matplotlib_missing

FLEET_PNG = "fleet_picks.png"


def render(document: Mapping[str, Any]) -> tuple[dict[str, bytes], list[str]]:
    """``({file name: PNG bytes}, notes)``."""
    missing = matplotlib_missing()
    if missing:
        return {}, [missing]
    png = fleet_picks(document)
    if png is None:
        return {}, ["no host has a report with shapes: no fleet plot"]
    return {FLEET_PNG: png}, []


def fleet_picks(document: Mapping[str, Any]) -> bytes | None:
    hosts = document["hosts"]
    shapes: list[str] = []
    for h in hosts:
        shapes += [s for s in h["shapes"] if s not in shapes]
    if not shapes:
        return None
    state = {f["family"]: f["state"] for f in document["families"]}
    fig = _figure(max(6.0, 2.0 + 1.7 * len(shapes)), max(2.4, 1.2 + 0.55 * len(hosts)))
    ax = fig.add_subplot(1, 1, 1)
    labels = []
    for row, h in enumerate(hosts):
        labels.append(f"{h['family']} / {h['host']}")
        for col, s in enumerate(shapes):
            pick = h["picks"].get(s)
            if pick is None:
                color, text = "white", "no report" if h["result"] == "no report" else "-"
            elif pick["verdict"] == "WIN":
                color, text = "#7fc97f", f"{pick['config']}\n{pick['speedup']:.2f}x"
            else:
                color, text = "#d9d9d9", f"keep {pick['config']}"
            if h["result"] != "reported":
                color = "#fdc086" if pick else "white"
            ax.add_patch(_rect(col, row, color))
            ax.text(col + 0.5, row + 0.5, text, ha="center", va="center", fontsize=7)
    # a heavy line between families; a family whose hosts disagree gets its labels in red
    for row in range(1, len(hosts)):
        if hosts[row]["family"] != hosts[row - 1]["family"]:
            ax.axhline(row, color="black", linewidth=2.0)
    ax.set_xlim(0, len(shapes))
    ax.set_ylim(len(hosts), 0)
    ax.set_xticks([i + 0.5 for i in range(len(shapes))])
    ax.set_xticklabels(shapes)
    ax.set_yticks([i + 0.5 for i in range(len(hosts))])
    ax.set_yticklabels(labels, fontsize=8)
    for tick, h in zip(ax.get_yticklabels(), hosts):
        if state.get(h["family"]) == "DISAGREE":
            tick.set_color("red")
    ax.tick_params(length=0)
    flagged = ", ".join(document["disagreeing"]) or "none"
    ax.set_title(f"pick per host and shape (green: a win, grey: keep the baseline); families that disagree "
                 f"(red): {flagged}", fontsize=9)
    fig.tight_layout()
    return _png(fig)


def _rect(col: int, row: int, color: str) -> Any:
    from matplotlib.patches import Rectangle

    return Rectangle((col, row), 1, 1, facecolor=color, edgecolor="white", linewidth=2)
