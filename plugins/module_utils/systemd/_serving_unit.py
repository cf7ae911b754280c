# Copyright: (c) 2026, llmfleet.specdec contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# Private to the collection: the serving unit as systemd has it (ExecStart, Environment, EnvironmentFiles), read only.
"""Reads a serving unit the way systemd will run it next, without changing anything (module ``serving_unit``).

1. ``systemctl show`` names the unit's fragment and its drop-ins in the order systemd applies them
   (``FragmentPath``, ``DropInPaths``); each file is read and parsed by ``_execstart`` (systemd's unit-file
   syntax). The A/B candidate's transient drop-in (``unit_override``'s) is left out: what is read is
   production. A promotion's drop-in (``PROMOTED_DROPIN``) is part of production.
2. ``ExecStart=`` (an empty one resets the list) must leave exactly one command; its ``%`` specifiers are
   resolved from the host (unit name parts, directories, host and OS names, ids), ``Environment=``,
   ``EnvironmentFile=`` (``-`` optional, globs) and ``UnsetEnvironment=`` give the unit's environment, and
   ``$VAR`` / ``${VAR}`` are expanded from it as systemd expands them when it spawns the process. A variable
   the unit does not set is an error naming it: systemd would substitute nothing, which is rarely meant.
3. The result is checked against systemd's own parse (``systemctl show -p ExecStart``: the program and the
   arguments before expansion), and the command line is understood by ``_unit_command.describe``.
4. The running process (``MainPID``'s ``/proc/<pid>/cmdline``) is reported beside it.

Everything that can be wrong (an ExecStart this collection cannot parse, a wrapper it does not know, a ``$VAR``
it cannot resolve, a drop-in that would outrank a candidate's ExecStart) is a ``UnitReadError`` naming the unit
and the fix.
"""
from __future__ import annotations

import ast
import glob
import json
import os
import platform
import re
import shlex
import socket
import urllib.parse
from typing import Any, Callable, Dict, List, Mapping, Sequence, Tuple

from ansible_collections.llmfleet.specdec.plugins.module_utils.common._errors import SpecdecError
from ansible_collections.llmfleet.specdec.plugins.module_utils.systemd import _execstart as es
from ansible_collections.llmfleet.specdec.plugins.module_utils.systemd import _unit_command as uc
from ansible_collections.llmfleet.specdec.plugins.module_utils.systemd import _unit_wrapper as wrapper
from ansible_collections.llmfleet.specdec.plugins.module_utils.systemd._endpoint_env import endpoint_names
from ansible_collections.llmfleet.specdec.plugins.module_utils.systemd._envfile import read_env_values
from ansible_collections.llmfleet.specdec.plugins.module_utils.systemd._procview import (
    ProcView,
    cgroup_path,
    parse_show,
    within_cgroup,
)
from ansible_collections.llmfleet.specdec.plugins.module_utils.systemd._systemd import (
    DROPIN_NAME,
    Runner,
    override_paths,
    service_name,
)

PROMOTED_DROPIN = es.PROMOTED_DROPIN
_ARCH = {"x86_64": "x86-64", "aarch64": "arm64", "i686": "x86", "i386": "x86", "armv7l": "arm", "ppc64le": "ppc64-le",
         "ppc64": "ppc64", "s390x": "s390x", "riscv64": "riscv64", "loongarch64": "loongarch64"}


class UnitReadError(SpecdecError):
    """The unit cannot be read as systemd will run it; the message names the unit and what to change."""


class WrapperNotServingError(UnitReadError):
    """A wrapper unit whose server cannot be read now (stopped, or a candidate that never started one)."""


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8", errors="surrogateescape", newline="") as handle:
            return handle.read()
    except FileNotFoundError:
        return None


def _unescape_unit(text: str) -> str:
    """``unit_name_unescape``: ``-`` is ``/``, ``\\xNN`` a byte."""
    out = bytearray()
    i = 0
    while i < len(text):
        if text[i] == "-":
            out += b"/"
        elif text.startswith("\\x", i) and len(text) >= i + 4:
            out.append(int(text[i + 2:i + 4], 16))
            i += 3
        else:
            out += text[i].encode()
        i += 1
    return out.decode("utf-8", "surrogateescape")


def _os_release(key: str, root: str) -> str:
    for path in ("etc/os-release", "usr/lib/os-release"):
        text = _read(os.path.join(root, path))
        if text is not None:
            values = read_env_values(text)
            return values.get(key, "")
    return ""


def _first_line(path: str) -> str:
    text = _read(path)
    return (text or "").strip().replace("-", "") if text is not None else ""


def specifier_table(unit: str, fragment: str, root: str = "/") -> Dict[str, Any]:
    """systemd's service specifiers for a system unit (``unit_full_printf``); host facts are read lazily."""
    stem = unit[: unit.rfind(".")]
    prefix, at, instance = stem.partition("@")
    last = prefix.rsplit("-", 1)[-1]
    path_part = instance if at else prefix
    filename = "/" if path_part == "-" else "/" + _unescape_unit(path_part).strip("/")
    real = os.path.realpath(fragment) if fragment else ""
    return {
        "n": unit, "N": stem, "p": prefix, "P": _unescape_unit(prefix), "i": instance, "I": _unescape_unit(instance),
        "j": last, "J": _unescape_unit(last), "f": filename, "y": real, "Y": os.path.dirname(real),
        "C": "/var/cache", "E": "/etc", "L": "/var/log", "S": "/var/lib", "t": "/run", "T": "/tmp", "V": "/var/tmp",
        "d": f"/run/credentials/{unit}", "h": "/root", "s": "/bin/sh", "u": "root", "U": "0", "g": "root", "G": "0",
        "H": socket.gethostname, "l": lambda: socket.gethostname().split(".")[0],
        "m": lambda: _first_line(os.path.join(root, "etc/machine-id")),
        "b": lambda: _first_line(os.path.join(root, "proc/sys/kernel/random/boot_id")),
        "v": platform.release, "a": lambda: _ARCH.get(platform.machine(), platform.machine()),
        "o": lambda: _os_release("ID", root), "w": lambda: _os_release("VERSION_ID", root),
        "W": lambda: _os_release("VARIANT_ID", root), "B": lambda: _os_release("BUILD_ID", root),
        "M": lambda: _os_release("IMAGE_ID", root), "A": lambda: _os_release("IMAGE_VERSION", root),
    }


def _words(text: str) -> List[str] | None:
    """systemctl's argv text read back as words (systemd releases that quote it), None when it does not parse."""
    try:
        return es.split_words(text, cunescape=True)
    except es.UnitSyntaxError:
        return None


def _show_exec_start(values: Sequence[str]) -> List[Tuple[str, str]]:
    """``ExecStart={ path=P ; argv[]=A ; ... }`` lines -> (P, A) (systemd joins argv with spaces)."""
    out = []
    for value in values:
        match = re.match(r"\{ path=(.*?) ; argv\[\]=(.*?) ; (?:ignore_errors|flags)=", value)
        if match:
            out.append((match.group(1), match.group(2)))
    return out


class _Settings:
    """The [Service] settings that decide what runs, gathered over the unit's files in order."""

    def __init__(self) -> None:
        self.exec_start: List[Tuple[es.ExecCommand, str]] = []
        self.environment: List[Tuple[str, str]] = []
        self.env_files: List[Tuple[str, bool, str]] = []
        self.unset: List[str] = []
        self.kept_escapes: List[str] = []

    def take(self, path: str, text: str, table: Mapping[str, Any], unit: str) -> bool:
        """Applies one file; whether it sets ExecStart=."""
        sets_exec = False
        try:
            assignments = es.unit_assignments(text)
        except es.UnitSyntaxError as exc:
            raise UnitReadError(f"{unit}: {path} {exc}; fix the file") from None
        for item in assignments:
            if item.section != "Service":
                continue
            where = f"{path} line {item.line}"
            try:
                if item.key == "ExecStart":
                    sets_exec = True
                    commands = es.parse_exec(item.value, table)
                    if not commands:
                        self.exec_start = []
                    for command in commands:
                        self.exec_start.append((command, where))
                        if command.kept_escapes:
                            self.kept_escapes.append(where)
                elif item.key == "Environment":
                    if not item.value:
                        self.environment = []
                    self.environment += es.parse_environment(item.value, table)
                elif item.key == "EnvironmentFile":
                    if not item.value:
                        self.env_files = []
                    else:
                        file_path, optional = es.parse_environment_file(item.value, table)
                        self.env_files.append((file_path, optional, where))
                elif item.key == "UnsetEnvironment":
                    if not item.value:
                        self.unset = []
                    self.unset += es.parse_unset_environment(item.value, table)
            except es.UnitSyntaxError as exc:
                raise UnitReadError(f"{unit}: {where}: {item.key}={item.value}: {exc}. Fix that line (see "
                                    "systemd.service(5) and systemd.syntax(7))") from None
        return sets_exec


def _env_files(settings: _Settings, unit: str) -> Tuple[List[Dict[str, Any]], List[Dict[str, str]]]:
    listed: List[Dict[str, Any]] = []
    values: List[Dict[str, str]] = []
    for pattern, optional, where in settings.env_files:
        paths = sorted(glob.glob(pattern)) if glob.has_magic(pattern) else [pattern]
        found = False
        for path in paths:
            try:
                with open(path, encoding="utf-8", errors="replace", newline="") as handle:
                    text = handle.read()
            except FileNotFoundError:
                continue
            except OSError as exc:
                raise UnitReadError(f"{unit}: EnvironmentFile {path} ({where}) cannot be read ({exc.strerror}); run "
                                    "as root (become: true)") from None
            found = True
            values.append(read_env_values(text))
            listed.append({"path": path, "optional": optional, "exists": True})
        if not found:
            if not optional:
                raise UnitReadError(f"{unit}: EnvironmentFile={pattern} ({where}) does not exist, so systemd would not "
                                    f"start {unit}; create it, or write EnvironmentFile=-{pattern} if it is optional")
            listed.append({"path": pattern, "optional": True, "exists": False})
    return listed, values


def _cmdline(proc: str, pid: int) -> List[str] | None:
    try:
        with open(os.path.join(proc, str(pid), "cmdline"), "rb") as handle:
            raw = handle.read()
    except OSError:
        return None
    if not raw:
        return None
    return [part.decode("utf-8", "surrogateescape") for part in raw.rstrip(b"\0").split(b"\0")]


def cmdline_matches(proc: str, pid: int, argv: Sequence[str], control_group: str = "") -> bool:
    """Whether the unit runs ``argv``: its MainPID's /proc/<pid>/cmdline, or a process in its control group (a
    container engine's client that handed over to conmon, with Type=notify)."""
    if pid and uc.runs_line(_cmdline(proc, pid), argv):
        return True
    if not control_group:
        return False
    for entry in os.listdir(proc):
        if not entry.isdigit():
            continue
        cgroup = cgroup_path(_read(os.path.join(proc, entry, "cgroup")) or "")
        if within_cgroup(cgroup, control_group) and uc.runs_line(_cmdline(proc, int(entry)), argv):
            return True
    return False


def not_installed(unit: str, why: str) -> Dict[str, Any]:
    return {"unit": unit, "installed": False, "why": why, "form": None}


def read_unit(unit_name: str, run: Runner, *, backend: str | None = None, proc: str = "/proc", run_dir: str = "/run",
              specifiers: Callable[[str, str], Mapping[str, Any]] = specifier_table) -> Dict[str, Any]:
    """The unit as systemd will run it next (module docstring); ``installed: false`` when systemd has no such unit."""
    unit = service_name(unit_name)
    props = ["LoadState", "FragmentPath", "DropInPaths", "ExecStart", "NeedDaemonReload", "MainPID", "ActiveState",
             "Type", "ControlGroup"]
    argv = ["systemctl", "show", unit] + [w for p in props for w in ("-p", p)]
    rc, out, err = run(argv)
    if rc != 0:
        return not_installed(unit, f"`systemctl show {unit}` failed (rc {rc}): {(err or out).strip()[-300:]}")
    shown = parse_show(out)
    first = {key: (shown.get(key) or [""])[-1] for key in props}
    if first["LoadState"] != "loaded":
        return not_installed(unit, f"systemd has no unit {unit} (LoadState={first['LoadState'] or 'unknown'})")
    fragment = first["FragmentPath"]
    if not fragment:
        raise UnitReadError(f"{unit} has no unit file (FragmentPath is empty: a generated or transient unit); "
                            "write it as a unit file under /etc/systemd/system")
    ab_paths = override_paths(unit, run_dir)
    ab_dropins = {os.path.abspath(path) for path in ab_paths.all_dropins}
    dropins = [p for line in shown.get("DropInPaths", []) for p in line.split()]
    table = specifiers(unit, fragment)
    settings = _Settings()
    later_exec: List[str] = []
    promoted = None
    for path in [fragment, *dropins]:
        if os.path.abspath(path) in ab_dropins:
            continue
        text = _read(path)
        if text is None:
            raise UnitReadError(f"{unit}: {path} is listed by systemd but cannot be read now; run systemctl "
                                "daemon-reload and try again")
        sets_exec = settings.take(path, text, table, unit)
        if path != fragment and sets_exec and os.path.basename(path) > DROPIN_NAME:
            later_exec.append(path)
        if os.path.basename(path) in es.PROMOTED_DROPINS:
            promoted = path
    if not settings.exec_start:
        raise UnitReadError(f"{unit} has no ExecStart= (in {', '.join([fragment, *dropins])}); give it one")
    if len(settings.exec_start) > 1:
        raise UnitReadError(f"{unit} runs {len(settings.exec_start)} ExecStart= commands "
                            f"({', '.join(w for _c, w in settings.exec_start)}); a serving unit runs one server")
    command, where = settings.exec_start[0]
    if "@" in command.prefix:
        raise UnitReadError(f"{unit}: {where}: ExecStart=@... gives the program another argv[0]; drop the @ and "
                            "the extra first argument")
    files, file_values = _env_files(settings, unit)
    env = es.merged_environment(settings.environment, file_values, settings.unset)
    if ":" in command.prefix:
        expanded = command.argv
    else:
        expansion = es.expand_argv(command.argv, env)
        if expansion.bad:
            word = expansion.bad[0]
            raise UnitReadError(
                f"{unit}: ExecStart= ({where}) has the word ${word}, which systemd reads as one variable named "
                f"{word!r} (not a valid name), so it drops the whole word; write ${{{word.split('/')[0]}}}... with "
                "braces where a variable is part of a word, or write the value out")
        if expansion.unset:
            names = ", ".join("$" + n for n in expansion.unset)
            raise UnitReadError(
                f"{unit}: ExecStart= ({where}) uses {names}, which the unit's Environment= and EnvironmentFile= do "
                "not set (systemd would substitute nothing); set it in the unit's environment, or write the value "
                "on the ExecStart= line")
        expanded = expansion.argv
    # systemd's own parse of the same files, when it has loaded exactly them (not with the A/B's drop-in loaded,
    # whose ExecStart= it would show, nor with files changed since its last reload)
    systemd_view = _show_exec_start(shown.get("ExecStart", []))
    if systemd_view and not any(path in dropins for path in ab_paths.all_dropins) and first["NeedDaemonReload"] != "yes":
        path_shown, argv_shown = systemd_view[-1]
        if argv_shown != " ".join(command.argv) and _words(argv_shown) != list(command.argv):
            raise UnitReadError(
                f"{unit}: ExecStart= ({where}) reads here as {list(command.argv)}, but systemd has `{argv_shown}`; "
                "this collection cannot read the line exactly as systemd does. Simplify the line's quoting")
        if path_shown != command.path and os.path.basename(path_shown) != os.path.basename(command.path):
            raise UnitReadError(f"{unit}: ExecStart= runs {path_shown} for systemd but {command.path} as read here")
    pid = int(first["MainPID"] or 0)
    try:
        described = uc.describe(expanded, env, backend, unit)
    except uc.CommandError as exc:
        shape = wrapper.wrapper_shape(expanded)  # a script or sh -c: its server read where it runs
        if not shape:
            raise UnitReadError(str(exc)) from None
        try:
            described = wrapper.describe(expanded, env, unit, proc, pid, first["ControlGroup"], shape)
        except uc.CommandError as wrapped:
            raise WrapperNotServingError(str(wrapped)) from None
    if described["form"] == "exec" and later_exec:
        raise UnitReadError(
            f"{unit}: the drop-in {', '.join(later_exec)} sets ExecStart= and sorts after {DROPIN_NAME}, the A/B "
            "candidate's drop-in, so it would replace every candidate's command line: fold its ExecStart= into the "
            f"unit file, or rename it to sort before {DROPIN_NAME} (for example override.conf)")
    running_argv = _cmdline(proc, pid) if pid else None
    result = dict(described, unit=unit, installed=True, fragment=fragment, dropins=dropins,
                  exec_prefix="".join(c for c in command.prefix if c in "-+!"), exec_start_source=where,
                  exec_start_unexpanded=list(command.argv), env=env, environment_files=files,
                  override_active=any(path in dropins or os.path.exists(path) for path in ab_paths.all_dropins),
                  promoted_dropin=promoted,
                  need_daemon_reload=first["NeedDaemonReload"] == "yes", active_state=first["ActiveState"],
                  running={"pid": pid, "argv": running_argv,
                           "matches": (described["kind"] == "wrapper"
                                       or uc.runs_line(running_argv, expanded))
                           if running_argv is not None else None},
                  warnings=[f"{w}: an unknown escape is kept with its backslash (systemd warns about it too)"
                            for w in settings.kept_escapes])
    result["endpoint"] = unit_endpoint(result)
    return result


def unit_endpoint(description: Mapping[str, Any]) -> Dict[str, Any]:
    """Where the unit's server answers on the host: from its command line (form exec) or its env (form env)."""
    unit = str(description.get("unit") or "the unit")
    if description.get("form") == "exec" or description.get("kind") == "wrapper":  # the server's command line
        try:
            host, port = uc.endpoint(description, unit)
        except uc.CommandError as exc:
            raise UnitReadError(str(exc)) from None
    else:
        env = description.get("env") or {}
        host_name, port_name = endpoint_names(env)
        engine = description.get("engine") or "llamacpp"
        host = uc._loopback(str(env.get(host_name) or uc.DEFAULT_HOSTS["llamacpp"]))
        raw = str(env.get(port_name) or "").strip()
        port = int(raw) if raw.isdigit() else uc.DEFAULT_PORTS[engine]
    shown = f"[{host}]" if ":" in host else host
    return {"host": host, "port": port, "url": f"http://{shown}:{port}"}


def production_endpoint(unit: str, run: Runner, *, proc: str = "/proc", run_dir: str = "/run") -> Tuple[str, int] | None:
    """A hand-written unit's endpoint from its command line; None for a form env unit. One that cannot be read now
    (a failed candidate left no server to read; a promoted drop-in renamed on disk, which systemd still lists until
    the restore's daemon-reload) answers where its armed dead-man waits for production, else None (the caller falls
    back to the unit's env, so that a restore never waits on a reading)."""
    try:
        live = read_unit(unit, run, proc=proc, run_dir=run_dir)
    except SpecdecError:
        return armed_endpoint(unit, run_dir)
    if live.get("installed") and (live.get("form") == "exec" or live.get("kind") == "wrapper"):
        return str(live["endpoint"]["host"]), int(live["endpoint"]["port"])
    return None


def armed_endpoint(unit: str, run_dir: str = "/run") -> Tuple[str, int] | None:
    """Production's endpoint as the unit's armed dead-man script has it (``CONFIG``'s url), None without one."""
    text = _read(override_paths(service_name(unit), run_dir).script) or ""
    match = re.search(r"^CONFIG = json\.loads\((.*)\)$", text, re.M)
    try:
        url = urllib.parse.urlsplit(json.loads(ast.literal_eval(match.group(1)))["url"]) if match else None
        return (str(url.hostname), int(url.port or 80)) if url and url.hostname else None
    except (ValueError, SyntaxError, KeyError, TypeError):
        return None


def wrapper_endpoint(unit: str, run: Runner, env: Mapping[str, str], *, proc: str = "/proc",
                     run_dir: str = "/run", candidate: Mapping[str, str | None] | None = None) -> Tuple[str, int] | None:
    """Where a candidate given as variables only answers, on a unit whose server is behind a wrapper or on its own
    command line (form exec, kind direct or prefixed): ``env`` (production's with the candidate's) over what the
    server sees now, its command line's --host/--port outranking them. None for the collection's launchers and a
    unit that cannot be read. With ``candidate`` (its own variables), a UnitReadError naming the flag when the
    server's command line outranks one of them (it would be silently ignored) or the unit runs a container (the
    unit's variables do not reach its server): nothing has been written then."""
    try:
        live = read_unit(unit, run, proc=proc, run_dir=run_dir)
    except SpecdecError:
        return None
    kind = live.get("kind")
    if kind not in ("wrapper", "direct", "prefixed", "container"):
        return None
    server_vars = [n for n in candidate or {} if n.startswith(("LLAMA_ARG_", "VLLM_"))]
    if kind == "container":
        if server_vars:
            raise UnitReadError(f"{unit} runs its server in a container ({(live.get('argv') or ['?'])[0]} run): the "
                                f"unit's variables ({', '.join(server_vars)}) do not reach it; give the candidate as "
                                "exec_start (role llmfleet.specdec.spec_ab renders it with -e options); nothing was "
                                "written")
        return None
    where = ("the server's command line (its wrapper writes it)" if kind == "wrapper" else
             f"{unit}'s ExecStart= line")
    fix = ("remove it from the wrapper" if kind == "wrapper" else
           "give the candidate as exec_start, its whole command line with the flag changed (role "
           "llmfleet.specdec.spec_ab renders it)")
    for hit in uc.outranked(live.get("server_args") or [], [], dict(candidate or {}), "candidate")[:1]:
        raise UnitReadError(f"{unit}: the candidate's {hit['setting']} would never reach the server: {where} has "
                            f"{hit['flag']}, which llama-server reads after its variables; {fix}; nothing was written")
    names = ("LLAMA_ARG_HOST", "LLAMA_ARG_PORT")
    seen = dict(live["server_env"], **{k: v for k, v in env.items() if k in names})
    try:
        return uc.endpoint(dict(live, server_env=seen), unit)
    except SpecdecError:
        return None


def exec_endpoints(unit: str, run: Runner, env: Mapping[str, str], argv: Sequence[str], *, proc: str = "/proc",
                   run_dir: str = "/run") -> Tuple[str, int, str, int]:
    """(candidate host, port, production host, port) for a form exec candidate: production's from the live unit,
    the candidate's from its own command line. SpecdecError when either cannot be read (nothing was written)."""
    live = read_unit(unit, run, proc=proc, run_dir=run_dir)
    if not live.get("installed"):
        raise UnitReadError(f"{unit}: {live.get('why')}")
    host, port = uc.endpoint(uc.describe(list(argv), env, live.get("engine"), unit), unit)
    return host, port, str(live["endpoint"]["host"]), int(live["endpoint"]["port"])


def dropin_endpoint(dropin_text: str, env: Mapping[str, str], unit: str) -> Tuple[str, int] | None:
    """Where a candidate whose drop-in carries an ExecStart= answers (its command line); None without one."""
    try:
        commands: List[es.ExecCommand] = []
        for item in es.unit_assignments(dropin_text):
            if item.section == "Service" and item.key == "ExecStart":
                commands = es.parse_exec(item.value, {}) or []
        if not commands:
            return None
        argv = es.expand_argv(commands[-1].argv, {}).argv
        return uc.endpoint(uc.describe(list(argv), env, None, unit), unit)
    except SpecdecError:
        return None


# ------------------------------------------------------------------ start from what runs

_SECRET = re.compile(r"TOKEN|KEY|SECRET|PASS|AUTH|CRED", re.I)
# variables that configure the server: one the process has and the unit no longer sets is a pending change
SERVER_VARS = ("LLAMA_", "VLLM_", "SPECDEC_")


def shown_value(name: str, value: str | None) -> str:
    """A variable's value for a message: quoted and cut, ``(hidden)`` when its name looks secret."""
    if value is None:
        return "unset"
    if _SECRET.search(name):
        return "(hidden)"
    return repr(value if len(value) <= 80 else value[:77] + "...")


def _expected_running_argv(live: Mapping[str, Any]) -> List[str] | None:
    """The /proc cmdline the unit's next start gives its main process, or None when it cannot be said (vLLM's
    launcher builds it from the env, which is compared on its own)."""
    argv = list(live.get("argv") or [])
    if live.get("kind") == "prefixed":  # env/nice/taskset/numactl exec the server: the process is the server
        return uc.exec_tail(argv)
    if live.get("kind") == "wrapper":  # what a wrapper runs is known only once it ran
        return None
    if live.get("kind") != "launcher":
        return argv
    if live.get("engine") != "llamacpp":
        return None
    at = argv.index(live["launcher"])
    if at + 1 >= len(argv):
        return None
    # roles/llamacpp_serve/files/llamacpp-serve-exec: execv(binary, [binary] + fixed args + split(LLAMA_EXTRA_ARGS))
    try:
        extra = shlex.split((live.get("env") or {}).get("LLAMA_EXTRA_ARGS", ""))
    except ValueError:
        return None
    return [argv[at + 1], *argv[at + 2:], *extra]


def _exe(proc: str, pid: int) -> str | None:
    try:
        return os.readlink(os.path.join(proc, str(pid), "exe"))
    except OSError:
        return None


def _is_script(path: Any) -> bool:
    """Whether the kernel runs ``path`` through a ``#!`` interpreter (its process's cmdline and exe then name the
    interpreter first)."""
    try:
        with open(str(path), "rb") as handle:
            return handle.read(2) == b"#!"
    except OSError:
        return False


def _runs_as(now: Sequence[str], want: Sequence[str]) -> bool:
    """Whether a process whose cmdline is ``now`` runs the command line ``want``: the same words, or, for a script,
    its interpreter (and the interpreter's one argument) in front of them."""
    now, want = list(now), list(want)
    if now == want:
        return True
    return bool(want) and len(now) in (len(want) + 1, len(want) + 2) and now[len(now) - len(want):] == want \
        and _is_script(want[0])


def pending_changes(live: Mapping[str, Any], proc: str = "/proc") -> Dict[str, Any]:
    """What a restart of the unit would start that its running process does not run: the command line, the
    environment, the server's binary (a build switched or replaced on disk) and unit files systemd has not loaded
    (``NeedDaemonReload``). ``compared`` is false, with ``why``, when there is nothing to compare (the unit is not
    installed or not running) or the running process is an A/B candidate (the lock and override checks decide)."""
    out: Dict[str, Any] = {"compared": False, "why": None, "differences": []}
    if not live.get("installed"):
        out["why"] = f"not installed ({live.get('why')})"
        return out
    running = live.get("running") or {}
    pid = int(running.get("pid") or 0)
    if not pid or live.get("active_state") not in ("active", "reloading"):
        out["why"] = (f"not running (ActiveState={live.get('active_state') or 'unknown'}); its next start is what "
                      "the unit files say")
        return out
    if live.get("override_active"):
        out["why"] = "an A/B candidate's override is live; the running process is the candidate"
        return out
    out["compared"] = True
    diffs: List[Dict[str, str]] = out["differences"]
    if live.get("need_daemon_reload"):
        diffs.append({"what": "unit files", "detail": "the unit's files changed on disk since systemd loaded them "
                      "(NeedDaemonReload=yes)"})
    now = running.get("argv")
    want = _expected_running_argv(live)
    if now is not None and want is not None and not _runs_as(now, want):
        diffs.append({"what": "command line", "detail": f"running `{' '.join(now)[:300]}`, next start "
                      f"`{' '.join(want)[:300]}` ({live.get('exec_start_source')})"})
    environ = ProcView(proc).environ(pid)
    unit_env = dict(live.get("server_env") if live.get("kind") == "prefixed" else live.get("env") or {})
    if environ and live.get("kind") != "wrapper":  # empty: unreadable (not root) or gone; a wrapper sets its own
        names = sorted(n for n in unit_env if environ.get(n) != unit_env[n])
        names += sorted(n for n in environ if n not in unit_env and n.startswith(SERVER_VARS))
        for name in names:
            diffs.append({"what": "environment", "detail": f"{name}: running {shown_value(name, environ.get(name))}, "
                          f"next start {shown_value(name, unit_env.get(name))}"})
    program = (want or [None])[0] if live.get("kind") in ("direct", "launcher", "prefixed") else None
    exe = _exe(proc, pid)
    if program and exe and os.path.isabs(program) and (want is not None) and not _is_script(program):
        if exe.endswith(" (deleted)"):
            diffs.append({"what": "build", "detail": f"the running binary {exe[:-10]} was replaced or removed on disk "
                          "since it started"})
        elif os.path.realpath(program) != exe:
            diffs.append({"what": "build", "detail": f"running {exe}, next start {os.path.realpath(program)} "
                          f"({program})"})
    return out


def pending_text(pending: Mapping[str, Any]) -> str:
    """The differences in one line, for the refusal and the run's record."""
    return "; ".join(f"{d['what']}: {d['detail']}" for d in pending.get("differences") or [])


FORCE_WAY_ON = "add -e specdec_force=true to go ahead with the pending change (it is named in the run's record)"


def refuse_pending(unit: str, pending: Mapping[str, Any], host: str = "", way_on: str = FORCE_WAY_ON) -> str:
    """The one-line refusal: what differs, that nothing changed, and the ways on (``way_on``: a play's
    ``specdec_force``, or a module's own options)."""
    where = f"{unit} on {host}" if host else unit
    return (f"{where}: what a restart would start differs from what runs ({pending_text(pending)}). Nothing "
            f"was changed. Restart it yourself first (systemctl daemon-reload && systemctl restart {unit}) and "
            f"check that it serves, or put the unit's files back to what runs; or {way_on}")
