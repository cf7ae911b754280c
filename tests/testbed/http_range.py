"""A loopback HTTP file server for header-over-HTTP tests and benchmarks: with or without Range support."""
from __future__ import annotations

import re
import threading
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Iterator


class _Handler(BaseHTTPRequestHandler):
    root: Path
    ranges: bool = True
    log: list[tuple[str, str | None]]

    def log_message(self, *args: object) -> None:  # keep test output quiet
        pass

    def do_GET(self) -> None:
        path = self.root / self.path.lstrip("/").split("?")[0]
        rng = self.headers.get("Range")
        self.log.append((self.path, rng))
        if not path.is_file():
            self.send_error(404, "no such model")
            return
        size = path.stat().st_size
        m = re.match(r"bytes=(\d+)-(\d*)$", rng or "") if self.ranges else None
        if m:
            start = int(m.group(1))
            end = min(int(m.group(2)) if m.group(2) else size - 1, size - 1)
            if start >= size:
                self.send_response(416)
                self.send_header("Content-Range", f"bytes */{size}")
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            self.send_response(206)
            self.send_header("Content-Range", f"bytes {start}-{end}/{size}")
            self.send_header("Content-Length", str(end - start + 1))
            self.end_headers()
            with path.open("rb") as fh:
                fh.seek(start)
                self._copy(fh, end - start + 1)
            return
        self.send_response(200)
        self.send_header("Content-Length", str(size))
        self.end_headers()
        with path.open("rb") as fh:
            self._copy(fh, size)

    def _copy(self, fh, n: int) -> None:
        try:
            while n > 0:
                chunk = fh.read(min(n, 1 << 20))
                if not chunk:
                    break
                self.wfile.write(chunk)
                n -= len(chunk)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client stopped reading once it had the header


@contextmanager
def serve_directory(root: Path, *, ranges: bool = True) -> Iterator[tuple[str, list[tuple[str, str | None]]]]:
    """Serve ``root`` on 127.0.0.1; yield (base URL, request log)."""
    log: list[tuple[str, str | None]] = []
    handler = type("Handler", (_Handler,), {"root": Path(root), "ranges": ranges, "log": log})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", log
    finally:
        server.shutdown()
        server.server_close()
