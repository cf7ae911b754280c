"""unit_override's health probe goes through the collection's one HTTP client (_http), against real sockets."""
from __future__ import annotations

import http.server
import socket
import threading
import time
from typing import Iterator, Tuple

import pytest

from ansible_collections.llmfleet.specdec.plugins.module_utils import _unit_override as uo


class _Server(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        if self.path == "/drip":
            # announces 2 KiB and sends one byte every 0.2 s: each read succeeds, the whole never ends in time
            self.send_response(200)
            self.send_header("Content-Length", "2048")
            self.end_headers()
            for _dummy in range(25):
                try:
                    self.wfile.write(b"x")
                    self.wfile.flush()
                except OSError:
                    return
                time.sleep(0.2)
            return
        status = 200 if self.path == "/health" else 503
        body = (b'{"status":"ok"}' if status == 200 else b'{"error":{"message":"Loading model"}}') + b" " * 4000
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


def _free_port() -> int:
    """A port on 127.0.0.1 that nothing listens on (bound, then closed)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture()
def server() -> Iterator[Tuple[str, int]]:
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Server)
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield "127.0.0.1", httpd.server_address[1]
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_status_and_the_start_of_the_body(server: Tuple[str, int]) -> None:
    host, port = server
    status, body = uo.http_get(uo.health_url(host, port), 2.0)
    assert status == 200 and body.startswith('{"status":"ok"}') and len(body) == 2048
    status, body = uo.http_get(f"http://{host}:{port}/loading", 2.0)
    assert status == 503 and "Loading model" in body


def test_nothing_listening_is_status_zero() -> None:
    status, body = uo.http_get(f"http://127.0.0.1:{_free_port()}/health", 1.0)
    assert status == 0 and body  # the reason, for the wait loop's last message


def test_a_proxy_in_the_environment_is_not_used(server: Tuple[str, int], monkeypatch: pytest.MonkeyPatch) -> None:
    dead = _free_port()
    for name in ("http_proxy", "HTTP_PROXY", "all_proxy"):
        monkeypatch.setenv(name, f"http://127.0.0.1:{dead}")
    monkeypatch.delenv("no_proxy", raising=False)
    monkeypatch.delenv("NO_PROXY", raising=False)
    host, port = server
    assert uo.http_get(uo.health_url(host, port), 2.0)[0] == 200


def test_a_server_that_drips_its_reply_is_cut_off(server: Tuple[str, int]) -> None:
    """Every read gets a byte within the socket timeout; only the total deadline stops the probe."""
    host, port = server
    status, body = uo.http_get(f"http://{host}:{port}/drip", 0.5)
    assert status == 0 and "total_timeout" in body
