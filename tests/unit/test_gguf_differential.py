"""Differential test: every key and tensor of every test-bed model, read by us and by gguf.GGUFReader."""
from __future__ import annotations

from pathlib import Path

import gguf
import pytest

from ansible_collections.llmfleet.specdec.plugins.module_utils.gguf._gguf import read_header
from ansible_collections.llmfleet.specdec.plugins.module_utils.gguf._model_facts import model_facts
from testbed.models import ModelSpec, write_model, write_standard_set


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("diff")
    files = dict(write_standard_set(d))
    files["big-endian.gguf"] = write_model(d / "big-endian.gguf", ModelSpec(big_endian=True, n_layer=2))
    return files


def _flatten(value: object) -> object:
    if isinstance(value, list) and value and isinstance(value[0], list):
        return [x for sub in value for x in _flatten(sub)]
    return value


def test_every_key_and_tensor_agrees(models: dict[str, Path]) -> None:
    assert len(models) >= 9
    for name, path in models.items():
        ours = read_header(str(path))
        ref = gguf.GGUFReader(str(path))
        ref_keys = {k: f for k, f in ref.fields.items() if not k.startswith("GGUF.")}
        assert list(ours.kv) == list(ref_keys), name
        for key, field in ref_keys.items():
            expected = field.contents()
            got = _flatten(ours.python(key))
            if isinstance(expected, float):
                assert got == pytest.approx(expected), (name, key)
            elif isinstance(expected, list) and expected and isinstance(expected[0], float):
                assert got == pytest.approx(expected), (name, key)
            else:
                assert got == expected, (name, key)
        assert [(t.name, list(t.dims), t.ggml_type, ours.data_offset + t.offset) for t in ours.tensors] == [
            (t.name, [int(x) for x in t.shape], int(t.tensor_type), int(t.data_offset)) for t in ref.tensors
        ], name


def test_big_endian_model_has_the_same_tokenizer_fingerprint(models: dict[str, Path]) -> None:
    le = model_facts(read_header(str(models["draft.gguf"])))["tokenizer"]
    be = model_facts(read_header(str(models["big-endian.gguf"])))["tokenizer"]
    assert be["fingerprint"] == le["fingerprint"] and be["tokens_sha256_2000"] == le["tokens_sha256_2000"]
    assert read_header(str(models["big-endian.gguf"])).byte_order == "big"
