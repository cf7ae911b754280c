# Synthetic A/B runs in the measurement contract's form (spec_bench's bench/1 inside run entries), answers known.
from __future__ import annotations

import random
from typing import Any, Callable

from ansible_collections.llmfleet.specdec.plugins.module_utils.bench import _shapes

SHAPES = _shapes.SHAPES  # the one order of the built-in shapes
BASE_RATE = {"prose": 40.0, "echo": 42.0, "structured": 41.0, "identity": 44.0}


def greedy_text(shape: str, prompt_index: int) -> str:
    """The text every lossless config produces at temperature 0."""
    return f"{shape} answer {prompt_index}: the quick brown fox jumps over the lazy dog. " * 3


def jitter(round_: int, prompt_index: int, repeat: int) -> float:
    """A fixed, deterministic +-4 % pattern, the same for every config (so paired ratios are exact)."""
    return 1.0 + 0.02 * (((round_ * 7 + prompt_index * 3 + repeat * 5) % 5) - 2)


def request(shape: str, prompt_index: int, repeat: int, rate: float | None, *, text: str | None = None,
            draft_n: int = 0, accepted: int = 0, predicted_n: int = 64,
            metrics: dict[str, Any] | None = None) -> dict[str, Any]:
    text = greedy_text(shape, prompt_index) if text is None else text
    return {"shape": shape, "prompt_index": prompt_index, "repeat": repeat, "text": text,
            "empty": not text.strip(), "used_reasoning_content": False, "predicted_n": predicted_n,
            "prompt_n": 100, "predicted_per_second": rate, "draft_n": draft_n, "draft_n_accepted": accepted,
            "wall_s": predicted_n / rate if rate else 1.0, "metrics_delta": metrics}


def bench(requests: list[dict[str, Any]], shapes: tuple[str, ...] = SHAPES) -> dict[str, Any]:
    return {"schema": "llmfleet.specdec/bench/1", "endpoint": "http://127.0.0.1:8080", "api": "llamacpp",
            "server": {"engine": "llamacpp", "props": None, "model": "target.gguf"},
            "shapes": {s: {"prompt_chars": 1000, "n_predict": 64, "checks": {}} for s in shapes},
            "warmup": 1, "requests": requests, "metrics_total_delta": None}


def make_run(configs: dict[str, dict[str, Any]], *, rounds: int = 3, prompts: int = 2, repeats: int = 2,
             shapes: tuple[str, ...] = SHAPES, baseline: str = "baseline", mix: dict[str, float] | None = None,
             ) -> dict[str, Any]:
    """A run over ``configs``: name -> spec with keys

    speedup (float or {shape: float}, default 1), chain (list, default []), draft ((draft_n, accepted)
    per request or {shape: (n, a)}), drafts_per_request (rounds per request, for metrics), per_pos
    (accepted_per_pos per request), metrics (bool: attach metrics_delta), text (callable(shape,
    prompt, round, repeat) -> str or None for the greedy text), noise (relative amplitude of
    per-request timing noise, independent per config), fail_rounds (set of rounds whose
    entry failed), partial_rounds (rounds whose bench came back with an error after half the requests),
    start (round -> factor on every rate of that round: the speed of that config's server start).
    """
    entries = []
    names = list(configs)
    for rnd in range(rounds):
        # rotate the order per round, as the protocol does
        order_names = names[rnd % len(names):] + names[:rnd % len(names)]
        for order, name in enumerate(order_names):
            spec = configs[name]
            entry: dict[str, Any] = {"config": name, "round": rnd, "order": order,
                                     "server_config": spec.get("server_config", {}), "bench": None, "error": None}
            if rnd in spec.get("fail_rounds", set()):
                entry["error"] = "llama-server exited with status 134 before /health"
                entries.append(entry)
                continue
            reqs = []
            for shape in shapes:
                for p in range(prompts):
                    for rep in range(repeats):
                        reqs.append(_request(name, spec, shape, p, rep, rnd))
            if rnd in spec.get("partial_rounds", set()):
                reqs = reqs[: len(reqs) // 2]
                entry["error"] = "llama-server crashed mid-measurement (connection reset)"
            entry["bench"] = bench(reqs, shapes)
            entries.append(entry)
    return {"host": "specdec-demo", "run_id": "20261129T120000Z", "started": "2026-11-29T12:00:00Z",
            "finished": "2026-11-29T12:30:00Z", "baseline": baseline, "mix": mix,
            "configs": [{"name": n, "chain": configs[n].get("chain", []),
                         "server_config": configs[n].get("server_config", {}),
                         **({"k": configs[n]["k"]} if "k" in configs[n] else {})} for n in names],
            "entries": entries}


def _per_shape(value: Any, shape: str, default: Any) -> Any:
    if isinstance(value, dict):
        return value.get(shape, default)
    return default if value is None else value


def _request(name: str, spec: dict[str, Any], shape: str, p: int, rep: int, rnd: int) -> dict[str, Any]:
    speed = _per_shape(spec.get("speedup"), shape, 1.0)
    rate = BASE_RATE[shape] * speed * jitter(rnd, p, rep) * spec.get("start", {}).get(rnd, 1.0)
    if spec.get("noise"):
        # independent per config and request: real timing noise, still reproducible
        rate *= 1.0 + spec["noise"] * random.Random(f"{name}:{shape}:{p}:{rep}:{rnd}").uniform(-1.0, 1.0)
    draft_n, accepted = _per_shape(spec.get("draft"), shape, (0, 0))
    text_fn: Callable[..., str | None] | None = spec.get("text")
    text = text_fn(shape, p, rnd, rep) if text_fn else None
    metrics = None
    if spec.get("metrics"):
        drafts = _per_shape(spec.get("drafts_per_request"), shape, 0)
        metrics = {"drafts": drafts, "draft_tokens": draft_n, "accepted_tokens": accepted,
                   "accepted_per_pos": list(_per_shape(spec.get("per_pos"), shape, []))}
    return request(shape, p, rep, rate, text=text, draft_n=draft_n, accepted=accepted, metrics=metrics)
