# The test bed's llama-server build (tests/testbed/build_llama_server.sh) compiles exactly what role llamacpp_build
# compiles in molecule/build, so that the container build finds its objects in the shared compiler cache: the same
# -D list, the same layout under the work dir, CCACHE_BASEDIR at the work dir.
from __future__ import annotations

import re
import shlex
from pathlib import Path

import yaml

from ansible_collections.llmfleet.specdec.plugins.module_utils.build import _build as build

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "tests" / "testbed" / "build_llama_server.sh"
VARS = ROOT / "molecule" / "build" / "vars.yml"
DEFAULTS = ROOT / "roles" / "llamacpp_build" / "defaults" / "main.yml"


def _script_cmake() -> tuple[list[str], str]:
    text = SCRIPT.read_text()
    configure = re.search(r'^cmake -S .*?(?<!\\)\n', text, re.S | re.M).group(0).replace("\\\n", " ")
    argv = shlex.split(configure)
    return [a for a in argv if a.startswith("-D")], text


def _role_plan(work: str, version: str) -> dict:
    mvars = yaml.safe_load(VARS.read_text())
    defaults = yaml.safe_load(DEFAULTS.read_text())
    return build.plan({
        "version": mvars["specdec_build_v1"], "backend": mvars["llamacpp_build_backend"],
        "root": "/opt/llama.cpp", "work_dir": work,
        "source": {"kind": "archive", "archive": f"/x/llama_cpp_python-{version}.tar.gz",
                   "subdir": mvars["llamacpp_build_archive_subdir"]},
        "jobs": mvars["llamacpp_build_jobs"], "ccache": defaults["llamacpp_build_ccache"],
        "ccache_dir": mvars["llamacpp_build_ccache_dir"], "native": defaults["llamacpp_build_native"],
        "shared_libs": defaults["llamacpp_build_shared_libs"], "openssl": defaults["llamacpp_build_openssl"],
        "commit": mvars["llamacpp_build_commit"],
    })


def test_same_defines_as_the_role_but_the_version_stamp():
    defines, _text = _script_cmake()
    plan = _role_plan("/w", "0.3.36")
    # The build number and commit only reach the generated build-info source (CMakeLists.txt: LLAMA_BUILD_NUMBER,
    # LLAMA_BUILD_COMMIT), so the test bed keeps llama.cpp's own stamp and every other object is shared.
    role = [d for d in plan["defines"] if not d.startswith(("-DLLAMA_BUILD_NUMBER=", "-DLLAMA_BUILD_COMMIT="))]
    assert defines == role


def test_same_layout_under_the_work_dir():
    _defines, text = _script_cmake()
    mvars = yaml.safe_load(VARS.read_text())
    version = mvars["specdec_build_v1"].removeprefix("sdist-")
    plan = _role_plan("/w", version)
    # The script's paths, with its variables put in: <work>/src/..., <work>/build-...
    script_src = re.search(r'^bsrc="\$work/(.*)"$', text, re.M).group(1).replace("$version", version)
    script_build = re.search(r'^build="\$work/(.*)"$', text, re.M).group(1).replace("$version", version)
    assert "/w/" + script_src == plan["src_dir"]
    assert "/w/" + script_build == plan["build_dir"]
    assert '-S "$bsrc/vendor/llama.cpp"' in text and plan["cmake_src"] == plan["src_dir"] + "/vendor/llama.cpp"
    # Both relativise paths at the work dir, which is what makes the two builds' compiler command lines equal.
    assert plan["env"]["CCACHE_BASEDIR"] == "/w"
    assert re.search(r'CCACHE_BASEDIR="\$work"', text)
    # ccache hashes the locale variables: both builds set the same values.
    exported = dict(re.findall(r'\b(LANG|LC_[A-Z]+)=(\S+)', re.search(r'^export CCACHE_DIR=.*$', text, re.M).group(0)))
    assert exported == {name: plan["env"][name] for name in build.CCACHE_LOCALE}
    assert plan["build"][plan["build"].index("--target") + 1:][0] == "llama-server"
    assert "--target llama-server" in text
