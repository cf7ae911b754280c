#!/usr/bin/python
# Copyright: (c) 2026, llmfleet.specdec contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# Screens speculative candidates against the running production server: replayed acceptance, predicted rate, no restart.
from __future__ import annotations

DOCUMENTATION = r"""
---
module: spec_screen
short_description: Predict what each speculative candidate would do, from the running production server, with no restart
version_added: 0.2.0
description:
  - Reads production's greedy continuations of the screen's prompts as token ids (C(/tokenize), then C(/completion)
    with C(return_tokens) at temperature 0), its step time from their timings, and the cost of verifying a batch of
    K + 1 tokens on a cached prefix. Requests only; production is never restarted, reconfigured or stopped.
  - Replays each candidate's drafting rounds against those tokens as llama-server runs them (the first token from the
    prefill, then per step a draft of up to K tokens, the common prefix accepted and the target's correction added),
    which gives the mean accepted length and the acceptance per draft position of every K of a sweep.
  - A plain draft model (C(draft-simple)) runs beside production on a spare loopback port (O(drafter_port), checked
    free first) as a transient systemd unit with a runtime limit (O(drafter_runtime_max)), asked for its greedy
    tokens from each prefix (llama.cpp's C(p_min)/C(n_min) stopping rules applied), and stopped at the end in every
    case. The n-gram proposers C(ngram-simple), C(ngram-mod), C(ngram-map-k), C(ngram-map-k4v) and C(ngram-cache)
    are replayed without any server (ported from the pinned llama.cpp tree; their C(--spec-<type>-size-n),
    C(-min-hits) and C(-n-match)/C(-n-min) flags are read from C(flags)). C(ngram-cache) is replayed with its
    context cache only; a candidate giving it C(--lookup-cache-static) or C(--lookup-cache-dynamic) files is
    reported C(screenable=false).
  - Trained heads that read the target's hidden states (C(draft-mtp), C(draft-eagle3), C(draft-dflash),
    C(draft-dspark)) and chains are reported C(screenable=false) with
    the reason; the A/B measures them.
  - Per candidate and K, the predicted tokens/s on O(metric) over O(weights) (decode over every shape pooled when not
    given) with a 95 % interval (the requests resampled with the measured
    step-time samples), its speedup over production's measured rate, the break-even acceptance, and the best K.
  - Per candidate and K, an optimistic bound from what load cannot inflate (the replay's counts and the fastest
    repeat of production's step, of each verification batch and of the drafter's step); role spec_ab screens a
    candidate out only when that bound is below its planned speedup. Every timing is repeated and its spread kept,
    and the host's other work is read from C(/proc) around each phase; a prediction resting on a timing that says the
    host was busy is marked C(unreliable) with the reason.
  - The prediction counts the verification and the drafter's steps. A verification is timed as a batch of K + 1
    tokens on a cached prefix on production, and, where a copy of the target fits beside production
    (O(verify_copy)), corrected by what a real speculative round costs. A copy of the target with production's own
    arguments is started twice on a loopback port with C(ngram-mod) at two depths, its requests' decode times are
    fitted as a fixed cost per round plus a cost per verified row, and the ratio of that round to the copy's own
    timed batch multiplies production's batch times. A plain draft model is then run on the copy too, at depths 1
    and its deepest K, and what its rounds cost beyond that verification is fitted as the drafter's cost per round
    plus per drafted token, which replaces its side server's steps (the replay's acceptance stays the side
    server's). Without the copy (a GPU host, production's model file not
    readable, not enough memory) the rate of a target whose step is mostly fixed cost per call (a tiny model, well
    under a millisecond a token) is over-predicted (1.1-2.2x on the project's tiny test bed); that errs toward
    sending a candidate to the confirming A/B, never toward screening out a winner.
options:
  endpoint:
    description: Production's base URL (llama-server), as the A/B measures it.
    type: str
    default: http://127.0.0.1:8080
  candidates:
    description:
      - The configs to screen, as the A/B takes them. Each has C(name), C(env) (C(LLAMA_ARG_SPEC_TYPE),
        C(LLAMA_ARG_SPEC_DRAFT_MODEL), C(LLAMA_ARG_SPEC_DRAFT_N_MAX), C(LLAMA_ARG_SPEC_DRAFT_P_MIN),
        C(LLAMA_ARG_SPEC_DRAFT_N_MIN)), optional C(flags) (for example C(--spec-ngram-mod-n-match 24)) and optional
        C(ks), the depths to predict (a sweep; default 1, 2, 3, 4, 6, 8 and the config's own depth; for an n-gram
        proposer its own maximum draft).
      - Optional C(fits), what M(llmfleet.specdec.kv_budget) said of the config beside production; V(false) makes
        a draft model C(screenable=false) with that reason, and no side server is started for it.
    type: list
    elements: dict
    required: true
  llama_server:
    description: The llama-server binary that serves a draft model's side server (the same build as production's).
    type: path
  drafter_port:
    description: The loopback port of the drafter's side server; V(0) picks a free one.
    type: int
    default: 0
  drafter_threads:
    description: Threads of the drafter's side server.
    type: int
    default: 1
  drafter_ctx:
    description: Context size of the drafter's side server.
    type: int
    default: 4096
  drafter_runtime_max:
    description: Seconds after which systemd stops the drafter's side server whatever happens to this module.
    type: int
    default: 900
  drafter_launch:
    description: V(systemd) runs the side server as a transient unit (C(systemd-run)); V(process) as a child process
      (a host without systemd, and the tests).
    type: str
    choices: [systemd, process]
    default: systemd
  shapes:
    description: The built-in traffic shapes whose prompts are screened (with O(weights), those it weighs).
    type: list
    elements: str
    default: [prose, echo, structured, identity]
  prompts_per_shape:
    description: Prompts per shape (built-in or O(traffic)); the screen sends this many requests per shape to
      production, the first prompts of each, as the A/B's first round sends them.
    type: int
    default: 2
  traffic:
    description:
      - The operator's own prompts as extra named shapes, as M(llmfleet.specdec.spec_bench) takes them (C(name),
        C(content), the text of a JSON Lines file, C(source) and C(n_predict)). With O(weights), only the shapes it
        weighs are sent. A chat request is sent through production's own chat template (C(/apply-template)).
      - Prompt text is never returned or put in an error.
    type: list
    elements: dict
    default: []
    suboptions:
      name:
        description: The shape's name.
        type: str
        required: true
      content:
        description: The traffic file's text (JSON Lines).
        type: str
        required: true
      source:
        description: The file's path, named in errors.
        type: str
      n_predict:
        description: The shape's token budget.
        type: int
        required: true
  weights:
    description:
      - The confirmatory endpoint's weights, shape to share of generated tokens (role spec_ab passes those its
        verdict uses - the declared mix, the primary shape, else equal weights over the measured shapes). The
        screen sends the shapes weighed above 0 and combines their predictions as the verdict does (time-weighted,
        the weighted harmonic mean of the shapes' rates).
      - Not given, every shape of O(shapes) is sent and the requests are pooled (their tokens over their time).
    type: dict
  metric:
    description:
      - The confirmatory endpoint's metric the screen predicts, bounds and picks each best K on.
      - V(decode) is the decode rate alone (a request's tokens after the first over its decode time).
      - V(e2e) is a request's tokens over its whole time as the client sees it, production's own prefill of the
        prompt (C(timings.prompt_ms) of the screen's request) plus the predicted decode; the optimistic bound takes
        production's fastest prefill per prompt token.
    type: str
    choices: [decode, e2e]
    default: decode
  sizes:
    description: Per shape, C(chars) and C(n_predict), as spec_bench takes them.
    type: dict
  seed:
    description: Seed of the prompts and the interval's resampling.
    type: int
    default: 0
  timeout:
    description: Seconds one request may take.
    type: int
    default: 600
  verify_copy:
    description:
      - V(auto) times real speculative rounds on a copy of the target beside production where one fits (no GPU
        device node on the host, production's model file readable, C(MemAvailable) at least 1.25 times the file
        plus 512 MiB, production's llama-server process found by its port) and corrects the verification cost
        with them; it is started only once some candidate was replayed, as a transient unit with the drafter's
        runtime limit, and stopped in every case. The result says whether it was used and why not.
      - V(never) times the verification as batches on production alone.
    type: str
    choices: [auto, never]
    default: auto
  candidate_errors:
    description:
      - What a candidate that cannot be screened does (its draft missing or of another vocabulary, its side
        server's port taken, its drafter not answering).
      - V(fail) fails the task with a message that names the candidate and the fix.
      - V(report) reports it (C(screenable=false), C(error), C(why)) and screens the others; role spec_ab uses
        this, and sends such a candidate to the rounds. Production not answering fails the task either way.
    type: str
    choices: [fail, report]
    default: fail
extends_documentation_fragment:
  - llmfleet.specdec.attributes
  - llmfleet.specdec.attributes.read_only
notes:
  - Production answers the screen's requests beside its users; on a busy server its step times are those of a busy
    server. The prediction is a prediction; the A/B on the production unit confirms it.
author:
  - llmfleet maintainers (@llmfleet)
"""

EXAMPLES = r"""
- name: Screen a draft model at every depth and ngram-mod, before any restart
  llmfleet.specdec.spec_screen:
    endpoint: http://127.0.0.1:8080
    llama_server: /opt/llama.cpp/current/bin/llama-server
    candidates:
      - name: draft
        env: {LLAMA_ARG_SPEC_TYPE: draft-simple, LLAMA_ARG_SPEC_DRAFT_MODEL: /srv/models/Qwen3-0.6B-Q8_0.gguf}
        ks: [1, 2, 3, 4, 6, 8]
      - name: ngram-mod
        env: {LLAMA_ARG_SPEC_TYPE: ngram-mod}
        flags: [--spec-ngram-mod-n-match, "8", --spec-ngram-mod-n-min, "2", --spec-ngram-mod-n-max, "16"]
  register: screen
"""

RETURN = r"""
screen:
  description: The screen's findings.
  returned: success
  type: dict
  contains:
    production:
      description:
        - C(t_s_ms) (production's step, median; a request's decode time over its tokens after the first, which
          comes from the prefill), C(t_s_fastest_ms) (the fastest of them), C(tok_s) (its decode rate, 1000 over
          C(t_s_ms)), C(step_ms) (every sample), C(verify_ms) keyed by batch size (K + 1; a real round's cost where
          the copy was used), C(verify_samples_ms) (every repeat), C(verify_batch_ms) (the batches as timed on
          production, where the copy corrected them), C(requests).
        - C(spread) (of production's step samples and of each batch's repeats - C(fastest), C(median), C(slowest),
          C(busy), C(why)), C(load) (per phase, the host's other work - C(loadavg_before), C(loadavg_after),
          C(other_cores), C(busy), C(why)) and C(unreliable) (why production's timings cannot be trusted; empty
          when they can).
        - C(endpoint), the metric and traffic predicted on - C(metric), C(weights), C(shapes), C(tok_s)
          (production's own rate on that metric), C(prefill_ms) and C(prompt_n) per request,
          C(prefill_ms_per_token_fastest), C(prefill_missing).
        - C(verify_copy), how the verification was timed - C(used), C(why) (when not), C(per_round_ms),
          C(per_row_ms), C(requests), C(rounds), C(model) and C(copy_verify_ms) (the copy's own batches).
      type: dict
    candidates:
      description:
        - Per candidate, C(screenable) and C(why) (when not), C(chain), C(d_s_ms) (the drafter's step; 0 for n-grams),
          C(best_k), C(drafter_copy) (a draft model timed on the copy of the target - C(per_round_ms),
          C(per_token_ms), C(requests), or C(why) it was not), and C(k) keyed by K, each with
          C(mean_accepted_len), C(accept_per_pos), C(acceptance), C(rounds), C(predicted_tok_s), C(low), C(high),
          C(predicted_speedup), C(breakeven_p), C(bound_tok_s) and C(bound_speedup) (the optimistic bound - the
          replay's counts timed at the fastest repeat of every timing, over production at its fastest step; the
          only number a screen-out may rest on), C(unreliable) and C(unreliable_why) (a timing it rests on says
          the host was busy, and the A/B measures the candidate whatever its numbers).
        - A draft model's C(drafter_spread) and C(load) (its side server's timings, as for production).
      type: dict
    restarts:
      description: Production restarts the screen cost (always V(0)).
      type: int
    elapsed_s:
      description: Seconds the screen took (requests to production, its side servers and the copy of the target).
      type: float
  sample:
    production: {t_s_ms: 48.2, tok_s: 20.7, verify_ms: {"5": 71.3}}
    candidates:
      draft-n4: {screenable: true, best_k: 4, d_s_ms: 4.1,
                 k: {"4": {mean_accepted_len: 4.6, accept_per_pos: [0.98, 0.95, 0.92, 0.9], predicted_tok_s: 39.5,
                           low: 35.2, high: 43.0}}}
    restarts: 0
"""

import traceback

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.llmfleet.specdec.plugins.module_utils.common._errors import SpecdecError
from ansible_collections.llmfleet.specdec.plugins.module_utils.screen._screen import run_screen

ARGUMENT_SPEC = dict(
    endpoint=dict(type="str", default="http://127.0.0.1:8080"),
    candidates=dict(type="list", elements="dict", required=True),
    llama_server=dict(type="path"),
    drafter_port=dict(type="int", default=0),
    drafter_threads=dict(type="int", default=1),
    drafter_ctx=dict(type="int", default=4096),
    drafter_runtime_max=dict(type="int", default=900),
    drafter_launch=dict(type="str", choices=["systemd", "process"], default="systemd"),
    shapes=dict(type="list", elements="str", default=["prose", "echo", "structured", "identity"]),
    prompts_per_shape=dict(type="int", default=2),
    sizes=dict(type="dict"),
    seed=dict(type="int", default=0),
    timeout=dict(type="int", default=600),
    candidate_errors=dict(type="str", choices=["fail", "report"], default="fail"),
    verify_copy=dict(type="str", choices=["auto", "never"], default="auto"),
    # content holds the operator's prompts: never logged
    traffic=dict(type="list", elements="dict", default=[], options=dict(
        name=dict(type="str", required=True), content=dict(type="str", required=True, no_log=True),
        source=dict(type="str"), n_predict=dict(type="int", required=True))),
    weights=dict(type="dict"),
    metric=dict(type="str", choices=["decode", "e2e"], default="decode"),
)


def main() -> None:
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    try:
        screen = run_screen(**module.params)
    except SpecdecError as exc:
        module.fail_json(msg=str(exc), exception=traceback.format_exc())
    module.exit_json(changed=False, screen=screen)


if __name__ == "__main__":
    main()
