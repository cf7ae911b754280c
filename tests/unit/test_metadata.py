# The collection's metadata says true things: where it lives, one version, the ansible-core it needs, the platforms
# its Molecule hosts run, and an author ansible-doc can render.
from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
GALAXY = yaml.safe_load((ROOT / "galaxy.yml").read_text())
REPOSITORY = "https://github.com/llmfleet/specdec"
# ansible-test validate-modules' rule for an author line (validate_modules/schema.py, author_line), less the
# "!UNKNOWN" escape it also accepts: that one renders as (!UNKNOWN) in ansible-doc.
AUTHOR_LINE = re.compile(r"^\w.*\(@([\w-]+)\)$")


def test_galaxy_points_at_the_repository_its_issues_and_docs() -> None:
    assert GALAXY["repository"] == REPOSITORY
    assert GALAXY["homepage"] == REPOSITORY
    assert GALAXY["issues"] == REPOSITORY + "/issues"
    assert GALAXY["documentation"] == REPOSITORY + "/tree/main/docs"
    assert isinstance(GALAXY["authors"], list) and GALAXY["authors"]
    assert not any("example.invalid" in str(GALAXY[k]) for k in ("repository", "homepage", "issues", "documentation"))


def test_the_execution_environment_is_tagged_with_the_collections_version() -> None:
    text = (ROOT / "execution-environment" / "execution-environment.yml").read_text()
    tags = yaml.safe_load(text)["options"]["tags"]
    assert tags == [f"llmfleet-specdec-ee:{GALAXY['version']}"]
    # the build command in its header comment builds the same tag
    assert f"-t llmfleet-specdec-ee:{GALAXY['version']}" in text
    awx = (ROOT / "playbooks" / "awx_setup.yml").read_text()
    assert f"specdec-ee:{GALAXY['version']}" in awx


def _requires_ansible() -> str:
    runtime = yaml.safe_load((ROOT / "meta" / "runtime.yml").read_text())
    found = re.fullmatch(r">=\s*(\d+\.\d+)(?:\.\d+)?", runtime["requires_ansible"])
    assert found, runtime["requires_ansible"]
    return found.group(1)


@pytest.mark.parametrize("meta", sorted(ROOT.glob("roles/*/meta/main.yml")), ids=lambda p: p.parts[-3])
def test_role_meta_says_what_the_collection_needs_and_is_tested_on(meta: Path) -> None:
    info = yaml.safe_load(meta.read_text())["galaxy_info"]
    assert info["min_ansible_version"] == _requires_ansible()
    # The Molecule hosts are Debian bookworm (tests/testbed/build_host_image.sh); nothing else is claimed.
    assert info["platforms"] == [{"name": "Debian", "versions": ["bookworm"]}]


def test_the_molecule_host_image_is_debian_bookworm() -> None:
    assert re.search(r"^suite=bookworm$", (ROOT / "tests" / "testbed" / "build_host_image.sh").read_text(), re.M)


def _doc_authors(path: Path) -> list[str]:
    text = path.read_text()
    if path.suffix == ".py":
        text = re.search(r'^DOCUMENTATION = r?"""(.*?)"""', text, re.S | re.M).group(1)
        return yaml.safe_load(text)["author"]
    return yaml.safe_load(text)["DOCUMENTATION"]["author"]


PLUGIN_DOCS = sorted([*ROOT.glob("plugins/modules/*.py"), *ROOT.glob("plugins/filter/*.yml")])


@pytest.mark.parametrize("path", PLUGIN_DOCS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_every_plugin_names_an_author_ansible_doc_renders(path: Path) -> None:
    authors = _doc_authors(path)
    authors = authors if isinstance(authors, list) else [authors]
    assert authors
    for author in authors:
        assert "UNKNOWN" not in author
        assert AUTHOR_LINE.match(author), author
