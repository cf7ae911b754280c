# Copyright: (c) 2026, llmfleet.specdec contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# Controller-side steps for drift watching: model paths of a rendering, the findings that fail a watch, its lines.
# Not filters of their own: roles and playbooks call them through filter llmfleet.specdec.internal.
"""- ``env | llmfleet.specdec.internal('model_paths')``: the model files a llama-server with this env loads.
- ``findings | llmfleet.specdec.internal('watch_failing', fail_on, ignore)``: the findings that fail the watch: every drift
  finding when ``fail_on`` is ``drift``, also the info ones with ``any``, none with ``never``; kinds in ``ignore``
  never fail it.
- ``result | llmfleet.specdec.internal('watch_lines')``: the summary, then one line per finding with what to do.
"""
from __future__ import annotations

from typing import Any, Mapping

from ansible.errors import AnsibleFilterError

from ansible_collections.llmfleet.specdec.plugins.module_utils.watch import _drift

FAIL_ON = ("drift", "any", "never")


def model_paths(env: Any) -> list[str]:
    if not isinstance(env, dict):
        raise AnsibleFilterError(f"model_paths: expected an env mapping, got {type(env).__name__}")
    return _drift.model_paths(env)


def watch_failing(findings: Any, fail_on: str = "drift", ignore: Any = None) -> list[dict[str, Any]]:
    if fail_on not in FAIL_ON:
        raise AnsibleFilterError(f"specdec_watch_fail_on: expected one of {', '.join(FAIL_ON)}, got {fail_on!r}")
    ignore = list(ignore or [])
    unknown = sorted(set(ignore) - set(_drift.DRIFT_KINDS) - set(_drift.INFO_KINDS))
    if unknown:
        raise AnsibleFilterError(f"specdec_watch_ignore: unknown finding kinds {', '.join(unknown)}; known: "
                                 f"{', '.join(_drift.DRIFT_KINDS + _drift.INFO_KINDS)}")
    if fail_on == "never":
        return []
    return [f for f in findings or [] if f.get("kind") not in ignore
            and (fail_on == "any" or f.get("severity") == "drift")]


def watch_lines(result: Any) -> list[str]:
    lines = [str(result.get("summary"))]
    if isinstance(result.get("build_era"), Mapping) and result["build_era"].get("line"):
        lines.append(f"build era - {result['build_era']['line']}")
    for f in result.get("findings") or []:
        lines.append(f"[{f.get('severity')}] {f.get('kind')}: {f.get('message')} -> {f.get('action')}")
    return lines
