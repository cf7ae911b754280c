"""Other clients' requests beside a measured one (module_utils/bench/_busy.py and the bench's busy check).

The server here is a stand-in object with llama-server's and vLLM's documented /slots and /metrics forms; the
real llama-server with a real concurrent client is tests/integration/test_live_traffic.py.
"""
from __future__ import annotations

from typing import Any

import pytest

from ansible_collections.llmfleet.specdec.plugins.module_utils.bench import _busy
from ansible_collections.llmfleet.specdec.plugins.module_utils.bench import _endpoint as ep

SIZES = {"prose": {"chars": 200, "n_predict": 8}, "identity": {"n_predict": 8}}


class Server:
    """A llama-server (or vLLM) stand-in: ``busy_at`` says, per measured request (by its index in sending order,
    attempts counted), whether a neighbour is in flight around it; ``hidden_at`` a neighbour that starts and ends
    inside it (only the token counter sees it)."""

    shown_url = "http://127.0.0.1:1"

    def __init__(self, engine: str = "llamacpp", busy_at: Any = (), hidden_at: Any = (), slots: bool = True,
                 gauge: bool = True, always_busy: bool = False) -> None:
        self.engine, self.busy_at, self.hidden_at = engine, set(busy_at), set(hidden_at)
        self.has_slots, self.gauge, self.always_busy = slots, gauge, always_busy
        self.sent = 0
        self.tokens = 0
        self.neighbour = False

    def url(self, path: str) -> str:
        return self.shown_url + path

    def health(self) -> dict:
        return {"status": "ok"}

    def props(self) -> Any:
        return {"total_slots": 2} if self.engine == "llamacpp" else None

    def models(self) -> Any:
        return {"data": [{"id": "m", "owned_by": "vllm" if self.engine == "vllm" else "llamacpp"}]}

    def slots(self) -> Any:
        if not self.has_slots or self.engine != "llamacpp":
            return None
        return [{"id": 0, "is_processing": False}, {"id": 1, "is_processing": self.neighbour or self.always_busy}]

    def request(self, method: str, path: str, body: Any = None) -> tuple[int, bytes]:
        assert (method, path) == ("GET", "/metrics")
        if self.engine == "llamacpp":
            text = f"llamacpp:tokens_predicted_total {self.tokens}\n"
            if self.gauge:
                text += f"llamacpp:requests_processing {int(self.neighbour or self.always_busy)}\n"
        else:
            busy = int(self.neighbour or self.always_busy)
            text = (f'vllm:num_requests_running{{engine="0"}} {busy}\nvllm:num_requests_waiting{{engine="0"}} 0\n'
                    f'vllm:generation_tokens_total{{engine="0"}} {float(self.tokens)}\n')
        return 200, text.encode()

    def complete(self, prompt, api, engine, model=None) -> dict:
        index = self.sent
        self.sent += 1
        self.neighbour = index in self.busy_at
        self.tokens += prompt.n_predict + (5 if index in self.hidden_at or self.neighbour else 0)
        return {"text": "x", "empty": False, "used_reasoning_content": False, "predicted_n": prompt.n_predict,
                "prompt_n": 10, "predicted_per_second": 50.0 if self.neighbour else 100.0, "rate_source": "t",
                "draft_n": 0, "draft_n_accepted": 0, "wall_s": 0.1, "e2e_tok_s": 80.0, "ttft_s": 0.01}


def bench(server: Server, **kw) -> dict:
    kw.setdefault("busy_check", True)
    return ep.run_bench(api="llamacpp" if server.engine == "llamacpp" else "openai", shapes=["prose", "identity"],
                        prompts_per_shape=2, repeats=1, warmup=1, sizes=SIZES, metrics=False, client=server,
                        engine=server.engine, busy_wait=0, **kw)


def idle(server: Server) -> None:
    server.neighbour = False


def test_a_quiet_server_has_nothing_contaminated() -> None:
    b = bench(Server())
    assert len(b["requests"]) == 4 and b["contaminated"] == []
    assert b["busy"] | {"notes": []} == {"mode": "slots", "token_counter": True, "retries": 2, "checked": 4,
                                         "contaminated": 0, "repeated": 0, "excluded": 0, "notes": []}


def test_a_request_beside_a_neighbour_is_set_aside_and_sent_again(monkeypatch) -> None:
    server = Server(busy_at={2})  # the warm-up is send 0; measured sends 1..4; send 2 has a neighbour
    monkeypatch.setattr(_busy.BusyWatch, "wait_idle", lambda self: idle(server) or True)
    b = bench(server)
    assert [r["predicted_per_second"] for r in b["requests"]] == [100.0] * 4  # the slow one is not among them
    assert len(b["contaminated"]) == 1
    c = b["contaminated"][0]
    assert (c["shape"], c["prompt_index"], c["attempt"], c["excluded"]) == ("prose", 1, 0, False)
    assert "in flight when it ended" in c["reason"]
    assert b["busy"]["repeated"] == 1 and b["busy"]["excluded"] == 0
    assert any("ran beside other clients' requests" in n for n in b["notes"])


def test_a_request_that_stays_contaminated_is_excluded_after_the_retries() -> None:
    b = bench(Server(always_busy=True), busy_retries=1)
    assert b["requests"] == []
    assert [c["attempt"] for c in b["contaminated"]] == [0, 1, 0, 1, 0, 1, 0, 1]
    assert [c["excluded"] for c in b["contaminated"]] == [False, True] * 4
    assert b["busy"]["excluded"] == 4 and b["busy"]["repeated"] == 4


def test_the_token_counter_sees_a_neighbour_that_came_and_went_inside_a_request() -> None:
    b = bench(Server(hidden_at={3}), busy_retries=0)
    assert len(b["requests"]) == 3 and b["contaminated"][0]["excluded"] is True
    assert b["contaminated"][0]["reason"] == "the server generated 5 token(s) for other clients during it"


def test_vllm_gauges_and_counter() -> None:
    # the neighbour of send 1 is still in flight when send 2 begins (nothing waits for idle without retries)
    b = bench(Server(engine="vllm", busy_at={1}, hidden_at={4}), busy_retries=0)
    assert b["busy"]["mode"] == "metrics" and b["busy"]["token_counter"] is True
    assert [(c["shape"], c["prompt_index"]) for c in b["contaminated"]] == [("prose", 0), ("prose", 1), ("identity", 1)]
    assert "in flight when it was sent" in b["contaminated"][1]["reason"]
    assert [(r["shape"], r["prompt_index"]) for r in b["requests"]] == [("identity", 0)]


def test_without_slots_the_llamacpp_gauge_is_read() -> None:
    b = bench(Server(slots=False, busy_at={1}), busy_retries=0)
    assert b["busy"]["mode"] == "metrics" and len(b["contaminated"]) == 2 and len(b["requests"]) == 2


def test_a_server_that_says_nothing_is_measured_with_a_note() -> None:
    class Mute(Server):
        def request(self, method, path, body=None):
            return 501, b"no metrics"
    b = bench(Mute(slots=False, busy_at={1}))
    assert b["busy"]["mode"] is None and b["busy"]["checked"] == 0 and len(b["requests"]) == 4
    assert any("says nothing of other clients' requests" in n for n in b["notes"])


def test_busy_check_off_keeps_the_bench_as_it_was() -> None:
    b = bench(Server(always_busy=True), busy_check=False)
    assert len(b["requests"]) == 4 and "busy" not in b and "contaminated" not in b


def test_parsers() -> None:
    assert _busy.busy_from_slots([{"is_processing": True}, {"is_processing": False}]) == 1
    assert _busy.busy_from_slots([{"id": 0}]) is None and _busy.busy_from_slots(None) is None
    assert _busy.busy_from_metrics("llamacpp:requests_processing 2\nllamacpp:tokens_predicted_total 1.23457e+06\n",
                                   "llamacpp") == (2, 1234570.0)
    assert _busy.busy_from_metrics("not prometheus {", "vllm") == (None, None)
    with pytest.raises(Exception, match="busy_retries"):
        _busy.BusyWatch(Server(), "llamacpp", retries=-1)


def test_rounded_llamacpp_totals_are_not_compared() -> None:
    watch = _busy.BusyWatch(Server(), "llamacpp").start()
    assert watch.verdict({"busy": 0, "tokens": 1234570.0}, {"busy": 0, "tokens": 1234580.0}, 3) is None
