# Copyright: (c) 2026, llmfleet.specdec contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# Private to the collection: the host reads a drift watch needs (fingerprints, the unit's live env, /metrics twice).
"""What a host holds now, read without changing anything; ``_drift`` judges it against the promoted evidence.

- ``snapshot()``: the build record, the served binary (the unit's running executable) and each model file's
  fingerprints. The A/B role records one while production serves (``environment.measured_on`` of its report), and a
  watch takes another to compare.
- A model file's fingerprints: its size, the sha256 of its GGUF header (key/values and tensor-info table, up to the
  tensor data), the sha256 of three 1 MiB samples of its tensor data (start, middle, end: a re-trained file with an
  identical header differs there) and its tokenizer fingerprint. A header of a few MB and 3 MiB of data are read,
  never the whole file.
- ``watch()``: the evidence, the unit's process env and the env its next start would get, and live acceptance over
  a window (two reads of ``/metrics`` ``window`` seconds apart, from the same process).
"""
from __future__ import annotations

import datetime as _dt
import hashlib
import json
import os
import time
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence

from ansible_collections.llmfleet.specdec.plugins.module_utils.bench._breakeven import (
    COUNTER_KEYS,
    parse_prometheus,
    parse_spec_counters,
)
from ansible_collections.llmfleet.specdec.plugins.module_utils.bench._endpoint import Endpoint
from ansible_collections.llmfleet.specdec.plugins.module_utils.build._build import FACTS_FILE
from ansible_collections.llmfleet.specdec.plugins.module_utils.common._errors import SpecdecError
from ansible_collections.llmfleet.specdec.plugins.module_utils.gguf._gguf import ValueType, read_header
from ansible_collections.llmfleet.specdec.plugins.module_utils.gguf._model_facts import MAX_TEXT, tokenizer_fingerprint
from ansible_collections.llmfleet.specdec.plugins.module_utils.state._host_state import (
    DEFAULT_STATE_DIR,
    Runner,
    safe_path_component,
)
from ansible_collections.llmfleet.specdec.plugins.module_utils.state._host_state import query as query_lock
from ansible_collections.llmfleet.specdec.plugins.module_utils.systemd._envfile import read_env_files
from ansible_collections.llmfleet.specdec.plugins.module_utils.systemd._procview import ProcView, environment_files, parse_show
from ansible_collections.llmfleet.specdec.plugins.module_utils.systemd._serving_unit import read_unit
from ansible_collections.llmfleet.specdec.plugins.module_utils.systemd._systemd import Systemctl, override_paths, service_name
from ansible_collections.llmfleet.specdec.plugins.module_utils.watch import _drift as drift
from ansible_collections.llmfleet.specdec.plugins.module_utils.watch._drift import build_era

SAMPLE_BYTES = 1 << 20
_CHUNK = 1 << 20
# tokens generated, per engine (llama.cpp counts on completion; vLLM as it goes)
_TOKEN_COUNTERS = ("llamacpp:tokens_predicted_total", "vllm:generation_tokens_total")


def _sha256_range(handle: Any, start: int, length: int) -> str:
    h = hashlib.sha256()
    handle.seek(start)
    left = length
    while left > 0:
        piece = handle.read(min(_CHUNK, left))
        if not piece:
            break
        h.update(piece)
        left -= len(piece)
    return h.hexdigest()


def model_fingerprint(path: str) -> Dict[str, Any]:
    """A GGUF file's fingerprints (module docstring); ``{"error": ...}`` when it cannot be read as one."""
    try:
        header = read_header(path)
        size = os.path.getsize(path)
        with open(path, "rb") as handle:
            head = _sha256_range(handle, 0, header.data_offset)
            data = max(size - header.data_offset, 0)
            starts = sorted({header.data_offset, header.data_offset + max(data - SAMPLE_BYTES, 0) // 2,
                             header.data_offset + max(data - SAMPLE_BYTES, 0)})
            sample = hashlib.sha256()
            for start in starts:
                sample.update(f"{start}:".encode())
                sample.update(bytes.fromhex(_sha256_range(handle, start, min(SAMPLE_BYTES, size - start))))
        return {"size": size, "header_sha256": head, "data_sample_sha256": sample.hexdigest(),
                "tokenizer_fingerprint": tokenizer_fingerprint(header),
                "architecture": _shown(header, "general.architecture"), "name": _shown(header, "general.name")}
    except (OSError, SpecdecError) as exc:
        return {"error": str(exc)}


def _shown(header: Any, key: str) -> Any:
    """A header value to show: a string clipped past MAX_TEXT bytes, a scalar as is, an array (never a name) not."""
    kv = header.kv.get(key)
    if kv is None or kv.vtype == ValueType.ARRAY:
        return None
    return kv.text(MAX_TEXT) if kv.vtype == ValueType.STRING else kv.value


def binary_fingerprint(path: Optional[str]) -> Optional[Dict[str, Any]]:
    if not path:
        return None
    try:
        size = os.path.getsize(path)
        with open(path, "rb") as handle:
            digest = _sha256_range(handle, 0, size)
    except OSError as exc:
        return {"path": path, "error": str(exc)}
    return {"path": path, "size": size, "sha256": digest}


def read_build_record(path: str) -> Optional[Dict[str, Any]]:
    """The identifying fields of role llamacpp_build's record; None without one, ``{"error"}`` for a broken one."""
    try:
        with open(path, encoding="utf-8") as handle:
            record = json.load(handle)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        return {"error": f"{path}: {exc}"}
    if not isinstance(record, Mapping):
        return {"error": f"{path}: not a JSON object"}
    return {k: record.get(k) for k in drift.BUILD_KEYS}


class UnitView:
    """The unit as systemd and /proc see it: main process, its executable and env, env files, drop-ins."""

    def __init__(self, unit: str, run: Runner, proc: str = "/proc") -> None:
        self.unit = service_name(unit)
        self.run = run
        self.systemctl = Systemctl(run)
        self.proc = ProcView(proc)
        self._unit: Optional[Dict[str, Any]] = None
        props = ("MainPID", "ActiveState", "ExecMainStartTimestamp")
        self.show = self.systemctl.show(self.unit, props)
        raw = parse_show(self.systemctl.must(["systemctl", "show", self.unit, "-p", "EnvironmentFiles",
                                              "-p", "DropInPaths"]))
        self.env_files = environment_files(raw.get("EnvironmentFiles", []))
        self.dropins = [p for line in raw.get("DropInPaths", []) for p in line.split()]
        try:
            self.pid = int(self.show.get("MainPID") or 0)
        except ValueError:
            self.pid = 0

    @property
    def running(self) -> bool:
        return self.show.get("ActiveState") == "active" and self.pid > 0

    def executable(self) -> Optional[str]:
        if not self.pid:
            return None
        try:
            return os.readlink(os.path.join(self.proc.proc, str(self.pid), "exe"))
        except OSError:
            return None

    def _read(self) -> Dict[str, Any]:
        if self._unit is None:
            try:
                self._unit = dict(read_unit(self.unit, self.run, proc=self.proc.proc))
            except SpecdecError:
                self._unit = {}
        return self._unit

    @property
    def wrapper(self) -> bool:
        return self._read().get("kind") == "wrapper"

    def environ(self) -> Optional[Dict[str, str]]:
        """The server's environment: its MainPID's, or for a wrapper that keeps the server as its child, the
        server process's (``_unit_wrapper``)."""
        wrapper = self._read().get("wrapper") or {}
        pid = int(wrapper.get("pid") or 0) or self.pid
        return self.proc.environ(pid) if pid else None

    def pending_env(self, promoted: Sequence[str] = ()) -> Dict[str, str]:
        """The env the unit's next start gets, in systemd's order and parsing: its Environment=, EnvironmentFile=s
        and UnsetEnvironment= (``_serving_unit``'s reading), with what a wrapper sets itself as it runs now (not
        the ``promoted`` config's variables, which the preflight never let a wrapper set: there a server that
        differs from the unit's files is a change pending on disk); else, for a unit that reading refuses, its
        env files."""
        unit = self._read()
        if unit.get("installed"):
            env = dict(unit["env"])
            for name, value in ((unit.get("wrapper") or {}).get("set_by_wrapper") or {}).items():
                if name in promoted:
                    continue
                if value is None:
                    env.pop(name, None)
                else:
                    env[name] = value
            return env
        return read_env_files([path for path, _ignore in self.env_files])


def snapshot(unit: str, models: Sequence[str], build_record: str, run: Runner,
             now: Callable[[], _dt.datetime] = lambda: _dt.datetime.now(_dt.timezone.utc)) -> Dict[str, Any]:
    view = UnitView(unit, run)
    return {"schema": drift.SNAPSHOT_SCHEMA, "taken": now().strftime("%Y-%m-%dT%H:%M:%SZ"),
            "unit": view.unit, "build_record_path": build_record, "build": read_build_record(build_record),
            "binary": binary_fingerprint(view.executable()),
            "models": {path: model_fingerprint(path) for path in dict.fromkeys(models)}}


def read_sentinel(path: str) -> List[Any]:
    """The build sentinel's verdicts in the build record (llamacpp_activate writes them under ``sentinel``)."""
    try:
        with open(path, encoding="utf-8") as handle:
            record = json.load(handle)
    except (OSError, ValueError):
        return []
    found = record.get("sentinel") if isinstance(record, Mapping) else None
    return list(found) if isinstance(found, list) else []


def read_counters(client: Endpoint) -> Dict[str, Any]:
    status, body = client.request("GET", "/metrics")
    if status != 200:
        raise SpecdecError(f"{client.url('/metrics')} answered {status}; start llama-server with --metrics "
                           "(LLAMA_ARG_ENDPOINT_METRICS=1) so the watch can read live acceptance, or set window: 0")
    text = body.decode("utf-8", "replace")
    counters = parse_spec_counters(text)
    tokens = sum(v for name, _labels, v in parse_prometheus(text) if name in _TOKEN_COUNTERS)
    return dict({key: counters[key] for key in COUNTER_KEYS}, tokens_predicted=tokens)


def _load_evidence(path: str) -> Optional[Dict[str, Any]]:
    try:
        with open(path, encoding="utf-8") as handle:
            return drift.check_evidence(json.load(handle), path)
    except FileNotFoundError:
        return None
    except ValueError as exc:
        raise drift.DriftInputError(f"{path} is not JSON ({exc}); run playbooks/promote.yml again") from None


def watch(params: Mapping[str, Any], run: Runner, *, sleep: Callable[[float], None] = time.sleep,
          now: Callable[[], _dt.datetime] = lambda: _dt.datetime.now(_dt.timezone.utc)) -> Dict[str, Any]:
    """Every finding for one unit (see ``_drift``), the numbers behind them and a one-line summary."""
    unit = params["unit"]
    state_dir = params.get("state_dir") or DEFAULT_STATE_DIR
    window = drift.check_number("window", params.get("window", 300))
    max_age = drift.check_number("max_age_days", params.get("max_age_days", 30))
    acc_tol = drift.check_number("acceptance_tolerance", params.get("acceptance_tolerance", 0.05))
    len_tol = drift.check_number("mean_len_tolerance", params.get("mean_len_tolerance", 0.25))
    min_drafted = int(drift.check_number("min_draft_tokens", params.get("min_draft_tokens", 50)))
    min_tokens = int(drift.check_number("min_tokens", params.get("min_tokens", 64)))
    # host is deprecated (spec_watch only printed it): without it the summary names the unit
    host = params.get("host") or service_name(unit)
    # promote.yml names the file after specdec_unit as the inventory spells it (with or without .service)
    stem = service_name(unit)[: -len(".service")]
    names = dict.fromkeys([safe_path_component(unit, "unit"), safe_path_component(stem, "unit")])
    candidates = [os.path.join(state_dir, "promoted", name + ".json") for name in names]
    path = next((c for c in candidates if os.path.exists(c)), candidates[-1])
    evidence = _load_evidence(path)
    result: Dict[str, Any] = {"schema": drift.WATCH_SCHEMA, "unit": service_name(unit), "evidence_path": path,
                              "config": None, "run_id": None, "findings": [], "measured": None, "live": None}
    findings: List[Dict[str, Any]] = result["findings"]
    if evidence is None:
        findings.append(drift.finding("no-evidence", f"no promotion is recorded for {service_name(unit)} ({path} "
                                      "does not exist): there is nothing to hold production against",
                                      f"{drift.RERUN}; until then production is unmeasured", path=path))
        result["summary"] = drift.summary_line(host, findings, None)
        return result
    report = evidence["report"]
    result.update(config=evidence["config"], run_id=report.get("run_id"), promoted=evidence.get("promoted"))
    promoted = drift.promoted_env(evidence)
    band = drift.measured_band(evidence)
    result["measured"] = {k: band[k] for k in band if k != "cells"}
    result["measured"]["cells"] = len(band["cells"])

    measured_at = drift.parse_time(report.get("finished")) or drift.parse_time(report.get("started"))
    findings += drift.judge_age(measured_at, drift.parse_time(evidence.get("promoted")), now(), max_age)
    if measured_at is not None:
        result["evidence_age_seconds"] = round((now() - measured_at).total_seconds(), 1)

    then = (report.get("environment") or {}).get("measured_on")
    paths = drift.model_paths(drift.promoted_model_env(evidence))
    build_path = params.get("build_record") or (then or {}).get("build_record_path") or FACTS_FILE
    current = snapshot(unit, paths, build_path, run, now)
    result["now"] = current
    if not isinstance(then, Mapping) or then.get("schema") != drift.SNAPSHOT_SCHEMA:
        findings.append(drift.finding("evidence-incomplete", f"run {report.get('run_id')} recorded no build or model "
                                      "fingerprints (measured before this collection recorded them): whether the "
                                      "build or the models changed since cannot be told", drift.RERUN))
    else:
        findings += drift.compare_build(then.get("build"), current["build"], build_path)
        result["build_era"] = build_era(then.get("build"), current["build"], service_name(unit), read_sentinel(build_path))
        findings += drift.compare_binary(then.get("binary"), current["binary"])
        findings += drift.compare_models(then.get("models") or {}, current["models"], paths)

    view = UnitView(unit, run)
    # ab_lock state=query's reading of the lock (held, stale and why), so the watch and the playbooks agree
    lock_state = query_lock({"unit": unit, "state_dir": state_dir}, run, now=lambda: now().timestamp())
    state, lock_finding = drift.judge_lock(lock_state, view.unit)
    if state == "held" and lock_finding is not None:
        findings.append(lock_finding)
        result["summary"] = drift.summary_line(host, findings, evidence["config"])
        return result
    if lock_finding is not None:
        findings.append(lock_finding)  # a stale lock: production is judged, an override left active too
    dropin = next((path for path in override_paths(view.unit).all_dropins
                   if path in view.dropins or os.path.exists(path)), None)
    if dropin:
        findings.append(drift.finding("override-active", f"an A/B candidate override {dropin} is in place and no "
                                      "A/B run holds the unit: a run was killed before its restore, and its dead-man "
                                      "timer has not restored production",
                                      "ansible-playbook playbooks/rollback.yml -l <host> (restores production)",
                                      dropin=dropin))
    if not view.running:
        findings.append(drift.finding("unit-not-running", f"{view.unit} is {view.show.get('ActiveState')} (MainPID "
                                      f"{view.pid}): production is not serving",
                                      f"journalctl -u {view.unit}; systemctl start {view.unit}"))
        result["summary"] = drift.summary_line(host, findings, evidence["config"])
        return result
    live_env = view.environ()
    own: List[str] = []
    if view.wrapper:
        promoted = drift.server_part(promoted, evidence)
        own = list((drift.promoted_config(evidence).get("rendering") or {}).get("override") or {})
    findings += drift.compare_live(promoted, live_env, view.pending_env(own), view.unit, [p for p, _dummy in view.env_files])
    result["live"] = {"pid": view.pid, "started": view.show.get("ExecMainStartTimestamp"),
                      "model_paths": drift.model_paths(live_env or {})}

    if window > 0:
        findings += _window(params, view, band, window, sleep, acc_tol, len_tol, min_drafted, min_tokens, result, run)
    else:
        findings.append(drift.finding("window-skipped", "window: 0, live acceptance was not read",
                                      "give specdec_watch_window seconds (300 by default) to judge it"))
    result["summary"] = drift.summary_line(host, findings, evidence["config"])
    return result


def _window(params: Mapping[str, Any], view: UnitView, band: Mapping[str, Any], window: float,
            sleep: Callable[[float], None], acc_tol: float, len_tol: float, min_drafted: int, min_tokens: int,
            result: Dict[str, Any], run: Runner) -> List[Dict[str, Any]]:
    client = Endpoint(params.get("endpoint") or "http://127.0.0.1:8080", timeout=30,
                      validate_certs=params.get("validate_certs", True))
    first = read_counters(client)
    started = time.monotonic()
    sleep(window)
    second = read_counters(client)
    seconds = round(time.monotonic() - started, 1)
    after = UnitView(view.unit, run)
    delta = {k: second[k] - first[k] for k in first}
    delta["seconds"] = seconds
    result["live"]["window"] = {"first": first, "second": second, "delta": delta}
    if after.pid != view.pid or any(v < 0 for k, v in delta.items() if k != "seconds"):
        return [drift.finding("restarted-in-window", f"{view.unit} restarted during the {seconds} s window (MainPID "
                              f"{view.pid} -> {after.pid}): its counters start again, acceptance was not judged",
                              "watch again; a unit that keeps restarting needs journalctl -u " + view.unit)]
    return drift.judge_window(band, delta, acceptance_tolerance=acc_tol, mean_len_tolerance=len_tol,
                              min_draft_tokens=min_drafted, min_tokens=min_tokens)
