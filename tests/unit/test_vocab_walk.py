"""The vocabulary checks walked in place (issue 22) against the plain Python reading they replace.

``_llamacpp_vocab`` no longer builds a list and a dict of every token: it walks the tokens in the header buffer
with a table of offsets. The oracle below is the former reading (every loaded text as bytes, a dict of them), and
every verdict - loads or not, the duplicate pair, the texts, the first mismatch, the phi-3 lookups - must be the
same on vocabularies made to hit its corners: empty tokens and texts that name them ([EMPTY_<id>]), NUL bytes,
texts longer than BIG_TEXT (hashed and compared in place), hybriddna markers, both byte orders.
"""
from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest
from gguf_bytes import Builder, T

from ansible_collections.llmfleet.specdec.plugins.module_utils.gguf._gguf import read_header
from ansible_collections.llmfleet.specdec.plugins.module_utils.llamacpp._llamacpp import first_token_mismatch
from ansible_collections.llmfleet.specdec.plugins.module_utils.llamacpp._llamacpp_vocab import (
    BIG_TEXT,
    DNA_KMER_MARKER,
    load_vocab,
)

LONG = b"L" * (BIG_TEXT + 100)


def _oracle(tokens: list[bytes], model: str) -> tuple[tuple[int, int, bytes] | None, list[bytes]]:
    """The former reading: the duplicate (first id, id, text) as a dict finds it, and the texts."""
    texts = [raw.split(b"\0", 1)[0] or f"[EMPTY_{i}]".encode() for i, raw in enumerate(tokens)]
    seen: dict[bytes, int] = {}
    for i, text in enumerate(texts):
        first = seen.setdefault(text, i)
        if first != i:
            return (first, i, text), texts
    if model == "hybriddna" and b"<oov>" in texts:
        m = DNA_KMER_MARKER
        for i in range(texts.index(b"<oov>") + 1, len(texts)):
            if len(texts[i]) > len(m) and texts[i].endswith(m):
                texts[i] = texts[i][:-len(m)]
    return None, texts


def _pool(rng: random.Random, n: int) -> list[bytes]:
    return [b"", b"\0", b"\0x", b"a", b"a\0", b"a\0b", b"ab", b"<oov>", b"<s>", b"</s>", b"<unk>",
            b"<|endoftext|>", b"x" + DNA_KMER_MARKER, b"x", DNA_KMER_MARKER, LONG, LONG + b"\0tail", LONG[:-1] + b"M",
            LONG + b"Z", *(f"[EMPTY_{rng.randrange(n + 2)}]".encode() for _dummy in range(3)), b"[EMPTY_01]",
            *(bytes([rng.randrange(1, 256)]) * rng.randrange(1, 4) for _dummy in range(4))]


def _vocab(rng: random.Random) -> list[bytes]:
    n = rng.randrange(0, 40)
    pool = _pool(rng, n)
    distinct = rng.random() < 0.5  # half of them hold no accidental duplicate, so the walk goes to the end
    out: list[bytes] = []
    for i in range(n):
        if distinct and rng.random() < 0.7:
            out.append(f"<t{i}>".encode() + (b"\0junk" if rng.random() < 0.1 else b""))
        else:
            out.append(rng.choice(pool))
    return out


def _write(path: Path, tokens: list[bytes], *, model: str = "gpt2", name: str = "m", order: str = "<") -> Any:
    b = Builder(order).kv("general.architecture", T["str"], "llama").kv("general.name", T["str"], name)
    b.kv("tokenizer.ggml.model", T["str"], model)
    if model == "gpt2":
        b.kv("tokenizer.ggml.pre", T["str"], "gpt-2")
    if model in ("gpt2", "hybriddna"):
        b.kv("tokenizer.ggml.merges", T["arr"], (T["str"], ["a b"]))
    b.kv("tokenizer.ggml.tokens", T["arr"], (T["str"], tokens))
    path.write_bytes(b.build())
    return read_header(str(path))


@pytest.mark.parametrize("seed", range(6))
def test_the_walk_gives_the_former_verdicts(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    checked = {"dup": 0, "loads": 0, "named": 0}
    for case in range(60):
        tokens = _vocab(rng)
        model = rng.choice(["gpt2", "hybriddna", "llama"])
        order = rng.choice("<>")
        hdr = _write(tmp_path / f"{case}.gguf", tokens, model=model, order=order)
        dup, texts = _oracle(tokens, model)
        got = load_vocab(hdr)
        where = f"seed {seed} case {case} {model} {order}: {[t[:24] for t in tokens]!r}"
        if dup is not None:
            checked["dup"] += 1
            checked["named"] += dup[2].startswith(b"[EMPTY_")
            first, second, text = dup
            assert got["loads"] is False and got["load_failure"] == "aborts", where
            assert f"tokens {first} and {second} load with the same text" in got["load_error"], (where, got)
            shown = text if len(text) <= BIG_TEXT else text[:BIG_TEXT] + f"...({len(text)} bytes)".encode()
            assert repr(shown) in got["load_error"], where
        else:
            checked["loads"] += 1
            assert got["loads"] is True, (where, got["load_error"])
            assert list(got["texts"]) == texts, where
            assert got["texts"] == texts and len(got["texts"]) == len(texts), where
    # both sides of the rule were exercised, and a text that names an empty token
    assert checked["dup"] >= 10 and checked["loads"] >= 10 and checked["named"] >= 1, checked


def _oracle_mismatch(a: list[bytes], b: list[bytes], start: int = 5) -> dict[str, Any] | None:
    for i in range(start, min(len(a), len(b))):
        if a[i] != b[i]:
            return {"id": i, "target": a[i].decode("utf-8", "replace"), "draft": b[i].decode("utf-8", "replace")}
    return None


def test_the_first_mismatch_is_the_former_one(tmp_path: Path) -> None:
    rng = random.Random(7)
    base = [f"<t{i}>".encode() for i in range(30)]
    found = 0
    for case in range(120):
        a, b = list(base), list(base)
        for _dummy in range(rng.randrange(0, 3)):
            i = rng.randrange(len(a))
            b[i] = rng.choice([b"", b"\0", f"[EMPTY_{i}]".encode(), b"x\0y", f"<t{i}>\0z".encode(), b"q" + bytes([i])])
        if rng.random() < 0.3:
            a[rng.randrange(len(a))] = b""
        if rng.random() < 0.3:
            b = b[:rng.randrange(5, len(b))]
        ta, tb = _oracle(a, "gpt2")[1], _oracle(b, "gpt2")[1]
        if len(set(ta)) < len(ta) or len(set(tb)) < len(tb):
            continue  # a side that does not load has no texts to compare
        want = _oracle_mismatch(ta, tb)
        found += want is not None
        got = first_token_mismatch(_write(tmp_path / f"a{case}.gguf", a), _write(tmp_path / f"b{case}.gguf", b))
        assert got == want, (case, [t[:24] for t in a], [t[:24] for t in b])
    assert found >= 20


def test_an_empty_token_and_its_name_collide_in_either_order(tmp_path: Path) -> None:
    base = [f"<t{i}>".encode() for i in range(8)]
    later = load_vocab(_write(tmp_path / "a.gguf", [*base, b"[EMPTY_10]", b"x", b""]))
    assert "tokens 8 and 10 load with the same text b'[EMPTY_10]'" in later["load_error"]
    earlier = load_vocab(_write(tmp_path / "b.gguf", [*base, b"\0", b"x", b"[EMPTY_8]"]))
    assert "tokens 8 and 10 load with the same text b'[EMPTY_8]'" in earlier["load_error"]
    assert load_vocab(_write(tmp_path / "c.gguf", [*base, b"", b"[EMPTY_08]", b"[EMPTY_9]"]))["loads"] is True


def test_a_long_token_is_compared_in_place_and_shown_clipped(tmp_path: Path) -> None:
    base = [f"<t{i}>".encode() for i in range(8)]
    a = _write(tmp_path / "a.gguf", [*base, LONG + b"A"])
    b = _write(tmp_path / "b.gguf", [*base, LONG + b"B"])
    got = first_token_mismatch(a, b)
    assert got is not None and got["id"] == 8
    assert got["target"] == "L" * BIG_TEXT + f"...({len(LONG) + 1} bytes)"
    assert first_token_mismatch(a, _write(tmp_path / "c.gguf", [*base, LONG + b"A\0ignored"])) is None


def test_phi3_lookups_read_the_walked_texts(tmp_path: Path) -> None:
    base = [f"<t{i}>".encode() for i in range(8)]
    full = [*base, b"</s>", b"<unk>", b"<s>", b"<|endoftext|>"]
    assert load_vocab(_write(tmp_path / "ok.gguf", full, model="llama", name="My PHI-3 mini"))["loads"] is True
    cut = [*base, b"</s>", b"<unk>\0x", b"<s>"]
    got = load_vocab(_write(tmp_path / "no.gguf", cut, model="llama", name="phi3-ish"))
    assert got["loads"] is False and "'<|endoftext|>'" in got["load_error"]
    # hybriddna strips the marker after <oov> before the lookups, as llama.cpp does
    dna = [*base, b"<oov>", b"</s>" + DNA_KMER_MARKER, b"<unk>", b"<s>", b"<|endoftext|>" + DNA_KMER_MARKER]
    assert load_vocab(_write(tmp_path / "dna.gguf", dna, model="hybriddna", name="phi-3 dna"))["loads"] is True


@pytest.mark.parametrize(("charsmap", "error"), [
    ([1, 0, 0], "too small for xcda_blob_size"),
    ([4, 0, 0, 0, 9, 9, 9, 9], "Index out of array bounds in precompiled charsmap"),
    ([3, 0, 0, 0, 9, 9, 9, 9], None),
])
def test_the_t5_charsmap_is_checked_without_a_copy(tmp_path: Path, charsmap: list[int], error: str | None) -> None:
    b = Builder().kv("general.architecture", T["str"], "t5").kv("tokenizer.ggml.model", T["str"], "t5")
    b.kv("tokenizer.ggml.tokens", T["arr"], (T["str"], [f"<t{i}>" for i in range(8)]))
    b.kv("tokenizer.ggml.precompiled_charsmap", T["arr"], (T["u8"], charsmap))
    path = tmp_path / "t5.gguf"
    path.write_bytes(b.build())
    got = load_vocab(read_header(str(path)))
    assert (got["load_error"] is None) if error is None else (error in got["load_error"]), got["load_error"]
