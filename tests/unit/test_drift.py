"""Drift watching: the measured band, each comparison, the window's judgement, age, fingerprints of real GGUF files."""
from __future__ import annotations

import copy
import datetime as dt
import json
import re
import subprocess
import sys

import gguf
import numpy as np
import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.llmfleet.specdec.plugins.module_utils.state import _host_state as host_state
from ansible_collections.llmfleet.specdec.plugins.module_utils.watch import _drift as drift
from ansible_collections.llmfleet.specdec.plugins.module_utils.watch import _drift_host as host
from ansible_collections.llmfleet.specdec.plugins.plugin_utils.steps._steps_drift import watch_failing, watch_lines

PROMOTED_ENV = {"LLAMA_ARG_MODEL": "/srv/m/target.gguf", "LLAMA_ARG_PORT": "8080",
                "LLAMA_ARG_SPEC_TYPE": "draft-simple", "LLAMA_ARG_SPEC_DRAFT_MODEL": "/srv/m/draft.gguf",
                "LLAMA_ARG_SPEC_DRAFT_N_MAX": "3"}


def _req(shape: str, drafts: int, tokens: int, accepted: int) -> dict:
    return {"shape": shape, "draft_n": tokens, "draft_n_accepted": accepted, "predicted_n": 64,
            "metrics_delta": {"drafts": drafts, "draft_tokens": tokens, "accepted_tokens": accepted}}


def _evidence() -> dict:
    """Two rounds x two shapes of the promoted config: acceptance 0.9/0.8 (prose), 0.6/0.7 (echo)."""
    entries = [
        {"config": "draft-n3", "round": 0, "bench": {"requests": [_req("prose", 10, 30, 27), _req("echo", 10, 30, 18)]}},
        {"config": "draft-n3", "round": 1, "bench": {"requests": [_req("prose", 10, 30, 24), _req("echo", 10, 30, 21)]}},
        {"config": "baseline", "round": 0, "bench": {"requests": [_req("prose", 0, 0, 0)]}},
    ]
    report = {"run_id": "20261130T120000Z", "finished": "2026-11-30T12:10:00+00:00", "entries": entries,
              "configs": [{"name": "baseline", "chain": [], "rendering": {"env": {}}},
                          {"name": "draft-n3", "chain": ["draft-simple"], "rendering": {"env": dict(PROMOTED_ENV)}}],
              "environment": {}}
    return {"schema": drift.EVIDENCE_SCHEMA, "config": "draft-n3", "run_id": report["run_id"],
            "promoted": "2026-11-30T12:20:00+00:00", "report": report}


def _judge(delta: dict, **kw) -> list:
    opts = {"acceptance_tolerance": 0.05, "mean_len_tolerance": 0.25, "min_draft_tokens": 50, "min_tokens": 64}
    opts.update(kw)
    return drift.judge_window(drift.measured_band(_evidence()), delta, **opts)


def test_band_is_lowest_and_highest_cell_over_rounds_and_shapes() -> None:
    band = drift.measured_band(_evidence())
    assert band["acceptance_low"] == pytest.approx(0.6) and band["acceptance_high"] == pytest.approx(0.9)
    # mean accepted length 1 + accepted / drafts per cell: 3.7, 2.8, 3.4, 3.1
    assert band["mean_len_low"] == pytest.approx(2.8) and band["mean_len_high"] == pytest.approx(3.7)
    assert band["acceptance"] == pytest.approx(90 / 120)
    assert band["speculative"] and len(band["cells"]) == 4  # the baseline's requests are not the promoted config's


def test_live_acceptance_inside_the_band_is_quiet() -> None:
    assert _judge({"tokens_predicted": 500, "drafts": 40, "draft_tokens": 120, "accepted_tokens": 90, "seconds": 60}) == []


def test_acceptance_that_falls_is_caught_with_its_numbers() -> None:
    found = _judge({"tokens_predicted": 500, "drafts": 40, "draft_tokens": 120, "accepted_tokens": 30, "seconds": 60})
    kinds = {f["kind"]: f for f in found}
    assert set(kinds) == {"acceptance-out-of-band", "mean-length-out-of-band"}
    acc = kinds["acceptance-out-of-band"]
    assert acc["severity"] == "drift" and acc["numbers"]["live_acceptance"] == pytest.approx(0.25)
    assert acc["numbers"]["measured_low"] == pytest.approx(0.6) and "below" in acc["message"]
    assert "re-run the A/B" in acc["action"]
    assert kinds["mean-length-out-of-band"]["numbers"]["live_mean_accepted_len"] == pytest.approx(1.75)


def test_tolerance_keeps_a_near_miss_quiet() -> None:
    delta = {"tokens_predicted": 500, "drafts": 25, "draft_tokens": 100, "accepted_tokens": 57, "seconds": 60}
    assert [f["kind"] for f in _judge(delta)] == []  # 0.57 is within 0.05 of 0.6; mean len 3.28 inside
    assert [f["kind"] for f in _judge(delta, acceptance_tolerance=0.01)] == ["acceptance-out-of-band"]


def test_acceptance_above_the_band_is_drift_too() -> None:
    found = _judge({"tokens_predicted": 500, "drafts": 30, "draft_tokens": 100, "accepted_tokens": 99, "seconds": 60})
    assert "acceptance-out-of-band" in [f["kind"] for f in found] and "above" in found[0]["message"]


def test_proposer_that_stopped_while_tokens_flow() -> None:
    found = _judge({"tokens_predicted": 400, "drafts": 0, "draft_tokens": 0, "accepted_tokens": 0, "seconds": 60})
    assert [f["kind"] for f in found] == ["proposer-stopped"]
    assert found[0]["numbers"]["tokens_predicted"] == 400 and "draft-simple" in found[0]["message"]


def test_no_traffic_is_not_drift() -> None:
    found = _judge({"tokens_predicted": 10, "drafts": 0, "draft_tokens": 0, "accepted_tokens": 0, "seconds": 60})
    assert [(f["kind"], f["severity"]) for f in found] == [("too-little-traffic", "info")]


def test_a_promoted_baseline_has_no_acceptance_to_watch() -> None:
    ev = _evidence()
    ev["config"] = "baseline"
    band = drift.measured_band(ev)
    assert not band["speculative"]
    assert drift.judge_window(band, {"tokens_predicted": 900, "drafts": 0, "draft_tokens": 0, "accepted_tokens": 0,
                                     "seconds": 60}, acceptance_tolerance=0.05, mean_len_tolerance=0.25,
                              min_draft_tokens=50, min_tokens=64) == []


def test_build_record_changes() -> None:
    then = {"fingerprint": "aaaa", "version": "b10133", "backend": "cuda", "build": 10133}
    assert drift.compare_build(then, dict(then), "/etc/x.json") == []
    assert drift.compare_build(None, None, "/etc/x.json") == []
    now = dict(then, fingerprint="bbbb", version="b10200", build=10200)
    [f] = drift.compare_build(then, now, "/etc/x.json")
    assert f["kind"] == "build-changed" and set(f["numbers"]["changed"]) == {"fingerprint", "version", "build"}
    assert "specdec_llamacpp_build=b10133" in f["action"]
    assert drift.compare_build(then, None, "/etc/x.json")[0]["kind"] == "build-changed"
    assert drift.compare_build(None, now, "/etc/x.json")[0]["kind"] == "build-changed"


def test_binary_changes() -> None:
    then = {"path": "/opt/a/llama-server", "size": 10, "sha256": "11" * 32}
    assert drift.compare_binary(then, dict(then)) == []
    assert drift.compare_binary(then, dict(then, sha256="22" * 32))[0]["kind"] == "binary-changed"
    assert drift.compare_binary(None, then) == []  # nothing recorded: nothing to compare with


def test_models_compared_per_path() -> None:
    was = {"size": 5, "header_sha256": "h1", "data_sample_sha256": "d1", "tokenizer_fingerprint": "t1"}
    then = {"/m/t.gguf": was, "/m/d.gguf": was}
    now = {"/m/t.gguf": dict(was), "/m/d.gguf": dict(was, data_sample_sha256="d2")}
    [f] = drift.compare_models(then, now, ["/m/t.gguf", "/m/d.gguf"])
    assert f["kind"] == "model-changed" and f["numbers"]["path"] == "/m/d.gguf"
    assert list(f["numbers"]["changed"]) == ["data_sample_sha256"]
    [g] = drift.compare_models(then, {"/m/t.gguf": {"error": "No such file"}}, ["/m/t.gguf"])
    assert g["kind"] == "model-missing" and "No such file" in g["message"]
    # a file that could not be read while measured has nothing to be compared with
    assert drift.compare_models({"/m/u": {"error": "x"}}, {"/m/u": {"error": "x"}}, ["/m/u"]) == []


def test_live_and_pending_env() -> None:
    live = dict(PROMOTED_ENV, LLAMA_ARG_SPEC_DRAFT_N_MAX="7", LLAMA_ARG_THREADS="8", PATH="/usr/bin")
    found = drift.compare_live(PROMOTED_ENV, live, dict(live), "llama-server.service", ["/etc/x.env"])
    [f] = found  # the pending env says the same as the live one: one finding, not two
    assert f["kind"] == "live-config-differs"
    assert f["numbers"]["differences"] == {"LLAMA_ARG_SPEC_DRAFT_N_MAX": {"promoted": "3", "live": "7"},
                                           "LLAMA_ARG_THREADS": {"promoted": None, "live": "8"}}
    pending = {k: v for k, v in PROMOTED_ENV.items() if k != "LLAMA_ARG_SPEC_TYPE"}
    [p] = drift.compare_live(PROMOTED_ENV, dict(PROMOTED_ENV), pending, "llama-server.service", ["/etc/x.env"])
    assert p["kind"] == "pending-config-differs" and "/etc/x.env" in p["message"]
    assert drift.compare_live(PROMOTED_ENV, dict(PROMOTED_ENV, PATH="/bin"), dict(PROMOTED_ENV), "u", []) == []


def test_a_wrappers_env_is_watched_on_the_servers_variables_only() -> None:
    # a wrapper's rendering is its server's whole /proc environ: what systemd and the shell set on that start
    # differs on every restart and is not the config
    measured = {"INVOCATION_ID": "a1", "JOURNAL_STREAM": "9:1", "PWD": "/tmp", "GGML_SCHED": "x",
                "LLAMA_ARG_THREADS": "1", "LLAMA_ARG_SPEC_DRAFT_N_MAX": "1"}
    evidence = {"config": "d1", "report": {"configs": [{"name": "d1", "rendering": {
        "env": measured, "override": {"GGML_SCHED": "x", "LLAMA_ARG_SPEC_DRAFT_N_MAX": "1"}}}]}}
    promoted = drift.server_part(drift.promoted_env(evidence), evidence)
    assert promoted == {"GGML_SCHED": "x", "LLAMA_ARG_THREADS": "1", "LLAMA_ARG_SPEC_DRAFT_N_MAX": "1"}
    later = dict(measured, INVOCATION_ID="b2", JOURNAL_STREAM="9:2")
    assert drift.compare_live(promoted, later, {k: v for k, v in later.items() if k != "PWD"}, "u", []) == []
    [f] = drift.compare_live(promoted, dict(later, LLAMA_ARG_SPEC_DRAFT_N_MAX="3"), None, "u", [])
    assert f["numbers"]["differences"] == {"LLAMA_ARG_SPEC_DRAFT_N_MAX": {"promoted": "1", "live": "3"}}


def test_age() -> None:
    measured = dt.datetime(2026, 11, 1, tzinfo=dt.timezone.utc)
    now = dt.datetime(2026, 11, 30, tzinfo=dt.timezone.utc)
    assert drift.judge_age(measured, None, now, 30) == []
    [f] = drift.judge_age(measured, None, now, 7)
    assert f["kind"] == "evidence-too-old" and f["numbers"]["age_days"] == 29.0
    assert drift.judge_age(measured, None, now, 0) == []
    # an hour-old measurement against a limit of minutes: the age is not rounded away
    [g] = drift.judge_age(now - dt.timedelta(hours=1), None, now, 0.01)
    assert g["numbers"]["age_hours"] == 1.0 and g["numbers"]["age_days"] > 0 and "1.00 hours" in g["message"]


def test_model_paths_from_env_and_extra_args() -> None:
    env = {"LLAMA_ARG_MODEL": "/m/t.gguf", "LLAMA_EXTRA_ARGS": "--spec-type draft-simple -md '/m/my draft.gguf'"}
    assert drift.model_paths(env) == ["/m/t.gguf", "/m/my draft.gguf"]
    assert drift.model_paths({"LLAMA_EXTRA_ARGS": "--model=/m/a.gguf -md"}) == ["/m/a.gguf"]


def test_bad_evidence_names_the_file() -> None:
    with pytest.raises(drift.DriftInputError, match=re.escape("/x.json is not a llmfleet.specdec/promoted/1")):
        drift.check_evidence({"schema": "other"}, "/x.json")
    ev = _evidence()
    ev["config"] = "gone"
    with pytest.raises(drift.DriftInputError, match="'gone' is not a config of run"):
        drift.check_evidence(ev, "/x.json")


def test_failing_filter() -> None:
    found = [drift.finding("build-changed", "m", "a"), drift.finding("too-little-traffic", "m", "a")]
    assert [f["kind"] for f in watch_failing(found)] == ["build-changed"]
    assert [f["kind"] for f in watch_failing(found, "any")] == ["build-changed", "too-little-traffic"]
    assert watch_failing(found, "never") == []
    assert watch_failing(found, "drift", ["build-changed"]) == []
    with pytest.raises(AnsibleFilterError, match="unknown finding kinds nope"):
        watch_failing(found, "drift", ["nope"])
    with pytest.raises(AnsibleFilterError, match="specdec_watch_fail_on"):
        watch_failing(found, "sometimes")
    assert watch_lines({"summary": "h: x", "findings": found})[1].startswith("[drift] build-changed: m -> a")


# ------------------------------------------------------------------ fingerprints of real GGUF files


def _write(path, *, name: str = "t", fill: float = 0.0, tokens=("a", "b")) -> None:
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_name(name)
    w.add_block_count(1)
    w.add_tokenizer_model("gpt2")
    w.add_token_list(list(tokens))
    data = np.zeros((768, 1024), dtype=np.float32)  # 3 MiB: the samples sit at start, middle and end
    data[700, 5] = fill  # only the end sample sees this
    w.add_tensor("w", data)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def test_fingerprint_sees_header_data_and_tokenizer(tmp_path) -> None:
    _write(tmp_path / "a.gguf")
    _write(tmp_path / "same.gguf")
    _write(tmp_path / "data.gguf", fill=1.0)
    _write(tmp_path / "name.gguf", name="other")
    _write(tmp_path / "tok.gguf", tokens=("a", "c"))
    fp = {p: host.model_fingerprint(str(tmp_path / f"{p}.gguf")) for p in ("a", "same", "data", "name", "tok")}
    assert fp["a"] == fp["same"]
    assert fp["data"]["header_sha256"] == fp["a"]["header_sha256"]
    assert fp["data"]["data_sample_sha256"] != fp["a"]["data_sample_sha256"]
    assert fp["name"]["header_sha256"] != fp["a"]["header_sha256"]
    assert fp["name"]["tokenizer_fingerprint"] == fp["a"]["tokenizer_fingerprint"]
    assert fp["tok"]["tokenizer_fingerprint"] != fp["a"]["tokenizer_fingerprint"]
    then = {str(tmp_path / "m.gguf"): fp["a"]}
    [f] = drift.compare_models(then, {str(tmp_path / "m.gguf"): fp["data"]}, [str(tmp_path / "m.gguf")])
    assert list(f["numbers"]["changed"]) == ["data_sample_sha256"]
    (tmp_path / "bad.gguf").write_bytes(b"not a model")
    assert "error" in host.model_fingerprint(str(tmp_path / "bad.gguf"))
    assert "error" in host.model_fingerprint(str(tmp_path / "missing.gguf"))


def test_build_record_reading(tmp_path) -> None:
    rec = {"schema": "llmfleet.specdec/llamacpp-build/1", "version": "b10133", "fingerprint": "c0e7", "backend": "cpu",
           "built_at": "2026-10-04T10:00:00Z"}
    (tmp_path / "b.json").write_text(json.dumps(rec))
    got = host.read_build_record(str(tmp_path / "b.json"))
    assert got["fingerprint"] == "c0e7" and "built_at" not in got  # a rebuild of the same inputs is the same build
    assert host.read_build_record(str(tmp_path / "none.json")) is None
    (tmp_path / "x.json").write_text("{")
    assert "error" in host.read_build_record(str(tmp_path / "x.json"))


def test_band_ignores_requests_of_other_configs() -> None:
    ev = _evidence()
    ev2 = copy.deepcopy(ev)
    ev2["report"]["entries"].append({"config": "baseline", "round": 1, "bench": {"requests": [_req("prose", 5, 50, 0)]}})
    assert drift.measured_band(ev2)["acceptance_low"] == drift.measured_band(ev)["acceptance_low"]


def _never(argv):
    raise AssertionError(f"nothing is asked of systemd without evidence: {argv}")


def test_no_promotion_is_a_finding_and_touches_nothing(tmp_path) -> None:
    result = host.watch({"unit": "llama-server", "state_dir": str(tmp_path)}, run=_never)
    assert [f["kind"] for f in result["findings"]] == ["no-evidence"]
    assert result["evidence_path"] == str(tmp_path / "promoted" / "llama-server.json")
    assert result["summary"] == "llama-server.service: no promotion - DRIFT: no-evidence"  # no host: the unit


def test_broken_evidence_fails_naming_the_file(tmp_path) -> None:
    (tmp_path / "promoted").mkdir()
    (tmp_path / "promoted" / "llama-server.service.json").write_text("{")
    with pytest.raises(drift.DriftInputError, match=re.escape("llama-server.service.json is not JSON")):
        host.watch({"unit": "llama-server.service", "state_dir": str(tmp_path)}, run=_never)
    with pytest.raises(drift.DriftInputError, match="window: expected a number of at least 0"):
        host.watch({"unit": "llama-server", "state_dir": str(tmp_path), "window": -1}, run=_never)


# ------------------------------------------------------------------ the unit's lock (issue 22 point 5)

class _Systemd:
    """systemctl as a stopped unit with an A/B drop-in left in /run answers it; the dead-man timer as told."""

    def __init__(self, dropin: bool = True, armed: bool = False) -> None:
        self.dropin, self.armed, self.asked = dropin, armed, []

    def __call__(self, argv):
        self.asked.append(list(argv))
        if argv[:2] == ["systemctl", "is-active"]:
            return (0, "active\n", "") if self.armed else (3, "inactive\n", "")
        if argv[:2] == ["systemctl", "show"]:
            drop = host.override_paths("llama-server.service").dropin if self.dropin else ""
            return 0, ("MainPID=0\nActiveState=inactive\nExecMainStartTimestamp=\nEnvironmentFiles=\n"
                       f"DropInPaths={drop}\n"), ""
        raise AssertionError(f"the watch only reads: {argv}")


def _watch_with_lock(tmp_path, record, now, **systemd):
    (tmp_path / "promoted").mkdir(exist_ok=True)
    (tmp_path / "promoted" / "llama-server.json").write_text(json.dumps(_evidence()))
    (tmp_path / "locks").mkdir(exist_ok=True)
    if record is not None:
        (tmp_path / "locks" / "llama-server.json").write_text(record if isinstance(record, str) else json.dumps(record))
    fake = _Systemd(**systemd)
    result = host.watch({"unit": "llama-server", "state_dir": str(tmp_path), "window": 0, "max_age_days": 0,
                         "build_record": str(tmp_path / "none.json")}, run=fake, now=lambda: now)
    return result, [f["kind"] for f in result["findings"]]


def test_a_lock_that_expired_a_year_ago_is_stale_and_the_override_is_still_found(tmp_path) -> None:
    now = dt.datetime(2026, 12, 1, tzinfo=dt.timezone.utc)
    year_ago = now.timestamp() - 365 * 86400
    old = {"run_id": "20251201T000000Z-1", "started": "2025-12-01T00:00:00Z", "expires": "2025-12-01T00:15:00Z",
           "expires_epoch": int(year_ago) + 900, "controller": "ctl", "pid": 4242}
    result, kinds = _watch_with_lock(tmp_path, old, now)
    assert "ab-in-progress" not in kinds
    assert kinds[-3:] == ["stale-lock", "override-active", "unit-not-running"], kinds
    stale = next(f for f in result["findings"] if f["kind"] == "stale-lock")
    assert stale["severity"] == "info" and "20251201T000000Z-1" in stale["message"]
    assert "it expired at 2025-12-01T00:15:00Z" in stale["message"]  # ab_lock state=query's reason
    assert stale["numbers"]["lock"]["pid"] == 4242
    assert "DRIFT: evidence-incomplete, override-active, unit-not-running" in result["summary"]


def test_a_live_lock_still_means_an_ab_is_running(tmp_path) -> None:
    now = dt.datetime(2026, 12, 1, tzinfo=dt.timezone.utc)
    live = {"run_id": "r2", "started": "2026-11-30T23:55:00Z", "expires": "2026-12-01T00:10:00Z",
            "expires_epoch": int(now.timestamp()) + 600, "boot_id": "0f3c", "pid_ns": "pid:[1]", "pid": 1,
            "start_ticks": 5}
    result, kinds = _watch_with_lock(tmp_path, live, now)
    assert kinds[-1] == "ab-in-progress" and "override-active" not in kinds
    assert result["findings"][-1]["numbers"]["lock"]["boot_id"] == "0f3c"  # a newer record passed on whole
    # past its expiry, but its dead-man still armed: its candidate serves until the timer restores production
    expired = dict(live, expires_epoch=int(now.timestamp()) - 60)
    result, kinds = _watch_with_lock(tmp_path, expired, now, armed=True)
    assert kinds[-1] == "ab-in-progress" and "dead-man timer is armed" in result["findings"][-1]["message"]


def test_a_holder_provably_gone_makes_the_lock_stale_before_its_expiry(tmp_path) -> None:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    me = host_state.process_identity(child.pid)
    child.wait()  # its pid is gone now, on this boot and in this pid namespace
    now = dt.datetime(2026, 12, 1, tzinfo=dt.timezone.utc)
    record = {"run_id": "r5", "started": "x", "expires": "later", "expires_epoch": int(now.timestamp()) + 3600,
              "pid": child.pid, **me}
    result, kinds = _watch_with_lock(tmp_path, record, now, dropin=False)
    stale = next(f for f in result["findings"] if f["kind"] == "stale-lock")
    assert f"controller process {child.pid} is gone" in stale["message"] and "ab-in-progress" not in kinds


def test_a_lock_file_that_is_no_record_is_stale(tmp_path) -> None:
    now = dt.datetime(2026, 12, 1, tzinfo=dt.timezone.utc)
    result, kinds = _watch_with_lock(tmp_path, "{not json", now, dropin=False)
    stale = next(f for f in result["findings"] if f["kind"] == "stale-lock")
    assert "not a lock record" in stale["message"] and kinds[-1] == "unit-not-running"
    result, kinds = _watch_with_lock(tmp_path, {"run_id": "r3"}, now, dropin=False)
    assert "has no expiry" in next(f for f in result["findings"] if f["kind"] == "stale-lock")["message"]
