# The GPU proof (tests/gpu/) builds with role llamacpp_build's own defines, trims the tree it carries, and reads the
# server's load log the way its comparison needs; its CPU run is tests/integration/test_gpu_proof_cpu.py.
from __future__ import annotations

import importlib.util
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ansible_collections.llmfleet.specdec.plugins.module_utils.build import _build as build
from ansible_collections.llmfleet.specdec.plugins.module_utils.memory import _gpu, _sizing
from ansible_collections.llmfleet.specdec.plugins.module_utils.memory._kv import MIB
from testbed.pinned import LLAMA_CPP_PYTHON_VERSION

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = Path(__file__).resolve().parent / "fixtures" / "gpu"
NVCC = "/usr/local/cuda/bin/nvcc"


def _load(name: str):
    spec = importlib.util.spec_from_file_location(f"gpu_{name}", ROOT / "tests" / "gpu" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


proof = _load("gpu_proof")
pack = _load("pack")


# --------------------------------------------------------------------------- 1. the role's defines, not a copy


def _role_plan_through_ansible(tmp_path: Path, overrides: dict) -> dict:
    """llamacpp_build_options | llamacpp_build_plan, rendered by ansible-playbook from the role's own files."""
    playbook = tmp_path / "plan.yml"
    out = tmp_path / "plan.json"
    playbook.write_text(f"""
- name: Render role llamacpp_build's plan
  hosts: localhost
  connection: local
  gather_facts: false
  vars_files:
    - {ROOT}/roles/llamacpp_build/defaults/main.yml
    - {ROOT}/roles/llamacpp_build/vars/main.yml
  tasks:
    - name: Write the plan
      ansible.builtin.copy:
        content: "{{{{ llamacpp_build_options | llmfleet.specdec.internal('llamacpp_build_plan') | to_json }}}}"
        dest: "{out}"
        mode: "0644"
""")
    (tmp_path / "extra.json").write_text(json.dumps(overrides))
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_NOCOLOR="1",
               ANSIBLE_COLLECTIONS_PATH=str(ROOT / ".build" / "collections"))
    proc = subprocess.run([str(Path(sys.executable).parent / "ansible-playbook"), str(playbook), "-i", "localhost,",
                           "-e", f"@{tmp_path / 'extra.json'}", "-e", f"ansible_python_interpreter={sys.executable}"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return json.loads(out.read_text())


def _overrides(work: Path, backend: str, caps: list[str], nvcc: str) -> dict:
    return {"llamacpp_build_version": f"sdist-{LLAMA_CPP_PYTHON_VERSION}", "llamacpp_build_backend": backend,
            "llamacpp_build_root": str(work / "opt"), "llamacpp_build_work_dir": str(work),
            "llamacpp_build_source": "archive", "llamacpp_build_archive": f"llama_cpp_python-{LLAMA_CPP_PYTHON_VERSION}.tar.gz",
            "llamacpp_build_archive_subdir": "vendor/llama.cpp", "llamacpp_build_cuda_architectures": caps,
            "llamacpp_build_cuda_compiler": nvcc, "llamacpp_build_jobs": 0, "llamacpp_build_ccache_dir": ""}


def test_cuda_build_is_the_plan_role_llamacpp_build_renders(tmp_path):
    work = tmp_path / "w"
    ours = proof.build_plan("cuda", work, cuda_architectures=["9.0"], cuda_compiler=NVCC)
    role = _role_plan_through_ansible(tmp_path, _overrides(work, "cuda", ["9.0"], NVCC))
    assert ours == role
    assert "-DGGML_CUDA=ON" in ours["defines"]
    assert "-DCMAKE_CUDA_ARCHITECTURES=90" in ours["defines"]
    assert f"-DCMAKE_CUDA_COMPILER={NVCC}" in ours["defines"]
    assert ours["build"][ours["build"].index("--target") + 1:] == ["llama-server"]
    # what the script runs: the role's configure command, a generator at most added (not a define)
    argv = proof.configure_argv(ours, "Ninja")
    assert argv == ours["configure"] + ["-G", "Ninja"]
    assert [a for a in argv if a.startswith("-D")] == role["defines"]


def test_a_define_the_role_gains_reaches_the_gpu_build(tmp_path, monkeypatch):
    role = tmp_path / "llamacpp_build"
    shutil.copytree(ROOT / "roles" / "llamacpp_build", role)
    defaults = role / "defaults" / "main.yml"
    text = defaults.read_text()
    assert "llamacpp_build_cmake_args: []" in text
    defaults.write_text(text.replace("llamacpp_build_cmake_args: []",
                                     'llamacpp_build_cmake_args: ["-DGGML_CUDA_FA_ALL_QUANTS=ON"]'))
    monkeypatch.setattr(proof, "ROLE", role)
    plan = proof.build_plan("cuda", tmp_path / "w", cuda_architectures=["9.0"], cuda_compiler=NVCC)
    assert plan["defines"][-1] == "-DGGML_CUDA_FA_ALL_QUANTS=ON"


def test_cpu_build_has_the_test_beds_defines():
    """The CPU run's build (make gpu-proof-pack) compiles exactly what the test bed compiled: all cache hits."""
    text = (ROOT / "tests" / "testbed" / "build_llama_server.sh").read_text()
    configure = re.search(r'^cmake -S .*?(?<!\\)\n', text, re.S | re.M).group(0).replace("\\\n", " ")
    testbed = [a for a in shlex.split(configure) if a.startswith("-D")]
    plan = proof.build_plan("cpu", Path("/w"), ccache_dir="/c")
    assert plan["defines"] == testbed
    assert plan["env"]["CCACHE_BASEDIR"] == "/w"
    assert Path(plan["build_dir"]).name == f"build-sdist-{LLAMA_CPP_PYTHON_VERSION}-cpu"
    assert plan["cmake_src"] == f"/w/src/llama_cpp_python-{LLAMA_CPP_PYTHON_VERSION}/vendor/llama.cpp"


@pytest.mark.parametrize("text,caps", [("9.0\n", ["9.0"]), ("8.6\n8.6\n", ["8.6"]), ("8.9\n9.0\n", ["8.9", "9.0"])])
def test_compute_capability_from_nvidia_smi(text, caps):
    assert proof.parse_compute_caps(text) == caps
    assert build.cuda_architectures(caps) == ";".join(c.replace(".", "") for c in caps)


@pytest.mark.parametrize("text", ["", "N/A\n", (FIXTURES / "nvidia-smi-driver-failed.txt").read_text()])
def test_compute_capability_refuses_what_is_not_one(text):
    with pytest.raises(ValueError):
        proof.parse_compute_caps(text)


# --------------------------------------------------------------------------- the trimmed tree


@pytest.mark.parametrize("rel,kept", [
    ("CMakeLists.txt", True), ("LICENSE", True), ("README.md", False), ("convert_hf_to_gguf.py", False),
    ("src/llama.cpp", True), ("common/arg.cpp", True), ("include/llama.h", True), ("app/CMakeLists.txt", True),
    ("vendor/cpp-httplib/httplib.h", True), ("licenses/LICENSE-curl", True),
    ("ggml/src/ggml.c", True), ("ggml/src/ggml-cpu/ggml-cpu.c", True), ("ggml/src/ggml-cuda/mmq.cu", True),
    ("ggml/src/ggml-cuda/template-instances/mmq-instance-q4_0.cu", True),
    ("ggml/src/ggml-vulkan/ggml-vulkan.cpp", False), ("ggml/src/ggml-metal/ggml-metal.m", False),
    ("ggml/include/ggml.h", True), ("ggml/CMakeLists.txt", True),
    ("tools/CMakeLists.txt", True), ("tools/server/server.cpp", True), ("tools/server/tests/unit/test_basic.py", False),
    ("tools/server/README.md", False), ("tools/mtmd/clip.cpp", True), ("tools/mtmd/test-1.jpeg", False),
    ("tools/mtmd/legacy-models/convert.py", False), ("tools/ui/CMakeLists.txt", True), ("tools/ui/ui.cpp.in", True),
    ("tools/ui/src/app.html", False), ("tools/quantize/quantize.cpp", False), ("tools/llama-bench/llama-bench.cpp", False),
    ("scripts/ui-assets.cmake", True), ("scripts/sync_vendor.py", False),
    ("models/ggml-vocab-gpt-2.gguf", False), ("docs/build.md", False), ("examples/simple/simple.cpp", False),
    ("tests/test-backend-ops.cpp", False), ("gguf-py/gguf/gguf.py", False),
])
def test_the_pack_keeps_what_llama_server_builds_from(rel, kept):
    assert pack.keep(rel) is kept


def test_tools_cmake_keeps_only_the_tools_that_travel():
    text = "if (X)\nelse()\n    add_subdirectory(quantize)\n    if (LLAMA_BUILD_SERVER)\n        add_subdirectory(ui)\n" \
           "        add_subdirectory(cli)\n        add_subdirectory(server)\n    endif()\n    add_subdirectory(mtmd)\nendif()\n"
    out, dropped = pack.patch_tools_cmake(text, {"server", "mtmd", "ui"})
    assert dropped == ["quantize", "cli"]
    assert "    # trimmed for llama-server only: add_subdirectory(quantize)" in out
    assert re.findall(r"^\s*add_subdirectory\((\w+)\)", out, re.M) == ["ui", "server", "mtmd"]


# --------------------------------------------------------------------------- the load log against kv_budget


def _two_3090s() -> list[dict]:
    return _gpu.parse_nvidia_smi_csv((FIXTURES / "nvidia-smi-2x-rtx3090.csv").read_text())


def _facts(n_layer: int) -> dict:
    return {"architecture": "llama", "block_count": n_layer, "embedding_length": 1536, "head_count": 12,
            "head_count_kv": 2, "context_length": 32768, "kv_layers": list(range(n_layer))}


def _printed_log(result: dict) -> str:
    """The load log llama-server prints for result's contexts (llama.cpp's formats), device by device."""
    lines = []
    for role in ("target", "draft"):
        ctx = result[role]
        c = ctx["context"]
        lines += [f"llama_context: n_seq_max     = {c['n_seq_max']}", f"llama_context: n_ctx         = {c['n_ctx']}",
                  f"llama_context: n_ctx_seq     = {c['n_ctx_seq']}"]
        for cache in ctx["caches"]:
            per_dev: dict[str, int] = {}
            for row in cache["rows"]:
                per_dev[row["device"]] = per_dev.get(row["device"], 0) + row["bytes"]
            lines += [f"llama_kv_cache: {dev:>10} KV buffer size = {n / MIB:8.2f} MiB" for dev, n in per_dev.items()]
            lines.append(cache["log_line"])
    return "\n".join(lines) + "\n"


def test_two_gpus_buffers_compared_device_by_device():
    result = _sizing.kv_budget(_facts(28), _facts(1), {"ctx_size": 32768, "parallel": 4, "devices": _two_3090s()})
    devices = {row["device"] for cache in result["target"]["caches"] for row in cache["rows"]}
    assert devices == {"CUDA0", "CUDA1"}
    printed = proof.parse_load_log(_printed_log(result))
    assert len(printed["contexts"]) == 2
    target = proof.compare_context(result["target"], printed["contexts"][0])
    assert target["match"], target["problems"]
    assert sorted(d for d, _mib in target["printed_buffers"]) == ["CUDA0", "CUDA1"]
    assert target["exact_bytes_checked"] == 2  # 8192 cells x 4 streams: the MiB print pins K and V to the byte
    draft = proof.compare_context(result["draft"], printed["contexts"][1])
    assert draft["match"], draft["problems"]


def test_a_wrong_size_or_device_is_a_mismatch():
    result = _sizing.kv_budget(_facts(28), None, {"ctx_size": 32768, "parallel": 1, "devices": _two_3090s()[:1]})
    log = _printed_log({"target": result["target"], "draft": result["target"]})
    got = proof.parse_load_log(log.replace("CUDA0 KV buffer", "CUDA1 KV buffer"))["contexts"][0]
    assert any("KV buffers" in p for p in proof.compare_context(result["target"], got)["problems"])
    # one more byte per cell in K: a different printed MiB, which the exact check catches even where the
    # line's text would round the same
    line = result["target"]["log_lines"][0]
    k_mib = re.search(r"K \(f16\):\s*([\d.]+) MiB", line).group(1)
    cells = result["target"]["caches"][0]["cells"]
    k_bytes = sum(r["k_row_bytes"] for r in result["target"]["caches"][0]["rows"])
    bigger = f"{(k_bytes + 1) * cells / MIB:.2f}"
    assert bigger != k_mib
    got = proof.parse_load_log(log.replace(f"K (f16): {k_mib.rjust(7)} MiB", f"K (f16): {bigger.rjust(7)} MiB"))
    problems = proof.compare_context(result["target"], got["contexts"][0])["problems"]
    assert any("pins" in p for p in problems) and "KV cache lines differ" in problems
    assert proof.compare_context(result["target"], None)["match"] is False


def test_llama_cpp_device_and_model_buffer_lines_are_read():
    log = ("llama_model_load_from_file_impl: using device CUDA0 (NVIDIA H200) (0000:1a:00.0) - 142350 MiB free\n"
           "load_tensors:   CPU_Mapped model buffer size =     1.63 MiB\n"
           "load_tensors:        CUDA0 model buffer size =  2500.20 MiB\n")
    printed = proof.parse_load_log(log)
    assert printed["free"] == [{"device": "CUDA0", "name": "NVIDIA H200", "free_mib": 142350}]
    assert printed["model_buffers"] == {"CPU_Mapped": "1.63", "CUDA0": "2500.20"}


# --------------------------------------------------------------------------- the models


def test_gpu_target_is_a_realistic_shape_and_the_draft_its_prefix():
    target, draft = proof.model_specs("cuda")
    per_layer = (target.n_embd * target.n_embd * 2  # q, o
                 + 2 * target.n_embd * (target.n_embd // target.n_head) * target.n_head_kv  # k, v
                 + 3 * target.n_embd * target.n_ff)  # gate, up, down
    assert per_layer * target.n_layer > 1.0e9
    assert target.n_head // target.n_head_kv == 6 and target.matrix_type == "f16" and target.weights == "tiled"
    assert draft.n_layer == 1 and target.scale_extra == 0.0 and target.shared_layers == 1
    assert {k: v for k, v in vars(draft).items() if k not in ("n_layer", "name", "scale_extra")} == \
        {k: v for k, v in vars(target).items() if k not in ("n_layer", "name", "scale_extra")}
