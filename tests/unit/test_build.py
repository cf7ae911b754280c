# Tests for the llama.cpp build rules (_build.py), the toolchain probe (_toolchain.py) and module llamacpp_toolchain.
from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest
from ansible.module_utils.testing import patch_module_args

from ansible_collections.llmfleet.specdec.plugins.module_utils.build import _build as build
from ansible_collections.llmfleet.specdec.plugins.module_utils.build import _toolchain as toolchain
from ansible_collections.llmfleet.specdec.plugins.modules import llamacpp_toolchain
from ansible_collections.llmfleet.specdec.plugins.plugin_utils.steps import _steps_build as build_filters

FIX = Path(__file__).parent / "fixtures" / "toolchain"
GIT = {"kind": "git", "repo": "https://github.com/ggml-org/llama.cpp.git", "ref": "b10133"}


def plan(**options):
    options.setdefault("version", "b10133")
    options.setdefault("source", GIT)
    return build.plan(options)


# --------------------------------------------------------------------------- backends


@pytest.mark.parametrize("given, components, slug", [
    ("cpu", (), "cpu"),
    ("cuda", ("cuda",), "cuda"),
    ("rocm", ("hip",), "hip"),
    ("hip", ("hip",), "hip"),
    ("vulkan", ("vulkan",), "vulkan"),
    ("cuda+vulkan", ("cuda", "vulkan"), "cuda-vulkan"),
    ("vulkan,cuda", ("cuda", "vulkan"), "cuda-vulkan"),
    (["Vulkan", "cpu", "CUDA"], ("cuda", "vulkan"), "cuda-vulkan"),
    ("hip+vulkan", ("hip", "vulkan"), "hip-vulkan"),
])
def test_backends_normalize(given, components, slug):
    assert build.parse_backend(given) == components
    assert build.backend_slug(components) == slug


@pytest.mark.parametrize("given", ["cuda+hip", "rocm,cuda", ["hip", "cuda", "vulkan"]])
def test_hip_with_cuda_is_refused_with_the_reason(given):
    with pytest.raises(build.BuildConfigError) as err:
        build.parse_backend(given)
    message = str(err.value)
    assert "HIP and CUDA cannot coexist" in message
    assert "ggml-cuda's own sources" in message
    assert "cuda+vulkan" in message


@pytest.mark.parametrize("given", ["metal", "", "cuda+sycl", 3])
def test_unknown_backends_are_refused(given):
    with pytest.raises(build.BuildConfigError, match="llamacpp_build_backend"):
        build.parse_backend(given)


def test_compute_capabilities_become_cmake_architectures():
    assert build.cuda_architectures(["8.6"]) == "86"
    assert build.cuda_architectures([8.6, "8.9"]) == "86;89"
    assert build.cuda_architectures("8.6,12.0") == "86;120"
    assert build.cuda_architectures(["86-real", "90-virtual", "120a-real"]) == "86-real;90-virtual;120a-real"
    assert build.cuda_architectures(["native"]) == "native"
    with pytest.raises(build.BuildConfigError, match=r"RTX 3090"):
        build.cuda_architectures(["sm_86"])
    with pytest.raises(build.BuildConfigError, match="native"):
        build.cuda_architectures(["native", "8.6"])


def test_gfx_targets():
    assert build.hip_targets(["gfx1151"]) == "gfx1151"
    assert build.hip_targets("gfx1151,gfx1100") == "gfx1151;gfx1100"
    with pytest.raises(build.BuildConfigError, match="gfx1151 for Strix Halo"):
        build.hip_targets(["1151"])


# --------------------------------------------------------------------------- the cmake invocation


def test_cpu_plan_matches_the_flags_that_build_here():
    p = plan(backend="cpu", jobs=2, commit="0c1e57098")
    assert p["name"] == "b10133-cpu"
    assert p["prefix"] == "/opt/llama.cpp/b10133-cpu"
    assert p["current"] == "/opt/llama.cpp/current"
    assert p["build_number"] == 10133
    assert p["configure"][:5] == ["cmake", "-S", p["src_dir"], "-B", p["build_dir"]]
    assert p["defines"] == [
        "-DCMAKE_BUILD_TYPE=Release", "-DBUILD_SHARED_LIBS=OFF", "-DGGML_NATIVE=OFF", "-DGGML_CCACHE=ON",
        "-DLLAMA_BUILD_TESTS=OFF", "-DLLAMA_BUILD_EXAMPLES=OFF", "-DLLAMA_OPENSSL=OFF",
        "-DLLAMA_USE_PREBUILT_UI=OFF", "-DLLAMA_BUILD_NUMBER=10133", "-DLLAMA_BUILD_COMMIT=0c1e57098"]
    assert p["build"] == ["cmake", "--build", p["build_dir"], "--config", "Release", "--target", "llama-server",
                          "-j", "2"]
    assert p["backends"] == ["cpu"] and p["env"] == {}


def test_cuda_plan_names_the_compute_capability():
    p = plan(backend="cuda", cuda_architectures=["8.6"], cuda_compiler="/usr/local/cuda-12.4/bin/nvcc")
    assert p["name"] == "b10133-cuda"
    assert "-DGGML_CUDA=ON" in p["defines"]
    assert "-DCMAKE_CUDA_ARCHITECTURES=86" in p["defines"]
    assert "-DCMAKE_CUDA_COMPILER=/usr/local/cuda-12.4/bin/nvcc" in p["defines"]
    assert not any(d.startswith(("-DGGML_HIP", "-DGGML_VULKAN")) for d in p["defines"])


def test_a_cuda_plan_without_compute_capability_is_refused():
    with pytest.raises(build.BuildConfigError, match=r"8\.6 for an RTX 3090"):
        plan(backend="cuda")


def test_hip_plan_names_the_gfx_target_and_the_hip_compiler():
    p = plan(backend="rocm", gpu_targets=["gfx1151"], rocm_path="/opt/rocm-6.2.0",
             hip_clang="/opt/rocm-6.2.0/lib/llvm/bin/clang")
    assert p["name"] == "b10133-hip"
    assert "-DGGML_HIP=ON" in p["defines"] and "-DGPU_TARGETS=gfx1151" in p["defines"]
    assert p["env"] == {"HIP_PATH": "/opt/rocm-6.2.0", "ROCM_PATH": "/opt/rocm-6.2.0",
                        "HIPCXX": "/opt/rocm-6.2.0/lib/llvm/bin/clang"}
    with pytest.raises(build.BuildConfigError, match="gfx1151 for Strix Halo"):
        plan(backend="hip")


def test_hip_location_does_not_change_the_fingerprint():
    a = plan(backend="hip", gpu_targets=["gfx1151"])
    b = plan(backend="hip", gpu_targets=["gfx1151"], rocm_path="/opt/rocm-6.4.1", hip_clang="/x/clang")
    assert a["fingerprint"] == b["fingerprint"]
    assert a["env"] != b["env"]


def test_cuda_vulkan_in_one_build():
    p = plan(backend="cuda+vulkan", cuda_architectures=["8.6"])
    assert p["name"] == "b10133-cuda-vulkan"
    assert p["backends"] == ["cpu", "cuda", "vulkan"]
    assert p["defines"].index("-DGGML_CUDA=ON") < p["defines"].index("-DGGML_VULKAN=ON")


def test_fingerprint_follows_what_is_built():
    base = plan(backend="cpu")
    assert plan(backend="cpu")["fingerprint"] == base["fingerprint"]
    assert plan(backend="cpu", cmake_args=["-DGGML_CPU_REPACK=OFF"])["fingerprint"] != base["fingerprint"]
    assert plan(backend="cpu", source=dict(GIT, ref="b10100"))["fingerprint"] != base["fingerprint"]
    # where things are built or cached is not what is built
    assert plan(backend="cpu", work_dir="/tmp/w", ccache_dir="/c")["fingerprint"] == base["fingerprint"]


def test_extra_args_cannot_turn_on_a_backend_behind_the_record():
    with pytest.raises(build.BuildConfigError, match="set llamacpp_build_backend instead"):
        plan(backend="cpu", cmake_args=["-DGGML_CUDA=ON"])
    with pytest.raises(build.BuildConfigError, match="not a cmake option"):
        plan(backend="cpu", cmake_args=["GGML_NATIVE=ON"])
    assert "-DGGML_CUDA_FA_ALL_QUANTS=ON" in plan(
        backend="cuda", cuda_architectures=["8.6"], cmake_args=["-DGGML_CUDA_FA_ALL_QUANTS=ON"])["defines"]


@pytest.mark.parametrize("version", ["current", "", "b1 0", "../x", "-rf"])
def test_bad_build_names(version):
    with pytest.raises(build.BuildConfigError, match="llamacpp_build_version"):
        plan(version=version)


def test_archive_source_builds_from_its_subdir_and_is_unpacked_once_for_every_name():
    source = {"kind": "archive", "archive": "/home/me/llama_cpp_python-0.3.36.tar.gz", "subdir": "vendor/llama.cpp"}
    a = plan(version="sdist-0.3.36", source=source, work_dir="/w")
    b = plan(version="broken", source=source, work_dir="/w")
    assert a["src_dir"] == b["src_dir"] == "/w/src/llama_cpp_python-0.3.36"
    assert a["cmake_src"] == "/w/src/llama_cpp_python-0.3.36/vendor/llama.cpp"
    assert a["build_number"] is None
    assert not any(d.startswith("-DLLAMA_BUILD_NUMBER") for d in a["defines"])
    # the controller path is not part of what is built
    c = plan(version="sdist-0.3.36", source=dict(source, archive="/other/llama_cpp_python-0.3.36.tar.gz"), work_dir="/w")
    assert c["fingerprint"] == a["fingerprint"]


def test_build_script_configures_builds_and_stages(tmp_path):
    p = plan(backend="cpu", work_dir=str(tmp_path / "w"), root=str(tmp_path / "opt"), ccache_dir="/var/cache/cc")
    script = build.build_script(p)
    lines = script.splitlines()
    assert lines[0] == "#!/bin/bash" and "set -euo pipefail" in lines
    assert "export CCACHE_DIR=/var/cache/cc" in lines
    # a fixed locale: ccache hashes these, so another host's (or the test bed's) objects hit
    assert all(f"export {name}=C" in lines for name in ("LANG", "LC_ALL", "LC_CTYPE", "LC_MESSAGES"))
    assert 'export CMAKE_BUILD_PARALLEL_LEVEL="${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)}"' in lines
    assert " ".join(p["configure"]) in lines
    assert lines[-1] == f"cp {p['build_dir']}/bin/llama-server {p['staging']}/bin/llama-server"
    # the staging tree is never 'current'
    assert p["staging"] != p["prefix"] and "current" not in p["staging"]


# --------------------------------------------------------------------------- toolkit rules


def found(**tools):
    base = {"cmake": {"path": "/usr/bin/cmake", "version": "3.25.1"},
            "cxx": {"path": "/usr/bin/c++", "version": "12.2.0"},
            "make": {"path": "/usr/bin/make", "version": None},
            "git": {"path": "/usr/bin/git", "version": "2.39.5"}}
    base.update(tools)
    return base


def test_cpu_needs_only_cmake_and_a_compiler():
    assert build.toolkit_problems("cpu", found()) == []
    problems = build.toolkit_problems("cpu", found(cmake=None, cxx=None))
    assert [p["component"] for p in problems] == ["cmake", "cxx"]
    assert "apt-get install build-essential" in problems[1]["install"]


def test_git_source_needs_git():
    assert build.toolkit_problems("cpu", found(git=None), source_kind="archive") == []
    problems = build.toolkit_problems("cpu", found(git=None), source_kind="git")
    assert problems[0]["component"] == "git" and "llamacpp_build_archive" in problems[0]["install"]


def test_cuda_toolkit_versions_per_compute_capability():
    nvcc12 = {"path": "/usr/local/cuda/bin/nvcc", "version": "12.4.131"}
    assert build.toolkit_problems("cuda", found(nvcc=nvcc12), {"cuda_architectures": ["8.6"]}) == []
    missing = build.toolkit_problems("cuda", found(), {"cuda_architectures": ["8.6"]})
    assert missing == [{"component": "nvcc", "problem": "nvcc not found", "install": build.INSTALL["nvcc"]}]
    old = build.toolkit_problems("cuda", found(nvcc={"path": "/opt/cuda/bin/nvcc", "version": "11.0.194"}),
                                 {"cuda_architectures": ["8.6"]})
    assert len(old) == 1 and "cannot build compute capability 8.6: it needs CUDA 11.1" in old[0]["problem"]
    blackwell = build.toolkit_problems("cuda", found(nvcc=nvcc12), {"cuda_architectures": ["12.0"]})
    assert "needs CUDA 12.8" in blackwell[0]["problem"]
    cuda13 = build.toolkit_problems("cuda", found(nvcc={"path": "/x/nvcc", "version": "13.0.48"}),
                                    {"cuda_architectures": ["7.0", "8.6"]})
    assert len(cuda13) == 1 and "no longer builds compute capability 7.0" in cuda13[0]["problem"]


def test_cmake_minimum_per_backend():
    cmake316 = {"path": "/usr/bin/cmake", "version": "3.16.3"}
    assert build.toolkit_problems("cpu", found(cmake=cmake316)) == []
    hip = {"path": "/opt/rocm/bin/hipconfig", "version": "6.2.41133"}
    problems = build.toolkit_problems("hip", found(cmake=cmake316, hip=hip), {"gpu_targets": ["gfx1151"]})
    assert len(problems) == 1 and "cmake 3.16.3" in problems[0]["problem"] and "3.21" in problems[0]["problem"]
    assert "hip backend" in problems[0]["problem"]


def test_rocm_minimum():
    old = {"path": "/opt/rocm/bin/hipconfig", "version": "5.7.31921"}
    problems = build.toolkit_problems("hip", found(hip=old))
    assert len(problems) == 1 and "older than 6.1" in problems[0]["problem"]
    assert "rocm-hip-sdk" in problems[0]["install"]


def test_vulkan_needs_glslc_headers_and_spirv_headers():
    problems = build.toolkit_problems("vulkan", found())
    assert [p["component"] for p in problems] == ["glslc", "vulkan_headers", "spirv_headers"]
    message = build.toolkit_message("vulkan", problems, "frank-dragoon")
    assert message.startswith("llamacpp_build: cannot build the vulkan backend on frank-dragoon: glslc not found")
    for package in ("glslc", "libvulkan-dev", "spirv-headers"):
        assert package in message
    assert message.endswith("Nothing was built and 'current' was not touched.")


def test_version_parsers_on_recorded_output():
    assert build.parse_nvcc_version((FIX / "nvcc-12.4.txt").read_text()) == "12.4.131"
    assert build.parse_hip_version((FIX / "hipconfig-6.2.txt").read_text()) == "6.2.41133"
    assert build.parse_hip_version("HIP version: 6.4.43482-0f2d60242\n") == "6.4.43482"
    assert build.parse_glslc_version((FIX / "glslc.txt").read_text()) == "2023.2"
    assert build.parse_cmake_version((FIX / "cmake-3.25.txt").read_text()) == "3.25.1"
    assert build.parse_vk_header_version("#define VK_HEADER_VERSION 239\n") == 239
    assert build.parse_build_number("b10133") == 10133 and build.parse_build_number("0c1e57098") is None


# --------------------------------------------------------------------------- probing a host (real executables)


def tool(bindir: Path, name: str, output_file: str | None, extra: str = "") -> None:
    body = "#!/bin/sh\n" + extra
    if output_file:
        body += f"/bin/cat {FIX / output_file}\n"
    path = bindir / name
    path.write_text(body)
    path.chmod(path.stat().st_mode | stat.S_IEXEC)


def fake_host(tmp_path: Path, **tools: str | None) -> tuple[str, Path]:
    """A PATH with only the named tools (name -> recorded output file), and an include root."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    for name, output in tools.items():
        tool(bindir, name.replace("_", "+") if name == "c__" else name, output)
    return str(bindir), tmp_path / "include"


def test_probe_finds_a_cuda_host(tmp_path):
    path, include = fake_host(tmp_path, cmake="cmake-3.25.txt", make=None, nvcc="nvcc-12.4.txt")
    tool(Path(path), "c++", "gxx.txt")
    prober = toolchain.Probe(path=path, include_dirs=[str(include)], env={"PATH": path})
    result = toolchain.check("cuda", {"cuda_architectures": ["8.6"]}, prober)
    assert result["problems"] == []
    assert result["toolchain"]["nvcc"] == {"path": f"{path}/nvcc", "version": "12.4.131"}
    assert result["toolchain"]["cxx"]["version"] == "12.2.0"
    assert result["backends"] == ["cpu", "cuda"]


def test_probe_finds_hip_through_rocm_path(tmp_path):
    path, include = fake_host(tmp_path, cmake="cmake-3.25.txt", make=None)
    tool(Path(path), "c++", "gxx.txt")
    rocm_bin = tmp_path / "rocm" / "bin"
    rocm_bin.mkdir(parents=True)
    # hipconfig answers --version, -l (its clang directory) and -R (the ROCm root) like the real one
    tool(rocm_bin, "hipconfig", None,
         f'case "$1" in --version) /bin/cat {FIX / "hipconfig-6.2.txt"};; -l) echo {tmp_path}/rocm/llvm/bin;; '
         f'-R) echo {tmp_path}/rocm;; esac\n')
    prober = toolchain.Probe(path=path, include_dirs=[str(include)], env={"PATH": path})
    result = toolchain.check("hip", {"rocm_path": str(tmp_path / "rocm")}, prober)
    assert result["problems"] == []
    hip = result["toolchain"]["hip"]
    assert hip["version"] == "6.2.41133"
    assert hip["clang"] == f"{tmp_path}/rocm/llvm/bin/clang" and hip["rocm_path"] == f"{tmp_path}/rocm"


def test_probe_finds_vulkan_headers(tmp_path):
    path, include = fake_host(tmp_path, cmake="cmake-3.25.txt", make=None, glslc="glslc.txt")
    tool(Path(path), "c++", "gxx.txt")
    (include / "vulkan").mkdir(parents=True)
    (include / "vulkan" / "vulkan_core.h").write_text("#define VK_HEADER_VERSION 239\n")
    prober = toolchain.Probe(path=path, include_dirs=[str(include)], env={"PATH": path})
    result = toolchain.check("vulkan", {}, prober)
    assert [p["component"] for p in result["problems"]] == ["spirv_headers"]
    assert result["toolchain"]["vulkan_headers"]["version"] == "239"
    (include / "spirv" / "unified1").mkdir(parents=True)
    (include / "spirv" / "unified1" / "spirv.hpp").write_text("// spirv\n")
    assert toolchain.check("vulkan", {}, prober)["problems"] == []


def test_a_tool_that_fails_reports_no_version(tmp_path):
    path, include = fake_host(tmp_path, cmake=None, make=None)
    tool(Path(path), "c++", "gxx.txt")
    (Path(path) / "cmake").write_text("#!/bin/sh\nexit 3\n")
    prober = toolchain.Probe(path=path, include_dirs=[str(include)], env={"PATH": path})
    problems = toolchain.check("cpu", {}, prober)["problems"]
    assert problems and "did not report a version" in problems[0]["problem"]


# --------------------------------------------------------------------------- the module


def run_module(capsys, args):
    with patch_module_args(args), pytest.raises(SystemExit):
        llamacpp_toolchain.main()
    return json.loads(capsys.readouterr().out)


def test_module_fails_naming_what_to_install(tmp_path, capsys, monkeypatch):
    path, include = fake_host(tmp_path, cmake="cmake-3.25.txt", make=None)
    tool(Path(path), "c++", "gxx.txt")
    monkeypatch.setenv("PATH", path)
    monkeypatch.setenv("CUDA_PATH", str(tmp_path / "no-cuda"))
    result = run_module(capsys, {"gpu_backend": "cuda", "cuda_architectures": ["8.6"], "include_dirs": [str(include)]})
    assert result["failed"] is True
    assert result["msg"].startswith("llamacpp_build: cannot build the cuda backend: nvcc not found - install the "
                                    "CUDA toolkit with nvcc")
    assert result["problems"][0]["component"] == "nvcc"


def test_module_reports_without_failing(tmp_path, capsys, monkeypatch):
    path, include = fake_host(tmp_path, cmake="cmake-3.25.txt", make=None, nvcc="nvcc-11.0.txt")
    tool(Path(path), "c++", "gxx.txt")
    monkeypatch.setenv("PATH", path)
    result = run_module(capsys, {"gpu_backend": "cuda", "cuda_architectures": ["8.6"], "fail_on_problems": False,
                                 "include_dirs": [str(include)]})
    assert result.get("failed") is not True and result["changed"] is False
    assert "needs CUDA 11.1" in result["problems"][0]["problem"]


def test_module_refuses_hip_with_cuda(capsys):
    # not a choice of the module's gpu_backend (the build rules refuse it with the reason: the plan test below)
    result = run_module(capsys, {"gpu_backend": "hip+cuda"})
    assert result["failed"] is True and "gpu_backend" in result["msg"] and "hip+cuda" in result["msg"]


# --------------------------------------------------------------------------- retention and records


def test_prune_keeps_current_and_the_newest():
    installed = [{"name": "b1-cpu", "installed_at": "2026-10-01T00:00:00Z"},
                 {"name": "b2-cpu", "installed_at": "2026-10-02T00:00:00Z"},
                 {"name": "b3-cpu", "installed_at": "2026-10-03T00:00:00Z"},
                 {"name": "b4-cpu", "installed_at": "2026-10-04T00:00:00Z"}]
    assert build.prune_plan(installed, "b4-cpu", 2) == ["b2-cpu", "b1-cpu"]
    # 'current' rolled back to an old build: it stays, with the newest other one
    assert build.prune_plan(installed, "b1-cpu", 2) == ["b3-cpu", "b2-cpu"]
    assert build.prune_plan(installed, "b1-cpu", 1) == ["b4-cpu", "b3-cpu", "b2-cpu"]
    assert build.prune_plan(installed, None, 10) == []
    assert build.prune_plan(installed, "b4-cpu", 1, protect=["b2-cpu"]) == ["b3-cpu", "b1-cpu"]
    with pytest.raises(build.BuildConfigError, match="at least 1"):
        build.prune_plan(installed, "b4-cpu", 0)


def test_record_names_build_number_commit_backends_and_flags():
    p = plan(backend="cuda", cuda_architectures=["8.6"])
    record = build.build_record(p, commit="0c1e5709812345", toolchain={"nvcc": {"version": "12.4.131"}, "git": None},
                                built_at="2026-10-04T10:00:00Z", host="frank-zealot")
    assert record["schema"] == build.SCHEMA
    assert record["build"] == "b10133" and record["build_number"] == 10133
    assert record["commit"] == "0c1e5709812345"
    assert record["backends"] == ["cpu", "cuda"] and record["backend"] == "cuda"
    assert "-DCMAKE_CUDA_ARCHITECTURES=86" in record["cmake_defines"]
    assert record["toolchain"] == {"nvcc": "12.4.131"}
    assert record["fingerprint"] == p["fingerprint"]
    # what spec_lint's build gate reads
    from ansible_collections.llmfleet.specdec.plugins.module_utils.llamacpp._llamacpp import parse_build
    assert parse_build(record["build"]) == 10133


def test_filters_turn_refusals_into_filter_errors():
    from ansible.errors import AnsibleFilterError
    with pytest.raises(AnsibleFilterError, match="HIP and CUDA cannot coexist"):
        build_filters.llamacpp_build_plan({"version": "b1", "backend": "cuda+hip", "source": GIT})
    p = build_filters.llamacpp_build_plan({"version": "b1", "backend": "cpu", "source": GIT})
    assert build_filters.llamacpp_build_script(p).startswith("#!/bin/bash")
    assert build_filters.llamacpp_toolkit_problems(found(), "cpu") == []
    from ansible_collections.llmfleet.specdec.plugins.filter.internal import STEPS
    assert {"llamacpp_build_plan", "llamacpp_build_prune", "llamacpp_build_record", "llamacpp_build_script",
            "llamacpp_toolkit_problems"} <= set(STEPS)
    assert os.path.basename(build.FACTS_FILE) == "llamacpp-build.json"
