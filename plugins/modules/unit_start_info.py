#!/usr/bin/python
# Copyright: (c) 2026, llmfleet.specdec contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# How long a serving unit's last start and stop took, from systemd and the journal, and its model files' sizes.
from __future__ import annotations

DOCUMENTATION = r"""
---
module: unit_start_info
short_description: How long a serving unit's last start took, from systemd and the journal
version_added: 0.2.0
description:
  - Reads, without restarting anything, how long the unit's last start took on this host - the time from
    systemd beginning the start (C(InactiveExitTimestampMonotonic), before any C(ExecStartPre=)) to the first
    journal line of that start (C(_SYSTEMD_INVOCATION_ID)) saying the server is ready - and how long its last
    stop took (C(ActiveExitTimestampMonotonic) to C(InactiveEnterTimestampMonotonic)).
  - The ready line is llama-server's C(model loaded) (printed once it answers C(/health)) or vLLM's
    C(Application startup complete.), or O(ready_pattern).
  - The journal is read as a stream, oldest first, and abandoned at the ready line or after O(max_lines) lines.
  - The role M(llmfleet.specdec.spec_ab) sizes its plan with it - each config's load time, the health timeout,
    the dead-man and the lock.
  - Also returns the size of each file in O(models) (a config's load time grows with its models' bytes).
options:
  unit:
    description: The serving unit (C(.service) may be left out).
    type: str
    required: true
  engine:
    description: The server, for its ready line.
    type: str
    choices: [llamacpp, vllm]
    default: llamacpp
  ready_pattern:
    description: A Python regular expression for the ready line instead of the engine's.
    type: str
  max_lines:
    description: Journal lines of the last start read at most.
    type: int
    default: 20000
  models:
    description: Files whose size in bytes to return (a missing or unreadable one gives null).
    type: list
    elements: str
    default: []
extends_documentation_fragment:
  - llmfleet.specdec.attributes
  - llmfleet.specdec.attributes.read_only
seealso:
  - module: llmfleet.specdec.unit_override
author:
  - llmfleet maintainers (@llmfleet)
"""

EXAMPLES = r"""
- name: How long does production take to start here?
  llmfleet.specdec.unit_start_info:
    unit: llama-server
    models: [/srv/models/target.gguf, /srv/models/draft.gguf]
  become: true
  register: started

- name: Say it
  ansible.builtin.debug:
    msg: "{{ started.start.load_s | default('unknown', true) }} s to load ({{ started.start.note or started.start.source }})"
"""

RETURN = r"""
start:
  description: The unit's last start and stop.
  returned: success
  type: dict
  contains:
    unit:
      description: The unit's full name.
      type: str
      sample: llama-server.service
    load_s:
      description: Seconds from the start's beginning (before C(ExecStartPre=)) to the ready line; null when unknown.
      type: float
      sample: 41.7
    pre_s:
      description: Seconds of it before the server's own process started (the C(ExecStartPre=) commands).
      type: float
    stop_s:
      description: Seconds the last stop took, when the unit was stopped before this start.
      type: float
    ready_line:
      description: The journal line that marked the server ready.
      type: str
      sample: "srv          main: model loaded"
    source:
      description: Where C(load_s) comes from.
      type: str
    note:
      description: Why C(load_s) is null.
      type: str
    invocation_id:
      description: systemd's id of the start that was read.
      type: str
    lines_read:
      description: Journal lines read.
      type: int
    active_state:
      description: The unit's C(ActiveState) now.
      type: str
model_sizes:
  description: O(models) -> size in bytes (null when the file cannot be read).
  returned: success
  type: dict
  sample: {/srv/models/target.gguf: 16106127360}
"""

import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.llmfleet.specdec.plugins.module_utils.common._errors import SpecdecError
from ansible_collections.llmfleet.specdec.plugins.module_utils.systemd._start_info import model_sizes, start_info

ARGUMENT_SPEC = dict(
    unit=dict(type="str", required=True),
    engine=dict(type="str", default="llamacpp", choices=["llamacpp", "vllm"]),
    ready_pattern=dict(type="str"),
    max_lines=dict(type="int", default=20000),
    models=dict(type="list", elements="str", default=[]),
)


def main() -> None:
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    p = module.params
    if p["max_lines"] < 1:
        module.fail_json(msg=f"max_lines: expected a whole number of lines >= 1, got {p['max_lines']}")
    try:
        info = start_info(p["unit"], p["engine"], lambda argv: module.run_command(argv, environ_update={"LC_ALL": "C"}),
                          ready_pattern=p["ready_pattern"], max_lines=p["max_lines"])
    except SpecdecError as exc:
        module.fail_json(msg=str(exc))
    module.exit_json(changed=False, start=info, model_sizes=model_sizes(p["models"], os.stat))


if __name__ == "__main__":
    main()
