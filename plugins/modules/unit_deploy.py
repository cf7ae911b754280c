#!/usr/bin/python
# Copyright: (c) 2026, llmfleet.specdec contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# Change a serving unit's own files (unit file, launcher, env) under a dead-man that puts the previous ones back.
from __future__ import annotations

DOCUMENTATION = r"""
---
module: unit_deploy
short_description: Change a serving unit's own files under a dead-man that puts the previous ones back
version_added: 0.2.0
description:
  - The redeploy step of roles C(llmfleet.specdec.llamacpp_serve) and C(llmfleet.specdec.vllm_serve) when the unit
    file itself changes (its C(ExecStart=), user, launcher, a new vLLM venv or image), with the env file and the
    launcher when they change too. A change of the env file alone goes through C(llmfleet.specdec.unit_override)
    instead (the roles do that), where production's own files never hold an unverified config.
  - A unit that does not serve (not installed, stopped, failed) has no production to protect, so its changed files
    are written and systemd reloaded; the caller starts it and checks its health.
  - A unit that serves is refused, with nothing changed, while C(unit_override) has an override on it (an A/B run, or
    one left behind; run playbook C(llmfleet.specdec.rollback) first), and when the port the new files name is held
    by another process. Then a transient timer C(specdec-deploy-rollback-<unit>.timer) is armed first, then its
    self-contained script and its record under C(/run/llmfleet-specdec/deploy/<unit>/) (0600 in 0700 folders, holding the
    previous content and mode of every changed file). The files are written (each atomically), systemd reloaded,
    one C(systemctl restart) job queued, and the unit must answer C(GET /health) from a new process of its own
    within O(health_timeout), carrying the new env file's variables. Then the record, the timer and the script
    go. A module, SSH link or controller that dies in between leaves a host that puts the previous files back,
    reloads and restarts the unit after O(rollback_after) seconds.
  - On failure the previous files go back, the unit restarts on them and must answer health; the task fails with
    C(THE REDEPLOY OF <unit> WAS ROLLED BACK), or with C(PRODUCTION IS NOT HEALTHY) when the previous files do not
    come back either (the dead-man then stays armed and tries once more).
  - A deploy interrupted before it finished (its record is still in C(/run)) is undone first by the next run.
  - Files that already hold their content and mode change nothing and restart nothing.
options:
  unit:
    description: The systemd service, with or without C(.service).
    type: str
    required: true
  files:
    description: The unit's files as they should be.
    type: list
    elements: dict
    required: true
    suboptions:
      path:
        description: An absolute path whose directory exists.
        type: path
        required: true
      content:
        description: The whole text of the file.
        type: str
        required: true
      mode:
        description: Its mode, such as C('0644'). Files are written as the module's user (root).
        type: raw
        required: true
  rollback_after:
    description: Seconds after which the host puts the previous files back by itself unless the deploy finished.
      Longer than twice O(health_timeout) plus 30 s.
    type: int
    required: true
  health_timeout:
    description: Seconds for the unit to answer C(/health) on the new files (and on the previous ones after a failure).
    type: int
    default: 120
  port_timeout:
    description: Seconds to wait, before anything changes, for the port the new files name to be freed by another
      process; then the task fails naming it, with nothing changed.
    type: int
    default: 30
  keep_what_runs:
    description:
      - For a redeploy forced past a change pending on disk (the unit's running process differs from what a restart
        would start, as C(serving_unit_info) reports it). Before any change, what production runs (its environment,
        and its command line and binary when those differ too, read from C(/proc)) is kept in the deploy's record.
        Every way back (this module's rollback, its dead-man timer, the undo of an interrupted deploy) puts the
        previous files back and that pin as the runtime drop-in
        C(/run/systemd/system/<unit>.d/zy-llmfleet-specdec-deploy-ran.conf), restarts on it, and removes it once
        production answered, so the pending change stays pending on disk and is not what comes back.
      - The new files are tried without it. Nothing is kept when nothing is pending.
    type: bool
    default: false
    version_added: 0.2.0
extends_documentation_fragment:
  - llmfleet.specdec.attributes
attributes:
  check_mode:
    support: full
    details: Says which files would change, with their diff; writes and restarts nothing.
  diff_mode:
    support: full
    details: Each changed file before and after.
  idempotent:
    support: full
notes:
  - Runs as root; needs systemd (C(systemd-run), C(systemctl), C(journalctl)).
  - The host and port come from the unit's env (C(LLAMA_ARG_HOST)/C(LLAMA_ARG_PORT), or C(VLLM_SERVE_HOST)/C(VLLM_SERVE_PORT)),
    read as the unit's C(EnvironmentFile=)s would give it, with the new env file's text where it is one of them.
  - A reboot in the middle forgets the timer (it lives in C(/run)); the host then boots the new files.
author:
  - llmfleet maintainers (@llmfleet)
"""

EXAMPLES = r"""
- name: A new unit file and launcher for llama-server; back to the previous ones unless it answers /health
  llmfleet.specdec.unit_deploy:
    unit: llama-server
    files:
      - path: /etc/systemd/system/llama-server.service
        content: "{{ lookup('ansible.builtin.template', 'llama-server.service.j2') }}"
        mode: "0644"
    health_timeout: 120
    rollback_after: 360
  become: true
"""

RETURN = r"""
unit:
  description: The unit, as a full service name.
  returned: always
  type: str
files:
  description: The files that changed (or would change, in check mode).
  returned: always
  type: list
  elements: str
serving:
  description: Whether the unit served when the module started (else its files were only written).
  returned: always
  type: bool
restarted:
  description: Whether the unit was restarted on the new files.
  returned: always
  type: bool
main_pid:
  description: The process that answered health on the new files.
  returned: when restarted
  type: int
url:
  description: The health URL checked.
  returned: when restarted
  type: str
kept_for_way_back:
  description: O(keep_what_runs) kept what ran in the deploy's record (a change was pending on disk).
  returned: when it did
  type: bool
notes:
  description: An interrupted deploy undone first.
  returned: always
  type: list
  elements: str
rolled_back:
  description: On failure, whether the previous files were put back.
  returned: failure
  type: bool
healthy:
  description: On failure, whether production answered on its previous files.
  returned: failure
  type: bool
journal:
  description: The unit's last journal lines on the new files.
  returned: failure
  type: list
  elements: str
"""

import sys

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.llmfleet.specdec.plugins.module_utils.common._errors import SpecdecError
from ansible_collections.llmfleet.specdec.plugins.module_utils.systemd._systemd import UnitOverrideError
from ansible_collections.llmfleet.specdec.plugins.module_utils.systemd._unit_deploy import run_unit_deploy

ARGUMENT_SPEC = dict(
    unit=dict(type="str", required=True),
    files=dict(type="list", elements="dict", required=True, options=dict(
        path=dict(type="path", required=True),
        content=dict(type="str", required=True, no_log=True),
        mode=dict(type="raw", required=True),
    )),
    rollback_after=dict(type="int", required=True),
    health_timeout=dict(type="int", default=120),
    keep_what_runs=dict(type="bool", default=False),
    port_timeout=dict(type="int", default=30),
)


def main() -> None:
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    try:
        result = run_unit_deploy(module.params, run=module.run_command, check_mode=module.check_mode, python=sys.executable)
    except UnitOverrideError as exc:
        module.fail_json(msg=str(exc), **exc.details)
    except SpecdecError as exc:
        module.fail_json(msg=str(exc))
    diff = result.pop("diff", None)
    if module._diff and diff and result.get("changed"):
        result["diff"] = diff
    module.exit_json(**result)


if __name__ == "__main__":
    main()
