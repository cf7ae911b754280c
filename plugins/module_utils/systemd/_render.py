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

That is form ``env``, for the units this collection deploys (their launchers read the env file). Given the
live unit (module ``serving_unit_info``) of a hand-written unit, form ``exec``: the candidate's whole command
line (``_unit_command.apply_candidate``: an ``LLAMA_ARG_*`` setting becomes its flag, replacing production's,
``flags`` replace or append, ``null`` removes) in ``exec_start``, which ``unit_override`` writes as a drop-in
that resets ``ExecStart=``; ``override`` is then what stays an environment variable (a container's go in as
runtime ``-e`` options instead), ``env`` the server's environment and ``argv`` the server's own arguments, so
the preflight lints ``env`` with ``argv`` as flags. Both forms also give ``form``, ``exec_start`` (None in form
``env``), ``exec_prefix``, ``server_config`` (what the config changes, in the env vocabulary the report and the
judge read), ``effective_env`` (every llama-server option as its ``LLAMA_ARG_*``, for the quality and model
checks), ``host_env`` / ``host_argv`` (``env`` and ``argv`` with a container's paths as the host sees them
through its bind mounts: what the preflight reads on the host) and ``refused``: the settings the server would
silently ignore (``_unit_command.outranked``: in form ``env`` a variable whose flag is on production's command
line; in both forms a config that sets one option as a variable and as a flag), each naming the flag.

``env``, ``effective_env``, ``host_env``, ``server_config`` and ``env_file`` - what the lint, the report and the watch
read - show a variable whose name looks secret (``_secrets.looks_secret``: ``HF_TOKEN``, ``LLAMA_API_KEY``) as
``_secrets.MASK``, never its value; ``override`` and ``exec_start`` keep the candidate's own values, which
``unit_override`` writes (the report's copy of ``override`` is masked too, and a promotion refuses a masked value).
"""
from __future__ import annotations

import hashlib
import os
import shlex
from typing import Any, Dict, List, Mapping, Sequence, Tuple

from ansible_collections.llmfleet.specdec.plugins.module_utils.common._errors import SpecdecError
from ansible_collections.llmfleet.specdec.plugins.module_utils.common._secrets import is_masked, masked
from ansible_collections.llmfleet.specdec.plugins.module_utils.llamacpp import _flags
from ansible_collections.llmfleet.specdec.plugins.module_utils.systemd import _execstart as es
from ansible_collections.llmfleet.specdec.plugins.module_utils.systemd import _unit_command as uc
from ansible_collections.llmfleet.specdec.plugins.module_utils.systemd import _unit_wrapper
from ansible_collections.llmfleet.specdec.plugins.module_utils.systemd._envfile import (
    EnvFileError,
    check_env_value,
    comment_line,
    render_lines,
)

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


def _check_inputs(env: Any, flags: Any, name: str) -> None:
    if env is not None and not isinstance(env, Mapping):
        raise RenderError(f"config {name}: env must be a mapping of variable names to values, got "
                          f"{type(env).__name__}")
    if flags is not None and (isinstance(flags, (str, bytes)) or not isinstance(flags, Sequence)):
        raise RenderError(f"config {name}: flags must be a list of command-line tokens (one flag or value per item), "
                          f"got {type(flags).__name__}")


def _candidate_env(env: Mapping[str, Any] | None, name: str) -> Dict[str, str | None]:
    override: Dict[str, str | None] = {}
    for key, value in (env or {}).items():
        try:
            override[key] = check_env_value(key, value, f"config {name}: env")
        except EnvFileError as exc:
            raise RenderError(str(exc).replace("; nothing was written", "; change it")) from None
    return override


def _split_var(env: Mapping[str, str], var: str, name: str) -> List[str]:
    text = env.get(var, "")
    try:
        return shlex.split(text)
    except ValueError as exc:
        raise RenderError(f"config {name}: {var}={text!r} does not split into arguments like a shell "
                          f"({exc}); pair its quotes") from None


def _effective_env(env: Mapping[str, str], argv: Sequence[str], backend: str) -> Dict[str, str]:
    """Every llama-server option of the process as its LLAMA_ARG_* (LLAMA_EXTRA_ARGS for those without one),
    beside the variables llama-server does not parse; vLLM: the env with the arguments in VLLM_SERVE_ARGS."""
    if backend != "llamacpp":
        return dict(env, VLLM_SERVE_ARGS=" ".join(shlex.quote(a) for a in argv)) if argv else dict(env)
    try:
        options = _flags.to_env(_flags.parse(list(argv), env))
    except SpecdecError:
        return dict(env)  # what llama-server cannot read is the lint's finding
    kept = {k: v for k, v in env.items() if not k.startswith("LLAMA_ARG_") and k != EXTRA_ARGS_ENV}
    return dict(kept, **options)


def _settings(override: Mapping[str, str | None], tokens: Sequence[str], backend: str) -> Dict[str, str | None]:
    """What the config itself changes, in the env vocabulary: its variables, and its flags in the extra-args
    variable of its engine."""
    settings = dict(override)
    if tokens:
        var = EXTRA_VAR[backend]
        quoted = " ".join(shlex.quote(t) for t in tokens)
        settings[var] = f"{settings[var]} {quoted}" if settings.get(var) else quoted
    return settings


def _own_conflicts(override: Mapping[str, str | None], tokens: Sequence[str], name: str) -> List[Dict[str, str]]:
    """A config that sets one llama-server option both as a variable and as a flag: the flag wins."""
    flagged = {opt.canonical for opt, _tokens in uc.llama_options_in(tokens)}
    out = []
    for var in override:
        found = uc.env_option(var)
        if found and found[0].canonical in flagged and found[0].canonical != "--spec-type":
            out.append({"code": "set-twice", "config": name, "setting": var, "flag": found[0].canonical,
                        "message": f"config {name}: {var} and the flag {found[0].canonical} in its flags set the same "
                                   f"llama-server option, and the flag wins; keep one of them"})
    return out


# The settings that say where a server listens: a candidate that changes them would answer somewhere else than
# production's endpoint, which is what the A/B measures (another server's numbers, or none, as the candidate's).
ENDPOINT_VARS = ("LLAMA_ARG_HOST", "LLAMA_ARG_PORT", "VLLM_SERVE_HOST", "VLLM_SERVE_PORT")
ENDPOINT_FLAGS = ("--host", "--port")


def _served_at(env: Mapping[str, Any], args: Sequence[str], backend: str, launcher: bool) -> tuple | None:
    """(host, port) as the server reads them: llama-server its LLAMA_ARG_HOST/PORT, then its command line; vLLM
    its arguments, after what its launcher (form env) puts first from VLLM_SERVE_HOST/PORT. None if unreadable."""
    args = [str(a) for a in args]
    try:
        if backend == "llamacpp":
            options = _flags.parse(args, {k: env[k] for k in ENDPOINT_VARS[:2] if env.get(k) is not None})["options"]
            host, port = options.get("--host"), options.get("--port")
        else:
            if launcher:  # roles/vllm_serve/files/vllm-serve-exec
                args = ["--host", str(env.get("VLLM_SERVE_HOST") or env.get("LLAMA_ARG_HOST") or "127.0.0.1"),
                        "--port", str(env.get("VLLM_SERVE_PORT") or env.get("LLAMA_ARG_PORT") or "8000"), *args]
            host, port = uc._vllm_value(args, "host"), uc._vllm_value(args, "port")
    except SpecdecError:
        return None  # what the server cannot read is the lint's finding
    return (str(host or uc.DEFAULT_HOSTS[backend]), str(port or uc.DEFAULT_PORTS[backend]).strip())


def _endpoint_settings(env: Mapping[str, Any] | None, tokens: Sequence[str], backend: str) -> List[str]:
    """The config's own settings that name a host or port: variables, and flags (in ``flags`` or in an
    arguments variable it sets)."""
    named = [key for key in (env or {}) if key in ENDPOINT_VARS]
    for key in ARGV_VARS[backend]:
        if key in (env or {}):
            try:
                words = shlex.split(str((env or {})[key] or ""))
            except ValueError:
                continue
            named += [f"{key} {w.split('=', 1)[0]}" for w in words if w.split("=", 1)[0] in ENDPOINT_FLAGS]
    named += [f"flags {t.split('=', 1)[0]}" for t in tokens if str(t).split("=", 1)[0] in ENDPOINT_FLAGS]
    return named


def _moves_endpoint(production: tuple | None, candidate: tuple | None, env: Mapping[str, Any] | None,
                    tokens: Sequence[str], backend: str, name: str) -> List[Dict[str, str]]:
    """A candidate that would listen on another host or port than production: refused (it never starts)."""
    if production is None or candidate is None or production == candidate:
        return []
    named = _endpoint_settings(env, tokens, backend) or ["its settings"]
    return [{"code": "moves-endpoint", "config": name, "setting": ", ".join(named),
             "flag": "--port" if production[1] != candidate[1] else "--host",
             "message": f"config {name}: {', '.join(named)} moves the server from production's "
                        f"{production[0]}:{production[1]} to {candidate[0]}:{candidate[1]}, but the A/B measures and "
                        f"checks health on production's endpoint, so another server (or none) would be measured as "
                        f"this config. Remove {', '.join(named)} from config {name}: a candidate serves on "
                        "production's host and port"}]


def render_candidate(base_env: Mapping[str, Any] | None, env: Mapping[str, Any] | None = None,
                     flags: Sequence[Any] | None = None, name: str = "config", backend: str = "llamacpp",
                     unit: Mapping[str, Any] | None = None) -> Dict[str, Any]:
    """The one rendering of a candidate (see the module docstring); RenderError for what cannot run.

    ``unit`` is the live unit as module ``serving_unit_info`` read it: form ``exec`` when it says so, else
    form ``env`` (no unit, a unit not installed, or one of the collection's launchers).

    For vLLM the flags go to ``VLLM_EXTRA_ARGS`` and ``argv`` is ``VLLM_SERVE_ARGS`` then ``VLLM_EXTRA_ARGS``
    split (the launcher adds the model, host and port itself)."""
    if backend not in EXTRA_VAR:
        raise RenderError(f"backend {backend!r}: give llamacpp or vllm")
    _check_inputs(env, flags, name)
    if unit and unit.get("installed", True) and unit.get("form") == "exec":
        return _render_exec(base_env, env, flags, name, backend, unit)
    extra_var = EXTRA_VAR[backend]
    base = _base(base_env, name)
    override = _candidate_env(env, name)
    tokens = [str(token) for token in (flags or [])]
    before = override[extra_var] if extra_var in override else base.get(extra_var)
    if tokens:
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
        argv += _split_var(process_env, var, name)
    refused: List[Dict[str, str]] = []
    installed = backend == "llamacpp" and (unit or {}).get("installed")
    command = list((unit or {}).get("server_args") or []) if installed else []
    if backend == "llamacpp":
        where = f"{'the config' if extra_var in (env or {}) else 'production'}'s {extra_var}"
        refused = uc.outranked(command, _split_var({extra_var: before or ""}, extra_var, name),
                               {k: v for k, v in override.items() if k != extra_var}, name, where)
        refused += _own_conflicts({k: v for k, v in override.items() if k != extra_var}, tokens, name)
    base_argv: List[str] = []
    for var in ARGV_VARS[backend]:
        base_argv += _split_var(base, var, name)
    refused += _moves_endpoint(_served_at(base, command + base_argv, backend, True),
                               _served_at(process_env, command + argv, backend, True), env, tokens, backend, name)
    is_wrapper = bool(unit) and unit.get("kind") == "wrapper"
    if is_wrapper:  # a wrapper's server sees the candidate's variables, nothing else (_unit_wrapper)
        shown = f"the server's command line (its wrapper {(unit.get('argv') or ['?'])[0]} writes it)"
        refused = [dict(r, message=r["message"].replace("the unit's ExecStart= line", shown)) for r in refused]
        refused += _unit_wrapper.refusals(unit, override, tokens, name)
        argv = list(unit.get("server_args") or [])
    return {
        "override": override,
        "env": masked(process_env),
        "unset": sorted(key for key, value in override.items() if value is None),
        "argv": argv,
        "env_file": render_lines({k: v for k, v in masked(override).items() if v is not None}),
        "form": "env",
        "exec_start": None,
        "exec_prefix": "",
        "server_config": masked(override),
        "effective_env": masked(process_env),
        "host_env": masked(process_env),
        "host_argv": list(argv),
        "refused": refused,
    }


def _render_exec(base_env: Mapping[str, Any] | None, env: Mapping[str, Any] | None, flags: Sequence[Any] | None,
                 name: str, backend: str, unit: Mapping[str, Any]) -> Dict[str, Any]:
    """Form ``exec``: the candidate's whole command line over the live unit's (module docstring)."""
    unit_name = str(unit.get("unit") or "the unit")
    engine = unit.get("engine") or backend
    if engine != backend:
        raise RenderError(f"{unit_name} runs {engine}, but specdec_engine says {backend}; make them agree")
    base = _base(base_env if base_env else unit.get("env"), name)
    override = _candidate_env(env, name)
    tokens = [str(token) for token in (flags or [])]
    refused = _own_conflicts(override, tokens, name) if backend == "llamacpp" else []
    try:  # a refused config is rendered as production (it never runs; the preflight names why)
        applied = uc.apply_candidate(unit, {} if refused else override, [] if refused else tokens, name, unit_name)
        if not refused:
            env_now = dict(unit.get("server_env") or base)
            env_then = dict(applied["container_env"]) if applied["container_env"] is not None else {
                k: v for k, v in dict(env_now, **applied["env"]).items() if v is not None}
            refused = _moves_endpoint(_served_at(env_now, unit.get("server_args") or [], backend, False),
                                      _served_at(env_then, applied["server_args"], backend, False),
                                      env, tokens, backend, name)
            if refused:
                applied = uc.apply_candidate(unit, {}, [], name, unit_name)
    except uc.CommandError as exc:
        raise RenderError(str(exc)) from None
    kept: Dict[str, str | None] = dict(applied["env"])
    volumes = list((unit.get("container") or {}).get("volumes") or [])
    if applied["container_env"] is not None:
        process_env = dict(applied["container_env"])
    else:
        process_env = dict(base)
        for key, value in kept.items():
            if value is None:
                process_env.pop(key, None)
            else:
                process_env[key] = value
    try:
        for key, value in kept.items():
            check_env_value(key, value, f"config {name}: env")
    except EnvFileError as exc:
        raise RenderError(str(exc).replace("; nothing was written", "; change it")) from None
    return {
        "override": kept,
        "env": masked(process_env),
        "unset": sorted(key for key, value in kept.items() if value is None),
        "argv": list(applied["server_args"]),
        "env_file": render_lines({k: v for k, v in masked(kept).items() if v is not None}),
        "form": "exec",
        "exec_start": list(applied["argv"]),
        "exec_prefix": str(unit.get("exec_prefix") or ""),
        "server_config": masked(_settings(override, tokens, backend)),
        # a container's paths as the host sees them (its bind mounts): what the preflight reads on the host
        "effective_env": masked({k: uc.host_path(v, volumes) for k, v in
                                 _effective_env(process_env, applied["server_args"], backend).items()}),
        "host_env": masked({k: uc.host_path(v, volumes) for k, v in process_env.items()}),
        "host_argv": [uc.host_path(a, volumes) for a in applied["server_args"]],
        "refused": refused,
    }


def changes_production(rendering: Mapping[str, Any]) -> bool:
    """Whether a rendering asks for something else than production: env layered over it, or settings applied
    to its command line."""
    return bool(rendering.get("override")) or bool(rendering.get("server_config"))


def server_key(rendering: Mapping[str, Any]) -> tuple:
    """What decides the server a rendering starts (two renderings with one key need no restart between them)."""
    override = tuple(sorted((k, v) for k, v in (rendering.get("override") or {}).items()))
    exec_start = rendering.get("exec_start")
    return override + ((("ExecStart", tuple(exec_start)),) if exec_start is not None else ())


def render_configs(configs: Sequence[Mapping[str, Any]], base_env: Mapping[str, Any] | None,
                   baseline: str = "baseline", backend: str = "llamacpp",
                   unit: Mapping[str, Any] | None = None) -> Dict[str, Dict[str, Any]]:
    """Every config's rendering by name. The baseline is production itself: its own overrides are refused
    (the A/B restores production for it, so a baseline env or flags would be measured as something else)."""
    out: Dict[str, Dict[str, Any]] = {}
    for config in configs or []:
        name = str(config.get("name"))
        rendering = render_candidate(base_env, config.get("env"), config.get("flags"), name, backend, unit)
        if name == baseline and (changes_production(rendering) or config.get("env") or config.get("flags")):
            changed = sorted(set(rendering["override"]) | set(config.get("env") or {})) + (
                ["flags"] if config.get("flags") else [])
            raise RenderError(f"config {name}: the baseline is production as it runs (its unit and env file); it "
                              f"cannot set env or flags ({', '.join(changed)}): make that another config")
        out[name] = rendering
    return out


def _one_comment_line(line: Any) -> bool:
    """A table line that is already one whole comment line, kept as written (its column alignment)."""
    return (isinstance(line, str) and line.startswith("#") and not line.endswith("\\")
            and len(line.splitlines()) == 1 and not any(c in line for c in "\r\n\x0b\x0c"))


def exec_promotion(report: Mapping[str, Any], winner: str, live: Mapping[str, Any], table: Sequence[str] = (),
                   force: bool = False, env_dir: str = "/etc/llmfleet-specdec") -> Dict[str, Any]:
    """A form ``exec`` winner as a persistent drop-in (``promoted_dropins``): its measured command line, and its
    remaining variables in an env file the drop-in adds last (as the A/B's transient drop-in did). Refused when
    the run's rendering is not form exec, or production's command line changed since the run measured it
    (``force`` takes it anyway). A wrapper unit (kind ``wrapper``) gets its winner's variables alone
    (``_wrapper_promotion``)."""
    configs = {c.get("name"): c for c in report.get("configs") or []}
    run = report.get("run_id")
    unit = str(live.get("unit") or "the unit")
    rendering = (configs.get(winner) or {}).get("rendering") or {}
    hidden = sorted(k for k, v in (rendering.get("override") or {}).items() if is_masked(v))
    if hidden:
        raise RenderError(f"{winner!r} of run {run} sets {', '.join(hidden)}, whose value the report hides (a secret): "
                          f"a promotion cannot write it. Set it in {unit}'s own environment (its env file or a drop-in), "
                          "leave it out of the candidate, measure again and promote that run")
    if live.get("kind") == "wrapper":
        return _wrapper_promotion(report, winner, live, rendering, table, force, env_dir)
    if rendering.get("form") != "exec" or not rendering.get("exec_start"):
        raise RenderError(f"{unit} runs its own command line (form exec), but run {run} measured {winner!r} in form "
                          f"{rendering.get('form') or 'env'}: re-run the A/B against this unit, then promote")
    if live.get("form") != "exec":
        raise RenderError(f"{unit} is form {live.get('form')} now (its unit changed since run {run}); re-measure")
    measured = list(((configs.get(report.get("baseline")) or {}).get("rendering") or {}).get("exec_start") or [])
    now = list(live.get("argv") or [])
    winner_argv = list(rendering["exec_start"])
    if now not in (measured, winner_argv) and not force:
        raise RenderError(f"{unit}'s command line changed since run {run} measured it (measured: {' '.join(measured)}; "
                          f"now: {' '.join(now)}); re-run the A/B, or set specdec_promote_force=true to install the "
                          "measured command line over the change")
    lines, env_path, env_text = _promoted_env(rendering, winner, unit, run, table, env_dir)
    try:
        command = es.check_exec_start(winner_argv, rendering.get("exec_prefix") or "")
        lines += ["ExecStart=", "ExecStart=" + es.quote_exec_argv(command.argv, command.prefix)]
    except (SpecdecError, EnvFileError) as exc:
        raise RenderError(str(exc)) from None
    dropin, other = promoted_dropins(unit, live)
    return {"dropin": dropin, "other_dropin": other, "text": "\n".join(lines) + "\n",
            "env_file": env_path, "env_text": env_text, "env_dir": env_dir, "env_pattern": f"{unit}.promoted*.env",
            "exec_start": winner_argv, "measured_production": measured, "kind": "exec", "env": {}, "unset": []}


def _wrapper_promotion(report: Mapping[str, Any], winner: str, live: Mapping[str, Any], rendering: Mapping[str, Any],
                       table: Sequence[str], force: bool, env_dir: str) -> Dict[str, Any]:
    """A wrapper unit's winner (form env, kind ``wrapper``) as the persistent drop-in: the winner's variables in an
    env file it adds (and ``UnsetEnvironment=``), the unit's ``ExecStart=`` untouched - the wrapper passes them on
    as the A/B's transient drop-in did. Refused when the run measured another form, or the server's real command
    line (from its process) changed since the run (``force`` takes it anyway)."""
    run = report.get("run_id")
    unit = str(live.get("unit") or "the unit")
    if rendering.get("form") != "env" or rendering.get("exec_start"):
        raise RenderError(f"{unit} starts its server through a wrapper (form env), but run {run} measured {winner!r} "
                          f"in form {rendering.get('form') or '?'}: re-run the A/B against this unit, then promote")
    if not rendering.get("override"):
        raise RenderError(f"{winner!r} of run {run} is production itself (it sets no variable): nothing to promote")
    configs = {c.get("name"): c for c in report.get("configs") or []}
    measured = list(((configs.get(report.get("baseline")) or {}).get("rendering") or {}).get("argv") or [])
    now = list(live.get("server_args") or [])
    if measured and now != measured and not force:
        raise RenderError(f"{unit}'s server runs another command line than run {run} measured (measured: "
                          f"{' '.join(measured)}; now: {' '.join(now)}); re-run the A/B, or set "
                          "specdec_promote_force=true to promote the measured variables over the change")
    lines, env_path, env_text = _promoted_env(rendering, winner, unit, run, table, env_dir)
    dropin, other = promoted_dropins(unit, live)
    return {"dropin": dropin, "other_dropin": other, "text": "\n".join(lines) + "\n",
            "env_file": env_path, "env_text": env_text, "env_dir": env_dir, "env_pattern": f"{unit}.promoted*.env",
            "exec_start": None, "measured_production": measured, "kind": "wrapper",
            "env": {k: v for k, v in rendering["override"].items() if v is not None},
            "unset": sorted(k for k, v in rendering["override"].items() if v is None)}


def promoted_dropins(unit: str, live: Mapping[str, Any]) -> Tuple[str, str]:
    """Where the promotion goes, and the promoted drop-in's other name (an earlier promotion found under it is
    overwritten where it is and then renamed, ``playbooks/tasks/promote_exec.yml``: never two side by side).

    The usual name (``es.PROMOTED_DROPIN``) sorts before the drop-ins an operator writes; on a unit that has one
    sorting after it (``systemctl edit``'s ``override.conf``), which would reset the promoted ``ExecStart=`` or
    variables, the late name (``es.PROMOTED_DROPIN_LATE``) sorts after them all (and before the A/B's)."""
    folder = f"/etc/systemd/system/{unit}.d"
    names = [os.path.basename(str(path)) for path in live.get("dropins") or []]
    late = any(name > es.PROMOTED_DROPIN and es.OWN_MARK not in name for name in names)
    use, other = ((es.PROMOTED_DROPIN_LATE, es.PROMOTED_DROPIN) if late
                  else (es.PROMOTED_DROPIN, es.PROMOTED_DROPIN_LATE))
    return f"{folder}/{use}", f"{folder}/{other}"


def _promoted_env(rendering: Mapping[str, Any], winner: str, unit: str, run: Any, table: Sequence[str],
                  env_dir: str) -> Tuple[List[str], str, str | None]:
    """The promoted drop-in's lines up to its ``ExecStart=``, the env file it names and that file's text."""
    kept = dict(rendering.get("override") or {})
    try:
        env_lines = render_lines({k: v for k, v in kept.items() if v is not None}, f"promotion of {winner}")
    except EnvFileError as exc:
        raise RenderError(str(exc)) from None
    env_text = ("\n".join(env_lines) + "\n") if env_lines else None
    # a name of its own per content: the new file is written before the drop-in that names it, and the previous
    # one (which the previous drop-in names) is removed only once production answers on the new pair, so a cut
    # between any two commits leaves a pair that starts (the previous production's, or the verified one)
    token = hashlib.sha256((env_text or "").encode("utf-8")).hexdigest()[:12]
    env_path = f"{env_dir}/{unit}.promoted-{token}.env"
    # a config name, a run id or a table line with a newline would end its comment and write a directive
    lines = [comment_line(f"Written by llmfleet.specdec playbooks/promote.yml: {unit} runs config {winner} of run "
                          f"{run}."),
             "# Remove this file (and daemon-reload, restart) to go back to the unit's own command line."]
    lines += [line if _one_comment_line(line) else comment_line(line.lstrip("#")) for line in table]
    lines.append("[Service]")
    if any(v is not None for v in kept.values()):
        lines.append(f"EnvironmentFile={env_path}")
    unset = sorted(k for k, v in kept.items() if v is None)
    if unset:
        lines.append("UnsetEnvironment=" + " ".join(unset))
    return lines, env_path, env_text
