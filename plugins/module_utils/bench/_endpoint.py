# Copyright: (c) 2026, llmfleet.specdec contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# Private to the collection: HTTP to one running llama-server or vLLM endpoint, and the bench that measures it (no decisions).
"""A small client for the server a host runs, and the measuring loop of spec_bench.

Endpoints used (llama-server / vLLM):

- ``GET /health``: ``{"status": "ok"}`` / an empty 200; 503 "Loading model" while loading;
- ``GET /props`` (llama-server only) and ``GET /v1/models`` (both; ``owned_by`` names the engine);
- ``GET /slots`` (llama-server with ``--slots``): each slot's ``speculative`` flag, the only
  place llama-server says whether speculation is on (``/props`` does not);
- ``GET /metrics`` (llama-server needs ``--metrics``): the ``llamacpp:spec_decode_*`` and
  ``vllm:spec_decode_*`` counters, read by ``_breakeven.parse_spec_counters``;
- ``POST /completion`` (llama.cpp native) and ``POST /v1/chat/completions`` (OpenAI-compatible).

Every request is greedy (temperature 0) and does the same work each time: llama.cpp gets
``cache_prompt: false``; vLLM gets a fresh ``cache_salt`` so its prefix cache is not shared
between requests. Thinking is disabled per chat request with
``chat_template_kwargs: {"enable_thinking": false}`` (templates without the switch ignore it);
an answer whose ``content`` is empty falls back to ``reasoning_content``.

Decode tok/s is llama.cpp's ``timings.predicted_per_second`` (both APIs carry ``timings``). vLLM's
reply has no timings: its rate is ``usage.completion_tokens / wall time`` of the request, which
includes the prompt's prefill; the record says which with ``rate_source``.
"""
from __future__ import annotations

import json
import math
import time
import uuid
from typing import Any, Mapping

from ansible_collections.llmfleet.specdec.plugins.module_utils.bench._breakeven import (
    COUNTER_KEYS,
    EXPORTED_KEY,
    PER_POSITION_KEY,
    parse_spec_counters,
)
from ansible_collections.llmfleet.specdec.plugins.module_utils.bench._busy import BusyWatch
from ansible_collections.llmfleet.specdec.plugins.module_utils.bench._shapes import (
    Prompt,
    build_shapes,
    check_shapes,
    summarize,
)
from ansible_collections.llmfleet.specdec.plugins.module_utils.common._errors import SpecdecError
from ansible_collections.llmfleet.specdec.plugins.module_utils.common._http import TOTAL_GRACE, HttpError, redact_url
from ansible_collections.llmfleet.specdec.plugins.module_utils.common._http import request as http_request

__all__ = [
    "APIS",
    "BENCH_SCHEMA",
    "ENGINES",
    "Endpoint",
    "EndpointError",
    "RejectedReplyError",
    "counter_delta",
    "counters_from_metrics",
    "detect_server",
    "parse_reply",
    "parse_spec_counters",
    "plan_requests",
    "run_bench",
]

BENCH_SCHEMA = "llmfleet.specdec/bench/1"
APIS = ("llamacpp", "openai")
ENGINES = ("llamacpp", "vllm")
# llama-server prints its spec totals as C++ doubles with 6 significant digits: from 1e6 on they are rounded.
_LLAMACPP_EXACT_BELOW = 1_000_000
_BODY_START = 300
# The largest reply read whole: far above any real /completion, /props or /metrics body, far below what
# would hurt the host (a reply is held about twice: bytes, then parsed).
MAX_REPLY_BYTES = 32 * 1024 * 1024
_ERROR_BODY_BYTES = 64 * 1024  # of an error status's body only the start is shown


class EndpointError(SpecdecError):
    """A request to the endpoint failed: unreachable, an error status, or a reply that is not what it should be."""


class RejectedReplyError(EndpointError):
    """One reply whose numbers cannot be measurements (NaN, infinite, negative): the bench sets that request
    aside with the reason and goes on with the next."""


def _loads(raw: bytes | bytearray) -> Any:
    """json.loads that fails as ValueError on every bad body, nesting too deep for the parser included."""
    try:
        return json.loads(raw.decode("utf-8"))
    except RecursionError:
        raise ValueError("the JSON is nested too deep to be a server's reply") from None


# ---------------------------------------------------------------------------------------------
# pure parsing (recorded replies in the unit tests go through here)


def counters_from_metrics(text: str) -> dict[str, Any]:
    """The speculation counters of a /metrics text as whole numbers, in the bench's key names.

    ``{"engine": "llama.cpp"|"vllm", "exported": bool, "drafts", "draft_tokens", "accepted_tokens",
    "accepted_per_pos": [int, ...], "exact": bool}``. ``exact`` is false when a llama.cpp total has
    reached 1e6, where llama-server prints it rounded to 6 significant digits.
    """
    parsed = parse_spec_counters(text)
    out: dict[str, Any] = {
        "engine": parsed["engine"],
        EXPORTED_KEY: parsed[EXPORTED_KEY],
        "drafts": _counter(parsed["drafts"], "drafts"),
        "draft_tokens": _counter(parsed["draft_tokens"], "draft tokens"),
        "accepted_tokens": _counter(parsed["accepted_tokens"], "accepted tokens"),
        PER_POSITION_KEY: [_counter(v, f"accepted tokens at position {i}")
                           for i, v in enumerate(parsed[PER_POSITION_KEY])],
    }
    out["exact"] = not (parsed["engine"] == "llama.cpp"
                        and max(out[k] for k in COUNTER_KEYS) >= _LLAMACPP_EXACT_BELOW)
    return out


def _counter(value: float, what: str) -> int:
    """A counter's value as a whole number; NaN, infinite or negative is not a counter."""
    if not math.isfinite(value) or value < 0:
        raise EndpointError(f"/metrics: the speculation counter of {what} is {value!r}, not a count; "
                            "the server's metrics are broken (restart it, or set metrics: false)")
    return round(value)


def counter_delta(before: Mapping[str, Any], after: Mapping[str, Any], where: str = "/metrics") -> dict[str, Any]:
    """after - before for the three totals and per position; a counter that went down is an error."""
    delta: dict[str, Any] = {}
    for key in COUNTER_KEYS:
        delta[key] = int(after[key]) - int(before[key])
    b_pos, a_pos = list(before[PER_POSITION_KEY]), list(after[PER_POSITION_KEY])
    width = max(len(b_pos), len(a_pos))
    b_pos += [0] * (width - len(b_pos))
    a_pos += [0] * (width - len(a_pos))
    delta[PER_POSITION_KEY] = [a - b for a, b in zip(a_pos, b_pos)]
    if any(delta[k] < 0 for k in COUNTER_KEYS) or any(v < 0 for v in delta[PER_POSITION_KEY]):
        raise EndpointError(
            f"{where}: the speculation counters went down between two reads ({dict(before)} -> {dict(after)}); "
            "the server restarted during the bench. Run it again on a server that stays up.")
    return delta


def _int_or_none(value: Any, name: str = "a count") -> int | None:
    """A count from a reply: None where it is absent or not a number; NaN, infinite or negative is refused."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    if not math.isfinite(value) or value < 0:
        raise RejectedReplyError(f"{name} is {value!r}, not a count")
    return int(value)


def _text_of(reply: Mapping[str, Any], api: str) -> tuple[str, bool]:
    """(text, used_reasoning_content): ``content``, else the chat message's ``reasoning_content``."""
    if api == "llamacpp":
        content = reply.get("content")
        return (content if isinstance(content, str) else ""), False
    choices = reply.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], Mapping):
        raise ValueError("no choices[0] in the reply")
    message = choices[0].get("message")
    if not isinstance(message, Mapping):
        raise ValueError("no choices[0].message in the reply")
    content = message.get("content")
    if isinstance(content, str) and content:
        return content, False
    reasoning = message.get("reasoning_content")
    if not (isinstance(reasoning, str) and reasoning):
        reasoning = message.get("reasoning")  # newer vLLM names it so
    if isinstance(reasoning, str) and reasoning:
        return reasoning, True
    return "", False


def parse_reply(reply: Any, api: str, wall_s: float) -> dict[str, Any]:
    """One request's measurements from its reply (ValueError when the reply lacks what it must carry).

    Returns the request record of the bench without its shape/prompt_index/repeat/metrics_delta.
    """
    if not isinstance(reply, Mapping):
        raise ValueError(f"the reply is a {type(reply).__name__}, not a JSON object")
    text, used_reasoning = _text_of(reply, api)
    timings = reply.get("timings") if isinstance(reply.get("timings"), Mapping) else None
    usage = reply.get("usage") if isinstance(reply.get("usage"), Mapping) else {}
    predicted_n = _int_or_none(timings.get("predicted_n"), "timings.predicted_n") if timings else None
    if predicted_n is None:
        predicted_n = _int_or_none(usage.get("completion_tokens"), "usage.completion_tokens")
    if predicted_n is None:
        predicted_n = _int_or_none(reply.get("tokens_predicted"), "tokens_predicted")
    if predicted_n is None:
        raise ValueError("the reply says nothing of how many tokens it generated "
                         "(no timings.predicted_n, usage.completion_tokens or tokens_predicted)")
    if timings and isinstance(timings.get("predicted_per_second"), (int, float)):
        rate: float | None = float(timings["predicted_per_second"])
        if not math.isfinite(rate) or rate < 0:
            raise RejectedReplyError(f"timings.predicted_per_second is {rate!r}, not a rate")
        rate_source = "timings.predicted_per_second"
        prompt_n = _int_or_none(timings.get("prompt_n"), "timings.prompt_n")
    else:
        rate = predicted_n / wall_s if wall_s > 0 and predicted_n > 0 else None
        rate_source = "usage.completion_tokens / wall_s (includes prefill)"
        prompt_n = _int_or_none(usage.get("prompt_tokens"), "usage.prompt_tokens")
    # The whole request as the client saw it: prompt processing, the draft's own prefill and decode. The time
    # before decode began (prompt, draft prefill, the HTTP round trip) is the time to the first token.
    e2e = predicted_n / wall_s if wall_s > 0 and predicted_n > 0 else None
    ttft = None
    if timings and isinstance(timings.get("predicted_ms"), (int, float)) and math.isfinite(timings["predicted_ms"]):
        ttft = max(0.0, wall_s - float(timings["predicted_ms"]) / 1000.0)
    draft_n = (_int_or_none(timings.get("draft_n"), "timings.draft_n") or 0) if timings else 0
    draft_n_accepted = (_int_or_none(timings.get("draft_n_accepted"), "timings.draft_n_accepted") or 0) if timings else 0
    if draft_n_accepted > draft_n:
        raise RejectedReplyError(f"timings.draft_n_accepted ({draft_n_accepted}) is more than timings.draft_n "
                                 f"({draft_n}): more tokens accepted than drafted")
    return {
        "text": text,
        "empty": text == "",
        "used_reasoning_content": used_reasoning,
        "predicted_n": predicted_n,
        "prompt_n": prompt_n,
        "predicted_per_second": rate,
        "rate_source": rate_source,
        "draft_n": draft_n,
        "draft_n_accepted": draft_n_accepted,
        "wall_s": wall_s,
        "e2e_tok_s": e2e,
        "ttft_s": ttft,
    }


def engine_from_models(models: Any) -> str | None:
    """"llamacpp" or "vllm" from a /v1/models reply's ``owned_by``, else None."""
    data = models.get("data") if isinstance(models, Mapping) else None
    if isinstance(data, list):
        for entry in data:
            owner = entry.get("owned_by") if isinstance(entry, Mapping) else None
            if owner in ENGINES:
                return owner
    return None


def model_from_models(models: Any) -> str | None:
    """The first model id of a /v1/models reply."""
    data = models.get("data") if isinstance(models, Mapping) else None
    if isinstance(data, list) and data and isinstance(data[0], Mapping) and isinstance(data[0].get("id"), str):
        return data[0]["id"]
    return None


# ---------------------------------------------------------------------------------------------
# the client


class BenchInterruptedError(EndpointError):
    """A measurement that stopped after it started: ``bench`` holds the requests measured before the
    failure (the report keeps them beside the error), ``cause`` the error that stopped it."""

    def __init__(self, message: str, bench: dict[str, Any], cause: SpecdecError) -> None:
        super().__init__(message)
        self.bench = bench
        self.cause = cause


class Endpoint:
    """One server by its base URL. Requests go through the collection's bounded HTTP client (``_http``), no
    proxy: ``timeout`` bounds each wait on the socket, ``total_timeout`` a whole request, and a reply past
    :data:`MAX_REPLY_BYTES` is refused. Messages name the URL without query string or user info."""

    def __init__(self, base_url: str, *, timeout: float = 600, validate_certs: bool = True,
                 api_key: str | None = None, total_timeout: float | None = None,
                 max_reply_bytes: int = MAX_REPLY_BYTES) -> None:
        if not isinstance(base_url, str) or not base_url.startswith(("http://", "https://")):
            raise EndpointError(f"endpoint: expected an http:// or https:// base URL, got {redact_url(base_url)!r}")
        if total_timeout is None:
            total_timeout = timeout + TOTAL_GRACE if isinstance(timeout, (int, float)) else timeout
        for name, value in (("timeout", timeout), ("total_timeout", total_timeout)):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
                raise EndpointError(f"{name}: expected a number of seconds > 0, got {value!r}")
        self.base_url = base_url.rstrip("/")
        self.shown_url = redact_url(self.base_url)  # what messages and the bench show
        self.timeout = timeout
        self.total_timeout = total_timeout
        self.max_reply_bytes = max_reply_bytes
        self.validate_certs = validate_certs
        self.api_key = api_key
        self._salt = uuid.uuid4().hex
        self._sent = 0

    def url(self, path: str) -> str:
        """The redacted URL of ``path``, for messages."""
        return self.shown_url + path

    def request(self, method: str, path: str, body: Any = None) -> tuple[int, bytes]:
        """(status, raw body); an error status is returned, an unreachable server, a broken reply, one past
        the deadline or the size cap raise EndpointError."""
        url = self.base_url + path
        headers = {"Accept": "application/json"}
        data = None
        if body is not None:
            data = json.dumps(body).encode("utf-8")
            headers["Content-Type"] = "application/json"
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        try:
            with http_request(method, url, headers=headers, data=data, timeout=self.timeout,
                              total_timeout=self.total_timeout, validate_certs=self.validate_certs) as reply:
                if reply.status == 200:
                    return reply.status, bytes(reply.read_all(self.max_reply_bytes))
                # of an error status only the start is shown: no need to wait for the rest
                return reply.status, reply.read_some(_ERROR_BODY_BYTES, _ERROR_BODY_BYTES)
        except HttpError as exc:
            hint = " (raise timeout, or lower sizes.<shape>.n_predict)" if exc.timed_out else ""
            raise EndpointError(f"{exc}{hint}") from None

    def _json(self, method: str, path: str, body: Any = None, ok_missing: bool = False) -> Any:
        status, raw = self.request(method, path, body)
        if ok_missing and status in (404, 501):
            return None
        if status != 200:
            raise EndpointError(f"{method} {self.url(path)}: HTTP {status}: {_start(raw)}")
        try:
            return _loads(raw)
        except ValueError:
            raise EndpointError(f"{method} {self.url(path)}: HTTP 200 but the body is not JSON: {_start(raw)}") from None

    def health(self) -> dict[str, Any]:
        """``/health``'s body ({} for an empty 200); anything but 200 raises (503 while loading)."""
        status, raw = self.request("GET", "/health")
        if status != 200:
            raise EndpointError(f"GET {self.url('/health')}: HTTP {status}: {_start(raw)}; "
                                "the server is not ready (still loading, or failing)")
        try:
            body = _loads(raw) if raw.strip() else {}
        except ValueError:
            body = {"text": _start(raw)}
        return body if isinstance(body, dict) else {"body": body}

    def props(self) -> dict[str, Any] | None:
        """llama-server's /props, or None where the server has none (vLLM)."""
        return self._json("GET", "/props", ok_missing=True)

    def slots(self) -> list[dict[str, Any]] | None:
        """llama-server's /slots, or None where it is not served (no --slots, vLLM)."""
        return self._json("GET", "/slots", ok_missing=True)

    def models(self) -> dict[str, Any] | None:
        """/v1/models, or None where it is not served."""
        return self._json("GET", "/v1/models", ok_missing=True)

    def metrics_text(self) -> str:
        """The Prometheus text of /metrics; llama-server answers 501 without --metrics."""
        status, raw = self.request("GET", "/metrics")
        if status != 200:
            hint = ("; llama-server serves /metrics only when started with --metrics "
                    "(LLAMA_ARG_ENDPOINT_METRICS=1), or set metrics: false") if status in (404, 501) else ""
            raise EndpointError(f"GET {self.url('/metrics')}: HTTP {status}: {_start(raw)}{hint}")
        return raw.decode("utf-8", errors="replace")

    def spec_counters(self) -> dict[str, Any]:
        """counters_from_metrics of this server's /metrics, errors naming the URL."""
        text = self.metrics_text()
        try:
            return counters_from_metrics(text)
        except SpecdecError as exc:
            raise EndpointError(f"GET {self.url('/metrics')}: {exc}") from None

    def request_body(self, prompt: Prompt, api: str, engine: str, model: str | None = None) -> tuple[str, dict]:
        """(path, JSON body) of one greedy request for ``prompt``."""
        if api == "llamacpp":
            return "/completion", {"prompt": prompt.prompt, "n_predict": prompt.n_predict,
                                   "temperature": 0.0, "cache_prompt": False}
        body: dict[str, Any] = {"messages": prompt.messages(), "max_tokens": prompt.n_predict,
                                "temperature": 0.0, "stream": False,
                                "chat_template_kwargs": {"enable_thinking": False}}
        if model:
            body["model"] = model
        if engine == "llamacpp":
            body["cache_prompt"] = False
        else:
            self._sent += 1
            body["cache_salt"] = f"specdec-{self._salt}-{self._sent}"
        return "/v1/chat/completions", body

    def complete(self, prompt: Prompt, api: str = "llamacpp", engine: str = "llamacpp",
                 model: str | None = None) -> dict[str, Any]:
        """Sends one request and returns its measurements (see :func:`parse_reply`)."""
        if api not in APIS:
            raise EndpointError(f"api: expected one of {', '.join(APIS)}, got {api!r}")
        path, body = self.request_body(prompt, api, engine, model)
        started = time.perf_counter()
        status, raw = self.request("POST", path, body)
        wall_s = time.perf_counter() - started
        url = self.url(path)
        if status != 200:
            hint = ""
            if status == 404 and api == "llamacpp":
                hint = "; only llama-server has the native /completion: set api: openai for vLLM"
            raise EndpointError(f"POST {url}: HTTP {status}: {_start(raw)}{hint}")
        try:
            reply = _loads(raw)
        except ValueError:
            raise EndpointError(f"POST {url}: HTTP 200 but the body is not JSON: {_start(raw)}") from None
        try:
            return parse_reply(reply, api, wall_s)
        except RejectedReplyError as exc:
            raise RejectedReplyError(f"POST {url}: {exc}") from None
        except ValueError as exc:
            raise EndpointError(f"POST {url}: {exc}: {_start(raw)}") from None


def _start(raw: bytes) -> str:
    """The start of a body for an error message: the server's own error message when it gives one."""
    text = raw.decode("utf-8", errors="replace").strip()
    if not text:
        return "(empty body)"
    try:
        body = json.loads(text)
    except (ValueError, RecursionError):
        body = None
    if isinstance(body, dict):
        error = body.get("error")
        message = error.get("message") if isinstance(error, dict) else (error or body.get("detail"))
        if isinstance(message, str) and message:
            text = message
    text = " ".join(text.split())
    return text[:_BODY_START] + ("..." if len(text) > _BODY_START else "")


# ---------------------------------------------------------------------------------------------
# the bench


def detect_server(client: Endpoint, engine: str = "auto") -> dict[str, Any]:
    """The bench's ``server`` entry: engine, /props (llama-server), model id, /slots' speculative flag."""
    props = client.props()
    models = client.models()
    found = "llamacpp" if props is not None else engine_from_models(models)
    if engine == "auto":
        if found is None:
            raise EndpointError(f"{client.shown_url}: cannot tell llama-server from vLLM (no /props, "
                                "/v1/models names no owner); set engine: llamacpp or engine: vllm")
        engine = found
    elif engine not in ENGINES:
        raise EndpointError(f"engine: expected auto or one of {', '.join(ENGINES)}, got {engine!r}")
    model = model_from_models(models)
    if model is None and isinstance(props, Mapping):
        model = props.get("model_alias") or props.get("model_path")
    slots = client.slots() if engine == "llamacpp" else None
    speculative = None
    if isinstance(slots, list) and slots and all(isinstance(s, Mapping) and "speculative" in s for s in slots):
        speculative = any(bool(s["speculative"]) for s in slots)
    return {"engine": engine, "props": props, "model": model, "speculative": speculative}


def _check_count(name: str, value: Any, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise EndpointError(f"{name}: expected a whole number >= {minimum}, got {value!r}")
    return value


def plan_requests(seed: int = 0, sizes: Mapping[str, Any] | None = None, shapes: Any = None,
                  prompts_per_shape: int = 1, repeats: int = 3, warmup: int = 1,
                  reuse_prompts: bool = False, custom: Mapping[str, Any] | None = None,
                  ) -> tuple[list[Prompt], list[tuple[int, Prompt]], dict[str, list[Prompt]]]:
    """(warm-up prompts, [(repeat, prompt)] in sending order, shape -> the distinct measured prompts).

    Order: for each repeat, for each shape, for each prompt. Without ``reuse_prompts`` every
    repeat sends new prompts (index ``repeat * prompts_per_shape + i``): an n-gram drafter such as
    llama.cpp's ngram-mod keeps its table across requests, so a prompt sent twice at temperature 0
    would be drafted from its own earlier answer. Warm-up prompts are never measured ones (the
    next indices of each shape, in turn), for the same reason.
    """
    prompts_per_shape = _check_count("prompts_per_shape", prompts_per_shape, 1)
    repeats = _check_count("repeats", repeats, 1)
    warmup = _check_count("warmup", warmup, 0)
    names = check_shapes(shapes, custom)  # custom: the operator's shapes (_traffic), after the built-in ones
    distinct = prompts_per_shape if reuse_prompts else prompts_per_shape * repeats
    extra = -(-warmup // len(names))  # warm-up prompt indices needed per shape
    built = build_shapes(seed=seed, sizes=sizes, prompts_per_shape=distinct + extra, shapes=shapes, custom=custom)
    schedule = [(repeat, built[shape][i if reuse_prompts else repeat * prompts_per_shape + i])
                for repeat in range(repeats) for shape in names for i in range(prompts_per_shape)]
    warm = [built[shape][distinct + i] for i in range(extra) for shape in names][:warmup]
    return warm, schedule, {shape: built[shape][:distinct] for shape in names}


def measure_batches(client: Endpoint, batches: Any, *, repeats: int = 5, prefix: int = 96) -> dict[str, Any]:
    """The time llama-server takes for a batch of b tokens on a cached prefix: what verifying K drafted tokens
    costs (b = K + 1) and, on a draft model served alone, what its prefill of the accepted tokens costs.

    A prompt is tokenized (``/tokenize``) and sent once with ``cache_prompt`` so that slot 0 holds it; then, per
    batch size and repeat, the prefix plus b new tokens (a different continuation each time, so nothing past the
    prefix is cached) with ``n_predict: 1``: ``timings.prompt_ms`` is the batch's time when ``prompt_n == b``.
    Returns ``{"batches": {b: median ms}, "samples": {b: [ms...]}, "step_ms": ms of b = 1, "notes": [...]}``.
    """
    sizes = sorted({1, *(_check_count("verify batch", int(b), 1) for b in batches or [])})
    text = " ".join(f"word{i} and the number {i * 7} follow" for i in range(prefix))
    status, raw = client.request("POST", "/tokenize", {"content": text})
    if status != 200:
        return {"batches": {}, "samples": {}, "step_ms": None,
                "notes": [f"POST /tokenize: HTTP {status}: no batch timings on this server"]}
    try:
        tokens = [int(t) for t in _loads(raw)["tokens"]]
    except (ValueError, KeyError, TypeError):
        return {"batches": {}, "samples": {}, "step_ms": None, "notes": ["/tokenize: no token list in the reply"]}
    base = tokens[:prefix]
    pool = tokens[prefix:] or tokens
    if len(base) < 8 or not pool:
        return {"batches": {}, "samples": {}, "step_ms": None, "notes": ["/tokenize: too few tokens for a prefix"]}

    def send(prompt: list[int]) -> tuple[int | None, float | None]:
        body = {"prompt": prompt, "n_predict": 1, "temperature": 0.0, "cache_prompt": True, "id_slot": 0}
        code, reply = client.request("POST", "/completion", body)
        if code != 200:
            raise EndpointError(f"POST {client.url('/completion')} (batch timing): HTTP {code}: {_start(reply)}")
        timings = _loads(reply).get("timings") or {}
        n, ms = timings.get("prompt_n"), timings.get("prompt_ms")
        return (n if isinstance(n, int) else None), (float(ms) if isinstance(ms, (int, float)) else None)

    send(base)  # the prefix into slot 0's cache
    samples: dict[int, list[float]] = {b: [] for b in sizes}
    notes: list[str] = []
    turn = 0
    for _rep in range(repeats):
        for b in sizes:
            turn += 1
            extra = [pool[(turn * 7 + i) % len(pool)] for i in range(b)]
            n, ms = send(base + extra)
            if n == b and ms is not None and math.isfinite(ms) and ms > 0:
                samples[b].append(ms)
            elif n is not None and n != b:
                notes.append(f"a batch of {b} was processed as {n} tokens (the cache did not hold the prefix)")
    medians = {b: sorted(v)[len(v) // 2] for b, v in samples.items() if v}
    return {"batches": {str(b): ms for b, ms in medians.items()}, "samples": {str(b): v for b, v in samples.items()},
            "step_ms": medians.get(1), "notes": sorted(set(notes))}


def run_bench(endpoint: str = "http://127.0.0.1:8080", api: str = "llamacpp", shapes: Any = None,
              prompts_per_shape: int = 1, repeats: int = 3, warmup: int = 1, seed: int = 0,
              sizes: Mapping[str, Any] | None = None, timeout: float = 600, metrics: bool = True,
              validate_certs: bool = True, engine: str = "auto", model: str | None = None,
              api_key: str | None = None, reuse_prompts: bool = False,
              total_timeout: float | None = None, client: Endpoint | None = None,
              custom: Mapping[str, Any] | None = None, verify_k: Any = None, busy_check: bool = False,
              busy_retries: int = 2, busy_wait: float = 30.0) -> dict[str, Any]:
    """Measures ONE running server config: warm-up, then shapes x prompts x repeats (see
    :func:`plan_requests`), with /metrics read between requests. Returns the bench dict of the
    measurement contract. Changes nothing on the server but its counters and caches.

    ``verify_k``: draft depths K whose verification cost is timed on this server after the measured requests
    (a batch of K + 1 tokens on a cached prefix, :func:`measure_batches`), kept as the bench's ``verify``.

    ``busy_check``: around every measured request, did another client use the server (``_busy.BusyWatch``)? Such a
    request is set aside in ``contaminated`` and sent again once the server is idle, ``busy_retries`` times at most
    (waiting up to ``busy_wait`` seconds for idle each time); one still contaminated is excluded. ``busy`` counts.

    A reply whose numbers cannot be measurements (NaN, infinite or negative) is set aside in
    ``rejected`` with the reason and the bench goes on; any other failure once measuring began raises
    :class:`BenchInterruptedError` carrying the requests measured before it.
    """
    if api not in APIS:
        raise EndpointError(f"api: expected one of {', '.join(APIS)}, got {api!r}")
    warm, schedule, measured = plan_requests(seed, sizes, shapes, prompts_per_shape, repeats, warmup,
                                             reuse_prompts, custom)
    started = time.perf_counter()
    client = client or Endpoint(endpoint, timeout=timeout, validate_certs=validate_certs, api_key=api_key,
                                total_timeout=total_timeout)
    client.health()
    server = detect_server(client, engine)
    if api == "llamacpp" and server["engine"] != "llamacpp":
        raise EndpointError(f"api: llamacpp needs llama-server's native /completion, but {client.shown_url} "
                            "is vLLM; set api: openai")
    model = model or server["model"]
    notes: list[str] = []
    if server["engine"] == "vllm":
        notes.append("vLLM replies carry no timings: predicted_per_second is usage.completion_tokens / wall_s "
                     "(prefill included) and draft_n / draft_n_accepted are 0; read metrics_delta instead.")

    if metrics:
        client.spec_counters()  # fail before the warm-up when /metrics cannot be read
    for prompt in warm:
        try:
            client.complete(prompt, api, server["engine"], model)
        except RejectedReplyError:
            pass  # warm-up replies are discarded anyway; a broken server shows in the measured ones

    before = client.spec_counters() if metrics else None
    first = before
    if before is not None and not before[EXPORTED_KEY] and server["engine"] == "vllm":
        notes.append("vLLM exports no spec_decode counters: no speculative config on this server.")
    requests: list[dict[str, Any]] = []
    rejected: list[dict[str, Any]] = []
    contaminated: list[dict[str, Any]] = []
    watch = BusyWatch(client, server["engine"], retries=busy_retries, idle_wait_s=busy_wait).start() \
        if busy_check else None

    def document(total: dict[str, Any] | None) -> dict[str, Any]:
        busy = {"contaminated": contaminated, "busy": watch.summary()} if watch is not None else {}
        return {
            "schema": BENCH_SCHEMA,
            "endpoint": client.shown_url,
            "api": api,
            "server": server,
            "shapes": {shape: summarize(prompts) for shape, prompts in measured.items()},
            "warmup": len(warm),
            "requests": requests,
            "rejected": rejected,
            "metrics_total_delta": total,
            "notes": notes + (watch.notes if watch is not None else []),
            "elapsed_s": round(time.perf_counter() - started, 3),
            **busy,
        }

    queue = [(repeat, prompt, 0) for repeat, prompt in schedule]
    while queue:
        repeat, prompt, attempt = queue.pop(0)
        record: dict[str, Any] = {"shape": prompt.shape, "prompt_index": prompt.index, "repeat": repeat,
                                  "prompt_sha256": prompt.sha256}
        try:
            seen_before = watch.reading() if watch is not None else None
            try:
                record.update(client.complete(prompt, api, server["engine"], model))
                reason = None
            except RejectedReplyError as exc:
                reason = str(exc)
            if before is not None:
                # read even after a rejected reply, so that the next request's delta is its own
                after = client.spec_counters()
                record["metrics_delta"] = counter_delta(before, after, client.url("/metrics"))
                before = after
            else:
                record["metrics_delta"] = None
            busy_reason = watch.verdict(seen_before, watch.reading(), record.get("predicted_n")) \
                if watch is not None and seen_before is not None and reason is None else None
            if busy_reason is not None:
                excluded = attempt >= watch.retries
                kept = {key: record.get(key) for key in ("shape", "prompt_index", "repeat", "prompt_sha256",
                                                         "predicted_per_second", "wall_s")}
                contaminated.append({**kept, "attempt": attempt, "reason": busy_reason, "excluded": excluded})
                if excluded:
                    watch.counts["excluded"] += 1
                else:
                    watch.counts["repeated"] += 1
                    watch.wait_idle()
                    queue.insert(0, (repeat, prompt, attempt + 1))
                continue
        except Exception as exc:  # whatever broke, the requests measured so far are kept
            cause = exc if isinstance(exc, SpecdecError) else EndpointError(
                f"{client.shown_url}: unexpected {type(exc).__name__} while measuring: {exc}")
            # The server died or broke mid-measurement: what was measured before it is kept.
            notes.append(f"stopped after {len(requests)} of {len(schedule)} measured requests: {cause}")
            raise BenchInterruptedError(f"{cause} (after {len(requests)} of {len(schedule)} measured requests; "
                                        "those are returned in bench)", document(None), cause) from None
        if reason is not None:
            rejected.append({**{key: record[key] for key in ("shape", "prompt_index", "repeat", "prompt_sha256",
                                                             "metrics_delta")}, "reason": reason})
            continue
        requests.append(record)
    if watch is not None and watch.counts["contaminated"]:
        notes.append(f"{watch.counts['contaminated']} measured request(s) ran beside other clients' requests (see "
                     f"contaminated): {watch.counts['repeated']} sent again once the server was idle, "
                     f"{watch.counts['excluded']} excluded after {watch.retries} repeat(s)")
    if rejected:
        notes.append(f"{len(rejected)} of {len(schedule)} measured replies were rejected (see rejected) and are "
                     "not in requests: their numbers were not measurements (NaN, infinite or negative); "
                     "their counters still count in metrics_total_delta")
    total = counter_delta(first, before, client.url("/metrics")) if first is not None else None
    if first is not None and not (first["exact"] and before["exact"]):
        notes.append("llama-server prints spec totals of 1e6 and more rounded to 6 digits: the per-request "
                     "/metrics deltas are not exact on this long-running server; restart it before benching.")
    result = document(total)
    if verify_k and server["engine"] == "llamacpp":
        # after the measured requests (they ran without a cached prompt) and their counters, before any load
        result["verify"] = measure_batches(client, [int(k) + 1 for k in verify_k])
        result["verify"]["k"] = sorted({int(k) for k in verify_k})
    return result
