# Copyright: (c) 2026, llmfleet.specdec contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# Private to the collection: which server a unit's command line runs, and a candidate applied to that command line.
"""A serving unit's command line (``ExecStart=``, after systemd's parsing and ``$VAR`` expansion) understood.

``describe(argv, env, backend)`` says which of the supported forms it is, or refuses it saying what to do:

- the collection's own launchers (``llamacpp-serve-exec`` / ``vllm-serve-exec``, roles ``llamacpp_serve`` and
  ``vllm_serve``): form ``env``, the candidate is env layered over production's env file, as before;
- llama-server run directly (``/opt/llama/bin/llama-server -m ... --port ...``): form ``exec``; the same behind
  ``env VAR=value`` / ``nice`` / ``taskset`` / ``numactl`` prefixes that exec it (kind ``prefixed``);
- ``vllm serve MODEL ...`` and ``python -m vllm.entrypoints.openai.api_server ...``: form ``exec``;
- any of those wrapped in ``podman run`` (``docker run``, docker compose and llama-swap are refused: the
  container or the server it starts runs outside the unit's cgroup, so the health gate cannot find it):
  the runtime's own options before the image are
  parsed well enough to find the image, ``-e``/``--env``, ``--env-file``, ``-p``/``--publish`` and the
  network; the server's arguments come after the image (the image's entrypoint being the server, or the
  server's program named after the image): form ``exec``.

A form ``exec`` candidate is the whole command line with the candidate's settings applied
(``apply_candidate``): an ``LLAMA_ARG_*`` setting becomes its flag (replacing production's occurrences, every
alias and ``--no-`` form included), ``null`` removes the flag and the variable, a config's ``flags`` replace
production's occurrences of the same options (``--spec-type`` excepted: llama-server appends every
``--spec-type``, so it is appended, as in form ``env``), vLLM's launcher variables become ``vllm serve``
arguments (``VLLM_SPECULATIVE_CONFIG`` -> ``--speculative-config``), and any other variable stays an
environment variable (for a container: a runtime ``-e NAME=VALUE`` before the image).

``endpoint`` says where the server answers as seen from the host (``--host``/``--port``, ``LLAMA_ARG_HOST``/
``PORT``, the engine's defaults; a container's published port). Not here: systemd's syntax (``_execstart``),
reading the unit (``_serving_unit``), the flags table (``_flags``).
"""
from __future__ import annotations

import json
import os
import re
import shlex
from typing import Any, Dict, List, Mapping, Sequence, Tuple

from ansible_collections.llmfleet.specdec.plugins.module_utils.common._errors import SpecdecError
from ansible_collections.llmfleet.specdec.plugins.module_utils.llamacpp import _flags as flags_mod

LAUNCHERS = {"llamacpp-serve-exec": "llamacpp", "vllm-serve-exec": "vllm"}
RUNTIMES = ("podman",)
# Refused runtimes and compose-style launchers, with what to do instead.
_REFUSED_RUNTIMES = {
    "docker": "a `docker run` container runs under dockerd, outside the unit's cgroup, so the A/B's health gate "
              "cannot find the server's process: run the same image with `podman run` on the unit's ExecStart= line "
              "(same options), or run llama-server / `vllm serve` on the host",
    "docker-compose": "docker compose runs its containers outside the unit's cgroup: give the server a systemd unit "
                      "of its own (`podman run` or the server directly on ExecStart=) and point specdec_unit at it",
    "llama-swap": "llama-swap starts and stops llama-server on demand, so there is no one server process to restart "
                  "with a candidate: give the model an A/B unit of its own running llama-server directly",
}
VLLM_MODULE = "vllm.entrypoints.openai.api_server"
DEFAULT_PORTS = {"llamacpp": 8080, "vllm": 8000}
DEFAULT_HOSTS = {"llamacpp": "127.0.0.1", "vllm": "0.0.0.0"}
_PYTHON = re.compile(r"python[0-9.]*\Z")
# vLLM's launcher variables (role vllm_serve) and the `vllm serve` arguments they stand for in form exec.
VLLM_LAUNCHER_VARS = ("VLLM_SERVE_MODEL", "VLLM_SERVE_HOST", "VLLM_SERVE_PORT", "VLLM_SERVE_ARGS",
                      "VLLM_SPECULATIVE_CONFIG", "VLLM_EXTRA_ARGS", "VLLM_SERVE_PASS_ENV")

# podman/docker run options that take a value (the value is the next word unless written --opt=value).
_RUN_VALUE_SHORT = set("aceh lmpuvw".replace(" ", ""))
_RUN_FLAG_SHORT = set("dtiPq")
_RUN_VALUE_LONG = set("""
add-host annotation arch attach authfile blkio-weight blkio-weight-device cap-add cap-drop cgroup-conf cgroup-parent
cgroupns cgroups chrootdirs cidfile conmon-pidfile cpu-count cpu-percent cpu-period cpu-quota cpu-rt-period
cpu-rt-runtime cpu-shares cpus cpuset-cpus cpuset-mems decryption-key detach-keys device device-cgroup-rule
device-read-bps device-read-iops device-write-bps device-write-iops dns dns-opt dns-option dns-search domainname
entrypoint env env-file env-merge expose gidmap gpus group-add group-entry health-cmd health-interval
health-on-failure health-retries health-start-interval health-start-period health-startup-cmd
health-startup-interval health-startup-retries health-startup-success health-startup-timeout health-timeout
hostname hostuser init-path ip ip6 ipc isolation kernel-memory label label-file link link-local-ip log-driver
log-opt mac-address memory memory-reservation memory-swap memory-swappiness mount name net net-alias network
network-alias oom-score-adj os passwd-entry personality pid pidfile pids-limit platform pod pod-id-file
preserve-fd preserve-fds publish pull rdt-class requires restart retry retry-delay runtime sdnotify seccomp-policy
secret security-opt shm-size shm-size-systemd stop-signal stop-timeout storage-opt subgidname subuidname sysctl
systemd timeout tmpfs uidmap ulimit umask unsetenv user userns uts variant volume volumes-from workdir
""".split())
_RUN_FLAG_LONG = set("""
detach interactive tty rm init privileged read-only read-only-tmpfs replace rmi publish-all no-healthcheck no-hosts
oom-kill-disable quiet env-host http-proxy sig-proxy tls-verify disable-content-trust passwd help
""".split())
# The runtime's global options before `run` that take a value.
_GLOBAL_VALUE = set("""
cgroup-manager conmon connection events-backend hooks-dir identity imagestore log-level module network-cmd-path
network-config-dir out root runroot runtime runtime-flag ssh storage-driver storage-opt tmpdir url volumepath config
context host
""".split())
_GLOBAL_VALUE_SHORT = set("cH")


class CommandError(SpecdecError):
    """A command line this collection cannot run candidates of; the message says what to do instead."""


def _base(word: str) -> str:
    return os.path.basename(word)


def _refuse(unit: str, why: str) -> CommandError:
    return CommandError(
        f"{unit}: {why}. Supported: llama-server, `vllm serve MODEL ...` or `python -m {VLLM_MODULE} ...` on the "
        "unit's own ExecStart= line (env/nice/taskset/numactl in front included), any of those run by `podman run` "
        "with the server's arguments after the image, a script or `sh -c` that execs the server, or a unit deployed "
        "by role llmfleet.specdec.llamacpp_serve / vllm_serve. Put the server on the unit's ExecStart= line, or "
        "deploy it with role llamacpp_serve")


# Programs that set something up and exec the server in the same process (its MainPID becomes the server): short
# options that take the next word as their value.
_PREFIX_VALUE_SHORT = {"nice": "n", "taskset": "", "numactl": "CNmipPw", "env": ""}
_PREFIX_NO_EXEC = {"taskset": ("-p", "--pid"), "numactl": ("-s", "--show", "-H", "--hardware")}


def exec_prefix(argv: Sequence[str], unit: str = "the unit") -> Tuple[int, Dict[str, str]]:
    """Index of the program that ``env``/``nice``/``taskset``/``numactl`` prefixes exec (0 when none), and the
    variables ``env VAR=value`` sets; an option it cannot read exactly is refused."""
    at, env = 0, {}
    while at < len(argv) and _base(argv[at]) in _PREFIX_VALUE_SHORT:
        program = _base(argv[at])
        i = at + 1
        while i < len(argv) and argv[i].startswith("-") and argv[i] != "--":
            word = argv[i]
            if word in _PREFIX_NO_EXEC.get(program, ()) or program == "env":
                raise _refuse(unit, f"`{program} {word}` is not a prefix this collection reads (write the "
                                    f"{'variables as VAR=value' if program == 'env' else 'server after it'})")
            takes = (word.startswith("--") and "=" not in word and program in ("nice", "numactl")
                     and word not in ("--localalloc", "--all-tasks")) or \
                (len(word) == 2 and word[1] in _PREFIX_VALUE_SHORT[program]) or (program == "taskset" and word == "-c")
            i += 2 if takes and program != "taskset" else 1
        i += 1 if i < len(argv) and argv[i] == "--" else 0
        if program == "taskset":
            i += 1  # the mask or CPU list
        while program == "env" and i < len(argv) and "=" in argv[i]:
            name, _eq, value = argv[i].partition("=")
            env[name] = value
            i += 1
        at = i
    return at, env


def exec_tail(argv: Sequence[str]) -> List[str]:
    """The command line the unit's process has once its prefixes exec'd the server."""
    try:
        return list(argv[exec_prefix(argv)[0]:])
    except CommandError:
        return list(argv)


def runs_line(running: Sequence[str] | None, argv: Sequence[str]) -> bool:
    """Whether a process whose /proc/<pid>/cmdline is ``running`` runs the unit line ``argv``: the line itself, or
    its tail once prefixes (``env``, ``nice``, ``taskset``, ``numactl``) exec'd the server. The one test behind the
    health gate's process check, the promotion's read-back and the watch's command-line drift."""
    if running is None:
        return False
    want = [str(word) for word in argv]
    return [str(word) for word in running] in (want, exec_tail(want))


# ------------------------------------------------------------------ describe


def _server_in(argv: Sequence[str], at: int, unit: str) -> Tuple[str, int] | None:
    """(engine, index of the server's first argument) when ``argv[at]`` starts a server; None otherwise."""
    if at >= len(argv):
        return None
    program = _base(argv[at])
    if program == "llama-server" or program.endswith("-llama-server"):
        return "llamacpp", at + 1
    if program == "vllm":
        if at + 1 < len(argv) and argv[at + 1] == "serve":
            return "vllm", at + 2
        raise _refuse(unit, f"`vllm {' '.join(argv[at + 1:at + 2])}` is not `vllm serve`")
    if _PYTHON.match(program):
        i = at + 1
        while i < len(argv) and argv[i].startswith("-") and argv[i] != "-m":
            if argv[i] == "-c":
                raise _refuse(unit, "python -c runs inline code")
            i += 2 if argv[i] in ("-W", "-X") else 1
        if i + 1 < len(argv) and argv[i] == "-m" and argv[i + 1] == VLLM_MODULE:
            return "vllm", i + 2
        if i + 1 < len(argv) and argv[i] == "-m" and argv[i + 1] in ("vllm", "vllm.entrypoints.cli.main") \
                and i + 2 < len(argv) and argv[i + 2] == "serve":
            return "vllm", i + 3
        return None
    return None


def _launcher(argv: Sequence[str]) -> str | None:
    for word in argv[:2]:
        if _base(word) in LAUNCHERS:
            return LAUNCHERS[_base(word)]
    return None


def _runtime_run(argv: Sequence[str], unit: str) -> Dict[str, Any]:
    """podman/docker: where `run` is, its options, the image's index, what the container gets."""
    runtime = _base(argv[0])
    i = 1
    while i < len(argv) and argv[i].startswith("-"):
        word = argv[i]
        name = word[2:].split("=", 1)[0] if word.startswith("--") else word[1:]
        if word.startswith("--") and "=" not in word and name in _GLOBAL_VALUE:
            i += 2
        elif not word.startswith("--") and name in _GLOBAL_VALUE_SHORT:
            i += 2
        else:
            i += 1
    if i < len(argv) and argv[i] == "container":
        i += 1
    if i >= len(argv) or argv[i] != "run":
        sub = argv[i] if i < len(argv) else "nothing"
        raise _refuse(unit, f"{runtime} runs `{sub}`, not `{runtime} run`")
    i += 1
    # (first word, end, long name, value, alone: the option is its words' only option)
    options: List[Tuple[int, int, str, str | None, bool]] = []
    while i < len(argv):
        word = argv[i]
        if word == "--":
            i += 1
            break
        if not word.startswith("-") or word == "-":
            break
        if word.startswith("--"):
            name, eq, value = word[2:].partition("=")
            if eq:
                options.append((i, i + 1, name, value, True))
                i += 1
            elif name in _RUN_VALUE_LONG:
                if i + 1 >= len(argv):
                    raise _refuse(unit, f"{runtime} run option {word} has no value")
                options.append((i, i + 2, name, argv[i + 1], True))
                i += 2
            elif name in _RUN_FLAG_LONG:
                options.append((i, i + 1, name, None, True))
                i += 1
            else:
                raise CommandError(
                    f"{unit}: cannot tell whether `{runtime} run` option {word} takes a value, so the image cannot "
                    f"be found safely: write it as {word}=VALUE (or {word}=true) on the unit's ExecStart= line")
            continue
        letters = word[1:]
        j = 0
        consumed = 1
        group: List[Tuple[str, str | None]] = []
        while j < len(letters):
            letter = letters[j]
            if letter in _RUN_FLAG_SHORT:
                group.append(({"d": "detach", "t": "tty", "i": "interactive", "P": "publish-all",
                               "q": "quiet"}[letter], None))
                j += 1
                continue
            if letter in _RUN_VALUE_SHORT:
                long = {"a": "attach", "c": "cpu-shares", "e": "env", "h": "hostname", "l": "label", "m": "memory",
                        "p": "publish", "u": "user", "v": "volume", "w": "workdir"}[letter]
                rest = letters[j + 1:]
                if rest:
                    value = rest[1:] if rest.startswith("=") else rest
                elif i + 1 < len(argv):
                    value = argv[i + 1]
                    consumed = 2
                else:
                    raise _refuse(unit, f"{runtime} run option -{letter} has no value")
                group.append((long, value))
                break
            raise CommandError(f"{unit}: `{runtime} run` option -{letter} (in {word}) is not one this collection "
                               f"knows; write it in its long form --NAME=VALUE on the unit's ExecStart= line")
        options += [(i, i + consumed, long, value, len(group) == 1) for long, value in group]
        i += consumed
    if i >= len(argv):
        raise _refuse(unit, f"`{runtime} run` names no image")
    return {"runtime": runtime, "image": argv[i], "image_at": i, "options": options}


def _read_env_file_lines(path: str, unit: str) -> List[Tuple[str, str | None]]:
    """A runtime --env-file: NAME=VALUE lines taken literally, NAME alone passes the unit's value, # comments."""
    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
    except OSError as exc:
        raise CommandError(f"{unit}: the container's --env-file {path} cannot be read ({exc.strerror}); fix the "
                           "path or run as root") from None
    out: List[Tuple[str, str | None]] = []
    for line in text.splitlines():
        line = line.lstrip()
        if not line or line.startswith("#"):
            continue
        name, eq, value = line.partition("=")
        out.append((name.strip(), value if eq else None))
    return out


def _container_env(options: Sequence[Sequence[Any]], unit_env: Mapping[str, str],
                   unit: str, read_files: bool = True) -> Tuple[Dict[str, str], List[str]]:
    """The variables the container's process gets from the runtime's options, and those an --env-file or
    --env-host gives (an -e option cannot take those away)."""
    env: Dict[str, str] = {}
    from_files: set[str] = set()
    for _start, _end, name, value, _alone in options:
        if name == "env-host":
            env.update(unit_env)
            from_files.update(unit_env)
        elif name == "env-file" and value and read_files:
            for key, val in _read_env_file_lines(value, unit):
                if val is not None:
                    env[key] = val
                    from_files.add(key)
                elif key in unit_env:
                    env[key] = unit_env[key]
                    from_files.add(key)
        elif name == "env" and value is not None:
            key, eq, val = value.partition("=")
            if "*" in key:
                raise CommandError(f"{unit}: the container's -e {value} passes variables by pattern; name each "
                                   "variable (-e NAME=VALUE) so the server's environment can be known")
            if eq:
                env[key] = val
            elif key in unit_env:
                env[key] = unit_env[key]
        elif name == "unsetenv" and value:
            env.pop(value, None)
            from_files.discard(value)
    return env, sorted(from_files)


def _volumes(options: Sequence[Sequence[Any]]) -> List[List[str]]:
    """Bind mounts (host path, container path) from -v/--volume and --mount type=bind (named volumes left out)."""
    out = []
    for _start, _end, name, value, _alone in options:
        if not value:
            continue
        if name == "volume":
            parts = value.split(":")
            if len(parts) >= 2 and parts[0].startswith("/") and parts[1].startswith("/"):
                out.append([parts[0], parts[1]])
        elif name == "mount":
            fields = dict(part.partition("=")[::2] for part in value.split(","))
            src = fields.get("source") or fields.get("src")
            dst = fields.get("target") or fields.get("destination") or fields.get("dst")
            if fields.get("type") == "bind" and src and dst:
                out.append([src, dst])
    return out


def host_path(value: str, volumes: Sequence[Sequence[str]]) -> str:
    """A container path as the host sees it through the bind mounts (the longest mount wins); unchanged otherwise."""
    best = None
    for src, dst in volumes:
        dst = dst.rstrip("/") or "/"
        if (value == dst or value.startswith(dst + "/")) and (best is None or len(dst) > len(best[1])):
            best = (src.rstrip("/"), dst)
    return best[0] + value[len(best[1]):] if best else value


def describe(argv: Sequence[str], env: Mapping[str, str] | None = None, backend: str | None = None,
             unit: str = "the unit", read_files: bool = True) -> Dict[str, Any]:
    """The command line's form (see the module docstring); CommandError for anything else."""
    argv = [str(a) for a in argv]
    env = dict(env or {})
    if not argv:
        raise CommandError(f"{unit}: ExecStart= is empty")
    launcher = _launcher(argv)
    if launcher:
        at = next(i for i, w in enumerate(argv) if _base(w) in LAUNCHERS)
        return {"form": "env", "kind": "launcher", "engine": launcher, "argv": argv, "launcher": argv[at],
                "server_at": min(at + 2, len(argv)), "server_args": argv[at + 2:], "container": None,
                "server_env": env}
    start, prefix_env = exec_prefix(argv, unit)
    found = _server_in(argv, start, unit)
    if found:
        engine, at = found
        return {"form": "exec", "kind": "prefixed" if start else "direct", "engine": engine, "argv": argv,
                "launcher": None, "server_at": at, "server_args": argv[at:], "container": None,
                "server_env": dict(env, **prefix_env)}
    refused = _REFUSED_RUNTIMES.get(_base(argv[0]))
    if refused and _base(argv[0]) == "docker" and len(argv) > 1 and argv[1] == "compose":
        refused = _REFUSED_RUNTIMES["docker-compose"]
    if refused:
        raise CommandError(f"{unit}: {refused}")
    if _base(argv[0]) in RUNTIMES:
        run = _runtime_run(argv, unit)
        image_at = run["image_at"]
        found = _server_in(argv, image_at + 1, unit)
        if found:
            engine, at = found
        elif image_at + 1 >= len(argv) or argv[image_at + 1].startswith("-"):
            engine = backend or ("vllm" if "vllm" in run["image"].lower() else "llamacpp")
            at = image_at + 1
        else:
            raise _refuse(unit, f"the container runs {argv[image_at + 1]!r} after the image {run['image']}, which is "
                                "not llama-server or vLLM")
        container_env, from_files = _container_env(run["options"], env, unit, read_files)
        container = {"runtime": run["runtime"], "image": run["image"], "image_at": image_at,
                     "options": [list(o) for o in run["options"]], "env": container_env, "env_from_files": from_files,
                     "network": next((o[3] for o in run["options"] if o[2] in ("network", "net")), None),
                     "publish": [o[3] for o in run["options"] if o[2] == "publish" and o[3]],
                     "volumes": _volumes(run["options"])}
        return {"form": "exec", "kind": "container", "engine": engine, "argv": argv, "launcher": None,
                "server_at": at, "server_args": argv[at:], "container": container, "server_env": container["env"]}
    program = _base(argv[0])
    if program in ("sh", "bash", "dash", "zsh", "env", "sudo", "numactl", "taskset", "nice", "chrt", "stdbuf",
                   "ionice", "runuser", "su", "setpriv", "nohup", "exec"):
        raise _refuse(unit, f"ExecStart= runs {argv[0]}, a wrapper around the server")
    raise _refuse(unit, f"ExecStart= runs {argv[0]}, which is not llama-server, vLLM or a container runtime")


# ------------------------------------------------------------------ llama-server arguments


def _llama_walk(args: Sequence[str]) -> List[Tuple[int, int, Any]]:
    """(start, end, option or None) for each option occurrence in llama-server arguments."""
    out = []
    i = 0
    while i < len(args):
        found = flags_mod.lookup(str(args[i]))
        if found is None:
            out.append((i, i + 1, None))
            i += 1
            continue
        opt, _positive = found
        end = min(i + 1 + opt.takes, len(args))
        out.append((i, end, opt))
        i = end
    return out


def llama_options_in(args: Sequence[str]) -> List[Tuple[Any, List[str]]]:
    """Each option occurrence in llama-server arguments: (option, its tokens)."""
    return [(opt, list(args[s:e])) for s, e, opt in _llama_walk(args) if opt is not None]


def _llama_remove(args: Sequence[str], canonical: str) -> List[str]:
    return [t for s, e, opt in _llama_walk(args) if opt is None or opt.canonical != canonical for t in args[s:e]]


def env_option(name: str) -> Tuple[Any, bool] | None:
    """The llama-server option an ``LLAMA_ARG_*`` name sets, and whether it is the positive form."""
    for opt in flags_mod.OPTIONS:
        if opt.env == name:
            return opt, True
    if name.startswith("LLAMA_ARG_NO_"):
        positive = "LLAMA_ARG_" + name[len("LLAMA_ARG_NO_"):]
        for opt in flags_mod.OPTIONS:
            if opt.env == positive and opt.neg:
                return opt, False
    return None


def _llama_tokens(opt: Any, positive: bool, value: str, name: str, config: str) -> List[str]:
    truthy = value in ("on", "enabled", "true", "1")
    falsey = value in ("off", "disabled", "false", "0")
    if not positive:
        return [opt.neg[-1]]
    if opt.kind == "flag":
        return [opt.canonical] if truthy else []
    if opt.kind == "bool":
        if not (truthy or falsey):
            raise CommandError(f"config {config}: {name}={value!r} is not a boolean llama-server reads (on/off, "
                               "true/false, 1/0, enabled/disabled); change it")
        return [opt.canonical] if truthy else ([opt.neg[-1]] if opt.neg else [])
    if opt.kind == "value2":
        raise CommandError(f"config {config}: {name} takes two values on the command line; give it as flags")
    return [opt.canonical, value]


# ------------------------------------------------------------------ vLLM arguments


def _vllm_walk(args: Sequence[str]) -> List[Tuple[int, int, str | None]]:
    """(start, end, option name or None) for each token group of vLLM arguments (argparse-like)."""
    out = []
    i = 0
    while i < len(args):
        word = str(args[i])
        if word.startswith("--"):
            name = word[2:].split("=", 1)[0].replace("_", "-")
            takes = "=" not in word and i + 1 < len(args) and not (
                str(args[i + 1]).startswith("--") or re.match(r"-[A-Za-z]", str(args[i + 1])))
            end = i + 2 if takes else i + 1
            out.append((i, end, name))
            i = end
        else:
            out.append((i, i + 1, None))
            i += 1
    return out


def _vllm_remove(args: Sequence[str], name: str) -> List[str]:
    return [t for s, e, opt in _vllm_walk(args) if opt != name for t in args[s:e]]


def _vllm_value(args: Sequence[str], name: str) -> str | None:
    value = None
    for s, e, opt in _vllm_walk(args):
        if opt == name:
            word = str(args[s])
            value = word.split("=", 1)[1] if "=" in word else (str(args[s + 1]) if e - s == 2 else "")
    return value


def _vllm_options(tokens: Sequence[str]) -> List[str]:
    return [opt for _s, _e, opt in _vllm_walk(tokens) if opt]


# ------------------------------------------------------------------ a candidate on the command line


def _split(name: str, value: str, config: str) -> List[str]:
    try:
        return shlex.split(value)
    except ValueError as exc:
        raise CommandError(f"config {config}: {name}={value!r} does not split into arguments ({exc}); pair its "
                           "quotes") from None


def _apply_llama(server: List[str], override: Mapping[str, str | None], flags: Sequence[str], config: str,
                 env_left: Dict[str, str | None]) -> List[str]:
    flag_opts = {opt.canonical for opt, _tokens in llama_options_in(flags)}
    for name, value in override.items():
        if name == "LLAMA_EXTRA_ARGS":
            raise CommandError(f"config {config}: LLAMA_EXTRA_ARGS is read only by the collection's launcher, and this "
                               "unit runs llama-server itself; give those arguments as the config's flags")
        found = env_option(name)
        if found is None:
            env_left[name] = value
            continue
        opt, positive = found
        if opt.canonical in flag_opts and opt.canonical != "--spec-type":
            raise CommandError(f"config {config}: {name} and the flag {opt.canonical} in its flags set the same "
                               f"llama-server option, and the flag would win; keep one of them")
        server = _llama_remove(server, opt.canonical)
        if value is None:
            env_left[name] = None  # production's variable would apply once the flag is gone
            continue
        server = server + _llama_tokens(opt, positive, value, name, config)
    for canonical in flag_opts - {"--spec-type"}:
        server = _llama_remove(server, canonical)
    return server + list(flags)


def _apply_vllm(server: List[str], override: Mapping[str, str | None], flags: Sequence[str], config: str,
                env_left: Dict[str, str | None], positional_model: bool) -> List[str]:
    extra: List[str] = []
    for name, value in override.items():
        if name == "VLLM_SPECULATIVE_CONFIG":
            server = _vllm_remove(server, "speculative-config")
            text = (value or "").strip()
            if text:
                try:
                    parsed = json.loads(text)
                except ValueError as exc:
                    raise CommandError(f"config {config}: VLLM_SPECULATIVE_CONFIG is not JSON ({exc}); fix it") from None
                if not isinstance(parsed, dict):
                    raise CommandError(f"config {config}: VLLM_SPECULATIVE_CONFIG must be a JSON object")
                if parsed:
                    server += ["--speculative-config", json.dumps(parsed, separators=(",", ":"), sort_keys=True)]
        elif name == "VLLM_SERVE_MODEL":
            if value is None:
                raise CommandError(f"config {config}: VLLM_SERVE_MODEL cannot be removed; name the model to serve")
            if positional_model and server and not server[0].startswith("-"):
                server = [value, *server[1:]]
            else:
                server = [*_vllm_remove(server, "model"), "--model", value]
        elif name in ("VLLM_SERVE_HOST", "VLLM_SERVE_PORT"):
            option = "host" if name.endswith("HOST") else "port"
            server = _vllm_remove(server, option) + ([f"--{option}", value] if value is not None else [])
        elif name in ("VLLM_SERVE_ARGS", "VLLM_EXTRA_ARGS"):
            extra += _split(name, value or "", config)
        elif name == "VLLM_SERVE_PASS_ENV":
            raise CommandError(f"config {config}: VLLM_SERVE_PASS_ENV is read only by the collection's launcher; "
                               "give the variables themselves in env")
        else:
            env_left[name] = value
    added = extra + list(flags)
    for option in _vllm_options(added):
        server = _vllm_remove(server, option)
    return server + added


def _apply_container_env(head: List[str], container: Mapping[str, Any], env_left: Mapping[str, str | None],
                         config: str, unit: str) -> List[str]:
    """Container: the server's variables as runtime -e options before the image (production's -e of the same
    name removed; a null only removes it)."""
    if not env_left:
        return head
    image_at = int(container["image_at"])
    drop: set[int] = set()
    for start, end, name, value, alone in (tuple(o) for o in container.get("options") or []):
        if name == "env" and value is not None and value.partition("=")[0] in env_left:
            if not alone:
                raise CommandError(f"config {config}: {unit}'s container gets {value.partition('=')[0]} in a group of "
                                   f"short options ({head[start]}); write -e on its own on the ExecStart= line")
            drop.update(range(start, end))
    options = [w for i, w in enumerate(head[:image_at]) if i not in drop]
    for name, value in env_left.items():
        if value is not None:
            options += ["-e", f"{name}={value}"]
    return options + head[image_at:]


def apply_candidate(description: Mapping[str, Any], override: Mapping[str, str | None], flags: Sequence[str],
                    config: str = "config", unit: str = "the unit") -> Dict[str, Any]:
    """A form ``exec`` candidate: ``argv`` (the new command line), ``server_args`` (what the server parses),
    ``env`` (variables left as the unit's environment: direct runs; null unsets) and ``container_env``."""
    argv = list(description["argv"])
    at = int(description["server_at"])
    server = argv[at:]
    env_left: Dict[str, str | None] = {}
    tokens = [str(t) for t in flags or []]
    if description["engine"] == "llamacpp":
        server = _apply_llama(server, override, tokens, config, env_left)
    else:
        positional = at >= 1 and argv[at - 1] == "serve"
        server = _apply_vllm(server, override, tokens, config, env_left, positional)
    head = argv[:at]
    container = description.get("container")
    if container:
        for name, value in env_left.items():
            if value is None and name in (container.get("env_from_files") or []):
                raise CommandError(f"config {config}: {name} cannot be removed from {unit}'s container: an --env-file "
                                   "or --env-host gives it, not an -e option; remove it there or leave it set")
        head = _apply_container_env(head, container, env_left, config, unit)
        server_env = dict(container.get("env") or {})
        for name, value in env_left.items():
            if value is None:
                server_env.pop(name, None)
            else:
                server_env[name] = value
        return {"argv": head + server, "server_at": len(head), "server_args": server, "env": {},
                "container_env": server_env}
    return {"argv": head + server, "server_at": len(head), "server_args": server, "env": env_left,
            "container_env": None}


# ------------------------------------------------------------------ settings production's command line outranks


def outranked(command_args: Sequence[str], extra_args: Sequence[str], override: Mapping[str, str | None],
              config: str, extra_source: str = "LLAMA_EXTRA_ARGS") -> List[Dict[str, str]]:
    """Form ``env``: each candidate ``LLAMA_ARG_*`` setting whose flag is on the command line llama-server
    gets (the unit's ExecStart= arguments, or ``LLAMA_EXTRA_ARGS`` as rendered): llama-server reads its
    variables first and its command line after, so the setting would be silently ignored (``--spec-type``:
    added to, not replaced)."""
    out = []
    places = [("the unit's ExecStart= line", command_args), (extra_source, extra_args)]
    for name, value in override.items():
        found = env_option(name)
        if found is None:
            continue
        opt, _positive = found
        for where, args in places:
            hits = [tokens for o, tokens in llama_options_in(args) if o.canonical == opt.canonical]
            if not hits:
                continue
            shown = " ".join(shlex.quote(t) for t in hits[-1])
            if value is None:
                effect = f"unsetting {name} changes nothing"
            elif opt.canonical == "--spec-type":
                effect = (f"{name}={value} would not replace it: llama-server appends every --spec-type, so the "
                          "chain would be both")
            else:
                effect = f"{name}={value} would be silently ignored (llama-server reads its command line after LLAMA_ARG_*)"
            out.append({"code": "outranked", "config": config, "setting": name, "flag": opt.canonical,
                        "message": f"config {config}: {effect}: {where} has {shown}. Remove {opt.canonical} from "
                                   f"{where}, or give the candidate's value as flags (flags: [{opt.canonical}, ...]), "
                                   "which come after it"})
            break
    return out


# ------------------------------------------------------------------ where the server answers


def _publish_map(publish: Sequence[str], port: int, unit: str) -> Tuple[str, int] | None:
    for spec in publish:
        spec = spec.split("/", 1)[0]
        if spec.startswith("["):
            close = spec.find("]")
            ip, rest = spec[1:close], spec[close + 2:]
            parts = [ip, *rest.split(":")]
        else:
            parts = spec.split(":")
        if len(parts) == 1:
            host_ip, host_port, ctr = "", "", parts[0]
        elif len(parts) == 2:
            host_ip, (host_port, ctr) = "", parts
        else:
            host_ip, host_port, ctr = parts[0], parts[-2], parts[-1]
        if "-" in ctr or "-" in host_port:
            raise CommandError(f"{unit}: the container publishes the port range {spec}; publish the server's port "
                               "alone (-p HOST:CONTAINER)")
        if ctr.isdigit() and int(ctr) == port:
            if not host_port:
                raise CommandError(f"{unit}: -p {spec} publishes the server's port {port} on a random host port; "
                                   f"give it a fixed one (-p HOSTPORT:{port})")
            return host_ip, int(host_port)
    return None


def _loopback(host: str) -> str:
    if host in ("", "0.0.0.0", "*"):
        return "127.0.0.1"
    if host in ("::", "[::]"):
        return "::1"
    return host


def endpoint(description: Mapping[str, Any], unit: str = "the unit") -> Tuple[str, int]:
    """(host, port) where the server answers, as seen from the host itself (a wildcard is loopback)."""
    engine = description["engine"]
    server = list(description.get("server_args") or [])
    env = description.get("server_env") or {}
    if engine == "llamacpp":
        options = flags_mod.parse(server, {k: v for k, v in env.items() if k in ("LLAMA_ARG_HOST", "LLAMA_ARG_PORT")})
        host = str(options["options"].get("--host") or DEFAULT_HOSTS[engine])
        port = options["options"].get("--port") or DEFAULT_PORTS[engine]
    else:
        host = _vllm_value(server, "host") or DEFAULT_HOSTS[engine]
        raw = _vllm_value(server, "port")
        port = int(raw) if raw and raw.isdigit() else DEFAULT_PORTS[engine]
    if not isinstance(port, int) or not 0 < port < 65536:
        raise CommandError(f"{unit}: the server's port {port!r} is not a TCP port")
    if host.endswith(".sock"):
        raise CommandError(f"{unit}: the server listens on the unix socket {host}; serve on a TCP address for A/B runs")
    container = description.get("container")
    if container and container.get("network") != "host":
        mapped = _publish_map(container.get("publish") or [], port, unit)
        if mapped is None:
            raise CommandError(f"{unit}: the container does not publish the server's port {port} to the host; add "
                               f"-p 127.0.0.1:{port}:{port} (or run it with --network host)")
        return _loopback(mapped[0]), mapped[1]
    return _loopback(host), int(port)
