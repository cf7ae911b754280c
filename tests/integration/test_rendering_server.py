"""One rendering per candidate, against the real llama-server started the way the serving unit starts it.

A candidate is rendered over production's env (filter ab_render); the process then gets the rendering's
env (what systemd reads from the env files) and the unit's launcher appends LLAMA_EXTRA_ARGS split like a
shell. What the preflight lints (the rendering's env) must be what the server runs.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from ansible_collections.llmfleet.specdec.plugins.module_utils.lint._lint import lint
from ansible_collections.llmfleet.specdec.plugins.module_utils.llamacpp._flags import parse as parse_flags
from ansible_collections.llmfleet.specdec.plugins.plugin_utils.steps._steps_ab import ab_render
from testbed.server import free_port

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
LAUNCHER = ROOT / "roles" / "llamacpp_serve" / "files" / "llamacpp-serve-exec"


def run_as_the_unit(binary: str, env: dict[str, str], log: Path, port: int) -> dict:
    """Starts llama-server through the unit's launcher with ``env`` alone; returns the settings of one
    completion (``generation_settings``: what the server resolved from its env and command line)."""
    full = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), **env}
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, str(LAUNCHER), binary], env=full, stdout=out,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as reply:
                    if reply.status == 200:
                        break
            except OSError:
                time.sleep(0.2)
        assert proc.poll() is None, log.read_text(errors="replace")[-3000:]
        request = urllib.request.Request(f"http://127.0.0.1:{port}/completion", method="POST",
                                         data=b'{"prompt": "one two three", "n_predict": 8}',
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=60) as reply:
            return json.loads(reply.read())["generation_settings"]
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def test_the_chain_the_preflight_lints_is_the_chain_that_runs(llama_server_bin: str, standard_models: dict,
                                                              tmp_path: Path) -> None:
    port = free_port()
    production = {"LLAMA_ARG_MODEL": str(standard_models["target.gguf"]), "LLAMA_ARG_HOST": "127.0.0.1",
                  "LLAMA_ARG_PORT": str(port), "LLAMA_ARG_THREADS": "1", "LLAMA_ARG_CTX_SIZE": "1024",
                  "LLAMA_ARG_SPEC_DRAFT_MODEL": str(standard_models["draft.gguf"]),
                  # production's own flag: every candidate with a flag must keep it
                  "LLAMA_EXTRA_ARGS": "--top-k 7"}
    config = {"name": "both", "env": {"LLAMA_ARG_SPEC_TYPE": "ngram-mod"}, "flags": ["--spec-type", "draft-simple"]}
    rendering = ab_render([config], production)["both"]
    judged = lint("llamacpp", parse_flags([], rendering["env"]))
    assert judged["effective_chain"] == ["ngram-mod", "draft-simple"]

    settings = run_as_the_unit(llama_server_bin, rendering["env"], tmp_path / "server.log", port)
    # the server lists its default "none" too, which runs nothing
    ran = [t for t in settings["speculative.types"].split(",") if t != "none"]
    assert sorted(ran) == sorted(judged["effective_chain"]), settings["speculative.types"]
    assert settings["top_k"] == 7  # production's LLAMA_EXTRA_ARGS reached the server
    assert rendering["argv"] == ["--top-k", "7", "--spec-type", "draft-simple"]


def test_productions_extra_args_reach_a_candidate_with_an_unnamed_flag(llama_server_bin: str, standard_models: dict,
                                                                       tmp_path: Path) -> None:
    port = free_port()
    production = {"LLAMA_ARG_MODEL": str(standard_models["target.gguf"]), "LLAMA_ARG_HOST": "127.0.0.1",
                  "LLAMA_ARG_PORT": str(port), "LLAMA_ARG_THREADS": "1", "LLAMA_ARG_CTX_SIZE": "1024",
                  "LLAMA_EXTRA_ARGS": "--top-k 7"}
    # --spec-ngram-mod-n-min has no LLAMA_ARG_* name: it can only travel in LLAMA_EXTRA_ARGS
    config = {"name": "ng", "env": {"LLAMA_ARG_SPEC_TYPE": "ngram-mod"}, "flags": ["--spec-ngram-mod-n-min", "16"]}
    rendering = ab_render([config], production)["ng"]
    assert rendering["argv"] == ["--top-k", "7", "--spec-ngram-mod-n-min", "16"]
    settings = run_as_the_unit(llama_server_bin, rendering["env"], tmp_path / "server.log", port)
    assert settings["top_k"] == 7
    assert [t for t in settings["speculative.types"].split(",") if t != "none"] == ["ngram-mod"]
