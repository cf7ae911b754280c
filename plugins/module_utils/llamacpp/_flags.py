# Copyright: (c) 2026, llmfleet.specdec contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# Private to the collection: llama-server flags and their LLAMA_ARG_* names; a config as flags or env, parsed and rendered.
"""llama-server's command line as data, and a config given as flags or environment as one dict.

The option table ``_OPTIONS`` (generated, in ``_flags_table`` with ``REMOVED``; this room holds the
parser and renderer, not the table) was generated once from ``common/arg.cpp`` of the llama.cpp tree the
project pins (the llama-cpp-python 0.3.36 sdist, ``vendor/llama.cpp`` at ggml-org/llama.cpp@0c1e57098,
a 2026-10 tree; no build number is recorded in it, the field notes call that era "b10133+"):
every ``add_opt(common_arg(...))`` that ``common_params_parser_init`` keeps for LLAMA_EXAMPLE_SERVER
(examples SERVER or COMMON, not excluded for SERVER), as (names, negative names, value kind, env name).
``tests/testbed/flags_table.py`` regenerates the table from arg.cpp; ``tests/integration/test_lint_server.py``
checks it against arg.cpp and its env names against the real binary's ``--help``.

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

from ansible_collections.llmfleet.specdec.plugins.module_utils.common._errors import SpecdecError
from ansible_collections.llmfleet.specdec.plugins.module_utils.llamacpp._flags_table import _OPTIONS, REMOVED
from ansible_collections.llmfleet.specdec.plugins.module_utils.llamacpp._llamacpp import SOURCE_TREE

EXTRA_ARGS_ENV = "LLAMA_EXTRA_ARGS"
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
