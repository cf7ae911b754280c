# Copyright: (c) 2026, llmfleet.specdec contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# Private to the collection: spec_report's options, one home for the action plugin that validates them and the
# module file that documents them (ansible-test's validate-modules compares that module's spec with its docs).
from __future__ import annotations

from typing import Any

ARGUMENT_SPEC: dict[str, Any] = {
    "run": {"type": "dict", "required": True},
    "results_dir": {"type": "path", "default": "results"},
    "d_s_ms": {"type": "raw"},
    "plots": {"type": "bool", "default": True},
    "history": {"type": "bool", "default": True},
    "environment": {"type": "dict", "default": {}},
    "bootstrap_resamples": {"type": "int", "default": 2000},
    "seed": {"type": "int", "default": 0},
    # "key" in the name makes ansible-test suspect a secret: it names the fact the run is stored under.
    "stats_key": {"type": "str", "default": "specdec_ab", "no_log": False},
}
