"""A candidate that moves the server's host or port off production's endpoint is refused when it is rendered
(issue 31, MEDIUM 6): the A/B measures production's endpoint, so it would measure another server, or none."""
from __future__ import annotations

import pytest

from ansible_collections.llmfleet.specdec.plugins.module_utils.systemd import _unit_command as uc
from ansible_collections.llmfleet.specdec.plugins.module_utils.systemd._render import render_candidate, render_configs
from ansible_collections.llmfleet.specdec.plugins.plugin_utils.steps._steps_preflight import preflight_results

LLAMA = "/opt/specdec/bin/llama-server"
HAND = [LLAMA, "-m", "/srv/t.gguf", "-t", "1", "--port", "8081", "--metrics"]
BASE = {"LLAMA_ARG_MODEL": "/t", "LLAMA_ARG_PORT": "8080", "LLAMA_EXTRA_ARGS": "--spec-draft-n-max 3"}
VLLM_BASE = {"VLLM_SERVE_MODEL": "/m", "VLLM_SERVE_PORT": "8000", "VLLM_SERVE_ARGS": "--max-model-len 4096"}


def unit_of(argv: list[str], env: dict | None = None) -> dict:
    return dict(uc.describe(argv, env or {}, None, "llama.service"), unit="llama.service", installed=True,
                env=env or {}, exec_prefix="")


def moved(rendering: dict) -> list[dict]:
    return [r for r in rendering["refused"] if r["code"] == "moves-endpoint"]


@pytest.mark.parametrize("env, flags, named", [
    ({"LLAMA_ARG_PORT": "9090"}, [], "LLAMA_ARG_PORT"),
    ({}, ["--port", "9090"], "flags --port"),
    ({"LLAMA_EXTRA_ARGS": "--spec-draft-n-max 3 --port 9090"}, [], "LLAMA_EXTRA_ARGS --port"),
    ({"LLAMA_ARG_HOST": "0.0.0.0"}, [], "LLAMA_ARG_HOST"),
    ({}, ["--host", "10.0.0.5"], "flags --host"),
    ({"LLAMA_ARG_PORT": None}, [], "LLAMA_ARG_PORT"),
])
def test_env_form_llamacpp(env: dict, flags: list, named: str) -> None:
    r = render_candidate(BASE, env, flags, "moved")
    found = moved(r)
    if env.get("LLAMA_ARG_PORT", "x") is None:  # unsetting 8080 leaves llama-server's default, 8080: not moved
        assert found == []
        return
    assert len(found) == 1, r["refused"]
    assert found[0]["setting"] == named and named in found[0]["message"]
    assert "production's 127.0.0.1:8080" in found[0]["message"] and "Remove " + named in found[0]["message"]


@pytest.mark.parametrize("env, flags", [({"LLAMA_ARG_PORT": "8080"}, []), ({}, ["--port", "8080"]),
                                        ({"LLAMA_ARG_SPEC_DRAFT_N_MAX": "6"}, [])])
def test_env_form_same_endpoint_is_not_refused(env: dict, flags: list) -> None:
    assert moved(render_candidate(BASE, env, flags, "same")) == []


@pytest.mark.parametrize("env, flags, named", [
    ({"VLLM_SERVE_PORT": "8001"}, [], "VLLM_SERVE_PORT"),
    ({}, ["--port", "8001"], "flags --port"),
    ({}, ["--port=8001"], "flags --port"),  # vLLM's argparse takes the = form (llama-server refuses it: the lint's)
    ({"VLLM_SERVE_ARGS": "--max-model-len 4096 --port 8001"}, [], "VLLM_SERVE_ARGS --port"),
])
def test_env_form_vllm(env: dict, flags: list, named: str) -> None:
    found = moved(render_candidate(VLLM_BASE, env, flags, "v", backend="vllm"))
    assert [f["setting"] for f in found] == [named] and "production's 127.0.0.1:8000 to 127.0.0.1:8001" in found[0]["message"]
    assert moved(render_candidate(VLLM_BASE, {"VLLM_SERVE_PORT": "8000"}, [], "v", backend="vllm")) == []


@pytest.mark.parametrize("env, flags", [({"LLAMA_ARG_PORT": "9090"}, []), ({}, ["--port", "9090"]),
                                        ({"LLAMA_ARG_HOST": "0.0.0.0"}, [])])
def test_exec_form_is_refused_and_rendered_as_production(env: dict, flags: list) -> None:
    r = render_candidate({}, env, flags, "moved", unit=unit_of(HAND))
    found = moved(r)
    assert len(found) == 1 and "production's" in found[0]["message"]
    assert r["exec_start"] == HAND  # it never runs


def test_exec_form_same_port_passes() -> None:
    r = render_candidate({}, {}, ["--port", "8081", "--spec-draft-n-max", "2"], "same", unit=unit_of(HAND))
    assert moved(r) == [] and r["exec_start"][-2:] == ["--spec-draft-n-max", "2"]


def test_the_preflight_reports_it_and_the_config_is_not_legal() -> None:
    configs = [{"name": "baseline", "env": {}}, {"name": "moved", "env": {"LLAMA_ARG_PORT": "9090"}}]
    rendered = render_configs(configs, BASE, "baseline")
    ok = {"ok": True}
    results = preflight_results(configs, [ok, ok], [{}, {}], [], rendered, BASE, "baseline")
    verdict = {r["name"]: r for r in results}
    assert verdict["baseline"]["legal"] is True
    assert verdict["moved"]["legal"] is False and "LLAMA_ARG_PORT moves the server" in verdict["moved"]["error"]


def test_unsetting_production_port_moves_it_to_the_default() -> None:
    found = moved(render_candidate(dict(BASE, LLAMA_ARG_PORT="9000"), {"LLAMA_ARG_PORT": None}, [], "unset"))
    assert [f["setting"] for f in found] == ["LLAMA_ARG_PORT"]
    assert "production's 127.0.0.1:9000 to 127.0.0.1:8080" in found[0]["message"]
