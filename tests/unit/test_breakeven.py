# Tests for the break-even arithmetic, the /metrics step 0, the spec_breakeven module and its filters.
from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from ansible.errors import AnsibleFilterError
from ansible.module_utils.testing import patch_module_args
from hypothesis import given
from hypothesis import strategies as st

from ansible_collections.llmfleet.specdec.plugins.filter import breakeven as filters
from ansible_collections.llmfleet.specdec.plugins.module_utils.bench import _breakeven as be
from ansible_collections.llmfleet.specdec.plugins.module_utils.common._errors import SpecdecError
from ansible_collections.llmfleet.specdec.plugins.module_utils.llamacpp import _llamacpp
from ansible_collections.llmfleet.specdec.plugins.modules import spec_breakeven

FIXTURES = Path(__file__).parent / "fixtures" / "breakeven"


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text()


# --------------------------------------------------------------------------- the formula


def test_round_time_is_k_drafts_plus_one_point_one_verifications():
    assert be.round_time(3, 12, 67) == pytest.approx(3 * 12 + 1.1 * 67)
    assert be.round_time(1, 5, 10, verify_factor=1.0) == pytest.approx(15.0)
    # a one-pass block drafter pays one d_s whatever K; an n-gram lookup none
    assert be.round_time(7, 12, 67, draft_passes=1) == pytest.approx(12 + 1.1 * 67)
    assert be.round_time(7, 0, 67, draft_passes=0) == pytest.approx(1.1 * 67)


@pytest.mark.parametrize("p,k,expected", [(0.0, 3, 1.0), (0.5, 1, 1.5), (0.5, 3, 1.875), (0.6, 3, 2.176)])
def test_expected_accepted_matches_closed_form(p, k, expected):
    assert be.expected_accepted(p, k) == pytest.approx(expected)
    assert be.expected_accepted(p, k) == pytest.approx((1 - p ** (k + 1)) / (1 - p))


@pytest.mark.parametrize("k", [1, 3, 7, 16])
def test_p_equal_one_is_the_limit_k_plus_one(k):
    assert be.expected_accepted(1.0, k) == k + 1
    assert be.expected_accepted(1 - 1e-12, k) == pytest.approx(k + 1, rel=1e-9)


def test_rate_is_accepted_over_round_time_in_tok_per_s():
    # p = 0.5, K = 3: A = 1.875 tokens per 109.7 ms
    assert be.rate(0.5, 3, 12, 67) == pytest.approx(1.875 / 0.1097)


@given(p1=st.floats(0, 1), p2=st.floats(0, 1), k=st.integers(1, 12))
def test_rate_grows_with_p(p1, p2, k):
    lo, hi = sorted((p1, p2))
    assert be.rate(lo, k, 12, 67) <= be.rate(hi, k, 12, 67)


@given(k=st.integers(1, 12), d1=st.floats(0.1, 100), d2=st.floats(0.1, 100))
def test_breakeven_p_rises_with_drafter_cost(k, d1, d2):
    cheap, dear = sorted((d1, d2))
    p_cheap = be.breakeven_p(k, cheap, 67, 12)
    p_dear = be.breakeven_p(k, dear, 67, 12)
    if p_dear is not None:
        assert p_cheap is not None and p_cheap <= p_dear


# --------------------------------------------------------------------------- the worked example


def test_worked_example_breaks_even_near_075_not_070():
    """Field notes: t_s 67 ms, d_s 12 ms, 25 tok/s incumbent. The formula gives 0.75 at K=3."""
    p3 = be.breakeven_p(3, 12, 67, 25)
    assert round(p3, 2) == 0.75
    assert round(p3, 2) != 0.70
    assert abs(p3 - 0.70) > 0.04
    # and K = 5, which the notes put at 0.68, is 0.76 by the same formula
    assert round(be.breakeven_p(5, 12, 67, 25), 2) == 0.76


def test_worked_example_band_is_a_loss_of_about_15_to_20_tok_s_at_k3():
    rates = [be.rate(p, 3, 12, 67) for p in (0.4, 0.5, 0.6)]
    assert [round(r, 1) for r in rates] == [14.8, 17.1, 19.8]
    assert max(rates) < 25


@pytest.mark.parametrize("k,d_s,t_s,inc", [(3, 12, 67, 25), (1, 2, 40, 30), (7, 1.5, 90, 14), (5, 0.3, 20, 49.9)])
def test_bisection_is_exact(k, d_s, t_s, inc):
    p = be.breakeven_p(k, d_s, t_s, inc)
    assert p is not None and 0 < p < 1
    assert abs(be.rate(p, k, d_s, t_s) - inc) < 1e-9


def test_none_when_even_p_one_cannot_pay():
    # K = 1 in the worked example: A <= 2 per 85.7 ms = 23.3 tok/s < 25
    assert be.breakeven_p(1, 12, 67, 25) is None
    assert be.rate(1.0, 1, 12, 67) < 25


def test_zero_when_one_token_per_round_already_beats_the_incumbent():
    # an n-gram lookup costs nothing, so p = 0 gives 1 / (1.1 t_s), above an incumbent slower than that
    assert be.breakeven_p(3, 0, 67, 10, draft_passes=0) == 0.0


def test_exact_p_one_boundary():
    k, d_s, t_s = 3, 12, 67
    incumbent = be.rate(1.0, k, d_s, t_s)
    assert be.breakeven_p(k, d_s, t_s, incumbent) == pytest.approx(1.0, abs=1e-12)
    assert be.breakeven_p(k, d_s, t_s, incumbent * (1 + 1e-9)) is None


def test_target_step_from_client_rate():
    # Step 1: 25 tok/s seen by the client at 1.67 tokens per round -> 66.8 ms per target pass
    assert be.target_step_from_rate(25, 1.67) == pytest.approx(66.8)
    assert be.target_step_from_rate(40) == pytest.approx(25.0)


# --------------------------------------------------------------------------- bad input


@pytest.mark.parametrize("call,named", [
    (lambda: be.round_time(0, 12, 67), "k:"),
    (lambda: be.round_time(-2, 12, 67), "k:"),
    (lambda: be.round_time(2.5, 12, 67), "k:"),
    (lambda: be.round_time(True, 12, 67), "k:"),
    (lambda: be.expected_accepted(1.01, 3), "p:"),
    (lambda: be.expected_accepted(-0.1, 3), "p:"),
    (lambda: be.expected_accepted(float("nan"), 3), "p:"),
    (lambda: be.expected_accepted("half", 3), "p:"),
    (lambda: be.round_time(3, 0, 67), "d_s:"),
    (lambda: be.round_time(3, -1, 67), "d_s:"),
    (lambda: be.round_time(3, 12, 0), "t_s:"),
    (lambda: be.rate(0.5, 3, 12, -67), "t_s:"),
    (lambda: be.breakeven_p(3, 12, 67, 0), "incumbent_rate:"),
    (lambda: be.breakeven_p(3, 12, 67, -5), "incumbent_rate:"),
    (lambda: be.target_step_from_rate(0), "client_rate:"),
    (lambda: be.target_step_from_rate(25, 0.5), "commit_per_round:"),
    (lambda: be.classify_drafter("draft-turbo"), "drafter:"),
    (lambda: be.assess(d_s=12), "t_s:"),
    (lambda: be.assess(t_s=67), "d_s:"),
    (lambda: be.assess(t_s=67, d_s=12, ks=[1, 0]), "ks[1]:"),
    (lambda: be.assess(t_s=67, d_s=12, band=[0.4, 1.5]), "band[1]:"),
    (lambda: be.assess(t_s=67, d_s=12, ks=[]), "ks:"),
])
def test_bad_input_names_the_input(call, named):
    with pytest.raises(SpecdecError) as err:
        call()
    assert str(err.value).startswith(named), str(err.value)


# --------------------------------------------------------------------------- classification


@pytest.mark.parametrize("kind,cls,passes", [
    ("draft-simple", "plain model", "k"),
    ("ngram-mod", "n-gram / prompt lookup", "0"),
    ("ngram-cache", "n-gram / prompt lookup", "0"),
    ("draft-mtp", "trained head", "k"),
    ("draft-eagle3", "trained head", "k"),
    ("draft-dflash", "trained head", "1"),
    ("draft-dspark", "trained head", "1"),
])
def test_classify_drafter(kind, cls, passes):
    c = be.classify_drafter(kind)
    assert c["class"] == cls
    assert c["draft_passes_per_round"] == passes
    assert c["cost_per_round"] and c["needs"]


def test_every_llamacpp_spec_type_has_a_cost_row_and_no_other():
    # _llamacpp.SPEC_TYPES is the one list of llama.cpp's spec types; the cost rows follow it
    assert be.spec_types_drift() == {"missing": [], "unknown": []}
    assert set(be.SPEC_TYPES) == set(_llamacpp.SPEC_TYPES) - {"none"}
    for kind in be.SPEC_TYPES:
        assert be.classify_drafter(kind)["spec_type"] == kind


def test_spec_types_drift_names_what_llamacpp_gained_or_dropped():
    gained = be.spec_types_drift((*_llamacpp.SPEC_TYPES, "draft-turbo"))
    assert gained == {"missing": ["draft-turbo"], "unknown": []}
    dropped = be.spec_types_drift(tuple(t for t in _llamacpp.SPEC_TYPES if t != "ngram-cache"))
    assert dropped == {"missing": [], "unknown": ["ngram-cache"]}


def test_classification_feeds_the_arithmetic():
    plain = be.assess(t_s=67, d_s=12, incumbent_rate=25, ks=[7], drafter="draft-simple")
    block = be.assess(t_s=67, d_s=12, incumbent_rate=25, ks=[7], drafter="draft-dflash")
    assert plain["breakeven"][0]["round_time_ms"] == pytest.approx(7 * 12 + 73.7)
    assert block["breakeven"][0]["round_time_ms"] == pytest.approx(12 + 73.7)
    assert block["breakeven"][0]["breakeven_p"] < plain["breakeven"][0]["breakeven_p"]


def test_ngram_needs_no_d_s():
    r = be.assess(t_s=67, incumbent_rate=14, drafter="ngram-mod")
    assert r["inputs"]["d_s"] == {"value": 0.0, "source": "default: an n-gram lookup runs no model"}
    assert r["breakeven"][0]["round_time_ms"] == pytest.approx(73.7)


# --------------------------------------------------------------------------- the report


def test_assess_reports_in_the_field_notes_order_with_sources():
    r = be.assess(t_s=67, d_s=12, incumbent_rate=25, drafter="draft-simple")
    assert list(r)[:4] == ["incumbent", "breakeven", "realistic", "classification"]
    assert [row["k"] for row in r["breakeven"]] == [1, 3, 7]
    assert r["breakeven"][0]["breakeven_p"] is None and "no acceptance can pay" in r["breakeven"][0]["note"]
    assert round(r["breakeven"][1]["breakeven_p"], 2) == 0.75
    assert r["realistic"]["verdict"] == "loss"
    assert {x["verdict"] for x in r["realistic"]["by_k"]} == {"loss"}
    assert r["inputs"]["t_s"] == {"value": 67.0, "source": "given"}
    assert r["inputs"]["incumbent_rate"]["source"] == "given"
    assert r["inputs"]["band"]["source"].startswith("default")
    assert r["inputs"]["commit_per_round"]["source"].startswith("default")
    assert r["incumbent"]["speculates"] is None
    assert r["summary"][0].startswith("1. whether the target already drafts is unknown")
    assert "K=3: p=0.752" in r["summary"][1]


def test_assess_win_on_a_slow_target():
    # a 200 ms target with a 2 ms drafter: the honest band pays at K=3 and K=7
    r = be.assess(t_s=200, d_s=2, drafter="draft-simple")
    assert r["inputs"]["incumbent_rate"]["value"] == pytest.approx(5.0)
    assert r["inputs"]["incumbent_rate"]["source"].startswith("derived: 1 / t_s")
    assert r["realistic"]["verdict"] == "win"
    assert r["realistic"]["best_k_at_mid"] == 7
    assert "measure p" in r["settle_with"]


def test_assess_derives_t_s_from_client_rate():
    r = be.assess(client_rate=25, commit_per_round=1.67, d_s=12)
    assert r["inputs"]["t_s"]["value"] == pytest.approx(66.8)
    assert r["inputs"]["t_s"]["source"].startswith("derived")
    assert r["inputs"]["incumbent_rate"]["value"] == 25
    assert r["incumbent"]["speculates"] is True


# --------------------------------------------------------------------------- step 0: /metrics


def test_parse_llamacpp_recorded_metrics_speculating():
    c = be.parse_spec_counters(fixture("llamacpp_metrics_spec.txt"))
    assert c["engine"] == "llama.cpp"
    assert (c["drafts"], c["draft_tokens"], c["accepted_tokens"]) == (51, 149, 138)
    assert c["accepted_per_pos"] == [49, 45, 44]
    assert sum(c["accepted_per_pos"]) == c["accepted_tokens"]
    assert c["speculates"] is True
    # the server's own log said "mean len = 3.71"
    assert round(c["commit_per_round"], 2) == 3.71
    assert c["acceptance_per_position"][0] == pytest.approx(49 / 51)


def test_parse_llamacpp_recorded_metrics_plain():
    c = be.parse_spec_counters(fixture("llamacpp_metrics_plain.txt"))
    assert c["engine"] == "llama.cpp" and c["exported"] is True
    assert c["speculates"] is False and c["commit_per_round"] == 1.0
    assert c["accepted_per_pos"] == [] and c["acceptance_rate"] is None


def test_parse_vllm_metrics_sums_engines_and_skips_created():
    c = be.parse_spec_counters(fixture("vllm_metrics_spec.txt"))
    assert c["engine"] == "vllm"
    assert (c["drafts"], c["draft_tokens"], c["accepted_tokens"]) == (30000, 90000, 46500)
    assert c["accepted_per_pos"] == [20500, 15200, 10800]
    assert c["commit_per_round"] == pytest.approx(1 + 46500 / 30000)
    assert c["mean_draft_length"] == pytest.approx(3.0)


def test_parse_vllm_without_speculation():
    c = be.parse_spec_counters(fixture("vllm_metrics_plain.txt"))
    assert c["speculates"] is False and c["exported"] is False
    assert "not configured" in c["note"]


@pytest.mark.parametrize("text,message", [
    ("# HELP foo bar\nfoo 1\n", "no llama.cpp (llamacpp:*) or vLLM"),
    ("llamacpp:spec_decode_num_drafts_total twelve\n", "line 1: value 'twelve' is not a number"),
    ("llamacpp:spec_decode_num_drafts_total\n", "line 1: not a Prometheus sample"),
    ('llamacpp:spec_decode_num_accepted_tokens_per_pos_total{pos="0"} 3\n', "without an integer position label"),
    ("<html>502 Bad Gateway</html>\n", "line 1: not a Prometheus sample"),
])
def test_parse_bad_metrics_text(text, message):
    with pytest.raises(SpecdecError, match="/metrics") as err:
        be.parse_spec_counters(text)
    assert message in str(err.value)


def test_parse_handles_scientific_values_and_timestamps():
    text = ("llamacpp:spec_decode_num_drafts_total 1.23457e+06 1700000000000\n"
            "llamacpp:spec_decode_num_accepted_tokens_total 2.5e+06\n")
    c = be.parse_spec_counters(text)
    assert c["drafts"] == 1234570.0
    assert c["commit_per_round"] == pytest.approx(1 + 2.5e6 / 1234570.0)


def test_assess_uses_measured_commit_for_the_incumbent():
    c = be.parse_spec_counters(fixture("llamacpp_metrics_spec.txt"))
    r = be.assess(client_rate=25, d_s=12, counters=c, metrics_source="http://h:8080/metrics")
    inc = r["incumbent"]
    assert inc["speculates"] is True
    assert inc["commit_per_round"] == pytest.approx(1 + 138 / 51)
    assert inc["commit_source"].startswith("measured: http://h:8080/metrics (1 + accepted / drafts")
    # Step 1 with the measured commit: t_s = commit / rate
    assert r["inputs"]["t_s"]["value"] == pytest.approx(1000 * (1 + 138 / 51) / 25)
    assert r["incumbent"]["counters"]["drafts"] == 51
    assert r["summary"][0].startswith("1. the target already drafts: 3.71 tokens/round")


def test_given_commit_overrides_but_keeps_the_measurement():
    c = be.parse_spec_counters(fixture("llamacpp_metrics_spec.txt"))
    r = be.assess(t_s=67, d_s=12, incumbent_rate=25, commit_per_round=1.67, counters=c)
    assert r["inputs"]["commit_per_round"]["value"] == 1.67
    assert r["inputs"]["commit_per_round"]["measured"] == pytest.approx(1 + 138 / 51)


def test_plain_counters_say_the_target_does_not_speculate():
    c = be.parse_spec_counters(fixture("llamacpp_metrics_plain.txt"))
    r = be.assess(t_s=40, d_s=2, counters=c)
    assert r["incumbent"]["speculates"] is False
    assert r["inputs"]["incumbent_rate"]["value"] == pytest.approx(25.0)
    assert r["inputs"]["commit_per_round"]["source"] == "measured: /metrics shows no drafts"


def test_metrics_url():
    assert be.metrics_url("http://127.0.0.1:8080") == "http://127.0.0.1:8080/metrics"
    assert be.metrics_url("http://127.0.0.1:8080/metrics/") == "http://127.0.0.1:8080/metrics"
    with pytest.raises(SpecdecError, match=r"^endpoint:"):
        be.metrics_url("127.0.0.1:8080")


# --------------------------------------------------------------------------- the module


def run_module(args: dict, capsys) -> dict:
    with patch_module_args(args), pytest.raises(SystemExit):
        spec_breakeven.main()
    return json.loads(capsys.readouterr().out)


def test_module_worked_example(capsys):
    out = run_module({"t_s": 67, "d_s": 12, "incumbent_rate": 25, "drafter": "draft-simple"}, capsys)
    assert out["changed"] is False and "failed" not in out
    b = out["breakeven"]
    assert round(b["breakeven"][1]["breakeven_p"], 2) == 0.75
    assert b["breakeven"][0]["breakeven_p"] is None
    assert b["realistic"]["verdict"] == "loss"
    assert b["classification"]["class"] == "plain model"


def test_module_check_mode_is_the_same(capsys):
    args = {"t_s": 67, "d_s": 12, "incumbent_rate": 25}
    normal = run_module(args, capsys)
    checked = run_module({**args, "_ansible_check_mode": True}, capsys)
    assert normal["breakeven"] == checked["breakeven"]
    assert checked["changed"] is False


@pytest.mark.parametrize("args,message", [
    ({"t_s": 67, "d_s": 12, "ks": [0]}, "ks[0]: drafted tokens per round must be >= 1"),
    ({"t_s": 67, "d_s": 12, "band": [0.5, 1.2]}, "band[1]: acceptance probability must lie in [0, 1]"),
    ({"t_s": -1, "d_s": 12}, "t_s: must be greater than 0 ms"),
    ({"t_s": 67, "d_s": 12, "incumbent_rate": 0}, "incumbent_rate: must be greater than 0 tok/s"),
    ({"d_s": 12}, "t_s: give the target's step time"),
    ({"t_s": 67, "d_s": 12, "endpoint": "localhost:8080"}, "endpoint: expected an http:// or https:// URL"),
])
def test_module_fails_naming_the_input(args, message, capsys):
    out = run_module(args, capsys)
    assert out["failed"] is True
    assert message in out["msg"]


class _MetricsHandler(BaseHTTPRequestHandler):
    body = b""
    status = 200

    def do_GET(self):
        self.send_response(self.status if self.path == "/metrics" else 404)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.end_headers()
        self.wfile.write(self.body)

    def log_message(self, *args):
        pass


@pytest.fixture
def metrics_server():
    servers = []

    def start(body: str, status: int = 200) -> str:
        handler = type("H", (_MetricsHandler,), {"body": body.encode(), "status": status})
        srv = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        servers.append(srv)
        return f"http://127.0.0.1:{srv.server_address[1]}"

    yield start
    for srv in servers:
        srv.shutdown()
        srv.server_close()


def test_module_reads_step_0_from_the_endpoint(metrics_server, capsys):
    url = metrics_server(fixture("llamacpp_metrics_spec.txt"))
    out = run_module({"endpoint": url, "client_rate": 25, "d_s": 12, "drafter": "draft-simple"}, capsys)
    b = out["breakeven"]
    assert b["incumbent"]["speculates"] is True
    assert b["incumbent"]["commit_per_round"] == pytest.approx(1 + 138 / 51)
    assert b["inputs"]["commit_per_round"]["source"].startswith(f"measured: {url}/metrics")
    assert b["inputs"]["t_s"]["value"] == pytest.approx(1000 * (1 + 138 / 51) / 25)


def test_module_endpoint_without_metrics_flag(metrics_server, capsys):
    url = metrics_server('{"error":{"code":501}}', status=501)
    out = run_module({"endpoint": url, "t_s": 67, "d_s": 12}, capsys)
    assert out["failed"] is True
    assert "endpoint: GET" in out["msg"] and "--metrics" in out["msg"]


# --------------------------------------------------------------------------- the filters


def test_filters_are_registered():
    assert set(filters.FilterModule().filters()) == {"spec_rate", "spec_breakeven_p", "spec_accepted"}


def test_filters_compute_the_same_arithmetic():
    f = filters.FilterModule().filters()
    assert f["spec_accepted"](1.0, 3) == 4
    assert f["spec_accepted"](0.5, 3) == pytest.approx(1.875)
    assert f["spec_rate"](0.5, 3, 12, 67) == pytest.approx(be.rate(0.5, 3, 12, 67))
    assert round(f["spec_breakeven_p"](25, 3, 12, 67), 2) == 0.75
    assert f["spec_breakeven_p"](25, 1, 12, 67) is None
    assert math.isclose(f["spec_rate"](f["spec_breakeven_p"](25, 3, 12, 67), 3, 12, 67), 25, abs_tol=1e-9)


@pytest.mark.parametrize("call,named", [
    (lambda f: f["spec_accepted"](1.5, 3), "p:"),
    (lambda f: f["spec_rate"](0.5, 0, 12, 67), "k:"),
    (lambda f: f["spec_breakeven_p"](-1, 3, 12, 67), "incumbent_rate:"),
])
def test_filters_fail_naming_the_input(call, named):
    with pytest.raises(AnsibleFilterError) as err:
        call(filters.FilterModule().filters())
    assert str(err.value).startswith(named)


REPO = Path(__file__).resolve().parents[2]


def run_ansible(module: str, args: str) -> tuple[str, dict]:
    """One ad-hoc task through the real ansible CLI on localhost; its status word and JSON result."""
    env = {**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"), "ANSIBLE_PYTHON_INTERPRETER": sys.executable}
    cli = Path(sys.executable).with_name("ansible")
    proc = subprocess.run([str(cli), "localhost", "-i", "localhost,", "-c", "local", "-m", module, "-a", args],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=120, check=False)
    # ad-hoc output: "localhost | SUCCESS => {json}"
    head, sep, body = proc.stdout.partition(" => ")
    assert sep, f"unexpected ansible output:\n{proc.stdout}\n{proc.stderr}"
    return head.split("|")[-1].strip(), json.loads(body)


def test_filters_and_module_through_the_real_ansible_cli():
    """The FQCN filter resolves in a real template, and the module runs as a real task."""
    status, out = run_ansible("ansible.builtin.debug",
                              "msg={{ 25 | llmfleet.specdec.spec_breakeven_p(k=3, d_s=12, t_s=67) | round(2) }}")
    assert (status, out["msg"]) == ("SUCCESS", 0.75)
    status, bad = run_ansible("ansible.builtin.debug", "msg={{ 1.5 | llmfleet.specdec.spec_accepted(k=3) }}")
    assert status == "FAILED!" and "p: acceptance probability must lie in [0, 1]" in bad["msg"]
    status, task = run_ansible("llmfleet.specdec.spec_breakeven", "t_s=67 d_s=12 incumbent_rate=25")
    assert status == "SUCCESS" and task["changed"] is False
    assert round(task["breakeven"]["breakeven"][1]["breakeven_p"], 2) == 0.75
