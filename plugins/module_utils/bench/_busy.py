# Copyright: (c) 2026, llmfleet.specdec contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# Private to the collection: is anyone else using the server while the bench measures? (/slots, /metrics)
"""Other clients on the server around each measured request (live traffic during an A/B run).

A request measured while another client's request ran beside it shares the server's batches and is slower than
the config is: its numbers are contaminated. Around every measured request the bench reads:

- **before and after**, whether any other request is in flight: llama-server's ``GET /slots`` (a slot
  ``is_processing``), else its ``llamacpp:requests_processing`` gauge; vLLM's ``vllm:num_requests_running`` and
  ``vllm:num_requests_waiting`` gauges. The server answers these between its decode steps, after it released the
  slot of the reply we just read (llama-server sends the final reply, then releases the slot, in one step of its
  loop; vLLM's scheduler removes a finished request before it records its gauges), so our own request never
  counts as busy.
- **the generated-token counter** (``llamacpp:tokens_predicted_total``, ``vllm:generation_tokens_total``): its
  growth over the request must be the request's own tokens; more means another request finished inside ours,
  which the before/after reads cannot see. llama-server prints totals of 1e6 and more rounded to six digits, so
  there the counter is not used.

A contaminated request is set aside and sent again once the server is idle (``retries`` times at most); one
still contaminated then is excluded from the measured requests. The bench keeps every attempt set aside with its
reason (``contaminated``) and the counts (``busy``), and the report counts them.
"""
from __future__ import annotations

import time
from typing import Any, Callable, Dict, List, Mapping, Optional

from ansible_collections.llmfleet.specdec.plugins.module_utils.bench._breakeven import parse_prometheus
from ansible_collections.llmfleet.specdec.plugins.module_utils.common._errors import SpecdecError

__all__ = ["GAUGES", "TOKEN_COUNTERS", "BusyWatch", "busy_from_metrics", "busy_from_slots"]

GAUGES = {"llamacpp": ("llamacpp:requests_processing",),
          "vllm": ("vllm:num_requests_running", "vllm:num_requests_waiting")}
TOKEN_COUNTERS = {"llamacpp": "llamacpp:tokens_predicted_total", "vllm": "vllm:generation_tokens_total"}
_EXACT_BELOW = 1_000_000  # llama-server prints its totals as doubles with 6 significant digits
_IDLE_POLL_S = 0.25


def busy_from_slots(slots: Any) -> Optional[int]:
    """How many of llama-server's slots are processing a request; None when /slots does not say."""
    if not isinstance(slots, list) or not slots:
        return None
    if not all(isinstance(s, Mapping) and isinstance(s.get("is_processing"), bool) for s in slots):
        return None
    return sum(1 for s in slots if s["is_processing"])


def busy_from_metrics(text: str, engine: str) -> tuple[Optional[int], Optional[float]]:
    """(requests in flight by the engine's gauges, its generated-token total) from a /metrics text; None for what
    the text does not carry (summed over label sets: vLLM labels each engine)."""
    try:
        samples = parse_prometheus(text)
    except SpecdecError:
        return None, None
    gauges = GAUGES.get(engine, ())
    busy = None
    tokens = None
    for name, _labels, value in samples:
        if name in gauges:
            busy = (busy or 0) + round(value)
        elif name == TOKEN_COUNTERS.get(engine):
            tokens = (tokens or 0.0) + value
    return busy, tokens


class BusyWatch:
    """Reads the server's other work around one measured request (see the module's docstring)."""

    def __init__(self, client: Any, engine: str, *, retries: int = 2, idle_wait_s: float = 30.0,
                 sleep: Callable[[float], None] = time.sleep, clock: Callable[[], float] = time.monotonic) -> None:
        if isinstance(retries, bool) or not isinstance(retries, int) or retries < 0:
            raise SpecdecError(f"busy_retries: expected a whole number >= 0, got {retries!r}")
        self.client = client
        self.engine = engine
        self.retries = retries
        self.idle_wait_s = idle_wait_s
        self.sleep = sleep
        self.clock = clock
        self.mode: Optional[str] = None
        self.counter = False
        self.notes: List[str] = []
        self.counts = {"checked": 0, "contaminated": 0, "repeated": 0, "excluded": 0}

    def _metrics(self) -> tuple[Optional[int], Optional[float]]:
        status, raw = self.client.request("GET", "/metrics")
        if status != 200:
            return None, None
        return busy_from_metrics(raw.decode("utf-8", errors="replace"), self.engine)

    def start(self) -> BusyWatch:
        """Decide how this server can be read (once, before the first measured request)."""
        if self.engine == "llamacpp" and busy_from_slots(self.client.slots()) is not None:
            self.mode = "slots"
        busy, tokens = self._metrics()
        if self.mode is None and busy is not None:
            self.mode = "metrics"
        self.counter = tokens is not None
        if self.mode is None:
            self.notes.append("the server says nothing of other clients' requests (no /slots with is_processing, no "
                              "running-requests gauge on /metrics): requests were not checked for other traffic "
                              "(llama-server: keep /slots on and add --metrics; vLLM: keep /metrics on)")
        return self

    def reading(self) -> Dict[str, Any]:
        """{busy: requests in flight or None, tokens: the generated-token total or None}."""
        busy: Optional[int] = None
        tokens: Optional[float] = None
        if self.mode == "slots":
            busy = busy_from_slots(self.client.slots())
        if self.mode == "metrics" or self.counter:
            gauge, tokens = self._metrics()
            if self.mode == "metrics":
                busy = gauge
        return {"busy": busy, "tokens": tokens if self.counter else None}

    def verdict(self, before: Mapping[str, Any], after: Mapping[str, Any], predicted_n: Any) -> Optional[str]:
        """Why the request between two readings is contaminated, or None when nothing else ran beside it."""
        if self.mode is None and not self.counter:
            return None
        self.counts["checked"] += 1
        reasons = []
        if before.get("busy"):
            reasons.append(f"{before['busy']} other request(s) in flight when it was sent")
        if after.get("busy"):
            reasons.append(f"{after['busy']} other request(s) in flight when it ended")
        b, a = before.get("tokens"), after.get("tokens")
        if (isinstance(b, float) and isinstance(a, float) and isinstance(predicted_n, int)
                and a < _EXACT_BELOW and b < _EXACT_BELOW):
            other = round(a - b) - predicted_n
            if other > 0:
                reasons.append(f"the server generated {other} token(s) for other clients during it")
        if reasons:
            self.counts["contaminated"] += 1
        return "; ".join(reasons) or None

    def wait_idle(self) -> bool:
        """Waits (bounded by ``idle_wait_s``) until no other request is in flight; False when it never was."""
        deadline = self.clock() + self.idle_wait_s
        while True:
            if not self.reading().get("busy"):
                return True
            if self.clock() >= deadline:
                return False
            self.sleep(_IDLE_POLL_S)

    def summary(self) -> Dict[str, Any]:
        return {"mode": self.mode, "token_counter": self.counter, "retries": self.retries, **self.counts,
                "notes": list(self.notes)}
