# Copyright: (c) 2026, llmfleet.specdec contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# Controller-side steps for multi-host A/B runs: the play's batch size, and each host's entry for the fleet report.
# Not filters of their own: roles and playbooks call them through filter llmfleet.specdec.internal.
from __future__ import annotations

import re
from typing import Any

from ansible.errors import AnsibleFilterError

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
