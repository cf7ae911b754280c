# The test bed's regressed llama-server (tests/testbed/build_llama_server_regressed.sh) is the first build with one
# source change: the same -D list, its own prefix and work dir (never the first build's), the change it documents.
from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FIRST = ROOT / "tests" / "testbed" / "build_llama_server.sh"
REGRESSED = ROOT / "tests" / "testbed" / "build_llama_server_regressed.sh"


def _defines(text: str) -> list[str]:
    configure = re.search(r'^\s*cmake -S .*?(?<!\\)\n', text, re.S | re.M).group(0).replace("\\\n", " ")
    return [a for a in shlex.split(configure) if a.startswith("-D")]


def test_the_same_cmake_defines_as_the_first_build() -> None:
    assert _defines(REGRESSED.read_text()) == _defines(FIRST.read_text())


def test_its_own_prefix_and_work_dir_and_the_first_builds_tree_only_under_a_private_mount() -> None:
    text = REGRESSED.read_text()
    assert re.search(r'^prefix="\$cache/llama-server-\$version-regressed"$', text, re.M)
    assert re.search(r'^work="\$cache/llamacpp-build-regressed"$', text, re.M)
    # the first build's work dir is reached only inside `unshare -m` (a bind mount nobody else sees)
    assert 'unshare -m --propagation private bash' in text and 'mount --bind "$0" "$1"' in text


CHANGE = ROOT / "tests" / "testbed" / "regress_sampling.py"


def test_the_change_caps_the_verifier_at_two_drafted_tokens_per_round(tmp_path: Path) -> None:
    # the build runs the one script that holds the change (molecule/build applies the same script on real systemd)
    assert "regress_sampling.py" in REGRESSED.read_text()
    text = CHANGE.read_text()
    assert "common_sampler_sample_and_accept_n" in text and "if (i + 1 > 2) {" in text
    sampling = tmp_path / "common" / "sampling.cpp"
    sampling.parent.mkdir()
    loop = ("    for (size_t i = 0; i < draft.size(); i++) {\n"
            "        if (draft[i] != id || (llama_vocab_is_eog(vocab, id) && i + 1 < draft.size())) {\n"
            "            break;\n        }\n    }\n")
    sampling.write_text(loop)
    run = [sys.executable, str(CHANGE), str(tmp_path)]
    subprocess.run(run, check=True, capture_output=True)
    assert "if (i + 1 > 2) {" in sampling.read_text()
    subprocess.run(run, check=True, capture_output=True)  # twice changes nothing
    assert sampling.read_text().count("if (i + 1 > 2) {") == 1
    subprocess.run([*run, "--undo"], check=True, capture_output=True)
    assert sampling.read_text() == loop
    # a tree where the loop moved fails instead of building unchanged
    sampling.write_text("int main() { return 0; }\n")
    moved = subprocess.run(run, capture_output=True, text=True, check=False)
    assert moved.returncode != 0 and "is not where this script expects it" in moved.stderr
