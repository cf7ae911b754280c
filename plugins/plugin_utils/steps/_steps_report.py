# Copyright: (c) 2026, llmfleet.specdec contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# Controller-side steps that turn module results into one-line table rows for playbook output.
# Not filters of their own: roles and playbooks call them through filter llmfleet.specdec.internal.
from __future__ import annotations

from typing import Any


def _short(value: Any, width: int = 16) -> str:
    text = "-" if value in (None, "", []) else str(value)
    return text if len(text) <= width else text[: width - 1] + "…"


def model_row(pair: Any) -> str:
    """One row per model from (gguf_info's ``gguf`` facts, file name)."""
    facts, name = pair
    kv_heads = facts.get("head_count_kv")
    swa = facts.get("sliding_window")
    tok = facts.get("tokenizer") or {}
    return " | ".join([
        name,
        _short(facts.get("architecture")),
        _short(facts.get("block_count")),
        _short(kv_heads if not isinstance(kv_heads, list) else "/".join(map(str, kv_heads)), 12),
        _short(len(facts.get("kv_layers") or [])),
        _short(swa if swa else None),
        "yes" if (facts.get("mtp") or {}).get("has_mtp") else "no",
        _short(facts.get("spec_type_autodetect")),
        _short(tok.get("vocab_size")),
        _short(tok.get("tokens_sha256_2000"), 12),
    ])


def compat_row(result: dict[str, Any]) -> str:
    """One row per draft from a registered spec_compat loop item."""
    mismatch = result.get("first_mismatch")
    return " | ".join([
        str(result.get("item")),
        "yes" if result.get("compatible") else "NO",
        "yes" if result.get("tokenizers_identical") else "no",
        "-" if not mismatch else f"id {mismatch['id']}: {mismatch['target']!r} vs {mismatch['draft']!r}",
        "-" if result.get("compatible") else "serves without speculation",
    ])
