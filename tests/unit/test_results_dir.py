"""Where results land on the controller when the inventory is inline (``-i 'box1,'``): ./results, not None/../results.

An inline inventory has no inventory_dir; spec_ab's default used to render it as the text "None".
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def test_an_inline_inventory_puts_results_in_the_current_directory(tmp_path: Path) -> None:
    play = tmp_path / "show.yml"
    play.write_text(f"""- hosts: all
  gather_facts: false
  connection: local
  vars_files: [{ROOT}/roles/spec_ab/defaults/main.yml]
  tasks:
    - ansible.builtin.debug:
        msg: "RESULTS={{{{ spec_ab_results_dir }}}}"
""")
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_NOCOLOR="1", PWD=str(tmp_path),
               ANSIBLE_COLLECTIONS_PATH=str(ROOT / ".build" / "collections"))
    proc = subprocess.run([str(BIN / "ansible-playbook"), "-i", "box1,", str(play)], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert f"RESULTS={tmp_path}/results" in proc.stdout, proc.stdout[-2000:]
    assert "None" not in proc.stdout.split("RESULTS=")[1].split("\n")[0]
