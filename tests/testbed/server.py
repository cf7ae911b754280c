# Starts, queries and stops a real llama-server process for the tests (stdlib only).
"""A real llama-server for the tests.

``LlamaServer`` starts the binary built by ``make llama-server`` on 127.0.0.1 and a free
port with one thread, one slot (``-np 1``), ``--metrics`` and ``--slots``; its output goes
to a log file. Extra flags go in ``args`` and are appended last. It is stopped by its own
PID: SIGTERM, then SIGKILL after a bound. ``start(wait=False)`` + ``wait_exit()`` run a
server that is expected to refuse its configuration and exit.

Speculation needs ``--spec-type``: a plain ``-md`` draft with no type is loaded but left
unused (``/slots`` says ``speculative: false``); dflash/DSpark drafts are typed from their
header.
"""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any, Mapping, Sequence

from testbed.pinned import LLAMA_CPP_PYTHON_VERSION  # the one home: _llamacpp.PINNED


class LlamaServerError(RuntimeError):
    """The server could not be found, did not start, or answered unexpectedly."""


def find_llama_server() -> str:
    """$LLAMA_SERVER_BIN, else the cached build under $LLMFLEET_CACHE (default ~/.cache/llmfleet-specdec)."""
    explicit = os.environ.get("LLAMA_SERVER_BIN")
    if explicit:
        if not os.access(explicit, os.X_OK):
            raise LlamaServerError(f"LLAMA_SERVER_BIN={explicit} is not an executable file; "
                                   "unset it or run `make llama-server`")
        return explicit
    cache = os.environ.get("LLMFLEET_CACHE") or str(Path.home() / ".cache" / "llmfleet-specdec")
    candidate = Path(cache) / f"llama-server-{LLAMA_CPP_PYTHON_VERSION}" / "bin" / "llama-server"
    if not os.access(candidate, os.X_OK):
        raise LlamaServerError(f"no llama-server at {candidate}; run `make llama-server` "
                               "(or point LLAMA_SERVER_BIN at a built binary)")
    return str(candidate)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class LlamaServer:
    """One llama-server process; use as a context manager (started and healthy inside the block)."""

    def __init__(self, model: str | Path, *, draft: str | Path | None = None, args: Sequence[str] = (),
                 env: Mapping[str, str] | None = None, port: int | None = None,
                 binary: str | None = None, log_dir: str | Path | None = None,
                 ctx_size: int = 2048, parallel: int = 1) -> None:
        self.model = Path(model)
        self.draft = Path(draft) if draft is not None else None
        self.args = list(args)
        self.env = dict(env or {})
        self._auto_port = port is None
        self.port = port or free_port()
        self.binary = binary or find_llama_server()
        # without log_dir, logs share one folder; a later server on the same port overwrites its log
        log_root = Path(log_dir) if log_dir is not None else Path(tempfile.gettempdir()) / "llmfleet-testbed-logs"
        log_root.mkdir(parents=True, exist_ok=True)
        self.log_path = log_root / f"llama-server-{self.port}.log"
        self.ctx_size = ctx_size
        self.parallel = parallel
        self._proc: subprocess.Popen[bytes] | None = None

    # -------------------------------------------------------- lifecycle

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    @property
    def returncode(self) -> int | None:
        return self._proc.poll() if self._proc else None

    def command(self) -> list[str]:
        cmd = [self.binary, "-m", str(self.model), "--host", "127.0.0.1", "--port", str(self.port),
               "-t", "1", "-c", str(self.ctx_size), "-np", str(self.parallel), "--metrics", "--slots", "--no-webui"]
        if self.draft is not None:
            cmd += ["-md", str(self.draft)]
        return cmd + self.args

    def start(self, wait: bool = True, timeout: float = 60.0) -> LlamaServer:
        """Starts the process; with wait, returns once /health says ok (raises if it exits first).

        A free port can be taken between choosing and binding it; a port this object chose
        is then chosen again (three tries).
        """
        if self._proc is not None:
            raise LlamaServerError("this LlamaServer was already started")
        for attempt in range(3):
            self._spawn()
            if not wait:
                return self
            try:
                self.wait_healthy(timeout)
                return self
            except LlamaServerError:
                lost_port = "couldn't bind HTTP server socket" in self.log_text()
                if not (self._auto_port and lost_port and attempt < 2):
                    raise
                self.port = free_port()
        return self

    def _spawn(self) -> None:
        env = {**os.environ, **self.env}
        with open(self.log_path, "wb") as log:
            self._proc = subprocess.Popen(self.command(), stdout=log, stderr=subprocess.STDOUT,
                                          stdin=subprocess.DEVNULL, env=env)

    def wait_healthy(self, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.returncode is not None:
                raise LlamaServerError(f"llama-server exited with {self.returncode} before it was healthy; "
                                       f"log {self.log_path}:\n{self.log_text()[-4000:]}")
            try:
                status, body = self.request("GET", "/health", timeout=2.0)
            except OSError:
                status, body = 0, None
            if status == 200 and isinstance(body, dict) and body.get("status") == "ok":
                return
            time.sleep(0.05)
        raise LlamaServerError(f"llama-server on port {self.port} not healthy after {timeout}s; "
                               f"log {self.log_path}:\n{self.log_text()[-4000:]}")

    def wait_exit(self, timeout: float = 60.0) -> int:
        """For runs expected to refuse or abort: waits for the exit and returns its code."""
        if self._proc is None:
            self.start(wait=False)
        assert self._proc is not None
        try:
            return self._proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired as exc:
            raise LlamaServerError(f"llama-server still running after {timeout}s; "
                                   f"log {self.log_path}:\n{self.log_text()[-4000:]}") from exc

    def stop(self, grace: float = 10.0) -> int | None:
        """SIGTERM to our PID, then SIGKILL after grace seconds; returns the exit code."""
        proc = self._proc
        if proc is None:
            return None
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=grace)
        return proc.returncode

    def __enter__(self) -> LlamaServer:
        if self._proc is None:
            self.start(wait=True)
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    # -------------------------------------------------------- HTTP

    def request(self, method: str, path: str, payload: Any = None, timeout: float = 60.0) -> tuple[int, Any]:
        """(status, parsed JSON or text); HTTP error statuses are returned, not raised."""
        data = json.dumps(payload).encode() if payload is not None else None
        req = urllib.request.Request(self.url + path, data=data, method=method,
                                     headers={"Content-Type": "application/json"} if data else {})
        try:
            with urllib.request.urlopen(req, timeout=timeout) as resp:
                return resp.status, _decode(resp.read(), resp.headers.get_content_type())
        except urllib.error.HTTPError as err:
            return err.code, _decode(err.read(), err.headers.get_content_type())

    def get(self, path: str, timeout: float = 60.0) -> Any:
        return self._ok("GET", path, None, timeout)

    def post(self, path: str, json_body: Any, timeout: float = 120.0) -> Any:
        return self._ok("POST", path, json_body, timeout)

    def _ok(self, method: str, path: str, payload: Any, timeout: float) -> Any:
        status, body = self.request(method, path, payload, timeout)
        if status != 200:
            raise LlamaServerError(f"{method} {path} answered {status}: {body!r}")
        return body

    def completion(self, prompt: str, n_predict: int = 32, **params: Any) -> dict[str, Any]:
        """POST /completion at temperature 0 unless params say otherwise."""
        body = {"prompt": prompt, "n_predict": n_predict, "temperature": 0.0, "cache_prompt": False, **params}
        return self.post("/completion", body)

    def slots(self) -> list[dict[str, Any]]:
        return self.get("/slots")

    def metrics(self) -> dict[str, float]:
        """The Prometheus text of /metrics as {name{labels}: value}."""
        return parse_metrics(self.get("/metrics"))


def _decode(raw: bytes, content_type: str) -> Any:
    text = raw.decode("utf-8", errors="replace")
    if content_type == "application/json" or text[:1] in "[{":
        try:
            return json.loads(text)
        except ValueError:
            return text
    return text


def parse_metrics(text: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        name, _dummy, value = line.rpartition(" ")
        try:
            out[name] = float(value)
        except ValueError:
            continue
    return out
