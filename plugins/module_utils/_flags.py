# Copyright: (c) 2026, llmfleet.specdec contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# Private to the collection: llama-server flags and their LLAMA_ARG_* names; a config as flags or env, parsed and rendered.
"""llama-server's command line as data, and a config given as flags or environment as one dict.

The option table ``_OPTIONS`` was generated once from ``common/arg.cpp`` of the llama.cpp tree the
project pins (the llama-cpp-python 0.3.36 sdist, ``vendor/llama.cpp`` at ggml-org/llama.cpp@0c1e57098,
a 2026-10 tree; no build number is recorded in it, the field notes call that era "b10133+"):
every ``add_opt(common_arg(...))`` that ``common_params_parser_init`` keeps for LLAMA_EXAMPLE_SERVER
(examples SERVER or COMMON, not excluded for SERVER), as (names, negative names, value kind, env name).
``tests/integration/test_lint_server.py`` regenerates the table from arg.cpp and checks the env
names against the real binary's ``--help``.

How llama.cpp reads a config (common/arg.cpp ``common_params_parse_ex``):

- environment first: every option with an env name, in table order; a bool option also answers to
  ``LLAMA_ARG_NO_<NAME>`` (false); a value-less option applies only when the value is truthy
  (on/enabled/true/1); an int goes through ``std::stoi`` (leading digits, rest ignored);
- then the command line, which overrides the env value, except ``--spec-type``: its handler
  appends, so LLAMA_ARG_SPEC_TYPE and every --spec-type add to one list;
- ``--long_name`` is read as ``--long-name``; ``--flag=value`` is not a form llama.cpp knows;
- an unknown flag, a removed flag, a missing or unparsable value: ``std::invalid_argument``,
  ``common_params_parse`` returns false and llama-server exits 1 before loading anything.
  Unknown ``LLAMA_ARG_*`` variables are never read.

``LLAMA_EXTRA_ARGS`` is this collection's own variable (not llama.cpp's): flags that have no env
name (``--spec-draft-device``, ``--spec-ngram-mod-n-max`` ...) travel in it, shell-quoted, and the
serving unit appends them to llama-server's command line.
"""
from __future__ import annotations

import re
import shlex
from typing import Any, Iterable, Mapping, NamedTuple

from ansible_collections.llmfleet.specdec.plugins.module_utils._errors import SpecdecError

EXTRA_ARGS_ENV = "LLAMA_EXTRA_ARGS"
SOURCE_TREE = "llama-cpp-python 0.3.36 vendor/llama.cpp (ggml-org/llama.cpp@0c1e57098)"

# Generated from common/arg.cpp of SOURCE_TREE (see the module docstring); one row per server option:
# (names, negative names, kind, env). kind: "flag" takes no value, "bool" is a --x/--no-x pair,
# "int" one integer (std::stoi), "value" one string, "value2" two strings.
_OPTIONS: tuple[tuple[str, str, str, str | None], ...] = (
    ('-h,--help,--usage', '', 'flag', None),
    ('--version', '', 'flag', None),
    ('-cl,--cache-list', '', 'flag', None),
    ('--completion-bash', '', 'flag', None),
    ('-t,--threads', '', 'int', 'LLAMA_ARG_THREADS'),
    ('-tb,--threads-batch', '', 'int', None),
    ('-C,--cpu-mask', '', 'value', None),
    ('-Cr,--cpu-range', '', 'value', None),
    ('--cpu-strict', '', 'value', None),
    ('--prio', '', 'value', None),
    ('--poll', '', 'value', None),
    ('-Cb,--cpu-mask-batch', '', 'value', None),
    ('-Crb,--cpu-range-batch', '', 'value', None),
    ('--cpu-strict-batch', '', 'int', None),
    ('--prio-batch', '', 'value', None),
    ('--poll-batch', '', 'int', None),
    ('-lcs,--lookup-cache-static', '', 'value', None),
    ('-lcd,--lookup-cache-dynamic', '', 'value', None),
    ('-c,--ctx-size', '', 'int', 'LLAMA_ARG_CTX_SIZE'),
    ('--kv-unified-per-slot', '', 'int', 'LLAMA_ARG_KV_UNIFIED_PER_SLOT'),
    ('-n,--predict,--n-predict', '', 'int', 'LLAMA_ARG_N_PREDICT'),
    ('-b,--batch-size', '', 'int', 'LLAMA_ARG_BATCH'),
    ('-ub,--ubatch-size', '', 'int', 'LLAMA_ARG_UBATCH'),
    ('--keep', '', 'int', None),
    ('--swa-full', '', 'flag', 'LLAMA_ARG_SWA_FULL'),
    ('-ctxcp,--ctx-checkpoints,--swa-checkpoints', '', 'int', 'LLAMA_ARG_CTX_CHECKPOINTS'),
    ('-cms,--checkpoint-min-step', '', 'int', 'LLAMA_ARG_CHECKPOINT_MIN_SPACING_NT'),
    ('-cram,--cache-ram', '', 'int', 'LLAMA_ARG_CACHE_RAM'),
    ('-kvu,--kv-unified', '-no-kvu,--no-kv-unified', 'bool', 'LLAMA_ARG_KV_UNIFIED'),
    ('--cache-idle-slots', '--no-cache-idle-slots', 'bool', 'LLAMA_ARG_CACHE_IDLE_SLOTS'),
    ('--context-shift', '--no-context-shift', 'bool', 'LLAMA_ARG_CONTEXT_SHIFT'),
    ('-fa,--flash-attn', '', 'value', 'LLAMA_ARG_FLASH_ATTN'),
    ('--perf', '--no-perf', 'bool', 'LLAMA_ARG_PERF'),
    ('-e,--escape', '--no-escape', 'bool', None),
    ('-r,--reverse-prompt', '', 'value', None),
    ('-sp,--special', '', 'flag', None),
    ('--warmup', '--no-warmup', 'bool', None),
    ('--spm-infill', '', 'flag', None),
    ('--samplers', '', 'value', None),
    ('-s,--seed', '', 'value', None),
    ('--sampler-seq,--sampling-seq', '', 'value', None),
    ('--ignore-eos', '', 'flag', None),
    ('--temp,--temperature', '', 'value', 'LLAMA_ARG_TEMPERATURE'),
    ('--top-k', '', 'int', 'LLAMA_ARG_TOP_K'),
    ('--top-p', '', 'value', 'LLAMA_ARG_TOP_P'),
    ('--min-p', '', 'value', 'LLAMA_ARG_MIN_P'),
    ('--top-nsigma,--top-n-sigma', '', 'value', None),
    ('--xtc-probability', '', 'value', None),
    ('--xtc-threshold', '', 'value', None),
    ('--typical,--typical-p', '', 'value', None),
    ('--repeat-last-n', '', 'int', None),
    ('--repeat-penalty', '', 'value', 'LLAMA_ARG_REPEAT_PENALTY'),
    ('--presence-penalty', '', 'value', 'LLAMA_ARG_PRESENCE_PENALTY'),
    ('--frequency-penalty', '', 'value', 'LLAMA_ARG_FREQUENCY_PENALTY'),
    ('--dry-multiplier', '', 'value', None),
    ('--dry-base', '', 'value', None),
    ('--dry-allowed-length', '', 'int', None),
    ('--dry-penalty-last-n', '', 'int', None),
    ('--dry-sequence-breaker', '', 'value', None),
    ('--adaptive-target', '', 'value', None),
    ('--adaptive-decay', '', 'value', None),
    ('--dynatemp-range', '', 'value', None),
    ('--dynatemp-exp', '', 'value', None),
    ('--mirostat', '', 'int', None),
    ('--mirostat-lr', '', 'value', None),
    ('--mirostat-ent', '', 'value', None),
    ('-l,--logit-bias', '', 'value', None),
    ('--grammar', '', 'value', None),
    ('--grammar-file', '', 'value', None),
    ('-j,--json-schema', '', 'value', None),
    ('-jf,--json-schema-file', '', 'value', None),
    ('-bs,--backend-sampling', '', 'flag', 'LLAMA_ARG_BACKEND_SAMPLING'),
    ('--pooling', '', 'value', 'LLAMA_ARG_POOLING'),
    ('--rope-scaling', '', 'value', 'LLAMA_ARG_ROPE_SCALING_TYPE'),
    ('--rope-scale', '', 'value', 'LLAMA_ARG_ROPE_SCALE'),
    ('--rope-freq-base', '', 'value', 'LLAMA_ARG_ROPE_FREQ_BASE'),
    ('--rope-freq-scale', '', 'value', 'LLAMA_ARG_ROPE_FREQ_SCALE'),
    ('--yarn-orig-ctx', '', 'int', 'LLAMA_ARG_YARN_ORIG_CTX'),
    ('--yarn-ext-factor', '', 'value', 'LLAMA_ARG_YARN_EXT_FACTOR'),
    ('--yarn-attn-factor', '', 'value', 'LLAMA_ARG_YARN_ATTN_FACTOR'),
    ('--yarn-beta-slow', '', 'value', 'LLAMA_ARG_YARN_BETA_SLOW'),
    ('--yarn-beta-fast', '', 'value', 'LLAMA_ARG_YARN_BETA_FAST'),
    ('-kvo,--kv-offload', '-nkvo,--no-kv-offload', 'bool', 'LLAMA_ARG_KV_OFFLOAD'),
    ('--repack', '-nr,--no-repack', 'bool', 'LLAMA_ARG_REPACK'),
    ('--no-host', '', 'flag', 'LLAMA_ARG_NO_HOST'),
    ('-ctk,--cache-type-k', '', 'value', 'LLAMA_ARG_CACHE_TYPE_K'),
    ('-ctv,--cache-type-v', '', 'value', 'LLAMA_ARG_CACHE_TYPE_V'),
    ('-dt,--defrag-thold', '', 'value', 'LLAMA_ARG_DEFRAG_THOLD'),
    ('-np,--parallel', '', 'int', 'LLAMA_ARG_N_PARALLEL'),
    ('-cb,--cont-batching', '-nocb,--no-cont-batching', 'bool', 'LLAMA_ARG_CONT_BATCHING'),
    ('-mm,--mmproj', '', 'value', 'LLAMA_ARG_MMPROJ'),
    ('-mmu,--mmproj-url', '', 'value', 'LLAMA_ARG_MMPROJ_URL'),
    ('--mmproj-auto', '--no-mmproj,--no-mmproj-auto', 'bool', 'LLAMA_ARG_MMPROJ_AUTO'),
    ('--mmproj-offload', '--no-mmproj-offload', 'bool', 'LLAMA_ARG_MMPROJ_OFFLOAD'),
    ('-mmdev,--mmproj-device', '', 'value', 'MTMD_BACKEND_DEVICE'),
    ('--image-min-tokens', '', 'int', 'LLAMA_ARG_IMAGE_MIN_TOKENS'),
    ('--image-max-tokens', '', 'int', 'LLAMA_ARG_IMAGE_MAX_TOKENS'),
    ('--mtmd-batch-max-tokens', '', 'int', 'LLAMA_ARG_MTMD_BATCH_MAX_TOKENS'),
    ('--video-fps', '', 'value', 'LLAMA_ARG_VIDEO_FPS'),
    ('--video-timestamp-interval', '', 'int', 'LLAMA_ARG_VIDEO_TIMESTAMP_INTERVAL'),
    ('--video-ffmpeg-dir', '', 'value', 'LLAMA_ARG_VIDEO_FFMPEG_DIR'),
    ('--rpc', '', 'value', 'LLAMA_ARG_RPC'),
    ('-lm,--load-mode', '', 'value', 'LLAMA_ARG_LOAD_MODE'),
    ('-lzm,--lazy-mode', '', 'value', 'LLAMA_ARG_LAZY_MODE'),
    ('--numa', '', 'value', 'LLAMA_ARG_NUMA'),
    ('-dev,--device', '', 'value', 'LLAMA_ARG_DEVICE'),
    ('--list-devices', '', 'flag', None),
    ('-ot,--override-tensor', '', 'value', 'LLAMA_ARG_OVERRIDE_TENSOR'),
    ('-cmoe,--cpu-moe', '', 'flag', 'LLAMA_ARG_CPU_MOE'),
    ('-ncmoe,--n-cpu-moe', '', 'int', 'LLAMA_ARG_N_CPU_MOE'),
    ('-ncffn,--n-cpu-ffn', '', 'int', 'LLAMA_ARG_N_CPU_FFN'),
    ('-ngl,--gpu-layers,--n-gpu-layers', '', 'value', 'LLAMA_ARG_N_GPU_LAYERS'),
    ('-sm,--split-mode', '', 'value', 'LLAMA_ARG_SPLIT_MODE'),
    ('-ts,--tensor-split', '', 'value', 'LLAMA_ARG_TENSOR_SPLIT'),
    ('-mg,--main-gpu', '', 'int', 'LLAMA_ARG_MAIN_GPU'),
    ('-fit,--fit', '', 'value', 'LLAMA_ARG_FIT'),
    ('-fitt,--fit-target', '', 'value', 'LLAMA_ARG_FIT_TARGET'),
    ('-fitc,--fit-ctx', '', 'int', 'LLAMA_ARG_FIT_CTX'),
    ('--check-tensors', '', 'flag', None),
    ('--override-kv', '', 'value', None),
    ('--op-offload', '--no-op-offload', 'bool', None),
    ('--lora', '', 'value', None),
    ('--lora-scaled', '', 'value', None),
    ('--control-vector', '', 'value', None),
    ('--control-vector-scaled', '', 'value', None),
    ('--control-vector-layer-range', '', 'value2', None),
    ('-a,--alias', '', 'value', 'LLAMA_ARG_ALIAS'),
    ('--tags', '', 'value', 'LLAMA_ARG_TAGS'),
    ('-m,--model', '', 'value', 'LLAMA_ARG_MODEL'),
    ('-mu,--model-url', '', 'value', 'LLAMA_ARG_MODEL_URL'),
    ('-dr,--docker-repo', '', 'value', 'LLAMA_ARG_DOCKER_REPO'),
    ('-hf,-hfr,--hf-repo', '', 'value', 'LLAMA_ARG_HF_REPO'),
    ('-hff,--hf-file', '', 'value', 'LLAMA_ARG_HF_FILE'),
    ('-hft,--hf-token', '', 'value', 'HF_TOKEN'),
    ('--embd-normalize', '', 'int', None),
    ('--host', '', 'value', 'LLAMA_ARG_HOST'),
    ('--port', '', 'int', 'LLAMA_ARG_PORT'),
    ('--reuse-port', '', 'flag', 'LLAMA_ARG_REUSE_PORT'),
    ('--path', '', 'value', 'LLAMA_ARG_STATIC_PATH'),
    ('--cors-origins', '', 'value', 'LLAMA_ARG_CORS_ORIGINS'),
    ('--cors-methods', '', 'value', 'LLAMA_ARG_CORS_METHODS'),
    ('--cors-headers', '', 'value', 'LLAMA_ARG_CORS_HEADERS'),
    ('--cors-credentials', '--no-cors-credentials', 'bool', 'LLAMA_ARG_CORS_CREDENTIALS'),
    ('--api-prefix', '', 'value', 'LLAMA_ARG_API_PREFIX'),
    ('--ui-config,--webui-config', '', 'value', 'LLAMA_ARG_UI_CONFIG'),
    ('--ui-config-file,--webui-config-file', '', 'value', 'LLAMA_ARG_UI_CONFIG_FILE'),
    ('--ui-mcp-proxy,--webui-mcp-proxy', '--no-ui-mcp-proxy,--no-webui-mcp-proxy', 'bool', 'LLAMA_ARG_UI_MCP_PROXY'),
    ('--tools', '', 'value', 'LLAMA_ARG_TOOLS'),
    ('--tools-runtime', '', 'value', 'LLAMA_ARG_TOOLS_RUNTIME'),
    ('--mcp-servers-config', '', 'value', 'LLAMA_ARG_MCP_SERVERS_CONFIG'),
    ('--mcp-servers-json', '', 'value', 'LLAMA_ARG_MCP_SERVERS_JSON'),
    ('-ag,--agent', '-no-ag,--no-agent', 'bool', 'LLAMA_ARG_AGENT'),
    ('--ui,--webui', '--no-ui,--no-webui', 'bool', 'LLAMA_ARG_UI'),
    ('--embedding,--embeddings', '', 'flag', 'LLAMA_ARG_EMBEDDINGS'),
    ('--rerank,--reranking', '', 'flag', 'LLAMA_ARG_RERANKING'),
    ('--api-key', '', 'value', 'LLAMA_API_KEY'),
    ('--api-key-file', '', 'value', 'LLAMA_ARG_API_KEY_FILE'),
    ('--ssl-key-file', '', 'value', 'LLAMA_ARG_SSL_KEY_FILE'),
    ('--ssl-cert-file', '', 'value', 'LLAMA_ARG_SSL_CERT_FILE'),
    ('--chat-template-kwargs', '', 'value', 'LLAMA_ARG_CHAT_TEMPLATE_KWARGS'),
    ('-to,--timeout', '', 'int', 'LLAMA_ARG_TIMEOUT'),
    ('--sse-ping-interval', '', 'int', 'LLAMA_ARG_SSE_PING_INTERVAL'),
    ('--threads-http', '', 'int', 'LLAMA_ARG_THREADS_HTTP'),
    ('--cache-prompt', '--no-cache-prompt', 'bool', 'LLAMA_ARG_CACHE_PROMPT'),
    ('--cache-reuse', '', 'int', 'LLAMA_ARG_CACHE_REUSE'),
    ('--metrics', '', 'flag', 'LLAMA_ARG_ENDPOINT_METRICS'),
    ('--props', '', 'flag', 'LLAMA_ARG_ENDPOINT_PROPS'),
    ('--slots', '--no-slots', 'bool', 'LLAMA_ARG_ENDPOINT_SLOTS'),
    ('--slot-save-path', '', 'value', None),
    ('--media-path', '', 'value', None),
    ('--models-dir', '', 'value', 'LLAMA_ARG_MODELS_DIR'),
    ('--models-preset', '', 'value', 'LLAMA_ARG_MODELS_PRESET'),
    ('--models-max', '', 'int', 'LLAMA_ARG_MODELS_MAX'),
    ('--models-autoload', '--no-models-autoload', 'bool', 'LLAMA_ARG_MODELS_AUTOLOAD'),
    ('--jinja', '--no-jinja', 'bool', 'LLAMA_ARG_JINJA'),
    ('--reasoning-format', '', 'value', 'LLAMA_ARG_THINK'),
    ('-rea,--reasoning', '', 'value', 'LLAMA_ARG_REASONING'),
    ('--reasoning-effort', '', 'value', 'LLAMA_ARG_REASONING_EFFORT'),
    ('--reasoning-budget', '', 'int', 'LLAMA_ARG_THINK_BUDGET'),
    ('--reasoning-budget-message', '', 'value', 'LLAMA_ARG_THINK_BUDGET_MESSAGE'),
    ('--reasoning-preserve', '--no-reasoning-preserve', 'bool', 'LLAMA_ARG_REASONING_PRESERVE'),
    ('--chat-template', '', 'value', 'LLAMA_ARG_CHAT_TEMPLATE'),
    ('--chat-template-file', '', 'value', 'LLAMA_ARG_CHAT_TEMPLATE_FILE'),
    ('--skip-chat-parsing', '--no-skip-chat-parsing', 'bool', 'LLAMA_ARG_SKIP_CHAT_PARSING'),
    ('--prefill-assistant', '--no-prefill-assistant', 'bool', 'LLAMA_ARG_PREFILL_ASSISTANT'),
    ('-sps,--slot-prompt-similarity', '', 'value', None),
    ('--lora-init-without-apply', '', 'flag', None),
    ('--sleep-idle-seconds', '', 'int', None),
    ('--log-disable', '', 'flag', None),
    ('--log-file', '', 'value', 'LLAMA_ARG_LOG_FILE'),
    ('--log-jsonl', '--no-log-jsonl', 'bool', 'LLAMA_ARG_LOG_JSONL'),
    ('--log-prompts-dir', '', 'value', None),
    ('--log-colors', '', 'value', 'LLAMA_ARG_LOG_COLORS'),
    ('-v,--verbose,--log-verbose', '', 'flag', None),
    ('--offline', '', 'flag', 'LLAMA_ARG_OFFLINE'),
    ('-lv,--verbosity,--log-verbosity', '', 'int', 'LLAMA_ARG_LOG_VERBOSITY'),
    ('--log-prefix', '--no-log-prefix', 'bool', 'LLAMA_ARG_LOG_PREFIX'),
    ('--log-timestamps', '--no-log-timestamps', 'bool', 'LLAMA_ARG_LOG_TIMESTAMPS'),
    ('--spec-draft-hf,-hfd,-hfrd,--hf-repo-draft', '', 'value', 'LLAMA_ARG_SPEC_DRAFT_HF_REPO'),
    ('--spec-draft-threads,-td,--threads-draft', '', 'int', None),
    ('--spec-draft-threads-batch,-tbd,--threads-batch-draft', '', 'int', None),
    ('--spec-draft-cpu-mask,-Cd,--cpu-mask-draft', '', 'value', None),
    ('--spec-draft-cpu-range,-Crd,--cpu-range-draft', '', 'value', None),
    ('--spec-draft-cpu-strict,--cpu-strict-draft', '', 'int', None),
    ('--spec-draft-prio,--prio-draft', '', 'value', None),
    ('--spec-draft-poll,--poll-draft', '', 'int', None),
    ('--spec-draft-cpu-mask-batch,-Cbd,--cpu-mask-batch-draft', '', 'value', None),
    ('--spec-draft-cpu-strict-batch,--cpu-strict-batch-draft', '', 'int', None),
    ('--spec-draft-prio-batch,--prio-batch-draft', '', 'value', None),
    ('--spec-draft-poll-batch,--poll-batch-draft', '', 'int', None),
    ('--spec-draft-type-k,-ctkd,--cache-type-k-draft', '', 'value', 'LLAMA_ARG_SPEC_DRAFT_CACHE_TYPE_K'),
    ('--spec-draft-type-v,-ctvd,--cache-type-v-draft', '', 'value', 'LLAMA_ARG_SPEC_DRAFT_CACHE_TYPE_V'),
    ('--spec-draft-override-tensor,-otd,--override-tensor-draft', '', 'value', None),
    ('--spec-draft-cpu-moe,-cmoed,--cpu-moe-draft', '', 'flag', 'LLAMA_ARG_SPEC_DRAFT_CPU_MOE'),
    ('--spec-draft-n-cpu-moe,--spec-draft-ncmoe,-ncmoed,--n-cpu-moe-draft', '', 'int', 'LLAMA_ARG_SPEC_DRAFT_N_CPU_MOE'),
    ('--spec-draft-n-max', '', 'int', 'LLAMA_ARG_SPEC_DRAFT_N_MAX'),
    ('--spec-draft-n-min', '', 'int', 'LLAMA_ARG_SPEC_DRAFT_N_MIN'),
    ('--spec-synth-len', '', 'value', 'LLAMA_ARG_SPEC_SYNTH_LEN'),
    ('--spec-synth-rates', '', 'value', 'LLAMA_ARG_SPEC_SYNTH_RATES'),
    ('--spec-draft-p-split,--draft-p-split', '', 'value', 'LLAMA_ARG_SPEC_DRAFT_P_SPLIT'),
    ('--spec-draft-p-min,--draft-p-min', '', 'value', 'LLAMA_ARG_SPEC_DRAFT_P_MIN'),
    ('--spec-draft-backend-sampling', '--no-spec-draft-backend-sampling', 'bool', 'LLAMA_ARG_SPEC_DRAFT_BACKEND_SAMPLING'),
    ('--spec-draft-device,-devd,--device-draft', '', 'value', None),
    ('--spec-draft-ngl,-ngld,--gpu-layers-draft,--n-gpu-layers-draft', '', 'value', 'LLAMA_ARG_N_GPU_LAYERS_DRAFT'),
    ('--spec-draft-model,-md,--model-draft', '', 'value', 'LLAMA_ARG_SPEC_DRAFT_MODEL'),
    ('--spec-type', '', 'value', 'LLAMA_ARG_SPEC_TYPE'),
    ('--spec-ngram-mod-n-min', '', 'int', None),
    ('--spec-ngram-mod-n-max', '', 'int', None),
    ('--spec-ngram-mod-n-match', '', 'int', None),
    ('--spec-ngram-simple-size-n', '', 'int', None),
    ('--spec-ngram-simple-size-m', '', 'int', None),
    ('--spec-ngram-simple-min-hits', '', 'int', None),
    ('--spec-ngram-map-k-size-n', '', 'int', None),
    ('--spec-ngram-map-k-size-m', '', 'int', None),
    ('--spec-ngram-map-k-min-hits', '', 'int', None),
    ('--spec-ngram-map-k4v-size-n', '', 'int', None),
    ('--spec-ngram-map-k4v-size-m', '', 'int', None),
    ('--spec-ngram-map-k4v-min-hits', '', 'int', None),
    ('--draft,--draft-n,--draft-max', '', 'value', 'LLAMA_ARG_DRAFT_MAX'),
    ('--draft-min,--draft-n-min', '', 'value', 'LLAMA_ARG_DRAFT_MIN'),
    ('--spec-ngram-size-n', '', 'value', None),
    ('--spec-ngram-size-m', '', 'value', None),
    ('--spec-ngram-min-hits', '', 'value', None),
    ('--embd-gemma-default', '', 'flag', None),
    ('--fim-qwen-1.5b-default', '', 'flag', None),
    ('--fim-qwen-3b-default', '', 'flag', None),
    ('--fim-qwen-7b-default', '', 'flag', None),
    ('--fim-qwen-7b-spec', '', 'flag', None),
    ('--fim-qwen-14b-spec', '', 'flag', None),
    ('--fim-qwen-30b-default', '', 'flag', None),
    ('--gpt-oss-20b-default', '', 'flag', None),
    ('--gpt-oss-120b-default', '', 'flag', None),
    ('--vision-gemma-4b-default', '', 'flag', None),
    ('--vision-gemma-12b-default', '', 'flag', None),
    ('--spec-default', '', 'flag', None),
)

# common/arg.cpp "removed params": the handler calls arg_removed(msg), which throws
# "the argument has been removed. <msg>" -> llama-server exits 1.
REMOVED: dict[str, str] = {
    "--draft": "use --spec-draft-n-max or --spec-ngram-mod-n-max",
    "--draft-min": "use --spec-draft-n-min or --spec-ngram-mod-n-min",
    "--spec-ngram-size-n": "use the respective --spec-ngram-*-size-n",
    "--spec-ngram-size-m": "use the respective --spec-ngram-*-size-m",
    "--spec-ngram-min-hits": "use the respective --spec-ngram-*-min-hits",
}

# What this collection reasons with, by llama.cpp's canonical (first long) flag name:
# key in the normalized dict, and how the value is typed.
TYPED: dict[str, tuple[str, str]] = {
    "--model": ("model", "str"),
    "--hf-repo": ("hf_repo", "str"),
    "--spec-type": ("spec_types", "types"),
    "--spec-draft-model": ("draft_model", "str"),
    "--spec-draft-hf": ("draft_hf_repo", "str"),
    "--spec-draft-n-max": ("draft_n_max", "int"),
    "--spec-draft-n-min": ("draft_n_min", "int"),
    "--spec-draft-p-min": ("draft_p_min", "float"),
    "--spec-draft-p-split": ("draft_p_split", "float"),
    "--spec-draft-device": ("draft_device", "str"),
    "--spec-draft-ngl": ("draft_n_gpu_layers", "str"),
    "--spec-draft-type-k": ("draft_cache_type_k", "str"),
    "--spec-draft-type-v": ("draft_cache_type_v", "str"),
    "--spec-draft-backend-sampling": ("draft_backend_sampling", "bool"),
    "--spec-ngram-mod-n-min": ("ngram_mod_n_min", "int"),
    "--spec-ngram-mod-n-max": ("ngram_mod_n_max", "int"),
    "--spec-ngram-mod-n-match": ("ngram_mod_n_match", "int"),
    "--spec-ngram-simple-size-n": ("ngram_simple_size_n", "int"),
    "--spec-ngram-simple-size-m": ("ngram_simple_size_m", "int"),
    "--spec-ngram-map-k-size-n": ("ngram_map_k_size_n", "int"),
    "--spec-ngram-map-k-size-m": ("ngram_map_k_size_m", "int"),
    "--spec-ngram-map-k4v-size-n": ("ngram_map_k4v_size_n", "int"),
    "--spec-ngram-map-k4v-size-m": ("ngram_map_k4v_size_m", "int"),
    "--lookup-cache-static": ("lookup_cache_static", "str"),
    "--lookup-cache-dynamic": ("lookup_cache_dynamic", "str"),
    "--spec-synth-len": ("synth_len", "float"),
    "--spec-synth-rates": ("synth_rates", "floats"),
    "--ctx-size": ("ctx_size", "int"),
    "--parallel": ("parallel", "int"),
    "--device": ("device", "str"),
    "--tensor-split": ("tensor_split", "str"),
    "--split-mode": ("split_mode", "str"),
    "--gpu-layers": ("n_gpu_layers", "str"),
    "--cache-type-k": ("cache_type_k", "str"),
    "--cache-type-v": ("cache_type_v", "str"),
    "--flash-attn": ("flash_attn", "str"),
    "--batch-size": ("batch_size", "int"),
    "--ubatch-size": ("ubatch_size", "int"),
    "--threads": ("threads", "int"),
    "--host": ("host", "str"),
    "--port": ("port", "int"),
    "--metrics": ("metrics", "bool"),
    "--slots": ("slots", "bool"),
    "--kv-unified": ("kv_unified", "bool"),
}
KEY_TO_FLAG: dict[str, str] = {key: flag for flag, (key, _kind) in TYPED.items()}


class Option(NamedTuple):
    names: tuple[str, ...]
    neg: tuple[str, ...]
    kind: str
    env: str | None

    @property
    def canonical(self) -> str:
        """The first long name: the key this collection files the option under."""
        return next((n for n in self.names if n.startswith("--")), self.names[0])

    @property
    def takes(self) -> int:
        return {"flag": 0, "bool": 0, "int": 1, "value": 1, "value2": 2}[self.kind]


OPTIONS: tuple[Option, ...] = tuple(
    Option(tuple(n.split(",")), tuple(g.split(",")) if g else (), kind, env) for n, g, kind, env in _OPTIONS)
_BY_NAME: dict[str, tuple[Option, bool]] = {}
for _opt in OPTIONS:
    for _name in _opt.names:
        _BY_NAME[_name] = (_opt, True)
    for _name in _opt.neg:
        _BY_NAME[_name] = (_opt, False)
_BY_CANONICAL: dict[str, Option] = {o.canonical: o for o in OPTIONS}
_BY_ENV: dict[str, Option] = {o.env: o for o in OPTIONS if o.env}

_TRUTHY = ("on", "enabled", "true", "1")   # common_arg_utils::is_truthy
_FALSEY = ("off", "disabled", "false", "0")  # common_arg_utils::is_falsey
_STOI = re.compile(r"\s*[+-]?\d+")
_STOD_STRICT = re.compile(r"\s*[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?\s*$")


def lookup(flag: str) -> tuple[Option, bool] | None:
    """The option a command-line token names, and whether it is the positive form; None if unknown."""
    if flag.startswith("--"):
        flag = flag.replace("_", "-")
    return _BY_NAME.get(flag)


def option(canonical_or_alias: str) -> Option:
    found = lookup(canonical_or_alias)
    if found is None:
        raise SpecdecError(f"{canonical_or_alias} is not a llama-server flag in {SOURCE_TREE}")
    return found[0]


def env_name(flag: str) -> str | None:
    """The LLAMA_ARG_* name llama-server reads for flag (any alias), or None if it has none."""
    return option(flag).env


def _problem(code: str, flag: str, message: str) -> dict[str, str]:
    return {"code": code, "flag": flag, "message": message}


def _stoi(text: str) -> int | None:
    """std::stoi: leading whitespace, sign, digits; the rest of the string is ignored."""
    m = _STOI.match(text)
    return int(m.group(0)) if m else None


def _stof(text: str) -> float | None:
    """std::stof: the longest leading float; None when there is none."""
    m = re.match(r"\s*[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?", text)
    return float(m.group(0)) if m else None


def _value_problem(canonical: str, value: str) -> str | None:
    """The handler's own validation in common/arg.cpp, for the options this collection types."""
    iv = _stoi(value)
    if canonical == "--spec-draft-n-max" and iv is not None and iv < 0:
        return "invalid value"
    if canonical in ("--spec-ngram-mod-n-min", "--spec-ngram-mod-n-max") and iv is not None and not 0 <= iv <= 1024:
        return "ngram n-min/n-max must be between 0 and 1024 inclusive"
    if (canonical == "--spec-ngram-mod-n-match" or canonical.endswith(("-size-n", "-size-m"))) \
            and canonical.startswith("--spec-ngram") and iv is not None and not 1 <= iv <= 1024:
        return "ngram size must be between 1 and 1024 inclusive"
    if canonical.endswith("-min-hits") and canonical.startswith("--spec-ngram") and iv is not None and iv < 1:
        return "ngram min hits must be at least 1"
    if canonical == "--parallel" and iv == 0:
        return "error: invalid value for n_parallel"
    if canonical == "--spec-synth-len":
        if not _STOD_STRICT.match(value) or float(value) == -1.0:
            return "invalid value"
    if canonical == "--spec-synth-rates":
        if any(not _STOD_STRICT.match(part) for part in value.split(",")):
            return "invalid value"
    if canonical in ("--spec-draft-p-min", "--spec-draft-p-split") and _stof(value) is None:
        return "stof: no conversion"
    return None


def _typed(kind: str, raw: Any) -> Any:
    if kind == "int":
        return raw if isinstance(raw, int) else _stoi(str(raw))
    if kind == "float":
        return raw if isinstance(raw, float) else _stof(str(raw))
    if kind == "floats":
        return [float(p) for p in str(raw).split(",")] if not isinstance(raw, list) else raw
    if kind == "bool":
        return bool(raw)
    return raw


class _State:
    def __init__(self) -> None:
        self.options: dict[str, Any] = {}
        self.sources: dict[str, str] = {}
        self.spec_type_values: list[str] = []
        self.problems: list[dict[str, str]] = []

    def set(self, opt: Option, value: Any, source: str) -> None:
        if opt.canonical == "--spec-type":
            self.spec_type_values.append(str(value))
            self.options["--spec-type"] = ",".join(self.spec_type_values)
        else:
            self.options[opt.canonical] = value
        self.sources[opt.canonical] = source


def _apply_env(state: _State, env: Mapping[str, Any]) -> None:
    env = {str(k): ("" if v is None else str(v)) for k, v in env.items()}
    for name in env:
        if name.startswith("LLAMA_ARG_") and name not in _BY_ENV and not (
                name.startswith("LLAMA_ARG_NO_") and "LLAMA_ARG_" + name[len("LLAMA_ARG_NO_"):] in _BY_ENV):
            state.problems.append(_problem(
                "unknown-env", name, f"{name} is not read by llama-server ({SOURCE_TREE} has no such env name)"))
    for opt in OPTIONS:  # table order = the order common_params_parse_ex walks them
        if not opt.env:
            continue
        neg_name = opt.env.replace("LLAMA_ARG_", "LLAMA_ARG_NO_") if opt.neg else None
        if neg_name and neg_name in env:
            value = "0"
        elif opt.env in env:
            value = env[opt.env]
        else:
            continue
        source = f"env:{neg_name if neg_name and neg_name in env else opt.env}"
        if opt.canonical in REMOVED:
            state.problems.append(_problem("removed-flag", opt.env, f'error while handling environment variable "{opt.env}": '
                                           f"the argument has been removed. {REMOVED[opt.canonical]}"))
            continue
        if opt.kind == "flag":
            if value in _TRUTHY:
                state.set(opt, True, source)
            continue
        if opt.kind == "bool":
            if value not in _TRUTHY + _FALSEY:
                state.problems.append(_problem("invalid-env", opt.env, f'error while handling environment variable '
                                               f'"{opt.env}": invalid boolean value {value!r}'))
                continue
            state.set(opt, value in _TRUTHY, source)
            continue
        if opt.kind == "int" and _stoi(value) is None:
            state.problems.append(_problem("invalid-env", opt.env, f'error while handling environment variable '
                                           f'"{opt.env}": stoi cannot read {value!r}'))
            continue
        bad = _value_problem(opt.canonical, value)
        if bad:
            state.problems.append(_problem("invalid-env", opt.env,
                                           f'error while handling environment variable "{opt.env}": {bad}'))
            continue
        state.set(opt, _stoi(value) if opt.kind == "int" else value, source)


def _apply_args(state: _State, args: list[str], source: str) -> None:
    if args and not args[0].startswith("-") and args[0].rstrip("/").endswith("llama-server"):
        args = args[1:]  # argv[0], the program
    i = 0
    while i < len(args):
        arg = str(args[i])
        found = lookup(arg)
        if found is None:
            state.problems.append(_problem("unknown-flag", arg, f"error: invalid argument: {arg}"))
            i += 1
            continue
        opt, positive = found
        if opt.canonical in REMOVED:
            state.problems.append(_problem(
                "removed-flag", arg,
                f'error while handling argument "{arg}": the argument has been removed. {REMOVED[opt.canonical]}'))
            i += 1 + opt.takes
            continue
        if opt.takes == 0:
            state.set(opt, positive if opt.kind == "bool" else True, source)
            i += 1
            continue
        if i + opt.takes >= len(args):
            state.problems.append(_problem("missing-value", arg, f'error while handling argument "{arg}": '
                                           "expected value for argument"))
            break
        values = [str(v) for v in args[i + 1:i + 1 + opt.takes]]
        i += 1 + opt.takes
        value = values[0]
        if opt.kind == "int" and _stoi(value) is None:
            state.problems.append(_problem("invalid-value", arg, f'error while handling argument "{arg}": '
                                           f"stoi cannot read {value!r}"))
            continue
        bad = _value_problem(opt.canonical, value)
        if bad:
            state.problems.append(_problem("invalid-value", arg, f'error while handling argument "{arg}": {bad}'))
            continue
        state.set(opt, _stoi(value) if opt.kind == "int" else (values if opt.takes == 2 else value), source)


def parse(args: Iterable[Any] | None = None, env: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """One normalized dict from llama-server CLI args and/or a LLAMA_ARG_* environment.

    ``LLAMA_EXTRA_ARGS`` in env is split like a shell would and read as command-line flags before
    ``args``. The result holds the typed keys of ``TYPED`` that were set, ``spec_types`` (every
    name, in the order llama.cpp appends them), ``spec_type_values`` (each value as given),
    ``options`` (every option by canonical flag), ``sources`` and ``problems`` (what makes
    llama-server exit 1, plus env names it never reads).
    """
    if args is not None and (isinstance(args, (str, bytes)) or not isinstance(args, Iterable)):
        raise SpecdecError(f"flags must be a list of command-line tokens, got {type(args).__name__}: "
                           "split it into a list (one flag or value per item)")
    if env is not None and not isinstance(env, Mapping):
        raise SpecdecError(f"env must be a mapping of LLAMA_ARG_* names to values, got {type(env).__name__}")
    state = _State()
    env = dict(env or {})
    _apply_env(state, env)
    extra = env.get(EXTRA_ARGS_ENV)
    if extra:
        try:
            extra_args = shlex.split(str(extra))
        except ValueError as exc:
            raise SpecdecError(f"{EXTRA_ARGS_ENV}={extra!r} is not shell-quoted correctly: {exc}") from exc
        _apply_args(state, extra_args, f"env:{EXTRA_ARGS_ENV}")
    _apply_args(state, [str(a) for a in (args or [])], "cli")
    return _normalized(state)


def _normalized(state: _State) -> dict[str, Any]:
    config: dict[str, Any] = {
        "spec_types": [n for v in state.spec_type_values for n in v.split(",")],
        "spec_type_values": list(state.spec_type_values),
    }
    for canonical, value in state.options.items():
        typed = TYPED.get(canonical)
        if typed is None or typed[1] == "types":
            continue
        key, kind = typed
        if kind != "str" or not isinstance(value, list):
            config[key] = _typed(kind, value)
        else:
            config[key] = value
    config["options"] = dict(state.options)
    config["sources"] = dict(state.sources)
    config["problems"] = list(state.problems)
    return config


def _options_of(config: Mapping[str, Any]) -> dict[str, Any]:
    """canonical flag -> value, the typed keys winning over ``options`` (so hand-built dicts render)."""
    opts = dict(config.get("options") or {})
    for key, value in config.items():
        flag = KEY_TO_FLAG.get(key)
        if flag is None or value is None:
            continue
        if key == "spec_types":
            if value:
                opts[flag] = ",".join(value)
            continue
        opts[flag] = value
    for flag in opts:
        if lookup(flag) is None:
            raise SpecdecError(f"config option {flag!r} is not a llama-server flag in {SOURCE_TREE}")
    return opts


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, float):
        return format(value, "g")
    if isinstance(value, (list, tuple)):
        return ",".join(_text(v) for v in value)
    return str(value)


def _cli_tokens(opt: Option, value: Any) -> list[str]:
    if opt.kind == "bool":
        return [opt.canonical if value else (opt.neg[-1] if opt.neg else opt.canonical)] if value or opt.neg else []
    if opt.kind == "flag":
        return [opt.canonical] if value else []
    if opt.kind == "value2":
        return [opt.canonical, _text(value[0]), _text(value[1])]
    return [opt.canonical, _text(value)]


def to_args(config: Mapping[str, Any]) -> list[str]:
    """The config as llama-server command-line tokens (canonical flag names)."""
    tokens: list[str] = []
    for flag, value in _options_of(config).items():
        tokens += _cli_tokens(option(flag), value)
    return tokens


def to_env(config: Mapping[str, Any]) -> dict[str, str]:
    """The config as an environment: LLAMA_ARG_* where llama.cpp has a name, the rest in LLAMA_EXTRA_ARGS."""
    env: dict[str, str] = {}
    extra: list[str] = []
    for flag, value in _options_of(config).items():
        opt = option(flag)
        if opt.canonical in REMOVED:
            raise SpecdecError(f"config option {flag} was removed from llama-server: {REMOVED[opt.canonical]}")
        if opt.env and opt.kind != "value2":
            if opt.kind == "flag" and not value:
                continue
            env[opt.env] = _text(value)
        else:
            extra += _cli_tokens(opt, value)
    if extra:
        env[EXTRA_ARGS_ENV] = " ".join(shlex.quote(t) for t in extra)
    return env
