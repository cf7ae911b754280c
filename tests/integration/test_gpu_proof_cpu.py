"""The GPU proof (tests/gpu/gpu_proof.py) run in its CPU mode on the test bed's llama-server, so that the script
that runs on the GPU machine cannot rot: every step, kv_budget against the real load log, the A/B judged.

Cost: one run of about 5 s (the tiny models, 5 KV cases and 4 A/B server starts on the real llama-server).
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def summary(llama_server_bin: str, tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, Path, subprocess.CompletedProcess]:
    out = tmp_path_factory.mktemp("gpu-proof-out")
    work = tmp_path_factory.mktemp("gpu-proof-work")
    proc = subprocess.run([sys.executable, str(ROOT / "tests" / "gpu" / "gpu_proof.py"), "--backend", "cpu",
                           "--llama-server", llama_server_bin, "--out", str(out), "--work", str(work)],
                          capture_output=True, text=True, timeout=600, check=False)
    path = out / "summary.json"
    assert path.is_file(), proc.stdout[-3000:] + proc.stderr[-3000:]
    return json.loads(path.read_text()), out, proc


def test_every_step_ran_and_the_run_is_ok(summary):
    s, out, proc = summary
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert s["ok"] is True and s["findings"] == []
    assert s["schema"] == "llmfleet.specdec/gpu-proof/1" and s["backend"] == "cpu"
    assert {n: st["status"] for n, st in s["steps"].items()} == {n: "ok" for n in ("models", "gpu_info", "build", "kv", "ab")}
    md = (out / "summary.md").read_text()
    assert "# GPU proof (cpu)" in md and "**ok**" in md and "| kv | ok |" in md


def test_models_are_the_exact_prefix_pair(summary):
    m = summary[0]["steps"]["models"]
    assert m["target"]["layers"] == 4 and m["draft"]["layers"] == 1
    assert 0 < m["draft"]["parameters"] < m["target"]["parameters"]
    assert m["shape"]["n_head"] // m["shape"]["n_head_kv"] == 4


def test_kv_budget_equals_the_servers_load_log(summary):
    kv = summary[0]["steps"]["kv"]
    assert kv["cases_run"] == 5 and kv["matched"] == 5
    assert kv["exact_bytes_checked"] > 0
    for case in kv["cases"]:
        for role in ("target", "draft"):
            c = case[role]
            assert c["printed_lines"] == c["predicted_lines"] and len(c["printed_lines"]) == 1
            assert c["printed_context"] == c["predicted_context"]
            assert sorted(map(tuple, c["printed_buffers"])) == sorted(map(tuple, c["predicted_buffers"]))
            assert [dev for dev, _mib in c["printed_buffers"]] == ["CPU"]
        # the flags kv_budget was given are the server's own command line
        assert "--spec-type" in case["flags"] and "-md" in case["flags"]
    auto = next(c for c in kv["cases"] if "auto" in c["name"])
    assert auto["target"]["printed_context"]["n_seq_max"] == 4


def test_ab_is_judged_engaged_and_lossless(summary):
    ab = summary[0]["steps"]["ab"]
    assert ab["server_starts"] == 4 and ab["requests"] == 8
    assert ab["status_of"] == {"baseline": "BASELINE", "draft-simple-k4": "OK"}
    cand = ab["candidate"]
    assert cand["engaged"] is True and cand["lossless"] is True and cand["texts_compared"] == 4
    # the draft is the target's exact one-layer prefix: every drafted token is accepted
    assert cand["acceptance"] == 1.0 and cand["draft_n"] > 0
    assert set(ab["verdicts"]) == {"prose"}
    row = ab["verdicts"]["prose"]
    assert row["speedup"] is not None and row["baseline_tok_s"] > 0 and row["n"] == "2x2"


def test_gpu_info_ran_as_a_module_and_saw_no_gpu_here(summary):
    g = summary[0]["steps"]["gpu_info"]
    assert g["result"]["devices"] == [] and g["result"]["host_mem_total_bytes"] > 0
