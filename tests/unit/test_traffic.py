"""The operator's own traffic: JSONL files as named shapes, their errors, and the n-gram overlap check."""
from __future__ import annotations

import json

import pytest

from ansible_collections.llmfleet.specdec.plugins.module_utils.bench import _endpoint as ep
from ansible_collections.llmfleet.specdec.plugins.module_utils.bench import _shapes, _traffic
from ansible_collections.llmfleet.specdec.plugins.module_utils.bench._traffic import TrafficError, load_traffic

SECRET = "the launch code is 0000-SECRET"
CHAT = json.dumps({"messages": [{"role": "system", "content": "Be brief."},
                                {"role": "user", "content": [{"type": "text", "text": "Summarise: "},
                                                             {"type": "text", "text": "a b c"}]}],
                   "temperature": 0.7, "max_tokens": 999})
COMPLETION = json.dumps({"prompt": "Once upon a time"})
PLAIN = json.dumps("Write a haiku about rivers.")


def shape(content: str, name: str = "support", n_predict: int = 32, api: str = "openai") -> _traffic.CustomShape:
    return load_traffic([{"name": name, "content": content, "source": "files/support.jsonl",
                          "n_predict": n_predict}], api)[name]


def test_three_forms_and_blank_lines_parse_in_file_order() -> None:
    s = shape(f"{CHAT}\n\n{COMPLETION}\n{PLAIN}\n")
    assert [r["line"] for r in s.requests] == [1, 3, 4]
    p = s.prompts(3)
    assert p[0].messages() == [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Summarise: a b c"}]
    assert p[1].messages() == [{"role": "user", "content": "Once upon a time"}]
    assert p[1].prompt == "Once upon a time" and p[2].prompt == "Write a haiku about rivers."
    assert {x.n_predict for x in p} == {32}  # the shape's budget, not the request's max_tokens
    assert p[0].shape == "support" and [x.index for x in p] == [0, 1, 2]


def test_a_short_file_is_reused_and_says_so() -> None:
    p = shape(f"{PLAIN}\n{COMPLETION}").prompts(3)
    assert p[2].prompt == p[0].prompt and p[2].sha256 != p[0].sha256
    assert p[0].checks["reused"] is True and p[0].checks["file_prompts"] == 2


@pytest.mark.parametrize("content, line, fix", [
    (f"{PLAIN}\n{{\"prompt\": \"{SECRET}\"", 2, "not valid JSON"),
    (f"{PLAIN}\n[\"{SECRET}\"]", 2, "expected a JSON object"),
    (f"{PLAIN}\n\n{{\"messages\": [{{\"role\": \"wizard\", \"content\": \"{SECRET}\"}}]}}", 3, "messages[0] must be"),
    (f"{{\"prompt\": \"{SECRET}\", \"messages\": []}}", 1, "not both"),
    ("{\"prompt\": \"  \"}", 1, "non-empty string"),
    (f"{{\"messages\": [{{\"role\": \"user\", \"content\": [{{\"type\": \"image_url\", \"url\": \"{SECRET}\"}}]}}]}}",
     1, "only text"),
    ("\"\"", 1, "the prompt is empty"),
])
def test_a_bad_line_is_named_by_file_and_line_never_by_its_text(content: str, line: int, fix: str) -> None:
    with pytest.raises(TrafficError) as err:
        shape(content)
    msg = str(err.value)
    assert f"traffic 'support' (files/support.jsonl, line {line})" in msg
    assert fix in msg
    assert "SECRET" not in msg and "0000" not in msg


def test_empty_file_wrong_names_and_budgets_are_refused() -> None:
    with pytest.raises(TrafficError, match=r"files/support.jsonl\): the file holds no request"):
        shape("\n  \n")
    with pytest.raises(TrafficError, match="is a built-in shape"):
        shape(PLAIN, name="echo")
    with pytest.raises(TrafficError, match="cannot name a shape"):
        shape(PLAIN, name="../x")
    with pytest.raises(TrafficError, match="n_predict: expected a whole number >= 1"):
        shape(PLAIN, n_predict=0)
    with pytest.raises(TrafficError, match="listed twice"):
        load_traffic([{"name": "a", "content": PLAIN, "n_predict": 4}] * 2)


def test_chat_needs_the_openai_api() -> None:
    with pytest.raises(TrafficError, match=r"line 2\): a chat request \(messages\) needs the OpenAI API; set api: openai"):
        shape(f"{PLAIN}\n{CHAT}", api="llamacpp")
    assert shape(f"{PLAIN}\n{COMPLETION}", api="llamacpp").prompts(1)[0].prompt.startswith("Write")


def test_custom_shapes_follow_the_built_in_ones_in_the_bench_plan() -> None:
    custom = {"support": shape(f"{PLAIN}\n{COMPLETION}\n{PLAIN}")}
    warm, schedule, measured = ep.plan_requests(sizes={"prose": {"chars": 200, "n_predict": 8}}, shapes=["prose"],
                                                prompts_per_shape=1, repeats=2, warmup=2, custom=custom)
    assert [p.shape for _dummy, p in schedule] == ["prose", "support", "prose", "support"]
    assert [p.prompt for _dummy, p in schedule if p.shape == "support"] == [
        "Write a haiku about rivers.", "Once upon a time"]
    assert list(measured) == ["prose", "support"]
    assert [p.shape for p in warm] == ["prose", "support"]
    # without custom shapes the plan is what it was
    assert _shapes.check_shapes(["prose"]) == ["prose"]


def test_overlap_says_whether_ngram_can_help() -> None:
    p = shape(f"{PLAIN}\n{json.dumps('Repeat: alpha beta gamma delta epsilon zeta')}").prompts(2)
    texts = {p[0].sha256: "Rivers run, stones stay.", p[1].sha256: "alpha beta gamma delta epsilon zeta"}
    c = _traffic.overlap_checks(p, texts)
    assert c["answers_checked"] == 2
    assert c["prompt_output_overlap_chars"] == len("alpha beta gamma delta epsilon zeta")
    assert c["ngram_can_help"] is True
    c = _traffic.overlap_checks(p[:1], texts)
    assert c["ngram_can_help"] is False and c["prompt_output_overlap_chars"] < _traffic.NGRAM_OVERLAP_CHARS
    assert _traffic.overlap_checks(p, {})["ngram_can_help"] is None


def test_the_report_says_per_shape_whether_ngram_can_help(monkeypatch: pytest.MonkeyPatch) -> None:
    import ab_runs

    from ansible_collections.llmfleet.specdec.plugins.plugin_utils.report import _report
    from ansible_collections.llmfleet.specdec.plugins.plugin_utils.verdicts import _judge

    monkeypatch.setitem(ab_runs.BASE_RATE, "support", 40.0)
    run = ab_runs.make_run({"baseline": {}, "x": {"speedup": 1.1, "chain": ["ngram-mod"]}}, rounds=1,
                           shapes=("echo", "support"))
    for e in run["entries"]:
        e["bench"]["shapes"]["echo"]["ngram"] = {"answers_checked": 4, "prompt_output_overlap_chars": 900,
                                                 "output_repeated_chars": 40, "ngram_threshold_chars": 16,
                                                 "ngram_can_help": True}
        e["bench"]["shapes"]["support"]["checks"] = {"source": "files/support.jsonl"}
        e["bench"]["shapes"]["support"]["ngram"] = {"answers_checked": 4, "prompt_output_overlap_chars": 9,
                                                    "output_repeated_chars": 12, "ngram_threshold_chars": 16,
                                                    "ngram_can_help": False}
    text = _report.markdown(_report.build_document(run, _judge.judge(run, n_boot=200)))
    assert "## Can n-gram drafting help?" in text
    assert "| echo | built-in | 4 | 900 | 40 | yes |" in text
    assert "| support | files/support.jsonl | 4 | 9 | 12 | no |" in text
