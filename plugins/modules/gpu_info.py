#!/usr/bin/python
# Copyright: (c) 2026, llmfleet.specdec contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# Report each GPU's name, total and free memory (and GTT on APUs) from nvidia-smi, amd-smi, rocm-smi and sysfs.
from __future__ import annotations

DOCUMENTATION = r"""
---
module: gpu_info
short_description: Report each GPU's name and total, free and used memory, APU shared memory included
version_added: 0.1.0
description:
  - Runs the GPU tools present on the host and reads amdgpu's sysfs, and reports per device its
    name, total, free and used memory in bytes and its PCI address.
  - C(nvidia-smi) with a CSV query; C(amd-smi) (C(metric --mem-usage) and C(static --asic --bus --vram),
    JSON); C(rocm-smi) (C(--showproductname --showmeminfo vram gtt --showbus --json)); and
    C(/sys/class/drm/card*/device/mem_info_{vram,gtt}_{total,used}).
  - An APU (an integrated GPU such as Strix Halo, gfx1151, whose VRAM is a carve-out of system RAM)
    reports C(usable_bytes) = VRAM + GTT, with GTT capped at the host's MemTotal, and a note saying so.
  - The same device seen by several sources (matched by PCI address) is reported once, from the
    first of nvidia-smi, amd-smi, rocm-smi, sysfs; C(seen_by) lists them all and C(by_source) keeps
    each source's own view.
  - A tool that prints something unexpected lands in RV(gpu_info.errors) with the tool and the
    line named; O(strict) turns that into a failure.
  - Only reads; changes nothing anywhere.
  - Formerly C(gpu_facts). It returns no C(ansible_facts), so by Ansible's convention it is an C(_info) module.
    M(llmfleet.specdec.gpu_facts) still runs this module, with a deprecation warning, and RV(gpu_facts) carries the
    same data as RV(gpu_info) for playbooks that read it.
options:
  tools:
    description:
      - Sources to consult. Tools not installed are skipped, unless named here explicitly, in which
        case their absence is an error.
      - Leave it out to use every source that exists.
    type: list
    elements: str
    choices: [nvidia-smi, amd-smi, rocm-smi, sysfs]
  sysfs_root:
    description: Root of the sysfs tree to read C(class/drm) from (tests point it at a fixture tree).
    type: path
    default: /sys
  meminfo:
    description: The file that gives the host's C(MemTotal), which caps an APU's GTT.
    type: path
    default: /proc/meminfo
  strict:
    description: Fail when any source errs, instead of reporting the error and the other sources' devices.
    type: bool
    default: false
extends_documentation_fragment:
  - llmfleet.specdec.attributes
  - llmfleet.specdec.attributes.read_only
notes:
  - C(index) is each source's own numbering (nvidia-smi index, amd-smi gpu, rocm-smi cardN,
    DRM card number); match devices across hosts' tools by C(pci_bus_id).
  - Tested against recorded output formats of each tool; no GPU was present where the tests run.
seealso:
  - module: llmfleet.specdec.spec_breakeven
author:
  - llmfleet maintainers (@llmfleet)
"""

EXAMPLES = r"""
- name: What GPUs does this host have, and how much memory is free?
  llmfleet.specdec.gpu_info:
  register: gpus

- name: Largest free pool
  ansible.builtin.debug:
    msg: "{{ gpus.gpu_info.devices | map(attribute='usable_free_bytes') | max | human_readable }}"

- name: Only NVIDIA, and fail if nvidia-smi is missing or prints something unexpected
  llmfleet.specdec.gpu_info:
    tools: [nvidia-smi]
    strict: true
"""

RETURN = r"""
gpu_facts:
  description: The same dict as RV(gpu_info), kept for playbooks written for the old module name; deprecated, read RV(gpu_info).
  returned: success
  type: dict
gpu_info:
  description: The devices found and how they were found.
  returned: success
  type: dict
  contains:
    devices:
      description:
        - One entry per device; sizes in bytes, null when the source does not report them.
        - C(backend) is C(cuda) (nvidia-smi), C(rocm) (amd-smi, rocm-smi) or C(sysfs).
      type: list
      elements: dict
      sample:
        - index: 0
          name: NVIDIA GeForce RTX 3090
          backend: cuda
          total_bytes: 25769803776
          free_bytes: 9453961216
          used_bytes: 15967715328
          gtt_total_bytes: null
          pci_bus_id: "0000:01:00.0"
          compute_cap: "8.6"
          apu: false
          usable_bytes: 25769803776
          usable_free_bytes: 9453961216
          source: nvidia-smi
          seen_by: [nvidia-smi]
          notes: []
    by_source:
      description: Each source's devices as that source reported them.
      type: dict
    sources:
      description: The sources consulted, their paths, how many devices each reported, and whether it worked.
      type: list
      elements: dict
      sample: [{tool: nvidia-smi, path: /usr/bin/nvidia-smi, devices: 2, ok: true}]
    errors:
      description: One message per source that failed or printed something unexpected, naming the tool and the line.
      type: list
      elements: str
    host_mem_total_bytes:
      description: The host's MemTotal (null when unknown).
      type: int
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.llmfleet.specdec.plugins.module_utils.common._errors import SpecdecError
from ansible_collections.llmfleet.specdec.plugins.module_utils.memory._gpu import ROCM_BIN_DIRS, TOOLS, collect

ARGUMENT_SPEC = dict(
    tools=dict(type="list", elements="str", choices=list(TOOLS)),
    sysfs_root=dict(type="path", default="/sys"),
    meminfo=dict(type="path", default="/proc/meminfo"),
    strict=dict(type="bool", default=False),
)


def gather(module: AnsibleModule) -> dict:
    """Runs collect() with the module's tool lookup and command runner; fails per O(strict)."""
    p = module.params
    facts = collect(
        tools=p["tools"] or TOOLS,
        find_tool=lambda tool: module.get_bin_path(tool, opt_dirs=list(ROCM_BIN_DIRS)),
        run_tool=lambda argv: module.run_command(argv, environ_update={"LC_ALL": "C"}),
        sysfs_root=p["sysfs_root"],
        required=p["tools"] or (),
        meminfo=p["meminfo"],
    )
    if facts["errors"] and (p["strict"] or not facts["devices"]):
        module.fail_json(msg="; ".join(facts["errors"]), gpu_info=facts, gpu_facts=facts)
    return facts


def main() -> None:
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    try:
        facts = gather(module)
    except SpecdecError as exc:
        module.fail_json(msg=str(exc))
    module.exit_json(changed=False, gpu_info=facts, gpu_facts=facts)


if __name__ == "__main__":
    main()
