#!/usr/bin/python
# Copyright: (c) 2026, llmfleet.specdec contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# Read the header of a GGUF model (local path or http(s) URL) and return what it says about the model.
from __future__ import annotations

DOCUMENTATION = r"""
---
module: gguf_info
short_description: Read a GGUF model's header and report its architecture, KV layout, MTP heads and tokenizer
version_added: 0.1.0
description:
  - Streams the header of a GGUF file — its key/values and tensor-info table, never the tensor
    data — from a local path or an http(s) URL by Range requests, and returns the facts that
    speculative-decoding decisions need.
  - Reads GGUF versions 2 and 3 in either byte order, every value type including nested arrays.
  - A hostile or truncated file fails with an error naming the byte offset and the problem.
  - Uses only the Python standard library on the host.
options:
  path:
    description:
      - Local path of the GGUF file on the host, or an C(http://) or C(https://) URL.
      - For a sharded model give the first split; it carries the header.
    type: str
    required: true
    aliases: [url, src]
  include_tensors:
    description: Also return the tensor list (name, shape, type, offset, bytes) as RV(gguf.tensors).
    type: bool
    default: false
  keys:
    description: Header keys whose raw values to return under RV(gguf.values) (arrays as lists).
    type: list
    elements: str
    default: []
extends_documentation_fragment:
  - llmfleet.specdec.attributes
  - llmfleet.specdec.attributes.read_only
  - llmfleet.specdec.gguf_read
notes:
  - C(tokens_sha256_2000) is the hex sha256 over the first 2000 entries of C(tokenizer.ggml.tokens),
    each encoded as GGUF encodes a string — its UTF-8 byte length as an unsigned 64-bit
    little-endian integer, then its bytes — whatever the file's own byte order. Two files with the
    same value map the first 2000 ids to the same strings.
  - C(tokens_sha256) is the same over the whole vocabulary; C(fingerprint) covers every
    C(tokenizer.ggml.*) key (tokens, merges, token types, special ids, flags) and is equal exactly
    when the two tokenizers are byte-identical.
seealso:
  - module: llmfleet.specdec.spec_compat
author:
  - llmfleet maintainers (@llmfleet)
"""

EXAMPLES = r"""
- name: Read the target's header
  llmfleet.specdec.gguf_info:
    path: /srv/models/Qwen3.6-27B-Q8_0.gguf
  register: target

- name: Read a draft's header from a model hub without downloading it
  llmfleet.specdec.gguf_info:
    url: https://models.example.org/z-lab/Qwen3.6-27B-DFlash/Qwen3.6-27B-DFlash-Q8_0.gguf
  register: draft

- name: Say which speculative type llama.cpp would infer from the draft
  ansible.builtin.debug:
    msg: "{{ draft.gguf.spec_type_autodetect }} ({{ draft.gguf.bytes_read }} bytes in {{ draft.gguf.requests }} requests)"
"""

RETURN = r"""
gguf:
  description:
    - The header's facts. Every value is checked before it becomes a fact; a key of the wrong type or out of
      range fails the task with the key, what it holds, the file and the byte offset.
  returned: success
  type: dict
  contains:
    version:
      description: GGUF version (2 or 3).
      type: int
      sample: 3
    byte_order:
      description: C(little) or C(big).
      type: str
      sample: little
    header_bytes:
      description: Offset of the end of the tensor-info table.
      type: int
      sample: 10485760
    bytes_read:
      description: Bytes read from the file or the network.
      type: int
      sample: 16777216
    requests:
      description: Reads (or HTTP requests) made.
      type: int
      sample: 2
    architecture:
      description: C(general.architecture), or null when it is missing or not a string.
      type: str
      sample: qwen35
    tensor_count:
      description: Tensors in the file.
      type: int
      sample: 851
    kv_count:
      description: Header key/values.
      type: int
      sample: 42
    block_count:
      description:
        - Layers, including the MTP (nextn) layers, from C(<arch>.block_count); null when the key is absent.
        - Any integer type is read; more than 512 (llama.cpp's C(LLAMA_MAX_LAYERS)) or a negative value fails.
      type: int
      sample: 65
    context_length:
      description: Training context length.
      type: int
      sample: 262144
    embedding_length:
      description: Hidden size.
      type: int
      sample: 5120
    head_count:
      description:
        - Attention heads, one integer for every layer or a list with one entry per layer.
        - A list must have exactly RV(gguf.block_count) entries, as llama.cpp requires.
      type: raw
      sample: 24
    head_count_kv:
      description: KV heads, one integer or a list with one entry per layer (0 for recurrent layers).
      type: raw
      sample: 4
    key_length:
      description: Key length per head when the header states it.
      type: int
      sample: 256
    value_length:
      description: Value length per head when the header states it.
      type: int
      sample: 256
    sliding_window:
      description: Sliding-window size; null when the header has none.
      type: int
      sample: 2048
    sliding_window_pattern:
      description: Per-layer flags (true means a sliding-window layer); null when the header has none.
      type: list
      elements: bool
    recurrent_layers:
      description: Layers with no KV cache (SSM or linear attention in hybrid models).
      type: list
      elements: int
    kv_layers:
      description: Trunk layers that hold a KV cache.
      type: list
      elements: int
    mtp:
      description: Multi-token-prediction (nextn) head.
      type: dict
      sample: {nextn_predict_layers: 1, nextn_layers: [64], tensors: [blk.64.nextn.eh_proj.weight], has_mtp: true}
    spec_type_autodetect:
      description: >-
        The C(--spec-type) llama.cpp infers when this file is given as the draft without one
        (C(draft-mtp), C(draft-dflash), C(draft-dspark)), or null; see C(spec_type_autodetect_reason).
      type: str
      sample: draft-dflash
    tokenizer:
      description:
        - Tokenizer facts and fingerprints.
        - C(tokens_sha256), C(tokens_sha256_2000) and C(fingerprint) hash the bytes stored in the file, never
          decoded text.
      type: dict
      sample:
        model: gpt2
        pre: qwen35
        vocab_size: 248320
        merges_count: 247587
        bos_token_id: 248044
        eos_token_id: 248046
        add_bos_token: false
        add_eos_token: null
        tokens_sha256_2000: 8619c68fe4466d3a...
        tokens_sha256: 1f0e...
        fingerprint: 77aa...
    tensors:
      description: With O(include_tensors), each tensor's name, shape, type, offset and bytes.
      type: list
      elements: dict
      returned: when requested
    values:
      description:
        - With O(keys), the raw value of each named key (null when absent).
        - Arrays come back as lists (nested arrays as nested lists) and strings with invalid UTF-8 replaced.
        - So that a hostile header cannot make the result (and the module's memory) huge, the values of one call
          hold at most 262,144 array elements and 32 MiB of string bytes in all; a value cut short is named in
          RV(gguf.values_cut). A whole 262,144-token vocabulary fits.
      type: dict
      returned: when requested
    values_cut:
      description: The keys of RV(gguf.values) whose value was cut short (see there).
      type: list
      elements: str
      returned: when a value was cut short
"""

import traceback

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.llmfleet.specdec.plugins.module_utils.common._errors import SpecdecError
from ansible_collections.llmfleet.specdec.plugins.module_utils.gguf._argspec import GGUF_READ_ARGS, gguf_read_options
from ansible_collections.llmfleet.specdec.plugins.module_utils.gguf._gguf import read_header
from ansible_collections.llmfleet.specdec.plugins.module_utils.gguf._model_facts import model_facts

ARGUMENT_SPEC = dict(
    path=dict(type="str", required=True, aliases=["url", "src"]),
    include_tensors=dict(type="bool", default=False),
    keys=dict(type="list", elements="str", default=[], no_log=False),
    **GGUF_READ_ARGS,
)


def main() -> None:
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    p = module.params
    try:
        header = read_header(p["path"], **gguf_read_options(p))
        facts = model_facts(header, include_tensors=p["include_tensors"], keys=p["keys"] or None)
    except SpecdecError as exc:
        module.fail_json(msg=str(exc), exception=traceback.format_exc())
    module.exit_json(changed=False, gguf=facts)


if __name__ == "__main__":
    main()
