#!/usr/bin/python
# Copyright: (c) 2026, llmfleet.specdec contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# Take, refresh or release the per-unit A/B lock on a host, so two runs never interleave candidates on one unit.
from __future__ import annotations

DOCUMENTATION = r"""
---
module: ab_lock
short_description: The per-unit lock that keeps two A/B runs off one serving unit
version_added: 0.1.0
description:
  - An A/B run changes a live unit config after config. Two runs on the same unit (an operator's shell and a
    scheduled job) would interleave candidates and measure each other's. The role C(llmfleet.specdec.spec_ab)
    takes this lock before it changes anything and releases it after production is restored.
  - The lock is a JSON record at C(<state_dir>/locks/<unit>.json) naming its holder - the run id, the
    controller's host name, the controller's C(ansible-playbook) process id with that machine's boot id, its pid
    namespace and the process's start time, the start of the run - and an expiry.
    It is created whole (a complete temporary file with a unique name linked into place, which fails if a lock
    exists), and every decision about it is taken under an exclusive C(flock) of C(<state_dir>/locks/<unit>.guard),
    waited for at most 30 seconds, so two runs that find the same dead lock cannot both take it over.
  - O(state=present) takes the lock, or refreshes the expiry of a lock the same run id already holds (the role
    refreshes it before every config). A lock held by another live run makes the module wait up to O(wait)
    seconds, then fail with a message naming the holder and its start time.
  - A lock left by a dead run is taken over, and the old record is returned in RV(taken_over) with the reason,
    only while the unit's dead-man timer (C(specdec-rollback-<unit>.timer), or its bridge C(specdec-rearm-<unit>.timer))
    is not armed - the dead run's candidate may still serve until it fires - and then when its expiry has passed,
    or at once when its holder is provably gone - the controller ran on this very host (same boot id, same pid
    namespace) and its process is gone or its pid now belongs to a later process. A host name proves nothing (the
    containers of one image share it) and is never trusted.
  - O(state=absent) removes the lock if the C(run_id) of O(owner) holds it; the lock of another run is left in place
    (reported in RV(holder)), unless O(force=true).
  - O(state=query) changes nothing (also outside check mode) and says whether a run holds the lock (RV(held), RV(holder)),
    whether that lock is stale (RV(stale), RV(why)), and whether an override of M(llmfleet.specdec.unit_override) is
    live on the host (RV(override_live)). C(playbooks/tasks/require_unit_free.yml) uses it to keep deploy, build
    and promote off a unit an A/B is changing.
  - The same lock guards a build switch. M(llmfleet.specdec.llamacpp_activate) takes it for each unit, with the
    run id C(build-<link>), for the switch's whole length; an A/B waits for it or fails naming it, and the switch
    refuses a unit an A/B holds.
  - The state directory is created root-owned with O(state_mode) if it does not exist (an existing one loses the
    permission bits O(state_mode) does not grant); C(locks/) is 0700 and every lock file 0600.
extends_documentation_fragment:
  - llmfleet.specdec.attributes
attributes:
  check_mode:
    support: full
    details: Says whether the lock is free, held by this run, stale or held by another run; writes nothing and does not wait.
  diff_mode:
    support: none
  idempotent:
    support: partial
    details: Releasing twice changes nothing; taking it again as the same run refreshes the expiry, which is a change.
options:
  unit:
    description: The serving unit the lock guards, with or without C(.service).
    type: str
    required: true
  state:
    description: V(present) takes or refreshes the lock, V(absent) releases it, V(query) only reads it.
    type: str
    choices: [present, absent, query]
    default: present
  owner:
    description:
      - Who takes or holds the lock. C(run_id) is required (letters, digits and C(. _ @ + -)).
      - C(controller) (the controller's host name) and C(pid) (its C(ansible-playbook) process) are recorded for
        the message another run gets; C(boot_id), C(pid_ns) and C(start_ticks) prove later that this process is
        gone. Role C(llmfleet.specdec.spec_ab) fills all of them in, and makes the run id unique.
      - Required with O(state=present) and O(state=absent).
    type: dict
  expires_after:
    description:
      - Seconds from now after which the lock counts as left by a dead run, once the unit's dead-man timer has
        fired too. Make it the dead-man rollback time plus the health timeout, and refresh the lock before each
        change, so a live run never loses it.
      - Required with O(state=present).
    type: int
  wait:
    description: Seconds to wait for a lock held by another live run before failing.
    type: int
    default: 0
  poll:
    description: Seconds between two looks at a held lock while waiting.
    type: int
    default: 2
  force:
    description: With O(state=absent), remove the lock whoever holds it (after checking that run is really gone).
    type: bool
    default: false
  takeover_armed:
    description:
      - With O(state=present), take over a dead run's lock (expired, or its controller provably gone) even while the
        unit's dead-man timer is armed. For a caller that removes that run's override and disarms the timer itself
        (C(playbooks/rollback.yml)); a live run's lock still refuses.
    type: bool
    default: false
    version_added: 0.2.0
  state_dir:
    description: The host's state directory.
    type: path
    default: /var/lib/llmfleet-specdec
  state_mode:
    description:
      - The mode of the state directory (it holds prompts and model output); it is created with it, and an existing one
        loses the bits it does not grant.
    type: raw
    default: "0700"
seealso:
  - module: llmfleet.specdec.unit_override
author:
  - llmfleet maintainers (@llmfleet)
"""

EXAMPLES = r"""
- name: Hold the unit's A/B lock during maintenance, waiting up to 10 minutes for a run to finish
  llmfleet.specdec.ab_lock:
    unit: llama-server
    owner:
      run_id: maintenance-driver-upgrade
      controller: "{{ lookup('ansible.builtin.pipe', 'hostname') }}"
    expires_after: 1020
    wait: 600
  become: true

- name: Is the unit free (no A/B holds its lock, no override live)? Changes nothing
  llmfleet.specdec.ab_lock:
    unit: llama-server
    state: query
  become: true
  register: unit_lock

- name: Release it
  llmfleet.specdec.ab_lock:
    unit: llama-server
    state: absent
    owner:
      run_id: maintenance-driver-upgrade
  become: true
"""

RETURN = r"""
path:
  description: The lock file.
  returned: always
  type: str
  sample: /var/lib/llmfleet-specdec/locks/llama-server.json
lock:
  description: The record this run now holds (or would hold in check mode); null when not taken.
  returned: always
  type: dict
  sample:
    run_id: "20261130T131500Z"
    controller: ctl-1
    pid: 4242
    started: "2026-11-30T13:15:00Z"
    expires: "2026-11-30T13:32:00Z"
    unit: llama-server.service
taken_over:
  description: The record of a dead run's lock that was replaced, with C(why) it counted as dead.
  returned: when a lock was taken over
  type: dict
holder:
  description: The record of another run's lock (check mode, or O(state=absent) of a lock this run lost).
  returned: when another run holds the lock
  type: dict
waited:
  description: Seconds spent waiting for another run's lock.
  returned: with O(state=present)
  type: int
held:
  description: Whether a run that is not provably dead holds the lock.
  returned: with O(state=query)
  type: bool
stale:
  description: Whether the lock record left belongs to a dead run (it would be taken over).
  returned: with O(state=query)
  type: bool
why:
  description: Who holds the lock until when, or why the record left is stale; null when there is none.
  returned: with O(state=query)
  type: str
override_live:
  description: Whether a drop-in, an env file or an armed dead-man of M(llmfleet.specdec.unit_override) is on the host.
  returned: with O(state=query)
  type: bool
override:
  description: What of M(llmfleet.specdec.unit_override) was found live.
  returned: with O(state=query)
  type: list
  elements: str
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.llmfleet.specdec.plugins.module_utils.common._errors import SpecdecError
from ansible_collections.llmfleet.specdec.plugins.module_utils.state import _host_state

ARGUMENT_SPEC = dict(
    unit=dict(type="str", required=True),
    state=dict(type="str", choices=["present", "absent", "query"], default="present"),
    owner=dict(type="dict"),
    expires_after=dict(type="int"),
    wait=dict(type="int", default=0),
    poll=dict(type="int", default=2),
    force=dict(type="bool", default=False),
    takeover_armed=dict(type="bool", default=False),
    state_dir=dict(type="path", default=_host_state.DEFAULT_STATE_DIR),
    state_mode=dict(type="raw", default="0700"),
)


def _mode(value: object) -> int:
    try:
        return int(str(value), 8)
    except ValueError:
        raise SpecdecError(f"state_mode {value!r} is not an octal mode; give one like '0750' or '0700'") from None


def main() -> None:
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True,
                           required_if=[("state", "present", ("expires_after", "owner")), ("state", "absent", ("owner",))])
    params = dict(module.params)

    def run(argv: object) -> object:
        return module.run_command(list(argv))  # type: ignore[call-overload]

    try:
        params["state_mode"] = _mode(params["state_mode"])
        if params["state"] == "present":
            result = _host_state.acquire(params, run=run, check_mode=module.check_mode)
        elif params["state"] == "query":
            result = _host_state.query(params, run=run)
        else:
            result = _host_state.release(params, check_mode=module.check_mode)
    except _host_state.LockHeldError as exc:
        module.fail_json(msg=str(exc), holder=exc.holder)
    except SpecdecError as exc:
        module.fail_json(msg=str(exc))
    except OSError as exc:
        module.fail_json(msg=f"the lock under {params['state_dir']} could not be written: {exc}; the state "
                             "directory must be on a local file system writable by the become user (root)")
    module.exit_json(**result)


if __name__ == "__main__":
    main()
