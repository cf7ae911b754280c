"""playbooks/awx_setup.yml rendered without a controller, and a model URL token kept out of job logs.

No AWX server can run here: the playbook's objects are rendered to JSON and checked against the repository
(every job template names a playbook that exists, every survey variable is one the playbooks read) and against
awx.awx's own argument specs (every option the playbook passes is one the module accepts).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from ansible.parsing.yaml.loader import AnsibleLoader

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
PLAYBOOK = ROOT / "playbooks" / "awx_setup.yml"


def ansible_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
    env.update(ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_NOCOLOR="1", **extra)
    return env


@pytest.fixture(scope="module")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> dict:
    out = tmp_path_factory.mktemp("awx") / "objects.json"
    proc = subprocess.run([str(BIN / "ansible-playbook"), str(PLAYBOOK), "-e", "specdec_awx_render_only=true",
                           "-e", f"specdec_awx_render_to={out}"], cwd=ROOT, env=ansible_env(),
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return json.loads(out.read_text())


def test_syntax_check() -> None:
    proc = subprocess.run([str(BIN / "ansible-playbook"), "--syntax-check", str(PLAYBOOK)], cwd=ROOT,
                          env=ansible_env(), capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr


def test_job_templates_name_playbooks_and_variables_that_exist(rendered: dict) -> None:
    templates = {t["name"]: t for t in rendered["job_templates"]}
    assert set(templates) == {"specdec preflight", "specdec A/B", "specdec promote", "specdec rollback"}
    sources = "\n".join(p.read_text() for d in ("playbooks", "roles") for p in (ROOT / d).rglob("*.yml")
                        if p != PLAYBOOK)
    for template in templates.values():
        assert (ROOT / template["playbook"]).is_file(), template
        for question in template["survey"]:
            # A survey variable nothing reads would be silently ignored by the job.
            assert question["variable"] in sources, question
            assert question["type"] in {"text", "integer", "multiplechoice", "password", "textarea", "float"}
    promote = {q["variable"]: q for q in templates["specdec promote"]["survey"]}
    assert promote["specdec_promote_config"]["required"] is True


def test_the_ab_survey_defaults_are_the_roles_and_its_minimums_the_methods(rendered: dict) -> None:
    import yaml

    from ansible_collections.llmfleet.specdec.plugins.module_utils.common import _stats
    from ansible_collections.llmfleet.specdec.plugins.plugin_utils.verdicts import _design

    defaults = yaml.safe_load((ROOT / "roles" / "spec_ab" / "defaults" / "main.yml").read_text())
    survey = {q["variable"]: q for t in rendered["job_templates"] if t["name"] == "specdec A/B" for q in t["survey"]}
    assert set(survey) == {"spec_ab_max_rounds", "spec_ab_prompts_per_shape", "spec_ab_judge_on"}
    for name, question in survey.items():
        assert question["default"] == defaults[name], name
    assert survey["spec_ab_max_rounds"]["min"] == _design.FIRST_LOOK
    assert survey["spec_ab_prompts_per_shape"]["min"] == _stats.MIN_REQUESTS_PER_ROUND
    assert survey["spec_ab_judge_on"]["choices"].split("\n") == ["e2e", "decode"]
    assert defaults["spec_ab_max_rounds"] == _design.MAX_ROUNDS


def test_workflow_puts_an_approval_between_ab_and_promote(rendered: dict) -> None:
    nodes = {n["identifier"]: n for n in rendered["workflow"]["nodes"]}
    assert nodes["ab"]["unified_job_template"]["name"] == "specdec A/B"
    assert nodes["ab"]["related"]["success_nodes"] == [{"identifier": "approve"}]
    assert nodes["approve"]["unified_job_template"]["type"] == "workflow_approval"
    assert int(nodes["approve"]["unified_job_template"]["timeout"]) > 0
    assert nodes["approve"]["related"]["success_nodes"] == [{"identifier": "promote"}]
    assert nodes["promote"]["unified_job_template"]["name"] == "specdec promote"
    assert "WEEKLY" in rendered["schedule"]["rrule"] and rendered["schedule"]["limit"]


def test_token_credential_injects_only_an_environment_variable(rendered: dict) -> None:
    ctype = rendered["credential_type"]
    assert [f["secret"] for f in ctype["inputs"]["fields"]] == [True]
    # AWX renders the injector with its own Jinja: the playbook must hand it over unrendered.
    assert ctype["injectors"] == {"env": {"SPECDEC_MODEL_TOKEN": "{{ token }}"}}


def test_awx_modules_accept_every_option_given() -> None:
    play = AnsibleLoader(PLAYBOOK.read_text()).get_single_data()[0]
    tasks = [t for block in play["tasks"] for t in block.get("block", [block])]
    used = {(name, frozenset(args)) for t in tasks for name, args in t.items() if name.startswith("awx.awx.")}
    assert {name for name, _dummy in used} >= {"awx.awx.project", "awx.awx.job_template", "awx.awx.schedule",
                                               "awx.awx.workflow_job_template", "awx.awx.credential_type",
                                               "awx.awx.credential", "awx.awx.execution_environment"}
    for name, args in used:
        proc = subprocess.run([str(BIN / "ansible-doc"), "-j", name], env=ansible_env(), capture_output=True,
                              text=True, timeout=120, check=False)
        options = set(json.loads(proc.stdout)[name]["doc"]["options"])
        assert args <= options, (name, sorted(args - options))


def test_url_headers_never_reach_the_log(tmp_path: Path) -> None:
    """A token given in url_headers stays out of the result, its invocation and the verbose log."""
    subprocess.run([sys.executable, "-c", "import sys; sys.path.insert(0, 'tests');"
                    "from testbed.models import write_standard_set as w; import pathlib;"
                    f"w(pathlib.Path({str(tmp_path / 'models')!r}))"], cwd=ROOT, check=True)
    model = next((tmp_path / "models").glob("target.gguf"))
    play = tmp_path / "play.yml"
    play.write_text(
        "- hosts: localhost\n  gather_facts: false\n  tasks:\n"
        "    - llmfleet.specdec.gguf_info:\n"
        f"        path: {model}\n"
        "        url_headers:\n          Authorization: \"Bearer {{ lookup('ansible.builtin.env', 'SPECDEC_MODEL_TOKEN') }}\"\n")
    # ansible-core 2.21 adds the module's `invocation` to a result only when asked (INJECT_INVOCATION, off by
    # default); 2.19 always adds it and ignores the variable. Asked for, so the masking is checked on both.
    env = ansible_env(SPECDEC_MODEL_TOKEN="sekrit-token-4711", ANSIBLE_STDOUT_CALLBACK="ansible.builtin.json",
                      ANSIBLE_INJECT_INVOCATION="true")
    proc = subprocess.run([str(BIN / "ansible-playbook"), "-vvv", "-i", "localhost,", "-c", "local",
                           "-e", "ansible_python_interpreter=" + sys.executable, str(play)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert "sekrit-token-4711" not in proc.stdout + proc.stderr
    # -vvv prints its connection log before the json callback's document.
    result = json.loads(proc.stdout[proc.stdout.index("\n{\n"):])["plays"][0]["tasks"][0]["hosts"]["localhost"]
    assert result["invocation"]["module_args"]["url_headers"] == {"Authorization": "VALUE_SPECIFIED_IN_NO_LOG_PARAMETER"}
