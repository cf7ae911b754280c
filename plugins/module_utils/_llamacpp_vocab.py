# Copyright: (c) 2026, llmfleet.specdec contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# Private to the collection: how llama.cpp's vocabulary loader reads a GGUF header, and when it refuses it.
"""llama_vocab::impl::load (src/llama-vocab.cpp of the pinned tree), step by step, on a parsed header.

``load_vocab`` returns what the loader ends up with (vocabulary type, token count, bos/eos ids,
add-bos/add-eos flags, the token texts as llama.cpp keeps them) and, where llama.cpp would refuse
the file, why and how: ``throws`` (llama_model_load catches it: "error loading model", the server
exits) or ``aborts`` (a GGML_ASSERT: the process dies). Only the header is read: a tensor that
does not match the vocabulary is not checked here.
"""
from __future__ import annotations

from typing import Any, Iterator

from ansible_collections.llmfleet.specdec.plugins.module_utils._gguf import Array, GGUFHeader, ValueType

# enum llama_vocab_type (include/llama.h); the number is what llama.cpp's warning prints.
VOCAB_TYPES = {"NONE": 0, "SPM": 1, "BPE": 2, "WPM": 3, "UGM": 4, "RWKV": 5, "PLAMO2": 6, "TEST": 7}
# tokenizer.ggml.model -> (type, default bos, default eos); None = LLAMA_TOKEN_NULL
_MODELS: dict[str, tuple[str, int | None, int | None]] = {
    "no_vocab": ("NONE", None, None), "none": ("NONE", None, None),
    "llama": ("SPM", 1, 2),
    "bert": ("WPM", 101, None),
    "gpt2": ("BPE", 11, 11), "hybriddna": ("BPE", 11, 11), "whitespace": ("BPE", 11, 11),
    "t5": ("UGM", None, 1),
    "rwkv": ("RWKV", None, None),
    "test": ("TEST", None, None),
    "plamo2": ("PLAMO2", 1, 2),
    "gemma4": ("BPE", None, None),
}
# add_bos/add_eos after the type branch; BPE keeps the impl defaults (false) unless its pre-tokenizer says
_TYPE_ADD = {"SPM": (True, False), "WPM": (True, False), "UGM": (False, True), "RWKV": (False, False)}
# every pre-tokenizer name the BPE branch knows; anything else throws "unknown pre-tokenizer type"
_PRE_ADD_BOS = frozenset({
    "llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral", "midm-2.0", "lfm2", "jina-v5-nano",
    "tekken", "chameleon",
})
_PRE_NO_BOS = frozenset({"chatglm-bpe", "glm4", "glm5"})
# LLAMA_VOCAB_PRE_TYPE_GEMMA4: add_bos is forced on after the header's own add_bos_token
_PRE_GEMMA4 = frozenset({"gemma4", "granite-embed-multi-311m"})
KNOWN_PRE = _PRE_ADD_BOS | _PRE_NO_BOS | _PRE_GEMMA4 | frozenset({
    "default", "minicpm5", "deepseek-llm", "deepseek-coder", "deepseek-v3", "spark2_5", "youtu", "falcon", "mpt",
    "starcoder", "gpt-2", "phi-2", "jina-es", "jina-de", "gigachat", "jina-v2-es", "jina-v2-de", "a.x-4.0",
    "mellum", "modern-bert", "jais-2", "sarvam-moe", "jina-v1-en", "jina-v2-code", "roberta-bpe",
    "whitespace", "refact", "command-r", "qwen2", "deepseek-r1-qwen", "kormo", "f2llmv2", "qwen35",
    "stablelm2", "olmo", "dbrx", "smaug-bpe", "poro-chat", "viking", "jais", "smollm", "codeshell", "bloom",
    "gpt3-finnish", "exaone", "exaone4", "exaone-moe", "minerva-7b", "megrez", "gpt-4o", "llama4", "kanana2",
    "talkie", "granite-embed-multi-97m", "tiny_aya", "cohere2moe", "superbpe", "trillion", "granite-docling",
    "bailingmoe", "bailingmoe2", "llada-moe", "seed-coder", "hunyuan", "hunyuan-dense", "hy_v4", "joyai-llm",
    "kimi-k2", "ufakzeka", "grok-2", "afmoe", "laguna", "minimax-m2", "solar-open", "mellum2",
})
# the special-token ids the loader reads as uint32 (a key stored as another type throws)
SPECIAL_ID_KEYS = (
    "bos", "eos", "eot", "eom", "unknown", "seperator", "padding", "mask", "fim_pre", "fim_suf", "fim_mid",
    "fim_pad", "fim_rep", "fim_sep", "prefix", "suffix", "middle",
)
# hybriddna: the k-mer marker (U+E000) the loader strips from the tokens after <oov>
DNA_KMER_MARKER = "\ue000".encode()
P = "tokenizer.ggml."

THROWS = "throws"   # llama_model_load: "error loading model: ..." - llama-server exits at start
ABORTS = "aborts"   # GGML_ASSERT - the llama-server process aborts at start


class _RefusedError(Exception):
    def __init__(self, how: str, message: str) -> None:
        super().__init__(message)
        self.how = how


def _type_name(kv: Any) -> str:
    if kv.vtype == ValueType.ARRAY:
        return f"array of {ValueType(kv.value.elem_type).name.lower()}"
    return ValueType(kv.vtype).name.lower()


def _get(hdr: GGUFHeader, key: str, vtype: ValueType, *, required: bool = False) -> Any:
    """llama_model_loader::get_key: absent -> None (or throw when required); another type -> throw."""
    kv = hdr.kv.get(key)
    if kv is None:
        if required:
            raise _RefusedError(THROWS, f"key not found in model: {key}")
        return None
    if kv.vtype != vtype:
        raise _RefusedError(THROWS, f"key {key} has wrong type {_type_name(kv)} but expected type "
                            f"{vtype.name.lower()}; rewrite it as {vtype.name.lower()}")
    return kv.value


def _array(hdr: GGUFHeader, key: str, elem_types: tuple[ValueType, ...]) -> Array | None:
    kv = hdr.kv.get(key)
    if kv is None:
        return None
    if kv.vtype != ValueType.ARRAY or not isinstance(kv.value, Array) or kv.value.elem_type not in elem_types:
        want = " or ".join(f"array of {t.name.lower()}" for t in elem_types)
        raise _RefusedError(THROWS, f"invalid gguf type for {key}: {_type_name(kv)}; llama.cpp needs {want}")
    return kv.value


def _loaded_texts(tokens: Array) -> Iterator[bytes]:
    """Token texts as id_to_token holds them: cut at the first NUL (a C string), empty -> [EMPTY_<id>]."""
    for i, raw in enumerate(tokens.iter_bytes()):
        text = raw.split(b"\0", 1)[0]
        yield text if text else f"[EMPTY_{i}]".encode()


def _duplicate(texts: list[bytes]) -> tuple[int, int, bytes] | None:
    seen: dict[bytes, int] = {}
    for i, text in enumerate(texts):
        first = seen.setdefault(text, i)
        if first != i:
            return first, i, text
    return None


def load_vocab(hdr: GGUFHeader, *, keep_texts: bool = True) -> dict[str, Any]:
    """What llama_vocab::impl::load makes of this header: see the module docstring."""
    out: dict[str, Any] = {
        "tokenizer_model": None, "pre": None, "vocab_type": None, "n_tokens": 0, "bos_id": None, "eos_id": None,
        "add_bos": False, "add_eos": False, "loads": True, "load_error": None, "load_failure": None, "texts": None,
    }
    try:
        _load(hdr, out, keep_texts)
    except _RefusedError as exc:
        out.update(loads=False, load_error=str(exc), load_failure=exc.how, texts=None)
    return out


def _load(hdr: GGUFHeader, out: dict[str, Any], keep_texts: bool) -> None:
    model = _get(hdr, P + "model", ValueType.STRING, required=True)
    pre = _get(hdr, P + "pre", ValueType.STRING) or ""
    _get(hdr, P + "token_type_count", ValueType.UINT32)
    out["tokenizer_model"], out["pre"] = model, pre or None
    if model not in _MODELS:
        raise _RefusedError(THROWS, f"unknown tokenizer: '{model}' (tokenizer.ggml.model); this llama.cpp knows "
                            f"{', '.join(sorted(_MODELS))}")
    vtype, bos, eos = _MODELS[model]
    out["vocab_type"] = vtype
    if vtype == "NONE":
        # returns before the token list, the special ids and add_bos are read
        arch = hdr.get("general.architecture")
        n = _get(hdr, f"{arch}.vocab_size", ValueType.UINT32) if isinstance(arch, str) else None
        out["n_tokens"] = int(n or 0)
        return
    if model in ("gpt2", "hybriddna", "whitespace", "gemma4"):
        merges = hdr.kv.get(P + "merges")
        if merges is None and not (model != "gemma4" and pre == "kimi-k2"):
            raise _RefusedError(THROWS, "cannot find tokenizer merges in model file (tokenizer.ggml.merges); a "
                                f"'{model}' vocabulary needs its merge list")
        _array(hdr, P + "merges", (ValueType.STRING,))
    if model == "t5":
        _check_charsmap(hdr)
    if model == "gemma4":
        pre = "gemma4"  # the loader overrides whatever the header says
        out["pre"] = pre
    add_bos, add_eos = _TYPE_ADD.get(vtype, (False, False))
    if vtype == "BPE":
        if pre and pre not in KNOWN_PRE:
            raise _RefusedError(THROWS, f"unknown pre-tokenizer type: '{pre}' (tokenizer.ggml.pre); use one this "
                                "llama.cpp knows, or leave it out for 'default'")
        if pre in _PRE_ADD_BOS:
            add_bos = True
        if pre in _PRE_NO_BOS:
            bos = None
    for key in ("add_space_prefix", "remove_extra_whitespaces"):
        _get(hdr, P + key, ValueType.BOOL)
    tokens = hdr.kv.get(P + "tokens")
    if tokens is None:
        raise _RefusedError(THROWS, "cannot find tokenizer vocab in model file (tokenizer.ggml.tokens)")
    tokens = _array(hdr, P + "tokens", (ValueType.STRING,))
    if tokens is None:  # checked just above; a raise, unlike assert, survives python -O
        raise AssertionError("tokenizer.ggml.tokens vanished between two reads")
    n_tokens = len(tokens)
    out["n_tokens"] = n_tokens
    for key, types in (("scores", (ValueType.INT32, ValueType.FLOAT32)), ("token_type", (ValueType.INT32,))):
        arr = _array(hdr, P + key, types)
        if arr is not None and len(arr) < n_tokens:
            raise _RefusedError(THROWS, f"Index out of array bounds for {'scores' if key == 'scores' else 'toktypes'} "
                                f"({len(arr)} < {n_tokens}): tokenizer.ggml.{key} needs one entry per token")
    texts = list(_loaded_texts(tokens))
    dup = _duplicate(texts)
    if dup is not None:
        first, second, text = dup
        raise _RefusedError(ABORTS, f"tokens {first} and {second} load with the same text {text!r} (after llama.cpp "
                            "cuts at NUL and names empty tokens [EMPTY_<id>]); llama.cpp's "
                            "GGML_ASSERT(id_to_token.size() == token_to_id.size()) fails")
    if model == "hybriddna":
        _strip_kmer_markers(texts)
    for name in SPECIAL_ID_KEYS:
        new_id = _get(hdr, f"{P}{name}_token_id", ValueType.UINT32)
        if name not in ("bos", "eos"):
            continue
        value = bos if name == "bos" else eos
        if value is not None and value >= n_tokens:
            value = None  # "default special token ... out of vocab range, disabling"
        if new_id is not None and new_id < n_tokens:
            value = int(new_id)
        out[f"{name}_id"] = value
    header_add_bos = _get(hdr, P + "add_bos_token", ValueType.BOOL)
    header_add_eos = _get(hdr, P + "add_eos_token", ValueType.BOOL)
    _get(hdr, P + "add_sep_token", ValueType.BOOL)
    add_bos = bool(header_add_bos) if header_add_bos is not None else add_bos
    add_eos = bool(header_add_eos) if header_add_eos is not None else add_eos
    if pre in _PRE_GEMMA4:
        add_bos = True  # "override 'tokenizer.ggml.add_bos_token' to 'true' for Gemma4"
    out["add_bos"], out["add_eos"] = add_bos, add_eos
    for key in ("normalizer.lowercase", "normalizer.strip_accents"):
        _get(hdr, P + key, ValueType.BOOL)
    _array(hdr, P + "suppress_tokens", (ValueType.INT32,))
    _check_name_rules(hdr, pre, texts)
    out["texts"] = texts if keep_texts else None


def _check_charsmap(hdr: GGUFHeader) -> None:
    kv = hdr.kv.get(P + "precompiled_charsmap")
    if kv is None:
        return
    arr = _array(hdr, P + "precompiled_charsmap", (ValueType.INT8, ValueType.UINT8))
    if arr is None:  # kv was found above; a raise, unlike assert, survives python -O
        raise AssertionError("precompiled_charsmap vanished between two reads")
    raw = arr.raw()
    if len(raw) < 4:
        raise _RefusedError(THROWS, "precompiled_charsmap too small for xcda_blob_size header! "
                            "(tokenizer.ggml.precompiled_charsmap)")
    if int.from_bytes(raw[:4], "little") + 4 >= len(raw):
        raise _RefusedError(THROWS, "Index out of array bounds in precompiled charsmap! "
                            "(tokenizer.ggml.precompiled_charsmap)")


def _strip_kmer_markers(texts: list[bytes]) -> None:
    """The k-mers after <oov> lose their marker suffix (after the duplicate check)."""
    try:
        start = texts.index(b"<oov>") + 1
    except ValueError:
        return
    m = DNA_KMER_MARKER
    for i in range(start, len(texts)):
        if len(texts[i]) > len(m) and texts[i].endswith(m):
            texts[i] = texts[i][:-len(m)]


def _check_name_rules(hdr: GGUFHeader, pre: str, texts: list[bytes]) -> None:
    """The per-model token attributes at the end of load(): the phi-3 branch looks tokens up with at()."""
    name = _get(hdr, "general.name", ValueType.STRING) or ""
    arch = hdr.get("general.architecture") or ""
    if any(s in pre for s in ("jina-v2-de", "jina-v2-es", "jina-v2-code")) or \
            any(s in str(arch) for s in ("nomic-bert-moe", "jina-bert-v3")):
        return
    if "phi-3" in name.lower() or "phi3" in name.lower():
        have = set(texts)
        for token in ("</s>", "<unk>", "<s>", "<|endoftext|>"):
            if token.encode() not in have:
                raise _RefusedError(THROWS, f"general.name {name!r} selects llama.cpp's phi-3 token rules, which look "
                                    f"up the token {token!r} and the vocabulary has none (std::out_of_range)")
