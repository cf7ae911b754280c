# spec_bench against hostile loopback servers: broken replies keep what was measured, bad numbers are set aside.
from __future__ import annotations

import json
import socket
import tracemalloc
from pathlib import Path
from typing import Callable

import pytest
from ansible.module_utils.testing import patch_module_args

from ansible_collections.llmfleet.specdec.plugins.module_utils.bench import _endpoint as ep
from ansible_collections.llmfleet.specdec.plugins.module_utils.bench._breakeven import BreakevenError, parse_spec_counters
from ansible_collections.llmfleet.specdec.plugins.modules import spec_bench
from testbed.hostile_http import RawServer, Request, header_value, raw_server, response

FIXTURES = Path(__file__).parent / "fixtures" / "bench"
SMALL = {"prose": {"chars": 400, "n_predict": 24}, "echo": {"chars": 300, "n_predict": 64},
         "structured": {"chars": 200, "n_predict": 32}, "identity": {"n_predict": 16}}
COMPLETION = json.loads((FIXTURES / "llamacpp_completion_spec.json").read_text())
METRICS = (FIXTURES / "llamacpp_metrics_before.txt").read_text()
SECRET = "s3cr3t-0123456789"

Answer = Callable[[Request, socket.socket, RawServer, int], None]


def _json(obj: object) -> bytes:
    return response("200 OK", json.dumps(obj).encode(), {"Content-Type": "application/json"})


def llama(measured: Answer | None = None, metrics: Callable[[int], str] | None = None):
    """A llama-server out of the recorded replies; ``measured(req, conn, server, n)`` answers the n-th POST
    (1-based) instead of the recorded completion, and ``metrics(n_posts)`` the /metrics text."""
    posts = [0]

    def script(req: Request, conn: socket.socket, server: RawServer) -> None:
        if req.method == "POST":
            posts[0] += 1
            if measured is not None:
                measured(req, conn, server, posts[0])
                return
            conn.sendall(_json(COMPLETION))
        elif req.path == "/metrics":
            text = metrics(posts[0]) if metrics else METRICS
            conn.sendall(response("200 OK", text.encode(), {"Content-Type": "text/plain"}))
        elif req.path in ("/health", "/props", "/slots", "/v1/models"):
            name = {"/health": "llamacpp_health.json", "/props": "llamacpp_props_spec.json",
                    "/slots": "llamacpp_slots_spec.json", "/v1/models": "llamacpp_models.json"}[req.path]
            conn.sendall(response("200 OK", (FIXTURES / name).read_bytes(), {"Content-Type": "application/json"}))
        else:
            conn.sendall(response("404 Not Found", b'{"error":"not found"}'))
    return script


def good_then(broken: Callable[[Request, socket.socket, RawServer], None]) -> Answer:
    """The first measured reply is the recorded one, the second is ``broken``, the rest recorded again."""
    def answer(req: Request, conn: socket.socket, server: RawServer, n: int) -> None:
        if n == 2:
            broken(req, conn, server)
        else:
            conn.sendall(_json(COMPLETION))
    return answer


def bench(url: str, **kwargs) -> dict:
    args = dict(shapes=["prose", "identity"], repeats=2, warmup=0, sizes=SMALL, metrics=False)
    args.update(kwargs)
    return ep.run_bench(url, **args)


def interrupted(url: str, **kwargs) -> ep.BenchInterruptedError:
    with pytest.raises(ep.BenchInterruptedError) as err:
        bench(url, **kwargs)
    exc = err.value
    assert [(r["shape"], r["repeat"]) for r in exc.bench["requests"]] == [("prose", 0)]
    assert exc.bench["notes"][-1].startswith("stopped after 1 of 4 measured requests")
    assert isinstance(exc.cause, ep.EndpointError)
    return exc


# --------------------------------------------------------------------------- broken replies keep what was measured


def test_a_bad_status_line_keeps_the_requests_measured() -> None:
    with raw_server(llama(good_then(lambda req, conn, server: conn.sendall(b"HTTP/1.1 abc\r\n\r\n")))) as s:
        exc = interrupted(s.url)
    assert "/completion: the server's reply is not valid HTTP (BadStatusLine" in str(exc)


def test_a_short_body_keeps_the_requests_measured() -> None:
    body = json.dumps(COMPLETION).encode()
    with raw_server(llama(good_then(lambda req, conn, server: conn.sendall(
            response("200 OK", body[:40], length=len(body)))))) as s:
        exc = interrupted(s.url)
    assert "closed the connection after 40 bytes of the body" in str(exc)


def test_json_nested_200k_deep_keeps_the_requests_measured() -> None:
    deep = b"[" * 200_000 + b"]" * 200_000
    with raw_server(llama(good_then(lambda req, conn, server: conn.sendall(response("200 OK", deep))))) as s:
        exc = interrupted(s.url)
    assert "/completion: HTTP 200 but the body is not JSON: [[[[" in str(exc)


def test_an_unexpected_error_in_the_client_still_keeps_the_requests_measured(monkeypatch) -> None:
    # defence in depth: whatever a future reply breaks, the measured requests come back
    calls = [0]
    real = ep.parse_reply

    def flaky(reply, api, wall_s):
        calls[0] += 1
        if calls[0] == 2:
            raise KeyError("something nobody foresaw")
        return real(reply, api, wall_s)
    monkeypatch.setattr(ep, "parse_reply", flaky)
    with raw_server(llama()) as s:
        exc = interrupted(s.url)
    assert "unexpected KeyError while measuring" in str(exc)


@pytest.mark.parametrize("value", ["NaN", "+Inf", "-Inf", "-3"])
def test_nan_or_inf_in_metrics_keeps_the_requests_measured(value: str) -> None:
    broken = METRICS.replace("llamacpp:spec_decode_num_draft_tokens_total 19",
                             f"llamacpp:spec_decode_num_draft_tokens_total {value}")
    with raw_server(llama(metrics=lambda posts: broken if posts >= 2 else METRICS)) as s:
        exc = interrupted(s.url, metrics=True)
    assert "/metrics: the speculation counter of draft tokens is" in str(exc) and "not a count" in str(exc)


def test_a_position_label_of_a_billion_allocates_nothing() -> None:
    huge = METRICS + 'llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position="1000000000"} 1\n'
    tracemalloc.start()
    try:
        with raw_server(llama(metrics=lambda posts: huge if posts >= 2 else METRICS)) as s:
            exc = interrupted(s.url, metrics=True)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert "position 1000000000, outside 0..4095" in str(exc)
    assert peak < 64 * 1024 * 1024  # a list of a billion positions would be 8 GB


def test_positions_are_bounded_in_the_counters_parser_too() -> None:
    with pytest.raises(BreakevenError, match=r"position -1, outside"):
        parse_spec_counters(METRICS + 'llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position="-1"} 1\n')
    assert len(parse_spec_counters(METRICS)["accepted_per_pos"]) == 3


# --------------------------------------------------------------------------- size and time


def _endless(req: Request, conn: socket.socket, server: RawServer) -> None:
    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\r\n[")
    piece = b"1," * 32768
    for _dummy in range(1100):  # 72 MB at most (twice the cap), then the server gives up
        conn.sendall(piece)


def test_an_endless_body_is_refused_at_the_cap_with_bounded_memory() -> None:
    tracemalloc.start()
    try:
        with raw_server(llama(good_then(_endless))) as s:
            exc = interrupted(s.url)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert f"/completion: the reply is larger than {ep.MAX_REPLY_BYTES} bytes" in str(exc)
    assert peak < 2 * ep.MAX_REPLY_BYTES


def test_a_100_mb_reply_is_refused() -> None:
    big = b'{"content": "' + b"x" * 100_000_000 + b'"}'
    with raw_server(llama(good_then(lambda req, conn, server: conn.sendall(response("200 OK", big))))) as s:
        exc = interrupted(s.url)
    assert "larger than 33554432 bytes" in str(exc)


def test_a_dripping_server_is_cut_at_total_timeout() -> None:
    def drip(req: Request, conn: socket.socket, server: RawServer, n: int) -> None:
        body = json.dumps(COMPLETION).encode()
        conn.sendall(response("200 OK", b"", length=len(body)))
        for byte in body:  # one byte every 50 ms: minutes in all, each read well inside timeout
            conn.sendall(bytes([byte]))
            if not server.sleep(0.05):
                return

    with raw_server(llama(drip)) as s:
        with pytest.raises(ep.BenchInterruptedError) as err:
            bench(s.url, timeout=5, total_timeout=1)
    assert "/completion: no complete answer within total_timeout (1 s;" in str(err.value)
    assert err.value.bench["requests"] == []


def test_a_dripping_health_check_is_cut_at_total_timeout() -> None:
    def script(req: Request, conn: socket.socket, server: RawServer) -> None:
        for byte in b"HTTP/1.1 200 OK\r\n" + b"X-Pad: " + b"a" * 400 + b"\r\n\r\n":
            conn.sendall(bytes([byte]))
            if not server.sleep(0.05):
                return

    with raw_server(script) as s:
        with pytest.raises(ep.EndpointError, match=r"GET http://127\.0\.0\.1:\d+/health: no complete answer within "
                                                   r"total_timeout \(1 s\)"):
            ep.Endpoint(s.url, timeout=5, total_timeout=1).health()


# --------------------------------------------------------------------------- numbers that are not measurements


def _reply_with(**timings: object) -> Answer:
    def answer(req: Request, conn: socket.socket, server: RawServer, n: int) -> None:
        reply = json.loads(json.dumps(COMPLETION))
        if n == 2:
            reply["timings"].update(timings)
        body = json.dumps(reply).encode()  # NaN and Infinity as Python writes them, as some servers do
        conn.sendall(response("200 OK", body.replace(b'"__1e999__"', b"1e999")))
    return answer


@pytest.mark.parametrize("timings, reason", [
    ({"predicted_n": "__1e999__"}, "timings.predicted_n is inf, not a count"),
    ({"predicted_per_second": float("nan")}, "timings.predicted_per_second is nan, not a rate"),
    ({"predicted_per_second": float("inf")}, "timings.predicted_per_second is inf, not a rate"),
    ({"predicted_per_second": -5.0}, "timings.predicted_per_second is -5.0, not a rate"),
    ({"draft_n": -1}, "timings.draft_n is -1, not a count"),
    ({"draft_n": 2, "draft_n_accepted": 7}, "draft_n_accepted (7) is more than timings.draft_n (2)"),
])
def test_a_reply_with_a_bad_number_is_rejected_and_the_rest_kept(timings: dict, reason: str) -> None:
    with raw_server(llama(_reply_with(**timings))) as s:
        result = bench(s.url)
    assert [(r["shape"], r["repeat"]) for r in result["requests"]] == [("prose", 0), ("prose", 1), ("identity", 1)]
    [rejected] = result["rejected"]
    assert (rejected["shape"], rejected["repeat"]) == ("identity", 0)
    assert rejected["reason"].startswith("POST http://127.0.0.1:") and reason in rejected["reason"]
    assert "1 of 4 measured replies were rejected" in result["notes"][-1]
    # what the bench returns is plain JSON: nothing in it that a strict parser or the report would refuse
    json.loads(json.dumps(result, allow_nan=False))


def test_a_rejected_reply_during_warmup_is_ignored() -> None:
    with raw_server(llama(_reply_with(predicted_per_second=float("nan")))) as s:
        result = bench(s.url, warmup=2, shapes=["identity"], repeats=1)
    assert len(result["requests"]) == 1 and result["rejected"] == []


# --------------------------------------------------------------------------- secrets


def test_the_api_key_does_not_follow_a_redirect_to_another_port() -> None:
    with raw_server(llama()) as target:
        def redirect(req: Request, conn: socket.socket, server: RawServer) -> None:
            conn.sendall(response("307 Temporary Redirect", headers={"Location": target.url + req.path}))
        with raw_server(redirect) as redirector:
            status, _dummy = ep.Endpoint(redirector.url, api_key=SECRET).request("GET", "/health")
    assert status == 200
    assert header_value(redirector.requests[0], "Authorization") == f"Bearer {SECRET}"
    assert header_value(target.requests[0], "Authorization") is None


def test_the_endpoint_is_shown_without_its_credentials() -> None:
    def refuse(req: Request, conn: socket.socket, server: RawServer) -> None:
        conn.sendall(b"HTTP/1.1 abc\r\n\r\n")

    with raw_server(llama()) as s:
        url = s.url.replace("http://", f"http://bench:{SECRET}@")
        result = bench(url, shapes=["identity"], repeats=1)
    assert result["endpoint"] == s.url.replace("http://", "http://***@")
    assert header_value(s.requests[0], "Authorization").startswith("Basic ")
    with raw_server(refuse) as s:
        with pytest.raises(ep.EndpointError) as err:
            ep.Endpoint(s.url.replace("http://", f"http://bench:{SECRET}@")).health()
    assert SECRET not in str(err.value) and "***@127.0.0.1" in str(err.value)


def test_the_module_fails_with_the_measured_requests_not_a_traceback(capsys) -> None:
    with raw_server(llama(good_then(lambda req, conn, server: conn.sendall(b"HTTP/1.1 abc\r\n\r\n")))) as s:
        args = {"endpoint": s.url, "shapes": ["prose", "identity"], "repeats": 2, "warmup": 0, "sizes": SMALL,
                "metrics": False, "api_key": SECRET}
        with patch_module_args(args), pytest.raises(SystemExit):
            spec_bench.main()
    raw = capsys.readouterr().out
    out = json.loads(raw)
    assert out["failed"] is True and "BadStatusLine" in out["msg"]
    assert len(out["bench"]["requests"]) == 1
    assert SECRET not in raw
