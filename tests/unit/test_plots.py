"""The report's pictures drawn from a recorded real run (tests/unit/fixtures/ab/llamacpp_run.json): each one's axes
hold exactly the data, so nothing is a flat line at the bottom or off the edge."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from ansible_collections.llmfleet.specdec.plugins.plugin_utils.report import _plots
from ansible_collections.llmfleet.specdec.plugins.plugin_utils.report import _report as rp
from ansible_collections.llmfleet.specdec.plugins.plugin_utils.verdicts import _judge as jd

RUN = Path(__file__).parent / "fixtures" / "ab" / "llamacpp_run.json"


@pytest.fixture(scope="module")
def document() -> dict:
    run = json.loads(RUN.read_text())
    return rp.build_document(run, jd.judge(run, n_boot=200))


@pytest.fixture(scope="module")
def drawn(document: dict) -> dict:
    figures, notes = _plots.figures(document)
    assert notes == []
    return figures


def test_the_pictures_come_in_the_order_a_reader_needs_them(drawn: dict) -> None:
    assert list(drawn) == [_plots.FOREST_PNG, _plots.SHAPES_FOREST_PNG, _plots.TOK_S_PNG, _plots.ACCEPTANCE_PNG]


def test_the_forest_holds_every_interval_the_line_at_one_and_the_band(document: dict, drawn: dict) -> None:
    conf = document["judged"]["confirmatory"]
    (ax,) = drawn[_plots.FOREST_PNG].axes
    assert ax.get_xscale() == "log"
    low, high = ax.get_xlim()
    values = [v for r in conf["verdicts"].values() for v in (r["low"], r["high"], r["ratio"], r["mde"]) if v]
    margin = conf["margin"]
    values += [1.0, 1.0 + margin, 1.0 / (1.0 + margin), conf["min_speedup"]]
    assert low <= min(values) and max(values) <= high
    # tight: no axis that runs ten times past the data
    assert low >= min(values) / 1.5 and high <= max(values) * 1.5
    labels = [t.get_text() for t in ax.get_yticklabels()]
    assert sorted(labels) == sorted(conf["verdicts"])
    # one coloured mark per candidate, in its verdict's colour
    texts = [t.get_text() for t in ax.texts]
    for name, r in conf["verdicts"].items():
        assert any(t.startswith(r["verdict"]) and f"{r['ratio']:.2f}x" in t for t in texts), name


def test_the_per_shape_forests_share_one_axis_and_say_they_are_exploratory(document: dict, drawn: dict) -> None:
    axes = drawn[_plots.SHAPES_FOREST_PNG].axes
    j = document["judged"]
    assert [a.get_title(loc="left").split(" ")[0] for a in axes] == list(j["shapes"])
    assert all("exploratory" in a.get_title(loc="left") for a in axes)
    assert len({a.get_xlim() for a in axes}) == 1
    low, high = axes[0].get_xlim()
    cells = [v for n, c in j["configs"].items() if n != j["baseline"] for r in c["shapes"].values()
             for v in (r["ci_low"], r["ci_high"], r["speedup"]) if v]
    assert low <= min(cells) and max(cells) <= high and high <= max(cells) * 1.5


def test_rates_are_read_at_the_pooled_residual_not_one_degree_of_freedom(document: dict, drawn: dict) -> None:
    j = document["judged"]
    rows = [c["shapes"][s] for c in j["configs"].values() for s in j["shapes"] if c["shapes"][s]["tok_s"]]
    # two rounds: a config's own t interval has one degree of freedom (it ran 67 to 61,889 tok/s around 2,044);
    # at the run's pooled residual every interval stays within a few times its rate
    for r in rows:
        assert r["tok_s_ci_low"] < r["tok_s"] < r["tok_s_ci_high"]
        assert r["tok_s_ci_high"] / r["tok_s_ci_low"] < 4.0, r
    (ax,) = drawn[_plots.TOK_S_PNG].axes
    top = max(r["tok_s_ci_high"] for r in rows)
    assert ax.get_ylim()[0] == 0 and top <= ax.get_ylim()[1] <= top * 1.3


def test_acceptance_stops_at_each_configs_depth(document: dict, drawn: dict) -> None:
    j = document["judged"]
    (ax,) = drawn[_plots.ACCEPTANCE_PNG].axes
    lines = {line.get_label().split(" (")[0]: line for line in ax.get_lines()}
    shown = {n: c for n, c in j["configs"].items() if c["acceptance_by_position"]}
    assert set(lines) == set(shown)
    depths = {n: len(lines[n].get_xdata()) for n in shown}
    assert depths == {n: c["positions_drafted"] for n, c in shown.items()} == {
        "draft-n3": 3, "draft-low-n7": 7, "ngram-mod": 16}
    # every line visible: no two configs share a point
    points = [(round(x, 6), round(y, 6)) for line in lines.values() for x, y in zip(line.get_xdata(), line.get_ydata())]
    assert len(points) == len(set(points))
    assert ax.get_xlim()[1] >= max(depths.values()) and ax.get_xlim()[1] <= max(depths.values()) + 1
    assert all(0 <= y <= 1 for _x, y in points) and ax.get_ylim() == (0, 1.05)


def test_the_pictures_are_the_same_bytes_for_the_same_run(document: dict) -> None:
    first, _notes = _plots.render(document)
    assert _plots.render(document)[0] == first and all(len(b) > 15_000 for b in first.values())


def test_the_screens_prediction_is_drawn_beside_what_the_rounds_measured(document: dict) -> None:
    conf = document["judged"]["confirmatory"]
    measured = sorted(conf["verdicts"])[0]
    rate = 100.0
    kept = {"predicted_tok_s": 140.0, "low": 120.0, "high": 165.0, "mean_accepted_len": 2.4}
    out = {"predicted_tok_s": 80.0, "low": 70.0, "high": 95.0, "mean_accepted_len": 1.3}
    screen = {"candidates": {measured: {"screenable": True, "best_k": 3, "k": {"3": kept}},
                             "out": {"screenable": True, "best_k": 2, "k": {"2": out}},
                             "mtp": {"screenable": False, "why": "hidden states"}}}
    doc = dict(document, environment=dict(document.get("environment") or {}, screen={
        "production_tok_s": rate, "screen": screen, "screened_out": [{"name": "out", "why": "below"}]}))
    assert _plots.figures(document)[0].keys().isdisjoint({_plots.SCREEN_PNG})  # no screen in the run: no picture
    fig = _plots.figures(doc)[0][_plots.SCREEN_PNG]
    (ax,) = fig.axes
    assert ax.get_xscale() == "log" and sorted(t.get_text() for t in ax.get_yticklabels()) == sorted([measured, "out"])
    r = conf["verdicts"][measured]
    values = [0.7, 0.95, 1.2, 1.65, 1.0, r["ratio"], *(v for v in (r["low"], r["high"]) if v)]
    low, high = ax.get_xlim()
    assert low <= min(values) and max(values) <= high and low >= min(values) / 1.5 and high <= max(values) * 1.5
    texts = [t.get_text() for t in ax.texts]
    assert any(t.startswith("predicted 1.40x [1.20, 1.65] at K=3; measured") for t in texts)
    assert any(t.startswith("predicted 0.80x [0.70, 0.95] at K=2; SCREENED OUT") for t in texts)
