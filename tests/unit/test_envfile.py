"""Env files: the port of systemd's parser against its rules, and values written so that they come back unchanged.

systemd's own parse of the same values is checked on a real host by molecule scenario ``envfile``.
"""
from __future__ import annotations

import random
import shlex
from pathlib import Path

import pytest
import yaml

from ansible_collections.llmfleet.specdec.plugins.module_utils.systemd import _envfile as ef

ROOT = Path(__file__).resolve().parents[2]


class _UnsafeLoader(yaml.SafeLoader):
    """Reads Ansible's ``!unsafe`` scalars as plain strings."""


_UnsafeLoader.add_constructor("!unsafe", lambda loader, node: loader.construct_scalar(node))
HOSTILE = yaml.load((ROOT / "molecule/envfile/hostile_values.yml").read_text(encoding="utf-8"),
                    Loader=_UnsafeLoader)["envfile_hostile_values"]


# ------------------------------------------------------------------ the parser, rule by rule (systemd.exec(5), env-file.c)


@pytest.mark.parametrize("text, parsed", [
    ("A=plain\n", [("A", "plain")]),
    ("A=  a b  \n", [("A", "a b")]),                     # blanks before and after an unquoted value go
    ("  A  =x\n", [("A", "x")]),                          # blanks around the key go
    ('A="a b"\n', [("A", "a b")]),
    ('A="a\\"b"\n', [("A", 'a"b')]),                     # \" \\ \` \$ lose the backslash inside "..."
    ('A="\\\\ \\` \\$"\n', [("A", "\\ ` $")]),
    ('A="a\\qb"\n', [("A", "a\\qb")]),                   # any other backslash stays inside "..."
    ("A='a\\b'\n", [("A", "a\\b")]),                     # nothing is special inside '...'
    ("A='a' 'b'\n", [("A", "ab")]),                      # blanks after a closing quote are skipped
    ('A="a"b c\n', [("A", "ab c")]),
    ('A=a"b\n', [("A", 'a"b')]),                         # a quote inside an unquoted value is literal
    ("A=a\\ \n", [("A", "a ")]),                          # an escaped blank is kept at the end
    ("A=a\\b\\\\c\n", [("A", "ab\\c")]),                  # outside quotes a backslash takes the next char
    ("A=one\\\ntwo\n", [("A", "onetwo")]),                # backslash-newline joins lines
    ('A="one\\\ntwo"\n', [("A", "onetwo")]),
    ('A="one\ntwo"\n', [("A", "one\ntwo")]),              # a raw newline inside quotes is kept
    ("A='one\ntwo'\n", [("A", "one\ntwo")]),
    ("A=x # not a comment\n", [("A", "x # not a comment")]),
    ("# A=1\n; B=2\n  # C=3\nD=4\n", [("D", "4")]),
    ("# a comment \\\nA=1\nB=2\n", [("B", "2")]),         # a comment ending in a backslash goes on
    ("A=$HOME %h\n", [("A", "$HOME %h")]),                # no expansion in env files
    ("A=\nB=\n", [("A", ""), ("B", "")]),
    ("A=x\r\nB=y\r\n", [("A", "x"), ("B", "y")]),         # CR ends a line like LF
    ("JUST WORDS\nA=1\n", [("A", "1")]),                  # a line without = is ignored
    ('A="open\nB=2\n', [("A", "open\nB=2\n")]),           # a quote left open runs to the end
    ("A=1\nA=2\n", [("A", "1"), ("A", "2")]),
    ("A=x\x00B=y\n", [("A", "x")]),                       # read as a C string
    ("A=tail", [("A", "tail")]),                          # no final newline
])
def test_parser_follows_systemds_rules(text: str, parsed: list) -> None:
    assert [(k, v) for k, v, _dummy in ef.parse_env_text(text)] == parsed


# ------------------------------------------------------------------ writing: every representable value comes back


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_values_come_back_byte_for_byte(name: str) -> None:
    value = HOSTILE[name]
    line = ef.render_line(name, value)
    assert ef.parse_env_text(line + "\n") == [(name, value, 1)]
    assert ef.read_env_text(line + "\n", "x.env") == [(name, value)]


def test_the_reported_reproductions_come_back_unchanged() -> None:
    # -ot with a regex, as LLAMA_EXTRA_ARGS carries it: the launcher then splits what systemd passed on
    extra = "-ot " + shlex.quote("blk\\.(\\d+)\\.ffn_.*_exps\\.=CPU")
    passed = ef.read_env_values(ef.render_line("LLAMA_EXTRA_ARGS", extra) + "\n")["LLAMA_EXTRA_ARGS"]
    assert shlex.split(passed) == ["-ot", "blk\\.(\\d+)\\.ffn_.*_exps\\.=CPU"]
    grammar = 'root ::= "a" | "\\\\" [^\\n]'
    assert ef.read_env_values(ef.render_line("LLAMA_ARG_GRAMMAR", grammar))["LLAMA_ARG_GRAMMAR"] == grammar


def test_random_values_come_back_byte_for_byte() -> None:
    rng = random.Random(11)
    alphabet = [chr(c) for c in range(1, 128)] + ["é", "東", "🦙", "\u00a0", "\u2028"]
    for _dummy in range(3000):
        value = "".join(rng.choice(alphabet) for _dummy in range(rng.randint(0, 24)))
        text = "\n".join([ef.render_line("A", value), ef.render_line("B", "after")]) + "\n"
        assert ef.read_env_values(text) == {"A": value, "B": "after"}, repr(value)


def test_plain_values_stay_bare_and_readable() -> None:
    assert ef.render_line("LLAMA_ARG_MODEL", "/srv/models/q-8_0.gguf") == "LLAMA_ARG_MODEL=/srv/models/q-8_0.gguf"
    assert ef.render_line("LLAMA_ARG_PORT", 8080) == "LLAMA_ARG_PORT=8080"
    assert ef.render_line("LLAMA_ARG_ENDPOINT_METRICS", True) == "LLAMA_ARG_ENDPOINT_METRICS=1"
    assert ef.render_line("A", "a b") == 'A="a b"'
    assert ef.render_line("A", "") == 'A=""'


# ------------------------------------------------------------------ what cannot be written, refused before writing


@pytest.mark.parametrize("value, problem", [
    ("a\x00b", "NUL byte"),
    ("a\udc80b", "lone surrogate"),
    ("x" * 131072, "bytes long"),
])
def test_unrepresentable_values_are_refused_naming_the_variable(value: str, problem: str) -> None:
    with pytest.raises(ef.EnvFileError, match=problem) as info:
        ef.render_line("LLAMA_ARG_ALIAS", value)
    assert "LLAMA_ARG_ALIAS" in str(info.value)
    assert ef.problems({"LLAMA_ARG_ALIAS": value, "OK": "fine"}) == [str(info.value)]


@pytest.mark.parametrize("name", ["LLAMA_EXTRA_ARGS", "VLLM_SERVE_ARGS", "VLLM_EXTRA_ARGS"])
def test_split_variables_must_split_like_a_shell(name: str) -> None:
    with pytest.raises(ef.EnvFileError, match=f"{name}: .*does not split into arguments like a shell"):
        ef.check_env_value(name, "--alias 'my model")
    assert ef.check_env_value(name, "--alias 'my model'") == "--alias 'my model'"


@pytest.mark.parametrize("name, value, match", [
    ("1A", "x", "not an environment variable name"),
    ("A", ["x"], "a list cannot be an environment variable's value"),
    ("A", None, "null means unset"),
])
def test_bad_names_and_types(name: object, value: object, match: str) -> None:
    with pytest.raises(ef.EnvFileError, match=match):
        ef.render_line(name, value)  # type: ignore[arg-type]


@pytest.mark.parametrize("text, match", [
    ("A=1\njust words\n", "line 2: not a NAME=value line"),
    ("A='open\nB=2\n", "line 1: A's quote is never closed"),
    ("A=1\nB=2\nA=3\n", "line 3: A is set twice"),
    ("export A=1\n", "line 1: 'export A' is not an environment variable name"),
    ("A='x\ny'\nB\n", "line 3: not a NAME=value line"),
    ("# note \\\nA=1\n", "line 1: a comment ends in a backslash"),
])
def test_strict_reading_names_the_line(text: str, match: str) -> None:
    with pytest.raises(ef.EnvFileError, match=match):
        ef.read_env_text(text, "c.env")


def test_one_home_for_the_rules() -> None:
    """Nothing else in the collection quotes or validates env-file values with its own rules."""
    offenders = []
    for path in list((ROOT / "plugins").rglob("*.py")) + list((ROOT / "roles").rglob("*.yml")) \
            + list((ROOT / "roles").rglob("*.j2")) + list((ROOT / "playbooks").rglob("*.yml")):
        text = path.read_text(encoding="utf-8")
        if path.name == "_envfile.py":
            continue
        for marker in ("_BALANCED_RE", "env_value_re", "def decode_env_value", "_ASSIGN = re.compile"):
            if marker in text:
                offenders.append(f"{path.relative_to(ROOT)}: {marker}")
    assert offenders == []


def test_a_units_env_files_in_order_as_systemd_passes_them_on(tmp_path: Path) -> None:
    """The one reader behind unit_override's production env and spec_watch's pending env."""
    base = tmp_path / "base.env"
    base.write_text('LLAMA_ARG_PORT=8080\nA="one\r\ntwo"\n', encoding="utf-8", newline="")
    later = tmp_path / "later.env"
    later.write_text("LLAMA_ARG_PORT=9090\n", encoding="utf-8")
    env = ef.read_env_files([str(base), str(tmp_path / "missing.env"), str(later)])
    assert env == {"LLAMA_ARG_PORT": "9090", "A": "one\r\ntwo"}
    # a path that exists but is no readable file would misstate the env: refused, naming it
    with pytest.raises(ef.EnvFileError, match=f"env file {tmp_path} cannot be read"):
        ef.read_env_files([str(base), str(tmp_path)])
