"""The public filter surface: ten filters an operator calls, one internal door for the roles, the 0.1.0 plumbing
names deprecated through meta/runtime.yml, and what the public filters' documented examples say they return."""
from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import yaml

from ansible_collections.llmfleet.specdec.plugins.filter.deprecated import DEPRECATED
from ansible_collections.llmfleet.specdec.plugins.filter.internal import STEPS

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
PUBLIC = {"spec_breakeven_p", "spec_rate", "spec_accepted", "spec_counters", "vllm_speculative_config",
          "vllm_speculative_json", "vllm_speculative_cli", "env_file_lines", "env_file_values", "ab_batch"}
# The filters release 0.1.0 published (plugins/filter/*.yml of its tree); every one is public or deprecated.
RELEASED_0_1_0 = {
    "ab_env", "ab_expand", "ab_history_add", "ab_history_last", "ab_lock_owner", "ab_render", "ab_report_configs",
    "ab_schedule", "ab_state_name", "ab_traffic", "ab_traffic_mix", "build_from_record", "compat_row",
    "costliest_drafter", "env_file_lines", "env_file_problems", "env_file_values", "llamacpp_build_plan",
    "llamacpp_build_prune", "llamacpp_build_record", "llamacpp_build_script", "llamacpp_toolkit_problems",
    "model_row", "preflight_results", "preflight_table", "promote_env", "promoted_env", "promotion_block",
    "promotion_record", "promotion_table", "safe_name", "spec_accepted", "spec_breakeven_p", "spec_counters",
    "spec_rate", "vllm_speculative_cli", "vllm_speculative_config", "vllm_speculative_json",
    "vllm_speculative_warnings"}


def _conventions():
    """tests/sanity/conventions.py, whose exported_filters reads a FilterModule's names from its source."""
    spec = importlib.util.spec_from_file_location("conventions", ROOT / "tests" / "sanity" / "conventions.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_ten_public_filters_and_one_internal_door_each_documented() -> None:
    files = sorted((ROOT / "plugins/filter").glob("*.py"))
    exported_filters = _conventions().exported_filters
    exported = set().union(*(set(exported_filters(f)) for f in files if f.name != "deprecated.py"))
    assert exported == PUBLIC | {"internal"}
    assert {p.stem for p in (ROOT / "plugins/filter").glob("*.yml")} == PUBLIC | {"internal"} | set(DEPRECATED)
    for name in PUBLIC | {"internal"}:
        doc = yaml.safe_load((ROOT / "plugins/filter" / f"{name}.yml").read_text())
        assert "deprecated" not in doc["DOCUMENTATION"] and "llmfleet.specdec." in doc["EXAMPLES"], name
    # no public name is also a step: each idea has one door
    assert not PUBLIC & set(STEPS)


def test_every_released_plumbing_filter_is_deprecated_in_runtime_yml_and_still_works() -> None:
    assert set(DEPRECATED) == RELEASED_0_1_0 - PUBLIC
    routing = yaml.safe_load((ROOT / "meta/runtime.yml").read_text())["plugin_routing"]["filter"]
    assert set(routing) == set(DEPRECATED)
    for name, entry in routing.items():
        assert entry["deprecation"]["removal_version"] == "1.0.0", name
        assert re.search(r"\buse (role|module|playbook|filter|ansible\.builtin)\b", entry["deprecation"]["warning_text"]), name
    # each has documentation saying so (ansible-doc and galaxy-importer need one), written from runtime.yml
    assert subprocess.run([sys.executable, str(ROOT / "tests/sanity/deprecated_filter_docs.py"), "--check"],
                          capture_output=True, text=True, check=False).returncode == 0
    for name in DEPRECATED:
        doc = yaml.safe_load((ROOT / "plugins/filter" / f"{name}.yml").read_text())["DOCUMENTATION"]
        assert doc["deprecated"]["removed_in"] == "1.0.0" and doc["short_description"].startswith("Deprecated - "), name
    from ansible_collections.llmfleet.specdec.plugins.filter.deprecated import FilterModule
    assert all(FilterModule().filters()[name] is STEPS[name] for name in DEPRECATED)


def _uses(text: str) -> list[tuple[str, str]]:
    """(door, name) of every filter call: ``x | llmfleet.specdec.internal('step'``, ``map('llmfleet.specdec.internal',
    'step')`` or ``x | llmfleet.specdec.name``."""
    return re.findall(r"llmfleet\.specdec\.(internal\('|internal', ')?([a-z_0-9]+)", text)


def test_the_collection_calls_only_public_filters_and_known_steps() -> None:
    """No role or playbook of the collection calls a deprecated name (an operator would see its warning on every run),
    and every internal('step') names a step."""
    tracked = subprocess.run(["git", "ls-files", "roles", "playbooks", "molecule", "spec-ab.yml", "tests/unit/render"],
                             cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    steps_called = set()
    for rel in tracked:
        if not rel.endswith((".yml", ".yaml", ".j2")):
            continue
        for internal, name in _uses((ROOT / rel).read_text()):
            if internal:
                assert name in STEPS, f"{rel}: internal('{name}') is no step"
                steps_called.add(name)
            else:
                assert name not in DEPRECATED, f"{rel}: calls deprecated filter {name}; use internal('{name}', ...)"
    # the steps the collection no longer calls are kept only for the deprecated names
    assert set(STEPS) - steps_called <= set(DEPRECATED)


PLAY = """
- hosts: localhost
  gather_facts: false
  vars:
    metrics: "{{ lookup('ansible.builtin.file', fixtures ~ '/llamacpp_metrics_spec.txt') }}"
    env_text: |
      LLAMA_ARG_PORT=8080
      # a comment
      LLAMA_EXTRA_ARGS="--jinja --alias \\"my model\\""
    eagle: "{{ {'method': 'eagle3', 'model': 'yuhuili/EAGLE3-LLaMA3.1-Instruct-8B', 'num_speculative_tokens': 3}
               | llmfleet.specdec.vllm_speculative_config(vllm_version='0.20.1') }}"
  tasks:
    - ansible.builtin.debug:
        msg: "{{ {
          'breakeven_k3': 25 | llmfleet.specdec.spec_breakeven_p(k=3, d_s=12, t_s=67) | round(2),
          'breakeven_dflash': 25 | llmfleet.specdec.spec_breakeven_p(k=7, d_s=12, t_s=67, draft_passes=1) | round(2),
          'rate_k3': 0.5 | llmfleet.specdec.spec_rate(k=3, d_s=12, t_s=67) | round(1),
          'rate_dflash': 0.5 | llmfleet.specdec.spec_rate(k=7, d_s=12, t_s=67, draft_passes=1) | round(1),
          'accepted': 0.5 | llmfleet.specdec.spec_accepted(k=3),
          'counters': metrics | llmfleet.specdec.spec_counters,
          'values': env_text | llmfleet.specdec.env_file_values,
          'lines': {'LLAMA_ARG_PORT': 8080, 'LLAMA_ARG_FLASH_ATTN': true,
                    'LLAMA_EXTRA_ARGS': '--jinja --alias \\"my model\\"'} | llmfleet.specdec.env_file_lines('env'),
          'cli': eagle | llmfleet.specdec.vllm_speculative_cli,
          'none_cli': {} | llmfleet.specdec.vllm_speculative_cli,
          'json': {'method': 'ngram', 'num_speculative_tokens': 3} | llmfleet.specdec.vllm_speculative_json,
          'ngram_legacy': {} | llmfleet.specdec.vllm_speculative_config(['--spec-method', 'ngram', '--spec-tokens', '3'],
                                                                        vllm_version='0.20.1'),
          'batch': ' 25% ' | llmfleet.specdec.ab_batch,
          'old': 'frank-dragoon' | llmfleet.specdec.safe_name('host') } | to_json }}"
"""


def test_the_documented_examples_return_what_their_docs_say(tmp_path: Path) -> None:
    play = tmp_path / "play.yml"
    play.write_text(PLAY)
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_NOCOLOR="1",
               ANSIBLE_COLLECTIONS_PATH=str(ROOT / ".build" / "collections"), ANSIBLE_STDOUT_CALLBACK="ansible.builtin.json")
    proc = subprocess.run([str(BIN / "ansible-playbook"), "-i", "localhost,", "-c", "local", str(play),
                           "-e", f"fixtures={ROOT / 'tests/unit/fixtures/breakeven'}",
                           "-e", f"ansible_python_interpreter={sys.executable}"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    result = json.loads(proc.stdout)["plays"][0]["tasks"][0]["hosts"]["localhost"]
    msg = json.loads(result["msg"])
    # the numbers spec_breakeven_p.yml, spec_rate.yml and spec_accepted.yml print beside their examples
    assert (msg["breakeven_k3"], msg["breakeven_dflash"], msg["rate_k3"], msg["rate_dflash"], msg["accepted"]) == (
        0.75, 0.54, 17.1, 23.2, 1.875)
    # spec_counters.yml: the real llama-server's counters after three requests with a draft model
    c = msg["counters"]
    assert (c["engine"], c["speculates"], c["drafts"], c["accepted_tokens"], c["accepted_per_pos"]) == (
        "llama.cpp", True, 51.0, 138.0, [49.0, 45.0, 44.0])
    assert round(c["acceptance_rate"], 3) == 0.926 and round(c["commit_per_round"], 3) == 3.706
    assert msg["values"] == {"LLAMA_ARG_PORT": "8080", "LLAMA_EXTRA_ARGS": '--jinja --alias "my model"'}
    assert msg["lines"] == ["LLAMA_ARG_PORT=8080", "LLAMA_ARG_FLASH_ATTN=1", 'LLAMA_EXTRA_ARGS="--jinja --alias \\"my model\\""']
    assert msg["cli"] == ["--speculative-config",
                          '{"method":"eagle3","model":"yuhuili/EAGLE3-LLaMA3.1-Instruct-8B","num_speculative_tokens":3}']
    assert msg["none_cli"] == []
    assert msg["json"] == '{"method":"ngram","num_speculative_tokens":3}'
    assert msg["ngram_legacy"] == {"method": "ngram", "num_speculative_tokens": 3}
    assert msg["batch"] == "25%"
    # a deprecated name still works, with the warning runtime.yml gives it
    assert msg["old"] == "frank-dragoon"
    assert [(d["msg"].split(".")[0:3], d["version"]) for d in result["deprecations"]] == [
        (['Filter "llmfleet', 'specdec', 'safe_name" has been deprecated'], "1.0.0")]


def test_internal_refuses_an_unknown_step_naming_it() -> None:
    from ansible.errors import AnsibleFilterError

    from ansible_collections.llmfleet.specdec.plugins.filter.internal import internal
    try:
        internal("x", "ab_expandd")
    except AnsibleFilterError as exc:
        assert "'ab_expandd' is not one of this collection's steps" in str(exc)
        assert "not an interface" in str(exc)
    else:
        raise AssertionError("an unknown step passed")
    assert internal("frank-dragoon", "safe_name", "host") == "frank-dragoon"
