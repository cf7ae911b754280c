"""The newest ansible-core lane (make test-newest-ansible, docs/testing.md "Which ansible-core"): the requirements it
installs, the unit tests its cheap lane keeps, and what ansible-core 2.21 deprecates kept out of the roles."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "tests/suite/newest_requirements.py"


def _write(tmp_path: Path) -> tuple[Path, Path]:
    (tmp_path / "base.txt").write_text("# ranges\nansible-core>=2.19.0,<2.22\npyyaml>=6.0,<7\n")
    req = tmp_path / "req.txt"
    req.write_text("-r base.txt\npytest==9.2.0  # kept\nmolecule-plugins[podman]==26.10.12\nansible==12.3.0\n")
    con = tmp_path / "con.txt"
    con.write_text("# newest\nansible-core==2.21.5\nAnsible==14.5.0\nmolecule_plugins==26.11.0\n")
    return req, con


def test_constrained_exact_pins_give_way_ranges_and_other_pins_stay(tmp_path: Path) -> None:
    req, con = _write(tmp_path)
    proc = subprocess.run([sys.executable, str(SCRIPT), str(req), str(con)], capture_output=True, text=True,
                          check=False)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["ansible-core>=2.19.0,<2.22", "pyyaml>=6.0,<7", "pytest==9.2.0",
                                   "molecule-plugins[podman]", "ansible"]


def test_a_missing_file_is_named(tmp_path: Path) -> None:
    req, _con = _write(tmp_path)
    proc = subprocess.run([sys.executable, str(SCRIPT), str(req), str(tmp_path / "nope.txt")], capture_output=True,
                          text=True, check=False)
    assert proc.returncode == 2 and "nope.txt does not exist" in proc.stderr, proc.stderr


def test_the_real_files_resolve_to_the_newest_pins() -> None:
    proc = subprocess.run([sys.executable, str(SCRIPT), str(ROOT / "requirements-test.txt"),
                           str(ROOT / "constraints-newest.txt")], capture_output=True, text=True, check=True)
    lines = proc.stdout.split()
    # requirements-test.txt pins the 12.x `ansible` (ansible-core 2.19); here it takes constraints-newest.txt's
    assert "ansible" in lines and not any(line.startswith("ansible==") for line in lines), lines
    newest = (ROOT / "constraints-newest.txt").read_text()
    assert re.search(r"^ansible-core==2\.21\.\d+$", newest, re.M) and re.search(r"^ansible==14\.", newest, re.M)


def _makefile_core_list() -> set[str]:
    text = (ROOT / "Makefile").read_text()
    block = re.search(r"^NEWEST_UNIT_CORE := \$\(addprefix tests/unit/,(.*?)\)$", text, re.M | re.S)
    assert block, "Makefile has no NEWEST_UNIT_CORE"
    return set(block.group(1).replace("\\", " ").split())


def test_the_cheap_lane_keeps_every_unit_test_that_runs_ansible_playbook_or_ansible_doc() -> None:
    core = _makefile_core_list()
    missing = sorted(name for name in core if not (ROOT / "tests/unit" / name).is_file())
    assert not missing, f"NEWEST_UNIT_CORE names files that do not exist: {missing}"
    runs_ansible = sorted(p.name for p in (ROOT / "tests/unit").glob("test_*.py")
                          if p.name != Path(__file__).name and re.search(r"ansible-playbook|ansible-doc", p.read_text()))
    left_out = [name for name in runs_ansible if name not in core]
    assert not left_out, f"add these to NEWEST_UNIT_CORE in the Makefile (they run ansible-core's CLI): {left_out}"


# Facts read as top-level variables (ansible_memtotal_mb) warn on ansible-core 2.21 (INJECT_FACTS_AS_VARS) and stop
# working when that default turns; ansible_facts['memtotal_mb'] works on every version.
INJECTED = re.compile(r"\bansible_(memtotal_mb|memfree_mb|processor\w*|distribution\w*|os_family|hostname|fqdn|"
                      r"default_ipv4|date_time|architecture|kernel|system|machine|pkg_mgr|service_mgr|devices|mounts|"
                      r"interfaces|nodename|virtualization\w*|env|user_id|uptime_seconds)\b")


def test_roles_and_playbooks_read_facts_from_ansible_facts() -> None:
    found = []
    for folder in ("roles", "playbooks", "molecule"):
        for path in sorted((ROOT / folder).rglob("*.yml")):
            for number, line in enumerate(path.read_text().splitlines(), 1):
                # setup's `filter:` names facts by their ansible_ names: that is no read of a variable
                if INJECTED.search(line) and not re.match(r"\s*filter:", line):
                    found.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert not found, "read these from ansible_facts['...'] instead:\n" + "\n".join(found)
