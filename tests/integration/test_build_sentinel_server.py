"""The build sentinel against two real llama-server builds: a canary judged on the promoted config's speculation beside
a real production (the flag table of the real binary: test_build_flag_table_server.py).

Production is the pinned build (``make llama-server``) serving the standard target with its draft
(``--spec-type draft-simple``, depth 3) and the promoted evidence of that config in a state directory. The canary is
started with production's own command line plus the sentinel's arguments and context (what ``_activate`` does under
systemd), once on the unchanged build, once on the regressed build of tests/testbed/build_llama_server_regressed.sh
(the same tree, its verifier capped at two drafted tokens per round: lossless, /health green, acceptance lower). The
sentinel's judging runs directly (no systemd: ``Sentinel.plan`` then ``Sentinel.judge`` on the canary's port).

Speed is not judged here (``speed_margin=0``): the tiny models decode thousands of tokens per second on a shared
machine, and a timed assert would be noise. The acceptance, mean accepted length and texts are counts.
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Callable, Dict

import pytest

from ansible_collections.llmfleet.specdec.plugins.module_utils.bench import _sentinel as sen
from testbed.server import LLAMA_CPP_PYTHON_VERSION, LlamaServer

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
SPEC_ARGS = ["--spec-type", "draft-simple", "--spec-draft-n-max", "3"]


def regressed_server() -> str | None:
    """$LLAMA_SERVER_REGRESSED_BIN, else the cached build of tests/testbed/build_llama_server_regressed.sh."""
    explicit = os.environ.get("LLAMA_SERVER_REGRESSED_BIN")
    if explicit:
        return explicit
    cache = os.environ.get("LLMFLEET_CACHE") or str(Path.home() / ".cache" / "llmfleet-specdec")
    candidate = Path(cache) / f"llama-server-{LLAMA_CPP_PYTHON_VERSION}-regressed" / "bin" / "llama-server"
    return str(candidate) if os.access(candidate, os.X_OK) else None


REGRESSED = regressed_server()
needs_regressed = pytest.mark.skipif(
    REGRESSED is None, reason="the regressed llama-server is not built: `make llama-server-regressed` "
    "(tests/testbed/build_llama_server_regressed.sh; about 1.5 minutes on two cores once `make llama-server` filled "
    "ccache) builds it")


# ------------------------------------------------------------------ the sentinel on two real builds


def _evidence(models: Dict[str, Path], rate: float = 1000.0) -> Dict[str, Any]:
    """The promotion's evidence of draft-n3 on the standard models, shaped as promote.yml writes it (a bench of
    prose and structured at the sizes the recorded A/B run used)."""
    env = {"LLAMA_ARG_MODEL": str(models["target.gguf"]),
           "LLAMA_EXTRA_ARGS": f"-md {models['draft.gguf']} " + " ".join(SPEC_ARGS)}
    shapes = {"prose": {"n_predict": 48, "prompt_chars": 468, "checks": {}},
              "structured": {"n_predict": 48, "prompt_chars": 300, "checks": {}}}
    requests = [{"shape": "prose", "draft_n": 37, "draft_n_accepted": 34, "predicted_per_second": rate}]
    report = {"run_id": "sentinel-it", "configs": [
        {"name": "baseline", "chain": [], "rendering": {"env": {"LLAMA_ARG_MODEL": str(models["target.gguf"])}}},
        {"name": "draft-n3", "chain": ["draft-simple"], "rendering": {"env": env}}],
        "entries": [{"config": "draft-n3", "round": 0, "bench": {"api": "llamacpp", "shapes": shapes,
                                                                 "requests": requests}}]}
    return {"schema": "llmfleet.specdec/promoted/1", "unit": "llama-server", "config": "draft-n3",
            "run_id": "sentinel-it", "report": report}


@pytest.fixture
def production(start_server: Callable[..., LlamaServer], standard_models: Dict[str, Path],
               tmp_path: Path) -> Dict[str, Any]:
    server = start_server(standard_models["target.gguf"], draft=standard_models["draft.gguf"], args=SPEC_ARGS)
    state = tmp_path / "state"
    (state / "promoted").mkdir(parents=True)
    (state / "promoted" / "llama-server.json").write_text(json.dumps(_evidence(standard_models)))
    return {"server": server, "state": str(state),
            "serving": {"unit": "llama-server.service", "argv": server.command(), "env": {}, "port": server.port,
                        "build": "under-test"}}


def _judge(production: Dict[str, Any], binary: str, tmp_path: Path, **options: Any) -> Dict[str, Any]:
    """What _activate does for one unit, without systemd: plan, the canary on production's command line plus the
    sentinel's arguments and context, the judgement while it serves, the canary stopped."""
    sentinel = sen.Sentinel(state_dir=production["state"], speed_margin=0.0, timeout=120, **options)
    plan = sentinel.plan(production["serving"])
    assert plan is not None
    argv = production["serving"]["argv"]
    canary = LlamaServer(argv[argv.index("-m") + 1], binary=binary, log_dir=tmp_path / "canary",
                         draft=argv[argv.index("-md") + 1], args=[*SPEC_ARGS, *plan["args"]],
                         ctx_size=plan["ctx_size"])
    with canary:
        return sentinel.judge(plan, canary.port)


def test_the_unchanged_build_passes_the_sentinel(production: Dict[str, Any], llama_server_bin: str,
                                                 tmp_path: Path) -> None:
    verdict = _judge(production, llama_server_bin, tmp_path)
    assert verdict["regressions"] == [] and not verdict["accepted_slower"]
    assert verdict["texts_differ"] == 0 and verdict["prompts"] == 8 and verdict["shapes"] == ["prose", "structured"]
    # engaged on both sides, the same counts (greedy, one slot, the same build): a difference of exactly zero
    assert verdict["production"]["drafted"] > 0 and verdict["canary"]["drafted"] == verdict["production"]["drafted"]
    assert verdict["canary"]["acceptance"] == verdict["production"]["acceptance"] > 0.5
    assert verdict["acceptance_difference"]["difference"] == 0
    # production's counters moved by exactly this traffic, so both mean lengths are there and equal
    assert verdict["canary"]["mean_accepted_len"] == verdict["production"]["mean_accepted_len"] > 2.0
    assert len(verdict["canary"]["per_position"]) == 3
    print("unchanged build:", json.dumps({k: verdict[k] for k in ("production", "canary", "acceptance_difference")}))


@needs_regressed
def test_the_regressed_build_is_refused_with_both_numbers(production: Dict[str, Any], tmp_path: Path) -> None:
    assert REGRESSED is not None
    with pytest.raises(sen.SentinelError) as err:
        _judge(production, REGRESSED, tmp_path)
    verdict = err.value.verdict
    assert verdict is not None
    msg = str(err.value)
    assert "build under-test with config 'draft-n3' on llama-server.service is a regression" in msg
    assert f"against production's {100 * verdict['production']['acceptance']:.1f} %" in msg
    # lossless and engaged: only the acceptance fell, and the capped verifier never accepts a third drafted token
    assert verdict["texts_differ"] == 0 and verdict["canary"]["drafted"] > 0
    assert verdict["canary"]["acceptance"] < verdict["production"]["acceptance"] - 0.05
    assert verdict["canary"]["per_position"][2] == 0 < verdict["production"]["per_position"][2]
    assert verdict["acceptance_difference"]["high"] < -0.05  # the whole interval below the margin
    assert verdict["canary"]["mean_accepted_len"] <= 3.0 < verdict["production"]["mean_accepted_len"]
    print("regressed build:", json.dumps({k: verdict[k] for k in ("production", "canary", "acceptance_difference")}))


@needs_regressed
def test_a_forced_upgrade_goes_ahead_and_the_verdict_says_accepted_slower(production: Dict[str, Any],
                                                                          tmp_path: Path) -> None:
    assert REGRESSED is not None
    verdict = _judge(production, REGRESSED, tmp_path, accept_slower=True)
    assert verdict["accepted_slower"] and verdict["regressions"] and "acceptance" in verdict["regressions"][0]


def test_a_cpu_canary_leaves_speed_to_the_check_after_the_switch(production: Dict[str, Any], llama_server_bin: str,
                                                                 standard_models: Dict[str, Path],
                                                                 tmp_path: Path) -> None:
    """`--n-gpu-layers 0` in the canary's arguments: acceptance is judged at the canary, speed is not (its rate says
    nothing of the GPU's); the plan sends speed to after the switch, measured on the unit against the evidence's
    rates. The evidence's rates here are far from any real one (a billion and one token per second), so the outcome
    is not a timing: the same unit is a regression against the first and passes against the second."""
    sentinel = sen.Sentinel(state_dir=production["state"], canary_args=["--n-gpu-layers", "0"], timeout=120)
    plan = sentinel.plan(production["serving"])
    assert plan is not None and plan["after_switch"]
    argv = production["serving"]["argv"]
    canary = LlamaServer(argv[argv.index("-m") + 1], binary=llama_server_bin, log_dir=tmp_path / "canary",
                         draft=argv[argv.index("-md") + 1], args=[*SPEC_ARGS, "--n-gpu-layers", "0", *plan["args"]],
                         ctx_size=plan["ctx_size"])
    with canary:
        verdict = sentinel.judge(plan, canary.port)
    assert verdict["regressions"] == [] and not verdict["speed_judged"] and not verdict["lossless_required"]
    assert any("says nothing of speed" in note for note in verdict["notes"])
    # after the switch: production (here the same build) measured against the evidence's per-start rates
    with pytest.raises(sen.SentinelError, match=r"is slower than the promoted run measured: decode rate .* tok/s on "
                                                r"the new build against 1000000000\.0-1000000000\.0 tok/s"):
        sentinel.after_switch(dict(plan, rate_low=1e9, rate_high=1e9))
    passed = sentinel.after_switch(dict(plan, rate_low=1.0, rate_high=1.0))
    assert passed["regressions"] == [] and passed["rate"] > 1.0 and passed["acceptance"] > 0.5
