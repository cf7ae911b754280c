"""`spec-ab.yml --check` on the local demo host: the dry run prints the plan and the lock's state, writes nothing.

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
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "DRY RUN (check mode)" in proc.stdout
    assert "measurements planned" in proc.stdout
    assert f"lock {state}/locks/llama-server.json: free" in proc.stdout
    # nothing in --check reports changed
    assert re.search(r"specdec-demo\s+: ok=\d+\s+changed=0\s", proc.stdout), proc.stdout[-600:]
    assert not state.exists() and not results.exists()
