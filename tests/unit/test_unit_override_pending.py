"""unit_override starts production only from what runs (issue 48, finding 1): its own EXAMPLES - a fresh start of
production (state=absent restart=true) and a draft-model candidate - on a unit whose env file was edited on disk into
something that cannot start are refused before any change, in check mode too, naming the unit, what differs and the
two options; keep_what_runs and apply_pending each say what to do, and a production that is down is still started.
On the fake host of the crash matrix (fakesystemd: its /proc, units, timers and a real health port).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator

import crash_matrix as cm
import pytest

from ansible_collections.llmfleet.specdec.plugins.module_utils.common._errors import SpecdecError
from ansible_collections.llmfleet.specdec.plugins.module_utils.systemd._systemd import UnitOverrideError
from ansible_collections.llmfleet.specdec.plugins.module_utils.systemd._unit_override import run_unit_override

DRAFT = {"LLAMA_ARG_SPEC_TYPE": "draft-simple", "LLAMA_ARG_SPEC_DRAFT_MODEL": "/srv/models/qwen3-0.6b-q8_0.gguf"}


@pytest.fixture()
def host(tmp_path: Path) -> Iterator[cm.Host]:
    cm.install()
    made = cm.Host(tmp_path, real_unit=True)
    try:
        yield made
    finally:
        made.close()


def _calls(host: cm.Host) -> list[list[str]]:
    return [c for c in host.fake.state()["calls"] if c[:2] != ["systemctl", "show"]]


def _example(call: str, manager: Any) -> Any:
    if call == "fresh start":
        return manager.absent(cm.UNIT, restart=True)
    return manager.present(cm.UNIT, cm._config(DRAFT), 900)


EXAMPLES = ["fresh start", "draft-model candidate"]


@pytest.mark.parametrize("check_mode", [False, True], ids=["apply", "check mode"])
@pytest.mark.parametrize("call", EXAMPLES)
def test_the_examples_are_refused_on_a_pending_change_that_cannot_start(host: cm.Host, call: str, check_mode: bool) -> None:
    cm._hand_edited(host)  # a missing model and a start that fails, on disk only
    ran, pid = host.fake.serving(cm.UNIT), host.fake.state()["units"][cm.UNIT]["pid"]
    calls = len(_calls(host))
    with pytest.raises(UnitOverrideError) as info:
        _example(call, host.manager(check_mode=check_mode))
    message = str(info.value)
    assert message.startswith(f"{cm.UNIT}: what a restart would start differs from what runs (environment: ")
    assert "LLAMA_ARG_MODEL: running '/m/target.gguf', next start '/m/missing.gguf'" in message
    assert "FAKE_FAIL_START: running unset, next start '1'" in message
    assert "Nothing was changed" in message and "keep_what_runs=true" in message and "apply_pending=true" in message
    # nothing changed: the same process serves what ran, no call but reads, no timer, nothing in /run
    assert host.fake.serving(cm.UNIT) == ran and host.fake.state()["units"][cm.UNIT]["pid"] == pid
    assert len(_calls(host)) == calls and host.fake.armed() == [] and host.leftovers() == []


@pytest.mark.parametrize("call", EXAMPLES)
def test_keep_what_runs_goes_ahead_and_leaves_the_edit_pending(host: cm.Host, call: str) -> None:
    cm._hand_edited(host)
    ran = host.fake.serving(cm.UNIT)
    manager = host.manager()
    manager.keep_what_runs = True
    result = _example(call, manager)
    assert result["restarted"] is True and result["healthy"] is True
    assert (host.fake.serving(cm.UNIT) == ran) == (call == "fresh start")  # what ran, or what ran plus the draft
    assert host.fake.serving(cm.UNIT)["LLAMA_ARG_MODEL"] == "/m/target.gguf"
    assert "FAKE_FAIL_START=1" in cm._env_path(host).read_text()  # the edit is still on disk, pending


def test_apply_pending_starts_the_change_on_disk_knowingly(host: cm.Host) -> None:
    cm._hand_edited_ok(host)  # an edit that starts (LLAMA_ARG_CTX_SIZE added)
    manager = host.manager()
    manager.apply_pending = True
    assert manager.absent(cm.UNIT, restart=True)["restarted"] is True
    assert host.fake.serving(cm.UNIT) == host.fake.env_on_disk(cm.UNIT)
    assert host.fake.serving(cm.UNIT)["LLAMA_ARG_CTX_SIZE"] == "8192"


def test_nothing_pending_goes_ahead_as_before(host: cm.Host) -> None:
    assert host.manager().absent(cm.UNIT, restart=True)["restarted"] is True
    assert host.manager().present(cm.UNIT, cm._config(DRAFT), 900)["restarted"] is True
    assert host.manager().absent(cm.UNIT)["restarted"] is True and host.serves_production()


def test_a_production_that_is_down_is_started_not_refused(host: cm.Host) -> None:
    host.fake.run(["systemctl", "stop", cm.UNIT])
    cm._hand_edited_ok(host)  # nothing runs, so nothing to start from: the next start is the disk
    result = host.manager().absent(cm.UNIT, restart=True)
    assert result["restarted"] is True and host.fake.serving(cm.UNIT) == host.fake.env_on_disk(cm.UNIT)


def test_a_unit_it_cannot_read_is_compared_by_its_environment(tmp_path: Path) -> None:
    cm.install()
    host = cm.Host(tmp_path)  # no unit file systemd names (FragmentPath empty): read_unit cannot read it
    try:
        cm._hand_edited(host)
        with pytest.raises(UnitOverrideError, match=r"LLAMA_ARG_MODEL: running '/m/target.gguf', next start '/m/missing.gguf'"):
            host.manager().absent(cm.UNIT, restart=True)
        assert host.fake.armed() == [] and host.leftovers() == []
    finally:
        host.close()


def test_a_candidate_in_place_is_restored_whatever_is_pending(host: cm.Host) -> None:
    host.manager().present(cm.UNIT, cm._config(DRAFT), 900)
    cm._hand_edited_ok(host)  # the running process is the candidate: the restore is never refused
    assert host.manager().absent(cm.UNIT)["restarted"] is True
    assert host.fake.serving(cm.UNIT) == host.fake.env_on_disk(cm.UNIT)


def test_apply_pending_and_keep_what_runs_are_one_or_the_other() -> None:
    params = {"unit": "llama-server", "state": "absent", "restart": True, "keep_what_runs": True, "apply_pending": True}
    with pytest.raises(SpecdecError, match="apply_pending=true and keep_what_runs=true say opposite things"):
        run_unit_override(params, run=lambda argv: (0, "", ""), check_mode=True, python="/usr/bin/python3")


def test_a_check_mode_candidates_diff_shows_the_override_files_as_they_are_and_will_be(host: cm.Host) -> None:
    """The diff of present (check mode) is the transient drop-in and env file on disk against what would be written:
    nothing there before. (The env file's "before" was once production's whole effective env as a mapping, which the
    secret masking of the diff could not read: molecule/default's check-mode present failed on it.)"""
    result = host.manager(check_mode=True).present(cm.UNIT, cm._config(DRAFT), 900)
    dropin, env_file = result["diff"]
    assert dropin["before"] == "" and env_file["before"] == ""
    assert isinstance(env_file["after"], str) and "LLAMA_ARG_SPEC_TYPE=draft-simple" in env_file["after"]
    assert "[Service]" in dropin["after"] and host.leftovers() == []
