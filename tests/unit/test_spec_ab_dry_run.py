"""`spec-ab.yml --check` on the local demo host (no systemd): the dry run prints the table and the plan with the lock's
expiry, then fails where the real run would, in one line, and writes nothing.

The plan's dead-man and the lock's expiry are sized like the real run's (state_begin.yml); a dry run that asked
for the lock with the role's default expiry (0) failed where the real run would have run. molecule/ab runs the same
dry run against real systemd; this is the quick check on the controller alone (the demo models in tmp_path, the
host's state directory in tmp_path, nothing started).
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from testbed.models import write_standard_set

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def test_check_mode_plans_sizes_the_lock_and_writes_nothing(tmp_path: Path) -> None:
    write_standard_set(tmp_path / "cache" / "demo-models")
    state, results = tmp_path / "state", tmp_path / "results"
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_NOCOLOR="1",
               ANSIBLE_COLLECTIONS_PATH=str(ROOT / ".build" / "collections"), LLMFLEET_CACHE=str(tmp_path / "cache"))
    proc = subprocess.run([str(BIN / "ansible-playbook"), "--check", "spec-ab.yml", "-l", "specdec-demo",
                           "-e", "ansible_become=false", "-e", f"specdec_state_dir={state}",
                           "-e", f"spec_ab_results_dir={results}"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, check=False)
    out = proc.stdout + proc.stderr
    # the controller has no systemd: the dry run shows the table and the plan, then fails where the real run would,
    # once, in one line naming the fix (the plan's end, the lock's line, is molecule/ab's to check on real systemd)
    assert proc.returncode == 2, out[-3000:]
    assert "Show the preflight table" in out and "The time plan" in out
    assert re.search(r"lock expires [0-9]+ s after its last renewal", out), out[-3000:]
    fatal = [line for line in out.splitlines() if line.startswith("fatal: ")]
    assert fatal == ["fatal: [specdec-demo]: FAILED! => specdec-demo: llama-server.service (specdec_unit): this host "
                     "does not run systemd, and serving units are systemd services; run the play on a host where "
                     "production runs under systemd (limit it with -l)"], fatal
    assert out.count("this host does not run systemd") == 1
    assert "TASK [This host's dry run failed (check mode - nothing was started, changed or kept)]" in out
    # nothing in --check reports changed
    assert re.search(r"specdec-demo\s+: ok=\d+\s+changed=0\s", proc.stdout), proc.stdout[-600:]
    assert not state.exists() and not results.exists()
