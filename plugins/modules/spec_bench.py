#!/usr/bin/python
# Copyright: (c) 2026, llmfleet.specdec contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# Measures one running llama-server or vLLM config with the A/B protocol's four traffic shapes, from the host itself.
from __future__ import annotations

DOCUMENTATION = r"""
---
module: spec_bench
short_description: Measure one running speculative-decoding config with the four traffic shapes
version_added: 0.1.0
description:
  - Sends the A/B protocol's traffic shapes (see docs/speculative-decoding.md in the collection) to the server
    at O(endpoint) and records, for every request,
    decode tok/s, predicted tokens, C(draft_n), C(draft_n_accepted), the text, and the deltas of the
    server's speculation counters in C(/metrics) around the request (per draft position where exposed).
  - "The shapes: C(prose) (filler of about 1k tokens + reply with one sentence; only model-backed
    drafters can help), C(echo) (about 1.5k tokens of unique lines + repeat verbatim; the output is
    the prompt, n-gram drafters' case), C(structured) (repetitive output, a unique id on every line,
    no overlap with the prompt) and C(identity) (a short deterministic question, the control for
    lossless verification)."
  - Prompts are deterministic. The same O(seed) and O(sizes) give the same prompts byte for byte on
    every host (their SHA-256 is in the result), so texts can be compared between configs.
    The echo passage is checked to repeat no span of 8 words inside itself, and the structured
    prompt to share no stretch of 16 characters with its expected output.
  - Every request is greedy (temperature 0) and does the same work each time (llama.cpp
    C(cache_prompt=false), a fresh vLLM C(cache_salt)). Chat requests disable thinking with
    C(chat_template_kwargs.enable_thinking=false); an empty C(content) falls back to C(reasoning_content).
  - One call measures the ONE config the server runs now. Changing the server between configs (and
    sweeping draft depth or the n-gram window) is the caller's job, for example the spec_ab role with
    M(llmfleet.specdec.unit_override).
  - It only sends requests, so it changes nothing on the host and runs the same in check mode.
options:
  endpoint:
    description: Base URL of the server, as seen from the host the task runs on.
    type: str
    default: http://127.0.0.1:8080
  api:
    description:
      - V(llamacpp) sends llama-server's native C(POST /completion) with the raw prompt.
      - V(openai) sends C(POST /v1/chat/completions) with the chat messages (llama-server and vLLM).
    type: str
    choices: [llamacpp, openai]
    default: llamacpp
  engine:
    description:
      - The server software. V(auto) asks it (llama-server has C(/props); C(/v1/models) names its owner).
      - vLLM replies carry no timings, so its decode tok/s is completion tokens / wall time of the request
        (prefill included) and C(draft_n) stays 0; its C(vllm:spec_decode_*) counters are read instead.
    type: str
    choices: [auto, llamacpp, vllm]
    default: auto
  model:
    description: Model name sent in OpenAI requests. Defaults to the first id of the server's C(/v1/models).
    type: str
  shapes:
    description: The shapes to send, in this order.
    type: list
    elements: str
    choices: [prose, echo, structured, identity]
    default: [prose, echo, structured, identity]
  prompts_per_shape:
    description: Different prompts of each shape per repeat.
    type: int
    default: 1
  repeats:
    description: How many times the whole set of shapes is sent.
    type: int
    default: 3
  reuse_prompts:
    description:
      - Send the same prompts in every repeat.
      - By default every repeat sends new prompts of the same shapes and sizes, because an n-gram drafter
        remembers across requests (llama.cpp's C(ngram-mod) keeps its table for the life of the server), so a
        prompt sent twice at temperature 0 would be drafted from its own earlier answer.
    type: bool
    default: false
  warmup:
    description:
      - Requests sent first and discarded (prompts that are never measured, taken from the shapes in turn).
    type: int
    default: 1
  seed:
    description: Seed of the prompt generator.
    type: int
    default: 0
  sizes:
    description:
      - Per shape, C(chars) (prompt size in characters, about 4 per token) and C(n_predict) (token budget).
      - "Defaults: prose 4000 chars / 48 tokens; echo 6000 chars / enough to repeat it (chars / 4 + 10 %);
        structured 2000 chars of expected output / 128 tokens; identity 32 tokens (chars not used)."
      - "Lower them for small context windows, for example V({echo: {chars: 800, n_predict: 256}})."
    type: dict
    default: {}
  timeout:
    description:
      - Seconds to wait on the socket for each part of a request's answer (llama-server answers a
        non-streamed request all at once, so for a healthy server this is the time to generate it).
    type: int
    default: 600
  total_timeout:
    description:
      - Seconds one request may take as a whole, headers and body included. Bounds a server that stalls
        mid-reply or drips its answer byte by byte, which O(timeout) alone never trips.
      - Unset, it is O(timeout) plus 300 seconds (900 with the default O(timeout)).
      - A reply larger than 32 MiB is refused as well (far above any real reply); both end the bench
        like any other broken reply, keeping the requests measured before it.
    type: int
  metrics:
    description:
      - Read C(/metrics) before and after every request. llama-server needs C(--metrics).
      - Without it the C(metrics_delta) of each of RV(bench.requests) and RV(bench.metrics_total_delta) are null.
    type: bool
    default: true
  concurrency:
    description:
      - After the single-stream bench, send every shape again as bursts of this many requests at once
        (one thread each), the way a server with that many slots is loaded in production.
      - V(1) (the default) skips the load phase. V(0) takes the server's own slot count from llama-server's
        C(/props) C(total_slots) (what C(-np) / C(LLAMA_ARG_N_PARALLEL) gave it; vLLM has none, give a number).
      - "Every stream's text must equal the same prompt's single-stream text (the load gate): a difference or a
        premature end is reported in RV(bench.load)'s C(gate) as V(INVALID); a stream that gets no answer (the server
        died, reset the connection, or stopped answering within O(timeout)) is V(FAILED) and fails the task,
        with the measurements in RV(bench)."
    type: int
    default: 1
  load_bursts:
    description: Bursts per shape in the load phase; each burst is one sample of the aggregate rate.
    type: int
    default: 3
  traffic:
    description:
      - The operator's own prompts as extra named shapes, measured after the built-in O(shapes).
      - "Each item: C(name) (lower-case letters, digits, - and _; not a built-in shape's name), C(content) (the
        text of a JSON Lines file: per line an OpenAI-style chat request C({\"messages\": [...]}), a completion
        request C({\"prompt\": ...}) or a plain prompt as a JSON string), C(source) (the file's path, named
        in errors) and C(n_predict) (the shape's token budget)."
      - Requests are sent greedy with the shape's C(n_predict); their other fields are ignored. Chat requests
        need O(api=openai). A shape needing more prompts than its file holds starts again at the first line.
      - Prompt text is never returned or put in an error; errors name the file and the line.
    type: list
    elements: dict
    default: []
    suboptions:
      name:
        description: The shape's name in the results.
        type: str
        required: true
      content:
        description: The JSON Lines text.
        type: str
        required: true
      source:
        description: Where the text came from (a path on the controller), for error messages.
        type: str
      n_predict:
        description: Token budget of every request of this shape.
        type: int
        required: true
  verify_k:
    description:
      - Draft depths K whose verification cost is measured on this server, after the measured requests and
        within the same server start - a batch of K + 1 tokens on a cached prefix (C(cache_prompt), C(n_predict=1),
        C(timings.prompt_ms)), and a batch of 1 for the single step. The A/B role gives it the K values of its
        run on the baseline's start and on a drafter probe's (the draft's prefill of the accepted tokens).
      - Kept as RV(bench)'s C(verify) (C(batches) in ms per batch size, C(step_ms)). llama-server only.
    type: list
    elements: int
    default: []
  busy_check:
    description:
      - Around every measured request, check that no other client used the server - llama-server's C(/slots)
        (a slot C(is_processing)) or C(llamacpp:requests_processing), vLLM's C(vllm:num_requests_running) and
        C(vllm:num_requests_waiting), read before and after; and the generated-token counter
        (C(llamacpp:tokens_predicted_total), C(vllm:generation_tokens_total)) grown by the request's own tokens
        alone. A production server keeps serving its users while a candidate is measured.
      - A request that ran beside another client's is set aside in RV(bench)'s C(contaminated) and sent again once
        the server is idle, O(busy_retries) times at most; one still contaminated then is excluded from
        C(requests). RV(bench)'s C(busy) counts them.
    type: bool
    default: true
    version_added: 0.2.0
  busy_retries:
    description: How often a contaminated request is sent again before it is excluded.
    type: int
    default: 2
    version_added: 0.2.0
  busy_wait:
    description: Seconds to wait for the server to be idle before a contaminated request is sent again.
    type: int
    default: 30
    version_added: 0.2.0
  unit:
    description:
      - The systemd unit whose server O(endpoint) must reach. Before the first request and again after the last,
        the process listening on the endpoint's port on this host must be the unit's C(MainPID) or a process in its
        control group, and the same process both times; otherwise the task fails naming the process that holds
        the port, and no numbers are returned as the unit's.
      - The endpoint's address counts too. It must be loopback or one of this host's own addresses (else the task
        fails saying so), and the listener checked is the one a connection to that address reaches - the socket
        bound to it, else one bound to the wildcard - so a server on C(127.0.0.2:P) is not taken for the unit on
        C(127.0.0.1:P).
      - Reading the owners of sockets needs root (C(become)). Unset, nothing is checked.
    type: str
    version_added: 0.2.0
  api_key:
    description:
      - Bearer token for a server started with an API key.
      - Sent only to the origin of O(endpoint); a redirect to another scheme, host or port goes without it.
    type: str
  validate_certs:
    description: Verify TLS certificates for an https O(endpoint).
    type: bool
    default: true
extends_documentation_fragment:
  - llmfleet.specdec.attributes
  - llmfleet.specdec.attributes.read_only
notes:
  - Requests go straight to O(endpoint), never through a proxy from the environment.
  - llama-server prints its speculation totals with 6 significant digits; from 1e6 on they are rounded and the
    per-request deltas are not exact. RV(bench.notes) says so; restart the server (the A/B protocol does) first.
  - Speculation only buys speed. Compare the texts of two configs for the same shape, prompt and repeat
    to prove it is lossless at temperature 0.
seealso:
  - module: llmfleet.specdec.spec_breakeven
author:
  - llmfleet maintainers (@llmfleet)
"""

EXAMPLES = r"""
- name: Measure the config the server runs now, native API
  llmfleet.specdec.spec_bench:
    endpoint: http://127.0.0.1:8080
    repeats: 3
  register: bench

- name: Same through the OpenAI API, small prompts for a 4k context, echo and identity only
  llmfleet.specdec.spec_bench:
    api: openai
    shapes: [echo, identity]
    sizes:
      echo: {chars: 1200, n_predict: 320}
    warmup: 2
  register: bench_chat

- name: Was the proposer engaged at all?
  ansible.builtin.assert:
    that: bench.bench.metrics_total_delta.drafts > 0
    fail_msg: draft_n == 0 while tokens flow - the proposer is not engaged, whatever the flags say

- name: Also under load at the server's slot count, and on the operator's own chat traffic
  llmfleet.specdec.spec_bench:
    api: openai
    concurrency: 0
    traffic:
      - name: support-chat
        source: files/support.jsonl
        content: "{{ lookup('ansible.builtin.file', 'files/support.jsonl') }}"
        n_predict: 128
  register: bench_load

- name: Did every stream under load give its single-stream text?
  ansible.builtin.assert:
    that: bench_load.bench.load.gate.status == 'PASSED'

- name: A vLLM server with a speculative config
  llmfleet.specdec.spec_bench:
    endpoint: http://127.0.0.1:8000
    api: openai
    api_key: "{{ vllm_api_key }}"
"""

RETURN = r"""
bench:
  description:
    - The measurements of one config (schema C(llmfleet.specdec/bench/1)); the report reads them on the controller.
    - Also returned when the task fails after the measured requests began (the server died or broke mid-run),
      with the requests measured before the failure and a note saying where it stopped.
  returned: success, and on failure once measuring began
  type: dict
  contains:
    schema:
      description: The measurement contract's version.
      type: str
      sample: llmfleet.specdec/bench/1
    endpoint:
      description: The base URL measured.
      type: str
    api:
      description: The API used, V(llamacpp) or V(openai).
      type: str
    server:
      description:
        - C(engine) (V(llamacpp) or V(vllm)), C(props) (llama-server's C(/props), null for vLLM), C(model),
          and C(speculative) (llama-server's C(/slots) flag; null where unknown).
      type: dict
      sample: {engine: llamacpp, model: target.gguf, speculative: true, props: {total_slots: 1}}
    shapes:
      description:
        - Per shape, C(prompt_chars) (the longest prompt), C(n_predict), and C(checks) (echo C(longest_repeated_words),
          structured C(prompt_overlap_chars) and C(unique_ids), C(prompts_sha256) of every prompt sent).
      type: dict
      sample: {echo: {prompt_chars: 6148, n_predict: 1651, checks: {longest_repeated_words: 2, prompts: 3}}}
    warmup:
      description: Requests sent first and discarded.
      type: int
    requests:
      description:
        - One per measured request, in sending order. C(predicted_per_second) is decode tok/s; C(rate_source)
          says where it came from. C(draft_n) and C(draft_n_accepted) are 0 when the reply has none.
          C(metrics_delta) holds the counter deltas around the request (C(drafts) = verification rounds,
          C(draft_tokens), C(accepted_tokens), C(accepted_per_pos)), null with O(metrics=false).
      type: list
      elements: dict
      sample:
        - {shape: echo, prompt_index: 0, repeat: 0, text: "001. fossil tiger ...", empty: false,
           used_reasoning_content: false, predicted_n: 160, prompt_n: 606, predicted_per_second: 1837.2,
           rate_source: timings.predicted_per_second, draft_n: 123, draft_n_accepted: 117, wall_s: 0.09,
           metrics_delta: {drafts: 41, draft_tokens: 123, accepted_tokens: 117, accepted_per_pos: [40, 39, 38]}}
    contaminated:
      description:
        - With O(busy_check), every measured request that ran beside another client's request - C(shape),
          C(prompt_index), C(repeat), C(prompt_sha256), C(predicted_per_second), C(wall_s), C(attempt) (0 for the
          first send), C(reason), and C(excluded) (true for the last attempt, left out of C(requests)).
      type: list
      elements: dict
      sample:
        - {shape: prose, prompt_index: 0, repeat: 0, attempt: 0, excluded: false,
           reason: "1 other request(s) in flight when it was sent"}
    busy:
      description:
        - With O(busy_check), how the server was read (C(mode) V(slots), V(metrics) or null when it says nothing,
          C(token_counter)), and the counts C(checked), C(contaminated), C(repeated), C(excluded).
      type: dict
    rejected:
      description:
        - Measured requests whose reply carried a NaN, infinite or negative rate or count (or more accepted
          than drafted tokens), set aside so the report never reads them. Each has C(shape), C(prompt_index),
          C(repeat), C(prompt_sha256), C(metrics_delta) and the C(reason). Empty for a healthy server.
      type: list
      elements: dict
      sample:
        - {shape: echo, prompt_index: 1, repeat: 1, prompt_sha256: 9f2c..., metrics_delta: null,
           reason: "POST http://127.0.0.1:8080/completion: timings.predicted_per_second is nan, not a rate"}
    metrics_total_delta:
      description: The counter deltas over all measured requests (warm-up excluded), null with O(metrics=false).
      type: dict
    notes:
      description: What limits the numbers of this run (vLLM rates from wall time, rounded llama.cpp totals).
      type: list
      elements: str
    elapsed_s:
      description: Wall time of the whole measurement, health check and warm-up included.
      type: float
    load:
      description:
        - The load phase (schema C(llmfleet.specdec/load/1)), absent with O(concurrency=1). C(concurrency) and
          where it came from, C(server_slots), C(streams) (one record per stream, as in C(requests) plus
          C(burst), C(stream), C(started_s), C(ended_s) and C(error)), C(bursts) (per burst C(aggregate_tok_s),
          C(wall_s), C(tokens) and C(overlapped), true when every stream was sent before the first answer came;
          with fewer slots than streams the server queues the rest).
        - C(gate) is the load gate, C(status) V(PASSED), V(INVALID) (C(mismatches) with stream, shape, prompt,
          C(kind) V(truncated) or V(altered) and the first differing C(position)), V(FAILED) (C(failures) with
          the stream and its error, C(health_after_failure)) or V(NOT MEASURED).
      type: dict
      returned: when O(concurrency) is not 1
owner:
  description:
    - With O(unit), who served the endpoint - C(unit), C(port), C(main_pid) and C(owners) (the pids listening on
      the port), as read after the last request.
  returned: when O(unit) is given
  type: dict
  sample: {unit: llama-server.service, port: 8080, main_pid: 4242, owners: [4242]}
"""

import traceback

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.llmfleet.specdec.plugins.module_utils.bench._bench_owner import check_owner, check_same_owner
from ansible_collections.llmfleet.specdec.plugins.module_utils.bench._endpoint import BenchInterruptedError, run_bench
from ansible_collections.llmfleet.specdec.plugins.module_utils.bench._load import bench_under_load, load_failed, measured_prompts
from ansible_collections.llmfleet.specdec.plugins.module_utils.bench._shapes import SHAPES
from ansible_collections.llmfleet.specdec.plugins.module_utils.bench._traffic import add_ngram_checks, load_traffic
from ansible_collections.llmfleet.specdec.plugins.module_utils.common._errors import SpecdecError

ARGUMENT_SPEC = dict(
    endpoint=dict(type="str", default="http://127.0.0.1:8080"),
    api=dict(type="str", default="llamacpp", choices=["llamacpp", "openai"]),
    engine=dict(type="str", default="auto", choices=["auto", "llamacpp", "vllm"]),
    model=dict(type="str"),
    shapes=dict(type="list", elements="str", default=list(SHAPES), choices=list(SHAPES)),
    prompts_per_shape=dict(type="int", default=1),
    repeats=dict(type="int", default=3),
    reuse_prompts=dict(type="bool", default=False),
    warmup=dict(type="int", default=1),
    seed=dict(type="int", default=0),
    sizes=dict(type="dict", default={}),
    timeout=dict(type="int", default=600),
    total_timeout=dict(type="int"),
    metrics=dict(type="bool", default=True),
    api_key=dict(type="str", no_log=True),
    validate_certs=dict(type="bool", default=True),
    concurrency=dict(type="int", default=1),
    load_bursts=dict(type="int", default=3),
    verify_k=dict(type="list", elements="int", default=[]),
    busy_check=dict(type="bool", default=True),
    busy_retries=dict(type="int", default=2),
    busy_wait=dict(type="int", default=30),
    unit=dict(type="str"),
    # content holds the operator's prompts: never logged (only that leaf is masked, not the shape names)
    traffic=dict(type="list", elements="dict", default=[], options=dict(
        name=dict(type="str", required=True), content=dict(type="str", required=True, no_log=True),
        source=dict(type="str"), n_predict=dict(type="int", required=True))),
)


def main() -> None:
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    params = dict(module.params)
    concurrency, bursts, traffic = params.pop("concurrency"), params.pop("load_bursts"), params.pop("traffic")
    unit = params.pop("unit")

    def run(argv):
        return module.run_command(list(argv))

    owner = None
    try:
        if unit:  # the unit's own server answers the endpoint, or nothing is measured
            owner = check_owner(unit, params["endpoint"], run)
        custom = load_traffic(traffic, params["api"]) or None
        bench = run_bench(custom=custom, **params)
        measured = measured_prompts(params, custom)
        add_ngram_checks(bench, measured)
        load = bench_under_load(bench, params, measured, concurrency, bursts)
        if load_failed(load):
            failure = load["gate"]["failures"][0]
            module.fail_json(msg=f"the server stopped answering under load ({load['concurrency']} streams): stream "
                                 f"{failure['stream']} on {failure['shape']}: {failure['error']}; /health afterwards: "
                                 f"{load['health_after_failure']}", bench=bench)
        if owner is not None:  # and still the same process after the last request (the numbers are its alone)
            owner = check_same_owner(owner, unit, params["endpoint"], run)
    except BenchInterruptedError as exc:
        module.fail_json(msg=str(exc), bench=exc.bench, exception=traceback.format_exc())
    except SpecdecError as exc:
        module.fail_json(msg=str(exc), exception=traceback.format_exc())
    module.exit_json(changed=False, bench=bench, **({"owner": owner} if owner is not None else {}))


if __name__ == "__main__":
    main()
