# Copyright: (c) 2026, llmfleet.specdec contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# Filter internal (documented in internal.yml): the one door from the collection's roles and playbooks to their
# plumbing in plugin_utils/steps/_steps_*.py. Not an interface: its steps change in any release, without deprecation.
from __future__ import annotations

import re
from typing import Any

from ansible.errors import AnsibleFilterError

from ansible_collections.llmfleet.specdec.plugins.module_utils.common._errors import SpecdecError
from ansible_collections.llmfleet.specdec.plugins.plugin_utils.steps import (
    _steps_ab,
    _steps_build,
    _steps_drift,
    _steps_envfile,
    _steps_fleet,
    _steps_host_state,
    _steps_paths,
    _steps_preflight,
    _steps_promote,
    _steps_report,
    _steps_screen,
    _steps_timing,
    _steps_traffic,
    _steps_units,
    _steps_vars,
    _steps_vllm,
)


def error_line(message: Any) -> str:
    """A failed task's message as the operator reads it: Ansible's wrapping removed, in one line (a module's
    message over several lines keeps every line, joined)."""
    text = " ".join(_WRAPPING.sub("", str(message or "").strip()).split())
    return text or str(message)


# Every step by name. The public filters (spec_counters, vllm_speculative_config, _json and _cli, env_file_lines,
# env_file_values, ab_batch and the break-even three) are called by their own names, not through here.
STEPS: dict[str, Any] = {
    "ab_expand": _steps_ab.ab_expand, "ab_schedule": _steps_ab.ab_schedule, "ab_round": _steps_ab.ab_round,
    "ab_look": _steps_ab.ab_look, "ab_env": _steps_ab.ab_env, "ab_render": _steps_ab.ab_render,
    "ab_report_configs": _steps_ab.ab_report_configs, "ab_design_choice": _steps_ab.ab_design_choice,
    "ab_report_noise": _steps_ab.ab_report_noise,
    "llamacpp_build_plan": _steps_build.llamacpp_build_plan,
    "llamacpp_build_script": _steps_build.llamacpp_build_script,
    "llamacpp_build_record": _steps_build.llamacpp_build_record,
    "llamacpp_build_prune": _steps_build.llamacpp_build_prune,
    "llamacpp_toolkit_problems": _steps_build.llamacpp_toolkit_problems,
    "model_paths": _steps_drift.model_paths, "watch_failing": _steps_drift.watch_failing,
    "watch_lines": _steps_drift.watch_lines,
    "env_file_problems": _steps_envfile.env_file_problems, "env_file_changes": _steps_envfile.env_file_changes,
    "fleet_entries": _steps_fleet.fleet_entries, "fleet_build_record": _steps_fleet.fleet_build_record,
    "fleet_build_era": _steps_fleet.fleet_build_era,
    "ab_dead_man": _steps_host_state.ab_dead_man, "ab_lock_owner": _steps_host_state.ab_lock_owner,
    "ab_state_name": _steps_host_state.ab_state_name, "ab_history_add": _steps_host_state.ab_history_add,
    "ab_history_line": _steps_host_state.ab_history_line, "ab_history_last": _steps_host_state.ab_history_last,
    "safe_name": _steps_paths.safe_name,
    "build_from_record": _steps_preflight.build_from_record, "costliest_drafter": _steps_preflight.costliest_drafter,
    "preflight_results": _steps_preflight.preflight_results, "preflight_table": _steps_preflight.preflight_table,
    "promote_env": _steps_promote.promote_env, "promotion_table": _steps_promote.promotion_table,
    "promotion_record": _steps_promote.promotion_record, "promotion_block": _steps_promote.promotion_block,
    "promoted_env": _steps_promote.promoted_env,
    "model_row": _steps_report.model_row, "compat_row": _steps_report.compat_row,
    "ab_busy_counts": _steps_timing.ab_busy_counts, "ab_model_files": _steps_timing.ab_model_files,
    "ab_timing": _steps_timing.ab_timing, "ab_timing_record": _steps_timing.ab_timing_record,
    "ab_traffic": _steps_traffic.ab_traffic, "ab_traffic_mix": _steps_traffic.ab_traffic_mix,
    "exec_promotion": _steps_units.exec_promotion, "exec_watch": _steps_units.exec_watch,
    "env_carries": _steps_units.env_carries, "runs_command": _steps_units.runs_command,
    "exec_start_line": _steps_units.exec_start_line, "unit_path": _steps_units.unit_path,
    "screen_binary": _steps_screen.screen_binary, "screen_candidates": _steps_screen.screen_candidates,
    "screen_select": _steps_screen.screen_select, "first_lines": _steps_screen.first_lines,
    "screen_estimate": _steps_screen.screen_estimate, "screen_estimate_line": _steps_screen.screen_estimate_line,
    "screen_traffic": _steps_screen.screen_traffic,
    "vllm_speculative_warnings": _steps_vllm.vllm_speculative_warnings,
    "error_line": error_line,
    "var_notes": _steps_vars.var_notes, "var_warnings": _steps_vars.var_warnings,
}


# Ansible's wrapping in front of a task's message (2.19 and later): a set_fact whose filter failed, a lookup.
_WRAPPING = re.compile(
    r"^(?:Task failed: )?(?:Finalization of task args for '[^']*' failed: )?(?:Error while resolving value for "
    r"'[^']*': )?(?:The (?:filter|lookup|test) plugin '[^']*' failed: )?")


def internal(value: Any, step: Any, *args: Any, **kwargs: Any) -> Any:
    """``value | llmfleet.specdec.internal('step', ...)``: ``STEPS[step](value, ...)``.

    ``'step?'`` returns ``{'value': ..., 'error': ''}``, or the step's error as ``{'value': None, 'error': text}``
    instead of raising: the role then fails once with that text, without Ansible's wrapping in front of it."""
    if isinstance(step, str) and step.endswith("?"):
        try:
            return {"value": internal(value, step[:-1], *args, **kwargs), "error": ""}
        except (AnsibleFilterError, SpecdecError) as exc:
            return {"value": None, "error": error_line(getattr(exc, "message", None) or str(exc))}
    function = STEPS.get(step) if isinstance(step, str) else None
    if function is None:
        raise AnsibleFilterError(
            f"llmfleet.specdec.internal: {step!r} is not one of this collection's steps. This filter is the "
            "plumbing of the collection's own roles and playbooks, not an interface; the ten filters meant for "
            "playbooks are in docs/modules.md, each with 'ansible-doc -t filter llmfleet.specdec.<name>'")
    return function(value, *args, **kwargs)


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"internal": internal}
