# Copyright: (c) 2026, llmfleet.specdec contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# Private to the collection: the spec_lint entry points — will this llama.cpp or vLLM config start, and will speculation run?
"""spec_lint's entry points: lint a llama.cpp or vLLM config, and everything the spec_lint module returns.

``lint_llamacpp`` walks llama-server's start-up through the stages of ``_lint_rules`` in order;
``lint`` picks the engine (vLLM's rules are ``_vllm``'s); ``run_spec_lint`` reads the models
(facts or a path, through ``_model_facts.facts_or_path``) and the vocabulary verdict, then lints.
The rules themselves are in ``_lint_rules``, llama.cpp's facts and build gates in ``_llamacpp``.
"""
from __future__ import annotations

from typing import Any, Mapping

from ansible_collections.llmfleet.specdec.plugins.module_utils.common._errors import SpecdecError
from ansible_collections.llmfleet.specdec.plugins.module_utils.gguf._gguf import DEFAULT_MAX_HEADER_BYTES, share_left
from ansible_collections.llmfleet.specdec.plugins.module_utils.gguf._model_facts import facts_or_path
from ansible_collections.llmfleet.specdec.plugins.module_utils.lint._lint_rules import (
    HEADER_KEYS,
    _context_stage,
    _cost_stage,
    _draft_load_stage,
    _implementation_stage,
    _parse_stage,
    _resolve_types,
    _Run,
    _synth_stage,
    _vocab_load_stage,
    finding,
)
from ansible_collections.llmfleet.specdec.plugins.module_utils.llamacpp._flags import parse as parse_flags
from ansible_collections.llmfleet.specdec.plugins.module_utils.llamacpp._llamacpp import (
    MTP_RENAME_BUILD,
    PINNED,
    SOURCE_TREE,
    compat_report,
    parse_build,
)
from ansible_collections.llmfleet.specdec.plugins.module_utils.vllm import _vllm

# ------------------------------------------------------------------ entry points


def lint_llamacpp(config: Mapping[str, Any], target: Mapping[str, Any] | None = None,
                  draft: Mapping[str, Any] | None = None, compat: Mapping[str, Any] | None = None,
                  build: Any = None) -> dict[str, Any]:
    """Predict llama-server's behaviour for a normalized config (``_flags.parse``) and header facts."""
    build_n = parse_build(build)
    run = _Run()
    if build_n is not None and build_n < MTP_RENAME_BUILD:
        run.warnings.append(finding(
            "old-build", f"b{build_n} predates the pinned tree; only the mtp -> draft-mtp rename (b9180) is known "
            "for it, the rest of these rules are the pinned tree's",
            "upgrade to the pinned build, or verify the prediction on the host"))
    per_value = _parse_stage(run, config, build_n)
    if run.outcome:
        return run.result()
    enabled = _resolve_types(run, per_value, config, draft)
    _vocab_load_stage(run, compat)
    if run.outcome:
        return run.result()
    _draft_load_stage(run, config, draft)
    if run.outcome:
        return run.result()
    if not enabled:
        _synth_stage(run, [], False, config, draft)
        return run.result()
    if bool(config.get("draft_model")) and draft is None:
        run.warnings.append(finding(
            "draft-facts-missing", "a draft model is configured but no draft facts were given: what the draft "
            "context can run is not checked", "pass the draft's gguf_info facts (or its path) as draft"))
    has_ctx, ctx_model, ctx_label = _context_stage(run, enabled, config, target, draft)
    if run.outcome:
        return run.result()
    chain, failure = _implementation_stage(run, enabled, config, target, draft, has_ctx, ctx_model, ctx_label, compat)
    if run.outcome:
        return run.result()
    if not chain and failure is None:
        run.silent_off.append(finding(
            "chain-empty", f"none of {', '.join(enabled)} can be built here, so common_speculative_init returns "
            "nullptr and the server runs without speculation", "see the findings above for each type"))
    _synth_stage(run, chain, failure is not None, config, draft)
    if run.outcome:
        return run.result()
    run.chain = chain
    _cost_stage(run, chain, config, target, draft)
    return run.result()


def lint(engine: str, config: Any, target_facts: Mapping[str, Any] | None = None,
         draft_facts: Mapping[str, Any] | None = None, compat: Mapping[str, Any] | None = None,
         build: Any = None, vllm_version: str | None = None) -> dict[str, Any]:
    """``{"errors", "silent_off", "warnings", "effective_chain", "outcome"}`` for a llama.cpp or vLLM config.

    llamacpp: ``config`` is ``_flags.parse`` output (or a list of CLI args). vllm: ``config`` is a
    speculative-config dict or a list of ``vllm serve`` args (legacy --spec-* flags included).
    """
    if engine == "llamacpp":
        if isinstance(config, (list, tuple)):
            config = parse_flags(config)
        return lint_llamacpp(config, target_facts, draft_facts, compat, build)
    if engine == "vllm":
        return _vllm.lint(config, vllm_version)
    raise SpecdecError(f"engine={engine!r} is not one spec_lint knows; use llamacpp or vllm")


# ------------------------------------------------------------------ the module's work

def run_spec_lint(params: Mapping[str, Any], read_options: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Everything spec_lint returns, from its params. Reads files only; changes nothing."""
    if params["engine"] == "vllm":
        result = _vllm.lint_params(params)
        result["ok"] = not result["errors"]
        return result
    config = parse_flags(params.get("flags") or [], params.get("env") or {})
    t_label, d_label = "target", "draft"
    target_in, draft_in = params.get("target"), params.get("draft")
    if target_in is None:
        target_in, t_label = config.get("model"), "target (the config's --model)"
    if draft_in is None:
        draft_in, d_label = config.get("draft_model"), "draft (the config's --spec-draft-model)"
    read_options = dict(read_options or {})
    target, t_hdr = facts_or_path(target_in, t_label, read_options, keys=list(HEADER_KEYS))
    if t_hdr is not None:  # both headers are held at once: they share max_header_bytes
        read_options.update(share_left(read_options.get("max_header_bytes", DEFAULT_MAX_HEADER_BYTES), t_hdr))
    draft, d_hdr = facts_or_path(draft_in, d_label, read_options, keys=list(HEADER_KEYS))
    compat = params.get("compat")
    if compat is None and t_hdr is not None and d_hdr is not None:
        compat = compat_report(t_hdr, d_hdr)
    result = lint_llamacpp(config, target, draft, compat, params.get("build"))
    result["ok"] = not result["errors"]
    result["config"] = {k: v for k, v in config.items() if k not in ("options", "sources")}
    result["build"] = params.get("build") or f"pinned ({SOURCE_TREE}, assumed b{PINNED['assumed_build']}+)"
    return result
