# Copyright: (c) 2026, llmfleet.specdec contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# Private to the collection: a new llama.cpp build's canary judged on the promoted config's speculation, beside production.
"""The build sentinel: before ``current`` moves, the canary of a new build is judged on what the promoted config won.

``_activate`` starts the new build's canary with production's own command line and environment (which is the promoted
config when production runs what was promoted) and calls :class:`Sentinel` twice (``build`` never measures: the module
injects this object):

1. :meth:`Sentinel.plan` - for one unit, before its canary starts: the promotion's evidence in the host's state dir
   (``state/_evidence``), checked against what the unit runs: the same target model (evidence from another model is
   refused), the same speculative options (a production that no longer runs the promoted config cannot be judged
   by it: refused), and the promoted run's traffic: its shapes with their sizes and budgets as its bench recorded them,
   and the operator's own traffic for a declared shape (a declared shape whose file was not given is refused). The
   canary gets ``--metrics`` (its own counters) and one slot (``--parallel 1``), and a context that holds the
   largest prompt.
2. :meth:`Sentinel.judge` - while the canary serves: each prompt goes to production and to the canary (greedy, one at
   a time, production first), and the two are compared on the same prompts:

   - **lossless**: the canary's text equals production's, prompt by prompt (not asked where the canary's own
     arguments change the numerics by design, ``--n-gpu-layers 0`` on a GPU host: ``_quality.NUMERICS``);
   - **engaged**: where production drafted, the canary drafted too;
   - **acceptance**: accepted / drafted tokens from each reply's own ``timings`` (a count no other request can bend,
     so production under live load is measured as well as idle), the canary's no lower than production's by more
     than ``margin``; the interval of the difference comes from the per-prompt spread (Student t, 95 %);
   - **mean accepted length** and **acceptance per draft position** from the canary's own ``/metrics`` counters
     (nobody else uses the canary), against production's when its counters moved by exactly this traffic (it serves
     ``--metrics`` and nobody else drafted meanwhile); lower by more than ``mean_len_margin`` is a regression;
   - **speed**: the median over prompts of canary / production decode rate, below ``1 - speed_margin`` is a
     regression; not judged when the canary runs on other hardware (``--n-gpu-layers 0``/``-ngl 0`` in its
     arguments) or ``speed_margin`` is 0.

   A regression raises :class:`SentinelError` naming the build, the config and both numbers, unless
   ``accept_slower``: then the verdict says ``accepted_slower`` and the activation records it in the build record.
"""
from __future__ import annotations

import json
import math
import os
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence

from ansible_collections.llmfleet.specdec.plugins.module_utils.bench import _quality, _shapes, _traffic
from ansible_collections.llmfleet.specdec.plugins.module_utils.bench._breakeven import PER_POSITION_KEY
from ansible_collections.llmfleet.specdec.plugins.module_utils.bench._endpoint import Endpoint, counter_delta
from ansible_collections.llmfleet.specdec.plugins.module_utils.common._errors import SpecdecError
from ansible_collections.llmfleet.specdec.plugins.module_utils.common._stats import t_quantile
from ansible_collections.llmfleet.specdec.plugins.module_utils.llamacpp import _flags
from ansible_collections.llmfleet.specdec.plugins.module_utils.state import _evidence

SENTINEL_SCHEMA = "llmfleet.specdec/build-sentinel/1"
DEFAULT_MARGIN = 0.05           # acceptance points (accepted / drafted) the canary may lose to production
DEFAULT_MEAN_LEN_MARGIN = 0.25  # tokens of mean accepted length (the watch's tolerance)
DEFAULT_SPEED_MARGIN = 0.20     # the canary's median decode rate may be 20 % below production's
DEFAULT_PROMPTS = 4             # per shape
# The options that make a config what it is for speculation: production must run the promoted values.
SPEC_KEYS = ("model", "spec_types", "draft_model", "draft_n_max", "draft_n_min", "draft_p_min", "ngram_mod_n_min",
             "ngram_mod_n_max", "ngram_mod_n_match", "ngram_simple_size_n", "ngram_simple_size_m")
_CPU_CANARY = ("--n-gpu-layers", "--gpu-layers", "-ngl")


class SentinelError(SpecdecError):
    """The canary refused (a regression) or could not be judged (bad input); ``verdict`` holds what was measured."""

    def __init__(self, msg: str, verdict: Optional[Dict[str, Any]] = None) -> None:
        super().__init__(msg)
        self.verdict = verdict


# ------------------------------------------------------------------ the evidence, as the sentinel reads it


def load_evidence(state_dir: str, unit: str) -> tuple[str, Optional[Dict[str, Any]]]:
    """(path, evidence or None when no promotion is recorded); an unreadable file raises naming it."""
    path = _evidence.evidence_path(state_dir, unit)
    try:
        with open(path, encoding="utf-8") as handle:
            document = json.load(handle)
    except FileNotFoundError:
        return path, None
    except ValueError as exc:
        raise SentinelError(f"the promoted evidence {path} is not JSON ({exc}); run playbooks/promote.yml again") from None
    return path, _evidence.check_evidence(document, path, SentinelError)


def promoted_traffic(evidence: Mapping[str, Any]) -> Dict[str, Any]:
    """The promoted run's traffic as its bench recorded it: the API and, per shape, its budget, its largest prompt and
    (a declared shape) the file it came from; with the chain and the acceptance the run measured."""
    name = evidence["config"]
    config = _evidence.promoted_config(evidence)
    shapes: Dict[str, Dict[str, Any]] = {}
    api = "llamacpp"
    drafted = accepted = 0
    rates: List[float] = []  # per server start (entry): the median decode rate of its requests
    for entry in evidence["report"].get("entries") or []:
        bench = entry.get("bench") if isinstance(entry, Mapping) and entry.get("config") == name else None
        if not isinstance(bench, Mapping):
            continue
        api = str(bench.get("api") or api)
        for shape, info in (bench.get("shapes") or {}).items():
            if isinstance(info, Mapping) and shape not in shapes:
                checks = info.get("checks") if isinstance(info.get("checks"), Mapping) else {}
                shapes[shape] = {"n_predict": int(info.get("n_predict") or 32),
                                 "prompt_chars": int(info.get("prompt_chars") or 0),
                                 "source": checks.get("source") if shape not in _shapes.SHAPES else None}
        entry_rates = []
        for r in bench.get("requests") or []:
            if isinstance(r, Mapping):
                drafted += int(r.get("draft_n") or 0)
                accepted += int(r.get("draft_n_accepted") or 0)
                if isinstance(r.get("predicted_per_second"), (int, float)) and r["predicted_per_second"] > 0:
                    entry_rates.append(float(r["predicted_per_second"]))
        if entry_rates:
            rates.append(_median(entry_rates))  # type: ignore[arg-type]
    return {"config": name, "run_id": evidence["report"].get("run_id"), "api": api, "shapes": shapes,
            "chain": list(config.get("chain") or []), "measured_acceptance": accepted / drafted if drafted else None,
            "rate_low": min(rates) if rates else None, "rate_high": max(rates) if rates else None}


def _api_key(serving: Mapping[str, Any]) -> Optional[str]:
    """Production's own key (``--api-key`` or ``LLAMA_API_KEY``): the sentinel's requests need it where it is set."""
    argv = [str(a) for a in serving.get("argv") or []]
    given = [argv[i + 1] for i, a in enumerate(argv[:-1]) if a == "--api-key"]
    return given[-1].split(",")[0] if given else (serving.get("env") or {}).get("LLAMA_API_KEY") or None


def _options(argv: Sequence[str], env: Mapping[str, str]) -> Dict[str, Any]:
    """The speculative options as llama-server reads them; a flag the pinned table does not know is left to the
    build's own flag table (``build/_build_help``), which judges it against the new build's --help."""
    try:
        parsed = _flags.parse([str(a) for a in argv], env)
    except SpecdecError as exc:
        raise SentinelError(f"the config cannot be parsed: {exc}") from None
    out = {key: parsed.get(key) for key in SPEC_KEYS}
    out["spec_types"] = sorted(set(parsed.get("spec_types") or [])) or None
    return out


def promoted_options(evidence: Mapping[str, Any]) -> Dict[str, Any]:
    """The promoted config's speculative options, from its rendering (the command line of a form-exec config, else
    its env; ``effective_env`` where the report kept one)."""
    rendering = _evidence.promoted_config(evidence).get("rendering") or {}
    env = rendering.get("effective_env") if isinstance(rendering.get("effective_env"), Mapping) else \
        _evidence.promoted_env(evidence, SentinelError)
    return _options(list(rendering.get("exec_start") or [])[1:], {str(k): str(v) for k, v in env.items()})


def running_options(argv: Sequence[str], env: Mapping[str, str]) -> Dict[str, Any]:
    """What a process runs: its command line (``LLAMA_EXTRA_ARGS`` already in it, the launcher appended them) and
    its ``LLAMA_ARG_*`` variables."""
    return _options(list(argv)[1:], {k: v for k, v in env.items() if k != _flags.EXTRA_ARGS_ENV})


# ------------------------------------------------------------------ the numbers


def acceptance(requests: Sequence[Mapping[str, Any]]) -> Optional[float]:
    drafted = sum(int(r.get("draft_n") or 0) for r in requests)
    return sum(int(r.get("draft_n_accepted") or 0) for r in requests) / drafted if drafted else None


def paired_interval(canary: Sequence[Mapping[str, Any]], production: Sequence[Mapping[str, Any]]) -> Dict[str, Any]:
    """The canary's acceptance minus production's: pooled, and a 95 % t interval from the per-prompt differences
    (prompts where both drafted; no interval below two)."""
    diffs = [acceptance([c]) - acceptance([p]) for c, p in zip(canary, production)  # type: ignore[operator]
             if acceptance([c]) is not None and acceptance([p]) is not None]
    c_acc, p_acc = acceptance(canary), acceptance(production)
    out: Dict[str, Any] = {"difference": None if c_acc is None or p_acc is None else c_acc - p_acc,
                           "low": None, "high": None, "prompts": len(diffs)}
    if len(diffs) >= 2:
        mean = sum(diffs) / len(diffs)
        sd = math.sqrt(sum((d - mean) ** 2 for d in diffs) / (len(diffs) - 1))
        half = t_quantile(0.975, len(diffs) - 1) * sd / math.sqrt(len(diffs))
        out.update(low=mean - half, high=mean + half)
    return out


def counter_numbers(delta: Optional[Mapping[str, Any]]) -> Dict[str, Any]:
    """Mean accepted length (1 + accepted / drafts, llama.cpp's mean len) and acceptance per draft position."""
    if not delta or not delta.get("drafts"):
        return {"mean_accepted_len": None, "per_position": None}
    drafts = int(delta["drafts"])
    return {"mean_accepted_len": 1.0 + int(delta["accepted_tokens"]) / drafts,
            "per_position": [round(int(v) / drafts, 4) for v in delta.get(PER_POSITION_KEY) or []]}


def _median(values: Sequence[float]) -> Optional[float]:
    ordered = sorted(values)
    if not ordered:
        return None
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2.0


def _pct(value: Optional[float]) -> str:
    return "-" if value is None else f"{100.0 * value:.1f} %"


# ------------------------------------------------------------------ the sentinel


class Sentinel:
    """Plans and judges the canaries of one activation (see the module docstring)."""

    def __init__(self, *, state_dir: str, margin: float = DEFAULT_MARGIN, mean_len_margin: float = DEFAULT_MEAN_LEN_MARGIN,
                 speed_margin: float = DEFAULT_SPEED_MARGIN, prompts: int = DEFAULT_PROMPTS, seed: int = 0,
                 traffic: Any = None, accept_slower: bool = False, timeout: int = 600, canary_args: Sequence[str] = (),
                 client: Callable[[str, float], Endpoint] | None = None) -> None:
        for what, value, top in (("margin", margin, 1.0), ("mean_len_margin", mean_len_margin, 100.0),
                                 ("speed_margin", speed_margin, 1.0)):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < top:
                raise SentinelError(f"sentinel {what} must be a number from 0 to below {top:g}, got {value!r}")
        if isinstance(prompts, bool) or not isinstance(prompts, int) or prompts < 1:
            raise SentinelError(f"sentinel prompts must be a whole number of at least 1, got {prompts!r}")
        self.state_dir = state_dir
        self.margin = float(margin)
        self.mean_len_margin = float(mean_len_margin)
        self.speed_margin = float(speed_margin)
        self.prompts = prompts
        self.seed = int(seed)
        self.traffic = list(traffic or [])
        self.accept_slower = bool(accept_slower)
        self.timeout = int(timeout)
        self.canary_args = [str(a) for a in canary_args]
        self.client = client or (lambda url, timeout: Endpoint(url, timeout=timeout))
        self._skipped: Dict[str, str] = {}

    def skipped(self, unit: str) -> str:
        return self._skipped.get(unit, "no reason recorded")

    def other_hardware(self) -> bool:
        """Whether the canary's own arguments move it off production's devices (``--n-gpu-layers 0``)."""
        args = self.canary_args
        return any(a in _CPU_CANARY and i + 1 < len(args) and args[i + 1].strip() == "0" for i, a in enumerate(args)) or \
            any(a.split("=", 1)[0] in _CPU_CANARY and a.endswith("=0") for a in args)

    def lossless_required(self) -> bool:
        """Texts must equal production's unless the canary's arguments change the numerics by design."""
        for arg in self.canary_args:
            found = _flags.lookup(arg) if arg.startswith("-") else None
            if found is not None and found[0].canonical in _quality.NUMERICS and found[0].canonical != "--ctx-size":
                return False
        return True

    # ---------------------------------------------------------- before the canary starts

    def plan(self, serving: Mapping[str, Any]) -> Optional[Dict[str, Any]]:
        unit = str(serving["unit"])
        path, evidence = load_evidence(self.state_dir, unit)
        if evidence is None:
            self._skipped[unit] = f"no promotion is recorded for it ({path}): its canary is judged on /health alone"
            return None
        traffic = promoted_traffic(evidence)
        where = f"the promoted config {traffic['config']!r} of run {traffic['run_id']} ({path})"
        if not traffic["chain"]:
            self._skipped[unit] = f"{where} does not speculate"
            return None
        if not traffic["shapes"]:
            raise SentinelError(f"{where} recorded no traffic (no measured request of the config): the sentinel has "
                                "nothing to replay; re-run the A/B and promote, or set llamacpp_build_sentinel: false")
        try:
            promoted = promoted_options(evidence)
        except SentinelError as exc:
            raise SentinelError(f"{where}: {exc}; re-run the A/B and promote") from None
        running = running_options(serving["argv"], serving["env"])
        if promoted["model"] and running["model"] and os.path.normpath(promoted["model"]) != os.path.normpath(running["model"]):
            raise SentinelError(f"{where} is evidence of model {promoted['model']}, but {unit} serves {running['model']}: "
                                "evidence from another model cannot judge this build; promote a config measured on "
                                "this model (playbooks/spec_ab.yml, then promote.yml), or set llamacpp_build_sentinel: false")
        differs = {k: (promoted[k], running[k]) for k in SPEC_KEYS if k != "model" and promoted[k] != running[k]}
        if differs:
            shown = ", ".join(f"{k} {v[0]!r} -> {v[1]!r}" for k, v in sorted(differs.items()))
            raise SentinelError(f"{unit} does not run {where} ({shown}), so the canary cannot be judged by its evidence; "
                                "restore the promotion (playbooks/promote.yml) or re-run the A/B, or set "
                                "llamacpp_build_sentinel: false")
        prompts = self.prompts_for(traffic, where)
        longest = max(max(len(p.prompt), len(p.user)) for p in prompts)
        budget = max(p.n_predict for p in prompts)
        ctx = math.ceil((longest // 2 + budget + 64) / 256.0) * 256  # two characters a token at worst, and the budget
        return {"unit": unit, "build": serving.get("build"), "config": traffic["config"], "run_id": traffic["run_id"],
                "evidence": path, "api": traffic["api"], "production": f"http://127.0.0.1:{int(serving['port'])}",
                "prompts": prompts, "measured_acceptance": traffic["measured_acceptance"],
                "rate_low": traffic["rate_low"], "rate_high": traffic["rate_high"], "api_key": _api_key(serving),
                # a canary on other hardware cannot show speed: measured on the unit after the switch instead
                "after_switch": self.other_hardware() and self.speed_margin > 0,
                "args": ["--metrics", "--parallel", "1"], "ctx_size": ctx, "seconds": self.timeout}

    def prompts_for(self, traffic: Mapping[str, Any], where: str) -> List[_shapes.Prompt]:
        """The promoted run's shapes, ``prompts`` each: built-in shapes generated at the run's sizes and budgets, a
        declared shape from the operator's file (given as ``traffic``, as spec_bench takes it)."""
        custom_names = [s for s in traffic["shapes"] if s not in _shapes.SHAPES]
        given = {str(t.get("name")): t for t in self.traffic if isinstance(t, Mapping)}
        missing = [s for s in custom_names if s not in given or given[s].get("content") in (None, "")]
        if missing:
            shown = ", ".join(f"{s!r} ({traffic['shapes'][s].get('source') or 'its file'})" for s in missing)
            raise SentinelError(f"{where} was measured on declared traffic {shown}, which was not given or is gone: "
                                "give the same files as specdec_ab_traffic (llamacpp_build_sentinel_traffic), or set "
                                "llamacpp_build_sentinel: false")
        custom = _traffic.load_traffic([dict(given[s], n_predict=given[s].get("n_predict")
                                             or traffic["shapes"][s]["n_predict"]) for s in custom_names],
                                       traffic["api"]) if custom_names else {}
        sizes: Dict[str, Dict[str, int]] = {}
        for shape in (s for s in traffic["shapes"] if s in _shapes.SHAPES):
            info = traffic["shapes"][shape]
            size = {"n_predict": max(1, info["n_predict"])}
            if shape in ("prose", "echo") and info["prompt_chars"]:
                size["chars"] = max(_shapes.MIN_CHARS[shape], info["prompt_chars"])
            elif shape == "structured":
                size["chars"] = max(_shapes.MIN_CHARS[shape], info["n_predict"] * _shapes.CHARS_PER_TOKEN)
            sizes[shape] = size
        built = _shapes.build_shapes(seed=self.seed, sizes=sizes, prompts_per_shape=self.prompts,
                                     shapes=list(sizes)) if sizes else {}
        built.update({name: shape.prompts(self.prompts) for name, shape in custom.items()})
        return [p for shape in traffic["shapes"] for p in built[shape]]

    # ---------------------------------------------------------- while the canary serves

    def judge(self, plan: Mapping[str, Any], canary_port: int) -> Dict[str, Any]:
        production = self.client(plan["production"], float(self.timeout))
        canary = self.client(f"http://127.0.0.1:{int(canary_port)}", float(self.timeout))
        for client in (production, canary):  # the canary runs production's command line: the same key
            if plan.get("api_key") and hasattr(client, "api_key"):
                client.api_key = plan["api_key"]
        what = f"build {plan['build']} with config {plan['config']!r} on {plan['unit']}"
        try:
            c_before = canary.spec_counters()
            try:
                p_before: Optional[Dict[str, Any]] = production.spec_counters()
            except SpecdecError:
                p_before = None  # production serves no /metrics: its per-request counts still judge acceptance
            p_replies, c_replies = [], []
            for prompt in plan["prompts"]:
                p_replies.append(production.complete(prompt, plan["api"]))
                c_replies.append(canary.complete(prompt, plan["api"]))
            c_delta = counter_delta(c_before, canary.spec_counters(), canary.url("/metrics"))
            p_delta = None
            if p_before is not None:
                try:
                    p_delta = counter_delta(p_before, production.spec_counters(), production.url("/metrics"))
                except SpecdecError:
                    p_delta = None
        except SpecdecError as exc:
            raise SentinelError(f"{what}: the canary could not be judged: {exc}; production was not changed") from None
        return self.verdict(plan, p_replies, c_replies, p_delta, c_delta)

    def verdict(self, plan: Mapping[str, Any], p_replies: Sequence[Mapping[str, Any]],
                c_replies: Sequence[Mapping[str, Any]], p_delta: Optional[Mapping[str, Any]],
                c_delta: Optional[Mapping[str, Any]]) -> Dict[str, Any]:
        """The comparison of one unit's canary with production on the same prompts (pure: the tests drive it)."""
        what = f"build {plan['build']} with config {plan['config']!r} on {plan['unit']}"
        p_drafted = sum(int(r.get("draft_n") or 0) for r in p_replies)
        # production's counters count this traffic alone only when they moved by exactly its drafted tokens
        p_clean = p_delta if p_delta is not None and int(p_delta.get("draft_tokens") or 0) == p_drafted else None
        c_nums, p_nums = counter_numbers(c_delta), counter_numbers(p_clean)
        diff = paired_interval(c_replies, p_replies)
        rates = [float(c["predicted_per_second"]) / float(p["predicted_per_second"]) for c, p in zip(c_replies, p_replies)
                 if c.get("predicted_per_second") and p.get("predicted_per_second")]
        differing = [i for i, (c, p) in enumerate(zip(c_replies, p_replies)) if c.get("text") != p.get("text")]
        verdict: Dict[str, Any] = {
            "schema": SENTINEL_SCHEMA, "unit": plan["unit"], "build": plan["build"], "config": plan["config"],
            "run_id": plan["run_id"], "evidence": plan["evidence"], "prompts": len(p_replies),
            "shapes": sorted({p.shape for p in plan["prompts"]}),
            "production": {"acceptance": acceptance(p_replies), "drafted": p_drafted, **p_nums},
            "canary": {"acceptance": acceptance(c_replies), "drafted": sum(int(r.get("draft_n") or 0) for r in c_replies),
                       **c_nums},
            "acceptance_difference": diff, "margin": self.margin, "mean_len_margin": self.mean_len_margin,
            "measured_acceptance_at_promotion": plan.get("measured_acceptance"),
            "speed_ratio": _median(rates), "speed_margin": self.speed_margin,
            "speed_judged": bool(rates) and self.speed_margin > 0 and not self.other_hardware(),
            "lossless_required": self.lossless_required(), "texts_differ": len(differing),
            "regressions": [], "notes": [], "accepted_slower": False}
        reg: List[str] = verdict["regressions"]
        if verdict["lossless_required"] and differing:
            first = _quality.first_divergence(str(p_replies[differing[0]].get("text")),
                                              str(c_replies[differing[0]].get("text")))
            at = f" (first at character {first['position']})" if first else ""
            reg.append(f"not lossless: its text differs from production's on {len(differing)} of {len(p_replies)} "
                       f"prompts{at}")
        if p_drafted == 0:
            verdict["notes"].append("production drafted nothing on these prompts: acceptance not compared")
        elif verdict["canary"]["drafted"] == 0:
            reg.append(f"not engaged: production drafted {p_drafted} tokens on these prompts, the canary none "
                       "(speculation is off on the new build)")
        elif diff["difference"] is not None and diff["difference"] < -self.margin:
            shown = "" if diff["low"] is None else f", interval {diff['low']:+.3f} to {diff['high']:+.3f}"
            reg.append(f"acceptance {_pct(verdict['canary']['acceptance'])} against production's "
                       f"{_pct(verdict['production']['acceptance'])} on the same {len(p_replies)} prompts "
                       f"(difference {diff['difference']:+.3f}{shown}; margin {self.margin:.2f})")
        c_len, p_len = verdict["canary"]["mean_accepted_len"], verdict["production"]["mean_accepted_len"]
        if c_len is not None and p_len is not None and c_len < p_len - self.mean_len_margin:
            reg.append(f"mean accepted length {c_len:.2f} against production's {p_len:.2f} (margin "
                       f"{self.mean_len_margin:.2f}; per position {verdict['canary']['per_position']} against "
                       f"{verdict['production']['per_position']})")
        if verdict["speed_judged"] and verdict["speed_ratio"] < 1.0 - self.speed_margin:
            reg.append(f"decode rate {verdict['speed_ratio']:.2f}x production's (median over {len(rates)} prompts; "
                       f"margin {self.speed_margin:.2f})")
        elif not verdict["speed_judged"] and self.other_hardware():
            verdict["notes"].append("the canary runs on other hardware (--n-gpu-layers 0): its rate says nothing of "
                                    "speed, which was not judged")
        if reg and not self.accept_slower:
            raise SentinelError(f"{what} is a regression against production on the promoted traffic: "
                                f"{'; '.join(reg)}. The rollout stops here; see docs/builds.md (the sentinel) - "
                                "-e specdec_build_accept_slower=true goes ahead and records it", verdict)
        verdict["accepted_slower"] = bool(reg)
        return verdict

    # ---------------------------------------------------------- after the switch (a canary on other hardware)

    def after_switch(self, plan: Mapping[str, Any]) -> Dict[str, Any]:
        """The promoted config's decode rate on the new build, on the unit itself (production now runs the new build,
        under the activation's dead-man), against the lowest per-start median rate the promoted run measured: below
        it by more than ``speed_margin`` is a regression (raised unless ``accept_slower``)."""
        what = f"build {plan['build']} with config {plan['config']!r} on {plan['unit']}"
        client = self.client(plan["production"], float(self.timeout))
        if plan.get("api_key") and hasattr(client, "api_key"):
            client.api_key = plan["api_key"]
        try:
            replies = [client.complete(prompt, plan["api"]) for prompt in plan["prompts"]]
        except SpecdecError as exc:
            raise SentinelError(f"{what}: its speed could not be measured after the switch: {exc}") from None
        rate = _median([float(r["predicted_per_second"]) for r in replies if r.get("predicted_per_second")])
        low, high = plan.get("rate_low"), plan.get("rate_high")
        verdict: Dict[str, Any] = {
            "schema": SENTINEL_SCHEMA, "unit": plan["unit"], "build": plan["build"], "config": plan["config"],
            "run_id": plan["run_id"], "evidence": plan["evidence"], "after_switch": True, "prompts": len(replies),
            "rate": rate, "evidence_rate_low": low, "evidence_rate_high": high, "speed_margin": self.speed_margin,
            "acceptance": acceptance(replies), "regressions": [], "notes": [], "accepted_slower": False}
        if rate is None or low is None:
            verdict["notes"].append("no decode rate to compare (the evidence or the replies carry none): speed not "
                                    "judged")
        elif rate < low * (1.0 - self.speed_margin):
            verdict["regressions"].append(
                f"decode rate {rate:.1f} tok/s on the new build against {low:.1f}-{high:.1f} tok/s the promoted run "
                f"measured (median per server start; margin {self.speed_margin:.2f})")
        if verdict["regressions"] and not self.accept_slower:
            raise SentinelError(f"{what} is slower than the promoted run measured: {'; '.join(verdict['regressions'])}. "
                                "'current' goes back on this host and the rollout stops; "
                                "-e specdec_build_accept_slower=true goes ahead and records it", verdict)
        verdict["accepted_slower"] = bool(verdict["regressions"])
        return verdict
