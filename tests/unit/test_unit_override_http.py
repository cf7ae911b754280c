"""unit_override's health probe goes through the collection's one HTTP client (_http), against real sockets."""
from __future__ import annotations

import http.server
import socket
import threading
import time
from typing import Iterator, Tuple

import pytest

from ansible_collections.llmfleet.specdec.plugins.module_utils.systemd import _unit_override as uo


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


class _Redirect(http.server.BaseHTTPRequestHandler):
    target = ""

    def do_GET(self) -> None:
        self.send_response(302)
        self.send_header("Location", self.target)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture()
def redirecting(server: Tuple[str, int]) -> Iterator[str]:
    """A server whose /health redirects to another origin's healthy /health."""
    host, port = server
    handler = type("R", (_Redirect,), {"target": uo.health_url(host, port)})
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    httpd.daemon_threads = True
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        yield uo.health_url("127.0.0.1", httpd.server_address[1])
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_a_redirect_is_not_health_and_is_not_followed(redirecting: str) -> None:
    from ansible_collections.llmfleet.specdec.plugins.module_utils.build import _activate

    assert uo.http_get(redirecting, 2.0)[0] == 302
    assert _activate.http_get(redirecting, 2.0)[0] == 302


def _script_namespace(text: str) -> dict:
    namespace: dict = {"__name__": "rollback_script"}
    exec(compile(text, "rollback", "exec"), namespace)  # defines its functions; main() runs only as __main__
    return namespace


def _scripts() -> list:
    from ansible_collections.llmfleet.specdec.plugins.module_utils.build import _activate
    from ansible_collections.llmfleet.specdec.plugins.module_utils.systemd import _systemd, _unit_deploy

    return [_systemd.render_rollback_script(_systemd.override_paths("llama-server"), "/usr/bin/python3",
                                            "http://127.0.0.1:8080/health", 30),
            _activate.render_rollback_script(_activate.build_paths("/opt/llama.cpp/current"), "/usr/bin/python3"),
            _unit_deploy.render_rollback_script(_unit_deploy.deploy_paths("llama-server"), "/usr/bin/python3")]


def test_the_dead_man_scripts_do_not_follow_a_redirect_either(redirecting: str, server: Tuple[str, int]) -> None:
    import urllib.error
    import urllib.request

    for text in _scripts():
        namespace = _script_namespace(text)
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}), namespace["NoRedirect"]())
        with pytest.raises(urllib.error.HTTPError) as caught:
            opener.open(redirecting, timeout=2)
        assert caught.value.code == 302
        with opener.open(uo.health_url(*server), timeout=2) as reply:  # a plain 200 still counts
            assert reply.status == 200


def test_the_put_back_is_never_readable_by_others(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    import os
    import stat

    seen: list = []
    real_fdopen = os.fdopen

    def spy(fd, *args, **kwargs):
        seen.append(stat.S_IMODE(os.fstat(fd).st_mode))
        return real_fdopen(fd, *args, **kwargs)

    for text in _scripts()[1:]:
        namespace = _script_namespace(text)
        target = tmp_path / "llama-server.env"
        target.write_text("new")
        seen.clear()
        monkeypatch.setattr(namespace["os"], "fdopen", spy)
        namespace["put_back"](str(target), "API_KEY=secret\n", 0o600)
        monkeypatch.undo()
        assert seen == [0o600]  # the mode before the first byte is written
        assert target.read_text() == "API_KEY=secret\n" and stat.S_IMODE(target.stat().st_mode) == 0o600
        assert sorted(p.name for p in tmp_path.iterdir()) == ["llama-server.env"]
