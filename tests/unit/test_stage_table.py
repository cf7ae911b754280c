"""make test's stage table: tests/suite/stage.sh writes the rows, tests/suite/stage_table.py prints them."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
STAGE = ROOT / "tests" / "suite" / "stage.sh"
TABLE = ROOT / "tests" / "suite" / "stage_table.py"


def stage(tsv: Path, name: str, *command: str, parent: str | None = None) -> int:
    env = dict(os.environ, SPECDEC_STAGES=str(tsv), SPECDEC_STAGES_T0="0")
    env.pop("SPECDEC_STAGE_PARENT", None)
    if parent:
        env["SPECDEC_STAGE_PARENT"] = parent
    return subprocess.run([str(STAGE), name, *command], env=env, check=False).returncode


def table(tsv: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(TABLE), str(tsv)], capture_output=True, text=True, check=False)


def test_nested_stages_are_indented_under_their_lane_and_a_failure_fails_the_table(tmp_path: Path) -> None:
    tsv = tmp_path / "stages.tsv"
    assert stage(tsv, "prepare", "true") == 0
    # a lane whose scenarios run through stage.sh themselves: they are named lane/scenario
    lane = f"{STAGE} default true; {STAGE} failures sh -c 'exit 3'; exit 0"
    assert stage(tsv, "molecule light A", "bash", "-c", lane) == 0
    rows = [line.split("\t") for line in tsv.read_text().splitlines()]
    assert [r[0] for r in rows] == ["prepare", "molecule light A/default", "molecule light A/failures",
                                    "molecule light A"]
    assert rows[2][3] == "FAILED (exit 3)" and rows[3][3] == "ok"
    assert all(int(r[1]) > 1_000_000_000 for r in rows)  # seconds after a T0 of 0

    printed = table(tsv)
    assert printed.returncode == 1
    lines = printed.stdout.splitlines()
    names = [line.split("  ")[0] or "  " + line.split()[0] for line in lines[2:-1]]
    assert sorted(names) == sorted(["prepare", "molecule light A", "  default", "  failures"])
    lane = names.index("molecule light A")
    assert names[lane + 1:lane + 3] == ["  default", "  failures"]  # the lane's scenarios, indented, under it
    assert lines[-1].endswith("1 failed: molecule light A/failures")


def test_all_passed_exits_0_and_an_empty_table_fails(tmp_path: Path) -> None:
    tsv = tmp_path / "stages.tsv"
    assert stage(tsv, "lint", "true") == 0
    assert table(tsv).returncode == 0
    assert "every stage passed" in table(tsv).stdout
    empty = tmp_path / "empty.tsv"
    empty.write_text("")
    assert table(empty).returncode == 1


def test_a_name_with_a_slash_is_refused(tmp_path: Path) -> None:
    tsv = tmp_path / "stages.tsv"
    assert stage(tsv, "a/b", "true") == 2
    assert not tsv.exists()


def test_rows_of_scenarios_without_their_lane_still_print(tmp_path: Path) -> None:
    tsv = tmp_path / "stages.tsv"
    tsv.write_text("lane/ab\t10\t80\tFAILED (exit 2)\nlane/abfaults\t90\t400\tok\n")
    printed = table(tsv)
    assert printed.returncode == 1
    assert printed.stdout.splitlines()[-1] == "total: 480 s (8.0 minutes); 1 failed: lane/ab"


def test_a_run_past_35_minutes_warns_and_names_its_three_slowest_stages(tmp_path: Path) -> None:
    tsv = tmp_path / "stages.tsv"
    rows = [("prepare", 0, 60), ("molecule light A", 60, 900), ("molecule light A/default", 60, 400),
            ("molecule light A/deadman", 460, 500), ("pytest unit", 60, 700), ("molecule alone", 960, 1200),
            ("molecule alone/win", 960, 1200)]
    tsv.write_text("".join(f"{name}\t{start}\t{seconds}\tok\n" for name, start, seconds in rows))
    done = table(tsv)
    assert done.returncode == 0, done.stdout  # a warning, never a failure: the budget is not a timed assert
    warning = [line for line in done.stdout.splitlines() if line.startswith("WARNING")]
    assert len(warning) == 1
    # the leaves, not their lanes: win 1200, unit 700, deadman 500 (light A's 900 is its scenarios' sum)
    assert "the slowest stages: molecule alone/win 1200 s, pytest unit 700 s, molecule light A/deadman 500 s" in warning[0]
    assert "36.0 minutes" in warning[0]


def test_a_run_within_35_minutes_prints_no_warning(tmp_path: Path) -> None:
    tsv = tmp_path / "stages.tsv"
    tsv.write_text("prepare\t0\t60\tok\npytest unit\t60\t2040\tok\n")
    done = table(tsv)
    assert done.returncode == 0 and "WARNING" not in done.stdout, done.stdout


def test_make_test_full_has_no_warning_line(tmp_path: Path) -> None:
    tsv = tmp_path / "stages.tsv"
    tsv.write_text("prepare\t0\t60\tok\nfuzz\t60\t7000\tok\n")
    done = subprocess.run([sys.executable, str(TABLE), str(tsv), "make test-full"], capture_output=True, text=True,
                          env=dict(os.environ, SPECDEC_WARN_AFTER="0"), check=False)
    assert done.returncode == 0 and "WARNING" not in done.stdout and "make test-full, stage by stage" in done.stdout
