# Writes tiny, deterministic GGUF models that a real llama-server runs (and header-level variants) for the tests.
"""Deterministic tiny GGUF models for the test bed.

Every tensor is drawn from its own numpy generator seeded by ``sha256(seed, tensor name)``,
so a 2-layer model and a 4-layer model with the same seed share their embeddings, output
head and first two blocks exactly: that is how a draft is "an exact copy of the target's
embeddings, output and first layers". The same spec always gives the same bytes.
``ModelSpec(weights="tiled")`` keeps that sharing but reads every tensor from one pool of normal
draws at an offset its name picks, about ten times cheaper: for gigabyte-sized shapes (tests/gpu).

Acceptance knob (``write_pair``): the target's blocks from ``shared_layers`` on have their
output projections (``attn_output`` and ``ffn_down``) multiplied by ``s``; the draft is the
plain copy of the first ``shared_layers`` blocks. Measured with the real llama-server
(0.3.36 sdist, ``-t 1``, ``--spec-type draft-simple``, default ``--spec-draft-n-max`` 3,
temperature 0, 40 prompts x 128 tokens), ``draft_n_accepted / draft_n``:

    s = 0.0  -> 1.00      s = 0.25 -> 0.68      s = 1.0 -> 0.21
    s = 0.1  -> 0.91      s = 0.5  -> 0.44
    (with --spec-draft-n-max 8: s = 0.1 -> 0.69, s = 1.0 -> 0.11)

The standard set has one target (``scale_extra = 0.1``), so its low-acceptance draft cannot
come from the target side: ``draft-lowaccept.gguf`` is the 2-layer copy with
``draft_noise = 1.0`` (fresh noise as large as the weights added to its own output
projections). Against ``target.gguf``: ``draft.gguf`` 0.91, ``draft-lowaccept.gguf`` 0.31.

Lossless at temperature 0: speculative texts equal plain texts byte for byte on 150
prompts x 128 tokens for both standard drafts. Two choices make that hold: F32 matrices
(with F16 weights llama.cpp rounds activations to F16) and attention output projections at
0.1 of the usual scale (llama.cpp's flash-attention path differs between batched
verification and single-token decoding by ~1e-3 in the logits; small attention terms keep
that error below almost every top-1/top-2 logit gap). Near-ties remain possible: one
mismatch in 19,200 tokens was seen at s = 1.0, none with ``-fa off``. The scale of
``output.weight`` does not matter for this (greedy argmax is scale-invariant).

The output rows of the control tokens and of bytes outside printable ASCII (newline kept)
are zero, so greedy text never ends early and is always valid UTF-8.

Loading here (llama-server 0.3.36, CPU): see ``STANDARD_SET``. Notable: a plain ``-md``
draft with no ``--spec-type`` is loaded but speculation stays off (``/slots`` says
``speculative: false``); the dflash/DSpark drafts run as drafts of ``target.gguf`` (type
auto-detected from the header) but not on their own; ``--spec-type draft-mtp`` on
``target-mtp.gguf`` (glm4) makes the server exit ("failed to create MTP context").

CLI: ``PYTHONPATH=tests python -m testbed.models OUTDIR`` writes the standard set and
prints its index.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import sys
from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import Path
from typing import Any, Sequence

import gguf
import numpy as np

N_MERGES = 300
BOS_TEXT = "<|bos|>"
EOS_TEXT = "<|endoftext|>"
CHAT_TEMPLATE = (
    "{% for message in messages %}{{ message['role'] }}: {{ message['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}assistant:{% endif %}"
)
# Quant rungs: every 2-D weight but the token embeddings (kept F16) goes through gguf.quants.
_QUANT = {"q8_0": gguf.GGMLQuantizationType.Q8_0, "q4_0": gguf.GGMLQuantizationType.Q4_0}
# Tuned against the real server (module docstring): residual dominated by embeddings and FFNs.
_EMBD_STD = 1.5
_OUTPUT_STD = 1.0
_ATTN_OUT_GAIN = 0.1

# Two different texts, so the two tokenizer variants learn different merge lists.
_CORPUS_A = """
Speculative decoding lets a small draft model propose several tokens that the large target
model then verifies in one batched pass. When the draft agrees with the target the server
emits many tokens for the price of one forward pass; when it disagrees the proposal is
rejected and the target's own token is kept, so the output does not change at temperature
zero. The acceptance rate depends on how closely the draft follows the target, on the kind
of text, and on the number of tokens drafted per step. A fleet operator measures before
switching: the same prompts, the same sampling settings, several rounds in rotated order,
and the medians with confidence intervals. The draft must share the tokenizer of the
target, its beginning and end tokens, and nearly all of its vocabulary. Memory matters too:
the draft holds its own key and value cache for every position of the context, and a
sliding window or a hybrid recurrent stack changes that arithmetic. The report says which
configuration wins for each traffic shape, whether the texts stayed identical, and whether
the proposer was engaged at all. Rollback restores the previous unit and checks health.
The quick brown fox jumps over the lazy dog while the server streams tokens to the client.
Numbers like 2048, 4096 and 131072 appear in context lengths; ratios like 1.8x in reports.
"""

_CORPUS_B = """
Old lighthouse keepers wrote long letters about weather, ships and the patient sea. Every
evening they trimmed wicks, polished brass lenses and watched storms crawl along the coast.
Winter brought fog horns, frozen ropes and quiet nights with tea, bread and salted fish.
Spring returned gulls, fishing boats and painters who sketched rocks, waves and clouds.
Children climbed spiral stairs counting steps: ninety nine, one hundred, one hundred seven.
Maps on the wall showed harbours, reefs, currents and the names of drowned villages.
Merchants carried wool, copper, amber and spices between islands in small wooden vessels.
A keeper's log noted pressure, wind from the north west, visibility, and passing lights.
Zebras, jaguars and yaks never visited, though sailors told strange tales of them anyway.
"""


@dataclass
class ModelSpec:
    """What one GGUF file holds. Fields past ``big_endian`` are test-bed extensions."""

    arch: str = "llama"
    n_layer: int = 4
    n_embd: int = 128
    n_head: int = 4
    n_head_kv: int | list[int] = 2
    n_ff: int = 256
    n_ctx_train: int = 4096
    tokenizer: str = "a"
    seed: int = 1234
    scale_extra: float | None = None
    sliding_window: int | None = None
    sliding_window_pattern: list[bool] | None = None
    nextn_layers: int = 0
    markov_head: bool = False
    key_length: int | None = None
    value_length: int | None = None
    extra_kv: dict[str, Any] = field(default_factory=dict)
    big_endian: bool = False
    # blocks below this index are never scaled by scale_extra (the part a draft copies)
    shared_layers: int = 2
    # adds draft_noise x fresh noise (same std as the weights) to every block's output projections
    draft_noise: float = 0.0
    # dflash only: which target layers feed the draft, and the trained block size
    target_layers: tuple[int, ...] = (1, 2)
    block_size: int = 16
    name: str | None = None
    # "f32" keeps batched and single-token decoding numerically close (see the module docstring);
    # "q8_0"/"q4_0": a quant rung of the same weights, quantized with gguf's own quantizers (_QUANT)
    matrix_type: str = "f32"
    # "normal": every tensor drawn from its own generator (the default, and the bytes every cached model has);
    # "tiled": windows of one shared pool of normal draws (see _tiled), ~10x cheaper, for gigabyte-sized shapes
    weights: str = "normal"


# ---------------------------------------------------------------- tokenizer

@lru_cache(maxsize=1)
def _byte_to_unicode() -> dict[int, str]:
    """GPT-2's reversible byte -> printable character table."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAC + 1)) + list(range(0xAE, 0xFF + 1))
    chars = list(printable)
    extra = 0
    for b in range(256):
        if b not in printable:
            printable.append(b)
            chars.append(256 + extra)
            extra += 1
    return {b: chr(c) for b, c in zip(printable, chars)}


_PRETOKEN = re.compile(r"'s|'t|'re|'ve|'m|'ll|'d| ?[A-Za-z]+| ?[0-9]+| ?[^\sA-Za-z0-9]+|\s+")


def _word_counts(text: str) -> dict[tuple[str, ...], int]:
    table = _byte_to_unicode()
    counts: dict[tuple[str, ...], int] = {}
    for piece in _PRETOKEN.findall(text):
        word = tuple(table[b] for b in piece.encode("utf-8"))
        counts[word] = counts.get(word, 0) + 1
    return counts


def _merge_word(word: tuple[str, ...], pair: tuple[str, str]) -> tuple[str, ...]:
    out: list[str] = []
    i = 0
    while i < len(word):
        if i + 1 < len(word) and word[i] == pair[0] and word[i + 1] == pair[1]:
            out.append(pair[0] + pair[1])
            i += 2
        else:
            out.append(word[i])
            i += 1
    return tuple(out)


def _learn_bpe(text: str, n_new_tokens: int) -> list[tuple[str, str]]:
    """Byte-level BPE until n_new_tokens distinct new tokens exist; ties broken by the pair's text."""
    words = _word_counts(text)
    known = set(_byte_to_unicode().values())
    merges: list[tuple[str, str]] = []
    added = 0
    while added < n_new_tokens:
        pairs: dict[tuple[str, str], int] = {}
        for word, count in words.items():
            for a, b in zip(word, word[1:]):
                pairs[(a, b)] = pairs.get((a, b), 0) + count
        if not pairs:
            raise RuntimeError(f"corpus too small for {n_new_tokens} merges (stopped at {added})")
        best = min(pairs, key=lambda p: (-pairs[p], p))
        merges.append(best)
        if best[0] + best[1] not in known:
            known.add(best[0] + best[1])
            added += 1
        words = {_merge_word(w, best): c for w, c in words.items()}
    return merges


@dataclass(frozen=True)
class Tokenizer:
    tokens: tuple[str, ...]
    types: tuple[int, ...]
    merges: tuple[str, ...]
    bos_id: int
    eos_id: int


@lru_cache(maxsize=4)
def tokenizer_for(variant: str) -> Tokenizer:
    """The gpt2-style vocabulary for variant "a" or "b" (they differ from id 256 on)."""
    corpora = {"a": _CORPUS_A, "b": _CORPUS_B}
    if variant not in corpora:
        raise ValueError(f"tokenizer variant {variant!r} is unknown; use one of {sorted(corpora)}")
    base = [_byte_to_unicode()[b] for b in range(256)]
    merges = _learn_bpe(corpora[variant], N_MERGES)
    tokens = list(base)
    seen = set(tokens)
    for a, b in merges:
        if a + b not in seen:
            seen.add(a + b)
            tokens.append(a + b)
    types = [int(gguf.TokenType.NORMAL)] * len(tokens)
    tokens += [BOS_TEXT, EOS_TEXT]
    types += [int(gguf.TokenType.CONTROL)] * 2
    return Tokenizer(
        tokens=tuple(tokens),
        types=tuple(types),
        merges=tuple(f"{a} {b}" for a, b in merges),
        bos_id=len(tokens) - 2,
        eos_id=len(tokens) - 1,
    )


# ---------------------------------------------------------------- weights

def _rng(seed: int, name: str) -> np.random.Generator:
    digest = hashlib.sha256(f"{seed}/{name}".encode()).digest()
    return np.random.default_rng(int.from_bytes(digest[:8], "little"))


def _normal(seed: int, name: str, shape: tuple[int, ...], std: float) -> np.ndarray:
    return (_rng(seed, name).standard_normal(shape) * std).astype(np.float32)


# A prime number of draws, so that the rows of a tiled matrix (windows cols apart) are never the same window.
_POOL = 1_048_573


@lru_cache(maxsize=2)
def _pool(seed: int) -> np.ndarray:
    return _rng(seed, "/pool").standard_normal(_POOL).astype(np.float32)


def _tiled(seed: int, name: str, shape: tuple[int, ...], std: float, dtype: Any = np.float32) -> np.ndarray:
    """The same law as _normal, cheaply: the tensor is the shared pool read from an offset that the tensor's
    name picks, wrapping around, scaled and stored as ``dtype`` in one pass. Same seed and name, same values,
    whatever else the model holds, so a draft still shares its tensors with its target exactly."""
    n = int(np.prod(shape))
    pos = int.from_bytes(hashlib.sha256(f"{seed}/{name}".encode()).digest()[:8], "little") % _POOL
    pool = _pool(seed)
    out = np.empty(n, dtype=dtype)
    done = 0
    while done < n:
        take = min(n - done, _POOL - pos)
        np.multiply(pool[pos:pos + take], np.float32(std), out=out[done:done + take], casting="unsafe")
        done += take
        pos = 0
    return out.reshape(shape)


def _draw(spec: ModelSpec, name: str, shape: tuple[int, ...], std: float) -> np.ndarray:
    if spec.weights == "tiled":
        return _tiled(spec.seed, name, shape, std)
    return _normal(spec.seed, name, shape, std)


def _head_kv(spec: ModelSpec, layer: int) -> int:
    if isinstance(spec.n_head_kv, int):
        return spec.n_head_kv
    return int(spec.n_head_kv[layer])


def _head_dims(spec: ModelSpec) -> tuple[int, int]:
    default = spec.n_embd // spec.n_head
    return spec.key_length or default, spec.value_length or default


class _Tensors:
    """Collects named tensors in writing order, drawn deterministically from the spec's seed."""

    def __init__(self, spec: ModelSpec) -> None:
        self.spec = spec
        self.dtype = np.float16 if spec.matrix_type == "f16" else np.float32
        self.items: list[tuple[str, np.ndarray]] = []

    def matrix(self, name: str, rows: int, cols: int, std: float | None = None, scale: float = 1.0,
               noise: float = 0.0) -> None:
        """A (rows x cols) numpy matrix = ggml ne {cols, rows}, stored as the spec's matrix_type."""
        std = std if std is not None else 1.0 / np.sqrt(cols)
        if self.spec.weights == "tiled" and not noise:  # one pass straight into the stored type
            self.items.append((name, _tiled(self.spec.seed, name, (rows, cols), std * scale, self.dtype)))
            return
        w = _draw(self.spec, name, (rows, cols), std)
        if noise:
            w = w + _draw(self.spec, name + "/noise", (rows, cols), std) * noise
        self.items.append((name, (w * scale).astype(self.dtype)))

    def vector(self, name: str, n: int, value: float = 1.0) -> None:
        self.items.append((name, np.full((n,), value, dtype=np.float32)))

    def raw(self, name: str, array: np.ndarray) -> None:
        self.items.append((name, array))


def _block_scale(spec: ModelSpec, layer: int) -> float:
    if spec.scale_extra is None or layer < spec.shared_layers:
        return 1.0
    return float(spec.scale_extra)


def _add_attention(t: _Tensors, spec: ModelSpec, i: int, scale: float) -> None:
    k_len, v_len = _head_dims(spec)
    n_kv = _head_kv(spec, i)
    t.vector(f"blk.{i}.attn_norm.weight", spec.n_embd)
    t.matrix(f"blk.{i}.attn_q.weight", spec.n_head * k_len, spec.n_embd)
    t.matrix(f"blk.{i}.attn_k.weight", n_kv * k_len, spec.n_embd)
    t.matrix(f"blk.{i}.attn_v.weight", n_kv * v_len, spec.n_embd)
    t.matrix(f"blk.{i}.attn_output.weight", spec.n_embd, spec.n_head * v_len,
             std=_ATTN_OUT_GAIN / np.sqrt(spec.n_head * v_len), scale=scale, noise=spec.draft_noise)


def _add_llama_block(t: _Tensors, spec: ModelSpec, i: int) -> None:
    scale = _block_scale(spec, i)
    _add_attention(t, spec, i, scale)
    if spec.arch == "granite_swa":
        t.vector(f"blk.{i}.attn_sinks.weight", spec.n_head, 0.0)
    t.vector(f"blk.{i}.ffn_norm.weight", spec.n_embd)
    t.matrix(f"blk.{i}.ffn_gate.weight", spec.n_ff, spec.n_embd)
    t.matrix(f"blk.{i}.ffn_up.weight", spec.n_ff, spec.n_embd)
    t.matrix(f"blk.{i}.ffn_down.weight", spec.n_embd, spec.n_ff, scale=scale, noise=spec.draft_noise)


def _add_glm4_block(t: _Tensors, spec: ModelSpec, i: int) -> None:
    scale = _block_scale(spec, i)
    _add_attention(t, spec, i, scale)
    t.vector(f"blk.{i}.post_attention_norm.weight", spec.n_embd)
    t.vector(f"blk.{i}.ffn_norm.weight", spec.n_embd)
    t.matrix(f"blk.{i}.ffn_up.weight", 2 * spec.n_ff, spec.n_embd)
    t.matrix(f"blk.{i}.ffn_down.weight", spec.n_embd, spec.n_ff, scale=scale, noise=spec.draft_noise)
    t.vector(f"blk.{i}.post_ffw_norm.weight", spec.n_embd)


def _add_nextn(t: _Tensors, spec: ModelSpec, i: int) -> None:
    t.matrix(f"blk.{i}.nextn.eh_proj.weight", spec.n_embd, 2 * spec.n_embd)
    t.vector(f"blk.{i}.nextn.enorm.weight", spec.n_embd)
    t.vector(f"blk.{i}.nextn.hnorm.weight", spec.n_embd)
    t.vector(f"blk.{i}.nextn.shared_head_norm.weight", spec.n_embd)


def _add_head(t: _Tensors, spec: ModelSpec, tok: Tokenizer) -> None:
    n_vocab = len(tok.tokens)
    t.raw("token_embd.weight", _draw(spec, "token_embd.weight", (n_vocab, spec.n_embd), _EMBD_STD)
          .astype(np.float16))
    t.vector("output_norm.weight", spec.n_embd)
    out = _draw(spec, "output.weight", (n_vocab, spec.n_embd), _OUTPUT_STD)
    # never generated: control tokens (no early end) and bytes outside printable ASCII (texts stay valid UTF-8)
    silent = [b for b in range(256) if not (0x20 <= b < 0x7F or b == 0x0A)] + [tok.bos_id, tok.eos_id]
    out[silent, :] = 0.0
    t.raw("output.weight", out.astype(t.dtype))


def _add_dflash(t: _Tensors, spec: ModelSpec, tok: Tokenizer) -> None:
    """The tensors llama.cpp's dflash loader asks for (src/models/dflash.cpp); head shared with the target."""
    n_vocab = len(tok.tokens)
    k_len, _dummy = _head_dims(spec)
    t.matrix("fc.weight", spec.n_embd, len(spec.target_layers) * spec.n_embd)
    t.vector("enc.output_norm.weight", spec.n_embd)
    t.vector("output_norm.weight", spec.n_embd)
    if spec.markov_head:
        rank = 16
        t.matrix("markov_w1.weight", n_vocab, rank, std=0.02)
        t.matrix("markov_w2.weight", n_vocab, rank, std=0.02)
    for i in range(spec.n_layer):
        _add_llama_block(t, spec, i)
        t.vector(f"blk.{i}.attn_q_norm.weight", k_len)
        t.vector(f"blk.{i}.attn_k_norm.weight", k_len)


def _tensors_for(spec: ModelSpec, tok: Tokenizer) -> list[tuple[str, np.ndarray]]:
    t = _Tensors(spec)
    if spec.arch == "dflash":
        _add_dflash(t, spec, tok)
        return t.items
    _add_head(t, spec, tok)
    first_nextn = spec.n_layer - spec.nextn_layers
    for i in range(spec.n_layer):
        if spec.arch == "glm4":
            _add_glm4_block(t, spec, i)
        else:
            _add_llama_block(t, spec, i)
        if i >= first_nextn:
            _add_nextn(t, spec, i)
    if spec.markov_head:
        t.matrix("markov_w1.weight", len(tok.tokens), 16, std=0.02)
    return t.items


# ---------------------------------------------------------------- header

def _add_tokenizer(w: gguf.GGUFWriter, tok: Tokenizer, arch: str) -> None:
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("gpt-2")
    w.add_token_list(list(tok.tokens))
    w.add_token_types(list(tok.types))
    w.add_token_merges(list(tok.merges))
    w.add_bos_token_id(tok.bos_id)
    w.add_eos_token_id(tok.eos_id)
    w.add_add_bos_token(True)
    w.add_add_eos_token(False)
    w.add_chat_template(CHAT_TEMPLATE)
    if arch == "dflash":
        # llama.cpp's dflash drafter fills the block with this id; without one it aborts on the first draft
        w.add_mask_token_id(tok.eos_id)


def _add_extra(w: gguf.GGUFWriter, key: str, value: Any) -> None:
    """Writes one verbatim key; (value, GGUFValueType) pins the type."""
    if isinstance(value, tuple) and len(value) == 2 and isinstance(value[1], gguf.GGUFValueType):
        w.add_key_value(key, value[0], value[1])
    elif isinstance(value, bool):
        w.add_bool(key, value)
    elif isinstance(value, int) and 0 <= value < 2**32:
        w.add_uint32(key, value)
    elif isinstance(value, int):
        w.add_int64(key, value)
    elif isinstance(value, float):
        w.add_float32(key, value)
    elif isinstance(value, str):
        w.add_key_value(key, value, gguf.GGUFValueType.STRING)
    elif isinstance(value, (list, tuple)):
        w.add_key_value(key, list(value), gguf.GGUFValueType.ARRAY)
    else:
        raise TypeError(f"extra_kv[{key!r}]: unsupported value type {type(value).__name__}")


def _add_hparams(w: gguf.GGUFWriter, spec: ModelSpec) -> None:
    arch = spec.arch
    w.add_name(spec.name or f"testbed-{arch}-{spec.n_layer}L-{spec.tokenizer}")
    file_type = {"f16": gguf.LlamaFileType.MOSTLY_F16, "q8_0": gguf.LlamaFileType.MOSTLY_Q8_0,
                 "q4_0": gguf.LlamaFileType.MOSTLY_Q4_0}.get(spec.matrix_type, gguf.LlamaFileType.ALL_F32)
    w.add_file_type(int(file_type))
    w.add_context_length(spec.n_ctx_train)
    w.add_embedding_length(spec.n_embd)
    w.add_block_count(spec.n_layer)
    w.add_feed_forward_length(spec.n_ff)
    w.add_head_count(spec.n_head)
    w.add_head_count_kv(spec.n_head_kv if isinstance(spec.n_head_kv, int) else [int(v) for v in spec.n_head_kv])
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_dimension_count(_head_dims(spec)[0])
    if spec.key_length is not None:
        w.add_key_length(spec.key_length)
    if spec.value_length is not None:
        w.add_value_length(spec.value_length)
    if spec.sliding_window is not None:
        w.add_sliding_window(spec.sliding_window)
    if spec.sliding_window_pattern is not None:
        w.add_sliding_window_pattern([bool(v) for v in spec.sliding_window_pattern])
    if spec.nextn_layers:
        w.add_nextn_predict_layers(spec.nextn_layers)
    if arch == "granite_swa":
        w.add_logit_scale(1.0)
    if arch == "dflash":
        w.add_key_value(f"{arch}.target_layers", [int(v) for v in spec.target_layers], gguf.GGUFValueType.ARRAY)
        w.add_uint32(f"{arch}.block_size", spec.block_size)


def write_model(path: str | Path, spec: ModelSpec) -> Path:
    """Writes one GGUF file for spec; the same spec always gives the same bytes."""
    _check_spec(spec)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tok = tokenizer_for(spec.tokenizer)
    endian = gguf.GGUFEndian.BIG if spec.big_endian else gguf.GGUFEndian.LITTLE
    w = gguf.GGUFWriter(str(path), spec.arch, endianess=endian)
    _add_hparams(w, spec)
    _add_tokenizer(w, tok, spec.arch)
    for key, value in spec.extra_kv.items():
        _add_extra(w, key, value)
    for name, array in _tensors_for(spec, tok):
        qtype = _QUANT.get(spec.matrix_type)
        if qtype is not None and array.ndim == 2 and name != "token_embd.weight":
            w.add_tensor(name, gguf.quants.quantize(array.astype(np.float32), qtype), raw_dtype=qtype)
        else:
            w.add_tensor(name, array)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def _check_spec(spec: ModelSpec) -> None:
    if not isinstance(spec.n_head_kv, int) and len(spec.n_head_kv) != spec.n_layer:
        raise ValueError(f"n_head_kv has {len(spec.n_head_kv)} values for {spec.n_layer} layers")
    if spec.sliding_window_pattern is not None and len(spec.sliding_window_pattern) != spec.n_layer:
        raise ValueError(f"sliding_window_pattern has {len(spec.sliding_window_pattern)} values "
                         f"for {spec.n_layer} layers")
    if spec.matrix_type not in ("f32", "f16", *_QUANT):
        raise ValueError(f"matrix_type={spec.matrix_type!r}: use 'f32', 'f16', 'q8_0' or 'q4_0'")
    if spec.weights not in ("normal", "tiled"):
        raise ValueError(f"weights={spec.weights!r}: use 'normal' or 'tiled'")
    if not 0 <= spec.nextn_layers <= spec.n_layer:
        raise ValueError(f"nextn_layers={spec.nextn_layers} must lie within 0..n_layer={spec.n_layer}")


# ---------------------------------------------------------------- sets

def write_pair(directory: str | Path, s: float, *, seed: int = 1234, target_layers: int = 4,
               draft_layers: int = 2, tokenizer: str = "a") -> tuple[Path, Path]:
    """A target whose blocks past draft_layers are scaled by s, and its draft; returns (target, draft)."""
    directory = Path(directory)
    target = ModelSpec(n_layer=target_layers, seed=seed, tokenizer=tokenizer, scale_extra=s,
                       shared_layers=draft_layers, name=f"testbed-target-s{s:g}")
    draft = ModelSpec(n_layer=draft_layers, seed=seed, tokenizer=tokenizer, name="testbed-draft")
    return (write_model(directory / f"target-s{s:g}.gguf", target),
            write_model(directory / f"draft-{draft_layers}L.gguf", draft))


def write_dflash_draft(path: str | Path, *, target: ModelSpec | None = None, n_layer: int = 1,
                       markov_head: bool = False, sliding_window: int | None = 2048) -> Path:
    """A dflash (or, with markov_head, DSpark) draft with the target's tokenizer and a mask token.

    llama-server runs it as a draft of target (type auto-detected from the header, random
    weights: low acceptance); on its own it refuses to load ("dflash requires ctx_other").
    """
    target = target or ModelSpec()
    spec = replace(
        target, arch="dflash", n_layer=n_layer, markov_head=markov_head, nextn_layers=0,
        scale_extra=None, draft_noise=0.0, n_head_kv=_head_kv(target, 0),
        sliding_window=sliding_window,
        sliding_window_pattern=[True] * n_layer if sliding_window else None,
        target_layers=(1, max(1, target.n_layer - 2)),
        name="testbed-dspark" if markov_head else "testbed-dflash",
    )
    return write_model(path, spec)


TARGET_SCALE = 0.1  # target.gguf's scale_extra: draft.gguf still gets rejections to roll back


@dataclass(frozen=True)
class SetEntry:
    """One file of the standard set: how it is written and how llama-server treats it here."""

    spec: ModelSpec | None  # None: written by write_dflash_draft
    role: str  # "target" (-m) or "draft" (-md next to target.gguf)
    loadable: bool  # llama-server runs it here in its role
    spec_type: str | None  # the --spec-type it runs with (auto-detected for dflash/dspark)
    purpose: str
    markov_head: bool = False


STANDARD_SET: dict[str, SetEntry] = {
    "target.gguf": SetEntry(
        ModelSpec(scale_extra=TARGET_SCALE, name="testbed-target"), "target", True, None,
        "target: llama, 4 layers, tokenizer a; blocks 2-3 output projections scaled by 0.1"),
    "draft.gguf": SetEntry(
        ModelSpec(n_layer=2, name="testbed-draft"), "draft", True, "draft-simple",
        "exact copy of target.gguf's first 2 layers: acceptance ~0.91"),
    "draft-lowaccept.gguf": SetEntry(
        ModelSpec(n_layer=2, draft_noise=1.0, name="testbed-draft-lowaccept"), "draft", True, "draft-simple",
        "same tokenizer, noisy copy (draft_noise 1.0): acceptance ~0.31"),
    "draft-othertok.gguf": SetEntry(
        ModelSpec(n_layer=2, tokenizer="b", name="testbed-draft-othertok"), "draft", True, "draft-simple",
        "tokenizer b (ids >= 256 differ): llama-server keeps serving with speculation off"),
    "target-swa.gguf": SetEntry(
        ModelSpec(arch="granite_swa", sliding_window=256, sliding_window_pattern=[True, True, True, False],
                  name="testbed-target-swa"), "target", True, None,
        "interleaved sliding window (granite_swa): layers 0-2 SWA 256, layer 3 full"),
    "target-kvarray.gguf": SetEntry(
        ModelSpec(arch="deci", n_head_kv=[2, 1, 2, 1], name="testbed-target-kvarray"), "target", True, None,
        "per-layer head_count_kv array [2, 1, 2, 1] (deci)"),
    "target-mtp.gguf": SetEntry(
        ModelSpec(arch="glm4", nextn_layers=1, name="testbed-target-mtp"), "target", True, None,
        "glm4, nextn_predict_layers 1 inside block_count 4 (blk.3.nextn.*); serves plainly, "
        "--spec-type draft-mtp makes llama-server exit"),
    "target-q4_0.gguf": SetEntry(
        ModelSpec(scale_extra=TARGET_SCALE, matrix_type="q4_0", name="testbed-target-q4_0"), "target", True, None,
        "target.gguf's weights quantized to Q4_0 (gguf.quants): a quant rung whose greedy text differs from "
        "target.gguf's; draft.gguf speculates on it losslessly"),
    "draft-dflash.gguf": SetEntry(
        None, "draft", True, "draft-dflash",
        "dflash draft (target's tokenizer, SWA 2048, mask token): runs only as a draft of target.gguf"),
    "draft-dspark.gguf": SetEntry(
        None, "draft", True, "draft-dspark",
        "dflash draft with markov_w1.weight (DSpark): runs only as a draft of target.gguf", markov_head=True),
}


def write_standard_set(directory: str | Path) -> dict[str, Path]:
    """Writes the models the demo and the tests use, plus index.json; returns name -> path."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    paths: dict[str, Path] = {}
    index: dict[str, dict[str, Any]] = {}
    # Each file is written under a name of this process's own and renamed over the old one: a llama-server in a
    # container that has the old file open or mapped keeps reading it while another lane of `make test` rewrites
    # the set (the same bytes), and two writers at once never interleave.
    for name, entry in STANDARD_SET.items():
        tmp = directory / f".{name}.{os.getpid()}.tmp"
        if entry.spec is None:
            write_dflash_draft(tmp, markov_head=entry.markov_head)
            arch = "dflash"
        else:
            write_model(tmp, entry.spec)
            arch = entry.spec.arch
        path = tmp.replace(directory / name)
        paths[name] = path
        index[name] = {"file": name, "architecture": arch, "role": entry.role, "loadable": entry.loadable,
                       "header_only": not entry.loadable, "spec_type": entry.spec_type,
                       "purpose": entry.purpose, "sha256": hashlib.sha256(path.read_bytes()).hexdigest()}
    tmp = directory / f".index.json.{os.getpid()}.tmp"
    tmp.write_text(json.dumps(index, indent=2, sort_keys=True) + "\n")
    tmp.replace(directory / "index.json")
    return paths


# ---------------------------------------------------------------- the win test bed

# A target that is memory-bound on a 2-core CPU: 16 F16 layers of hidden 1024, FFN 2816, 8 heads (about
# 413 MB, so each decoded token streams the whole file from memory), and one-layer drafts that are its
# exact prefix. Speculation pays here: verifying K+1 tokens reads the weights once, as one plain step does.
WIN_TARGET_LAYERS = 16


def win_target_spec(s: float = 0.0, *, seed: int = 4321) -> ModelSpec:
    """The memory-bound target; layers 1..15 have their output projections scaled by ``s`` (0: the
    one-layer draft predicts it exactly)."""
    return ModelSpec(n_layer=WIN_TARGET_LAYERS, n_embd=1024, n_head=8, n_head_kv=8, n_ff=2816, seed=seed,
                     scale_extra=s, shared_layers=1, matrix_type="f16", name=f"testbed-win-target-s{s:g}")


def win_draft_spec(*, noise: float = 0.0, seed: int = 4321) -> ModelSpec:
    """The one-layer draft: the target's embeddings, head and first block (with ``noise`` x fresh noise on
    its output projections for a draft that guesses badly whatever the target)."""
    suffix = f"-noise{noise:g}" if noise else ""
    return ModelSpec(n_layer=1, n_embd=1024, n_head=8, n_head_kv=8, n_ff=2816, seed=seed, draft_noise=noise,
                     shared_layers=1, matrix_type="f16", name=f"testbed-win-draft{suffix}")


WIN_SET: dict[str, ModelSpec] = {
    # acceptance ~100 % with the exact draft: draft-simple wins
    "target-win.gguf": win_target_spec(0.0),
    "draft-win.gguf": win_draft_spec(),
    # the same target with a draft whose guesses are mostly wrong: a deep draft loses
    "draft-win-noisy.gguf": win_draft_spec(noise=1.0),
}


def write_win_set(directory: str | Path, scales: Sequence[float] = ()) -> dict[str, Path]:
    """Writes the win test bed (WIN_SET, plus ``target-win-s<s>.gguf`` for each extra scale in ``scales``)
    into directory, skipping files already written (their bytes are deterministic); returns name -> path.

    Cache it outside the repository (about 0.9 GB): ``python -m testbed.models --win DIR``.
    """
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    specs = dict(WIN_SET)
    for s in scales:
        specs[f"target-win-s{s:g}.gguf"] = win_target_spec(float(s))
    paths: dict[str, Path] = {}
    for name, spec in specs.items():
        path = directory / name
        done = directory / f".{name}.done"
        if not (path.exists() and done.exists()):
            tmp = directory / f".{name}.tmp"
            write_model(tmp, spec)
            tmp.replace(path)
            done.write_text(name + "\n")
        paths[name] = path
    return paths


def main(argv: Sequence[str]) -> int:
    if len(argv) == 2 and argv[0] == "--win":
        for name, path in write_win_set(argv[1]).items():
            print(f"{name} {path.stat().st_size}")
        return 0
    if len(argv) != 1:
        print("usage: PYTHONPATH=tests python -m testbed.models [--win] OUTDIR", file=sys.stderr)
        return 2
    paths = write_standard_set(argv[0])
    print((Path(argv[0]) / "index.json").read_text(), end="")
    return 0 if paths else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
