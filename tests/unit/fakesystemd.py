"""A small systemd and /proc for the crash matrix: units, jobs, drop-ins, transient timers, processes, sockets.

One model, two doors, one state file (``<root>/systemd.json``, under flock):

- in process: ``FakeSystemd(root).run(argv)`` is the runner ``UnitOverride`` and ``ab_lock`` get;
- as programs: ``<root>/bin/systemctl``, ``systemd-run`` and ``journalctl`` run the same code, so the real
  rollback script (``_systemd.render_rollback_script``) runs against it unchanged, as systemd would run it.

What it keeps of systemd's behaviour, because the crash matrix depends on it:

- a ``restart`` is one job: stop and start happen together at the call, whatever happens to the caller after;
- drop-ins count from the last ``daemon-reload`` on (``NeedDaemonReload`` until then); a unit's env files are read
  when it starts;
- transient timers fire at their ``OnCalendar=`` instant on the fake wall clock (``advance``), run their
  service (the real script, as a program), honour ``ConditionPathExists=`` and are gone after, as on systemd 252;
  a name is taken while its timer or service is loaded (``systemd-run`` fails);
- a started unit's process exists in the fake ``/proc``: environ, cgroup, stat, an fd on its listening socket in
  ``net/tcp``; a stopped one's does not. An env with ``FAKE_FAIL_START=1`` fails to start; a unit's
  ``wrapper_env`` (set in its state) is what a wrapper script exports before it execs the server, over the unit's;
- a unit may have a unit file (``unit_file``): its ``Environment=`` and ``EnvironmentFile=`` lines count from
  the last ``daemon-reload`` on, like drop-ins (with ``fragment``, ``FragmentPath`` names it, so that
  ``_serving_unit.read_unit`` reads it); a unit may run a ``binary`` (a path through a link such as a
  llama.cpp build's ``current``), resolved when it starts: a build directory holding ``BROKEN`` fails to start;
- ``systemd-run`` without ``--on-calendar`` starts a transient service (a build's canary, from its spec file).

Also a health server on a real loopback port: ``/health`` answers 200 while a unit that listens on that port runs.
"""
from __future__ import annotations

import calendar
import fcntl
import fnmatch
import http.server
import json
import os
import shlex
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, ClassVar, Dict, List, Sequence, Tuple

HERE = Path(__file__).resolve().parent
T0 = 1_800_000_000.0


def _read_env_file(path: str) -> Dict[str, str]:
    env: Dict[str, str] = {}
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError:
        return env
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        name, _dummy, value = line.partition("=")
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = shlex.split(value)[0] if value[0] == "'" else json.loads(value) if value[0] == '"' else value
        env[name.strip()] = value
    return env


def _parse_dropin(text: str) -> Tuple[List[str], List[str]]:
    files, unset = [], []
    for line in text.splitlines():
        if line.startswith("EnvironmentFile=") and line != "EnvironmentFile=":
            files.append(line.split("=", 1)[1].lstrip("-"))
        elif line.startswith("UnsetEnvironment="):
            unset.extend(shlex.split(line.split("=", 1)[1]))
    return files, unset


def _effective(unit: Dict[str, Any], dropins: Dict[str, str]) -> Tuple[Dict[str, str], List[str], List[str]]:
    """The unit's ``Environment=``, ``EnvironmentFile=``s and ``UnsetEnvironment=`` with its drop-ins applied in
    name order, as systemd does: an empty ``Environment=`` or ``EnvironmentFile=`` drops what came before it."""
    environment, files, unset = dict(unit["environment"]), list(unit["env_files"]), []
    for path in sorted(dropins, key=os.path.basename):
        for line in dropins[path].splitlines():
            key, sep, value = line.partition("=")
            if not sep:
                continue
            if key == "EnvironmentFile":
                files = [*files, value.lstrip("-")] if value else []
            elif key == "Environment":
                if not value:
                    environment = {}
                for word in shlex.split(value):
                    name, _eq, val = word.partition("=")
                    environment[name] = val
            elif key == "UnsetEnvironment":
                unset.extend(shlex.split(value))
    return environment, files, unset


def _missing_env_files(unit: Dict[str, Any], dropins: Dict[str, str]) -> List[str]:
    """The ``EnvironmentFile=`` paths without ``-`` that do not exist: systemd refuses to start the unit then."""
    required = [line.split("=", 1)[1] for line in (unit.get("unit_text") or "").splitlines()
                if line.startswith("EnvironmentFile=")]
    for path in sorted(dropins, key=os.path.basename):
        for line in dropins[path].splitlines():
            key, sep, value = line.partition("=")
            if sep and key == "EnvironmentFile":
                required = [*required, value] if value else []
    return [path for path in required if path and not path.startswith("-") and not os.path.exists(path)]


def _dropin_exec(dropins: Dict[str, str]) -> List[str] | None:
    """The command line the drop-ins set (an empty ``ExecStart=`` resets, the next one sets), None if they set none:
    the unit's own then runs (the model keeps its ``<binary> --port <port>`` for that)."""
    argv: List[str] | None = None
    for path in sorted(dropins, key=os.path.basename):
        for line in dropins[path].splitlines():
            key, sep, value = line.partition("=")
            if sep and key == "ExecStart":
                argv = shlex.split(value.lstrip("-@+!:")) if value else None
    return argv


def _parse_unit_file(text: str) -> Tuple[List[str], Dict[str, str]]:
    """A unit file's ``EnvironmentFile=``s and ``Environment=`` assignments (what the model needs of it)."""
    files: List[str] = []
    environment: Dict[str, str] = {}
    for line in text.splitlines():
        if line.startswith("EnvironmentFile="):
            files.append(line.split("=", 1)[1].lstrip("-"))
        elif line.startswith("Environment="):
            for word in shlex.split(line.split("=", 1)[1]):
                name, _eq, value = word.partition("=")
                environment[name] = value
    return files, environment


def _broken(binary: str) -> bool:
    build = Path(os.path.realpath(binary)).parent.parent
    return (build / "BROKEN").exists()


class FakeSystemd:
    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.state_file = self.root / "systemd.json"
        self.proc = self.root / "proc"
        self.run_dir = self.root / "run"
        self.bin = self.root / "bin"
        self.programs = False
        self._memory: Dict[str, Any] | None = None

    # ---------------------------------------------------------- set-up

    def create(self, units: Dict[str, Dict[str, Any]]) -> None:
        """``units``: name -> {"env_files": [...], "environment": {...}}; each starts active."""
        (self.proc / "net").mkdir(parents=True, exist_ok=True)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.bin.mkdir(exist_ok=True)
        state: Dict[str, Any] = {"now": T0, "next_pid": 1000, "next_inode": 50000, "units": {}, "transient": {},
                                 "procs": {}, "calls": [], "journal": [], "fired": []}
        for name, spec in units.items():
            state["units"][name] = {"env_files": list(spec.get("env_files", [])),
                                    "environment": dict(spec.get("environment", {})), "active": "inactive", "pid": 0,
                                    "nrestarts": 0, "dropins": {}, "result": "success",
                                    "unit_file": spec.get("unit_file"), "unit_text": None, "binary": spec.get("binary"),
                                    "fragment": bool(spec.get("fragment"))}
            self._load_unit_file(state["units"][name])
        self._memory = state
        for name in units:
            self._mutate(lambda st, n=name: self._start(st, n))
        for tool in ("systemctl", "systemd-run", "journalctl"):
            path = self.bin / tool
            path.write_text(f"#!{sys.executable}\nimport sys\nsys.path.insert(0, {str(HERE)!r})\n"
                            f"from fakesystemd import FakeSystemd\n"
                            f"sys.exit(FakeSystemd({str(self.root)!r}).program({tool!r}, sys.argv[1:]))\n")
            path.chmod(0o755)

    # The state lives in memory for the in-process door; the programs' door reads and writes it through the state
    # file (``programs=True``, or a FakeSystemd built by a program), under flock.

    def _load(self) -> Dict[str, Any]:
        if self._memory is not None:
            return self._memory
        return json.loads(self.state_file.read_text())

    def _save(self, state: Dict[str, Any]) -> None:
        if self._memory is not None:
            self._memory = state
            return
        tmp = self.state_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(state))
        os.replace(tmp, self.state_file)

    def _mutate(self, fn: Any) -> Any:
        if self._memory is not None:
            return fn(self._memory)
        with open(self.root / "systemd.lock", "w") as guard:
            fcntl.flock(guard, fcntl.LOCK_EX)
            state = self._load()
            out = fn(state)
            self._save(state)
            return out

    def to_file(self) -> None:
        """Hands the state to the programs (before running one); ``from_file`` takes it back."""
        if self._memory is not None:
            state, self._memory = self._memory, None
            self._save(state)

    def from_file(self) -> None:
        if self._memory is None:
            self._memory = json.loads(self.state_file.read_text())

    def state(self) -> Dict[str, Any]:
        """A copy: a snapshot stays what it was."""
        return json.loads(json.dumps(self._load()))

    # ---------------------------------------------------------- the clock

    def now(self) -> float:
        return float(self._load()["now"])

    def advance(self, seconds: float) -> None:
        """Moves the wall clock on, firing every timer that falls due on the way, in order; a transient service
        past its ``RuntimeMaxSec=`` is stopped (and, collected, gone)."""
        target = self.now() + seconds

        def expire(st: Dict[str, Any]) -> None:
            for name, t in list(st["transient"].items()):
                if t.get("until") is not None and t["until"] <= target:
                    self._reap(st, st["transient"].pop(name).get("pid", 0))
        self._mutate(expire)
        while True:
            state = self._load()
            due = sorted((t["deadline"], name) for name, t in state["transient"].items()
                         if t.get("timer") and t["deadline"] <= target)
            if not due:
                break
            deadline, name = due[0]
            self._mutate(lambda st, d=deadline: st.update(now=max(st["now"], d)))
            self.fire(name)
        self._mutate(lambda st: st.update(now=max(st["now"], target)))

    def fire(self, name: str) -> None:
        """The timer ``name`` elapses: its service runs (the real script, as a program) unless its condition fails."""
        def take(st: Dict[str, Any]) -> Dict[str, Any]:
            unit = st["transient"][name]
            unit["timer"] = False
            unit["service"] = "activating"
            return dict(unit)
        unit = self._mutate(take)
        condition = unit.get("condition")
        if condition and not os.path.exists(condition):
            outcome, rc, lines = "skipped", 0, []
        elif self.programs or "-c" in unit["argv"]:
            outcome = "ran"
            env = dict(os.environ, PATH=f"{self.bin}:{os.environ.get('PATH', '')}")
            self.to_file()
            try:
                proc = subprocess.run(unit["argv"], env=env, capture_output=True, text=True, timeout=60, check=False)
            finally:
                self.from_file()
            rc, lines = proc.returncode, proc.stdout.splitlines()
        else:
            outcome = "ran"
            rc, lines = self._run_script_here(unit["argv"][-1])
        if outcome != "skipped":
            outcome = "ran" if rc == 0 else "failed"
        self._mutate(lambda st: st["journal"].extend(f"{name}: {line}" for line in lines))

        def finish(st: Dict[str, Any]) -> None:
            st["fired"].append({"name": name, "at": st["now"], "outcome": outcome})
            if rc == 0:
                st["transient"].pop(name, None)  # both units are garbage-collected
            else:
                st["transient"][name]["service"] = "failed"
        self._mutate(finish)

    def _run_script_here(self, script: str) -> Tuple[int, List[str]]:
        """The real rollback script's own code, run in this process with its systemctl calls sent to this model
        (a program per call would cost a Python start each); ``programs=True`` runs it as systemd would."""
        fake = self
        lines: List[str] = []

        class Shim:
            PIPE = subprocess.PIPE

            @staticmethod
            def run(argv: Sequence[str], **_kw: Any) -> Any:
                rc, out, _err = fake.run(list(argv))
                return subprocess.CompletedProcess(list(argv), rc, out, "")

            @staticmethod
            def call(argv: Sequence[str], **_kw: Any) -> int:
                return fake.run(list(argv))[0]

        class Clock:
            """The script's own waits (its health wait) on a clock of their own: a production that never answers
            costs the script's whole health timeout, not that many seconds of the test."""
            elapsed = 0.0

            def __getattr__(self, name: str) -> Any:
                return getattr(time, name)

            def monotonic(self) -> float:
                return self.elapsed

            def sleep(self, seconds: float) -> None:
                self.elapsed += seconds

        namespace: Dict[str, Any] = {"__name__": "specdec_rollback"}
        source = Path(script).read_text(encoding="utf-8")
        exec(compile(source, script, "exec"), namespace)
        namespace["subprocess"] = Shim
        if "time" in namespace:
            namespace["time"] = Clock()
        namespace["print"] = lambda *a, **_k: lines.append(" ".join(str(x) for x in a))
        argv, sys.argv = sys.argv, [script]  # as systemd runs it: a script that removes sys.argv[0] removes itself
        try:
            rc = namespace["main"]()
        finally:
            sys.argv = argv
        return rc, lines

    # ---------------------------------------------------------- processes

    @staticmethod
    def _load_unit_file(unit: Dict[str, Any]) -> None:
        """What daemon-reload takes from a unit's unit file (when it has one)."""
        if not unit.get("unit_file"):
            return
        try:
            text = Path(unit["unit_file"]).read_text(encoding="utf-8")
        except OSError:
            text = ""
        unit["unit_text"] = text
        unit["env_files"], unit["environment"] = _parse_unit_file(text)

    @staticmethod
    def _environment(unit: Dict[str, Any], dropins: Dict[str, str]) -> Dict[str, str]:
        environment, files, unset = _effective(unit, dropins)
        env = dict(environment)
        for path in files:
            env.update(_read_env_file(path))
        for item in unset:
            env.pop(item, None)
        return env

    def env_on_disk(self, name: str) -> Dict[str, str]:
        """The environment a start would give the unit if systemd reloaded now: its files as they are on disk."""
        unit = dict(self._load()["units"][name])
        self._load_unit_file(unit)
        return self._environment(unit, self._dropins_on_disk(name))

    def _start(self, st: Dict[str, Any], name: str) -> None:
        unit = st["units"][name]
        env = self._environment(unit, unit["dropins"])
        exe = os.path.realpath(unit["binary"]) if unit.get("binary") else None
        missing = _missing_env_files(unit, unit["dropins"])
        if missing:
            unit.update(active="failed", pid=0, result="resources")
            st["journal"].append(f"{name}: Failed to load environment files: {missing[0]}: No such file or directory")
            return
        if env.get("FAKE_FAIL_START") == "1" or (unit.get("binary") and _broken(unit["binary"])):
            unit.update(active="failed", pid=0, result="exit-code")
            st["journal"].append(f"{name}: start failed ({'FAKE_FAIL_START' if exe is None else exe})")
            return
        env.update(unit.get("wrapper_env") or {})  # a wrapper script that exports these before it execs the server
        argv = _dropin_exec(unit["dropins"])
        port = int(argv[argv.index("--port") + 1] if argv and "--port" in argv[:-1] else env.get("LLAMA_ARG_PORT", "8080"))
        pid = self._spawn(st, name, port, env, exe, argv)
        unit.update(active="active", pid=pid, result="success")

    def _spawn(self, st: Dict[str, Any], name: str, port: int, env: Dict[str, str], exe: str | None,
               argv: List[str] | None = None) -> int:
        pid = st["next_pid"]
        st["next_pid"] += 1
        inode = st["next_inode"]
        st["next_inode"] += 1
        st["procs"][str(pid)] = {"unit": name, "port": port, "inode": inode, "exe": exe}
        d = self.proc / str(pid)
        (d / "fd").mkdir(parents=True, exist_ok=True)
        os.symlink(f"socket:[{inode}]", d / "fd" / "3")
        (d / "comm").write_text("llama-server\n")
        (d / "cmdline").write_text("".join(f"{word}\x00" for word in argv) if argv
                                   else f"{exe}\x00--port\x00{port}\x00" if exe else "llama-server\x00")
        if exe:  # what a build's activation reads of the process (the link is dangling for cwd: only its text counts)
            os.symlink(exe, d / "exe")
            os.symlink("/nonexistent-cwd", d / "cwd")
            (d / "status").write_text("Uid:\t0\t0\t0\t0\nGid:\t0\t0\t0\t0\nGroups:\t\n")
        (d / "cgroup").write_text(f"0::/system.slice/{name}\n")
        (d / "environ").write_bytes(b"\x00".join(f"{k}={v}".encode() for k, v in env.items()) + b"\x00")
        (d / "stat").write_text(f"{pid} (llama-server) S 1 " + " ".join(["0"] * 17) + f" {pid * 10} 0 0\n")
        self._write_net(st)
        return pid

    def _reap(self, st: Dict[str, Any], pid: int) -> None:
        if pid:
            st["procs"].pop(str(pid), None)
            d = self.proc / str(pid)
            for child in sorted(d.rglob("*"), reverse=True):
                child.unlink() if not child.is_dir() or child.is_symlink() else child.rmdir()
            d.rmdir()
        self._write_net(st)

    def _stop(self, st: Dict[str, Any], name: str) -> None:
        unit = st["units"][name]
        self._reap(st, unit["pid"])
        unit.update(active="inactive", pid=0)

    def _write_net(self, st: Dict[str, Any]) -> None:
        header = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"
        lines = [f"   {i}: 0100007F:{p['port']:04X} 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 "
                 f"{p['inode']} 1 0000000000000000 100 0 0 10 0\n" for i, p in enumerate(st["procs"].values())]
        (self.proc / "net" / "tcp").write_text(header + "".join(lines))
        (self.proc / "net" / "tcp6").write_text(header)

    def squat(self, port: int) -> int:
        """A process outside every unit that listens on ``port``; returns its pid."""
        def add(st: Dict[str, Any]) -> int:
            pid = st["next_pid"]
            st["next_pid"] += 1
            inode = st["next_inode"]
            st["next_inode"] += 1
            st["procs"][str(pid)] = {"unit": None, "port": port, "inode": inode}
            d = self.proc / str(pid)
            (d / "fd").mkdir(parents=True)
            os.symlink(f"socket:[{inode}]", d / "fd" / "3")
            (d / "comm").write_text("squatter\n")
            (d / "cmdline").write_text(f"python3\x00-m\x00http.server\x00{port}\x00")
            (d / "cgroup").write_text("0::/user.slice/session-1.scope\n")
            (d / "environ").write_bytes(b"")
            self._write_net(st)
            return pid
        return self._mutate(add)

    # ---------------------------------------------------------- what a test asks

    def serving(self, name: str) -> Dict[str, str] | None:
        """The environment of the unit's running process, None when it does not run."""
        unit = self._load()["units"][name]
        if unit["active"] != "active":
            return None
        raw = (self.proc / str(unit["pid"]) / "environ").read_bytes()
        return dict(item.decode().split("=", 1) for item in raw.split(b"\x00") if b"=" in item)

    def armed(self) -> List[str]:
        return sorted(name for name, t in self._load()["transient"].items() if t.get("timer"))

    def loaded_transient(self) -> List[str]:
        return sorted(self._load()["transient"])

    def health_port_owner(self, port: int) -> Any:
        for pid, p in self._load()["procs"].items():
            if p["port"] == port:
                return p["unit"], int(pid)
        return None

    # ---------------------------------------------------------- the doors

    def run(self, argv: Sequence[str]) -> Tuple[int, str, str]:
        argv = list(argv)
        return self._mutate(lambda st: self._dispatch(st, argv))

    def program(self, tool: str, args: List[str]) -> int:
        rc, out, err = self.run([tool, *args])
        sys.stdout.write(out)
        sys.stderr.write(err)
        return rc

    def _dispatch(self, st: Dict[str, Any], argv: List[str]) -> Tuple[int, str, str]:
        st["calls"].append(argv)
        tool, args = argv[0], argv[1:]
        if tool == "journalctl":
            return 0, "\n".join(st["journal"][-20:]) + "\n", ""
        if tool == "systemd-run":
            return self._systemd_run(st, args)
        flags = [a for a in args if a.startswith("--")]
        words = [a for a in args if not a.startswith("--")]
        verb, names = words[0], words[1:]
        if verb == "show":
            return self._show(st, names, flags)
        if verb == "is-active":
            out = []
            for name in names:
                out.append(self._active(st, name))
            return (0 if any(o == "active" for o in out) else 3), "\n".join(out) + "\n", ""
        if verb == "list-units":
            pattern = names[-1] if names else "*"
            rows = []
            for base in sorted(st["transient"]):
                for suffix in (".timer", ".service"):
                    if fnmatch.fnmatch(base + suffix, pattern):
                        rows.append(f"{base}{suffix} loaded {self._active(st, base + suffix)} x")
            return 0, "\n".join(rows) + ("\n" if rows else ""), ""
        if verb == "daemon-reload":
            for name, unit in st["units"].items():
                unit["dropins"] = self._dropins_on_disk(name)
                self._load_unit_file(unit)
            return 0, "", ""
        if verb == "reset-failed":
            for name in names:
                base, _dot, suffix = name.rpartition(".")
                if base in st["transient"] and st["transient"][base].get("service") == "failed":
                    st["transient"].pop(base)
                elif name in st["units"] and st["units"][name]["active"] == "failed":
                    st["units"][name]["active"] = "inactive"
            return 0, "", ""
        if verb in ("restart", "start", "stop"):
            for name in names:
                if name.endswith(".timer"):
                    base = name[: -len(".timer")]
                    t = st["transient"].get(base)
                    if t is not None and verb == "stop" and t.get("service") != "failed":
                        st["transient"].pop(base)
                    continue
                base = name[: -len(".service")]
                if base in st["transient"] and not st["transient"][base].get("timer", True):
                    if verb == "stop":  # a transient service (--collect): stopped and gone
                        self._reap(st, st["transient"].pop(base).get("pid", 0))
                    continue
                if name not in st["units"]:
                    return 5, "", f"Unit {name} not found.\n"
                if verb in ("restart", "stop"):
                    self._stop(st, name)
                if verb in ("restart", "start"):
                    self._start(st, name)
            return 0, "", ""
        return 1, "", f"fake systemctl: {argv} is not modelled\n"

    @staticmethod
    def _unit_text_on_disk(unit: Dict[str, Any]) -> str:
        try:
            return Path(unit["unit_file"]).read_text(encoding="utf-8")
        except OSError:
            return ""

    def _dropins_on_disk(self, name: str) -> Dict[str, str]:
        """The runtime drop-ins (``<root>/run/systemd/system/<unit>.d``) and the persistent ones
        (``<root>/etc/systemd/system/<unit>.d``, as promote.yml writes a hand-written unit's promotion)."""
        found: Dict[str, str] = {}
        for d in (self.root / "etc" / "systemd" / "system" / (name + ".d"), self.run_dir / "systemd" / "system" / (name + ".d")):
            if d.is_dir():
                found.update({str(p): p.read_text() for p in sorted(d.glob("*.conf"))})
        return found

    def _active(self, st: Dict[str, Any], name: str) -> str:
        base, _dot, suffix = name.rpartition(".")
        if suffix in ("timer", "service") and base in st["transient"]:
            t = st["transient"][base]
            if suffix == "timer":
                return "active" if t.get("timer") else "inactive"
            return t.get("service", "inactive")
        unit = st["units"].get(name)
        return unit["active"] if unit else "inactive"

    def _show(self, st: Dict[str, Any], names: List[str], flags: List[str]) -> Tuple[int, str, str]:
        props = []
        args = st["calls"][-1]
        for i, a in enumerate(args):
            if a == "-p":
                props.append(args[i + 1])
        names = [n for n in names if n not in props]
        name = names[0]
        values: Dict[str, Any] = {}
        base, _dot, suffix = name.rpartition(".")
        if base in st["transient"] and suffix in ("timer", "service"):
            state = self._active(st, name)
            sub = {"active": "waiting" if suffix == "timer" else "running", "activating": "start",
                   "failed": "failed"}.get(state, "dead")
            values = {"LoadState": "loaded", "ActiveState": state, "SubState": sub,
                      "MainPID": str(st["transient"][base].get("pid", 0)), "Result": "success",
                      "ControlGroup": f"/system.slice/{name}"}
        elif name in st["units"]:
            unit = st["units"][name]
            on_disk = self._dropins_on_disk(name)
            environment, env_files, _unset = _effective(unit, unit["dropins"])
            values = {"LoadState": "loaded", "ActiveState": unit["active"],
                      "SubState": {"active": "running", "failed": "failed"}.get(unit["active"], "dead"),
                      "MainPID": str(unit["pid"]), "NRestarts": str(unit["nrestarts"]), "Result": unit["result"],
                      "NeedDaemonReload": "yes" if on_disk != unit["dropins"] or (
                          unit.get("unit_file") and self._unit_text_on_disk(unit) != unit["unit_text"]) else "no",
                      "DropInPaths": " ".join(unit["dropins"]), "FragmentPath": unit["unit_file"] if unit.get("fragment") else
                      f"/etc/systemd/system/{name}",
                      "ControlGroup": f"/system.slice/{name}",
                      "Environment": " ".join(shlex.quote(f"{k}={v}") for k, v in environment.items()),
                      "EnvironmentFiles": [f"{p} (ignore_errors=no)" for p in env_files]}
        else:
            values = {"LoadState": "not-found", "ActiveState": "inactive", "SubState": "dead", "MainPID": "0"}
        lines = []
        for prop in props:
            value = values.get(prop, "")
            for item in value if isinstance(value, list) else [value]:
                lines.append(item if "--value" in flags else f"{prop}={item}")
        return 0, "\n".join(lines) + "\n", ""

    def _systemd_run(self, st: Dict[str, Any], args: List[str]) -> Tuple[int, str, str]:
        opts = {}
        rest = []
        for a in args:
            if a.startswith("--") and not rest:
                key, _eq, value = a[2:].partition("=")
                opts.setdefault(key, []).append(value)
            else:
                rest.append(a)
        base = opts["unit"][0]
        if base in st["transient"]:
            return 1, "", f"Failed to start transient timer unit: Unit {base}.timer was already loaded or has a fragment file.\n"
        if "on-calendar" not in opts:
            return self._transient_service(st, base, rest)
        deadline = calendar.timegm(time.strptime(opts["on-calendar"][0], "%Y-%m-%d %H:%M:%S UTC"))
        condition = None
        for prop in opts.get("property", []):
            if prop.startswith("ConditionPathExists="):
                condition = prop.split("=", 1)[1]
        st["transient"][base] = {"timer": True, "deadline": deadline, "argv": rest, "condition": condition,
                                 "service": "inactive", "armed_at": st["now"]}
        return 0, "", f"Running timer as unit: {base}.timer\n"

    def _transient_service(self, st: Dict[str, Any], base: str, rest: List[str]) -> Tuple[int, str, str]:
        """A build's canary: ``python -c LOADER spec.json`` runs the spec's argv (the loader deletes the spec)."""
        spec_path = rest[-1]
        spec = json.loads(Path(spec_path).read_text())
        os.unlink(spec_path)
        argv = spec["argv"]
        port = int(argv[len(argv) - 1 - argv[::-1].index("--port") + 1])
        if _broken(argv[0]):
            st["journal"].append(f"{base}: exited (llama_model_load: error loading model)")
            return 0, "", ""  # --collect: a canary that exited is gone at once
        pid = self._spawn(st, base + ".service", port, dict(spec["env"]), os.path.realpath(argv[0]))
        runtime = next((int(a.rsplit("=", 1)[1]) for a in st["calls"][-1] if a.startswith("--property=RuntimeMaxSec=")), 0)
        st["transient"][base] = {"timer": False, "service": "active", "pid": pid,
                                 "until": st["now"] + runtime if runtime else None}
        return 0, "", f"Running as unit: {base}.service\n"


class HealthServer:
    """/health on a real loopback port: 200 while a unit's process listens on that port in the fake.

    Servers are kept for the whole test session (``HealthServer.get``) and pointed at the fake under test: starting
    and stopping a server per case would cost more than the case.
    """

    _pool: ClassVar[List[HealthServer]] = []

    def __init__(self) -> None:
        outer = self
        self.fake: FakeSystemd | None = None

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                owner = outer.fake.health_port_owner(outer.port) if outer.fake is not None else None
                ok = owner is not None and owner[0] is not None
                self.send_response(200 if ok else 503)
                self.end_headers()
                self.wfile.write(b'{"status":"ok"}' if ok else b'{"error":"down"}')

            def log_message(self, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_port
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @classmethod
    def get(cls, index: int, fake: FakeSystemd) -> HealthServer:
        while len(cls._pool) <= index:
            cls._pool.append(cls())
        server = cls._pool[index]
        server.fake = fake
        return server
