# Copyright: (c) 2026, llmfleet.specdec contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# Private to the collection: systemd's EnvironmentFile= syntax, the one place env files are written and read.
"""Env files exactly as systemd reads them, and values written so that systemd passes them on unchanged.

Every env file this collection writes (the base env of ``llamacpp_serve`` and ``vllm_serve``, the
candidate env of ``unit_override``, a promotion) is written by ``render_line``/``quote_value``, and
every env file it reads is read by ``parse_env_text``, a port of ``parse_env_file_internal`` in
systemd's ``src/basic/env-file.c`` (systemd 252, Debian 12; unchanged in substance since v239):

- a line whose first non-blank character is ``#`` or ``;`` is a comment (in systemd 252 a backslash
  at its end continues the comment onto the next line; from v254 on it does not, so the collection never
  writes such a comment and refuses one in a file it reads strictly);
- ``KEY=VALUE``: blanks around the key and before the value are dropped;
- outside quotes a backslash takes the next character literally (a backslash before a newline joins
  the lines); trailing blanks of an unquoted value are dropped; ``#`` inside a value is literal;
- ``'...'`` keeps everything literally, newlines included;
- ``"..."`` keeps everything except ``\\"``, ``\\\\``, ``\\``` and ``\\$``, which lose their backslash
  (any other backslash is kept, and a backslash before a newline joins the lines);
- after a closing quote, blanks are skipped and the value goes on (``"a" "b"`` is ``ab``);
- an unterminated quote at the end of the file still yields the value;
- no ``$VAR`` expansion and no ``%`` specifiers: those belong to unit files, not env files.

systemd then refuses a file whose keys or values are not valid UTF-8, and a process environment
cannot hold a NUL byte. So a value is representable when it is a string without NUL that encodes as
UTF-8 (a lone surrogate does not). Such a value is written bare when it consists of characters no
rule above touches, otherwise inside double quotes with ``"``, ``\\``, ````` and ``$`` escaped, which
carries every other character (spaces at either end, ``#``, ``'``, tabs and newlines) unchanged.
``tests/unit/test_envfile.py`` checks the port against these rules, and molecule scenario ``envfile``
checks both directions against systemd's own parse on a real host.

This is the one home of those rules: ``unit_override``'s candidate (``EnvConfig``, built from a mapping
or a file, rendered as its env file and drop-in, compared with a running process's environment), the
serving roles' templates and checks (``plugins/filter/envfile.py``), promotions, renderings and sweeps all
call it. Not here: where the files live (``_systemd.override_paths``) and reading a process's environment
(``_procview``).
"""
from __future__ import annotations

import re
import shlex
from typing import Any, Dict, List, Mapping, NamedTuple, Sequence, Tuple

from ansible_collections.llmfleet.specdec.plugins.module_utils.common._errors import SpecdecError
from ansible_collections.llmfleet.specdec.plugins.module_utils.systemd._procview import read_text
from ansible_collections.llmfleet.specdec.plugins.module_utils.systemd._systemd import COLLECTION, OverridePaths

NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
# Characters no env-file rule touches; a value made of only these is written bare (readable, and the
# same bytes earlier releases wrote for paths, numbers and names).
_BARE_RE = re.compile(r"[A-Za-z0-9_@%+=:,./-]+\Z")
_DQ_SPECIAL = re.compile(r'(["\\`$])')
# Variables that a launcher splits like a shell (shlex) into command-line arguments: their value,
# as the process receives it, must split.
SHELL_SPLIT_VARS = ("LLAMA_EXTRA_ARGS", "VLLM_SERVE_ARGS", "VLLM_EXTRA_ARGS")
# Linux's limit for one environment string (MAX_ARG_STRLEN, 32 pages), NAME= included.
MAX_ASSIGNMENT_BYTES = 131072 - 1

_WHITESPACE = " \t\n\r"
_NEWLINE = "\n\r"
_COMMENTS = "#;"
_SHELL_NEED_ESCAPE = '"\\`$'


class EnvFileError(SpecdecError):
    """A name, value or env file that systemd would not pass on as given; the message names it."""


def name_problem(name: Any) -> str | None:
    """Why ``name`` cannot be an environment variable's name, or None when it can."""
    if not isinstance(name, str) or not NAME_RE.match(name):
        return f"{name!r} is not an environment variable name (letters, digits and '_', not starting with a digit)"
    return None


def value_problem(name: str, value: str) -> str | None:
    """Why the string ``value`` cannot reach a process unchanged through an env file, or None when it can."""
    if "\x00" in value:
        return ("contains a NUL byte, which no environment variable can hold; remove it")
    try:
        encoded = value.encode("utf-8")
    except UnicodeEncodeError as exc:
        return (f"contains {value[exc.start:exc.end]!r} at character {exc.start}, which is not valid UTF-8 "
                "(a lone surrogate); systemd refuses such a file: give valid text")
    if len(name) + 1 + len(encoded) > MAX_ASSIGNMENT_BYTES:
        return (f"is {len(encoded)} bytes long; one environment variable holds at most "
                f"{MAX_ASSIGNMENT_BYTES - len(name) - 1} (Linux MAX_ARG_STRLEN): pass a file path instead")
    if name in SHELL_SPLIT_VARS:
        try:
            shlex.split(value)
        except ValueError as exc:
            return (f"does not split into arguments like a shell ({exc}): its launcher splits it, so quote "
                    "each argument (for example with shlex.quote)")
    return None


def value_text(value: Any) -> str | None:
    """A config value as the string the process gets: booleans 1/0, numbers as digits, None = unset."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, str):
        return value
    raise EnvFileError(f"a {type(value).__name__} cannot be an environment variable's value; give a string, a "
                       "number, a boolean, or null to unset the variable")


def check_env_value(name: Any, value: Any, where: str = "env") -> str | None:
    """The validated string for ``name``/``value`` (None = unset); EnvFileError names what to change."""
    problem = name_problem(name)
    if problem:
        raise EnvFileError(f"{where}: {problem}; nothing was written")
    try:
        text = value_text(value)
    except EnvFileError as exc:
        raise EnvFileError(f"{where} {name}: {exc}; nothing was written") from None
    if text is not None:
        problem = value_problem(name, text)
        if problem:
            raise EnvFileError(f"{where} {name}: the value {_shown(text)} {problem}; nothing was written")
    return text


def problems(env: Mapping[Any, Any], where: str = "env") -> List[str]:
    """Every reason ``env`` cannot be written, one per variable (empty when all of it can)."""
    found = []
    for name, value in (env or {}).items():
        try:
            check_env_value(name, value, where)
        except EnvFileError as exc:
            found.append(str(exc))
    return found


def quote_value(value: str) -> str:
    """``value`` in env-file syntax such that systemd hands the process exactly ``value``."""
    if _BARE_RE.match(value):
        return value
    return '"' + _DQ_SPECIAL.sub(r"\\\1", value) + '"'


def comment_line(text: Any) -> str:
    """One comment line for an env file or a unit file: no newline from a name may end it (the rest would be read
    as an assignment or a directive), and no final backslash may (in systemd 252) continue it over the line below."""
    return ("# " + " ".join(str(text).split())).rstrip("\\")


def render_line(name: str, value: Any, where: str = "env") -> str:
    """One ``NAME=value`` assignment (validated; the value may span lines inside its quotes)."""
    text = check_env_value(name, value, where)
    if text is None:
        raise EnvFileError(f"{where} {name}: null means unset, which an env file cannot say; leave it out")
    return f"{name}={quote_value(text)}"


def render_lines(env: Mapping[str, Any], where: str = "env") -> List[str]:
    """Assignments for every set variable of ``env``, in order; None values are left out."""
    return [render_line(name, value, where) for name, value in env.items() if value is not None]


# ------------------------------------------------------------------ reading, as systemd reads


def parse_env_text(text: str) -> List[Tuple[str, str, int]]:
    """(key, value, line) for each assignment, in file order, exactly as systemd 252 parses ``text``.

    Keys are not validated here (systemd ignores lines without ``=``, and checks names later); see
    ``read_env_text`` for the strict reading.
    """
    return _parse(text)[0]


def assignment_spans(text: str) -> List[Tuple[str, int, int]]:
    """(key, first line, last line) of each assignment, as systemd parses ``text`` (1-based, inclusive)."""
    return _parse(text)[3]


def _parse(text: str) -> Tuple[List[Tuple[str, str, int]], List[int], str, List[Tuple[str, int, int]]]:
    """The assignments, the lines systemd ignores (a key without ``=``), the state at the end, and spans."""
    out: List[Tuple[str, str, int]] = []
    spans: List[Tuple[str, int, int]] = []
    ignored: List[int] = []
    key: List[str] = []
    value: List[str] = []
    last_key_ws: int | None = None
    last_value_ws: int | None = None
    line = 1
    start_line = 1
    state = "PRE_KEY"

    def push() -> None:
        k = "".join(key[:last_key_ws] if last_key_ws is not None else key)
        out.append((k, "".join(value), start_line))
        spans.append((k, start_line, line))

    text = text.split("\x00", 1)[0]  # systemd reads a C string
    for c in text:
        if state == "PRE_KEY":
            if c in _COMMENTS:
                state = "COMMENT"
            elif c not in _WHITESPACE:
                state = "KEY"
                last_key_ws = None
                key = [c]
                start_line = line
            elif c == "\n":
                line += 1
        elif state == "KEY":
            if c in _NEWLINE:
                state = "PRE_KEY"
                ignored.append(start_line)
                line += c == "\n"
                key = []
            elif c == "=":
                state = "PRE_VALUE"
                last_value_ws = None
                value = []
            else:
                if c not in _WHITESPACE:
                    last_key_ws = None
                elif last_key_ws is None:
                    last_key_ws = len(key)
                key.append(c)
        elif state == "PRE_VALUE":
            if c in _NEWLINE:
                state = "PRE_KEY"
                push()
                line += c == "\n"
                key, value = [], []
            elif c == "'":
                state = "SINGLE_QUOTE_VALUE"
            elif c == '"':
                state = "DOUBLE_QUOTE_VALUE"
            elif c == "\\":
                state = "VALUE_ESCAPE"
            elif c not in _WHITESPACE:
                state = "VALUE"
                value.append(c)
        elif state == "VALUE":
            if c in _NEWLINE:
                state = "PRE_KEY"
                if last_value_ws is not None:
                    del value[last_value_ws:]
                push()
                line += c == "\n"
                key, value = [], []
            elif c == "\\":
                state = "VALUE_ESCAPE"
                last_value_ws = None
            else:
                if c not in _WHITESPACE:
                    last_value_ws = None
                elif last_value_ws is None:
                    last_value_ws = len(value)
                value.append(c)
        elif state == "VALUE_ESCAPE":
            state = "VALUE"
            if c not in _NEWLINE:  # an escaped newline is eaten
                value.append(c)
            else:
                line += c == "\n"
        elif state == "SINGLE_QUOTE_VALUE":
            if c == "'":
                state = "PRE_VALUE"
            else:
                value.append(c)
                line += c == "\n"
        elif state == "DOUBLE_QUOTE_VALUE":
            if c == '"':
                state = "PRE_VALUE"
            elif c == "\\":
                state = "DOUBLE_QUOTE_VALUE_ESCAPE"
            else:
                value.append(c)
                line += c == "\n"
        elif state == "DOUBLE_QUOTE_VALUE_ESCAPE":
            state = "DOUBLE_QUOTE_VALUE"
            if c in _SHELL_NEED_ESCAPE:
                value.append(c)
            elif c != "\n":
                value += ["\\", c]
            else:
                line += 1
        elif state == "COMMENT":
            if c == "\\":
                state = "COMMENT_ESCAPE"
            elif c in _NEWLINE:
                state = "PRE_KEY"
                line += c == "\n"
        else:  # COMMENT_ESCAPE: systemd 252 goes on with the comment; v254 and later end it at a newline
            state = "COMMENT"
            if c == "\n":
                ignored.append(-line)
                line += 1
    if state in ("PRE_VALUE", "VALUE", "VALUE_ESCAPE", "SINGLE_QUOTE_VALUE", "DOUBLE_QUOTE_VALUE",
                 "DOUBLE_QUOTE_VALUE_ESCAPE"):
        if state == "VALUE" and last_value_ws is not None:
            del value[last_value_ws:]
        push()
    elif state == "KEY":
        ignored.append(start_line)
    return out, ignored, state, spans


def read_env_text(text: str, source: str) -> List[Tuple[str, str]]:
    """The assignments of an env file a user wrote, strictly: what systemd would pass on, with the
    mistakes systemd forgives (a line without ``=``, a bad name, a quote left open at the end, a
    variable set twice) refused, naming the line."""
    if "\x00" in text:
        raise EnvFileError(f"{source}: contains a NUL byte, where systemd stops reading; remove it")
    assignments, ignored, state, _dummy = _parse(text)
    for number in ignored:
        if number < 0:
            raise EnvFileError(f"{source} line {-number}: a comment ends in a backslash, which systemd 252 reads as "
                               "going on over the next line and systemd 254 does not; remove the backslash")
        raise EnvFileError(f"{source} line {number}: not a NAME=value line (systemd would ignore it); "
                           "fix or remove it")
    if state in ("SINGLE_QUOTE_VALUE", "DOUBLE_QUOTE_VALUE", "DOUBLE_QUOTE_VALUE_ESCAPE"):
        raise EnvFileError(f"{source} line {assignments[-1][2]}: {assignments[-1][0]}'s quote is never closed, "
                           "so its value runs to the end of the file; close the quote")
    seen: Dict[str, int] = {}
    out: List[Tuple[str, str]] = []
    for key, value, line in assignments:
        problem = name_problem(key)
        if problem:
            raise EnvFileError(f"{source} line {line}: {problem}; fix the name")
        if key in seen:
            raise EnvFileError(f"{source} line {line}: {key} is set twice (first on line {seen[key]}); keep one")
        seen[key] = line
        problem = value_problem(key, value)
        if problem:
            raise EnvFileError(f"{source} line {line}: {key} {problem}")
        out.append((key, value))
    return out


def read_env_values(text: str) -> Dict[str, str]:
    """Lenient reading (a deployed base env, for its port and host): what systemd would pass on, later
    assignments winning, names systemd would drop left out."""
    values: Dict[str, str] = {}
    for key, value, _dummy in parse_env_text(text):
        if NAME_RE.match(key):
            values[key] = value
    return values


def read_env_files(paths: Sequence[str]) -> Dict[str, str]:
    """What a unit's ``EnvironmentFile=``s pass on, in order (a later file wins), read leniently like
    ``read_env_values``. A missing file is left out, as systemd leaves out a ``-`` file (and a unit
    whose required file is missing does not start); one that exists but cannot be read is an error,
    because leaving it out would misstate the unit's env."""
    env: Dict[str, str] = {}
    for path in paths:
        try:
            # newline="": a carriage return inside a quoted value is part of the value, not a line end
            with open(path, encoding="utf-8", errors="replace", newline="") as handle:
                text = handle.read()
        except (FileNotFoundError, NotADirectoryError):
            continue
        except OSError as exc:
            raise EnvFileError(f"env file {path} cannot be read ({exc.strerror}); run as root, or fix the unit's "
                               "EnvironmentFile= to name a readable file") from None
        env.update(read_env_values(text))
    return env


def _shown(value: str, limit: int = 120) -> str:
    shown = repr(value)
    return shown if len(shown) <= limit else shown[:limit] + "...'"


# ------------------------------------------------------------------ a candidate (unit_override's files)
# A candidate is a set of values as the process receives them, written and read by the rules above.

EnvValueError = EnvFileError


class EnvConfig(NamedTuple):
    """A candidate: variables in order (each value exactly as the process receives it) and variables it unsets."""

    assignments: Tuple[Tuple[str, str], ...]
    unset: Tuple[str, ...]

    def names(self) -> List[str]:
        return [name for name, _dummy in self.assignments] + list(self.unset)


def check_env_name(name: Any, where: str = "env") -> str:
    problem = name_problem(name)
    if problem:
        raise EnvValueError(f"{where}: {problem}; nothing was written")
    return name


def env_value_text(name: str, value: Any) -> str | None:
    """The string the process gets for one value (booleans as 1/0, numbers as digits, None = unset); validated."""
    return check_env_value(name, value)


def env_config_from_mapping(env: Mapping[str, Any]) -> EnvConfig:
    """Validates a mapping (module option ``env``); a None value becomes an unset."""
    assignments: List[Tuple[str, str]] = []
    unset: List[str] = []
    for name, value in env.items():
        text = check_env_value(name, value)
        if text is None:
            unset.append(name)
        else:
            assignments.append((name, text))
    if not assignments and not unset:
        raise EnvValueError("env is empty: give at least one variable the candidate changes")
    return EnvConfig(tuple(assignments), tuple(unset))


def env_config_from_text(text: str, source: str) -> EnvConfig:
    """Validates an env file (module option ``env_file``), read as systemd reads it."""
    assignments = read_env_text(text, source)
    if not assignments:
        raise EnvValueError(f"{source}: no variables in it; give at least one NAME=value line")
    return EnvConfig(tuple(assignments), ())


def render_env_file(unit: str, config: EnvConfig) -> str:
    lines = [f"# Written by {COLLECTION}.unit_override: the A/B candidate layered over {unit}'s production env.",
             "# Lives in /run: removed by state=absent, by the dead-man rollback timer, or by a reboot.",
             "# Values are quoted so that systemd passes each one to the process unchanged."]
    lines += render_lines(dict(config.assignments))
    return "\n".join(lines) + "\n"


def render_dropin(paths: OverridePaths, config: EnvConfig) -> str:
    lines = [f"# Written by {COLLECTION}.unit_override: runs {paths.unit} with an A/B candidate's env.",
             "# Transient (/run): state=absent, the dead-man rollback timer or a reboot removes it.",
             "[Service]",
             f"EnvironmentFile={paths.env_file}"]
    if config.unset:
        lines.append("UnsetEnvironment=" + " ".join(config.unset))
    return "\n".join(lines) + "\n"


def config_matches_environ(config: EnvConfig, environ: Mapping[str, str]) -> bool:
    """Whether a process's environment carries the candidate: every value set, every unset absent."""
    for name, value in config.assignments:
        if environ.get(name) != value:
            return False
    return all(name not in environ for name in config.unset)


def effective_env(base: Mapping[str, str], config: EnvConfig | None) -> Dict[str, str]:
    env = dict(base)
    if config is not None:
        env.update(config.assignments)
        for name in config.unset:
            env.pop(name, None)
    return env


def candidate_differences(base: Mapping[str, str], config: EnvConfig | None) -> EnvConfig | None:
    """The part of a candidate that differs from production (None when nothing differs or nothing is known)."""
    if config is None:
        return None
    assignments = tuple((name, value) for name, value in config.assignments if base.get(name) != value)
    unset = tuple(name for name in config.unset if name in base)
    return EnvConfig(assignments, unset) if assignments or unset else None


def carries_candidate(environ: Mapping[str, str], base: Mapping[str, str], config: EnvConfig | None) -> bool:
    """Whether a process's environment carries what the candidate changed (False when it changed nothing)."""
    differences = candidate_differences(base, config)
    return differences is not None and config_matches_environ(differences, environ)


def load_config(env: Mapping[str, Any] | None, env_file: str | None) -> EnvConfig:
    """The candidate from O(env) (a mapping) or O(env_file) (a file on the managed host), validated."""
    if env is not None:
        return env_config_from_mapping(env)
    if env_file is None:
        raise SpecdecError("state=present needs the candidate: give env (a mapping) or env_file (a path on the host)")
    text = read_text(env_file)
    if text is None:
        raise SpecdecError(f"env_file {env_file} does not exist on the managed host")
    return env_config_from_text(text, env_file)
