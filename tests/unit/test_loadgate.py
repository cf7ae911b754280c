"""The load gate: texts under concurrent load against single-stream texts, its verdicts in the judge and the report."""
from __future__ import annotations

import copy
from typing import Any

import ab_runs
import pytest

from ansible_collections.llmfleet.specdec.plugins.module_utils.bench import _loadgate
from ansible_collections.llmfleet.specdec.plugins.module_utils.bench._load import LoadError, burst_summary, resolve_concurrency
from ansible_collections.llmfleet.specdec.plugins.module_utils.common import _stats
from ansible_collections.llmfleet.specdec.plugins.plugin_utils.report import _report
from ansible_collections.llmfleet.specdec.plugins.plugin_utils.verdicts import _judge

N = 2
BURSTS = 3


def sha(shape: str, prompt_index: int) -> str:
    return f"{shape}-{prompt_index}".ljust(64, "0")


def add_load(entry: dict[str, Any], *, speed: float = 1.0, text: Any = None, fail: tuple | None = None) -> None:
    """Gives an entry's bench a load phase: N streams per burst answering the single-stream texts.

    text(shape, burst, stream, reference) -> the stream's text; fail = (shape, burst, stream): that stream errors.
    """
    bench = entry["bench"]
    for r in bench["requests"]:
        r["prompt_sha256"] = sha(r["shape"], r["prompt_index"])
    streams, bursts = [], []
    for shape in ab_runs.SHAPES:
        for b in range(BURSTS):
            recs = []
            for i in range(N):
                p = (b * N + i) % 2
                ref = ab_runs.greedy_text(shape, p)
                rec = {"shape": shape, "burst": b, "stream": i, "prompt_index": p, "prompt_sha256": sha(shape, p),
                       "started_s": b + 0.0, "ended_s": b + 0.5 / (speed * ab_runs.jitter(entry["round"], i, b)),
                       "predicted_per_second": 20.0 * speed * ab_runs.jitter(entry["round"], p, b), "predicted_n": 64,
                       "text": text(shape, b, i, ref) if text else ref}
                if fail == (shape, b, i):
                    rec = {k: rec[k] for k in ("shape", "burst", "stream", "prompt_index", "prompt_sha256",
                                               "started_s", "ended_s")}
                    rec["error"] = "POST http://127.0.0.1:1/completion: HTTP 502: upstream gone"
                recs.append(rec)
            streams += recs
            bursts.append(burst_summary(shape, b, recs))
    load = {"schema": "llmfleet.specdec/load/1", "concurrency": N, "streams": streams, "bursts": bursts,
            "health_after_failure": "GET /health: cannot reach the server" if fail else None}
    load["gate"] = _loadgate.gate(load, bench["requests"])
    bench["load"] = load


def run_with_load(candidates: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """baseline + candidates, all lossless and 1.5x alone; load per candidate as add_load's keywords."""
    configs = {"baseline": {}, **{n: {"speedup": 1.5, "chain": ["draft-simple"], "draft": (40, 30)} for n in candidates}}
    run = ab_runs.make_run(configs, rounds=2, mix={"prose": 1.0, "echo": 1.0})
    for e in run["entries"]:
        add_load(e, **candidates.get(e["config"], {}))
    return run


def test_gate_passes_equal_texts_and_classifies_truncation_and_alteration() -> None:
    run = run_with_load({"cut": {"text": lambda s, b, i, ref: ref[:40] if (s, b, i) == ("echo", 1, 1) else ref},
                         "alter": {"text": lambda s, b, i, ref: ref.replace("lazy", "LAZY") if i == 1 else ref}})
    by = {(e["config"], e["round"]): e["bench"]["load"]["gate"] for e in run["entries"]}
    assert by[("baseline", 0)]["status"] == _loadgate.PASSED
    assert by[("baseline", 0)]["streams_checked"] == len(ab_runs.SHAPES) * BURSTS * N
    cut = by[("cut", 0)]
    assert cut["status"] == _loadgate.INVALID and len(cut["mismatches"]) == 1
    m = cut["mismatches"][0]
    assert (m["kind"], m["shape"], m["burst"], m["stream"], m["position"], m["load_len"]) == ("truncated", "echo", 1, 1, 40, 40)
    alter = by[("alter", 1)]["mismatches"][0]
    assert alter["kind"] == "altered" and alter["position"] == ab_runs.greedy_text("prose", 1).index("lazy")
    assert alter["stream"] == 1 and alter["prompt_index"] == 1


def test_judge_marks_configs_that_fail_under_load_and_never_recommends_them() -> None:
    run = run_with_load({"good": {}, "cut": {"text": lambda s, b, i, ref: ref[:10] if i == 1 else ref},
                         "dies": {"fail": ("echo", 0, 1)}})
    for e in run["entries"]:
        if e["config"] == "dies":
            # as read after the unit restarted: the death, then the next process starting up
            e["journal"] = ["llama-server[42]: CUDA error: an illegal memory access was encountered",
                            "systemd[1]: llama-server.service: Main process exited, code=dumped, status=11/SEGV",
                            *[f"llama-server[57]: load_tensors: layer {i} assigned to device CPU" for i in range(20)]]
    j = _judge.judge(run, n_boot=200)
    status = {n: c["status"] for n, c in j["configs"].items()}
    assert status == {"baseline": "BASELINE", "good": "OK", "cut": "INVALID", "dies": "FAILED"}
    assert "is truncated" in j["configs"]["cut"]["problems"][0]
    assert "stream 1 on prose prompt 1 (burst 0)" in j["configs"]["cut"]["problems"][0]
    dies = j["configs"]["dies"]["problems"][0]
    assert "stopped answering: stream 1 on echo prompt 1" in dies and "status=11/SEGV" in dies
    assert "illegal memory access" in dies and "load_tensors" not in dies
    rec = j["recommendation"]
    assert rec["config"] == "good"
    assert {e["config"] for e in rec["excluded"]} == {"cut", "dies"}
    # alone, every one of them would have been a winner: the gate is what excludes them
    for e in run["entries"]:
        e["bench"].pop("load")
    alone = _judge.judge(run, n_boot=200)
    assert {e["config"] for e in alone["recommendation"]["excluded"]} == set()
    assert {n: c["status"] for n, c in alone["configs"].items()}["cut"] == "OK"


def test_load_numbers_have_intervals_and_verdicts_against_the_baseline_under_load() -> None:
    run = run_with_load({"fast": {"speed": 2.0}, "same": {}})
    j = _judge.judge(run, n_boot=300)
    fast = j["load"]["fast"]["prose"]
    assert fast["aggregate"]["speedup"] == pytest.approx(2.0)
    assert fast["aggregate"]["verdict"] == _stats.WIN and fast["stream"]["verdict"] == _stats.WIN
    assert fast["aggregate"]["n"] == 2 * BURSTS and fast["stream"]["n"] == 2 * BURSTS * N
    assert fast["single_stream_tok_s"] == j["configs"]["fast"]["shapes"]["prose"]["median_tok_s"]
    assert j["load"]["same"]["echo"]["aggregate"]["verdict"] == _stats.NO_DIFFERENCE
    assert j["load"]["baseline"]["prose"]["aggregate"]["speedup"] is None


def test_report_shows_the_gate_and_the_load_tables() -> None:
    run = run_with_load({"good": {}, "cut": {"text": lambda s, b, i, ref: ref[:10] if i == 1 else ref}})
    j = _judge.judge(run, n_boot=200)
    text = _report.markdown(_report.build_document(run, j))
    assert "## Under concurrent load" in text
    assert "**cut: INVALID under load**" in text
    assert "| cut | INVALID | 2 |" in text
    assert "aggregate tok/s [95 % CI]" in text


def test_a_run_without_load_has_no_load_section() -> None:
    run = ab_runs.make_run({"baseline": {}, "x": {"speedup": 1.2, "chain": ["draft-simple"], "draft": (4, 3)}}, rounds=2)
    j = _judge.judge(copy.deepcopy(run), n_boot=200)
    assert j["load"] is None and j["configs"]["x"]["load_gate"]["status"] == _loadgate.NOT_MEASURED
    assert "Under concurrent load" not in _report.markdown(_report.build_document(run, j))


def test_concurrency_comes_from_the_servers_slots_or_is_given() -> None:
    server = {"engine": "llamacpp", "props": {"total_slots": 4}}
    assert resolve_concurrency(0, server) == (4, "the server's /props total_slots", 4)
    assert resolve_concurrency(2, server) == (2, "given", 4)
    with pytest.raises(LoadError, match="give the number of concurrent streams"):
        resolve_concurrency(0, {"engine": "vllm", "props": None})
    with pytest.raises(LoadError, match="concurrency: expected a whole number"):
        resolve_concurrency(-1, server)


def test_a_burst_whose_streams_did_not_overlap_says_so() -> None:
    seq = [{"started_s": 0.0, "ended_s": 1.0, "predicted_n": 10}, {"started_s": 1.5, "ended_s": 2.0, "predicted_n": 10}]
    s = burst_summary("prose", 0, seq)
    assert s["overlapped"] is False and s["aggregate_tok_s"] == pytest.approx(10.0)
    seq[1]["started_s"] = 0.1
    assert burst_summary("prose", 0, seq)["overlapped"] is True


def test_load_verdicts_replicate_over_rounds_like_the_single_stream_ones() -> None:
    """Bursts and streams inside one server start are that start's requests, not replicates: one round of
    load data calls no verdict, however many bursts it has (the request bootstrap would call one)."""
    run = run_with_load({"fast": {"speed": 2.0}})
    run["entries"] = [e for e in run["entries"] if e["round"] == run["entries"][0]["round"]]
    j = _judge.judge(run, n_boot=300)
    fast = j["load"]["fast"]["prose"]["aggregate"]
    assert fast["verdict"] == _stats.TOO_FEW_ROUNDS and fast["n_rounds"] == 1
    old = _judge.judge(run, n_boot=300, method="request-bootstrap")
    assert old["load"]["fast"]["prose"]["aggregate"]["verdict"] == _stats.WIN


def test_a_win_on_one_stream_that_loses_under_load_is_not_recommended() -> None:
    """Issue 49: the verdict counts the operator's concurrency. Both candidates are 1.5x alone; under load one
    is 1.3x the baseline's aggregate, the other 0.6x (speculation that wins alone and loses at the slot count)."""
    run = run_with_load({"scales": {"speed": 1.3}, "collapses": {"speed": 0.6}})
    j = _judge.judge(run, n_boot=200)
    conf = j["confirmatory"]
    scales, collapses = conf["verdicts"]["scales"], conf["verdicts"]["collapses"]
    assert scales["verdict"] == collapses["verdict"] == "WIN"  # alone, both win
    assert scales["load"]["verdict"] == "NON-INFERIOR" and scales["load"]["ratio"] == pytest.approx(1.3)
    assert collapses["load"]["verdict"] == "INFERIOR" and collapses["load"]["ratio"] == pytest.approx(0.6)
    assert scales["practical"] and not collapses["practical"]
    assert "LOSES under load" in collapses["why"] and f"at {N} concurrent streams" in collapses["why"]
    assert conf["recommendation"] == "scales" and conf["streams"] == N
    rec = j["recommendation"]
    assert rec["config"] == "scales" and "aggregate rate is 1.30x" in rec["reason"]
    assert rec["under_load"]["verdict"] == "NON-INFERIOR" and rec["under_load"]["streams"] == N
    section = _report.confirmatory_section(j)
    assert section["verdicts"]["collapses"]["load"]["verdict"] == "INFERIOR" and section["streams"] == N
    text = _report.markdown(_report.build_document(run, j))
    assert f"aggregate at {N} streams [one-sided]" in text
    assert "| collapses | OK | **WIN** |" in text and "0.60x [0.60, 0.60] INFERIOR" in text
    assert "**Recommendation: scales** (1.50x" in text and f"1.30x [1.30, 1.30] NON-INFERIOR aggregate at {N}" in text


def test_the_only_winner_alone_loses_under_load_so_the_baseline_is_kept() -> None:
    run = run_with_load({"collapses": {"speed": 0.6}})
    j = _judge.judge(run, n_boot=200)
    assert j["confirmatory"]["verdicts"]["collapses"]["verdict"] == "WIN"
    assert j["confirmatory"]["recommendation"] is None
    assert j["recommendation"]["keep_baseline"] and j["recommendation"]["config"] == "baseline"
    # without the load phase (one stream is the operator's concurrency) the same run recommends it
    for e in run["entries"]:
        e["bench"].pop("load")
    assert _judge.judge(run, n_boot=200)["confirmatory"]["recommendation"] == "collapses"
