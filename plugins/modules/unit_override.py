#!/usr/bin/python
# Copyright: (c) 2026, llmfleet.specdec contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# Run a systemd unit with an A/B candidate's env through a transient /run drop-in, with a dead-man rollback timer.
from __future__ import annotations

DOCUMENTATION = r"""
---
module: unit_override
short_description: Run a live systemd unit with a candidate env through a transient drop-in, and roll it back
version_added: 0.1.0
description:
  - The A/B change vehicle. A candidate runs as the production unit itself, changed only by a transient
    drop-in under C(/run/systemd/system/<unit>.d/) that layers an env file from C(/run/llmfleet-specdec/<unit>/)
    over the unit's own C(EnvironmentFile=). Same user, limits and journal as production; a reboot forgets it.
  - O(state=present) first checks that the candidate's port is free or held only by the unit itself (another
    holder is waited for up to O(port_timeout) seconds, then refused, naming it, with production untouched),
    arms the dead-man timer (see below), writes the candidate's env (0600) and the drop-in (0600) in directories of
    mode 0700, runs C(daemon-reload), queues one C(systemctl restart) job and waits (bounded by O(health_timeout))
    until C(GET /health) answers 200 B(and) the socket listening on the port belongs to the unit's new C(MainPID)
    or to a process in the unit's own control group or below it (a container run by C(podman run --cgroups=split),
    whose C(MainPID) is the podman client). A port served from anywhere else (a container under docker's own
    scope, another unit) is not healthy, and the message names that process and its unit. The same candidate
    again is C(changed=false) and restarts nothing.
  - A candidate that does not become healthy (a bad flag, a missing model, a crash) makes the task fail with the
    unit's last journal lines, after production was restored and found healthy. If production does not come back
    either, the message says so in capitals, and the dead-man timer stays armed to try again.
  - Production is never left to this module alone. From the first change until production (or, without
    O(rollback_after), the candidate) answers health, something on the host brings production back by itself - the
    dead-man timer C(specdec-rollback-<unit>.timer), armed before anything else changes, or the restart job, which
    systemd completes without its caller. So a module killed with SIGKILL, an SSH link that drops or a controller
    that dies, at any step, ends with production restored, at the latest when the timer fires.
  - With O(rollback_after), the timer runs a self-contained rollback script (0700) that performs the O(state=absent)
    path unless O(state=confirmed) or O(state=absent) disarms it first. A changed candidate re-arms it through a
    second timer, C(specdec-rearm-<unit>.timer), armed before the first is stopped and stopped after it is armed
    again, so no moment is without one. Without O(rollback_after), the same timer, sized O(health_timeout) +
    O(port_timeout) + 60 s, guards the switch and is disarmed once the candidate is healthy. Transient units live in
    C(/run/systemd/transient), so C(daemon-reload) does not disarm them; the timer fires at a wall-clock instant
    (C(systemd-run --on-calendar)), because systemd re-bases C(--on-active) timers at every C(daemon-reload), which
    would postpone the rollback. A timer that fires after a restore finished finds no script and is skipped.
  - O(state=confirmed) checks that the candidate is healthy and disarms the timer, keeping the candidate until
    O(state=absent) or a reboot. An unhealthy candidate is not confirmed; its timer stays armed.
  - O(state=absent) restores production in an order the host can finish alone from any step - production's port
    checked (nothing changed yet), a dead-man armed if none is and an override is in place, the drop-in removed and
    reloaded, one restart job, the health wait for production's own config (its process must not carry the
    candidate), then the env file and the script removed and the timer disarmed last. It fails loudly, naming the
    unit and its last journal lines, if production does not come back healthy. With nothing to remove it restarts
    nothing and only checks health, unless O(restart=true). O(unit=*) does this for every unit this collection left
    something for (playbook C(llmfleet.specdec.rollback)).
  - With O(exec_start) (form exec, for a hand-written unit whose command line is its configuration), the
    drop-in also carries an empty C(ExecStart=) and the candidate's whole command line, each argument quoted for
    systemd (C(%) as C(%%), C($) as C($$), quotes, backslashes and control characters escaped) so that the process
    receives exactly those arguments. The candidate is healthy only when its C(MainPID)'s C(/proc/<pid>/cmdline)
    (for a container, the runtime client's, or a process in the unit's control group) is that command line, and the
    health URL is the candidate's (its C(--host)/C(--port), a container's published port). Production's own unit
    is read with M(llmfleet.specdec.serving_unit_info)'s reading for its endpoint, and a unit with a drop-in that
    sorts after this one and sets C(ExecStart=) is refused before anything is written. The restore side is the same
    as for an env candidate, the whole drop-in goes.
  - Without O(exec_start), on a unit whose server runs on its own C(ExecStart=) line (directly or behind C(env),
    C(nice), C(taskset) or C(numactl)) or behind a wrapper, the candidate answers where that command line says, and
    a variable it outranks (its flag is on the server's command line, which llama-server reads after its variables)
    is refused before anything is written, naming the flag; give such a candidate as O(exec_start).
  - Production restarts only into what runs. Before a restart of production that serves - O(state=present) switching
    from production, O(state=absent) with O(restart=true) and nothing in place - the unit is read as
    M(llmfleet.specdec.serving_unit_info) reads it with O(llmfleet.specdec.serving_unit_info#module:start_from_running),
    and a restart that would start something other than what runs (the env file or unit file edited on disk and not
    restarted, unit files not reloaded, a build switched under a running binary) is refused before any change, in
    check mode too, naming the unit and what differs. Otherwise the candidate, the fresh start and every way back
    (this module's restore, the dead-man timer) would start that change, and a change that cannot start leaves
    production down. Set O(keep_what_runs=true) to go ahead with what runs kept as the way back, or
    O(apply_pending=true) to start the change knowingly. A unit this module cannot read that way is compared by its
    environment and C(NeedDaemonReload) only. A production that is down or runs a candidate of this module is not
    compared; its restore is never refused.
  - Values are validated before anything is armed or written. Each value is written so that systemd hands the
    process exactly that value (quoted by systemd's C(EnvironmentFile=) rules), so backslashes, quotes, C($),
    C(#), spaces and newlines arrive unchanged. A value no environment can hold (a NUL byte, text that is not
    valid UTF-8, more than 128 KiB) is an error naming the variable.
options:
  unit:
    description:
      - The systemd service, with or without C(.service) (for example C(llama-server)).
      - V(*) with O(state=absent) means every unit this collection left a drop-in, an env file or a rollback
        timer for.
    type: str
    required: true
  state:
    description:
      - V(present) runs the candidate, V(confirmed) keeps it and disarms the dead-man timer, V(absent) restores
        production.
    type: str
    choices: [present, confirmed, absent]
    default: present
  env:
    description:
      - The candidate as variables, for example C(LLAMA_ARG_SPEC_TYPE) and C(LLAMA_ARG_SPEC_DRAFT_MODEL).
        They are layered over the unit's production env; variables not named keep their production values.
      - Each value is what the process receives, byte for byte; the module does the quoting. Booleans become
        C(1)/C(0), numbers their digits, and V(null) unsets the variable (C(UnsetEnvironment=)), also when the
        unit's own env file sets it.
      - Flags without an environment name go, shell-quoted, in C(LLAMA_EXTRA_ARGS), which the unit of role
        C(llmfleet.specdec.llamacpp_serve) splits like a shell and appends to llama-server's command line, so
        its value must split (quotes paired).
      - Mutually exclusive with O(env_file); one of them (or O(exec_start)) is required with O(state=present).
    type: dict
  env_file:
    description:
      - The candidate as an env file on the managed host, in systemd's C(EnvironmentFile=) syntax. It is read
        as systemd reads it (a line without C(=), a quote never closed or a variable set twice is an error naming
        the line), validated like O(env) and copied, never referenced.
    type: path
  exec_start:
    description:
      - The candidate's whole command line, program first (the rendering's C(exec_start), form exec). O(env) may
        then be empty or left out; variables it gives are layered over the unit's env as usual.
    type: list
    elements: str
  exec_prefix:
    description:
      - The C(ExecStart=) prefix of production's line to keep for O(exec_start) (C(-), C(+), C(!), C(!!)); C(:) and
        C(@) are not kept (the arguments are final).
    type: str
    default: ""
  rollback_after:
    description:
      - Seconds after which the host restores production by itself unless O(state=confirmed) or
        O(state=absent) comes first. Must be longer than O(health_timeout).
      - Running O(state=present) again with the same candidate keeps the countdown already armed; a
        different candidate re-arms it from zero.
    type: int
  health_timeout:
    description: Seconds to wait for C(/health) from the unit's new process, after a start or a restore.
    type: int
    default: 120
  port_timeout:
    description:
      - Seconds to wait, before anything changes, for a port held by a process other than the unit itself to be
        freed (the candidate's port with O(state=present), production's with O(state=absent)); then the task fails
        naming that process, with the unit untouched.
    type: int
    default: 30
  restart:
    description:
      - With O(state=absent), restart production even when no override is in place (a fresh start, as the A/B's
        baseline gets in every round), with the same guarantees as the restore; nothing else is restarted.
      - Only with O(state=absent) and one unit.
    type: bool
    default: false
  keep_what_runs:
    description:
      - For a run forced past a change pending on disk (the unit's running process differs from what a restart
        would start, as C(serving_unit_info) O(llmfleet.specdec.serving_unit_info#module:start_from_running)
        reports it). Before the first restart, what production runs (its environment, and its command line and
        binary when those differ too, read from C(/proc)) is kept as the runtime drop-in
        C(/run/systemd/system/<unit>.d/zy-llmfleet-specdec-ran.conf), so that every way back (this module's
        restore, the dead-man timer's script, C(rollback.yml)) restarts what ran and not the pending change. It is
        removed, with a C(daemon-reload) and no restart, once production answered health on it; the change stays
        pending on disk, as before the run.
      - Without it, or O(apply_pending=true), a restart of production with a change pending is refused before any
        change.
      - Nothing is kept when nothing is pending, when a candidate runs, or when it is kept already. What cannot be
        kept (an unreadable environment, a binary removed since it started) fails before any change.
      - Other settings a pending unit file changes (C(User=), limits, C(ExecStartPre=)) come from the disk.
    type: bool
    default: false
    version_added: 0.2.0
  apply_pending:
    description:
      - Let a restart of production start a change pending on disk (what a restart would start differs from what runs,
        as M(llmfleet.specdec.serving_unit_info) O(llmfleet.specdec.serving_unit_info#module:start_from_running)
        reports it). Without it, or O(keep_what_runs=true), such a restart is refused before any change.
      - For a play that changed the unit's files on purpose and now restarts production on them (a promotion's or
        a redeploy's commit, or its rescue that put the previous files back).
      - Mutually exclusive with O(keep_what_runs=true), which keeps what runs instead.
    type: bool
    default: false
    version_added: 0.2.0
  try_pending:
    description:
      - For a promotion forced past a change pending on disk, which commits that change with its winner.
      - With O(state=present) and O(keep_what_runs=true), the candidate runs on the pending change (the files on disk)
        plus its own variables, so the trial tries what the commit will write; what ran is kept only in the dead-man
        timer's script, and every way back (the dead-man, this module's restore of a candidate that failed,
        C(rollback.yml), O(state=absent) without O(try_pending)) puts it back and restarts on it.
      - With O(state=absent), the tried change was committed to disk, so production restarts on the disk, not on
        what ran; the dead-man stays armed, with what ran as its way back, until production answered health.
    type: bool
    default: false
    version_added: 0.2.0
extends_documentation_fragment:
  - llmfleet.specdec.attributes
attributes:
  check_mode:
    support: full
    details: Reports what would change (and the would-be timer) without writing, reloading or restarting.
  diff_mode:
    support: full
    details: Shows the drop-in and the env file before and after, the value of a variable whose name looks secret
      (C(HF_TOKEN), C(LLAMA_API_KEY)) as C(********); such a value given in O(env) is also hidden from the result.
  idempotent:
    support: full
notes:
  - Runs on the managed host as root (C(become=true)); needs systemd, C(systemd-run) and C(journalctl).
  - The deadline is wall-clock time, so a clock step on the host (NTP) moves it by as much.
  - The rollback timer runs as root, so it runs an interpreter only root can change; the module's own
    interpreter when it and every directory above it belong to root and are not group- or world-writable,
    else C(/usr/bin/python3). If neither is, O(state=present) and O(state=absent) fail naming the problem, before
    anything changes (a venv owned by the login user is the usual case).
  - The host, port and health URL come from the unit's env (C(LLAMA_ARG_HOST), C(LLAMA_ARG_PORT); a vLLM unit's
    C(VLLM_SERVE_HOST), C(VLLM_SERVE_PORT)), after the candidate's env is layered on; a wildcard host is checked on loopback.
  - Tested on real systemd (Debian 12, systemd 252) in podman containers running llama-server; see C(molecule/).
author:
  - llmfleet maintainers (@llmfleet)
"""

EXAMPLES = r"""
# Refused, before any change, when a restart of llama-server would start something other than what runs (its env
# file edited on disk since it started, say): restart it yourself first, or choose keep_what_runs or apply_pending.
- name: Run the draft-model candidate; the host restores production by itself after 15 minutes
  llmfleet.specdec.unit_override:
    unit: llama-server
    env:
      LLAMA_ARG_SPEC_TYPE: draft-simple
      LLAMA_ARG_SPEC_DRAFT_MODEL: /srv/models/qwen3-0.6b-q8_0.gguf
      LLAMA_EXTRA_ARGS: --spec-draft-n-max 4
    rollback_after: 900
  become: true

- name: A candidate kept in a file on the host, without the draft production uses
  llmfleet.specdec.unit_override:
    unit: llama-server
    env_file: /etc/llmfleet-specdec/candidates/ngram.env
    rollback_after: 900
  become: true

- name: A hand-written unit (form exec) - its whole command line with the candidate's depth
  llmfleet.specdec.unit_override:
    unit: llama-server
    env: {}
    exec_start: [/opt/llama/bin/llama-server, -m, /srv/models/target.gguf, -md, /srv/models/draft.gguf,
                 --spec-type, draft-simple, --spec-draft-n-max, "6", --port, "8080"]
    rollback_after: 900
  become: true

- name: Keep it (disarm the dead-man) after the measurements looked right
  llmfleet.specdec.unit_override:
    unit: llama-server
    state: confirmed
  become: true

- name: Back to production
  llmfleet.specdec.unit_override:
    unit: llama-server
    state: absent
  become: true

- name: A fresh start of production (an A/B's baseline slot), with or without an override in place
  llmfleet.specdec.unit_override:
    unit: llama-server
    state: absent
    restart: true
  become: true

- name: The same fresh start past an env file edited on disk - what runs stays the way back, the edit stays pending
  llmfleet.specdec.unit_override:
    unit: llama-server
    state: absent
    restart: true
    keep_what_runs: true
  become: true

- name: Restart production on the env file just written on purpose (a commit), which is not what runs yet
  llmfleet.specdec.unit_override:
    unit: llama-server
    state: absent
    restart: true
    apply_pending: true
  become: true

- name: Emergency - remove every override this collection left on the host
  llmfleet.specdec.unit_override:
    unit: "*"
    state: absent
  become: true
"""

RETURN = r"""
unit:
  description: The unit, as a full service name (V(*) for every unit).
  returned: always
  type: str
  sample: llama-server.service
restarted:
  description: Whether the unit was restarted.
  returned: success, except with O(unit=*)
  type: bool
healthy:
  description: Whether C(/health) answered 200 from the unit's own process (its C(MainPID), or one in its control
    group) at the end.
  returned: success, except in check mode
  type: bool
main_pid:
  description: The unit's C(MainPID) (for a container unit, the container engine's client).
  returned: success, except in check mode
  type: int
url:
  description: The health URL that was checked.
  returned: success
  type: str
  sample: http://127.0.0.1:8080/health
port:
  description: The TCP port the unit serves with this state.
  returned: success
  type: int
env_file:
  description: The candidate's env file under C(/run).
  returned: success, except with O(unit=*)
  type: str
  sample: /run/llmfleet-specdec/llama-server.service/override.env
dropin:
  description: The drop-in under C(/run/systemd/system).
  returned: success, except with O(unit=*)
  type: str
  sample: /run/systemd/system/llama-server.service.d/zz-llmfleet-specdec.conf
rollback:
  description: The dead-man timer after the task (or the one check mode would arm).
  returned: with O(state=present) or O(state=confirmed)
  type: dict
  contains:
    timer:
      description: Its unit name.
      type: str
      sample: specdec-rollback-llama-server.timer
    armed:
      description: Whether it is waiting to fire.
      type: bool
    due_in:
      description: Seconds until it fires, when armed.
      type: int
found:
  description: What O(state=absent) found and removed (files and armed timers).
  returned: with O(state=absent)
  type: list
  elements: str
units:
  description: With O(unit=*), the O(state=absent) result of every unit that had something left.
  returned: with O(unit=*)
  type: dict
journal:
  description: The unit's last journal lines when it did not become healthy.
  returned: failure
  type: list
  elements: str
pinned:
  description: The drop-in that keeps what ran (O(keep_what_runs)), when this task wrote it.
  returned: when O(state=present) wrote it
  type: str
  sample: /run/systemd/system/llama-server.service.d/zy-llmfleet-specdec-ran.conf
kept_for_way_back:
  description: O(try_pending) kept what ran in the dead-man timer's script only (the candidate runs on the disk).
  returned: when O(state=present) with O(try_pending) kept it
  type: bool
restored:
  description: After a candidate failed, whether production was restored and found healthy.
  returned: failure of O(state=present)
  type: bool
"""

import sys

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.llmfleet.specdec.plugins.module_utils.common._errors import SpecdecError
from ansible_collections.llmfleet.specdec.plugins.module_utils.common._secrets import MASK, looks_secret, secret_values
from ansible_collections.llmfleet.specdec.plugins.module_utils.systemd._systemd import UnitOverrideError
from ansible_collections.llmfleet.specdec.plugins.module_utils.systemd._unit_override import run_unit_override

ARGUMENT_SPEC = dict(
    unit=dict(type="str", required=True),
    state=dict(type="str", choices=["present", "confirmed", "absent"], default="present"),
    env=dict(type="dict"),
    env_file=dict(type="path"),
    exec_start=dict(type="list", elements="str"),
    exec_prefix=dict(type="str", default=""),
    rollback_after=dict(type="int"),
    health_timeout=dict(type="int", default=120),
    port_timeout=dict(type="int", default=30),
    restart=dict(type="bool", default=False),
    keep_what_runs=dict(type="bool", default=False),
    try_pending=dict(type="bool", default=False),
    apply_pending=dict(type="bool", default=False),
)


def hide_in_diff(entry: dict) -> dict:
    """A diff entry with each ``NAME=value`` line of a variable whose name looks secret shown as ``NAME=********``;
    a side given as a mapping (the drop-in's state, not its text) has such a key's value masked instead."""
    def hide(side: object) -> object:
        if isinstance(side, dict):
            return {key: MASK if looks_secret(str(key)) else hide(value) for key, value in side.items()}
        if not isinstance(side, str):
            return side
        return "".join(f"{line.partition('=')[0]}={MASK}\n" if looks_secret(line.partition("=")[0].strip()) and "=" in line
                       else line for line in side.splitlines(keepends=True))
    return dict(entry, **{key: hide(entry[key]) for key in ("before", "after") if key in entry})


def main() -> None:
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True,
                           mutually_exclusive=[("env", "env_file")],
                           required_if=[("state", "present", ("env", "env_file", "exec_start"), True)])
    # a candidate's secret-looking values (8 characters or more) are hidden from the result and its messages
    module.no_log_values.update(v for v in secret_values(module.params.get("env")) if len(v) >= 8)
    try:
        result = run_unit_override(module.params, run=module.run_command,
                                   check_mode=module.check_mode, python=sys.executable)
    except UnitOverrideError as exc:
        module.fail_json(msg=str(exc), **exc.details)
    except SpecdecError as exc:
        module.fail_json(msg=str(exc))
    diff = result.pop("diff", None)
    if module._diff and diff is not None and result.get("changed"):
        result["diff"] = [hide_in_diff(entry) for entry in diff]
    module.exit_json(**result)


if __name__ == "__main__":
    main()
