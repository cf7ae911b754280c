#!/usr/bin/python
# Copyright: (c) 2026, llmfleet.specdec contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# Add a judged A/B run's line to the host's own history, under a lock, keyed by unit and run id.
from __future__ import annotations

DOCUMENTATION = r"""
---
module: ab_history
short_description: Add a judged A/B run to the host's own history, under a lock, per unit
version_added: 0.1.0
description:
  - The host keeps one line per judged A/B run in C(<state_dir>/history.jsonl), read by C(playbooks/promote.yml)
    and C(playbooks/spec_watch.yml) when the controller has nothing (a new job container).
  - The line carries its unit, so two units of one host keep apart (the playbooks' lookup of the last run,
    a unit reads one unit's runs); the line of an earlier report of the same run and unit is replaced, every other
    line, readable or not, is kept.
  - The file is read, changed and replaced whole under an exclusive C(flock) of C(<state_dir>/history.lock)
    (waited for at most 30 seconds), so two runs that finish at once never lose each other's line. It is mode 0600.
extends_documentation_fragment:
  - llmfleet.specdec.attributes
attributes:
  check_mode:
    support: full
  diff_mode:
    support: none
  idempotent:
    support: full
options:
  unit:
    description: The unit the run measured, with or without C(.service).
    type: str
    required: true
  line:
    description: The run's history record, as role C(llmfleet.specdec.spec_ab) makes it from its C(report.json).
    type: dict
    required: true
  state_dir:
    description: The host's state directory (created 0700 if it does not exist).
    type: path
    default: /var/lib/llmfleet-specdec
seealso:
  - module: llmfleet.specdec.ab_lock
author:
  - llmfleet maintainers (@llmfleet)
"""

EXAMPLES = r"""
# After llmfleet.specdec.spec_report judged a run: its line is the last of the controller's history.jsonl
- name: Keep the run in the host's history too
  llmfleet.specdec.ab_history:
    unit: llama-server
    line: "{{ (lookup('ansible.builtin.file', results_dir ~ '/' ~ inventory_hostname ~ '/history.jsonl').splitlines()
              | last) | from_json }}"
  become: true
"""

RETURN = r"""
path:
  description: The history file.
  returned: always
  type: str
  sample: /var/lib/llmfleet-specdec/history.jsonl
line:
  description: The line as written (the record with its C(unit)).
  returned: always
  type: dict
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.llmfleet.specdec.plugins.module_utils.common._errors import SpecdecError
from ansible_collections.llmfleet.specdec.plugins.module_utils.state import _host_state

ARGUMENT_SPEC = dict(
    unit=dict(type="str", required=True),
    line=dict(type="dict", required=True),
    state_dir=dict(type="path", default=_host_state.DEFAULT_STATE_DIR),
)


def main() -> None:
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    params = module.params
    try:
        result = _host_state.add_history(params["state_dir"], params["unit"], params["line"], module.check_mode)
    except SpecdecError as exc:
        module.fail_json(msg=str(exc))
    except OSError as exc:
        module.fail_json(msg=f"{params['state_dir']}/history.jsonl could not be written: {exc}")
    module.exit_json(**result)


if __name__ == "__main__":
    main()
