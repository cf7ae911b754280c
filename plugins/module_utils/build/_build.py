# Copyright: (c) 2026, llmfleet.specdec contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# Private to the collection: llama.cpp builds per backend - cmake invocations, toolkit rules, build records, retention.
"""How llama.cpp is built for one host, as data.

Every rule names where it comes from in the tree the collection pins (llama-cpp-python 0.3.36
``vendor/llama.cpp``, ggml-org/llama.cpp@0c1e57098):

- ``ggml/CMakeLists.txt``: the backend options ``GGML_CUDA``, ``GGML_HIP``, ``GGML_VULKAN`` (all OFF by
  default; the CPU backend is always built), ``GGML_NATIVE``, ``GGML_CCACHE``;
- ``ggml/src/ggml-cuda/CMakeLists.txt``: ``CMAKE_CUDA_ARCHITECTURES`` (without it: ``native`` or a long
  default list), cmake >= 3.18, and the toolkit each compute capability needs (8.6 needs CUDA 11.1,
  8.9 and 9.0 need 11.8, 12.0 needs 12.8, 12.1 needs 12.9); from CUDA 13 on, the default list no longer
  carries compute capabilities below 7.5;
- ``ggml/src/ggml-hip/CMakeLists.txt``: cmake >= 3.21, ``GPU_TARGETS`` (``AMDGPU_TARGETS`` is forwarded to
  it) becomes ``CMAKE_HIP_ARCHITECTURES``, "At least ROCM/HIP V6.1 is required", ``GGML_STATIC`` refused;
  it compiles ``ggml-cuda``'s own sources as HIP, so a HIP build and a CUDA build define the same
  ``ggml_backend_cuda_*`` symbols and cannot be linked into one process;
- ``ggml/src/ggml-vulkan/CMakeLists.txt``: cmake >= 3.19, ``find_package(Vulkan COMPONENTS glslc REQUIRED)``
  and ``find_package(SPIRV-Headers CONFIG REQUIRED)``;
- ``docs/build.md``: "you can build llama.cpp with both CUDA and Vulkan support by using the
  -DGGML_CUDA=ON -DGGML_VULKAN=ON options"; on Debian/Ubuntu Vulkan needs
  ``libvulkan-dev glslc spirv-headers``; HIP builds set ``HIPCXX="$(hipconfig -l)/clang"`` and
  ``HIP_PATH="$(hipconfig -R)"``;
- ``CMakeLists.txt`` / ``cmake/build-info.cmake``: ``LLAMA_BUILD_NUMBER`` and ``LLAMA_BUILD_COMMIT`` (what
  ``llama-server --version`` prints; taken from git when not given), ``LLAMA_OPENSSL`` (HTTPS for -hf
  downloads), ``LLAMA_USE_PREBUILT_UI`` (ON downloads the web UI at build time: off here, so an
  air-gapped host builds the same as any other).
"""
from __future__ import annotations

import hashlib
import json
import re
import shlex
from typing import Any, Iterable, Mapping, Sequence

from ansible_collections.llmfleet.specdec.plugins.module_utils.common._errors import SpecdecError
from ansible_collections.llmfleet.specdec.plugins.module_utils.common._version import Version
from ansible_collections.llmfleet.specdec.plugins.module_utils.common._version import search as search_version

SCHEMA = "llmfleet.specdec/llamacpp-build/1"
FACTS_FILE = "/etc/llmfleet-specdec/llamacpp-build.json"
RECORD_NAME = "BUILD.json"

GPU_BACKENDS = ("cuda", "hip", "vulkan")  # canonical order: the prefix suffix joins them in this order
_ALIASES = {"rocm": "hip", "hip": "hip", "cuda": "cuda", "vulkan": "vulkan", "cpu": "cpu"}
_OPTION = {"cuda": "GGML_CUDA", "hip": "GGML_HIP", "vulkan": "GGML_VULKAN"}

# Minimum cmake per backend (each backend's CMakeLists.txt; the top level needs 3.14).
CMAKE_MIN: dict[str, tuple[int, ...]] = {"cpu": (3, 14), "cuda": (3, 18), "hip": (3, 21), "vulkan": (3, 19)}
# Compute capability (as nvcc's number, 86 for 8.6) -> the CUDA toolkit it needs (ggml-cuda/CMakeLists.txt).
CUDA_MIN_FOR_ARCH: dict[int, tuple[int, ...]] = {86: (11, 1), 89: (11, 8), 90: (11, 8), 120: (12, 8), 121: (12, 9)}
CUDA_13_MIN_ARCH = 75
HIP_MIN = (6, 1)

INSTALL = {
    "cmake": "cmake (Debian/Ubuntu: apt-get install cmake)",
    "cxx": "a C++17 compiler and make (Debian/Ubuntu: apt-get install build-essential)",
    "make": "make (Debian/Ubuntu: apt-get install make)",
    "nvcc": ("the CUDA toolkit with nvcc (NVIDIA's cuda-toolkit-12-x packages, or Debian's nvidia-cuda-toolkit); "
             "set llamacpp_build_cuda_compiler when nvcc is not on PATH (e.g. /usr/local/cuda/bin/nvcc)"),
    "hip": ("ROCm >= 6.1 with HIP, hipBLAS and rocBLAS development files (AMD's rocm-hip-sdk, or the distribution's "
            "hipcc, libhipblas-dev and librocblas-dev); set llamacpp_build_rocm_path when ROCm is not in /opt/rocm"),
    "glslc": "the glslc shader compiler (Debian/Ubuntu: apt-get install glslc; or the LunarG Vulkan SDK)",
    "vulkan_headers": "the Vulkan loader headers (Debian/Ubuntu: apt-get install libvulkan-dev)",
    "spirv_headers": "SPIRV-Headers, spirv/unified1/spirv.hpp (Debian/Ubuntu: apt-get install spirv-headers)",
    "git": "git (Debian/Ubuntu: apt-get install git), or give llamacpp_build_archive instead of a git ref",
}

_VERSION_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]*\Z")
_HIP_TARGET_RE = re.compile(r"^gfx[0-9a-f]{3,5}(:[a-z+-]+)*\Z")
_CUDA_ARCH_RE = re.compile(r"^(\d{2,3})([af]?)(-real|-virtual)?\Z")
_CC_RE = re.compile(r"^(\d{1,2})\.(\d)\Z")


class BuildConfigError(SpecdecError):
    """A build request llama.cpp's cmake would refuse, or that the collection refuses to guess."""


# --------------------------------------------------------------------------- backends


def parse_backend(backend: Any) -> tuple[str, ...]:
    """'cpu' -> (); 'cuda' -> ('cuda',); 'rocm' -> ('hip',); 'cuda+vulkan', 'vulkan,cuda' or a list ->
    ('cuda', 'vulkan'). Refuses HIP together with CUDA, naming why."""
    if isinstance(backend, (list, tuple)):
        parts = [str(p) for p in backend]
    elif isinstance(backend, str):
        parts = re.split(r"[+,\s]+", backend.strip())
    else:
        raise BuildConfigError(f"llamacpp_build_backend={backend!r}: give cpu, cuda, hip (rocm), vulkan or "
                               "cuda+vulkan")
    names = set()
    for part in (p.strip().lower() for p in parts):
        if not part:
            continue
        if part not in _ALIASES:
            raise BuildConfigError(f"llamacpp_build_backend={backend!r}: {part!r} is not a llama.cpp backend the "
                                   "collection builds; give cpu, cuda, hip (rocm), vulkan or cuda+vulkan")
        names.add(_ALIASES[part])
    if not names:
        raise BuildConfigError(f"llamacpp_build_backend={backend!r} is empty; give cpu, cuda, hip, vulkan or "
                               "cuda+vulkan")
    names.discard("cpu")  # GGML_CPU is ON in every build
    if {"cuda", "hip"} <= names:
        raise BuildConfigError(
            f"llamacpp_build_backend={backend!r}: HIP and CUDA cannot coexist in one build - ggml-hip compiles "
            "ggml-cuda's own sources as HIP (ggml/src/ggml-hip/CMakeLists.txt), so both would define the same "
            "ggml_backend_cuda_* symbols in one process. To see a CUDA card and an AMD GPU from one llama-server, "
            "build cuda+vulkan (docs/build.md: -DGGML_CUDA=ON -DGGML_VULKAN=ON) and pick devices with --device")
    return tuple(b for b in GPU_BACKENDS if b in names)


def backend_slug(components: Sequence[str]) -> str:
    """The prefix suffix: cpu, cuda, hip, vulkan, cuda-vulkan."""
    return "-".join(components) if components else "cpu"


def cuda_architectures(values: Any) -> str:
    """Compute capabilities as CMAKE_CUDA_ARCHITECTURES: ['8.6', '8.9'] -> '86;89'; 'native' passes."""
    items = _as_list(values, "llamacpp_build_cuda_architectures")
    out = []
    for raw in items:
        text = format(raw, "g") if isinstance(raw, float) else str(raw).strip()
        cc = _CC_RE.match(text)
        if cc:
            out.append(f"{cc.group(1)}{cc.group(2)}")
        elif text == "native" or _CUDA_ARCH_RE.match(text):
            out.append(text)
        else:
            raise BuildConfigError(
                f"llamacpp_build_cuda_architectures: {raw!r} is not a compute capability; give it as nvidia-smi "
                "reports it (8.6 for an RTX 3090, 8.9 for an RTX 4090) or as cmake's 86 / 86-real, or 'native'")
    if "native" in out and len(out) > 1:
        raise BuildConfigError("llamacpp_build_cuda_architectures: 'native' builds for the GPUs present at build "
                               "time and cannot be combined with explicit capabilities")
    return ";".join(out)


def hip_targets(values: Any) -> str:
    """AMD GPU targets as GPU_TARGETS: ['gfx1151'] -> 'gfx1151'."""
    items = [str(v).strip() for v in _as_list(values, "llamacpp_build_gpu_targets")]
    for item in items:
        if not _HIP_TARGET_RE.match(item):
            raise BuildConfigError(
                f"llamacpp_build_gpu_targets: {item!r} is not an AMD GPU target; give the gfx name rocminfo "
                "prints (gfx1151 for Strix Halo, gfx1100 for an RX 7900 XTX)")
    return ";".join(items)


def _as_list(values: Any, name: str) -> list:
    if values is None or values == "":
        return []
    if isinstance(values, (list, tuple)):
        return list(values)
    if isinstance(values, (str, int, float)) and not isinstance(values, bool):
        return [p for p in re.split(r"[;,\s]+", str(values)) if p] if isinstance(values, str) else [values]
    raise BuildConfigError(f"{name}={values!r}: give a list")


def _arch_number(arch: str) -> int | None:
    m = _CUDA_ARCH_RE.match(arch)
    return int(m.group(1)) if m else None


# --------------------------------------------------------------------------- versions


def parse_version(text: Any) -> Version | None:
    """'3.25.1' -> Version('3.25.1'), 'cmake version 3.28.0-rc1' -> Version('3.28.0rc1') (before 3.28.0);
    None when there is no version."""
    if text is None:
        return None
    return search_version(text)


def vtext(version: Version | Sequence[int]) -> str:
    return str(version) if isinstance(version, Version) else ".".join(str(p) for p in version)


def parse_cmake_version(text: str) -> str | None:
    """``cmake --version``: 'cmake version 3.25.1'."""
    m = re.search(r"cmake version (\S+)", text)
    found = search_version(m.group(1)) if m else None
    return str(found) if found else None


def parse_nvcc_version(text: str) -> str | None:
    """``nvcc --version``: '... Cuda compilation tools, release 12.4, V12.4.131'."""
    m = re.search(r"release (\d+\.\d+)(?:, V(\d+\.\d+\.\d+))?", text)
    if not m:
        return None
    return m.group(2) or m.group(1)


def parse_hip_version(text: str) -> str | None:
    """``hipconfig --version``: '6.2.41133-dd7f95766'; ``hipcc --version``: 'HIP version: 6.2.41133-...'."""
    m = re.search(r"(?:HIP version:\s*)?(\d+\.\d+\.\d+)", text)
    return m.group(1) if m else None


def parse_glslc_version(text: str) -> str | None:
    """``glslc --version``: 'shaderc v2023.2 v2023.2' on its first line."""
    m = re.search(r"shaderc v?(\d+\.\d+)", text)
    return m.group(1) if m else None


def parse_vk_header_version(text: str) -> int | None:
    """vulkan_core.h: '#define VK_HEADER_VERSION 239'."""
    m = re.search(r"#define\s+VK_HEADER_VERSION\s+(\d+)", text)
    return int(m.group(1)) if m else None


def parse_build_number(version: Any) -> int | None:
    """The llama.cpp build number a release tag names: 'b10133' -> 10133; a commit or other name -> None."""
    m = re.fullmatch(r"b(\d+)", str(version or "").strip())
    return int(m.group(1)) if m else None


# --------------------------------------------------------------------------- toolkit rules


def _problem(component: str, problem: str) -> dict[str, str]:
    return {"component": component, "problem": problem, "install": INSTALL[component]}


def _need_version(found: Mapping[str, Any] | None, component: str, label: str, minimum: tuple[int, ...] | None,
                  why: str) -> list[dict[str, str]]:
    if not found or not found.get("path"):
        return [_problem(component, f"{label} not found")]
    have = parse_version(found.get("version"))
    if minimum is None:
        return []
    if have is None:
        return [_problem(component, f"{label} at {found['path']} did not report a version")]
    if have < minimum:
        return [_problem(component, f"{label} {vtext(have)} at {found['path']} is older than {vtext(minimum)}, "
                                    f"which {why} needs")]
    return []


def cuda_toolkit_problems(nvcc: Mapping[str, Any] | None, archs: str) -> list[dict[str, str]]:
    """The CUDA toolkit against the compute capabilities asked for."""
    problems = _need_version(nvcc, "nvcc", "nvcc", None, "")
    if problems:
        return problems
    have = parse_version(nvcc.get("version"))
    if have is None:
        return [_problem("nvcc", f"nvcc at {nvcc['path']} did not report a CUDA release")]
    for arch in (a for a in archs.split(";") if a and a != "native"):
        number = _arch_number(arch)
        need = CUDA_MIN_FOR_ARCH.get(number or 0)
        if need and have < need:
            problems.append(_problem("nvcc", f"CUDA {vtext(have)} at {nvcc['path']} cannot build compute capability "
                                             f"{number // 10}.{number % 10}: it needs CUDA {vtext(need)} or later "
                                             "(ggml/src/ggml-cuda/CMakeLists.txt)"))
        if number is not None and number < CUDA_13_MIN_ARCH and have >= (13,):
            problems.append(_problem("nvcc", f"CUDA {vtext(have)} no longer builds compute capability "
                                             f"{number // 10}.{number % 10} (llama.cpp lists it only for CUDA < 13); "
                                             "install a CUDA 12 toolkit for this card"))
    return problems


def toolkit_problems(backend: Any, found: Mapping[str, Any], options: Mapping[str, Any] | None = None,
                     source_kind: str = "archive") -> list[dict[str, Any]]:
    """What is missing or too old on the host to build ``backend``; [] when the build can start.

    ``found`` is what module llamacpp_toolchain probed: ``cmake``, ``cxx``, ``make``, ``git``, ``nvcc``,
    ``hip``, ``glslc``, ``vulkan_headers``, ``spirv_headers`` (each ``{"path", "version"}`` or None).
    """
    options = options or {}
    components = parse_backend(backend)
    cmake_min = max(CMAKE_MIN[c] for c in ("cpu", *components))
    users = ", ".join(c for c in ("cpu", *components) if CMAKE_MIN[c] == cmake_min)
    problems = _need_version(found.get("cmake"), "cmake", "cmake", cmake_min, f"the {users} backend")
    problems += _need_version(found.get("cxx"), "cxx", "a C++ compiler (c++, g++ or clang++)", None, "")
    problems += _need_version(found.get("make"), "make", "make", None, "")
    if source_kind == "git":
        problems += _need_version(found.get("git"), "git", "git", None, "")
    if "cuda" in components:
        problems += cuda_toolkit_problems(found.get("nvcc"), cuda_architectures(options.get("cuda_architectures")))
    if "hip" in components:
        problems += _need_version(found.get("hip"), "hip", "ROCm/HIP (hipconfig)", HIP_MIN,
                                  "ggml-hip ('At least ROCM/HIP V6.1 is required')")
    if "vulkan" in components:
        problems += _need_version(found.get("glslc"), "glslc", "glslc", None, "")
        problems += _need_version(found.get("vulkan_headers"), "vulkan_headers", "vulkan/vulkan.h", None, "")
        problems += _need_version(found.get("spirv_headers"), "spirv_headers", "spirv/unified1/spirv.hpp", None, "")
    return problems


def toolkit_message(backend: Any, problems: Sequence[Mapping[str, Any]], host: str = "") -> str:
    """One error naming every missing piece and what to install; nothing was built."""
    where = f" on {host}" if host else ""
    lines = [f"{p['problem']} - install {p['install']}" for p in problems]
    return (f"llamacpp_build: cannot build the {backend_slug(parse_backend(backend))} backend{where}: "
            + "; ".join(lines) + ". Nothing was built and 'current' was not touched.")


# --------------------------------------------------------------------------- the plan


def _bool(value: Any) -> bool:
    if isinstance(value, str):
        return value.strip().lower() in ("1", "true", "yes", "on")
    return bool(value)


def _onoff(value: Any) -> str:
    return "ON" if _bool(value) else "OFF"


def check_version_name(version: Any) -> str:
    text = str(version or "").strip()
    if not _VERSION_RE.match(text) or text in ("current",) or len(text) > 64:
        raise BuildConfigError(
            f"llamacpp_build_version={version!r}: give the build as a release tag (b10133), a commit, or a short "
            "name of letters, digits, '.', '_', '+' and '-' (it names the install prefix; 'current' is the link)")
    return text


def source_identity(source: Mapping[str, Any]) -> dict[str, Any]:
    """What the fingerprint hashes about the source (never a local path that differs between hosts)."""
    kind = source.get("kind")
    if kind == "git":
        return {"kind": "git", "repo": source.get("repo"), "ref": source.get("ref")}
    if kind == "archive":
        name = str(source.get("archive") or "").rstrip("/").rsplit("/", 1)[-1]
        return {"kind": "archive", "name": name, "checksum": source.get("checksum") or None,
                "subdir": source.get("subdir") or ""}
    if kind == "prebuilt":
        name = str(source.get("prebuilt") or "").rstrip("/").rsplit("/", 1)[-1]
        return {"kind": "prebuilt", "name": name, "checksum": source.get("checksum") or None}
    raise BuildConfigError(f"llamacpp_build_source={kind!r}: give git, archive or prebuilt")


def cmake_defines(components: Sequence[str], options: Mapping[str, Any]) -> list[str]:
    """The -D arguments, in a fixed order (the rendered invocation is compared in tests)."""
    defines = [
        "-DCMAKE_BUILD_TYPE=Release",
        f"-DBUILD_SHARED_LIBS={_onoff(options.get('shared_libs', False))}",
        f"-DGGML_NATIVE={_onoff(options.get('native', False))}",
        f"-DGGML_CCACHE={_onoff(options.get('ccache', True))}",
        "-DLLAMA_BUILD_TESTS=OFF",
        "-DLLAMA_BUILD_EXAMPLES=OFF",
        f"-DLLAMA_OPENSSL={_onoff(options.get('openssl', False))}",
        "-DLLAMA_USE_PREBUILT_UI=OFF",
    ]
    number = options.get("build_number")
    if number is not None and number != "":
        defines.append(f"-DLLAMA_BUILD_NUMBER={int(number)}")
    commit = str(options.get("commit") or "").strip()
    if commit:
        if not re.fullmatch(r"[0-9a-f]{7,40}", commit):
            raise BuildConfigError(f"llamacpp_build_commit={commit!r}: give a git commit (7-40 hex digits)")
        defines.append(f"-DLLAMA_BUILD_COMMIT={commit[:9]}")
    for component in GPU_BACKENDS:
        if component in components:
            defines.append(f"-D{_OPTION[component]}=ON")
    if "cuda" in components:
        archs = cuda_architectures(options.get("cuda_architectures"))
        if not archs:
            raise BuildConfigError(
                "llamacpp_build_cuda_architectures is empty for a CUDA build: give the card's compute capability "
                "(8.6 for an RTX 3090) so the build is the same on every host of that family; 'native' builds for "
                "whatever GPU the build host has")
        defines.append(f"-DCMAKE_CUDA_ARCHITECTURES={archs}")
        if options.get("cuda_compiler"):
            defines.append(f"-DCMAKE_CUDA_COMPILER={options['cuda_compiler']}")
    if "hip" in components:
        targets = hip_targets(options.get("gpu_targets"))
        if not targets:
            raise BuildConfigError(
                "llamacpp_build_gpu_targets is empty for a HIP build: give the gfx target (gfx1151 for Strix Halo); "
                "without it ggml-hip builds for whatever GPUs the build host has")
        defines.append(f"-DGPU_TARGETS={targets}")
    extra = [str(a) for a in options.get("cmake_args") or []]
    for arg in extra:
        if not arg.startswith("-"):
            raise BuildConfigError(f"llamacpp_build_cmake_args: {arg!r} is not a cmake option; give -DNAME=VALUE")
        for component in GPU_BACKENDS:
            if re.match(rf"-D{_OPTION[component]}(:BOOL)?=(ON|1|TRUE|YES)\Z", arg, re.I) and component not in components:
                raise BuildConfigError(f"llamacpp_build_cmake_args: {arg} turns on a backend; set "
                                       "llamacpp_build_backend instead, so the prefix name and the record say so")
    return defines + extra


CCACHE_LOCALE = ("LANG", "LC_ALL", "LC_CTYPE", "LC_MESSAGES")


def build_env(components: Sequence[str], options: Mapping[str, Any]) -> dict[str, str]:
    """Environment for cmake: HIPCXX/HIP_PATH for HIP (docs/build.md), the ccache directory when given."""
    env: dict[str, str] = {}
    if "hip" in components:
        rocm = str(options.get("rocm_path") or "/opt/rocm").rstrip("/")
        env["HIP_PATH"] = rocm
        env["ROCM_PATH"] = rocm
        env["HIPCXX"] = str(options.get("hip_clang") or f"{rocm}/llvm/bin/clang")
    if options.get("vulkan_sdk"):
        env["VULKAN_SDK"] = str(options["vulkan_sdk"])
    if options.get("ccache_dir") and _bool(options.get("ccache", True)):
        env["CCACHE_DIR"] = str(options["ccache_dir"])
        env["CCACHE_BASEDIR"] = str(options.get("work_dir") or "/")
        # ccache hashes these four variables' values (they change the compiler's messages), so a cache shared
        # between hosts, or filled by another build of the same tree, only hits when they are the same everywhere.
        env.update({name: "C" for name in CCACHE_LOCALE})
    return env


def fingerprint(payload: Mapping[str, Any]) -> str:
    return hashlib.sha256(json.dumps(payload, sort_keys=True, separators=(",", ":")).encode()).hexdigest()[:16]


def plan(options: Mapping[str, Any]) -> dict[str, Any]:
    """Everything the role needs for one build: names, paths, the cmake invocations and the fingerprint.

    options: version, backend, root, work_dir, source ({kind: git|archive|prebuilt, ...}), targets, jobs,
    cuda_architectures, gpu_targets, native, shared_libs, openssl, ccache, ccache_dir, build_number,
    commit, cmake_args, cuda_compiler, rocm_path, hip_clang, vulkan_sdk.
    """
    version = check_version_name(options.get("version"))
    components = parse_backend(options.get("backend", "cpu"))
    slug = backend_slug(components)
    root = str(options.get("root") or "/opt/llama.cpp").rstrip("/")
    work = str(options.get("work_dir") or "/var/cache/llmfleet-specdec/llamacpp-build").rstrip("/")
    source = dict(options.get("source") or {})
    identity = source_identity(source)
    number = options.get("build_number")
    if number in (None, ""):
        number = parse_build_number(version)
    opts = dict(options, build_number=number)
    defines = cmake_defines(components, opts)
    targets = [str(t) for t in (options.get("targets") or ["llama-server"])]
    name = f"{version}-{slug}"
    build_dir = f"{work}/build-{name}"
    src_dir = f"{work}/src/{_src_key(identity, version)}"
    cmake_src = src_dir + ("/" + str(source.get("subdir")).strip("/") if source.get("subdir") else "")
    try:
        jobs = int(options.get("jobs") or 0)
    except (TypeError, ValueError):
        raise BuildConfigError(f"llamacpp_build_jobs={options.get('jobs')!r}: give a number (0: one per CPU)") from None
    build_argv = ["cmake", "--build", build_dir, "--config", "Release", "--target", *targets]
    if jobs > 0:
        build_argv += ["-j", str(jobs)]
    env = build_env(components, opts)
    return {
        "version": version,
        "build_number": number,
        "commit": str(options.get("commit") or "") or None,
        "backend": slug,
        "backends": ["cpu", *list(components)],
        "name": name,
        "root": root,
        "prefix": f"{root}/{name}",
        "current": f"{root}/current",
        "staging": f"{root}/.staging-{name}",
        "work_dir": work,
        "src_dir": src_dir,
        "cmake_src": cmake_src,
        "build_dir": build_dir,
        "log": f"{work}/build-{name}.log",
        "targets": targets,
        "defines": defines,
        "configure": ["cmake", "-S", cmake_src, "-B", build_dir, *defines],
        "build": build_argv,
        "env": env,
        "source": identity,
        # Locations (HIPCXX, ccache) are left out: the same inputs built anywhere give the same fingerprint.
        "fingerprint": fingerprint({"source": identity, "version": version, "defines": defines, "targets": targets}),
    }


def _src_key(identity: Mapping[str, Any], version: str) -> str:
    """One extracted tree per source: an archive is unpacked once whatever the version is called."""
    if identity["kind"] == "git":
        return f"git-{version}"
    base = re.sub(r"\.(tar\.gz|tgz|tar\.xz|txz|tar\.bz2|tbz2|tar|zip)$", "", str(identity.get("name") or "src"))
    return re.sub(r"[^A-Za-z0-9._+-]", "_", base) or "src"


def build_script(p: Mapping[str, Any]) -> str:
    """The shell script that configures, builds and stages one build; its log is p['log']."""
    def line(argv: Iterable[Any]) -> str:
        return " ".join(shlex.quote(str(a)) for a in argv)

    exports = "".join(f"export {k}={shlex.quote(v)}\n" for k, v in sorted(p["env"].items()))
    copies = "".join(f"cp {shlex.quote(p['build_dir'] + '/bin/' + t)} {shlex.quote(p['staging'] + '/bin/' + t)}\n"
                     for t in p["targets"])
    return (
        "#!/bin/bash\n"
        f"# Written by llmfleet.specdec.llamacpp_build: builds llama.cpp {p['version']} for {p['backend']}.\n"
        "# Configures and builds in the work tree, then stages the binaries; the role moves the staged tree\n"
        "# into place and switches 'current' only after this script succeeded and the binary ran.\n"
        "set -euo pipefail\n"
        f"{exports}"
        + ("" if "-j" in p["build"] else 'export CMAKE_BUILD_PARALLEL_LEVEL="${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)}"\n') +
        f"{line(p['configure'])}\n"
        f"{line(p['build'])}\n"
        f"rm -rf {shlex.quote(p['staging'])}\n"
        f"mkdir -p {shlex.quote(p['staging'] + '/bin')}\n"
        f"{copies}"
    )


# --------------------------------------------------------------------------- the record and retention


def build_record(p: Mapping[str, Any], *, commit: str | None = None, toolchain: Mapping[str, Any] | None = None,
                 built_at: str | None = None, host: str | None = None) -> dict[str, Any]:
    """What was built: written to <prefix>/BUILD.json and, for 'current', to FACTS_FILE."""
    number = p.get("build_number")
    return {
        "schema": SCHEMA,
        "version": p["version"],
        "build": f"b{number}" if number is not None else None,
        "build_number": number,
        "commit": commit or p.get("commit"),
        "backend": p["backend"],
        "backends": list(p["backends"]),
        "cmake_defines": list(p["defines"]),
        "targets": list(p["targets"]),
        "source": dict(p["source"]),
        "fingerprint": p["fingerprint"],
        "toolchain": {k: (v or {}).get("version") for k, v in (toolchain or {}).items() if v},
        "built_at": built_at,
        "built_on": host,
    }


def prune_plan(installed: Iterable[Mapping[str, Any]], current: str | None, keep: int,
               protect: Iterable[str] = ()) -> list[str]:
    """Names of installed builds to remove: all but the ``keep`` most recently installed, never 'current'
    and never one in ``protect``. ``installed``: [{name, installed_at}] (installed_at sorts as text)."""
    keep = int(keep)
    if keep < 1:
        raise BuildConfigError(f"llamacpp_build_keep={keep}: keep at least 1 build (the one 'current' points at)")
    protected = set(protect) | ({current} if current else set())
    ordered = sorted(installed, key=lambda b: (str(b.get("installed_at") or ""), str(b["name"])), reverse=True)
    kept = [b["name"] for b in ordered if b["name"] in protected]
    remove = []
    for build in ordered:
        if build["name"] in protected:
            continue
        if len(kept) < keep:
            kept.append(build["name"])
        else:
            remove.append(build["name"])
    return remove
