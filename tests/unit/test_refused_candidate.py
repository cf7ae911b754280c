"""One candidate the preflight cannot read is refused with its reason, the others are judged (and run); a filter
step's error reaches the operator as one line, without Ansible's wrapping."""
from __future__ import annotations

from ansible_collections.llmfleet.specdec.plugins.filter.internal import error_line, internal
from ansible_collections.llmfleet.specdec.plugins.plugin_utils.steps._steps_preflight import (
    preflight_results,
    preflight_table,
)

MISSING = ("draft (the config's --spec-draft-model)=/nonexistent/draft.gguf: no such file; give the path of an "
           "existing GGUF file (or its facts from gguf_info)")


def _lint_ok() -> dict:
    return {"ok": True, "errors": [], "silent_off": [], "lint_warnings": [], "effective_chain": ["ngram-mod"]}


def test_a_config_spec_lint_could_not_read_is_refused_and_the_others_judged() -> None:
    configs = [{"name": "baseline", "env": {}}, {"name": "missing-draft", "env": {}}, {"name": "ngram", "env": {}}]
    # the role's lint loop runs with failed_when: false: the failing item keeps its msg, failed is false
    lint = [_lint_ok(), {"failed": False, "msg": MISSING, "item": configs[1]}, _lint_ok()]
    kv = [{"kv_budget": {"fits": True}}, {"failed": False, "skipped": True}, {"kv_budget": {"fits": True}}]
    results = preflight_results(configs, lint, kv, [])
    by_name = {r["name"]: r for r in results}
    assert by_name["missing-draft"]["legal"] is False
    assert by_name["missing-draft"]["errors"] == [{"code": "unreadable", "reason": MISSING}]
    assert by_name["baseline"]["legal"] is True and by_name["ngram"]["legal"] is True
    table = preflight_table(results)
    assert f"missing-draft | ERROR: {MISSING} | - | - | - | - | - | -" in table
    assert not any(line.startswith("  missing-draft:") for line in table)  # its row says it all, once


def test_a_step_asked_with_a_question_mark_returns_its_error_as_a_value() -> None:
    good = internal([{"name": "baseline", "env": {}}], "ab_expand?", "baseline")
    assert good == {"value": [{"name": "baseline", "env": {}, "base": "baseline"}], "error": ""}
    bad = internal([{"name": "draft", "env": {}}], "ab_expand?", "baseline")
    assert bad["value"] is None
    assert bad["error"] == ("specdec_configs: no config named 'baseline' (the baseline every round includes)")


def test_error_line_strips_ansibles_wrapping_and_joins_the_lines() -> None:
    wrapped = ("Task failed: Finalization of task args for 'ansible.builtin.set_fact' failed: Error while resolving "
               "value for 'x': The filter plugin 'llmfleet.specdec.internal' failed: specdec_configs: two configs "
               "are named 'a'")
    assert error_line(wrapped) == "specdec_configs: two configs are named 'a'"
    assert error_line("unit x: the drop-in\n  sets ExecStart=; fold it in") == "unit x: the drop-in sets ExecStart=; fold it in"
    assert error_line("spec_ab_max_rounds (0) must be 1 or more") == "spec_ab_max_rounds (0) must be 1 or more"
