"""The collection as its users get it: a plain clone, the built tarball and the git repository installed.

Each test starts from what is committed (a fresh ``git clone`` of this repository), runs the venv's own
``ansible-playbook`` and ``ansible-galaxy`` with no ``make``, no ``.build/`` link and no ANSIBLE_* variable
from the calling shell, and runs a real play against the demo host (the controller itself).
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from testbed.models import write_standard_set

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
PLAYBOOKS = sorted(p.name for p in (ROOT / "playbooks").glob("*.yml"))


def clean_env(cache: Path, **extra: str) -> dict[str, str]:
    """The environment of a new user's shell: the venv on PATH, nothing of ansible's set."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANSIBLE_", "MOLECULE_", "LLMFLEET_"))}
    env.update(PATH=f"{BIN}:/usr/bin:/bin", HOME=str(cache / "home"), ANSIBLE_NOCOLOR="1",
               ANSIBLE_LOCAL_TEMP=str(cache / "tmp"), **extra)
    (cache / "home").mkdir(exist_ok=True)
    return env


def run(args: list[str], cwd: Path, env: dict[str, str], timeout: int = 300) -> subprocess.CompletedProcess:
    proc = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False)
    assert proc.returncode == 0, f"{args}\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
    return proc


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A cache directory with the demo models, as ~/.cache/llmfleet-specdec of the user's HOME."""
    home_cache = tmp_path_factory.mktemp("user") / "home" / ".cache" / "llmfleet-specdec"
    write_standard_set(home_cache / "demo-models")
    return home_cache.parents[2]


@pytest.fixture(scope="module")
def clone(tmp_path_factory: pytest.TempPathFactory) -> Path:
    dest = tmp_path_factory.mktemp("clone") / "specdec"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(dest)], check=True, capture_output=True)
    assert not (dest / ".build").exists()
    return dest


@pytest.fixture(scope="module")
def tarball(clone: Path, cache: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    run([str(BIN / "ansible-galaxy"), "collection", "build", "--output-path", str(out)], clone, clean_env(cache))
    return next(out.glob("llmfleet-specdec-*.tar.gz"))


def demo_inventory(where: Path) -> Path:
    """A user's own inventory outside any repository, holding the demo host as the repository ships it."""
    (where / "host_vars").mkdir(parents=True, exist_ok=True)
    shutil.copy(ROOT / "inventory" / "host_vars" / "specdec-demo.yml", where / "host_vars")
    (where / "hosts.yml").write_text(
        "all:\n  children:\n    demo:\n      hosts:\n        specdec-demo:\n"
        "          ansible_connection: local\n"
        "          ansible_python_interpreter: '{{ ansible_playbook_python }}'\n")
    return where / "hosts.yml"


def preflight_verdicts(stdout: str) -> dict[str, dict]:
    out = json.loads(stdout)
    return {r["name"]: r for r in out["global_custom_stats"]["specdec_preflight"]["specdec-demo"]}


def test_plain_clone_resolves_every_playbook(clone: Path, cache: Path) -> None:
    # one ansible-playbook checks them all, in turn (it names the one that fails)
    playbooks = ["spec-ab.yml", *(f"playbooks/{p}" for p in PLAYBOOKS)]
    proc = run([str(BIN / "ansible-playbook"), "--syntax-check", *playbooks, "-l", "specdec-demo"], clone,
               clean_env(cache))
    assert "ERROR" not in proc.stderr
    assert re.findall(r"(?m)^playbook: (\S+)$", proc.stdout) == playbooks, proc.stdout


def test_plain_clone_runs_the_demo_and_the_preflight(clone: Path, cache: Path) -> None:
    env = clean_env(cache, ANSIBLE_STDOUT_CALLBACK="ansible.builtin.json", ANSIBLE_SHOW_CUSTOM_STATS="1")
    inspect = json.loads(run([str(BIN / "ansible-playbook"), "playbooks/demo_inspect.yml", "-l", "specdec-demo"],
                             clone, env).stdout)
    assert inspect["stats"]["specdec-demo"]["failures"] == 0
    proc = run([str(BIN / "ansible-playbook"), "playbooks/preflight.yml", "-l", "specdec-demo"], clone, env)
    verdicts = preflight_verdicts(proc.stdout)
    assert verdicts["mtp-old-name"]["legal"] is False
    assert verdicts["draft-n3+ngram-mod"]["effective_chain"] == ["ngram-mod", "draft-simple"]


def test_tarball_leaves_the_link_out(tarball: Path) -> None:
    with tarfile.open(tarball) as tar:
        names = tar.getnames()
    assert "galaxy.yml" not in names and "MANIFEST.json" in names
    assert "roles/spec_ab/tasks/main.yml" in names and "playbooks/spec_ab.yml" in names
    assert not [n for n in names if n == "collections" or n.startswith("collections/")]


def test_installed_tarball_runs_playbooks_by_fqcn(tarball: Path, cache: Path, tmp_path: Path) -> None:
    coll = tmp_path / "collections"
    env = clean_env(cache, ANSIBLE_COLLECTIONS_PATH=str(coll))
    run([str(BIN / "ansible-galaxy"), "collection", "install", "-p", str(coll), str(tarball)], tmp_path, env)
    inventory = demo_inventory(tmp_path / "inventory")
    # Away from any checkout: nothing may come from a repository-relative path.
    work = tmp_path / "work"
    work.mkdir()
    fqcns = [f"llmfleet.specdec.{name}" for name in ("spec_ab", "promote", "rollback", "report_partial", "deploy", "build")]
    checked = run([str(BIN / "ansible-playbook"), "-i", str(inventory), "--syntax-check", *fqcns, "-l", "specdec-demo"],
                  work, env)
    assert len(re.findall(r"(?m)^playbook: ", checked.stdout)) == len(fqcns), checked.stdout
    env.update(ANSIBLE_STDOUT_CALLBACK="ansible.builtin.json", ANSIBLE_SHOW_CUSTOM_STATS="1")
    proc = run([str(BIN / "ansible-playbook"), "-i", str(inventory), "llmfleet.specdec.preflight",
                "-l", "specdec-demo"], work, env)
    assert preflight_verdicts(proc.stdout)["draft-without-type"]["silent_off"][0]["code"] == "draft-without-type"
    inspect = json.loads(run([str(BIN / "ansible-playbook"), "-i", str(inventory), "llmfleet.specdec.demo_inspect",
                              "-l", "specdec-demo"], work, env).stdout)
    assert inspect["stats"]["specdec-demo"]["failures"] == 0


def test_installed_from_git_runs_by_fqcn(clone: Path, cache: Path, tmp_path: Path) -> None:
    coll = tmp_path / "collections"
    env = clean_env(cache, ANSIBLE_COLLECTIONS_PATH=str(coll))
    run([str(BIN / "ansible-galaxy"), "collection", "install", "-p", str(coll), f"git+file://{clone}"], tmp_path, env)
    installed = coll / "ansible_collections" / "llmfleet" / "specdec"
    manifest = json.loads((installed / "MANIFEST.json").read_text())
    assert manifest["collection_info"]["name"] == "specdec"
    assert not (installed / "collections").exists()
    inventory = demo_inventory(tmp_path / "inventory")
    env.update(ANSIBLE_STDOUT_CALLBACK="ansible.builtin.json", ANSIBLE_SHOW_CUSTOM_STATS="1")
    proc = run([str(BIN / "ansible-playbook"), "-i", str(inventory), "llmfleet.specdec.preflight",
                "-l", "specdec-demo"], tmp_path, env)
    assert preflight_verdicts(proc.stdout)["mtp-old-name"]["legal"] is False
