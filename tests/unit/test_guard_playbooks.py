"""deploy.yml and rollback.yml hold the host's guard (module ab_lock) from before their first change to after their
last (issue 31): another run's lock refuses them naming it, renewal stops a play that lost its lock, the release
leaves a lock another run took over, the rollback takes over a dead run's lock, and specdec_force goes ahead
leaving a live run's lock in place.

The guard's task files run through ansible-playbook on the local demo host, with the state directory under
tmp_path (nothing else on the host is touched); the plays' structure is read from their YAML. The redeploy and the
rollback themselves run on real systemd in molecule/envfile and molecule/abfaults.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
HOLDER = {"run_id": "20261201T080000Z-a1", "controller": "awx-job-17", "pid": 4242, "started": "2026-12-01T08:00:00Z",
          "expires": "2099-01-01T00:00:00Z", "expires_epoch": 4070908800}


def playbook(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_NOCOLOR="1",
               ANSIBLE_COLLECTIONS_PATH=str(ROOT / ".build" / "collections"))
    return subprocess.run([str(BIN / "ansible-playbook"), *args], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=300, check=False)


def said(proc: subprocess.CompletedProcess) -> str:
    return " ".join((proc.stdout + proc.stderr).replace("\\n", " ").split())


def lock_path(state: Path) -> Path:
    """ab_lock's file for unit llama-server (the .service suffix is dropped from the file name)."""
    from ansible_collections.llmfleet.specdec.plugins.module_utils.state import _host_state as hs
    return Path(hs.lock_paths(str(state), "llama-server")[0])


def write_lock(state: Path, record: dict) -> Path:
    path = lock_path(state)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record))
    return path


DEPLOY_BOOK = """---
- hosts: specdec-demo
  gather_facts: false
  tasks:
    - ansible.builtin.set_fact:
        specdec_guard_owner: "{{{{ 'deploy-test' | llmfleet.specdec.internal('ab_lock_owner') }}}}"
        specdec_deploy_guard: [{{unit: llama-server, state_dir: "{state}", expires_after: 600}}]
        specdec_deploy_guarded: []
    - block:
        - ansible.builtin.include_tasks: {root}/playbooks/tasks/deploy_guard.yml
        - ansible.builtin.debug:
            msg: "HOLDS {{{{ specdec_guard_owner.run_id }}}}"
        - name: Another run takes the lock over meanwhile
          ansible.builtin.copy:
            content: '{holder}'
            dest: "{lock}"
          when: take_over | default(false) | bool
        - ansible.builtin.include_tasks: {root}/playbooks/tasks/deploy_guard.yml
        - ansible.builtin.debug:
            msg: RENEWED
      always:
        - llmfleet.specdec.ab_lock:
            unit: "{{{{ item.unit }}}}"
            state: absent
            owner: "{{{{ specdec_guard_owner }}}}"
            state_dir: "{{{{ item.state_dir }}}}"
          loop: "{{{{ specdec_deploy_guard | selectattr('unit', 'in', specdec_deploy_guarded) | list }}}}"
          register: released
        - ansible.builtin.debug:
            msg: "RELEASE {{{{ released.results | map(attribute='changed') | list }}}}"
"""


def deploy_book(tmp_path: Path) -> Path:
    state = tmp_path / "state"
    book = tmp_path / "deploy_guard.yml"
    book.write_text(DEPLOY_BOOK.format(root=ROOT, state=state, lock=lock_path(state), holder=json.dumps(HOLDER)))
    return book


def test_deploy_refuses_a_unit_another_run_holds_naming_it(tmp_path: Path) -> None:
    path = write_lock(tmp_path / "state", HOLDER)
    proc = playbook(str(deploy_book(tmp_path)))
    assert proc.returncode != 0 and "HOLDS" not in proc.stdout
    assert "specdec-demo: llama-server: unit llama-server.service is locked by run 20261201T080000Z-a1 from " \
           "controller awx-job-17" in said(proc)
    assert json.loads(path.read_text())["run_id"] == HOLDER["run_id"]  # not released: it never was this play's
    assert "RELEASE []" in proc.stdout


def test_deploy_holds_the_guard_renews_it_and_gives_it_back(tmp_path: Path) -> None:
    proc = playbook(str(deploy_book(tmp_path)))
    assert proc.returncode == 0, said(proc)[-3000:]
    assert "HOLDS deploy-test-" in proc.stdout and "RENEWED" in proc.stdout and "RELEASE [True]" in proc.stdout
    assert not lock_path(tmp_path / "state").exists()


def test_a_deploy_that_lost_its_lock_stops_and_leaves_the_lock_to_the_run_that_took_it(tmp_path: Path) -> None:
    proc = playbook(str(deploy_book(tmp_path)), "-e", "take_over=true")
    assert proc.returncode != 0 and "HOLDS deploy-test-" in proc.stdout and "RENEWED" not in proc.stdout
    assert "locked by run 20261201T080000Z-a1" in said(proc)
    assert "RELEASE [False]" in proc.stdout  # its release found another run's lock and left it
    assert json.loads(lock_path(tmp_path / "state").read_text())["run_id"] == HOLDER["run_id"]


def test_a_forced_deploy_goes_ahead_and_leaves_the_holders_lock_in_place(tmp_path: Path) -> None:
    path = write_lock(tmp_path / "state", HOLDER)
    forced = playbook(str(deploy_book(tmp_path)), "-e", "specdec_force=true")
    assert forced.returncode == 0 and "RENEWED" in forced.stdout and "RELEASE []" in forced.stdout
    assert "specdec_force=true: deploying specdec-demo although llama-server: unit llama-server.service is locked by " \
           "run 20261201T080000Z-a1" in said(forced)
    assert json.loads(path.read_text())["run_id"] == HOLDER["run_id"]


ROLLBACK_BOOK = """---
- hosts: specdec-demo
  gather_facts: false
  tasks:
    - ansible.builtin.set_fact:
        specdec_rollback_owner: "{{{{ 'rollback-test' | llmfleet.specdec.internal('ab_lock_owner') }}}}"
        specdec_rollback_state_dir: "{state}"
        specdec_rollback_units: [llama-server.service]
        specdec_rollback_timeout: 120
        specdec_rollback_guarded: []
    - ansible.builtin.include_tasks: {root}/playbooks/tasks/rollback_guard.yml
    - ansible.builtin.debug:
        msg: "HOLDS {{{{ specdec_rollback_guarded }}}}"
"""


def rollback(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    book = tmp_path / "rollback_guard.yml"
    book.write_text(ROLLBACK_BOOK.format(root=ROOT, state=tmp_path / "state"))
    return playbook(str(book), *args)


def test_rollback_refuses_a_live_runs_lock_naming_it_and_says_how_to_force(tmp_path: Path) -> None:
    path = write_lock(tmp_path / "state", HOLDER)
    proc = rollback(tmp_path)
    text = said(proc)
    assert proc.returncode != 0 and "HOLDS" not in proc.stdout
    assert "llama-server.service: unit llama-server.service is locked by run 20261201T080000Z-a1" in text
    assert "Nothing was rolled back" in text and "-e specdec_force=true" in text
    assert json.loads(path.read_text())["run_id"] == HOLDER["run_id"]


def test_rollback_takes_over_a_dead_runs_lock(tmp_path: Path) -> None:
    path = write_lock(tmp_path / "state", dict(HOLDER, expires="2020-01-01T00:00:00Z", expires_epoch=1577836800))
    proc = rollback(tmp_path)
    assert proc.returncode == 0, said(proc)[-3000:]
    assert "it expired at 2020-01-01T00:00:00Z" in said(proc) and "HOLDS ['llama-server.service']" in said(proc)
    assert json.loads(path.read_text())["run_id"].startswith("rollback-test-")


def test_a_forced_rollback_goes_ahead_and_leaves_a_live_runs_lock_in_place(tmp_path: Path) -> None:
    path = write_lock(tmp_path / "state", HOLDER)
    proc = rollback(tmp_path, "-e", "specdec_force=true")
    assert proc.returncode == 0, said(proc)[-3000:]
    assert "specdec_force=true: rolling back specdec-demo although llama-server.service: unit llama-server.service " \
           "is locked by run 20261201T080000Z-a1" in said(proc)
    assert "HOLDS []" in said(proc)
    assert json.loads(path.read_text())["run_id"] == HOLDER["run_id"]


# ------------------------------------------------------------------ the plays' order


def _flat(tasks: list) -> list:
    out: list = []
    for task in tasks or []:
        out.append(task)
        for key in ("block", "rescue", "always"):
            out += _flat(task.get(key))
    return out


def _guarded_block(path: str) -> dict:
    plays = yaml.safe_load((ROOT / path).read_text())
    return next(t for play in plays for t in play.get("tasks") or []
                if "block" in t and any("ab_lock" in str(a) for a in t.get("always") or []))


@pytest.mark.parametrize("path, guard, first_change, renewed_before, owner", [
    ("playbooks/deploy.yml", "tasks/deploy_guard.yml", "The llama-server unit", "The vLLM unit",
     "{{ specdec_guard_owner }}"),
    ("playbooks/rollback.yml", "tasks/rollback_guard.yml", "Remove what llmfleet.specdec left on this host (every unit)",
     "Remove what llmfleet.specdec left on this host (every unit)", "{{ specdec_rollback_owner }}"),
])
def test_the_guard_is_taken_before_the_first_change_renewed_and_given_back_in_an_always(
        path: str, guard: str, first_change: str, renewed_before: str, owner: str) -> None:
    block = _guarded_block(path)
    inside = _flat(block["block"])
    names = [t.get("name", "") for t in inside]
    takes = [i for i, t in enumerate(inside) if t.get("ansible.builtin.include_tasks") == guard]
    assert len(takes) == 2 and takes[0] == 0 < names.index(first_change)  # taken before the first change
    assert takes[1] < names.index(renewed_before)  # renewed before the next long step (and the restore)
    release = next(t for t in block["always"] if "llmfleet.specdec.ab_lock" in t)["llmfleet.specdec.ab_lock"]
    assert release["state"] == "absent" and release["owner"] == owner and "force" not in release
    take = yaml.safe_load((ROOT / "playbooks" / guard).read_text())[0]["llmfleet.specdec.ab_lock"]
    assert take["state"] == "present" and "wait" not in take  # refuses at once, naming the holder


@pytest.mark.parametrize("role", ["llamacpp_serve", "vllm_serve"])
def test_the_roles_renew_the_plays_guard_and_leave_its_release_to_the_play(role: str) -> None:
    tasks = _flat(yaml.safe_load((ROOT / "roles" / role / "tasks" / "files.yml").read_text()))
    facts = next(t for t in tasks if f"{role}_lock_owner" in (t.get("ansible.builtin.set_fact") or {}))
    assert "specdec_guard_owner" in facts["ansible.builtin.set_fact"][f"{role}_lock_owner"]
    release = next(t for t in tasks if (t.get("llmfleet.specdec.ab_lock") or {}).get("state") == "absent")
    assert release["when"] == "specdec_guard_owner | default(none) is none"


PROMOTE_BLOCKS = {
    "env": ("playbooks/promote.yml", "Promote through the vehicle, and put the previous production back if anything fails"),
    "exec": ("playbooks/tasks/promote_exec.yml",
             "Promote the command line through the vehicle, and put the previous production back if anything fails"),
}


def _promote_block(form: str) -> dict:
    path, name = PROMOTE_BLOCKS[form]
    data = yaml.safe_load((ROOT / path).read_text())
    tasks = [t for play in data for t in play.get("tasks") or []] if "hosts" in data[0] else data
    return next(t for t in tasks if t.get("name") == name)


def _module(task: dict) -> str | None:
    return next((k for k in task if k.startswith(("llmfleet.", "ansible."))), None)


def _when(task: dict, **facts: object) -> bool:
    import jinja2
    env = jinja2.Environment()
    env.filters["bool"] = lambda v: v if isinstance(v, bool) else str(v).lower() in ("true", "yes", "1")
    conditions = task["when"] if isinstance(task["when"], list) else [task["when"]]
    return bool(env.compile_expression(" and ".join(f"({c})" for c in conditions))(**facts))


@pytest.mark.parametrize("form", sorted(PROMOTE_BLOCKS))
def test_promote_renews_its_lock_after_the_override_answered_and_before_its_commit(form: str) -> None:
    block = _promote_block(form)["block"]
    modules = [_module(t) for t in block]
    override = modules.index("llmfleet.specdec.unit_override")
    commit = next(i for i, t in enumerate(block) if t.get("name", "").startswith("Commit"))
    renew = [i for i, m in enumerate(modules) if m == "llmfleet.specdec.ab_lock"]
    assert renew and override < renew[0] < commit
    args = block[renew[0]]["llmfleet.specdec.ab_lock"]
    assert args["state"] == "present" and args["owner"] == "{{ specdec_promote_owner }}" and "force" not in args


@pytest.mark.parametrize(("holder", "touches"), [
    (None, True),  # released by force: the override may be this promotion's, so put production back
    ({"run_id": "promote-1"}, True),  # still this promotion's
    ({"run_id": "rollback-2"}, False),  # taken over (specdec_force): the unit is that run's now
])
@pytest.mark.parametrize("form", sorted(PROMOTE_BLOCKS))
def test_promotes_rescue_asks_whether_it_still_holds_the_lock_before_it_touches_anything(holder, touches, form) -> None:
    import jinja2
    rescue = _promote_block(form)["rescue"]
    modules = [_module(t) for t in rescue]
    query = modules.index("llmfleet.specdec.ab_lock")
    assert rescue[query]["llmfleet.specdec.ab_lock"]["state"] == "query" and rescue[query]["check_mode"] is False
    lost_task = rescue[query + 1]
    lost = jinja2.Environment().from_string(lost_task["ansible.builtin.set_fact"]["specdec_promote_lost"]).render(
        specdec_promote_lock_now={"holder": holder}, specdec_promote_owner={"run_id": "promote-1"}).strip() == "True"
    changing = [t for t in rescue[query + 2:] if _module(t) in (
        "ansible.builtin.copy", "ansible.builtin.file", "llmfleet.specdec.unit_override")]
    assert len(changing) == {"env": 4, "exec": 5}[form]
    for task in changing:
        assert _when(task, specdec_promote_committed=True, specdec_promote_lost=lost, ansible_check_mode=False) is touches
