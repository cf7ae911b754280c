"""The GGUF header reader: agreement with gguf.GGUFReader, every value type, both byte orders, hostile input."""
from __future__ import annotations

import hashlib
import struct
import tracemalloc
from pathlib import Path

import gguf
import numpy as np
import pytest
from gguf_bytes import Builder, T
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ansible_collections.llmfleet.specdec.plugins.module_utils.common._errors import GGUFError
from ansible_collections.llmfleet.specdec.plugins.module_utils.gguf._gguf import (
    Array,
    parse_header,
    read_header,
    tokens_sha256,
)
from ansible_collections.llmfleet.specdec.plugins.module_utils.gguf._gguf_source import FileSource


def _write_with_gguf(path: Path, endian: gguf.GGUFEndian = gguf.GGUFEndian.LITTLE) -> Path:
    w = gguf.GGUFWriter(str(path), "llama", endianess=endian)
    w.add_block_count(3)
    w.add_context_length(4096)
    w.add_embedding_length(64)
    w.add_head_count(4)
    w.add_head_count_kv([2, 1, 2])
    w.add_uint8("t.u8", 200)
    w.add_int8("t.i8", -5)
    w.add_uint16("t.u16", 60000)
    w.add_int16("t.i16", -30000)
    w.add_uint32("t.u32", 4_000_000_000)
    w.add_int32("t.i32", -2_000_000_000)
    w.add_float32("t.f32", 1.5)
    w.add_float64("t.f64", -2.25)
    w.add_uint64("t.u64", 2**63 + 5)
    w.add_int64("t.i64", -(2**62))
    w.add_bool("t.bool", True)
    w.add_string("t.str", "héllo ✓")
    w.add_array("t.arr_i32", [1, -2, 3])
    w.add_array("t.arr_f32", [0.5, 1.5])
    w.add_array("t.arr_bool", [True, False, True])
    w.add_array("t.nested", [[1, 2], [3]])
    w.add_tokenizer_model("gpt2")
    w.add_token_list([f"tok{i}" for i in range(2100)] + ["é", "✓"])
    w.add_token_merges(["a b", "c d", "tok1 0"])
    w.add_token_types([1] * 2102)
    w.add_tensor("token_embd.weight", np.zeros((8, 64), dtype=np.float16))
    w.add_tensor("output.weight", np.ones((4, 32), dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def _reference_values(path: Path) -> dict[str, object]:
    """Every key's value as gguf.GGUFReader reads it (the project's differential oracle)."""
    r = gguf.GGUFReader(str(path))
    out: dict[str, object] = {}
    for name, field in r.fields.items():
        if name.startswith("GGUF."):
            continue
        out[name] = field.contents()
    return out


@pytest.mark.parametrize("endian", [gguf.GGUFEndian.LITTLE, gguf.GGUFEndian.BIG], ids=["little", "big"])
def test_agrees_with_gguf_reader_on_every_key_and_tensor(tmp_path: Path, endian: gguf.GGUFEndian) -> None:
    path = _write_with_gguf(tmp_path / "m.gguf", endian)
    hdr = read_header(str(path))
    ref = _reference_values(path)
    assert hdr.byte_order == ("little" if endian == gguf.GGUFEndian.LITTLE else "big")
    assert set(hdr.kv) == set(ref)
    for key, expected in ref.items():
        got = hdr.python(key)
        if isinstance(expected, float):
            assert got == pytest.approx(expected), key
        elif key == "t.nested":
            # GGUFReader.contents() flattens nested arrays; we keep the structure that was written
            assert got == [[1, 2], [3]] and [x for sub in got for x in sub] == expected
        else:
            assert got == expected, key
    r = gguf.GGUFReader(str(path))
    assert [(t.name, list(t.dims), t.ggml_type, t.offset) for t in hdr.tensors] == [
        (t.name, [int(d) for d in t.shape], int(t.tensor_type), int(t.data_offset) - r.data_offset) for t in r.tensors
    ]
    assert hdr.data_offset == r.data_offset
    assert hdr.tensor_count == 2 and hdr.kv_count == len(ref)


def test_byte_orders_give_identical_fingerprints(tmp_path: Path) -> None:
    le = read_header(str(_write_with_gguf(tmp_path / "le.gguf")))
    be = read_header(str(_write_with_gguf(tmp_path / "be.gguf", gguf.GGUFEndian.BIG)))
    tok_le, tok_be = le.get("tokenizer.ggml.tokens"), be.get("tokenizer.ggml.tokens")
    assert tok_le.raw() != tok_be.raw()  # the stored bytes differ...
    assert tokens_sha256(tok_le, 2000) == tokens_sha256(tok_be, 2000)  # ...the fingerprint does not
    assert tokens_sha256(tok_le) == tokens_sha256(tok_be)


def test_tokens_sha256_2000_is_the_documented_encoding(tmp_path: Path) -> None:
    hdr = read_header(str(_write_with_gguf(tmp_path / "m.gguf", gguf.GGUFEndian.BIG)))
    tokens = [f"tok{i}" for i in range(2100)] + ["é", "✓"]
    expected = hashlib.sha256(
        b"".join(struct.pack("<Q", len(t.encode())) + t.encode() for t in tokens[:2000])
    ).hexdigest()
    assert tokens_sha256(hdr.get("tokenizer.ggml.tokens"), 2000) == expected
    assert tokens_sha256(hdr.get("tokenizer.ggml.tokens"), 2000) != tokens_sha256(hdr.get("tokenizer.ggml.tokens"))


def test_never_reads_tensor_data(tmp_path: Path) -> None:
    path = tmp_path / "big.gguf"
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_block_count(1)
    w.add_tensor("big.weight", np.zeros((1024, 4096), dtype=np.float32))  # 16 MiB of data
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    source = FileSource(str(path), chunk=0)
    hdr = parse_header(source, first_read=65536)
    source.close()
    assert path.stat().st_size > 16 * 1024 * 1024
    assert hdr.bytes_read == 65536 and hdr.requests == 1
    assert hdr.tensors[0].n_bytes == 16 * 1024 * 1024


def test_version_2_is_read(tmp_path: Path) -> None:
    data = Builder(version=2).kv("general.architecture", T["str"], "llama").build()
    p = tmp_path / "v2.gguf"
    p.write_bytes(data)
    assert read_header(str(p)).version == 2


def test_array_views_are_lazy_and_decodable(tmp_path: Path) -> None:
    hdr = read_header(str(_write_with_gguf(tmp_path / "m.gguf")))
    tokens = hdr.get("tokenizer.ggml.tokens")
    assert isinstance(tokens, Array) and len(tokens) == 2102
    assert tokens.to_list(3) == ["tok0", "tok1", "tok2"]
    assert list(tokens.iter_bytes())[-2:] == ["é".encode(), "✓".encode()]


# ------------------------------------------------------------------------------------------------
# Hostile and broken input: each names the problem and the byte offset


def _parse_bytes(tmp_path: Path, data: bytes, **kw: object) -> object:
    p = tmp_path / "bad.gguf"
    p.write_bytes(data)
    return read_header(str(p), **kw)


def _error(tmp_path: Path, data: bytes, **kw: object) -> GGUFError:
    with pytest.raises(GGUFError) as exc:
        _parse_bytes(tmp_path, data, **kw)
    assert str(tmp_path / "bad.gguf") in str(exc.value)  # the message names the input
    return exc.value


def test_wrong_magic(tmp_path: Path) -> None:
    err = _error(tmp_path, b"GGML" + b"\0" * 20)
    assert err.offset == 0 and "magic" in err.problem


@pytest.mark.parametrize("version", [0, 1, 4, 0x01000000 + 7])
def test_unknown_version(tmp_path: Path, version: int) -> None:
    err = _error(tmp_path, b"GGUF" + struct.pack("<I", version) + b"\0" * 16)
    assert err.offset == 4 and "version" in err.problem


def test_empty_and_tiny_files(tmp_path: Path) -> None:
    for data in (b"", b"GG", b"GGUF\x03\0"):
        err = _error(tmp_path, data)
        assert "truncated" in err.problem


def test_unknown_value_type_names_key_and_offset(tmp_path: Path) -> None:
    b = Builder().kv("general.architecture", T["str"], "llama")
    b.raw_kv(b.s("bad.key") + struct.pack("<I", 13) + b"\0" * 8)
    data = b.build()
    err = _error(tmp_path, data)
    assert "unknown value type 13" in err.problem and "bad.key" in err.problem
    assert err.offset == data.index(b"bad.key") + len("bad.key")


def test_unknown_array_element_type(tmp_path: Path) -> None:
    b = Builder()
    b.raw_kv(b.s("a") + struct.pack("<II", T["arr"], 77) + struct.pack("<Q", 1) + b"\0" * 8)
    err = _error(tmp_path, b.build())
    assert "unknown array element type 77" in err.problem


def test_string_length_beyond_the_file(tmp_path: Path) -> None:
    b = Builder()
    b.raw_kv(b.s("k") + struct.pack("<I", T["str"]) + struct.pack("<Q", 10**12) + b"abc")
    data = b.build()
    err = _error(tmp_path, data)
    assert "length 1000000000000" in err.problem
    assert err.offset == data.index(struct.pack("<Q", 10**12))


def test_string_length_beyond_max_header_bytes(tmp_path: Path) -> None:
    b = Builder().kv("k", T["str"], "x" * 5000)
    err = _error(tmp_path, b.build(), max_header_bytes=1024)
    assert "max_header_bytes" in err.problem


def test_array_count_the_file_cannot_back_is_refused_before_allocation(tmp_path: Path) -> None:
    b = Builder()
    b.raw_kv(b.s("toks") + struct.pack("<II", T["arr"], T["str"]) + struct.pack("<Q", 2**40) + b.s("a"))
    tracemalloc.start()
    err = _error(tmp_path, b.build())
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert "count 1099511627776" in err.problem
    assert peak < 4 * 1024 * 1024


@pytest.mark.parametrize("field", ["tensor", "kv"])
def test_absurd_counts(tmp_path: Path, field: str) -> None:
    b = Builder().kv("general.architecture", T["str"], "llama")
    if field == "tensor":
        b.n_tensors = 2**62
    else:
        b.n_kv = 2**50
    err = _error(tmp_path, b.build())
    assert err.offset == (8 if field == "tensor" else 16)


def test_negative_count(tmp_path: Path) -> None:
    b = Builder()
    b.n_kv = 2**64 - 1
    err = _error(tmp_path, b.build())
    assert "negative" in err.problem


def test_duplicate_key(tmp_path: Path) -> None:
    b = Builder().kv("general.architecture", T["str"], "llama").kv("general.architecture", T["str"], "qwen35")
    data = b.build()
    err = _error(tmp_path, data)
    assert "duplicate key 'general.architecture'" in err.problem
    assert err.offset == data.rindex(b.s("general.architecture"))


def test_duplicate_tensor_name(tmp_path: Path) -> None:
    b = Builder().tensor("w", [32]).tensor("w", [32], offset=128)
    err = _error(tmp_path, b.build(b"\0" * 256))
    assert "duplicate tensor name 'w'" in err.problem


def test_too_many_dims_and_overflowing_shape(tmp_path: Path) -> None:
    err = _error(tmp_path, Builder().tensor("w", [1, 1, 1, 1, 1]).build())
    assert "5 dimensions" in err.problem
    err = _error(tmp_path, Builder().tensor("w", [2**32, 2**32]).build())
    assert "absurd" in err.problem
    err = _error(tmp_path, Builder().tensor("w", [2**64 - 3]).build())
    assert "negative dimension" in err.problem


def test_invalid_ggml_type_and_block_size(tmp_path: Path) -> None:
    err = _error(tmp_path, Builder().tensor("w", [32], ggml_type=4).build())
    assert "invalid ggml type 4" in err.problem
    err = _error(tmp_path, Builder().tensor("w", [33], ggml_type=8).build())  # Q8_0 blocks of 32
    assert "not a multiple" in err.problem


def test_misaligned_tensor_offset(tmp_path: Path) -> None:
    err = _error(tmp_path, Builder().tensor("w", [8], offset=3).build(b"\0" * 64))
    assert "not a multiple of the alignment 32" in err.problem


def test_tensor_name_too_long(tmp_path: Path) -> None:
    err = _error(tmp_path, Builder().tensor("x" * 64, [8]).build(b"\0" * 64))
    assert "name" in err.problem and "< 64" in err.problem


def test_bad_alignment_key(tmp_path: Path) -> None:
    err = _error(tmp_path, Builder().kv("general.alignment", T["u32"], 24).build())
    assert "power of two" in err.problem


def test_truncated_tensor_data(tmp_path: Path) -> None:
    data = Builder().tensor("w", [64], ggml_type=0).build(b"\0" * 100)  # needs 256 bytes
    err = _error(tmp_path, data)
    assert "truncated" in err.problem and "'w'" in err.problem
    assert read_header(str(tmp_path / "bad.gguf"), check_data=False).tensor_count == 1


def test_nesting_depth_is_bounded(tmp_path: Path) -> None:
    b = Builder()
    inner: bytes = struct.pack("<IQ", T["u8"], 0)
    for _dummy in range(20):
        inner = struct.pack("<IQ", T["arr"], 1) + inner
    b.raw_kv(b.s("deep") + struct.pack("<I", T["arr"]) + inner)
    err = _error(tmp_path, b.build())
    assert "nested deeper" in err.problem


def test_invalid_bool(tmp_path: Path) -> None:
    b = Builder()
    b.raw_kv(b.s("flag") + struct.pack("<I", T["bool"]) + b"\x07")
    err = _error(tmp_path, b.build())
    assert "bool value 7" in err.problem


def test_non_utf8_key(tmp_path: Path) -> None:
    b = Builder().raw_kv(struct.pack("<Q", 2) + b"\xff\xfe" + struct.pack("<I", T["u8"]) + b"\0")
    err = _error(tmp_path, b.build())
    assert "UTF-8" in err.problem


def test_truncation_at_every_offset_is_a_named_error(tmp_path: Path) -> None:
    full = _write_with_gguf(tmp_path / "m.gguf").read_bytes()
    hdr_end = read_header(str(tmp_path / "m.gguf")).header_bytes
    p = tmp_path / "cut.gguf"
    for cut in range(0, hdr_end, 7):
        p.write_bytes(full[:cut])
        with pytest.raises(GGUFError) as exc:
            read_header(str(p))
        assert "truncated" in exc.value.problem, (cut, exc.value)


# ------------------------------------------------------------------------------------------------
# Property: arbitrary corruption ends in a value or in GGUFError — never another exception — and
# memory stays bounded by the input, not by the counts inside it.


@pytest.fixture(scope="module")
def valid_file(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    return _write_with_gguf(tmp_path_factory.mktemp("fuzz") / "m.gguf").read_bytes()


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_fuzzed_headers_fail_cleanly(valid_file: bytes, tmp_path: Path, data: st.DataObject) -> None:
    buf = bytearray(valid_file)
    for _dummy in range(data.draw(st.integers(1, 8), label="edits")):
        kind = data.draw(st.sampled_from(["flip", "u64", "cut", "insert"]))
        pos = data.draw(st.integers(0, len(buf) - 1))
        if kind == "flip":
            buf[pos] ^= data.draw(st.integers(1, 255))
        elif kind == "u64":
            val = data.draw(st.sampled_from([0, 1, 2**31, 2**32 - 1, 2**40, 2**63 - 1, 2**63, 2**64 - 1]))
            buf[pos:pos + 8] = struct.pack("<Q", val)
        elif kind == "cut":
            del buf[pos:]
            if not buf:
                buf += b"G"
        else:
            buf[pos:pos] = data.draw(st.binary(min_size=1, max_size=16))
    p = tmp_path / "fuzz.gguf"
    p.write_bytes(bytes(buf))
    tracemalloc.start()
    try:
        read_header(str(p), max_header_bytes=1 << 20)
    except GGUFError as exc:
        assert exc.problem and str(p) in str(exc)
    finally:
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    assert peak < 8 * 1024 * 1024


# ------------------------------------------------------------------------------------------------
# Memory: the reader keeps views over one buffer, not an object per element (bounds, not timings)


def _traced(fn: object) -> tuple[object, int, int]:
    """fn's result, the peak and the memory still held, as tracemalloc sees them."""
    tracemalloc.start()
    try:
        result = fn()  # type: ignore[operator]
        peak = tracemalloc.get_traced_memory()[1]
        held = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    return result, peak, held


def test_nested_arrays_are_views_not_objects(tmp_path: Path) -> None:
    n = 20000
    b = Builder()
    b.raw_kv(b.s("t.nested") + struct.pack("<IIQ", T["arr"], T["arr"], n)
             + b"".join(struct.pack("<IQ", T["u8"], 2) + bytes([i % 256, 7]) for i in range(n)))
    p = tmp_path / "nested.gguf"
    p.write_bytes(b.build())
    hdr, peak, held = _traced(lambda: read_header(str(p)))
    size = hdr.header_bytes
    assert held < 2 * size and peak < 3 * size, (held / size, peak / size)  # was 12 bytes per header byte
    nested = hdr.get("t.nested")
    assert nested.to_list(3) == [[0, 7], [1, 7], [2, 7]] and len(nested.to_list()) == n


def test_whole_vocabulary_hash_copies_nothing(tmp_path: Path) -> None:
    n = 300_000
    b = Builder()
    b.raw_kv(b.s("tokenizer.ggml.tokens") + struct.pack("<IIQ", T["arr"], T["str"], n)
             + b"".join(b.s(b"ab"[: 1 + i % 2]) for i in range(n)))
    p = tmp_path / "vocab.gguf"
    p.write_bytes(b.build())
    hdr = read_header(str(p))
    tokens = hdr.get("tokenizer.ggml.tokens")
    digest, peak, _dummy = _traced(lambda: tokens_sha256(tokens))
    assert digest == hashlib.sha256(tokens.raw()).hexdigest()
    assert peak < hdr.header_bytes // 4, peak  # was: the vocabulary copied twice over


def test_string_values_keep_their_stored_bytes(tmp_path: Path) -> None:
    b = Builder(order=">").kv("general.name", T["str"], b"caf\xc3\xa9 \xff")
    p = tmp_path / "s.gguf"
    p.write_bytes(b.build())
    kv = read_header(str(p)).kv["general.name"]
    assert kv.raw_bytes() == b"caf\xc3\xa9 \xff" and kv.value == "café \ufffd"


@pytest.mark.parametrize(("field", "count"), [("kv", 65537), ("tensor", 65537)])
def test_key_and_tensor_counts_are_capped(tmp_path: Path, field: str, count: int) -> None:
    # real models have a few dozen keys and a few thousand tensors; a header of tiny items would cost
    # hundreds of bytes of Python objects per item, so the counts are capped before anything is built
    b = Builder()
    if field == "kv":
        for i in range(count):
            b.raw_kv(b.s(b"k%d" % i) + struct.pack("<I", T["u8"]) + b"\0")
    else:
        for i in range(count):
            b.tensor(f"t{i}", [32], offset=0)
    err = _error(tmp_path, b.build())
    assert f"count {count} is more than this reader accepts (65536)" in err.problem
    assert err.offset == (16 if field == "kv" else 8)
