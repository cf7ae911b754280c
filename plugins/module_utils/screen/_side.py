# Copyright: (c) 2026, llmfleet.specdec contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# Private to the collection: the servers the screen starts beside production (a drafter alone, a copy of the target).
"""A llama-server the screen starts beside production on a spare loopback port, and the screen's error.

Both the drafter's side server (``_screen``) and the copy of the target (``_screen_copy``) are started here: a
transient systemd unit with a runtime limit, or a child process where there is no systemd, stopped in every case.
"""
from __future__ import annotations

import os
import socket
import subprocess
import time
from typing import Mapping, Sequence

from ansible_collections.llmfleet.specdec.plugins.module_utils.bench._endpoint import Endpoint, EndpointError
from ansible_collections.llmfleet.specdec.plugins.module_utils.common._errors import SpecdecError


class ScreenError(SpecdecError):
    """A candidate or the production server cannot be screened: the message names which and the fix."""


def port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class SideServer:
    """The draft model served alone on a spare loopback port: a transient systemd unit with a runtime limit
    (``launch='systemd'``), or a child process (``launch='process'``, for hosts without systemd and the tests);
    stopped in every case by :meth:`stop`."""

    def __init__(self, name: str, argv: Sequence[str], port: int, *, launch: str = "systemd",
                 runtime_max: int = 900, health_timeout: float = 120, env: Mapping[str, str] | None = None,
                 what: str = "its drafter's side server", port_option: str = "drafter_port") -> None:
        self.name, self.argv, self.port, self.launch = name, list(argv), int(port), launch
        self.runtime_max, self.health_timeout = int(runtime_max), float(health_timeout)
        self.env = dict(env) if env is not None else None
        self.what, self.port_option = what, port_option
        self.unit = f"specdec-screen-{os.getpid()}-{''.join(c if c.isalnum() else '-' for c in name)[:40]}"
        self.proc: subprocess.Popen | None = None

    def start(self) -> Endpoint:
        if not port_free(self.port):
            raise ScreenError(f"candidate {self.name}: port {self.port} for {self.what} is taken; "
                              f"give spec_screen another {self.port_option} (or 0 for a free one)")
        if self.launch == "systemd":
            setenv = [f"--setenv={k}={v}" for k, v in sorted((self.env or {}).items())]
            cmd = ["systemd-run", "--quiet", "--collect", f"--unit={self.unit}",
                   f"--property=RuntimeMaxSec={self.runtime_max}", *setenv, "--", *self.argv]
            done = subprocess.run(cmd, capture_output=True, text=True, check=False)
            if done.returncode != 0:
                raise ScreenError(f"candidate {self.name}: systemd-run could not start {self.what} "
                                  f"({done.stderr.strip()[:300]}); check the llama-server path and the model")
        else:
            self.proc = subprocess.Popen(self.argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                         env=self.env)
        client = Endpoint(f"http://127.0.0.1:{self.port}", timeout=120)
        deadline = time.monotonic() + self.health_timeout
        while True:
            try:
                client.health()
                return client
            except EndpointError as exc:
                if (self.proc is not None and self.proc.poll() is not None) or time.monotonic() > deadline:
                    self.stop()
                    raise ScreenError(f"candidate {self.name}: {self.what} did not answer /health "
                                      f"on port {self.port} ({exc}); check the model and that it fits beside "
                                      "production") from None
                time.sleep(0.2)

    def stop(self) -> None:
        if self.launch == "systemd":
            subprocess.run(["systemctl", "stop", self.unit], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                           check=False)
        elif self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
