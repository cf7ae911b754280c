# Copyright: (c) 2026, llmfleet.specdec contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# Steps exposing the llama.cpp build plan (cmake invocation, script, record, retention) from _build.py to role llamacpp_build.
# Not filters of their own: roles and playbooks call them through filter llmfleet.specdec.internal.
"""llama.cpp builds as data, for templates and tasks (the same code the unit tests render).

- ``options | llmfleet.specdec.internal('llamacpp_build_plan')``: names, paths, the cmake configure and build
  argv, their environment and the fingerprint of one build (see ``_build.plan``). A request cmake
  would refuse (HIP with CUDA, a CUDA build without a compute capability, ...) fails naming the variable.
- ``plan | llmfleet.specdec.internal('llamacpp_build_script')``: the shell script that configures, builds and stages it.
- ``plan | llmfleet.specdec.internal('llamacpp_build_record', commit=..., toolchain=..., built_at=..., host=...)``:
  the BUILD.json record.
- ``installed | llmfleet.specdec.internal('llamacpp_build_prune', current, keep)``: which installed builds to remove.
- ``found | llmfleet.specdec.internal('llamacpp_toolkit_problems', backend, options)``: what is missing to build.
"""
from __future__ import annotations

from typing import Any

from ansible.errors import AnsibleFilterError

from ansible_collections.llmfleet.specdec.plugins.module_utils.build import _build as build
from ansible_collections.llmfleet.specdec.plugins.module_utils.common._errors import SpecdecError


def _guard(fn, *args: Any, **kwargs: Any) -> Any:
    try:
        return fn(*args, **kwargs)
    except SpecdecError as exc:
        raise AnsibleFilterError(str(exc)) from exc


def llamacpp_build_plan(options: dict[str, Any]) -> dict[str, Any]:
    return _guard(build.plan, options)


def llamacpp_build_script(plan: dict[str, Any]) -> str:
    return _guard(build.build_script, plan)


def llamacpp_build_record(plan: dict[str, Any], commit: str | None = None, toolchain: dict[str, Any] | None = None,
                          built_at: str | None = None, host: str | None = None) -> dict[str, Any]:
    return _guard(build.build_record, plan, commit=commit or None, toolchain=toolchain, built_at=built_at, host=host)


def llamacpp_build_prune(installed: list[dict[str, Any]], current: str | None, keep: int,
                         protect: list[str] | None = None) -> list[str]:
    return _guard(build.prune_plan, installed, current, keep, protect or ())


def llamacpp_toolkit_problems(found: dict[str, Any], backend: Any, options: dict[str, Any] | None = None,
                              source_kind: str = "archive") -> list[dict[str, Any]]:
    return _guard(build.toolkit_problems, backend, found, options or {}, source_kind)
