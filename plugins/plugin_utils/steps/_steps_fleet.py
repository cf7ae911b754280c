# Copyright: (c) 2026, llmfleet.specdec contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# Controller-side steps for multi-host A/B runs: the play's batch size, and each host's entry for the fleet report
# (its A/B report and its unit's build era). Not filters of their own: roles and playbooks call them through filter
# llmfleet.specdec.internal.
from __future__ import annotations

import json
import re
from typing import Any, Mapping

from ansible.errors import AnsibleFilterError

from ansible_collections.llmfleet.specdec.plugins.module_utils.build._build import FACTS_FILE
from ansible_collections.llmfleet.specdec.plugins.module_utils.systemd._systemd import service_name
from ansible_collections.llmfleet.specdec.plugins.module_utils.watch import _drift
from ansible_collections.llmfleet.specdec.plugins.module_utils.watch._drift import build_era

_BATCH = re.compile(r"^(?:[1-9][0-9]*|(?:100|[1-9][0-9]?)%)$")


def ab_batch(value: Any) -> str:
    """``specdec_ab_batch`` checked as a play's ``serial``: a count of hosts (1 or more) or a percentage 1-100 %.

    Ansible itself turns a bad value into a bare ``invalid literal for int()``; this names the variable and the fix.
    """
    text = str(value).strip() if value is not None else ""
    if isinstance(value, bool) or not _BATCH.match(text):
        raise AnsibleFilterError(
            f"specdec_ab_batch: {value!r} is not a batch size; give how many hosts are measured at once, as a "
            "count (1 measures one host after another, for hosts behind one load balancer) or a percentage of "
            "the targeted hosts ('100%', the default, measures every host at once; '25%' a quarter at a time)")
    return text


def fleet_entries(hosts: Any, hostvars: Any, fact: str = "specdec_fleet_entry") -> list[dict[str, Any]]:
    """One fleet-report entry per host: its ``fact`` when the host set it, else an entry saying it has no report.

    A host that became unreachable or failed before reading its report has no such fact; it is still listed.
    """
    if isinstance(hosts, (str, bytes)) or not isinstance(hosts, (list, tuple)):
        raise AnsibleFilterError(f"fleet_entries: expected the list of the play's hosts, got {type(hosts).__name__}")
    out: list[dict[str, Any]] = []
    for host in hosts:
        hv = hostvars[host]
        entry = hv.get(fact) if hasattr(hv, "get") else None
        if isinstance(entry, dict):
            out.append(entry)
        else:
            out.append({"host": str(host), "groups": list(hv.get("group_names") or []),
                        "family": hv.get("specdec_gpu_family") or None, "report": None,
                        "error": "the host did not get as far as reading its report (unreachable or failed)"})
    return out


def _document(text: Any) -> tuple[Mapping[str, Any] | None, str | None]:
    """A slurped JSON file's text as (mapping, None); (None, None) for no file (empty text), (None, why) for a broken
    one."""
    if isinstance(text, Mapping):
        return text, None
    if not text or not isinstance(text, (str, bytes)):
        return None, None
    try:
        found = json.loads(text)
    except ValueError as exc:
        return None, f"not JSON ({exc})"
    return (found, None) if isinstance(found, Mapping) else (None, "not a JSON object")


def _measured_on(evidence: Mapping[str, Any] | None) -> Mapping[str, Any]:
    report = (evidence or {}).get("report")
    found = (report.get("environment") or {}).get("measured_on") if isinstance(report, Mapping) else None
    return found if isinstance(found, Mapping) and found.get("schema") == _drift.SNAPSHOT_SCHEMA else {}


def fleet_build_record(evidence: Any, given: Any = None) -> str:
    """Where the unit's build record is: ``given`` (specdec_build_record), else the path its promoted evidence was
    measured with (as spec_watch reads it), else role llamacpp_build's default."""
    if given:
        return str(given)
    return str(_measured_on(_document(evidence)[0]).get("build_record_path") or FACTS_FILE)


def fleet_build_era(evidence: Any, record: Any, unit: Any = "llama-server") -> dict[str, Any] | None:
    """The unit's build era for the fleet report, from the text of its promoted evidence and of its build record: the
    build that measured the evidence, the build it runs, and whether the build sentinel judged that upgrade (spec_watch's
    ``build_era``, with the promoted config). None when no config is promoted on the host (no evidence file)."""
    unit = service_name(str(unit or "llama-server"))
    doc, why = _document(evidence)
    if why:
        return {"config": None, "measured_on": None, "runs": None, "same_build": False, "sentinel": None,
                "line": f"{unit}: its promoted evidence cannot be read ({why}); run playbooks/promote.yml again"}
    if doc is None:
        return None
    built, broken = _document(record)
    verdicts = (built or {}).get("sentinel")
    era = build_era(_measured_on(doc).get("build"), None if built is None else {k: built.get(k) for k in _drift.BUILD_KEYS},
                    unit, list(verdicts) if isinstance(verdicts, list) else [])
    if broken:
        era["line"] += f" (its build record cannot be read: {broken})"
    return dict(era, config=doc.get("config"))
