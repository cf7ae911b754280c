# Copyright: (c) 2026, llmfleet.specdec contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# Controller-side steps for the host's own A/B state: the lock's owner record, safe path names, history lines.
# Not filters of their own: roles and playbooks call them through filter llmfleet.specdec.internal.
from __future__ import annotations

import json
import os
import secrets
import socket
from typing import Any

from ansible.errors import AnsibleFilterError

from ansible_collections.llmfleet.specdec.plugins.module_utils.common._errors import SpecdecError
from ansible_collections.llmfleet.specdec.plugins.module_utils.state import _host_state
from ansible_collections.llmfleet.specdec.plugins.module_utils.systemd import _deadman
from ansible_collections.llmfleet.specdec.plugins.plugin_utils.report import _report


def ab_lock_owner(run_id: Any, unique: bool = True) -> dict[str, Any]:
    """The lock's owner record: a unique run id, this controller's host name, its ansible-playbook process id,
    and what proves later that this process is gone (boot id, pid namespace, the process's start time).

    Templating runs in a worker forked from the ansible-playbook process, so the parent pid is the run's. The run
    id is ``run_id`` with a random suffix (``unique=false`` keeps it as given): two runs started in the same second
    never share an id, a results folder or a history line.
    """
    name = ab_state_name(run_id, "run id")
    if unique:
        name = ab_state_name(f"{name}-{secrets.token_hex(3)}", "run id")
    pid = os.getppid()
    identity = _host_state.process_identity(pid)
    return {"run_id": name, "controller": socket.gethostname(), "pid": pid, "boot_id": identity["boot_id"],
            "pid_ns": identity["pid_ns"], "start_ticks": identity["start_ticks"]}


def ab_state_name(value: Any, what: str = "name") -> str:
    """``value`` checked as one path component under the host's state directory or the controller's results."""
    try:
        return _host_state.safe_path_component(value, what)
    except SpecdecError as exc:
        raise AnsibleFilterError(str(exc)) from None


def ab_history_add(existing: Any, document: Any) -> str:
    """The host's history.jsonl text with the line of the judged run ``document`` (report.json) added or replaced."""
    if not isinstance(document, dict) or "run_id" not in document:
        raise AnsibleFilterError("ab_history_add: expected a report.json document with a run_id")
    try:
        line = _report.history_line(document)
    except (KeyError, TypeError, AttributeError) as exc:
        raise AnsibleFilterError(f"ab_history_add: run {document['run_id']!r} is not a judged report ({exc!r} "
                                 "missing); give it report.json as spec_report wrote it") from None
    try:
        return _host_state.merge_history(str(existing or ""), line)
    except SpecdecError as exc:
        raise AnsibleFilterError(str(exc)) from None


def ab_history_line(document: Any) -> dict[str, Any]:
    """The history record of a judged run (report.json), for module ab_history."""
    if not isinstance(document, dict) or "run_id" not in document:
        raise AnsibleFilterError("ab_history_line: expected a report.json document with a run_id")
    try:
        return json.loads(_report.history_line(document))
    except (KeyError, TypeError, AttributeError) as exc:
        raise AnsibleFilterError(f"ab_history_line: run {document['run_id']!r} is not a judged report ({exc!r} "
                                 "missing); give it report.json as spec_report wrote it") from None


def ab_history_last(text: Any, what: str = "history.jsonl", unit: Any = None) -> str:
    """The run id of the last readable line of a history.jsonl text (of ``unit``'s runs when given: lines of
    other units are skipped, lines written before history was kept per unit count for every unit)."""
    run_id = None
    try:
        want = _host_state.service_name(str(unit)) if unit else None
    except SpecdecError as exc:
        raise AnsibleFilterError(f"ab_history_last: {exc}") from None
    for line in str(text or "").splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if want and isinstance(record, dict) and record.get("unit") not in (None, want):
            continue
        if isinstance(record, dict) and record.get("run_id"):
            run_id = record["run_id"]
    if run_id is None:
        raise AnsibleFilterError(f"{what} holds no judged run; run the A/B first or name one with "
                                 "-e specdec_promote_run=<run id>")
    return ab_state_name(run_id, f"the last run id in {what}")


def ab_dead_man(configs: Any, baseline: Any, estimates: Any, rollback_after: Any, health_timeout: Any,
                rollback_max: Any, lock_estimates: Any = None) -> dict[str, Any]:
    """Each candidate's dead-man and the lock's expiry from the plan; a slot that cannot fit is refused.
    ``lock_estimates``: each slot with the bench's busy re-sends (``ab_timing``'s ``lock_slot_estimates``)."""
    names = [c["name"] if isinstance(c, dict) else str(c) for c in (configs or [])]
    try:
        return _deadman.plan_dead_man(names, str(baseline), dict(estimates or {}), int(rollback_after),
                                      int(health_timeout), int(rollback_max), lock_estimates=dict(lock_estimates or {}))
    except (SpecdecError, ValueError, TypeError) as exc:
        raise AnsibleFilterError(f"ab_dead_man: {exc}") from None
