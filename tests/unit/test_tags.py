# Tags: preflight, measure, report, promote. Whatever --tags an operator gives, nothing that changes a host's unit runs
# without production's restore beside it, and --tags preflight (or report) changes nothing and leaves no lock.
#
# `ansible-playbook --list-tasks` lists a block's own tasks but neither its rescue nor its always, and not what a
# dynamic include holds; so the listing is checked beside a walk of the task files that gives every task, rescue and
# always included, the tags it runs under (a block's tags reach its rescue, its always and what its includes hold;
# an include's own tags do not reach its tasks, its apply: tags do).
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import NamedTuple

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
SPEC_AB = ROOT / "roles" / "spec_ab" / "tasks"
TAGS = ["preflight", "measure", "report", "promote"]
ENV = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_NOCOLOR="1",
           ANSIBLE_COLLECTIONS_PATH=str(ROOT / ".build" / "collections"))


def _module(task: dict) -> tuple[str, dict]:
    for key, value in task.items():
        if key.startswith(("llmfleet.specdec.", "ansible.builtin.")):
            return key.rsplit(".", 1)[1], value if isinstance(value, dict) else {"_raw": value}
    return "", {}


def _tags(node: dict) -> set[str]:
    tags = node.get("tags") or []
    return {tags} if isinstance(tags, str) else set(tags)


def walk(path: Path, inherited: frozenset[str] = frozenset(), tasks: list[dict] | None = None,
         check_only: bool = False) -> list[dict]:
    """Every task of a task file (or of ``tasks``, read as if in ``path``) and of the files it includes by a
    literal name, with the tags it runs under, and whether it runs only in check mode (dry_run.yml's look at the
    lock, which takes nothing)."""
    out: list[dict] = []

    def visit(tasks: list[dict], tags: frozenset[str], where: str) -> None:
        for task in tasks or []:
            own = tags | _tags(task)
            if "block" in task:
                for part in ("block", "rescue", "always"):
                    visit(task.get(part), own, f"{where}/{part}")
                continue
            module, args = _module(task)
            out.append({"name": task.get("name"), "module": module, "args": args, "tags": own, "where": where,
                        "file": path.name, "check_only": check_only})
            if module in ("include_tasks", "import_tasks"):
                target = args.get("file") or args.get("_raw")
                if target and "{{" not in target and (path.parent / target).exists():
                    # an import's tags reach its tasks; an include's only through apply:
                    reach = own if module == "import_tasks" else tags | _tags(args.get("apply") or {})
                    out.extend(walk(path.parent / target, frozenset(reach),
                                    check_only=check_only or task.get("when") == "ansible_check_mode"))

    visit(yaml.safe_load(path.read_text()) if tasks is None else tasks, frozenset(inherited), path.name)
    return out


def runs_under(task: dict, tag: str) -> bool:
    return "always" in task["tags"] or tag in task["tags"]


def changes_unit(task: dict) -> bool:
    """Starts a candidate on the unit, or takes (or holds on to) its lock: any state but a literal absent (or a
    query of the lock, which reads it only)."""
    return (task["module"] in ("unit_override", "ab_lock") and task["args"].get("state", "present") != "absent"
            and not (task["module"] == "ab_lock" and task["args"].get("state") == "query") and not task["check_only"])


def restores(task: dict) -> bool:
    return task["module"] in ("unit_override", "ab_lock") and task["args"].get("state") == "absent"


SPEC_AB_TASKS = walk(SPEC_AB / "main.yml")


def test_the_walk_sees_the_candidates_start_the_lock_and_the_restore() -> None:
    # the walk reaches measure.yml (main -> round -> measure -> state_slot) and state_begin.yml, so the checks below
    # see them; the dry run's look at the lock (check mode, it takes nothing) is told apart
    assert {t["file"] for t in SPEC_AB_TASKS if changes_unit(t)} == {"measure.yml", "state_begin.yml", "state_slot.yml"}
    assert [t["file"] for t in SPEC_AB_TASKS if t["check_only"] and t["module"] == "ab_lock"] == ["dry_run.yml"]
    assert {t["file"] for t in SPEC_AB_TASKS if restores(t)} == {"main.yml"}


@pytest.mark.parametrize("tag", TAGS)
def test_spec_ab_restores_production_and_releases_the_lock_under_every_tag(tag: str) -> None:
    restore = [t for t in SPEC_AB_TASKS if restores(t)]
    # the measuring block's restore and lock release, the pre-measuring block's lock release
    assert len(restore) == 3, [t["name"] for t in restore]
    for task in restore:
        assert "always" in task["tags"] and runs_under(task, tag), task
    undrain = [t for t in SPEC_AB_TASKS if t["name"] == "Run the undrain task file"]
    assert undrain and all("always" in t["tags"] for t in undrain)


@pytest.mark.parametrize("tag", ["preflight", "report", "promote"])
def test_spec_ab_changes_no_unit_and_takes_no_lock_under(tag: str) -> None:
    changing = [t for t in SPEC_AB_TASKS if changes_unit(t) and runs_under(t, tag)]
    assert changing == []


def test_spec_ab_measure_starts_candidates_with_the_restore_beside_them() -> None:
    assert [t for t in SPEC_AB_TASKS if changes_unit(t) and runs_under(t, "measure")]
    assert all(runs_under(t, "measure") for t in SPEC_AB_TASKS if restores(t))


class Row(NamedTuple):
    play: str
    name: str
    tags: set[str]


def list_tasks(playbook: str, tag: str | None) -> list[Row]:
    """(play, task, tags) as ansible-playbook --list-tasks prints them for the demo inventory."""
    argv = [str(BIN / "ansible-playbook"), playbook, "-l", "specdec-demo", "--list-tasks"]
    proc = subprocess.run(argv + (["--tags", tag] if tag else []), cwd=ROOT, env=ENV, capture_output=True,
                          text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    rows, play = [], ""
    for line in proc.stdout.splitlines():
        found = re.match(r"\s+play #\d+ \(.*?\): (.*)\tTAGS:", line)
        if found:
            play = found.group(1)
            continue
        found = re.match(r"\s{6}(?:[\w.]+ : )?(.*)\tTAGS: \[(.*)\]$", line)
        if found:
            rows.append(Row(play, found.group(1), {t.strip() for t in found.group(2).split(",") if t.strip()}))
    return rows


# Tasks of role spec_ab whose own work, or what they include, starts a candidate or takes the lock
SPEC_AB_CHANGING = {"Take the unit's lock and make the run's folder in the host's state directory",
                    "Run the rounds (a fresh start per config, a look after each round from 2 on)",
                    "Drain - take the host out of its users' traffic (spec_ab_drain_tasks)"}


def test_the_changing_names_are_the_roles_own() -> None:
    names = {t["name"] for t in walk(SPEC_AB / "main.yml")}
    assert SPEC_AB_CHANGING <= names


@pytest.mark.parametrize("tag", ["preflight", "report"])
def test_spec_ab_yml_lists_nothing_that_changes_a_unit_under(tag: str) -> None:
    listed = list_tasks("spec-ab.yml", tag)
    names = {row.name for row in listed}
    assert not names & SPEC_AB_CHANGING, names & SPEC_AB_CHANGING
    # the host guard runs whatever the tags
    assert "Name the hosts to change (-l <host or group>, or -e specdec_target_hosts=<host or group>)" in names
    if tag == "preflight":
        assert "Preflight every config" in names
    else:
        assert "Preflight every config" not in names
        assert any(row.play.startswith("One report across the hosts") for row in listed)


def test_spec_ab_yml_measure_lists_the_measuring_and_the_report() -> None:
    names = {row.name for row in list_tasks("spec-ab.yml", "measure")}
    assert SPEC_AB_CHANGING <= names
    assert {"Preflight every config", "Judge and report"} <= names


@pytest.mark.parametrize("tag", ["preflight", "measure", "report"])
def test_promote_yml_runs_nothing_of_the_promotion_under(tag: str) -> None:
    listed = list_tasks("playbooks/promote.yml", tag)
    assert [row.name for row in listed if row.play.startswith("Promote")] == []
    assert listed, "the host guard is listed"


def test_promote_yml_is_all_or_nothing_under_promote() -> None:
    listed = list_tasks("playbooks/promote.yml", "promote")
    untagged = list_tasks("playbooks/promote.yml", None)
    assert [row.name for row in listed] == [row.name for row in untagged]
    # and in the file, every change of the unit has its restore and the lock's release in the same play
    play = yaml.safe_load((ROOT / "playbooks" / "promote.yml").read_text())[1]
    assert play["tags"] == ["promote"]
    tasks = [t for t in walk_play(play) if changes_unit(t) or restores(t)]
    assert any(changes_unit(t) for t in tasks) and sum(restores(t) for t in tasks) >= 3


def walk_play(play: dict) -> list[dict]:
    """A play's tasks, read as a task file beside the playbooks (where its includes are)."""
    return walk(ROOT / "playbooks" / "promote.yml", frozenset(_tags(play)), tasks=play["tasks"])


@pytest.mark.parametrize("playbook, tag", [
    ("playbooks/preflight.yml", "preflight"),
    ("playbooks/fleet_report.yml", "report"),
    ("playbooks/report_partial.yml", "report"),
    ("playbooks/spec_watch.yml", "report"),
])
def test_the_operators_playbooks_carry_their_tag(playbook: str, tag: str) -> None:
    listed = list_tasks(playbook, tag)
    assert len(listed) > 2 and all(tag in row.tags or "always" in row.tags for row in listed)
    assert [row.name for row in list_tasks(playbook, "promote") if "always" not in row.tags] == []


def test_spec_ab_preflight_tag_judges_and_leaves_the_host_as_it_was(tmp_path: Path) -> None:
    """`spec-ab.yml -l h --tags preflight` for real on the local demo host, whose PID 1 is not systemd: the
    preflight table and the plan, then the stop the real A/B would meet before measuring, in one line - no unit
    change, no lock, no run folder on the host or the controller."""
    sys.path.insert(0, str(ROOT / "tests"))
    from testbed.models import write_standard_set

    write_standard_set(tmp_path / "cache" / "demo-models")
    state, results = tmp_path / "state", tmp_path / "results"
    proc = subprocess.run([str(BIN / "ansible-playbook"), "spec-ab.yml", "-l", "specdec-demo", "--tags", "preflight",
                           "-e", "ansible_become=false", "-e", f"specdec_state_dir={state}",
                           "-e", f"spec_ab_results_dir={results}"],
                          cwd=ROOT, env=dict(ENV, LLMFLEET_CACHE=str(tmp_path / "cache"),
                                             ANSIBLE_DISPLAY_SKIPPED_HOSTS="1"),  # the skipped restore is shown
                          capture_output=True,
                          text=True, timeout=300, check=False)
    out = proc.stdout
    assert proc.returncode == 2, out[-3000:] + proc.stderr[-3000:]
    assert "This host's A/B could not start (nothing was changed)" in out
    assert "Show the preflight table" in out and "The time plan" in out
    assert "this host does not run systemd" in out
    assert "Take the unit's lock" not in out and "Judge and report" not in out
    assert re.search(r"specdec-demo\s+: ok=\d+\s+changed=0\s+unreachable=0\s+failed=1", out)
    assert not state.exists() and not results.exists()
