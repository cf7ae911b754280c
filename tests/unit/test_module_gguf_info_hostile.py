"""gguf_info as Ansible runs it on hostile header values: fail_json with the key, or plain JSON facts."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from ansible.module_utils.testing import patch_module_args
from gguf_bytes import Builder, T

from ansible_collections.llmfleet.specdec.plugins.modules import gguf_info


def _run(args: dict, capsys: pytest.CaptureFixture[str]) -> dict:
    with patch_module_args(args), pytest.raises(SystemExit):
        gguf_info.main()
    return json.loads(capsys.readouterr().out)


def _write(tmp_path: Path, kvs: list[tuple[str, int, Any]]) -> str:
    b = Builder().kv("general.architecture", T["str"], "llama")
    for key, vtype, value in kvs:
        b.kv(key, vtype, value)
    p = tmp_path / "m.gguf"
    p.write_bytes(b.build())
    return str(p)


@pytest.mark.parametrize(("key", "vtype", "value"), [
    ("llama.context_length", T["arr"], (T["u32"], [4096, 4096])),   # was: exit_json failed on a reader object
    ("llama.attention.sliding_window", T["arr"], (T["u32"], [1])),
    ("tokenizer.ggml.bos_token_id", T["arr"], (T["u32"], [1, 2])),
    ("llama.attention.head_count", T["str"], "4"),                   # was: a TypeError traceback
    ("llama.block_count", T["u64"], 2**64 - 1),                        # was: unbounded allocation
])
def test_hostile_value_is_a_clean_failure(tmp_path: Path, capsys: pytest.CaptureFixture[str], key: str, vtype: int,
                                          value: Any) -> None:
    base = [] if key == "llama.block_count" else [("llama.block_count", T["u32"], 2)]
    path = _write(tmp_path, [*base, (key, vtype, value)])
    out = _run({"path": path}, capsys)
    assert out["failed"] is True  # fail_json from the module's one handler, not a crash
    assert path in out["msg"] and repr(key) in out["msg"] and "reconvert" in out["msg"]
    assert "Traceback" not in out["msg"]


def test_values_of_every_shape_come_back_as_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _write(tmp_path, [("t.nested", T["arr"], (T["arr"], [(T["str"], [b"\xc3", "é"]), (T["i8"], [-1])])),
                             ("t.bad", T["str"], b"\xff\xfe"), ("t.big", T["u64"], 2**64 - 1)])
    out = _run({"path": path, "keys": ["t.nested", "t.bad", "t.big"]}, capsys)
    assert out["gguf"]["values"] == {"t.nested": [["\ufffd", "é"], [-1]], "t.bad": "\ufffd\ufffd", "t.big": 2**64 - 1}
