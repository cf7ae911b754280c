"""spec_compat on real tokenizers, with the real llama-server as the oracle.

llama.cpp's own vocabulary files (``models/ggml-vocab-*.gguf`` of the pinned tree) are wrapped
in tiny loadable models (``testbed.vocab_models``: their tokenizer keys with their stored types
and bytes). For every ordered pair, spec_compat's verdict must equal what llama-server does with
``--spec-type draft-simple``: speculation on (``/slots``) exactly when it predicts compatible.
Variants of the files, written with ``gguf``, check the loader rules one by one, including the
files llama.cpp refuses to load: spec_compat must say the server does not start, and it must not.

The vocabulary files are read from the pinned llama.cpp tree (the tree CI unpacks to build
llama-server); where it is absent these tests are skipped with that reason, never copied here.
"""
from __future__ import annotations

import os
import signal
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import gguf
import pytest

from ansible_collections.llmfleet.specdec.plugins.module_utils.gguf._gguf import GGUFHeader, read_header
from ansible_collections.llmfleet.specdec.plugins.module_utils.llamacpp._llamacpp import (
    are_compatible,
    compare_vocabs,
    compat_report,
)
from ansible_collections.llmfleet.specdec.plugins.module_utils.llamacpp._llamacpp_vocab import load_vocab
from testbed.server import LlamaServer, LlamaServerError
from testbed.vocab_models import (
    MAX_VOCAB_HEADER,
    general_name,
    tokenizer_kvs,
    variant,
    vocab_dir,
    vocab_files,
    write_vocab_model,
)

NO_TREE = ("the pinned llama.cpp source tree (its models/ggml-vocab-*.gguf) is not unpacked here; "
           "`make llama-server` unpacks it (or set LLMFLEET_VOCAB_DIR)")
pytestmark = [pytest.mark.integration, pytest.mark.skipif(vocab_dir() is None, reason=NO_TREE)]

NAMES = [p.name.removeprefix("ggml-vocab-").removesuffix(".gguf") for p in vocab_files()]
# fit off and no warm-up: the start-up is what is asked about, and these models are 16 wide
ARGS = ("--spec-type", "draft-simple", "-fit", "off", "--no-warmup")
V = gguf.GGUFValueType
WORKERS = max(1, min(4, int(os.environ.get("LLMFLEET_TEST_WORKERS") or os.cpu_count() or 1)))
# All 361 ordered pairs cost hundreds of server starts (minutes); `make test-vocab-pairs` runs them all
# (LLMFLEET_VOCAB_PAIRS=all). `make test` runs every file against itself and against gpt-2 both ways, and
# llama-spm against phi-3 both ways (one SPM pair that differs only in special tokens): every file meets
# the server at least three times.
ALL_PAIRS = os.environ.get("LLMFLEET_VOCAB_PAIRS", "") == "all"


def _pairs() -> list[tuple[str, str]]:
    if ALL_PAIRS:
        return [(t, d) for t in NAMES for d in NAMES]
    chosen = {(n, n) for n in NAMES}
    chosen |= {(n, "gpt-2") for n in NAMES} | {("gpt-2", n) for n in NAMES}
    chosen |= {(t, d) for t, d in (("llama-spm", "phi-3"), ("phi-3", "llama-spm")) if t in NAMES and d in NAMES}
    return sorted(chosen)


PAIRS = _pairs()


def _header(path: Path) -> GGUFHeader:
    return read_header(str(path), max_header_bytes=MAX_VOCAB_HEADER)


@pytest.fixture(scope="module")
def wrapped(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Every vocabulary file as a loadable model (general.name kept: it selects per-model rules)."""
    out = tmp_path_factory.mktemp("vocab-models")
    return {name: write_vocab_model(out / f"{name}.gguf", tokenizer_kvs(src), name=general_name(src))
            for name, src in zip(NAMES, vocab_files())}


@pytest.fixture(scope="module")
def loaded(wrapped: dict[str, Path]) -> dict[str, dict[str, Any]]:
    return {name: load_vocab(_header(path)) for name, path in wrapped.items()}


@pytest.fixture(scope="module")
def verdicts(loaded: dict[str, dict[str, Any]]) -> dict[tuple[str, str], dict[str, Any]]:
    """are_compatible for every ordered pair (each file loaded once: compare_vocabs is its second half)."""
    return {(t, d): compare_vocabs(loaded[t], loaded[d]) for t in NAMES for d in NAMES}


def server_outcome(target: Path, draft: Path, tmp_path: Path) -> tuple[str, str]:
    """What llama-server does with the pair: (outcome, log), outcome as spec_compat names it."""
    for _attempt in range(3):
        server = LlamaServer(target, draft=draft, args=ARGS, log_dir=tmp_path, ctx_size=256)
        server.start(wait=False)
        try:
            try:
                server.wait_healthy(timeout=300)
            except LlamaServerError:
                code = server.wait_exit(timeout=30)
                log = server.log_text()
                if "couldn't bind HTTP server socket" in log:
                    continue  # another test's server took the free port first: not an answer
                return ("aborts-at-start" if code == -signal.SIGABRT else "refuses-to-start"), log
            speculative = [s.get("speculative") for s in server.slots()]
            log = server.log_text()
        finally:
            server.stop()
        assert speculative in ([True], [False]), log[-2000:]
        return ("speculates" if speculative == [True] else "serves-without-speculation"), log
    raise AssertionError(f"no free port for llama-server after 3 tries; last log:\n{log[-2000:]}")


def test_the_vocabulary_files_are_all_there() -> None:
    assert len(NAMES) >= 19, NAMES  # the pinned tree ships 19; fewer means the wrong tree


def test_wrapping_keeps_the_vocabulary(loaded: dict[str, dict[str, Any]]) -> None:
    """The wrapper changes no tokenizer fact: the raw vocabulary files load to the same vocabularies."""
    for name, src in zip(NAMES, vocab_files()):
        assert load_vocab(_header(src)) == loaded[name], name


def test_are_compatible_is_load_then_compare(wrapped: dict[str, Path], verdicts: dict[tuple[str, str], Any]) -> None:
    for t, d in (("gpt-neox", "mpt"), ("llama-spm", "phi-3"), ("gpt-2", "qwen2"), ("qwen2", "qwen35")):
        assert are_compatible(_header(wrapped[t]), _header(wrapped[d])) == verdicts[(t, d)]


@pytest.fixture(scope="module")
def server_outcomes(wrapped: dict[str, Path], tmp_path_factory: pytest.TempPathFactory
                    ) -> dict[tuple[str, str], tuple[str, bool, str]]:
    """llama-server's outcome for every pair in PAIRS: (outcome, logged the vocab refusal, log tail).

    The starts are independent and each is one loading process, so they run WORKERS at a time
    (LLMFLEET_TEST_WORKERS, default the CPU count, at most 4): the 361 starts are most of this file's time."""
    logs = tmp_path_factory.mktemp("pair-logs")

    def run(t: str, d: str) -> tuple[str, bool, str]:
        outcome, log = server_outcome(wrapped[t], wrapped[d], logs / f"{t}--{d}")
        return outcome, "vocabs are not compatible" in log, log[-3000:]

    pairs = PAIRS
    with ThreadPoolExecutor(max_workers=WORKERS) as pool:
        results = list(pool.map(lambda pair: run(*pair), pairs))
    return dict(zip(pairs, results))


@pytest.mark.parametrize("pair", [f"{t}->{d}" for t, d in PAIRS])
def test_every_ordered_pair_agrees_with_the_server(pair: str, verdicts: dict[tuple[str, str], Any],
                                                   server_outcomes: dict[tuple[str, str], Any]) -> None:
    t, d = pair.split("->")
    verdict = verdicts[(t, d)]
    outcome, refusal_logged, log_tail = server_outcomes[(t, d)]
    assert outcome == verdict["server_outcome"], (verdict["reasons"], log_tail)
    assert refusal_logged is (outcome == "serves-without-speculation")


# ------------------------------------------------------------------ variants: the loader's rules

BASE = "gpt-2"


def _tokens(kvs: Any) -> list[bytes]:
    return list(kvs["tokenizer.ggml.tokens"][1])


def _with_tokens(kvs: Any, changes: dict[int, bytes]) -> Any:
    tokens = _tokens(kvs)
    for i, text in changes.items():
        tokens[i] = text
    return variant(kvs, replace={"tokenizer.ggml.tokens": (V.ARRAY, tokens, V.STRING)})


def _str(value: str) -> tuple[Any, Any, None]:
    return (V.STRING, value, None)


def _variants(base: Any) -> dict[str, tuple[Any, Any]]:
    """name -> (target tokenizer, draft tokenizer)."""
    n = len(_tokens(base))
    no_bos_id = variant(base, drop=["tokenizer.ggml.bos_token_id"])
    add_bos = {"tokenizer.ggml.add_bos_token": (V.BOOL, True, None)}
    oov = _with_tokens(base, {1000: b"<oov>"})
    kmers = {i: _tokens(base)[i] + "\ue000".encode() for i in range(1001, 1011)}
    return {
        # a pre-tokenizer llama.cpp treats like gemma4 forces add_bos on
        "granite-embed-multi-311m forces add_bos": (
            base, variant(base, replace={"tokenizer.ggml.pre": _str("granite-embed-multi-311m"),
                                         "tokenizer.ggml.add_bos_token": (V.BOOL, False, None)})),
        # the gemma4 *pre-tokenizer* keeps the default bos (11), as a gpt-2 one does
        "gemma4 pre keeps the default bos": (
            variant(no_bos_id, replace={"tokenizer.ggml.pre": _str("gemma4"), **add_bos}),
            variant(no_bos_id, replace=add_bos)),
        # the gemma4 *model* clears it: bos null against 11
        "gemma4 model clears the default bos": (
            variant(no_bos_id, replace={"tokenizer.ggml.model": _str("gemma4")}),
            variant(no_bos_id, replace={"tokenizer.ggml.pre": _str("gemma4")})),
        "empty token loads as [EMPTY_id]": (
            _with_tokens(base, {1000: b""}), _with_tokens(base, {1000: b"[EMPTY_1000]"})),
        "token cut at NUL": (_with_tokens(base, {1000: _tokens(base)[1000] + b"\x00tail"}), base),
        "token cut at NUL, other tail": (
            _with_tokens(base, {1000: _tokens(base)[1000] + b"\x00tail"}),
            _with_tokens(base, {1000: _tokens(base)[1000] + b"\x00other"})),
        "hybriddna k-mer marker stripped": (
            variant(_with_tokens(oov, kmers), replace={"tokenizer.ggml.model": _str("hybriddna")}), oov),
        "hybriddna marker kept by gpt2": (
            variant(_with_tokens(oov, kmers), replace={"tokenizer.ggml.model": _str("hybriddna")}),
            _with_tokens(oov, kmers)),
        "BPE without merges": (base, variant(base, drop=["tokenizer.ggml.merges"])),
        "BPE without merges as the target": (variant(base, drop=["tokenizer.ggml.merges"]), base),
        "unknown pre-tokenizer": (base, variant(base, replace={"tokenizer.ggml.pre": _str("gpt-9000")})),
        "bos_token_id stored as int32": (
            base, variant(base, replace={"tokenizer.ggml.bos_token_id": (V.INT32, 50256, None)})),
        "add_bos_token stored as uint8": (
            base, variant(base, replace={"tokenizer.ggml.add_bos_token": (V.UINT8, 1, None)})),
        "token_type shorter than the token list": (
            base, variant(base, replace={"tokenizer.ggml.token_type":
                                         (V.ARRAY, list(base["tokenizer.ggml.token_type"][1])[:n - 1], V.INT32)})),
        "two tokens load with the same text": (
            base, _with_tokens(base, {1001: _tokens(base)[1000] + b"\x00dup"})),
    }


VARIANT_NAMES = [
    "granite-embed-multi-311m forces add_bos", "gemma4 pre keeps the default bos",
    "gemma4 model clears the default bos", "empty token loads as [EMPTY_id]", "token cut at NUL",
    "token cut at NUL, other tail", "hybriddna k-mer marker stripped", "hybriddna marker kept by gpt2",
    "BPE without merges", "BPE without merges as the target", "unknown pre-tokenizer",
    "bos_token_id stored as int32", "add_bos_token stored as uint8", "token_type shorter than the token list",
    "two tokens load with the same text",
]
# what llama-server does, as read from src/llama-vocab.cpp; the server confirms it below
EXPECTED = {
    "granite-embed-multi-311m forces add_bos": "serves-without-speculation",
    "gemma4 pre keeps the default bos": "speculates",
    "gemma4 model clears the default bos": "serves-without-speculation",
    "empty token loads as [EMPTY_id]": "speculates",
    "token cut at NUL": "speculates",
    "token cut at NUL, other tail": "speculates",
    "hybriddna k-mer marker stripped": "speculates",
    "hybriddna marker kept by gpt2": "serves-without-speculation",
    "BPE without merges": "refuses-to-start",
    "BPE without merges as the target": "refuses-to-start",
    "unknown pre-tokenizer": "refuses-to-start",
    "bos_token_id stored as int32": "refuses-to-start",
    "add_bos_token stored as uint8": "refuses-to-start",
    "token_type shorter than the token list": "refuses-to-start",
    "two tokens load with the same text": "aborts-at-start",
}


@pytest.fixture(scope="module")
def base_kvs() -> Any:
    src = next(p for p, name in zip(vocab_files(), NAMES) if name == BASE)
    return tokenizer_kvs(src)


@pytest.mark.parametrize("case", VARIANT_NAMES)
def test_variant_agrees_with_the_server(case: str, base_kvs: Any, tmp_path: Path) -> None:
    t_kvs, d_kvs = _variants(base_kvs)[case]
    target = write_vocab_model(tmp_path / "target.gguf", t_kvs)
    draft = write_vocab_model(tmp_path / "draft.gguf", d_kvs)
    report = compat_report(_header(target), _header(draft))
    assert report["server_outcome"] == EXPECTED[case], report["reasons"]
    assert report["compatible"] is (EXPECTED[case] == "speculates")
    outcome, log = server_outcome(target, draft, tmp_path / "logs")
    assert outcome == report["server_outcome"], (report["reasons"], log[-3000:])
    if outcome == "refuses-to-start":
        side = report["reasons"][0].split(":", 1)[0]
        assert ("failed to load draft model" if side == "draft" else "failed to load model") in log
        assert report["reasons"][0].startswith(f"{side}: will not load: ")
    if outcome == "aborts-at-start":
        assert "GGML_ASSERT" in log


@pytest.mark.parametrize(("n_vocab", "expected"), [(5, "speculates"), (300, "aborts-at-start")])
def test_tokenizer_model_none_agrees_with_the_server(n_vocab: int, expected: str, base_kvs: Any,
                                                     tmp_path: Path) -> None:
    """Model 'none' reads <arch>.vocab_size, not the token list, and never add_bos; with more than 5
    dummy tokens the draft-simple text comparison hits GGML_ASSERT(type != NONE)."""
    none = {"tokenizer.ggml.model": _str("none")}
    with_list = variant(base_kvs, replace={**none, "tokenizer.ggml.add_bos_token": (V.BOOL, True, None)})
    target = write_vocab_model(tmp_path / "target.gguf", with_list, n_vocab=n_vocab, vocab_size_key=n_vocab)
    draft = write_vocab_model(tmp_path / "draft.gguf", none, n_vocab=n_vocab, vocab_size_key=n_vocab)
    report = compat_report(_header(target), _header(draft))
    assert report["server_outcome"] == expected, report["reasons"]
    assert report["target"]["vocab"]["n_tokens"] == n_vocab and report["target"]["vocab"]["add_bos"] is False
    outcome, log = server_outcome(target, draft, tmp_path / "logs")
    assert outcome == expected, log[-3000:]
