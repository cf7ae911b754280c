"""The load phase and its gate on the real llama-server with -np 2 and -np 4, and the field notes' load
failures injected in the request path (tests/testbed/load_fault_proxy.py), caught by the gate.

What the real server guarantees here, checked rather than assumed: at temperature 0 a prompt served while
other slots decode in the same batch gives the same text as the same prompt served alone (the tiny models'
large output weights keep greedy choices stable between batch sizes, see testbed/models.py). The honest
configs below pass the gate with every burst's streams overlapping at the server.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from ansible.module_utils.testing import patch_module_args

from ansible_collections.llmfleet.specdec.plugins.module_utils.bench import _endpoint as ep
from ansible_collections.llmfleet.specdec.plugins.module_utils.bench import _load, _loadgate, _traffic
from ansible_collections.llmfleet.specdec.plugins.modules import spec_bench
from ansible_collections.llmfleet.specdec.plugins.plugin_utils.verdicts import _judge
from testbed.load_fault_proxy import FaultProxy
from testbed.server import LlamaServer

pytestmark = pytest.mark.integration

SIZES = {"prose": {"chars": 400, "n_predict": 32}, "echo": {"chars": 500, "n_predict": 64},
         "structured": {"chars": 300, "n_predict": 48}, "identity": {"n_predict": 24}}
PARAMS = {"prompts_per_shape": 2, "repeats": 1, "warmup": 1, "sizes": SIZES, "seed": 0}
NGRAM = ["--spec-type", "ngram-mod", "--spec-ngram-mod-n-match", "8", "--spec-ngram-mod-n-min", "2",
         "--spec-ngram-mod-n-max", "16"]
CONFIGS: dict[str, tuple[str | None, list[str]]] = {
    "plain": (None, []),
    "draft-simple": ("draft.gguf", ["--spec-type", "draft-simple", "--spec-draft-n-max", "3"]),
    "ngram-mod": (None, NGRAM),
}


def server(binary: str, models: dict[str, Path], log_dir: Path, config: str, parallel: int) -> LlamaServer:
    draft, flags = CONFIGS[config]
    return LlamaServer(models["target.gguf"], draft=models[draft] if draft else None, args=flags, binary=binary,
                       log_dir=log_dir, ctx_size=1024 * parallel, parallel=parallel)


def bench(url: str, concurrency: int = 0, custom: dict | None = None, **extra: Any) -> dict[str, Any]:
    """What spec_bench does: the single-stream bench, then the load phase at ``concurrency`` (0: the slots)."""
    params = {**PARAMS, "endpoint": url, **extra}
    run = dict(params)
    out = ep.run_bench(custom=custom, **run)
    measured = _load.measured_prompts(params, custom)
    _traffic.add_ngram_checks(out, measured)
    _load.bench_under_load(out, params, measured, concurrency, 3)
    return out


def run_module(args: dict[str, Any], capsys: pytest.CaptureFixture) -> dict[str, Any]:
    with patch_module_args(args), pytest.raises(SystemExit):
        spec_bench.main()
    return json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("parallel", [2, 4])
@pytest.mark.parametrize("config", list(CONFIGS))
def test_honest_configs_pass_the_gate_with_overlapping_streams(config: str, parallel: int, llama_server_bin: str,
                                                               standard_models: dict[str, Path], tmp_path: Path) -> None:
    with server(llama_server_bin, standard_models, tmp_path, config, parallel) as srv:
        b = bench(srv.url)
    load = b["load"]
    assert (load["concurrency"], load["server_slots"]) == (parallel, parallel)
    assert load["concurrency_source"] == "the server's /props total_slots"
    gate = load["gate"]
    assert gate["status"] == _loadgate.PASSED, gate
    assert gate["streams_checked"] == 4 * 3 * parallel and not gate["mismatches"]
    # every stream of a burst was sent before the first answer came: they were decoded together
    assert all(burst["overlapped"] for burst in load["bursts"]), load["bursts"]
    assert all(burst["aggregate_tok_s"] > 0 for burst in load["bursts"])
    # the streams really are different prompts where the shape has enough (2 prompts, N streams)
    first = [s["prompt_index"] for s in load["streams"] if s["shape"] == "echo" and s["burst"] == 0]
    assert first == [i % 2 for i in range(parallel)]
    if config == "draft-simple":
        assert sum(s["draft_n"] for s in load["streams"]) > 0  # speculation ran under load too


def test_a_server_with_one_slot_queues_the_streams_and_says_so(llama_server_bin, standard_models, tmp_path):
    with server(llama_server_bin, standard_models, tmp_path, "plain", 1) as srv:
        b = bench(srv.url, concurrency=2)
    assert b["load"]["gate"]["status"] == _loadgate.PASSED
    assert any("queue" in n for n in b["load"]["notes"])
    # one slot: the second stream waits for the first, the two never decode together
    assert not any(burst["overlapped"] for burst in b["load"]["bursts"]) or b["load"]["server_slots"] == 1


@pytest.mark.parametrize("mode, kind", [("truncate", "truncated"), ("alter", "altered")])
def test_the_gate_catches_replies_corrupted_only_under_load(mode, kind, llama_server_bin, standard_models, tmp_path):
    with server(llama_server_bin, standard_models, tmp_path, "draft-simple", 2) as srv, \
            FaultProxy(srv.port, mode) as proxy:
        b = bench(proxy.url)
        with server(llama_server_bin, standard_models, tmp_path / "ref", "plain", 1) as plain:
            alone = ep.run_bench(plain.url, **PARAMS)
    # alone, the candidate is perfect: the same texts as a plain server, nothing tampered
    assert [r["text"] for r in b["requests"]] == [r["text"] for r in alone["requests"]]
    assert proxy.events and all(e["request"] > len(b["requests"]) + 1 for e in proxy.events)
    gate = b["load"]["gate"]
    assert gate["status"] == _loadgate.INVALID
    assert len(gate["mismatches"]) == len(proxy.events)
    m = gate["mismatches"][0]
    assert m["kind"] == kind
    assert {"shape", "burst", "stream", "prompt_index", "position"} <= set(m)
    ref = next(r for r in b["requests"] if r["prompt_sha256"] == m["prompt_sha256"])["text"]
    assert m["position"] == len(ref) // 2 and m["reference_len"] == len(ref)


def test_the_gate_catches_a_server_that_dies_when_the_second_stream_arrives(llama_server_bin, standard_models,
                                                                            tmp_path, capsys):
    with server(llama_server_bin, standard_models, tmp_path, "draft-simple", 2) as srv, \
            FaultProxy(srv.port, "segv", srv.pid) as proxy:
        out = run_module({"endpoint": proxy.url, **PARAMS, "concurrency": 0}, capsys)
        srv._proc.wait(timeout=30)
        assert srv.returncode == -11  # a real SIGSEGV of the real server
    assert proxy.events[0]["mode"] == "segv"
    assert out["failed"] is True
    assert "the server stopped answering under load (2 streams)" in out["msg"]
    assert "HTTP 502" in out["msg"] and "/health afterwards: GET" in out["msg"]
    load = out["bench"]["load"]
    assert load["gate"]["status"] == _loadgate.FAILED
    assert load["gate"]["failures"][0]["shape"] == "prose" and load["gate"]["failures"][0]["burst"] == 0
    assert len(load["bursts"]) == 1  # no burst sent after the failure
    assert len(out["bench"]["requests"]) == 8  # the single-stream bench before it is kept


def test_the_gate_catches_a_server_that_stops_answering_under_load(llama_server_bin, standard_models, tmp_path,
                                                                   capsys):
    with server(llama_server_bin, standard_models, tmp_path, "plain", 2) as srv, \
            FaultProxy(srv.port, "hang") as proxy:
        out = run_module({"endpoint": proxy.url, **PARAMS, "concurrency": 2, "timeout": 5}, capsys)
    assert proxy.events and proxy.events[0]["mode"] == "hang"
    assert out["failed"] is True
    gate = out["bench"]["load"]["gate"]
    assert gate["status"] == _loadgate.FAILED
    assert "no answer within 5 s" in gate["failures"][0]["error"]
    assert gate["health_after_failure"] == "ok"  # alive, yet not answering the held stream


def test_the_judge_never_recommends_a_config_that_failed_the_gate(llama_server_bin, standard_models, tmp_path):
    """Real benches in the run form the role builds: a mix recommendation excludes what failed under load."""
    entries = []
    for rnd in range(2):
        with server(llama_server_bin, standard_models, tmp_path, "plain", 2) as srv:
            entries.append({"config": "baseline", "round": rnd, "bench": bench(srv.url), "error": None})
        with server(llama_server_bin, standard_models, tmp_path, "draft-simple", 2) as srv:
            entries.append({"config": "draft", "round": rnd, "bench": bench(srv.url), "error": None})
        with server(llama_server_bin, standard_models, tmp_path, "draft-simple", 2) as srv, \
                FaultProxy(srv.port, "truncate") as proxy:
            entries.append({"config": "draft-cut", "round": rnd, "bench": bench(proxy.url), "error": None})
    run = {"host": "testbed", "baseline": "baseline", "mix": {"prose": 1, "identity": 1},
           "configs": [{"name": "baseline", "chain": []}, {"name": "draft", "chain": ["draft-simple"]},
                       {"name": "draft-cut", "chain": ["draft-simple"]}], "entries": entries}
    j = _judge.judge(run, n_boot=300)
    assert j["configs"]["draft"]["load_gate"]["status"] == _loadgate.PASSED
    assert j["configs"]["draft-cut"]["status"] == _judge.INVALID
    assert j["configs"]["draft-cut"]["problems"][0].startswith("under load (2 streams)")
    # alone it is lossless: only the load gate catches it
    assert j["configs"]["draft-cut"]["lossless"] is True
    excluded = {e["config"]: e for e in j["recommendation"]["excluded"]}
    assert "draft-cut" in excluded and "under load" in excluded["draft-cut"]["reason"]
    assert j["recommendation"]["config"] != "draft-cut"
    rows = j["load"]["draft"]["prose"]
    assert rows["aggregate"]["n"] == 6 and rows["stream"]["n"] == 12 and rows["aggregate"]["verdict"] is not None


def test_operator_traffic_runs_as_its_own_shape_under_load(llama_server_bin, standard_models, tmp_path, capsys):
    lines = [json.dumps({"messages": [{"role": "user", "content": f"Ticket {i}: the printer on floor {i} "
                                                                  "is out of toner again, please help."}]})
             for i in range(3)]
    with server(llama_server_bin, standard_models, tmp_path, "draft-simple", 2) as srv:
        out = run_module({"endpoint": srv.url, "api": "openai", **PARAMS, "shapes": ["identity"], "concurrency": 0,
                          "traffic": [{"name": "tickets", "source": "files/tickets.jsonl", "content": "\n".join(lines),
                                       "n_predict": 24}]}, capsys)
    assert out.get("failed") is not True, out.get("msg")
    b = out["bench"]
    assert [r["shape"] for r in b["requests"]] == ["identity", "identity", "tickets", "tickets"]
    assert b["shapes"]["tickets"]["n_predict"] == 24 and b["shapes"]["tickets"]["checks"]["source"] == "files/tickets.jsonl"
    assert b["shapes"]["tickets"]["ngram"]["answers_checked"] == 2
    assert b["load"]["gate"]["status"] == _loadgate.PASSED and "tickets" in b["load"]["shapes"]
    # the prompts are not in the result (the answers are)
    assert "out of toner" not in json.dumps(out)
    assert out["invocation"]["module_args"]["traffic"][0]["content"] == "VALUE_SPECIFIED_IN_NO_LOG_PARAMETER"
    assert out["invocation"]["module_args"]["traffic"][0]["name"] == "tickets"
