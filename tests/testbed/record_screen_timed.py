"""Records tests/unit/fixtures/screen/win_screen.json: a real screen (spec_screen's ``run_screen``) of the win bed
(production: the real llama-server serving win-models/target-win.gguf with ``-t 1``; the candidates: its draft at
K 4, as molecule/win runs it, its noisy draft, and ngram-mod), with every timing the prediction and the bound rest
on (the inputs of ``_screen._timed`` per candidate: the replayed rounds per request, production's step samples,
the verification batches' samples, the drafter's steps and prefill samples, the copy of the target's fit).
tests/unit/test_screen_bound.py re-times it with extra delay. From the repository root:

    PYTHONPATH=tests:.build/collections .venv/bin/python -m testbed.record_screen_timed tests/unit/fixtures/screen/win_screen.json
"""
from __future__ import annotations

import json
import os
import sys
from typing import Any

from ansible_collections.llmfleet.specdec.plugins.module_utils.screen import _screen
from testbed.server import LlamaServer, find_llama_server

MODELS = os.path.join(os.environ.get("LLMFLEET_CACHE") or os.path.expanduser("~/.cache/llmfleet-specdec"), "win-models")
SIZES = {"prose": {"chars": 400, "n_predict": 64}, "structured": {"chars": 300, "n_predict": 64}}


def _rounded(value: Any) -> Any:
    if isinstance(value, float):
        return round(value, 5)
    if isinstance(value, dict):
        return {str(k): _rounded(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_rounded(v) for v in value]
    return value


def main(out: str) -> None:
    target = os.path.join(MODELS, "target-win.gguf")
    candidates = [
        {"name": "draft-n4", "env": {"LLAMA_ARG_SPEC_TYPE": "draft-simple",
                                     "LLAMA_ARG_SPEC_DRAFT_MODEL": os.path.join(MODELS, "draft-win.gguf"),
                                     "LLAMA_ARG_SPEC_DRAFT_N_MAX": "4"}, "ks": [4]},
        {"name": "draft-noisy-n4", "env": {"LLAMA_ARG_SPEC_TYPE": "draft-simple",
                                           "LLAMA_ARG_SPEC_DRAFT_MODEL": os.path.join(MODELS, "draft-win-noisy.gguf"),
                                           "LLAMA_ARG_SPEC_DRAFT_N_MAX": "4"}, "ks": [4]},
        {"name": "ngram-mod", "env": {"LLAMA_ARG_SPEC_TYPE": "ngram-mod"},
         "flags": ["--spec-ngram-mod-n-match", "8", "--spec-ngram-mod-n-min", "2", "--spec-ngram-mod-n-max", "16"]},
    ]
    inputs: dict[str, Any] = {}
    real_timed = _screen._timed

    def timed(plan, replays, prod, verify_samples, d_s, prefill, seed, copy=None, **kwargs):
        prefill_samples, busy = kwargs.get("prefill_samples"), kwargs.get("busy", ())
        inputs[plan["name"]] = {
            "plan": {"name": plan["name"], "chain": plan["chain"]},
            "replays": {str(k): dict(r) for k, r in replays.items()},
            "prod": dict(prod), "verify_samples": {str(b): v for b, v in verify_samples.items()}, "d_s": list(d_s),
            "prefill": {str(b): v for b, v in prefill.items()},
            "prefill_samples": {str(b): v for b, v in (prefill_samples or {}).items()},
            "copy": {key: (copy or {}).get(key) for key in ("used", "why", "corrections", "draws", "drafters")},
            "busy": list(busy), "seed": seed}
        return real_timed(plan, replays, prod, verify_samples, d_s, prefill, seed, copy, **kwargs)

    _screen._timed = timed
    with LlamaServer(target, args=["-t", "1"]) as prod:
        screen = _screen.run_screen(prod.url, candidates, llama_server=find_llama_server(), drafter_launch="process",
                                    shapes=["prose", "structured"], prompts_per_shape=2, sizes=SIZES, seed=0,
                                    timeout=300, candidate_errors="fail", verify_copy="auto")
    for row in inputs.values():
        if row["copy"].get("draws"):
            row["copy"]["draws"] = row["copy"]["draws"][:40]
        for drafter in (row["copy"].get("drafters") or {}).values():
            if drafter.get("draws"):
                drafter["draws"] = drafter["draws"][:40]
    with open(out, "w", encoding="utf-8") as handle:
        json.dump(_rounded({"server": "llama-server of the llama-cpp-python 0.3.36 sdist, -t 1, win-models/target-win.gguf",
                            "loadavg": open("/proc/loadavg", encoding="utf-8").read().split()[:3],
                            "screen": screen, "timed": inputs}), handle, separators=(",", ":"))


if __name__ == "__main__":
    main(sys.argv[1])
