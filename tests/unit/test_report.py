"""The A/B report: the result document, its Markdown, its history line, its plots and the spec_report action."""
from __future__ import annotations

import copy
import json
import os
import struct
import subprocess
import sys
from pathlib import Path

import pytest
from ab_runs import greedy_text, make_run

from ansible_collections.llmfleet.specdec.plugins.module_utils.common import _stats as st
from ansible_collections.llmfleet.specdec.plugins.plugin_utils.report import _plots
from ansible_collections.llmfleet.specdec.plugins.plugin_utils.report import _report as rp
from ansible_collections.llmfleet.specdec.plugins.plugin_utils.verdicts import _judge as jd

ROOT = Path(__file__).resolve().parents[2]
DRAFTER = {"chain": ["draft-simple"], "draft": (30, 20), "metrics": True, "drafts_per_request": 10,
           "per_pos": [9, 7, 4], "k": 3}


def _text_bug(shape, prompt, rnd, rep):
    if (shape, prompt, rnd, rep) == ("prose", 1, 2, 0):
        good = greedy_text(shape, prompt)
        return good[:40] + "`x|y`" + good[45:]
    return None


def full_run(mix=None):
    return make_run({
        "baseline": {"noise": 0.04},
        "draft-n3": dict(DRAFTER, speedup={"prose": 1.6, "echo": 1.4, "structured": 1.05, "identity": 0.85},
                         noise=0.04, server_config={"LLAMA_ARG_SPEC_TYPE": "draft-simple",
                                                    "LLAMA_ARG_SPEC_DRAFT_N_MAX": "3"}),
        "ngram-mod": {"chain": ["ngram-mod"], "speedup": {"echo": 1.8}, "draft": {"echo": (40, 35)}, "noise": 0.04,
                      "metrics": True, "drafts_per_request": {"echo": 10}, "per_pos": {"echo": [10, 9, 8, 8]}},
        "broken": dict(DRAFTER, speedup=2.0, text=_text_bug, noise=0.04),
        "flags-only": {"chain": ["draft-simple"], "noise": 0.04},
        "control": {"chain": [], "noise": 0.04},
        "crashy": dict(DRAFTER, speedup=1.5, partial_rounds={1}, noise=0.04),
        "dead": dict(DRAFTER, fail_rounds={0, 1, 2}),
    }, rounds=3, prompts=2, repeats=2, mix=mix)


@pytest.fixture(scope="module")
def document():
    run = full_run(mix={"prose": 0.6, "echo": 0.3, "identity": 0.1})
    judged = jd.judge(run, d_s_ms=4.0, n_boot=400)
    return rp.build_document(run, judged, {"llama_cpp": {"version": "b9999"}})


# ---------------------------------------------------------------------------------------------
# the document


def test_document_holds_configs_environment_every_request_and_every_verdict(document):
    assert document["schema"] == "llmfleet.specdec/ab-report/1"
    for key in ("run_id", "host", "started", "finished", "baseline", "mix", "run_error", "configs", "environment",
                "entries", "judged", "verdicts", "recommendation"):
        assert key in document, key
    assert document["host"] == "specdec-demo" and document["run_id"] == "20261129T120000Z"
    assert document["environment"] == {"llama_cpp": {"version": "b9999"}}
    # every raw request: 8 configs x 3 rounds, 16 requests per full bench, minus the failed and the cut-short ones
    requests = sum(len(e["bench"]["requests"]) for e in document["entries"] if e["bench"])
    assert requests == 6 * 3 * 16 + 2 * 16 + 8
    assert len([e for e in document["entries"] if e["error"]]) == 4
    assert len(document["verdicts"]) == 8 * 4
    broken = [v for v in document["verdicts"] if v["config"] == "broken"]
    assert {v["verdict"] for v in broken} == {"invalid"} and {v["status"] for v in broken} == {"INVALID"}
    assert document["recommendation"]["config"] == "draft-n3"
    text = rp.to_json(document)
    assert json.loads(text)["judged"]["configs"]["dead"]["status"] == "FAILED"
    assert rp.to_json(json.loads(text)) == text  # stable: the same document gives the same bytes


def test_run_id_is_given_or_derived_from_the_content():
    run = full_run()
    assert rp.run_id_for(run) == "20261129T120000Z"
    del run["run_id"]
    derived = rp.run_id_for(run)
    assert derived.startswith("20261129T120000Z-") and derived == rp.run_id_for(copy.deepcopy(run))
    run["entries"][0]["bench"]["requests"][0]["text"] = "other"
    assert rp.run_id_for(run) != derived
    del run["started"]
    assert rp.run_id_for(run).startswith("run-")


@pytest.mark.parametrize("bad", ["../etc", "a/b", "", "..", "x" * 200])
def test_unsafe_names_are_refused(bad):
    run = full_run()
    run["host"] = bad
    with pytest.raises(st.ReportInputError, match="results folder"):
        rp.build_document(run, jd.judge(run, n_boot=100))


# ---------------------------------------------------------------------------------------------
# Markdown


def test_markdown_has_a_table_per_shape_and_every_status(document):
    md = rp.markdown(document)
    assert md.startswith("# Speculative-decoding A/B: specdec-demo, run 20261129T120000Z")
    header = ("| config | status | decode tok/s [95 % CI] | median tok/s | decode speedup | verdict | noise | "
              "smallest findable | e2e tok/s | e2e speedup | e2e verdict | TTFT ms | TTFT speedup | acceptance | "
              "mean accepted len | n | lossless | engaged | requests |")
    assert md.count(header) == 4
    for shape in ("prose", "echo", "structured", "identity"):
        assert f"## Shape: {shape}" in md
    prose = md.split("## Shape: prose")[1].split("## Shape:")[0]
    row = next(line for line in prose.splitlines() if line.startswith("| draft-n3 |"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[1] == "OK" and cells[5] == "WIN" and cells[15] == "3x4" and cells[16] == "yes" and cells[17] == "yes"
    assert cells[4].startswith("1.6") and cells[4].endswith("]") and cells[13] == "66.7 %" and cells[14] == "3.00"
    assert cells[10] == "WIN" and cells[9].startswith("1.6")  # end-to-end, judged the same way
    # the confirmatory verdict comes first: one endpoint, every candidate, the recommendation
    conf = md.split("## Confirmatory verdict")[1].split("\n## ")[0]
    assert "**end-to-end tokens/s" in conf and "| draft-n3 | OK | **WIN** |" in conf
    assert "**Recommendation: draft-n3**" in conf and "Server starts: 24 used" in conf
    # status section: INVALID with the first divergence, NOT ENGAGED, partial and failed runs
    assert "**broken: INVALID**" in md and "at character 40" in md
    # 24 characters either side, in a code span that survives the backticks in the text
    assert "  - candidate: `` the quick brown fox jump`x|y`r the lazy dog. pro ``" in md
    assert "(context from character 16; lengths 183 and 183)" in md
    assert "**flags-only: NOT ENGAGED**" in md
    assert "**crashy: INCOMPLETE** (partial: never a winner)" in md
    assert "**dead: FAILED** (no measurement at all)" in md and "status 134 before /health" in md
    assert "control: NEGATIVE CONTROL" in md
    # prediction against measurement and the recommendation
    assert "## Prediction against measurement" in md
    assert "| draft-n3 | prose | 3 |" in md
    assert "**Recommended: draft-n3**" in md
    assert "not a candidate: broken (INVALID)" in md
    assert "time-weighted" in md


def test_markdown_without_a_mix_says_how_to_get_a_recommendation():
    run = full_run()
    md = rp.markdown(rp.build_document(run, jd.judge(run, n_boot=200)))
    # no mix declared: the confirmatory endpoint weighs the measured shapes equally, and still recommends
    assert ("over the built-in mix (no traffic declared): equal weights over the measured shapes (prose 25%, "
            "echo 25%, structured 25%, identity 25%)") in md
    assert "**Not your traffic**: endpoint e2e tokens/s over prose 25%, echo 25%, structured 25%, identity 25%: the " \
           "BUILT-IN mix decided" in md
    assert "**Recommended: draft-n3**" in md


def test_markdown_links_the_plots_and_shows_a_stopped_run(document):
    doc = dict(document, run_error="controller interrupted in round 2")
    md = rp.markdown(doc, images=["acceptance_by_position.png", "tok_s_per_shape.png"])
    assert "![tok s per shape](tok_s_per_shape.png)" in md
    assert "> **The run stopped early:** controller interrupted in round 2" in md


def test_summary_lines_are_the_per_shape_verdict_table(document):
    lines = rp.summary_lines(document)
    assert lines[0].startswith("confirmatory (e2e, the declared traffic mix")
    assert any(line.startswith("confirmatory | draft-n3 | WIN") for line in lines)
    start = lines.index("shape (exploratory) | config | status | tok/s | speedup | verdict | n")
    assert start == 1 + 7 and len(lines) == start + 1 + 4 * 8 + 1
    assert any(line.startswith("prose | draft-n3 | OK |") and line.endswith("| WIN | 3x4") for line in lines)
    assert any(line.startswith("prose | broken | INVALID |") and "| invalid |" in line for line in lines)
    assert lines[-1].startswith("recommendation: draft-n3")


def test_history_line_is_one_json_line_per_run(document):
    line = rp.history_line(document)
    assert "\n" not in line
    rec = json.loads(line)
    assert rec["schema"] == "llmfleet.specdec/ab-history/1"
    assert rec["run_id"] == "20261129T120000Z" and rec["time"] == "2026-11-29T12:30:00Z"
    assert rec["recommendation"] == "draft-n3"
    assert rec["configs"]["draft-n3"]["shapes"]["prose"]["verdict"] == "WIN"
    assert rec["confirmatory"]["verdicts"]["draft-n3"]["verdict"] == "WIN"
    assert rec["configs"]["broken"]["status"] == "INVALID"
    assert set(rec["configs"]["baseline"]["shapes"]) == {"prose", "echo", "structured", "identity"}


# ---------------------------------------------------------------------------------------------
# plots


def png_size(data: bytes) -> tuple[int, int]:
    """Width and height of a well-formed PNG; fails on anything else."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    assert data[12:16] == b"IHDR"
    assert data[-8:-4] == b"IEND"
    return struct.unpack(">II", data[16:24])


def test_plots_are_valid_pngs_of_sensible_size(document):
    from PIL import Image

    files, notes = _plots.render(document)
    assert notes == []
    assert list(files) == ["verdicts_forest.png", "per_shape_forest.png", "tok_s_per_shape.png",
                           "acceptance_by_position.png"]
    for data in files.values():
        width, height = png_size(data)
        assert 600 <= width <= 4000 and 300 <= height <= 2000
        assert len(data) > 15_000  # drawn, not blank
        import io
        with Image.open(io.BytesIO(data)) as img:
            img.verify()
    # the same document draws the same bytes, so re-running a report changes nothing
    assert _plots.render(document)[0] == files


def test_no_acceptance_plot_without_per_position_counters():
    run = make_run({"baseline": {}, "d": {"chain": ["draft-simple"], "draft": (10, 5), "speedup": 1.2}})
    doc = rp.build_document(run, jd.judge(run, n_boot=100))
    files, notes = _plots.render(doc)
    assert set(files) == {"verdicts_forest.png", "per_shape_forest.png", "tok_s_per_shape.png"}
    assert "no per-position acceptance counters" in notes[0]


def test_missing_matplotlib_gives_no_plots_and_a_note(document, monkeypatch):
    for name in [m for m in sys.modules if m == "matplotlib" or m.startswith("matplotlib.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib -> ImportError
    files, notes = _plots.render(document)
    assert files == {}
    assert "matplotlib is not installed" in notes[0]


# ---------------------------------------------------------------------------------------------
# the action plugin through ansible-playbook, and its documentation stub

PLAYBOOK = """
- hosts: localhost
  gather_facts: false
  tasks:
    - name: report run one
      llmfleet.specdec.spec_report:
        run: "{{ lookup('file', 'run1.json') | from_json }}"
        results_dir: results
        d_s_ms: 4
        bootstrap_resamples: 300
    - name: report run one again
      llmfleet.specdec.spec_report:
        run: "{{ lookup('file', 'run1.json') | from_json }}"
        results_dir: results
        d_s_ms: 4
        bootstrap_resamples: 300
    - name: report run two
      llmfleet.specdec.spec_report:
        run: "{{ lookup('file', 'run2.json') | from_json }}"
        results_dir: results
        bootstrap_resamples: 300
    - name: check mode
      llmfleet.specdec.spec_report:
        run: "{{ lookup('file', 'run1.json') | from_json }}"
        results_dir: "{{ playbook_dir }}/dry"
        bootstrap_resamples: 300
      check_mode: true
    - name: malformed run
      llmfleet.specdec.spec_report:
        run: {baseline: base, entries: [{config: base, round: one}]}
      ignore_errors: true
"""


def ansible_playbook(workdir: Path, extra_env: dict[str, str] | None = None) -> dict:
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_STDOUT_CALLBACK="ansible.builtin.json",
               ANSIBLE_NOCOLOR="1", ANSIBLE_SHOW_CUSTOM_STATS="1", **(extra_env or {}))
    proc = subprocess.run([str(Path(sys.executable).parent / "ansible-playbook"), "play.yml"], cwd=workdir, env=env,
                          capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return json.loads(proc.stdout)


def results_of(out: dict) -> dict[str, dict]:
    return {t["task"]["name"]: t["hosts"]["localhost"] for t in out["plays"][0]["tasks"]}


@pytest.fixture(scope="module")
def playbook_run(tmp_path_factory):
    work = tmp_path_factory.mktemp("play")
    run1 = full_run(mix={"prose": 0.6, "echo": 0.4})
    run2 = copy.deepcopy(run1)
    run2["run_id"] = "20261130T080000Z"
    (work / "run1.json").write_text(json.dumps(run1))
    (work / "run2.json").write_text(json.dumps(run2))
    (work / "play.yml").write_text(PLAYBOOK)
    return work, ansible_playbook(work)


def test_action_writes_the_report_and_is_idempotent(playbook_run):
    work, out = playbook_run
    res = results_of(out)
    first = res["report run one"]
    report_dir = work / "results" / "specdec-demo" / "20261129T120000Z"
    assert first["changed"] is True and first["report_dir"] == str(report_dir)
    assert sorted(p.name for p in report_dir.iterdir()) == [
        "acceptance_by_position.png", "per_shape_forest.png", "report.json", "report.md", "tok_s_per_shape.png",
        "verdicts_forest.png"]
    doc = json.loads((report_dir / "report.json").read_text())
    assert doc["schema"] == "llmfleet.specdec/ab-report/1"
    assert doc["environment"]["controller"]["ansible_core"]
    assert doc["judged"]["configs"]["broken"]["status"] == "INVALID"
    assert doc["judged"]["prediction"][0]["d_s_ms"] == 4.0
    assert "**Recommended: draft-n3**" in (report_dir / "report.md").read_text()
    for png in ("tok_s_per_shape.png", "acceptance_by_position.png"):
        assert png_size((report_dir / png).read_bytes())[0] >= 600
    assert first["recommendation"]["config"] == "draft-n3"
    assert first["summary"][0].startswith("confirmatory (e2e")
    assert doc["confirmatory"]["verdicts"]["draft-n3"]["verdict"] == "WIN"
    assert doc["confirmatory"]["recommendation"] == "draft-n3" and doc["confirmatory"]["alpha"] == 0.05
    assert first["judged"]["configs"]["flags-only"]["status"] == "NOT ENGAGED"
    # the same run again: the same bytes, nothing written, no second history line
    again = res["report run one again"]
    assert again["changed"] is False and again["written"] == []


def test_action_appends_one_history_line_per_run(playbook_run):
    work, out = playbook_run
    res = results_of(out)
    assert res["report run two"]["changed"] is True
    lines = (work / "results" / "specdec-demo" / "history.jsonl").read_text().splitlines()
    assert [json.loads(line)["run_id"] for line in lines] == ["20261129T120000Z", "20261130T080000Z"]


def test_action_check_mode_writes_nothing(playbook_run):
    work, out = playbook_run
    dry = results_of(out)["check mode"]
    assert dry["changed"] is True
    assert not (work / "dry").exists()
    assert str(work / "dry" / "specdec-demo" / "history.jsonl") in dry["written"]
    assert len(dry["written"]) == 7


def test_action_returns_job_stats(playbook_run):
    _dummy, out = playbook_run
    stats = out["global_custom_stats"]["specdec_ab"]["specdec-demo"]
    # aggregated per host: the host's last report wins, here the check-mode one of run one
    assert stats["run_id"] == "20261129T120000Z"
    assert stats["configs"]["draft-n3"]["shapes"]["prose"]["verdict"] == "WIN"
    assert stats["report_dir"].endswith("dry/specdec-demo/20261129T120000Z")
    assert stats["summary"][0].startswith("confirmatory")


def test_action_refuses_a_malformed_run_naming_the_field(playbook_run):
    _dummy, out = playbook_run
    bad = results_of(out)["malformed run"]
    assert bad["failed"] is True
    assert "run.entries[0].round" in bad["msg"]


def test_action_without_matplotlib_warns_and_writes_the_rest(tmp_path):
    blocker = tmp_path / "block" / "matplotlib"
    blocker.mkdir(parents=True)
    (blocker / "__init__.py").write_text("raise ImportError('matplotlib blocked for this test')\n")
    run = make_run({"baseline": {}, "d": dict(DRAFTER, speedup=1.5)})
    (tmp_path / "run1.json").write_text(json.dumps(run))
    (tmp_path / "play.yml").write_text(PLAYBOOK.split("    - name: report run one again", maxsplit=1)[0])
    out = ansible_playbook(tmp_path, {"PYTHONPATH": str(tmp_path / "block")})
    res = results_of(out)["report run one"]
    assert res["changed"] is True
    assert any("matplotlib is not installed" in w for w in res.get("warnings", []))
    report_dir = Path(res["report_dir"])
    assert sorted(p.name for p in report_dir.iterdir()) == ["report.json", "report.md"]
    assert "## Plots" not in (report_dir / "report.md").read_text()


def test_module_stub_refuses_to_run_on_a_host(capsys):
    from ansible.module_utils.testing import patch_module_args

    from ansible_collections.llmfleet.specdec.plugins.modules import spec_report

    # With valid options (the stub's spec is the action plugin's) it still refuses, naming the reason.
    with patch_module_args({"run": {}}), pytest.raises(SystemExit):
        spec_report.main()
    out = json.loads(capsys.readouterr().out)
    assert out["failed"] is True and "action plugin" in out["msg"]


def test_a_run_that_measured_nothing_still_renders_a_report():
    run = {"host": "specdec-demo", "run_id": "nothing", "baseline": "baseline", "error": "candidate never healthy",
           "configs": [{"name": "baseline", "chain": [], "server_config": {}},
                       {"name": "d", "chain": ["draft-simple"], "server_config": {}}],
           "entries": [{"config": "d", "round": 0, "order": 0, "server_config": {}, "bench": None,
                        "error": "llama-server never became healthy in 120 s"}]}
    doc = rp.build_document(run, jd.judge(run, n_boot=100))
    assert {c["status"] for c in doc["judged"]["configs"].values()} == {"FAILED"}
    md = rp.markdown(doc)
    assert "> **The run stopped early:** candidate never healthy" in md
    assert "never became healthy in 120 s" in md
    assert "nothing can be compared" in md
    files, notes = _plots.render(doc)
    assert files == {} and len(notes) == 3
    assert json.loads(rp.history_line(doc))["configs"]["d"]["status"] == "FAILED"


def test_the_power_line_gives_the_power_of_a_win_and_of_a_recommendation():
    conf = {"endpoint": "e2e", "weights": {"prose": 1.0}, "weights_from": "the declared traffic mix", "alpha": 0.05,
            "sequential": True, "max_rounds": 5, "margin": 0.05, "min_speedup": 1.2, "recommendation": None,
            "verdicts": {}, "restarts": {"used": 20, "fixed_rounds": 4, "fixed_design": 20, "saved": 0,
                                         "power": 0.38, "power_recommend": 0.28, "effect": 1.2, "win_margin": 0.02}}
    text = "\n".join(rp._confirmatory({"baseline": "baseline", "confirmatory": conf}))
    assert ("by the error and degrees of freedom its verdicts use (its last look alone): a WIN 38%, recommended "
            "(lower bound above 1 + 0.02) 28%; a fixed design with the same power to be recommended needs 4 rounds, "
            "20 starts (saved 0)") in text


def test_an_inconclusive_row_with_a_smallest_findable_below_the_plan_is_warned():
    conf = {"endpoint": "e2e", "weights": {"prose": 1.0}, "weights_from": "the declared traffic mix", "alpha": 0.05,
            "sequential": True, "max_rounds": 5, "margin": 0.05, "min_speedup": 1.2, "recommendation": None,
            "verdicts": {"a": {"verdict": "INCONCLUSIVE", "ratio": 1.1, "low": 0.97, "high": 1.25, "noise": 0.02,
                               "mde": 1.12, "rounds": 5, "level": 0.9568},
                         "b": {"verdict": "INCONCLUSIVE", "ratio": 1.1, "low": 0.9, "high": 1.4, "noise": 0.08,
                               "mde": 1.5, "rounds": 5, "level": 0.9568}},
            "restarts": {"used": 15, "fixed_rounds": 3, "fixed_design": 9, "saved": -6, "power": 0.42,
                         "effect": 1.2}}
    text = "\n".join(rp._confirmatory({"baseline": "baseline", "confirmatory": conf}))
    assert "smallest findable (estimate)" in text
    assert "**Warning**: a INCONCLUSIVE with a smallest findable effect below the planned 1.2x" in text
    assert "b INCONCLUSIVE" not in text
    assert "this design's own power at 1.2x at this run's noise (42%, its last look alone)" in text
    assert "used 6 more" in text and "(95.7%)" in text
