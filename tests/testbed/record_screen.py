"""Records tests/unit/fixtures/screen/ngram_run.json: production's greedy tokens and the real server's own counters with
each n-gram proposer loaded (the oracle of tests/unit/test_screen.py). From the repository root:

    PYTHONPATH=tests:.build/collections .venv/bin/python -m testbed.record_screen tests/unit/fixtures/screen/ngram_run.json
"""
from __future__ import annotations

import json
import os
import sys

from ansible_collections.llmfleet.specdec.plugins.module_utils.bench._endpoint import Endpoint, plan_requests
from ansible_collections.llmfleet.specdec.plugins.module_utils.screen import _screen
from testbed.server import LlamaServer

MODELS = os.path.join(os.environ.get("LLMFLEET_CACHE") or os.path.expanduser("~/.cache/llmfleet-specdec"), "demo-models")
SIZES = {"echo": {"chars": 600, "n_predict": 96}, "structured": {"chars": 300, "n_predict": 64}}
CONFIGS = {
    "ngram-mod": ["--spec-type", "ngram-mod", "--spec-ngram-mod-n-match", "8", "--spec-ngram-mod-n-min", "2",
                  "--spec-ngram-mod-n-max", "16"],
    "ngram-simple": ["--spec-type", "ngram-simple", "--spec-ngram-simple-size-n", "4", "--spec-ngram-simple-size-m", "8"],
    "ngram-map-k": ["--spec-type", "ngram-map-k", "--spec-ngram-map-k-size-n", "4", "--spec-ngram-map-k-size-m", "8"],
    "ngram-map-k4v": ["--spec-type", "ngram-map-k4v", "--spec-ngram-map-k4v-size-n", "4",
                      "--spec-ngram-map-k4v-size-m", "8", "--spec-ngram-map-k4v-min-hits", "2"],
    "ngram-cache": ["--spec-type", "ngram-cache"],
}


def main(out: str) -> None:
    _warm, schedule, _distinct = plan_requests(seed=0, sizes=SIZES, shapes=["echo", "structured"], prompts_per_shape=3,
                                               repeats=1, warmup=0)
    prompts = [{"shape": p.shape, "text": p.prompt, "n_predict": p.n_predict} for _r, p in schedule]
    target = os.path.join(MODELS, "target.gguf")
    with LlamaServer(target, args=["-t", "1"]) as prod:
        conts = _screen.production_continuations(Endpoint(prod.url, timeout=120), prompts)["continuations"]
    served = {}
    for name, args in CONFIGS.items():
        with LlamaServer(target, args=["-t", "1", *args]) as server:
            client = Endpoint(server.url, timeout=120)
            rows = []
            for cont in conts:
                reply = client._json("POST", "/completion", {"prompt": cont["prompt"], "n_predict": cont["budget"],
                                                             "temperature": 0.0, "cache_prompt": False,
                                                             "return_tokens": True})
                assert [int(t) for t in reply["tokens"]] == cont["tokens"]
                timings = reply["timings"]
                rows.append({"draft_n": int(timings.get("draft_n") or 0),
                             "draft_n_accepted": int(timings.get("draft_n_accepted") or 0)})
            served[name] = {"args": args, "requests": rows}
    with open(out, "w", encoding="utf-8") as handle:
        json.dump({"server": "llama-server of the llama-cpp-python 0.3.36 sdist, -t 1, testbed target.gguf",
                   "continuations": conts, "served": served}, handle, separators=(",", ":"))


if __name__ == "__main__":
    main(sys.argv[1])
