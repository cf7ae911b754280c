# Private to the collection: llama.cpp's own rules — the draft/target vocabulary compatibility check.
"""llama.cpp's rules, as the pinned llama.cpp tree states them (llama-cpp-python 0.3.36's vendor/llama.cpp).

``vocab_params`` reproduces how src/llama-vocab.cpp (llama_vocab::impl::load) derives the vocabulary
type, the bos/eos ids and the add-bos/add-eos flags from a header; ``are_compatible`` reproduces
common/speculative.cpp common_speculative_are_compatible() on top of it, reason by reason.
"""
from __future__ import annotations

from typing import Any

from ansible_collections.llmfleet.specdec.plugins.module_utils._gguf import Array, GGUFHeader, ValueType
from ansible_collections.llmfleet.specdec.plugins.module_utils._model_facts import tokenizer_facts

# common/speculative.cpp
SPEC_VOCAB_MAX_SIZE_DIFFERENCE = 128
SPEC_VOCAB_CHECK_START_TOKEN_ID = 5

# enum llama_vocab_type (include/llama.h); the number is what llama.cpp's warning prints.
VOCAB_TYPES = {"NONE": 0, "SPM": 1, "BPE": 2, "WPM": 3, "UGM": 4, "RWKV": 5, "PLAMO2": 6}
_MODEL_TO_TYPE = {
    "no_vocab": "NONE", "none": "NONE",
    "llama": "SPM",
    "bert": "WPM",
    "gpt2": "BPE", "hybriddna": "BPE", "whitespace": "BPE", "gemma4": "BPE",
    "t5": "UGM",
    "rwkv": "RWKV",
    "plamo2": "PLAMO2",
}
# Default special ids per vocabulary type before the header's own keys (None = LLAMA_TOKEN_NULL).
_DEFAULT_BOS_EOS = {
    "NONE": (None, None), "SPM": (1, 2), "WPM": (101, None), "BPE": (11, 11),
    "UGM": (None, 1), "RWKV": (None, None), "PLAMO2": (1, 2),
}
# Default add_bos/add_eos per type; BPE pre-tokenizers below switch add_bos on.
_DEFAULT_ADD = {
    "NONE": (False, False), "SPM": (True, False), "WPM": (True, False), "BPE": (False, False),
    "UGM": (False, True), "RWKV": (False, False), "PLAMO2": (False, False),
}
_BPE_PRE_ADD_BOS = frozenset({
    "llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral", "midm-2.0", "lfm2",
    "jina-v5-nano", "tekken", "chameleon",
})
_BPE_PRE_NO_BOS = frozenset({"chatglm-bpe", "glm4", "glm5"})

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
CHECKED_BY = ("draft-simple",)


def vocab_params(hdr: GGUFHeader) -> dict[str, Any]:
    """Vocabulary type, n_tokens, bos/eos ids and add flags as llama.cpp ends up with them."""
    model = hdr.get("tokenizer.ggml.model")
    pre = hdr.get("tokenizer.ggml.pre") or ""
    tokens = hdr.get("tokenizer.ggml.tokens")
    n_tokens = len(tokens) if isinstance(tokens, Array) else 0
    vtype = _MODEL_TO_TYPE.get(model) if isinstance(model, str) else None
    params: dict[str, Any] = {
        "tokenizer_model": model, "pre": pre or None, "vocab_type": vtype, "n_tokens": n_tokens,
        "bos_id": None, "eos_id": None, "add_bos": False, "add_eos": False, "problems": [],
    }
    if vtype is None:
        params["problems"].append(
            f"tokenizer.ggml.model {model!r} is not a tokenizer this llama.cpp knows; the model will not load")
        return params
    bos, eos = _DEFAULT_BOS_EOS[vtype]
    add_bos, add_eos = _DEFAULT_ADD[vtype]
    if vtype == "BPE":
        if model == "gemma4" or pre == "gemma4":
            bos = eos = None
        if pre in _BPE_PRE_ADD_BOS:
            add_bos = True
        if pre in _BPE_PRE_NO_BOS:
            bos = None
    # defaults out of range are disabled; header ids in range replace them
    for name, default in (("bos", bos), ("eos", eos)):
        value = default if default is not None and default < n_tokens else None
        key = hdr.kv.get(f"tokenizer.ggml.{name}_token_id")
        if key is not None and isinstance(key.value, int) and 0 <= key.value < n_tokens:
            value = key.value
        params[f"{name}_id"] = value
    for name, default in (("add_bos", add_bos), ("add_eos", add_eos)):
        key = hdr.kv.get(f"tokenizer.ggml.{name}_token")
        params[name] = bool(key.value) if key is not None and key.vtype == ValueType.BOOL else default
    if (model == "gemma4" or pre == "gemma4") and not params["add_bos"]:
        params["add_bos"] = True
    return params


def _token_texts(hdr: GGUFHeader) -> Array | None:
    tokens = hdr.get("tokenizer.ggml.tokens")
    if isinstance(tokens, Array) and tokens.elem_type == ValueType.STRING:
        return tokens
    return None


def first_token_mismatch(target: GGUFHeader, draft: GGUFHeader,
                         start: int = SPEC_VOCAB_CHECK_START_TOKEN_ID) -> dict[str, Any] | None:
    """The first id >= ``start`` (below both vocab sizes) whose token text differs, with both texts."""
    tt, dt = _token_texts(target), _token_texts(draft)
    if tt is None or dt is None:
        return None
    n = min(len(tt), len(dt))
    for i, (a, b) in enumerate(zip(tt.iter_bytes(n), dt.iter_bytes(n))):
        if i >= start and a != b:
            return {"id": i, "target": a.decode("utf-8", "replace"), "draft": b.decode("utf-8", "replace")}
    return None


def are_compatible(target: GGUFHeader, draft: GGUFHeader) -> dict[str, Any]:
    """common_speculative_are_compatible(), with every reason rather than the first.

    llama.cpp stops at the first failing check; ``reasons`` lists each failing check in its order,
    and ``first_mismatch`` the first differing token text from id 5 on.
    """
    tp, dp = vocab_params(target), vocab_params(draft)
    reasons: list[str] = []
    for side, p in (("target", tp), ("draft", dp)):
        reasons.extend(f"{side}: {problem}" for problem in p["problems"])
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
    # llama.cpp compares token texts only once the size check passed; we always look, to show it.
    mismatch = first_token_mismatch(target, draft)
    if mismatch is not None:
        reasons.append(
            f"token {mismatch['id']} differs: target {mismatch['target']!r}, draft {mismatch['draft']!r}")
    return {
        "compatible": not reasons,
        "reasons": reasons,
        "first_mismatch": mismatch,
        "target_vocab": {k: v for k, v in tp.items() if k != "problems"},
        "draft_vocab": {k: v for k, v in dp.items() if k != "problems"},
        "when_refused": REFUSAL_BEHAVIOUR,
        "checked_for_spec_types": list(CHECKED_BY),
    }


def compat_report(target: GGUFHeader, draft: GGUFHeader) -> dict[str, Any]:
    """What spec_compat returns: llama.cpp's verdict, tokenizer identity, both sides' facts."""
    verdict = are_compatible(target, draft)
    tt, dt = tokenizer_facts(target), tokenizer_facts(draft)
    return {
        "compatible": verdict["compatible"],
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
