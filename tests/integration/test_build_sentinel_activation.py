"""The whole activation (llamacpp_activate's ``Activation.activate``) with the real sentinel, real llama-server
processes and the two real builds; only systemd is simulated.

The fake host of tests/unit/test_activate.py plays systemd and /proc, with two changes: the builds under its root are
copies of the real binaries (``old-cpu`` the pinned build, ``new-cpu`` the pinned or the regressed one), production is
a real llama-server started from ``old-cpu`` and registered as the unit's MainPID, and the canary's ``systemd-run``
starts the real process of the spec the activation wrote (production's command line on the new binary, plus the
canary's endpoint and context and the sentinel's ``--metrics --parallel 1``). So the canary's command line, the
sentinel's plan, its judgement over HTTP and the refusal before 'current' moves are the real ones. What real systemd
does with the transient units is molecule/build's part.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Sequence, Tuple

import pytest
from test_build_sentinel_server import REGRESSED, SPEC_ARGS, _evidence, needs_regressed
from unit.test_activate import UNIT, Host

from ansible_collections.llmfleet.specdec.plugins.module_utils.bench import _sentinel as sen
from ansible_collections.llmfleet.specdec.plugins.module_utils.build import _activate as act
from testbed.server import LlamaServer

pytestmark = pytest.mark.integration


class RealCanaryHost(Host):
    """test_activate's host whose canary is a real process and whose HTTP probe is real for real processes."""

    def __init__(self, tmp: Path) -> None:
        super().__init__(tmp)
        self.real: Dict[int, subprocess.Popen[bytes]] = {}
        self.log_dir = tmp / "canary-logs"
        self.log_dir.mkdir()
        self.real_ports: set[int] = set()

    def attach(self, production: LlamaServer) -> None:
        """Production's unit is this real server (started from the old build's binary)."""
        self.port = production.port
        self.units[UNIT].update(MainPID=production.pid, argv=production.command(), port=production.port)
        self.real_ports.add(production.port)

    def __call__(self, argv: Sequence[str]) -> Tuple[int, str, str]:
        argv = list(argv)
        if len(argv) == 2 and argv[1] == "--help":  # the flag table: the real binaries' own --help
            self.calls.append(argv)
            done = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
            return done.returncode, done.stdout, done.stderr
        canary = argv[0] == "systemd-run" and any(a.startswith("--unit=specdec-canary-") and not a.endswith("-spec")
                                                  for a in argv)
        if canary:  # the real process of the spec the activation wrote, as the unit's MainPID
            self.calls.append(argv)
            spec = json.loads(Path(argv[-1]).read_text())
            self.canary_specs.append(spec)
            unit = next(a.split("=", 1)[1] for a in argv if a.startswith("--unit=")) + ".service"
            port = int(spec["argv"][len(spec["argv"]) - 1 - spec["argv"][::-1].index("--port") + 1])
            with open(self.log_dir / f"{port}.log", "wb") as log:
                proc = subprocess.Popen(spec["argv"], env={**os.environ, **spec["env"]}, stdout=log,
                                        stderr=subprocess.STDOUT)
            self.real[proc.pid] = proc
            self.real_ports.add(port)
            self.units[unit] = {"ActiveState": "active", "SubState": "running", "MainPID": proc.pid, "NRestarts": 0,
                                "Result": "success", "LoadState": "loaded", "ControlGroup": f"/system.slice/{unit}",
                                "port": port, "build": self.build_of(spec["argv"][0]), "argv": spec["argv"]}
            return 0, "", ""
        if argv[:2] == ["systemctl", "stop"] and argv[2].startswith("specdec-canary-") and argv[2].endswith(".service"):
            self.stop_real()
        return super().__call__(argv)

    def stop_real(self) -> None:
        for proc in self.real.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                proc.wait(timeout=30)

    def http(self, url: str, timeout: float) -> Tuple[int, str]:
        port = int(url.rsplit(":", 1)[1].split("/")[0])
        return act.http_get(url, timeout) if port in self.real_ports else super().http(url, timeout)


@pytest.fixture
def bed(llama_server_bin: str, standard_models: Dict[str, Path], tmp_path: Path) -> Callable[[str], Dict[str, Any]]:
    """bed(new_binary) -> the host, the activation with the real sentinel and its params; production stopped after."""
    started: List[Any] = []

    def make(new_binary: str) -> Dict[str, Any]:
        host = RealCanaryHost(tmp_path)  # its builds old-cpu and new-cpu: stand-ins, replaced by the real binaries
        started.append(host)
        root = host.root
        shutil.copy(llama_server_bin, root / "old-cpu" / "bin" / "llama-server")
        shutil.copy(new_binary, root / "new-cpu" / "bin" / "llama-server")
        production = LlamaServer(standard_models["target.gguf"], draft=standard_models["draft.gguf"], args=SPEC_ARGS,
                                 binary=str(root / "old-cpu" / "bin" / "llama-server"), log_dir=tmp_path / "prod")
        production.start()
        started.append(production)
        host.attach(production)
        state = tmp_path / "state"
        (state / "promoted").mkdir(parents=True)
        (state / "promoted" / "llama-server.json").write_text(json.dumps(_evidence(standard_models)))
        (tmp_path / "llamacpp-build.json").write_text('{"version": "old"}\n')
        sentinel = sen.Sentinel(state_dir=str(state), speed_margin=0.0, timeout=120)
        activation = act.Activation(run=host, run_dir=str(tmp_path / "run"), processes=host,  # type: ignore[arg-type]
                                    python=sys.executable, http=host.http, clock=time.monotonic, wall=time.time,
                                    sleep=time.sleep, sentinel=sentinel)
        params = {"root": str(root), "name": "new-cpu", "current": None, "binary": "bin/llama-server",
                  "units": ["llama-server"], "facts_file": str(tmp_path / "llamacpp-build.json"),
                  "facts": {"version": "new"}, "canary": True, "canary_ctx_size": 512, "canary_args": [],
                  "canary_model": None, "canary_timeout": 60, "health_timeout": 20, "rollback_after": 300,
                  "state_dir": str(state), "lock_wait": 0, "flag_table": True, "sentinel_timeout": 120}
        return {"host": host, "activation": activation, "params": params, "production": production}

    yield make
    for thing in started:
        if isinstance(thing, RealCanaryHost):
            thing.stop_real()
        else:
            thing.stop()


def test_the_unchanged_build_passes_its_judged_canary_and_becomes_current(bed: Callable[[str], Dict[str, Any]],
                                                                          llama_server_bin: str) -> None:
    b = bed(llama_server_bin)
    result = b["activation"].activate(b["params"])
    assert b["host"].current == "new-cpu" and result["restarted"] == [UNIT]
    verdict = result["sentinel"][0]
    assert verdict["regressions"] == [] and verdict["canary"]["acceptance"] == verdict["production"]["acceptance"]
    # the canary ran production's real command line on the new binary, with the sentinel's arguments last
    spec = b["host"].canary_specs[0]
    assert spec["argv"][-3:] == ["--metrics", "--parallel", "1"] and "--spec-type" in spec["argv"]
    record = json.loads(Path(b["params"]["facts_file"]).read_text())
    assert record["version"] == "new" and record["sentinel"][0]["config"] == "draft-n3"


@needs_regressed
def test_the_regressed_build_is_refused_before_current_moves_and_production_is_untouched(
        bed: Callable[[str], Dict[str, Any]]) -> None:
    assert REGRESSED is not None
    b = bed(REGRESSED)
    pid = b["production"].pid
    with pytest.raises(act.ActivateError, match=r"build new-cpu refused at the canary: build new-cpu with config "
                       r"'draft-n3' on llama-server.service is a regression against production on the promoted "
                       r"traffic: acceptance \d+\.\d % against production's \d+\.\d %") as err:
        b["activation"].activate(b["params"])
    assert err.value.details["sentinel"]["canary"]["acceptance"] < err.value.details["sentinel"]["production"]["acceptance"]
    assert b["host"].current == "old-cpu" and not b["host"].timer_armed
    assert not any(c[:2] == ["systemctl", "restart"] for c in b["host"].calls)
    assert b["production"].pid == pid and b["production"].returncode is None  # production still serves, untouched
    assert all(proc.poll() is not None for proc in b["host"].real.values())  # the canary was stopped
    assert json.loads(Path(b["params"]["facts_file"]).read_text()) == {"version": "old"}
