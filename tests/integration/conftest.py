# Fixtures for tests against a real llama-server: the binary, the standard models, short-lived servers.
from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

from testbed.models import write_standard_set
from testbed.server import LlamaServer, find_llama_server


@pytest.fixture(scope="session")
def llama_server_bin() -> str:
    """The real llama-server; a missing build fails the tests (run `make llama-server`)."""
    return find_llama_server()


@pytest.fixture(scope="session")
def standard_models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """testbed.models' standard set, written once per session: name -> path."""
    return write_standard_set(tmp_path_factory.mktemp("standard-models"))


@pytest.fixture
def start_server(llama_server_bin: str, tmp_path: Path) -> Iterator[Callable[..., LlamaServer]]:
    """start_server(model, draft=None, args=(), wait=True) -> a started LlamaServer, stopped at teardown."""
    started: list[LlamaServer] = []

    def start(model: str | Path, *, wait: bool = True, **kwargs: Any) -> LlamaServer:
        server = LlamaServer(model, binary=llama_server_bin, log_dir=tmp_path / "logs", **kwargs)
        started.append(server)
        return server.start(wait=wait)

    yield start
    for server in started:
        server.stop()
