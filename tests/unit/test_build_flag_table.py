"""The flag table per build: a new llama.cpp build's --help against what production runs, before any canary starts
(build/_build_help), with the rename the lint's table knows; and the activation that refuses such a build and changes
nothing. The host is test_activate's simulated one; the real binary's --help is read in
tests/integration/test_build_flag_table_server.py.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Sequence, Tuple

import pytest
from test_activate import UNIT, Host, _activation, _params

from ansible_collections.llmfleet.specdec.plugins.module_utils.build import _activate as act
from ansible_collections.llmfleet.specdec.plugins.module_utils.build import _build_help as bh
from ansible_collections.llmfleet.specdec.plugins.module_utils.lint._lint_rules import spec_type_rename
from ansible_collections.llmfleet.specdec.plugins.module_utils.llamacpp._llamacpp import SPEC_TYPES

# The layout of common_arg::to_string (common/arg.cpp): names, value hint, help from column 40, "(env: ...)".
HELP_NEW = """----- common params -----

-h,    --help, --usage                  print usage and exit
-m,    --model FNAME                    model path to load
                                        (env: LLAMA_ARG_MODEL)
--port PORT                             port to listen (default: 8080)
                                        (env: LLAMA_ARG_PORT)
--spec-draft-model, -md, --model-draft FNAME
                                        draft model for speculative decoding (default: unused)
                                        (env: LLAMA_ARG_SPEC_DRAFT_MODEL)
--spec-type """ + ",".join(SPEC_TYPES) + """
                                        comma-separated list of types of speculative decoding to use
                                        (default: none)
                                        (env: LLAMA_ARG_SPEC_TYPE)
--spec-draft-n-max N                    number of tokens to draft (default: 3)
                                        (env: LLAMA_ARG_SPEC_DRAFT_N_MAX)
--draft, --draft-n, --draft-max N      the argument has been removed. use --spec-draft-n-max or
                                        --spec-ngram-mod-n-max
                                        (env: LLAMA_ARG_DRAFT_MAX)
--metrics                               enable prometheus compatible metrics endpoint (default:
                                        disabled)
                                        (env: LLAMA_ARG_ENDPOINT_METRICS)
"""


def _help(drop_flags: Sequence[str] = (), drop_env: Sequence[str] = (), types: str | None = None) -> str:
    lines = []
    for line in HELP_NEW.splitlines():
        if any(line.startswith(flag + " ") for flag in drop_flags) or any(f"(env: {e})" in line for e in drop_env):
            continue
        if types is not None and line.startswith("--spec-type "):
            line = "--spec-type " + types
        lines.append(line)
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------ the flag table


def test_help_table_reads_names_env_names_and_the_spec_type_vocabulary() -> None:
    table = bh.help_table(HELP_NEW)
    assert {"-m", "--model", "-md", "--model-draft", "--spec-draft-model", "--spec-type", "--metrics"} <= set(table["flags"])
    assert "FNAME" not in table["flags"] and "none,draft-simple" not in " ".join(table["flags"])
    assert "LLAMA_ARG_SPEC_TYPE" in table["envs"] and "LLAMA_ARG_ENDPOINT_METRICS" in table["envs"]
    assert table["spec_types"] == list(SPEC_TYPES)
    # an older build's help that shows only a hint: its vocabulary is unknown, not empty
    assert bh.help_table(HELP_NEW.replace("--spec-type none,draft-simple", "--spec-type TYPE  x"))["spec_types"] is None


def test_spec_type_rename_is_the_lints_table_in_both_directions() -> None:
    assert spec_type_rename("mtp", SPEC_TYPES) == "draft-mtp"
    assert spec_type_rename("draft-mtp", ("none", "mtp")) == "mtp"
    assert spec_type_rename("ngram-foo", SPEC_TYPES) is None


def test_a_spec_type_the_new_build_renamed_is_refused_with_the_rename() -> None:
    old_build = bh.help_table(_help(types="none,draft-simple,mtp,ngram-mod"))
    new = bh.help_table(HELP_NEW)
    argv = ["/opt/llama.cpp/b9000-cpu/bin/llama-server", "-m", "/m/t.gguf", "--spec-type", "mtp"]
    why = bh.refusals(new, argv, {}, old_build)
    assert len(why) == 1 and "'mtp' is not in its vocabulary" in why[0] and "use --spec-type draft-mtp" in why[0]
    # the same through the environment (LLAMA_ARG_SPEC_TYPE), and nothing to say on the running build itself
    assert "use --spec-type draft-mtp" in bh.refusals(new, argv[:3], {"LLAMA_ARG_SPEC_TYPE": "mtp"}, old_build)[0]
    assert bh.refusals(old_build, argv, {}, old_build) == []


def test_a_flag_the_new_build_lost_is_refused_naming_the_name_it_still_knows() -> None:
    new = bh.help_table(HELP_NEW.replace("--spec-draft-model, -md, --model-draft FNAME", "--spec-draft-model FNAME"))
    why = bh.refusals(new, ["llama-server", "-md", "/m/d.gguf", "--spec-draft-n-max", "3"], {})
    assert why == ["flag -md is not in its --help (llama-server exits 1 on it): use --spec-draft-model (another name "
                   "of the same option)"]
    # a flag the help lists only to refuse it gets its own advice; one it does not list, the pinned table's REMOVED
    assert bh.refusals(new, ["llama-server", "--draft-max", "4"], {}) == [
        "flag --draft-max is removed in it (llama-server exits 1 on it): use --spec-draft-n-max or --spec-ngram-mod-n-max"]
    assert bh.help_table(HELP_NEW)["removed"]["--draft"] == "use --spec-draft-n-max or --spec-ngram-mod-n-max"
    assert "--draft" not in bh.help_table(HELP_NEW)["flags"]
    older = bh.help_table(HELP_NEW.replace("--draft, --draft-n, --draft-max N", "--other-thing N"))
    assert "use --spec-draft-n-max or --spec-ngram-mod-n-max" in bh.refusals(older, ["llama-server", "--draft", "4"], {})[0]
    # values are not flags: a negative number and a path are left alone
    assert bh.refusals(new, ["llama-server", "--spec-draft-n-max", "-1", "-m", "/m/t.gguf"], {}) == []


def test_a_variable_the_running_build_read_and_the_new_one_does_not_is_refused_others_are_not() -> None:
    old = bh.help_table(HELP_NEW)
    new = bh.help_table(_help(drop_env=["LLAMA_ARG_SPEC_TYPE"]))
    env = {"LLAMA_ARG_SPEC_TYPE": "draft-simple", "LLAMA_ARG_NOT_A_THING": "1", "HOME": "/root"}
    why = bh.refusals(new, ["llama-server"], env, old)
    assert len(why) == 1 and why[0].startswith("LLAMA_ARG_SPEC_TYPE is not read by it") and "silently" in why[0]
    assert "give it as --spec-type on the command line" in why[0]
    assert bh.refusals(bh.help_table(""), ["llama-server"], {}) != []  # a help with no option refuses, not passes


class HelpHost(Host):
    """test_activate's host whose binaries answer --help: the new build with ``new_help``."""

    def __init__(self, tmp: Path, new_help: str, old_help: str = HELP_NEW) -> None:
        super().__init__(tmp)
        self.helps = {"new-cpu": new_help, "old-cpu": old_help}

    def __call__(self, argv: Sequence[str]) -> Tuple[int, str, str]:
        if len(argv) == 2 and argv[1] == "--help":
            self.calls.append(list(argv))
            return 0, self.helps[self.build_of(argv[0])], ""
        return super().__call__(argv)


def test_the_activation_refuses_a_build_whose_help_lacks_a_flag_production_runs_and_changes_nothing(
        tmp_path: Path) -> None:
    (tmp_path / "llamacpp-build.json").write_text('{"version": "old"}\n')
    helped = HelpHost(tmp_path, _help(drop_flags=["--port"]))  # production runs --port 8080
    pid = helped.units[UNIT]["MainPID"]
    with pytest.raises(act.ActivateError, match=r"build new-cpu refused at the canary: llama-server.service runs a "
                       r"config it does not take: flag --port is not in its --help") as err:
        _activation(tmp_path, helped).activate(_params(helped, tmp_path, flag_table=True))
    assert err.value.details["refused"] and helped.current == "old-cpu" and helped.units[UNIT]["MainPID"] == pid
    assert not any(c[0] == "systemd-run" for c in helped.calls)  # refused before any canary
    assert json.loads((tmp_path / "llamacpp-build.json").read_text()) == {"version": "old"}
    # the same build passes when its help knows every flag
    helped.helps["new-cpu"] = HELP_NEW
    assert _activation(tmp_path, helped).activate(_params(helped, tmp_path, flag_table=True))["current"] == "new-cpu"
    assert helped.current == "new-cpu"
