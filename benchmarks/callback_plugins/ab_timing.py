# Benchmark-only callback (benchmarks/ab_overhead.py): one JSON line per finished task with its wall time,
# its action, and what the A/B modules say about their own time. Not part of the collection.
from __future__ import annotations

import json
import os
import time

from ansible.plugins.callback import CallbackBase

DOCUMENTATION = r"""
name: ab_timing
type: aggregate
short_description: Task wall times for benchmarks/ab_overhead.py
description: Writes one JSON line per finished task to the file named by AB_TIMING_OUT.
requirements: [AB_TIMING_OUT set in the environment]
"""


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "ab_timing"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self) -> None:
        super().__init__()
        self.out = open(os.environ["AB_TIMING_OUT"], "a", encoding="utf-8")
        self.started: dict[str, float] = {}

    def _write(self, record: dict) -> None:
        self.out.write(json.dumps(record) + "\n")
        self.out.flush()

    def v2_playbook_on_start(self, playbook) -> None:
        self._write({"event": "playbook_start", "t": time.time()})

    def v2_playbook_on_task_start(self, task, is_conditional) -> None:
        self.started[task._uuid] = time.time()

    def v2_playbook_on_handler_task_start(self, task) -> None:
        self.started[task._uuid] = time.time()

    def _done(self, result, status: str) -> None:
        task = result._task
        res = result._result
        record = {"event": "task", "name": task.get_name(), "action": task.action, "status": status,
                  "start": self.started.get(task._uuid, time.time()), "end": time.time()}
        if task.action.endswith("spec_bench") and isinstance(res.get("bench"), dict):
            reqs = res["bench"].get("requests") or []
            record["requests"] = len(reqs)
            record["generation_s"] = sum(float(r.get("wall_s") or 0) for r in reqs)
            record["elapsed_s"] = res["bench"].get("elapsed_s")
        if task.action.endswith("unit_override"):
            record["restarted"] = bool(res.get("restarted"))
            record["health_s"] = res.get("seconds")
        self._write(record)

    def v2_runner_on_ok(self, result) -> None:
        self._done(result, "ok")

    def v2_runner_on_failed(self, result, ignore_errors=False) -> None:
        self._done(result, "failed")

    def v2_runner_on_skipped(self, result) -> None:
        self._done(result, "skipped")

    def v2_runner_item_on_ok(self, result) -> None:
        pass

    def v2_playbook_on_stats(self, stats) -> None:
        self._write({"event": "playbook_end", "t": time.time()})
        self.out.close()
