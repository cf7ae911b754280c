"""gguf_info and spec_compat as Ansible runs them: arguments in, JSON out, errors as fail_json."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from ansible.module_utils.testing import patch_module_args
from gguf_bytes import Builder, T

from ansible_collections.llmfleet.specdec.plugins.modules import gguf_info, spec_compat


def _run(module, args: dict, capsys: pytest.CaptureFixture[str]) -> dict:
    with patch_module_args(args), pytest.raises(SystemExit):
        module.main()
    return json.loads(capsys.readouterr().out)


def _write(tmp_path: Path, name: str, tokens: list[str]) -> str:
    b = Builder().kv("general.architecture", T["str"], "llama").kv("llama.block_count", T["u32"], 2)
    b.kv("llama.attention.head_count_kv", T["u32"], 2).kv("tokenizer.ggml.model", T["str"], "gpt2")
    b.kv("tokenizer.ggml.pre", T["str"], "gpt-2").kv("tokenizer.ggml.tokens", T["arr"], (T["str"], tokens))
    b.kv("tokenizer.ggml.merges", T["arr"], (T["str"], ["a b"]))
    b.tensor("token_embd.weight", [32, 4])
    p = tmp_path / name
    p.write_bytes(b.build(b"\0" * 512))
    return str(p)


def test_gguf_info_returns_facts_unchanged_in_check_mode(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _write(tmp_path, "m.gguf", [f"t{i}" for i in range(50)])
    out = _run(gguf_info, {"path": path, "include_tensors": True, "keys": ["llama.block_count", "nope"],
                           "_ansible_check_mode": True}, capsys)
    assert out["changed"] is False
    g = out["gguf"]
    assert g["architecture"] == "llama" and g["block_count"] == 2 and g["tokenizer"]["vocab_size"] == 50
    assert g["tensors"] == [{"name": "token_embd.weight", "shape": [32, 4], "type": "F32", "offset": 0, "n_bytes": 512}]
    assert g["values"] == {"llama.block_count": 2, "nope": None}


def test_gguf_info_fails_with_the_offset(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    p = tmp_path / "bad.gguf"
    p.write_bytes(b"GGUF\x03\0\0\0" + b"\xff" * 16)
    out = _run(gguf_info, {"path": str(p)}, capsys)
    assert out["failed"] is True
    assert str(p) in out["msg"] and "at byte 8" in out["msg"]


def test_gguf_info_missing_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = _run(gguf_info, {"path": str(tmp_path / "absent.gguf")}, capsys)
    assert out["failed"] is True and "cannot open" in out["msg"] and "absent.gguf" in out["msg"]


def test_spec_compat_module(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    tokens = [f"t{i}" for i in range(50)]
    t = _write(tmp_path, "t.gguf", tokens)
    d = _write(tmp_path, "d.gguf", [*tokens[:20], "X", *tokens[21:]])
    out = _run(spec_compat, {"target": t, "draft": d}, capsys)
    assert out["changed"] is False and out["compatible"] is False
    assert out["first_mismatch"] == {"id": 20, "target": "t20", "draft": "X"}
    assert "serving WITHOUT speculation" in out["when_refused"]
    assert out["target"]["source"] == t and out["draft"]["vocab"]["n_tokens"] == 50
    same = _run(spec_compat, {"target": t, "draft": t}, capsys)
    assert same["compatible"] is True and same["tokenizers_identical"] is True
