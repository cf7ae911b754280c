# Writes the tiny Hugging Face models the vLLM oracle tests ask real vLLM about: a target and drafts that differ in one way each.
"""Tiny Llama checkpoints for asking vLLM (CPU build) what it does with a speculative config.

Run with the vLLM venv's python (it has torch, transformers and tokenizers)::

    python tests/testbed/vllm_oracle_models.py DIR

writes, deterministically (fixed seeds, fixed training text):

- ``target``: Llama, 2 layers, hidden 128, 4 heads, 2 KV heads (head size 32), a 512-token byte-level
  BPE, bf16;
- ``draft``: the target cut to one layer, the same tokenizer;
- ``draft-other-tokenizer``: one layer, a BPE of the same size (512) learned on other text, so the
  same ids mean other strings;
- ``draft-other-vocab``: one layer, the target's tokenizer but ``vocab_size`` 640 (a larger embedding);
- ``draft-fp32``: the draft stored as float32 (another dtype in its config);
- ``my-eagle3-draft``: the draft again, in a folder whose name contains "eagle3";
- ``target-4kv``: the target with 4 KV heads (for the memory arithmetic: another KV width).

Nothing is downloaded. The weights are random: the oracle is about what vLLM accepts and how much KV
cache it allocates, not about the text.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

TEXT_A = [
    "speculative decoding drafts a few tokens and the target verifies them in one pass",
    "the quick brown fox jumps over the lazy dog while the server keeps serving",
    "a rollback restores production and the health check says ok again",
    "measure first, then switch: the median of many runs is the answer",
] * 8
TEXT_B = [
    "zyxw vuts rqpo nmlk jihg fedc ba 0123456789 !?@#",
    "lorem ipsum dolor sit amet consectetur adipiscing elit sed do eiusmod",
    "qwerty uiop asdf ghjkl zxcv bnm QWERTY UIOP ASDF",
] * 8
CHAT_TEMPLATE = ("{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}\n{% endfor %}"
                 "{% if add_generation_prompt %}<|assistant|>{% endif %}")


def _tokenizer(text: list[str], vocab_size: int):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=["<|bos|>", "<|eos|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(text, trainer=trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<|bos|>", eos_token="<|eos|>")
    fast.chat_template = CHAT_TEMPLATE
    return fast


def _model(layers: int, vocab: int, kv_heads: int, seed: int, dtype: str):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=vocab, hidden_size=128, intermediate_size=256, num_hidden_layers=layers,
                      num_attention_heads=4, num_key_value_heads=kv_heads, max_position_embeddings=4096,
                      bos_token_id=0, eos_token_id=1, tie_word_embeddings=False)
    model = LlamaForCausalLM(cfg)
    return model.to(getattr(torch, dtype))


def _save(model, tokenizer, out: Path, dtype: str) -> None:
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
    # transformers writes "dtype"; older readers look for torch_dtype: keep both, stable order
    cfg = json.loads((out / "config.json").read_text())
    cfg["torch_dtype"] = dtype
    (out / "config.json").write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")


def write_all(root: Path) -> dict[str, Path]:
    import torch

    torch.use_deterministic_algorithms(True)
    tok_a = _tokenizer(TEXT_A, 512)
    tok_b = _tokenizer(TEXT_B, 512)
    paths = {}
    target = _model(2, 512, 2, 1234, "bfloat16")
    _save(target, tok_a, root / "target", "bfloat16")
    paths["target"] = root / "target"
    draft = _model(1, 512, 2, 1234, "bfloat16")
    # the draft is the target's first layer, embeddings and head: a prefix, as the test bed's drafts are
    draft.load_state_dict({k: v for k, v in target.state_dict().items() if "layers.1." not in k})
    _save(draft, tok_a, root / "draft", "bfloat16")
    paths["draft"] = root / "draft"
    _save(_model(1, 512, 2, 99, "bfloat16"), tok_b, root / "draft-other-tokenizer", "bfloat16")
    paths["draft-other-tokenizer"] = root / "draft-other-tokenizer"
    _save(_model(1, 640, 2, 7, "bfloat16"), tok_a, root / "draft-other-vocab", "bfloat16")
    paths["draft-other-vocab"] = root / "draft-other-vocab"
    # the plain draft again, in a folder whose name vLLM reads as an EAGLE-3 drafter
    _save(draft, tok_a, root / "my-eagle3-draft", "bfloat16")
    paths["my-eagle3-draft"] = root / "my-eagle3-draft"
    _save(draft.to(torch.float32), tok_a, root / "draft-fp32", "float32")
    paths["draft-fp32"] = root / "draft-fp32"
    _save(_model(2, 512, 4, 1234, "bfloat16"), tok_a, root / "target-4kv", "bfloat16")
    paths["target-4kv"] = root / "target-4kv"
    return paths


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: vllm_oracle_models.py DIR")
    for name, path in write_all(Path(sys.argv[1])).items():
        print(name, path)
