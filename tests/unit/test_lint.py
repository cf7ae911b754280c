"""spec_lint's llama.cpp rules, one per test, on header facts shaped like gguf_info's (no server here)."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from ansible.module_utils.testing import patch_module_args

from ansible_collections.llmfleet.specdec.plugins.module_utils.common._errors import SpecdecError
from ansible_collections.llmfleet.specdec.plugins.module_utils.lint import _lint
from ansible_collections.llmfleet.specdec.plugins.module_utils.llamacpp import _llamacpp
from ansible_collections.llmfleet.specdec.plugins.module_utils.llamacpp._flags import parse
from ansible_collections.llmfleet.specdec.plugins.modules import spec_lint as spec_lint_module


def facts(arch: str = "llama", *, nextn: int = 0, n_layer: int = 4, n_embd: int = 128, heads: int = 4,
          kv_heads: int = 2, recurrent: list[int] | None = None, swa: int | None = None, ctx: int = 4096,
          autodetect: str | None = None, values: dict[str, Any] | None = None, name: str | None = None
          ) -> dict[str, Any]:
    recurrent = recurrent or []
    return {
        "architecture": arch, "name": name or f"{arch}-{n_layer}L", "block_count": n_layer,
        "context_length": ctx, "embedding_length": n_embd, "head_count": heads, "head_count_kv": kv_heads,
        "key_length": None, "value_length": None, "sliding_window": swa, "sliding_window_pattern": None,
        "recurrent_layers": recurrent, "kv_layers": [i for i in range(n_layer - nextn) if i not in recurrent],
        "mtp": {"nextn_predict_layers": nextn, "tensors": [f"blk.{n_layer - 1}.nextn.eh_proj.weight"] if nextn else [],
                "has_mtp": bool(nextn)},
        "spec_type_autodetect": autodetect, "values": values or {},
        "tokenizer": {"model": "gpt2", "pre": "gpt-2", "vocab_size": 300},
    }


LLAMA = facts()
DRAFT = facts(n_layer=2, name="draft")
QWEN35_MTP = facts("qwen35", nextn=1, recurrent=[0, 1, 2], autodetect="draft-mtp")
QWEN35 = facts("qwen35", recurrent=[0, 1, 2])
GLM4_NEXTN = facts("glm4", nextn=1, autodetect="draft-mtp")
MTP_ONLY = facts("qwen35", nextn=1, n_layer=1, autodetect="draft-mtp", name="mtp-only")
DFLASH = facts("dflash", n_layer=1, swa=2048, autodetect="draft-dflash",
               values={"dflash.target_layers": [1, 2], "dflash.block_size": 16})
DSPARK = facts("dflash", n_layer=5, autodetect="draft-dspark", values={"dflash.target_layers": [1, 2]})
EAGLE3 = facts("eagle3", n_layer=1, values={"eagle3.target_layers": [1, 2, 3]})
OK = {"compatible": True, "reasons": []}
BAD = {"compatible": False, "reasons": ["token 256 differs: target 'Ġt', draft 'he'"]}


def lint(flags: list[str], target: dict | None = LLAMA, draft: dict | None = None, compat: dict | None = None,
         build: Any = None, env: dict | None = None) -> dict[str, Any]:
    return _lint.lint_llamacpp(parse(flags, env or {}), target, draft, compat, build)


def codes(result: dict[str, Any], kind: str) -> list[str]:
    return [f["code"] for f in result[kind]]


def only(result: dict[str, Any], kind: str, code: str) -> dict[str, str]:
    found = [f for f in result[kind] if f["code"] == code]
    assert len(found) == 1, result
    return found[0]


# ---------------------------------------------------------------- vocabulary, build gates, parse stage


def test_vocabulary_is_the_pinned_map_and_renames_mtp_before_b9180() -> None:
    assert _llamacpp.spec_type_vocabulary(None) == _llamacpp.SPEC_TYPES
    assert "draft-mtp" in _llamacpp.spec_type_vocabulary(9180) and "mtp" not in _llamacpp.spec_type_vocabulary(9180)
    old = _llamacpp.spec_type_vocabulary(9179)
    assert "mtp" in old and "draft-mtp" not in old


@pytest.mark.parametrize("given, expected", [(None, None), ("", None), ("b10133", 10133), ("9180", 9180),
                                             (9000, 9000), (" b42 ", 42)])
def test_parse_build(given: Any, expected: int | None) -> None:
    assert _llamacpp.parse_build(given) == expected


@pytest.mark.parametrize("bad", ["latest", "b10133x", True])
def test_bad_build_is_an_error_naming_it(bad: Any) -> None:
    with pytest.raises(SpecdecError, match="build="):
        _llamacpp.parse_build(bad)


def test_unknown_spec_type_refuses() -> None:
    r = lint(["--spec-type", "ngram-mod,draft-bogus"])
    assert r["outcome"] == "refuses" and codes(r, "errors") == ["spec-type-unknown"]
    assert "unknown speculative type: draft-bogus" in r["errors"][0]["reason"] and not r["effective_chain"]


def test_old_mtp_name_refuses_on_the_pinned_build() -> None:
    r = lint(["--spec-type", "mtp"])
    f = only(r, "errors", "spec-type-renamed")
    assert r["outcome"] == "refuses" and f["fix"] == "use --spec-type draft-mtp"
    assert "not a silently disabled speculation" in f["reason"]


def test_old_mtp_env_name_refuses_too() -> None:
    r = lint([], env={"LLAMA_ARG_SPEC_TYPE": "mtp"})
    assert r["outcome"] == "refuses" and codes(r, "errors") == ["spec-type-renamed"]


def test_mtp_is_the_mtp_type_before_b9180_and_draft_mtp_is_unknown_there() -> None:
    r = lint(["--spec-type", "mtp"], target=QWEN35_MTP, build="b9100")
    assert r["outcome"] == "serves-with-speculation" and r["effective_chain"] == ["draft-mtp"]
    assert "old-build" in codes(r, "warnings")
    r = lint(["--spec-type", "draft-mtp"], target=QWEN35_MTP, build="b9100")
    assert r["outcome"] == "refuses" and "use --spec-type mtp" in only(r, "errors", "spec-type-renamed")["fix"]


def test_names_after_none_are_never_read_but_names_before_it_are() -> None:
    r = lint(["--spec-type", "none,draft-bogus"])
    assert r["outcome"] == "serves-without-speculation" and r["errors"] == []
    assert lint(["--spec-type", "draft-bogus,none"])["outcome"] == "refuses"


def test_empty_item_from_a_stray_comma_refuses() -> None:
    assert codes(lint(["--spec-type", "ngram-mod,"]), "errors") == ["spec-type-empty"]


def test_removed_flag_refuses_with_its_replacement() -> None:
    r = lint(["--spec-type", "ngram-mod", "--draft-max", "8"])
    f = only(r, "errors", "removed-flag")
    assert r["outcome"] == "refuses" and f["fix"] == "use --spec-draft-n-max or --spec-ngram-mod-n-max"


def test_removed_flag_on_an_older_build_is_only_unverified() -> None:
    r = lint(["--spec-type", "ngram-mod", "--draft-max", "8"], build="b9500")
    assert r["outcome"] == "serves-with-speculation" and "removed-flag-unverified" in codes(r, "warnings")


def test_unknown_flag_and_download_only_mtp_flag_refuse() -> None:
    assert codes(lint(["--spec-typo"]), "errors") == ["unknown-flag"]
    assert only(lint(["--mtp"]), "errors", "unknown-flag")["fix"].endswith("--spec-type draft-mtp")


def test_unknown_env_name_is_a_warning_that_it_does_nothing() -> None:
    r = lint([], env={"LLAMA_ARG_SPEC_NGRAM_MOD_N_MAX": "16", "LLAMA_ARG_SPEC_TYPE": "ngram-mod"})
    assert r["outcome"] == "serves-with-speculation" and "unknown-env" in codes(r, "warnings")


# ---------------------------------------------------------------- chain building


def test_ngram_types_need_no_draft_and_run_in_internal_order() -> None:
    r = lint(["--spec-type", "ngram-cache,ngram-mod,ngram-simple,ngram-mod"])
    assert r["outcome"] == "serves-with-speculation"
    assert r["effective_chain"] == ["ngram-simple", "ngram-mod", "ngram-cache"]  # priority order, deduplicated
    assert r["errors"] == r["silent_off"] == []


def test_internal_order_puts_the_drafter_after_the_ngram_types_whatever_the_cli_order() -> None:
    a = lint(["--spec-type", "draft-mtp,ngram-mod"], target=QWEN35_MTP)["effective_chain"]
    b = lint(["--spec-type", "ngram-mod", "--spec-type", "draft-mtp"], target=QWEN35_MTP)["effective_chain"]
    assert a == b == ["ngram-mod", "draft-mtp"]


def test_context_backed_type_without_draft_is_dropped_silently_and_ngram_stays() -> None:
    r = lint(["--spec-type", "draft-dflash,ngram-mod"])
    assert r["outcome"] == "serves-with-speculation" and r["effective_chain"] == ["ngram-mod"]
    assert "add_config_if_enabled" in only(r, "silent_off", "needs-draft-context")["reason"]


def test_only_context_backed_types_without_draft_leave_no_speculation() -> None:
    r = lint(["--spec-type", "draft-dflash,draft-eagle3"])
    assert r["outcome"] == "serves-without-speculation" and r["effective_chain"] == []
    assert codes(r, "silent_off") == ["needs-draft-context", "needs-draft-context", "chain-empty"]


def test_draft_simple_without_draft_throws_and_drops_the_whole_chain() -> None:
    r = lint(["--spec-type", "ngram-mod,draft-simple"])
    f = only(r, "silent_off", "draft-simple-without-draft")
    assert r["outcome"] == "serves-without-speculation" and r["effective_chain"] == []
    assert "ngram types included" in f["reason"]


def test_none_inside_a_value_drops_that_value_but_a_separate_none_does_not() -> None:
    r = lint(["--spec-type", "ngram-mod,none"])
    assert r["outcome"] == "serves-without-speculation" and codes(r, "silent_off") == ["spec-type-none-in-list"]
    r = lint(["--spec-type", "ngram-mod", "--spec-type", "none"])
    assert r["effective_chain"] == ["ngram-mod"] and r["silent_off"] == []


def test_draft_without_type_and_nothing_inferred_is_silent_off() -> None:
    r = lint(["-md", "d.gguf"], draft=DRAFT)
    assert r["outcome"] == "serves-without-speculation"
    assert "--spec-type draft-simple" in only(r, "silent_off", "draft-without-type")["fix"]


def test_draft_type_is_inferred_from_the_draft_header() -> None:
    r = lint(["-md", "mtp-only.gguf"], target=QWEN35, draft=MTP_ONLY)
    assert r["effective_chain"] == ["draft-mtp"]


def test_missing_draft_facts_are_a_warning_not_a_guess() -> None:
    r = lint(["-md", "d.gguf"], draft=None)
    assert r["outcome"] == "serves-without-speculation" and codes(r, "warnings") == ["draft-facts-missing"]


# ---------------------------------------------------------------- what each drafter needs


def test_draft_simple_vocab_compat_decides() -> None:
    ok = lint(["--spec-type", "draft-simple", "-md", "d.gguf"], draft=DRAFT, compat=OK)
    assert ok["effective_chain"] == ["draft-simple"] and ok["warnings"] == []
    bad = lint(["--spec-type", "draft-simple,ngram-mod", "-md", "d.gguf"], draft=DRAFT, compat=BAD)
    f = only(bad, "silent_off", "draft-vocab-incompatible")
    assert bad["outcome"] == "serves-without-speculation" and "token 256 differs" in f["reason"]
    unknown = lint(["--spec-type", "draft-simple", "-md", "d.gguf"], draft=DRAFT)
    assert unknown["effective_chain"] == ["draft-simple"] and "draft-compat-unchecked" in codes(unknown, "warnings")


def test_mtp_without_nextn_in_the_target_refuses() -> None:
    r = lint(["--spec-type", "draft-mtp"])
    assert r["outcome"] == "refuses" and "doesn't contain MTP layers" in only(r, "errors", "mtp-context-without-nextn")["reason"]


def test_mtp_with_nextn_target_runs() -> None:
    r = lint(["--spec-type", "draft-mtp", "--spec-draft-n-max", "2"], target=QWEN35_MTP)
    assert r["outcome"] == "serves-with-speculation" and r["effective_chain"] == ["draft-mtp"] and r["errors"] == []


def test_mtp_on_an_architecture_without_an_mtp_graph_refuses() -> None:
    r = lint(["--spec-type", "draft-mtp"], target=GLM4_NEXTN)
    assert r["outcome"] == "refuses" and codes(r, "errors") == ["mtp-arch-without-mtp-graph"]


def test_mtp_meets_the_drafters_file_when_two_drafters_share_the_context() -> None:
    # the field-notes seam: draft-mtp,draft-dflash dies at load because MTP builds its context from the DRAFTER's
    # file, not because the target lacks a head — the target here HAS one
    r = lint(["--spec-type", "draft-mtp,draft-dflash", "-md", "dflash.gguf"], target=QWEN35_MTP, draft=DFLASH)
    f = only(r, "errors", "mtp-context-without-nextn")
    assert r["outcome"] == "refuses"
    assert "MTP meets the drafter, not a missing head" in f["reason"] and "one context-backed type" in f["fix"]


def test_mtp_draft_of_another_width_aborts() -> None:
    r = lint(["--spec-type", "draft-mtp", "-md", "m.gguf"], target=QWEN35, draft=facts("qwen35", nextn=1, n_embd=256))
    assert r["outcome"] == "aborts" and codes(r, "errors") == ["mtp-width-mismatch"]


@pytest.mark.parametrize("spec_type", ["draft-dflash", "draft-dspark"])
def test_dflash_types_on_a_non_dflash_draft_abort(spec_type: str) -> None:
    r = lint(["--spec-type", spec_type, "-md", "d.gguf"], draft=DRAFT, compat=OK)
    assert r["outcome"] == "aborts" and "GGML_ASSERT" in only(r, "errors", "dflash-needs-dflash-draft")["reason"]


def test_two_context_backed_types_abort_when_the_second_meets_the_wrong_file() -> None:
    r = lint(["--spec-type", "draft-dflash,draft-simple", "-md", "d.gguf"], draft=DRAFT, compat=OK)
    f = only(r, "errors", "dflash-needs-dflash-draft")
    assert r["outcome"] == "aborts" and "chain law" in f["reason"]


def test_two_drafters_that_both_construct_are_a_warning_not_a_guess() -> None:
    r = lint(["--spec-type", "draft-simple,draft-mtp"], target=QWEN35_MTP)
    assert r["outcome"] == "serves-with-speculation" and "chain-two-drafters" in codes(r, "warnings")


def test_dflash_draft_runs_with_ngram_layered_and_clamps_n_max() -> None:
    r = lint(["--spec-type", "draft-dflash,ngram-mod", "-md", "df.gguf", "--spec-draft-n-max", "16"], draft=DFLASH)
    assert r["effective_chain"] == ["ngram-mod", "draft-dflash"] and r["errors"] == r["silent_off"] == []
    assert "clamps it to 15" in only(r, "warnings", "dflash-n-max-clamped")["reason"]
    assert "dflash-n-max-clamped" not in codes(
        lint(["--spec-type", "draft-dflash", "-md", "df.gguf", "--spec-draft-n-max", "15"], draft=DFLASH), "warnings")


def test_dspark_anchor_first_block_yields_the_full_block() -> None:
    r = lint(["--spec-type", "draft-dspark", "-md", "ds.gguf", "--spec-draft-n-max", "16"], draft=DSPARK)
    assert "dflash-n-max-clamped" not in codes(r, "warnings")


def test_drafter_type_against_the_header_is_a_warning() -> None:
    r = lint(["--spec-type", "draft-dspark", "-md", "df.gguf"], draft=DFLASH)
    assert "use --spec-type draft-dflash" in only(r, "warnings", "drafter-type-mismatch")["fix"]


def test_dspark_with_p_min_and_no_confidence_head_throws() -> None:
    draft = dict(DSPARK, values={"dflash.target_layers": [1, 2], "dflash.has_confidence_head": "false"})
    r = lint(["--spec-type", "draft-dspark", "-md", "ds.gguf", "--spec-draft-p-min", "0.5"], draft=draft)
    assert r["outcome"] == "serves-without-speculation" and codes(r, "silent_off") == ["dspark-no-confidence-head"]
    r = lint(["--spec-type", "draft-dspark", "-md", "ds.gguf", "--spec-draft-p-min", "0"], draft=draft)
    assert r["effective_chain"] == ["draft-dspark"]


def test_eagle3_needs_an_eagle3_draft() -> None:
    r = lint(["--spec-type", "draft-eagle3,ngram-mod", "-md", "d.gguf"], draft=DRAFT)
    assert r["outcome"] == "serves-without-speculation" and codes(r, "silent_off") == ["eagle3-needs-eagle3-draft"]
    assert lint(["--spec-type", "draft-eagle3", "-md", "e.gguf"], draft=EAGLE3)["effective_chain"] == ["draft-eagle3"]


def test_dflash_draft_without_a_mask_token_dies_on_the_first_draft() -> None:
    nomask = dict(DFLASH, values=dict(DFLASH["values"], **{"tokenizer.ggml.mask_token_id": None}))
    r = lint(["--spec-type", "draft-dflash,ngram-mod", "-md", "df.gguf"], draft=nomask)
    f = only(r, "errors", "dflash-draft-without-mask-token")
    assert r["outcome"] == "aborts" and "first request that drafts" in f["reason"] and r["effective_chain"] == []
    masked = dict(DFLASH, values=dict(DFLASH["values"], **{"tokenizer.ggml.mask_token_id": 257}))
    assert lint(["--spec-type", "draft-dflash", "-md", "df.gguf"], draft=masked)["outcome"] == "serves-with-speculation"
    # facts without the value (a gguf_info dict without keys) are not guessed at
    assert lint(["--spec-type", "draft-dflash", "-md", "df.gguf"], draft=DFLASH)["outcome"] == "serves-with-speculation"


def test_single_anchor_first_dspark_token_needs_no_mask() -> None:
    nomask = dict(DSPARK, values=dict(DSPARK["values"], **{"tokenizer.ggml.mask_token_id": None}))
    assert lint(["--spec-type", "draft-dspark", "-md", "ds.gguf", "--spec-draft-n-max", "1"],
                draft=nomask)["outcome"] == "serves-with-speculation"
    assert lint(["--spec-type", "draft-dspark", "-md", "ds.gguf", "--spec-draft-n-max", "2"],
                draft=nomask)["outcome"] == "aborts"


@pytest.mark.parametrize("draft, fragment", [
    (dict(DFLASH, values={"dflash.target_layers": None}), "requires 'target_layers'"),
    (dict(EAGLE3, values={"eagle3.target_layers": None}), "requires 'extract_layers'"),
    (dict(EAGLE3, values={"eagle3.target_layers": [1, 2]}), "exactly 3 entries"),
])
def test_a_draft_the_loader_rejects_refuses_whatever_the_type(draft: dict, fragment: str) -> None:
    for flags in (["--spec-type", "ngram-mod"], []):
        r = lint([*flags, "-md", "x.gguf"], draft=draft)
        assert r["outcome"] == "refuses" and fragment in only(r, "errors", "draft-model-unloadable")["reason"]


# ---------------------------------------------------------------- synthetic acceptance


def test_synthetic_acceptance_is_legal_but_output_is_invalid() -> None:
    r = lint(["--spec-type", "ngram-mod", "--spec-synth-len", "3"])
    assert r["outcome"] == "serves-with-speculation"
    assert "not valid" in only(r, "warnings", "synthetic-acceptance")["reason"]


@pytest.mark.parametrize("flags, fragment", [
    (["--spec-synth-len", "2", "--spec-synth-rates", "0.5,0.5,0.5"], "mutually exclusive"),
    (["--spec-synth-rates", "0.5,0.4"], "must contain 3 values"),
    (["--spec-synth-rates", "0.4,0.5,0.3"], "non-increasing"),
    (["--spec-synth-rates", "1.5,0.5,0.3"], "within [0, 1]"),
    (["--spec-synth-len", "5"], "within [1, 4]"),
])
def test_synthetic_values_are_checked_against_the_built_chains_n_max(flags: list[str], fragment: str) -> None:
    r = lint(["--spec-type", "draft-simple", "-md", "d.gguf", *flags], draft=DRAFT, compat=OK)
    assert r["outcome"] == "refuses" and fragment in only(r, "errors", "synthetic-invalid")["reason"]


def test_synthetic_n_max_is_the_effective_one_of_the_built_impls() -> None:
    # ngram-mod's n_max (default 64) dominates; a dflash drafter's is clamped to its block
    assert lint(["--spec-type", "ngram-mod", "--spec-synth-len", "65"])["outcome"] == "serves-with-speculation"
    r = lint(["--spec-type", "draft-dflash", "-md", "df.gguf", "--spec-draft-n-max", "40", "--spec-synth-len", "17"],
             draft=DFLASH)
    assert r["outcome"] == "refuses" and "[1, 16]" in only(r, "errors", "synthetic-invalid")["reason"]


def test_synthetic_without_any_speculation_refuses() -> None:
    r = lint(["--spec-type", "draft-dflash", "--spec-synth-len", "2"])
    assert r["outcome"] == "refuses" and "synthetic-without-speculation" in codes(r, "errors")
    assert lint(["--spec-synth-len", "2"])["outcome"] == "refuses"


def test_synthetic_turns_a_thrown_constructor_into_a_refusal() -> None:
    r = lint(["--spec-type", "draft-eagle3", "-md", "d.gguf", "--spec-synth-len", "2"], draft=DRAFT)
    assert r["outcome"] == "refuses" and "exits 1" in only(r, "errors", "eagle3-needs-eagle3-draft")["reason"]


# ---------------------------------------------------------------- legal but costly


def test_ngram_layer_on_a_hybrid_target_breaks_mtp_rollback() -> None:
    r = lint(["--spec-type", "draft-mtp,ngram-mod"], target=QWEN35_MTP)
    f = only(r, "warnings", "recurrent-ngram-rollback")
    assert r["effective_chain"] == ["ngram-mod", "draft-mtp"] and "n_rs_seq" in f["reason"]
    assert "recurrent-ngram-rollback" not in codes(lint(["--spec-type", "draft-mtp"], target=QWEN35_MTP), "warnings")
    capped = lint(["--spec-type", "draft-mtp,ngram-mod", "--spec-ngram-mod-n-max", "3"], target=QWEN35_MTP)
    assert "recurrent-ngram-rollback" not in codes(capped, "warnings")


def test_recurrent_target_without_snapshots_uses_checkpoints() -> None:
    assert "recurrent-checkpoints" in codes(lint(["--spec-type", "ngram-mod"], target=QWEN35), "warnings")
    mamba = facts("mamba", recurrent=[0, 1, 2, 3])
    r = lint(["--spec-type", "draft-simple", "-md", "d.gguf"], target=mamba, draft=DRAFT, compat=OK)
    assert "recurrent-checkpoints" in codes(r, "warnings")
    assert "recurrent-checkpoints" not in codes(lint(["--spec-type", "ngram-mod"]), "warnings")


def test_short_ngram_match_and_deep_mtp_are_warnings() -> None:
    assert "ngram-mod-short-match" in codes(lint(["--spec-type", "ngram-mod", "--spec-ngram-mod-n-match", "8"]),
                                            "warnings")
    r = lint(["--spec-type", "draft-mtp", "--spec-draft-n-max", "6"], target=QWEN35_MTP)
    assert "mtp-deep-draft" in codes(r, "warnings")


def test_drafter_without_sliding_window_caches_the_whole_window() -> None:
    big = facts("llama", n_layer=5, n_embd=4096, heads=32, kv_heads=8, name="dspark-like")
    r = lint(["--spec-type", "draft-simple", "-md", "d.gguf", "-c", "262144"], draft=big, compat=OK)
    assert "5120 MiB at 262144" in only(r, "warnings", "drafter-kv-full-window")["reason"]
    windowed = dict(big, sliding_window=2048)
    r = lint(["--spec-type", "draft-simple", "-md", "d.gguf", "-c", "262144"], draft=windowed, compat=OK)
    assert "drafter-kv-full-window" not in codes(r, "warnings")


# ---------------------------------------------------------------- shape and entry points


def test_every_finding_has_code_reason_fix() -> None:
    results = [lint(["--spec-type", "mtp"]), lint(["--spec-type", "ngram-mod,draft-simple"]),
               lint(["--spec-type", "draft-mtp,ngram-mod"], target=QWEN35_MTP)]
    for r in results:
        assert set(r) == {"errors", "silent_off", "warnings", "effective_chain", "outcome"}
        for kind in ("errors", "silent_off", "warnings"):
            for f in r[kind]:
                assert set(f) == {"code", "reason", "fix"} and all(f.values())


def test_lint_dispatch() -> None:
    r = _lint.lint("llamacpp", ["--spec-type", "ngram-mod"])
    assert r["effective_chain"] == ["ngram-mod"]
    v = _lint.lint("vllm", {"method": "ngram", "num_speculative_tokens": 4})
    assert v["effective_chain"] == ["ngram"]
    with pytest.raises(SpecdecError, match="engine='sglang'"):
        _lint.lint("sglang", [])


def test_missing_draft_file_is_an_error_naming_it(tmp_path: Path) -> None:
    missing = tmp_path / "nope.gguf"
    with pytest.raises(SpecdecError, match=r"nope\.gguf: no such file"):
        _lint.run_spec_lint({"engine": "llamacpp", "flags": ["--spec-type", "draft-simple", "-md", str(missing)],
                             "target": LLAMA})


def test_facts_dict_without_architecture_is_refused() -> None:
    with pytest.raises(SpecdecError, match="target: a facts dict"):
        _lint.run_spec_lint({"engine": "llamacpp", "flags": [], "target": {"block_count": 4}})


def test_gguf_info_result_is_accepted_as_facts() -> None:
    r = _lint.run_spec_lint({"engine": "llamacpp", "flags": ["--spec-type", "draft-mtp"],
                             "target": {"gguf": QWEN35_MTP, "changed": False}})
    assert r["ok"] and r["effective_chain"] == ["draft-mtp"] and r["config"]["spec_types"] == ["draft-mtp"]


# ---------------------------------------------------------------- the module


def run_module(capsys: pytest.CaptureFixture[str], args: dict[str, Any]) -> dict[str, Any]:
    with patch_module_args(args), pytest.raises(SystemExit):
        spec_lint_module.main()
    return json.loads(capsys.readouterr().out)


def test_module_reports_and_changes_nothing(capsys: pytest.CaptureFixture[str]) -> None:
    out = run_module(capsys, {"engine": "llamacpp", "flags": ["--spec-type", "mtp"], "target": LLAMA,
                              "_ansible_check_mode": True})
    assert out["changed"] is False and out["ok"] is False and out["outcome"] == "refuses"
    assert out["errors"][0]["code"] == "spec-type-renamed"


def test_module_reads_env_and_build(capsys: pytest.CaptureFixture[str]) -> None:
    out = run_module(capsys, {"engine": "llamacpp", "build": "b9100", "env": {"LLAMA_ARG_SPEC_TYPE": "mtp"},
                              "target": QWEN35_MTP})
    assert out["ok"] is True and out["effective_chain"] == ["draft-mtp"] and out["build"] == "b9100"
    assert [w["code"] for w in out["lint_warnings"]] == ["old-build"]


def test_module_fails_on_a_missing_draft_file(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    out = run_module(capsys, {"engine": "llamacpp", "flags": ["--spec-type", "draft-simple"], "target": LLAMA,
                              "draft": str(tmp_path / "gone.gguf")})
    assert out["failed"] is True and "gone.gguf: no such file" in out["msg"]


def test_module_vllm_branch(capsys: pytest.CaptureFixture[str]) -> None:
    out = run_module(capsys, {"engine": "vllm", "vllm_version": "0.20.0",
                              "flags": ["--spec-method", "dflash", "--spec-model", "z-lab/X-DFlash", "--spec-tokens", "8"]})
    assert out["ok"] is False and [e["code"] for e in out["errors"]] == ["vllm-too-old"]


@pytest.mark.parametrize(("server_outcome", "outcome"), [("refuses-to-start", "refuses"), ("aborts-at-start", "aborts")])
def test_a_vocabulary_llama_cpp_will_not_load_stops_the_server_not_the_speculation(server_outcome: str,
                                                                                   outcome: str) -> None:
    compat = {"compatible": False, "loads": False, "server_outcome": server_outcome,
              "reasons": ["draft: will not load: BPE vocabulary without merges"]}
    r = lint(["--spec-type", "draft-simple", "-md", "d.gguf"], draft=DRAFT, compat=compat)
    assert r["outcome"] == outcome
    f = only(r, "errors", "vocab-will-not-load")
    assert "without merges" in f["reason"]
    assert not r["silent_off"]
