# Copyright: (c) 2026, llmfleet.specdec contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# Private to the collection: the screen's traffic and metric, the ones the confirmatory verdict judges.
"""What the screen sends and how its requests add up: the traffic and the metric of the run's confirmatory endpoint.

- :func:`screen_prompts`: the prompts of every shape the endpoint weighs (a weight above 0), built-in or the
  operator's own traffic file: the first ``prompts_per_shape`` of each, the same prompts the rounds' first repeat
  sends (``_endpoint.plan_requests``), so the screen's cost is bounded by ``prompts_per_shape`` requests a shape.
- :class:`Mix`: per request its shape, production's own prefill (``timings.prompt_ms`` over ``prompt_n`` of the
  screen's request, sent with ``cache_prompt: false``) and the endpoint's metric, and :meth:`Mix.rate`, which adds
  them up as the verdict does (``_stats.MIX_COMBINATION``): per shape, its time over its tokens; over the shapes,
  the time per token weighted by the shares of generated tokens, 1 / sum(w_s / rate_s).

  ``decode`` times a request's tokens after the first (the first comes from the prefill) by its decode time alone;
  ``e2e`` times all its tokens by the prefill plus the decode, as the client sees it (``predicted_n / wall_s``).
  The prefill is the same for production and a candidate (the same target, the same prompt): it adds the same
  time to both. With no weights the requests are pooled (their tokens over their time), the screen's older rule.

Plain python3: the controller computes the weights (``_confirm.weights_of``) and passes them in.
"""
from __future__ import annotations

from typing import Any, Dict, List, Mapping, Sequence

from ansible_collections.llmfleet.specdec.plugins.module_utils.bench._endpoint import EndpointError
from ansible_collections.llmfleet.specdec.plugins.module_utils.bench._shapes import SHAPES
from ansible_collections.llmfleet.specdec.plugins.module_utils.screen._side import ScreenError

ENDPOINTS = ("e2e", "decode")


def screen_prompts(seed: int = 0, sizes: Mapping[str, Any] | None = None, shapes: Any = None,
                   prompts_per_shape: int = 2, traffic: Any = None,
                   weights: Mapping[str, float] | None = None) -> List[Dict[str, Any]]:
    """The screen's prompts: ``[{shape, text, n_predict, chat}]``, ``prompts_per_shape`` per shape the endpoint
    weighs. ``shapes``: the built-in shapes measured; ``traffic``: the operator's files as spec_bench takes them
    (``[{name, content, source, n_predict}]``); ``weights``: shape -> share of generated tokens (None: every shape
    given, as before). A weighed shape that is neither measured nor declared is an error naming it."""
    from ansible_collections.llmfleet.specdec.plugins.module_utils.bench._endpoint import plan_requests
    from ansible_collections.llmfleet.specdec.plugins.module_utils.bench._traffic import load_traffic

    # chat requests are sent through production's own template (/apply-template): any api's files are read
    custom = load_traffic(traffic or [], "openai")
    builtin = list(SHAPES) if shapes is None else [str(s) for s in shapes]
    wanted = {s for s, w in (weights or {}).items() if w and float(w) > 0}
    if weights:
        unknown = sorted(wanted - set(builtin) - set(custom))
        if unknown:
            raise ScreenError(f"weights: shape(s) {', '.join(unknown)} are weighed but neither measured (shapes) nor "
                              "declared (traffic): the screen cannot send them")
        builtin = [s for s in builtin if s in wanted]
        custom = {n: c for n, c in custom.items() if n in wanted}
    out: List[Dict[str, Any]] = []
    if builtin:
        _warm, schedule, _distinct = plan_requests(seed=seed, sizes=sizes, shapes=builtin,
                                                   prompts_per_shape=prompts_per_shape, repeats=1, warmup=0)
        out += [{"shape": p.shape, "text": p.prompt, "n_predict": p.n_predict, "chat": None} for _r, p in schedule]
    for name, shape in custom.items():
        out += [{"shape": name, "text": p.prompt, "n_predict": p.n_predict,
                 "chat": [list(m) for m in p.chat] if p.chat else None} for p in shape.prompts(int(prompts_per_shape))]
    if not out:
        raise ScreenError("the screen has no shape to send: give shapes, or traffic with a weight above 0")
    return out


def templated(client: Any, prompt: Mapping[str, Any]) -> str:
    """The text production prefills for a prompt: an operator's chat request through production's own chat
    template (``/apply-template``, as its chat endpoint renders it), else the raw prompt; a server without that
    endpoint gets the messages' text joined, as the traffic file's raw form."""
    if not prompt.get("chat"):
        return str(prompt["text"])
    messages = [{"role": role, "content": content} for role, content in prompt["chat"]]
    try:
        reply = client._json("POST", "/apply-template", {"messages": messages})
    except (EndpointError, OSError, ValueError):
        return str(prompt["text"])
    return str(reply.get("prompt") or prompt["text"]) if isinstance(reply, dict) else str(prompt["text"])


class Mix:
    """How the screen's requests add up on the endpoint's metric (module docstring).

    ``shapes``, ``prefill_ms`` and ``prompt_n`` are per request, in the order of the replay's requests."""

    def __init__(self, shapes: Sequence[str], weights: Mapping[str, float] | None = None, endpoint: str = "decode",
                 prefill_ms: Sequence[float | None] = (), prompt_n: Sequence[int | None] = ()) -> None:
        if endpoint not in ENDPOINTS:
            raise ScreenError(f"endpoint: {endpoint!r} is not one of {', '.join(ENDPOINTS)}")
        self.shapes = [str(s) for s in shapes]
        self.endpoint = endpoint
        self.weights = {str(s): float(w) for s, w in (weights or {}).items() if w and float(w) > 0}
        n = len(self.shapes)
        self.prefill_ms = [float(p) if isinstance(p, (int, float)) and p > 0 else None
                           for p in list(prefill_ms)[:n]] + [None] * max(0, n - len(prefill_ms))
        self.prompt_n = [int(p) if isinstance(p, (int, float)) and p > 0 else None
                         for p in list(prompt_n)[:n]] + [None] * max(0, n - len(prompt_n))

    def per_token_prefill(self) -> List[float]:
        """Production's prefill samples as ms per prompt token (one per request that reported both)."""
        return [ms / n for ms, n in zip(self.prefill_ms, self.prompt_n) if ms and n]

    def at_fastest(self) -> Mix:
        """This mix with every request's prefill at production's fastest prefill sample (ms per prompt token times
        its prompt's tokens): what the optimistic bound uses (busy time only adds to a prefill, and the prefill adds
        the same time to production and to a candidate)."""
        samples = self.per_token_prefill()
        fastest = min(samples) if samples else 0.0
        return Mix(self.shapes, self.weights, self.endpoint,
                   [fastest * n if n else 0.0 for n in self.prompt_n], self.prompt_n)

    def by_shape(self, picks: Sequence[tuple]) -> Dict[str, List[float]]:
        """shape -> [ms, tokens] of ``picks``: ``(request index, tokens after the first, decode ms)``, the prefill and
        the first token added on an end-to-end endpoint."""
        out: Dict[str, List[float]] = {}
        for i, tokens, ms in picks:
            total = out.setdefault(self.shapes[i], [0.0, 0.0])
            if self.endpoint == "e2e":
                total[0] += float(ms) + (self.prefill_ms[i] or 0.0)
                total[1] += float(tokens) + 1.0
            else:
                total[0] += float(ms)
                total[1] += float(tokens)
        return out

    def rate(self, picks: Sequence[tuple]) -> float | None:
        """tok/s of ``picks`` on the endpoint's metric over the weighed shapes (time-weighted: the weighted harmonic
        mean of the shapes' rates); pooled where no weights were given. None with no time or no token."""
        shapes = self.by_shape(picks)
        if not self.weights:
            ms, tokens = sum(v[0] for v in shapes.values()), sum(v[1] for v in shapes.values())
            return 1000.0 * tokens / ms if ms > 0 and tokens > 0 else None
        present = {s: w for s, w in self.weights.items() if s in shapes and shapes[s][1] > 0 and shapes[s][0] > 0}
        total = sum(present.values())
        if not present or total <= 0:
            return None
        per_token = sum((w / total) * shapes[s][0] / shapes[s][1] for s, w in present.items())
        return 1000.0 / per_token if per_token > 0 else None

    def production_rate(self, tokens: Sequence[int], step_ms: float) -> float | None:
        """Production's own rate on the endpoint's metric: each request's tokens after the first at ``step_ms``."""
        return self.rate([(i, n, n * float(step_ms)) for i, n in enumerate(tokens)])

    def shown(self) -> Dict[str, Any]:
        """What the result says of it: the metric, the weights and production's prefill."""
        samples = self.per_token_prefill()
        return {"metric": self.endpoint, "weights": dict(self.weights) or None,
                "shapes": sorted(set(self.shapes), key=self.shapes.index),
                "prefill_ms": [round(p, 3) if p else None for p in self.prefill_ms], "prompt_n": list(self.prompt_n),
                "prefill_ms_per_token_fastest": min(samples) if samples else None,
                "prefill_missing": sum(1 for p in self.prefill_ms if p is None)}
