# Wraps a tokenizer (copied byte for byte from a GGUF file, or hand-made) in the smallest llama model llama-server loads.
"""Tiny loadable models that carry a given tokenizer, for asking llama-server about vocabularies.

llama.cpp ships vocabulary-only files (``models/ggml-vocab-*.gguf`` in its source tree): tokenizer
keys and no tensors, so llama-server cannot load them as they are. ``write_vocab_model`` writes,
with the ``gguf`` package, a one-layer llama model whose token embedding has one row per token and
whose ``tokenizer.*`` keys are those of such a file with their stored types and exact bytes
(``tokenizer_kvs``); ``variant`` makes changed copies (a key stored with another type, a shorter
array, a missing merge list, odd token texts).

The weights are zero (norms one): nothing here is about the generated text.

``vocab_dir()`` finds the pinned llama.cpp tree's ``models`` folder (the tree CI unpacks to build
llama-server); the vocabulary files are read from there and never copied into the repository.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Dict, Iterable, Optional, Tuple

import gguf
import numpy as np

from ansible_collections.llmfleet.specdec.plugins.module_utils.gguf._gguf import ValueType, read_header
from testbed.server import LLAMA_CPP_PYTHON_VERSION

N_EMBD = 16
N_HEAD = 2
N_FF = 32
MAX_VOCAB_HEADER = 64 * 1024 * 1024


def vocab_dir() -> Path | None:
    """The pinned tree's models/ folder ($LLMFLEET_VOCAB_DIR, else under $LLMFLEET_CACHE), or None."""
    explicit = os.environ.get("LLMFLEET_VOCAB_DIR")
    if explicit:
        return Path(explicit) if Path(explicit).is_dir() else None
    cache = os.environ.get("LLMFLEET_CACHE") or str(Path.home() / ".cache" / "llmfleet-specdec")
    d = Path(cache) / f"src-{LLAMA_CPP_PYTHON_VERSION}" / "vendor" / "llama.cpp" / "models"
    return d if d.is_dir() else None


def vocab_files(directory: Path | None = None) -> list[Path]:
    d = directory or vocab_dir()
    return sorted(d.glob("ggml-vocab-*.gguf")) if d is not None else []


# ------------------------------------------------------------------ tokenizer keys

# key -> (value type, value, element type of an array or None); string arrays hold raw bytes
KVs = Dict[str, Tuple[gguf.GGUFValueType, Any, Optional[gguf.GGUFValueType]]]


def tokenizer_kvs(path: str | Path) -> KVs:
    """Every tokenizer.* key of a GGUF file with its stored type; string arrays as raw bytes."""
    hdr = read_header(str(path), max_header_bytes=MAX_VOCAB_HEADER)
    out: KVs = {}
    for key, kv in hdr.kv.items():
        if not key.startswith("tokenizer."):
            continue
        if kv.vtype == ValueType.ARRAY:
            arr = kv.value
            values = list(arr.iter_bytes()) if arr.elem_type == ValueType.STRING else arr.to_list()
            out[key] = (gguf.GGUFValueType.ARRAY, values, gguf.GGUFValueType(int(arr.elem_type)))
        else:
            out[key] = (gguf.GGUFValueType(int(kv.vtype)), kv.value, None)
    return out


def general_name(path: str | Path) -> str | None:
    """general.name decides llama.cpp's per-model token rules (phi-3), so a wrapper keeps it."""
    name = read_header(str(path), max_header_bytes=MAX_VOCAB_HEADER).get("general.name")
    return name if isinstance(name, str) else None


def n_vocab_of(kvs: KVs) -> int:
    tokens = kvs.get("tokenizer.ggml.tokens")
    return len(tokens[1]) if tokens is not None and isinstance(tokens[1], list) else 0


def write_vocab_model(path: str | Path, kvs: KVs, *, name: str | None = None, n_vocab: int | None = None,
                      vocab_size_key: int | None = None) -> Path:
    """A one-layer llama model (16 wide, zero weights) carrying ``kvs`` as its tokenizer.

    ``n_vocab`` sets the embedding rows (default: the token list's length); ``vocab_size_key``
    writes ``llama.vocab_size`` (what tokenizer model 'none' reads instead of the token list)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    rows = n_vocab_of(kvs) if n_vocab is None else n_vocab
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_name(name or "testbed-vocab")
    w.add_file_type(int(gguf.LlamaFileType.MOSTLY_F16))
    w.add_context_length(256)
    w.add_embedding_length(N_EMBD)
    w.add_block_count(1)
    w.add_feed_forward_length(N_FF)
    w.add_head_count(N_HEAD)
    w.add_head_count_kv(N_HEAD)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_dimension_count(N_EMBD // N_HEAD)
    if vocab_size_key is not None:
        w.add_uint32("llama.vocab_size", vocab_size_key)
    for key, (vtype, value, sub_type) in kvs.items():
        w.add_key_value(key, value, vtype, sub_type=sub_type)
    d, f = N_EMBD, N_FF
    w.add_tensor("token_embd.weight", np.zeros((rows, d), dtype=np.float16))
    w.add_tensor("output_norm.weight", np.ones((d,), dtype=np.float32))
    w.add_tensor("blk.0.attn_norm.weight", np.ones((d,), dtype=np.float32))
    for t in ("attn_q", "attn_k", "attn_v", "attn_output"):
        w.add_tensor(f"blk.0.{t}.weight", np.zeros((d, d), dtype=np.float16))
    w.add_tensor("blk.0.ffn_norm.weight", np.ones((d,), dtype=np.float32))
    w.add_tensor("blk.0.ffn_gate.weight", np.zeros((f, d), dtype=np.float16))
    w.add_tensor("blk.0.ffn_up.weight", np.zeros((f, d), dtype=np.float16))
    w.add_tensor("blk.0.ffn_down.weight", np.zeros((d, f), dtype=np.float16))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def variant(kvs: KVs, *, replace: KVs | None = None, drop: Iterable[str] = ()) -> KVs:
    """A copy of ``kvs`` with some keys dropped and some replaced (or added)."""
    dropped = set(drop)
    out = {k: v for k, v in kvs.items() if k not in dropped}
    out.update(replace or {})
    return out
