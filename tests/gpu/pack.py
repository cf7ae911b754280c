# Prepares what the GPU proof needs on a machine with no network: the trimmed llama.cpp tree and two wheels.
"""The GPU proof's pack: everything ``tests/gpu/gpu_proof.py`` needs on the GPU machine beside the repository.

At most 64 MiB travel to that machine and nothing can be fetched there, so this writes, into one folder that
git ignores (default ``.gpu-proof/`` in the repository root):

- ``llama.cpp/``: the pinned llama-cpp-python sdist's ``vendor/llama.cpp``, trimmed to what building
  ``llama-server`` with the CPU and CUDA backends reads (about 31 MB of the sdist's 217 MB unpacked): no
  models, docs, examples, tests, benches, Python conversion scripts, other ggml backends or other tools.
  ``tools/CMakeLists.txt`` is the one file changed: its ``add_subdirectory`` lines for the tools left out are
  commented out, so cmake configures without them (``keep`` below says what stays; ``MANIFEST.json`` lists
  what was left out and the change).
- ``wheels/``: the pure-Python wheels the GPU machine lacks, at the versions the project pins: ``gguf`` (the
  model writer, ``tests/testbed/models.py``; its own needs numpy, PyYAML, tqdm and requests are installed
  there) and ``ansible-core`` (``ansible.module_utils``, so the collection's modules ``gpu_info`` and
  ``kv_budget`` run there as Ansible runs them on a host: the module file with its arguments).

Usage: ``python tests/gpu/pack.py [--sdist PATH] [--dest DIR] [--no-wheels]``; ``make gpu-proof-pack`` runs it
and then builds llama-server on this machine's CPU from the trimmed tree (the proof that nothing it needs was
cut), with the test bed's defines into the shared compiler cache.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))

from testbed.pinned import LLAMA_CPP_PYTHON_VERSION  # noqa: E402  (the one home: _llamacpp.PINNED)

DEFAULT_DEST = ROOT / ".gpu-proof"
VENDOR = "vendor/llama.cpp/"
# What travels: the top-level entries cmake reads when it configures the whole project (LLAMA_BUILD_APP and the
# tools are on by default, so app/ and licenses/ are read too) and builds llama-server.
TOP = {"CMakeLists.txt", "LICENSE", "cmake", "include", "src", "common", "vendor", "licenses", "app", "ggml",
       "tools"}
# ggml's backends: the CPU one is always built, CUDA is the one the proof builds; every other backend's
# folder is read only when its GGML_<NAME> option is on (ggml/src/CMakeLists.txt: ggml_add_backend).
GGML_BACKENDS = {"ggml-cpu", "ggml-cuda"}
# tools/: llama-server (server), the mtmd library it links, and llama-ui (the web UI library it links, here
# with no assets: LLAMA_USE_PREBUILT_UI=OFF and no npm build). Every other tool is left out.
TOOLS = {"CMakeLists.txt", "server", "mtmd", "ui"}
# tools/ui holds the web UI's sources (a node project); the C++ build reads only these.
UI_FILES = {"CMakeLists.txt", "ui.h.in", "ui.cpp.in", "sources.cmake"}
# scripts/: only the cmake script tools/ui/CMakeLists.txt runs.
SCRIPTS = {"ui-assets.cmake"}
_DROP_PARTS = {"tests", "bench", "legacy-models"}
_DROP_SUFFIX = (".md", ".jpeg", ".jpg", ".png", ".mp3", ".mp4", ".gguf")


def keep(rel: str) -> bool:
    """Does the file at ``rel`` (relative to vendor/llama.cpp, '/'-separated) travel?"""
    parts = rel.split("/")
    top = parts[0]
    if top == "scripts":
        return len(parts) == 2 and parts[1] in SCRIPTS
    if top not in TOP:
        return False
    if len(parts) == 1:
        return top in ("CMakeLists.txt", "LICENSE")
    if any(p in _DROP_PARTS for p in parts[1:]) or parts[-1].endswith(_DROP_SUFFIX):
        return False
    if top == "ggml" and len(parts) > 3 and parts[1] == "src" and parts[2].startswith("ggml-"):
        return parts[2] in GGML_BACKENDS
    if top == "tools":
        if parts[1] not in TOOLS:
            return False
        if parts[1] == "ui":
            return len(parts) == 3 and parts[2] in UI_FILES
        return not (parts[1] == "mtmd" and parts[2] == "requirements.txt") and parts[-1] != "tests.sh"
    return True


def patch_tools_cmake(text: str, present: set[str]) -> tuple[str, list[str]]:
    """tools/CMakeLists.txt with the add_subdirectory lines of absent tools commented out."""
    dropped: list[str] = []

    def repl(m: re.Match[str]) -> str:
        name = m.group(2)
        if name in present:
            return m.group(0)
        dropped.append(name)
        return f"{m.group(1)}# trimmed for llama-server only: add_subdirectory({name})"

    out = re.sub(r"^([ \t]*)add_subdirectory\(([\w.-]+)\)", repl, text, flags=re.M)
    return out, dropped


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def trim(sdist: Path, dest: Path) -> dict:
    """Writes dest/llama.cpp from the sdist (replacing an earlier one); returns the manifest."""
    tree = dest / "llama.cpp"
    tmp = dest / "llama.cpp.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    kept_bytes = kept = 0
    left_out: dict[str, int] = {}
    with tarfile.open(sdist, "r:gz") as tar:
        for member in tar:
            name = member.name.split("/", 1)[1] if "/" in member.name else ""
            if not name.startswith(VENDOR) or not member.isfile():
                continue
            rel = name[len(VENDOR):]
            if not keep(rel):
                key = "/".join(rel.split("/")[:2]) if rel.split("/")[0] in ("ggml", "tools") else rel.split("/")[0]
                left_out[key] = left_out.get(key, 0) + member.size
                continue
            if ".." in rel.split("/"):
                raise SystemExit(f"{sdist}: member {member.name!r} leaves the tree")
            out = tmp / rel
            out.parent.mkdir(parents=True, exist_ok=True)
            with tar.extractfile(member) as src, open(out, "wb") as dst:  # type: ignore[union-attr]
                shutil.copyfileobj(src, dst)
            os.chmod(out, 0o755 if member.mode & 0o111 else 0o644)
            kept += 1
            kept_bytes += member.size
    tools_cmake = tmp / "tools" / "CMakeLists.txt"
    present = {p.name for p in (tmp / "tools").iterdir() if p.is_dir()}
    patched, dropped = patch_tools_cmake(tools_cmake.read_text(), present)
    tools_cmake.write_text(patched)
    shutil.rmtree(tree, ignore_errors=True)
    tmp.rename(tree)
    return {
        "sdist": sdist.name, "sdist_sha256": sha256(sdist), "llama_cpp_python": LLAMA_CPP_PYTHON_VERSION,
        "files": kept, "bytes": kept_bytes,
        "left_out_bytes": dict(sorted(left_out.items(), key=lambda kv: -kv[1])),
        "tools_cmake_dropped": dropped,
    }


def pinned_versions() -> dict[str, str]:
    """gguf and ansible-core as requirements-test.txt / constraints.txt pin them."""
    found: dict[str, str] = {}
    for req in ("constraints.txt", "requirements-test.txt"):
        for line in (ROOT / req).read_text().splitlines():
            m = re.match(r"^(gguf|ansible-core)==([\w.]+)\s*$", line.strip())
            if m:
                found[m.group(1)] = m.group(2)
    missing = {"gguf", "ansible-core"} - set(found)
    if missing:
        raise SystemExit(f"no pin for {', '.join(sorted(missing))} in constraints.txt / requirements-test.txt")
    return found


def wheels(dest: Path) -> list[str]:
    """Downloads the two pure-Python wheels (no dependencies) into dest/wheels with this Python's pip."""
    folder = dest / "wheels"
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    specs = [f"{name}=={version}" for name, version in sorted(pinned_versions().items())]
    subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:",
                    "--dest", str(folder), *specs], check=True)
    names = sorted(p.name for p in folder.glob("*.whl"))
    if len(names) != len(specs) or not all(n.endswith("-py3-none-any.whl") for n in names):
        raise SystemExit(f"expected {len(specs)} pure-Python wheels in {folder}, got {names}")
    return names


def folder_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def main(argv: list[str]) -> int:
    cache = Path(os.environ.get("LLMFLEET_CACHE") or Path.home() / ".cache" / "llmfleet-specdec")
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    ap.add_argument("--sdist", type=Path, default=cache / f"llama_cpp_python-{LLAMA_CPP_PYTHON_VERSION}.tar.gz")
    ap.add_argument("--dest", type=Path, default=DEFAULT_DEST)
    ap.add_argument("--no-wheels", action="store_true", help="trim only")
    args = ap.parse_args(argv)
    if not args.sdist.is_file():
        print(f"--sdist {args.sdist}: no such file; run `make llama-server` first (it downloads the sdist)",
              file=sys.stderr)
        return 2
    args.dest.mkdir(parents=True, exist_ok=True)
    manifest = trim(args.sdist, args.dest)
    if not args.no_wheels:
        manifest["wheels"] = wheels(args.dest)
    manifest["pack_bytes"] = folder_bytes(args.dest)
    (args.dest / "MANIFEST.json").write_text(json.dumps(manifest, indent=2) + "\n")
    print(f"{args.dest}: llama.cpp trimmed to {manifest['files']} files, {manifest['bytes'] / 1e6:.1f} MB; "
          f"pack {manifest['pack_bytes'] / 2**20:.1f} MiB; tools left out of tools/CMakeLists.txt: "
          f"{', '.join(manifest['tools_cmake_dropped'])}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
