"""One loader for a model given as header facts or as a GGUF path: spec_lint and kv_budget both read it so."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import gguf
import numpy as np
import pytest
from ansible.module_utils.testing import patch_module_args

from ansible_collections.llmfleet.specdec.plugins.module_utils.common._errors import SpecdecError
from ansible_collections.llmfleet.specdec.plugins.module_utils.gguf._model_facts import facts_or_path
from ansible_collections.llmfleet.specdec.plugins.module_utils.lint._lint import run_spec_lint
from ansible_collections.llmfleet.specdec.plugins.modules import kv_budget as kv_budget_module

# header facts as gguf_info returns them, less the architecture (what a hand-written dict may forget)
NO_ARCH: dict[str, Any] = {
    "block_count": 2, "context_length": 4096, "embedding_length": 256, "head_count": 4, "head_count_kv": 2,
    "key_length": 64, "value_length": 64, "sliding_window": None, "sliding_window_pattern": None,
    "kv_layers": [0, 1], "recurrent_layers": [],
    "mtp": {"nextn_predict_layers": 0, "nextn_layers": [], "tensors": [], "has_mtp": False},
    "spec_type_autodetect": None,
}
LLAMA = dict(NO_ARCH, architecture="llama")


def _gguf(path: Path) -> Path:
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_block_count(2)
    w.add_context_length(4096)
    w.add_embedding_length(64)
    w.add_head_count(4)
    w.add_head_count_kv(2)
    w.add_string("dflash.block_size_note", "not a key the rules read")
    w.add_tensor("token_embd.weight", np.zeros((8, 64), dtype=np.float16))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def _kv_budget(args: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    with patch_module_args(dict(args, ctx_size=512, parallel=1)), pytest.raises(SystemExit):
        kv_budget_module.main()
    return json.loads(capsys.readouterr().out)


def test_a_path_is_read_and_the_facts_name_it(tmp_path: Path) -> None:
    path = str(_gguf(tmp_path / "m.gguf"))
    facts, header = facts_or_path(path, "target", keys=["general.architecture"], include_tensors=True)
    assert header is not None and header.source == path
    assert facts["architecture"] == "llama" and facts["block_count"] == 2 and facts["path"] == path
    assert facts["values"] == {"general.architecture": "llama"}
    assert [t["name"] for t in facts["tensors"]] == ["token_embd.weight"]


def test_facts_and_a_gguf_info_result_are_taken_as_given() -> None:
    assert facts_or_path(LLAMA, "target") == (LLAMA, None)
    assert facts_or_path({"gguf": LLAMA, "changed": False}, "target") == (LLAMA, None)
    assert facts_or_path(None, "draft") == (None, None)


@pytest.mark.parametrize("value,match", [
    (NO_ARCH, "target: a facts dict needs at least 'architecture'"),
    ({"gguf": NO_ARCH, "changed": False}, "target: a facts dict needs at least 'architecture'"),
    # a gguf_info result whose facts are missing is not the result itself
    ({"gguf": None, **LLAMA}, "target: a facts dict needs at least 'architecture'"),
    ({"gguf": {}, **LLAMA}, "target: a facts dict needs at least 'architecture'"),
    (5, "target: expected header facts .* or a GGUF path or URL, got 5"),
    (["m.gguf"], "target: expected header facts"),
    ("  ", "target: expected header facts"),
    ("/nonexistent/m.gguf", r"target=/nonexistent/m.gguf: no such file; give the path of an existing GGUF file"),
    # only http(s) is read over the network; any other scheme is a (missing) local path
    ("ftp://host/m.gguf", r"target=ftp://host/m.gguf: no such file"),
])
def test_bad_input_names_the_input_and_the_fix(value: Any, match: str) -> None:
    with pytest.raises(SpecdecError, match=match):
        facts_or_path(value, "target")


@pytest.mark.parametrize("target", [NO_ARCH, {"gguf": NO_ARCH}, {"gguf": None, **LLAMA}])
def test_kv_budget_refuses_facts_without_an_architecture(target: dict[str, Any],
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    # kv_budget used to size these as if they were a model's facts
    out = _kv_budget({"target": target}, capsys)
    assert out["failed"] is True
    assert "target: a facts dict needs at least 'architecture'" in out["msg"]


def test_kv_budget_and_spec_lint_read_the_same_path_alike(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = str(_gguf(tmp_path / "m.gguf"))
    out = _kv_budget({"target": path}, capsys)
    assert "failed" not in out and out["kv_budget"]["target"]["total_bytes"] > 0
    with pytest.raises(SpecdecError, match=r"draft \(the config.s --spec-draft-model\)=.*missing\.gguf: no such file"):
        run_spec_lint({"engine": "llamacpp", "flags": ["-m", path, "-md", str(tmp_path / "missing.gguf"),
                                                       "--spec-type", "draft-simple"]})
    out = _kv_budget({"target": path, "draft": str(tmp_path / "missing.gguf")}, capsys)
    assert out["failed"] is True and "missing.gguf: no such file" in out["msg"]


def test_spec_lint_refuses_an_empty_gguf_beside_top_level_facts() -> None:
    # spec_lint used to fall back to the outer dict when 'gguf' was empty
    with pytest.raises(SpecdecError, match="target: a facts dict needs at least 'architecture'"):
        run_spec_lint({"engine": "llamacpp", "flags": [], "target": {"gguf": {}, **LLAMA}})
