# Copyright: (c) 2026, llmfleet.specdec contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# Private to the collection: how llama.cpp's vocabulary loader reads a GGUF header, and when it refuses it.
"""llama_vocab::impl::load (src/llama-vocab.cpp of the pinned tree), step by step, on a parsed header.

``load_vocab`` returns what the loader ends up with (vocabulary type, token count, bos/eos ids,
add-bos/add-eos flags, the token texts as llama.cpp keeps them) and, where llama.cpp would refuse
the file, why and how: ``throws`` (llama_model_load catches it: "error loading model", the server
exits) or ``aborts`` (a GGML_ASSERT: the process dies). Only the header is read: a tensor that
does not match the vocabulary is not checked here.

Memory is bounded by the header, not by its token count (issue 22): the texts are walked in place
in the header buffer and never held one Python object per token. ``texts`` is a :class:`LoadedTexts`
view that gives them again when walked; the duplicate check keeps an open-addressing table of
4-byte offsets into the buffer, at most 3/4 full, sized once from how many distinct texts the
tokens can hold (``_distinct_bound``: at most 0.6 bytes per header byte), and one bit per token.
"""
from __future__ import annotations

import hashlib
import re
import struct
from array import array
from typing import Any, Iterator

from ansible_collections.llmfleet.specdec.plugins.module_utils.gguf._gguf import (
    MAX_KEY_BYTES,
    Array,
    GGUFHeader,
    ValueType,
)

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
    if vtype == ValueType.STRING:
        # compared with short names only: a longer one is shown clipped, never copied whole
        return kv.text(MAX_NAME_TEXT)
    return kv.value


def _array(hdr: GGUFHeader, key: str, elem_types: tuple[ValueType, ...]) -> Array | None:
    kv = hdr.kv.get(key)
    if kv is None:
        return None
    if kv.vtype != ValueType.ARRAY or not isinstance(kv.value, Array) or kv.value.elem_type not in elem_types:
        want = " or ".join(f"array of {t.name.lower()}" for t in elem_types)
        raise _RefusedError(THROWS, f"invalid gguf type for {key}: {_type_name(kv)}; llama.cpp needs {want}")
    return kv.value


# A string value longer than this is shown clipped (it cannot be a name llama.cpp knows anyway).
MAX_NAME_TEXT = 4096
# A token text longer than this is hashed and compared in place and shown clipped, never copied whole.
BIG_TEXT = 4096
_EMPTY_NAME = re.compile(rb"\[EMPTY_(0|[1-9][0-9]*)\]")
_NO_KEY = "\udc80"  # a key prefix no decoded key can start with (a lone surrogate is never valid UTF-8)


def _spans(tokens: Array, first: int = 0, pos: int | None = None) -> Iterator[tuple[int, int, int]]:
    """(id, start, end) of each token's raw bytes in the header buffer (from id ``first``, whose length
    field is at ``pos``)."""
    buf = tokens.buffer
    u64 = struct.Struct(tokens.order + "Q").unpack_from
    pos = tokens.start if pos is None else pos
    for i in range(first, tokens.count):
        start = pos + 8
        pos = start + u64(buf, pos)[0]
        yield i, start, pos


def _loaded_end(buf: Any, start: int, end: int) -> int:
    """Where llama.cpp's text of a token ends: at its first NUL (it is kept as a C string)."""
    cut = buf.find(b"\0", start, end)
    return end if cut < 0 else cut


def clip_text(text: bytes | memoryview) -> bytes:
    """A token text for a message: whole up to BIG_TEXT bytes, else its head and its size."""
    if len(text) <= BIG_TEXT:
        return bytes(text)
    return bytes(text[:BIG_TEXT]) + f"...({len(text)} bytes)".encode()


class LoadedTexts:
    """The token texts as id_to_token holds them, read again from the header whenever walked.

    Cut at the first NUL (a C string), an empty one named ``[EMPTY_<id>]``, and for hybriddna the
    k-mer marker stripped from the tokens after ``<oov>``. Nothing per token is kept: comparing two
    vocabularies walks both buffers side by side."""

    __slots__ = ("oov", "strip", "tokens")

    def __init__(self, tokens: Array, oov: int | None, strip: bool) -> None:
        self.tokens = tokens
        self.oov = oov      # the first <oov> token's id (hybriddna), None without one
        self.strip = strip  # hybriddna: the k-mer marker comes off the tokens after <oov>

    def __len__(self) -> int:
        return self.tokens.count

    def spans(self, first: int = 0, pos: int | None = None) -> Iterator[tuple[int, int, int]]:
        """(id, start, end) of each loaded text in the buffer (from id ``first``, whose length field is at
        ``pos``); start == end: the token is empty (its text is ``[EMPTY_<id>]``)."""
        buf = self.tokens.buffer
        after = self.oov if self.strip and self.oov is not None else None
        m, n = DNA_KMER_MARKER, len(DNA_KMER_MARKER)
        for i, start, end in _spans(self.tokens, first, pos):
            end = _loaded_end(buf, start, end)
            if after is not None and i > after and end - start > n and buf.startswith(m, end - n, end):
                end -= n
            yield i, start, end

    def text(self, i: int, start: int, end: int) -> bytes | memoryview:
        """One loaded text from its span (a read-only view when longer than BIG_TEXT)."""
        if start == end:
            return f"[EMPTY_{i}]".encode()
        if end - start > BIG_TEXT:
            return memoryview(self.tokens.buffer).toreadonly()[start:end]
        return bytes(self.tokens.buffer[start:end])

    def __iter__(self) -> Iterator[bytes]:
        for i, start, end in self.spans():
            yield bytes(self.text(i, start, end))

    def __eq__(self, other: object) -> bool:
        if isinstance(other, LoadedTexts):
            return len(self) == len(other) and first_difference(self, other, 0) is None
        if isinstance(other, list):
            return len(self) == len(other) and all(a == b for a, b in zip(self, other))
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"LoadedTexts({len(self)} tokens)"


def _common_prefix(a: Array, b: Array) -> int:
    """How many leading bytes the two arrays' stored elements share (compared in C, 64 KiB at a time)."""
    limit = min(a.end - a.start, b.end - b.start)
    ba, bb, piece, done = a.buffer, b.buffer, 1 << 16, 0
    with memoryview(ba) as ma, memoryview(bb) as mb:
        while done < limit:
            n = min(piece, limit - done)
            if ma[a.start + done:a.start + done + n] == mb[b.start + done:b.start + done + n]:
                done += n
            elif n == 1:
                break
            else:
                piece = max(n // 16, 1)
    return done


def _same_tokens(a: LoadedTexts, b: LoadedTexts) -> tuple[int, int]:
    """How many leading tokens are stored byte for byte alike (so load alike: the same bytes at the same id
    give the same text), and how far into the arrays they reach, when nothing but the bytes decides a
    text (no hybriddna stripping)."""
    if a.strip or b.strip or a.tokens.order != b.tokens.order:
        return 0, 0
    same = _common_prefix(a.tokens, b.tokens)
    u64 = struct.Struct(a.tokens.order + "Q").unpack_from
    buf, pos, end, n, most = a.tokens.buffer, a.tokens.start, a.tokens.start + same, 0, min(len(a), len(b))
    while n < most and pos + 8 <= end:
        after = pos + 8 + u64(buf, pos)[0]
        if after > end:
            break
        pos, n = after, n + 1
    return n, pos - a.tokens.start


def first_difference(a: LoadedTexts, b: LoadedTexts, start: int) -> tuple[int, bytes, bytes] | None:
    """The first id >= ``start`` below both sizes whose texts differ, with both (clipped) texts.

    The leading tokens both store byte for byte alike are skipped in C (:func:`_same_tokens`)."""
    n, skip = _same_tokens(a, b)
    pairs = zip(a.spans(n, a.tokens.start + skip), b.spans(n, b.tokens.start + skip))
    for (i, sa, ea), (_dummy, sb, eb) in pairs:
        if i < start or (ea - sa == eb - sb and sa == ea):
            continue  # before start, or both empty: both are [EMPTY_<i>]
        if ea - sa != eb - sb and sa != ea and sb != eb:
            return i, clip_text(a.text(i, sa, ea)), clip_text(b.text(i, sb, eb))
        ta, tb = a.text(i, sa, ea), b.text(i, sb, eb)
        if ta != tb:
            return i, clip_text(ta), clip_text(tb)
    return None


def _text_hash(buf: Any, start: int, end: int) -> int:
    """A 64-bit hash of buf[start:end]: Python's own for a short text, blake2b in place for a long one."""
    if end - start <= BIG_TEXT:
        return hash(bytes(buf[start:end])) & _MASK64
    with memoryview(buf) as mv:
        return int.from_bytes(hashlib.blake2b(mv[start:end], digest_size=8).digest(), "little")


_MASK64 = (1 << 64) - 1


def _same_text(buf: Any, u64: Any, at: int, start: int, end: int) -> bool:
    """Whether the loaded text stored at ``at`` (a token's first byte) is exactly buf[start:end]."""
    k = end - start
    stored = u64(buf, at - 8)[0]
    if stored < k or (stored > k and buf[at + k] != 0):
        return False
    if k <= BIG_TEXT:
        return buf[at:at + k] == buf[start:end]
    with memoryview(buf) as mv:
        return mv[at:at + k] == mv[start:end]


def _distinct_bound(tokens: Array) -> int:
    """At most how many distinct non-empty loaded texts the tokens can hold: each token at most one,
    and no more texts of L bytes than there are (255 ** L: a loaded text holds no NUL)."""
    buf = tokens.buffer
    short = [0, 0, 0, 0, 0]
    longer = 0
    for _dummy, start, end in _spans(tokens):
        k = _loaded_end(buf, start, end) - start
        if k < 5:
            short[k] += 1
        else:
            longer += 1
    return longer + sum(min(short[k], 255 ** k) for k in range(1, 5))


def _prime_at_least(n: int) -> int:
    n = max(n, 11) | 1
    while any(n % d == 0 for d in range(3, int(n ** 0.5) + 1, 2)):
        n += 2
    return n


def _table(texts: int, wide: bool) -> array:
    """An empty table for ``texts`` texts, at most 3/4 full: a prime number of slots (double hashing
    then visits every one), 4 bytes a slot (8 when offsets pass 4 GiB). A slot holds the offset of a
    text's first byte in the header buffer, 0 when empty (no text starts at byte 0)."""
    return array("Q" if wide else "I", [0]) * _prime_at_least(texts * 4 // 3 + 1)


def _duplicate(tokens: Array) -> tuple[int, int, bytes] | None:
    """The first token whose loaded text an earlier token has (llama.cpp's token_to_id map then holds
    fewer entries than id_to_token): (earlier id, id, text), in the order a dict of every text finds it.

    The texts are held as their first byte's offset in a table sized once from :func:`_distinct_bound`
    (one pass, no copy, no regrowth). Empty tokens are named [EMPTY_<id>], so two of them never collide;
    one collides with a non-empty token whose text is literally [EMPTY_<its id>]: a bit per token says
    which ids are empty, and those names are looked up only once such a text was seen."""
    buf = tokens.buffer
    u64 = struct.Struct(tokens.order + "Q").unpack_from
    slots = _table(_distinct_bound(tokens), len(buf) >= 1 << 32)
    size = len(slots)
    empty = bytearray((tokens.count + 7) >> 3)
    named = False  # a non-empty text of the form [EMPTY_<k>] was seen
    find = buf.find
    pos = tokens.start
    for i in range(tokens.count):
        start = pos + 8
        pos = start + u64(buf, pos)[0]
        end = find(b"\0", start, pos)
        if end < 0:
            end = pos
        if start == end:
            empty[i >> 3] |= 1 << (i & 7)
            if named:
                name = f"[EMPTY_{i}]".encode()
                at = _lookup(buf, u64, slots, name)
                if at:
                    return _id_at(tokens, at), i, name
            continue
        h = hash(bytes(buf[start:end])) & _MASK64 if end - start <= BIG_TEXT else _text_hash(buf, start, end)
        j = h % size
        at = slots[j]
        if at:
            step = 1 + (h >> 32) % (size - 1)
            while at:
                if _same_text(buf, u64, at, start, end):
                    with memoryview(buf) as mv:
                        return _id_at(tokens, at), i, clip_text(mv[start:end])
                j = (j + step) % size
                at = slots[j]
        slots[j] = start
        if end - start <= 30 and buf.startswith(b"[EMPTY_", start, end):
            m = _EMPTY_NAME.fullmatch(bytes(buf[start:end]))
            if m is not None:
                named = True
                k = int(m.group(1))
                if k < i and empty[k >> 3] >> (k & 7) & 1:
                    return k, i, bytes(buf[start:end])
    return None


def _lookup(buf: Any, u64: Any, slots: array, text: bytes) -> int:
    """The offset of ``text`` (a short text from outside the buffer) in the table, 0 when absent."""
    h = hash(text) & _MASK64
    size = len(slots)
    j, step = h % size, 1 + (h >> 32) % (size - 1)
    k = len(text)
    at = slots[j]
    while at:
        stored = u64(buf, at - 8)[0]
        if (stored == k or (stored > k and buf[at + k] == 0)) and buf[at:at + k] == text:
            return at
        j = (j + step) % size
        at = slots[j]
    return 0


def _id_at(tokens: Array, start: int) -> int:
    for i, s, _dummy in _spans(tokens):
        if s == start:
            return i
    raise AssertionError(f"no token starts at byte {start}")  # pragma: no cover - the table holds starts only


def _first_oov(tokens: Array) -> int | None:
    """The first token whose loaded text is <oov> (hybriddna strips markers after it)."""
    buf = tokens.buffer
    for i, start, end in _spans(tokens):
        if _loaded_end(buf, start, end) - start == 5 and buf.startswith(b"<oov>", start):
            return i
    return None


def _kv_contains(hdr: GGUFHeader, key: str, needle: str, *, ignore_case: bool = False) -> bool:
    """Whether a key's value, as text, holds ``needle`` (a STRING is searched in place)."""
    kv = hdr.kv.get(key)
    if kv is None:
        return False
    if kv.vtype == ValueType.STRING:
        return kv.contains(needle.encode(), ignore_case=ignore_case)
    text = str(kv.value)
    return needle in (text.lower() if ignore_case else text)


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
        arch_kv = hdr.kv.get("general.architecture")
        arch = None
        if arch_kv is not None and arch_kv.vtype == ValueType.STRING:
            # an architecture longer than any key can prefix none (and is never copied)
            arch = arch_kv.value if arch_kv.byte_length() <= MAX_KEY_BYTES else _NO_KEY
        n = _get(hdr, f"{arch}.vocab_size", ValueType.UINT32) if arch is not None else None
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
    dup = _duplicate(tokens)
    if dup is not None:
        first, second, text = dup
        raise _RefusedError(ABORTS, f"tokens {first} and {second} load with the same text {text!r} (after llama.cpp "
                            "cuts at NUL and names empty tokens [EMPTY_<id>]); llama.cpp's "
                            "GGML_ASSERT(id_to_token.size() == token_to_id.size()) fails")
    texts = LoadedTexts(tokens, _first_oov(tokens) if model == "hybriddna" else None, model == "hybriddna")
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
    size = arr.count  # one byte an element: its size in bytes, read without a copy of the map
    if size < 4:
        raise _RefusedError(THROWS, "precompiled_charsmap too small for xcda_blob_size header! "
                            "(tokenizer.ggml.precompiled_charsmap)")
    if int.from_bytes(arr.head(4), "little") + 4 >= size:
        raise _RefusedError(THROWS, "Index out of array bounds in precompiled charsmap! "
                            "(tokenizer.ggml.precompiled_charsmap)")


_PHI3_TOKENS = ("</s>", "<unk>", "<s>", "<|endoftext|>")


def _check_name_rules(hdr: GGUFHeader, pre: str, texts: LoadedTexts) -> None:
    """The per-model token attributes at the end of load(): the phi-3 branch looks tokens up with at()."""
    _get(hdr, "general.name", ValueType.STRING)
    pre_kv = hdr.kv.get(P + "pre")
    skip = ("jina-v2-de", "jina-v2-es", "jina-v2-code")
    if pre == "gemma4" or pre_kv is None or pre_kv.vtype != ValueType.STRING:
        in_pre = any(s in pre for s in skip)
    else:
        in_pre = any(pre_kv.contains(s.encode()) for s in skip)
    if in_pre or any(_kv_contains(hdr, "general.architecture", s) for s in ("nomic-bert-moe", "jina-bert-v3")):
        return
    if _kv_contains(hdr, "general.name", "phi-3", ignore_case=True) or \
            _kv_contains(hdr, "general.name", "phi3", ignore_case=True):
        missing = set(_PHI3_TOKENS)
        wanted = {t.encode(): t for t in _PHI3_TOKENS}
        longest = max(len(t) for t in wanted)
        buf = texts.tokens.buffer
        for _dummy, start, end in texts.spans():
            if 0 < end - start <= longest:
                missing.discard(wanted.get(bytes(buf[start:end]), ""))
                if not missing:
                    return
        name = _get(hdr, "general.name", ValueType.STRING)
        token = next(t for t in _PHI3_TOKENS if t in missing)
        raise _RefusedError(THROWS, f"general.name {name!r} selects llama.cpp's phi-3 token rules, which look "
                            f"up the token {token!r} and the vocabulary has none (std::out_of_range)")
