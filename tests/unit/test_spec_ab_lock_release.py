# Role spec_ab gives the unit's lock back on every path: each top-level task between taking the lock and the end of
# the measuring block sits in a block whose rescue or always releases it (otherwise a failure there leaves the lock
# until it expires, and every other run on the unit waits for it).
from __future__ import annotations

from pathlib import Path

import yaml

MAIN = Path(__file__).resolve().parents[2] / "roles" / "spec_ab" / "tasks" / "main.yml"


def _releases(tasks: list[dict] | None) -> bool:
    return any(t.get("llmfleet.specdec.ab_lock", {}).get("state") == "absent" for t in tasks or [])


def _includes(task: dict) -> str | None:
    """The file an include_tasks names, in its short form or with file: (and apply:)."""
    include = task.get("ansible.builtin.include_tasks")
    return include.get("file") if isinstance(include, dict) else include


def test_every_task_that_holds_the_lock_gives_it_back_on_failure():
    tasks = yaml.safe_load(MAIN.read_text())
    taken = next(i for i, t in enumerate(tasks) if _includes(t) == "state_begin.yml")
    released = next(i for i, t in enumerate(tasks) if _releases(t.get("always")))
    holding = tasks[taken + 1:released + 1]
    assert holding, "the lock is taken and released somewhere in main.yml"
    for task in holding:
        assert "block" in task and (_releases(task.get("rescue")) or _releases(task.get("always"))), (
            f"task {task.get('name')!r} runs while the lock is held but a failure in it would not release the lock")
    # The block before measuring fails the host after releasing (it must not carry on as if it had measured).
    before = holding[0]
    assert before["rescue"][-1].get("ansible.builtin.fail")
