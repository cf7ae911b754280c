# Copyright: (c) 2026, llmfleet.specdec contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# Private to the collection: screening speculative candidates against the running production server, no restart.
"""What a candidate would do, measured without the candidate running in production.

1. Production's greedy continuations of the run's prompts, as token ids (``/tokenize``, then ``/completion`` with
   ``return_tokens`` at temperature 0), its step time from their timings, and the verification cost of a batch of
   K + 1 tokens on a cached prefix (``_endpoint.measure_batches``). Requests only: production is never restarted.
2. The drafting rounds replayed against those tokens (:func:`replay`), as llama-server runs them: the first token
   comes from the prompt's prefill; then at each step the proposer drafts up to K tokens (never more than the
   request's remaining budget less one), the target accepts their common prefix with its own tokens and adds its
   correction, and the slot moves on by accepted + 1; a step with no draft moves on by one. Every K of a sweep
   comes from the same proposals: a plain draft model's greedy continuation from a prefix is asked once (its K
   tokens are a prefix of its K + 1), an n-gram proposer is run once per K (its table depends on what was accepted).
3. The prediction (:func:`predict`): the replay's rounds timed with production's measured costs (a verification
   of the draft's length + 1, the drafter's prefill of the tokens accepted since its last round and its further
   single steps), against production's own rate; an interval from resampling the requests and the measured
   step-time samples.

A plain draft model runs beside production as a side server (:class:`SideServer`): a transient systemd unit with a
runtime limit on a port checked free first, stopped at the end in every case.
"""
from __future__ import annotations

import math
import os
import random
import time
from typing import Any, Callable, Dict, List, Mapping, Sequence

from ansible_collections.llmfleet.specdec.plugins.module_utils.bench import _breakeven as be
from ansible_collections.llmfleet.specdec.plugins.module_utils.bench._endpoint import Endpoint, EndpointError, measure_batches
from ansible_collections.llmfleet.specdec.plugins.module_utils.llamacpp import _ngram
from ansible_collections.llmfleet.specdec.plugins.module_utils.screen import _mix
from ansible_collections.llmfleet.specdec.plugins.module_utils.screen._bound import fastest_floor, optimistic, tokens_of
from ansible_collections.llmfleet.specdec.plugins.module_utils.screen._host_load import (
    HostLoad,
    busy_reasons,
    drafter_spreads,
    production_spreads,
    spread,
)
from ansible_collections.llmfleet.specdec.plugins.module_utils.screen._side import ScreenError, SideServer, free_port

TRAINED = ("draft-mtp", "draft-eagle3", "draft-dflash", "draft-dspark")
DEFAULT_KS = (1, 2, 3, 4, 6, 8)
RESAMPLES = 400


# ---------------------------------------------------------------------------------------------
# the replay


class Continuation(dict):
    """One request: ``prompt`` (token ids), ``tokens`` (production's greedy continuation), ``budget`` (n_predict)."""


def _common_prefix(draft: Sequence[int], target: Sequence[int]) -> int:
    n = 0
    for a, b in zip(draft, target):
        if a != b:
            break
        n += 1
    return n


def replay(continuations: Sequence[Mapping[str, Any]], propose: Callable[[Sequence[int], int, int], List[int]],
           k: int, *, begin: Callable[[Sequence[int]], None] | None = None,
           accept: Callable[[int], None] | None = None) -> Dict[str, Any]:
    """The drafting rounds of ``propose`` at depth ``k`` against production's tokens.

    ``propose(context, k, budget)``: what the proposer drafts after ``context`` (the prompt and the tokens
    generated so far, the last one being the one just sampled); it may return more than ``k`` tokens (cut here).
    Returns the totals and, per request, the rounds as ``(drafted, accepted)`` pairs (a step without a draft is
    ``(0, 0)``), from which :func:`predict` times them.
    """
    rounds = drafted = accepted = 0
    per_pos = [0] * k
    requests: List[List[tuple]] = []
    for cont in continuations:
        prompt, tokens, budget = list(cont["prompt"]), list(cont["tokens"]), int(cont["budget"])
        if begin:
            begin(prompt)
        steps: List[tuple] = []
        i = 1  # the first token comes from the prompt's prefill
        while i < len(tokens):
            room = min(k, budget - i - 1)
            draft = propose(prompt + tokens[:i], k, room)[:room] if room > 0 else []
            if not draft:
                steps.append((0, 0))
                i += 1
                continue
            a = _common_prefix(draft, tokens[i:])
            if accept:
                accept(a)
            rounds += 1
            drafted += len(draft)
            accepted += a
            for j in range(a):
                per_pos[j] += 1
            steps.append((len(draft), a))
            i += a + 1
        requests.append(steps)
    return {"k": k, "rounds": rounds, "drafted": drafted, "accepted": accepted,
            "mean_accepted_len": (1.0 + accepted / rounds) if rounds else 1.0,
            "acceptance": (accepted / drafted) if drafted else 0.0,
            "accept_per_pos": [c / rounds if rounds else 0.0 for c in per_pos], "requests": requests}


def _cache_files(env: Mapping[str, Any], flags: Mapping[str, Any]) -> List[str]:
    """The lookup cache files a candidate gives ngram-cache (flags only: the pinned tree has no environment
    variable for them)."""
    del env
    names = (("--lookup-cache-static", "-lcs"), ("--lookup-cache-dynamic", "-lcd"))
    return [long for long, short in names if flags.get(long) or flags.get(short)]


def ngram_proposer(spec_type: str, params: Mapping[str, int], k: int) -> Any:
    """A fresh proposer of ``spec_type`` at depth ``k`` (K is the proposer's own maximum draft: ngram-simple's
    ``size_m``, ngram-mod's ``n_max``, ngram-map-k's and ngram-map-k4v's ``size_m``)."""
    if spec_type == "ngram-simple":
        return _ngram.NgramSimple(params.get("size_n", _ngram.SIMPLE_SIZE_N), k)
    if spec_type == "ngram-mod":
        return _ngram.NgramMod(params.get("n_match", _ngram.MOD_N_MATCH), k,
                               min(params.get("n_min", _ngram.MOD_N_MIN), k))
    if spec_type in ("ngram-map-k", "ngram-map-k4v"):
        return _ngram.NgramMap(params.get("size_n", _ngram.MAP_SIZE_N), k, spec_type == "ngram-map-k",
                               params.get("min_hits", _ngram.MAP_MIN_HITS))
    if spec_type == "ngram-cache":
        if params.get("files"):
            raise ScreenError("ngram-cache with --lookup-cache-static/--lookup-cache-dynamic: the screen replays the "
                              "context cache only; drop the cache files from the candidate or measure it by the A/B")
        return _ngram.NgramCache(k)
    raise ScreenError(f"{spec_type}: not an n-gram proposer the screen has ported ({', '.join(_ngram.PORTED)})")


def replay_ngram(continuations: Sequence[Mapping[str, Any]], spec_type: str, params: Mapping[str, int],
                 k: int) -> Dict[str, Any]:
    """One n-gram proposer replayed at depth ``k`` (its own state: what it holds depends on what was accepted)."""
    proposer = ngram_proposer(spec_type, params, k)

    def propose(context: Sequence[int], _k: int, _room: int) -> List[int]:
        return proposer.draft(context[:-1], context[-1])

    return replay(continuations, propose, k, begin=proposer.begin, accept=proposer.accept)


class DraftModel:
    """A plain draft model's greedy proposals, asked from its side server once per prefix (and cached): its K
    tokens are a prefix of its K + 1, so one pass serves every K of a sweep. ``p_min``/``n_min`` are llama.cpp's
    stopping rules for draft-simple (``common/speculative.cpp``): stop at the first token whose probability is
    below ``p_min``, drop a draft shorter than ``n_min``."""

    def __init__(self, client: Endpoint, k_max: int, p_min: float = 0.0, n_min: int = 0) -> None:
        self.client, self.k_max, self.p_min, self.n_min = client, int(k_max), float(p_min), int(n_min)
        self.cache: Dict[tuple, List[int]] = {}
        self.step_ms: List[float] = []

    def greedy(self, context: Sequence[int]) -> List[int]:
        key = tuple(context)
        if key not in self.cache:
            body: Dict[str, Any] = {"prompt": list(context), "n_predict": self.k_max, "temperature": 0.0,
                                    "cache_prompt": True, "return_tokens": True, "id_slot": 0}
            if self.p_min > 0:
                body["n_probs"] = 1
            reply = self.client._json("POST", "/completion", body)
            tokens = [int(t) for t in reply.get("tokens") or []]
            if self.p_min > 0:
                probs = reply.get("completion_probabilities") or []
                for j, entry in enumerate(probs[:len(tokens)]):
                    top = (entry.get("top_logprobs") or entry.get("probs") or [{}])[0]
                    p = top.get("prob", math.exp(top["logprob"]) if "logprob" in top else 1.0)
                    if p < self.p_min:
                        tokens = tokens[:j]
                        break
            timings = reply.get("timings") or {}
            if (timings.get("predicted_n") or 0) > 1 and timings.get("predicted_ms"):
                # the first token comes from the prefill: predicted_ms covers predicted_n - 1 steps
                self.step_ms.append(float(timings["predicted_ms"]) / (float(timings["predicted_n"]) - 1.0))
            self.cache[key] = tokens
        return self.cache[key]

    def propose(self, context: Sequence[int], k: int, _room: int) -> List[int]:
        draft = self.greedy(context)[:k]
        return draft if len(draft) >= self.n_min else []


# ---------------------------------------------------------------------------------------------
# production, by requests only


def step_of(timings: Mapping[str, Any]) -> float | None:
    """ms per decode step from a reply's timings: the first token comes from the prompt's prefill, so
    ``predicted_ms`` covers ``predicted_n - 1`` steps; None with fewer than two tokens or no time."""
    n, ms = timings.get("predicted_n") or 0, timings.get("predicted_ms") or 0.0
    if not isinstance(n, (int, float)) or not isinstance(ms, (int, float)) or n <= 1 or ms <= 0:
        return None
    return float(ms) / (float(n) - 1.0)


def production_continuations(client: Endpoint, prompts: Sequence[Mapping[str, Any]]) -> Dict[str, Any]:
    """Production's greedy continuation of each prompt as token ids, and its step times (ms per decode step; the
    rate of each request is 1000 over its step, so that production's step and its rate are one measurement).
    ``concurrent``: per request, why it ran beside other clients' requests (``/slots``, ``/metrics``), or None."""
    conts: List[Dict[str, Any]] = []
    steps: List[float] = []
    rates: List[float] = []
    concurrent: List[str | None] = []
    watch = _busy_watch(client)
    prefill_ms: List[float | None] = []
    prompt_n: List[int | None] = []
    for prompt in prompts:
        tok = client._json("POST", "/tokenize", {"content": _mix.templated(client, prompt), "add_special": True})
        ids = [int(t) for t in tok.get("tokens") or []]
        if not ids:
            raise ScreenError(f"production ({client.shown_url}) tokenized the {prompt['shape']} prompt to nothing")
        seen = _watch_reading(watch)
        reply = client._json("POST", "/completion", {"prompt": ids, "n_predict": int(prompt["n_predict"]),
                                                     "temperature": 0.0, "cache_prompt": False,
                                                     "return_tokens": True})
        tokens = [int(t) for t in reply.get("tokens") or []]
        timings = reply.get("timings") or {}
        step = step_of(timings)
        if step is not None:
            after = _watch_reading(watch)
            concurrent.append(watch.verdict(seen, after, timings.get("predicted_n"))
                              if watch is not None and seen is not None and after is not None else None)
            steps.append(step)
            rates.append(1000.0 / step)
        conts.append({"shape": prompt["shape"], "prompt": ids, "tokens": tokens, "budget": int(prompt["n_predict"])})
        # production's own prefill of this prompt (cache_prompt false: the whole prompt), for an end-to-end endpoint
        ms, n = timings.get("prompt_ms"), timings.get("prompt_n")
        prefill_ms.append(float(ms) if isinstance(ms, (int, float)) and ms > 0 else None)
        prompt_n.append(int(n) if isinstance(n, int) and n > 0 else None)
    if not steps:
        raise ScreenError(f"production ({client.shown_url}) generated too few tokens to time a step: raise n_predict")
    return {"continuations": conts, "step_ms": steps, "rates": rates, "concurrent": concurrent,
            "prefill_ms": prefill_ms, "prompt_n": prompt_n}


def _busy_watch(client: Endpoint) -> Any:
    """spec_bench's reader of production's other clients (/slots, /metrics), or None where it cannot start."""
    from ansible_collections.llmfleet.specdec.plugins.module_utils.bench._busy import BusyWatch

    try:
        return BusyWatch(client, "llamacpp").start()
    except (EndpointError, OSError, ValueError):
        return None


def _watch_reading(watch: Any) -> Dict[str, Any] | None:
    if watch is None:
        return None
    try:
        return watch.reading()
    except (EndpointError, OSError, ValueError):
        return None


# ---------------------------------------------------------------------------------------------
# the prediction


def _interp(costs: Mapping[int, float], size: float) -> float | None:
    if not costs:
        return None
    sizes = sorted(costs)
    if size <= sizes[0]:
        return costs[sizes[0]] * size / sizes[0]
    for lo, hi in zip(sizes, sizes[1:]):
        if lo <= size <= hi:
            return costs[lo] + (costs[hi] - costs[lo]) * (size - lo) / (hi - lo)
    top = sizes[-1]
    return costs[top] * size / top


def request_time_ms(steps: Sequence[tuple], t_s: float, verify: Mapping[int, float],
                    d_s: float, prefill: Mapping[int, float], passes_per_token: int,
                    drafter: Sequence[float] | None = None) -> float:
    """One request's decode time replayed: a step without a draft is one target step; a round is the
    verification of its draft + 1 tokens and the drafter's work (its prefill of the tokens accepted since its last
    round, then one step per further drafted token; an n-gram lookup costs nothing). ``drafter``, where a copy of
    the target timed the drafter in the server's own rounds, is its ``(per_round_ms, per_token_ms)`` instead."""
    total = 0.0
    since = 1
    for drafted, accepted in steps:
        if drafted == 0:
            total += t_s
            since += 1
            continue
        total += _interp(verify, drafted + 1) or t_s * (drafted + 1)
        if passes_per_token and drafter:
            total += float(drafter[0]) + float(drafter[1]) * drafted
        elif passes_per_token:
            pre = _interp(prefill, since) if prefill else None
            total += (pre if pre is not None else d_s) + max(drafted - 1, 0) * d_s
        since = accepted + 1
    return total


def predict(result: Mapping[str, Any], t_s: Sequence[float], verify_samples: Mapping[int, Sequence[float]],
            d_s: Sequence[float], prefill: Mapping[int, float], passes_per_token: int,
            seed: int = 0, correction: Mapping[int, float] | None = None,
            corrections: Sequence[Mapping[int, float]] = (), drafter: Sequence[float] | None = None,
            drafters: Sequence[Sequence[float]] = (), mix: Any = None) -> Dict[str, Any]:
    """Predicted decode tok/s of a replayed K with a 95 % interval: the requests resampled, and with them a
    step time, a verification cost per batch and a drafter step drawn from their measured samples. With ``mix``
    (``_mix.Mix``) the rate is the confirmatory endpoint's (end to end: production's own prefill of each request
    added) over its weights, and the requests are resampled within their shapes.

    ``correction`` (batch size -> factor, from a copy of the target: ``_screen_copy``) turns a timed batch into
    what a real round of that many rows costs; ``corrections`` are its bootstrap draws, one drawn per resample.
    ``drafter`` (``(per_round_ms, per_token_ms)`` from the copy run with the draft) replaces the side server's
    prefill and step; ``drafters`` are its bootstrap draws."""
    def med(values: Sequence[float]) -> float:
        ordered = sorted(values)
        return ordered[len(ordered) // 2]

    def rate(idx: Sequence[int], ts: float, ver: Mapping[int, float], ds: float,
             dr: Sequence[float] | None = drafter) -> float | None:
        times = [request_time_ms(reqs[i], ts, ver, ds, prefill, passes_per_token, dr) for i in idx]
        if not all(math.isfinite(ms) for ms in times):
            return None
        if mix is not None:
            return mix.rate([(i, tokens_of([reqs[i]]), ms) for i, ms in zip(idx, times)])
        tokens, ms = tokens_of([reqs[i] for i in idx]), sum(times)
        return 1000.0 * tokens / ms if ms > 0 and tokens > 0 else None

    def resample(rng: random.Random) -> List[int]:
        if mix is None:
            return [rng.randrange(len(reqs)) for _r in reqs]
        strata: Dict[str, List[int]] = {}
        for i in range(len(reqs)):
            strata.setdefault(mix.shapes[i], []).append(i)
        return [rng.choice(members) for members in strata.values() for _m in members]

    def corrected(ver: Mapping[int, float], factors: Mapping[int, float] | None) -> Dict[int, float]:
        return {b: ms * float((factors or {}).get(int(b), 1.0)) for b, ms in ver.items()}

    reqs = result["requests"]
    verify = corrected({b: med(v) for b, v in verify_samples.items() if v}, correction)
    point = rate(range(len(reqs)), med(t_s), verify, med(d_s) if d_s else 0.0)
    rng = random.Random(f"{seed}:{result['k']}")
    draws: List[float] = []
    failed = 0
    for _dummy in range(RESAMPLES):
        pick = resample(rng)
        ver = corrected({b: rng.choice(list(v)) for b, v in verify_samples.items() if v},
                        rng.choice(list(corrections)) if corrections else correction)
        got = rate(pick, rng.choice(list(t_s)), ver, rng.choice(list(d_s)) if d_s else 0.0,
                   rng.choice(list(drafters)) if drafters else drafter)
        if got is None:
            failed += 1
        else:
            draws.append(got)
    draws.sort()
    if point is None or not draws:
        # no time per token: nothing to predict from (never a rate of 0 tok/s)
        return {"predicted_tok_s": None, "low": None, "high": None,
                "invalid": "the replay's rounds timed at no time per token: no prediction"}
    out: Dict[str, Any] = {"predicted_tok_s": point, "low": draws[int(0.025 * len(draws))],
                           "high": draws[max(int(0.975 * len(draws)) - 1, 0)]}
    if failed:
        out["invalid"] = f"{failed} of {RESAMPLES} resamples timed at no time per token (left out)"
    return out


# ---------------------------------------------------------------------------------------------
# candidates


def _flag_values(flags: Sequence[Any]) -> Dict[str, str]:
    out: Dict[str, str] = {}
    words = [str(f) for f in flags or []]
    for i, word in enumerate(words):
        if word.startswith("--") and "=" in word:
            key, value = word.split("=", 1)
            out[key] = value
        elif word.startswith("-") and i + 1 < len(words) and not words[i + 1].startswith("--"):
            out[word] = words[i + 1]
    return out


def candidate_plan(candidate: Mapping[str, Any]) -> Dict[str, Any]:
    """What the screen does with a candidate: its chain, the draft model, the depths and the n-gram windows."""
    name = str(candidate.get("name") or "")
    env = {str(k): v for k, v in (candidate.get("env") or {}).items()}
    flags = _flag_values(candidate.get("flags") or [])
    spec = str(env.get("LLAMA_ARG_SPEC_TYPE") or flags.get("--spec-type") or "").strip()
    chain = [t.strip() for t in spec.split(",") if t.strip()]
    draft = env.get("LLAMA_ARG_SPEC_DRAFT_MODEL") or flags.get("--spec-draft-model") or flags.get("-md")
    n_max = env.get("LLAMA_ARG_SPEC_DRAFT_N_MAX") or flags.get("--spec-draft-n-max")
    plan: Dict[str, Any] = {"name": name, "chain": chain, "draft": draft, "screenable": True, "why": None,
                            "p_min": float(env.get("LLAMA_ARG_SPEC_DRAFT_P_MIN") or flags.get("--spec-draft-p-min") or 0),
                            "n_min": int(env.get("LLAMA_ARG_SPEC_DRAFT_N_MIN") or flags.get("--spec-draft-n-min") or 0),
                            "ngram": {
                                "ngram-simple": {"size_n": int(flags.get("--spec-ngram-simple-size-n") or _ngram.SIMPLE_SIZE_N)},
                                "ngram-mod": {"n_match": int(flags.get("--spec-ngram-mod-n-match") or _ngram.MOD_N_MATCH),
                                              "n_min": int(flags.get("--spec-ngram-mod-n-min") or _ngram.MOD_N_MIN)},
                                **{t: {"size_n": int(flags.get(f"--spec-{t}-size-n") or _ngram.MAP_SIZE_N),
                                       "min_hits": int(flags.get(f"--spec-{t}-min-hits") or _ngram.MAP_MIN_HITS)}
                                   for t in ("ngram-map-k", "ngram-map-k4v")},
                                "ngram-cache": {"files": int(bool(_cache_files(env, flags)))}}}
    ks = candidate.get("ks")
    if ks:
        plan["ks"] = sorted({be.check_k(k, f"candidate {name}: ks") for k in ks})
    elif chain == ["ngram-mod"]:
        plan["ks"] = [int(flags.get("--spec-ngram-mod-n-max") or _ngram.MOD_N_MAX)]
    elif chain == ["ngram-simple"]:
        plan["ks"] = [int(flags.get("--spec-ngram-simple-size-m") or _ngram.SIMPLE_SIZE_M)]
    elif chain == ["ngram-cache"]:
        plan["ks"] = [_ngram.CACHE_N_DRAFT]
    elif chain in (["ngram-map-k"], ["ngram-map-k4v"]):
        plan["ks"] = [int(flags.get(f"--spec-{chain[0]}-size-m") or _ngram.MAP_SIZE_M)]
    else:
        plan["ks"] = sorted({*DEFAULT_KS, *([int(n_max)] if n_max else [])})
    if not chain or chain == ["none"]:
        plan.update(screenable=False, why="no speculation: nothing to screen (it is production's own config)")
    elif any(t in TRAINED for t in chain):
        trained = [t for t in chain if t in TRAINED]
        plan.update(screenable=False, why=f"{', '.join(trained)} reads the target's hidden states: it cannot be "
                                          "replayed outside the target; the A/B measures it")
    elif "ngram-cache" in chain and _cache_files(env, flags):
        plan.update(screenable=False, why=f"ngram-cache with {', '.join(_cache_files(env, flags))}: the screen "
                                          "replays its context cache only (no cache files); the A/B measures it")
    elif any(t in _ngram.NOT_PORTED for t in chain):
        plan.update(screenable=False, why=f"{', '.join(t for t in chain if t in _ngram.NOT_PORTED)} is not ported "
                                          "to the screen yet; the A/B measures it")
    elif len(chain) > 1:
        plan.update(screenable=False, why="a chain of proposers is not screened yet; the A/B measures it")
    elif chain == ["draft-simple"] and not draft:
        plan.update(screenable=False, why="draft-simple without a draft model (LLAMA_ARG_SPEC_DRAFT_MODEL): "
                                          "llama-server would serve without speculation")
    elif chain[0] not in ("draft-simple", *_ngram.PORTED):
        plan.update(screenable=False, why=f"{chain[0]} is not a spec type the screen knows")
    elif chain == ["draft-simple"] and candidate.get("fits") is False:
        plan.update(screenable=False, why=f"candidate {name}: kv_budget says its drafter does not fit beside "
                                          "production on its device, so the screen starts no side server for it; "
                                          "give the drafter a device with room, or a smaller context or draft")
    return plan


# ---------------------------------------------------------------------------------------------
# the whole screen


def _median(values: Sequence[float]) -> float:
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else 0.5 * (ordered[mid - 1] + ordered[mid])


def _check_vocab(name: str, target: str | None, draft: str) -> str | None:
    """llama.cpp's own draft/target rule (spec_compat's), when production's model file is readable here."""
    from ansible_collections.llmfleet.specdec.plugins.module_utils.gguf._gguf import read_pair
    from ansible_collections.llmfleet.specdec.plugins.module_utils.llamacpp._llamacpp import compat_report

    if not target or not os.path.isfile(target):
        return "production's model file is not readable here: the draft's vocabulary was not checked"
    report = compat_report(*read_pair(target, draft))
    if not report["compatible"]:
        raise ScreenError(f"candidate {name}: draft {draft} does not share production's vocabulary "
                          f"({'; '.join(str(r) for r in report['reasons'][:2])}): llama-server would serve without "
                          "speculation; use a draft with the target's tokenizer")
    return None


def _timed(plan: Mapping[str, Any], replays: Mapping[int, Mapping[str, Any]], prod: Mapping[str, Any],
           verify_samples: Mapping[int, Sequence[float]], d_s: Sequence[float], prefill: Mapping[int, float],
           seed: int, copy: Mapping[str, Any] | None = None, *,
           prefill_samples: Mapping[int, Sequence[float]] | None = None,
           busy: Sequence[str] = (), mix: Any = None) -> Dict[str, Any]:
    """Per K: the replay's counts, the prediction with its interval, the optimistic bound (:func:`optimistic`) and
    ``unreliable`` with ``unreliable_why`` when a timing it rests on says the host was busy (``busy``: the reasons
    already found for production's timings, the copy and this candidate's drafter) or the prediction has no
    time per token. With ``mix`` (``_mix.Mix``) every rate, the bound's and the speedups are the confirmatory
    endpoint's (its metric over its weights), production's own at its median step (``rate``)."""
    passes = 1 if plan["chain"] == ["draft-simple"] else 0
    t_s = prod["step_ms"]
    t_med = _median(t_s)
    decode_rate = prod["tok_s"]
    counts = [tokens_of([steps]) for steps in next(iter(replays.values()))["requests"]] if replays else []
    rate = (mix.production_rate(counts, t_med) if mix is not None and counts else None) or decode_rate
    t_fast = min(t_s)
    verify_floor = fastest_floor(verify_samples)
    prefill_floor = fastest_floor(prefill_samples or {int(b): [ms] for b, ms in prefill.items()})
    d_fast = min(d_s) if (passes and d_s) else 0.0
    out: Dict[str, Any] = {}
    for k, result in sorted(replays.items()):
        row = {key: result[key] for key in ("rounds", "drafted", "accepted", "mean_accepted_len", "acceptance",
                                            "accept_per_pos")}
        factors = (copy or {}).get("corrections") if (copy or {}).get("used") else None
        timed_drafter = ((copy or {}).get("drafters") or {}).get(plan["name"]) if factors and passes else None
        if timed_drafter and "fit" not in timed_drafter:  # not timed on the copy: the side server's steps stand
            timed_drafter = None
        row.update(predict(result, t_s, verify_samples, d_s, prefill, passes, seed, correction=factors,
                           corrections=(copy or {}).get("draws") or () if factors else (),
                           drafter=timed_drafter["fit"] if timed_drafter else None,
                           drafters=timed_drafter["draws"] if timed_drafter else (), mix=mix))
        row.update(optimistic(result, t_fast, verify_floor, d_fast, prefill_floor, passes, mix=mix))
        reasons = [*busy, *([row.pop("invalid")] if row.get("invalid") else [])]
        if row["predicted_tok_s"] is None and row["bound_tok_s"]:
            # no prediction: the bound stands in its place, marked, so that nothing downstream reads a rate of 0
            row.update(predicted_tok_s=row["bound_tok_s"], low=row["bound_tok_s"], high=row["bound_tok_s"])
            reasons.append("the bound at the fastest timings is shown in the prediction's place")
        row["unreliable"] = bool(reasons)
        row["unreliable_why"] = "; ".join(reasons) or None
        row["predicted_speedup"] = row["predicted_tok_s"] / rate if rate and row["predicted_tok_s"] else None
        verify_k = _interp({b: _median(v) * float((factors or {}).get(b, 1.0))
                            for b, v in verify_samples.items() if v}, k + 1) or 1.1 * t_med
        d_step = _median(d_s) if (passes and d_s) else 0.0
        if timed_drafter:
            d_step = (timed_drafter["fit"][0] + timed_drafter["fit"][1] * k) / k
        try:
            row["breakeven_p"] = be.breakeven_p(k, d_step, t_med, decode_rate,
                                                verify_factor=verify_k / t_med, draft_passes=k * passes)
        except be.BreakevenError:
            row["breakeven_p"] = None
        out[str(k)] = row
    return out


def run_screen(endpoint: str = "http://127.0.0.1:8080", candidates: Sequence[Mapping[str, Any]] = (),
               llama_server: str | None = None, drafter_port: int = 0, drafter_threads: int = 1,
               drafter_ctx: int = 4096, drafter_runtime_max: int = 900, drafter_launch: str = "systemd",
               shapes: Any = None, prompts_per_shape: int = 2, sizes: Mapping[str, Any] | None = None,
               seed: int = 0, timeout: int = 600, candidate_errors: str = "fail",
               verify_copy: str = "auto", traffic: Any = None, weights: Mapping[str, float] | None = None,
               metric: str = "decode") -> Dict[str, Any]:
    """The screen of ``candidates`` against production at ``endpoint`` (spec_screen's ``screen``).

    A candidate that cannot be screened (its draft missing or of another vocabulary, its side server's port taken,
    its drafter not answering) raises ScreenError naming it; with ``candidate_errors="report"`` it is reported
    instead (``screenable: false``, ``error``) and the other candidates are screened. Production not answering
    always raises.

    ``verify_copy``: ``auto`` times real rounds on a copy of the target where one fits (``_screen_copy``),
    ``never`` keeps production's batch timings alone.

    ``traffic`` (the operator's files, as spec_bench takes them), ``weights`` (shape -> share of generated tokens)
    and ``metric`` (``e2e`` or ``decode``): the confirmatory endpoint the verdict judges (``_mix``): the
    screen sends the weighed shapes' prompts and predicts, bounds and picks each best K on that metric over those
    weights. Without weights, every shape given, pooled, as before."""
    if verify_copy not in ("auto", "never"):
        raise ScreenError(f"verify_copy: {verify_copy!r} is not auto or never")
    if candidate_errors not in ("fail", "report"):
        raise ScreenError(f"candidate_errors: {candidate_errors!r} is not fail or report")
    started = time.monotonic()
    plans = [candidate_plan(c) for c in candidates or []]
    names = [p["name"] for p in plans]
    if not plans or not all(names) or len(set(names)) != len(names):
        raise ScreenError(f"candidates: give each config a unique, non-empty name (got {names})")
    client = Endpoint(endpoint, timeout=timeout)
    try:
        client.health()
    except EndpointError as exc:
        raise ScreenError(f"production at {client.shown_url} does not answer /health ({exc}): start it, or fix "
                          "spec_screen's endpoint; nothing was screened") from None
    prompts = _mix.screen_prompts(seed=seed, sizes=sizes, shapes=shapes, prompts_per_shape=prompts_per_shape,
                                  traffic=traffic, weights=weights)
    prod_port = _port_of(client)
    prod_load = HostLoad("production's timing", ports=[prod_port]).start()
    prod = production_continuations(client, prompts)
    conts = prod["continuations"]
    ks = sorted({k for p in plans if p["screenable"] for k in p["ks"]})
    grid = verify_grid(ks)
    watch = _busy_watch(client)
    seen = _watch_reading(watch)
    verify = measure_batches(client, grid) if ks else {"samples": {}, "notes": []}
    after = _watch_reading(watch)
    loads = [prod_load.stop()]
    # production's own other clients while its batches were timed (its CPU is not "other processes")
    beside = (watch.verdict(seen, after, 1 + 5 * len({1, *grid}))
              if ks and watch is not None and seen is not None and after is not None else None)
    verify_samples = {int(b): list(v) for b, v in verify["samples"].items() if v}
    props = client.props() or {}
    t_s_ms = _median(prod["step_ms"])
    spreads = production_spreads(prod["step_ms"], verify_samples)
    mix = _mix.Mix([c["shape"] for c in conts], weights, metric, prod["prefill_ms"], prod["prompt_n"])
    if metric == "e2e":
        # the bound takes the fastest prefill: busy time on all of them shows as their spread (per prompt token)
        spreads["prefill"] = spread(mix.per_token_prefill(), "production's prefill per prompt token")
    # why production's timings cannot be trusted, for every candidate's prediction
    busy = busy_reasons(spreads) + busy_reasons(loads)
    if beside:
        busy.append(f"production served other clients while its verification batches were timed ({beside})")
    crowded = [c for c in prod.get("concurrent") or [] if c]
    if crowded:
        busy.append(f"{len(crowded)} of production's {len(prod['step_ms'])} timed requests ran beside other clients' "
                    f"requests ({crowded[0]})")
    production = {"t_s_ms": t_s_ms, "t_s_fastest_ms": min(prod["step_ms"]), "tok_s": 1000.0 / t_s_ms,
                  "step_ms": prod["step_ms"], "requests": len(conts),
                  "verify_ms": {str(b): _median(v) for b, v in sorted(verify_samples.items())},
                  "verify_samples_ms": {str(b): list(v) for b, v in sorted(verify_samples.items())},
                  "spread": spreads,
                  "notes": list(verify.get("notes") or [])}
    production["endpoint"] = dict(mix.shown(), tok_s=mix.production_rate(
        [max(len(c["tokens"]) - 1, 0) for c in conts], t_s_ms) if weights or metric == "e2e" else production["tok_s"])
    prod_facts = {"step_ms": prod["step_ms"], "tok_s": production["tok_s"]}
    out: Dict[str, Any] = {}
    replayed: Dict[str, tuple] = {}
    for plan in plans:
        row: Dict[str, Any] = {"screenable": plan["screenable"], "why": plan["why"], "chain": plan["chain"],
                               "ks": plan["ks"]}
        out[plan["name"]] = row
        if not plan["screenable"]:
            continue
        own: List[str] = []
        if plan["chain"] == ["draft-simple"]:
            try:
                replays, d_s, prefill, notes, drafted = _screen_draft(plan, conts, props, llama_server, drafter_port,
                                                                      drafter_threads, drafter_ctx,
                                                                      drafter_runtime_max, drafter_launch, timeout,
                                                                      prod_port)
            except ScreenError as exc:  # this candidate only: the others are screened, production is untouched
                if candidate_errors == "fail":
                    raise
                row.update(screenable=False, error=str(exc), why=f"the screen failed for it: {exc}")
                continue
            row["notes"] = notes
            row["drafter_spread"] = drafter_spreads(plan["name"], d_s, drafted["prefill_samples"])
            row["load"] = drafted["load"]
            own = busy_reasons(row["drafter_spread"]) + busy_reasons([drafted["load"]])
            prefill_samples = drafted["prefill_samples"]
        else:
            kind = plan["chain"][0]
            replays = {k: replay_ngram(conts, kind, plan["ngram"][kind], k) for k in plan["ks"]}
            d_s, prefill, prefill_samples = [], {}, {}
        row["d_s_ms"] = _median(d_s) if d_s else 0.0
        replayed[plan["name"]] = (replays, d_s, prefill, prefill_samples, own)
    drafts = [{"name": p["name"], "draft": p["draft"], "k": max(p["ks"]), "p_min": p["p_min"], "n_min": p["n_min"]}
              for p in plans if p["name"] in replayed and p["chain"] == ["draft-simple"]]
    copy = _verify_copy(verify_copy, replayed, client, props, conts, grid, timeout, seed, drafter_launch,
                        drafter_runtime_max, drafts)
    shown = ("used", "why", "per_round_ms", "per_row_ms", "requests", "rounds", "model", "copy_verify_ms", "max_rows",
             "spread")
    production["verify_copy"] = {key: copy.get(key) for key in shown if key in copy}
    loads += list(copy.get("load") or [])
    if copy.get("used"):
        # the copy's timings change the prediction (not the bound): a busy copy makes the prediction unreliable
        busy += busy_reasons(copy.get("spread")) + busy_reasons(copy.get("load"))
    for name, timed_drafter in (copy.get("drafters") or {}).items():
        out[name]["drafter_copy"] = ({"per_round_ms": timed_drafter["fit"][0], "per_token_ms": timed_drafter["fit"][1],
                                      "requests": timed_drafter["requests"]} if "fit" in timed_drafter
                                     else {"why": timed_drafter["why"]})
    if copy.get("used"):
        production["verify_batch_ms"] = production["verify_ms"]
        production["verify_ms"] = {str(b): _median(v) * copy["corrections"].get(b, 1.0)
                                   for b, v in sorted(verify_samples.items())}
    for plan in plans:
        if plan["name"] not in replayed:
            continue
        replays, d_s, prefill, prefill_samples, own = replayed[plan["name"]]
        row = out[plan["name"]]
        row["k"] = _timed(plan, replays, prod_facts, verify_samples, d_s, prefill, seed, copy,
                          prefill_samples=prefill_samples, busy=[*busy, *own], mix=mix)
        row["best_k"] = best_k(row["k"])
    production["load"] = loads
    production["unreliable"] = busy
    return {"production": production, "candidates": out, "restarts": 0,
            "elapsed_s": round(time.monotonic() - started, 1)}


def best_k(rows: Mapping[str, Mapping[str, Any]]) -> int:
    """The K with the highest prediction (the highest bound where a K has no prediction)."""
    return int(max(rows, key=lambda k: (rows[k].get("predicted_tok_s") or 0.0, rows[k].get("bound_tok_s") or 0.0)))


def _port_of(client: Endpoint) -> int:
    from urllib.parse import urlsplit

    parts = urlsplit(client.base_url)
    return parts.port or (443 if parts.scheme == "https" else 80)


COPY_GRID_MAX = 17


def verify_grid(ks: Sequence[int]) -> List[int]:
    """The batch sizes timed: K + 1 of every depth screened, and every size from 1 to the deepest (at most
    :data:`COPY_GRID_MAX`), so that a round's shorter drafts are timed, not stretched from their neighbours."""
    if not ks:
        return []
    return sorted({k + 1 for k in ks} | set(range(1, min(max(ks) + 1, COPY_GRID_MAX) + 1)))


def _verify_copy(mode: str, replayed: Mapping[str, tuple], client: Endpoint, props: Mapping[str, Any],
                 conts: Sequence[Mapping[str, Any]], grid: Sequence[int], timeout: int, seed: int,
                 launch: str, runtime_max: int, drafts: Sequence[Mapping[str, Any]] = ()) -> Dict[str, Any]:
    """The copy of the target that times real rounds (``_screen_copy``), once some candidate was replayed."""
    from ansible_collections.llmfleet.specdec.plugins.module_utils.screen import _screen_copy

    if mode == "never":
        return {"used": False, "why": "verify_copy=never: the verification is timed as batches on production"}
    if not replayed:
        return {"used": False, "why": "no candidate was replayed"}
    return _screen_copy.run_copy(_port_of(client), props.get("model_path"), conts, grid, drafts=drafts, launch=launch,
                                 runtime_max=runtime_max, timeout=timeout, seed=seed)


def _screen_draft(plan: Mapping[str, Any], conts: Sequence[Mapping[str, Any]], props: Mapping[str, Any],
                  llama_server: str | None, port: int, threads: int, ctx: int, runtime_max: int, launch: str,
                  timeout: int, prod_port: int | None = None) -> tuple:
    name, draft = plan["name"], str(plan["draft"])
    if not llama_server or not os.path.isfile(llama_server):
        raise ScreenError(f"candidate {name}: a draft model is screened on a side server: give spec_screen "
                          f"llama_server, the llama-server binary production runs (got {llama_server!r})")
    if not os.path.isfile(draft):
        raise ScreenError(f"candidate {name}: draft model {draft} is not a file on this host; fix "
                          "LLAMA_ARG_SPEC_DRAFT_MODEL")
    notes = [n for n in [_check_vocab(name, props.get("model_path"), draft)] if n]
    port = int(port) or free_port()
    argv = [llama_server, "-m", draft, "--host", "127.0.0.1", "--port", str(port), "-c", str(int(ctx)),
            "-np", "1", "-t", str(int(threads))]
    side = SideServer(name, argv, port, launch=launch, runtime_max=runtime_max)
    client = side.start()
    load = HostLoad(f"{name}'s drafter", ports=[port, *([prod_port] if prod_port else [])]).start()
    try:
        client.timeout = timeout
        model = DraftModel(client, max(plan["ks"]), plan["p_min"], plan["n_min"])
        replays = {k: replay(conts, model.propose, k) for k in plan["ks"]}
        batches = measure_batches(client, list(range(1, max(plan["ks"]) + 2)))
        reading = load.stop()
    finally:
        side.stop()
    prefill = {int(b): ms for b, ms in batches["batches"].items()}
    samples = {int(b): list(v) for b, v in batches["samples"].items() if v}
    d_s = model.step_ms or ([prefill[1]] if prefill.get(1) else [])
    return replays, d_s, prefill, notes, {"prefill_samples": samples, "load": reading}
