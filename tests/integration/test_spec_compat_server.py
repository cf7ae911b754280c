"""spec_compat's verdict against the real llama-server: the server is the oracle.

Each case patches one tokenizer fact of the demo draft in place (same size, so the file stays
loadable), predicts with spec_compat, then starts llama-server with the pair and reads /slots:
speculation is on exactly when spec_compat says the pair is compatible.
"""
from __future__ import annotations

import shutil
import struct
from pathlib import Path
from typing import Callable

import pytest

from ansible_collections.llmfleet.specdec.plugins.module_utils.gguf._gguf import read_header
from ansible_collections.llmfleet.specdec.plugins.module_utils.llamacpp._llamacpp import compat_report
from testbed.server import LlamaServer

pytestmark = pytest.mark.integration

# The vocabulary check belongs to the draft-simple drafter. In this llama.cpp a plain draft given
# with -md and no --spec-type infers nothing from its header and speculation stays off, so the
# type is named explicitly.
SIMPLE = ("--spec-type", "draft-simple")


def _value_offset(path: Path, key: str) -> int:
    kv = read_header(str(path)).kv[key]
    return kv.offset + 8 + len(key.encode()) + 4


def _set_u32(key: str, value: int) -> Callable[[Path], None]:
    def patch(path: Path) -> None:
        off = _value_offset(path, key)
        with path.open("r+b") as fh:
            fh.seek(off)
            fh.write(struct.pack("<I", value))
    return patch


def _set_bool(key: str, value: bool) -> Callable[[Path], None]:
    def patch(path: Path) -> None:
        with path.open("r+b") as fh:
            fh.seek(_value_offset(path, key))
            fh.write(b"\x01" if value else b"\x00")
    return patch


def _flip_token(token_id: int) -> Callable[[Path], None]:
    """Change one token's last byte to another ASCII letter: same length, different text."""
    def patch(path: Path) -> None:
        tokens = read_header(str(path)).get("tokenizer.ggml.tokens")
        pos = tokens.start
        for i, raw in enumerate(tokens.iter_bytes()):
            if i == token_id:
                last = pos + 8 + len(raw) - 1
                with path.open("r+b") as fh:
                    fh.seek(last)
                    fh.write(b"Q" if raw[-1:] != b"Q" else b"R")
                return
            pos += 8 + len(raw)
        raise AssertionError(f"no token {token_id}")
    return patch


CASES = {
    "same-tokenizer": (None, True),
    "eos-id-differs-but-not-added": (_set_u32("tokenizer.ggml.eos_token_id", 7), True),
    "add-eos-differs": (_set_bool("tokenizer.ggml.add_eos_token", True), False),
    "bos-id-differs": (_set_u32("tokenizer.ggml.bos_token_id", 9), False),
    "token-3-differs (below the checked range)": (_flip_token(3), True),
    "token-300-differs": (_flip_token(300), False),
}


@pytest.mark.parametrize("case", list(CASES))
def test_prediction_equals_the_server(case: str, standard_models: dict[str, Path], tmp_path: Path) -> None:
    patch, expected = CASES[case]
    draft = tmp_path / "draft.gguf"
    shutil.copy(standard_models["draft.gguf"], draft)
    if patch is not None:
        patch(draft)
    report = compat_report(read_header(str(standard_models["target.gguf"])), read_header(str(draft)))
    assert report["compatible"] is expected, report["reasons"]
    with LlamaServer(standard_models["target.gguf"], draft=draft, args=SIMPLE, log_dir=tmp_path) as server:
        speculative = [s.get("speculative") for s in server.slots()]
        log = server.log_text()
    assert speculative == [expected], log[-2000:]
    assert ("vocabs are not compatible" in log) is (not expected)


def test_other_tokenizer_is_refused_and_served_without_speculation(standard_models: dict[str, Path], tmp_path: Path) -> None:
    target, draft = standard_models["target.gguf"], standard_models["draft-othertok.gguf"]
    report = compat_report(read_header(str(target)), read_header(str(draft)))
    assert not report["compatible"] and report["first_mismatch"]["id"] >= 5
    with LlamaServer(target, draft=draft, args=SIMPLE, log_dir=tmp_path) as server:
        assert [s["speculative"] for s in server.slots()] == [False]
        out = server.completion("The harbour", n_predict=8)
        assert out["content"] and "draft_n" not in out.get("timings", {})  # serving, not speculating
        assert "failed to initialize speculative decoding context" in server.log_text()
