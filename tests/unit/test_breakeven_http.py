# spec_breakeven's step 0 against hostile loopback servers: a drip is cut at the deadline, URLs are redacted.
from __future__ import annotations

import json
import socket
import time

import pytest
from ansible.module_utils.testing import patch_module_args

from ansible_collections.llmfleet.specdec.plugins.modules import spec_breakeven
from testbed.hostile_http import RawServer, Request, raw_server, response

METRICS = "llamacpp:spec_decode_num_drafts_total 4\nllamacpp:spec_decode_num_accepted_tokens_total 6\n"


def run(endpoint: str, capsys: pytest.CaptureFixture[str], timeout: int = 2) -> dict:
    args = {"t_s": 40, "d_s": 4, "endpoint": endpoint, "timeout": timeout}
    with patch_module_args(args), pytest.raises(SystemExit):
        spec_breakeven.main()
    return json.loads(capsys.readouterr().out)


def test_metrics_are_read_from_the_endpoint(capsys: pytest.CaptureFixture[str]) -> None:
    def script(req: Request, conn: socket.socket, server: RawServer) -> None:
        conn.sendall(response("200 OK", METRICS.encode()))

    with raw_server(script) as s:
        result = run(s.url, capsys)
    assert not result.get("failed"), result
    incumbent = result["breakeven"]["incumbent"]
    assert incumbent["speculates"] is True
    assert incumbent["commit_per_round"] == 2.5  # 1 + 6 accepted / 4 drafts, read from the server


def test_a_dripping_metrics_endpoint_is_cut_at_timeout(capsys: pytest.CaptureFixture[str]) -> None:
    def script(req: Request, conn: socket.socket, server: RawServer) -> None:
        body = METRICS.encode() * 50
        conn.sendall(response("200 OK", b"", length=len(body)))
        for byte in body:  # one byte every 50 ms: about 90 s in all, each read well inside the timeout
            conn.sendall(bytes([byte]))
            if not server.sleep(0.05):
                return

    started = time.monotonic()
    with raw_server(script) as s:
        result = run(s.url + "/?X-Amz-Signature=s3cr3t", capsys, timeout=1)
        elapsed = time.monotonic() - started
    assert result["failed"]
    assert "total_timeout" in result["msg"] or "within" in result["msg"], result["msg"]
    assert "s3cr3t" not in result["msg"]
    assert elapsed < 60  # bounded by the deadline, not by the drip (about 90 s)
