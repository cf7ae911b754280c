#!/usr/bin/python
# Copyright: (c) 2026, llmfleet.specdec contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# Say whether a host can build llama.cpp for a backend (cmake, compiler, nvcc, ROCm/HIP, glslc, headers) and what to install.
from __future__ import annotations

DOCUMENTATION = r"""
---
module: llamacpp_toolchain
short_description: Check that a host can build llama.cpp for a backend, and name what to install when it cannot
version_added: 0.1.0
description:
  - Looks for what llama.cpp's cmake files need for O(gpu_backend) the way they look for it, asks each tool its
    version, and compares the versions with the ones the pinned tree requires. Role
    C(llmfleet.specdec.llamacpp_build) runs it before anything is fetched or built.
  - Every backend needs cmake (3.14; CUDA 3.18, Vulkan 3.19, HIP 3.21), a C++ compiler and make.
    V(cuda) needs nvcc, new enough for each compute capability in O(cuda_architectures) (8.6 needs CUDA 11.1,
    8.9 and 9.0 need 11.8, 12.0 needs 12.8; CUDA 13 no longer builds below 7.5). V(hip) needs ROCm/HIP 6.1 or
    later (C(hipconfig)). V(vulkan) needs glslc, the Vulkan headers and SPIRV-Headers.
  - Fails, naming each missing piece and the package that provides it, unless O(fail_on_problems=false).
  - V(hip) together with V(cuda) is not a choice - ggml-hip compiles ggml-cuda's sources, so the two cannot share
    one process; V(cuda+vulkan) is the combination that sees a CUDA card and an AMD GPU at once.
options:
  gpu_backend:
    description:
      - The GPU API of the build - V(cpu) (none), V(cuda), V(hip) (V(rocm) is the same), V(vulkan), or V(cuda+vulkan)
        (one process that sees a CUDA card and an AMD GPU). The CPU backend is always built.
      - Also accepted as C(backend), its name before 0.2.0 (deprecated, removed in 1.0.0).
    type: str
    required: true
    choices: [cpu, cuda, hip, rocm, vulkan, cuda+vulkan]
    aliases: [backend]
  cuda_architectures:
    description: Compute capabilities the CUDA build targets, for example V(8.6) for an RTX 3090.
    type: list
    elements: str
    default: []
  cuda_compiler:
    description: nvcc's path when it is not on PATH (else PATH, then C($CUDA_PATH/bin), C(/usr/local/cuda/bin)).
    type: path
  rocm_path:
    description: The ROCm root (else C($ROCM_PATH), then C(/opt/rocm)), where C(bin/hipconfig) is looked for.
    type: path
  vulkan_sdk:
    description: A LunarG Vulkan SDK directory (else C($VULKAN_SDK)); its C(bin) and C(include) are searched first.
    type: path
  source_kind:
    description: Where the source comes from; V(git) also needs git.
    type: str
    choices: [git, archive, prebuilt]
    default: archive
  include_dirs:
    description: Where the Vulkan and SPIR-V headers are looked for.
    type: list
    elements: path
    default: [/usr/include, /usr/local/include]
  fail_on_problems:
    description: Fail when something is missing or too old. Off, the problems are only returned.
    type: bool
    default: true
extends_documentation_fragment:
  - llmfleet.specdec.attributes
  - llmfleet.specdec.attributes.read_only
notes:
  - Nothing on the host is changed. GPU drivers are not needed to build, only the toolkits.
  - The version rules come from C(ggml/src/ggml-cuda/CMakeLists.txt), C(ggml/src/ggml-hip/CMakeLists.txt),
    C(ggml/src/ggml-vulkan/CMakeLists.txt) and C(docs/build.md) of the pinned llama.cpp tree.
author:
  - llmfleet maintainers (@llmfleet)
"""

EXAMPLES = r"""
- name: Can this host build llama.cpp for its RTX 3090?
  llmfleet.specdec.llamacpp_toolchain:
    gpu_backend: cuda
    cuda_architectures: ["8.6"]

- name: What a CUDA + Vulkan build would still need, without failing
  llmfleet.specdec.llamacpp_toolchain:
    gpu_backend: cuda+vulkan
    cuda_architectures: ["8.6"]
    fail_on_problems: false
  register: toolchain
"""

RETURN = r"""
toolchain:
  description: Each tool or header found, as C({path, version}), or null when it was not found.
  returned: always
  type: dict
  sample:
    cmake: {path: /usr/bin/cmake, version: 3.25.1}
    cxx: {path: /usr/bin/c++, version: 12.2.0}
    make: {path: /usr/bin/make, version: null}
    git: null
    nvcc: {path: /usr/local/cuda/bin/nvcc, version: 12.4.131}
problems:
  description: What is missing or too old, each with the C(component), the C(problem) and what to C(install).
  returned: always
  type: list
  elements: dict
backends:
  description: The backends the build would hold (the CPU backend is always built).
  returned: always
  type: list
  elements: str
  sample: [cpu, cuda, vulkan]
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.llmfleet.specdec.plugins.module_utils.build._build import toolkit_message
from ansible_collections.llmfleet.specdec.plugins.module_utils.build._toolchain import Probe, check
from ansible_collections.llmfleet.specdec.plugins.module_utils.common._errors import SpecdecError

ARGUMENT_SPEC = dict(
    gpu_backend=dict(type="str", required=True, choices=["cpu", "cuda", "hip", "rocm", "vulkan", "cuda+vulkan"],
                     aliases=["backend"],
                     deprecated_aliases=[dict(name="backend", version="1.0.0", collection_name="llmfleet.specdec")]),
    cuda_architectures=dict(type="list", elements="str", default=[]),
    cuda_compiler=dict(type="path"),
    rocm_path=dict(type="path"),
    vulkan_sdk=dict(type="path"),
    source_kind=dict(type="str", choices=["git", "archive", "prebuilt"], default="archive"),
    include_dirs=dict(type="list", elements="path", default=["/usr/include", "/usr/local/include"]),
    fail_on_problems=dict(type="bool", default=True),
)


def main() -> None:
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    p = module.params
    try:
        prober = Probe(run=lambda argv: module.run_command(list(argv), environ_update={"LC_ALL": "C"}),
                       include_dirs=p["include_dirs"])
        result = check(p["gpu_backend"], p, prober, p["source_kind"])
    except SpecdecError as exc:
        module.fail_json(msg=str(exc))
    if result["problems"] and p["fail_on_problems"]:
        module.fail_json(msg=toolkit_message(p["gpu_backend"], result["problems"]), **result)
    module.exit_json(changed=False, **result)


if __name__ == "__main__":
    main()
