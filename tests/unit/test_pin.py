"""What ran, kept as the way back (module_utils/systemd/_pin.py, unit_override keep_what_runs): the pin reads the running
process from a fake /proc and writes lines systemd reads back as exactly that environment and command line; the
dead-man's script keeps a copy. The crash matrix (test_crash_matrix.py) runs it at every cut of a forced A/B.
"""
from __future__ import annotations

import ast
import json
import os
from pathlib import Path
from typing import Dict, List

import pytest

from ansible_collections.llmfleet.specdec.plugins.module_utils.systemd import _pin
from ansible_collections.llmfleet.specdec.plugins.module_utils.systemd import _systemd as sd
from ansible_collections.llmfleet.specdec.plugins.module_utils.systemd._execstart import parse_environment, parse_exec
from ansible_collections.llmfleet.specdec.plugins.module_utils.systemd._systemd import UnitOverrideError

HOSTILE = {
    "LLAMA_ARG_MODEL": "/models/q wen 8b.gguf",
    "LLAMA_API_KEY": 'a"b\\c$HOME%n;x',
    "LLAMA_ARG_ALIAS": "two\nlines\ttab",
    "ODD_BYTES": b"caf\xe9".decode("utf-8", "surrogateescape"),
    "EMPTY": "",
}


def _process(proc: Path, pid: int, env: Dict[str, str], argv: List[str], exe: str | None) -> None:
    d = proc / str(pid)
    d.mkdir(parents=True)
    (d / "environ").write_bytes(b"".join(f"{k}={v}".encode("utf-8", "surrogateescape") + b"\x00"
                                         for k, v in env.items()))
    (d / "cmdline").write_bytes(b"".join(a.encode() + b"\x00" for a in argv))
    if exe:
        os.symlink(exe, d / "exe")


def _read_back(text: str) -> tuple[Dict[str, str], List[str] | None]:
    env: Dict[str, str] = {}
    argv = None
    for line in text.splitlines():
        key, _sep, value = line.partition("=")
        if key == "Environment" and value:
            env.update(parse_environment(value, {}))
        elif key == "ExecStart" and value:
            argv = list(parse_exec(value, {})[0].argv)
    return env, argv


def test_the_pin_hands_back_exactly_the_environment_that_ran_without_systemds_own(tmp_path: Path) -> None:
    env = dict(HOSTILE, INVOCATION_ID="abc", JOURNAL_STREAM="8:1234", NOTIFY_SOCKET="/run/x", PATH="/usr/bin")
    _process(tmp_path, 42, env, ["/usr/bin/llama-server"], None)
    paths = sd.override_paths("llama-server", str(tmp_path / "run"))
    text = _pin.keep(paths, str(tmp_path), 42, ["environment"], "environment: LLAMA_ARG_MODEL: running a, next b")
    back, argv = _read_back(text)
    assert back == dict(HOSTILE, PATH="/usr/bin")  # systemd's per-start variables are not pinned
    assert argv is None  # only the environment differs: the command line stays the unit's
    lines = text.splitlines()
    assert lines.index("Environment=") < lines.index("EnvironmentFile=") < lines.index("Environment=EMPTY=")
    assert "[Service]" in lines and not [line for line in lines if line.startswith("EnvironmentFile=/")]


def test_a_pending_build_or_command_line_pins_the_binary_that_runs(tmp_path: Path) -> None:
    old = tmp_path / "builds" / "b1" / "llama-server"
    old.parent.mkdir(parents=True)
    old.write_text("")
    current = tmp_path / "current"
    os.symlink(tmp_path / "builds" / "b2", current)  # switched on disk since the process started
    _process(tmp_path, 7, {"LLAMA_ARG_PORT": "8080"}, [str(current / "llama-server"), "--jinja", "a b"], str(old))
    paths = sd.override_paths("llama-server", str(tmp_path / "run"))
    _env, argv = _read_back(_pin.keep(paths, str(tmp_path), 7, ["build"], "build: running b1, next b2"))
    assert argv == [str(old), "--jinja", "a b"]


def test_a_binary_removed_since_it_started_cannot_be_the_way_back(tmp_path: Path) -> None:
    _process(tmp_path, 9, {"A": "1"}, ["/opt/llama-server"], "/opt/llama-server (deleted)")
    paths = sd.override_paths("llama-server", str(tmp_path / "run"))
    with pytest.raises(UnitOverrideError, match="replaced or removed on disk since it started"):
        _pin.keep(paths, str(tmp_path), 9, ["build"], "build")


def test_an_unreadable_environment_is_refused_before_any_change(tmp_path: Path) -> None:
    paths = sd.override_paths("llama-server", str(tmp_path / "run"))
    with pytest.raises(UnitOverrideError, match=r"cannot be read .*nothing was changed"):
        _pin.keep(paths, str(tmp_path), 404, ["environment"], "environment")


def test_the_dead_mans_script_carries_the_pin_and_the_next_restore_finds_it_there(tmp_path: Path) -> None:
    paths = sd.override_paths("llama-server", str(tmp_path / "run"))
    pin = "[Service]\nEnvironment=\nEnvironment=LLAMA_ARG_MODEL=\"/m/a b.gguf\"\n"
    os.makedirs(paths.state_dir)
    Path(paths.script).write_text(sd.render_rollback_script(paths, "/usr/bin/python3", "http://127.0.0.1:8080/health",
                                                            60, pin))
    assert _pin.current(paths) == pin  # no pin on disk: the script's copy
    _pin.write(paths, "[Service]\n# on disk\n")
    assert _pin.current(paths) == "[Service]\n# on disk\n"  # the pin in place comes first
    assert _pin.remove(paths) and not os.path.exists(paths.pin) and not _pin.remove(paths)
    Path(paths.script).write_text(sd.render_rollback_script(paths, "/usr/bin/python3", "http://x/health", 60))
    assert _pin.current(paths) is None  # a script armed without one
    config = next(line for line in Path(paths.script).read_text().splitlines() if line.startswith("CONFIG = "))
    assert json.loads(ast.literal_eval(config[len("CONFIG = json.loads("):-1]))["pin"] == paths.pin


def test_the_pin_sorts_between_an_operators_override_and_the_ab_drop_in() -> None:
    names = sorted(["override.conf", "50-limits.conf", sd.PIN_NAME, sd.DROPIN_NAME])
    assert names.index("override.conf") < names.index(sd.PIN_NAME) < names.index(sd.DROPIN_NAME)


def test_a_build_switchs_record_puts_its_pins_back_and_drops_them(tmp_path: Path) -> None:
    pin = tmp_path / "run" / "systemd" / "system" / "llama-server.service.d" / _pin.BUILD_PIN_NAME
    units = [{"unit": "llama-server.service", "pin": str(pin), "pin_text": "[Service]\nEnvironment=\n"},
             {"unit": "other.service"}]  # nothing pending there: no pin
    assert _pin.put_back(units) and pin.read_text() == "[Service]\nEnvironment=\n"
    assert oct(pin.stat().st_mode & 0o777) == "0o600"
    assert not _pin.put_back(units)  # in place already: nothing written, no reload needed
    assert _pin.drop(units) and not pin.exists() and not pin.parent.exists()
    assert not _pin.drop(units)
    assert _pin.BUILD_PIN_NAME < sd.DROPIN_NAME and _pin.BUILD_PIN_NAME != sd.PIN_NAME
