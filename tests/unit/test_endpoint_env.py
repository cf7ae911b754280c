# Tests for the endpoint's env names: vLLM units use VLLM_SERVE_HOST/PORT, files of 0.1.0 keep LLAMA_ARG_HOST/PORT.
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ansible_collections.llmfleet.specdec.plugins.module_utils.systemd import _systemd as sd
from ansible_collections.llmfleet.specdec.plugins.module_utils.systemd import _unit_override as uo
from ansible_collections.llmfleet.specdec.plugins.module_utils.systemd._endpoint_env import endpoint_names

LAUNCHER = Path(__file__).resolve().parents[2] / "roles" / "vllm_serve" / "files" / "vllm-serve-exec"


def launch(tmp_path: Path, env: dict[str, str]) -> list[str]:
    recorder = tmp_path / "record"
    recorder.write_text(f"#!{sys.executable}\nimport json, sys\nprint(json.dumps(sys.argv[1:]))\n")
    recorder.chmod(0o755)
    proc = subprocess.run([sys.executable, str(LAUNCHER), str(recorder), "serve"],
                          env={"PATH": os.environ["PATH"], "VLLM_SERVE_MODEL": "m", **env},
                          capture_output=True, text=True, timeout=30, check=False)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_launcher_passes_the_vllm_endpoint_names(tmp_path):
    argv = launch(tmp_path, {"VLLM_SERVE_HOST": "10.1.2.3", "VLLM_SERVE_PORT": "8123"})
    assert argv[:6] == ["serve", "m", "--host", "10.1.2.3", "--port", "8123"]


def test_launcher_still_reads_an_env_file_of_0_1_0(tmp_path):
    argv = launch(tmp_path, {"LLAMA_ARG_HOST": "10.9.9.9", "LLAMA_ARG_PORT": "8999"})
    assert argv[:6] == ["serve", "m", "--host", "10.9.9.9", "--port", "8999"]


@pytest.mark.parametrize(("env", "names"), [
    ({"VLLM_SERVE_PORT": "8123"}, ("VLLM_SERVE_HOST", "VLLM_SERVE_PORT")),
    ({"LLAMA_ARG_PORT": "8081"}, ("LLAMA_ARG_HOST", "LLAMA_ARG_PORT")),
    ({}, ("LLAMA_ARG_HOST", "LLAMA_ARG_PORT")),
])
def test_endpoint_names(env, names):
    assert endpoint_names(env) == names


def test_unit_override_reaches_a_vllm_unit_on_its_own_names():
    assert uo.endpoint_of({"VLLM_SERVE_HOST": "0.0.0.0", "VLLM_SERVE_PORT": "8123"}, "vllm") == ("127.0.0.1", 8123)
    # a unit of 0.1.0 (llama.cpp names in a vLLM env file) is reached as before
    assert uo.endpoint_of({"LLAMA_ARG_PORT": "8000", "VLLM_SERVE_MODEL": "m"}, "vllm") == ("127.0.0.1", 8000)


def test_a_bad_vllm_port_is_named_by_its_variable():
    with pytest.raises(sd.UnitOverrideError, match="VLLM_SERVE_PORT='http' is not a TCP port"):
        uo.endpoint_of({"VLLM_SERVE_PORT": "http"}, "vllm")
