"""PEP 440 ordering for the version gates (vLLM's minimum per method, the build toolkit's minimums)."""
from __future__ import annotations

import pytest

from ansible_collections.llmfleet.specdec.plugins.module_utils.build import _build as build
from ansible_collections.llmfleet.specdec.plugins.module_utils.common._version import Version, parse, search

# Each list is in ascending PEP 440 order (the order packaging.version sorts them in).
ORDERED = ["0.20.0", "0.20.1.dev1", "0.20.1.dev42", "0.20.1a1", "0.20.1a2.dev1", "0.20.1a2", "0.20.1b1",
           "0.20.1rc1.dev3", "0.20.1rc1", "0.20.1rc2", "0.20.1", "0.20.1+cpu", "0.20.1.post1.dev2",
           "0.20.1.post1", "0.20.1.post2", "0.20.2.dev1", "0.20.2", "0.21.0rc1", "0.21.0", "1!0.1"]


def test_versions_sort_as_pep_440_says() -> None:
    parsed = [parse(v) for v in ORDERED]
    assert sorted(parsed, key=Version.key) == parsed
    for low, high in zip(parsed, parsed[1:]):
        assert low < high and high > low and low != high, (low, high)


@pytest.mark.parametrize("text", ["0.20.1rc1", "0.20.1.dev42", "0.20.1a1", "0.20.1b3", "0.20.1c1", "0.20.1-rc.1",
                                  "0.20.1.pre1", "0.20.1preview2", "0.20.1.dev3+gabc", "v0.20.1alpha1"])
def test_pre_and_dev_releases_do_not_pass_a_gate_at_the_release(text: str) -> None:
    assert parse(text) < (0, 20, 1)
    assert not parse(text) >= parse("0.20.1")


@pytest.mark.parametrize("a, b", [("1.0", "1.0.0"), ("1.0rc1", "1.0.0-RC1"), ("1.0.post0", "1.0-0"),
                                  ("1.0.dev0", "1.0.dev"), ("v1.0", "1.0"), ("1.0a", "1.0alpha0")])
def test_spellings_normalise(a: str, b: str) -> None:
    assert parse(a) == parse(b)


@pytest.mark.parametrize("bad", ["", "latest", "0.20.1-foo", "1..2", "main"])
def test_what_is_not_a_version_is_refused_by_name(bad: str) -> None:
    with pytest.raises(ValueError, match="is not a PEP 440 version"):
        parse(bad)


@pytest.mark.parametrize("output, found", [
    ("cmake version 3.28.0-rc1\n\nCMake suite maintained", "3.28.0rc1"),
    ("cmake version 3.25.1", "3.25.1"),
    ("g++ (Debian 12.2.0-14+deb12u1) 12.2.0", "12.2.0"),
    ("HIP version: 6.2.41133-dd7f95766", "6.2.41133"),
    ("release 12", None),
])
def test_search_reads_a_tools_output(output: str, found: str | None) -> None:
    version = search(output)
    assert (str(version) if version else None) == found


def test_a_release_candidate_cmake_does_not_pass_the_cmake_gate() -> None:
    # CUDA builds need cmake 3.18: 3.18.0-rc1 is older than that, 3.18.0 is not.
    rc = build.parse_cmake_version("cmake version 3.18.0-rc1")
    assert rc == "3.18.0rc1"
    problems = build._need_version({"path": "/usr/bin/cmake", "version": rc}, "cmake", "cmake", (3, 18), "CUDA")
    assert problems and "cmake 3.18.0rc1 at /usr/bin/cmake is older than 3.18" in problems[0]["problem"]
    assert build._need_version({"path": "/usr/bin/cmake", "version": "3.18.0"}, "cmake", "cmake", (3, 18), "CUDA") == []
