#!/usr/bin/env python3
"""A pass-through HTTP proxy in front of the real llama-server unit that breaks a candidate only when two
completions overlap: the field notes' load failures, brought into the request path on the test host.

Usage: overlap_proxy.py LISTEN_PORT UPSTREAM_PORT UNIT RECORD

Every request is forwarded to 127.0.0.1:UPSTREAM_PORT unchanged, except for a completion that arrives while
another completion is in flight, when the unit's MainPID carries one of these in its environment:

- LLAMA_ARG_ALIAS=crash-under-load: the server process is killed with SIGSEGV before the request is
  forwarded (the client gets 502 from a dead upstream), once;
- LLAMA_ARG_ALIAS=cut-under-load: the overlapping replies' text is cut to half (a premature end).

One request at a time is never touched, so such a candidate is perfect on one stream. RECORD (JSON lines)
says what was done, to which PID.
"""
import http.client
import json
import os
import signal
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

LISTEN, UPSTREAM, UNIT, RECORD = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
COMPLETIONS = ("/completion", "/v1/chat/completions", "/v1/completions")
lock = threading.Lock()
active = {}  # request number -> overlapped another completion
counter = [0]
crashed = []


def main_pid():
    out = subprocess.run(["systemctl", "show", UNIT, "-p", "MainPID", "--value"],
                         capture_output=True, text=True, check=False).stdout.strip()
    return int(out or 0)


def marker(pid):
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            env = f.read().split(b"\0")
    except OSError:
        return None
    for name in (b"crash-under-load", b"cut-under-load"):
        if b"LLAMA_ARG_ALIAS=" + name in env:
            return name.decode()
    return None


def record(what, pid, number):
    with open(RECORD, "a") as f:
        f.write(json.dumps({"what": what, "pid": pid, "request": number, "at": time.time()}) + "\n")


class Proxy(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def _forward(self, method):
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else None
        number = None
        mode = None
        if method == "POST" and self.path.split("?")[0] in COMPLETIONS:
            with lock:
                counter[0] += 1
                number = counter[0]
                overlapped = bool(active)
                for other in active:
                    active[other] = True
                active[number] = overlapped
                pid = main_pid()
                mode = marker(pid) if pid else None
                if overlapped and mode == "crash-under-load" and pid not in crashed:
                    os.kill(pid, signal.SIGSEGV)
                    for _dummy in range(200):
                        if not os.path.exists(f"/proc/{pid}"):
                            break
                        time.sleep(0.05)
                    crashed.append(pid)
                    record("sigsegv", pid, number)
        try:
            try:
                conn = http.client.HTTPConnection("127.0.0.1", UPSTREAM, timeout=600)
                headers = {k: v for k, v in self.headers.items() if k.lower() in ("content-type", "authorization")}
                conn.request(method, self.path, body=body, headers=headers)
                reply = conn.getresponse()
                status, ctype, raw = reply.status, reply.getheader("Content-Type", "application/json"), reply.read()
                conn.close()
            except OSError as exc:
                status, ctype = 502, "application/json"
                raw = json.dumps({"error": {"code": 502, "message": f"upstream 127.0.0.1:{UPSTREAM}: {exc}"}}).encode()
            if number is not None and mode == "cut-under-load" and status == 200:
                with lock:
                    overlapped = active.get(number, False)
                if overlapped:
                    reply_body = json.loads(raw)
                    holder = reply_body if "content" in reply_body else reply_body["choices"][0]["message"]
                    holder["content"] = holder["content"][: len(holder["content"]) // 2]
                    raw = json.dumps(reply_body).encode()
                    record("cut", main_pid(), number)
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(raw)))
            self.end_headers()
            self.wfile.write(raw)
        finally:
            if number is not None:
                with lock:
                    active.pop(number, None)

    def do_GET(self):
        self._forward("GET")

    def do_POST(self):
        self._forward("POST")


ThreadingHTTPServer(("127.0.0.1", LISTEN), Proxy).serve_forever()
