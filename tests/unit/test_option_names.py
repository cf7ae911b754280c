# One name per idea: `engine` (llamacpp|vllm) for which server, `gpu_backend` for llama.cpp's GPU API. The old names
# still work as deprecated aliases (a warning in the module's result), and a value outside the choices is refused
# naming the option.
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from test_lint import LLAMA

from ansible_collections.llmfleet.specdec.plugins.modules import (
    kv_budget,
    llamacpp_toolchain,
    serving_unit_info,
    spec_lint,
    spec_watch,
)

TARGET = {"model_type": "llama", "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
          "hidden_size": 256, "torch_dtype": "bfloat16", "max_position_embeddings": 4096}


# Each run is a fresh python: in a process that has loaded Ansible's controller side (other tests' filters and
# playbooks), a module's deprecations go to the controller's display instead of its result.
RUNNER = """
import json, sys
from importlib import import_module
from ansible.module_utils.testing import patch_module_args
with patch_module_args(json.loads(sys.argv[2])):
    import_module(sys.argv[1]).main()
"""


def run(module: Any, args: dict[str, Any]) -> dict[str, Any]:
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[2] / ".build" / "collections"))
    proc = subprocess.run([sys.executable, "-c", RUNNER, module.__name__, json.dumps(args)], env=env,
                          capture_output=True, text=True, timeout=120, check=False)
    return json.loads(proc.stdout)


def deprecated(out: dict[str, Any]) -> list[str]:
    """The deprecation messages of a result, each with its version and collection (ansible-core 2.19's form:
    the message under event, the collection under deprecator; older cores: msg, collection_name)."""
    lines = []
    for d in out.get("deprecations") or []:
        msg = (d.get("event") or {}).get("msg") or d.get("msg")
        collection = (d.get("deprecator") or {}).get("resolved_name") or d.get("collection_name")
        lines.append(f"{msg} [{d.get('version')} {collection}]")
    return lines


def vllm_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    (tmp_path / "t").mkdir(exist_ok=True)
    (tmp_path / "t" / "config.json").write_text(json.dumps(TARGET))
    return {"VLLM_SERVE_MODEL": str(tmp_path / "t"), "VLLM_SERVE_ARGS": "--max-model-len 1024", **extra}


# ------------------------------------------------------------------ spec_lint: engine (was backend)

LINT = {"flags": ["--spec-type", "ngram-mod"], "target": LLAMA}


def test_spec_lint_takes_engine() -> None:
    out = run(spec_lint, {"engine": "llamacpp", **LINT})
    assert out.get("failed") is not True, out.get("msg")
    assert out["effective_chain"] == ["ngram-mod"] and deprecated(out) == []


def test_spec_lint_still_takes_backend_and_warns() -> None:
    out = run(spec_lint, {"backend": "llamacpp", **LINT})
    assert out.get("failed") is not True, out.get("msg")
    assert out["effective_chain"] == ["ngram-mod"]
    assert any("backend" in d and "1.0.0 llmfleet.specdec" in d for d in deprecated(out)), deprecated(out)


def test_spec_lint_refuses_an_engine_it_does_not_know() -> None:
    out = run(spec_lint, {"engine": "sglang", **LINT})
    assert out["failed"] is True and "engine" in out["msg"] and "sglang" in out["msg"]
    assert "llamacpp, vllm" in out["msg"]


# ------------------------------------------------------------------ kv_budget: engine (was backend), platform


def test_kv_budget_takes_engine_and_backend(tmp_path: Path) -> None:
    env = vllm_env(tmp_path, VLLM_CPU_KVCACHE_SPACE="1")
    new = run(kv_budget, {"engine": "vllm", "env": env})
    old = run(kv_budget, {"backend": "vllm", "env": env})
    assert new.get("failed") is not True and old.get("failed") is not True, (new.get("msg"), old.get("msg"))
    assert new["kv_budget"]["engine"] == "vllm" and new["kv_budget"]["vllm"] == old["kv_budget"]["vllm"]
    assert deprecated(new) == []
    assert any("backend" in d and "1.0.0 llmfleet.specdec" in d for d in deprecated(old)), deprecated(old)


def test_kv_budget_refuses_a_bad_engine_naming_it() -> None:
    out = run(kv_budget, {"engine": "tgi", "target": {}})
    assert out["failed"] is True and "engine" in out["msg"] and "tgi" in out["msg"]


def test_kv_budget_platform_is_told_from_the_inputs_not_assumed(tmp_path: Path) -> None:
    # vllm-cpu's own variable: cpu (block size 128)
    cpu = run(kv_budget, {"engine": "vllm", "env": vllm_env(tmp_path, VLLM_CPU_KVCACHE_SPACE="1")})
    assert cpu["kv_budget"]["vllm"]["platform"] == "cpu" and cpu["kv_budget"]["vllm"]["block_size"] == 128
    # a GPU in devices: gpu (block size 16)
    gpus = [{"index": 0, "name": "RTX 3090", "backend": "cuda", "total_bytes": 24 * 2**30}]
    gpu = run(kv_budget, {"engine": "vllm", "env": vllm_env(tmp_path), "devices": gpus})
    assert gpu["kv_budget"]["vllm"]["platform"] == "gpu" and gpu["kv_budget"]["vllm"]["block_size"] == 16
    # neither: the module asks, it does not size a GPU host's cache as a CPU's
    unknown = run(kv_budget, {"engine": "vllm", "env": vllm_env(tmp_path)})
    assert unknown["failed"] is True and unknown["msg"].startswith("platform:")
    assert "platform=cpu or platform=gpu" in unknown["msg"]
    # named, it is used as given
    named = run(kv_budget, {"engine": "vllm", "env": vllm_env(tmp_path), "platform": "gpu"})
    assert named.get("failed") is not True and named["kv_budget"]["vllm"]["platform"] == "gpu"


def test_kv_budget_refuses_a_bad_platform_naming_it(tmp_path: Path) -> None:
    out = run(kv_budget, {"engine": "vllm", "env": vllm_env(tmp_path), "platform": "tpu"})
    assert out["failed"] is True and "platform" in out["msg"] and "tpu" in out["msg"]


# ------------------------------------------------------------------ serving_unit_info: engine (was backend)


@pytest.mark.parametrize("name", ["engine", "backend"])
def test_serving_unit_info_takes_engine_and_backend(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # no systemctl: the module answers "not installed"
    out = run(serving_unit_info, {name: "vllm", "required": False})
    assert out.get("failed") is not True and out["serving_unit"]["installed"] is False
    warned = any("backend" in d and "1.0.0 llmfleet.specdec" in d for d in deprecated(out))
    assert warned is (name == "backend"), deprecated(out)


def test_serving_unit_info_refuses_a_bad_engine() -> None:
    out = run(serving_unit_info, {"engine": "ollama"})
    assert out["failed"] is True and "engine" in out["msg"] and "ollama" in out["msg"]


# ------------------------------------------------------------------ llamacpp_toolchain: gpu_backend (was backend)


@pytest.mark.parametrize("name", ["gpu_backend", "backend"])
def test_toolchain_takes_gpu_backend_and_backend(name: str) -> None:
    out = run(llamacpp_toolchain, {name: "cpu", "fail_on_problems": False})
    assert out.get("failed") is not True and out["backends"] == ["cpu"]
    warned = any("backend" in d and "1.0.0 llmfleet.specdec" in d for d in deprecated(out))
    assert warned is (name == "backend"), deprecated(out)


@pytest.mark.parametrize("value", ["metal", "cuda+hip", "vulkan,cuda"])
def test_toolchain_refuses_a_gpu_backend_outside_its_choices(value: str) -> None:
    out = run(llamacpp_toolchain, {"gpu_backend": value})
    assert out["failed"] is True and "gpu_backend" in out["msg"] and value in out["msg"]
    assert "cuda+vulkan" in out["msg"]  # the choices are listed


# ------------------------------------------------------------------ spec_watch: host is deprecated


def test_spec_watch_without_host_names_the_unit(tmp_path: Path) -> None:
    out = run(spec_watch, {"unit": "llama-server", "state_dir": str(tmp_path)})
    assert out["changed"] is False and out["summary"].startswith("llama-server.service: no promotion")
    assert deprecated(out) == []


def test_spec_watch_still_takes_host_and_warns(tmp_path: Path) -> None:
    out = run(spec_watch, {"unit": "llama-server", "state_dir": str(tmp_path), "host": "gpu-box-1"})
    assert out["changed"] is False and out["summary"].startswith("gpu-box-1: no promotion")
    assert any("host" in d and "1.0.0 llmfleet.specdec" in d for d in deprecated(out)), deprecated(out)


# ------------------------------------------------------------------ the inventory's specdec_engine (was specdec_backend)

ROOT = Path(__file__).resolve().parents[2]
ENV = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_NOCOLOR="1",
           ANSIBLE_COLLECTIONS_PATH=str(ROOT / ".build" / "collections"))
RESOLVE = """
- name: The roles' engine, as their defaults resolve it
  hosts: localhost
  gather_facts: false
  tasks:
    - name: Load the roles' defaults
      ansible.builtin.include_vars: {file: "%s"}
      loop: %s
    - name: Show them
      ansible.builtin.debug:
        msg: "ENGINES {{ spec_ab_engine }} {{ spec_preflight_engine }}"
"""


def _engines(tmp_path: Path, *extra: str) -> str:
    files = [str(ROOT / "roles" / role / "defaults" / "main.yml") for role in ("spec_ab", "spec_preflight")]
    playbook = tmp_path / "resolve.yml"
    playbook.write_text(RESOLVE % ("{{ item }}", json.dumps(files)))
    argv = [str(Path(sys.executable).parent / "ansible-playbook"), "-i", "localhost,", "-c", "local", str(playbook)]
    for e in extra:
        argv += ["-e", e]
    proc = subprocess.run(argv, cwd=tmp_path, env=ENV, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    return re.search(r"ENGINES \w+ \w+", proc.stdout).group(0)


def test_the_roles_read_specdec_engine_and_still_specdec_backend(tmp_path: Path) -> None:
    assert _engines(tmp_path) == "ENGINES llamacpp llamacpp"
    assert _engines(tmp_path, "specdec_engine=vllm") == "ENGINES vllm vllm"
    assert _engines(tmp_path, "specdec_backend=vllm") == "ENGINES vllm vllm"  # the old name, still read
    # both given: the new name wins; the preflight's own old name still wins over the inventory's
    assert _engines(tmp_path, "specdec_engine=vllm", "specdec_backend=llamacpp") == "ENGINES vllm vllm"
    assert _engines(tmp_path, "spec_preflight_backend=vllm") == "ENGINES llamacpp vllm"


def test_a_bad_engine_fails_at_the_role_start_naming_the_variable(tmp_path: Path) -> None:
    def preflight(*extra: str) -> str:
        proc = subprocess.run([str(Path(sys.executable).parent / "ansible-playbook"), "playbooks/preflight.yml", "-l",
                               "specdec-demo", *extra], cwd=ROOT, env=ENV, capture_output=True,
                              text=True, timeout=300, check=False)
        assert proc.returncode != 0
        return proc.stdout + proc.stderr

    # the role's own variable: its argument spec's choices
    out = preflight("-e", "spec_preflight_engine=tgi")
    assert "spec_preflight_engine" in out and "tgi" in out and "llamacpp, vllm" in out
    # the inventory's name: refused by the play's variable check, before the role starts
    out = preflight("-e", "specdec_engine=tgi")
    assert 'specdec_engine="tgi" is not valid: specdec_engine takes llamacpp or vllm' in out
