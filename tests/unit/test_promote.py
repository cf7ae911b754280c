"""promote.yml's filter: the winner into the base env file, the table as justification, losers marked."""
from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.llmfleet.specdec.plugins.module_utils.systemd._envfile import read_env_values
from ansible_collections.llmfleet.specdec.plugins.plugin_utils.steps._steps_envfile import env_file_lines
from ansible_collections.llmfleet.specdec.plugins.plugin_utils.steps._steps_promote import (
    BEGIN,
    END,
    promote_env,
    promoted_env,
    promotion_block,
    promotion_record,
)

REPORT = {
    "run_id": "20261129T100000Z", "host": "frank-zealot", "baseline": "baseline", "finished": "2026-11-29T10:10:00",
    "configs": [
        {"name": "baseline", "server_config": {}},
        {"name": "ngram-mod", "server_config": {"LLAMA_ARG_SPEC_TYPE": "ngram-mod", "LLAMA_ARG_SPEC_DRAFT_N_MAX": None}},
        {"name": "draft-n7", "server_config": {"LLAMA_ARG_SPEC_TYPE": "draft-simple"}},
        {"name": "broken", "server_config": {"LLAMA_ARG_SPEC_TYPE": "ngram-mod"}},
    ],
    "verdicts": [
        {"config": "ngram-mod", "shape": "echo", "status": "OK", "verdict": "win", "median_tok_s": 41.0,
         "speedup": 1.64, "ci_low": 1.5, "ci_high": 1.8},
        {"config": "draft-n7", "shape": "echo", "status": "OK", "verdict": "loss", "median_tok_s": 20.0,
         "speedup": 0.8, "ci_low": 0.7, "ci_high": 0.9},
        {"config": "broken", "shape": "echo", "status": "INVALID", "verdict": "invalid", "median_tok_s": 50.0,
         "speedup": 2.0, "ci_low": 1.9, "ci_high": 2.1},
    ],
    # the run's one confirmatory endpoint (report.json's C3 section): what the promotion gate reads
    "confirmatory": {"endpoint": "e2e", "weights": {"echo": 1.0}, "method": "block design", "alpha": 0.05,
                     "recommendation": "ngram-mod",
                     "verdicts": {"ngram-mod": {"verdict": "WIN", "ratio": 1.6, "low": 1.45, "high": 1.77,
                                                "mde": 1.1, "noise": 0.03},
                                  "draft-n7": {"verdict": "LOSS", "ratio": 0.8, "low": 0.7, "high": 0.9,
                                               "mde": 1.1, "noise": 0.03},
                                  "broken": {"verdict": "WIN", "ratio": 2.0, "low": 1.9, "high": 2.1,
                                             "mde": 1.1, "noise": 0.03}}},
}
WIN_ROW = {"verdict": "WIN", "ratio": 1.4, "low": 1.3, "high": 1.5}
CURRENT = "# production\nLLAMA_ARG_PORT=8080\nLLAMA_ARG_SPEC_DRAFT_N_MAX=3\nLLAMA_ARG_CTX_SIZE=4096\n"


def test_winner_is_written_with_its_justification() -> None:
    text = promote_env(CURRENT, REPORT, "ngram-mod")
    lines = text.splitlines()
    assert "LLAMA_ARG_PORT=8080" in lines and "LLAMA_ARG_CTX_SIZE=4096" in lines
    assert "LLAMA_ARG_SPEC_TYPE=ngram-mod" in lines
    assert not any(line.startswith("LLAMA_ARG_SPEC_DRAFT_N_MAX=") for line in lines)  # null removes it
    assert "# ngram-mod | echo | 41.0 | 1.64x [1.50, 1.80] | win | OK" in lines
    assert "# draft-n7: measured above; do not switch without re-measuring" in lines
    assert lines.count(BEGIN) == 1 and lines.count(END) == 1


def test_promoting_again_replaces_the_block_and_is_stable() -> None:
    once = promote_env(CURRENT, REPORT, "ngram-mod")
    assert promote_env(once, REPORT, "ngram-mod") == once
    other = promote_env(once, REPORT, "draft-n7", force=True)
    assert other.count(BEGIN) == 1 and "LLAMA_ARG_SPEC_TYPE=draft-simple" in other
    assert "LLAMA_ARG_SPEC_TYPE=ngram-mod" not in other


def test_invalid_or_unknown_configs_are_refused() -> None:
    with pytest.raises(AnsibleFilterError, match="INVALID"):
        promote_env(CURRENT, REPORT, "broken")
    assert "LLAMA_ARG_SPEC_TYPE=ngram-mod" in promote_env(CURRENT, REPORT, "broken", force=True)
    with pytest.raises(AnsibleFilterError, match="not a config"):
        promote_env(CURRENT, REPORT, "nope")


def test_a_value_cannot_inject_a_variable_and_reaches_the_process_unchanged() -> None:
    report = dict(REPORT, configs=[{"name": "x", "server_config": {"LLAMA_ARG_ALIAS": "a\nLLAMA_ARG_PORT=1",
                                                                   "LLAMA_ARG_GRAMMAR": 'root ::= "\\\\" [a-z]'}}],
                  verdicts=[], confirmatory={"endpoint": "e2e", "verdicts": {"x": WIN_ROW}})
    values = read_env_values(promote_env(CURRENT, report, "x"))
    assert values["LLAMA_ARG_PORT"] == "8080"
    assert values["LLAMA_ARG_ALIAS"] == "a\nLLAMA_ARG_PORT=1"
    assert values["LLAMA_ARG_GRAMMAR"] == 'root ::= "\\\\" [a-z]'
    bad = dict(report, configs=[{"name": "x", "server_config": {"LLAMA_ARG_ALIAS": "a\udc80"}}])
    with pytest.raises(AnsibleFilterError, match=r"LLAMA_ARG_ALIAS: .*lone surrogate"):
        promote_env(CURRENT, bad, "x")


def test_a_multi_line_value_the_promotion_replaces_goes_whole() -> None:
    current = CURRENT + 'LLAMA_ARG_SPEC_TYPE="ngram-simple\nstill the value"\nLLAMA_ARG_THREADS=4\n'
    values = read_env_values(promote_env(current, REPORT, "ngram-mod"))
    assert values["LLAMA_ARG_SPEC_TYPE"] == "ngram-mod" and values["LLAMA_ARG_THREADS"] == "4"
    assert "still the value" not in promote_env(current, REPORT, "ngram-mod")


def _deploy(base_env: dict, record: dict | None) -> str:
    """What role llamacpp_serve's template writes (templates/llama-server.env.j2), without Jinja."""
    lines = ["# production", *env_file_lines(promoted_env(base_env, record))]
    block = promotion_block(record)
    return "\n".join([*lines, *(["", *block] if block else [])]) + "\n"


def test_a_promotion_survives_the_next_deploy() -> None:
    """promote.yml writes the record; the next deploy.yml (role llamacpp_serve) writes the same promotion again."""
    base = {"LLAMA_ARG_PORT": 8080, "LLAMA_ARG_SPEC_DRAFT_N_MAX": 3, "LLAMA_ARG_CTX_SIZE": 4096}
    deployed = _deploy(base, None)
    record = promotion_record(REPORT, "ngram-mod")
    promoted = promote_env(deployed, REPORT, "ngram-mod")
    redeployed = _deploy(base, record)
    assert read_env_values(redeployed) == read_env_values(promoted) == {
        "LLAMA_ARG_PORT": "8080", "LLAMA_ARG_CTX_SIZE": "4096", "LLAMA_ARG_SPEC_TYPE": "ngram-mod"}
    assert redeployed == promoted
    # without the record, a deploy would have undone it (what happened before promotions had one)
    assert read_env_values(_deploy(base, None))["LLAMA_ARG_SPEC_DRAFT_N_MAX"] == "3"


def test_the_record_says_what_is_set_unset_and_why() -> None:
    record = promotion_record(REPORT, "ngram-mod", promoted_at="2026-11-30T10:00:00+00:00")
    assert record["set"] == {"LLAMA_ARG_SPEC_TYPE": "ngram-mod"} and record["unset"] == ["LLAMA_ARG_SPEC_DRAFT_N_MAX"]
    assert record["schema"] == "llmfleet.specdec/promotion/1" and record["run_id"] == "20261129T100000Z"
    assert "# ngram-mod | echo | 41.0 | 1.64x [1.50, 1.80] | win | OK" in record["table"]
    with pytest.raises(AnsibleFilterError, match=r"not a llmfleet\.specdec/promotion/1 document"):
        promotion_block({"set": {}})


def test_only_a_win_on_the_confirmatory_endpoint_is_promoted_unless_forced() -> None:
    record = promotion_record(REPORT, "ngram-mod")
    assert record["forced"] is False and record["verdict"] == "WIN"
    assert record["confirmatory"] == {"endpoint": "e2e", "verdict": "WIN", "ratio": 1.6, "low": 1.45, "high": 1.77}
    assert record["table"][1] == "# confirmatory: WIN on e2e, 1.60x [1.45, 1.77]"
    with pytest.raises(AnsibleFilterError, match=r"no WIN on run .*its verdict is LOSS, 0.80x \[0.70, 0.90\].*force"):
        promotion_record(REPORT, "draft-n7")
    forced = promotion_record(REPORT, "draft-n7", force=True)
    assert forced["forced"] is True and forced["verdict"] == "LOSS"
    assert "FORCED (specdec_promote_force=true)" in forced["table"][1]
    # an INCONCLUSIVE (or EQUIVALENT) config is no winner either
    unsure = dict(REPORT, confirmatory=dict(REPORT["confirmatory"], verdicts={
        "ngram-mod": dict(REPORT["confirmatory"]["verdicts"]["ngram-mod"], verdict="INCONCLUSIVE", low=0.95)}))
    with pytest.raises(AnsibleFilterError, match="its verdict is INCONCLUSIVE"):
        promote_env(CURRENT, unsure, "ngram-mod")
    # a report written before the confirmatory verdict existed, or the baseline: refused, naming why
    old = {k: v for k, v in REPORT.items() if k != "confirmatory"}
    with pytest.raises(AnsibleFilterError, match="no confirmatory verdict"):
        promotion_record(old, "ngram-mod")
    with pytest.raises(AnsibleFilterError, match="not among its candidates"):
        promotion_record(REPORT, "baseline")


def test_a_win_below_the_practical_margin_is_not_promoted_unless_forced() -> None:
    row = dict(REPORT["confirmatory"]["verdicts"]["ngram-mod"], ratio=1.02, low=1.01, high=1.03)
    sliver = dict(REPORT, confirmatory=dict(REPORT["confirmatory"], verdicts={"ngram-mod": row}))
    # the run's own margin (spec_ab_win_margin), else the default 0.02: 1.01 is not above 1.02
    with pytest.raises(AnsibleFilterError, match=r"a WIN below the practical margin .*1\.020x"):
        promotion_record(sliver, "ngram-mod")
    forced = promotion_record(sliver, "ngram-mod", force=True)
    assert forced["forced"] is True and forced["verdict"] == "WIN"
    # a run that set the margin to 0 promotes it
    zero = dict(sliver, confirmatory=dict(sliver["confirmatory"], win_margin=0.0))
    assert promotion_record(zero, "ngram-mod")["forced"] is False


def test_a_config_name_cannot_hide_the_assignment_below_its_comment() -> None:
    report = dict(REPORT, configs=[{"name": "x\\", "server_config": {"LLAMA_ARG_SPEC_TYPE": "ngram-mod"}}],
                  verdicts=[], confirmatory={"endpoint": "e2e", "verdicts": {"x\\": WIN_ROW}})
    text = promote_env(CURRENT, report, "x\\")
    assert read_env_values(text)["LLAMA_ARG_SPEC_TYPE"] == "ngram-mod"
    assert not any(line.startswith("#") and line.endswith("\\") for line in text.splitlines())


def test_a_run_of_another_unit_is_never_promoted_onto_this_one() -> None:
    measured = dict(REPORT, environment={"unit": "llama-big"})
    # the same unit, named with or without .service: promoted
    assert promotion_record(measured, "ngram-mod", unit="llama-big.service")["config"] == "ngram-mod"
    assert promotion_record(measured, "ngram-mod", unit="llama-big")["config"] == "ngram-mod"
    # another unit: refused, force or not, naming both and the fix
    for force in (False, True):
        with pytest.raises(AnsibleFilterError,
                           match=r"measured unit llama-big, not llama-small: .*specdec_promote_run"):
            promotion_record(measured, "ngram-mod", force=force, unit="llama-small")
    # a report written before the unit was recorded: the history per unit chose it
    assert promotion_record(REPORT, "ngram-mod", unit="llama-small")["config"] == "ngram-mod"
    with pytest.raises(AnsibleFilterError, match=r"specdec_promote_unit: unit '\.\./x'"):
        promotion_record(measured, "ngram-mod", unit="../x")


def test_the_newest_run_is_the_newest_of_this_unit() -> None:
    from ansible_collections.llmfleet.specdec.plugins.plugin_utils.steps._steps_host_state import ab_history_last

    history = "\n".join([
        '{"run_id": "20261101T000000Z-aaaaaa"}',  # before history was kept per unit: counts for every unit
        '{"run_id": "20261102T000000Z-bbbbbb", "unit": "llama-small.service"}',
        '{"run_id": "20261103T000000Z-cccccc", "unit": "llama-big.service"}',
    ])
    assert ab_history_last(history, "h", "llama-small") == "20261102T000000Z-bbbbbb"
    assert ab_history_last(history, "h", "llama-big") == "20261103T000000Z-cccccc"
    assert ab_history_last(history, "h", "llama-other") == "20261101T000000Z-aaaaaa"
    assert ab_history_last(history, "h") == "20261103T000000Z-cccccc"
    with pytest.raises(AnsibleFilterError, match="ab_history_last: unit"):
        ab_history_last(history, "h", "bad unit/../")


def test_a_win_on_the_built_in_mix_is_not_promoted_without_declared_traffic_unless_forced() -> None:
    built_in = dict(REPORT, confirmatory=dict(REPORT["confirmatory"], declared=False, weights_from="the built-in mix",
                                              weights={"prose": 0.5, "echo": 0.5}))
    with pytest.raises(AnsibleFilterError, match=r"judged on the built-in mix \(prose 50%, echo 50%\).*"
                                                 r"specdec_ab_traffic.*specdec_promote_force=true"):
        promotion_record(built_in, "ngram-mod")
    forced = promotion_record(built_in, "ngram-mod", force=True)
    assert forced["forced"] is True and forced["traffic"] == "built-in" and forced["verdict"] == "WIN"
    assert "BUILT-IN mix" in forced["table"][1]
    # a report written before the flag said so in words: the same refusal
    old = dict(REPORT, confirmatory=dict(REPORT["confirmatory"], weights_from="equal weights over the measured shapes"))
    with pytest.raises(AnsibleFilterError, match="built-in mix"):
        promotion_record(old, "ngram-mod")
    # declared traffic: promoted, not forced
    assert promotion_record(REPORT, "ngram-mod")["traffic"] == "declared"


def test_a_smoke_run_is_never_promoted_even_forced() -> None:
    smoke = dict(REPORT, confirmatory=dict(REPORT["confirmatory"], smoke=True))
    for force in (False, True):
        with pytest.raises(AnsibleFilterError, match=r"smoke run \(spec_ab_smoke\).*never promoted, force or not"):
            promotion_record(smoke, "ngram-mod", force=force)
    assert promotion_record(dict(REPORT, confirmatory=dict(REPORT["confirmatory"], smoke=False)),
                            "ngram-mod")["verdict"] == "WIN"


def test_a_win_of_a_run_that_withheld_its_recommendation_is_no_promotion() -> None:
    """After a failed or incomplete baseline start the run recommends nothing (issue 49, item 6): promote.yml's gate
    must say the same as the report, not promote the candidate's own WIN."""
    from ansible_collections.llmfleet.specdec.plugins.plugin_utils.steps._steps_promote import confirmatory_gate

    row = {"verdict": "WIN", "ratio": 1.5, "low": 1.3, "high": 1.7}
    conf = {"endpoint": "e2e", "declared": True, "win_margin": 0.05, "verdicts": {"draft": row}}
    assert confirmatory_gate({"confirmatory": conf}, "draft")["win"] is True
    why = "the baseline 'baseline' is FAILED: no recommendation from partial baseline data"
    gate = confirmatory_gate({"confirmatory": dict(conf, recommendation=None, recommendation_why=why)}, "draft")
    assert gate["win"] is False and gate["verdict"] == "WIN"
    assert "recommends nothing: the baseline 'baseline' is FAILED" in gate["why"]


@pytest.mark.parametrize("load, promoted", [
    ({"verdict": "NON-INFERIOR", "ratio": 1.2, "low": 1.05, "high": 1.35}, True),
    ({"verdict": "INFERIOR", "ratio": 0.54, "low": 0.45, "high": 0.62}, False),
    ({"verdict": "NOT SHOWN", "ratio": 0.98, "low": 0.80, "high": 1.19}, False),
])
def test_a_win_on_one_stream_is_promoted_only_when_it_holds_at_the_units_concurrency(load, promoted) -> None:
    """Issue 49, item 7: the gate reads the verdict under load, not only the single-stream WIN (published: +27 % on
    one stream, -46 % at four)."""
    from ansible_collections.llmfleet.specdec.plugins.plugin_utils.steps._steps_promote import confirmatory_gate

    row = {"verdict": "WIN", "ratio": 1.27, "low": 1.1, "high": 1.45, "load": load}
    conf = {"endpoint": "e2e", "declared": True, "win_margin": 0.02, "margin": 0.05, "streams": 4,
            "verdicts": {"mtp": row}}
    gate = confirmatory_gate({"confirmatory": conf}, "mtp")
    assert gate["win"] is promoted and gate["verdict"] == "WIN"
    if not promoted:
        assert "at 4 concurrent streams" in gate["why"] and gate["under_load"]["verdict"] == load["verdict"]
