# Copyright: (c) 2026, llmfleet.specdec contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# Private to the collection: a serving unit whose ExecStart= is a wrapper (a script, sh -c) that starts the server.
"""Units whose ``ExecStart=`` runs a wrapper that starts the server: a script (``#!``) that ends in
``exec llama-server ...`` (or ``exec vllm serve ...``), or ``sh -c '... exec llama-server ...'``.

A shell script cannot be read the way systemd's own syntax can, so the server is read where it runs: the unit's
``MainPID`` (with ``exec`` the wrapper's process became the server), or else the one server process in the unit's
control group (a wrapper that starts it as a child). Its ``/proc/<pid>/cmdline`` gives the server's real command
line and ``/proc/<pid>/environ`` the variables it sees, of which only the server's settings are kept
(``server_settings``: the engine's variables and what the unit's environment sets; never ``PATH``, systemd's
per-start variables or a token the wrapper exports).

Such a unit takes candidates in form ``env``: the A/B's drop-in adds the candidate's variables to the unit's
environment, which the wrapper hands down to the server. So a candidate is refused when the server would not see
its setting: a flag on the server's real command line outranks the variable (llama-server reads its command line
after ``LLAMA_ARG_*``), the wrapper sets the variable itself (the server sees another value than the unit's),
the candidate has ``flags`` (the wrapper writes the command line, not this collection), or the variable is one of
the collection's launcher variables that vLLM itself never reads. After each restart the new server's
``/proc/<pid>/environ`` must carry the candidate (``environ_mismatch`` names what differs).
"""
from __future__ import annotations

import os
from typing import Any, Dict, List, Mapping, Sequence, Tuple

from ansible_collections.llmfleet.specdec.plugins.module_utils.common._secrets import masked
from ansible_collections.llmfleet.specdec.plugins.module_utils.systemd import _unit_command as uc
from ansible_collections.llmfleet.specdec.plugins.module_utils.systemd._procview import (
    ProcView,
    cgroup_path,
    read_text,
    within_cgroup,
)

SHELLS = ("sh", "bash", "dash", "zsh", "ash", "ksh")
# variables that configure the server: those a wrapper sets itself are named
SERVER_PREFIXES = ("LLAMA_", "VLLM_", "GGML_", "CUDA_", "HIP_")
# and what else of the server's environment is its settings (the collection's own, OpenMP's threads, ROCm's devices):
# the rest of a wrapper's environment (PATH, INVOCATION_ID, a token it exports) is never read as production's settings
SETTING_PREFIXES = (*SERVER_PREFIXES, "SPECDEC_", "OMP_", "ROCR_", "HSA_")


def server_settings(environ: Mapping[str, str], unit_env: Mapping[str, str]) -> Dict[str, str]:
    """The server's own settings out of its whole environment: the engine's variables (``SETTING_PREFIXES``) and
    those the unit's ``Environment=``/``EnvironmentFile=`` set."""
    return {name: value for name, value in environ.items() if name.startswith(SETTING_PREFIXES) or name in unit_env}


def is_script(path: str) -> bool:
    try:
        with open(path, "rb") as handle:
            return handle.read(2) == b"#!"
    except OSError:
        return False


def wrapper_shape(argv: Sequence[str]) -> str | None:
    """``shell`` for ``sh -c '...'``, ``script`` for a ``#!`` script (run directly or by a shell); else None."""
    if not argv:
        return None
    program = os.path.basename(argv[0])
    if program in SHELLS and len(argv) > 2:
        option = argv[1]
        if option.startswith("-") and not option.startswith("--") and "c" in option[1:]:
            return "shell"
        if not option.startswith("-") and is_script(option):
            return "script"
        return None
    return "script" if is_script(argv[0]) else None


def _cmdline(proc: str, pid: int) -> List[str]:
    raw = read_text(os.path.join(proc, str(pid), "cmdline")) or ""
    return list(raw.rstrip("\x00").split("\x00")) if raw else []


def _server(argv: Sequence[str]) -> Tuple[str, int] | None:
    """(engine, index of its first argument) when a process's command line is a server (after env/nice/...)."""
    try:
        start, _env = uc.exec_prefix(argv)
        return uc._server_in(argv, start, "the process")  # pylint: disable=protected-access
    except uc.CommandError:
        return None


def _parent(proc: str, pid: int) -> int:
    stat = read_text(os.path.join(proc, str(pid), "stat")) or ""
    fields = stat.rpartition(")")[2].split()
    return int(fields[1]) if len(fields) > 1 and fields[1].isdigit() else 0


def server_process(proc: str, main_pid: int, control_group: str) -> Tuple[int, List[str], Tuple[str, int]] | None:
    """The server a wrapper runs: MainPID when it is the server (``exec``), else the one server process in the
    unit's control group (the topmost, when it has children of the same command line); None when there is none
    or more than one."""
    if main_pid:
        argv = _cmdline(proc, main_pid)
        found = _server(argv) if argv else None
        if found:
            return main_pid, argv, found
    if not control_group:
        return None
    servers: Dict[int, Tuple[List[str], Tuple[str, int]]] = {}
    for entry in os.listdir(proc):
        if not entry.isdigit():
            continue
        if not within_cgroup(cgroup_path(read_text(os.path.join(proc, entry, "cgroup")) or ""), control_group):
            continue
        argv = _cmdline(proc, int(entry))
        found = _server(argv) if argv else None
        if found:
            servers[int(entry)] = (argv, found)
    top = [pid for pid in servers if _parent(proc, pid) not in servers]
    if len(top) != 1:
        return None
    return top[0], servers[top[0]][0], servers[top[0]][1]


def describe(argv: Sequence[str], env: Mapping[str, str], unit: str, proc: str, main_pid: int,
             control_group: str, shape: str) -> Dict[str, Any]:
    """A wrapper unit described from its running server (module docstring); CommandError when it cannot be."""
    shown = " ".join(argv)[:200]
    if not main_pid:
        raise uc.CommandError(
            f"{unit}: ExecStart= runs a wrapper ({shown}); its server's command line and environment are read from "
            f"the running process, and {unit} is not running. Start it (systemctl start {unit}) and run again, or "
            "put llama-server / `vllm serve` on the unit's ExecStart= line")
    found = server_process(proc, main_pid, control_group)
    if found is None:
        raise uc.CommandError(
            f"{unit}: ExecStart= runs a wrapper ({shown}), and neither its MainPID {main_pid} "
            f"(`{' '.join(_cmdline(proc, main_pid))[:200]}`) nor exactly one process in its control group runs "
            "llama-server or `vllm serve`. End the wrapper with `exec llama-server ...` (or `exec vllm serve ...`), "
            "or put the server on the unit's ExecStart= line")
    pid, server_argv, (engine, at) = found
    server_env = server_settings(ProcView(proc).environ(pid), env)
    set_by_wrapper = {name: value for name, value in server_env.items()
                      if name.startswith(SERVER_PREFIXES) and env.get(name) != value}
    set_by_wrapper.update({name: None for name in env if name.startswith(SERVER_PREFIXES) and name not in server_env})
    return {"form": "env", "kind": "wrapper", "engine": engine, "argv": list(argv), "launcher": None,
            "server_at": at, "server_args": server_argv[at:], "container": None, "server_env": server_env,
            "wrapper": {"shape": shape, "pid": pid, "exec": pid == main_pid, "server_argv": server_argv,
                        "set_by_wrapper": set_by_wrapper}}


def refusals(unit: Mapping[str, Any], override: Mapping[str, str | None], flags: Sequence[str],
             config: str) -> List[Dict[str, str]]:
    """The settings of a candidate a wrapper unit's server would not see, each naming why (module docstring).
    A flag on the server's command line that outranks a variable is ``_unit_command.outranked``'s."""
    name = str(unit.get("unit") or "the unit")
    wrapper = unit.get("wrapper") or {}
    unit_env = unit.get("env") or {}
    out = []
    if flags:
        out.append({"code": "wrapper-flags", "config": config, "setting": "flags", "flag": str(flags[0]),
                    "message": f"config {config}: {name} runs a wrapper that writes the server's command line itself, "
                               f"so its flags ({' '.join(str(f) for f in flags)[:120]}) cannot reach the server; give "
                               "them as variables (LLAMA_ARG_*), or put the server on the unit's ExecStart= line"})
    for var, value in masked(override).items():
        seen = masked(wrapper.get("set_by_wrapper") or {})
        if var in seen and var in unit_env:
            out.append({"code": "wrapper-sets", "config": config, "setting": var, "flag": var,
                        "message": f"config {config}: {name}'s wrapper sets {var} itself (the server sees "
                                   f"{seen[var]!r}, the unit's environment says {masked(unit_env)[var]!r}), so the "
                                   f"candidate's {var}={value} would never reach the server; remove it from the "
                                   "wrapper (or write it as ${" + var + ":-...})"})
        elif unit.get("engine") == "vllm" and var in uc.VLLM_LAUNCHER_VARS:
            out.append({"code": "wrapper-launcher-var", "config": config, "setting": var, "flag": var,
                        "message": f"config {config}: {var} is read by this collection's vllm_serve launcher, not "
                                   f"by vLLM, and {name} runs a wrapper; put `vllm serve` on the unit's ExecStart= "
                                   "line (form exec) to A/B vLLM settings"})
    return out


def environ_mismatch(assignments: Sequence[Tuple[str, str]], unset: Sequence[str],
                     environ: Mapping[str, str]) -> List[str]:
    """Each candidate variable the process does not see as the drop-in set it, as ``NAME: the server sees X,
    the drop-in set Y``."""
    out = []
    shown = masked(dict(environ, **dict(assignments)))  # a secret-looking variable's values are never shown
    for var, value in assignments:
        if environ.get(var) != value:
            seen = masked({var: environ[var]})[var] if var in environ else None
            out.append(f"{var}: the server sees {seen!r}" if var in environ else f"{var}: the server has none")
            out[-1] += f", the drop-in set {shown[var]!r}"
    out += [f"{var}: the server sees {shown[var]!r}, the drop-in unsets it" for var in unset if var in environ]
    return out


def server_pid(proc: str, main_pid: int, control_group: str) -> int:
    """The unit's server process (see ``server_process``), else MainPID."""
    found = server_process(proc, main_pid, control_group)
    return found[0] if found else main_pid
