# Copyright: (c) 2026, llmfleet.specdec contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# Private to the collection: fleet_report's options, one home for the action plugin that validates them and the
# module file that documents them (ansible-test's validate-modules compares that module's spec with its docs).
from __future__ import annotations

from typing import Any

# The inventory groups that name a GPU family start with this (plugin_utils/report/_fleet.py reads it from here).
DEFAULT_PREFIX = "gpu_"

ARGUMENT_SPEC: dict[str, Any] = {
    "hosts": {"type": "list", "elements": "dict", "required": True},
    "results_dir": {"type": "path", "default": "results"},
    "name": {"type": "str", "required": True},
    "family_prefix": {"type": "str", "default": DEFAULT_PREFIX},
    "plots": {"type": "bool", "default": True},
    "fail_on_disagreement": {"type": "bool", "default": False},
    # "key" in the name makes ansible-test suspect a secret: it names the fact the report's stats go under.
    "stats_key": {"type": "str", "default": "specdec_fleet", "no_log": False},
}
