"""The fleet report across hosts (families from inventory groups, agreement) and the multi-host play's batch size."""
from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from ab_runs import greedy_text, make_run

from ansible_collections.llmfleet.specdec.plugins.plugin_utils.report import _fleet, _fleet_plots
from ansible_collections.llmfleet.specdec.plugins.plugin_utils.report import _report as rp
from ansible_collections.llmfleet.specdec.plugins.plugin_utils.steps._steps_fleet import ab_batch, fleet_entries
from ansible_collections.llmfleet.specdec.plugins.plugin_utils.verdicts import _judge as jd

ROOT = Path(__file__).resolve().parents[2]
DRAFTER = {"chain": ["draft-simple"], "draft": (30, 20), "metrics": True, "drafts_per_request": 10,
           "per_pos": [9, 7, 4], "k": 3}
MIX = {"prose": 0.6, "echo": 0.4}


def _bug(shape, prompt, rnd, rep):
    if (shape, prompt, rnd, rep) == ("prose", 1, 2, 0):
        good = greedy_text(shape, prompt)
        return good[:40] + "x" + good[41:]
    return None


def report(host: str, *, prose: float = 1.6, broken: bool = False, shapes=("prose", "echo", "structured", "identity"),
           error: str | None = None) -> dict:
    """A real A/B report document (the judging and report code of spec_report) of a run on ``host``."""
    run = make_run({
        "baseline": {"noise": 0.03},
        "draft-n3": dict(DRAFTER, speedup={"prose": prose, "echo": 1.4, "structured": 1.0, "identity": 0.9},
                         noise=0.03, **({"text": _bug} if broken else {})),
    }, rounds=3, prompts=2, repeats=2, mix={k: v for k, v in MIX.items() if k in shapes}, shapes=tuple(shapes))
    run["host"] = host
    if error:
        run["error"] = error
    judged = jd.judge(run, n_boot=200)
    return rp.build_document(run, judged, {})


@pytest.fixture(scope="module")
def fast():
    return report("a")


def entry(host, groups, doc, **kw):
    doc = copy.deepcopy(doc)
    if doc is not None:
        doc["host"] = host
    return {"host": host, "groups": groups, "report": doc, **kw}


def family(document, name):
    return next(f for f in document["families"] if f["family"] == name)


# --------------------------------------------------------------------------------------------- families

def test_the_family_is_the_one_gpu_group_or_the_given_one():
    assert _fleet.family_of("h", ["fleet", "gpu_sm86"]) == "gpu_sm86"
    assert _fleet.family_of("h", ["fleet"]) == _fleet.UNGROUPED
    assert _fleet.family_of("h", ["gpu_sm86"], family="rtx3090") == "rtx3090"
    assert _fleet.family_of("h", ["hw_a"], prefix="hw_") == "hw_a"


def test_a_host_in_two_gpu_groups_is_refused_naming_both():
    with pytest.raises(_fleet.FleetError, match=r"host h is in 2 GPU family groups \(gpu_a, gpu_b\).*exactly one gpu_"):
        _fleet.family_of("h", ["gpu_b", "fleet", "gpu_a"])


# --------------------------------------------------------------------------------------------- agreement

def test_hosts_of_one_family_with_the_same_answer_agree(fast):
    doc = _fleet.build([entry("a", ["gpu_x"], fast), entry("b", ["gpu_x"], fast)], name="n")
    fam = family(doc, "gpu_x")
    assert fam["state"] == _fleet.AGREE and fam["compared"] == ["a", "b"] and fam["disagreements"] == []
    assert doc["disagreeing"] == []
    picks = {h["host"]: h["picks"] for h in doc["hosts"]}
    # draft-n3 is 1.6x on prose and 1.4x on echo in the measured run: it wins there, the baseline stays elsewhere
    assert picks["a"]["prose"]["config"] == "draft-n3" and picks["a"]["prose"]["verdict"] == "WIN"
    assert picks["a"]["identity"] == {"config": "baseline", "verdict": "keep", "speedup": None}
    assert doc["hosts"][0]["recommendation"] == "draft-n3"


def test_a_host_where_the_winner_loses_flags_its_family(fast):
    slow = report("b", prose=0.6)
    doc = _fleet.build([entry("a", ["gpu_x"], fast), entry("b", ["gpu_x"], slow),
                        entry("c", ["gpu_y"], fast)], name="n")
    fam = family(doc, "gpu_x")
    assert fam["state"] == _fleet.DISAGREE and doc["disagreeing"] == ["gpu_x"]
    text = "\n".join(fam["disagreements"])
    assert "prose: a picks draft-n3 (win 1.6" in text and "b picks baseline" in text
    assert "draft-n3 on prose contradicts: a WIN, b LOSS" in text
    assert family(doc, "gpu_y")["state"] == _fleet.ONE_HOST
    md = _fleet.markdown(doc)
    assert "## gpu_x: DISAGREE" in md and "**Families whose hosts disagree: gpu_x**" in md


def test_a_config_invalid_on_one_host_only_flags_the_family(fast):
    doc = _fleet.build([entry("a", ["gpu_x"], fast), entry("b", ["gpu_x"], report("b", broken=True))])
    assert family(doc, "gpu_x")["state"] == _fleet.DISAGREE
    assert any(d.startswith("config draft-n3 status: a OK, b INVALID") for d in family(doc, "gpu_x")["disagreements"])


def test_only_the_shapes_every_host_measured_are_compared(fast):
    fewer = report("b", shapes=("prose", "echo"))
    doc = _fleet.build([entry("a", ["gpu_x"], fast), entry("b", ["gpu_x"], fewer)])
    assert family(doc, "gpu_x")["state"] == _fleet.AGREE
    md = _fleet.markdown(doc)
    assert "| b | 20261129T120000Z | reported | draft-n3 | **draft-n3** win" in md
    row_b = next(line for line in md.splitlines() if line.startswith("| b |"))
    assert row_b.endswith("| - | - |")  # b measured no structured and no identity


def test_hosts_without_a_report_or_stopped_early_are_shown_and_not_compared(fast):
    stopped = report("c", error="unit llama-server is locked by run X")
    doc = _fleet.build([entry("a", ["gpu_x"], fast), entry("b", ["gpu_x"], None, error="unreachable"),
                        entry("c", ["gpu_x"], stopped), entry("d", [], fast)])
    fam = family(doc, "gpu_x")
    assert fam["state"] == _fleet.NOT_COMPARED and fam["compared"] == ["a"] and fam["left_out"] == ["b", "c"]
    assert doc["without_report"] == ["b", "c"]
    assert family(doc, _fleet.UNGROUPED)["state"] == _fleet.NOT_COMPARED
    md = _fleet.markdown(doc)
    assert "| b | - | no report: unreachable | - |" in md
    assert "| c | 20261129T120000Z | stopped early: unit llama-server is locked by run X |" in md


@pytest.mark.parametrize(("runs", "message"), [
    ([], "no hosts given"),
    ([{"groups": []}], "entry 0 of the hosts has no host name"),
    ([{"host": "a", "report": None}, {"host": "a", "report": None}], "host a is given twice"),
    ([{"host": "a", "groups": "gpu_x", "report": None}], "host a: groups must be a list"),
    ([{"host": "a", "report": {"schema": "llmfleet.specdec/ab-partial/1"}}], "not 'llmfleet.specdec/ab-report/1'"),
    ([{"host": "a", "report": [1]}], "host a: its A/B report is list"),
])
def test_bad_input_is_refused_with_what_to_change(runs, message):
    with pytest.raises(_fleet.FleetError, match=message.replace("(", r"\(").replace(")", r"\)")):
        _fleet.build(runs)


def test_another_hosts_report_is_refused(fast):
    with pytest.raises(_fleet.FleetError, match=r"host b: the report given for it is host 'a'"):
        _fleet.build([{"host": "b", "groups": [], "report": fast}])


def test_markdown_escapes_names_in_tables(fast):
    doc = _fleet.build([entry("a|b", ["gpu_x|y"], fast)])
    md = _fleet.markdown(doc)
    assert "## gpu_x\\|y: one host" in md and "| a\\|b |" in md


def test_the_plot_is_a_png_and_the_same_document_gives_the_same_bytes(fast):
    doc = _fleet.build([entry("a", ["gpu_x"], fast), entry("b", ["gpu_x"], report("b", prose=0.6)),
                        entry("c", [], None)])
    files, notes = _fleet_plots.render(doc)
    assert notes == [] and list(files) == ["fleet_picks.png"]
    assert files["fleet_picks.png"][:8] == b"\x89PNG\r\n\x1a\n"
    assert _fleet_plots.render(doc)[0] == files


# --------------------------------------------------------------------------------------------- the play's batch size

@pytest.mark.parametrize("good", ["1", 3, "100%", "25%", " 2 "])
def test_batch_sizes_ansible_accepts(good):
    assert ab_batch(good) == str(good).strip()


@pytest.mark.parametrize("bad", ["0", "-1", "abc", "150%", "0%", "", None, True, "1.5"])
def test_a_bad_batch_size_names_the_variable_and_the_choices(bad):
    from ansible.errors import AnsibleFilterError

    with pytest.raises(AnsibleFilterError, match=r"specdec_ab_batch: .* is not a batch size.*'100%', the default"):
        ab_batch(bad)


def test_hosts_that_never_read_a_report_still_get_an_entry():
    hostvars = {"a": {"specdec_fleet_entry": {"host": "a", "groups": ["gpu_x"], "report": None}},
                "b": {"group_names": ["gpu_x"], "specdec_gpu_family": "rtx"}}
    out = fleet_entries(["a", "b"], hostvars)
    assert out[0]["host"] == "a"
    assert out[1]["host"] == "b" and out[1]["family"] == "rtx" and out[1]["report"] is None
    assert "did not get as far" in out[1]["error"]


# --------------------------------------------------------------------------------------------- playbooks and the action

def ansible_playbook(args: list[str], cwd: Path, **env: str) -> subprocess.CompletedProcess:
    full_env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_NOCOLOR="1", **env)
    return subprocess.run([str(Path(sys.executable).parent / "ansible-playbook"), *args], cwd=cwd, env=full_env,
                          capture_output=True, text=True, timeout=300, check=False)


def test_spec_ab_refuses_a_bad_batch_size_before_touching_a_host():
    proc = ansible_playbook(["spec-ab.yml", "-l", "specdec-demo", "-e", "specdec_ab_batch=half"], ROOT)
    assert proc.returncode != 0
    out = proc.stdout + proc.stderr
    # refused by the operator variables' check (playbooks/tasks/check_vars.yml) with the filter's choices
    assert 'specdec_ab_batch="half" is not valid' in out and "'100%', the default" in out
    # only the controller-side check of the named hosts ran: the A/B play never started, no role task ran
    assert "PLAY [A/B the hosts' speculative configs]" not in out
    assert "TASK [llmfleet.specdec." not in out


PLAY = """
- hosts: localhost
  gather_facts: false
  tasks:
    - name: fleet
      llmfleet.specdec.fleet_report:
        name: r1
        results_dir: "{{ playbook_dir }}/results"
        hosts: "{{ lookup('file', 'hosts.json') | from_json }}"
        fail_on_disagreement: "{{ fail_on | default(false) }}"
      register: out
    - ansible.builtin.copy:
        content: "{{ out | to_json }}"
        dest: "{{ playbook_dir }}/out.json"
"""


@pytest.fixture(scope="module")
def action_dir(tmp_path_factory, fast):
    work = tmp_path_factory.mktemp("fleet")
    (work / "play.yml").write_text(PLAY)
    hosts = [entry("a", ["fleet", "gpu_x"], fast), entry("b", ["fleet", "gpu_x"], report("b", prose=0.6))]
    (work / "hosts.json").write_text(json.dumps(hosts))
    return work


def test_the_action_writes_the_report_is_idempotent_and_check_mode_writes_nothing(action_dir):
    dry = ansible_playbook(["play.yml", "--check"], action_dir)
    assert dry.returncode == 0, dry.stdout[-2000:]
    assert not (action_dir / "results").exists()
    first = ansible_playbook(["play.yml"], action_dir)
    assert first.returncode == 0, first.stdout[-2000:]
    out = json.loads((action_dir / "out.json").read_text())
    report_dir = action_dir / "results" / "_fleet" / "r1"
    assert out["changed"] is True and out["report_dir"] == str(report_dir)
    assert sorted(p.name for p in report_dir.iterdir()) == ["fleet.json", "fleet.md", "fleet_picks.png"]
    assert json.loads((report_dir / "fleet.json").read_text())["disagreeing"] == ["gpu_x"]
    assert out["summary"][0].startswith("gpu_x: DISAGREE (a, b): recommendation: a draft-n3, b baseline; "
                                        "prose: a picks draft-n3")
    assert ansible_playbook(["play.yml"], action_dir).returncode == 0
    assert json.loads((action_dir / "out.json").read_text())["changed"] is False


def test_the_action_can_fail_a_scheduled_job_on_disagreement_after_writing(action_dir):
    proc = ansible_playbook(["play.yml", "-e", "fail_on=true", "-e", "{\"x\": 1}"], action_dir)
    assert proc.returncode != 0
    assert "the hosts of GPU families gpu_x disagree" in proc.stdout
    assert (action_dir / "results" / "_fleet" / "r1" / "fleet.md").exists()


def test_in_rolling_batches_a_failing_host_does_not_stop_the_hosts_after_it(tmp_path):
    """Both hosts fail the role's first check (no configs in their inventory), before anything is touched; the
    second must still run.

    Ansible ends the whole playbook when every host of a batch failed: with batches of one host, a failure on the
    first host used to stop every host after it.
    """
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(json.dumps({"all": {"hosts": {
        h: {"ansible_connection": "local", "ansible_python_interpreter": sys.executable} for h in ("h1", "h2")}}}))
    proc = ansible_playbook(["-i", str(inventory), "-l", "all", "-e", "specdec_ab_batch=1",
                             "-e", "spec_ab_rollback_after=10", "-e", "spec_ab_health_timeout=60",
                             "-e", f"spec_ab_results_dir={tmp_path / 'results'}", "-e", "specdec_state_dir=/nonexistent",
                             "spec-ab.yml"], ROOT)
    out = proc.stdout
    assert proc.returncode == 2, out[-3000:]
    assert out.count("PLAY [A/B the hosts' speculative configs]") == 2  # one batch per host
    for host in ("h1", "h2"):
        assert f"fatal: [{host}]: FAILED!" in out and f"{host}: no configs to measure: give specdec_configs" in out
        assert f"{host}                         : ok=" in out
    recap = out[out.rindex("PLAY RECAP"):]
    assert "failed=1" in recap.split("h1")[1].splitlines()[0] and "failed=1" in recap.split("h2")[1].splitlines()[0]
    # the fleet report still lists both, each with why it has no report
    fleet = json.loads(next((tmp_path / "results" / "_fleet").glob("*/fleet.json")).read_text())
    assert fleet["without_report"] == ["h1", "h2"]
    assert all("no configs to measure: give specdec_configs" in h["error"] for h in fleet["hosts"])
    # the message names only what is wrong
    assert "spec_ab_max_rounds (5) must be" not in out and "must be e2e or decode" not in out
