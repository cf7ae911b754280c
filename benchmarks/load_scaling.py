#!/usr/bin/env python3
"""Throughput under concurrent load against one stream, on the real llama-server, side by side.

For each slot count (-np 1, 2, 4) and config (plain, draft-simple), one server of the test bed's tiny
models is measured the way spec_bench does it: the single-stream bench, then the load phase (bursts of N
concurrent requests, N = the slots). One table: the single-stream decode rate, the aggregate rate
under load (all streams' tokens over the burst's wall time, prefill included), the per-stream decode
rate, and the ratios aggregate / single and per-stream / single, plus the load gate's verdict.

The tiny models decode thousands of tokens a second, so the absolute numbers say little; the ratios
show how far batching N slots raises throughput and slows each stream on this CPU.

Run: PYTHONPATH=tests:.build/collections .venv/bin/python benchmarks/load_scaling.py
"""
from __future__ import annotations

import statistics
import sys
import tempfile
from pathlib import Path

from ansible_collections.llmfleet.specdec.plugins.module_utils.bench import _endpoint as ep
from ansible_collections.llmfleet.specdec.plugins.module_utils.bench import _load
from testbed.models import write_standard_set
from testbed.server import LlamaServer

SIZES = {"prose": {"chars": 400, "n_predict": 64}, "echo": {"chars": 500, "n_predict": 96},
         "structured": {"chars": 300, "n_predict": 96}, "identity": {"n_predict": 32}}
PARAMS = {"prompts_per_shape": 2, "repeats": 2, "warmup": 1, "sizes": SIZES, "seed": 0}


def measure(models: dict[str, Path], log_dir: Path, parallel: int, draft: bool) -> dict[str, object]:
    srv = LlamaServer(models["target.gguf"], draft=models["draft.gguf"] if draft else None,
                      args=["--spec-type", "draft-simple"] if draft else [], log_dir=log_dir,
                      ctx_size=1024 * parallel, parallel=parallel)
    with srv:
        params = {**PARAMS, "endpoint": srv.url}
        bench = ep.run_bench(**params)
        measured = _load.measured_prompts(params, None)
        load = _load.bench_under_load(bench, params, measured, max(parallel, 2), 5)
    single = statistics.median(r["predicted_per_second"] for r in bench["requests"])
    agg = statistics.median(b["aggregate_tok_s"] for b in load["bursts"] if b["aggregate_tok_s"])
    per = statistics.median(s["predicted_per_second"] for s in load["streams"] if not s.get("error"))
    return {"single": single, "aggregate": agg, "stream": per, "gate": load["gate"]["status"],
            "overlapped": sum(b["overlapped"] for b in load["bursts"]), "bursts": len(load["bursts"]),
            "streams": load["concurrency"]}


def main() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        models = write_standard_set(Path(tmp) / "models")
        rows = []
        for parallel in (1, 2, 4):
            for draft in (False, True):
                m = measure(models, Path(tmp) / "logs", parallel, draft)
                rows.append((f"-np {parallel}", "draft-simple" if draft else "plain", m))
    print("| slots | config | streams | tok/s alone | aggregate tok/s | per-stream tok/s | aggregate / alone "
          "| per-stream / alone | bursts overlapped | load gate |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for slots, config, m in rows:
        print(f"| {slots} | {config} | {m['streams']} | {m['single']:.0f} | {m['aggregate']:.0f} | {m['stream']:.0f} | "
              f"{m['aggregate'] / m['single']:.2f} | {m['stream'] / m['single']:.2f} | "
              f"{m['overlapped']}/{m['bursts']} | {m['gate']} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
