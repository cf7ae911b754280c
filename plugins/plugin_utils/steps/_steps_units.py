# Copyright: (c) 2026, llmfleet.specdec contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# Controller-side steps for hand-written units (form exec): a winner's promoted drop-in, and the watch's command line.
# Not filters of their own: roles and playbooks call them through filter llmfleet.specdec.internal.
"""- ``report | llmfleet.specdec.internal('exec_promotion', winner, live, table, force)``: the drop-in (and env file) that makes a
  form exec winner production, or a wrapper unit's winner (its variables only; ``_render.exec_promotion``), for
  ``playbooks/tasks/promote_exec.yml``.
- ``argv | llmfleet.specdec.internal('exec_start_line')``: the ``ExecStart=`` value of the roles' unit templates, quoted
  for systemd (``_execstart.check_exec_start``: no ``%`` specifier, ``$`` variable or C escape of systemd's touches a word).
- ``path | llmfleet.specdec.internal('unit_path', option)``: a path for a unit file's ``EnvironmentFile=`` and the
  like, its ``%`` doubled (systemd's specifiers); refused when it is not absolute or holds a control character.
- ``server_env | llmfleet.specdec.internal('env_carries', env, unset)``: what a process's environment lacks of a promoted
  wrapper's variables (``NAME: wanted 'x', has 'y'`` per variable; empty when it carries them all and none of ``unset``).
- ``running_argv | llmfleet.specdec.internal('runs_command', exec_start)``: whether a unit's process runs a promoted
  command line: the line itself, or its tail once prefixes (``env``, ``nice``, ``taskset``, ``numactl``) exec'd the server.
- ``watch_result | llmfleet.specdec.internal('exec_watch', evidence, live)``: spec_watch's result with the
  command-line findings of a promoted form exec config added (``_drift.command_drift``),
  for ``playbooks/tasks/watch_exec.yml``.
"""
from __future__ import annotations

from typing import Any

from ansible.errors import AnsibleFilterError

from ansible_collections.llmfleet.specdec.plugins.module_utils.common._errors import SpecdecError
from ansible_collections.llmfleet.specdec.plugins.module_utils.systemd import _execstart as es
from ansible_collections.llmfleet.specdec.plugins.module_utils.systemd._render import exec_promotion as _exec_promotion
from ansible_collections.llmfleet.specdec.plugins.module_utils.systemd._unit_command import runs_line
from ansible_collections.llmfleet.specdec.plugins.module_utils.watch import _drift
from ansible_collections.llmfleet.specdec.plugins.module_utils.watch._drift import command_drift


def exec_promotion(report: Any, winner: str, live: Any, table: Any = None, force: bool = False) -> dict[str, Any]:
    if not isinstance(report, dict) or not isinstance(live, dict):
        raise AnsibleFilterError("exec_promotion: give the run's report and the live unit (serving_unit_info)")
    try:
        return _exec_promotion(report, str(winner), live, list(table or []), bool(force))
    except SpecdecError as exc:
        raise AnsibleFilterError(str(exc)) from None


def env_carries(server_env: Any, env: Any, unset: Any = None) -> list[str]:
    if not isinstance(server_env, dict) or not isinstance(env, dict):
        raise AnsibleFilterError("env_carries: give the server's environment and the variables it must carry")
    wrong = [f"{k}: wanted {str(v)!r}, has {server_env[k]!r}" if k in server_env else f"{k}: wanted {str(v)!r}, unset"
             for k, v in sorted(env.items()) if server_env.get(k) != str(v)]
    return wrong + [f"{k}: wanted unset, has {server_env[k]!r}" for k in sorted(unset or []) if k in server_env]


def runs_command(running: Any, exec_start: Any) -> bool:
    if not isinstance(exec_start, (list, tuple)):
        raise AnsibleFilterError(f"runs_command: give the promoted command line as a list, not {exec_start!r}")
    return isinstance(running, (list, tuple)) and runs_line(running, exec_start)


def exec_start_line(argv: Any) -> str:
    if not isinstance(argv, (list, tuple)):
        raise AnsibleFilterError(f"exec_start_line: give the command line as a list, not {argv!r}")
    try:
        command = es.check_exec_start([str(word) for word in argv])
        return es.quote_exec_argv(command.argv, command.prefix)
    except SpecdecError as exc:
        raise AnsibleFilterError(f"the unit's command line {[str(w) for w in argv]!r}: {exc}") from None


def unit_path(path: Any, option: str = "path") -> str:
    text = str(path)
    if not text.startswith("/") or any(ord(c) < 32 or ord(c) == 127 for c in text):
        raise AnsibleFilterError(f"{option} {text!r} must be an absolute path without control characters")
    return text.replace("%", "%%")


def exec_watch(result: Any, evidence: Any, live: Any) -> dict[str, Any]:
    if not isinstance(result, dict) or not isinstance(live, dict):
        raise AnsibleFilterError("exec_watch: give spec_watch's result and the live unit (serving_unit_info)")
    config = (evidence or {}).get("config") if isinstance(evidence, dict) else None
    configs = ((evidence or {}).get("report") or {}).get("configs") or [] if isinstance(evidence, dict) else []
    rendering = next((c.get("rendering") for c in configs if c.get("name") == config), None)
    if any(f.get("kind") == "ab-in-progress" for f in result.get("findings") or []):
        return result  # an A/B's candidate runs now: nothing of production's to judge
    extra = command_drift(rendering, live)
    if not extra:
        return result
    findings = list(result.get("findings") or []) + extra
    host = str(result.get("summary") or "").split(":", 1)[0]
    return dict(result, findings=findings, summary=_drift.summary_line(host, findings, result.get("config")))
