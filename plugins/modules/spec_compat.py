#!/usr/bin/python
# Copyright: (c) 2026, llmfleet.specdec contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# Say whether llama-server will accept a target/draft pair for speculation, by llama.cpp's own rule.
from __future__ import annotations

DOCUMENTATION = r"""
---
module: spec_compat
short_description: Predict whether llama-server accepts a draft model for a target, by llama.cpp's own vocabulary rule
version_added: 0.1.0
description:
  - Reads the headers of a target and a draft model (paths or http(s) URLs, header only) and
    applies llama.cpp's C(common_speculative_are_compatible) rule to them — vocabulary type,
    add-bos flag and bos id, add-eos flag and eos id, a vocabulary size difference of at most 128,
    then every token text from id 5 on — reporting every failing check, not just the first, and
    the first mismatching token id with both texts.
  - Also reports whether the two tokenizers are byte-identical (every C(tokenizer.ggml.*) key
    equal). Identity is necessary for speculation to pay, not sufficient; the drafter still has
    to be cheap and accepted.
  - When llama.cpp refuses the pair, llama-server does not fail; it logs the refusal and serves
    without speculation. RV(when_refused) says so, so nobody mistakes a running server for a
    speculating one.
  - Token texts are compared as llama.cpp's vocabulary loader keeps them - cut at an embedded NUL,
    an empty text named C([EMPTY_<id>]), the k-mer marker of a C(hybriddna) tokenizer stripped -
    and the loader's defaults apply (add-bos forced on for a Gemma 4 pre-tokenizer, default bos/eos
    cleared for the C(gemma4) tokenizer model, token list and add-bos ignored for tokenizer model
    C(none)).
  - A file llama.cpp refuses to load (a BPE vocabulary without merges, an unknown tokenizer or
    pre-tokenizer, a special token id or add-bos flag stored with the wrong type, a score or token
    type array shorter than the token list, two tokens with the same loaded text) is not
    compatible - RV(loads) is false and RV(server_outcome) says that llama-server does not start.
options:
  target:
    description: The target model, a local path on the host or an http(s) URL.
    type: str
    required: true
  draft:
    description: The draft model, a local path on the host or an http(s) URL.
    type: str
    required: true
extends_documentation_fragment:
  - llmfleet.specdec.attributes
  - llmfleet.specdec.attributes.read_only
  - llmfleet.specdec.gguf_read
notes:
  - llama.cpp runs this check only when it builds a C(draft-simple) drafter (a plain draft model);
    the trained-head types (C(draft-mtp), C(draft-eagle3), C(draft-dflash), C(draft-dspark)) do not
    check, so for them a mismatch shows up as rejected drafts, not as a refusal.
seealso:
  - module: llmfleet.specdec.gguf_info
author:
  - llmfleet maintainers (@llmfleet)
"""

EXAMPLES = r"""
- name: Will this draft speculate for this target?
  llmfleet.specdec.spec_compat:
    target: /srv/models/Qwen3.6-27B-Q8_K_P.gguf
    draft: https://models.example.org/Qwen3.6-0.8B-Q8_0.gguf
  register: compat

- name: Stop before deploying a pair llama-server would refuse
  ansible.builtin.assert:
    that: compat.compatible
    fail_msg: "{{ compat.reasons | join('; ') }} — {{ compat.when_refused }}"
"""

RETURN = r"""
compatible:
  description: Whether llama.cpp's rule accepts the pair.
  returned: success
  type: bool
  sample: false
loads:
  description: Whether llama.cpp loads both files. False makes RV(compatible) false too.
  returned: success
  type: bool
  sample: true
server_outcome:
  description:
    - What llama-server does with this pair and C(--spec-type draft-simple).
    - V(speculates), V(serves-without-speculation) (the pair is refused, the server runs plainly),
      V(refuses-to-start) (a file does not load and the server exits) or V(aborts-at-start)
      (a failed assertion in llama.cpp kills the server while loading).
  returned: success
  type: str
  sample: serves-without-speculation
reasons:
  description:
    - Every failing check, in llama.cpp's order. Empty when compatible.
    - "A file that does not load gives one reason per side, starting C(target: will not load) or
      C(draft: will not load), with llama.cpp's error and what llama-server then does."
  returned: success
  type: list
  elements: str
  sample: ["token 256 differs: target 'Ġt', draft 'he'"]
first_mismatch:
  description: The first token id (from 5 on) whose loaded text differs, with both texts; null when none.
  returned: success
  type: dict
  sample: {id: 256, target: "Ġt", draft: "he"}
tokenizers_identical:
  description: Whether every C(tokenizer.ggml.*) key is byte-identical in both files.
  returned: success
  type: bool
  sample: true
tokens_sha256_2000_equal:
  description: Whether the first 2000 token strings are identical (the cheap check;
    see docs/speculative-decoding.md in the collection).
  returned: success
  type: bool
when_refused:
  description: What llama-server does when it refuses the pair.
  returned: success
  type: str
target:
  description: >-
    The target's tokenizer facts as M(llmfleet.specdec.gguf_info) returns them, plus the
    vocabulary parameters llama.cpp derives.
  returned: success
  type: dict
draft:
  description: The draft's tokenizer facts and derived vocabulary parameters, as for RV(target).
  returned: success
  type: dict
"""

import traceback

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.llmfleet.specdec.plugins.module_utils.common._errors import SpecdecError
from ansible_collections.llmfleet.specdec.plugins.module_utils.gguf._argspec import GGUF_READ_ARGS, gguf_read_options
from ansible_collections.llmfleet.specdec.plugins.module_utils.gguf._gguf import read_pair
from ansible_collections.llmfleet.specdec.plugins.module_utils.llamacpp._llamacpp import compat_report

ARGUMENT_SPEC = dict(
    target=dict(type="str", required=True),
    draft=dict(type="str", required=True),
    **GGUF_READ_ARGS,
)


def main() -> None:
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    p = module.params
    try:
        options = gguf_read_options(p)
        report = compat_report(*read_pair(p["target"], p["draft"], **options))
    except SpecdecError as exc:
        module.fail_json(msg=str(exc), exception=traceback.format_exc())
    module.exit_json(changed=False, **report)


if __name__ == "__main__":
    main()
