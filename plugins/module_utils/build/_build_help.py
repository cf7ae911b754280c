# Copyright: (c) 2026, llmfleet.specdec contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# Private to the collection: a build's own flag table (its --help) against the command line production runs.
"""The flag table per build: what a new llama-server's ``--help`` knows, against what production runs.

llama-server prints one entry per option (common/arg.cpp ``common_arg::to_string``): its names at the start of a
line (``-m,    --model FNAME``, the abbreviation padded), the value hint after the last name (for ``--spec-type`` the
whole vocabulary, ``none,draft-simple,...``, from ``common_speculative_all_types_str``), the help text from column 40
and ``(env: LLAMA_ARG_*)`` at its end. :func:`help_table` reads those three things back.

:func:`refusals` compares them with a unit's process as it runs (its command line, its ``LLAMA_ARG_*`` environment):

- a flag the new build does not know makes llama-server exit 1 before it loads anything (``common_params_parse``);
- a ``--spec-type`` name outside its vocabulary does the same (``common_speculative_types_from_names`` throws);
- a ``LLAMA_ARG_*`` variable it no longer reads is never read at all, silently: speculation can turn off with no
  error (``LLAMA_ARG_SPEC_TYPE`` renamed). It is refused when the running build's ``--help`` knew it (a variable
  neither build reads changes nothing by the upgrade).

Each refusal names the rename when one is known, from the lint's table (``_lint_rules.spec_type_rename``, the
pinned option table's aliases and ``REMOVED``'s advice).
"""
from __future__ import annotations

import re
from typing import Any, Callable, Dict, List, Mapping, Sequence, Tuple

from ansible_collections.llmfleet.specdec.plugins.module_utils.lint._lint_rules import spec_type_rename
from ansible_collections.llmfleet.specdec.plugins.module_utils.llamacpp import _flags
from ansible_collections.llmfleet.specdec.plugins.module_utils.llamacpp._flags_table import REMOVED

_NAMES = re.compile(r"((?:--?[A-Za-z0-9][A-Za-z0-9_.-]*,\s*)*--?[A-Za-z0-9][A-Za-z0-9_.-]*)")
_ENV = re.compile(r"\(env:\s+([A-Z][A-Z0-9_]*)\)")
_SPEC_TYPES = re.compile(r"^--spec-type\s+([a-z0-9][a-z0-9,_-]*)(?:\s|$)", re.M)


def help_table(text: str) -> Dict[str, Any]:
    """``{"flags": [...], "envs": [...], "spec_types": [...] or None, "removed": {flag: advice}}`` from a llama-server
    ``--help`` text.

    ``spec_types`` is None when the help lists no ``--spec-type`` vocabulary (an older build that prints only a
    hint): its names are then not judged. A flag whose help says "the argument has been removed" (arg.cpp keeps such
    flags only to refuse them with ``arg_removed``'s advice) is in ``removed``, not in ``flags``."""
    entries: List[Tuple[List[str], str]] = []
    for line in text.splitlines():
        match = _NAMES.match(line) if line.startswith("-") else None
        if match:
            rest = line[match.end():]  # " HINT  help..." or "  help..." (no hint) or " HINT" (help on the next line)
            said = rest.strip() if rest.startswith("  ") else [*re.split(r"\s{2,}", rest.strip(), maxsplit=1), ""][1]
            entries.append(([n for n in re.split(r",\s*", match.group(1)) if n], said))
        elif entries and line.startswith(" " * 40):
            entries[-1] = (entries[-1][0], entries[-1][1] + " " + line.strip())
    flags: List[str] = []
    removed: Dict[str, str] = {}
    for names, help_text in entries:
        said = " ".join(help_text.split())
        if said.startswith("the argument has been removed"):
            advice = _ENV.sub("", said.split("removed.", 1)[-1]).strip()
            removed.update({name: advice for name in names})
        else:
            flags += [name for name in names if name not in flags]
    envs = sorted(set(_ENV.findall(" ".join(text.split()))))
    types = _SPEC_TYPES.search(text)
    spec_types = [t for t in types.group(1).split(",") if t] if types else None
    return {"flags": flags, "envs": envs, "spec_types": spec_types, "removed": removed}


def _flag_rename(flag: str, known: Sequence[str]) -> str:
    """Another name of the same option that the new build knows (the pinned table's aliases), else REMOVED's advice."""
    found = _flags.lookup(flag)
    if found is not None:
        option, positive = found
        names = option.names if positive else option.neg
        alias = next((n for n in names if n != flag and n in known), None)
        if alias:
            return f"use {alias} (another name of the same option)"
        if option.canonical in REMOVED:
            return REMOVED[option.canonical]
    return ""


def _env_rename(name: str, known_envs: Sequence[str], known_flags: Sequence[str]) -> str:
    option = next((o for o in _flags.OPTIONS if o.env == name), None)
    if option is None:
        return ""
    if option.canonical in REMOVED:
        return REMOVED[option.canonical]
    flag = next((n for n in option.names if n in known_flags), None)
    return f"give it as {flag} on the command line" if flag else ""


def _spec_type_values(argv: Sequence[str], env: Mapping[str, str]) -> List[str]:
    values = [env["LLAMA_ARG_SPEC_TYPE"]] if env.get("LLAMA_ARG_SPEC_TYPE") else []
    values += [str(argv[i + 1]) for i, arg in enumerate(argv[:-1]) if arg == "--spec-type"]
    names: List[str] = []
    for value in values:
        names += [n for n in value.split(",") if n and n not in names]
    return names


def refusals(new: Mapping[str, Any], argv: Sequence[str], env: Mapping[str, str],
             old: Mapping[str, Any] | None = None) -> List[str]:
    """What in production's command line (``argv``, the program first) and environment the new build's help
    (``new``, a :func:`help_table`) does not know; one sentence each, with the rename when one is known.
    ``old``: the running build's help table (an env name it did not read either is not the upgrade's doing)."""
    out: List[str] = []
    flags = list(new.get("flags") or [])
    if not flags:
        return ["its --help lists no option at all, so the command line production runs cannot be checked against it"]
    for arg in argv[1:]:
        arg = str(arg)
        if not arg.startswith("-") or len(arg) < 2 or arg[1].isdigit() or arg in flags:
            continue
        if arg.startswith("--") and arg.replace("_", "-") in flags:
            continue  # llama.cpp reads --long_name as --long-name
        advice = (new.get("removed") or {}).get(arg)
        fix = advice if advice is not None else _flag_rename(arg, flags)
        what = "is removed in it" if advice is not None else "is not in its --help"
        out.append(f"flag {arg} {what} (llama-server exits 1 on it)" + (f": {fix}" if fix else ""))
    vocabulary = new.get("spec_types")
    if vocabulary:
        for name in _spec_type_values(argv, env):
            if name not in vocabulary:
                renamed = spec_type_rename(name, vocabulary)
                fix = f": renamed, use --spec-type {renamed}" if renamed else f": use one of {','.join(vocabulary)}"
                out.append(f"--spec-type {name!r} is not in its vocabulary ({','.join(vocabulary)}; llama-server exits 1 "
                           f"on it){fix}")
    envs = list(new.get("envs") or [])
    # what the running build read (its --help; without one, the pinned table's names)
    was_read = set(old.get("envs") or []) if old else {o.env for o in _flags.OPTIONS if o.env}
    for name in sorted(env):
        if not name.startswith("LLAMA_ARG_") or name in envs:
            continue
        if name.startswith("LLAMA_ARG_NO_") and "LLAMA_ARG_" + name[len("LLAMA_ARG_NO_"):] in envs:
            continue
        if name not in was_read:
            continue
        fix = _env_rename(name, envs, flags)
        out.append(f"{name} is not read by it (its --help names no such variable), so that setting would be silently "
                   "dropped" + (f": {fix}" if fix else ""))
    return out


def check(call: Callable[[List[str]], Tuple[int, str, str]], binary: str,
          units: Sequence[Tuple[str, str, Sequence[str], Mapping[str, str]]]) -> List[Tuple[str, List[str]]]:
    """``(unit, refusals)`` for each unit (name, its running binary, argv, env) the new ``binary`` refuses; ``call``
    runs a command (``[binary, "--help"]``) and returns (rc, stdout, stderr)."""
    tables: Dict[str, Any] = {}
    for path in [binary] + [exe for _unit, exe, _argv, _env in units]:
        if path not in tables:
            rc, out, _err = call([path, "--help"])
            tables[path] = help_table(out) if rc == 0 else None
    if tables[binary] is None:
        return [(units[0][0] if units else "-", [f"`{binary} --help` failed, so its flag table cannot be read "
                                                 "(rebuild it)"])]
    found = [(unit, refusals(tables[binary], argv, env, tables[exe])) for unit, exe, argv, env in units]
    return [(unit, why) for unit, why in found if why]
