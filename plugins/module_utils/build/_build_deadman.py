# Copyright: (c) 2026, llmfleet.specdec contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# Private to the collection: the dead-man of a llama.cpp build switch (its standalone script and its timer).
"""The dead-man of ``llamacpp_activate``'s build switch: the self-contained script the host runs on its own and the
``systemd-run`` command of its transient timer. ``paths`` is ``_activate.BuildPaths``."""
from __future__ import annotations

from typing import Any, List

from ansible_collections.llmfleet.specdec.plugins.module_utils.systemd._systemd import (
    SCRIPT_NO_REDIRECT,
    SCRIPT_PUT_BACK,
    calendar_spec,
)

# ------------------------------------------------------------------ the dead-man script

# Standalone under systemd with the controller and this collection gone (no imports from the collection).
_ROLLBACK_SCRIPT = r'''#!{python}
# Written by llmfleet.specdec.llamacpp_activate: the dead-man of a build switch (run by {timer}).
# Points {current} back at the previous build, puts the build record back and restarts the units that served
# from it, unless the activation finished first (it removes {meta} before it disarms this timer).
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
    print("llmfleet.specdec build rollback: " + message, flush=True)


def main():
    try:
        with open(META) as handle:
            meta = json.load(handle)
    except FileNotFoundError:
        say("nothing to do: the activation finished")
        try:
            os.unlink(SCRIPT)
        except OSError:
            pass
        return 0
    current = meta["current"]
    now = os.readlink(current) if os.path.islink(current) else None
    if now == meta["new"]:
        tmp = current + ".rollback.tmp"
        if os.path.lexists(tmp):
            os.unlink(tmp)
        os.symlink(meta["previous"], tmp)
        os.rename(tmp, current)
        say("BUILD {{}} NOT CONFIRMED: 'current' points at {{}} again".format(meta["new"], meta["previous"]))
    facts = meta.get("facts_file")
    if facts:
        if meta.get("facts_before") is None:
            try:
                os.unlink(facts)
            except FileNotFoundError:
                pass
        else:
            put_back(facts, meta["facts_before"], 0o644)
    pinned = [unit for unit in meta["units"] if unit.get("pin_text")]
    for unit in pinned:  # a switch forced past a change pending on disk: what ran, kept as the way back
        if not os.path.exists(unit["pin"]):
            os.makedirs(os.path.dirname(unit["pin"]), mode=0o700, exist_ok=True)
            put_back(unit["pin"], unit["pin_text"], 0o600)
            say("put back " + unit["pin"] + " (what ran, kept as the way back)")
    if pinned:
        subprocess.call(["systemctl", "daemon-reload"])
    failed = []
    for unit in meta["units"]:
        subprocess.call(["systemctl", "reset-failed", unit["unit"]])
        if subprocess.call(["systemctl", "restart", unit["unit"]]) != 0:
            failed.append(unit["unit"])
    deadline = time.monotonic() + meta["health_timeout"]
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({{}}), NoRedirect())
    waiting = [unit for unit in meta["units"] if unit["unit"] not in failed]
    while waiting and time.monotonic() < deadline:
        for unit in list(waiting):
            try:
                with opener.open(unit["url"], timeout=2) as reply:
                    if reply.status == 200:
                        waiting.remove(unit)
                        say(unit["unit"] + " answers " + unit["url"] + " on " + meta["previous"])
            except Exception:
                pass
        if waiting:
            time.sleep(0.5)
    bad = failed + [unit["unit"] for unit in waiting]
    dropped = [unit["pin"] for unit in pinned if unit["unit"] not in bad and os.path.exists(unit["pin"])]
    for path in dropped:  # production answers on what ran: the pin goes, the change pending on disk stays pending
        os.unlink(path)
    if dropped:
        subprocess.call(["systemctl", "daemon-reload"])
        say("removed " + ", ".join(dropped) + " (what ran answers; the change pending on disk stays pending)")
    for path in (META, meta["script"]):
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
    if bad:
        say("PRODUCTION NOT HEALTHY: " + ", ".join(bad) + " did not come back on " + meta["previous"])
        for name in bad:
            subprocess.call(["journalctl", "-u", name, "-n", "30", "--no-pager", "-o", "cat"])
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
'''


def render_rollback_script(paths: Any, python: str) -> str:
    return _ROLLBACK_SCRIPT.format(python=python, timer=paths.timer, current=paths.current, meta=paths.meta,
                                   script=paths.script, no_redirect=SCRIPT_NO_REDIRECT, put_back=SCRIPT_PUT_BACK)


def timer_command(paths: Any, deadline_epoch: float, python: str, health_timeout: int) -> List[str]:
    """Armed like unit_override's dead-man: a wall-clock instant (a daemon-reload does not move it), skipped once
    its script is gone (so it can be armed before the script is written, and the script removed before it stops)."""
    return ["systemd-run", f"--unit={paths.rollback_unit}",
            f"--description=llmfleet.specdec dead-man of the build switch of {paths.current}",
            f"--on-calendar={calendar_spec(deadline_epoch)}", "--timer-property=AccuracySec=1s",
            "--property=Type=oneshot", f"--property=TimeoutStartSec={int(health_timeout) + 60}",
            f"--property=ConditionPathExists={paths.script}", python, paths.script]
