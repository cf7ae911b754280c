#!/usr/bin/python
# Copyright: (c) 2026, llmfleet.specdec contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# Point a host's llama.cpp 'current' link at a build only after it served production's model; else back.
from __future__ import annotations

DOCUMENTATION = r"""
---
module: llamacpp_activate
short_description: Make an installed llama.cpp build current only after it served production's own model
version_added: 0.2.0
description:
  - The activation step of role C(llmfleet.specdec.llamacpp_build). C(<root>/current) is a relative link to the
    build the serving units run; this module moves it to O(name) only after that build has served production.
  - B(Canary.) For each unit in O(units) whose C(MainPID) runs a binary of the build C(current) points at now, the
    new build's server is started as the transient unit C(specdec-canary-<unit>) with that process's own command
    line and environment, as its user and group, on a free loopback port with O(canary_ctx_size) as its context,
    and must answer C(GET /health) from its own process within O(canary_timeout) (the model loaded and
    llama-server's warm-up decode ran). It is stopped at once after; C(RuntimeMaxSec=) bounds it if the module
    dies. A canary that fails changes nothing and the task fails with its journal lines.
  - When no unit serves from C(current) (a host's first build), O(canary_model) alone is loaded the same way, if
    given.
  - B(Switch under a dead-man.) Before the link moves, a transient timer C(specdec-build-rollback-<link>) is armed
    with a self-contained script under C(/run/llmfleet-specdec/llamacpp-build/). Then the link moves (an atomic
    rename), O(facts) is written to O(facts_file), each serving unit restarts and must answer C(/health) on its
    own port from its new process within O(health_timeout). Only then is the timer disarmed. A module, SSH link
    or controller that dies in between leaves a host that points C(current) back, puts the record back and
    restarts the units after O(rollback_after) seconds.
  - B(Failure.) A unit that does not come back healthy on the new build makes the module point C(current) back,
    put the record back, restart the units on the previous build and check them; the task fails with
    C(BUILD <name> WAS ROLLED BACK), or with C(PRODUCTION IS NOT HEALTHY) when the previous build does not come
    back either (the dead-man then stays armed and tries once more).
  - B(Host-wide guard.) Before anything changes, each unit in O(units) is taken under the lock of
    M(llmfleet.specdec.ab_lock) (C(<state_dir>/locks/<unit>.json), run id C(build-<link>)), held until the module
    returns and renewed before the dead-man is armed; its expiry covers the canaries, the dead-man's wait and its
    restart. A unit whose lock an A/B or another play holds (waited for up to O(lock_wait) seconds), or on which an
    override of M(llmfleet.specdec.unit_override) is live (its drop-in, env file or dead-man in C(/run)), is refused
    naming the holder or the override, and nothing changes. A killed activation's lock stays until its expiry
    (after its dead-man restored production); the next activation of the same link takes it back at once.
  - An activation that was interrupted (its record is still in C(/run)) is undone first by the next run; its
    dead-man stays armed until the units answered health on the previous build.
  - Units that are not active, or run a binary outside the build C(current) points at, are left alone.
  - B(Flag table.) With O(flag_table), before any canary starts, the new build's C(llama-server --help) is read and
    each unit's running command line and C(LLAMA_ARG_*) environment are checked against it. A flag or a
    C(--spec-type) value it does not know (llama-server would exit 1), or a variable the running build read and it
    no longer does (a setting silently dropped), refuses the build naming the rename when the lint's table knows it
    (C(--spec-type mtp) to C(draft-mtp), an option's other names, removed flags' advice). Nothing changes.
  - B(Speculation sentinel.) With O(sentinel), a unit with a promotion recorded in O(state_dir)
    (C(promoted/<unit>.json)) has its canary judged while it serves (C(--metrics --parallel 1) appended, a context
    that holds the largest prompt). O(sentinel_prompts) prompts of each shape the promoted run measured (its sizes and
    budgets; a declared shape from O(sentinel_traffic)) go to production and to the canary, and the canary must be
    lossless against production's texts, engaged, no lower in acceptance (accepted / drafted, per reply) than
    production by more than O(sentinel_margin), in mean accepted length (its own C(/metrics)) by more than
    O(sentinel_mean_len_margin), and in decode rate by more than O(sentinel_speed_margin) (not judged when
    O(canary_args) hold C(--n-gpu-layers 0)). A regression fails the task before C(current) moves, naming the build,
    the config and both numbers, unless O(accept_slower); every verdict goes into the build record (O(facts_file),
    key C(sentinel)). Where O(canary_args) put the canary on other hardware (C(--n-gpu-layers 0)) its rate says
    nothing; then, with O(speed_after_switch), the promoted config's rate on the new build is measured on the unit
    itself after C(current) moved and the unit answered C(/health), under the dead-man (its wait grows by
    O(sentinel_timeout)), against the lowest per-start rate the promoted run measured; below it by more than
    O(sentinel_speed_margin), C(current) goes back (C(BUILD <name> WAS ROLLED BACK)). Check mode says per unit which
    of the two it gets and why (RV(sentinel_plan)). Evidence of another model, a production that no longer runs the
    promoted config, or a declared traffic file not given, refuse the build in one line. See C(docs/builds.md).
options:
  state_dir:
    description: The host's state directory that holds the units' locks (as for M(llmfleet.specdec.ab_lock)).
    type: path
    default: /var/lib/llmfleet-specdec
  lock_wait:
    description: Seconds to wait for a unit's lock held by an A/B or another play before refusing.
    type: int
    default: 0
  root:
    description: The build root, holding one directory per build and the C(current) link.
    type: path
    required: true
  name:
    description: The installed build to make current (a directory under O(root), such as C(b10133-cuda)).
    type: str
    required: true
  current:
    description: The link. Defaults to C(<root>/current).
    type: path
  binary:
    description: The server inside a build.
    type: str
    default: bin/llama-server
  units:
    description: The units that may serve from C(current); each is restarted only when it does.
    type: list
    elements: str
    default: []
  facts_file:
    description: Where the record of the build C(current) points at is kept; restored with the link.
    type: path
  facts:
    description: The record to write into O(facts_file) once the link has moved.
    type: dict
  canary:
    description: Start the canary before the switch. Without it, the health check after the restart (and the
      rollback) is the only gate.
    type: bool
    default: true
  canary_ctx_size:
    description: The canary's context (C(--ctx-size)), small so that it fits beside production.
    type: int
    default: 1024
  canary_args:
    description:
      - Arguments appended to the canary's command line, after production's (they win). On a GPU whose memory
        production already fills, C([--n-gpu-layers, "0"]) loads the canary on the CPU.
    type: list
    elements: str
    default: []
  canary_model:
    description: The model a first build's canary loads when no unit serves from C(current) yet.
    type: path
  canary_timeout:
    description: Seconds for the canary to answer C(/health).
    type: int
    default: 300
  health_timeout:
    description: Seconds for each restarted unit to answer C(/health) on the new build (and on the old one after a
      rollback).
    type: int
    default: 120
  rollback_after:
    description: Seconds after which the host undoes the switch by itself unless the activation finished. Longer
      than twice O(health_timeout) plus 30 s (the new build's start, and the old one's after a failed switch).
    type: int
    default: 300
  flag_table:
    description: Check each unit's running command line and environment against the new build's C(--help) first.
    type: bool
    default: true
    version_added: 0.2.0
  sentinel:
    description: Judge the canary of a unit with a promoted config on that config's speculation (see above).
    type: bool
    default: true
    version_added: 0.2.0
  sentinel_margin:
    description: Acceptance (accepted / drafted tokens, 0-1) the canary may lose to production on the same prompts.
    type: float
    default: 0.05
    version_added: 0.2.0
  sentinel_mean_len_margin:
    description: Mean accepted length (tokens) the canary may lose to production, where both counters are clean.
    type: float
    default: 0.25
    version_added: 0.2.0
  sentinel_speed_margin:
    description: Fraction of production's decode rate (median over prompts) the canary may lose; C(0) does not judge
      speed. Not judged where O(canary_args) put the canary on other hardware (C(--n-gpu-layers 0)).
    type: float
    default: 0.2
    version_added: 0.2.0
  sentinel_prompts:
    description: Prompts per shape of the promoted run's traffic.
    type: int
    default: 4
    version_added: 0.2.0
  sentinel_timeout:
    description: Seconds the sentinel may take per unit (each request's timeout, and added to the canary's lifetime
      and the units' lock).
    type: int
    default: 600
    version_added: 0.2.0
  sentinel_traffic:
    description:
      - The operator's declared traffic the promoted run was measured on, as M(llmfleet.specdec.spec_bench)'s
        C(traffic) takes it (C(name), C(content), C(n_predict)); role C(llamacpp_build) passes
        C(llamacpp_build_sentinel_traffic) read on the controller. Kept out of logs.
    type: list
    elements: dict
    default: []
    version_added: 0.2.0
  speed_after_switch:
    description: Where the canary runs on other hardware, measure the promoted config's speed on the unit after the
      switch (role C(llamacpp_build) sets it on the rollout's first host only).
    type: bool
    default: true
    version_added: 0.2.0
  accept_slower:
    description: Go ahead past a sentinel regression; the verdict is recorded in the build record with
      C(accepted_slower=true).
    type: bool
    default: false
    version_added: 0.2.0
  keep_what_runs:
    description:
      - For a switch forced past a change pending on disk (a unit's running process differs from what a restart
        would start, as C(serving_unit_info) reports it). Before the switch, each unit's environment as it runs is
        kept as the runtime drop-in C(/run/systemd/system/<unit>.d/zy-llmfleet-specdec-ran.conf) (the binary is
        not kept, it changes on purpose), so that the new build, the undo of a failed switch and the dead-man all
        start with what ran and not with the pending change. It is removed, with a C(daemon-reload) and no
        restart, once the units answered health; the change stays pending on disk, as before.
      - A unit that answers on neither build keeps its drop-in (what ran is still what its next start should
        get); C(rollback.yml) leaves it alone, and a reboot or C(rm) followed by C(systemctl daemon-reload)
        removes it once the unit is fixed.
    type: bool
    default: false
    version_added: 0.2.0
extends_documentation_fragment:
  - llmfleet.specdec.attributes
attributes:
  check_mode:
    support: full
    details: Says whether the link would move and which units would restart; starts no canary.
  diff_mode:
    support: none
  idempotent:
    support: full
notes:
  - Runs as root; needs systemd (C(systemd-run), C(systemctl), C(journalctl)).
  - The canary takes production's command line with C(--host 127.0.0.1 --port <free port> --ctx-size N) appended.
    llama-server reads its arguments in order, so these replace production's own.
author:
  - llmfleet maintainers (@llmfleet)
"""

EXAMPLES = r"""
- name: Make b10133-cuda current after a canary with production's model; back if llama-server does not come up
  llmfleet.specdec.llamacpp_activate:
    root: /opt/llama.cpp
    name: b10133-cuda
    units: [llama-server]
    facts_file: /etc/llmfleet-specdec/llamacpp-build.json
    facts: "{{ build_record }}"
    health_timeout: 600
    rollback_after: 1500
  become: true
"""

RETURN = r"""
previous:
  description: Where C(current) pointed before.
  returned: always
  type: str
current:
  description: The build C(current) points at now.
  returned: success
  type: str
canary:
  description: Each canary that answered (unit, port, pid, seconds, its command line).
  returned: success
  type: list
  elements: dict
restarted:
  description: The units restarted on the new build.
  returned: success
  type: list
  elements: str
would_restart:
  description: The units that serve from C(current) and restart when it moves.
  returned: when the link moves
  type: list
  elements: str
kept_what_ran:
  description: The units whose environment was kept as the way back (O(keep_what_runs)).
  returned: when the switch restarted units
  type: list
  elements: str
notes:
  description: Units left alone and why; an interrupted activation that was undone first.
  returned: always
  type: list
  elements: str
rolled_back:
  description: On failure after the switch, whether C(current) was pointed back.
  returned: failure
  type: bool
healthy:
  description: On failure after the switch, whether production answered on the previous build.
  returned: failure
  type: bool
sentinel:
  description: Each judged canary's verdict (unit, build, config, both sides' acceptance, mean accepted length and
    per position, the difference and its interval, speed ratio, regressions, whether it was accepted slower); on
    failure, the refused one.
  returned: when a canary was judged
  type: raw
sentinel_plan:
  description: Check mode with the sentinel - per unit, whether its canary is judged on acceptance and speed, on
    acceptance with the speed measured after the switch, or not at all, and why.
  returned: check mode
  type: list
  elements: str
refused:
  description: On a flag-table refusal, what the new build does not take.
  returned: failure
  type: list
  elements: str
journal:
  description: The failed unit's or canary's last journal lines.
  returned: failure
  type: list
  elements: str
"""

import sys

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.llmfleet.specdec.plugins.module_utils.bench._sentinel import Sentinel
from ansible_collections.llmfleet.specdec.plugins.module_utils.build._activate import ActivateError, run_activation
from ansible_collections.llmfleet.specdec.plugins.module_utils.common._errors import SpecdecError
from ansible_collections.llmfleet.specdec.plugins.module_utils.systemd._systemd import rollback_interpreter

ARGUMENT_SPEC = dict(
    root=dict(type="path", required=True),
    name=dict(type="str", required=True),
    current=dict(type="path"),
    binary=dict(type="str", default="bin/llama-server"),
    units=dict(type="list", elements="str", default=[]),
    facts_file=dict(type="path"),
    facts=dict(type="dict"),
    canary=dict(type="bool", default=True),
    canary_ctx_size=dict(type="int", default=1024),
    canary_args=dict(type="list", elements="str", default=[]),
    canary_model=dict(type="path"),
    canary_timeout=dict(type="int", default=300),
    health_timeout=dict(type="int", default=120),
    rollback_after=dict(type="int", default=300),
    state_dir=dict(type="path", default="/var/lib/llmfleet-specdec"),
    lock_wait=dict(type="int", default=0),
    keep_what_runs=dict(type="bool", default=False),
    flag_table=dict(type="bool", default=True),
    sentinel=dict(type="bool", default=True),
    sentinel_margin=dict(type="float", default=0.05),
    sentinel_mean_len_margin=dict(type="float", default=0.25),
    sentinel_speed_margin=dict(type="float", default=0.2),
    sentinel_prompts=dict(type="int", default=4),
    sentinel_timeout=dict(type="int", default=600),
    sentinel_traffic=dict(type="list", elements="dict", default=[], no_log=True),
    accept_slower=dict(type="bool", default=False),
    speed_after_switch=dict(type="bool", default=True),
)


def sentinel_of(params: dict) -> Sentinel | None:
    """The speculation sentinel the activation calls (bench: the build package never measures)."""
    if not params.get("sentinel") or not params.get("canary", True):
        return None
    return Sentinel(state_dir=params["state_dir"], margin=params["sentinel_margin"],
                    mean_len_margin=params["sentinel_mean_len_margin"], speed_margin=params["sentinel_speed_margin"],
                    prompts=params["sentinel_prompts"], traffic=params["sentinel_traffic"],
                    accept_slower=params["accept_slower"], timeout=params["sentinel_timeout"],
                    canary_args=params["canary_args"] or [])


def main() -> None:
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    try:
        python = sys.executable if module.check_mode else rollback_interpreter(sys.executable)
        sentinel = sentinel_of(module.params)  # in check mode it only reads the evidence: the plan
        result = run_activation(module.params, run=module.run_command, check_mode=module.check_mode, python=python,
                                sentinel=sentinel)
    except ActivateError as exc:
        module.fail_json(msg=str(exc), **exc.details)
    except SpecdecError as exc:
        module.fail_json(msg=str(exc))
    module.exit_json(**result)


if __name__ == "__main__":
    main()
