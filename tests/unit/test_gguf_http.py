"""Reading GGUF headers over HTTP by Range requests from a loopback server."""
from __future__ import annotations

from pathlib import Path

import gguf
import numpy as np
import pytest

from ansible_collections.llmfleet.specdec.plugins.module_utils.common._errors import GGUFError, GGUFFetchError
from ansible_collections.llmfleet.specdec.plugins.module_utils.gguf._gguf import read_header
from ansible_collections.llmfleet.specdec.plugins.module_utils.gguf._model_facts import model_facts
from testbed.http_range import serve_directory


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("http")
    w = gguf.GGUFWriter(str(d / "m.gguf"), "llama")
    w.add_block_count(2)
    w.add_tokenizer_model("gpt2")
    w.add_token_list([f"token-{i:06d}" for i in range(30000)])  # ~570 KB of header
    w.add_tensor("w", np.zeros((256, 1024), dtype=np.float32))  # 1 MiB of data never fetched
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    (d / "trunc.gguf").write_bytes((d / "m.gguf").read_bytes()[:100000])
    return d


def test_remote_equals_local_and_reads_only_what_the_header_needs(model_dir: Path) -> None:
    local = model_facts(read_header(str(model_dir / "m.gguf")))
    with serve_directory(model_dir) as (base, log):
        hdr = read_header(f"{base}/m.gguf", first_read=128 * 1024)
    remote = model_facts(hdr)
    for key in ("tokenizer", "tensor_count", "kv_count", "header_bytes", "architecture"):
        assert remote[key] == local[key]
    chunks = -(-hdr.header_bytes // (128 * 1024))
    assert hdr.requests == chunks == len(log)
    assert all(r is not None and r.startswith("bytes=") for _dummy, r in log)
    assert hdr.bytes_read <= hdr.header_bytes + 128 * 1024
    assert hdr.bytes_read < (model_dir / "m.gguf").stat().st_size


def test_default_first_read_is_one_request(model_dir: Path) -> None:
    with serve_directory(model_dir) as (base, log):
        hdr = read_header(f"{base}/m.gguf")
    assert hdr.requests == 1 and len(log) == 1


def test_server_without_ranges_is_an_error_unless_allowed(model_dir: Path) -> None:
    with serve_directory(model_dir, ranges=False) as (base, _dummy):
        with pytest.raises(GGUFFetchError, match=r"does not support HTTP range requests.*allow_full_read"):
            read_header(f"{base}/m.gguf")
        hdr = read_header(f"{base}/m.gguf", allow_full_read=True, first_read=64 * 1024)
    assert hdr.get("tokenizer.ggml.tokens").count == 30000
    assert hdr.requests == 1  # one streamed response, read only as far as the header
    assert hdr.bytes_read <= hdr.header_bytes + 64 * 1024


def test_missing_and_truncated_remote_files(model_dir: Path) -> None:
    with serve_directory(model_dir) as (base, _dummy):
        with pytest.raises(GGUFFetchError, match="HTTP 404"):
            read_header(f"{base}/nope.gguf")
        with pytest.raises(GGUFError, match="truncated"):
            read_header(f"{base}/trunc.gguf", first_read=65536)


def test_unreachable_server_is_named() -> None:
    with pytest.raises(GGUFFetchError, match=r"127\.0\.0\.1:9/m\.gguf"):
        read_header("http://127.0.0.1:9/m.gguf", timeout=2)
