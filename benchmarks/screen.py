"""The screen against the full sweep, side by side on the real llama-server: what spec_screen predicts from
production alone (no restart) and what a server with each config loaded really does.

Two beds: the tiny models (tests/testbed/models.py: target.gguf, draft.gguf; ngram-mod on the echo shape) and the
win bed (the memory-bound 413 MB target-win.gguf and its one-layer prefix draft-win.gguf, 2 threads). Per candidate
and K, one row: the screen's mean accepted length and the server's own (/metrics: 1 + accepted / drafts) with their
ratio, the screen's predicted decode tok/s and the measured one with their ratio; then per bed whether the screen's
pick (the best predicted K) equals the full sweep's winner (the best measured), and the production restarts each
plan costs: the screen 0, its confirming A/B (baseline + the pick, 3 rounds) against the full sweep's (baseline +
every K, 3 rounds). Goals: accepted length within 10 %, predicted tok/s within 25 %, the same winner, at most a third
of the sweep's restarts. The screen times the verification as real rounds on a copy of the target where one fits
(spec_screen's verify_copy=auto, as the A/B runs it); each bed's summary says whether it did.

Run: make benchmark-screen (PYTHONPATH=tests:.build/collections .venv/bin/python benchmarks/screen.py)
"""
from __future__ import annotations

import os
import statistics
import sys
import tempfile
from pathlib import Path

from ansible_collections.llmfleet.specdec.plugins.module_utils.bench._endpoint import Endpoint, plan_requests
from ansible_collections.llmfleet.specdec.plugins.module_utils.screen import _screen
from testbed.server import LlamaServer, find_llama_server

CACHE = Path(os.environ.get("LLMFLEET_CACHE") or Path.home() / ".cache" / "llmfleet-specdec")
ROUNDS = 3
NGRAM = ["--spec-ngram-mod-n-match", "8", "--spec-ngram-mod-n-min", "2", "--spec-ngram-mod-n-max", "16"]
BEDS = [
    {"bed": "tiny", "target": CACHE / "demo-models" / "target.gguf", "threads": "1",
     "sizes": {"prose": {"chars": 400, "n_predict": 64}, "echo": {"chars": 600, "n_predict": 96}},
     "shapes": ["prose", "echo"],
     "candidates": [
         {"name": "draft", "env": {"LLAMA_ARG_SPEC_TYPE": "draft-simple",
                                   "LLAMA_ARG_SPEC_DRAFT_MODEL": str(CACHE / "demo-models" / "draft.gguf")},
          "ks": [1, 2, 3, 4, 6, 8]},
         {"name": "ngram-mod", "env": {"LLAMA_ARG_SPEC_TYPE": "ngram-mod"}, "flags": NGRAM, "shapes": ["echo"]}]},
    {"bed": "win", "target": CACHE / "win-models" / "target-win.gguf", "threads": "2",
     "sizes": {"prose": {"chars": 400, "n_predict": 64}, "structured": {"chars": 300, "n_predict": 64}},
     "shapes": ["prose", "structured"],
     "candidates": [
         {"name": "draft", "env": {"LLAMA_ARG_SPEC_TYPE": "draft-simple",
                                   "LLAMA_ARG_SPEC_DRAFT_MODEL": str(CACHE / "win-models" / "draft-win.gguf")},
          "ks": [1, 2, 4, 8]}]},
]


def served(target: Path, threads: str, args: list[str], conts: list[dict]) -> dict[str, float]:
    """A server with the config loaded, sent the same prompt tokens: its counters and its decode rate."""
    with LlamaServer(target, args=["-t", threads, "--metrics", *args], log_dir=tempfile.mkdtemp()) as server:
        client = Endpoint(server.url, timeout=600)
        # one request first, not counted, as the A/B warms every start up (warmup: 1): the first request of a fresh
        # server pays one-time costs (its buffers, the draft context's first graphs) that production, screened while
        # warm, does not show. Its text shares nothing with the measured prompts (ngram-mod keeps its table).
        client._json("POST", "/completion", {"prompt": "Warm-up: 7 9 13 quartz vexing jumbo.", "n_predict": 8,
                                             "temperature": 0.0, "cache_prompt": False})
        before = client.spec_counters()
        rates = []
        for cont in conts:
            reply = client._json("POST", "/completion", {"prompt": cont["prompt"], "n_predict": cont["budget"],
                                                         "temperature": 0.0, "cache_prompt": False})
            rates.append(float(reply["timings"]["predicted_per_second"]))
        after = client.spec_counters()
    drafts = after["drafts"] - before["drafts"]
    return {"len": 1.0 + (after["accepted_tokens"] - before["accepted_tokens"]) / drafts if drafts else 1.0,
            "tok_s": statistics.median(rates)}


def args_of(candidate: dict, k: int) -> list[str]:
    env = candidate["env"]
    if env["LLAMA_ARG_SPEC_TYPE"] == "draft-simple":
        return ["-md", env["LLAMA_ARG_SPEC_DRAFT_MODEL"], "--spec-type", "draft-simple", "--spec-draft-n-max", str(k)]
    flags = list(candidate.get("flags") or [])
    flags[flags.index("--spec-ngram-mod-n-max") + 1] = str(k)
    return ["--spec-type", "ngram-mod", *flags]


def main() -> int:
    binary = find_llama_server()
    rows = [("bed", "candidate", "K", "len screen", "len server", "ratio", "tok/s predicted", "[low, high]",
             "tok/s measured", "ratio")]
    summary = []
    for bed in BEDS:
        for cand in bed["candidates"]:
            shapes = cand.get("shapes", bed["shapes"])
            spec = {k: v for k, v in cand.items() if k != "shapes"}
            with LlamaServer(bed["target"], args=["-t", bed["threads"], "--metrics"],
                             log_dir=tempfile.mkdtemp()) as prod:
                screen = _screen.run_screen(prod.url, [spec], llama_server=binary, drafter_launch="process",
                                            shapes=shapes, sizes=bed["sizes"])
                _w, schedule, _d = plan_requests(seed=0, sizes=bed["sizes"], shapes=shapes, prompts_per_shape=2,
                                                 repeats=1, warmup=0)
                conts = _screen.production_continuations(
                    Endpoint(prod.url, timeout=600),
                    [{"shape": p.shape, "text": p.prompt, "n_predict": p.n_predict} for _r, p in schedule],
                )["continuations"]
            base = served(bed["target"], bed["threads"], [], conts)
            got = screen["candidates"][cand["name"]]
            measured = {}
            for k in sorted(int(x) for x in got["k"]):
                real = served(bed["target"], bed["threads"], args_of(cand, k), conts)
                pred = got["k"][str(k)]
                measured[k] = real["tok_s"]
                rows.append((bed["bed"], cand["name"], str(k), f"{pred['mean_accepted_len']:.2f}",
                             f"{real['len']:.2f}", f"{pred['mean_accepted_len'] / real['len']:.2f}",
                             f"{pred['predicted_tok_s']:.1f}", f"[{pred['low']:.1f}, {pred['high']:.1f}]",
                             f"{real['tok_s']:.1f}", f"{pred['predicted_tok_s'] / real['tok_s']:.2f}"))
                print("  ".join(rows[-1]), flush=True)  # as it goes; the aligned table comes at the end
            pick, winner = got["best_k"], max(measured, key=measured.get)
            sweep = ROUNDS * (1 + len(measured))  # the baseline and every K, each round
            confirm = 2 * ROUNDS  # the baseline and the pick
            copy = screen["production"].get("verify_copy") or {}
            timed = (f"real rounds on a copy of the target ({copy['per_round_ms']:.3f} ms a round + "
                     f"{copy['per_row_ms']:.3f} ms a row, {copy['requests']} requests)" if copy.get("used")
                     else f"batches on production ({copy.get('why')})")
            drafter = got.get("drafter_copy") or {}
            if "per_token_ms" in drafter:
                timed += (f"; the drafter in the server's rounds {drafter['per_round_ms']:.3f} ms a round + "
                          f"{drafter['per_token_ms']:.3f} ms a token (its side server's step {got['d_s_ms']:.3f})")
            summary.append(f"{bed['bed']}/{cand['name']}: the verification timed as {timed}")
            summary.append(f"{bed['bed']}/{cand['name']} on {', '.join(shapes)}: production {base['tok_s']:.1f} "
                           f"tok/s; the screen picks K={pick}, the full sweep's winner is K={winner} "
                           f"({'same' if pick == winner else 'DIFFERENT'}); restarts: the screen 0 + its confirming "
                           f"A/B {confirm}, the full sweep {sweep} ({confirm / sweep:.2f}x)")
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  ".join(cell.rjust(w) for cell, w in zip(row, widths)))
    print()
    print("\n".join(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
