#!/usr/bin/python3
# Installed by molecule/envfile as the "llama-server" of a unit: reports, byte for byte, what it was given.
"""Serves GET /health (200) and GET /env: its argv and environment as JSON strings.

Bytes that are not UTF-8 come back as lone surrogates (os.fsdecode), so a string equals the value
written exactly when the bytes do.

It stands where llama-server stands (the launcher of role llamacpp_serve execs it), so what it reports
is what llama-server would receive: the env file as systemd parsed it, and LLAMA_EXTRA_ARGS as the
launcher split it.
"""
import json
import os
import sys
from http.server import BaseHTTPRequestHandler, HTTPServer


class Probe(BaseHTTPRequestHandler):
    def do_GET(self):
        if self.path == "/health":
            body = b'{"status":"ok"}'
        elif self.path == "/env":
            body = json.dumps({
                "argv": sys.argv[1:],
                "environ": {os.fsdecode(key): os.fsdecode(value) for key, value in os.environb.items()},
            }).encode()
        else:
            self.send_error(404)
            return
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


HTTPServer(("127.0.0.1", int(os.environ.get("LLAMA_ARG_PORT", "8080"))), Probe).serve_forever()
