"""Lossless versus lossy-by-design judging: the classification, the references, the quality numbers, promotion."""
from __future__ import annotations

import pytest
from ab_runs import greedy_text, make_run
from ansible.errors import AnsibleFilterError

from ansible_collections.llmfleet.specdec.plugins.module_utils.bench import _quality as q
from ansible_collections.llmfleet.specdec.plugins.plugin_utils.report import _report as rp
from ansible_collections.llmfleet.specdec.plugins.plugin_utils.steps._steps_promote import promote_env, promotion_record
from ansible_collections.llmfleet.specdec.plugins.plugin_utils.verdicts import _judge as jd

DRAFT = {"LLAMA_ARG_SPEC_TYPE": "draft-simple", "LLAMA_ARG_SPEC_DRAFT_MODEL": "/m/draft.gguf"}
Q4 = {"LLAMA_ARG_MODEL": "/m/target-q4_0.gguf"}
KV = {"LLAMA_ARG_CACHE_TYPE_K": "q8_0"}
SPEC = {"chain": ["draft-simple"], "draft": (30, 20)}


def altered(shape: str, prompt: int, *_dummy: int) -> str:
    """The quantized model's greedy text: prompt 0 of each shape differs from character 10 on."""
    text = greedy_text(shape, prompt)
    return text if prompt else text[:10] + "X" + text[11:]


# ------------------------------------------------------------------------------------ classify

def test_speculative_settings_only_must_be_lossless():
    c = q.classify(DRAFT, {}, "draft")
    assert c["judging"] == q.LOSSLESS
    assert c["source"] == "inferred: changes only speculative settings"
    assert c["speculative"] == ["--spec-draft-model", "--spec-type"]


@pytest.mark.parametrize("env, kind", [
    (KV, "KV cache type"), (Q4, "model file"), ({"LLAMA_ARG_UBATCH": "64"}, "batch/ubatch"),
    ({"LLAMA_ARG_N_PARALLEL": "4"}, "slot split"),
    # a flag with no env name travels in LLAMA_EXTRA_ARGS and is read like llama-server reads it
    ({"LLAMA_EXTRA_ARGS": "-ctv q4_0"}, "KV cache type"),
])
def test_knobs_that_change_the_numbers_are_lossy_by_design(env, kind):
    base = {"LLAMA_ARG_MODEL": "/m/target.gguf"}
    c = q.classify({**base, **env}, base, "knob")
    assert c["judging"] == q.LOSSY
    assert [n["kind"] for n in c["numerics"]] == [kind]
    assert c["source"].startswith("inferred: changes " + kind)


def test_the_same_value_as_the_baseline_changes_nothing():
    base = {"LLAMA_ARG_MODEL": "/m/target.gguf", "LLAMA_ARG_THREADS": "1"}
    c = q.classify({**base, "LLAMA_ARG_THREADS": "2", **DRAFT}, base, "draft-t2")
    assert c["judging"] == q.LOSSLESS and not c["numerics"] and not c["other"]


def test_unknown_knob_is_strict_and_named():
    c = q.classify({"LLAMA_ARG_TOP_K": "5"}, {}, "topk")
    assert c["judging"] == q.LOSSLESS
    assert "--top-k" in c["source"] and "declare lossless: false" in c["source"]


def test_declarations_win_but_speculation_cannot_be_declared_lossy():
    assert q.classify(KV, {}, "kv", declared=True)["judging"] == q.LOSSLESS
    assert q.classify({"LLAMA_ARG_TOP_K": "5"}, {}, "topk", declared="false")["judging"] == q.LOSSY
    with pytest.raises(q.QualityError, match="config draft: declares lossless: false but changes only speculative"):
        q.classify(DRAFT, {}, "draft", declared=False)
    with pytest.raises(q.QualityError, match="config kv: lossless must be true or false"):
        q.classify(KV, {}, "kv", declared="maybe")


# ------------------------------------------------------------------------------------ quality numbers

def test_compare_counts_characters_and_word_pieces():
    c = q.compare("the quick brown fox", "the quick red fox")
    assert not c["identical"]
    assert c["first_char"] == 10 and c["first_piece"] == 2
    assert (c["agree"], c["common"]) == (3, 4)
    same = q.compare("a b", "a b")
    assert same["identical"] and same["first_char"] is None and same["agree"] == same["common"] == 2


# ------------------------------------------------------------------------------------ judging a run

def kv_run(text=altered, **extra):
    return make_run({"baseline": {}, "kv-q8_0": {"server_config": KV, "speedup": 1.3, "text": text}, **extra},
                    shapes=("prose", "echo"), mix={"prose": 1, "echo": 1})


def test_lossy_config_gets_speed_verdicts_and_quality_not_invalid():
    j = jd.judge(kv_run())
    c = j["configs"]["kv-q8_0"]
    assert c["status"] == jd.OK and c["role"] == "knob"
    assert c["lossless"] == q.LOSSY_LABEL
    assert c["judging"]["judging"] == q.LOSSY and c["judging"]["reference"] == "baseline"
    for shape in ("prose", "echo"):
        assert c["shapes"][shape]["verdict"] == "WIN"
        assert c["shapes"][shape]["lossless"] == q.LOSSY_LABEL
        qs = c["quality"]["shapes"][shape]
        # two prompts per shape, prompt 0 differs at character 10
        assert (qs["prompts"], qs["identical"], qs["identical_share"]) == (2, 1, 0.5)
        assert qs["first_difference_chars"] == 10.0
        assert 0.5 < qs["token_agreement"] < 1.0
    assert c["quality"]["overall"]["prompts"] == 4
    # never recommended automatically: speed bought with quality is the operator's decision
    rec = j["recommendation"]
    assert rec["keep_baseline"] and rec["config"] == "baseline"
    assert [e["config"] for e in rec["excluded"]] == ["kv-q8_0"]
    assert "operator's decision" in rec["excluded"][0]["reason"]


def test_identical_lossy_config_shows_full_agreement():
    c = jd.judge(kv_run(text=None))["configs"]["kv-q8_0"]
    assert c["status"] == jd.OK and c["quality"]["overall"]["identical_share"] == 1.0
    assert c["quality"]["overall"]["token_agreement"] == 1.0
    assert c["quality"]["overall"]["first_difference_chars"] is None


def test_speculative_config_is_still_invalid_on_any_difference():
    run = make_run({"baseline": {}, "draft": {**SPEC, "server_config": DRAFT, "text": altered}})
    c = jd.judge(run)["configs"]["draft"]
    assert c["status"] == jd.INVALID and c["lossless"] is False
    assert c["judging"]["judging"] == q.LOSSLESS and c["quality"] is None


def mixed_run(mixed_text):
    return make_run({
        "baseline": {},
        "q4": {"server_config": Q4, "speedup": 1.5, "text": altered},
        "q4+draft": {**SPEC, "server_config": {**Q4, **DRAFT}, "speedup": 1.8, "text": mixed_text},
    }, shapes=("prose",))


def test_mixed_config_is_lossless_against_the_same_numerics_without_speculation():
    j = jd.judge(mixed_run(altered))
    c = j["configs"]["q4+draft"]
    assert c["judging"]["judging"] == q.LOSSLESS and c["judging"]["reference"] == "q4"
    assert c["status"] == jd.OK and c["lossless"] is True
    # quality against the baseline beside it: the numerics still differ from production's
    assert c["quality"]["overall"]["identical"] == 1
    assert j["configs"]["q4"]["judging"]["judging"] == q.LOSSY
    md = rp.markdown(rp.build_document(mixed_run(altered), j))
    assert "## Lossless or lossy by design" in md
    assert "- q4+draft: **lossless** (inferred: speculation layered on model file" in md and "reference: q4" in md


def test_mixed_config_differing_from_its_reference_is_invalid():
    # the same text as the baseline is wrong here: its reference (the quantized model alone) differs
    c = jd.judge(mixed_run(None))["configs"]["q4+draft"]
    assert c["status"] == jd.INVALID and c["lossless"] is False


def test_mixed_config_without_a_reference_is_lossy_and_says_its_speculation_is_unverified():
    run = make_run({"baseline": {}, "q4+draft": {**SPEC, "server_config": {**Q4, **DRAFT}, "text": altered}},
                   shapes=("prose",))
    j = jd.judge(run)
    c = j["configs"]["q4+draft"]
    assert c["judging"]["judging"] == q.LOSSY and c["status"] == jd.OK
    assert any("speculation is unverified" in w for w in j["warnings"])


def test_report_shows_quality_table_and_warning():
    run = kv_run()
    doc = rp.build_document(run, jd.judge(run))
    md = rp.markdown(doc)
    assert "| kv-q8_0 | prose | 2 | 1 (50.0 %) | 10.0 |" in md
    assert "Speed bought with quality is the operator's decision" in md
    assert "| kv-q8_0 | OK | lossy by design |" in md


# ------------------------------------------------------------------------------------ promotion

def test_promoting_a_lossy_winner_needs_the_acknowledgement_and_records_the_quality():
    run = kv_run()
    doc = rp.build_document(run, jd.judge(run))
    with pytest.raises(AnsibleFilterError, match="specdec_promote_accept_lossy=true"):
        promotion_record(doc, "kv-q8_0")
    with pytest.raises(AnsibleFilterError, match="lossy by design"):
        promote_env("LLAMA_ARG_MODEL=/m/target.gguf\n", doc, "kv-q8_0")
    record = promotion_record(doc, "kv-q8_0", accept_lossy=True)
    assert record["judging"]["quality"]["overall"]["identical"] == 2
    assert record["judging"]["accepted"] == "specdec_promote_accept_lossy=true"
    assert any("lossy by design, identical on 2 of 4 prompts" in line for line in record["table"])
    text = promote_env("LLAMA_ARG_MODEL=/m/target.gguf\n", doc, "kv-q8_0", accept_lossy=True)
    assert "LLAMA_ARG_CACHE_TYPE_K=q8_0" in text and "lossy by design" in text


def test_promoting_a_lossless_winner_is_unchanged():
    # judged on declared traffic: a winner of the built-in mix needs specdec_promote_force (test_promote)
    run = make_run({"baseline": {}, "draft": {**SPEC, "server_config": DRAFT, "speedup": 1.4}},
                   mix={"prose": 0.8, "identity": 0.2})
    doc = rp.build_document(run, jd.judge(run))
    record = promotion_record(doc, "draft")
    assert "judging" not in record


# ------------------------------------------------------------------------------------ preflight

def test_preflight_says_how_a_config_is_judged_and_refuses_speculation_declared_lossy():
    from ansible_collections.llmfleet.specdec.plugins.plugin_utils.steps._steps_preflight import (
        preflight_results,
        preflight_table,
    )

    prod = {"LLAMA_ARG_MODEL": "/m/target.gguf"}
    configs = [{"name": "baseline"}, {"name": "kv", "env": KV}, {"name": "draft", "env": DRAFT},
               {"name": "cheat", "env": DRAFT, "lossless": False}]
    rendered = {c["name"]: {"env": {**prod, **(c.get("env") or {})}, "override": dict(c.get("env") or {})}
                for c in configs}
    lint = [{"ok": True, "effective_chain": ["draft-simple"] if c.get("env") == DRAFT else []} for c in configs]
    budget = {"kv_budget": {"fits": True, "against_baseline": {"summary": "KV 0.53x (4.00 MiB -> 2.12 MiB); weights same"}}}
    results = preflight_results(configs, lint, [budget] * 4, [], rendered, prod, "baseline")
    by = {r["name"]: r for r in results}
    assert by["baseline"]["judged_as"] == "baseline"
    assert by["kv"]["judged_as"] == "lossy by design (KV cache type)"
    assert by["kv"]["memory"].startswith("KV 0.53x")
    assert by["draft"]["judged_as"] == "lossless"
    assert by["cheat"]["legal"] is False and "remove lossless: false" in by["cheat"]["error"]
    assert preflight_table(results)[0].endswith("| judged as | memory vs baseline")


def test_memory_change_ratios():
    from ansible_collections.llmfleet.specdec.plugins.module_utils.memory._knobs import memory_change

    def budget(kv, weights, draft=None):
        out = {"target": {"total_bytes": kv, "weights_by_device": {"CPU": weights}, "cache_type_k": "f16",
                          "cache_type_v": "f16"}, "draft": None}
        if draft:
            out["draft"] = {"total_bytes": draft[0], "weights_by_device": {"CPU": draft[1]}}
        return out

    m = memory_change(budget(50, 100), budget(100, 100))
    assert (m["kv_ratio"], m["weights_ratio"]) == (0.5, 1.0) and m["summary"].endswith("weights same")
    m = memory_change(budget(100, 100, draft=(50, 50)), budget(100, 100))
    assert (m["kv_ratio"], m["weights_ratio"]) == (1.5, 1.5)
    no_tensors = budget(100, 100)
    no_tensors["target"]["weights_by_device"] = None
    assert memory_change(no_tensors, budget(100, 100))["weights_ratio"] is None


def test_kv_budget_module_reports_the_knob_against_the_baseline(tmp_path, capsys):
    import json

    from ansible.module_utils.testing import patch_module_args

    from ansible_collections.llmfleet.specdec.plugins.modules import kv_budget
    from testbed.models import STANDARD_SET, write_model

    paths = {n: str(write_model(tmp_path / n, STANDARD_SET[n].spec)) for n in ("target.gguf", "target-q4_0.gguf")}
    base = {"LLAMA_ARG_MODEL": paths["target.gguf"], "LLAMA_ARG_CTX_SIZE": "2048", "LLAMA_ARG_N_PARALLEL": "1"}

    def run(env):
        with patch_module_args({"env": env, "baseline_env": base}), pytest.raises(SystemExit):
            kv_budget.main()
        return json.loads(capsys.readouterr().out)

    out = run({**base, "LLAMA_ARG_CACHE_TYPE_K": "q4_0", "LLAMA_ARG_CACHE_TYPE_V": "q4_0", "LLAMA_ARG_FLASH_ATTN": "on"})
    assert out["changed"] is False
    # q4_0 stores 32 values in 18 bytes, f16 in 64: the cache shrinks to 0.28x, the weights stay
    assert out["kv_budget"]["against_baseline"]["kv_ratio"] == 18 / 64
    assert out["kv_budget"]["against_baseline"]["weights_ratio"] == 1.0
    out = run({**base, "LLAMA_ARG_MODEL": paths["target-q4_0.gguf"]})
    assert out["kv_budget"]["against_baseline"]["kv_ratio"] == 1.0
    assert out["kv_budget"]["against_baseline"]["weights_ratio"] < 0.25
    with patch_module_args({"env": base, "baseline_env": {"LLAMA_ARG_CTX_SIZE": "2048"}}), pytest.raises(SystemExit):
        kv_budget.main()
    failed = json.loads(capsys.readouterr().out)
    assert failed["failed"] and "baseline_env: give the baseline's LLAMA_ARG_MODEL" in failed["msg"]


def test_summary_lines_and_report_configs_carry_the_judging():
    from ansible_collections.llmfleet.specdec.plugins.plugin_utils.steps._steps_ab import ab_report_configs

    run = kv_run()
    lines = rp.summary_lines(rp.build_document(run, jd.judge(run)))
    assert ("quality of kv-q8_0 against the baseline (lossy by design: the operator's decision): identical on 2 of 4 "
            "prompts, first difference at char 10.0") in "\n".join(lines)
    lines = rp.summary_lines(rp.build_document(mixed_run(altered), jd.judge(mixed_run(altered))))
    assert "q4+draft: lossless against q4 (the same numerics without its speculation)" in lines
    out = ab_report_configs([{"name": "kv", "env": KV, "lossless": False}, {"name": "d", "env": DRAFT}], {})
    assert out[0]["lossless"] is False and "lossless" not in out[1]
