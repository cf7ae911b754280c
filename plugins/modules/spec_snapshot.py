#!/usr/bin/python
# Copyright: (c) 2026, llmfleet.specdec contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# What a measurement ran on: the build record, the served binary and the model files' fingerprints.
from __future__ import annotations

DOCUMENTATION = r"""
---
module: spec_snapshot
short_description: Record the build, binary and model fingerprints a measurement runs on
version_added: 0.2.0
description:
  - Returns the identity of what a unit serves, so that a later C(llmfleet.specdec.spec_watch) can tell whether it
    changed. The role C(llmfleet.specdec.spec_ab) records it in its report as C(environment.measured_on) while
    production serves, and C(playbooks/promote.yml) keeps that report as the promotion's evidence.
  - The build - the identifying fields of the llama.cpp build record (C(fingerprint), C(version), C(build),
    C(commit), C(backend), C(backends)).
  - The binary - the path and sha256 of the executable the unit's main process runs (C(/proc/<MainPID>/exe)).
  - Each model file - its size, the sha256 of its GGUF header (up to the tensor data), the sha256 of three 1 MiB
    samples of its tensor data (start, middle, end) and its tokenizer fingerprint. The whole file is never read.
extends_documentation_fragment:
  - llmfleet.specdec.attributes
  - llmfleet.specdec.attributes.read_only
options:
  unit:
    description: The unit whose running executable is fingerprinted, with or without C(.service).
    type: str
    default: llama-server
  models:
    description: Local paths of model files to fingerprint (a file that cannot be read gets an C(error) entry).
    type: list
    elements: str
    default: []
  build_record:
    description: The build record role C(llmfleet.specdec.llamacpp_build) writes.
    type: path
    default: /etc/llmfleet-specdec/llamacpp-build.json
seealso:
  - module: llmfleet.specdec.spec_watch
author:
  - llmfleet maintainers (@llmfleet)
"""

EXAMPLES = r"""
- name: Record what production runs on
  llmfleet.specdec.spec_snapshot:
    unit: llama-server
    models:
      - /srv/models/Qwen3.6-27B-Q8_0.gguf
      - /srv/models/Qwen3.6-27B-DFlash-Q8_0.gguf
  become: true
  register: measured_on
"""

RETURN = r"""
snapshot:
  description: The identity of what the unit serves.
  returned: always
  type: dict
  contains:
    schema:
      description: C(llmfleet.specdec/measured-on/1).
      type: str
    taken:
      description: When (UTC).
      type: str
    build:
      description: The build record's identifying fields; null without a record, C(error) for a broken one.
      type: dict
    binary:
      description: C(path), C(size) and C(sha256) of the unit's running executable; null when the unit does not run.
      type: dict
    models:
      description: Model path -> C(size), C(header_sha256), C(data_sample_sha256), C(tokenizer_fingerprint),
        C(architecture), C(name), or C(error).
      type: dict
  sample:
    schema: llmfleet.specdec/measured-on/1
    taken: "2026-11-30T16:00:00Z"
    build: {fingerprint: c0e741c521fc3a4d, version: b10133, backend: cuda}
    binary: {path: /opt/llama.cpp/b10133-cuda/bin/llama-server, size: 9437184, sha256: "3f1c..."}
    models:
      /srv/models/target.gguf: {size: 2808096, header_sha256: "8a0e...", data_sample_sha256: "51d2..."}
"""

import traceback

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.llmfleet.specdec.plugins.module_utils.common._errors import SpecdecError
from ansible_collections.llmfleet.specdec.plugins.module_utils.watch import _drift_host

ARGUMENT_SPEC = dict(
    unit=dict(type="str", default="llama-server"),
    models=dict(type="list", elements="str", default=[]),
    build_record=dict(type="path", default="/etc/llmfleet-specdec/llamacpp-build.json"),
)


def main() -> None:
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    p = module.params
    try:
        snap = _drift_host.snapshot(p["unit"], p["models"], p["build_record"],
                                    run=lambda argv: module.run_command(list(argv)))
    except SpecdecError as exc:
        module.fail_json(msg=str(exc), exception=traceback.format_exc())
    module.exit_json(changed=False, snapshot=snap)


if __name__ == "__main__":
    main()
