"""spec_bench's busy check against the real llama-server, with a real concurrent client.

A production unit keeps serving its users while a candidate is measured. The bench reads /slots (a slot
``is_processing``) and /metrics (``llamacpp:tokens_predicted_total``) around every measured request: a request
that ran beside another client's is set aside and sent again once the server is idle, or excluded. Here a second
client on its own thread keeps the server's other slot busy with long requests, as a user would. One server start
(two slots), three short benches: about 10 s.
"""
from __future__ import annotations

import json
import threading
import time
import urllib.request
from typing import Any

import pytest

from ansible_collections.llmfleet.specdec.plugins.module_utils.bench import _endpoint as ep
from ansible_collections.llmfleet.specdec.plugins.module_utils.bench import _load
from testbed.server import LlamaServer

pytestmark = pytest.mark.integration

SIZES = {"prose": {"chars": 300, "n_predict": 16}, "identity": {"n_predict": 16}}
BENCH: dict[str, Any] = {"api": "llamacpp", "shapes": ["prose", "identity"], "prompts_per_shape": 2, "repeats": 1,
                         "warmup": 1, "sizes": SIZES, "engine": "llamacpp", "busy_check": True}


class Neighbour:
    """Another client: long greedy requests one after the other on its own thread, ``count`` of them (or until
    stopped)."""

    def __init__(self, url: str, count: int | None = None, n_predict: int = 384) -> None:
        self.url, self.count, self.n_predict = url, count, n_predict
        self.sent = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self) -> None:
        body = json.dumps({"prompt": "Once upon a time", "n_predict": self.n_predict, "ignore_eos": True,
                           "temperature": 0.0, "cache_prompt": False}).encode()
        while not self.stop.is_set() and (self.count is None or self.sent < self.count):
            req = urllib.request.Request(self.url + "/completion", data=body,
                                         headers={"Content-Type": "application/json"})
            with urllib.request.urlopen(req, timeout=60) as reply:
                reply.read()
            self.sent += 1

    def __enter__(self) -> Neighbour:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(timeout=60)


def busy_slots(url: str) -> int:
    with urllib.request.urlopen(url + "/slots", timeout=10) as reply:
        return sum(1 for s in json.loads(reply.read()) if s.get("is_processing"))


def wait_busy(url: str) -> None:
    deadline = time.monotonic() + 10
    while busy_slots(url) == 0:
        assert time.monotonic() < deadline, "the neighbour's request never showed in /slots"
        time.sleep(0.01)


@pytest.fixture(scope="module")
def server(llama_server_bin: str, standard_models, tmp_path_factory) -> Any:
    srv = LlamaServer(standard_models["target.gguf"], binary=llama_server_bin, parallel=2,
                      log_dir=tmp_path_factory.mktemp("logs"))
    srv.start()
    yield srv
    srv.stop()


def test_a_quiet_server_is_never_busy_with_our_own_requests(server: LlamaServer) -> None:
    # llama-server answers, then releases the slot, in one step: the read after a reply never sees our own request
    b = ep.run_bench(server.url, **BENCH)
    assert b["busy"]["mode"] == "slots" and b["busy"]["token_counter"] is True
    assert b["busy"]["checked"] == 4 and b["contaminated"] == [] and len(b["requests"]) == 4


def test_a_neighbour_that_never_stops_gets_every_request_excluded(server: LlamaServer) -> None:
    with Neighbour(server.url):
        wait_busy(server.url)
        b = ep.run_bench(server.url, busy_retries=1, busy_wait=1, **BENCH)
    assert b["requests"] == []
    assert b["busy"]["contaminated"] == 8 and b["busy"]["repeated"] == 4 and b["busy"]["excluded"] == 4
    assert [c["excluded"] for c in b["contaminated"]] == [False, True] * 4
    assert all("in flight" in c["reason"] or "for other clients" in c["reason"] for c in b["contaminated"])


def test_requests_beside_a_neighbour_are_sent_again_once_it_is_done(server: LlamaServer) -> None:
    with Neighbour(server.url, count=2) as neighbour:
        wait_busy(server.url)
        b = ep.run_bench(server.url, busy_retries=2, busy_wait=30, **BENCH)
    assert neighbour.sent == 2
    assert len(b["requests"]) == 4 and b["busy"]["excluded"] == 0
    assert b["busy"]["contaminated"] >= 1 and b["busy"]["repeated"] == b["busy"]["contaminated"]
    first = b["contaminated"][0]
    assert (first["shape"], first["prompt_index"], first["attempt"]) == ("prose", 0, 0)
    # every kept request ran alone: the slowdown beside the neighbour is not in them
    kept = {(r["shape"], r["prompt_index"]) for r in b["requests"]}
    assert kept == {("prose", 0), ("prose", 1), ("identity", 0), ("identity", 1)}


def test_load_bursts_beside_a_neighbour_are_marked_and_left_out_of_the_rates(server: LlamaServer) -> None:
    params = {"endpoint": server.url, "api": "llamacpp", "shapes": ["identity"], "prompts_per_shape": 2, "repeats": 1,
              "warmup": 0, "sizes": SIZES, "seed": 0, "busy_check": True, "timeout": 60}
    quiet = ep.run_bench(server.url, **{**BENCH, "shapes": ["identity"], "warmup": 0})
    measured = _load.measured_prompts(params, None)
    load = _load.bench_under_load(quiet, params, measured, 2, 2)
    assert load["busy"] == {"bursts": 2, "contaminated_bursts": 0}
    assert all(b["aggregate_tok_s"] for b in load["bursts"])
    with Neighbour(server.url):
        wait_busy(server.url)
        busy = _load.bench_under_load(dict(quiet), params, measured, 2, 2)
    assert busy["busy"] == {"bursts": 2, "contaminated_bursts": 2}
    assert all(b["aggregate_tok_s"] is None and b["contaminated"] for b in busy["bursts"])
    assert all(s["contaminated"] for s in busy["streams"])
