"""examples/first-hour.md and examples/inventory, tested the way the README's install paths are.

- the example inventory parses, with its GPU family groups, and its vault example is a file ansible-vault
  encrypts;
- every ``ansible-playbook`` command of the guide is one the collection accepts: its playbook and options,
  run with ``--syntax-check`` against the example inventory (nothing reaches its hosts);
- the read-only ones (the preflight, the ``--check`` dry run) run for real against the demo host;
- every variable the guide names exists in the collection (a role's defaults or argument spec, a playbook, the
  example inventory), and every file it names is in the repository.
"""
from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from testbed.models import write_standard_set

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
GUIDE = ROOT / "examples" / "first-hour.md"
EXAMPLE = ROOT / "examples" / "inventory"
# The host the guide's commands name, and the inventory they read.
GUIDE_HOST = "gpu-box-1"
GUIDE_INVENTORY = "~/fleet/hosts.yml"


def commands() -> list[list[str]]:
    """Every command line of the guide's sh blocks, split as the shell would."""
    blocks = re.findall(r"```sh\n(.*?)```", GUIDE.read_text(), re.S)
    return [shlex.split(line) for block in blocks for line in block.splitlines() if line.strip()]


def clean_env(home: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANSIBLE_", "MOLECULE_", "LLMFLEET_"))}
    env.update(PATH=f"{BIN}:/usr/bin:/bin", HOME=str(home), ANSIBLE_NOCOLOR="1", **extra)
    return env


def run(argv: list[str], env: dict[str, str], ok: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, check=False)
    if ok:
        assert proc.returncode == 0, f"{argv}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The user's home after step 2: the example inventory copied to ~/fleet, the vault made from its example."""
    home = tmp_path_factory.mktemp("home")
    shutil.copytree(EXAMPLE, home / "fleet")
    vault = home / "fleet" / "group_vars" / "all" / "vault.yml"
    shutil.copy(vault.with_name("vault.yml.example"), vault)
    (home / "vault-pass").write_text("first-hour\n")
    run([str(BIN / "ansible-vault"), "encrypt", "--vault-password-file", str(home / "vault-pass"), str(vault)],
        clean_env(home))
    assert vault.read_text().startswith("$ANSIBLE_VAULT;")
    return home


def test_the_guide_has_the_steps_an_operator_needs() -> None:
    tools = [c[0] for c in commands()]
    assert {"git", "ansible-inventory", "ansible-vault", "ansible-playbook"} <= set(tools)
    playbooks = [next(a for a in c[1:] if a.endswith(".yml") and a != c[c.index("-i") + 1])
                 for c in commands() if c[0] == "ansible-playbook"]
    assert playbooks == ["playbooks/preflight.yml", "spec-ab.yml", "spec-ab.yml", "playbooks/rollback.yml",
                         "playbooks/promote.yml", "playbooks/spec_watch.yml"]


def test_the_example_inventory_parses_with_its_families_and_vault(home: Path) -> None:
    proc = run([str(BIN / "ansible-inventory"), "-i", str(home / "fleet" / "hosts.yml"), "--list",
                "--vault-password-file", str(home / "vault-pass")], clean_env(home))
    inventory = yaml.safe_load(proc.stdout)
    families = sorted(g for g in inventory["all"]["children"] + inventory["llm_servers"]["children"]
                      if g.startswith("gpu_"))
    assert families == ["gpu_gfx1151", "gpu_sm89"]
    hostvars = inventory["_meta"]["hostvars"]
    assert set(hostvars) == {"gpu-box-1", "gpu-box-2", "halo-1"}
    box = hostvars[GUIDE_HOST]
    assert box["ansible_host"] == "192.0.2.11" and box["ansible_become_password"] == "{{ vault_become_password }}"
    assert box["vault_become_password"] == "change-me"  # decrypted from the vault made in step 2
    assert box["specdec_configs"][0]["name"] == "baseline"


def test_every_playbook_command_is_accepted(home: Path) -> None:
    for argv in (c for c in commands() if c[0] == "ansible-playbook"):
        assert argv[argv.index("-i") + 1] == GUIDE_INVENTORY and argv[argv.index("-l") + 1] == GUIDE_HOST, argv
        args = [a.replace("~", str(home)) for a in argv[1:] if a != "--ask-vault-pass"]
        run([str(BIN / "ansible-playbook"), *args, "--vault-password-file", str(home / "vault-pass"),
             "--syntax-check"], clean_env(home))


def test_the_read_only_steps_run_against_the_demo_host(tmp_path: Path) -> None:
    """Steps 3 and 4 as written, on the demo host (the controller itself) instead of gpu-box-1."""
    cache = tmp_path / "cache"
    write_standard_set(cache / "demo-models")
    env = clean_env(tmp_path, LLMFLEET_CACHE=str(cache))
    read_only = [c for c in commands() if c[0] == "ansible-playbook"
                 and ("playbooks/preflight.yml" in c or "--check" in c)]
    assert len(read_only) == 2
    for argv in read_only:
        args = [a for a in argv[1:] if a != "--ask-vault-pass"]
        args[args.index("-i") + 1] = str(ROOT / "inventory" / "hosts.yml")
        args[args.index("-l") + 1] = "specdec-demo"
        proc = run([str(BIN / "ansible-playbook"), *args, "-e", "ansible_become=false",
                    "-e", f"specdec_state_dir={tmp_path / 'state'}", "-e", f"spec_ab_results_dir={tmp_path / 'r'}"],
                   env, ok=False)
        if "--check" in args:
            # the demo host is this machine, whose PID 1 is not systemd: the dry run fails as the real run would
            assert proc.returncode == 2, proc.stdout[-3000:]
            assert "preflight table" in proc.stdout and "time plan on this box" in proc.stdout
            assert_one_line_failure(proc.stdout, "this host does not run systemd")
        else:
            assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
            assert "llama.cpp build:" in proc.stdout
    assert not (tmp_path / "state").exists() and not (tmp_path / "r").exists()


def assert_one_line_failure(stdout: str, *expected: str) -> str:
    """The run failed once, as the operator reads it: one failed task, its message one line naming the input
    and the fix, without Ansible's wrapping, and nothing changed (the recap's changed=0)."""
    fatal = [line for line in stdout.splitlines() if line.startswith("fatal: ")]
    assert len(fatal) == 1, stdout[-4000:]
    said = fatal[0].split("FAILED! => ", 1)[1]
    # the collection's callback (ansible.cfg) prints a stop's message as it is, once: no [ERROR] summary above it
    assert not said.startswith("{"), fatal[0]
    msg = said
    assert "\n" not in msg and "Finalization of task args" not in msg and "plugin" not in msg, msg
    assert stdout.count(msg) == 1, msg
    for text in expected:
        assert text in msg, msg
    assert re.search(r"changed=0 .*failed=1", stdout), stdout[-1000:]
    return msg


SHOW_NOT_FOUND = "\\n".join(["LoadState=not-found", "FragmentPath=", "DropInPaths=", "ExecStart=",
                             "NeedDaemonReload=no", "MainPID=0", "ActiveState=inactive", "Type=simple"])
FAKE_SYSTEMCTL = f"""#!/bin/sh
# systemd with no such unit: what `systemctl show` says for a unit it has not loaded
case "$1" in show) printf '{SHOW_NOT_FOUND}\\n';; esac
"""


def dry_run(tmp_path: Path, *extra: str, fake_systemctl: bool = False) -> subprocess.CompletedProcess:
    """spec-ab.yml --check on the demo host (this machine), with a systemctl that knows no unit if asked."""
    cache = tmp_path / "cache"
    if not (cache / "demo-models").exists():
        write_standard_set(cache / "demo-models")
    env = clean_env(tmp_path, LLMFLEET_CACHE=str(cache))
    if fake_systemctl:
        fake = tmp_path / "fakebin"
        fake.mkdir(exist_ok=True)
        (fake / "systemctl").write_text(FAKE_SYSTEMCTL)
        (fake / "systemctl").chmod(0o755)
        env["PATH"] = f"{fake}:{env['PATH']}"
    return run([str(BIN / "ansible-playbook"), "spec-ab.yml", "-i", str(ROOT / "inventory" / "hosts.yml"),
                "-l", "specdec-demo", "--check", "-e", "ansible_become=false",
                "-e", f"specdec_state_dir={tmp_path / 'state'}", "-e", f"spec_ab_results_dir={tmp_path / 'r'}",
                *extra], env, ok=False)


def test_the_dry_run_fails_where_the_real_run_would(tmp_path: Path) -> None:
    """No systemd on the host, no unit, a misspelt specdec_unit: --check fails with serving_unit_info's reason,
    one line naming the input and the fix, under the dry run's own task name, and nothing reports changed."""
    proc = dry_run(tmp_path)
    assert "This host's dry run failed (check mode" in proc.stdout
    assert_one_line_failure(proc.stdout, "llama-server.service (specdec_unit)", "does not run systemd", "-l")
    proc = dry_run(tmp_path, fake_systemctl=True)
    assert_one_line_failure(proc.stdout, "llama-server.service (specdec_unit)", "systemd has no unit",
                            "name the right one in specdec_unit")
    proc = dry_run(tmp_path, "-e", "specdec_unit=llama-servr", fake_systemctl=True)
    assert_one_line_failure(proc.stdout, "llama-servr.service (specdec_unit)", "systemd has no unit",
                            "name the right one in specdec_unit")
    assert not (tmp_path / "state").exists() and not (tmp_path / "r").exists()


def _known_names() -> str:
    places = [*ROOT.glob("roles/*/defaults/main.yml"), *ROOT.glob("roles/*/meta/argument_specs.yml"),
              *ROOT.glob("playbooks/**/*.yml"), *EXAMPLE.rglob("*.yml*")]
    return "\n".join(p.read_text() for p in places)


def test_every_variable_and_file_the_guide_names_exists() -> None:
    text = GUIDE.read_text()
    names = set(re.findall(r"`((?:specdec|spec_ab|spec_preflight|vault|ansible)_[a-z0-9_]+)`", text))
    assert {"spec_ab_budget_minutes", "specdec_configs", "vault_become_password"} <= names
    known = _known_names()
    missing = sorted(n for n in names if not re.search(rf"\b{n}\b", known) and n not in ("ansible_user",))
    assert missing == [], f"the guide names variables the collection does not have: {missing}"
    for path in set(re.findall(r"`((?:examples|playbooks|roles)/[A-Za-z0-9_./-]+)`", text)):
        assert (ROOT / path).exists(), path
    for argv in commands():
        for arg in argv:
            if arg.startswith(("playbooks/", "examples/")) or arg == "spec-ab.yml":
                assert (ROOT / arg).exists(), arg


@pytest.mark.parametrize(("extra", "expected"), [
    # a config the role cannot read (no baseline among them)
    ('{"specdec_configs": [{"name": "draft", "env": {}}]}',
     ["specdec_configs: no config named 'baseline'", "fix it in the inventory"]),
    # a traffic file that is not there
    ('{"specdec_ab_traffic": [{"name": "chat", "file": "/nonexistent/chat.jsonl"}]}',
     ["spec_ab_traffic names /nonexistent/chat.jsonl, not a file on the controller", "inventory_dir"]),
    # a variable out of its range
    ('{"specdec_ab_batch": 0}', ["specdec_ab_batch=0 is not valid", "Fix it where it is set"]),
], ids=["bad-config", "bad-traffic-file", "bad-variable"])
def test_an_operator_error_ends_the_run_in_one_line_once(tmp_path: Path, extra: str, expected: list[str]) -> None:
    """The inputs an operator gets wrong most: the run ends with one failed task whose message names the input and
    the fix, without Ansible's set_fact/filter wrapping in front of it, shown once."""
    proc = dry_run(tmp_path, "-e", extra)
    assert "Finalization of task args" not in proc.stdout + proc.stderr
    assert_one_line_failure(proc.stdout, *expected)


def test_one_unreadable_candidate_is_refused_and_the_others_planned(tmp_path: Path) -> None:
    """A draft that is not there refuses that one config, with its reason in the table; the baseline and the other
    candidate are still judged and planned (the run then stops only for the host's own reason: no systemd here)."""
    configs = {"specdec_configs": [
        {"name": "baseline", "env": {}},
        {"name": "ngram-mod", "env": {"LLAMA_ARG_SPEC_TYPE": "ngram-mod"}},
        {"name": "missing-draft", "env": {"LLAMA_ARG_SPEC_TYPE": "draft-simple",
                                          "LLAMA_ARG_SPEC_DRAFT_MODEL": "/nonexistent/draft.gguf"}}]}
    proc = dry_run(tmp_path, "-e", json.dumps(configs))
    # the tables print as plain lines (the collection's callback): a row starts its line
    lines = [line.strip() for line in proc.stdout.splitlines()]
    assert any(line.startswith("missing-draft | ERROR: draft (the config's --spec-draft-model)=/nonexistent/draft.gguf: "
                               "no such file") for line in lines), proc.stdout[-3000:]
    plan = proc.stdout.split("TASK [llmfleet.specdec.spec_ab : The time plan")[1].split("TASK [")[0]
    assert "\n      baseline: " in plan and "\n      ngram-mod: " in plan and "missing-draft" not in plan, plan
    assert_one_line_failure(proc.stdout, "does not run systemd")


def test_a_new_operators_local_host_with_no_unit_and_no_base_env(tmp_path: Path) -> None:
    """An inline inventory, a local host with no unit, no systemd and no production env: the dry run's one line is
    serving_unit_info's reason (why there was no production to judge against), once, and nothing changed."""
    env = clean_env(tmp_path)
    configs = {"specdec_configs": [{"name": "baseline", "env": {}},
                                   {"name": "ngram-mod", "env": {"LLAMA_ARG_SPEC_TYPE": "ngram-mod"}}]}
    proc = run([str(BIN / "ansible-playbook"), "spec-ab.yml", "-i", "localbox,", "-l", "localbox", "--check",
                "-e", "ansible_connection=local", "-e", f"ansible_python_interpreter={sys.executable}",
                "-e", "specdec_cpu_only=true", "-e", "ansible_become=false", "-e", json.dumps(configs),
                "-e", f"specdec_state_dir={tmp_path / 'state'}", "-e", f"spec_ab_results_dir={tmp_path / 'r'}"],
               env, ok=False)
    assert proc.returncode == 2, proc.stdout[-3000:]
    assert "production: none - no live unit read" in proc.stdout  # the table says so, not 'inventory'
    assert_one_line_failure(proc.stdout, "localbox: llama-server.service (specdec_unit): this host does not run "
                                         "systemd")
    assert "localbox: localbox:" not in proc.stdout
    assert not (tmp_path / "state").exists() and not (tmp_path / "r").exists()
