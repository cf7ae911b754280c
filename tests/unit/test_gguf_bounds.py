"""What bounds a module's memory besides the vocabulary walk (issue 22): key names, the two headers of a pair,
string facts, gguf_info's values - each refused or clipped with a message that names the input."""
from __future__ import annotations

import hashlib
import struct
from pathlib import Path

import pytest
from gguf_bytes import Builder, T

from ansible_collections.llmfleet.specdec.plugins.module_utils.common._errors import GGUFError
from ansible_collections.llmfleet.specdec.plugins.module_utils.gguf._gguf import (
    MAX_KEY_BYTES,
    MAX_KEY_NAME_BYTES,
    read_header,
    read_pair,
)
from ansible_collections.llmfleet.specdec.plugins.module_utils.gguf._model_facts import (
    MAX_TEXT,
    MAX_VALUE_ITEMS,
    model_facts,
    tokenizer_fingerprint,
)
from ansible_collections.llmfleet.specdec.plugins.module_utils.lint._lint import run_spec_lint


def _file(tmp_path: Path, name: str, b: Builder) -> str:
    p = tmp_path / name
    p.write_bytes(b.build())
    return str(p)


def _vocab(n: int = 50) -> Builder:
    return (Builder().kv("general.architecture", T["str"], "llama").kv("tokenizer.ggml.model", T["str"], "llama")
            .kv("tokenizer.ggml.tokens", T["arr"], (T["str"], [f"<t{i}>" for i in range(n)])))


def test_key_names_are_bounded(tmp_path: Path) -> None:
    ok = _file(tmp_path, "ok.gguf", Builder().kv("k" * MAX_KEY_BYTES, T["u8"], 1))
    assert "k" * MAX_KEY_BYTES in read_header(ok).kv
    long = _file(tmp_path, "long.gguf", Builder().kv("k" * (MAX_KEY_BYTES + 1), T["u8"], 1))
    with pytest.raises(GGUFError, match=f"a key of {MAX_KEY_BYTES + 1} bytes; the GGUF specification allows at most"):
        read_header(long)
    b = Builder()
    for i in range(MAX_KEY_NAME_BYTES // MAX_KEY_BYTES + 1):
        b.kv(f"{i:05d}" + "k" * (MAX_KEY_BYTES - 5), T["u8"], 1)
    with pytest.raises(GGUFError, match="the key names take more than 8388608 bytes"):
        read_header(_file(tmp_path, "many.gguf", b))


def test_the_two_headers_of_a_pair_share_max_header_bytes(tmp_path: Path) -> None:
    t = _file(tmp_path, "t.gguf", _vocab(200))
    d = _file(tmp_path, "d.gguf", _vocab(200))
    size = Path(t).stat().st_size
    one, two = read_pair(t, d, max_header_bytes=2 * size)
    assert one.header_bytes == two.header_bytes == size
    with pytest.raises(GGUFError, match=rf"the {size - 1} bytes of max_header_bytes \({2 * size - 1}\) that the "
                                        rf"target's header \({size} bytes\) leaves to the draft's"):
        read_pair(t, d, max_header_bytes=2 * size - 1)
    # spec_lint reads them the same way
    with pytest.raises(GGUFError, match="leaves to the draft's"):
        run_spec_lint({"engine": "llamacpp", "target": t, "draft": d, "flags": []},
                      {"max_header_bytes": 2 * size - 1})


def test_string_facts_are_clipped_and_a_long_architecture_prefixes_no_key(tmp_path: Path) -> None:
    arch = "a" * (MAX_KEY_BYTES + 10)
    b = (Builder().kv("general.architecture", T["str"], arch).kv("general.name", T["str"], "n" * 10_000)
         .kv(arch[:MAX_KEY_BYTES - 12] + ".block_count", T["u32"], 7))
    facts = model_facts(read_header(_file(tmp_path, "a.gguf", b)))
    assert facts["architecture"] == "a" * MAX_TEXT + f"...({len(arch)} bytes)"
    assert facts["name"] == "n" * MAX_TEXT + "...(10000 bytes)"
    assert facts["block_count"] is None  # no key can be that long, and a clipped prefix matches none either


def test_the_fingerprint_of_a_string_is_its_stored_bytes(tmp_path: Path) -> None:
    raw = b"\xff\xfe not utf-8"
    hdr = read_header(_file(tmp_path, "f.gguf", Builder().kv("tokenizer.ggml.model", T["str"], raw)))
    key = b"tokenizer.ggml.model"
    want = hashlib.sha256(struct.pack("<Q", len(key)) + key + struct.pack("<I", 8) + struct.pack("<Q", len(raw))
                          + raw).hexdigest()
    assert tokenizer_fingerprint(hdr) == want


def test_values_are_cut_and_named(tmp_path: Path) -> None:
    n = MAX_VALUE_ITEMS + 5
    b = Builder().kv("general.architecture", T["str"], "llama").kv("x.big", T["arr"], (T["u8"], [1] * n))
    b.kv("x.small", T["arr"], (T["u8"], [1, 2])).kv("x.text", T["str"], "hello")
    facts = model_facts(read_header(_file(tmp_path, "v.gguf", b)), keys=["x.big", "x.small", "x.text", "x.none"])
    assert len(facts["values"]["x.big"]) == MAX_VALUE_ITEMS and facts["values_cut"] == ["x.big", "x.small"]
    assert facts["values"]["x.text"] == "hello" and facts["values"]["x.none"] is None
