# The GPU path proven on a real GPU in one command (issue 26), and the same script on the CPU so that it cannot rot.
"""The GPU proof: build, models, gpu_info, KV prediction against the real allocation, a short A/B, one summary.

``--backend cuda`` (on a machine with an NVIDIA GPU, nvcc, CMake and Python; see docs/testing.md, "The GPU proof"):

1. ``build``: llama-server built with CUDA for the device's compute capability only (``nvidia-smi
   --query-gpu=compute_cap``), with the cmake defines role ``llamacpp_build`` computes: its option mapping
   (``roles/llamacpp_build/vars/main.yml``) over its defaults, through ``_build.plan`` (see ``role_build_options``),
   from the trimmed tree that ``tests/gpu/pack.py`` prepared. It runs in the background while 2 and 3 run.
2. ``models``: a target of a realistic shape (Qwen2.5-1.5B's: 28 layers, hidden 1536, 12 query heads over 2 KV
   heads, FFN 8960; 1.3 billion parameters, F16) and its exact one-layer prefix draft, written with the test bed's
   model writer (``tests/testbed/models.py``, cheap deterministic weights): the target's layers past the first
   add nothing to the residual, so the draft predicts it exactly and draft-simple should win.
3. ``gpu_info``: the collection's module, run as Ansible runs it on a host, on the real ``nvidia-smi``.
4. ``kv``: for a few ``-c`` / ``-np`` / cache types, module ``kv_budget`` is given the very command line the
   server then starts with (and gpu_info's devices); its predicted ``llama_kv_cache`` lines, context sizes and
   per-device KV buffers are compared with what the real server prints at load, for the target and the draft.
5. ``ab``: a short A/B, baseline against draft-simple at K 4, rounds in rotated order, each config on its own
   server start (started directly, as ``tests/testbed/server.py`` does, no systemd), measured with spec_bench's
   code (``_endpoint.run_bench``) and judged by ``plugin_utils/verdicts/_judge.py``.
6. ``summary.json`` and ``summary.md`` in ``--out`` (default ``$OUT``), rewritten after every step, so a run
   stopped at its time limit still leaves what it measured. The run keeps to ``--budget-s`` (default 555 s):
   a build still running when too little time is left for 4 and 5 is stopped and the summary says so.

``--backend cpu`` is the same script with tiny shapes and the test bed's llama-server (``--llama-server``; or,
without it, a CPU build from the trimmed tree with the test bed's defines into the shared compiler cache): what
``make test`` runs (tests/integration/test_gpu_proof_cpu.py) and ``make gpu-proof-pack`` builds with.

Exit status: 0 when every step ran, every KV prediction matched the server's lines and the A/B's speculative
config was engaged and lossless; 1 otherwise (the summary says what and where); 2 for bad arguments.
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from decimal import Decimal
from pathlib import Path
from typing import Any, Callable

import yaml

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = "llmfleet.specdec/gpu-proof/1"
DEFAULT_PACK = ROOT / ".gpu-proof"
ROLE = ROOT / "roles" / "llamacpp_build"
MIB = 1024 * 1024
# Below this many cells x streams a 2-decimal MiB print cannot pin a byte count (see _pinned_row_sum).
EXACT_FROM = math.ceil(0.01 * MIB)

# The model shapes: Qwen2.5-1.5B's on the GPU; on the CPU a tiny one with the same 4:1 grouping of query heads.
SHAPES: dict[str, dict[str, Any]] = {
    "cuda": {"label": "Qwen2.5-1.5B shape", "n_layer": 28, "n_embd": 1536, "n_head": 12, "n_head_kv": 2,
             "n_ff": 8960, "n_ctx_train": 32768},
    "cpu": {"label": "tiny", "n_layer": 4, "n_embd": 256, "n_head": 8, "n_head_kv": 2, "n_ff": 512,
            "n_ctx_train": 32768},
}
# The KV cases: (name, -c, -np, more flags); the server always gets the draft with --spec-type draft-simple.
KV_CASES: list[tuple[str, int, int, list[str]]] = [
    ("c4096 np1 f16", 4096, 1, []),
    ("c32768 np4 f16", 32768, 4, []),
    ("c16384 np2 q8_0, draft q4_0, fa on", 16384, 2,
     ["-fa", "on", "-ctk", "q8_0", "-ctv", "q8_0", "-ctkd", "q4_0", "-ctvd", "q4_0"]),
    ("c8192 np auto (4 slots, unified) q4_0, fa on", 8192, -1, ["-fa", "on", "-ctk", "q4_0", "-ctv", "q4_0"]),
    ("c32768 np1 bf16, fa off (V transposed)", 32768, 1, ["-fa", "off", "-ctk", "bf16", "-ctv", "bf16"]),
]
# The A/B: rounds, shapes and their sizes per backend.
AB: dict[str, dict[str, Any]] = {
    "cuda": {"rounds": 3, "prompts": 2, "shapes": ["prose", "structured"],
             "sizes": {"prose": {"chars": 4000, "n_predict": 128}, "structured": {"chars": 2000, "n_predict": 128}}},
    "cpu": {"rounds": 2, "prompts": 2, "shapes": ["prose"],
            "sizes": {"prose": {"chars": 300, "n_predict": 24}}},
}
K = 4
# Seconds kept for the KV cases and the A/B after the build, per backend.
RESERVE_S = {"cuda": 120, "cpu": 60}

_KV_LINE = re.compile(r"(llama_kv_cache: size = .*?)\s*$")
_SIZES = re.compile(r"\(\s*(\d+) cells,\s*(\d+) layers,\s*(\d+)/(\d+) seqs\), K \((\w+)\):\s*([\d.]+) MiB, "
                    r"V \((\w+)\):\s*([\d.]+) MiB")
_KV_BUF = re.compile(r"llama_kv_cache:\s+(\S+) KV buffer size =\s+([\d.]+) MiB")
_CTX = re.compile(r"llama_context: (n_seq_max|n_ctx|n_ctx_seq)\s+= (\d+)")
_MODEL_BUF = re.compile(r"load_tensors:\s+(\S+) model buffer size =\s+([\d.]+) MiB")
_FREE = re.compile(r"using device (\S+) \((.*?)\).*?- (\d+) MiB free")


# ---------------------------------------------------------------------------------------------------- small tools


def now() -> str:
    return dt.datetime.now(dt.timezone.utc).replace(microsecond=0).isoformat()


def run_text(argv: list[str], timeout: float = 60) -> str:
    """stdout+stderr of a short command, or the reason it could not run."""
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"({argv[0]}: {exc})"
    return (done.stdout + done.stderr).strip()


def find_nvcc() -> str | None:
    """nvcc on PATH, else where the CUDA toolkit installs it."""
    found = shutil.which("nvcc")
    if found:
        return found
    for candidate in ("/usr/local/cuda/bin/nvcc", *sorted(map(str, Path("/usr/local").glob("cuda-*/bin/nvcc")))):
        if os.access(candidate, os.X_OK):
            return candidate
    return None


def parse_compute_caps(text: str) -> list[str]:
    """``nvidia-smi --query-gpu=compute_cap --format=csv,noheader``: one '9.0' per GPU -> the distinct ones."""
    caps: list[str] = []
    for line in text.splitlines():
        line = line.strip()
        if not line:
            continue
        if not re.fullmatch(r"\d{1,2}\.\d", line):
            raise ValueError(f"nvidia-smi printed {line!r} where a compute capability (such as 9.0) belongs")
        if line not in caps:
            caps.append(line)
    if not caps:
        raise ValueError("nvidia-smi listed no GPU")
    return caps


def collection_path(work: Path) -> Path:
    """A folder holding ansible_collections/llmfleet/specdec -> this repository, for sys.path and PYTHONPATH."""
    base = work / "collections"
    link = base / "ansible_collections" / "llmfleet" / "specdec"
    if not link.exists():
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(ROOT)
    return base


def install_wheels(pack: Path, work: Path) -> Path | None:
    """gguf and ansible-core from the pack's wheels into work/site when this Python lacks them; the folder or None."""
    missing = [m for m in ("gguf", "ansible") if not _importable(m)]
    if not missing:
        return None
    wheels = sorted((pack / "wheels").glob("*.whl"))
    if not wheels:
        raise SystemExit(f"this python lacks {', '.join(missing)} and {pack / 'wheels'} holds no wheels: run "
                         "`make gpu-proof-pack` where pip works and carry the pack folder")
    site = work / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-index", "--no-deps", "--no-compile",
                    "--disable-pip-version-check", "--target", str(site), *map(str, wheels)], check=True)
    return site


def _importable(name: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(name) is not None


# ---------------------------------------------------------------------------------------------------- 1. build


def _role_yaml(rel: str) -> dict[str, Any]:
    return yaml.safe_load((ROLE / rel).read_text())


def role_build_options(overrides: dict[str, Any]) -> dict[str, Any]:
    """The options role llamacpp_build hands to ``_build.plan``: its ``llamacpp_build_options`` mapping
    (vars/main.yml) over its defaults (defaults/main.yml), with ``overrides`` (role variables) on top.

    Every value of that mapping is a plain ``{{ llamacpp_build_x }}`` reference, resolved here as Ansible
    would; the one expression in it (the source's checksum) names no cmake define and is left empty."""
    values = {**_role_yaml("defaults/main.yml"), **overrides}
    mapping = _role_yaml("vars/main.yml")["llamacpp_build_options"]

    def render(value: Any, depth: int = 0) -> Any:
        if isinstance(value, dict):
            return {k: render(v, depth) for k, v in value.items()}
        if isinstance(value, list):
            return [render(v, depth) for v in value]
        if isinstance(value, str) and "{{" in value:
            m = re.fullmatch(r"\{\{\s*(\w+)\s*\}\}", value.strip())
            if m is None or depth > 10:
                return ""
            if m.group(1) not in values:
                raise KeyError(f"{ROLE}/vars/main.yml names {m.group(1)}, which the role's defaults do not set")
            return render(values[m.group(1)], depth + 1)
        return value

    return render(mapping)


def build_plan(backend: str, work: Path, *, cuda_architectures: list[str] | None = None,
               cuda_compiler: str | None = None, jobs: int = 0, ccache_dir: str | None = None) -> dict[str, Any]:
    """``_build.plan`` for this machine, from the role's own options (so the defines cannot drift from it)."""
    from ansible_collections.llmfleet.specdec.plugins.module_utils.build import _build
    from testbed.pinned import LLAMA_CPP_PYTHON_VERSION

    version = LLAMA_CPP_PYTHON_VERSION

    options = role_build_options({
        "llamacpp_build_version": f"sdist-{version}",
        "llamacpp_build_backend": backend,
        "llamacpp_build_root": str(work / "opt"),
        "llamacpp_build_work_dir": str(work),
        "llamacpp_build_source": "archive",
        "llamacpp_build_archive": f"llama_cpp_python-{version}.tar.gz",
        "llamacpp_build_archive_subdir": "vendor/llama.cpp",
        "llamacpp_build_cuda_architectures": list(cuda_architectures or []),
        "llamacpp_build_cuda_compiler": cuda_compiler or "",
        "llamacpp_build_jobs": jobs,
        "llamacpp_build_ccache_dir": ccache_dir or "",
    })
    return _build.plan(options)


def configure_argv(plan: dict[str, Any], generator: str | None) -> list[str]:
    """The role's configure command, with a cmake generator (not a define) when one is asked for."""
    argv = list(plan["configure"])
    return argv + (["-G", generator] if generator else [])


class Build:
    """One llama-server build in the background: copy the tree into the plan's layout, configure, build."""

    def __init__(self, plan: dict[str, Any], source: Path, generator: str | None, log: Path,
                 path_first: str | None = None) -> None:
        self.plan = plan
        self.path_first = path_first
        self.source = source
        self.generator = generator
        self.log = log
        self.proc: subprocess.Popen[bytes] | None = None
        self.started = 0.0
        self.phase_file = log.with_suffix(".phases")

    def start(self) -> None:
        dst = Path(self.plan["cmake_src"])
        if dst.exists():
            shutil.rmtree(dst)
        shutil.copytree(self.source, dst, symlinks=True)
        cache = Path(self.plan["build_dir"]) / "CMakeCache.txt"
        if cache.is_file():  # cmake refuses a build folder configured with another generator
            m = re.search(r"^CMAKE_GENERATOR:INTERNAL=(.*)$", cache.read_text(errors="replace"), re.M)
            if m and m.group(1).strip() != (self.generator or "Unix Makefiles"):
                shutil.rmtree(self.plan["build_dir"])
        env_lines = "".join(f"export {k}={_sh(v)}\n" for k, v in sorted(self.plan["env"].items()))
        if self.path_first:  # find_package(CUDAToolkit) runs before enable_language(CUDA) and looks on PATH
            env_lines += f'export PATH={_sh(self.path_first)}:"$PATH"\n'
        parallel = "" if "-j" in self.plan["build"] else 'export CMAKE_BUILD_PARALLEL_LEVEL="$(nproc)"\n'
        script = (
            "set -euo pipefail\n" + env_lines + parallel
            + f"date +%s.%N > {_sh(self.phase_file)}\n"
            + " ".join(map(_sh, configure_argv(self.plan, self.generator))) + "\n"
            + f"date +%s.%N >> {_sh(self.phase_file)}\n"
            + " ".join(map(_sh, self.plan["build"])) + "\n"
            + f"date +%s.%N >> {_sh(self.phase_file)}\n"
        )
        self.started = time.monotonic()
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen(["bash", "-c", script], stdout=log, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, start_new_session=True)

    def wait(self, timeout: float) -> int | None:
        """The exit status, or None when it was stopped after ``timeout`` seconds."""
        assert self.proc is not None
        try:
            return self.proc.wait(timeout=max(timeout, 0))
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
            return None

    def phases(self) -> dict[str, float | None]:
        try:
            stamps = [float(x) for x in self.phase_file.read_text().split()]
        except (OSError, ValueError):
            stamps = []
        return {"configure_s": round(stamps[1] - stamps[0], 1) if len(stamps) > 1 else None,
                "compile_s": round(stamps[2] - stamps[1], 1) if len(stamps) > 2 else None}

    @property
    def binary(self) -> Path:
        return Path(self.plan["build_dir"]) / "bin" / self.plan["targets"][0]


def _sh(value: Any) -> str:
    import shlex

    return shlex.quote(str(value))


# ---------------------------------------------------------------------------------------------------- 2. models


def model_specs(backend: str) -> tuple[Any, Any]:
    """(target, draft) ModelSpecs: the target's layers from 1 on scaled to nothing, the draft its layer 0."""
    from testbed.models import ModelSpec

    s = SHAPES[backend]
    common = dict(n_embd=s["n_embd"], n_head=s["n_head"], n_head_kv=s["n_head_kv"], n_ff=s["n_ff"],
                  n_ctx_train=s["n_ctx_train"], seed=2626, shared_layers=1, matrix_type="f16", weights="tiled")
    target = ModelSpec(n_layer=s["n_layer"], scale_extra=0.0, name=f"gpu-proof-target-{backend}", **common)
    draft = ModelSpec(n_layer=1, name=f"gpu-proof-draft-{backend}", **common)
    return target, draft


def parameters(path: Path) -> int:
    from ansible_collections.llmfleet.specdec.plugins.module_utils.gguf._gguf import read_header
    from ansible_collections.llmfleet.specdec.plugins.module_utils.gguf._model_facts import model_facts

    """The parameter count, read back from the file's header with the collection's own GGUF reader."""
    facts = model_facts(read_header(str(path)), include_tensors=True)
    return sum(int(math.prod(t["shape"])) for t in facts["tensors"])


# ---------------------------------------------------------------------------------------------------- modules


def run_module(name: str, args: dict[str, Any], pythonpath: list[Path], timeout: float = 120) -> dict[str, Any]:
    """A collection module run as Ansible runs it on a host: the module file, its arguments on stdin."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(map(str, pythonpath)), LC_ALL="C")
    done = subprocess.run([sys.executable, str(ROOT / "plugins" / "modules" / f"{name}.py")],
                          input=json.dumps({"ANSIBLE_MODULE_ARGS": args}), capture_output=True, text=True,
                          env=env, timeout=timeout, check=False)
    try:
        result = json.loads(done.stdout)
    except ValueError:
        raise RuntimeError(f"module {name} printed no JSON (exit {done.returncode}): "
                           f"{(done.stdout + done.stderr)[-2000:]}") from None
    result["rc"] = done.returncode
    return result


# ---------------------------------------------------------------------------------------------------- 4. KV


def parse_load_log(log: str) -> dict[str, Any]:
    """The server's load log: per context its n_ctx lines, KV cache lines and KV buffers; model buffers; free."""
    contexts: list[dict[str, Any]] = []
    model_buffers: dict[str, str] = {}
    free: list[dict[str, Any]] = []
    for line in log.splitlines():
        m = _CTX.search(line)
        if m and m.group(1) == "n_seq_max":
            contexts.append({"ints": {}, "caches": [], "buffers": []})
        if (b := _MODEL_BUF.search(line)) is not None:
            model_buffers.setdefault(b.group(1), b.group(2))
        if (f := _FREE.search(line)) is not None:
            free.append({"device": f.group(1), "name": f.group(2), "free_mib": int(f.group(3))})
        if not contexts:
            continue
        if m:
            contexts[-1]["ints"][m.group(1)] = int(m.group(2))
        elif (k := _KV_LINE.search(line)) is not None:
            contexts[-1]["caches"].append(k.group(1))
        elif (kb := _KV_BUF.search(line)) is not None:
            contexts[-1]["buffers"].append([kb.group(1), kb.group(2)])
    return {"contexts": [c for c in contexts if c["caches"]], "model_buffers": model_buffers, "free": free}


def _pinned_row_sum(printed_mib: str, cells_x_streams: int) -> int | None:
    """The per-cell row-byte sum a printed MiB value allows, when exactly one whole number fits."""
    mib = Decimal(printed_mib)
    lo = (mib - Decimal("0.005")) * MIB / cells_x_streams
    hi = (mib + Decimal("0.005")) * MIB / cells_x_streams
    first, last = math.ceil(lo), math.floor(hi)
    return first if first == last else None


def _mib2(n: int) -> str:
    return f"{n / MIB:.2f}"


def compare_context(want: dict[str, Any], got: dict[str, Any] | None) -> dict[str, Any]:
    """One context (target or draft): kv_budget's prediction against the printed lines."""
    ctx = want["context"]
    expect_ints = {"n_seq_max": ctx["n_seq_max"], "n_ctx": ctx["n_ctx"], "n_ctx_seq": ctx["n_ctx_seq"]}
    out: dict[str, Any] = {"predicted_lines": want["log_lines"], "printed_lines": got["caches"] if got else None,
                           "predicted_context": expect_ints, "printed_context": got["ints"] if got else None,
                           "predicted_bytes": want["total_bytes"], "predicted_buffers": [], "printed_buffers": [],
                           "exact_bytes_checked": 0, "problems": []}
    for cache in want["caches"]:
        per_dev: dict[str, int] = {}
        for row in cache["rows"]:
            per_dev[row["device"]] = per_dev.get(row["device"], 0) + int(row["bytes"])
        out["predicted_buffers"] += [[d, _mib2(n)] for d, n in per_dev.items() if n]
    if got is None:
        out["problems"].append("the server printed no such context")
        out["match"] = False
        return out
    out["printed_buffers"] = got["buffers"]
    if got["ints"] != expect_ints:
        out["problems"].append(f"context sizes: predicted {expect_ints}, printed {got['ints']}")
    if got["caches"] != want["log_lines"]:
        out["problems"].append("KV cache lines differ")
    if sorted(map(tuple, out["predicted_buffers"])) != sorted(map(tuple, got["buffers"])):
        out["problems"].append(f"KV buffers: predicted {out['predicted_buffers']}, printed {got['buffers']}")
    for cache, line in zip(want["caches"], got["caches"]):
        sizes = _SIZES.search(line)
        if sizes is None:
            out["problems"].append(f"cannot read the sizes of {line!r}")
            continue
        cells, _layers, _seqs, streams, _tk, k_mib, _tv, v_mib = sizes.groups()
        rows = int(cells) * int(streams)
        for printed, key in ((k_mib, "k_row_bytes"), (v_mib, "v_row_bytes")):
            pinned = _pinned_row_sum(printed, rows)
            want_sum = sum(int(r[key]) for r in cache["rows"])
            if rows >= EXACT_FROM and pinned is not None:
                out["exact_bytes_checked"] += 1
                if pinned != want_sum:
                    out["problems"].append(f"{key}: the log pins {pinned} bytes per cell, predicted {want_sum}")
    out["match"] = not out["problems"]
    return out


def kv_server_args(draft: Path, extra: list[str]) -> list[str]:
    """A KV case's flags after LlamaServer's own (-c and -np come from it): the draft, the case, verbose load."""
    return ["-md", str(draft), "--spec-type", "draft-simple", *extra, "-lv", "4"]


# ---------------------------------------------------------------------------------------------------- the proof


class Proof:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.backend: str = args.backend
        self.out: Path = args.out
        self.work: Path = args.work
        self.t0 = time.monotonic()
        self.deadline = self.t0 + args.budget_s
        self.pythonpath: list[Path] = []
        self.binary: Path | None = None
        self.models: dict[str, Path] = {}
        self.devices: list[dict[str, Any]] = []
        self.logs = self.work / "logs"
        self.kv_log: list[str] = []
        self.build_rec: dict[str, Any] = {}
        self.summary: dict[str, Any] = {
            "schema": SCHEMA, "backend": self.backend, "started": now(), "finished": None, "seconds": None,
            "ok": None, "budget_s": args.budget_s, "machine": {}, "steps": {}, "findings": [],
        }

    # ----------------------------------------------------------------------------------------- bookkeeping

    def left(self) -> float:
        return self.deadline - time.monotonic()

    def step(self, name: str, fn: Callable[[dict[str, Any]], None], needs: tuple[str, ...] = ()) -> None:
        rec: dict[str, Any] = {"status": "running"}
        self.summary["steps"][name] = rec
        missing = [n for n in needs if self.summary["steps"].get(n, {}).get("status") != "ok"]
        start = time.monotonic()
        if missing:
            rec.update(status="skipped", why=f"needs step {', '.join(missing)}, which did not succeed")
        else:
            try:
                fn(rec)
                if rec["status"] == "running":
                    rec["status"] = "ok"
            except Exception as exc:  # the summary records any failure and the next steps still run
                rec.update(status="failed", error=f"{type(exc).__name__}: {exc}")
        rec["seconds"] = round(time.monotonic() - start, 1)
        self.write()

    def finding(self, text: str) -> None:
        self.summary["findings"].append(text)

    def write(self) -> None:
        self.summary["seconds"] = round(time.monotonic() - self.t0, 1)
        self.out.mkdir(parents=True, exist_ok=True)
        (self.out / "summary.json").write_text(json.dumps(self.summary, indent=2, default=str) + "\n")
        (self.out / "summary.md").write_text(render_markdown(self.summary))
        if self.kv_log:
            (self.out / "kv-lines.txt").write_text("\n".join(self.kv_log) + "\n")

    # ----------------------------------------------------------------------------------------- the run

    def run(self) -> int:
        self.work.mkdir(parents=True, exist_ok=True)
        self.logs.mkdir(parents=True, exist_ok=True)
        site = install_wheels(self.args.pack, self.work)
        self.pythonpath = [p for p in (site, collection_path(self.work), ROOT / "tests") if p is not None]
        for p in reversed(self.pythonpath):
            sys.path.insert(0, str(p))
        self.machine()
        build = self.start_build()
        try:
            self.step("models", self.write_models)
            self.step("gpu_info", self.gpu_info)
            self.step("build", lambda rec: self.finish_build(build, rec))
            self.step("kv", self.kv, needs=("build", "models"))
            self.step("ab", self.ab, needs=("build", "models"))
        finally:  # the compile runs in its own session: never leave it behind
            if build is not None and build.proc is not None and build.proc.poll() is None:
                build.wait(0)
        steps = self.summary["steps"]
        self.summary["ok"] = all(s["status"] == "ok" for s in steps.values()) and not self.summary["findings"]
        self.summary["finished"] = now()
        self.write()
        print(render_markdown(self.summary))
        print(f"summary: {self.out / 'summary.json'}")
        return 0 if self.summary["ok"] else 1

    def machine(self) -> None:
        m = self.summary["machine"]
        m.update(python=platform.python_version(), cpus=os.cpu_count(), platform=platform.platform())
        m["cmake"] = run_text(["cmake", "--version"]).splitlines()[0] if shutil.which("cmake") else None
        if self.backend == "cuda":
            m["nvidia_smi"] = run_text(["nvidia-smi", "--query-gpu=name,driver_version,memory.total,compute_cap",
                                        "--format=csv,noheader"])
            nvcc = find_nvcc()
            release = [ln for ln in run_text([nvcc, "--version"]).splitlines() if "release" in ln] if nvcc else []
            m["nvcc"] = f"{nvcc}: {release[0].strip()}" if release else nvcc
        self.write()

    # ----------------------------------------------------------------------------------------- 1. build

    def start_build(self) -> Build | None:
        """Starts the compile in the background; what it planned goes into the build step's record later."""
        rec = self.build_rec
        if self.args.llama_server:
            return None
        try:
            if self.backend == "cuda":
                caps = parse_compute_caps(run_text(["nvidia-smi", "--query-gpu=compute_cap",
                                                    "--format=csv,noheader"]))
                nvcc = find_nvcc()
                if nvcc is None:
                    raise RuntimeError("nvcc is neither on PATH nor in /usr/local/cuda/bin: install the CUDA toolkit")
                plan = build_plan("cuda", self.work, cuda_architectures=caps, cuda_compiler=nvcc,
                                  jobs=self.args.jobs)
                rec.update(compute_capabilities=caps, nvcc=nvcc)
            else:
                cache = Path(os.environ.get("LLMFLEET_CACHE") or Path.home() / ".cache" / "llmfleet-specdec")
                ccache = str(cache / "ccache") if shutil.which("ccache") else None
                plan = build_plan("cpu", self.work, jobs=self.args.jobs, ccache_dir=ccache)
            source = self.args.source or self.args.pack / "llama.cpp"
            if not (source / "CMakeLists.txt").is_file():
                raise RuntimeError(f"--source {source}: no llama.cpp tree there; run `make gpu-proof-pack` and carry "
                                   f"{DEFAULT_PACK.name}/, or give --source")
            generator = self.args.generator
            if generator == "auto":
                generator = "Ninja" if self.backend == "cuda" and shutil.which("ninja") else None
            nvcc_dir = str(Path(plan_nvcc).parent) if (plan_nvcc := rec.get("nvcc")) else None
            build = Build(plan, source, generator, self.work / "build.log", path_first=nvcc_dir)
            rec.update(defines=plan["defines"], configure=configure_argv(plan, generator), build=plan["build"],
                       env=plan["env"], source=str(source), fingerprint=plan["fingerprint"])
            build.start()
            return build
        except Exception as exc:
            rec["start_error"] = f"{type(exc).__name__}: {exc}"
            return None

    def finish_build(self, build: Build | None, rec: dict[str, Any]) -> None:
        start_error = self.build_rec.pop("start_error", None)
        rec.update(self.build_rec)
        if self.args.llama_server:
            self.binary = Path(self.args.llama_server)
            rec.update(reused=str(self.binary),
                       note="the test bed's llama-server (tests/testbed/build_llama_server.sh: the role's CPU defines, "
                            "tests/unit/test_testbed_build.py); no compile in this run")
            rec["defines"] = build_plan("cpu", self.work)["defines"]
        elif build is None:
            raise RuntimeError(f"the build did not start: {start_error}")
        else:
            wait = self.left() - RESERVE_S[self.backend]
            rc = build.wait(wait)
            rec.update(build.phases())
            rec["wall_s"] = round(time.monotonic() - build.started, 1)
            tail = build.log.read_text(errors="replace").splitlines()[-400:]
            (self.out / "build-log-tail.txt").write_text("\n".join(tail) + "\n")
            if rc is None:
                raise RuntimeError(f"stopped: still building with {RESERVE_S[self.backend]} s of the "
                                   f"{self.args.budget_s} s budget left for the KV cases and the A/B")
            if rc != 0:
                raise RuntimeError(f"the build failed (exit {rc}); its last lines are in build-log-tail.txt")
            self.binary = build.binary
        version = run_text([str(self.binary), "--version"])
        rec["version"] = version.splitlines()[-2:] if version else None
        if not os.access(self.binary, os.X_OK):
            raise RuntimeError(f"{self.binary}: not an executable")

    # ----------------------------------------------------------------------------------------- 2. models

    def write_models(self, rec: dict[str, Any]) -> None:
        from testbed.models import write_model

        target_spec, draft_spec = model_specs(self.backend)
        folder = self.work / "models"
        for role, spec in (("target", target_spec), ("draft", draft_spec)):
            start = time.monotonic()
            path = write_model(folder / f"{role}.gguf", spec)
            self.models[role] = path
            rec[role] = {"path": str(path), "bytes": path.stat().st_size, "parameters": parameters(path),
                         "layers": spec.n_layer, "write_s": round(time.monotonic() - start, 1)}
        s = SHAPES[self.backend]
        rec["shape"] = dict(s, matrix_type="f16", weights="tiled", target_layers_past_first="output projections x 0")

    # ----------------------------------------------------------------------------------------- 3. gpu_info

    def gpu_info(self, rec: dict[str, Any]) -> None:
        args: dict[str, Any] = {"tools": ["nvidia-smi"], "strict": True} if self.backend == "cuda" else {}
        result = run_module("gpu_info", args, self.pythonpath)
        rec["module_args"] = args
        rec["result"] = result.get("gpu_info")
        if result.get("failed"):
            raise RuntimeError(f"gpu_info failed: {result.get('msg')}")
        self.devices = list((result.get("gpu_info") or {}).get("devices") or [])
        if self.backend == "cuda" and not self.devices:
            raise RuntimeError("gpu_info found no device through nvidia-smi")
        if self.backend == "cpu":
            rec["note"] = "no GPU here: gpu_info ran with every tool it knows and reported what it found"

    # ----------------------------------------------------------------------------------------- 4. KV

    def kv(self, rec: dict[str, Any]) -> None:
        from testbed.server import LlamaServer

        cases = []
        rec["cases"] = cases
        for name, ctx, parallel, extra in KV_CASES:
            if self.left() < 30:
                cases.append({"name": name, "skipped": "out of time"})
                continue
            server = LlamaServer(self.models["target"], args=kv_server_args(self.models["draft"], extra),
                                 binary=str(self.binary), log_dir=self.logs, ctx_size=ctx, parallel=parallel)
            flags = server.command()[1:]
            budget = run_module("kv_budget", {"flags": flags, "devices": self.devices}, self.pythonpath)
            if budget.get("failed"):
                cases.append({"name": name, "flags": flags, "match": False, "error": budget.get("msg")})
                continue
            kvb = budget["kv_budget"]
            exit_note = None
            server.start(wait=False)
            try:
                server.wait_healthy(timeout=min(180.0, max(self.left() - 10, 10)))
            except Exception as exc:  # the lines printed before an exit or a timeout are still compared
                exit_note = str(exc).splitlines()[0]
            finally:
                server.stop()
            log = server.log_text()
            printed = parse_load_log(log)
            self.kv_log.append(f"### {name}: {' '.join(flags)}")
            self.kv_log += [ln for ln in log.splitlines() if "llama_kv_cache" in ln or "llama_context: n_" in ln
                            or "model buffer size" in ln or "using device" in ln]
            got = printed["contexts"]
            case: dict[str, Any] = {"name": name, "flags": flags, "server_exit": exit_note,
                                    "fits": kvb.get("fits"), "loads": kvb.get("loads")}
            for i, role in enumerate(("target", "draft")):
                case[role] = compare_context(kvb[role], got[i] if i < len(got) else None)
            if len(got) > 2:
                case["extra_contexts_printed"] = len(got) - 2
            case["weights"] = {"predicted": {d: _mib2(n) for d, n in
                                             (kvb["target"].get("weights_by_device") or {}).items()},
                               "printed_first_model": printed["model_buffers"]}
            case["llama_free"] = printed["free"]
            case["match"] = case["target"]["match"] and case["draft"]["match"] and not case.get("extra_contexts_printed")
            cases.append(case)
            self.write()
        ran = [c for c in cases if "skipped" not in c]
        rec["matched"] = sum(1 for c in ran if c.get("match"))
        rec["cases_run"] = len(ran)
        rec["exact_bytes_checked"] = sum(c[r]["exact_bytes_checked"] for c in ran if "target" in c
                                         for r in ("target", "draft"))
        for c in cases:
            if "skipped" in c:
                self.finding(f"KV case {c['name']!r} not run: {c['skipped']}")
            elif not c.get("match"):
                problems = c.get("error") or "; ".join(
                    f"{r}: {', '.join(c[r]['problems'])}" for r in ("target", "draft") if c.get(r, {}).get("problems"))
                more = f"; {c['extra_contexts_printed']} more contexts printed" if c.get("extra_contexts_printed") else ""
                self.finding(f"KV case {c['name']!r}: prediction and server disagree ({problems}{more})")
        free = next((c["llama_free"] for c in ran if c.get("llama_free")), None)
        if free:
            rec["llama_cpp_free_mib"] = free

    # ----------------------------------------------------------------------------------------- 5. A/B

    def ab(self, rec: dict[str, Any]) -> None:
        from ansible_collections.llmfleet.specdec.plugins.module_utils.bench import _endpoint
        from ansible_collections.llmfleet.specdec.plugins.plugin_utils.verdicts import _judge
        from testbed.server import LlamaServer

        plan = AB[self.backend]
        draft = str(self.models["draft"])
        configs = {
            "baseline": {"args": [], "chain": [], "server_config": {}},
            f"draft-simple-k{K}": {
                "args": ["--spec-type", "draft-simple", "-md", draft, "--spec-draft-n-max", str(K)],
                "chain": ["draft-simple"], "k": K,
                "server_config": {"LLAMA_ARG_SPEC_TYPE": "draft-simple", "LLAMA_ARG_SPEC_DRAFT_MODEL": draft,
                                  "LLAMA_ARG_SPEC_DRAFT_N_MAX": str(K)}},
        }
        names = list(configs)
        entries: list[dict[str, Any]] = []
        rec.update(rounds_planned=plan["rounds"], shapes=plan["shapes"], sizes=plan["sizes"],
                   prompts_per_shape=plan["prompts"], k=K, server_starts=0, requests=0)
        for rnd in range(plan["rounds"]):
            shift = rnd % len(names)
            for order, name in enumerate(names[shift:] + names[:shift]):
                if self.left() < 20:
                    rec["stopped"] = f"out of time in round {rnd}"
                    break
                cfg = configs[name]
                entry: dict[str, Any] = {"config": name, "round": rnd, "order": order, "bench": None, "error": None,
                                         "server_config": cfg["server_config"]}
                server = LlamaServer(self.models["target"], args=cfg["args"], binary=str(self.binary),
                                     log_dir=self.logs, ctx_size=4096)
                try:
                    server.start(wait=True, timeout=min(180.0, max(self.left() - 10, 10)))
                    rec["server_starts"] += 1
                    # each request bounded by its share of what is left, so a slow server cannot overrun the run
                    share = min(120.0, max(self.left() - 10, 5) / (len(plan["shapes"]) * plan["prompts"] + 1))
                    entry["bench"] = _endpoint.run_bench(server.url, shapes=plan["shapes"],
                                                         prompts_per_shape=plan["prompts"], repeats=1, warmup=1,
                                                         seed=rnd, sizes=plan["sizes"], timeout=share,
                                                         total_timeout=share)
                    rec["requests"] += len(entry["bench"]["requests"])
                except Exception as exc:
                    entry["error"] = f"{type(exc).__name__}: {str(exc)[:500]}"
                finally:
                    server.stop()
                entries.append(entry)
            else:
                continue
            break
        run = {"host": "gpu-proof", "baseline": "baseline", "entries": entries,
               "configs": [{"name": n, "chain": configs[n]["chain"], "server_config": configs[n]["server_config"],
                            **({"k": configs[n]["k"]} if "k" in configs[n] else {})} for n in names]}
        judged = _judge.judge(run)
        (self.out / "ab-run.json").write_text(json.dumps({"run": run, "judged": judged}, default=str) + "\n")
        cand = judged["configs"][names[1]]
        rec["status_of"] = {n: judged["configs"][n]["status"] for n in names}
        keys = ("status", "problems", "lossless", "texts_compared", "engaged", "draft_n", "acceptance")
        rec["candidate"] = {k: cand.get(k) for k in keys}
        rec["verdicts"] = {
            s: {k: row.get(k) for k in ("median_tok_s", "tok_s", "speedup", "ci_low", "ci_high", "ci_scheme", "n",
                                        "ci_verdict", "verdict", "acceptance", "mean_accepted_len")}
            | {"baseline_tok_s": judged["configs"]["baseline"]["shapes"][s].get("tok_s")}
            for s, row in cand["shapes"].items()}
        rec["warnings"] = judged.get("warnings")
        if cand.get("status") in (_judge.FAILED, _judge.INCOMPLETE):
            self.finding(f"A/B: {names[1]} was not measured in full (status {cand.get('status')}: "
                         f"{'; '.join(cand.get('problems') or [])})")
        elif cand.get("engaged") is not True:
            self.finding(f"A/B: {names[1]} drafted nothing (status {cand.get('status')})")
        elif cand.get("lossless") is not True:
            self.finding(f"A/B: {names[1]}'s texts are not the baseline's (lossless {cand.get('lossless')}, "
                         f"status {cand.get('status')}: {'; '.join(cand.get('problems') or [])})")


# ---------------------------------------------------------------------------------------------------- markdown


def render_markdown(s: dict[str, Any]) -> str:
    st = s["steps"]
    lines = [f"# GPU proof ({s['backend']})", "",
             f"- result: {'**ok**' if s['ok'] else '**not ok**' if s['ok'] is False else 'running'}; "
             f"{s['seconds']} s of a {s['budget_s']} s budget; started {s['started']}",
             f"- machine: {s['machine'].get('cpus')} CPUs, Python {s['machine'].get('python')}, "
             f"{s['machine'].get('cmake')}"]
    if s["machine"].get("nvidia_smi"):
        lines.append(f"- GPU (nvidia-smi: name, driver, memory, compute capability): {s['machine']['nvidia_smi']}")
    if s["machine"].get("nvcc"):
        lines.append(f"- nvcc: {s['machine']['nvcc']}")
    lines += ["", "| step | status | seconds | detail |", "| --- | --- | --- | --- |"]
    for name in ("build", "models", "gpu_info", "kv", "ab"):
        r = st.get(name)
        if r is None:
            continue
        lines.append(f"| {name} | {r.get('status')} | {r.get('seconds', '')} | {_detail(name, r)} |")
    kv = st.get("kv") or {}
    if kv.get("cases"):
        lines += ["", "## KV: kv_budget's prediction against the server's load log", "",
                  "| case | target lines | draft lines | buffers (predicted = printed) | exact bytes | match |",
                  "| --- | --- | --- | --- | --- | --- |"]
        for c in kv["cases"]:
            if "skipped" in c or "target" not in c:
                lines.append(f"| {c['name']} | {c.get('skipped') or c.get('error')} | | | | no |")
                continue
            t, d = c["target"], c["draft"]
            bufs = "; ".join(f"{dev} {mib} MiB" for dev, mib in t["predicted_buffers"] + d["predicted_buffers"])
            lines.append(f"| {c['name']} | {_same(t)} | {_same(d)} | {bufs} | "
                         f"{t['exact_bytes_checked'] + d['exact_bytes_checked']} | "
                         f"{'yes' if c['match'] else 'NO'} |")
        first = next((c for c in kv["cases"] if "target" in c), None)
        if first:
            lines += ["", f"Target's KV line (first case), predicted: `{(first['target']['predicted_lines'] or [''])[0]}`",
                      "", f"Weights of the target, predicted per device (MiB): {first['weights']['predicted']}; "
                      f"printed: {first['weights']['printed_first_model']}"]
        if kv.get("llama_cpp_free_mib"):
            lines.append(f"\nllama.cpp's own view of the device at load: {kv['llama_cpp_free_mib']}")
    ab = st.get("ab") or {}
    if ab.get("verdicts"):
        lines += ["", f"## A/B: baseline against draft-simple at K {ab.get('k')}", "",
                  f"{ab.get('server_starts')} server starts, {ab.get('requests')} measured requests; candidate "
                  f"status {ab['candidate']['status']}, lossless {ab['candidate']['lossless']} "
                  f"({ab['candidate']['texts_compared']} texts), acceptance {_fmt(ab['candidate']['acceptance'])}",
                  "", "| shape | baseline tok/s | draft-simple tok/s | speedup | 95 % interval | n | verdict |",
                  "| --- | --- | --- | --- | --- | --- | --- |"]
        for shape, v in ab["verdicts"].items():
            lines.append(f"| {shape} | {_fmt(v['baseline_tok_s'])} | {_fmt(v['tok_s'])} | {_fmt(v['speedup'], 3)} | "
                         f"{_fmt(v['ci_low'], 3)} - {_fmt(v['ci_high'], 3)} | {v['n']} | {v['verdict']} |")
    if s["findings"]:
        lines += ["", "## Findings", ""] + [f"- {f}" for f in s["findings"]]
    for name, r in st.items():
        if r.get("error"):
            lines.append(f"\n{name} error: {r['error']}")
    return "\n".join(lines) + "\n"


def _same(ctx: dict[str, Any]) -> str:
    n = len(ctx["predicted_lines"])
    return f"{n} equal" if ctx["printed_lines"] == ctx["predicted_lines"] else f"{n} predicted, differ"


def _fmt(v: Any, digits: int = 1) -> str:
    return "-" if v is None else f"{v:.{digits}f}" if isinstance(v, float) else str(v)


def _detail(name: str, r: dict[str, Any]) -> str:
    if r.get("status") == "skipped":
        return r.get("why", "")
    if name == "build":
        if r.get("reused"):
            return f"reused {r['reused']}"
        cc = ",".join(r.get("compute_capabilities") or [])
        return (f"configure {r.get('configure_s')} s, compile {r.get('compile_s')} s, {r.get('wall_s')} s in all"
                + (f", compute capability {cc}" if cc else "") + f"; {len(r.get('defines') or [])} role defines")
    if name == "models" and r.get("target"):
        t, d = r["target"], r["draft"]
        return (f"target {t['parameters'] / 1e9:.3f} B params, {t['bytes'] / 2**30:.2f} GiB ({t['write_s']} s); "
                f"draft {d['parameters'] / 1e6:.1f} M params")
    if name == "gpu_info" and r.get("result") is not None:
        devs = r["result"].get("devices") or []
        return "; ".join(f"{d.get('name')} {(d.get('total_bytes') or 0) / 2**30:.1f} GiB total, "
                         f"{(d.get('free_bytes') or 0) / 2**30:.1f} GiB free" for d in devs) or "no device"
    if name == "kv" and "cases_run" in r:
        return f"{r['matched']} of {r['cases_run']} cases match; {r['exact_bytes_checked']} sizes pinned to the byte"
    if name == "ab" and r.get("candidate"):
        return f"{r['server_starts']} server starts, candidate {r['candidate']['status']}"
    return r.get("error", "")


# ---------------------------------------------------------------------------------------------------- main


def parse_args(argv: list[str]) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    ap.add_argument("--backend", choices=["cuda", "cpu"], default="cuda")
    ap.add_argument("--out", type=Path, default=Path(os.environ["OUT"]) if os.environ.get("OUT") else None,
                    help="where summary.json and summary.md go (default: $OUT)")
    ap.add_argument("--work", type=Path, default=None,
                    help="scratch folder: build tree, models, logs (default: <tmp>/llmfleet-gpu-proof-<backend>)")
    ap.add_argument("--pack", type=Path, default=DEFAULT_PACK,
                    help="what tests/gpu/pack.py prepared: llama.cpp/ and wheels/ (default: .gpu-proof)")
    ap.add_argument("--source", type=Path, default=None, help="a llama.cpp tree to build (default: <pack>/llama.cpp)")
    ap.add_argument("--llama-server", default=None, help="use this llama-server instead of building one")
    ap.add_argument("--jobs", type=int, default=0, help="build jobs (0: one per CPU)")
    ap.add_argument("--generator", default="auto", help="cmake generator (auto: Ninja for CUDA when there is one)")
    ap.add_argument("--budget-s", type=float, default=None,
                    help="seconds the whole run keeps to (default: 555 for cuda, 300 for cpu)")
    args = ap.parse_args(argv)
    if args.out is None:
        ap.error("give --out DIR (or set $OUT): where the summary goes")
    if args.budget_s is None:
        args.budget_s = 555.0 if args.backend == "cuda" else 300.0
    if args.work is None:
        args.work = Path(tempfile.gettempdir()) / f"llmfleet-gpu-proof-{args.backend}"
    if args.backend == "cuda" and args.llama_server is None and shutil.which("nvidia-smi") is None:
        ap.error("--backend cuda: nvidia-smi is not on PATH (no NVIDIA driver here?); use --backend cpu")
    return args


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    return Proof(args).run()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
