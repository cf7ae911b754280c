# Copyright: (c) 2026, llmfleet.specdec contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# Private to the collection: a service's ExecStart=, Environment= and EnvironmentFile= read and written as systemd does.
"""systemd's own syntax for the lines of a service that say what it runs, ported from systemd 252 (Debian 12).

- ``unit_assignments``: a unit file or drop-in as ``src/shared/conf-parser.c`` reads it: lines whose first
  non-blank character is ``#`` or ``;`` are comments (also inside a continuation, which they do not end), a
  line ending in an unescaped backslash goes on on the next line (the backslash becomes a space), key and
  value are stripped of blanks, ``[Section]`` headers;
- ``extract_first_word``: ``src/basic/extract-word.c`` with the flags the unit loader uses: quotes (single or
  double, opening anywhere in a word) group, a backslash escapes inside and outside quotes, and with
  ``cunescape`` C escapes (``\\n``, ``\\t``, ``\\s``, ``\\xNN``, octal ``\\NNN``, ``\\uNNNN``, ``\\UNNNNNNNN``)
  are decoded (``cunescape_one`` in ``src/basic/escape.c``); an unknown escape keeps its backslash, as
  ``extract_first_word_and_warn`` retries it; an unbalanced quote makes systemd ignore the line;
- ``parse_exec``: ``config_parse_exec`` (``src/core/load-fragment.c``): the prefixes ``-``, ``@``, ``:``,
  ``+``, ``!``, ``!!`` on the first word, the program, ``;`` between commands, each word's ``%`` specifiers
  resolved when the unit is loaded (``unit_full_printf``, ``%%`` is one ``%``);
- ``expand_argv``: ``replace_env_argv`` (``src/basic/env-util.c``), run when the process is spawned: a word
  that is exactly ``$NAME`` becomes the variable's value split at whitespace (quotes in the value group),
  ``${NAME}`` inside a word becomes the value as it is, ``$$`` is one ``$``, any other ``$`` stays;
- ``parse_environment`` (``Environment=``), ``parse_environment_file`` (``EnvironmentFile=``, ``-`` optional)
  and ``parse_unset_environment`` (``UnsetEnvironment=``);
- ``quote_exec_argv``: the other direction, an argument vector written so that the three steps above give
  it back unchanged (``%`` as ``%%``, ``$`` as ``$$``, quotes, backslashes and control characters escaped).

Only parsing and writing: reading the files and the host's facts for the specifiers happens in
``_serving_unit``. ``tests/unit/test_execstart.py`` checks the port case by case, and molecule scenario
``units`` checks it against the argument vectors systemd really spawns.
"""
from __future__ import annotations

import re
from typing import Any, Callable, Dict, List, Mapping, NamedTuple, Sequence, Tuple, Union

from ansible_collections.llmfleet.specdec.plugins.module_utils.common._errors import SpecdecError

WHITESPACE = " \t\n\r"
# A promoted exec-form winner: a persistent drop-in in /etc/systemd/system/<unit>.d/ that sorts before the A/B
# candidate's transient one (``_systemd.DROPIN_NAME``, zz-...), so an A/B run on a promoted unit still replaces
# its ExecStart= with each candidate's.
PROMOTED_DROPIN = "40-llmfleet-specdec-promoted.conf"
# The same drop-in on a unit an operator customised with drop-ins that sort after the usual name (``systemctl
# edit``'s ``override.conf`` resets ``ExecStart=``): it sorts after them, before the A/B's ``zz-`` drop-in and the
# pins (``zy-``), so the promoted line is what the unit runs.
PROMOTED_DROPIN_LATE = "zx-llmfleet-specdec-promoted.conf"
PROMOTED_DROPINS = (PROMOTED_DROPIN, PROMOTED_DROPIN_LATE)
COMMENTS = "#;"
OWN_MARK = "llmfleet-specdec"
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
# ExecStart= prefixes systemd 252 knows, on the first word (in any order, each once).
PREFIX_CHARS = "-@:+!"


class UnitSyntaxError(SpecdecError):
    """A unit line systemd would refuse or ignore, or that this collection cannot read exactly."""


# ------------------------------------------------------------------ unit files


class Assignment(NamedTuple):
    section: str
    key: str
    value: str
    line: int


def unit_assignments(text: str) -> List[Assignment]:
    """Every ``key=value`` of a unit file or drop-in, in order, as systemd's config parser reads it."""
    out: List[Assignment] = []
    section = ""
    continuation: str | None = None
    start = 0
    if text.startswith("\ufeff"):
        text = text[1:]
    lines = re.split(r"\r\n|\n|\r", text)
    if lines and lines[-1] == "":
        lines.pop()
    for number, raw in enumerate(lines, 1):
        stripped = raw.lstrip(WHITESPACE)
        if stripped and stripped[0] in COMMENTS:
            continue
        joined = raw if continuation is None else continuation + raw
        if continuation is None:
            start = number
        if _ends_in_escape(joined):
            continuation = joined[:-1] + " "
            continue
        continuation = None
        section = _parse_line(joined, section, start, out)
    if continuation is not None:
        _parse_line(continuation, section, start, out)
    return out


def _ends_in_escape(text: str) -> bool:
    escaped = False
    for char in text:
        escaped = (not escaped) and char == "\\"
    return escaped


def _parse_line(line: str, section: str, number: int, out: List[Assignment]) -> str:
    line = line.strip(WHITESPACE)
    if not line:
        return section
    if line.startswith("["):
        if not line.endswith("]"):
            raise UnitSyntaxError(f"line {number}: invalid section header {line!r}")
        return line[1:-1]
    key, sep, value = line.partition("=")
    if sep and section:
        out.append(Assignment(section, key.strip(WHITESPACE), value.strip(WHITESPACE), number))
    return section


# ------------------------------------------------------------------ words


_SIMPLE_ESCAPES = {"a": "\a", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\v",
                   "\\": "\\", '"': '"', "'": "'", "s": " "}
_HEX = "0123456789abcdefABCDEF"


def cunescape_one(text: str, i: int) -> Tuple[bytes, int] | None:
    """The C escape starting at ``text[i]`` (after the backslash): (its bytes, characters used); None if invalid."""
    char = text[i] if i < len(text) else ""
    if char in _SIMPLE_ESCAPES:
        return _SIMPLE_ESCAPES[char].encode(), 1
    if char == "x":
        digits = text[i + 1:i + 3]
        if len(digits) < 2 or any(d not in _HEX for d in digits) or int(digits, 16) == 0:
            return None
        return bytes([int(digits, 16)]), 3
    if char in ("u", "U"):
        width = 4 if char == "u" else 8
        digits = text[i + 1:i + 1 + width]
        if len(digits) < width or any(d not in _HEX for d in digits):
            return None
        code = int(digits, 16)
        if code == 0 or code > 0x10FFFF or 0xD800 <= code <= 0xDFFF or (char == "U" and code in (0xFFFE, 0xFFFF)):
            return None
        return chr(code).encode("utf-8"), 1 + width
    if char and char in "01234567":
        digits = text[i:i + 3]
        if len(digits) < 3 or any(d not in "01234567" for d in digits):
            return None
        value = int(digits, 8)
        if value == 0 or value > 255:
            return None
        return bytes([value]), 3
    return None


class _BadWordError(Exception):
    """extract_first_word's -EINVAL (``why`` says which)."""

    def __init__(self, why: str) -> None:
        super().__init__(why)
        self.why = why


def extract_first_word(text: str, pos: int, *, cunescape: bool, relax: bool = False,
                       unescape_relax: bool = False) -> Tuple[str | None, int]:
    """One word from ``text[pos:]`` with EXTRACT_UNQUOTE (and CUNESCAPE, RELAX, UNESCAPE_RELAX as asked):
    (the word or None at the end, the position after it). Raises _BadWordError for systemd's -EINVAL."""
    n = len(text)
    while pos < n and text[pos] in WHITESPACE:
        pos += 1
    if pos >= n:
        return None, pos
    out = bytearray()
    quote = ""
    while True:
        if pos >= n:
            if quote and not relax:
                raise _BadWordError("unbalanced quoting")
            return _decoded(out), pos
        char = text[pos]
        if char == "\\":
            pos += 1
            if pos >= n:
                if unescape_relax and (not quote or relax):
                    out += b"\\"
                    return _decoded(out), pos
                if relax:
                    return _decoded(out), pos
                raise _BadWordError("a backslash at the end")
            if cunescape:
                decoded = cunescape_one(text, pos)
                if decoded is not None:
                    out += decoded[0]
                    pos += decoded[1]
                    continue
                if not unescape_relax:
                    raise _BadWordError(f"an unknown escape \\{text[pos]}")
                out += ("\\" + text[pos]).encode("utf-8", "surrogateescape")
            else:
                out += text[pos].encode("utf-8", "surrogateescape")
            pos += 1
            continue
        if quote:
            if char == quote:
                quote = ""
            else:
                out += char.encode("utf-8", "surrogateescape")
            pos += 1
            continue
        if char in ("'", '"'):
            quote = char
            pos += 1
            continue
        if char in WHITESPACE:
            while pos < n and text[pos] in WHITESPACE:
                pos += 1
            return _decoded(out), pos
        out += char.encode("utf-8", "surrogateescape")
        pos += 1


def _decoded(raw: bytearray) -> str:
    return bytes(raw).decode("utf-8", "surrogateescape")


def extract_words_and_warn(text: str, pos: int) -> Tuple[str | None, int, bool]:
    """``extract_first_word_and_warn`` with UNQUOTE|CUNESCAPE: an unknown escape is kept with its backslash
    (systemd warns); an unbalanced quote raises. Returns (word, position, whether an escape was kept)."""
    try:
        word, end = extract_first_word(text, pos, cunescape=True)
        return word, end, False
    except _BadWordError:
        try:
            word, end = extract_first_word(text, pos, cunescape=True, unescape_relax=True)
        except _BadWordError as exc:
            raise UnitSyntaxError(f"{exc.why}: systemd ignores this line") from None
        return word, end, True


def split_words(text: str, *, cunescape: bool, relax: bool = False) -> List[str]:
    """Every word of ``text`` by extract_first_word (strv_split_full); UnitSyntaxError where systemd fails."""
    words: List[str] = []
    pos = 0
    while True:
        try:
            word, pos = extract_first_word(text, pos, cunescape=cunescape, relax=relax)
        except _BadWordError as exc:
            raise UnitSyntaxError(exc.why) from None
        if word is None:
            return words
        words.append(word)


# ------------------------------------------------------------------ specifiers

Specifiers = Mapping[str, Union[str, Callable[[], str]]]


def resolve_specifiers(text: str, table: Specifiers) -> str:
    """``unit_full_printf``: each ``%x`` by the table (``%%`` is ``%``); an unknown one is an error."""
    out: List[str] = []
    i = 0
    while i < len(text):
        char = text[i]
        if char != "%":
            out.append(char)
            i += 1
            continue
        spec = text[i + 1:i + 2]
        if spec == "%":
            out.append("%")
        elif spec and spec in table:
            value = table[spec]
            out.append(value() if callable(value) else value)
        elif not spec:
            raise UnitSyntaxError("a lone % at the end of a word (write %% for a percent sign)")
        else:
            raise UnitSyntaxError(f"the specifier %{spec} cannot be resolved here (write %% for a percent sign, or "
                                  "write the value out)")
        i += 2
    return "".join(out)


# ------------------------------------------------------------------ ExecStart=


class ExecCommand(NamedTuple):
    prefix: str
    path: str
    argv: Tuple[str, ...]
    kept_escapes: bool


def _split_prefix(first: str) -> Tuple[str, str]:
    """The prefix characters of the first word, as config_parse_exec accepts them (each at most once)."""
    prefix = ""
    i = 0
    while i < len(first):
        char = first[i]
        if char == "-" and "-" not in prefix:
            prefix += char
        elif char == "@" and "@" not in prefix:
            prefix += char
        elif char == ":" and ":" not in prefix:
            prefix += char
        elif char == "+" and not any(c in prefix for c in "+!"):
            prefix += char
        elif char == "!" and "+" not in prefix and prefix.count("!") < 2:
            prefix += char
        else:
            break
        i += 1
    return prefix, first[i:]


def parse_exec(value: str, table: Specifiers) -> List[ExecCommand]:
    """The commands of one ``ExecStart=`` value (empty: the reset, an empty list)."""
    value = value.lstrip(WHITESPACE)
    commands: List[ExecCommand] = []
    pos = 0
    while value[pos:].strip(WHITESPACE):
        first, pos, kept = extract_words_and_warn(value, pos)
        if first is None:
            break
        if first == ";":
            # systemd compares the unquoted first word: a lone ";" (quoted or not) is a separator, never a program,
            # so ``ExecStart=; /bin/sh -c id`` runs /bin/sh
            continue
        prefix, program = _split_prefix(first)
        path = resolve_specifiers(program, table)
        if not path:
            raise UnitSyntaxError(f"an empty program after the prefix {prefix!r}")
        if any(c in path for c in "\\\"'") or any(ord(c) < 32 or ord(c) == 127 for c in path):
            raise UnitSyntaxError(f"the program {path!r} contains special characters")
        if path.endswith("/"):
            raise UnitSyntaxError(f"the program {path!r} is a directory")
        argv: List[str] = [] if "@" in prefix else [path]
        while pos < len(value):
            rest = value[pos:]
            if rest[0] == ";" and (len(rest) == 1 or rest[1] in WHITESPACE):
                pos += 1
                while pos < len(value) and value[pos] in WHITESPACE:
                    pos += 1
                break
            if rest.startswith("\\;") and (len(rest) == 2 or rest[2] in WHITESPACE):
                argv.append(";")
                pos += 2
                while pos < len(value) and value[pos] in WHITESPACE:
                    pos += 1
                continue
            word, pos, kept_here = extract_words_and_warn(value, pos)
            if word is None:
                break
            kept = kept or kept_here
            argv.append(resolve_specifiers(word, table))
        if not argv:
            raise UnitSyntaxError("an empty command line (a prefix @ needs argv[0] after the program)")
        commands.append(ExecCommand(prefix, path, tuple(argv), kept))
    return commands


_BARE = re.compile(r"[A-Za-z0-9_@+=:,./-]+\Z")


def quote_exec_word(word: str) -> str:
    """One argument written for ExecStart= so that systemd hands the process exactly ``word``: bare when no
    rule touches it, else in double quotes."""
    if "\x00" in word:
        raise UnitSyntaxError(f"the argument {word!r} contains a NUL byte, which no command line can hold")
    if _BARE.match(word) and word != ";":
        return word
    escaped = word.replace("%", "%%").replace("$", "$$")
    out = []
    for char in escaped:
        if char in ('"', "\\"):
            out.append("\\" + char)
        elif char == "\n":
            out.append("\\n")
        elif char == "\t":
            out.append("\\t")
        elif ord(char) < 32 or ord(char) == 127:
            out.append(f"\\x{ord(char):02x}")
        elif 0xDC80 <= ord(char) <= 0xDCFF:  # a byte that is not UTF-8, kept by surrogateescape
            out.append(f"\\x{ord(char) - 0xDC00:02x}")
        else:
            out.append(char)
    return '"' + "".join(out) + '"'


def quote_exec_argv(argv: Sequence[str], prefix: str = "") -> str:
    """``ExecStart=`` text for ``argv`` (program first): every word quoted, the program too; ``prefix`` (``-``,
    ``+``, ``!``, ``!!``) kept in front. No ``:`` and no ``@``: the words are final, nothing expands them."""
    if not argv:
        raise UnitSyntaxError("an empty command line")
    bad = [c for c in prefix if c not in "-+!"]
    if bad or prefix.count("-") > 1 or ("+" in prefix and "!" in prefix) or prefix.count("!") > 2:
        raise UnitSyntaxError(f"the ExecStart= prefix {prefix!r}: give nothing, or '-', '+', '!' or '!!'")
    program = argv[0]
    if program == ";":
        raise UnitSyntaxError("the program ';' is systemd's command separator, not a program: give the server's path "
                              "first")
    if not program or any(c in program for c in "\\\"'%$ ") or any(ord(c) < 32 or ord(c) == 127 for c in program):
        raise UnitSyntaxError(f"the program {program!r} must be a plain path (no blanks, quotes, backslashes, % or $)")
    return prefix + program + "".join(" " + quote_exec_word(word) for word in argv[1:])


class ExecStart(NamedTuple):
    """A candidate's whole command line (form exec): the argv, program first, and the ExecStart= prefix kept."""

    argv: Tuple[str, ...]
    prefix: str

    def lines(self) -> str:
        """Drop-in lines: an empty ExecStart= resets production's, then the candidate's, quoted for systemd."""
        return ("# The candidate's whole command line (form exec): the empty ExecStart= drops production's.\n"
                "ExecStart=\nExecStart=" + quote_exec_argv(self.argv, self.prefix) + "\n")


def check_exec_start(argv: Any, prefix: Any = "") -> ExecStart:
    """A command line to write validated: a non-empty list of strings, a plain program, and quoting that systemd
    reads back unchanged (parsed and expanded again here: the round trip is the proof)."""
    if not isinstance(argv, (list, tuple)) or not argv or not all(isinstance(a, str) for a in argv):
        raise UnitSyntaxError("exec_start must be a non-empty list of strings, the program first")
    command = ExecStart(tuple(argv), str(prefix or ""))
    try:
        back = expand_argv(parse_exec(quote_exec_argv(command.argv, command.prefix), {})[0].argv, {}).argv
    except UnitSyntaxError as exc:
        raise UnitSyntaxError(f"exec_start: {exc}; nothing was written") from None
    if back != command.argv:
        raise UnitSyntaxError(f"exec_start {list(argv)!r} does not read back unchanged from its ExecStart= line; "
                              "nothing was written")
    return command


def quote_environment(name: str, value: str) -> str:
    """One ``Environment=`` word for NAME=value that systemd reads back as exactly that (no $ expansion there)."""
    if not _ENV_NAME.match(name):
        raise UnitSyntaxError(f"{name!r} is not an environment variable name")
    word = quote_exec_word(f"{name}={value}")
    return word.replace("$$", "$") if word.startswith('"') else word


# ------------------------------------------------------------------ $VAR at spawn time


class Expansion(NamedTuple):
    argv: Tuple[str, ...]
    unset: Tuple[str, ...]
    bad: Tuple[str, ...]


def _replace_env(word: str, env: Mapping[str, str], unset: List[str], bad: List[str]) -> str:
    """``replace_env`` without extensions: ``${NAME}`` by its value (unset: empty), ``$$`` by ``$``."""
    out: List[str] = []
    i = 0
    while i < len(word):
        char = word[i]
        if char != "$" or i + 1 >= len(word):
            out.append(char)
            i += 1
            continue
        nxt = word[i + 1]
        if nxt == "$":
            out.append("$")
            i += 2
        elif nxt == "{":
            end = word.find("}", i + 2)
            if end < 0:
                out.append(word[i:])  # never closed: systemd keeps the rest as it is
                break
            name = word[i + 2:end]
            if ":" in name:  # ${NAME:-x} is not expanded in command lines: kept literally
                out.append(word[i:end + 1])
            elif not _ENV_NAME.match(name):
                bad.append(name)
            elif name in env:
                out.append(env[name])
            else:
                unset.append(name)
            i = end + 1
        else:
            out.append(char)
            i += 1
    return "".join(out)


def expand_argv(argv: Sequence[str], env: Mapping[str, str]) -> Expansion:
    """``replace_env_argv``: what the spawned process gets for ``argv`` in the environment ``env``."""
    out: List[str] = []
    unset: List[str] = []
    bad: List[str] = []
    for word in argv:
        if word.startswith("$") and word[1:2] not in ("{", "$"):
            name = word[1:]
            if not _ENV_NAME.match(name):
                bad.append(name)
            elif name in env:
                out += split_words(env[name], cunescape=False, relax=True)
            else:
                unset.append(name)
            continue
        out.append(_replace_env(word, env, unset, bad))
    return Expansion(tuple(out), tuple(sorted(set(unset))), tuple(sorted(set(bad))))


# ------------------------------------------------------------------ Environment=, EnvironmentFile=


def parse_environment(value: str, table: Specifiers) -> List[Tuple[str, str]]:
    """The assignments of one ``Environment=`` value, in order (specifiers resolved)."""
    try:
        words = split_words(value, cunescape=True)
    except UnitSyntaxError as exc:
        raise UnitSyntaxError(f"{exc}: systemd ignores this Environment= line") from None
    out = []
    for word in words:
        resolved = resolve_specifiers(word, table)
        name, sep, val = resolved.partition("=")
        if not sep or not _ENV_NAME.match(name):
            raise UnitSyntaxError(f"{resolved!r} is not an environment assignment NAME=value (systemd ignores it)")
        out.append((name, val))
    return out


def parse_environment_file(value: str, table: Specifiers) -> Tuple[str, bool]:
    """One ``EnvironmentFile=`` value: (the path, whether it is optional: a ``-`` in front)."""
    optional = value.startswith("-")
    path = resolve_specifiers(value[1:] if optional else value, table)
    if not path.startswith("/"):
        raise UnitSyntaxError(f"EnvironmentFile={value}: the path must be absolute")
    return path, optional


def parse_unset_environment(value: str, table: Specifiers) -> List[str]:
    """The words of one ``UnsetEnvironment=`` value (NAME, or NAME=VALUE to unset only that assignment)."""
    return [resolve_specifiers(word, table) for word in split_words(value, cunescape=True)]


def merged_environment(assignments: Sequence[Tuple[str, str]], files: Sequence[Mapping[str, str]],
                       unset: Sequence[str]) -> Dict[str, str]:
    """The environment systemd builds from a unit's own settings: Environment= in order, then the
    EnvironmentFile=s in order (a file wins over Environment=), then UnsetEnvironment=."""
    env: Dict[str, str] = {}
    for name, value in assignments:
        env[name] = value
    for values in files:
        env.update(values)
    for word in unset:
        name, sep, value = word.partition("=")
        if not sep:
            env.pop(name, None)
        elif env.get(name) == value:
            del env[name]
    return env
