"""systemd's ExecStart=/Environment= syntax (module_utils/systemd/_execstart.py), case by case against systemd 252's rules.

Every expectation here is what systemd 252 (Debian 12) does with the same text: the unit loader's
extract_first_word with UNQUOTE|CUNESCAPE, unit_full_printf, replace_env_argv at spawn time, and the config
parser's comments and continuations. molecule/units checks a set of these against the argument vectors a real
systemd spawns.
"""
from __future__ import annotations

import pytest

from ansible_collections.llmfleet.specdec.plugins.module_utils.systemd import _execstart as es

TABLE = {"n": "llama-server.service", "N": "llama-server", "p": "llama-server", "i": "", "t": "/run", "h": "/root"}


def one(value: str, table: dict | None = None) -> es.ExecCommand:
    commands = es.parse_exec(value, TABLE if table is None else table)
    assert len(commands) == 1
    return commands[0]


@pytest.mark.parametrize("value, argv", [
    ("/bin/x a b", ["/bin/x", "a", "b"]),
    ("/bin/x   'a b'  \"c d\"", ["/bin/x", "a b", "c d"]),
    ("/bin/x a\"b c\"d", ["/bin/x", "ab cd"]),               # quotes open anywhere in a word
    ("/bin/x 'it''s'", ["/bin/x", "its"]),
    ("/bin/x \"\"", ["/bin/x", ""]),                          # an empty quoted word is a word
    ("/bin/x a\\ b", ["/bin/x", "a\\ b"]),                   # "\ " is no escape: kept, space and all
    ("/bin/x \\s \\t \\n \\x41 \\101 \\u00e9", ["/bin/x", " ", "\t", "\n", "A", "A", "é"]),
    ("/bin/x 'a\\nb'", ["/bin/x", "a\nb"]),                   # escapes work inside single quotes too
    ("/bin/x \"a\\\"b\"", ["/bin/x", 'a"b']),
    ("/bin/x 100%% %n %N", ["/bin/x", "100%", "llama-server.service", "llama-server"]),
    ("/bin/x $FOO ${BAR} $$", ["/bin/x", "$FOO", "${BAR}", "$$"]),  # expansion happens at spawn, not here
    ("/bin/x \\; b", ["/bin/x", ";", "b"]),
])
def test_words_as_systemd_reads_them(value: str, argv: list[str]) -> None:
    assert list(one(value).argv) == argv


def test_unknown_escape_is_kept_with_its_backslash_and_noted() -> None:
    command = one("/bin/x a\\db")
    assert command.argv == ("/bin/x", "a\\db") and command.kept_escapes


@pytest.mark.parametrize("value, prefix, path", [
    ("-/bin/x", "-", "/bin/x"), ("+/bin/x", "+", "/bin/x"), ("!!/bin/x", "!!", "/bin/x"),
    ("-+/bin/x", "-+", "/bin/x"), (":/bin/x", ":", "/bin/x"), ("-:/bin/x", "-:", "/bin/x"),
])
def test_prefixes(value: str, prefix: str, path: str) -> None:
    command = one(value + " a")
    assert (command.prefix, command.path, command.argv) == (prefix, path, (path, "a"))


def test_separate_argv0_and_semicolon() -> None:
    assert one("@/bin/x name a").argv == ("name", "a")
    commands = es.parse_exec("/bin/a 1 ; /bin/b 2", TABLE)
    assert [c.argv for c in commands] == [("/bin/a", "1"), ("/bin/b", "2")]
    assert es.parse_exec("", TABLE) == [] and es.parse_exec("   ", TABLE) == []


@pytest.mark.parametrize("value", ["; /bin/sh -c id", "\";\" /bin/sh -c id", "';' /bin/sh -c id"])
def test_a_lone_semicolon_is_never_the_program(value: str) -> None:
    # systemd compares the unquoted first word with ";" and skips it: the next word is the program it runs
    assert [c.argv for c in es.parse_exec(value, TABLE)] == [("/bin/sh", "-c", "id")]


def test_check_exec_start_refuses_a_semicolon_program_and_keeps_a_semicolon_argument() -> None:
    with pytest.raises(es.UnitSyntaxError, match="separator"):
        es.check_exec_start([";", "/bin/sh", "-c", "id"])
    command = es.check_exec_start(["/opt/bin/llama-server", ";", "--port", "8080"])
    assert [c.argv for c in es.parse_exec(command.lines().splitlines()[-1][len("ExecStart="):], TABLE)] == [
        ("/opt/bin/llama-server", ";", "--port", "8080")]


@pytest.mark.parametrize("value, why", [
    ("/bin/x 'open", "unbalanced"),
    ("/bin/x \"open\\\"", "unbalanced"),
    ("/bin/x %Z", "specifier %Z"),
    ("/bin/x 5%", "lone %"),
    ("\"/bin/x'\" a", "special characters"),
    ("/bin/ a", "directory"),
])
def test_lines_systemd_refuses(value: str, why: str) -> None:
    with pytest.raises(es.UnitSyntaxError, match=why):
        es.parse_exec(value, TABLE)


def test_unit_file_comments_continuations_sections() -> None:
    text = ("[Unit]\nDescription=x\n[Service]\n# a comment \\\nExecStart=/bin/x a \\\n"
            "  # a comment inside the continuation is skipped\n  b\\\\\n"
            "Environment=A=1 \"B=2 3\"\n ; another comment\nEnvironment=\n[Install]\nExecStart=/not/service\n")
    got = [(a.section, a.key, a.value) for a in es.unit_assignments(text)]
    assert got == [("Unit", "Description", "x"), ("Service", "ExecStart", "/bin/x a    b\\\\"),
                   ("Service", "Environment", 'A=1 "B=2 3"'), ("Service", "Environment", ""),
                   ("Install", "ExecStart", "/not/service")]
    assert one(got[1][2]).argv == ("/bin/x", "a", "b\\")


def test_environment_lines() -> None:
    assert es.parse_environment('A=1 "B=two words" C=%n', TABLE) == [
        ("A", "1"), ("B", "two words"), ("C", "llama-server.service")]
    with pytest.raises(es.UnitSyntaxError, match="not an environment assignment"):
        es.parse_environment("1A=x", TABLE)
    assert es.parse_environment_file("-/etc/%N.env", TABLE) == ("/etc/llama-server.env", True)
    assert es.merged_environment([("A", "1"), ("B", "x")], [{"A": "file"}], ["B=y", "C"]) == {"A": "file", "B": "x"}
    assert es.merged_environment([("B", "y")], [], ["B=y"]) == {}


@pytest.mark.parametrize("argv, env, expanded", [
    (["/x", "$ARGS"], {"ARGS": "-m  /a.gguf 'two words'"}, ["/x", "-m", "/a.gguf", "two words"]),
    (["/x", "$EMPTY"], {"EMPTY": ""}, ["/x"]),                            # a whole-word variable may vanish
    (["/x", "--port=${PORT}", "${PORT}x"], {"PORT": "8080 9"}, ["/x", "--port=8080 9", "8080 9x"]),
    (["/x", "$$HOME", "a$$b", "cost$5", "${A:-x}"], {"A": "1"}, ["/x", "$HOME", "a$b", "cost$5", "${A:-x}"]),
])
def test_expansion_at_spawn(argv: list[str], env: dict, expanded: list[str]) -> None:
    result = es.expand_argv(argv, env)
    assert list(result.argv) == expanded and not result.unset and not result.bad


def test_expansion_names_what_it_cannot_resolve() -> None:
    result = es.expand_argv(["/x", "$NOPE", "${ALSO}", "$", "${bad name}"], {})
    assert result.unset == ("ALSO", "NOPE") and set(result.bad) == {"", "bad name"}


@pytest.mark.parametrize("word", [
    "plain", "", "two words", "100%", "$HOME", "${X}", "$$", 'quote"d', "back\\slash", "new\nline", "tab\t",
    "'single'", ";", "ctl\x01", "é ü", "%n$x", "-", "--flag=a b",
])
def test_quoting_round_trips_through_parse_and_expansion(word: str) -> None:
    text = es.quote_exec_argv(["/opt/bin/llama-server", word, "$ARGS"], "-")
    command = one(text)
    assert command.prefix == "-"
    expanded = es.expand_argv(command.argv, {"ARGS": "would split", "HOME": "/root", "X": "x"})
    assert list(expanded.argv) == ["/opt/bin/llama-server", word, "$ARGS"]


def test_quoting_refuses_what_no_command_line_holds() -> None:
    with pytest.raises(es.UnitSyntaxError, match="NUL"):
        es.quote_exec_argv(["/bin/x", "a\x00b"])
    with pytest.raises(es.UnitSyntaxError, match="plain path"):
        es.quote_exec_argv(["/bin/$x"])
    with pytest.raises(es.UnitSyntaxError, match="prefix"):
        es.quote_exec_argv(["/bin/x"], ":")
