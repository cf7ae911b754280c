# Copyright: (c) 2026, llmfleet.specdec contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# Private to the collection: one rendering per A/B candidate (what is linted, written and reported).
"""A candidate (``env`` overrides, extra ``flags``) over production's env, rendered once.

Production's env is the serving unit's env file as role ``llamacpp_serve`` writes it (read from the
host when it can be, as systemd reads it). A candidate changes it the way the serving unit will see it:

- each ``env`` entry replaces production's value; ``null`` unsets the variable (``UnsetEnvironment=``),
  even when production's env file sets it;
- ``flags`` are command-line arguments: they are appended, shell-quoted, to ``LLAMA_EXTRA_ARGS`` (after
  production's own, or after the candidate's when it sets that variable), which the unit's launcher
  splits like a shell and passes to llama-server after the binary. llama-server then reads its
  ``LLAMA_ARG_*`` variables first and the command line after them (``common/arg.cpp``,
  ``common_params_parse_ex``): a flag overrides its variable, except ``--spec-type``, whose handler
  appends, so ``LLAMA_ARG_SPEC_TYPE=ngram-mod`` plus ``--spec-type draft-simple`` runs
  ``ngram-mod,draft-simple``. A flag is never turned into a variable: that would replace production's
  value instead of adding to it, and drop production's ``LLAMA_EXTRA_ARGS``.

The rendering holds ``override`` (what ``unit_override`` layers over production: values as the process
receives them, None = unset), ``env`` (the process's environment from its env files), ``unset``,
``argv`` (the arguments the launcher appends) and ``env_file`` (the override file's assignments as
written). The preflight lints ``env`` (with no separate flags), ``unit_override`` gets ``override``,
and the report records the whole rendering.
"""
from __future__ import annotations

import shlex
from typing import Any, Dict, List, Mapping, Sequence

from ansible_collections.llmfleet.specdec.plugins.module_utils._envfile import (
    EnvFileError,
    check_env_value,
    render_lines,
)
from ansible_collections.llmfleet.specdec.plugins.module_utils._errors import SpecdecError

EXTRA_ARGS_ENV = "LLAMA_EXTRA_ARGS"
# Where each engine's launcher takes a candidate's own flags from (appended last), and the variables it
# splits into arguments, in order (roles llamacpp_serve and vllm_serve, files/*-serve-exec).
EXTRA_VAR = {"llamacpp": "LLAMA_EXTRA_ARGS", "vllm": "VLLM_EXTRA_ARGS"}
ARGV_VARS = {"llamacpp": ("LLAMA_EXTRA_ARGS",), "vllm": ("VLLM_SERVE_ARGS", "VLLM_EXTRA_ARGS")}


class RenderError(SpecdecError):
    """A candidate that cannot be rendered; the message names the config and what to change."""


def _base(base_env: Mapping[str, Any] | None, name: str) -> Dict[str, str]:
    base: Dict[str, str] = {}
    for key, value in (base_env or {}).items():
        try:
            text = check_env_value(key, value, f"production's env (base of {name})")
        except EnvFileError as exc:
            raise RenderError(str(exc).replace("; nothing was written", "")) from None
        if text is not None:
            base[key] = text
    return base


def render_candidate(base_env: Mapping[str, Any] | None, env: Mapping[str, Any] | None = None,
                     flags: Sequence[Any] | None = None, name: str = "config", backend: str = "llamacpp") -> Dict[str, Any]:
    """The one rendering of a candidate (see the module docstring); RenderError for what cannot run.

    For vLLM the flags go to ``VLLM_EXTRA_ARGS`` and ``argv`` is ``VLLM_SERVE_ARGS`` then ``VLLM_EXTRA_ARGS``
    split (the launcher adds the model, host and port itself)."""
    if backend not in EXTRA_VAR:
        raise RenderError(f"backend {backend!r}: give llamacpp or vllm")
    extra_var = EXTRA_VAR[backend]
    base = _base(base_env, name)
    if env is not None and not isinstance(env, Mapping):
        raise RenderError(f"config {name}: env must be a mapping of variable names to values, got "
                          f"{type(env).__name__}")
    if flags is not None and (isinstance(flags, (str, bytes)) or not isinstance(flags, Sequence)):
        raise RenderError(f"config {name}: flags must be a list of command-line tokens (one flag or value per item), "
                          f"got {type(flags).__name__}")
    override: Dict[str, str | None] = {}
    for key, value in (env or {}).items():
        try:
            override[key] = check_env_value(key, value, f"config {name}: env")
        except EnvFileError as exc:
            raise RenderError(str(exc).replace("; nothing was written", "; change it")) from None
    tokens = [str(token) for token in (flags or [])]
    if tokens:
        before = override[extra_var] if extra_var in override else base.get(extra_var)
        quoted = " ".join(shlex.quote(token) for token in tokens)
        combined = f"{before} {quoted}" if before else quoted
        try:
            override[extra_var] = check_env_value(extra_var, combined, f"config {name}: flags")
        except EnvFileError as exc:
            raise RenderError(str(exc).replace("; nothing was written", "; change it")) from None
    process_env = dict(base)
    for key, value in override.items():
        if value is None:
            process_env.pop(key, None)
        else:
            process_env[key] = value
    argv: List[str] = []
    for var in ARGV_VARS[backend]:
        text = process_env.get(var, "")
        try:
            argv += shlex.split(text)
        except ValueError as exc:
            raise RenderError(f"config {name}: {var}={text!r} does not split into arguments like a shell "
                              f"({exc}); pair its quotes") from None
    return {
        "override": override,
        "env": process_env,
        "unset": sorted(key for key, value in override.items() if value is None),
        "argv": argv,
        "env_file": render_lines({k: v for k, v in override.items() if v is not None}),
    }


def render_configs(configs: Sequence[Mapping[str, Any]], base_env: Mapping[str, Any] | None,
                   baseline: str = "baseline", backend: str = "llamacpp") -> Dict[str, Dict[str, Any]]:
    """Every config's rendering by name. The baseline is production itself: its own overrides are refused
    (the A/B restores production for it, so a baseline env or flags would be measured as something else)."""
    out: Dict[str, Dict[str, Any]] = {}
    for config in configs or []:
        name = str(config.get("name"))
        rendering = render_candidate(base_env, config.get("env"), config.get("flags"), name, backend)
        if name == baseline and rendering["override"]:
            raise RenderError(f"config {name}: the baseline is production as it runs (its env file); it cannot set "
                              f"env or flags ({', '.join(sorted(rendering['override']))}): make that another config")
        out[name] = rendering
    return out
