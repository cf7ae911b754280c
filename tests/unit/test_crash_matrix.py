"""The crash matrix (issue 22): every host-changing path killed at every step boundary, three ways.

The harness is ``crash_matrix.py`` (on the model ``fakesystemd.py``); the table it renders is
docs/crash-matrix.md, which must equal this run. Regenerate it with ``python tests/unit/crash_matrix.py``.
"""
from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any, Iterator, List

import crash_matrix as cm
import pytest


@pytest.fixture(scope="module")
def rows() -> Iterator[List[Any]]:
    cm.install()
    with tempfile.TemporaryDirectory(dir=cm.scratch()) as tmp:
        yield cm.matrix(Path(tmp))


def test_every_point_of_every_path_ends_with_production_and_nothing_left(rows: List[Any]) -> None:
    known = {path.name for path in cm.PATHS if path.finding}  # pinned by their own test below
    failing = [f"{name} / {point} / {column}: {cell.problems}"
               for name, point, cells in rows for column, cell in cells.items() if cell.problems and name not in known]
    assert not failing, "\n".join(failing)
    assert {name for name, _point, _cells in rows} == {path.name for path in cm.PATHS}
    # every path has points before its steps, not only its end
    for path in cm.PATHS:
        if path.name == AB_THEN_BUILD or path in cm.START_STATES:
            continue  # refused before its first change to the unit: that is the point (tests below)
        assert sum(1 for name, _p, _c in rows if name == path.name) >= 3, path.name


def test_the_host_alone_restores_what_a_killed_module_left(rows: List[Any]) -> None:
    """The decisive column: after a SIGKILL, production comes back by the dead-man or the restart job, or nothing
    had changed yet; never "the module" (it is dead)."""
    for name, point, cells in rows:
        if point.startswith("before"):
            assert not cells["module SIGKILL"].outcome.startswith("the module"), (name, point)
    outcomes = {cells["module SIGKILL"].outcome for _n, _p, cells in rows}
    assert {"dead-man timer", "nothing changed"} <= outcomes
    assert any(o.startswith("restart job") for o in outcomes)


def test_the_re_arm_keeps_a_timer_armed_at_every_step(rows: List[Any]) -> None:
    switch = [(point, cells) for name, point, cells in rows if name == "A/B candidate switch, from another candidate"]
    points = [point for point, _cells in switch]
    assert "before systemctl stop specdec-rollback-llama-server.timer" in points
    assert points.index("before systemd-run specdec-rearm-llama-server.timer") < points.index(
        "before systemctl stop specdec-rollback-llama-server.timer") < points.index(
        "before systemctl stop specdec-rearm-llama-server.timer")


def _cells(rows: List[Any], name: str) -> dict:
    return {point: cells for path, point, cells in rows if path == name}


VEHICLE_PLAYS = [p.name for p in cm.PLAYS if p.name.startswith(("promote.yml (lock", "deploy: redeploy of a changed env"))]


@pytest.mark.parametrize("path", VEHICLE_PLAYS)
def test_a_dead_controller_leaves_the_previous_config_before_the_commit_and_the_verified_one_after(
        rows: List[Any], path: str) -> None:
    cells = _cells(rows, path)
    before_commit = cells["before copy: commit the env file"]["controller killed"]
    after_commit = cells["before unit_override state=absent"]["controller killed"]
    assert (before_commit.outcome, before_commit.ends_on) == ("dead-man timer", 0)
    assert (after_commit.outcome, after_commit.ends_on) == ("dead-man timer", 1)
    assert cells["after the last step"]["module SIGKILL"].ends_on == 1


@pytest.mark.parametrize("path", [p.name for p in cm.PLAYS if p.expect_failure])
def test_a_change_that_cannot_start_never_serves_and_never_waits_on_disk(rows: List[Any], path: str) -> None:
    """Whatever the point and the fault: the previous config at the end (the checks of the run assert that the files
    on disk, the launcher, 'current' and the build record agree with what runs)."""
    for point, cells in _cells(rows, path).items():
        for column, cell in cells.items():
            assert cell.ends_on == 0 and not cell.problems, (point, column)


def test_a_redeployed_unit_file_is_put_back_by_the_host(rows: List[Any]) -> None:
    cells = _cells(rows, next(p.name for p in cm.PLAYS if p.name.startswith("deploy: redeploy of a changed unit file")))
    assert cells["before systemctl restart llama-server"]["module SIGKILL"].outcome == "the deploy's dead-man timer"
    assert cells["before systemctl restart llama-server"]["module SIGKILL"].ends_on == 0
    # killed after health, before its record went: the host still puts the previous files back (a verified config)
    assert cells["before remove deploy.json"]["module SIGKILL"].ends_on == 0
    # once the record is gone the new files stay: the timer finds nothing to do, or no script and is skipped
    assert cells["before remove rollback.py"]["module SIGKILL"].ends_on == 1
    assert cells["before systemctl stop specdec-deploy-rollback-llama-server.timer"]["module SIGKILL"].ends_on == 1


def test_a_build_switch_is_undone_by_the_host(rows: List[Any]) -> None:
    cells = _cells(rows, "build activation (canary, then the switch)")
    assert cells["before point current at new-cpu"]["module SIGKILL"].outcome == "the build's dead-man timer"
    assert cells["before systemctl restart llama-server"]["module SIGKILL"].outcome == "the build's dead-man timer"


SENTINEL_AT_CANARY = "build activation judged by the sentinel at the canary (the promoted config), then the switch"
SENTINEL_REFUSES = "build activation refused by the sentinel at the canary (nothing changes)"
SPEED_AFTER = "build activation with a CPU canary: its speed measured after the switch under the dead-man"
SLOWER_AFTER = "build activation slower after the switch (the switch is undone)"


def test_the_sentinels_steps_are_points_of_the_build_switch(rows: List[Any]) -> None:
    """Issue 47: the module dies while the sentinel judges the canary (nothing changed: 'current', the record and the
    unit as they were, the canary ended by its own timers), or while it measures the promoted config's speed on the
    unit after the switch (the build's dead-man, armed for the longer wait, puts the old build back)."""
    at_canary = "before " + cm.AT_THE_CANARY
    after = "before " + cm.AFTER_THE_SWITCH
    for name in (SENTINEL_AT_CANARY, SENTINEL_REFUSES, SPEED_AFTER, SLOWER_AFTER):
        cells = _cells(rows, name)
        assert cells[at_canary]["module SIGKILL"].outcome == "nothing changed", name
        assert cells[at_canary]["connection dropped"].outcome == "nothing changed", name
        assert (after in cells) == (name in (SPEED_AFTER, SLOWER_AFTER)), name
    for name in (SPEED_AFTER, SLOWER_AFTER):
        cut = _cells(rows, name)[after]
        assert cut["module SIGKILL"].outcome == "restart job; the build's dead-man timer puts the previous config back"
        assert not any(cell.problems for cell in cut.values())
    # refused at the canary: no dead-man was ever armed, nothing to put back
    assert not [point for point in _cells(rows, SENTINEL_REFUSES) if "build-rollback" in point]
    assert all(cell.outcome == "the module (candidate failed, production restored)"
               for cell in _cells(rows, SENTINEL_REFUSES)["after the last step"].values())


def test_the_units_guard_outlives_the_longer_dead_man_of_the_speed_after_the_switch(tmp_path: Path) -> None:
    """Killed while it measures speed after the switch, the activation leaves a dead-man that waits rollback_after +
    sentinel_timeout: the unit's host-wide guard must last that long too, or an A/B takes the unit and the dead-man
    restarts it under the A/B (the guard once expired after rollback_after + 2 health timeouts + 60 s: 400 s here,
    against the dead-man's 900)."""
    cm.install()
    path = next(p for p in cm.PATHS if p.name == SPEED_AFTER)
    host = cm.Host(tmp_path, **path.host)
    try:
        path.setup(host)
        host.faults = cm._KillAtLabel(cm.AFTER_THE_SWITCH)
        with pytest.raises(cm.Killed):
            path.operation(host)
        host.faults = cm.Faults()
        meta = cm.act.build_paths(str(host.root / cm.BUILD_ROOT / "current"), str(host.fake.run_dir)).meta
        while Path(meta).exists():
            with pytest.raises(cm.hs.LockHeldError):
                host.lock("ab-2")
            host.fake.advance(30)
        assert os.readlink(host.root / cm.BUILD_ROOT / "current") == "old-cpu"
    finally:
        host.close()


def test_the_table_in_the_docs_is_this_run(rows: List[Any]) -> None:
    doc = cm.DOC.read_text(encoding="utf-8")
    assert doc == cm.HEADER + cm.render(rows), "docs/crash-matrix.md is stale: run python tests/unit/crash_matrix.py"


AB_THEN_BUILD = next(p.name for p in cm.PLAYS if p.name.startswith("A/B x build"))
BUILD_THEN_AB = next(p.name for p in cm.PLAYS if p.name.startswith("build x A/B"))


def test_a_build_switch_under_a_live_ab_is_refused_before_its_first_step(rows: List[Any]) -> None:
    cells = _cells(rows, AB_THEN_BUILD)
    # nothing but its own state directory in /run is made: no canary, no dead-man, no restart, no link moved
    assert [p for p in cells if not p.startswith("before mkdir ")] == ["after the last step"]
    assert all(cell.outcome.startswith("the module (candidate failed") and not cell.problems
               for cell in cells["after the last step"].values())


def test_an_ab_that_starts_at_any_cut_of_a_build_switch_is_kept_off_while_it_is_pending(rows: List[Any]) -> None:
    cells = _cells(rows, BUILD_THEN_AB)
    build = _cells(rows, "build activation (canary, then the switch)")
    assert list(cells) == list(build)  # every step boundary of the switch, the A/B tried at each
    assert cells["before systemctl restart llama-server"]["module SIGKILL"].outcome == "the build's dead-man timer"
    assert not [point for point, by in cells.items() for cell in by.values() if cell.problems]


def test_a_cut_while_undoing_an_interrupted_switch_leaves_its_dead_man_to_finish(rows: List[Any]) -> None:
    name = next(p.name for p in cm.PLAYS if "starting from an interrupted one" in p.name)
    path_rows = [(point, cells) for path, point, cells in rows if path == name]  # a label can come twice
    points = [point for point, _cells in path_rows]
    # the undo: 'current' back, the record back, the restart; the dead-man stays armed until it answered health
    undo = path_rows[:points.index("before remove activation.json")]
    assert undo[0][0] == "before point current at old-cpu"
    assert "before systemctl restart llama-server" in [point for point, _cells in undo]
    for point, cells in undo:
        assert cells["module SIGKILL"].outcome == "the build's dead-man timer", point


@pytest.mark.parametrize(("second", "first"), [
    ("A/B x A/B: a second run at each cut of a candidate switch", "A/B candidate switch, from production"),
    ("A/B x A/B: a second run at each cut of a baseline slot", "baseline slot after a candidate (absent restart=true)"),
])
def test_a_second_ab_never_gets_the_unit_at_a_cut_of_the_first(rows: List[Any], second: str, first: str) -> None:
    name = next(p.name for p in cm.PATHS if p.name.startswith(second))
    ours = [point for path, point, _c in rows if path == name]
    assert ours and ours == [point for path, point, _c in rows if path == first]  # every cut of the first run
    assert not [point for path, point, cells in rows if path == name for c in cells.values() if c.problems]


@pytest.mark.parametrize(("second", "first"), [
    ("A/B x promote, A/B x deploy: each at every cut of a candidate switch", "A/B candidate switch, from production"),
    ("A/B x promote, A/B x deploy: each at every cut of a baseline slot",
     "baseline slot after a candidate (absent restart=true)"),
])
def test_a_play_that_starts_at_any_cut_of_another_never_gets_the_unit(rows: List[Any], second: str, first: str) -> None:
    name = next(p.name for p in cm.PATHS if p.name.startswith(second))
    first_name = next(p.name for p in cm.PATHS if p.name.startswith(first))
    ours = [point for path, point, _c in rows if path == name]
    assert ours and ours == [point for path, point, _c in rows if path == first_name]  # every cut of the first play
    assert not [point for path, point, cells in rows if path == name for c in cells.values() if c.problems]


@pytest.mark.parametrize("first", ["promote.yml (lock, override, commit", "deploy: redeploy of a changed unit file"])
def test_an_ab_at_any_cut_of_promote_or_a_redeploy_never_gets_the_unit(rows: List[Any], first: str) -> None:
    """promote x A/B, deploy x A/B, and a deploy after either: the rows of these plays carry an A/B and then a deploy
    that start at each of their cuts (each cut is the start state of an interrupted play)."""
    path = next(p for p in cm.PLAYS if p.name.startswith(first))
    assert " x deploy: an A/B and a deploy at every cut" in path.name and path.host == cm._REAL
    cells = _cells(rows, path.name)
    assert len(cells) >= 20 and not [point for point, by in cells.items() for c in by.values() if c.problems]


def test_the_second_plays_see_a_unit_left_unguarded(tmp_path: Path) -> None:
    """What the interleaved rows rely on can fail: with no lock held, an override live keeps promote and deploy off
    (require_unit_free.yml) but not an A/B, whose start takes a free lock: that is reported."""
    cm.install()
    host = cm.Host(tmp_path, **cm._REAL)
    try:
        host.manager().present(cm.UNIT, cm._config(cm.CANDIDATE_A), cm.ROLLBACK_AFTER)  # no lock taken
        before = cm._snapshot(host)
        assert cm._promote_and_deploy(host) == []  # refused: the override is live
        assert cm._snapshot(host) == before
        problems = cm._ab_start(host)
        assert len(problems) == 1 and "override.env" in problems[0] and "specdec-rollback-llama-server" in problems[0]
        with pytest.raises(cm.RefusedError, match="is busy: held by"):  # the A/B's lock taken meanwhile: promote is told who
            host.lock("run-1")
            cm._require_unit_free(host)
    finally:
        host.close()


def test_a_deploy_after_an_interrupted_redeploy_is_kept_off_until_its_dead_man_put_the_files_back(
        tmp_path: Path) -> None:
    """unit_deploy killed at its restart (the new files written, its dead-man armed), its lock expired: a second
    deploy is refused while that dead-man waits, and goes ahead once it put the previous files back."""
    cm.install()
    host = cm.Host(tmp_path, **cm._REAL)
    try:
        cm._with_launcher(host)
        host.lock("deploy-1", expires_after=30)
        host.faults = cm._KillAtLabel("systemctl restart")
        with pytest.raises(cm.Killed):
            cm.UnitDeploy(host.manager()).deploy(cm.UNIT, [{"path": str(tmp_path / "launcher"), "content": "v2\n",
                                                            "mode": 0o755}], cm.ROLLBACK_AFTER)
        host.faults = cm.Faults()
        host.fake.advance(31)  # the lock's own expiry is past; the deploy's dead-man still waits
        problems = cm._deploy_start(host)
        assert problems == [] and cm._lock_file(host).exists()
        with pytest.raises(cm.RefusedError):
            cm._require_unit_free(host)
        host.fake.advance(cm.ROLLBACK_AFTER)  # the dead-man puts the previous launcher back
        assert (tmp_path / "launcher").read_text() == "v1\n" and not host.fake.armed()
        cm._require_unit_free(host)  # free now: the stale lock is taken over, nothing is pending
        assert cm._deploy_start(host) == []
    finally:
        host.close()


def test_a_promote_goes_ahead_on_a_free_unit_and_the_check_says_so(tmp_path: Path) -> None:
    cm.install()
    host = cm.Host(tmp_path, **cm._REAL)
    try:
        problems = cm._promote_and_deploy(host)
        assert problems[0] == "promote.yml went ahead at the cut"
    finally:
        host.close()


REFUSED_PENDING = [p.name for p in cm.START_STATES if "refused before its first change" in p.name]
FORCED_AB = next(p.name for p in cm.START_STATES if "an A/B after a hand edit, specdec_force" in p.name)


@pytest.mark.parametrize("path", REFUSED_PENDING)
def test_a_pending_change_on_disk_is_refused_before_the_first_change(rows: List[Any], path: str) -> None:
    """A/B, promote, deploy and build activation after a hand edit of the env file: the start-from-running check
    refuses, production keeps running what ran, and the operator's edit stays on disk as it was."""
    cells = _cells(rows, path)
    assert list(cells) == ["before serving_unit_info start_from_running", "after the last step"]
    assert {cell.outcome for cell in cells["after the last step"].values()} == {"refused, nothing changed"}
    assert not [point for point, by in cells.items() for cell in by.values() if cell.problems or cell.ends_on != 0]


FORCED_BUILDS = [p.name for p in cm.START_STATES if "build activation" in p.name and "specdec_force" in p.name]


@pytest.mark.parametrize("path", FORCED_BUILDS)
def test_a_forced_build_switch_keeps_what_ran_for_the_new_build_and_for_its_undo(rows: List[Any], path: str) -> None:
    """specdec_force=true past a hand edit that cannot start, then a build switch (llamacpp_activate
    keep_what_runs): the units' environment as it ran is kept before the switch, so the new build starts with it,
    and so does the previous one after a failed switch (the second path), by the module, its dead-man or an
    interrupted switch's undo. Every cell ends with production serving what ran, nothing left, the edit pending."""
    path_rows = [(point, cells) for name, point, cells in rows if name == path]
    points = [point for point, _cells in path_rows]
    assert "before write zy-llmfleet-specdec-build-ran.conf" in points
    assert "before remove zy-llmfleet-specdec-build-ran.conf" in points
    assert not [(point, column, cell.problems) for point, cells in path_rows for column, cell in cells.items()
                if cell.problems]
    assert any(cells["module SIGKILL"].outcome == "the build's dead-man timer" for _point, cells in path_rows)


def test_a_forced_ab_restarts_what_ran_on_every_way_back_and_leaves_the_pending_change_pending(rows: List[Any]) -> None:
    """specdec_force=true past a hand edit that cannot start: the A/B (a candidate, the baseline's fresh start, a
    second candidate, the restore) keeps what ran as its way back (unit_override keep_what_runs). At every cut, by
    the dead-man alone, by rollback.yml or by the play: production serves what ran, nothing of ours is left, and the
    operator's edit is still on disk, pending as before the play (the matrix's end check)."""
    path_rows = [(point, cells) for name, point, cells in rows if name == FORCED_AB]
    points = [point for point, _cells in path_rows]
    assert points.count("before write zy-llmfleet-specdec-ran.conf") == 2  # the first candidate, then the baseline
    assert points.count("before remove zy-llmfleet-specdec-ran.conf") >= 2  # once production answered on it
    assert "before unit_override state=absent restart=true" in points
    assert not [(point, column, cell.problems) for point, cells in path_rows for column, cell in cells.items()
                if cell.problems]
    # the dead-man's script alone (a module killed after the pin was armed) restarts what ran
    assert any(cells["module SIGKILL"].outcome == "dead-man timer" for point, cells in path_rows
               if point == "before write zy-llmfleet-specdec-ran.conf")


WHOLE_AB = next(p.name for p in cm.WHOLE_PLAYS)


def test_the_whole_ab_play_is_cut_at_each_task_and_the_host_alone_brings_production_back(rows: List[Any]) -> None:
    cells = _cells(rows, WHOLE_AB)
    slots = [f"{slot}: {task}" for slot, config in cm.SCHEDULE for task in (
        "unit_override state=absent restart=true" if config is None else "unit_override state=present",
        "ab_lock state=present (renewal in the slot)", "spec_bench", "copy: the partial run",
        "ab_lock state=present (renewal after the slot)")]
    assert list(cells) == ["before " + task for task in [
        "serving_unit_info start_from_running", "ab_lock state=present (take)", "file: the run's folder", *slots,
        "ab_lock state=query (still this run's?)", "unit_override state=absent (restore)",
        "ab_lock state=absent (release)", "copy: the report and the history"]] + ["after the last step"]
    assert not [point for point, by in cells.items() for cell in by.values() if cell.problems]
    # a candidate serves: its dead-man brings production back; the baseline serves: production already, the lock expires
    assert cells["before ngram: spec_bench"]["module SIGKILL"].outcome == "dead-man timer"
    assert cells["before baseline: spec_bench"]["controller killed"].outcome == "done before the cut; the lock expires"
    assert cells["before copy: the report and the history"]["controller killed"].outcome == \
        "done before the cut; the lock released"


def test_a_local_controller_killed_during_a_redeploy_keeps_its_lock_while_the_deploys_dead_man_waits(
        tmp_path: Path) -> None:
    """A controller on the host itself (ansible_connection=local: the same boot and pid namespace) dies with
    unit_deploy before its restart: the launcher is written, the deploy's dead-man waits to put it back. Its lock
    must not count as stale while that timer waits (an A/B would switch candidates under it), and it does once the
    timer has put the previous files back."""
    cm.install()
    host = cm.Host(tmp_path, unit_files=True)
    try:
        cm._with_launcher(host)
        proc = host.fake.proc
        (proc / "sys" / "kernel" / "random").mkdir(parents=True)
        (proc / "sys" / "kernel" / "random" / "boot_id").write_text("boot-1\n")
        (proc / "self" / "ns").mkdir(parents=True)
        (proc / "self" / "ns" / "pid").symlink_to("pid:[4026531836]")
        controller = proc / "4242"
        controller.mkdir()
        (controller / "stat").write_text("4242 (ansible-playbook) S 1 " + " ".join(["0"] * 17) + " 777 0 0\n")
        owner = {"run_id": "deploy-1", "controller": "ctl", "pid": 4242, "boot_id": "boot-1",
                 "pid_ns": "pid:[4026531836]", "start_ticks": 777}

        def lock(own: dict) -> dict:
            return cm.hs.acquire({"unit": cm.UNIT, "state_dir": host.state_dir, "expires_after": cm.LOCK_EXPIRES,
                                  "wait": 0, "poll": 1, "owner": own, "state_mode": 0o700}, run=host.fake.run,
                                 check_mode=False, now=host.fake.now, sleep=host.fake.advance, proc=str(proc))

        lock(owner)
        host.faults = cm._KillAtLabel("systemctl restart")
        with pytest.raises(cm.Killed):
            cm.UnitDeploy(host.manager()).deploy(cm.UNIT, [{"path": str(tmp_path / "launcher"), "content": "v2\n",
                                                            "mode": 0o755}], cm.ROLLBACK_AFTER)
        host.faults = cm.Faults()
        (controller / "stat").unlink()
        controller.rmdir()  # the controller is gone with the module
        assert host.fake.armed() == ["specdec-deploy-rollback-llama-server"]
        free = cm.hs.query({"unit": cm.UNIT, "state_dir": host.state_dir}, run=host.fake.run, now=host.fake.now,
                           proc=str(proc), run_dir=str(host.fake.run_dir))
        assert free["held"] and free["override"] == ["armed dead-man timer specdec-deploy-rollback-llama-server.timer"]
        with pytest.raises(cm.hs.LockHeldError, match="locked by run deploy-1"):
            lock({"run_id": "ab-2", "controller": "ctl2"})
        host.fake.advance(cm.ROLLBACK_AFTER + 1)  # the deploy's dead-man puts the previous launcher back
        assert (tmp_path / "launcher").read_text() == "v1\n" and not host.fake.armed()
        assert "controller process 4242 is gone" in lock({"run_id": "ab-2", "controller": "ctl2"})["taken_over"]["why"]
    finally:
        host.close()


FORCED_VEHICLE = [p.name for p in cm.START_STATES if p.name.startswith((
    "disk differs from what runs: promote.yml after a hand edit that", "disk differs from what runs: deploy.yml (a "
    "changed env file"))
    and "specdec_force=true" in p.name]
FORCED_UNIT_FILE = next(p.name for p in cm.START_STATES if "(a changed unit file and launcher)" in p.name)


def test_a_forced_promotion_or_redeploy_tries_the_pending_change_and_falls_back_to_what_ran(rows: List[Any]) -> None:
    """specdec_force=true past a hand edit: promote.yml and an env file's redeploy try the pending change with their
    own (unit_override try_pending: no pin in place during the trial), and every way back before production answered
    on the committed file (the trial's own restore, the dead-man, rollback.yml, the rescue) restarts what ran."""
    assert len(FORCED_VEHICLE) == 3
    for name in FORCED_VEHICLE:
        path_rows = [(point, cells) for path, point, cells in rows if path == name]
        assert not [(point, column, cell.problems) for point, cells in path_rows for column, cell in cells.items()
                    if cell.problems], name
        # the dead-man alone brings back what ran while the trial serves (a module killed mid-switch)
        assert any(cells["module SIGKILL"].outcome == "dead-man timer" for _point, cells in path_rows), name
    broken = _cells(rows, FORCED_VEHICLE[0])
    # the trial of the edit that cannot start fails; its own restore puts what ran back as the pin, then removes it
    assert "before write zy-llmfleet-specdec-ran.conf" in broken and "before copy: commit the env file" not in broken
    assert broken["after the last step"]["module SIGKILL"].outcome == "the play's rescue"
    good = _cells(rows, FORCED_VEHICLE[1])
    assert "before write zy-llmfleet-specdec-ran.conf" not in good  # the commit's restart is on the disk
    assert good["after the last step"]["module SIGKILL"].ends_on == 1  # the edit and the winner, committed


def test_try_pending_trial_runs_on_the_disk_and_keeps_what_ran_only_in_the_dead_mans_script(tmp_path: Path) -> None:
    cm.install()
    host = cm.Host(tmp_path, real_unit=True)
    try:
        cm._hand_edited_ok(host)
        ran = host.fake.serving(cm.UNIT)
        manager = host.manager()
        manager.keep_what_runs = manager.try_pending = True
        result = manager.present(cm.UNIT, cm._config(cm.PROMOTED), cm.ROLLBACK_AFTER)
        paths = cm.uo.override_paths(cm.UNIT, str(host.fake.run_dir))
        assert result["kept_for_way_back"] and "pinned" not in result and not Path(paths.pin).exists()
        assert host.fake.serving(cm.UNIT) == cm._with(host, cm.HAND_EDIT_OK, cm.PROMOTED)  # the edit and the winner
        kept = cm.uo._pin.current(paths)  # what ran, from the dead-man's script: without the edit
        assert kept and "Environment=LLAMA_ARG_MODEL=/m/target.gguf" in kept and "Environment=LLAMA_ARG_CTX_SIZE" not in kept
        host.fake.advance(cm.ROLLBACK_AFTER + 1)  # the controller is gone: the dead-man restarts what ran
        assert host.fake.serving(cm.UNIT) == ran and not Path(paths.pin).exists()
        assert host.fake.env_on_disk(cm.UNIT) != ran  # the operator's edit stays pending on disk
    finally:
        host.close()


def test_try_pending_goes_with_keep_what_runs_and_one_unit() -> None:
    from ansible_collections.llmfleet.specdec.plugins.module_utils.common._errors import SpecdecError
    from ansible_collections.llmfleet.specdec.plugins.module_utils.systemd._unit_override import run_unit_override
    for params in ({"unit": "llama-server", "state": "present", "env": {"A": "1"}, "try_pending": True},
                   {"unit": "*", "state": "absent", "try_pending": True},
                   {"unit": "llama-server", "state": "confirmed", "try_pending": True}):
        with pytest.raises(SpecdecError, match="try_pending=true goes with"):
            run_unit_override(params, run=lambda argv: (0, "", ""), check_mode=True, python="/usr/bin/python3")


def test_a_hand_written_units_promotion_commits_in_an_order_that_always_starts(rows: List[Any]) -> None:
    """Form exec (promote_exec.yml): at every cut of a first promotion, of a re-promotion over an earlier one and of
    one whose command line cannot start, production runs its own or the verified command line with its variables,
    and what a restart would start is the same (the earlier env file goes only after production answered)."""
    names = [p.name for p in cm.EXEC_PLAYS]
    assert len(names) == 6
    for name in names:
        cells = _cells(rows, name)
        assert len(cells) >= 20, name
        assert not [(point, c.problems) for point, by in cells.items() for c in by.values() if c.problems], name
    repromote = _cells(rows, names[1])
    points = list(repromote)
    assert points.index("before copy: commit the winner's variables") < points.index(
        "before copy: commit the promoted drop-in") < points.index("before file: remove earlier promotions' env files")
    # the whole play commits (a restart on the promoted drop-in that adds an env file passes the check of what runs)
    assert repromote["after the last step"]["module SIGKILL"].outcome == "the play"
    assert repromote["after the last step"]["module SIGKILL"].ends_on == 1
    assert _cells(rows, names[2])["after the last step"]["module SIGKILL"].outcome == "the play's rescue"
    # a wrapper unit's promotion (its variables alone): the same order, the same ends
    wrapper = _cells(rows, names[3])
    assert list(wrapper).index("before copy: commit the winner's variables") < list(wrapper).index(
        "before copy: commit the promoted drop-in")
    assert wrapper["after the last step"]["module SIGKILL"].outcome == "the play"
    assert _cells(rows, names[4])["after the last step"]["module SIGKILL"].outcome == "the play's rescue"
    # over an earlier promotion under the late name (zx-): the usual name is written, then the late one removed
    late = list(_cells(rows, names[5]))
    assert late.index("before copy: commit the promoted drop-in") < late.index(
        "before command: mv the promoted drop-in to its name") < late.index(
        "before unit_override state=absent restart=true")
    assert _cells(rows, names[5])["after the last step"]["module SIGKILL"].outcome == "the play"


def test_the_model_refuses_a_unit_whose_mandatory_env_file_is_gone(tmp_path: Path) -> None:
    """What the form exec rows rely on can fail: a promoted drop-in naming an env file that was removed."""
    cm.install()
    host = cm.Host(tmp_path, **cm._REAL)
    try:
        cm._earlier_promotion(host)
        promo = cm._promotion(host, cm.EARLIER_FLAGS, cm.EARLIER_VARS, "run-0")
        Path(promo["env_file"]).unlink()
        host.fake.run(["systemctl", "restart", cm.UNIT])
        assert host.fake.serving(cm.UNIT) is None
        assert cm._exec_consistent(host) == []  # nothing runs: the end check's "serves neither" names it
    finally:
        host.close()


def test_a_forced_unit_file_redeploy_restarts_what_ran_on_every_way_back(rows: List[Any]) -> None:
    """unit_deploy keep_what_runs past a hand edit that cannot start: the new files (which carry the edit) fail; the
    module's rollback, its dead-man and an interrupted deploy's undo put the previous files back with the pin of what
    ran, restart on it and remove it; the edit stays pending on disk (the matrix's end check)."""
    cells = _cells(rows, FORCED_UNIT_FILE)
    assert not [(point, c.problems) for point, by in cells.items() for c in by.values() if c.problems]
    points = list(cells)
    assert points.index("before systemctl restart llama-server") < points.index(
        "before write zy-llmfleet-specdec-deploy-ran.conf") < points.index("before remove zy-llmfleet-specdec-deploy-ran.conf")
    # the dead-man's script alone puts the pin back (a module killed while it serves the new files)
    assert cells["before write zy-llmfleet-specdec-deploy-ran.conf"]["module SIGKILL"].outcome == \
        "the deploy's dead-man timer"
    assert cells["after the last step"]["module SIGKILL"].outcome == "the play's rescue"
