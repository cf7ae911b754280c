#!/usr/bin/python
# Copyright: (c) 2026, llmfleet.specdec contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# Documentation of the fleet_report action: the hosts' A/B reports by GPU family into one report on the controller.
from __future__ import annotations

DOCUMENTATION = r"""
---
module: fleet_report
short_description: One report across the hosts of a multi-host A/B run, grouped by GPU family
version_added: 0.2.0
description:
  - Runs on the controller (an action plugin); nothing runs on the hosts. It takes, per host, its inventory
    groups and the A/B report (C(report.json), schema C(llmfleet.specdec/ab-report/1)) its run left, and
    writes one report across them.
  - B(GPU family.) A host's family is its one inventory group whose name starts with O(family_prefix)
    (the example inventory has C(gpu_gfx1151) and C(gpu_sm86)), or the C(family) given for it. A host in two
    such groups is an error naming both; a host in none is listed under C((no GPU family group)) and never
    compared, since its GPU is not known to match any other.
  - B(Pick per shape.) Per host and traffic shape, the C(OK) config with a C(win) there and the largest
    speedup, else C(keep) the baseline.
  - B(Agreement.) The hosts of one family should give the same answer (same GPU, build and model). The family
    is flagged C(DISAGREE) when their picks on a shape, their recommendation over the mix, a config's status
    (for example C(INVALID) on one host and C(OK) on another) or a verdict's direction (C(win) on one host,
    C(loss) on another) differ; each difference is listed with the hosts' values. Only shapes and configs
    every compared host measured are compared; a host whose run stopped early or left no report is shown
    and left out of the comparison.
  - Writes C(<results_dir>/_fleet/<name>/fleet.json) (schema C(llmfleet.specdec/fleet-report/1)),
    C(fleet.md) and C(fleet_picks.png) (without matplotlib the PNG is skipped with a note). Files whose
    bytes would not change are not rewritten.
options:
  hosts:
    description:
      - One entry per host, each V({host, groups, report}), optionally with C(family) (overrides the groups)
        and C(error) (why there is no report, when C(report) is null).
      - C(build_era), optional, is the host's unit's build era (the build that measured its promoted config, the
        build it runs, the build sentinel's verdict on that upgrade) as C(playbooks/fleet_report.yml) reads it; the
        report shows it per host.
      - C(report) is the parsed C(report.json) of the host's run; its C(host) must be the entry's C(host).
    type: list
    elements: dict
    required: true
  results_dir:
    description: The A/B results directory; the report goes under C(_fleet/<name>/) in it.
    type: path
    default: results
  name:
    description: The fleet report's folder name, for example the run's time stamp (one path component).
    type: str
    required: true
  family_prefix:
    description: The prefix of the inventory groups that name GPU families.
    type: str
    default: gpu_
  plots:
    description: Draw C(fleet_picks.png) (needs matplotlib on the controller).
    type: bool
    default: true
  fail_on_disagreement:
    description: Fail (after writing the report) when a family's hosts disagree, so a scheduled job notifies.
    type: bool
    default: false
  stats_key:
    description: Return the families' states as job stats under this key (AWX shows them). Empty to return none.
    type: str
    default: specdec_fleet
extends_documentation_fragment:
  - llmfleet.specdec.attributes
attributes:
  check_mode:
    support: full
    details: Writes nothing; returns the files it would write and which of them would change.
  diff_mode:
    support: none
  idempotent:
    support: full
    details: The same reports give the same bytes.
  action:
    description: Runs on the controller as an action plugin.
    support: full
seealso:
  - module: llmfleet.specdec.spec_report
author:
  - llmfleet maintainers (@llmfleet)
"""

EXAMPLES = r"""
- name: One report across the hosts that just ran the A/B
  llmfleet.specdec.fleet_report:
    name: "{{ now(utc=true, fmt='%Y%m%dT%H%M%SZ') }}"
    results_dir: "{{ playbook_dir }}/../results"
    hosts: >-
      {{ ansible_play_hosts | map('extract', hostvars, 'specdec_fleet_entry') | list }}
  run_once: true

- name: A family whose hosts disagree fails the job
  llmfleet.specdec.fleet_report:
    name: nightly
    hosts:
      - {host: frank-zealot, groups: [fleet, gpu_sm86], report: "{{ zealot_report }}"}
      - {host: frank-zealot-2, groups: [fleet, gpu_sm86], report: "{{ zealot2_report }}"}
    fail_on_disagreement: true
"""

RETURN = r"""
report_dir:
  description: Where the fleet report is (or would be) written.
  returned: always
  type: str
files:
  description: The files of the report.
  returned: always
  type: list
  elements: str
written:
  description: The files that were (in check mode, would be) written because their bytes changed.
  returned: always
  type: list
  elements: str
summary:
  description: One line per GPU family, its state and its hosts, with the disagreements.
  returned: always
  type: list
  elements: str
families:
  description:
    - Per family C(family), C(hosts), C(compared), C(left_out), C(state) (C(agree), C(DISAGREE),
      C(one host) or C(not compared)) and C(disagreements).
  returned: always
  type: list
  elements: dict
disagreeing:
  description: The families whose hosts disagree.
  returned: always
  type: list
  elements: str
without_report:
  description: The hosts with no report or a run that stopped early.
  returned: always
  type: list
  elements: str
unjudged_upgrades:
  description:
    - The hosts whose unit runs another build than the one its promoted config was measured on, an upgrade the build
      sentinel did not judge (each host's C(build_era) in C(fleet.json) says more).
  returned: always
  type: list
  elements: str
plot_notes:
  description: Why the plot was not drawn.
  returned: always
  type: list
  elements: str
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.llmfleet.specdec.plugins.module_utils.common._fleet_args import ARGUMENT_SPEC


def main() -> None:
    # fleet_report is an action plugin: the controller runs it, so this only runs when it is misused.
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True, bypass_checks=True)
    module.fail_json(msg="llmfleet.specdec.fleet_report runs on the controller as an action plugin; "
                         "it cannot run on a host (was it called through a path that bypasses action plugins?)")


if __name__ == "__main__":
    main()
