# Copyright: (c) 2026, llmfleet.specdec contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# Private to the collection: finds the build toolchain on a host (cmake, compilers, nvcc, ROCm/HIP, glslc, Vulkan headers).
"""What is installed for building llama.cpp, found the way its cmake files look for it.

Only I/O lives here; what counts as enough is ``_build.toolkit_problems``. Each finding is
``{"path": str, "version": str | None}`` or None. A command is run with a timeout and never
through a shell.
"""
from __future__ import annotations

import os
import shutil
import subprocess
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from ansible_collections.llmfleet.specdec.plugins.module_utils.build import _build as build

Runner = Callable[[Sequence[str]], Tuple[int, str, str]]
DEFAULT_INCLUDE_DIRS = ("/usr/include", "/usr/local/include")


def run_command(argv: Sequence[str], timeout: float = 30.0) -> Tuple[int, str, str]:
    try:
        proc = subprocess.run(list(argv), capture_output=True, timeout=timeout,
                              text=True, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return 127, "", str(exc)
    return proc.returncode, proc.stdout, proc.stderr


class Probe:
    """Looks for each tool on PATH (and where llama.cpp's cmake files look), asks it its version."""

    def __init__(self, run: Runner = run_command, path: Optional[str] = None,
                 include_dirs: Sequence[str] = DEFAULT_INCLUDE_DIRS, env: Optional[Mapping[str, str]] = None) -> None:
        self.run = run
        self.env = dict(os.environ if env is None else env)
        self.path = path if path is not None else self.env.get("PATH", os.defpath)
        self.include_dirs = list(include_dirs)

    def which(self, *names: str, extra: Sequence[str] = ()) -> Optional[str]:
        for name in names:
            found = shutil.which(name, path=self.path)
            if found:
                return found
        for candidate in extra:
            if candidate and os.path.isfile(candidate) and os.access(candidate, os.X_OK):
                return candidate
        return None

    def version_of(self, path: Optional[str], args: Sequence[str], parse: Callable[[str], Any]) -> Optional[Dict[str, Any]]:
        if not path:
            return None
        rc, out, err = self.run([path, *list(args)])
        text = out + "\n" + err
        version = parse(text) if rc == 0 else None
        return {"path": path, "version": None if version is None else str(version)}

    def header(self, relative: str, extra_roots: Sequence[str] = (),
               parse: Optional[Callable[[str], Any]] = None) -> Optional[Dict[str, Any]]:
        for root in list(extra_roots) + self.include_dirs:
            candidate = os.path.join(root, relative)
            if os.path.isfile(candidate):
                version = None
                if parse is not None:
                    try:
                        with open(candidate, encoding="utf-8", errors="replace") as handle:
                            version = parse(handle.read())
                    except OSError:
                        version = None
                return {"path": candidate, "version": None if version is None else str(version)}
        return None

    # ------------------------------------------------------------------ tools

    def cmake(self) -> Optional[Dict[str, Any]]:
        return self.version_of(self.which("cmake"), ["--version"], build.parse_cmake_version)

    def cxx(self) -> Optional[Dict[str, Any]]:
        return self.version_of(self.which("c++", "g++", "clang++"), ["--version"],
                               lambda t: build.vtext(build.parse_version(t)) if build.parse_version(t) else None)

    def make(self) -> Optional[Dict[str, Any]]:
        found = self.which("make", "gmake")
        return {"path": found, "version": None} if found else None

    def git(self) -> Optional[Dict[str, Any]]:
        return self.version_of(self.which("git"), ["--version"],
                               lambda t: build.vtext(build.parse_version(t)) if build.parse_version(t) else None)

    def nvcc(self, compiler: Optional[str] = None) -> Optional[Dict[str, Any]]:
        if compiler:
            path = compiler if os.path.isfile(compiler) and os.access(compiler, os.X_OK) else None
            if path is None:
                return None
        else:
            cuda_home = self.env.get("CUDA_PATH") or self.env.get("CUDA_HOME") or "/usr/local/cuda"
            path = self.which("nvcc", extra=[os.path.join(cuda_home, "bin", "nvcc")])
        return self.version_of(path, ["--version"], build.parse_nvcc_version)

    def hip(self, rocm_path: Optional[str] = None) -> Optional[Dict[str, Any]]:
        rocm = rocm_path or self.env.get("ROCM_PATH") or "/opt/rocm"
        path = self.which("hipconfig", extra=[os.path.join(rocm, "bin", "hipconfig")])
        found = self.version_of(path, ["--version"], build.parse_hip_version)
        if not found:
            return None
        rc, out, _dummy = self.run([path, "-l"])  # the HIP clang directory (docs/build.md: HIPCXX=$(hipconfig -l)/clang)
        found["clang"] = os.path.join(out.strip(), "clang") if rc == 0 and out.strip() else None
        rc, out, _dummy = self.run([path, "-R"])  # the ROCm root (HIP_PATH=$(hipconfig -R))
        found["rocm_path"] = out.strip() if rc == 0 and out.strip() else rocm
        return found

    def glslc(self, vulkan_sdk: Optional[str] = None) -> Optional[Dict[str, Any]]:
        sdk = vulkan_sdk or self.env.get("VULKAN_SDK")
        path = self.which("glslc", extra=[os.path.join(sdk, "bin", "glslc")] if sdk else [])
        return self.version_of(path, ["--version"], build.parse_glslc_version)

    def vulkan_headers(self, vulkan_sdk: Optional[str] = None) -> Optional[Dict[str, Any]]:
        sdk = vulkan_sdk or self.env.get("VULKAN_SDK")
        return self.header("vulkan/vulkan_core.h", [os.path.join(sdk, "include")] if sdk else [],
                           build.parse_vk_header_version)

    def spirv_headers(self, vulkan_sdk: Optional[str] = None) -> Optional[Dict[str, Any]]:
        sdk = vulkan_sdk or self.env.get("VULKAN_SDK")
        return self.header("spirv/unified1/spirv.hpp", [os.path.join(sdk, "include")] if sdk else [])


def probe(backend: Any, options: Mapping[str, Any], prober: Optional[Probe] = None) -> Dict[str, Any]:
    """What a build of ``backend`` needs, as found on this host (GPU toolkits only for the backends asked for)."""
    prober = prober or Probe()
    components = build.parse_backend(backend)
    found: Dict[str, Any] = {"cmake": prober.cmake(), "cxx": prober.cxx(), "make": prober.make(), "git": prober.git()}
    if "cuda" in components:
        found["nvcc"] = prober.nvcc(options.get("cuda_compiler") or None)
    if "hip" in components:
        found["hip"] = prober.hip(options.get("rocm_path") or None)
    if "vulkan" in components:
        sdk = options.get("vulkan_sdk") or None
        found["glslc"] = prober.glslc(sdk)
        found["vulkan_headers"] = prober.vulkan_headers(sdk)
        found["spirv_headers"] = prober.spirv_headers(sdk)
    return found


def check(backend: Any, options: Mapping[str, Any], prober: Optional[Probe] = None,
          source_kind: str = "archive") -> Dict[str, Any]:
    """``{"toolchain": found, "problems": [...], "backends": [...]}`` for module llamacpp_toolchain."""
    found = probe(backend, options, prober)
    problems: List[Dict[str, Any]] = build.toolkit_problems(backend, found, options, source_kind)
    return {"toolchain": found, "problems": problems,
            "backends": ["cpu", *list(build.parse_backend(backend))]}
