"""The host's own A/B state: the per-unit lock (real files, real flock, real processes racing), safe names, history.

systemd's answer about the dead-man timer is the one thing injected (``run``); the Molecule scenarios
(molecule/ab, molecule/abfaults) take the same lock on a real systemd host.
"""
from __future__ import annotations

import json
import multiprocessing
import os
import stat
from pathlib import Path
from typing import Any, Dict, List

import pytest
from ansible.errors import AnsibleFilterError
from ansible.module_utils.testing import patch_module_args

from ansible_collections.llmfleet.specdec.plugins.module_utils.common._errors import SpecdecError
from ansible_collections.llmfleet.specdec.plugins.module_utils.state import _host_state as hs
from ansible_collections.llmfleet.specdec.plugins.modules import ab_lock
from ansible_collections.llmfleet.specdec.plugins.plugin_utils.steps import _steps_host_state as hs_filter

T0 = 1_800_000_000.0


def not_armed(argv: Any) -> tuple[int, str, str]:
    return 3, "inactive\n", ""


def armed(argv: Any) -> tuple[int, str, str]:
    assert list(argv) == ["systemctl", "is-active", "specdec-rollback-llama-server.timer",
                          "specdec-rearm-llama-server.timer", "specdec-deploy-rollback-llama-server.timer"]
    return 0, "active\ninactive\ninactive\n", ""


class Clock:
    def __init__(self, t: float = T0) -> None:
        self.t = t
        self.slept: List[float] = []

    def now(self) -> float:
        return self.t

    def sleep(self, s: float) -> None:
        self.slept.append(s)
        self.t += s


def params(tmp_path: Path, run_id: str, **kw: Any) -> Dict[str, Any]:
    p = {"unit": "llama-server", "state_dir": str(tmp_path / "state"), "expires_after": 1000, "wait": 0, "poll": 2,
         "owner": {"run_id": run_id, "controller": "ctl-a", "pid": 4242}, "state_mode": 0o750}
    p.update(kw)
    return p


def take(tmp_path: Path, run_id: str, clock: Clock | None = None, run: Any = not_armed, check: bool = False,
         proc: str = "/proc", **kw: Any) -> Dict[str, Any]:
    clock = clock or Clock()
    return hs.acquire(params(tmp_path, run_id, **kw), run=run, check_mode=check, now=clock.now, sleep=clock.sleep,
                      proc=proc)


def lock_file(tmp_path: Path) -> Path:
    return tmp_path / "state" / "locks" / "llama-server.json"


# ------------------------------------------------------------------ taking, refreshing, releasing


def test_a_free_lock_is_taken_with_its_owner_record_and_private_modes(tmp_path: Path) -> None:
    out = take(tmp_path, "20261130T100000Z")
    record = json.loads(lock_file(tmp_path).read_text())
    assert out["changed"] and out["taken_over"] is None
    assert record["run_id"] == "20261130T100000Z" and record["controller"] == "ctl-a" and record["pid"] == 4242
    assert record["started"] == "2027-01-15T08:00:00Z" and record["expires_epoch"] == int(T0) + 1000
    assert record["unit"] == "llama-server.service"
    assert stat.S_IMODE((tmp_path / "state").stat().st_mode) == 0o750
    assert stat.S_IMODE((tmp_path / "state" / "locks").stat().st_mode) == 0o700
    assert stat.S_IMODE(lock_file(tmp_path).stat().st_mode) == 0o600
    assert sorted(p.name for p in (tmp_path / "state" / "locks").iterdir()) == ["llama-server.guard", "llama-server.json"]


def test_the_same_run_refreshes_its_expiry_and_keeps_its_start(tmp_path: Path) -> None:
    clock = Clock()
    take(tmp_path, "run-1", clock)
    clock.t += 600
    out = take(tmp_path, "run-1", clock)
    record = json.loads(lock_file(tmp_path).read_text())
    assert out["refreshed"] and record["started"] == hs.iso(T0) and record["expires_epoch"] == int(T0) + 1600


def test_a_second_run_fails_naming_the_holder_and_its_start(tmp_path: Path) -> None:
    take(tmp_path, "run-1")
    with pytest.raises(hs.LockHeldError) as err:
        take(tmp_path, "run-2", Clock(T0 + 5), owner={"run_id": "run-2", "controller": "ctl-b", "pid": 7})
    msg = str(err.value)
    assert "locked by run run-1 from controller ctl-a (pid 4242), started 2027-01-15T08:00:00Z" in msg
    assert "spec_ab_lock_wait" in msg
    assert err.value.holder["run_id"] == "run-1"
    assert json.loads(lock_file(tmp_path).read_text())["run_id"] == "run-1"


def test_a_second_run_waits_bounded_then_fails_saying_how_long(tmp_path: Path) -> None:
    take(tmp_path, "run-1")
    clock = Clock(T0 + 5)
    with pytest.raises(hs.LockHeldError, match=r"waited 30 s"):
        take(tmp_path, "run-2", clock, wait=30, poll=4)
    assert sum(clock.slept) == 30 and max(clock.slept) <= 4


def test_a_waiting_run_gets_the_lock_once_the_holder_releases_it(tmp_path: Path) -> None:
    take(tmp_path, "run-1")
    clock = Clock(T0 + 5)

    def sleep_then_release(s: float) -> None:
        clock.t += s
        hs.release(params(tmp_path, "run-1"), check_mode=False)

    out = hs.acquire(params(tmp_path, "run-2", wait=60), run=not_armed, check_mode=False, now=clock.now,
                     sleep=sleep_then_release)
    assert out["lock"]["run_id"] == "run-2" and out["waited"] == 0 and out["taken_over"] is None


def test_release_removes_only_the_owners_lock(tmp_path: Path) -> None:
    take(tmp_path, "run-1")
    other = hs.release(params(tmp_path, "run-2"), check_mode=False)
    assert not other["changed"] and other["holder"]["run_id"] == "run-1" and lock_file(tmp_path).exists()
    mine = hs.release(params(tmp_path, "run-1"), check_mode=False)
    assert mine["changed"] and not lock_file(tmp_path).exists()
    again = hs.release(params(tmp_path, "run-1"), check_mode=False)
    assert not again["changed"]


def test_force_release_removes_anyones_lock(tmp_path: Path) -> None:
    take(tmp_path, "run-1")
    out = hs.release(params(tmp_path, "", force=True), check_mode=False)
    assert out["changed"] and out["released"]["run_id"] == "run-1" and not lock_file(tmp_path).exists()


# ------------------------------------------------------------------ stale locks


def test_an_expired_lock_whose_dead_man_fired_is_taken_over(tmp_path: Path) -> None:
    take(tmp_path, "run-1")
    out = take(tmp_path, "run-2", Clock(T0 + 1001))
    assert out["taken_over"]["run_id"] == "run-1"
    assert "expired at" in out["taken_over"]["why"] and "dead-man timer is not armed" in out["taken_over"]["why"]
    assert json.loads(lock_file(tmp_path).read_text())["run_id"] == "run-2"


def test_an_expired_lock_is_kept_while_the_dead_man_is_still_armed(tmp_path: Path) -> None:
    take(tmp_path, "run-1")
    with pytest.raises(hs.LockHeldError):
        take(tmp_path, "run-2", Clock(T0 + 1001), run=armed)


def test_the_rollback_takes_over_a_dead_runs_lock_while_its_dead_man_is_armed(tmp_path: Path) -> None:
    """takeover_armed (playbooks/rollback.yml removes that override and disarms the timer itself): an expired lock is
    taken over even while armed; a live one still refuses, naming its holder."""
    take(tmp_path, "run-1")
    with pytest.raises(hs.LockHeldError, match="locked by run run-1"):
        take(tmp_path, "rollback-1", Clock(T0 + 999), run=armed, takeover_armed=True)
    out = take(tmp_path, "rollback-1", Clock(T0 + 1001), run=armed, takeover_armed=True)
    assert out["taken_over"]["run_id"] == "run-1" and "expired at" in out["taken_over"]["why"]
    assert json.loads(lock_file(tmp_path).read_text())["run_id"] == "rollback-1"


def test_force_never_takes_a_live_runs_lock(tmp_path: Path) -> None:
    """force is for state=absent only: a play given specdec_force goes ahead without the lock, leaving it."""
    take(tmp_path, "run-1")
    with pytest.raises(hs.LockHeldError):
        take(tmp_path, "rollback-1", Clock(T0 + 5), force=True, takeover_armed=True)
    assert json.loads(lock_file(tmp_path).read_text())["run_id"] == "run-1"


def test_the_dead_man_and_its_bridge_both_count_as_armed() -> None:
    def bridge_only(argv: Any) -> tuple[int, str, str]:
        assert list(argv)[2:] == ["specdec-rollback-llama-server.timer", "specdec-rearm-llama-server.timer",
                                  "specdec-deploy-rollback-llama-server.timer"]
        return 0, "inactive\nactive\ninactive\n", ""
    assert hs.timer_armed("llama-server", bridge_only) and not hs.timer_armed("llama-server", not_armed)


def test_a_redeploys_dead_man_keeps_a_gone_controllers_lock(tmp_path: Path) -> None:
    """A controller on the host itself (same boot, same pid namespace) killed while unit_deploy's dead-man waits
    to put the previous files back: its lock is not stale until that timer is done (the crash matrix reproduces it
    on the fake host: tests/unit/test_crash_matrix.py)."""
    def deploy_armed(argv: Any) -> tuple[int, str, str]:
        return 0, "inactive\ninactive\nactive\n", ""
    assert hs.timer_armed("llama-server.service", deploy_armed)
    record = {"run_id": "deploy-1", "expires_epoch": T0 + 1000}
    assert hs.why_stale(record, T0 + 1, True, "its controller process 4242 is gone") is None
    assert hs.why_stale(record, T0 + 1, False, "its controller process 4242 is gone").startswith("its controller")


def test_a_lock_not_yet_expired_is_not_stale(tmp_path: Path) -> None:
    take(tmp_path, "run-1")
    with pytest.raises(hs.LockHeldError):
        take(tmp_path, "run-2", Clock(T0 + 999))


def _proc(tmp_path: Path, boot: str = "boot-a", ns: str = "pid:[4026531836]", procs: Dict[int, int] | None = None) -> str:
    """A /proc with a boot id, a pid namespace and processes (pid -> start ticks)."""
    proc = tmp_path / "proc"
    (proc / "sys" / "kernel" / "random").mkdir(parents=True, exist_ok=True)
    (proc / "sys" / "kernel" / "random" / "boot_id").write_text(boot + "\n")
    (proc / "self" / "ns").mkdir(parents=True, exist_ok=True)
    if not (proc / "self" / "ns" / "pid").is_symlink():
        os.symlink(ns, proc / "self" / "ns" / "pid")
    for pid, start in (procs or {}).items():
        (proc / str(pid)).mkdir(exist_ok=True)
        (proc / str(pid) / "stat").write_text(f"{pid} (ansible-playboo) S 1 " + " ".join(["0"] * 17) + f" {start} 0\n")
    return str(proc)


def _holder(pid: int = 4242, start: int = 777, boot: str = "boot-a", ns: str = "pid:[4026531836]") -> Dict[str, Any]:
    return {"run_id": "run-1", "controller": "ctl-a", "pid": pid, "boot_id": boot, "pid_ns": ns, "start_ticks": start}


@pytest.mark.parametrize("procs, why", [
    ({}, "its controller process 4242 is gone (same boot, same pid namespace)"),
    ({4242: 999}, "its controller's pid 4242 now belongs to a later process (started at tick 999, not 777)"),
])
def test_a_provably_gone_holder_is_taken_over_at_once(tmp_path: Path, procs: Dict[int, int], why: str) -> None:
    proc = _proc(tmp_path, procs=procs)
    take(tmp_path, "run-1", owner=_holder())
    out = take(tmp_path, "run-2", Clock(T0 + 1), proc=proc)
    assert out["taken_over"]["why"] == why + ", and the unit's dead-man timer is not armed"


@pytest.mark.parametrize("case", ["alive", "other boot", "other pid namespace", "no identity", "dead-man armed"])
def test_a_holder_that_cannot_be_proved_gone_keeps_its_lock(tmp_path: Path, case: str) -> None:
    # the same host name means nothing: a controller container shares it with its siblings
    proc = _proc(tmp_path, procs={4242: 777} if case == "alive" else {})
    owner = {"alive": _holder(), "other boot": _holder(boot="boot-b"),
             "other pid namespace": _holder(ns="pid:[4026532000]"), "dead-man armed": _holder(),
             "no identity": {"run_id": "run-1", "controller": "ctl-a", "pid": 4242}}[case]
    take(tmp_path, "run-1", owner=owner)
    with pytest.raises(hs.LockHeldError):
        take(tmp_path, "run-2", Clock(T0 + 1), proc=proc, run=armed if case == "dead-man armed" else not_armed)


def test_a_leftover_temporary_file_never_blocks_and_every_wait_is_bounded(tmp_path: Path) -> None:
    # a writer killed between creating its temporary file and linking it, under any name the old code used
    (tmp_path / "state" / "locks").mkdir(parents=True)
    for name in (f"llama-server.json.{os.getpid()}.tmp", ".llama-server.json.abc123.tmp"):
        (tmp_path / "state" / "locks" / name).write_text("{}")
    out = take(tmp_path, "run-1")
    assert out["changed"] and sorted(p.name for p in (tmp_path / "state" / "locks").iterdir()) == [
        "llama-server.guard", "llama-server.json"]


def test_a_guard_held_by_a_stuck_process_is_named_not_waited_for_forever(tmp_path: Path) -> None:
    import fcntl
    take(tmp_path, "run-1")
    guard = tmp_path / "state" / "locks" / "llama-server.guard"
    ctx = multiprocessing.get_context("fork")
    ready, done = ctx.Event(), ctx.Event()

    def hold() -> None:
        fd = os.open(guard, os.O_RDWR)
        fcntl.flock(fd, fcntl.LOCK_EX)
        ready.set()
        done.wait(60)

    holder = ctx.Process(target=hold)
    holder.start()
    try:
        ready.wait(30)
        clock = Clock()
        with pytest.raises(SpecdecError, match=r"llama-server\.guard has been held by another process for more than 30 s"):
            take(tmp_path, "run-2", clock, wait=600)
        assert 30 <= sum(clock.slept) < 31
    finally:
        done.set()
        holder.join(30)


def test_query_changes_nothing_and_says_who_holds_the_unit(tmp_path: Path) -> None:
    q = {"unit": "llama-server", "state_dir": str(tmp_path / "state")}
    run_dir = tmp_path / "run"
    free = hs.query(q, run=not_armed, now=lambda: T0, run_dir=str(run_dir))
    assert free["held"] is False and free["holder"] is None and free["why"] is None and not free["override_live"]
    assert not (tmp_path / "state").exists()
    take(tmp_path, "run-1")
    before = lock_file(tmp_path).read_bytes()
    held = hs.query(q, run=not_armed, now=lambda: T0 + 5, run_dir=str(run_dir))
    assert held["held"] and not held["stale"] and held["holder"]["run_id"] == "run-1"
    assert "held by run run-1 from controller ctl-a" in held["why"]
    stale = hs.query(q, run=not_armed, now=lambda: T0 + 5000, run_dir=str(run_dir))
    assert not stale["held"] and stale["stale"] and "expired at" in stale["why"]
    armed_stale = hs.query(q, run=armed, now=lambda: T0 + 5000, run_dir=str(run_dir))
    assert armed_stale["held"] and armed_stale["override_live"]
    dropin = run_dir / "systemd" / "system" / "llama-server.service.d" / "zz-llmfleet-specdec.conf"
    dropin.parent.mkdir(parents=True)
    dropin.write_text("[Service]\n")
    live = hs.query(q, run=not_armed, now=lambda: T0 + 5000, run_dir=str(run_dir))
    assert live["override_live"] and live["override"] == [f"drop-in {dropin}"]
    dropin.rename(dropin.with_name("50-llmfleet-specdec.conf"))  # a host that still carries the former name
    legacy = hs.query(q, run=not_armed, now=lambda: T0 + 5000, run_dir=str(run_dir))
    assert legacy["override_live"] and legacy["override"] == [f"drop-in {dropin.with_name('50-llmfleet-specdec.conf')}"]
    assert lock_file(tmp_path).read_bytes() == before


def test_a_lock_file_that_is_not_a_record_is_replaced(tmp_path: Path) -> None:
    lock_file(tmp_path).parent.mkdir(parents=True)
    lock_file(tmp_path).write_text("{half")
    out = take(tmp_path, "run-2")
    assert "not a lock record" in out["taken_over"]["why"]


def _race(state_dir: str, run_id: str, start: Any, out: Any) -> None:
    start.wait()
    p = {"unit": "llama-server", "state_dir": state_dir, "expires_after": 1000, "wait": 0, "poll": 1,
         "owner": {"run_id": run_id, "controller": "c", "pid": 1}, "state_mode": 0o750}
    try:
        r = hs.acquire(p, run=not_armed, check_mode=False)
        out.put((run_id, "took", (r["taken_over"] or {}).get("run_id")))
    except hs.LockHeldError as exc:
        out.put((run_id, "held", exc.holder.get("run_id")))


def test_of_many_processes_racing_for_a_stale_lock_exactly_one_takes_it(tmp_path: Path) -> None:
    for _attempt in range(5):
        take(tmp_path, "dead", Clock(1_000_000.0), owner={"run_id": "dead", "controller": "c", "pid": 1},
             expires_after=10)  # long expired by the real clock
        ctx = multiprocessing.get_context("fork")
        start, out = ctx.Event(), ctx.Queue()
        procs = [ctx.Process(target=_race, args=(str(tmp_path / "state"), f"taker-{i}", start, out)) for i in range(8)]
        for p in procs:
            p.start()
        start.set()
        for p in procs:
            p.join(60)
        results = [out.get(timeout=5) for _dummy in procs]
        took = [r for r in results if r[1] == "took"]
        assert len(took) == 1, results
        assert took[0][2] == "dead"  # the winner replaced the dead run's record
        assert {r[2] for r in results if r[1] == "held"} == {took[0][0]}  # the others saw the winner
        assert json.loads(lock_file(tmp_path).read_text())["run_id"] == took[0][0]
        lock_file(tmp_path).unlink()


# ------------------------------------------------------------------ check mode and bad input


def test_check_mode_writes_nothing_and_reports_the_holder(tmp_path: Path) -> None:
    out = take(tmp_path, "run-1", check=True)
    assert out["changed"] and not (tmp_path / "state").exists()
    take(tmp_path, "run-1")
    before = lock_file(tmp_path).read_bytes()
    held = take(tmp_path, "run-2", check=True, wait=600)
    assert held["holder"]["run_id"] == "run-1" and held["lock"] is None and not held["changed"]
    assert lock_file(tmp_path).read_bytes() == before


@pytest.mark.parametrize("run_id", ["../etc", "a/b", "", ".hidden", "x" * 129])
def test_a_run_id_that_could_escape_the_state_dir_is_refused(tmp_path: Path, run_id: str) -> None:
    with pytest.raises(SpecdecError, match=r"owner\.run_id"):
        take(tmp_path, run_id)


def test_a_relative_state_dir_is_refused(tmp_path: Path) -> None:
    with pytest.raises(SpecdecError, match="must be an absolute path"):
        hs.acquire(dict(params(tmp_path, "r"), state_dir="state"), run=not_armed, check_mode=False)


def test_a_unit_name_with_a_slash_is_refused(tmp_path: Path) -> None:
    with pytest.raises(SpecdecError, match="not a service name"):
        take(tmp_path, "r", unit="../x")


def test_the_module_fails_naming_the_holder(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    take(tmp_path, "run-1")
    args = {"unit": "llama-server", "state_dir": str(tmp_path / "state"), "expires_after": 100,
            "owner": {"run_id": "run-2"}}
    with patch_module_args(args), pytest.raises(SystemExit):
        ab_lock.main()
    out = json.loads(capsys.readouterr().out)
    assert out["failed"] and "locked by run run-1" in out["msg"] and out["holder"]["run_id"] == "run-1"


def test_the_module_refuses_a_mode_that_is_not_octal(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = {"unit": "llama-server", "state_dir": str(tmp_path / "s"), "expires_after": 100,
            "owner": {"run_id": "r"}, "state_mode": "rwx"}
    with patch_module_args(args), pytest.raises(SystemExit):
        ab_lock.main()
    assert "state_mode 'rwx' is not an octal mode" in json.loads(capsys.readouterr().out)["msg"]


# ------------------------------------------------------------------ names and history


def test_history_lines_replace_the_same_run_and_keep_what_they_cannot_read() -> None:
    text = '{"run_id":"a","x":1}\nnot json\n{"run_id":"b"}\n'
    out = hs.merge_history(text, '{"run_id":"a","x":2}')
    assert out == '{"run_id":"a","x":2}\nnot json\n{"run_id":"b"}\n'
    assert hs.merge_history("", '{"run_id":"c"}') == '{"run_id":"c"}\n'


def test_the_history_filter_writes_the_reports_line_in_place_of_an_earlier_one() -> None:
    doc = {"run_id": "r1", "host": "h", "baseline": "baseline", "started": "s", "finished": "f",
           "recommendation": {"config": "draft"},
           "judged": {"order": ["baseline"], "baseline": "baseline", "mix": None,
                      "configs": {"baseline": {"status": "BASELINE", "shapes": {}}}}}
    out = hs_filter.ab_history_add('{"run_id":"r0"}\n{"run_id":"r1","old":true}\n', doc)
    lines = [json.loads(line) for line in out.splitlines()]
    assert [line["run_id"] for line in lines] == ["r0", "r1"]
    assert lines[1]["recommendation"] == "draft" and "old" not in lines[1]
    with pytest.raises(AnsibleFilterError, match=r"report\.json document"):
        hs_filter.ab_history_add("", {"x": 1})
    with pytest.raises(AnsibleFilterError, match="not a judged report"):
        hs_filter.ab_history_add("", {"run_id": "r2"})


def test_the_last_run_of_a_history_and_a_bad_one() -> None:
    assert hs_filter.ab_history_last('{"run_id":"a"}\n\n{"run_id":"b"}\n') == "b"
    with pytest.raises(AnsibleFilterError, match="holds no judged run"):
        hs_filter.ab_history_last("")
    with pytest.raises(AnsibleFilterError, match="cannot name a results folder or a file"):
        hs_filter.ab_history_last('{"run_id":"../../etc"}\n')


def test_the_owner_filter_names_this_controller_and_its_parent_process() -> None:
    owner = hs_filter.ab_lock_owner("20261130T100000Z")
    assert owner["pid"] == os.getppid() and owner["controller"]
    assert owner["start_ticks"] == hs.process_start(os.getppid()) and owner["boot_id"] and owner["pid_ns"]
    # two runs in the same second get two ids (and so two folders and two history lines)
    ids = {hs_filter.ab_lock_owner("20261130T100000Z")["run_id"] for _dummy in range(50)}
    assert len(ids) == 50 and all(i.startswith("20261130T100000Z-") for i in ids)
    assert hs_filter.ab_lock_owner("r-1", unique=False)["run_id"] == "r-1"
    with pytest.raises(AnsibleFilterError):
        hs_filter.ab_lock_owner("a/b")


# ------------------------------------------------------------------ the history under its lock, per unit


def test_history_lines_are_kept_per_unit_under_a_lock_and_private(tmp_path: Path) -> None:
    state = str(tmp_path / "state")
    a = hs.add_history(state, "llama-server", {"run_id": "r-1", "recommendation": "draft"}, check_mode=False)
    b = hs.add_history(state, "llama-alt.service", {"run_id": "r-2", "recommendation": None}, check_mode=False)
    again = hs.add_history(state, "llama-server", {"run_id": "r-1", "recommendation": "draft"}, check_mode=False)
    assert a["changed"] and b["changed"] and not again["changed"]
    path = tmp_path / "state" / "history.jsonl"
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert [(line["unit"], line["run_id"]) for line in lines] == [("llama-server.service", "r-1"), ("llama-alt.service", "r-2")]
    assert stat.S_IMODE(path.stat().st_mode) == 0o600 and stat.S_IMODE((tmp_path / "state").stat().st_mode) == 0o700
    text = path.read_text()
    assert hs_filter.ab_history_last(text, "h", "llama-server") == "r-1"
    assert hs_filter.ab_history_last(text, "h", "llama-alt") == "r-2" and hs_filter.ab_history_last(text) == "r-2"
    with pytest.raises(SpecdecError, match="run_id"):
        hs.add_history(state, "llama-server", {"run_id": "../x"}, check_mode=False)


def _add_many(state: str, unit: str, start: Any) -> None:
    start.wait()
    for i in range(20):
        hs.add_history(state, unit, {"run_id": f"{unit}-{i}"}, check_mode=False)


def test_two_runs_finishing_at_once_never_lose_each_others_lines(tmp_path: Path) -> None:
    state = str(tmp_path / "state")
    hs.add_history(state, "u0", {"run_id": "first"}, check_mode=False)
    ctx = multiprocessing.get_context("fork")
    start = ctx.Event()
    procs = [ctx.Process(target=_add_many, args=(state, f"u{i}", start)) for i in range(1, 4)]
    for p in procs:
        p.start()
    start.set()
    for p in procs:
        p.join(60)
    lines = (tmp_path / "state" / "history.jsonl").read_text().splitlines()
    assert len(lines) == 1 + 3 * 20 and len(set(lines)) == len(lines)


def test_the_dead_man_is_sized_from_the_plan_and_a_slot_that_cannot_fit_is_refused() -> None:
    configs = [{"name": "baseline"}, {"name": "draft"}, {"name": "slow"}]
    plan = hs_filter.ab_dead_man(configs, "baseline", {"slow": 1000, "baseline": 1200}, 900, 120, 3600)
    assert plan["per_config"] == {"draft": 900, "slow": 1500}  # 1000 s expected x 1.5
    assert plan["longest"] == 1800 and plan["lock_expires_after"] == 1800 + 120 + 60  # the baseline's slot counts
    with pytest.raises(AnsibleFilterError, match=r"slow \(expected 3000 s of load and measurement, x1.5 = 4500 s\)"):
        hs_filter.ab_dead_man(configs, "baseline", {"slow": 3000}, 900, 120, 3600)
    with pytest.raises(AnsibleFilterError, match="configs the run does not have: typo"):
        hs_filter.ab_dead_man(configs, "baseline", {"typo": 10}, 900, 120, 3600)
    with pytest.raises(AnsibleFilterError, match="must be longer than health_timeout"):
        hs_filter.ab_dead_man(configs, "baseline", {}, 100, 120, 3600)
    with pytest.raises(AnsibleFilterError, match="not a number of seconds"):
        hs_filter.ab_dead_man(configs, "baseline", {"slow": "soon"}, 900, 120, 3600)
