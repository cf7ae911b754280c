"""What the facts layer refuses, llama-server refuses too: the real server is the oracle.

A real test-bed model has one header key rewritten (tensor data untouched); ``model_facts`` must
fail with the project's error naming that key, and llama-server must refuse to load the same file.
The unmodified model is the control: facts come back and the server serves.
"""
from __future__ import annotations

import struct
from pathlib import Path
from typing import Any

import pytest

from ansible_collections.llmfleet.specdec.plugins.module_utils.common._errors import GGUFError
from ansible_collections.llmfleet.specdec.plugins.module_utils.gguf._gguf import ValueType, read_header
from ansible_collections.llmfleet.specdec.plugins.module_utils.gguf._model_facts import model_facts
from testbed.models import ModelSpec, write_model
from testbed.server import LlamaServer

pytestmark = pytest.mark.integration

VT = ValueType
FMT = {VT.UINT32: "I", VT.INT32: "i", VT.UINT64: "Q"}


def _encode(key: str, vtype: int, value: Any) -> bytes:
    k = key.encode()
    out = struct.pack("<Q", len(k)) + k + struct.pack("<I", vtype)
    if vtype == VT.ARRAY:
        et, items = value
        return out + struct.pack("<IQ", et, len(items)) + b"".join(struct.pack("<" + FMT[et], v) for v in items)
    return out + struct.pack("<" + FMT[VT(vtype)], value)


def rewrite(src: Path, dst: Path, key: str, vtype: int, value: Any) -> Path:
    """``src`` with ``key`` replaced (or added): the other key/values, the tensor infos and the tensor
    data are copied byte for byte; the data section moves to the next aligned offset."""
    data = src.read_bytes()
    hdr = read_header(str(src))
    assert hdr.byte_order == "little"
    kvs = sorted(hdr.kv.values(), key=lambda kv: kv.offset)
    tensor_start = hdr.tensors[0].info_offset
    bounds = [kv.offset for kv in kvs] + [tensor_start]
    raw = {kv.key: data[bounds[i]:bounds[i + 1]] for i, kv in enumerate(kvs)}
    raw[key] = _encode(key, vtype, value)
    body = b"GGUF" + struct.pack("<IQQ", hdr.version, hdr.tensor_count, len(raw)) + b"".join(raw.values())
    body += data[tensor_start:hdr.header_bytes]
    body += b"\0" * (-len(body) % hdr.alignment)
    dst.write_bytes(body + data[hdr.data_offset:])
    return dst


CASES = {
    # src/llama-model.cpp: GGML_ASSERT(hparams.n_layer_all > 0 && hparams.n_layer_all <= LLAMA_MAX_LAYERS)
    "block_count 513": ("llama.block_count", VT.UINT32, 513, "more than 512", "GGML_ASSERT"),
    # GGML_ASSERT(hparams.n_layer_nextn <= hparams.n_layer_all)
    "nextn above block_count": ("llama.nextn_predict_layers", VT.UINT32, 5, "more than 4", "GGML_ASSERT"),
    # src/llama-model-loader.cpp get_key_or_arr: "key %s has wrong array length; expected %u, got %u"
    "per-layer array too long": ("llama.attention.head_count_kv", VT.ARRAY, (VT.UINT32, [2] * 5),
                                 "5 entries but block_count is 4", "wrong array length"),
    # GKV<T>::validate_type: "key %s has wrong type %s but expected type %s"
    "array where a number belongs": ("llama.context_length", VT.ARRAY, (VT.UINT32, [4096, 4096]),
                                     "where an integer is expected", "wrong type"),
    "u64 block_count": ("llama.block_count", VT.UINT64, 4, None, "wrong type"),
}


@pytest.fixture(scope="module")
def base_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_model(tmp_path_factory.mktemp("facts-oracle") / "base.gguf", ModelSpec())


def test_the_unmodified_model_is_read_and_served(base_model: Path, llama_server_bin: str, tmp_path: Path) -> None:
    f = model_facts(read_header(str(base_model)))
    assert f["block_count"] == 4 and f["context_length"] == 4096
    with LlamaServer(base_model, binary=llama_server_bin, log_dir=tmp_path) as server:
        assert server.request("GET", "/health")[0] == 200


@pytest.mark.parametrize("case", list(CASES))
def test_refused_by_the_facts_layer_and_by_llama_server(case: str, base_model: Path, llama_server_bin: str,
                                                        tmp_path: Path) -> None:
    key, vtype, value, ours, theirs = CASES[case]
    model = rewrite(base_model, tmp_path / "hostile.gguf", key, vtype, value)
    if ours is None:
        # a u64 block_count: any integer width is a number to us (and 4 is in range); llama.cpp wants
        # exactly u32. The facts stay right; whether the file loads is the server's call, shown here.
        assert model_facts(read_header(str(model)))["block_count"] == 4
    else:
        with pytest.raises(GGUFError) as exc:
            model_facts(read_header(str(model)))
        assert repr(key) in str(exc.value) and ours in str(exc.value) and str(model) in str(exc.value)
    server = LlamaServer(model, binary=llama_server_bin, log_dir=tmp_path)
    assert server.wait_exit(timeout=60) != 0
    assert theirs in server.log_text(), server.log_text()[-2000:]
