#!/usr/bin/python
# Copyright: (c) 2026, llmfleet.specdec contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# Is a drafter worth it? The field notes' break-even arithmetic against the incumbent, with step 0 read from /metrics.
from __future__ import annotations

DOCUMENTATION = r"""
---
module: spec_breakeven
short_description: Compute whether a speculative-decoding drafter can beat the incumbent, before deploying it
version_added: 0.1.0
description:
  - Applies the break-even arithmetic of docs/speculative-decoding.md in the collection.
    One round costs O(d_s) per drafter pass plus
    V(1.1) times O(t_s) for verifying K+1 tokens in one target pass; a round commits
    A = (1 - p^(K+1)) / (1 - p) tokens on average; the drafter's rate is A / round time.
  - Solves exactly (bisection) for the break-even acceptance p at each depth in O(ks) against the
    incumbent's rate, states when no p can pay, and gives the rates over the realistic
    acceptance O(band) with a verdict (C(win), C(loss) or C(depends on p)).
  - Step 0 first. With O(endpoint), reads the server's own speculation counters from its
    Prometheus C(/metrics) (llama.cpp C(llamacpp:spec_decode_*), vLLM C(vllm:spec_decode_*)).
    When the target already drafts, the baseline is that incumbent (commit per round
    = 1 + accepted / drafts), not plain decoding.
  - >-
    Every input in the result carries its C(source) (C(given), C(derived: ...), C(measured: ...),
    C(default: ...)) so the report says where each number came from.
  - Only reads; changes nothing anywhere.
options:
  t_s:
    description:
      - The target's step time in milliseconds (one forward pass).
      - Leave it out and give O(client_rate) to derive it as t_s = 1 / (client_rate / commit per round).
    type: float
  d_s:
    description:
      - The drafter's step time in milliseconds (one drafter pass), for example from llama.cpp's
        per-task eval time lines for the draft model on the same box.
      - Not needed for an C(ngram-*) O(drafter), which runs no model.
    type: float
  incumbent_rate:
    description:
      - The incumbent's decode rate in tokens per second, as a client sees it.
      - Defaults to O(client_rate) when that is given, otherwise to commit-per-round / O(t_s).
    type: float
  client_rate:
    description:
      - The decode rate, in tokens per second, that the operator actually sees at the client with
        the current setup. Engine-internal decode-only numbers run about 1.7-2x optimistic.
    type: float
  commit_per_round:
    description:
      - Tokens the incumbent commits per target pass (1 when it does not speculate).
      - Overrides what O(endpoint) measured; without either, plain decoding (V(1)) is assumed and said so.
    type: float
  ks:
    description: Draft depths K to evaluate.
    type: list
    elements: int
    default: [1, 3, 7]
  band:
    description: Acceptance probabilities of the realistic band (the honest 40-60 % for a matched pair;
      see docs/speculative-decoding.md in the collection).
    type: list
    elements: float
    default: [0.4, 0.5, 0.6]
  drafter:
    description:
      - The candidate's llama.cpp C(--spec-type), for its classification by cost per round.
      - A one-pass block drafter (C(draft-dflash), C(draft-dspark)) costs one O(d_s) per round
        whatever K; C(draft-simple), C(draft-mtp) and C(draft-eagle3) cost K; C(ngram-*) none.
      - Without it the arithmetic charges K drafter passes per round.
    type: str
    choices: [draft-simple, draft-mtp, draft-eagle3, draft-dflash, draft-dspark,
              ngram-simple, ngram-map-k, ngram-map-k4v, ngram-mod, ngram-cache]
  verify_factor:
    description: Cost of verifying K+1 tokens in one target pass, in target steps.
    type: float
    default: 1.1
  endpoint:
    description:
      - Base URL of the running llama-server or vLLM server (or its C(/metrics) URL), to read
        whether it already speculates. llama-server needs C(--metrics).
    type: str
  validate_certs:
    description: Verify TLS certificates for an https O(endpoint).
    type: bool
    default: true
  timeout:
    description:
      - Seconds for the whole C(/metrics) request to O(endpoint), connection and body included.
      - A server that stalls or drips is cut off then.
    type: int
    default: 10
extends_documentation_fragment:
  - llmfleet.specdec.attributes
  - llmfleet.specdec.attributes.read_only
notes:
  - By this arithmetic the worked example of docs/speculative-decoding.md in the collection (t_s 67 ms, d_s 12 ms,
    incumbent 25 tok/s) breaks even near p = 0.75 at K = 3, not the 0.70 sometimes quoted for it. The module computes;
    it does not copy.
  - The counters behind step 0 run from server start; for a clean number read them on a server
    that has served the traffic you care about.
seealso:
  - module: llmfleet.specdec.gpu_info
author:
  - llmfleet maintainers (@llmfleet)
"""

EXAMPLES = r"""
- name: The worked example of docs/speculative-decoding.md, against a 25 tok/s incumbent
  llmfleet.specdec.spec_breakeven:
    t_s: 67
    d_s: 12
    incumbent_rate: 25
    drafter: draft-simple
  register: be

- name: Show the report, in its order
  ansible.builtin.debug:
    var: be.breakeven.summary

- name: Step 0 from the live server, with the rate the operator sees
  llmfleet.specdec.spec_breakeven:
    endpoint: http://127.0.0.1:8080
    client_rate: 25
    d_s: 12
    drafter: draft-simple
  register: be_live

- name: Refuse to deploy a drafter the arithmetic says loses
  ansible.builtin.assert:
    that: be_live.breakeven.realistic.verdict != 'loss'
    fail_msg: "{{ be_live.breakeven.summary | join('\n') }}"
"""

RETURN = r"""
breakeven:
  description: The report, in this order - does the target already draft, break-even p at each K, the realistic
    band, the drafter's class (docs/speculative-decoding.md in the collection explains each).
  returned: success
  type: dict
  contains:
    incumbent:
      description:
        - Step 0. C(speculates) (true, false, or null when nothing said), C(commit_per_round),
          C(rate) in tok/s, where each came from, and the raw C(counters) when O(endpoint) was read.
      type: dict
      sample: {speculates: true, commit_per_round: 1.67, rate: 25.0, rate_source: given, commit_source: "measured: /metrics"}
    breakeven:
      description:
        - One row per K. C(breakeven_p) is null when even p = 1 cannot pay (then C(note) says so),
          0.0 when any acceptance pays.
      type: list
      elements: dict
      sample: [{k: 3, round_time_ms: 109.7, draft_passes: 3, accepted_needed: 2.7425, breakeven_p: 0.7519, rate_at_p1: 36.46}]
    realistic:
      description: Rates over the O(band) for each K, per-K verdicts, the best K at the band's middle, and the overall C(verdict).
      type: dict
      sample: {band: [0.4, 0.5, 0.6], verdict: loss, best_k_at_mid: 3, best_rate_at_mid: 17.09, mid_p: 0.5}
    classification:
      description: The O(drafter)'s class, cost per round, and what it needs to pay (null without O(drafter)).
      type: dict
      sample: {spec_type: draft-simple, class: plain model, cost_per_round: K sequential forwards of the draft model}
    settle_with:
      description: The one measurement that would settle the question.
      type: str
    inputs:
      description: Every input with its C(value) and C(source).
      type: dict
      sample: {t_s: {value: 67.0, source: given}, d_s: {value: 12.0, source: given}}
    summary:
      description: The report as numbered lines.
      type: list
      elements: str
"""

import traceback

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.llmfleet.specdec.plugins.module_utils.bench._breakeven import (
    SPEC_TYPES,
    BreakevenError,
    assess,
    metrics_url,
    parse_spec_counters,
)
from ansible_collections.llmfleet.specdec.plugins.module_utils.bench._endpoint import MAX_REPLY_BYTES as METRICS_CAP
from ansible_collections.llmfleet.specdec.plugins.module_utils.common._errors import SpecdecError
from ansible_collections.llmfleet.specdec.plugins.module_utils.common._http import request

ARGUMENT_SPEC = dict(
    t_s=dict(type="float"),
    d_s=dict(type="float"),
    incumbent_rate=dict(type="float"),
    client_rate=dict(type="float"),
    commit_per_round=dict(type="float"),
    ks=dict(type="list", elements="int", default=[1, 3, 7]),
    band=dict(type="list", elements="float", default=[0.4, 0.5, 0.6]),
    drafter=dict(type="str", choices=list(SPEC_TYPES)),
    verify_factor=dict(type="float", default=1.1),
    endpoint=dict(type="str"),
    validate_certs=dict(type="bool", default=True),
    timeout=dict(type="int", default=10),
)


def read_counters(module: AnsibleModule) -> tuple[dict | None, str]:
    """Step 0: the speculation counters from O(endpoint)'s /metrics, or None without an endpoint."""
    if not module.params["endpoint"]:
        return None, "/metrics"
    url = metrics_url(module.params["endpoint"])
    return parse_spec_counters(fetch_metrics(module, url)), url


def fetch_metrics(module: AnsibleModule, url: str) -> str:
    """The text of ``url``, read through the collection's bounded client (a total deadline, a body cap, the URL
    redacted in messages); a failed request is a BreakevenError naming the endpoint."""
    reply = request("GET", url, timeout=module.params["timeout"], total_timeout=module.params["timeout"],
                    validate_certs=module.params["validate_certs"])
    try:
        if reply.status != 200:
            hint = " (llama-server serves /metrics only when started with --metrics)" if reply.status == 501 else ""
            raise BreakevenError(f"endpoint: {reply.label} failed: HTTP {reply.status} {reply.reason}{hint}")
        return bytes(reply.read_all(METRICS_CAP, "/metrics")).decode("utf-8", errors="replace")
    finally:
        reply.close()


def main() -> None:
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    p = module.params
    try:
        counters, source = read_counters(module)
        report = assess(t_s=p["t_s"], d_s=p["d_s"], incumbent_rate=p["incumbent_rate"],
                        client_rate=p["client_rate"], commit_per_round=p["commit_per_round"],
                        ks=p["ks"], band=p["band"], drafter=p["drafter"], counters=counters,
                        verify_factor=p["verify_factor"], metrics_source=source)
    except SpecdecError as exc:
        module.fail_json(msg=str(exc), exception=traceback.format_exc())
    module.exit_json(changed=False, breakeven=report)


if __name__ == "__main__":
    main()
