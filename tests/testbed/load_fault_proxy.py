# A pass-through HTTP proxy in front of a real llama-server that breaks it only when two completions overlap.
"""The field notes' load failures, injected on the test bed.

The notes saw context-backed drafters fail only under parallel load: an illegal memory access with two
concurrent prompts (the server dies), and multi-slot output corrupted into a premature end. The tiny
test models have no such bug, so this proxy brings the failure class into the request path, and only
where the notes saw it: when two completion requests are in flight at the same time. A request alone
is forwarded untouched, so the candidate looks perfect on one stream.

Modes:

- ``truncate``: a reply whose request overlapped another gets its text cut to half (a premature end);
- ``alter``: such a reply gets one character of its text changed (corrupted output);
- ``segv``: when a completion arrives while another is in flight, the real server process is killed
  with SIGSEGV (by its PID) before the request is forwarded: the client gets 502, as from any reverse
  proxy in front of a dead upstream, and the server stays dead;
- ``hang``: such a request is held and never answered (a server that stops answering).

``FaultProxy(upstream_port, mode, pid)`` runs in a thread on a free loopback port; use it as a context
manager. ``events`` records what it did (mode, request number), for the tests to assert on.
"""
from __future__ import annotations

import http.client
import json
import os
import signal
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

COMPLETIONS = ("/completion", "/v1/chat/completions", "/v1/completions")
MODES = ("truncate", "alter", "segv", "hang")


def _tamper(raw: bytes, mode: str) -> bytes:
    """The reply with its generated text cut to half (truncate) or one character changed (alter)."""
    body = json.loads(raw)
    if isinstance(body.get("content"), str):
        holder, key = body, "content"
    else:
        holder, key = body["choices"][0]["message"], "content"
    text = holder[key]
    if mode == "truncate":
        holder[key] = text[: len(text) // 2]
    else:
        mid = len(text) // 2
        holder[key] = text[:mid] + ("#" if text[mid:mid + 1] != "#" else "%") + text[mid + 1:]
    return json.dumps(body).encode()


class FaultProxy:
    def __init__(self, upstream_port: int, mode: str, pid: int | None = None) -> None:
        if mode not in MODES:
            raise ValueError(f"mode: one of {', '.join(MODES)}, got {mode!r}")
        self.upstream_port = upstream_port
        self.mode = mode
        self.pid = pid
        self.events: list[dict[str, Any]] = []
        self.completions = 0
        self._lock = threading.Lock()
        self._active: dict[int, bool] = {}  # request number -> overlapped another
        self._release = threading.Event()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                proxy._forward(self, "GET")

            def do_POST(self) -> None:
                proxy._forward(self, "POST")

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> FaultProxy:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._release.set()  # let held requests go before shutting down
        self._server.shutdown()
        self._server.server_close()

    def _forward(self, handler: BaseHTTPRequestHandler, method: str) -> None:
        length = int(handler.headers.get("Content-Length") or 0)
        body = handler.rfile.read(length) if length else None
        number = None
        if method == "POST" and handler.path.split("?")[0] in COMPLETIONS:
            with self._lock:
                self.completions += 1
                number = self.completions
                overlapped = bool(self._active)
                for other in self._active:
                    self._active[other] = True
                self._active[number] = overlapped
                if overlapped and self.mode == "segv" and self.pid and not self.events:
                    os.kill(self.pid, signal.SIGSEGV)
                    self._wait_gone(self.pid)
                    self.events.append({"mode": "segv", "request": number, "pid": self.pid})
            if overlapped and self.mode == "hang":
                self.events.append({"mode": "hang", "request": number})
                self._release.wait()
                return
        try:
            try:
                conn = http.client.HTTPConnection("127.0.0.1", self.upstream_port, timeout=600)
                headers = {k: v for k, v in handler.headers.items() if k.lower() in ("content-type", "authorization")}
                conn.request(method, handler.path, body=body, headers=headers)
                reply = conn.getresponse()
                status, ctype, raw = reply.status, reply.getheader("Content-Type", "application/json"), reply.read()
                conn.close()
            except OSError as exc:
                status, ctype = 502, "application/json"
                raw = json.dumps({"error": {"code": 502, "message": f"upstream 127.0.0.1:{self.upstream_port}: "
                                                                    f"{exc}"}}).encode()
            if number is not None:
                with self._lock:
                    overlapped = self._active.get(number, False)
                if overlapped and status == 200 and self.mode in ("truncate", "alter"):
                    raw = _tamper(raw, self.mode)
                    with self._lock:
                        self.events.append({"mode": self.mode, "request": number})
            handler.send_response(status)
            handler.send_header("Content-Type", ctype)
            handler.send_header("Content-Length", str(len(raw)))
            handler.end_headers()
            handler.wfile.write(raw)
        finally:
            if number is not None:
                with self._lock:
                    self._active.pop(number, None)

    @staticmethod
    def _wait_gone(pid: int) -> None:
        """Until the process is gone or a zombie (its parent reaps it and keeps its exit status)."""
        for _dummy in range(200):
            try:
                with open(f"/proc/{pid}/stat") as f:
                    if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                        return
            except OSError:
                return
            time.sleep(0.05)
