# Copyright: (c) 2026, llmfleet.specdec contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# Private to the collection, controller only: the form of an A/B run, checked before it is judged.
"""Checking an A/B run's form before ``_judge`` judges it: every field the judge reads, with an error that
names the bad field (``run.entries[3].bench.requests[0].draft_n: expected a whole number >= 0, got -1``).

What it does not hold: judging (``_judge``), statistics (``module_utils/common/_stats``).
"""
from __future__ import annotations

import math
from typing import Any, Mapping

from ansible_collections.llmfleet.specdec.plugins.module_utils.bench._endpoint import BENCH_SCHEMA  # the bench writes it
from ansible_collections.llmfleet.specdec.plugins.module_utils.common._stats import ReportInputError, normalize_mix

# ---------------------------------------------------------------------------------------------
# the run: checks


def _need(cond: bool, where: str, what: str) -> None:
    if not cond:
        raise ReportInputError(f"{where}: {what}")


def _check_request(req: Any, where: str) -> dict[str, Any]:
    _need(isinstance(req, Mapping), where, f"expected a request mapping, got {type(req).__name__}")
    _need(isinstance(req.get("shape"), str) and req["shape"], f"{where}.shape", "expected the shape's name")
    for key in ("prompt_index", "repeat"):
        v = req.get(key, 0)
        _need(isinstance(v, int) and not isinstance(v, bool), f"{where}.{key}", f"expected a whole number, got {v!r}")
    text = req.get("text")
    _need(text is None or isinstance(text, str), f"{where}.text", f"expected a string, got {type(text).__name__}")
    for key in ("predicted_per_second", "wall_s", "ttft_s"):
        v = req.get(key)
        _need(v is None or (isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v >= 0),
              f"{where}.{key}", f"expected a finite number >= 0 or null (re-run the bench or drop the request), "
              f"got {v!r}")
    for key in ("draft_n", "draft_n_accepted", "predicted_n"):
        v = req.get(key) or 0
        _need(isinstance(v, int) and not isinstance(v, bool) and v >= 0, f"{where}.{key}",
              f"expected a whole number >= 0, got {v!r}")
    delta = req.get("metrics_delta")
    _need(delta is None or isinstance(delta, Mapping), f"{where}.metrics_delta", "expected a mapping or null")
    return dict(req)


def check_run(run: Any) -> dict[str, Any]:
    """The run in the form the A/B role hands over, checked; raises ReportInputError naming the bad field.

    ::

        {"host": str, "run_id": str?, "started": str?, "finished": str?, "baseline": str,
         "mix": {shape: weight}?, "error": str?,            # error: why the run stopped early, if it did
         "environment": {...}?,                               # kept in the report as it is
         "configs": [{"name": str, "chain": [spec type, ...] | null, "server_config": {...},
                      "k": int?, "drafter": str?}, ...],     # optional; taken from the entries if absent
         "entries": [{"config": str, "round": int, "order": int, "server_config": {...},
                      "bench": <llmfleet.specdec/bench/1> | null, "error": str | null}, ...]}
    """
    _need(isinstance(run, Mapping), "run", f"expected a mapping, got {type(run).__name__}")
    entries = run.get("entries")
    _need(isinstance(entries, list), "run.entries", "expected a list of {config, round, order, bench, error} entries")
    baseline = run.get("baseline")
    _need(isinstance(baseline, str) and baseline, "run.baseline", "name the baseline config")
    out_entries = []
    for i, e in enumerate(entries):
        where = f"run.entries[{i}]"
        _need(isinstance(e, Mapping), where, "expected a mapping")
        _need(isinstance(e.get("config"), str) and e["config"], f"{where}.config", "expected the config's name")
        rnd = e.get("round", 0)
        _need(isinstance(rnd, int) and not isinstance(rnd, bool), f"{where}.round", f"expected a whole number, got {rnd!r}")
        bench = e.get("bench")
        entry = dict(e)
        entry["round"] = rnd
        entry["order"] = e.get("order", i)
        if bench is not None:
            _need(isinstance(bench, Mapping), f"{where}.bench", "expected spec_bench's bench document or null")
            schema = bench.get("schema", BENCH_SCHEMA)
            _need(schema == BENCH_SCHEMA, f"{where}.bench.schema", f"expected {BENCH_SCHEMA!r}, got {schema!r}")
            reqs = bench.get("requests")
            _need(isinstance(reqs, list), f"{where}.bench.requests", "expected a list of requests")
            entry["bench"] = dict(bench)
            entry["bench"]["requests"] = [_check_request(r, f"{where}.bench.requests[{j}]") for j, r in enumerate(reqs)]
        out_entries.append(entry)

    configs = run.get("configs")
    out_configs: list[dict[str, Any]] = []
    if configs is not None:
        _need(isinstance(configs, list), "run.configs", "expected a list of {name, chain, server_config}")
        for i, c in enumerate(configs):
            where = f"run.configs[{i}]"
            _need(isinstance(c, Mapping) and isinstance(c.get("name"), str) and c["name"], where,
                  "expected a mapping with the config's name")
            chain = c.get("chain")
            _need(chain is None or (isinstance(chain, list) and all(isinstance(x, str) for x in chain)),
                  f"{where}.chain", "expected the effective chain as a list of spec types, or null when unknown")
            out_configs.append(dict(c))
    names = [c["name"] for c in out_configs]
    _need(len(set(names)) == len(names), "run.configs", f"config names must be unique, got {names}")
    for e in out_entries:
        if e["config"] not in names:
            names.append(e["config"])
            out_configs.append({"name": e["config"], "chain": None, "server_config": e.get("server_config") or {}})
    _need(baseline in names, "run.baseline", f"{baseline!r} is not one of the configs {names}")

    out = dict(run)
    out["entries"] = out_entries
    out["configs"] = out_configs
    mix = run.get("mix")
    out["mix"] = normalize_mix(mix) if mix else None
    return out
