"""Long work shows progress: llamacpp_build's compile and vllm_serve's pip install run in the background and the
roles print where they are until the job ends (real background jobs through ansible-playbook on this machine)."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def _follow(tmp_path: Path, playbook: str, **extra_env: str) -> subprocess.CompletedProcess:
    """Runs tests/unit/progress/<playbook> with its work folder in tmp_path; asserts it passed."""
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_NOCOLOR="1", FOLLOW_WORK=str(tmp_path),
               ANSIBLE_COLLECTIONS_PATH=str(ROOT / ".build" / "collections"), ANSIBLE_LOCAL_TEMP=str(tmp_path / "tmp"),
               **extra_env)
    proc = subprocess.run([str(BIN / "ansible-playbook"), "-i", "localhost,", "-e",
                           f"ansible_python_interpreter={sys.executable}", str(ROOT / "tests/unit/progress" / playbook)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    return proc


def test_background_build_and_install_print_progress_until_they_end(tmp_path: Path) -> None:
    proc = _follow(tmp_path, "follow.yml")
    build = re.findall(r'=> fake-build on localhost, \d+ s: (building|ended); ([^"\n]*)', proc.stdout)
    install = re.findall(r'=> vLLM test on localhost, \d+ s: (installing|ended); (\d+|\?) MB in the venv,\s+(\d+) packages',
                         proc.stdout)
    # progress while the work runs, then exactly one line saying it ended, with the log's last line
    assert len(build) >= 2 and [s for s, _dummy in build].count("ended") == 1 and build[-1][0] == "ended", build
    assert build[0][0] == "building" and build[-1][1] == "[ 100%] step 4", build
    assert "BUILD-END rc=3 finished=" in proc.stdout  # a failed build ends the follow with its rc
    assert len(install) >= 2 and install[0][0] == "installing" and install[-1][0] == "ended", install
    assert install[-1][2] == "4", install
    assert "INSTALL-END finished=1" in proc.stdout or "INSTALL-END finished=True" in proc.stdout


def test_a_job_late_to_write_its_status_is_followed_to_its_end(tmp_path: Path) -> None:
    """async_status says "could not find job" until the status file exists; in the first minute that is a job
    starting on a busy host, not one that ended (the role used to report it ended, and the build failed)."""
    (tmp_path / "async").mkdir()
    proc = _follow(tmp_path, "follow_late.yml", ANSIBLE_ASYNC_DIR=str(tmp_path / "async"))
    build = re.findall(r'=> late-build on localhost, (\d+) s: (building|ended); ([^"\n]*)', proc.stdout)
    assert [state for _dummy, state, _dummy in build].count("ended") == 1 and build[-1][1:] == ("ended", "[ 100%] done"), build
    assert int(build[-1][0]) >= 8, build  # not before the status file said so
    assert "LATE-END rc=3 finished=" in proc.stdout
