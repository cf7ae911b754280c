# Copyright: (c) 2026, llmfleet.specdec contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# The step exposing the report's safe_name to playbooks and roles: every path built from a host name or run id.
# Not filters of their own: roles and playbooks call them through filter llmfleet.specdec.internal.
"""``inventory_hostname | llmfleet.specdec.internal('safe_name', 'inventory_hostname')``: the name itself when it can be one
path component, else the task fails naming the variable and what to change (before anything is written)."""
from __future__ import annotations

from typing import Any

from ansible.errors import AnsibleFilterError

from ansible_collections.llmfleet.specdec.plugins.module_utils.common._stats import ReportInputError
from ansible_collections.llmfleet.specdec.plugins.plugin_utils.report._report import safe_name as _safe_name


def safe_name(value: Any, what: str = "name") -> str:
    try:
        return _safe_name(value, what)
    except ReportInputError as exc:
        raise AnsibleFilterError(str(exc)) from None
