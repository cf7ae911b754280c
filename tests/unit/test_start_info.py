"""A serving unit's last start timed from systemctl show and the journal (module unit_start_info's logic)."""
from __future__ import annotations

import itertools
import json
from typing import Iterator

import pytest

from ansible_collections.llmfleet.specdec.plugins.module_utils.systemd import _start_info as si

# A restart as systemd 252 reports it: stop 2.5 s, ExecStartPre 20 s, then the server's process.
SHOW = """Id=llama-server.service
ActiveState=active
InvocationID=0123456789abcdef0123456789abcdef
ActiveExitTimestampMonotonic=1000000000
InactiveEnterTimestampMonotonic=1002500000
InactiveExitTimestampMonotonic=1002600000
ExecMainStartTimestampMonotonic=1022600000
ActiveEnterTimestampMonotonic=1022600100
"""


def journal(*entries: tuple[int, object]) -> list[str]:
    return [json.dumps({"MESSAGE": m, "__MONOTONIC_TIMESTAMP": str(t)}) for t, m in entries]


def runner(text: str = SHOW, rc: int = 0):
    calls = []

    def run(argv):
        calls.append(argv)
        return rc, text, "boom" if rc else ""
    run.calls = calls
    return run


def test_load_is_the_start_to_the_ready_line_of_that_invocation() -> None:
    seen = []

    def read(invocation: str) -> list[str]:
        seen.append(invocation)
        return journal((1022700000, "main: loading model"), (1064300000, "srv          main: model loaded"),
                       (1064300001, "main: server is listening"))
    info = si.start_info("llama-server", "llamacpp", runner(), read)
    assert seen == ["0123456789abcdef0123456789abcdef"]
    assert info["load_s"] == pytest.approx(61.7)  # from InactiveExit (before ExecStartPre) to "model loaded"
    assert info["pre_s"] == pytest.approx(20.0)
    assert info["stop_s"] == pytest.approx(2.5)
    assert info["ready_line"] == "srv          main: model loaded"
    assert info["lines_read"] == 2
    assert info["note"] is None and "invocation 0123" in info["source"]


def test_vllm_ready_line_and_a_message_that_is_not_utf8() -> None:
    raw = list(b"caf\xe9 ")  # journalctl -o json writes such a message as its bytes
    info = si.start_info("vllm", "vllm", runner(), lambda _i: journal(
        (1030000000, raw), (1090600000, "INFO:     Application startup complete.")))
    assert info["load_s"] == pytest.approx(88.0)


def test_no_ready_line_says_why_and_reads_a_bounded_number_of_lines() -> None:
    def endless(_invocation: str) -> Iterator[str]:
        for n in itertools.count():
            yield json.dumps({"MESSAGE": f"request {n}", "__MONOTONIC_TIMESTAMP": str(1030000000 + n)})
    info = si.start_info("llama-server", "llamacpp", runner(), endless, max_lines=500)
    assert info["load_s"] is None and info["lines_read"] == 500
    assert "no line matching" in info["note"] and "500 journal lines" in info["note"]


def test_a_unit_never_started_has_no_load_and_no_journal_read() -> None:
    never = "Id=llama-server.service\nActiveState=inactive\nInvocationID=\nInactiveExitTimestampMonotonic=0\n"

    def read(_invocation: str) -> list[str]:
        raise AssertionError("the journal must not be read")
    info = si.start_info("llama-server", "llamacpp", runner(never), read)
    assert info["load_s"] is None and "has not been started since boot" in info["note"]
    assert info["stop_s"] is None


def test_bad_input_is_refused_naming_it() -> None:
    with pytest.raises(si.StartInfoError, match="engine"):
        si.start_info("x", "tgi", runner(), lambda _i: [])
    with pytest.raises(si.StartInfoError, match="ready_pattern"):
        si.start_info("x", "llamacpp", runner(), lambda _i: [], ready_pattern="(")
    with pytest.raises(si.StartInfoError, match="unit"):
        si.start_info("a\nb", "llamacpp", runner(), lambda _i: [])
    with pytest.raises(si.StartInfoError, match="rc 1"):
        si.start_info("x", "llamacpp", runner(rc=1), lambda _i: [])


def test_a_ready_line_older_than_the_start_is_not_used() -> None:
    info = si.start_info("llama-server", "llamacpp", runner(), lambda _i: journal((5, "main: model loaded")))
    assert info["load_s"] is None and "older than the start" in info["note"]


def test_model_sizes(tmp_path) -> None:
    (tmp_path / "a.gguf").write_bytes(b"x" * 1000)
    import os
    sizes = si.model_sizes([str(tmp_path / "a.gguf"), str(tmp_path / "missing.gguf")], os.stat)
    assert sizes == {str(tmp_path / "a.gguf"): 1000, str(tmp_path / "missing.gguf"): None}
