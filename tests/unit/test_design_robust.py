"""No input the rounds can produce makes the look, the interval or the power raise anything but a named error
(issue 49, item 2): property-based over degrees of freedom, spreads and rates, near zero and huge."""
from __future__ import annotations

import math
import random
from typing import Any

from ab_runs import make_run
from hypothesis import given, settings
from hypothesis import strategies as st

from ansible_collections.llmfleet.specdec.plugins.plugin_utils.report import _report as rp
from ansible_collections.llmfleet.specdec.plugins.plugin_utils.steps._steps_ab import ab_look
from ansible_collections.llmfleet.specdec.plugins.plugin_utils.verdicts import _confirm as cf
from ansible_collections.llmfleet.specdec.plugins.plugin_utils.verdicts import _design as ds

# a config's spread between starts (log scale): none, below rounding, real, absurd
SPREADS = st.sampled_from([0.0, 1e-300, 1e-160, 1e-12, 1e-6, 0.02, 0.05, 0.3, 1.0, 5.0, 40.0])
# a config's level (log of tokens/s): a rate of 1e-300 to 1e300
LEVELS = st.floats(min_value=-690.0, max_value=690.0, allow_nan=False)


def _cells(seed: int, spreads: list[float], levels: list[float], rounds: int, kept: list[int],
           heavy: bool) -> dict[str, dict[int, float]]:
    """Cells of a run: the baseline and candidates, each with its level, its spread and its own starts (normal,
    or t with 3 df), a candidate measured in its first ``kept`` rounds (stopped by an earlier look)."""
    rng = random.Random(seed)
    names = ["baseline", *(f"c{i}" for i in range(1, len(spreads)))]
    out: dict[str, dict[int, float]] = {}
    for i, name in enumerate(names):
        n = rounds if i == 0 else max(1, min(rounds, kept[i % len(kept)]))
        draws = {}
        for r in range(n):
            z = rng.gauss(0.0, 1.0)
            if heavy:
                z /= math.sqrt(sum(rng.gauss(0.0, 1.0) ** 2 for _dummy in range(3)) / 3.0) or 1.0
            draws[r] = levels[i % len(levels)] + spreads[i] * z
        out[name] = draws
    return out


def _check_row(row: dict[str, Any]) -> None:
    assert row["verdict"] in ds.VERDICTS
    for key in ("ratio", "low", "high", "mde", "noise"):
        assert row.get(key) is None or math.isfinite(row[key]), (key, row)
    if row.get("wide"):
        assert row["verdict"] == ds.INCONCLUSIVE and row["low"] is None and row["high"] is None
        assert "too wide" in row["why"]
    if row.get("low") is not None:
        assert 0.0 < row["low"] <= row["high"]
        assert row["high"] / row["low"] <= ds.WIDE * (1.0 + 1e-9), row


@settings(max_examples=80, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), spreads=st.lists(SPREADS, min_size=2, max_size=7),
       levels=st.lists(LEVELS, min_size=1, max_size=3), rounds=st.integers(1, 6),
       kept=st.lists(st.integers(1, 6), min_size=1, max_size=4), heavy=st.booleans(),
       max_rounds=st.integers(1, 6), looks=st.booleans(), win_margin=st.sampled_from([0.0, 0.02, 0.5]))
def test_the_looks_never_raise_and_every_interval_means_something_or_says_it_is_too_wide(
        seed, spreads, levels, rounds, kept, heavy, max_rounds, looks, win_margin):
    cells = _cells(seed, spreads, levels, rounds, kept, heavy)
    candidates = [n for n in cells if n != "baseline"]
    out = ds.sequential(cells, "baseline", candidates, max_rounds=max_rounds, looks=looks, win_margin=win_margin)
    assert set(out["verdicts"]) == set(candidates)
    for row in out["verdicts"].values():
        _check_row(row)
    for look in out["looks"]:  # a look that tested spent a share of alpha; one that could not says why
        assert "alpha" in look or look.get("why")
    for row in ds.fixed_analysis(cells, "baseline", candidates).values():
        _check_row(row)
    noise = cf.noise_by_config(cells, "baseline")
    assert all(v is None or math.isfinite(v) for v in noise["spread"].values())
    fit = ds.fit_blocks(cells, "baseline")
    if fit is not None and fit.s is not None:
        assert 0.0 <= ds.sequential_power(fit.s, len(candidates), len(cells), max(max_rounds, 2)) <= 1.0
        spreads = cf.own_spreads(fit, "baseline", candidates)
        assert 0.0 <= ds.sequential_power(fit.s, len(candidates), len(cells), max(max_rounds, 2), spreads=spreads,
                                          win_margin=win_margin) <= 1.0
        rounds_needed = ds.fixed_rounds(fit.s, len(candidates), len(cells))
        assert rounds_needed is None or rounds_needed >= ds.FIRST_LOOK


@settings(max_examples=300, deadline=None)
@given(c=st.one_of(st.floats(0.0, 1e6), st.just(math.inf)), df=st.floats(1.0, 500.0),
       shrink=st.floats(0.0, 1.0))
def test_a_critical_value_carried_to_fewer_degrees_of_freedom_is_never_smaller(c, df, shrink):
    df_to = max(1.0, df * shrink)
    carried = ds.carry_c(c, df, df_to)
    assert carried >= c * (1.0 - 1e-9) or math.isinf(carried)
    if math.isfinite(carried) and 1e-6 < ds._t_tail(c, df) < 0.5:  # the same one-sided level where it is
        assert math.isclose(ds._t_tail(carried, df_to), ds._t_tail(c, df), rel_tol=1e-6)


@settings(max_examples=300, deadline=None)
@given(delta=st.floats(-5.0, 5.0), se=st.floats(0.0, 1e3), c=st.one_of(st.floats(0.0, 1e6), st.just(math.inf)),
       df=st.floats(1.0, 1e4), s=st.floats(0.0, 50.0), m=st.integers(1, 12), a=SPREADS, rest=SPREADS)
def test_the_power_is_a_probability_at_any_df_and_noise(delta, se, c, df, s, m, a, rest):
    assert 0.0 <= ds.approximate_power(delta, se, c, df) <= 1.0
    assert 0.0 <= ds.sequential_power(s, m, m + 1, 5) <= 1.0
    for rounds in (2, 3, 5):
        assert 0.0 <= ds.planned_power(s, m, m + 1, rounds, 0.01, spreads=(a, rest), win_margin=0.02) <= 1.0
    assert ds.fixed_rounds(s, m, m + 1, limit=6) in (None, 2, 3, 4, 5, 6)


def test_a_pair_with_one_welch_degree_of_freedom_no_longer_overflows():
    """The reviewer's crash: 8 candidates, heavy-tailed starts at sigma 0.3, the look after round 2, where a
    pair's Welch df is 1 and the critical value near 1,000 (this seed raised OverflowError in comparison)."""
    rng = random.Random(382)
    names = ["baseline", *(f"t{k}" for k in range(8))]
    cells: dict[str, dict[int, float]] = {n: {} for n in names}
    for r in range(2):
        for n in names:
            cells[n][r] = 0.3 * rng.gauss(0, 1) / math.sqrt(max(1e-9, rng.gammavariate(1.5, 2) / 3))
    out = ds.sequential(cells, "baseline", names[1:])
    wide = [n for n, r in out["verdicts"].items() if r.get("wide")]
    assert wide and all(out["verdicts"][n]["verdict"] == ds.INCONCLUSIVE for n in wide)
    for row in out["verdicts"].values():
        _check_row(row)


@settings(max_examples=12, deadline=None)
@given(seed=st.integers(0, 10**6), sigma=st.sampled_from([0.0, 1e-9, 0.3, 3.0]), rounds=st.integers(1, 3))
def test_the_look_after_a_round_never_fails_the_task(seed, sigma, rounds):
    rng = random.Random(seed)
    configs = {"baseline": {"start": {r: math.exp(sigma * rng.gauss(0, 1)) for r in range(rounds)}}}
    for i in range(1, 4):
        configs[f"twin{i}"] = {"start": {r: math.exp(sigma * rng.gauss(0, 1)) for r in range(rounds)},
                               "server_config": {"SPECDEC_TWIN": str(i)}}
    run = make_run(configs, rounds=rounds, prompts=1, repeats=2, shapes=("prose",))
    run["design"] = {"max_rounds": 5, "sequential": True}
    look = ab_look(run)
    assert isinstance(look["active"], list) and look["lines"] and isinstance(look["stop"], bool)


def test_a_look_that_cannot_be_computed_says_so_and_the_next_round_measures_every_config():
    run = make_run({"baseline": {}, "d": {}}, rounds=2, prompts=1, repeats=2, shapes=("prose",))
    run["design"] = {"max_rounds": 5, "bogus": 1}  # the judge names the bad key: a named error, not the task's end
    look = ab_look(run)
    assert look["active"] == ["baseline", "d"] and look["stop"] is False and look["decided"] == {}
    assert "could not be computed" in look["lines"][0] and "bogus" in look["error"]


def test_an_interval_too_wide_is_reported_as_such_not_as_numbers():
    conf = {"endpoint": "e2e", "weights": {"prose": 1.0}, "weights_from": "the declared traffic mix", "alpha": 0.05,
            "sequential": True, "max_rounds": 5, "margin": 0.05, "min_speedup": 1.2, "recommendation": None,
            "verdicts": {"twin": {"verdict": "INCONCLUSIVE", "ratio": 1.02, "low": None, "high": None, "wide": True,
                                  "noise": 0.3, "mde": None, "rounds": 2, "why": "the interval is too wide"}}}
    text = "\n".join(rp._confirmatory({"baseline": "baseline", "confirmatory": conf}))
    assert "1.02x [interval too wide to mean anything]" in text
    assert rp.confirmatory_section({"confirmatory": conf})["verdicts"]["twin"]["wide"] is True
