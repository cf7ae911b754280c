#!/usr/bin/python
# Copyright: (c) 2026, llmfleet.specdec contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# Say whether a llama.cpp or vLLM speculative config is legal, and whether speculation will really run.
from __future__ import annotations

DOCUMENTATION = r"""
---
module: spec_lint
short_description: Predict whether a speculative-decoding config starts, and whether speculation really runs
version_added: 0.1.0
description:
  - For llama.cpp, reads a config given as llama-server flags (O(flags)) and/or its C(LLAMA_ARG_*)
    environment (O(env)), and the header facts of the target and draft models, and walks llama-server's
    own start-up as the pinned llama.cpp tree codes it (C(common/arg.cpp), C(common/speculative.cpp),
    C(tools/server/server-context.cpp)).
  - Reports RV(errors) (llama-server refuses to start, exit 1, or aborts while loading), RV(silent_off)
    (it serves, but speculation is off or part of the C(--spec-type) chain is dropped) and RV(lint_warnings)
    (legal, but measured to lose or to cost), each with the reason, naming the llama.cpp function, and the
    fix; each warning is also shown as an Ansible warning; and RV(effective_chain), the implementations
    that will run, in llama.cpp's internal order (ngram types first, then the one drafter; the
    command-line order does not matter).
  - Knows the C(--spec-type) vocabulary of the build (C(mtp) was renamed C(draft-mtp) in b9180; on later
    builds the old name makes llama-server refuse to start), the removed C(--draft*) flags, that draftless
    ngram types are added unconditionally while context-backed types need a draft context (one
    context-backed drafter per process), what each drafter needs from the model its context is built
    from, the recurrent/hybrid rollback cost of layering ngram types, and the synthetic-acceptance flags.
  - For vLLM, builds and validates C(--speculative-config) (method, draft model, C(num_speculative_tokens),
    the non-causal attention backend DFlash needs, the minimum vLLM version per method where a source
    records one) and maps the legacy C(--spec-method/--spec-model/--spec-tokens) flags.
  - Read-only. Model files are only read (headers), nothing is started.
options:
  engine:
    description:
      - Which server the config is for.
      - Before 0.2.0 this option was called C(backend); that name still works, with a deprecation warning, until
        1.0.0.
    type: str
    required: true
    choices: [llamacpp, vllm]
    aliases: [backend]
  build:
    description:
      - The llama.cpp build, as C(b<number>) (for example V(b10133)). Omitted means the tree the
        collection pins (llama-cpp-python 0.3.36, assumed b10133+; the tree records no build number).
      - Before b9180 the MTP type is named C(mtp); nothing else about older builds is assumed.
    type: str
  vllm_version:
    description: The vLLM version on the host (for example V(0.20.1)), for O(engine=vllm). Omitted skips version rules.
    type: str
  flags:
    description:
      - llama-server arguments (O(engine=llamacpp)) or C(vllm serve) arguments (O(engine=vllm)), one token
        per item, for example V([--spec-type, draft-mtp, --spec-draft-n-max, "2"]).
    type: list
    elements: str
    default: []
  env:
    description:
      - The C(LLAMA_ARG_*) environment of the llama-server unit. llama.cpp reads it before the flags; flags
        override it, except C(--spec-type), which adds to it.
      - C(LLAMA_EXTRA_ARGS) (this collection's own variable) holds shell-quoted flags without an env name;
        they are read as flags.
      - For O(engine=vllm), the vLLM unit's environment as role C(vllm_serve) writes it and its launcher reads
        it - C(VLLM_SERVE_ARGS) (engine flags, before O(flags)), C(VLLM_EXTRA_ARGS) (after them) and
        C(VLLM_SPECULATIVE_CONFIG) (the C(--speculative-config) JSON, unless O(speculative_config) is given).
    type: dict
    default: {}
  speculative_config:
    description: For O(engine=vllm), a C(--speculative-config) object (mapping or JSON string), merged after O(flags).
    type: raw
  target:
    description:
      - The target model, as a path or URL of its GGUF file (its header is read), or as its facts (the
        C(gguf) part of M(llmfleet.specdec.gguf_info)'s result, or the whole result).
      - Omitted means the C(--model)/C(LLAMA_ARG_MODEL) of the config, read from the host.
    type: raw
  draft:
    description:
      - The draft model, as for O(target). Omitted means the C(--spec-draft-model) of the config, if any.
      - A path that does not exist is an error naming it; nothing is checked against a missing file.
    type: raw
  compat:
    description:
      - The result of M(llmfleet.specdec.spec_compat) for the pair. When both models are given as paths it is
        computed here; with facts dicts and no O(compat), the draft-simple vocabulary check is reported as unchecked.
    type: dict
extends_documentation_fragment:
  - llmfleet.specdec.attributes
  - llmfleet.specdec.attributes.read_only
  - llmfleet.specdec.gguf_read
notes:
  - Predictions come from reading the pinned llama.cpp source, and the CPU-testable ones are checked against
    a real llama-server built from it. Where the source leaves an outcome open (two drafters that both pass
    their constructors), spec_lint warns and does not guess.
  - vLLM cannot run in the collection's tests; its rules come from vLLM's C(vllm/config/speculative.py), the
    pull request that added the legacy aliases, and the rules stated in docs/speculative-decoding.md in the collection.
seealso:
  - module: llmfleet.specdec.spec_compat
  - module: llmfleet.specdec.gguf_info
author:
  - llmfleet maintainers (@llmfleet)
"""

EXAMPLES = r"""
- name: Lint the deployed env file's speculative settings
  llmfleet.specdec.spec_lint:
    engine: llamacpp
    env:
      LLAMA_ARG_MODEL: /srv/models/Qwen3.6-27B-Q8_K_P.gguf
      LLAMA_ARG_SPEC_TYPE: draft-mtp,ngram-mod
      LLAMA_ARG_SPEC_DRAFT_MODEL: /srv/models/Qwen3.6-27B-MTP-ONLY.gguf
      LLAMA_ARG_SPEC_DRAFT_N_MAX: "2"
  register: lint

- name: Refuse to deploy a config that will not start or will not speculate
  ansible.builtin.assert:
    that:
      - lint.ok
      - lint.silent_off | length == 0
    fail_msg: "{{ (lint.errors + lint.silent_off) | map(attribute='reason') | join(' | ') }}"

- name: Check an old flag against an old build
  llmfleet.specdec.spec_lint:
    engine: llamacpp
    build: b9100
    flags: [--spec-type, mtp]
    target: "{{ target_info.gguf }}"

- name: Validate a vLLM DFlash config
  llmfleet.specdec.spec_lint:
    engine: vllm
    vllm_version: 0.20.1
    flags: [--spec-method, dflash, --spec-model, z-lab/Qwen3.6-35B-A3B-DFlash, --spec-tokens, "8",
            --attention-backend, flash_attn]
"""

RETURN = r"""
ok:
  description: True when RV(errors) is empty (the server will start).
  returned: success
  type: bool
  sample: true
errors:
  description: Findings that make the server refuse to start or abort, each with C(code), C(reason), C(fix).
  returned: success
  type: list
  elements: dict
  sample:
    - code: spec-type-renamed
      reason: "--spec-type 'mtp' is not in the pinned tree's vocabulary ... llama-server exits 1"
      fix: use --spec-type draft-mtp
silent_off:
  description: Findings where the server starts but speculation, or part of the chain, does not run.
  returned: success
  type: list
  elements: dict
lint_warnings:
  description: >-
    Legal settings that were measured to lose, or that cost memory or correctness, each with C(code), C(reason),
    C(fix). (The module_utils call them C(warnings); Ansible reserves that result key for the strings it displays,
    where each of these also appears.)
  returned: success
  type: list
  elements: dict
effective_chain:
  description: The speculative implementations that will run, in llama.cpp's internal order; empty when none.
  returned: success
  type: list
  elements: str
  sample: [ngram-mod, draft-mtp]
outcome:
  description: >-
    The predicted start-up: V(refuses) (exit 1), V(aborts) (SIGABRT while loading),
    V(serves-without-speculation) or V(serves-with-speculation).
  returned: success
  type: str
  sample: serves-with-speculation
config:
  description: For O(engine=llamacpp), the config as llama.cpp reads it (typed keys, C(spec_types), C(problems)).
  returned: when engine is llamacpp
  type: dict
build:
  description: The llama.cpp build the rules were applied for.
  returned: when engine is llamacpp
  type: str
speculative_config:
  description: For O(engine=vllm), the C(--speculative-config) object vLLM will read.
  returned: when engine is vllm
  type: dict
cli:
  description: For O(engine=vllm), the C(--speculative-config) arguments to pass, when there are no errors.
  returned: when engine is vllm
  type: list
  elements: str
"""

import traceback

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.llmfleet.specdec.plugins.module_utils.common._errors import SpecdecError
from ansible_collections.llmfleet.specdec.plugins.module_utils.gguf._argspec import GGUF_READ_ARGS, gguf_read_options
from ansible_collections.llmfleet.specdec.plugins.module_utils.lint._lint import run_spec_lint

ARGUMENT_SPEC = dict(
    engine=dict(type="str", required=True, choices=["llamacpp", "vllm"], aliases=["backend"],
                deprecated_aliases=[dict(name="backend", version="1.0.0", collection_name="llmfleet.specdec")]),
    build=dict(type="str"),
    vllm_version=dict(type="str"),
    flags=dict(type="list", elements="str", default=[]),
    env=dict(type="dict", default={}),
    speculative_config=dict(type="raw"),
    target=dict(type="raw"),
    draft=dict(type="raw"),
    compat=dict(type="dict"),
    **GGUF_READ_ARGS,
)


def main() -> None:
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    try:
        result = run_spec_lint(module.params, gguf_read_options(module.params))
    except SpecdecError as exc:
        module.fail_json(msg=str(exc), exception=traceback.format_exc())
    findings = result.pop("warnings")
    # "warnings" is Ansible's own result key (strings it displays): show each finding there, and return the
    # structured findings as lint_warnings.
    for f in findings:
        module.warn(f"{f['code']}: {f['reason']} Fix: {f['fix']}")
    module.exit_json(changed=False, lint_warnings=findings, **result)


if __name__ == "__main__":
    main()
