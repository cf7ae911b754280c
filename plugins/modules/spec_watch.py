#!/usr/bin/python
# Copyright: (c) 2026, llmfleet.specdec contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# Is production still the winner? Compare a unit's promoted evidence with the host now; changes nothing.
from __future__ import annotations

DOCUMENTATION = r"""
---
module: spec_watch
short_description: Say whether a promoted speculative-decoding config still holds - build, models, live config, acceptance, age
version_added: 0.2.0
description:
  - Reads the evidence of the unit's last promotion (C(<state_dir>/promoted/<unit>.json), written by
    C(playbooks/promote.yml)) and compares it with the host now. Nothing is changed, in or out of check mode, and
    C(changed) is always false.
  - The build - the llama.cpp build record (role C(llmfleet.specdec.llamacpp_build)) and the sha256 of the
    executable the unit runs - against those recorded while the A/B measured (the report's
    C(environment.measured_on)).
  - The models - each model file of the promoted config (C(LLAMA_ARG_MODEL), the draft model, C(-m)/C(-md) in
    C(LLAMA_EXTRA_ARGS)) - by size, the sha256 of its GGUF header, the sha256 of three 1 MiB samples of its tensor
    data and its tokenizer fingerprint.
  - The live config - the running process's environment (C(/proc/<MainPID>/environ)) and the environment the
    unit's next start would read from its env files - against the promoted config's rendering, variable by
    variable; an A/B candidate drop-in left in C(/run) without a running A/B.
  - Live acceptance and mean accepted length over a window - two reads of C(/metrics) O(window) seconds apart from
    the same process - against the lowest and highest the A/B measured for the promoted config over its rounds
    and shapes, with a tolerance; a proposer that drafts nothing while tokens are generated.
  - The age of the measurement against O(max_age_days).
  - While an A/B run holds the unit's lock (a lock record whose expiry lies ahead) the live config and acceptance
    belong to its candidate and are not judged (finding C(ab-in-progress)). A lock past its expiry, without one,
    or a lock file that is no record is what a killed run leaves (finding C(stale-lock)); production is judged as
    usual, and a candidate override left in C(/run) is still found (C(override-active)).
extends_documentation_fragment:
  - llmfleet.specdec.attributes
  - llmfleet.specdec.attributes.read_only
options:
  unit:
    description: The production unit, with or without C(.service).
    type: str
    default: llama-server
  state_dir:
    description: The host's state directory (the A/B role's C(spec_ab_state_dir)).
    type: path
    default: /var/lib/llmfleet-specdec
  endpoint:
    description: Base URL of the unit's server, as seen from the host; its C(/metrics) must be on (C(--metrics)).
    type: str
    default: http://127.0.0.1:8080
  validate_certs:
    description: Verify TLS certificates of an https O(endpoint).
    type: bool
    default: true
  build_record:
    description:
      - The build record to compare. Default, the path recorded with the evidence, else
        C(/etc/llmfleet-specdec/llamacpp-build.json).
    type: path
  window:
    description:
      - Seconds between the two reads of C(/metrics). Live traffic must flow in between for acceptance to be judged.
      - V(0) skips live acceptance (finding C(window-skipped)).
    type: float
    default: 300
  min_tokens:
    description: Tokens the server must generate in the window before a proposer that drafts nothing is called stopped.
    type: int
    default: 64
  min_draft_tokens:
    description: Drafted tokens the window must hold before acceptance is judged.
    type: int
    default: 50
  acceptance_tolerance:
    description: How far (absolute share) live acceptance may fall outside the measured band before it is a finding.
    type: float
    default: 0.05
  mean_len_tolerance:
    description: How far (tokens) the live mean accepted length may fall outside the measured band.
    type: float
    default: 0.25
  max_age_days:
    description: The measurement may be this many days old; V(0) never calls it too old.
    type: float
    default: 30
  host:
    description:
      - Deprecated, removed in 1.0.0 - the module only printed it. Ansible's own output names the host.
      - Still accepted, with a deprecation warning; given, it starts RV(summary) as before. Omitted, RV(summary)
        starts with the unit's name.
    type: str
  textfile_dir:
    description:
      - Also write the result for Prometheus, as C(<textfile_dir>/llmfleet_specdec_<unit>.prom) in the text format
        that node_exporter's textfile collector reads (give its C(--collector.textfile.directory), for example
        C(/var/lib/node_exporter/textfile_collector)). Written atomically (a temporary file in the same directory,
        then a rename), mode C(0644); not written in check mode.
      - "Series, each labelled with C(unit): C(llmfleet_specdec_watch_timestamp_seconds), C(llmfleet_specdec_promoted_info)
        (labels C(config), C(run_id)), C(llmfleet_specdec_measured_acceptance) and
        C(llmfleet_specdec_measured_mean_accepted_length) (label C(bound): C(low), C(high)),
        C(llmfleet_specdec_live_acceptance), C(llmfleet_specdec_live_mean_accepted_length),
        C(llmfleet_specdec_live_window_draft_tokens), C(llmfleet_specdec_evidence_age_seconds),
        C(llmfleet_specdec_finding) (labels C(finding), C(severity); 1 or 0 for every kind) and
        C(llmfleet_specdec_drift)."
      - Example alert rules are in C(examples/prometheus/llmfleet-specdec-rules.yml) of the collection.
      - Writing it is the watch's report, not a change to the host's configuration, so C(changed) stays false.
    type: path
notes:
  - Needs root (C(become)) to read the state directory and the unit's process environment.
  - A promotion measured before the collection recorded C(environment.measured_on) gives the finding
    C(evidence-incomplete); re-run the A/B and promote to get build and model checks.
seealso:
  - module: llmfleet.specdec.spec_snapshot
author:
  - llmfleet maintainers (@llmfleet)
"""

EXAMPLES = r"""
- name: Is production still the winner?
  llmfleet.specdec.spec_watch:
    unit: llama-server
    window: 300
    max_age_days: 30
  become: true
  register: watch

- name: Fail when anything drifted
  ansible.builtin.fail:
    msg: "{{ watch.findings | selectattr('severity', 'eq', 'drift') | map(attribute='message') | list }}"
  when: watch.findings | selectattr('severity', 'eq', 'drift') | list | length > 0
"""

RETURN = r"""
findings:
  description:
    - One entry per finding, each with C(kind), C(severity) (C(drift) - production may no longer be the winner;
      C(info) - something could not be judged), C(message), C(action) (what to do) and C(numbers).
    - Drift kinds are C(build-changed), C(binary-changed), C(model-changed), C(model-missing),
      C(live-config-differs), C(pending-config-differs), C(override-active), C(unit-not-running),
      C(acceptance-out-of-band), C(mean-length-out-of-band), C(proposer-stopped), C(evidence-too-old),
      C(no-evidence), C(evidence-incomplete); info kinds C(window-skipped), C(too-little-traffic),
      C(ab-in-progress), C(restarted-in-window), C(stale-lock).
  returned: always
  type: list
  elements: dict
  sample:
    - kind: acceptance-out-of-band
      severity: drift
      message: "live acceptance 31.0 % (62 of 200 drafted tokens in 300 s) is below what the A/B measured"
      action: "re-run the A/B (playbooks/spec_ab.yml) and promote its winner (playbooks/promote.yml)"
      numbers: {live_acceptance: 0.31, measured_low: 0.82, measured_high: 0.97, tolerance: 0.05}
textfile:
  description: With O(textfile_dir), the C(path) of the textfile and whether it was C(written) (not in check mode).
  returned: when O(textfile_dir) is set
  type: dict
evidence_age_seconds:
  description: Seconds since the A/B the promotion rests on finished.
  returned: when there is a promotion
  type: float
summary:
  description:
    - One line - the unit (or the deprecated O(host) when given), the promoted config and C(no drift), or C(DRIFT)
      and the drift kinds.
  returned: always
  type: str
config:
  description: The promoted config's name; null without a promotion.
  returned: always
  type: str
run_id:
  description: The A/B run the promotion came from.
  returned: always
  type: str
measured:
  description: What the A/B measured for the promoted config - C(acceptance_low)/C(acceptance_high),
    C(mean_len_low)/C(mean_len_high) over its (round, shape) cells, the pooled values, its chain.
  returned: when there is a promotion
  type: dict
live:
  description: The unit's main process, its model paths and the window's two counter reads and their difference.
  returned: when the unit runs
  type: dict
build_era:
  description:
    - The unit's build era - C(measured_on) (the build its evidence was measured on), C(runs) (the build it runs now),
      C(same_build), C(sentinel) (when the build record holds the build sentinel's verdict for this unit, the upgrade
      was judged - its build, config, both acceptances, regressions and C(accepted_slower)) and C(line) in words.
  returned: when the evidence recorded what it was measured on
  type: dict
now:
  description: The host's build record, binary and model fingerprints now (the schema C(spec_snapshot) returns).
  returned: when there is a promotion
  type: dict
"""

import time
import traceback

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.llmfleet.specdec.plugins.module_utils.common._errors import SpecdecError
from ansible_collections.llmfleet.specdec.plugins.module_utils.watch import _drift_host, _drift_textfile

ARGUMENT_SPEC = dict(
    unit=dict(type="str", default="llama-server"),
    state_dir=dict(type="path", default="/var/lib/llmfleet-specdec"),
    endpoint=dict(type="str", default="http://127.0.0.1:8080"),
    validate_certs=dict(type="bool", default=True),
    build_record=dict(type="path"),
    window=dict(type="float", default=300),
    min_tokens=dict(type="int", default=64, no_log=False),
    min_draft_tokens=dict(type="int", default=50, no_log=False),
    acceptance_tolerance=dict(type="float", default=0.05),
    mean_len_tolerance=dict(type="float", default=0.25),
    max_age_days=dict(type="float", default=30),
    host=dict(type="str", removed_in_version="1.0.0", removed_from_collection="llmfleet.specdec"),
    textfile_dir=dict(type="path"),
)


def main() -> None:
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    try:
        if module.params["textfile_dir"]:
            _drift_textfile.check_directory(module.params["textfile_dir"])
        result = _drift_host.watch(module.params, run=lambda argv: module.run_command(list(argv)))
        if module.params["textfile_dir"]:
            text = _drift_textfile.render(result, time.time())
            result["textfile"] = _drift_textfile.write(module.params["textfile_dir"], result["unit"], text,
                                                       check_mode=module.check_mode)
    except SpecdecError as exc:
        module.fail_json(msg=str(exc), exception=traceback.format_exc())
    module.exit_json(changed=False, **result)


if __name__ == "__main__":
    main()
