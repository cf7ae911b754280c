# Copyright: (c) 2026, llmfleet.specdec contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# Private to the collection: llama.cpp's own rules — pinned tree, spec types, defaults, build gates, vocabulary check.
"""llama.cpp's rules, as the pinned llama.cpp tree states them (``PINNED``: llama-cpp-python 0.3.36's vendor/llama.cpp).

This is the one home of the facts about llama.cpp itself: which tree the project pins (``PINNED``,
``SOURCE_TREE``; the Makefile and the test bed read the version from here), the ``--spec-type``
names and the chain families (``SPEC_TYPES``, ``DRAFTLESS``, ``CONTEXT_BACKED``, ``INTERNAL_ORDER``,
``NEEDS_RS_SEQ``, the architecture sets), the ``common_params_speculative`` defaults, the build gates
(``parse_build``, ``spec_type_vocabulary``) and the source-file names the rules cite. It holds no
HTTP and no lint stages: spec_lint's stages live in ``_lint_rules``, its entry points in ``_lint``,
the option table in ``_flags_table``.

``vocab_params`` reproduces how src/llama-vocab.cpp (llama_vocab::impl::load) derives the vocabulary
type, the bos/eos ids and the add-bos/add-eos flags from a header, and whether it loads the file at
all (``_llamacpp_vocab``); ``are_compatible`` reproduces common/speculative.cpp
common_speculative_are_compatible() on top of it, reason by reason, on the token texts as the loader
keeps them.
"""
from __future__ import annotations

import re
from typing import Any

from ansible_collections.llmfleet.specdec.plugins.module_utils.common._errors import SpecdecError
from ansible_collections.llmfleet.specdec.plugins.module_utils.gguf._gguf import GGUFHeader
from ansible_collections.llmfleet.specdec.plugins.module_utils.gguf._model_facts import tokenizer_facts
from ansible_collections.llmfleet.specdec.plugins.module_utils.llamacpp._llamacpp_vocab import (
    ABORTS,
    VOCAB_TYPES,
    LoadedTexts,
    first_difference,
    load_vocab,
)

__all__ = ["ARG", "CONTEXT_BACKED", "DEFAULTS", "DFLASH_DEFAULT_BLOCK_SIZE", "DRAFTLESS", "INTERNAL_ORDER",
           "MTP_GRAPH_ARCHS", "MTP_RENAME_BUILD", "NEEDS_RS_SEQ", "NGRAM_MOD_MIN_MATCH", "PINNED", "RS_ROLLBACK_ARCHS",
           "SOURCE_TREE", "SPC", "SPEC_TYPES", "SRV", "VOCAB_TYPES", "are_compatible", "compare_vocabs",
           "compat_report", "first_token_mismatch", "parse_build", "spec_type_vocabulary", "vocab_params"]

# The pinned tree records no build number (its --version prints the local git count); the field
# notes call that era b10133+, so a build given as None is treated as that.
# The Makefile and tests/testbed/build_llama_server.sh read "llama_cpp_python" from this line with the
# system python3 (tests/testbed/pinned.py), before any venv exists: keep it a literal dict.
PINNED = {"llama_cpp_python": "0.3.36", "commit": "0c1e57098", "build": None, "assumed_build": 10133}
SOURCE_TREE = f"llama-cpp-python {PINNED['llama_cpp_python']} vendor/llama.cpp (ggml-org/llama.cpp@{PINNED['commit']})"
MTP_RENAME_BUILD = 9180  # field notes: --spec-type mtp -> draft-mtp in May 2026, PR #22673, b9180+

# common/speculative.cpp common_speculative_type_from_name_map (the pinned vocabulary).
SPEC_TYPES = ("none", "draft-simple", "draft-eagle3", "draft-mtp", "draft-dflash", "draft-dspark",
              "ngram-simple", "ngram-map-k", "ngram-map-k4v", "ngram-mod", "ngram-cache")
DRAFTLESS = ("ngram-simple", "ngram-map-k", "ngram-map-k4v", "ngram-mod", "ngram-cache")
CONTEXT_BACKED = ("draft-simple", "draft-eagle3", "draft-mtp", "draft-dflash", "draft-dspark")
# common_speculative_init: "this list here defines the priority of the speculators".
INTERNAL_ORDER = DRAFTLESS + CONTEXT_BACKED
# common_params_speculative::need_n_rs_seq: these ask the target context for n_rs_seq = draft n_max
# recurrent-state snapshots; draft-simple and the ngram types do not.
NEEDS_RS_SEQ = ("draft-eagle3", "draft-mtp", "draft-dflash", "draft-dspark")
# src/llama-arch.cpp llm_arch_supports_rs_rollback.
RS_ROLLBACK_ARCHS = frozenset({"kimi-k3", "qwen35", "qwen35moe", "qwen4exp", "deepseek4", "glm5-next",
                               "nemotron_h", "nemotron_h_moe", "lfm2", "lfm2moe", "bailingmoe3"})

# Architectures whose graph builder has an LLM_GRAPH_TYPE_DECODER_MTP branch (src/models/*.cpp), plus
# gemma4-assistant, the memory-sharing MTP draft common_speculative_impl_draft_mtp knows. For any other
# architecture an MTP context cannot be built even when nextn layers are declared: measured on glm4,
# llama_init_from_model fails ("failed to initialize the context: unordered_map::at").
MTP_GRAPH_ARCHS = frozenset({"bailingmoe3", "cohere2moe", "deepseek2", "deepseek32", "deepseek4", "glm-dsa",
                             "glm4moe", "glm5-next", "hy_v3", "mimo2", "nemotron_h_moe", "qwen35", "qwen35moe",
                             "qwen3next", "step35", "gemma4-assistant"})

# common/common.h defaults (common_params_speculative_*).
DEFAULTS = {"draft_n_max": 3, "draft_n_min": 0, "draft_p_min": 0.0, "ngram_mod_n_match": 24,
            "ngram_mod_n_max": 64, "ngram_mod_n_min": 48, "ngram_simple_size_m": 48,
            "ngram_map_k_size_m": 48, "ngram_map_k4v_size_m": 48}
DFLASH_DEFAULT_BLOCK_SIZE = 16  # common_speculative_impl_draft_dflash: block_size = 16 unless dflash.block_size
NGRAM_MOD_MIN_MATCH = 16        # common_speculative_impl_ngram_mod warns below this n_match

# Source files the rules cite.
SPC = "common/speculative.cpp"
SRV = "tools/server/server-context.cpp"
ARG = "common/arg.cpp"

# common/speculative.cpp
SPEC_VOCAB_MAX_SIZE_DIFFERENCE = 128
SPEC_VOCAB_CHECK_START_TOKEN_ID = 5

# What the server does when the pair is refused: tools/server/server-context.cpp catches the
# exception common_speculative_init throws, logs it, and serves on without a speculative context.
# The check runs only in common_speculative_impl_draft_simple's constructor (--spec-type
# draft-simple, which a plain draft needs named: with -md alone the type list stays 'none');
# the trained-head types do not call it.
REFUSAL_BEHAVIOUR = (
    "llama-server logs 'the target and draft vocabs are not compatible' and 'failed to initialize "
    "speculative decoding context', then keeps serving WITHOUT speculation (/slots shows "
    "speculative: false); only with the synthetic-acceptance flags does it refuse to start"
)
# tools/server/server-context.cpp load_model: a target that does not load ("failed to load model")
# or a draft that does not load ("failed to load draft model") makes load_model return false and
# llama-server exit; a failed GGML_ASSERT in the loader aborts the process.
UNLOADABLE_BEHAVIOUR = {
    "throws": "llama-server logs 'error loading model' and 'failed to load {what}', then exits: it does "
              "not start, with or without speculation",
    "aborts": "llama-server aborts while loading the {what} (a failed GGML_ASSERT): it does not start",
}
CHECKED_BY = ("draft-simple",)
# server_outcome values
SPECULATES = "speculates"
SERVES_WITHOUT_SPECULATION = "serves-without-speculation"
REFUSES_TO_START = "refuses-to-start"
ABORTS_AT_START = "aborts-at-start"


def parse_build(build: Any) -> int | None:
    """'b10133', '10133' or 10133 -> 10133; None -> None (the pinned tree)."""
    if build is None or build == "":
        return None
    if isinstance(build, bool):
        raise SpecdecError(f"build={build!r} is not a llama.cpp build; give it as b<number>, e.g. b10133")
    if isinstance(build, int):
        return build
    m = re.fullmatch(r"\s*b?(\d+)\s*", str(build))
    if not m:
        raise SpecdecError(f"build={build!r} is not a llama.cpp build number; give it as b<number>, e.g. b10133")
    return int(m.group(1))


def spec_type_vocabulary(build: int | None) -> tuple[str, ...]:
    """The --spec-type names a build accepts: the pinned map, with ``mtp`` for ``draft-mtp`` before b9180."""
    if build is not None and build < MTP_RENAME_BUILD:
        return tuple("mtp" if t == "draft-mtp" else t for t in SPEC_TYPES)
    return SPEC_TYPES


def _canonical_type(name: str, build: int | None) -> str:
    return "draft-mtp" if name == "mtp" and build is not None and build < MTP_RENAME_BUILD else name


def vocab_params(hdr: GGUFHeader) -> dict[str, Any]:
    """Vocabulary type, n_tokens, bos/eos ids and add flags as llama.cpp ends up with them.

    ``loads`` is false when llama.cpp refuses the file; ``load_error`` says why and
    ``load_failure`` how ("throws": the server exits; "aborts": a GGML_ASSERT kills it)."""
    params = load_vocab(hdr, keep_texts=False)
    params.pop("texts")
    return params


def first_token_mismatch(target: GGUFHeader, draft: GGUFHeader,
                         start: int = SPEC_VOCAB_CHECK_START_TOKEN_ID) -> dict[str, Any] | None:
    """The first id >= ``start`` (below both vocab sizes) whose loaded token text differs, with both texts.

    Texts are compared as llama.cpp holds them (cut at NUL, empty ones named [EMPTY_<id>], hybriddna
    k-mer markers stripped); None when either side has no loadable token list."""
    return _mismatch(load_vocab(target)["texts"], load_vocab(draft)["texts"], start)


def _mismatch(tt: LoadedTexts | None, dt: LoadedTexts | None, start: int = SPEC_VOCAB_CHECK_START_TOKEN_ID
              ) -> dict[str, Any] | None:
    """Both vocabularies walked side by side in their header buffers (nothing per token is held)."""
    if tt is None or dt is None:
        return None
    found = first_difference(tt, dt, start)
    if found is None:
        return None
    i, a, b = found
    return {"id": i, "target": a.decode("utf-8", "replace"), "draft": b.decode("utf-8", "replace")}


def _public(p: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in p.items() if k != "texts"}


def are_compatible(target: GGUFHeader, draft: GGUFHeader) -> dict[str, Any]:
    """common_speculative_are_compatible(), with every reason rather than the first.

    llama.cpp stops at the first failing check; ``reasons`` lists each failing check in its order,
    and ``first_mismatch`` the first differing token text from id 5 on. A side llama.cpp will not
    load at all makes the pair incompatible with that as the reason, and ``server_outcome`` says
    what llama-server then does."""
    return compare_vocabs(load_vocab(target), load_vocab(draft))


def compare_vocabs(tp: dict[str, Any], dp: dict[str, Any]) -> dict[str, Any]:
    """are_compatible() on two ``load_vocab`` results (texts kept): for comparing many pairs."""
    reasons: list[str] = []
    outcome = None
    for side, what, p in (("target", "model", tp), ("draft", "draft model", dp)):
        if not p["loads"]:
            reasons.append(f"{side}: will not load: {p['load_error']} - "
                           + UNLOADABLE_BEHAVIOUR[p["load_failure"]].format(what=what))
            outcome = outcome or (ABORTS_AT_START if p["load_failure"] == ABORTS else REFUSES_TO_START)
    if outcome is not None:
        return _verdict(tp, dp, reasons, None, outcome)
    if tp["vocab_type"] != dp["vocab_type"]:
        reasons.append(
            f"vocab type differs: target {tp['vocab_type']} ({VOCAB_TYPES.get(tp['vocab_type'])}), "
            f"draft {dp['vocab_type']} ({VOCAB_TYPES.get(dp['vocab_type'])})")
    if tp["add_bos"] != dp["add_bos"] or (tp["add_bos"] and tp["bos_id"] != dp["bos_id"]):
        reasons.append(
            f"bos differs: add_bos target {tp['add_bos']} / draft {dp['add_bos']}, "
            f"bos id target {tp['bos_id']} / draft {dp['bos_id']}")
    if tp["add_eos"] != dp["add_eos"] or (tp["add_eos"] and tp["eos_id"] != dp["eos_id"]):
        reasons.append(
            f"eos differs: add_eos target {tp['add_eos']} / draft {dp['add_eos']}, "
            f"eos id target {tp['eos_id']} / draft {dp['eos_id']}")
    diff = abs(tp["n_tokens"] - dp["n_tokens"])
    if diff > SPEC_VOCAB_MAX_SIZE_DIFFERENCE:
        reasons.append(
            f"vocab size differs by {diff} (target {tp['n_tokens']}, draft {dp['n_tokens']}); "
            f"llama.cpp allows at most {SPEC_VOCAB_MAX_SIZE_DIFFERENCE}")
    n_common = min(tp["n_tokens"], dp["n_tokens"])
    if not reasons and tp["vocab_type"] == "NONE" and n_common > SPEC_VOCAB_CHECK_START_TOKEN_ID:
        # the text loop calls llama_vocab_get_text, which asserts type != NONE
        reasons.append("both vocabularies are tokenizer model 'none' with more than 5 tokens: llama.cpp's text "
                       "comparison aborts (GGML_ASSERT in llama_vocab::token_get_text)")
        return _verdict(tp, dp, reasons, None, ABORTS_AT_START)
    # llama.cpp compares token texts only once the size check passed; we always look, to show it.
    mismatch = _mismatch(tp["texts"], dp["texts"])
    if mismatch is not None:
        reasons.append(
            f"token {mismatch['id']} differs: target {mismatch['target']!r}, draft {mismatch['draft']!r}")
    return _verdict(tp, dp, reasons, mismatch, SERVES_WITHOUT_SPECULATION if reasons else SPECULATES)


def _verdict(tp: dict[str, Any], dp: dict[str, Any], reasons: list[str], mismatch: dict[str, Any] | None,
             outcome: str) -> dict[str, Any]:
    return {
        "compatible": not reasons,
        "loads": tp["loads"] and dp["loads"],
        "server_outcome": outcome,
        "reasons": reasons,
        "first_mismatch": mismatch,
        "target_vocab": _public(tp),
        "draft_vocab": _public(dp),
        "when_refused": REFUSAL_BEHAVIOUR,
        "checked_for_spec_types": list(CHECKED_BY),
    }


def compat_report(target: GGUFHeader, draft: GGUFHeader) -> dict[str, Any]:
    """What spec_compat returns: llama.cpp's verdict, tokenizer identity, both sides' facts."""
    verdict = are_compatible(target, draft)
    tt, dt = tokenizer_facts(target), tokenizer_facts(draft)
    return {
        "compatible": verdict["compatible"],
        "loads": verdict["loads"],
        "server_outcome": verdict["server_outcome"],
        "reasons": verdict["reasons"],
        "first_mismatch": verdict["first_mismatch"],
        "tokenizers_identical": tt["fingerprint"] is not None and tt["fingerprint"] == dt["fingerprint"],
        "tokens_sha256_2000_equal": tt["tokens_sha256_2000"] is not None
        and tt["tokens_sha256_2000"] == dt["tokens_sha256_2000"],
        "when_refused": verdict["when_refused"],
        "checked_for_spec_types": verdict["checked_for_spec_types"],
        "target": dict(tt, vocab=verdict["target_vocab"], source=target.source),
        "draft": dict(dt, vocab=verdict["draft_vocab"], source=draft.source),
    }
