# Copyright: (c) 2026, llmfleet.specdec contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# Private to the collection: a serving unit's own files changed under a dead-man that puts the previous ones back.
"""The redeploy of a unit file (and the files that go with it) behind module ``unit_deploy``.

``unit_override`` carries a change of a unit's *env* (a drop-in in ``/run``, production's files untouched until
the change answered health). A change of the unit file itself (``User=``, ``ExecStart=``: a new launcher, a new
vLLM venv or image) has no such vehicle, so it goes the way a build switch goes (``_activate``):

1. **Before anything changes**: bad input refused; a unit that runs an override of ``unit_override`` refused
   (an A/B or a leftover: ``rollback.yml`` first); the port the new files name must be free or the unit's own.
2. **The dead-man first.** A transient timer ``specdec-deploy-rollback-<unit stem>`` is armed (a wall-clock
   instant, ``ConditionPathExists=`` on its script, as ``unit_override``'s), then its script, then its record
   (``/run/llmfleet-specdec/deploy/<unit>/deploy.json``, 0600 in 0700 folders: the previous content and mode of
   every file). From here on, whatever happens to the module, the link or the controller, the host puts the
   previous files back, reloads and restarts the unit when the timer fires, unless the deploy finished first.
3. **Write, reload, one restart job, health** from a new process that serves the port and carries the new env.
4. **Finish**: the record first (a timer that fires now finds nothing to do and removes its script), then
   the script (a timer that fires now is skipped), then the timer. On failure the previous files go back, the
   unit restarts on them and must answer health; if it does not, the dead-man stays armed and tries once more.
   A deploy interrupted before it finished (its record is still in ``/run``) is undone first by the next one.

A unit that does not serve (a first deploy, a stopped or failed unit) has no production to protect: its files
are written and systemd reloaded, and the caller starts it and checks its health.

A reboot in the middle forgets the timer (``/run``): the host then boots the new files, which is why an env-only
change goes through ``unit_override`` instead, where production's files never hold an unverified config.
"""
from __future__ import annotations

import json
import math
import os
import shlex
import stat
from typing import Any, Dict, List, Mapping, NamedTuple, Sequence, Tuple

from ansible_collections.llmfleet.specdec.plugins.module_utils.common._errors import SpecdecError
from ansible_collections.llmfleet.specdec.plugins.module_utils.systemd import _deadman, _pin
from ansible_collections.llmfleet.specdec.plugins.module_utils.systemd._envfile import (
    EnvConfig,
    config_matches_environ,
    read_env_files,
    read_env_values,
)
from ansible_collections.llmfleet.specdec.plugins.module_utils.systemd._procview import environment_files, read_text
from ansible_collections.llmfleet.specdec.plugins.module_utils.systemd._systemd import (
    DEPLOY_PREFIX,
    SCRIPT_NO_REDIRECT,
    SCRIPT_PUT_BACK,
    STATE_DIR_NAME,
    UnitOverrideError,
    calendar_spec,
    journal_tail,
    override_paths,
)
from ansible_collections.llmfleet.specdec.plugins.module_utils.systemd._unit_override import (
    UnitOverride,
    endpoint_of,
    health_url,
)


class DeployError(UnitOverrideError):
    """The deploy failed; ``details`` travel into fail_json."""


class DeployPaths(NamedTuple):
    unit: str
    state_dir: str
    meta: str
    script: str
    rollback_unit: str

    @property
    def timer(self) -> str:
        return self.rollback_unit + ".timer"

    @property
    def rollback_service(self) -> str:
        return self.rollback_unit + ".service"


def deploy_paths(unit: str, run_dir: str = "/run") -> DeployPaths:
    """Every path and transient unit a deploy of ``unit`` (a full service name) uses."""
    state_dir = os.path.join(run_dir, STATE_DIR_NAME, "deploy", unit)
    return DeployPaths(unit=unit, state_dir=state_dir, meta=os.path.join(state_dir, "deploy.json"),
                       script=os.path.join(state_dir, "rollback.py"),
                       rollback_unit=DEPLOY_PREFIX + unit[: -len(".service")])


class FileChange(NamedTuple):
    path: str
    content: str
    mode: int
    before: str | None
    mode_before: int | None

    @property
    def changed(self) -> bool:
        return self.before != self.content or self.mode_before != self.mode


def file_state(path: str) -> Tuple[str | None, int | None]:
    try:
        mode = stat.S_IMODE(os.stat(path).st_mode)
    except FileNotFoundError:
        return None, None
    return read_text(path), mode


def write_file(path: str, text: str, mode: int) -> None:
    """Atomically, with its mode from the first byte (root's, like the roles' files)."""
    _deadman.write_private(path, text, mode)


# ------------------------------------------------------------------ the dead-man script

# Standalone under systemd with the controller and this collection gone (no imports from the collection).
_ROLLBACK_SCRIPT = r'''#!{python}
# Written by llmfleet.specdec.unit_deploy: the dead-man of a redeploy of {unit} (run by {timer}).
# Puts the previous unit file, env file and launcher back, reloads systemd and restarts {unit}, unless the
# deploy finished first (it removes {meta} before it disarms this timer).
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request

META = {meta!r}
SCRIPT = {script!r}


{no_redirect}


{put_back}


def say(message):
    print("llmfleet.specdec deploy rollback: " + message, flush=True)


def main():
    try:
        with open(META) as handle:
            meta = json.load(handle)
    except (FileNotFoundError, ValueError):
        say("nothing to do: the deploy finished")
        try:
            os.unlink(SCRIPT)
        except OSError:
            pass
        return 0
    for item in meta["files"]:
        if item["before"] is None:
            try:
                os.unlink(item["path"])
            except FileNotFoundError:
                pass
        else:
            put_back(item["path"], item["before"], item["mode_before"])
    say("DEPLOY OF " + meta["unit"] + " NOT CONFIRMED: put back " + ", ".join(i["path"] for i in meta["files"]))
    if meta.get("pin_text") and not os.path.exists(meta["pin"]):
        # a deploy forced past a change pending on disk: the restart below starts what ran, not that change
        os.makedirs(os.path.dirname(meta["pin"]), mode=0o700, exist_ok=True)
        put_back(meta["pin"], meta["pin_text"], 0o600)
    before = subprocess.run(["systemctl", "show", meta["unit"], "-p", "MainPID", "--value"],
                            stdout=subprocess.PIPE, universal_newlines=True).stdout.strip()
    subprocess.call(["systemctl", "daemon-reload"])
    subprocess.call(["systemctl", "reset-failed", meta["unit"]])
    rc = subprocess.call(["systemctl", "restart", meta["unit"]])
    deadline = time.monotonic() + meta["health_timeout"]
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({{}}), NoRedirect())
    pid = None
    while rc == 0 and time.monotonic() < deadline:
        now = subprocess.run(["systemctl", "show", meta["unit"], "-p", "MainPID", "--value"],
                             stdout=subprocess.PIPE, universal_newlines=True).stdout.strip()
        if now not in ("", "0", before):
            try:
                with opener.open(meta["url"], timeout=2) as reply:
                    if reply.status == 200:
                        pid = now
                        break
            except Exception:
                pass
        time.sleep(0.5)
    if pid and meta.get("pin_text"):
        # what ran answers: its pin goes, without a restart; the change pending on disk stays pending
        try:
            os.unlink(meta["pin"])
        except FileNotFoundError:
            pass
        subprocess.call(["systemctl", "daemon-reload"])
    for path in (META, meta["script"]):
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
    if pid:
        say(meta["unit"] + " answers " + meta["url"] + " on its previous files (pid " + pid + ")")
        return 0
    say("PRODUCTION NOT HEALTHY: " + meta["unit"] + " did not answer " + meta["url"] + " on its previous files")
    subprocess.call(["journalctl", "-u", meta["unit"], "-n", "30", "--no-pager", "-o", "cat"])
    return 1


if __name__ == "__main__":
    sys.exit(main())
'''


def render_rollback_script(paths: DeployPaths, python: str) -> str:
    return _ROLLBACK_SCRIPT.format(python=python, unit=paths.unit, timer=paths.timer, meta=paths.meta,
                                   script=paths.script, no_redirect=SCRIPT_NO_REDIRECT, put_back=SCRIPT_PUT_BACK)


def timer_command(paths: DeployPaths, deadline_epoch: float, python: str, health_timeout: int) -> List[str]:
    """Armed like unit_override's dead-man: a wall-clock instant, skipped once its script is gone."""
    return ["systemd-run", f"--unit={paths.rollback_unit}",
            f"--description=llmfleet.specdec dead-man of the redeploy of {paths.unit}",
            f"--on-calendar={calendar_spec(deadline_epoch)}", "--timer-property=AccuracySec=1s",
            "--property=Type=oneshot", f"--property=TimeoutStartSec={int(health_timeout) + 60}",
            f"--property=ConditionPathExists={paths.script}", python, paths.script]


# ------------------------------------------------------------------ the deploy


class UnitDeploy:
    """Files of one unit: written plainly when it does not serve, else under the dead-man and health-checked."""

    def __init__(self, vehicle: UnitOverride, keep_what_runs: bool = False) -> None:
        self.vehicle = vehicle
        self.sd = vehicle.sd
        self.check_mode = vehicle.check_mode
        self.keep_what_runs = keep_what_runs  # O(keep_what_runs): the way back is what ran, not the pending change

    # ---------------------------------------------------------- facts

    def changes(self, files: Sequence[Mapping[str, Any]]) -> List[FileChange]:
        out = []
        for item in files:
            before, mode_before = file_state(item["path"])
            out.append(FileChange(item["path"], item["content"], int(item["mode"]), before, mode_before))
        return out

    def env_with(self, unit: str, replaced: Mapping[str, str]) -> Dict[str, str]:
        """The unit's own env as a start would build it, with the env files in ``replaced`` read from their new
        text (the override of unit_override left out: a deploy refuses a unit that has one)."""
        env: Dict[str, str] = {}
        for value in self.sd.show_all(unit, "Environment"):
            try:
                words = shlex.split(value)
            except ValueError:
                words = value.split()
            for word in words:
                name, sep, val = word.partition("=")
                if sep:
                    env[name] = val
        for path, _dummy in environment_files(self.sd.show_all(unit, "EnvironmentFiles")):
            if path in replaced:
                env.update(read_env_values(replaced[path]))
            else:
                env.update(read_env_files([path]))
        return env

    def refuse_override(self, unit: str) -> None:
        paths = override_paths(unit, self.vehicle.run_dir)
        found = self.vehicle.found(paths)
        if found:
            raise DeployError(f"{unit} runs an override of unit_override now ({'; '.join(found)}): an A/B run, or one "
                              "that was left behind. Nothing was changed. Wait for the A/B to finish, or run "
                              "playbooks/rollback.yml on this host, then deploy again")

    # ---------------------------------------------------------- the dead-man

    def arm(self, paths: DeployPaths, meta: Dict[str, Any], seconds: int) -> None:
        """The timer first (it is skipped while its script is missing), then the script, then the record."""
        deadline = math.ceil(self.vehicle.wall() + int(seconds))
        # A timer an earlier deploy left after its record was gone would only find nothing to do: unload it.
        self.sd.call(["systemctl", "stop", paths.timer])
        self.sd.call(["systemctl", "reset-failed", paths.timer, paths.rollback_service])
        self.sd.must(timer_command(paths, deadline, self.vehicle.python, self.vehicle.health_timeout))
        for directory in (os.path.dirname(os.path.dirname(paths.state_dir)), os.path.dirname(paths.state_dir),
                          paths.state_dir):
            _deadman.ensure_private_dir(directory)
        _deadman.write_private(paths.script, render_rollback_script(paths, self.vehicle.python), 0o700)
        _deadman.write_private(paths.meta, json.dumps(dict(meta, deadline=deadline, script=paths.script),
                                                      sort_keys=True) + "\n", 0o600)

    def disarm(self, paths: DeployPaths) -> None:
        """The record first, then the script (a timer that fires in between finds nothing to do, or is skipped for
        want of its script), then the timer: nothing is left in /run at any step."""
        _deadman.unlink(paths.meta)
        _deadman.unlink(paths.script)
        self.sd.call(["systemctl", "stop", paths.timer])
        self.sd.call(["systemctl", "reset-failed", paths.timer, paths.rollback_service])
        for directory in (paths.state_dir, os.path.dirname(paths.state_dir)):
            try:
                _deadman.rmdir(directory)
            except OSError:
                pass

    def put_back(self, meta: Mapping[str, Any]) -> None:
        for item in meta["files"]:
            if item["before"] is None:
                _deadman.unlink(item["path"])
            else:
                write_file(item["path"], item["before"], int(item["mode_before"]))

    def restart_previous(self, unit: str, url_host: Tuple[str, int], meta: Mapping[str, Any]) -> Dict[str, Any]:
        """The previous files are back: the pin of what ran too (a forced deploy), the restart, then the pin goes."""
        _pin.put_back([meta])
        self.sd.daemon_reload()
        health = self.vehicle.restart_and_wait(unit, *url_host)
        if _pin.drop([meta]):
            self.sd.daemon_reload()
        return health

    def finish_interrupted(self, paths: DeployPaths) -> str | None:
        """A deploy that never finished left its record: its previous files go back first, production restarts."""
        text = read_text(paths.meta)
        if text is None:
            return None
        try:
            meta = json.loads(text)
            files = meta["files"]
            host, port = meta["host"], int(meta["port"])
        except (ValueError, KeyError, TypeError):
            self.disarm(paths)
            return f"removed an unreadable deploy record {paths.meta}"
        self.put_back(meta)
        try:
            self.restart_previous(paths.unit, (host, port), meta)
        except UnitOverrideError as exc:
            raise DeployError(f"PRODUCTION IS NOT HEALTHY: an interrupted deploy of {paths.unit} was undone (its "
                              f"previous files are back) but {exc}; the dead-man {paths.timer} stays armed",
                              **exc.details) from exc
        self.disarm(paths)
        return (f"an interrupted deploy of {paths.unit} was undone first: "
                f"{', '.join(item['path'] for item in files)} put back and the unit restarted on them")

    # ---------------------------------------------------------- the whole

    def deploy(self, unit: str, files: Sequence[Mapping[str, Any]], rollback_after: int) -> Dict[str, Any]:
        paths = deploy_paths(unit, self.vehicle.run_dir)
        info = self.vehicle.unit_info(unit)
        notes: List[str] = []
        if not self.check_mode and os.path.exists(paths.meta):
            self.refuse_override(unit)
            note = self.finish_interrupted(paths)
            if note:
                notes.append(note)
            info = self.vehicle.unit_info(unit)
        changes = self.changes(files)
        changed = [change for change in changes if change.changed]
        serving = info["LoadState"] == "loaded" and info["ActiveState"] == "active" and int(info.get("MainPID") or 0) > 0
        result: Dict[str, Any] = {
            "changed": bool(changed) or bool(notes), "unit": unit, "restarted": False, "serving": serving,
            "files": [change.path for change in changed], "notes": notes,
            "diff": [{"before_header": c.path, "after_header": c.path, "before": c.before or "", "after": c.content}
                     for c in changed],
        }
        if not changed or self.check_mode:
            return result
        if not serving:
            # No production to protect (a first deploy, a stopped or failed unit): the caller starts it and checks it.
            for change in changed:
                write_file(change.path, change.content, change.mode)
            self.sd.daemon_reload()
            return result
        self.refuse_override(unit)
        replaced = {c.path: c.content for c in changed}
        old_env = self.env_with(unit, {})
        host_before, port_before = endpoint_of(old_env, unit)
        new_env = self.env_with(unit, replaced)
        host, port = endpoint_of(new_env, unit)
        self.vehicle.require_port(unit, port, info, what="the redeployed unit")
        meta = {"unit": unit, "host": host_before, "port": port_before, "url": health_url(host_before, port_before),
                "health_timeout": self.vehicle.health_timeout,
                "files": [{"path": c.path, "before": c.before, "mode_before": c.mode_before} for c in changed]}
        pin = self.what_ran(unit, info)
        if pin:  # read before any change; only the way back writes it
            meta.update(pin=os.path.join(override_paths(unit, self.vehicle.run_dir).dropin_dir, _pin.DEPLOY_PIN_NAME),
                        pin_text=pin)
            result["kept_for_way_back"] = True
        self.arm(paths, meta, rollback_after)
        try:
            for change in changed:
                write_file(change.path, change.content, change.mode)
            self.sd.daemon_reload()
            health = self.vehicle.restart_and_wait(unit, host, port)
            env_files = {path for path, _dummy in environment_files(self.sd.show_all(unit, "EnvironmentFiles"))}
            wanted = {name: value for path in env_files if path in replaced
                      for name, value in read_env_values(replaced[path]).items()}
            if wanted and not config_matches_environ(EnvConfig(tuple(wanted.items()), ()),
                                                     self.vehicle.proc.environ(health["main_pid"])):
                raise DeployError(f"{unit}: pid {health['main_pid']} answers {health['url']} but its environment is not "
                                  "the new env file's (was the file changed meanwhile?)")
        except UnitOverrideError as exc:
            raise self.roll_back(paths, meta, exc) from exc
        self.disarm(paths)
        result.update(health, restarted=True)
        return result

    def what_ran(self, unit: str, info: Mapping[str, str]) -> str | None:
        """With keep_what_runs, past a change pending on disk: the pin of what runs (``_pin``), else None."""
        if not self.keep_what_runs:
            return None
        return _pin.needed(override_paths(unit, self.vehicle.run_dir), info, self.vehicle.run, self.vehicle.proc.proc,
                           self.vehicle.run_dir)

    def roll_back(self, paths: DeployPaths, meta: Mapping[str, Any], exc: UnitOverrideError) -> DeployError:
        """The new files did not serve: the previous ones back, the unit restarted on them and checked."""
        journal = list(exc.details.get("journal") or self.sd.journal(paths.unit, None, 20))
        tail = journal_tail(f"{paths.unit} (the new files)", journal)
        self.put_back(meta)
        try:
            health = self.restart_previous(paths.unit, (meta["host"], int(meta["port"])), meta)
        except UnitOverrideError as back:
            return DeployError(
                f"the redeploy of {paths.unit} did not serve: {exc}. Its previous files are back, but PRODUCTION IS NOT "
                f"HEALTHY on them: {back}. The dead-man {paths.timer} stays armed and restarts it once more.{tail}",
                rolled_back=True, healthy=False, journal=journal, production_journal=back.details.get("journal", []))
        self.disarm(paths)
        return DeployError(
            f"THE REDEPLOY OF {paths.unit} WAS ROLLED BACK: it did not serve ({exc}). Its previous files "
            f"({', '.join(item['path'] for item in meta['files'])}) are back and production is healthy on them (pid "
            f"{health['main_pid']} answers {health['url']}).{tail}", rolled_back=True, healthy=True, journal=journal)


def validate_files(files: Sequence[Mapping[str, Any]]) -> None:
    seen = set()
    for item in files:
        path = item.get("path") or ""
        if not os.path.isabs(path) or os.path.normpath(path) != path:
            raise SpecdecError(f"files: {path!r} must be an absolute, normalised path")
        if path in seen:
            raise SpecdecError(f"files: {path} is named twice")
        seen.add(path)
        if not os.path.isdir(os.path.dirname(path)):
            raise SpecdecError(f"files: the directory of {path} does not exist on the host; create it first")
        mode = item.get("mode")
        if not isinstance(mode, int) or not 0 <= mode <= 0o7777:
            raise SpecdecError(f"files: the mode of {path} ({mode!r}) must be an octal mode such as '0644'")
        if not isinstance(item.get("content"), str):
            raise SpecdecError(f"files: the content of {path} must be text")


def run_unit_deploy(params: Mapping[str, Any], *, run: Any, check_mode: bool, python: str) -> Dict[str, Any]:
    """Validates everything first (nothing changes for bad input), then deploys."""
    from ansible_collections.llmfleet.specdec.plugins.module_utils.systemd._systemd import rollback_interpreter, service_name

    unit = service_name(params["unit"])
    files = [dict(item, mode=_mode(item.get("mode"), item.get("path"))) for item in params.get("files") or []]
    if not files:
        raise SpecdecError("files: name at least one file (path, content, mode) of the unit")
    validate_files(files)
    health_timeout = int(params.get("health_timeout") or 120)
    port_timeout = int(params.get("port_timeout") or 30)
    rollback_after = int(params["rollback_after"])
    if health_timeout < 1 or port_timeout < 0:
        raise SpecdecError("health_timeout must be at least 1 s and port_timeout at least 0 s")
    if rollback_after <= 2 * health_timeout + 30:
        raise SpecdecError(
            f"rollback_after ({rollback_after} s) must be longer than twice health_timeout ({health_timeout} s) plus "
            "30 s: the dead-man must not fire while the unit starts on the new files, or on the previous ones after a "
            "failed deploy; raise rollback_after or lower health_timeout")
    if os.geteuid() != 0 and not check_mode:
        raise SpecdecError("unit_deploy writes a unit's files and drives systemd: run it as root (become: true)")
    if not check_mode:
        python = rollback_interpreter(python)
    vehicle = UnitOverride(run=run, check_mode=check_mode, python=python, health_timeout=health_timeout,
                           port_timeout=port_timeout)
    return UnitDeploy(vehicle, keep_what_runs=bool(params.get("keep_what_runs"))).deploy(unit, files, rollback_after)


def _mode(value: Any, path: Any) -> int:
    """'0644', 0o644 or 420 -> 420; anything else is an error naming the file."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    text = str(value or "").strip()
    if text and all(ch in "01234567" for ch in text) and len(text) <= 5:
        return int(text, 8)
    raise SpecdecError(f"files: the mode of {path} ({value!r}) must be an octal mode such as '0644'")
