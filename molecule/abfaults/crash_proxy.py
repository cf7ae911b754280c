#!/usr/bin/env python3
"""A pass-through HTTP proxy in front of the real llama-server that makes one candidate crash, once,
in the middle of its measurement: a real SIGSEGV of the real server process, at a chosen request.

Usage: crash_proxy.py LISTEN_PORT UPSTREAM_PORT UNIT MARKER NTH RECORD

Every request is forwarded to 127.0.0.1:UPSTREAM_PORT unchanged. Completion POSTs are counted per
server process (the unit's MainPID) whose environment holds MARKER (e.g. LLAMA_ARG_ALIAS=crash-mid-run).
At that process's NTH completion the proxy kills it with SIGSEGV, waits until it is gone, writes
RECORD (JSON: pid, request number, time) and forwards the request, which then finds no server: the
client gets 502, as from any reverse proxy in front of a dead upstream. It crashes one process only.

The tiny test models answer a request in milliseconds, too fast for a watcher outside the request
path to land a kill between two given requests; here the request itself is the trigger.
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

LISTEN, UPSTREAM, UNIT, MARKER, NTH, RECORD = (int(sys.argv[1]), int(sys.argv[2]), sys.argv[3],
                                               sys.argv[4].encode(), int(sys.argv[5]), sys.argv[6])
COMPLETIONS = ("/completion", "/v1/chat/completions", "/v1/completions")
lock = threading.Lock()
seen = {}  # pid -> completion POSTs forwarded to it
crashed = []


def main_pid():
    out = subprocess.run(["systemctl", "show", UNIT, "-p", "MainPID", "--value"],
                         capture_output=True, text=True, check=False).stdout.strip()
    return int(out or 0)


def is_marked(pid):
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            return MARKER in f.read().split(b"\0")
    except OSError:
        return False


def maybe_crash():
    with lock:
        if crashed:
            return
        pid = main_pid()
        if not pid or not is_marked(pid):
            return
        seen[pid] = seen.get(pid, 0) + 1
        if seen[pid] < NTH:
            return
        os.kill(pid, signal.SIGSEGV)
        for _dummy in range(200):
            if not os.path.exists(f"/proc/{pid}"):
                break
            time.sleep(0.05)
        crashed.append(pid)
        with open(RECORD, "w") as f:
            json.dump({"pid": pid, "request": seen[pid], "at": time.time()}, f)


class Proxy(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def _forward(self, method):
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else None
        if method == "POST" and self.path.split("?")[0] in COMPLETIONS:
            maybe_crash()
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
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def do_GET(self):
        self._forward("GET")

    def do_POST(self):
        self._forward("POST")


ThreadingHTTPServer(("127.0.0.1", LISTEN), Proxy).serve_forever()
