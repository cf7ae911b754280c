# Role spec_ab gives the unit's lock back on every path: each top-level task between taking the lock and the end of
# the measuring block sits in a block whose rescue or always releases it (otherwise a failure there leaves the lock
# until it expires, and every other run on the unit waits for it).
from __future__ import annotations

from pathlib import Path

import pytest
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


def _measuring_always() -> list[dict]:
    tasks = yaml.safe_load(MAIN.read_text())
    return next(t for t in tasks if any("llmfleet.specdec.unit_override" in a for a in t.get("always") or []))["always"]


def _when(task: dict, **facts: object) -> bool:
    import jinja2
    env = jinja2.Environment()
    return bool(env.compile_expression(" and ".join(f"({c})" for c in (
        task["when"] if isinstance(task["when"], list) else [task["when"]])))(**facts))


def test_the_always_restore_asks_whether_this_run_still_holds_the_lock_first():
    always = _measuring_always()
    names = [next(iter(k for k in t if k.startswith(("llmfleet.", "ansible."))), None) for t in always]
    query = names.index("llmfleet.specdec.ab_lock")
    restore = names.index("llmfleet.specdec.unit_override")
    assert query < restore and always[query]["llmfleet.specdec.ab_lock"]["state"] == "query"
    assert always[query]["check_mode"] is False and always[query]["register"] == "spec_ab_lock_now"


@pytest.mark.parametrize(("holder", "restores"), [
    (None, True),  # nobody holds it (released by force): this run's override may be live, so restore
    ({"run_id": "run-1"}, True),  # still this run's
    ({"run_id": "run-2"}, False),  # taken over by a run that waited: its candidate serves, leave it
])
def test_the_always_restore_leaves_a_candidate_of_the_run_that_took_the_lock_over(holder, restores):
    always = _measuring_always()
    restore = next(t for t in always if "llmfleet.specdec.unit_override" in t)
    said = next(t for t in always if "spec_ab_error" in (t.get("ansible.builtin.set_fact") or {}))
    facts = {"spec_ab_unit_touched": True, "spec_ab_run_id": "run-1", "spec_ab_lock_now": {"holder": holder}}
    assert _when(restore, **facts) is restores
    assert _when(said, **facts) is not restores
    assert "NOT restored" in said["ansible.builtin.set_fact"]["spec_ab_error"]


def test_the_lock_is_renewed_inside_each_slot_between_the_start_and_the_measurement():
    measure = yaml.safe_load((MAIN.parent / "measure.yml").read_text())[0]["block"]
    modules = [next(iter(k for k in t if k.startswith(("llmfleet.", "ansible."))), None) for t in measure]
    start = modules.index("llmfleet.specdec.unit_override")
    bench = modules.index("llmfleet.specdec.spec_bench")
    renew = [i for i, m in enumerate(modules) if m == "llmfleet.specdec.ab_lock"]
    assert renew and start < renew[0] < bench
    args = measure[renew[0]]["llmfleet.specdec.ab_lock"]
    assert args["state"] == "present" and args["owner"] == "{{ spec_ab_lock_owner }}"
    assert args["expires_after"] == "{{ spec_ab_lock_expiry }}" and "wait" not in args  # a lost lock stops the slot


def test_each_slot_measures_only_the_units_own_server():
    """Issue 31, MEDIUM 6: spec_bench checks the endpoint port's owner against the unit, as root (its fds)."""
    measure = yaml.safe_load((MAIN.parent / "measure.yml").read_text())[0]["block"]
    bench = next(t for t in measure if "llmfleet.specdec.spec_bench" in t)
    # the unit always, unless the operator declared the endpoint a proxy in front of it (spec_ab_endpoint_proxy)
    assert bench["llmfleet.specdec.spec_bench"]["unit"] == "{{ omit if spec_ab_endpoint_proxy | bool else spec_ab_unit }}"
    defaults = yaml.safe_load((MAIN.parent.parent / "defaults" / "main.yml").read_text())
    assert defaults["spec_ab_endpoint_proxy"] == "{{ specdec_endpoint_proxy | default(false) }}"
    assert bench["llmfleet.specdec.spec_bench"]["endpoint"] == "{{ spec_ab_endpoint }}"
    assert bench["become"] is True
