"""A wrapper's environment never reaches a report, a returned value or a log line (issue 48, finding 2).

A real child process named llama-server, started by this test with a token in its environment (what a hand-written
wrapper that exports HF_TOKEN gives its server), beside systemd's per-start variables and PATH, is the running
server of a wrapper unit (``ExecStart=`` a ``#!`` script). Read through module serving_unit_info on this host's
real /proc (systemctl faked), rendered by the preflight's step ``ab_render``, judged into report.json and report.md
and partial.json's configs, and watched by spec_watch's comparison: the token is in none of them, nor in any
captured log line; the server's own settings are read, its secret-looking ones shown as ``********``.
"""
from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict, Iterator, List, Sequence, Tuple

import pytest
from ab_runs import make_run

from ansible_collections.llmfleet.specdec.plugins.module_utils.common import _secrets
from ansible_collections.llmfleet.specdec.plugins.module_utils.systemd import _unit_wrapper
from ansible_collections.llmfleet.specdec.plugins.module_utils.systemd._procview import ProcView
from ansible_collections.llmfleet.specdec.plugins.module_utils.watch import _drift
from ansible_collections.llmfleet.specdec.plugins.modules import serving_unit_info
from ansible_collections.llmfleet.specdec.plugins.plugin_utils.report import _report
from ansible_collections.llmfleet.specdec.plugins.plugin_utils.steps import _steps_ab
from ansible_collections.llmfleet.specdec.plugins.plugin_utils.verdicts import _judge

TOKEN = "hf_PlantedTokenValue0123456789abcdef"
API_KEY = "sk-unit-file-api-key-9876543210"  # set by the unit's own env file: a server setting, masked
UNIT = "wrapped-llama.service"
SERVER = "import time\ntime.sleep(120)\n"


@pytest.fixture()
def wrapped(tmp_path: Path) -> Iterator[Tuple[Path, int]]:
    """(the unit file, the server's pid): a wrapper script on ExecStart=, an env file, and its server running as a
    real process whose environment holds the wrapper's export of the token."""
    env_file = tmp_path / "llama.env"
    env_file.write_text(f"LLAMA_ARG_PORT=18080\nLLAMA_ARG_MODEL=/srv/models/target.gguf\nLLAMA_API_KEY={API_KEY}\n")
    wrapper = tmp_path / "start-llama"
    wrapper.write_text("#!/bin/sh\nexport HF_TOKEN=...\nexec llama-server -c 4096\n")
    wrapper.chmod(0o755)
    unit_file = tmp_path / UNIT
    unit_file.write_text(f"[Service]\nEnvironmentFile={env_file}\nExecStart={wrapper}\n")
    environ = {"PATH": "/usr/local/bin:/usr/bin:/bin", "INVOCATION_ID": "0123456789abcdef0123456789abcdef",
               "JOURNAL_STREAM": "8:12345", "HF_TOKEN": TOKEN, "LLAMA_ARG_PORT": "18080",
               "LLAMA_ARG_MODEL": "/srv/models/target.gguf", "LLAMA_API_KEY": API_KEY, "LLAMA_ARG_CTX_SIZE": "4096"}
    # argv[0] llama-server (the server's name in /proc/<pid>/cmdline), run by this interpreter: "-c" is its code
    server = subprocess.Popen(["llama-server", "-c", SERVER], executable=sys.executable, env=environ)
    try:
        for _attempt in range(200):  # until the child has exec'd (its cmdline is the server's)
            raw = Path(f"/proc/{server.pid}/cmdline").read_bytes()
            if raw.startswith(b"llama-server\x00"):
                break
        yield unit_file, server.pid
    finally:
        server.kill()
        server.wait()


def _systemctl(unit_file: Path, pid: int):  # type: ignore[no-untyped-def]
    values = {"LoadState": "loaded", "FragmentPath": str(unit_file), "DropInPaths": "", "ExecStart": "",
              "NeedDaemonReload": "no", "MainPID": str(pid), "ActiveState": "active", "Type": "simple",
              "ControlGroup": f"/system.slice/{UNIT}"}

    def run(argv: Sequence[str], **_kw: Any) -> Tuple[int, str, str]:
        argv = list(argv)
        assert argv[:2] == ["systemctl", "show"], argv
        wanted = [argv[i + 1] for i, word in enumerate(argv) if word == "-p"]
        if "--value" in argv:
            return 0, "".join(values.get(name, "") + "\n" for name in wanted), ""
        return 0, "".join(f"{name}={values.get(name, '')}\n" for name in wanted), ""
    return run


def _module_result(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], unit_file: Path,
                   pid: int) -> Tuple[Dict[str, Any], str]:
    from ansible.module_utils.basic import AnsibleModule
    from ansible.module_utils.testing import patch_module_args

    run = _systemctl(unit_file, pid)
    monkeypatch.setattr(AnsibleModule, "get_bin_path", lambda self, name, *a, **k: f"/usr/bin/{name}")
    monkeypatch.setattr(AnsibleModule, "run_command", lambda self, argv, *a, **k: run(argv))
    with patch_module_args({"unit": UNIT, "engine": "llamacpp", "start_from_running": True}):
        with pytest.raises(SystemExit):
            serving_unit_info.main()
    out, err = capsys.readouterr()
    return json.loads(out), out + err


def test_a_wrappers_token_is_in_no_report_returned_value_or_log_line(
        wrapped: Tuple[Path, int], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        caplog: pytest.LogCaptureFixture, tmp_path: Path) -> None:
    caplog.set_level(logging.DEBUG)
    unit_file, pid = wrapped
    assert ProcView().environ(pid)["HF_TOKEN"] == TOKEN  # planted: the real process holds it

    # serving_unit_info on the real /proc: the server's own settings, never the wrapper's whole environment
    result, printed = _module_result(monkeypatch, capsys, unit_file, pid)
    assert not result.get("failed"), result.get("msg")
    live = result["serving_unit"]
    assert live["kind"] == "wrapper" and live["wrapper"]["pid"] == pid
    assert live["server_env"] == {"LLAMA_ARG_PORT": "18080", "LLAMA_ARG_MODEL": "/srv/models/target.gguf",
                                  "LLAMA_API_KEY": "********", "LLAMA_ARG_CTX_SIZE": "4096"}
    assert live["env"]["LLAMA_API_KEY"] == "********" and live["env"]["LLAMA_ARG_PORT"] == "18080"
    assert TOKEN not in printed and API_KEY not in printed and "INVOCATION_ID" not in printed

    # the preflight: production's base is the server's settings; every config rendered over it
    configs = [{"name": "baseline"}, {"name": "ngram", "env": {"LLAMA_ARG_SPEC_TYPE": "ngram-mod"}}]
    rendered = _steps_ab.ab_render(configs, live["server_env"], "baseline", "llamacpp", live)
    assert rendered["ngram"]["env"] == {"LLAMA_ARG_PORT": "18080", "LLAMA_ARG_MODEL": "/srv/models/target.gguf",
                                        "LLAMA_API_KEY": "********", "LLAMA_ARG_CTX_SIZE": "4096",
                                        "LLAMA_ARG_SPEC_TYPE": "ngram-mod"}
    assert rendered["ngram"]["override"] == {"LLAMA_ARG_SPEC_TYPE": "ngram-mod"}  # what unit_override writes

    # the report and partial.json's configs, as the role builds them from those renderings
    run = make_run({"baseline": {}, "ngram": {"speedup": 1.2, "chain": ["ngram-mod"],
                                              "server_config": {"LLAMA_ARG_SPEC_TYPE": "ngram-mod"}}})
    run["configs"] = _steps_ab.ab_report_configs(configs, {"ngram": ["ngram-mod"], "baseline": []}, rendered)
    document = _report.build_document(run, _judge.judge(run, n_boot=100), {"unit": UNIT})
    written = _report.to_json(document) + _report.markdown(document) + json.dumps(run["configs"])
    assert "ngram-mod" in written and "********" in written  # the renderings are there, masked
    assert TOKEN not in written and API_KEY not in written and "INVOCATION_ID" not in written

    # the watch: the promoted rendering against the live process (its whole environ), findings without the token
    live_env = ProcView().environ(pid)
    promoted = dict(rendered["ngram"]["env"])
    findings = _drift.compare_live(promoted, live_env, None, UNIT, [])
    assert [f["kind"] for f in findings] == ["live-config-differs"]  # the candidate's LLAMA_ARG_SPEC_TYPE is not live
    assert "LLAMA_ARG_SPEC_TYPE" in json.dumps(findings) and "LLAMA_API_KEY" not in json.dumps(findings)
    assert TOKEN not in json.dumps(findings) and API_KEY not in json.dumps(findings)

    assert TOKEN not in caplog.text and API_KEY not in caplog.text
    out, err = capsys.readouterr()
    assert TOKEN not in out + err


def test_the_server_settings_of_a_wrapper_are_the_engines_and_the_units_own() -> None:
    environ = {"PATH": "/bin", "INVOCATION_ID": "x", "HF_TOKEN": TOKEN, "LLAMA_ARG_PORT": "1", "CUDA_VISIBLE_DEVICES": "0",
               "OMP_NUM_THREADS": "8", "MY_SETTING": "a", "HOME": "/root"}
    assert _unit_wrapper.server_settings(environ, {"MY_SETTING": "b"}) == {
        "LLAMA_ARG_PORT": "1", "CUDA_VISIBLE_DEVICES": "0", "OMP_NUM_THREADS": "8", "MY_SETTING": "a"}


@pytest.mark.parametrize("name", ["HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "LLAMA_API_KEY", "AWS_SECRET_ACCESS_KEY",
                                  "DB_PASSWORD", "HFTOKEN", "VLLM_API_KEY", "BASIC_AUTH", "GOOGLE_CREDENTIALS"])
def test_secret_looking_names(name: str) -> None:
    assert _secrets.looks_secret(name) and _secrets.masked({name: "v"}) == {name: "********"}


@pytest.mark.parametrize("name", ["LLAMA_ARG_IMAGE_MAX_TOKENS", "LLAMA_ARG_MTMD_BATCH_MAX_TOKENS", "PATH", "PWD",
                                  "HF_HOME", "VLLM_SERVE_PASS_ENV", "LLAMA_ARG_N_PREDICT"])
def test_settings_that_only_look_alike_are_shown(name: str) -> None:
    assert not _secrets.looks_secret(name) and _secrets.masked({name: "v"}) == {name: "v"}


def test_a_secret_that_differs_is_named_never_shown() -> None:
    diff = _drift.env_differences({"LLAMA_API_KEY": "********", "LLAMA_ARG_CTX_SIZE": "4096"},
                                  {"LLAMA_API_KEY": API_KEY, "LLAMA_ARG_CTX_SIZE": "8192"})
    assert diff == {"LLAMA_ARG_CTX_SIZE": {"promoted": "4096", "live": "8192"}}  # a masked value is not compared
    diff = _drift.env_differences({}, {"VLLM_API_KEY": API_KEY})  # a watched variable only the live process has
    assert diff == {"VLLM_API_KEY": {"promoted": None, "live": "********"}}
    mismatch: List[str] = _unit_wrapper.environ_mismatch([("LLAMA_API_KEY", "new-secret-value")], [],
                                                         {"LLAMA_API_KEY": API_KEY})
    assert mismatch == ["LLAMA_API_KEY: the server sees '********', the drop-in set '********'"]
    assert os.environ.get("HF_TOKEN") != TOKEN  # the test planted it in its child only


def test_unit_overrides_diff_shows_a_candidates_secret_masked() -> None:
    from ansible_collections.llmfleet.specdec.plugins.modules.unit_override import hide_in_diff

    entry = {"before_header": "override.env", "before": "", "after_header": "override.env",
             "after": f"LLAMA_ARG_SPEC_TYPE=ngram-mod\nHF_TOKEN={TOKEN}\nLLAMA_API_KEY='{API_KEY}'\n"}
    shown = hide_in_diff(entry)
    assert shown["after"] == "LLAMA_ARG_SPEC_TYPE=ngram-mod\nHF_TOKEN=********\nLLAMA_API_KEY=********\n"
    assert shown["before_header"] == "override.env" and shown["before"] == ""


def test_a_candidates_own_secret_is_masked_in_the_report_and_never_promoted() -> None:
    """A candidate that sets a secret-looking variable itself: unit_override still gets the value (the rendering's
    override), the report and partial.json (ab_report_configs) show it masked, and a promotion refuses it."""
    import copy

    import test_promote
    from ansible.errors import AnsibleFilterError

    from ansible_collections.llmfleet.specdec.plugins.module_utils.systemd._render import RenderError, exec_promotion
    from ansible_collections.llmfleet.specdec.plugins.plugin_utils.steps._steps_promote import promote_env

    configs = [{"name": "baseline"}, {"name": "hub", "env": {"LLAMA_ARG_SPEC_TYPE": "ngram-mod", "HF_TOKEN": TOKEN}}]
    rendered = _steps_ab.ab_render(configs, {"LLAMA_ARG_PORT": "8080"}, "baseline", "llamacpp", None)
    assert rendered["hub"]["override"]["HF_TOKEN"] == TOKEN  # what unit_override writes into the unit's drop-in
    reported = _steps_ab.ab_report_configs(configs, {}, rendered)
    assert TOKEN not in json.dumps(reported) and reported[1]["server_config"]["HF_TOKEN"] == "********"
    assert reported[1]["rendering"]["override"] == {"LLAMA_ARG_SPEC_TYPE": "ngram-mod", "HF_TOKEN": "********"}

    report = copy.deepcopy(test_promote.REPORT)
    report["configs"][1]["server_config"] = dict(reported[1]["server_config"])
    with pytest.raises(AnsibleFilterError, match=r"'ngram-mod' of run 20261129T100000Z sets HF_TOKEN, whose value the "
                       r"report hides \(a secret\): a promotion cannot write it"):
        promote_env(test_promote.CURRENT, report, "ngram-mod")
    wrapper_report = {"run_id": "r1", "configs": [{"name": "hub", "rendering": reported[1]["rendering"]}]}
    with pytest.raises(RenderError, match="'hub' of run r1 sets HF_TOKEN, whose value the report hides"):
        exec_promotion(wrapper_report, "hub", {"unit": UNIT, "kind": "wrapper", "form": "env"})


def test_a_diff_side_given_as_a_mapping_is_masked_not_split() -> None:
    """unit_override's diff carries the drop-in's state as a mapping on some entries (molecule/default's check-mode
    present with diff: a dict has no lines): its secret-looking keys are masked, the rest kept as they are."""
    from ansible_collections.llmfleet.specdec.plugins.modules.unit_override import hide_in_diff

    entry = {"before": {"state": "absent"}, "after": {"state": "present", "env": {"HF_TOKEN": TOKEN, "LLAMA_ARG_PORT": "8080"}}}
    shown = hide_in_diff(entry)
    assert shown == {"before": {"state": "absent"}, "after": {"state": "present", "env": {"HF_TOKEN": "********",
                                                                                          "LLAMA_ARG_PORT": "8080"}}}
    assert hide_in_diff({"prepared": "restart llama-server"}) == {"prepared": "restart llama-server"}
