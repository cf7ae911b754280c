"""The flag table per build against the real llama-server: its --help read back as the pinned table, and what the
table refuses is what the binary itself refuses.
"""
from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Dict

import pytest

from ansible_collections.llmfleet.specdec.plugins.module_utils.build import _build_help as bh
from ansible_collections.llmfleet.specdec.plugins.module_utils.llamacpp import _flags
from ansible_collections.llmfleet.specdec.plugins.module_utils.llamacpp._flags_table import REMOVED
from ansible_collections.llmfleet.specdec.plugins.module_utils.llamacpp._llamacpp import SPEC_TYPES
from testbed.server import LlamaServer

pytestmark = pytest.mark.integration

SPEC_ARGS = ["--spec-type", "draft-simple", "--spec-draft-n-max", "3"]


# ------------------------------------------------------------------ the flag table of the real binary


def test_the_real_help_is_the_pinned_flag_table(llama_server_bin: str) -> None:
    """Every server option of the pinned table is read back from the binary's --help with its env name, the
    --spec-type vocabulary is the pinned one, and the removed flags come with arg.cpp's advice."""
    text = subprocess.run([llama_server_bin, "--help"], capture_output=True, text=True, timeout=60, check=True).stdout
    table = bh.help_table(text)
    assert table["spec_types"] == list(SPEC_TYPES)
    for option in _flags.OPTIONS:
        if option.canonical in REMOVED:
            # the help's advice, worded as arg.cpp's error (the help of one adds an alternative); never a known flag
            assert all(table["removed"].get(n, "-").startswith(REMOVED[option.canonical]) for n in option.names)
            assert not set(option.names) & set(table["flags"]), option.names
            continue
        assert set(option.names) | set(option.neg) <= set(table["flags"]), option.names
        if option.env:
            assert option.env in table["envs"], option.env
    # production's own command line passes; the names the field notes renamed are refused with the rename
    argv = [llama_server_bin, "-m", "/m/t.gguf", "-md", "/m/d.gguf", *SPEC_ARGS, "--metrics", "-np", "1"]
    assert bh.refusals(table, argv, {"LLAMA_ARG_CTX_SIZE": "4096"}) == []
    assert "renamed, use --spec-type draft-mtp" in bh.refusals(table, [llama_server_bin, "--spec-type", "mtp"], {})[0]
    why = bh.refusals(table, [llama_server_bin, "--draft-max", "4"], {})
    assert why == ["flag --draft-max is removed in it (llama-server exits 1 on it): use --spec-draft-n-max or "
                   "--spec-ngram-mod-n-max"]


def test_the_real_binary_exits_on_what_the_flag_table_refuses(llama_server_bin: str, standard_models: Dict[str, Path],
                                                              tmp_path: Path) -> None:
    """The refusal is the server's own behaviour: `--spec-type mtp` makes the pinned binary exit 1 before loading."""
    server = LlamaServer(standard_models["target.gguf"], binary=llama_server_bin, log_dir=tmp_path,
                         args=["--spec-type", "mtp"])
    assert server.wait_exit(60) == 1
