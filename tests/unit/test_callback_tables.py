"""The collection's stdout callback (plugins/callback/tables.py, set in ansible.cfg): a debug task's message prints as
plain lines, never wrapped, quoted or escaped, so the preflight table, the dry run's plan and the verdicts read as
tables; every other result prints as Ansible's default callback prints it."""
from __future__ import annotations

import configparser
import os
import subprocess
import sys
from pathlib import Path

from ansible_collections.llmfleet.specdec.plugins.callback.tables import message_lines, unwrapped

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
LONG = "config | legal? | silently off? | fits? (KV) | worth it? | chain that runs | judged as | " + "x" * 120

PLAYBOOK = f"""
- hosts: localhost
  gather_facts: false
  tasks:
    - name: A table
      ansible.builtin.debug:
        msg: ["{LONG}", 'quoted "word": and a colon']
    - name: One line
      ansible.builtin.debug:
        msg: one line
    - name: A variable keeps the default output
      ansible.builtin.debug:
        var: shown
      vars:
        shown: {{a: 1}}
    - name: A module result keeps the default output
      ansible.builtin.set_fact:
        fact: 1
"""


def test_ansible_cfg_names_the_callback_and_no_setting_ansible_lacks() -> None:
    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "ansible.cfg")
    assert cfg["defaults"]["stdout_callback"] == "llmfleet.specdec.tables"
    assert "result_format" not in cfg["defaults"]  # not a setting: callback_result_format is
    assert cfg["defaults"].getboolean("display_skipped_hosts") is False  # no banner for each skipped step


def test_tables_print_as_plain_lines_and_other_results_as_ansibles_default(tmp_path: Path) -> None:
    (tmp_path / "play.yml").write_text(PLAYBOOK)
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_NOCOLOR="1",
               ANSIBLE_COLLECTIONS_PATH=str(ROOT / ".build" / "collections"), ANSIBLE_LOCAL_TEMP=str(tmp_path / "t"))
    proc = subprocess.run([str(BIN / "ansible-playbook"), "-i", "localhost,", "-c", "local", "-e",
                           f"ansible_python_interpreter={sys.executable}", str(tmp_path / "play.yml")],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    at = lines.index("ok: [localhost] =>")
    assert lines[at + 1:at + 3] == [f"    {LONG}", '    quoted "word": and a colon']  # whole, unquoted
    assert "ok: [localhost] => one line" in lines
    assert '    "shown": {' in lines  # debug var: the default's JSON
    assert "ok: [localhost]" in lines  # set_fact: the default's line


def test_only_a_bare_message_is_printed_plain() -> None:
    assert message_lines({"msg": ["a", "b"], "_ansible_verbose_always": True, "changed": False}) == ["a", "b"]
    assert message_lines({"msg": "a\nb"}) == ["a", "b"]
    assert message_lines({"msg": {"a": 1}}) is None
    assert message_lines({"msg": "a", "other": 1}) is None
    assert message_lines({"msg": "a", "failed": True}) is None


def test_a_stop_prints_its_message_once_on_the_fatal_line(tmp_path: Path) -> None:
    (tmp_path / "play.yml").write_text("""
- hosts: localhost
  gather_facts: false
  tasks:
    - name: Stop, naming the input and the fix
      ansible.builtin.fail:
        msg: "box1: specdec_unit=llama-srv is not a unit on this host; fix specdec_unit"
""")
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_NOCOLOR="1",
               ANSIBLE_COLLECTIONS_PATH=str(ROOT / ".build" / "collections"), ANSIBLE_LOCAL_TEMP=str(tmp_path / "t"))
    proc = subprocess.run([str(BIN / "ansible-playbook"), "-i", "localhost,", "-c", "local", "-e",
                           f"ansible_python_interpreter={sys.executable}", str(tmp_path / "play.yml")],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=False)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 2
    assert "fatal: [localhost]: FAILED! => box1: specdec_unit=llama-srv is not a unit on this host; fix specdec_unit" \
        in out.splitlines()
    assert out.count("is not a unit on this host") == 1 and "[ERROR]" not in out
    assert message_lines({"msg": "x", "exception": "tb"}, failed=True) == ["x"]
    assert message_lines({"msg": "x", "rc": 1}, failed=True) is None  # a module's failure: Ansible's own output


def test_a_refusal_of_the_collections_filter_prints_once_without_ansibles_wrapping(tmp_path: Path) -> None:
    (tmp_path / "play.yml").write_text("""
- hosts: localhost
  gather_facts: false
  tasks:
    - name: A step of the collection refuses its input
      ansible.builtin.set_fact:
        x: "{{ 'v' | llmfleet.specdec.internal('exec_promotion', 'w', {}) }}"
""")
    (tmp_path / "other.yml").write_text("""
- hosts: localhost
  gather_facts: false
  tasks:
    - name: Another plugin's failure
      ansible.builtin.set_fact:
        x: "{{ 'not json' | from_json }}"
""")
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_NOCOLOR="1",
               ANSIBLE_COLLECTIONS_PATH=str(ROOT / ".build" / "collections"), ANSIBLE_LOCAL_TEMP=str(tmp_path / "t"))
    outs = []
    for play in ("play.yml", "other.yml"):
        proc = subprocess.run([str(BIN / "ansible-playbook"), "-i", "localhost,", "-c", "local", "-e",
                               f"ansible_python_interpreter={sys.executable}", str(tmp_path / play)],
                              cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=False)
        assert proc.returncode == 2
        outs.append(proc.stdout + proc.stderr)
    ours, other = outs
    assert "fatal: [localhost]: FAILED! => exec_promotion: give the run's report and the live unit (serving_unit_info)" \
        in ours.splitlines(), ours
    assert ours.count("give the run's report") == 1 and "[ERROR]" not in ours and "Finalization" not in ours
    assert "[ERROR]" in other or "Finalization" in other  # Ansible's own output for what is not the collection's
    msg = ("Task failed: Finalization of task args for 'ansible.builtin.set_fact' failed: Error while resolving value "
           "for 'x': The filter plugin 'llmfleet.specdec.internal' failed: a: b\nc")
    assert unwrapped({"msg": msg, "failed": True, "exception": "tb"}) == "a: b\nc"
    assert unwrapped({"msg": msg.replace("llmfleet.specdec.internal", "ansible.builtin.from_json")}) is None
    assert unwrapped({"msg": msg, "rc": 1}) is None
