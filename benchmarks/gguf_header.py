#!/usr/bin/env python3
"""Header parse speed and bytes fetched: our gguf_info parse against gguf.GGUFReader, side by side in one run.

Generates a header the size of a Qwen3.5/3.6 target (248,320 tokens, 247,587 merges, 851 tensors;
the tensors are tiny so the file stays small) and prints one table:
- local: best-of-N wall time of our full parse (header + facts + fingerprints) and of
  gguf.GGUFReader reading the same facts (tokens, merges, tensor list), the ratio, bytes read;
- remote: the same header from a loopback HTTP server with Range support: requests, bytes fetched.
Run: make benchmark   (or: PYTHONPATH=tests:.build/collections .venv/bin/python benchmarks/gguf_header.py)
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import gguf
import numpy as np

from ansible_collections.llmfleet.specdec.plugins.module_utils.gguf._gguf import DEFAULT_FIRST_READ, read_header
from ansible_collections.llmfleet.specdec.plugins.module_utils.gguf._model_facts import model_facts
from testbed.http_range import serve_directory

N_TOKENS = 248_320
N_MERGES = 247_587
N_TENSORS = 851


def write_qwen_sized_header(path: Path) -> None:
    rng = np.random.default_rng(35)
    alphabet = np.array(list("abcdefghijklmnopqrstuvwxyzĠĊ0123456789"))
    lengths = rng.integers(2, 12, size=N_TOKENS)
    tokens = ["".join(alphabet[rng.integers(0, len(alphabet), size=n)]) + f"{i}" for i, n in enumerate(lengths)]
    merges = [f"{tokens[i % N_TOKENS][:4]} {tokens[(i * 7) % N_TOKENS][:5]}" for i in range(N_MERGES)]
    w = gguf.GGUFWriter(str(path), "qwen35")
    w.add_block_count(65)
    w.add_context_length(262144)
    w.add_embedding_length(5120)
    w.add_head_count(24)
    w.add_head_count_kv(4)
    w.add_uint32("qwen35.nextn_predict_layers", 1)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("qwen35")
    w.add_token_list(tokens)
    w.add_token_types([1] * N_TOKENS)
    w.add_token_merges(merges)
    w.add_bos_token_id(248044)
    w.add_eos_token_id(248046)
    for i in range(N_TENSORS):
        w.add_tensor(f"blk.{i // 13}.t{i % 13}.weight", np.zeros(32, dtype=np.float16))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def ours(path: str) -> dict:
    return model_facts(read_header(path), include_tensors=True)


def reference(path: str) -> tuple[int, int, int]:
    r = gguf.GGUFReader(path)
    tokens = r.fields["tokenizer.ggml.tokens"].contents()
    merges = r.fields["tokenizer.ggml.merges"].contents()
    tensors = [(t.name, t.shape.tolist(), t.tensor_type) for t in r.tensors]
    return len(tokens), len(merges), len(tensors)


def best_of(n: int, fn, *args):
    best, result = float("inf"), None
    for _dummy in range(n):
        t0 = time.perf_counter()
        result = fn(*args)
        best = min(best, time.perf_counter() - t0)
    return best, result


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "qwen-sized.gguf"
        write_qwen_sized_header(path)
        t_ours, facts = best_of(args.repeat, ours, str(path))
        t_ref, (n_tok, n_merge, n_tensor) = best_of(args.repeat, reference, str(path))
        assert (facts["tokenizer"]["vocab_size"], facts["tokenizer"]["merges_count"], len(facts["tensors"])) == (
            n_tok, n_merge, n_tensor), "the two readers disagree"
        with serve_directory(Path(tmp)) as (base, log):
            remote = read_header(f"{base}/{path.name}")
        header = facts["header_bytes"]
        rows = [
            ("header size (bytes)", f"{header:,}", ""),
            ("tokens / merges / tensors", f"{n_tok:,} / {n_merge:,} / {n_tensor}", "both readers agree"),
            ("local parse, ours (s)", f"{t_ours:.3f}", f"best of {args.repeat}, full gguf_info facts"),
            ("local parse, gguf.GGUFReader (s)", f"{t_ref:.3f}", "tokens, merges, tensor list"),
            ("speed-up (GGUFReader / ours)", f"{t_ref / t_ours:.0f}x", "goal: >= 100x"),
            ("local bytes read, ours", f"{facts['bytes_read']:,}",
             f"header + {facts['bytes_read'] - header:,} (one chunk is {DEFAULT_FIRST_READ:,})"),
            ("remote requests", f"{remote.requests}", f"{len(log)} seen by the server; goal: <= 3"),
            ("remote bytes fetched", f"{remote.bytes_read:,}",
             f"header + {remote.bytes_read - header:,}; goal: <= header + one chunk"),
        ]
        width = max(len(r[0]) for r in rows)
        vwidth = max(len(r[1]) for r in rows)
        print(f"{'measure':<{width}}  {'value':>{vwidth}}  note")
        print(f"{'-' * width}  {'-' * vwidth}  ----")
        for name, value, note in rows:
            print(f"{name:<{width}}  {value:>{vwidth}}  {note}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
