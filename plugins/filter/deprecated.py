# Copyright: (c) 2026, llmfleet.specdec contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# The filters release 0.1.0 published that were the roles' plumbing. They keep working until 1.0.0, each with the
# deprecation warning of meta/runtime.yml (plugin_routing.filter) and a <name>.yml that says so (written from
# runtime.yml by tests/sanity/deprecated_filter_docs.py); the collection itself calls the same code through filter
# internal.
from __future__ import annotations

from typing import Any

from ansible_collections.llmfleet.specdec.plugins.filter.internal import STEPS

# Released in 0.1.0 as public filters; the names runtime.yml deprecates (tests/unit/test_filter_surface.py holds
# the two lists equal).
DEPRECATED = (
    "ab_env", "ab_expand", "ab_history_add", "ab_history_last", "ab_lock_owner", "ab_render", "ab_report_configs",
    "ab_schedule", "ab_state_name", "ab_traffic", "ab_traffic_mix", "build_from_record", "compat_row",
    "costliest_drafter", "env_file_problems", "llamacpp_build_plan", "llamacpp_build_prune", "llamacpp_build_record",
    "llamacpp_build_script", "llamacpp_toolkit_problems", "model_row", "preflight_results", "preflight_table",
    "promote_env", "promoted_env", "promotion_block", "promotion_record", "promotion_table", "safe_name",
    "vllm_speculative_warnings",
)


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {name: STEPS[name] for name in DEPRECATED}
