#!/usr/bin/python
# Copyright: (c) 2026, llmfleet.specdec contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# Documentation of the spec_report action: the A/B run judged on the controller into JSON, Markdown, PNGs and history.
from __future__ import annotations

DOCUMENTATION = r"""
---
module: spec_report
short_description: Judge an A/B run of speculative-decoding configs and write its report on the controller
version_added: 0.1.0
description:
  - Runs on the controller (an action plugin); nothing runs on the host. It takes the run the A/B
    role collected, one spec_bench C(bench) document per config and round, and judges it.
  - B(Losslessness.) At temperature 0 every config's text on every prompt must equal the baseline's.
    Any difference marks the config C(INVALID), a correctness bug and never a winner, with the first
    diverging character shown. An empty answer makes that comparison vacuous and is reported as such.
  - B(Lossless or lossy by design.) That holds for speculation. A config that changes the model file, a KV
    cache type, batch/ubatch, the slot split or backend placement (or declares C(lossless) false) is lossy by
    design - its speed is judged as usual and, in place of the lossless gate, its texts are measured against
    the baseline's per shape (identical prompts, mean first difference, token agreement); it is never
    recommended automatically. A config that adds speculation to such a knob is lossless against the run's
    config with the same knobs and no speculation, when there is one.
  - B(Proposer engaged.) A config whose effective chain is not empty but whose C(draft_n) stays 0 where it
    should draft (a model-backed drafter on every shape, an n-gram lookup on C(echo)) is C(NOT ENGAGED),
    whatever its flags say. A config with an empty chain and no drafts is the C(NEGATIVE CONTROL); it
    should show no difference from the baseline, and the report warns when it does.
  - B(Per shape.) The median decode tok/s (each request's C(predicted_per_second)), the acceptance
    (sum of C(draft_n_accepted) / sum of C(draft_n)), the mean accepted length (tokens per target pass,
    from C(/metrics) deltas when present), and the speedup against the baseline with a 95 % t-interval
    over rounds. Each round gives every config its own server start, so a round is the unit of
    replication. Per config and round a shape is the mean of the log per-request rates; each candidate
    round is paired with the baseline's round; the interval is Student's t with rounds - 1 degrees of
    freedom on the mean paired log ratio. Verdict C(win) when the whole interval lies above 1.02,
    C(loss) when below 1/1.02 (a 2 % practical-equivalence margin), otherwise C(no difference). Fewer
    than 2 rounds gives C(too few rounds to call), fewer than 2 requests per side in a round
    C(too few requests to call). Every verdict carries its C(n), rounds x requests per side per round.
  - B(Partial runs.) An entry with C(bench) null and an C(error) (the candidate never became healthy, or
    crashed) is kept and reported. A config with no measurement is C(FAILED); one that misses a round or
    whose bench came back with an error is C(INCOMPLETE). Neither is ever a winner.
  - B(Prediction.) The break-even arithmetic of M(llmfleet.specdec.spec_breakeven) with p solved from the
    measured mean accepted length at depth K, the target's step t_s from the baseline's median rate, and
    the drafter's step d_s measured on the host when the run has a drafter probe (a config without
    speculation whose C(LLAMA_ARG_MODEL) is another config's C(LLAMA_ARG_SPEC_DRAFT_MODEL), status
    C(DRAFTER PROBE), never compared or recommended), else O(d_s_ms) when given, else the d_s the
    measured rate implies. The report says where each input came from.
  - B(Recommendation.) Only from a traffic mix the run declares (C(mix), a weight per shape, its share of
    generated tokens), combined time-weighted (the weighted harmonic mean of the rates). Only C(OK)
    configs are candidates, and one must beat the baseline over the mix with its whole interval above 1.02,
    judged with the same t-interval over rounds; otherwise the answer is to keep the baseline. Without a
    mix the per-shape table is the answer.
  - >-
    Writes C(<results_dir>/<host>/<run_id>/report.json) (schema C(llmfleet.specdec/ab-report/1): configs,
    environment, every raw request, every verdict), C(report.md), and the plots: C(verdicts_forest.png) (the
    confirmatory verdicts: each candidate's speedup with its simultaneous interval on a log axis, the equivalence
    band, the smallest findable effect), C(per_shape_forest.png) (the same per shape, exploratory),
    C(tok_s_per_shape.png) (rates with intervals at the run's pooled residual), C(acceptance_by_position.png)
    (up to each config's depth) and, where the screen ran, C(screen_predicted_vs_measured.png) (each screened
    candidate's predicted speedup beside what the rounds measured), and adds the run's line to
    C(<results_dir>/<host>/history.jsonl) (replacing the line of an earlier report of the same run). Files
    whose bytes would not change are not rewritten.
  - Without matplotlib on the controller the PNGs are skipped with a warning; the rest is written.
  - The per-host summary is also returned as job stats under O(stats_key), so AWX shows it.
options:
  run:
    description:
      - The run, as the A/B role builds it.
      - C(host) (defaults to the inventory host), C(baseline) (the config every other one is measured against),
        C(entries), and optionally C(configs), C(mix), C(run_id), C(started), C(finished), C(error),
        C(environment).
      - C(entries) is a list of V({config, round, order, server_config, bench, error}), one per config and
        round; C(bench) is spec_bench's document (schema C(llmfleet.specdec/bench/1)) or null, C(error) a
        string or null. A bench that comes with an error keeps the requests it measured before the failure.
      - C(configs) is a list of V({name, chain, server_config}), optionally with C(k) (the draft depth for the
        prediction) and C(drafter) (the spec type whose cost per round the prediction charges). C(chain) is the
        effective chain (spec_lint's C(effective_chain)), V([]) for none, null when unknown. Configs that only
        appear in C(entries) are added with an unknown chain.
      - >-
        C(mix) maps shape to weight (share of generated tokens), for example V({prose: 0.7, echo: 0.3}).
      - C(run_id) names the run's folder; without it the id is the compact C(started) time and a digest of
        the entries, so the same run always lands in the same folder.
      - C(error) says why the run stopped early, if it did; the report shows it above everything.
    type: dict
    required: true
  results_dir:
    description:
      - Where the reports go on the controller; a relative path is taken from the playbook's directory.
    type: path
    default: results
  d_s_ms:
    description:
      - The drafter's step time in milliseconds for the prediction, one number for every config or a
        mapping of config name to number.
      - Without it the prediction reports the d_s that each measured rate implies.
    type: raw
  plots:
    description: Draw the PNG plots (needs matplotlib on the controller).
    type: bool
    default: true
  history:
    description: Add the run's line to the host's C(history.jsonl).
    type: bool
    default: true
  environment:
    description:
      - Facts about the environment to keep with the run (llama.cpp build, GPU facts, model digests).
        Merged over the run's own C(environment); the controller's versions are added under C(controller).
    type: dict
    default: {}
  bootstrap_resamples:
    description:
      - Bootstrap resamples per interval of the old request-level method, kept in the judging code for
        comparison (the verdicts use the t-interval over rounds).
    type: int
    default: 2000
  seed:
    description: Seed of the bootstrap draws; the same run and seed give the same intervals and the same files.
    type: int
    default: 0
  stats_key:
    description:
      - Return the per-host summary as job stats under this key (aggregated per host, as
        C(ansible.builtin.set_stats) with C(per_host=false) and C(aggregate=true) would). Empty to return none.
    type: str
    default: specdec_ab
extends_documentation_fragment:
  - llmfleet.specdec.attributes
attributes:
  check_mode:
    support: full
    details: Writes nothing; returns the files it would write, which of them would change, and every verdict.
  diff_mode:
    support: none
  idempotent:
    support: full
    details: The same run gives the same bytes, and its history line replaces itself instead of repeating.
  action:
    description: Runs on the controller as an action plugin.
    support: full
notes:
  - The statistics are stdlib-only and deterministic; matplotlib (a controller requirement) is needed only for the PNGs.
seealso:
  - module: llmfleet.specdec.spec_breakeven
author:
  - llmfleet maintainers (@llmfleet)
"""

EXAMPLES = r"""
- name: Judge the A/B run and write its report on the controller
  llmfleet.specdec.spec_report:
    run:
      host: "{{ inventory_hostname }}"
      baseline: baseline
      mix: {prose: 0.6, echo: 0.3, identity: 0.1}
      configs:
        - {name: baseline, chain: [], server_config: {}}
        - {name: draft-n3, chain: [draft-simple], k: 3, server_config: {LLAMA_ARG_SPEC_DRAFT_N_MAX: "3"}}
      entries: "{{ spec_ab_entries }}"
    results_dir: "{{ playbook_dir }}/results"
    d_s_ms: 12
  register: spec_ab_report

- name: Show the per-shape verdicts
  ansible.builtin.debug:
    var: spec_ab_report.summary

- name: Stop when the run says a config broke losslessness
  ansible.builtin.assert:
    that: spec_ab_report.judged.configs.values() | selectattr('status', 'eq', 'INVALID') | list | length == 0
    fail_msg: "{{ spec_ab_report.summary | join('\n') }}"
"""

RETURN = r"""
report_dir:
  description: The run's folder on the controller.
  returned: always
  type: str
  sample: /srv/ansible/results/frank-dragoon/20261129T120000Z
files:
  description: Every file of the report (written or, in check mode, that would be written), history included.
  returned: always
  type: list
  elements: str
written:
  description: The files whose bytes changed (in check mode, would change).
  returned: always
  type: list
  elements: str
run_id:
  description: The run's id (its folder name).
  returned: always
  type: str
host:
  description: The host the run measured.
  returned: always
  type: str
summary:
  description: The per-shape verdict table as lines, then the recommendation line.
  returned: always
  type: list
  elements: str
  sample:
    - "shape | config | status | tok/s | speedup [95 % CI] | verdict | n"
    - "prose | draft-n3 | OK | 62.7 | 1.60x [1.55, 1.63] | win | 3x2"
recommendation:
  description:
    - Null without a traffic mix. Otherwise C(config) (the recommended config, or the baseline with
      C(keep_baseline) true, or null with a C(reason) when the data cannot carry one), its C(speedup) over
      the mix with C(ci_low) and C(ci_high), every C(candidates) row and every C(excluded) config with why.
  returned: always
  type: dict
judged:
  description:
    - Every verdict. C(configs) maps each config to its C(status) (BASELINE, OK, NEGATIVE CONTROL,
      INCOMPLETE, NOT ENGAGED, INVALID, FAILED or DRAFTER PROBE), C(problems), C(lossless) (true, false,
      C(vacuous) or C(reference)), C(first_divergence), C(engaged), C(acceptance_by_position) (every
      position the server exports), C(positions_drafted) (how many of them the report shows) and
      C(shapes), one row per shape with C(tok_s) and its interval, C(median_tok_s), C(speedup),
      C(ci_low), C(ci_high), C(verdict), C(n) (rounds x requests per side per round), C(acceptance),
      C(mean_accepted_len) and C(n_requests). C(judging) says how the config was judged (C(lossless) or
      C(lossy-by-design), why, and its C(reference)); C(quality) holds the quality numbers per shape and
      C(overall) for a config that changes the numbers (null otherwise).
    - C(statistics) names the method, the interval level, the equivalence margin and the minimums.
    - C(prediction) is the prediction-against-measurement table; C(warnings) what the run itself casts doubt on.
  returned: always
  type: dict
plot_notes:
  description: Why a plot was not drawn (no matplotlib, or nothing to plot).
  returned: always
  type: list
  elements: str
stats:
  description: The per-host summary also returned as job stats, ready for M(ansible.builtin.set_stats).
  returned: always
  type: dict
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.llmfleet.specdec.plugins.module_utils.common._report_args import ARGUMENT_SPEC


def main() -> None:
    # spec_report is an action plugin: the controller runs it, so this only runs when it is misused.
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True, bypass_checks=True)
    module.fail_json(msg="llmfleet.specdec.spec_report runs on the controller as an action plugin; "
                         "it cannot run on a host (was it called through a path that bypasses action plugins?)")


if __name__ == "__main__":
    main()
