# Copyright: (c) 2026, llmfleet.specdec contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# Private to the collection: one unit's dead-man timer - armed, re-armed through a bridge, read and disarmed.
"""The dead-man of one unit, the part of the host that restores production when nobody else does.

The timer ``specdec-rollback-<unit stem>.timer`` runs the self-contained rollback script (``_systemd``) at a
wall-clock instant. Three rules keep it there whenever a unit may serve something other than production:

- **Armed before the first change.** ``arm`` starts the timer, then writes its script, before ``unit_override``
  writes a drop-in or restarts anything (a timer that fires without its script is skipped; a script without a
  timer would be left in /run).
- **Never a moment without a timer.** A changed candidate needs a fresh countdown, but a transient timer
  cannot be moved and its name cannot be reused while it exists. So a re-arm starts a second timer, the
  bridge ``specdec-rearm-<unit stem>.timer``, at the new deadline first, then stops and starts the rollback
  timer, and stops the bridge last. A module killed anywhere in between leaves at least one timer armed; one
  that fires after the other already restored production finds no script and is skipped
  (``ConditionPathExists=``), so nothing fails and nothing is left behind.
- **Disarmed last.** ``disarm`` is the restore's last step, after production answered health with its own
  config and every file was removed; a rollback that is running at that moment is waited for (bounded).

Not here: the script and the ``systemd-run`` line (``_systemd``), when to arm (``_unit_override``).
"""
from __future__ import annotations

import json
import math
import os
import tempfile
from typing import Any, Callable, Dict, Mapping, Optional, Sequence

from ansible_collections.llmfleet.specdec.plugins.module_utils.common._errors import SpecdecError
from ansible_collections.llmfleet.specdec.plugins.module_utils.systemd._procview import read_text
from ansible_collections.llmfleet.specdec.plugins.module_utils.systemd._systemd import (
    OverridePaths,
    Systemctl,
    render_rollback_script,
    timer_command,
)


def ensure_private_dir(path: str) -> None:
    if not os.path.isdir(path):
        os.makedirs(path, mode=0o700, exist_ok=True)
        os.chmod(path, 0o700)


def write_private(path: str, text: str, mode: int) -> None:
    """Atomically writes ``text`` with ``mode``: never a moment with other permissions or half a file."""
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix="." + os.path.basename(path) + ".")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fchmod(handle.fileno(), mode)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def unlink(path: str) -> bool:
    try:
        os.unlink(path)
        return True
    except FileNotFoundError:
        return False


def unlink_all(paths: Sequence[str]) -> None:
    for path in paths:
        unlink(path)


def rmdir(path: str) -> None:
    os.rmdir(path)


class DeadMan:
    """The dead-man timer (and its bridge) of the units ``UnitOverride`` changes."""

    def __init__(self, sd: Systemctl, *, python: str, health_timeout: int, wall: Callable[[], float],
                 clock: Callable[[], float], sleep: Callable[[float], None]) -> None:
        self.sd = sd
        self.python = python
        self.health_timeout = health_timeout
        self.wall = wall
        self.clock = clock
        self.sleep = sleep
        # Why no interpreter is safe for root's timer (absent learns it late: it arms only when it must).
        self.python_problem: str | None = None

    # ---------------------------------------------------------- reading

    def _units(self, base: str) -> Dict[str, Any]:
        timer = self.sd.show(base + ".timer", ["LoadState", "ActiveState", "SubState"])
        service = self.sd.show(base + ".service", ["LoadState", "ActiveState"])
        return {"armed": timer["ActiveState"] == "active" and timer["SubState"] == "waiting",
                "running": service["ActiveState"] in ("activating", "active", "deactivating"),
                "loaded": timer["LoadState"] == "loaded" or service["LoadState"] == "loaded"}

    def state(self, paths: OverridePaths) -> Dict[str, Any]:
        """``armed`` (the rollback timer or its bridge waits to fire), ``due_in`` (from the meta file),
        ``running`` (a rollback runs now), ``loaded`` (any of their units is still loaded)."""
        primary = self._units(paths.rollback_unit)
        bridge = self._units(paths.bridge_unit)
        armed = primary["armed"] or bridge["armed"]
        due_in = None
        meta_text = read_text(paths.meta)
        if armed and meta_text:
            try:
                due_in = max(0, math.ceil(float(json.loads(meta_text)["deadline"]) - self.wall()))
            except (ValueError, KeyError, TypeError):
                due_in = None
        return {"timer": paths.timer, "armed": armed, "due_in": due_in,
                "primary_armed": primary["armed"], "bridge_armed": bridge["armed"],
                "running": primary["running"] or bridge["running"],
                "loaded": primary["loaded"] or bridge["loaded"],
                "primary_loaded": primary["loaded"], "bridge_loaded": bridge["loaded"]}

    def wait_not_running(self, paths: OverridePaths) -> Dict[str, Any]:
        """Lets a rollback that runs right now finish (bounded by its own start timeout), then the state."""
        state = self.state(paths)
        deadline = self.clock() + self.health_timeout + 60
        while state["running"] and self.clock() < deadline:
            self.sleep(0.25)
            state = self.state(paths)
        return state

    # ---------------------------------------------------------- changing

    def _start(self, paths: OverridePaths, base: str, deadline: float) -> None:
        self.sd.must(timer_command(paths, deadline, self.python, self.health_timeout, unit_base=base))

    def _stop(self, base: str) -> None:
        self.sd.must(["systemctl", "stop", base + ".timer"])
        self.sd.call(["systemctl", "reset-failed", base + ".timer", base + ".service"])

    def _clear_spent(self, base: str, loaded: bool) -> None:
        """A spent timer or a failed rollback service keeps the name taken: unload it before reusing the name."""
        if loaded:
            self.sd.call(["systemctl", "reset-failed", base + ".timer", base + ".service"])

    def arm(self, paths: OverridePaths, seconds: int, production_url: str, pin: str | None = None) -> Dict[str, Any]:
        """Arms the rollback ``seconds`` from now; re-arms through the bridge when a timer is armed already.
        ``pin``: what ran (``_pin``), which the script puts back before its restart when it is gone."""
        if self.python_problem:
            raise SpecdecError(self.python_problem)
        state = self.wait_not_running(paths)
        script = render_rollback_script(paths, self.python, production_url, self.health_timeout, pin)
        armed_at = self.wall()
        deadline = math.ceil(armed_at + int(seconds))
        if state["primary_armed"]:
            write_private(paths.script, script, 0o700)  # the armed timer keeps a script to run at every moment
            if state["bridge_armed"] or state["bridge_loaded"]:
                self._stop(paths.bridge_unit)  # left by a re-arm that was cut short; the rollback timer covers
            self._start(paths, paths.bridge_unit, deadline)
            self._stop(paths.rollback_unit)
            self._start(paths, paths.rollback_unit, deadline)
            self._stop(paths.bridge_unit)
        else:
            # The timer before its script: a timer that fires without one is skipped, a script without a timer
            # would be left in /run.
            self._clear_spent(paths.rollback_unit, state["primary_loaded"])
            self._start(paths, paths.rollback_unit, deadline)
            if state["bridge_armed"] or state["bridge_loaded"]:
                self._stop(paths.bridge_unit)
            ensure_private_dir(os.path.dirname(paths.state_dir))
            ensure_private_dir(paths.state_dir)
            write_private(paths.script, script, 0o700)
        write_private(paths.meta, json.dumps({"unit": paths.unit, "seconds": int(seconds), "armed_at": armed_at,
                                              "deadline": deadline}) + "\n", 0o600)
        return {"timer": paths.timer, "armed": True, "due_in": int(seconds)}

    def disarm(self, paths: OverridePaths) -> Dict[str, Any]:
        """Stops both timers, lets a rollback that is running right now finish, unloads what is spent.

        ``was_armed``: a timer waited to fire; ``ran``: a rollback was running meanwhile (production was
        restarted by it, so the caller checks health again).
        """
        state = self.state(paths)
        for base, armed in ((paths.rollback_unit, state["primary_armed"]), (paths.bridge_unit, state["bridge_armed"])):
            if armed:
                self.sd.must(["systemctl", "stop", base + ".timer"])
        ran = state["running"] or self.state(paths)["running"]
        after = self.wait_not_running(paths)
        if after["loaded"] or state["loaded"]:
            for base in paths.dead_man_units:
                self.sd.call(["systemctl", "reset-failed", base + ".timer", base + ".service"])
        return {"was_armed": bool(state["armed"]), "ran": bool(ran)}


# ------------------------------------------------------------------ sizing the dead-man from the plan

# How much longer than its estimate a slot's dead-man is: estimates of load and measurement are not promises.
ESTIMATE_MARGIN = 1.5


def plan_dead_man(configs: Sequence[str], baseline: str, estimates: Mapping[str, Any], rollback_after: int,
                  health_timeout: int, rollback_max: int, margin: float = ESTIMATE_MARGIN,
                  lock_estimates: Optional[Mapping[str, Any]] = None) -> Dict[str, Any]:
    """Each candidate's dead-man and the lock's expiry, from the plan, before anything changes.

    ``estimates``: config name -> seconds its slot is expected to take (server load plus measurement; measured
    or estimated by whoever plans the run). A candidate's dead-man is the larger of ``rollback_after`` and its
    estimate times ``margin``, so it cannot fire mid-measurement and have production's numbers recorded as the
    candidate's; one that would exceed ``rollback_max`` (how long the operator lets a candidate serve unattended)
    is refused. The lock expires one health timeout and a minute after the longest slot (the baseline's included),
    or after the longest of ``lock_estimates`` (each slot with the bench's busy re-sends) when that is longer, and
    the role renews it before every slot, so a live run never loses it, not even in a baseline slot (which has no
    dead-man: its expiry is all that keeps a waiting run out).
    """
    if health_timeout < 1 or rollback_after <= health_timeout:
        raise SpecdecError(f"rollback_after ({rollback_after} s) must be longer than health_timeout ({health_timeout} s): "
                           "the dead-man must not fire while a candidate may still be starting")
    if rollback_max < rollback_after:
        raise SpecdecError(f"rollback_max ({rollback_max} s) is shorter than rollback_after ({rollback_after} s); "
                           "raise it or lower rollback_after")
    unknown = sorted(set(estimates) - set(configs))
    if unknown:
        raise SpecdecError(f"slot estimates name configs the run does not have: {', '.join(unknown)}; "
                           f"its configs are {', '.join(configs)}")
    per_config: Dict[str, int] = {}
    longest = rollback_after
    problems = []
    for name in configs:
        raw = estimates.get(name)
        try:
            estimate = None if raw is None else float(raw)
        except (TypeError, ValueError):
            raise SpecdecError(f"the slot estimate of {name} ({raw!r}) is not a number of seconds") from None
        if estimate is not None and not 0 < estimate < 10 ** 7:
            raise SpecdecError(f"the slot estimate of {name} ({raw!r}) must be a positive number of seconds")
        need = math.ceil(estimate * margin) if estimate is not None else 0
        longest = max(longest, need)
        if name == baseline:
            continue  # production itself: no dead-man, but its slot counts for the lock
        if need > rollback_max:
            problems.append(f"{name} (expected {estimate:.0f} s of load and measurement, x{margin} = {need} s)")
        per_config[name] = max(rollback_after, need)
    if problems:
        raise SpecdecError(
            f"the dead-man of these configs would have to be longer than rollback_max ({rollback_max} s), the longest "
            f"a candidate may serve unattended: {'; '.join(problems)}. Raise spec_ab_rollback_max, or measure less per "
            "slot (spec_ab_prompts_per_shape, spec_ab_shapes, spec_ab_load_bursts); nothing was changed")
    lock_longest = longest
    for name, raw in (lock_estimates or {}).items():
        try:
            lock_longest = max(lock_longest, math.ceil(float(raw) * margin))
        except (TypeError, ValueError):
            raise SpecdecError(f"the lock estimate of {name} ({raw!r}) is not a number of seconds") from None
    return {"per_config": per_config, "longest": longest, "lock_longest": lock_longest,
            "lock_expires_after": lock_longest + health_timeout + 60, "margin": margin}
