# Copyright: (c) 2026, llmfleet.specdec contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# Private to the collection: spec_lint's llama.cpp rules, stage by stage as llama-server starts up.
"""Predict, from llama.cpp's own source, what llama-server does with a speculative config: the stages.

The authority is the llama.cpp tree the project pins (llama-cpp-python 0.3.36, ``vendor/llama.cpp``
at ggml-org/llama.cpp@0c1e57098). Every rule below names the function it comes from. The order of
events in llama-server, which decides between the three kinds of finding:

1. ``common_params_parse`` (common/arg.cpp): an unknown or removed flag, a bad value or an unknown
   ``--spec-type`` name throws ``std::invalid_argument`` -> exit 1 before any model is read.
2. ``common_models_handler_apply`` (common/arg.cpp): with no ``--spec-type`` and a draft path, the
   type is inferred from the draft's header (``common_speculative_types_from_gguf``); nothing
   inferred leaves the type list at ``none``.
3. ``server_context::load_model`` (tools/server/server-context.cpp): the draft model is loaded and
   ONE draft context is built (``common_speculative_init_result``), with ``ctx_type = MTP`` as soon
   as draft-mtp is in the list; a failure there returns false -> exit 1.
4. ``common_speculative_init`` (common/speculative.cpp) builds the implementations in a fixed
   priority order; ngram types are added unconditionally, draft-simple unconditionally, the other
   context-backed types only when a draft context exists (otherwise silently skipped). A
   ``GGML_ASSERT``/``GGML_ABORT`` in a constructor kills the process (SIGABRT); a thrown exception
   is caught by load_model, which logs "failed to initialize speculative decoding context" and
   serves on with NO speculation at all (the whole chain is dropped) — unless a synthetic-acceptance
   flag is set, then load_model returns false -> exit 1.

Findings: ``errors`` (refuses to start or aborts), ``silent_off`` (serves, but speculation or part
of the chain is off), ``warnings`` (legal, measured to lose or to cost). Each is
``{"code", "reason", "fix"}``. ``effective_chain`` is what runs, in llama.cpp's internal order.

This room holds the stages (parse, types, draft model and context, implementations, synthetic
acceptance, cost) and the findings they produce. llama.cpp's own facts (pinned tree, spec types,
defaults, build gates) live in ``_llamacpp``; the entry points that run the stages in order and
read the models are in ``_lint``.
"""
from __future__ import annotations

from typing import Any, Mapping

from ansible_collections.llmfleet.specdec.plugins.module_utils.llamacpp._llamacpp import (
    ARG,
    CONTEXT_BACKED,
    DEFAULTS,
    DFLASH_DEFAULT_BLOCK_SIZE,
    DRAFTLESS,
    INTERNAL_ORDER,
    MTP_GRAPH_ARCHS,
    MTP_RENAME_BUILD,
    NEEDS_RS_SEQ,
    NGRAM_MOD_MIN_MATCH,
    PINNED,
    RS_ROLLBACK_ARCHS,
    SOURCE_TREE,
    SPC,
    SRV,
    _canonical_type,
    spec_type_vocabulary,
)
from ansible_collections.llmfleet.specdec.plugins.module_utils.memory._kv import BYTES_PER_VALUE as KV_BYTES

MTP_USEFUL_DEPTH = 3            # field notes: accepted MTP draft lengths are 2-3 tokens
DRAFT_KV_WARN_BYTES = 512 * 2**20  # a full-window draft KV below this is not worth a warning

# Header values beyond the facts contract that these rules read (model_facts(keys=...) -> facts["values"]).
HEADER_KEYS = ("dflash.target_layers", "dflash.block_size", "dflash.has_confidence_head", "dflash.sample_from_anchor",
               "eagle3.target_layers", "tokenizer.ggml.mask_token_id")


class Outcome:
    REFUSES = "refuses"
    ABORTS = "aborts"
    SERVES_WITHOUT = "serves-without-speculation"
    SERVES_WITH = "serves-with-speculation"


def finding(code: str, reason: str, fix: str) -> dict[str, str]:
    return {"code": code, "reason": reason, "fix": fix}


class _Run:
    """Accumulates findings and the predicted outcome while walking llama-server's start-up."""

    def __init__(self) -> None:
        self.errors: list[dict[str, str]] = []
        self.silent_off: list[dict[str, str]] = []
        self.warnings: list[dict[str, str]] = []
        self.outcome: str | None = None
        self.chain: list[str] = []

    def fatal(self, outcome: str, f: dict[str, str]) -> None:
        self.errors.append(f)
        if self.outcome is None:
            self.outcome = outcome

    def result(self) -> dict[str, Any]:
        outcome = self.outcome or (Outcome.SERVES_WITH if self.chain else Outcome.SERVES_WITHOUT)
        return {"errors": self.errors, "silent_off": self.silent_off, "warnings": self.warnings,
                "effective_chain": list(self.chain) if outcome == Outcome.SERVES_WITH else [],
                "outcome": outcome}


# ------------------------------------------------------------------ facts helpers

def _nextn(facts: Mapping[str, Any] | None) -> int:
    mtp = (facts or {}).get("mtp") or {}
    return int(mtp.get("nextn_predict_layers") or 0)


def _arch(facts: Mapping[str, Any] | None) -> str | None:
    return (facts or {}).get("architecture")


def _values(facts: Mapping[str, Any] | None) -> dict[str, Any]:
    return dict((facts or {}).get("values") or {})


def _name(facts: Mapping[str, Any] | None, fallback: str) -> str:
    facts = facts or {}
    return str(facts.get("path") or facts.get("name") or fallback)


def _head_dim(facts: Mapping[str, Any]) -> int | None:
    if facts.get("key_length"):
        return int(facts["key_length"])
    heads = facts.get("head_count")
    heads = heads[0] if isinstance(heads, list) and heads else heads
    if facts.get("embedding_length") and heads:
        return int(facts["embedding_length"]) // int(heads)
    return None


def _kv_bytes_per_position(facts: Mapping[str, Any], cache_k: str, cache_v: str) -> float | None:
    """K+V bytes one position costs in every KV layer (no window applied)."""
    head_dim = _head_dim(facts)
    kv = facts.get("head_count_kv")
    layers = facts.get("kv_layers")
    if layers is None:
        layers = list(range(int(facts.get("block_count") or 0)))
    if head_dim is None or kv is None or not layers:
        return None
    per_layer = kv if isinstance(kv, list) else [kv] * (max(layers) + 1)
    k_b, v_b = KV_BYTES.get(cache_k), KV_BYTES.get(cache_v)
    if k_b is None or v_b is None:
        return None
    return float(sum(int(per_layer[i] if i < len(per_layer) else per_layer[-1]) * head_dim * (k_b + v_b)
                     for i in layers))


# ------------------------------------------------------------------ stage 1: parse

def _parse_stage(run: _Run, config: Mapping[str, Any], build: int | None) -> list[list[str]]:
    """Flag problems and --spec-type names; returns the names per value (canonicalised)."""
    for p in config.get("problems") or []:
        if p["code"] == "unknown-env":
            run.warnings.append(finding(
                "unknown-env", f"{p['message']}; llama.cpp reads only the env names declared with set_env() "
                f"in {ARG}, so this setting does nothing",
                "use the LLAMA_ARG_* name from the flag table (llmfleet.specdec _flags), or put the flag in "
                "LLAMA_EXTRA_ARGS when it has no env name"))
            continue
        if p["code"] == "removed-flag" and build is not None and build < PINNED["assumed_build"]:
            run.warnings.append(finding(
                "removed-flag-unverified", f"{p['flag']} is removed in the pinned tree ({p['message']}); the build "
                f"that removed it is not recorded there, so whether b{build} still accepts it is not known",
                "use the --spec-draft-*/--spec-ngram-* names, which the pinned tree accepts"))
            continue
        fix = {"removed-flag": _removed_fix(p["message"]),
               "unknown-flag": f"remove {p['flag']}, or use the name llama-server --help lists for it",
               "missing-value": f"give {p['flag']} its value",
               }.get(p["code"], f"correct the value of {p['flag']}")
        if p["flag"] == "--mtp":
            fix = "--mtp exists only for the download tool; use --spec-type draft-mtp"
        run.fatal(Outcome.REFUSES, finding(
            p["code"], f"{p['message']} -> common_params_parse ({ARG}) fails and llama-server exits 1 "
            "before loading any model", fix))
    vocab = spec_type_vocabulary(build)
    values = config.get("spec_type_values")
    if values is None:
        values = [",".join(config.get("spec_types") or [])] if config.get("spec_types") else []
    per_value: list[list[str]] = []
    for value in values:
        names = str(value).split(",")  # string_split keeps empty items: "a," -> ["a", ""]
        for name in names:
            if name == "none":
                break  # common_speculative_types_from_names returns {none} here, unread names are never checked
            if name not in vocab:
                run.fatal(Outcome.REFUSES, _unknown_type(name, build, vocab))
        per_value.append([_canonical_type(n, build) for n in names])
    return per_value


def _removed_fix(message: str) -> str:
    """arg_removed's own advice, from the problem message ('... has been removed. use ...')."""
    return message.split("has been removed. ", 1)[-1] if "has been removed. " in message else \
        "use the --spec-draft-*/--spec-ngram-* flags"


# The lint's rename table of --spec-type names: (old, new, the build that renamed it). The build sentinel
# (build/_build_help) reads it to name the rename a new build's --help calls for.
SPEC_TYPE_RENAMES = (("mtp", "draft-mtp", MTP_RENAME_BUILD),)


def spec_type_rename(name: str, vocabulary: Any) -> str | None:
    """The other name of a renamed --spec-type that ``vocabulary`` (a build's names) holds, in either direction."""
    for old, new, _build in SPEC_TYPE_RENAMES:
        for have, other in ((old, new), (new, old)):
            if name == have and other in vocabulary:
                return other
    return None


def _unknown_type(name: str, build: int | None, vocab: tuple[str, ...]) -> dict[str, str]:
    where = f"b{build}" if build is not None else f"the pinned tree ({SOURCE_TREE}, assumed b{PINNED['assumed_build']}+)"
    reason = (f"--spec-type {name!r} is not in {where}'s vocabulary ({', '.join(vocab)}): "
              f"common_speculative_types_from_names ({SPC}) throws 'unknown speculative type: {name}', "
              f"common_params_parse fails and llama-server exits 1")
    if name == "mtp":
        reason += ("; 'mtp' was renamed 'draft-mtp' in b9180 (PR #22673): on this build the old name is a refusal "
                   "to start, not a silently disabled speculation")
        return finding("spec-type-renamed", reason, "use --spec-type draft-mtp")
    if name == "draft-mtp" and build is not None and build < MTP_RENAME_BUILD:
        return finding("spec-type-renamed", reason + "; before b9180 the MTP type is called 'mtp'",
                       "use --spec-type mtp on this build, or upgrade to b9180+")
    if name == "":
        return finding("spec-type-empty", reason + " (an empty item, from a stray comma)",
                       "remove the empty item from the comma-separated list")
    return finding("spec-type-unknown", reason, f"use one of: {', '.join(t for t in vocab if t != 'none')}")


# ------------------------------------------------------------------ stage 2: types

def _resolve_types(run: _Run, per_value: list[list[str]], config: Mapping[str, Any],
                   draft: Mapping[str, Any] | None) -> list[str]:
    """The enabled types (bit set, so duplicates collapse), after 'none' and header inference."""
    enabled: list[str] = []
    for names in per_value:
        # common_speculative_types_from_names: a 'none' anywhere makes that whole value {none}
        if "none" in names:
            dropped = [n for n in names if n != "none"]
            if dropped:
                run.silent_off.append(finding(
                    "spec-type-none-in-list",
                    f"--spec-type {','.join(names)}: common_speculative_types_from_names ({SPC}) returns only "
                    f"'none' for a value that contains it, so {', '.join(dropped)} from that value never run",
                    "drop 'none' from the list"))
            continue
        enabled += [n for n in names if n not in enabled]
    if per_value:
        return enabled
    has_draft = bool(config.get("draft_model") or config.get("draft_hf_repo"))
    if not has_draft:
        return []
    if config.get("draft_hf_repo") and not config.get("draft_model"):
        run.warnings.append(finding(
            "draft-hf-sidecar", "--spec-draft-hf without --spec-type: the type comes from the sidecar files the "
            f"repo ships (common_models_handler_apply, {ARG}), which cannot be read offline",
            "give --spec-type explicitly"))
        return []
    detected = (draft or {}).get("spec_type_autodetect")
    if draft is None:
        run.warnings.append(finding(
            "draft-facts-missing", "no draft facts: the type llama.cpp infers from the draft header "
            f"(common_speculative_types_from_gguf, {SPC}) cannot be predicted",
            "pass the draft's gguf_info facts (or its path) as draft"))
        return []
    if detected:
        return [detected]
    run.silent_off.append(finding(
        "draft-without-type",
        f"a draft model is given but no --spec-type, and its header ({_arch(draft)}, no nextn head, not dflash) "
        f"infers no type (common_speculative_types_from_gguf, {SPC}): the list stays 'none', "
        f"common_speculative_init builds nothing and load_model ({SRV}) frees the loaded draft again — "
        "no speculation, and the draft's load time is spent for nothing",
        "add --spec-type draft-simple (a plain draft model)"))
    return []


# ------------------------------------------------------------------ stage 3: draft model and context

def _vocab_load_stage(run: _Run, compat: Mapping[str, Any] | None) -> None:
    """A target or draft whose vocabulary llama.cpp's loader refuses (spec_compat's server_outcome) stops the
    server before any speculative type is looked at: it is an error, never 'serves without speculation'."""
    outcome = (compat or {}).get("server_outcome")
    if outcome not in ("refuses-to-start", "aborts-at-start"):
        return
    why = "; ".join(str(r) for r in (compat or {}).get("reasons") or []) or "a vocabulary llama.cpp will not load"
    run.fatal(Outcome.ABORTS if outcome == "aborts-at-start" else Outcome.REFUSES, finding(
        "vocab-will-not-load",
        f"spec_compat: {why} (llama_vocab::load, src/llama-vocab.cpp)",
        "reconvert the model named above with a current convert_hf_to_gguf.py, or fix the tokenizer key it names"))


def _draft_load_stage(run: _Run, config: Mapping[str, Any], draft: Mapping[str, Any] | None) -> None:
    """load_model loads the draft whenever one is configured (has_dft), whatever the types: loader throws -> exit 1."""
    if not config.get("draft_model") or draft is None:
        return
    arch, values = _arch(draft), _values(draft)
    key = f"{arch}.target_layers"
    if arch not in ("dflash", "eagle3") or key not in values:
        return
    layers = values[key]
    if layers is None:
        problem = ("DFlash model requires 'target_layers' in GGUF metadata (llama_model_dflash::load_arch_hparams, "
                   "src/models/dflash.cpp)" if arch == "dflash" else
                   "EAGLE3 model requires 'extract_layers' in GGUF metadata (src/models/eagle3.cpp)")
    elif arch == "eagle3" and len(layers) != 3:
        problem = "EAGLE3 requires exactly 3 entries in 'extract_layers' (src/models/eagle3.cpp)"
    else:
        return
    run.fatal(Outcome.REFUSES, finding(
        "draft-model-unloadable",
        f"the draft {_name(draft, 'draft')} is {arch} without a usable {key}: the loader throws '{problem}', "
        f"common_speculative_init_result logs 'failed to load draft model' and load_model ({SRV}) exits 1",
        f"use a {arch} draft GGUF converted with its {key}"))


def _context_stage(run: _Run, enabled: list[str], config: Mapping[str, Any], target: Mapping[str, Any] | None,
                   draft: Mapping[str, Any] | None) -> tuple[bool, Mapping[str, Any] | None, str]:
    """common_speculative_init_result: (context exists, the model it was built from, label)."""
    has_draft = bool(config.get("draft_model") or config.get("draft_hf_repo"))
    spec_mtp = "draft-mtp" in enabled
    if has_draft:
        model, label = draft, f"the draft model {_name(draft, str(config.get('draft_model') or 'draft'))}"
    elif spec_mtp:
        model, label = target, f"the target model {_name(target, str(config.get('model') or 'target'))}"
    else:
        return False, None, ""
    if spec_mtp and model is not None and (_nextn(model) == 0):
        others = [t for t in enabled if t in CONTEXT_BACKED and t != "draft-mtp"]
        reason = (f"draft-mtp builds its context with ctx_type MTP against {label} "
                  f"(common_speculative_init_result, {SPC}), which has no nextn layers "
                  f"({_arch(model)}.nextn_predict_layers = 0): llama_init_from_model (src/llama-context.cpp) logs "
                  "'context type MTP requested but model doesn't contain MTP layers' and returns null, load_model "
                  f"({SRV}) logs 'failed to create MTP context' and llama-server exits 1")
        if has_draft and others:
            reason += (f" — with {', '.join(others)} in the same chain the one draft context is built from that "
                       "drafter's file, so MTP meets the drafter, not a missing head")
        fix = ("draft-mtp needs the nextn head in the model its context is built from: drop the other drafter "
               "(one context-backed type per process) and load an MTP-only draft GGUF, or use a target with "
               "the head and no draft") if has_draft else (
            "use a target GGUF that carries the MTP/nextn head, or load an MTP-only draft with --spec-draft-model")
        run.fatal(Outcome.REFUSES, finding("mtp-context-without-nextn", reason, fix))
        return False, model, label
    if spec_mtp and model is not None and _arch(model) not in MTP_GRAPH_ARCHS:
        run.fatal(Outcome.REFUSES, finding(
            "mtp-arch-without-mtp-graph",
            f"draft-mtp builds an MTP context against {label}, architecture {_arch(model)}, which has no MTP draft "
            f"graph in this tree (LLM_GRAPH_TYPE_DECODER_MTP exists for {', '.join(sorted(MTP_GRAPH_ARCHS))}): "
            "llama_init_from_model fails ('failed to initialize the context'), load_model logs 'failed to create MTP "
            "context' and llama-server exits 1 — declaring nextn layers is not enough",
            "use draft-mtp only with an architecture llama.cpp wires MTP for (qwen35/qwen35moe and the list above), "
            "or choose another drafter"))
        return False, model, label
    return True, model, label


# ------------------------------------------------------------------ stage 4: implementations

def _compat_verdict(compat: Mapping[str, Any] | None) -> tuple[bool | None, str]:
    if not compat:
        return None, ""
    ok = compat.get("compatible")
    reasons = compat.get("reasons") or ([compat["reason"]] if compat.get("reason") else [])
    return (None if ok is None else bool(ok)), "; ".join(str(r) for r in reasons)


def _ctor_problem(t: str, run: _Run, config: Mapping[str, Any], target: Mapping[str, Any] | None,
                  ctx_model: Mapping[str, Any] | None, ctx_label: str, has_ctx: bool,
                  compat: Mapping[str, Any] | None, shared_ctx_with_target: bool
                  ) -> tuple[str, dict[str, str]] | None:
    """What the constructor of type t does on this context: ("abort"|"throw", finding) or None."""
    arch = _arch(ctx_model)
    if t == "draft-simple":
        if not has_ctx:
            return "throw", finding(
                "draft-simple-without-draft",
                "draft-simple is added to the chain unconditionally (common_speculative_init) and its constructor "
                f"throws 'draft-simple requires a draft context' when no draft model is loaded ({SPC})",
                "give a draft model with --spec-draft-model, or drop draft-simple")
        if shared_ctx_with_target:
            return None
        ok, why = _compat_verdict(compat)
        if ok is False:
            return "throw", finding(
                "draft-vocab-incompatible",
                f"common_speculative_are_compatible ({SPC}) rejects the pair ({why or 'tokenizers differ'}); the "
                "draft-simple constructor throws 'draft model vocab type must match target model to use speculation'",
                "use a draft with the target's tokenizer (same vocab type, bos/eos, token texts from id 5 on, "
                "size within 128); check with llmfleet.specdec.spec_compat")
        if ok is None:
            run.warnings.append(finding(
                "draft-compat-unchecked",
                "draft-simple runs llama.cpp's vocabulary check (common_speculative_are_compatible) at start-up; "
                "without a spec_compat result spec_lint cannot say whether it passes — if it fails, the server "
                "serves on without speculation",
                "pass the result of llmfleet.specdec.spec_compat as compat (or target/draft as paths)"))
        return None
    if not has_ctx:
        return None  # skipped by add_config_if_enabled, reported by the caller
    if t == "draft-eagle3":
        layers = _values(ctx_model).get(f"{arch}.target_layers")
        if arch == "eagle3" or (arch == "dflash" and isinstance(layers, list) and len(layers) == 3):
            return None
        return "throw", finding(
            "eagle3-needs-eagle3-draft",
            f"draft-eagle3 on {ctx_label} (architecture {arch}): common_speculative_impl_draft_eagle3 ({SPC}) "
            "throws 'draft model is not eagle3 (expected 3 extract layers, got N)' unless the draft carries "
            "exactly three target layers",
            "load an EAGLE-3 draft GGUF (architecture eagle3) for draft-eagle3")
    if t in ("draft-dflash", "draft-dspark"):
        if arch != "dflash":
            return "abort", finding(
                "dflash-needs-dflash-draft",
                f"{t} on {ctx_label} (architecture {arch}): llama_model_target_layer_ids is empty for anything but "
                f"a dflash/eagle3 file, and common_speculative_impl_draft_dflash ({SPC}) asserts "
                "GGML_ASSERT(target_layer_ids_n > 0 && \"DFlash model has no target_layer_ids\") — llama-server "
                "aborts (SIGABRT) while loading",
                f"load a dflash-architecture draft (with dflash.target_layers) for {t}, and keep one "
                "context-backed type per process")
        values = _values(ctx_model)
        conf = values.get("dflash.has_confidence_head")
        p_min = config.get("draft_p_min") or 0.0
        if t == "draft-dspark" and p_min > 0 and conf is not None and str(conf).lower() != "true":
            return "throw", finding(
                "dspark-no-confidence-head",
                f"draft-dspark with --spec-draft-p-min {p_min} on a draft whose dflash.has_confidence_head is "
                f"{conf!r}: common_speculative_impl_draft_dflash ({SPC}) throws 'DSpark draft has no confidence "
                "head: please set --spec-draft-p-min 0'",
                "set --spec-draft-p-min 0 for this DSpark draft")
        return None
    return None


def _implementation_stage(run: _Run, enabled: list[str], config: Mapping[str, Any],
                          target: Mapping[str, Any] | None, draft: Mapping[str, Any] | None,
                          has_ctx: bool, ctx_model: Mapping[str, Any] | None, ctx_label: str,
                          compat: Mapping[str, Any] | None) -> tuple[list[str], str | None]:
    """common_speculative_init: the chain built, or ("throw"|"abort") for the first failing constructor."""
    has_draft = bool(config.get("draft_model") or config.get("draft_hf_repo"))
    shared_with_target = has_ctx and not has_draft  # the MTP context on the target itself
    chain: list[str] = []
    failure: str | None = None
    drafters = [t for t in INTERNAL_ORDER if t in enabled and t in CONTEXT_BACKED]
    for t in INTERNAL_ORDER:
        if t not in enabled:
            continue
        if t in DRAFTLESS:
            chain.append(t)
            continue
        if t != "draft-simple" and not has_ctx:
            run.silent_off.append(finding(
                "needs-draft-context",
                f"{t} is context-backed: common_speculative_init adds it only when a draft context exists "
                f"(add_config_if_enabled(..., params.draft.ctx_dft != nullptr), {SPC}); with no draft model "
                "(and no draft-mtp) it is skipped without a word",
                f"give {t} its draft with --spec-draft-model, or drop it from --spec-type"))
            continue
        problem = _ctor_problem(t, run, config, target, ctx_model, ctx_label, has_ctx, compat, shared_with_target)
        if problem is None:
            chain.append(t)
            if t == "draft-mtp" and has_draft and target is not None:
                problem = _mtp_width(target, draft)
        if problem is not None:
            failure, f = problem
            if len(drafters) > 1:
                f = dict(f, reason=f["reason"] + f" (chain law: {', '.join(drafters)} are all context-backed and "
                         "share the ONE draft context; one context-backed drafter per process)")
            if failure == "abort":
                run.fatal(Outcome.ABORTS, f)
            else:
                _thrown(run, f, config)
            return [], failure
    for t in ("draft-dflash", "draft-dspark"):
        if t in chain and _mask_missing(t, config, ctx_model):
            run.fatal(Outcome.ABORTS, finding(
                "dflash-draft-without-mask-token",
                f"{t}: the draft declares no tokenizer.ggml.mask_token_id, so llama_vocab_mask gives -1 "
                f"(the constructor logs mask_token_id=-1). llama-server starts and /health answers, but the first "
                f"draft fills its noise block with token -1 (common_speculative_impl_draft_dflash::draft, {SPC}), "
                "common_batch::get_sub_batch reads those as embeddings and GGML_ABORTs 'failed to add embedding' — "
                "the server dies on the first request that drafts",
                "use a DFlash/DSpark draft GGUF that carries tokenizer.ggml.mask_token_id (the converter writes it)"))
            return [], "abort"
    if len(drafters) > 1:
        run.warnings.append(finding(
            "chain-two-drafters",
            f"{', '.join(drafters)} are all context-backed: load_model builds ONE draft context "
            f"(common_speculative_init_result, {SPC}) and every one of them runs on it; the chain law is one "
            "context-backed drafter per process plus any ngram types",
            "keep one context-backed type and layer ngram types on it"))
    return chain, None


def _mask_missing(t: str, config: Mapping[str, Any], draft: Mapping[str, Any] | None) -> bool:
    """A DFlash/DSpark block holds mask tokens past position 0 unless it is one anchor-first DSpark token."""
    values = _values(draft)
    if "tokenizer.ggml.mask_token_id" not in values or values["tokenizer.ggml.mask_token_id"] is not None:
        return False
    if ((draft or {}).get("tokenizer") or {}).get("model") == "bert":
        return False  # WPM's default mask id (103) applies when the key is absent
    n_max = min(config.get("draft_n_max") if config.get("draft_n_max") is not None else DEFAULTS["draft_n_max"],
                _dflash_n_draft_max(t, draft))
    anchor_first = t == "draft-dspark" and str(values.get("dflash.sample_from_anchor", "true")).lower() == "true"
    return (n_max if anchor_first else n_max + 1) > 1


def _mtp_width(target: Mapping[str, Any], draft: Mapping[str, Any] | None) -> tuple[str, dict[str, str]] | None:
    t_w, d_w = target.get("embedding_length"), (draft or {}).get("embedding_length")
    if t_w and d_w and int(t_w) != int(d_w):
        return "abort", finding(
            "mtp-width-mismatch",
            f"the MTP draft's embedding width {d_w} differs from the target's {t_w}: "
            "common_speculative_impl_draft_mtp asserts GGML_ASSERT(n_embd == llama_model_n_embd_out(target) && "
            "\"MTP input row width must match the target h_nextn width\") and llama-server aborts",
            "use the MTP-only draft GGUF built from this target's base model")
    return None


def _thrown(run: _Run, f: dict[str, str], config: Mapping[str, Any]) -> None:
    """A constructor threw: the whole chain is dropped, or, with synthetic acceptance set, a refusal."""
    if _has_synth(config):
        run.fatal(Outcome.REFUSES, dict(f, reason=f["reason"] + (
            f" -> load_model ({SRV}) catches it and, because a synthetic-acceptance flag is set, returns false: "
            "llama-server exits 1")))
        return
    run.silent_off.append(dict(f, reason=f["reason"] + (
        f" -> load_model ({SRV}) catches it, logs 'failed to initialize speculative decoding context' and serves "
        "on with no speculative context: the WHOLE chain is off, ngram types included")))


# ------------------------------------------------------------------ stage 5: synthetic acceptance

def _has_synth(config: Mapping[str, Any]) -> bool:
    return config.get("synth_len") is not None or bool(config.get("synth_rates"))


def _impl_n_max(t: str, config: Mapping[str, Any], draft: Mapping[str, Any] | None) -> int:
    """impl->n_max as each constructor sets it (common_speculative_n_max over the built impls)."""
    def get(k):
        return config.get(k) if config.get(k) is not None else DEFAULTS[k]
    if t in ("draft-dflash", "draft-dspark"):
        return min(get("draft_n_max"), _dflash_n_draft_max(t, draft))
    if t in CONTEXT_BACKED:
        return max(0, get("draft_n_max"))
    return {"ngram-simple": get("ngram_simple_size_m"), "ngram-map-k": get("ngram_map_k_size_m"),
            "ngram-map-k4v": get("ngram_map_k4v_size_m"), "ngram-mod": max(0, get("ngram_mod_n_max")),
            "ngram-cache": 8}[t]


def _dflash_n_draft_max(t: str, draft: Mapping[str, Any] | None) -> int:
    values = _values(draft)
    block = int(values.get("dflash.block_size") or DFLASH_DEFAULT_BLOCK_SIZE)
    anchor = str(values.get("dflash.sample_from_anchor", "true")).lower() == "true"
    return block if t == "draft-dspark" and anchor else block - 1


def _synth_stage(run: _Run, chain: list[str], failed: bool, config: Mapping[str, Any],
                 draft: Mapping[str, Any] | None) -> None:
    if not _has_synth(config):
        return
    if failed:
        return  # already reported as a refusal by _thrown
    if not chain:
        run.fatal(Outcome.REFUSES, finding(
            "synthetic-without-speculation",
            f"a synthetic-acceptance flag is set but no speculative implementation is built: load_model ({SRV}) "
            "logs 'synthetic acceptance requires an initialized speculative decoding context' and llama-server exits 1",
            "add a --spec-type that runs (e.g. ngram-mod), or drop --spec-synth-len/--spec-synth-rates"))
        return
    n_max = max(_impl_n_max(t, config, draft) for t in chain)
    problem = _synth_problem(config, n_max)
    if problem:
        run.fatal(Outcome.REFUSES, finding(
            "synthetic-invalid",
            f"common_speculative_synth_rates_resolve ({SPC}) throws '{problem}' inside common_speculative_init; "
            "with synthetic acceptance set, load_model returns false and llama-server exits 1",
            f"give exactly one of --spec-synth-len (in [1, {n_max + 1}]) or --spec-synth-rates ({n_max} "
            "non-increasing values in [0, 1]) for the built chain's n_max"))
        return
    run.warnings.append(finding(
        "synthetic-acceptance",
        "--spec-synth-len/--spec-synth-rates accept draft tokens at random (server_sample_and_accept_synth, "
        f"{SRV}); common_speculative_init logs 'synthetic speculative acceptance is enabled for benchmarking; "
        "generated output is not valid' — the text is garbage, only the speed arithmetic means anything",
        "never serve users with it; remove the synth flags outside a what-if benchmark"))


def _synth_problem(config: Mapping[str, Any], n_max: int) -> str | None:
    length, rates = config.get("synth_len"), config.get("synth_rates") or []
    if length is not None and rates:
        return "synthetic acceptance length and rates are mutually exclusive"
    if n_max <= 0:
        return "synthetic acceptance requires at least one speculative token"
    if rates:
        if len(rates) != n_max:
            return f"synthetic acceptance rates must contain {n_max} values, got {len(rates)}"
        for i, r in enumerate(rates):
            if not 0.0 <= r <= 1.0:
                return "synthetic acceptance rates must be finite and within [0, 1]"
            if i and r > rates[i - 1]:
                return "synthetic acceptance rates must be monotonically non-increasing"
        return None
    if not 1.0 <= float(length) <= n_max + 1.0:
        return f"synthetic acceptance length must be finite and within [1, {n_max + 1}]"
    return None


# ------------------------------------------------------------------ stage 6: legal but costly

def _cost_stage(run: _Run, chain: list[str], config: Mapping[str, Any], target: Mapping[str, Any] | None,
                draft: Mapping[str, Any] | None) -> None:
    def get(k):
        return config.get(k) if config.get(k) is not None else DEFAULTS[k]
    if "ngram-mod" in chain and get("ngram_mod_n_match") < NGRAM_MOD_MIN_MATCH:
        run.warnings.append(finding(
            "ngram-mod-short-match",
            f"--spec-ngram-mod-n-match {get('ngram_mod_n_match')}: common_speculative_impl_ngram_mod ({SPC}) "
            f"warns below {NGRAM_MOD_MIN_MATCH} ('poor quality is possible'); field measurements "
            "(docs/speculative-decoding.md) saw a too-short ngram window proposing on ordinary prose and losing "
            "(43.9 -> 36.0 tok/s)",
            f"keep n-match >= {NGRAM_MOD_MIN_MATCH} (default 24) and sweep the window in the A/B run"))
    if "draft-mtp" in chain and get("draft_n_max") > MTP_USEFUL_DEPTH:
        run.warnings.append(finding(
            "mtp-deep-draft",
            f"draft-mtp with --spec-draft-n-max {get('draft_n_max')}: field measurements "
            "(docs/speculative-decoding.md) put accepted MTP draft lengths at 2-3 tokens, so positions past "
            f"{MTP_USEFUL_DEPTH} are drafted and verified but rarely kept",
            "sweep --spec-draft-n-max 1..3 and keep the measured winner"))
    for t in ("draft-dflash", "draft-dspark"):
        if t in chain:
            cap = _dflash_n_draft_max(t, draft)
            if get("draft_n_max") > cap or get("draft_n_min") > cap:
                run.warnings.append(finding(
                    "dflash-n-max-clamped",
                    f"{t}: --spec-draft-n-max {get('draft_n_max')} exceeds what the trained block yields ({cap}); "
                    f"common_speculative_impl_draft_dflash ({SPC}) warns and clamps it to {cap}",
                    f"set --spec-draft-n-max {cap} or lower"))
            _drafter_type_mismatch(run, t, draft)
    _recurrent_rules(run, chain, config, target)
    _drafter_kv(run, chain, config, target, draft)


def _drafter_type_mismatch(run: _Run, t: str, draft: Mapping[str, Any] | None) -> None:
    detected = (draft or {}).get("spec_type_autodetect")
    if detected in ("draft-dflash", "draft-dspark") and detected != t:
        has_markov = detected == "draft-dspark"
        run.warnings.append(finding(
            "drafter-type-mismatch",
            f"--spec-type {t} on a draft llama.cpp identifies as {detected} (markov_w1.weight "
            f"{'present' if has_markov else 'absent'}, common_speculative_types_from_gguf): the graph applies the "
            "Markov head whenever the file has it (src/models/dflash.cpp), while the block layout follows the "
            f"type ({'DSpark anchor-first' if t == 'draft-dspark' else 'DFlash [id_last, mask...]'}) — the layout "
            "the draft was not trained for",
            f"use --spec-type {detected} for this file"))


def _recurrent_rules(run: _Run, chain: list[str], config: Mapping[str, Any], target: Mapping[str, Any] | None) -> None:
    if not target or not target.get("recurrent_layers") or not chain:
        return
    arch = _arch(target)

    def get(k):
        return config.get(k) if config.get(k) is not None else DEFAULTS[k]
    rs_types = [t for t in chain if t in NEEDS_RS_SEQ]
    n_rs = get("draft_n_max") if rs_types and arch in RS_ROLLBACK_ARCHS else 0
    ngram = [t for t in chain if t in DRAFTLESS]
    if n_rs > 0:
        longer = [t for t in ngram if _impl_n_max(t, config, None) > n_rs]
        if longer:
            run.warnings.append(finding(
                "recurrent-ngram-rollback",
                f"{arch} is hybrid/recurrent: {', '.join(rs_types)} asks for n_rs_seq = --spec-draft-n-max = {n_rs} "
                "recurrent-state snapshots (need_n_rs_seq, common/common.h), and partial rollback works only for "
                f"drafts up to that length; {', '.join(longer)} drafts up to "
                f"{max(_impl_n_max(t, config, None) for t in longer)} tokens, and every longer draft takes the "
                f"checkpoint path instead (use_ckpt_tgt in {SRV}: full-state copy, restore and replay on partial "
                "acceptance). Field measurements (docs/speculative-decoding.md) saw draft-mtp,ngram-mod on the "
                "qwen35 hybrid losing on ALL traffic shapes (2026-10-03) — measure chains per architecture",
                f"drop {', '.join(longer)} from the chain on this target, or cap its draft length at "
                f"{n_rs} and A/B it"))
    else:
        why = (f"{arch} has no partial recurrent rollback (llm_arch_supports_rs_rollback)" if rs_types else
               "no type in the chain asks for recurrent snapshots (need_n_rs_seq counts draft-eagle3/mtp/dflash/"
               "dspark only)")
        run.warnings.append(finding(
            "recurrent-checkpoints",
            f"{arch} is hybrid/recurrent and {why}, so n_rs_seq = 0: common_context_can_seq_rm reports FULL and "
            f"every draft is bracketed by a full-state checkpoint, restored and replayed on partial acceptance "
            f"({SRV})",
            "measure this chain against no speculation on this architecture before deploying it"))


def _drafter_kv(run: _Run, chain: list[str], config: Mapping[str, Any], target: Mapping[str, Any] | None,
                draft: Mapping[str, Any] | None) -> None:
    has_draft = bool(config.get("draft_model"))
    drafters = [t for t in chain if t in CONTEXT_BACKED]
    if not (has_draft and drafters and draft):
        return
    if draft.get("sliding_window"):
        return
    n_ctx = config.get("ctx_size") or (target or {}).get("context_length")
    per_pos = _kv_bytes_per_position(draft, str(config.get("draft_cache_type_k") or "f16"),
                                     str(config.get("draft_cache_type_v") or "f16"))
    if not (n_ctx and per_pos) or per_pos * int(n_ctx) < DRAFT_KV_WARN_BYTES:
        return
    size = f": about {per_pos / 1024:.1f} KiB per position, {per_pos * int(n_ctx) / 2**20:.0f} MiB at {n_ctx}"
    run.warnings.append(finding(
        "drafter-kv-full-window",
        "the draft context is built with cparams.n_ctx = llama_n_ctx(ctx_tgt) (common_speculative_init_result, "
        f"{SPC}) — no flag caps it — and this draft declares no sliding window, so it caches the whole target "
        f"window on the --spec-draft-device{size}. A DSpark deployment was lost to this in the field "
        "(docs/speculative-decoding.md: OOM at the first draft graph after /health answered)",
        "size it with llmfleet.specdec.kv_budget; prefer a skewed -ts over a context cut when the full window matters"))
