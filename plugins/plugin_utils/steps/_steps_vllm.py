# Copyright: (c) 2026, llmfleet.specdec contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# Steps exposing the collection's vLLM --speculative-config code (_vllm.py) to role vllm_serve and to inventory.
# Not filters of their own: roles and playbooks call them through filter llmfleet.specdec.internal.
"""vLLM's speculative config for templates - the same code spec_lint uses, never a second copy.

- ``spec | llmfleet.specdec.vllm_speculative_config(legacy_flags=[...], vllm_version=V, attention_backend=B)``:
  the ``--speculative-config`` object ``vllm serve`` will read, from a mapping and/or the legacy
  ``--spec-method/--spec-model/--spec-tokens`` flags (mapped as vLLM maps them; a key set both ways is
  vLLM's "Conflicting speculative config"). A config vLLM would refuse fails, naming each reason and fix.
  An empty spec and no legacy flags give ``{}`` (no speculation).
- ``config | llmfleet.specdec.internal('vllm_speculative_warnings', ...)``: what vLLM accepts but warns about.
- ``config | llmfleet.specdec.vllm_speculative_json``: the compact JSON of ``to_cli`` (``{}`` -> ``''``).
- ``config | llmfleet.specdec.vllm_speculative_cli``: ``['--speculative-config', json]`` (``[]`` for none).
"""
from __future__ import annotations

from typing import Any

from ansible.errors import AnsibleFilterError

from ansible_collections.llmfleet.specdec.plugins.module_utils.common._errors import SpecdecError
from ansible_collections.llmfleet.specdec.plugins.module_utils.vllm import _vllm as vllm


def _resolve(spec: dict[str, Any] | None, legacy_flags: list[Any] | None) -> tuple[dict[str, Any], list[str], Any]:
    argv = [str(a) for a in (legacy_flags or [])]
    if spec:
        if not isinstance(spec, dict):
            raise AnsibleFilterError(f"vllm speculative config must be a mapping, got {type(spec).__name__}")
        argv += vllm.to_cli(spec)
    if not argv:
        return {}, [], None
    try:
        parsed = vllm.from_legacy_flags(argv)
    except SpecdecError as exc:
        raise AnsibleFilterError(str(exc)) from exc
    if parsed["problems"]:
        raise AnsibleFilterError("vllm_serve_speculative / vllm_serve_legacy_flags: " + "; ".join(
            f"{p['reason']} (fix: {p['fix']})" for p in parsed["problems"]))
    return parsed["speculative_config"] or {}, parsed["legacy_flags"], parsed["attention_backend"]


def _findings(spec: dict[str, Any] | None, legacy_flags: list[Any] | None, vllm_version: Any,
              attention_backend: str | None) -> tuple[dict[str, Any], dict[str, list]]:
    config, legacy, flag_backend = _resolve(spec, legacy_flags)
    if not config:
        return {}, {"errors": [], "warnings": [], "silent_off": []}
    try:
        result = vllm.validate(config, vllm_version or None, attention_backend or flag_backend, legacy)
    except SpecdecError as exc:
        raise AnsibleFilterError(str(exc)) from exc
    return config, result


def vllm_speculative_config(spec: dict[str, Any] | None, legacy_flags: list[Any] | None = None,
                            vllm_version: Any = None, attention_backend: str | None = None) -> dict[str, Any]:
    config, result = _findings(spec, legacy_flags, vllm_version, attention_backend)
    if result["errors"]:
        raise AnsibleFilterError(
            "vLLM would refuse the speculative config " + vllm.to_cli(config)[1] + ": " +
            "; ".join(f"{e['reason']} (fix: {e['fix']})" for e in result["errors"]))
    return config


def vllm_speculative_warnings(spec: dict[str, Any] | None, legacy_flags: list[Any] | None = None,
                              vllm_version: Any = None, attention_backend: str | None = None) -> list[str]:
    _dummy, result = _findings(spec, legacy_flags, vllm_version, attention_backend)
    return [f"{w['code']}: {w['reason']} (fix: {w['fix']})" for w in result["warnings"]]


def vllm_speculative_json(config: dict[str, Any] | None) -> str:
    return vllm.to_cli(config)[1] if config else ""


def vllm_speculative_cli(config: dict[str, Any] | None) -> list[str]:
    return vllm.to_cli(config) if config else []
