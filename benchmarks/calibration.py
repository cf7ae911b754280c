#!/usr/bin/env python3
"""Calibration of the A/B verdicts: how often an identical config is called different, and how often a
real win is called a win.

Every *run* has the protocol's shape: rounds x configs, the order rotated per round, each config on its own
server start in every round (a real llama-server started by tests/testbed/server.py, not through systemd,
so a run costs seconds to minutes), every shape measured by the project's own spec_bench code path
(``_endpoint.run_bench``), the run judged by ``_judge.judge``. Two test beds:

- ``tiny``: the demo models (1.5 MB target), configs ``baseline`` and ``twin``;
- ``win``: the memory-bound 413 MB F16 target of ``testbed.models.WIN_SET`` with its exact one-layer
  draft, configs ``baseline``, ``twin``, ``draft-n4`` (draft-simple, depth 4: the ground truth says
  faster) and ``noisy-n8`` (a noisy draft at depth 8: the ground truth says slower).

The ``twin`` is the baseline again under another name, with a harmless environment difference
(``SPECDEC_TWIN=1``), so it gets its own server start like any other config: whatever it is called
other than "no difference" is a false call. The table prints, per bed and config: runs, shape verdicts,
the share called "no difference" / win / loss, for the calibrated method (t-interval over rounds) and,
on the same data, the old percentile bootstrap over requests.

Ground truth comes from outside the protocol: each win-bed config served once and measured with many
requests (``--truth-requests``), the ratio of the mean log rates.

Run: make benchmark-calibration   (needs the llama-server build and writes the win bed once into the cache)
"""
from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from ansible_collections.llmfleet.specdec.plugins.module_utils import _endpoint, _shapes, _stats
from ansible_collections.llmfleet.specdec.plugins.plugin_utils import _judge
from testbed import models
from testbed.server import LlamaServer

CACHE = Path(os.environ.get("LLMFLEET_CACHE") or Path.home() / ".cache" / "llmfleet-specdec")
SHAPES = list(_shapes.SHAPES)  # every shape, in the one order
TWIN_ENV = {"SPECDEC_TWIN": "1"}


def beds(threads: int) -> dict[str, dict[str, Any]]:
    tiny = CACHE / "demo-models"
    win = CACHE / "win-models"
    t = ["-t", str(threads)]
    return {
        "tiny": {
            "target": tiny / "target.gguf", "threads": ["-t", "1"],
            "sizes": {"prose": {"chars": 1200, "n_predict": 48}, "echo": {"chars": 900, "n_predict": 48},
                      "structured": {"chars": 600, "n_predict": 48}, "identity": {"n_predict": 32}},
            "configs": {"baseline": {}, "twin": {"env": TWIN_ENV}},
        },
        "win": {
            # two shapes and short prompts: a request on this bed costs seconds on a shared 2-core machine
            "target": win / "target-win.gguf", "threads": t, "shapes": ["prose", "structured"],
            "sizes": {"prose": {"chars": 200, "n_predict": 16}, "structured": {"chars": 200, "n_predict": 16}},
            "configs": {
                "baseline": {},
                "twin": {"env": TWIN_ENV},
                "draft-n4": draft_config(win / "draft-win.gguf", 4),
                "noisy-n8": draft_config(win / "draft-win-noisy.gguf", 8, ["--spec-draft-n-min", "8",
                                                                           "--spec-draft-p-min", "0"]),
            },
        },
    }


def draft_config(draft: Path, k: int, extra: list[str] | None = None) -> dict[str, Any]:
    """draft-simple at depth k; server_config says the same in the env names the A/B role would write."""
    return {"args": ["--spec-type", "draft-simple", "-md", str(draft), "--spec-draft-n-max", str(k), *(extra or [])],
            "chain": ["draft-simple"], "k": k,
            "server_config": {"LLAMA_ARG_SPEC_TYPE": "draft-simple", "LLAMA_ARG_SPEC_DRAFT_MODEL": str(draft),
                              "LLAMA_ARG_SPEC_DRAFT_N_MAX": str(k)}}


def prediction_bed(threads: int) -> dict[str, Any]:
    """The win bed with the draft model served alone (a drafter probe: d_s measured) and depths 2, 4, 8."""
    win = CACHE / "win-models"
    bed = dict(beds(threads)["win"], shapes=["prose"])
    draft = win / "draft-win.gguf"
    bed["configs"] = {
        "baseline": {},
        "drafter-alone": {"model": draft, "server_config": {"LLAMA_ARG_MODEL": str(draft)}},
        **{f"draft-n{k}": draft_config(draft, k) for k in (2, 4, 8)},
    }
    return bed


def serve(bed: dict[str, Any], config: dict[str, Any]) -> LlamaServer:
    return LlamaServer(config.get("model") or bed["target"], args=[*bed["threads"], *config.get("args", [])],
                       env=config.get("env"), ctx_size=2048)


def measure(bed: dict[str, Any], config: dict[str, Any], *, seed: int, prompts: int, repeats: int = 1,
            shapes: list[str] | None = None) -> dict[str, Any]:
    with serve(bed, config) as server:
        return _endpoint.run_bench(server.url, shapes=shapes or SHAPES, prompts_per_shape=prompts, repeats=repeats,
                                   warmup=1, seed=seed, sizes=bed["sizes"], timeout=300)


def one_run(bed: dict[str, Any], names: list[str], *, rounds: int, prompts: int, seed: int) -> dict[str, Any]:
    """rounds x configs in the protocol's order (rotated by one each round), each on its own server start."""
    entries = []
    for rnd in range(rounds):
        shift = rnd % len(names)
        for order, name in enumerate(names[shift:] + names[:shift]):
            bench = measure(bed, bed["configs"][name], seed=seed * 100 + rnd, prompts=prompts,
                            shapes=bed.get("shapes"))
            entries.append({"config": name, "round": rnd, "order": order, "bench": bench, "error": None,
                            "server_config": server_config(bed["configs"][name])})
    configs = [{"name": n, "chain": bed["configs"][n].get("chain", []),
                "server_config": server_config(bed["configs"][n]),
                **({"k": bed["configs"][n]["k"]} if "k" in bed["configs"][n] else {})} for n in names]
    return {"host": "calibration", "baseline": "baseline", "configs": configs, "entries": entries}


def server_config(config: dict[str, Any]) -> dict[str, str]:
    return {**config.get("env", {}), **config.get("server_config", {})}


def tally(runs: list[dict[str, Any]], method: str, margin: float) -> dict[str, dict[str, int]]:
    """config -> {verdict: count} over every shape of every run."""
    out: dict[str, dict[str, int]] = {}
    for run in runs:
        judged = _judge.judge(run, method=method, margin=margin, n_boot=1000)
        for name, c in judged["configs"].items():
            if name == judged["baseline"]:
                continue
            counts = out.setdefault(name, {})
            for row in c["shapes"].values():
                key = row["ci_verdict"] if row["ci_verdict"] in (_stats.WIN, _stats.LOSS, _stats.NO_DIFFERENCE) \
                    else ("invalid" if row["verdict"] == "invalid" else "not called")
                counts[key] = counts.get(key, 0) + 1
    return out


def ground_truth(bed: dict[str, Any], names: list[str], requests: int) -> dict[str, float]:
    """Each config served once, ``requests`` prose requests: exp(mean log rate) per config."""
    out = {}
    for name in names:
        bench = measure(bed, bed["configs"][name], seed=9999, prompts=requests, shapes=["prose"])
        rates = [r["predicted_per_second"] for r in bench["requests"] if r.get("predicted_per_second")]
        out[name] = math.exp(statistics.fmean(math.log(r) for r in rates))
    return out


def print_table(runs_by_bed: dict[str, list[dict[str, Any]]], margin: float) -> None:
    expected = {"twin": "no difference", "draft-n4": "win", "noisy-n8": "loss"}
    print("| bed | config | truth | runs | shape verdicts | method | no difference | win | loss | not called "
          "| right |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for bed, runs in runs_by_bed.items():
        if not runs:
            continue
        for method, label, m in (("rounds", "t over rounds", margin), ("request-bootstrap", "old bootstrap", 0.0)):
            counts = tally(runs, method, m)
            for name, c in counts.items():
                total = sum(c.values())
                right = c.get(expected.get(name, ""), 0)
                print(f"| {bed} | {name} | {expected.get(name, '?')} | {len(runs)} | {total} | {label} | "
                      f"{c.get('no difference', 0)} | {c.get('win', 0)} | {c.get('loss', 0)} | "
                      f"{c.get('not called', 0) + c.get('invalid', 0)} | {100.0 * right / total:.0f} % |")


def print_prediction(run: dict[str, Any]) -> None:
    judged = _judge.judge(run)
    print("| config | shape | K | p | t_s ms | d_s ms | predicted tok/s | measured tok/s | measured / predicted "
          "| implied verify cost (target steps) |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for p in judged["prediction"]:
        ratio = p["measured_tok_s"] / p["predicted_tok_s"] if p.get("predicted_tok_s") else None
        if ratio is None:
            print(f"| {p['config']} | {p['shape']} | no d_s: {p['d_s_source']} |")
            continue
        print(f"| {p['config']} | {p['shape']} | {p['k']} | {p['p']:.3f} | {p['t_s_ms']:.1f} | "
              f"{p['d_s_ms']:.2f} | {p['predicted_tok_s']:.1f} | {p['measured_tok_s']:.1f} | "
              f"{ratio:.2f} | {p['implied_verify_steps']:.1f} |")
    sources = sorted({p["d_s_source"] for p in judged["prediction"]})
    print("\nd_s from: " + "; ".join(sources))


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    ap.add_argument("--tiny-runs", type=int, default=40)
    ap.add_argument("--win-runs", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--prompts", type=int, default=2, help="prompts per shape per server start")
    # one thread: with two on a machine whose cores are shared, llama.cpp's spinning thread barrier
    # makes every step wait for a descheduled thread (measured: 1.3 tok/s with -t 2 against 6 with -t 1)
    ap.add_argument("--threads", type=int, default=1, help="threads of the win bed's server")
    ap.add_argument("--truth-requests", type=int, default=6)
    ap.add_argument("--margin", type=float, default=_stats.EQUIVALENCE_MARGIN)
    ap.add_argument("--save", default=str(Path("results") / "calibration.json"),
                    help="where the raw runs go (JSON), to re-judge them later")
    ap.add_argument("--load", help="re-judge saved runs instead of measuring")
    ap.add_argument("--predict-rounds", type=int, default=2,
                    help="rounds of the prediction run (baseline, the draft alone, draft-simple at 2, 4, 8); 0 skips")
    args = ap.parse_args(argv)

    if args.load:
        saved = json.loads(Path(args.load).read_text())
        print_table(saved["runs"], args.margin)
        print(f"\nground truth (win bed, prose, tok/s): {saved.get('truth')}")
        if saved.get("prediction"):
            print()
            print_prediction(saved["prediction"])
        return 0

    models.write_win_set(CACHE / "win-models")
    bed_defs = beds(args.threads)
    started = time.monotonic()
    runs_by_bed: dict[str, list[dict[str, Any]]] = {"tiny": [], "win": []}
    truth = {}
    if args.win_runs:
        truth = ground_truth(bed_defs["win"], [n for n in bed_defs["win"]["configs"] if n != "twin"],
                             args.truth_requests)
        base = truth["baseline"]
        print("ground truth, win bed (one server each, " + str(args.truth_requests) + " prose requests): "
              + ", ".join(f"{n} {v:.1f} tok/s ({v / base:.2f}x)" for n, v in truth.items()), flush=True)
    prediction = None
    if args.predict_rounds:
        pbed = prediction_bed(args.threads)
        prediction = one_run(pbed, list(pbed["configs"]), rounds=args.predict_rounds, prompts=args.prompts, seed=77)
        print("\nprediction against measurement on the win bed (d_s measured: the draft model served alone)\n")
        print_prediction(prediction)
        print(flush=True)
    plan = [("tiny", i) for i in range(args.tiny_runs)] + [("win", i) for i in range(args.win_runs)]
    for bed, i in plan:
        t0 = time.monotonic()
        names = list(bed_defs[bed]["configs"])
        runs_by_bed[bed].append(one_run(bed_defs[bed], names, rounds=args.rounds, prompts=args.prompts,
                                        seed=1000 * (bed == "win") + i))
        print(f"{bed} run {i + 1}: {time.monotonic() - t0:.0f} s", file=sys.stderr, flush=True)
        Path(args.save).parent.mkdir(parents=True, exist_ok=True)
        Path(args.save).write_text(json.dumps({"runs": runs_by_bed, "truth": truth, "prediction": prediction,
                                               "args": vars(args)}))
    print(f"\n{args.rounds} rounds x {args.prompts} prompts per shape per server start; "
          f"margin {args.margin:g}; {time.monotonic() - started:.0f} s in all\n")
    print_table(runs_by_bed, args.margin)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
