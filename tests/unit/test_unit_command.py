"""A unit's command line understood (module_utils/systemd/_unit_command.py) and a candidate rendered in its form (_render.py)."""
from __future__ import annotations

import fnmatch
import shlex

import pytest

from ansible_collections.llmfleet.specdec.plugins.module_utils.llamacpp import _flags
from ansible_collections.llmfleet.specdec.plugins.module_utils.systemd import _unit_command as uc
from ansible_collections.llmfleet.specdec.plugins.module_utils.systemd._render import (
    RenderError,
    render_candidate,
    render_configs,
)
from ansible_collections.llmfleet.specdec.plugins.plugin_utils.steps._steps_ab import ab_render, ab_report_configs, ab_schedule

LLAMA = "/opt/specdec/bin/llama-server"
HAND = [LLAMA, "-m", "/srv/t.gguf", "-md", "/srv/d.gguf", "--spec-type", "draft-simple", "--spec-draft-n-max", "3",
        "-t", "1", "--port", "8081", "--metrics", "--no-context-shift"]


def unit_of(argv: list[str], env: dict | None = None, backend: str | None = None) -> dict:
    return dict(uc.describe(argv, env or {}, backend, "llama.service"), unit="llama.service", installed=True,
                env=env or {}, exec_prefix="")


@pytest.mark.parametrize("argv, form, kind, engine, server_at", [
    (HAND, "exec", "direct", "llamacpp", 1),
    (["/usr/bin/python3", "/usr/local/libexec/llamacpp-serve-exec", LLAMA], "env", "launcher", "llamacpp", 3),
    (["/opt/vllm/bin/vllm", "serve", "/m", "--port", "8001"], "exec", "direct", "vllm", 2),
    (["/opt/vllm/bin/python3", "-u", "-m", "vllm.entrypoints.openai.api_server", "--model", "/m"], "exec", "direct",
     "vllm", 4),
    (["/usr/bin/podman", "--log-level=info", "run", "--rm", "-it", "-p", "8080:8080", "img", "-m", "/m"], "exec",
     "container", "llamacpp", 8),
    (["/usr/bin/podman", "run", "-p", "8000:8000", "vllm/vllm-openai:v0.9", "--model", "/m"], "exec", "container",
     "vllm", 5),
    (["/usr/bin/podman", "run", "-p", "9:8080", "img", "/app/llama-server", "-m", "/m"], "exec", "container",
     "llamacpp", 6),
])
def test_forms(argv: list[str], form: str, kind: str, engine: str, server_at: int) -> None:
    d = uc.describe(argv, {}, None, "u")
    assert (d["form"], d["kind"], d["engine"], d["server_at"]) == (form, kind, engine, server_at)


@pytest.mark.parametrize("argv, says", [
    (["/bin/sh", "-c", "llama-server -m x"], "wrapper"),
    (["/usr/bin/stdbuf", "-oL", LLAMA], "wrapper"),
    (["/usr/bin/nice", "-n", "5", "/opt/run-llama.sh"], "wrapper"),
    (["/opt/run-llama.sh"], "not llama-server"),
    (["/usr/bin/python3", "-c", "import x"], "inline code"),
    (["/opt/vllm/bin/vllm", "bench"], "not `vllm serve`"),
    (["/usr/bin/podman", "pull", "img"], "not `podman run`"),
    (["/usr/bin/podman", "run", "--weird-opt", "x", "img"], "--weird-opt=VALUE"),
    (["/usr/bin/podman", "run", "-Z", "img"], "long form"),
    (["/usr/bin/podman", "run", "img", "/app/server.sh"], "not llama-server or vLLM"),
    (["/usr/bin/docker", "run", "-p", "8000:8000", "vllm/vllm-openai:v0.9", "--model", "/m"],
     "outside the unit's cgroup.*podman run"),
    (["/usr/bin/docker", "compose", "up"], "docker compose.*unit of its own"),
    (["/usr/local/bin/llama-swap", "--config", "/etc/swap.yaml"], "llama-swap.*unit of its own"),
])
def test_refused_forms_say_what_to_do(argv: list[str], says: str) -> None:
    with pytest.raises(uc.CommandError, match=says) as info:
        uc.describe(argv, {}, None, "llama.service")
    assert "llama.service" in str(info.value)


def test_container_env_and_endpoint(tmp_path) -> None:
    env_file = tmp_path / "c.env"
    env_file.write_text("# comment\nFROM_FILE=1\nPASSED\n")
    argv = ["/usr/bin/podman", "run", "--env-file", str(env_file), "-e", "A=1", "--env=B", "-p",
            "127.0.0.1:9000:8080/tcp", "img", "--port", "8080"]
    d = uc.describe(argv, {"PASSED": "p", "B": "b"}, None, "u")
    assert d["server_env"] == {"FROM_FILE": "1", "PASSED": "p", "A": "1", "B": "b"}
    assert d["container"]["env_from_files"] == ["FROM_FILE", "PASSED"]
    assert uc.endpoint(d) == ("127.0.0.1", 9000)
    with pytest.raises(uc.CommandError, match="does not publish"):
        uc.endpoint(uc.describe(["/usr/bin/podman", "run", "img", "--port", "8081"], {}, None, "u"))
    assert uc.endpoint(uc.describe(["/usr/bin/podman", "run", "--network=host", "img", "--port", "8081"], {}, None,
                                   "u")) == ("127.0.0.1", 8081)


def test_endpoint_of_direct_units() -> None:
    assert uc.endpoint(unit_of(HAND)) == ("127.0.0.1", 8081)
    assert uc.endpoint(unit_of([LLAMA, "-m", "/m"], {"LLAMA_ARG_PORT": "9001", "LLAMA_ARG_HOST": "0.0.0.0"})) == \
        ("127.0.0.1", 9001)
    assert uc.endpoint(unit_of(["/v/bin/vllm", "serve", "/m"])) == ("127.0.0.1", 8000)


# ------------------------------------------------------------------ the candidate on the command line


def test_env_setting_becomes_its_flag_replacing_every_alias() -> None:
    unit = unit_of([LLAMA, "-m", "/t", "--draft-max", "3", "--spec-draft-n-max", "2"]
                   if _flags.lookup("--draft-max") else [LLAMA, "-m", "/t", "--spec-draft-n-max", "2"])
    r = render_candidate(unit["env"], {"LLAMA_ARG_SPEC_DRAFT_N_MAX": "6", "CUDA_VISIBLE_DEVICES": "1"}, [], "d6",
                         unit=unit)
    assert r["form"] == "exec" and r["exec_start"][0] == LLAMA
    assert r["argv"].count("--spec-draft-n-max") == 1 and r["argv"][-2:] == ["--spec-draft-n-max", "6"]
    assert r["override"] == {"CUDA_VISIBLE_DEVICES": "1"} and r["env"]["CUDA_VISIBLE_DEVICES"] == "1"
    assert _flags.parse(r["argv"], r["env"])["draft_n_max"] == 6
    assert r["effective_env"]["LLAMA_ARG_SPEC_DRAFT_N_MAX"] == "6"
    assert r["server_config"] == {"LLAMA_ARG_SPEC_DRAFT_N_MAX": "6", "CUDA_VISIBLE_DEVICES": "1"}


def test_bools_negations_null_and_flags() -> None:
    unit = unit_of(HAND, {"LLAMA_ARG_CTX_SIZE": "4096"})
    r = render_candidate(unit["env"], {"LLAMA_ARG_CONTEXT_SHIFT": "on", "LLAMA_ARG_ENDPOINT_METRICS": None,
                                       "LLAMA_ARG_CTX_SIZE": None},
                         ["-t", "2", "--spec-type", "ngram-mod"], "c", unit=unit)
    args = r["argv"]
    assert "--no-context-shift" not in args and "--context-shift" in args and "--metrics" not in args
    assert args.count("-t") + args.count("--threads") == 1 and args[-4:] == ["-t", "2", "--spec-type", "ngram-mod"]
    # --spec-type appends in llama-server: the config's is added after production's, as in form env
    assert _flags.parse(args, r["env"])["spec_types"] == ["draft-simple", "ngram-mod"]
    assert r["unset"] == ["LLAMA_ARG_CTX_SIZE", "LLAMA_ARG_ENDPOINT_METRICS"]
    assert "LLAMA_ARG_CTX_SIZE" not in r["env"]
    r2 = render_candidate({}, {"LLAMA_ARG_SPEC_TYPE": "ngram-mod"}, [], "c2", unit=unit)
    assert _flags.parse(r2["argv"], r2["env"])["spec_types"] == ["ngram-mod"]  # a setting replaces


def test_one_option_as_env_and_flag_is_refused_naming_the_flag() -> None:
    r = render_candidate({}, {"LLAMA_ARG_SPEC_DRAFT_N_MAX": "6"}, ["--spec-draft-n-max", "4"], "twice",
                         unit=unit_of(HAND))
    assert [(x["code"], x["flag"]) for x in r["refused"]] == [("set-twice", "--spec-draft-n-max")]
    assert r["exec_start"] == HAND  # rendered as production: it never runs


def test_env_form_refuses_settings_production_command_line_outranks() -> None:
    base = {"LLAMA_ARG_MODEL": "/t", "LLAMA_EXTRA_ARGS": "--spec-draft-n-max 3 --spec-type draft-simple"}
    r = render_candidate(base, {"LLAMA_ARG_SPEC_DRAFT_N_MAX": "6", "LLAMA_ARG_SPEC_TYPE": "ngram-mod",
                                "LLAMA_ARG_THREADS": "2"}, [], "sweep")
    assert r["form"] == "env" and r["exec_start"] is None
    refused = {x["setting"]: x["flag"] for x in r["refused"]}
    assert refused == {"LLAMA_ARG_SPEC_DRAFT_N_MAX": "--spec-draft-n-max", "LLAMA_ARG_SPEC_TYPE": "--spec-type"}
    assert "production's LLAMA_EXTRA_ARGS has --spec-draft-n-max 3" in r["refused"][0]["message"]
    launcher = unit_of(["/usr/bin/python3", "/x/llamacpp-serve-exec", LLAMA, "--port", "8090"])
    r = render_candidate({}, {"LLAMA_ARG_PORT": "9000"}, [], "p", unit=launcher)
    assert r["form"] == "env" and "the unit's ExecStart= line has --port 8090" in r["refused"][0]["message"]
    # flags come after production's: never refused
    assert not render_candidate(base, {}, ["--spec-draft-n-max", "6"], "f")["refused"]


def test_container_candidate_goes_after_the_image_and_env_as_runtime_options() -> None:
    argv = ["/usr/bin/podman", "run", "--rm", "-e", "LLAMA_ARG_N_PARALLEL=2", "-e", "KEEP=1", "-p", "8080:8080",
            "ghcr.io/ggml-org/llama.cpp:server", "-m", "/models/t.gguf", "--spec-draft-n-max", "3"]
    unit = unit_of(argv)
    r = render_candidate({}, {"LLAMA_ARG_SPEC_DRAFT_N_MAX": "6", "GGML_X": "on", "KEEP": None}, [], "c", unit=unit)
    new = r["exec_start"]
    image = new.index("ghcr.io/ggml-org/llama.cpp:server")
    assert new[image + 1:] == ["-m", "/models/t.gguf", "--spec-draft-n-max", "6"]
    assert new[:image] == ["/usr/bin/podman", "run", "--rm", "-e", "LLAMA_ARG_N_PARALLEL=2", "-p", "8080:8080", "-e",
                           "GGML_X=on"]
    assert r["env"] == {"LLAMA_ARG_N_PARALLEL": "2", "GGML_X": "on"} and r["override"] == {}


def test_vllm_launcher_variables_become_arguments() -> None:
    unit = unit_of(["/v/bin/vllm", "serve", "/m", "--port", "8001", "--speculative-config", '{"method":"ngram"}',
                    "--max-model-len", "1024"])
    r = render_candidate({}, {"VLLM_SPECULATIVE_CONFIG": '{"num_speculative_tokens": 3, "method": "ngram"}',
                              "VLLM_CPU_KVCACHE_SPACE": "1"}, ["--max-model-len", "2048"], "v", backend="vllm",
                         unit=unit)
    assert r["exec_start"] == ["/v/bin/vllm", "serve", "/m", "--port", "8001", "--speculative-config",
                               '{"method":"ngram","num_speculative_tokens":3}', "--max-model-len", "2048"]
    assert r["override"] == {"VLLM_CPU_KVCACHE_SPACE": "1"}
    with pytest.raises(RenderError, match="VLLM_SPECULATIVE_CONFIG is not JSON"):
        render_candidate({}, {"VLLM_SPECULATIVE_CONFIG": "{"}, [], "v", backend="vllm", unit=unit)


def test_bad_input_names_the_config_and_the_fix() -> None:
    with pytest.raises(RenderError, match="config x: LLAMA_EXTRA_ARGS is read only by the collection's launcher"):
        render_candidate({}, {"LLAMA_EXTRA_ARGS": "--foo"}, [], "x", unit=unit_of(HAND))
    with pytest.raises(RenderError, match="not a boolean"):
        render_candidate({}, {"LLAMA_ARG_CONTEXT_SHIFT": "maybe"}, [], "x", unit=unit_of(HAND))
    with pytest.raises(RenderError, match="specdec_engine"):
        render_candidate({}, {}, [], "x", backend="vllm", unit=unit_of(HAND))
    with pytest.raises(RenderError, match="baseline is production"):
        render_configs([{"name": "baseline", "flags": ["-t", "2"]}], {}, "baseline", unit=unit_of(HAND))


def test_a_depth_sweep_is_three_servers_and_the_report_knows_each_depth() -> None:
    unit = unit_of(HAND)
    configs = [{"name": "baseline"}] + [{"name": f"d@{k}", "env": {"LLAMA_ARG_SPEC_DRAFT_N_MAX": str(k)}}
                                        for k in (1, 6)]
    rendered = ab_render(configs, {}, "baseline", "llamacpp", unit)
    assert rendered["baseline"]["exec_start"] == HAND
    depths = [_flags.parse(rendered[c["name"]]["argv"], {})["draft_n_max"] for c in configs]
    assert depths == [3, 1, 6]
    plan = ab_schedule([dict(c, rendering=rendered[c["name"]]) for c in configs], 1)
    assert [slot["restart"] for slot in plan] == [True, True, True]  # every config on a fresh start, the baseline too
    report = ab_report_configs(configs, {}, rendered)
    assert [c.get("k") for c in report] == [3, 1, 6]
    assert report[2]["server_config"] == {"LLAMA_ARG_SPEC_DRAFT_N_MAX": "6"}


def test_exec_start_quoting_is_what_systemd_gives_back() -> None:
    from ansible_collections.llmfleet.specdec.plugins.module_utils.systemd import _execstart as es
    unit = unit_of(HAND)
    r = render_candidate({}, {}, ["--alias", "100% $HOME \"x\""], "q", unit=unit)
    text = es.quote_exec_argv(r["exec_start"], "")
    assert list(es.expand_argv(es.parse_exec(text, {})[0].argv, {"HOME": "/root"}).argv) == r["exec_start"]
    assert shlex.join(r["exec_start"]).endswith(shlex.quote("100% $HOME \"x\""))


# ------------------------------------------------------------------ promotion and watch of a form exec winner


def _report(unit: dict) -> dict:
    rendered = ab_render([{"name": "baseline"}, {"name": "d6", "env": {"LLAMA_ARG_SPEC_DRAFT_N_MAX": "6",
                                                                       "GGML_SCHED": "x y"}}],
                         {}, "baseline", "llamacpp", unit)
    return {"run_id": "r1", "baseline": "baseline",
            "configs": [{"name": n, "rendering": r} for n, r in rendered.items()]}


def test_exec_promotion_is_a_drop_in_that_systemd_reads_back() -> None:
    from ansible_collections.llmfleet.specdec.plugins.module_utils.systemd import _execstart as es
    from ansible_collections.llmfleet.specdec.plugins.plugin_utils.steps._steps_units import exec_promotion

    unit = unit_of(HAND)
    report = _report(unit)
    promo = exec_promotion(report, "d6", unit, ["# d6 | prose | 1.0x"])
    assert promo["dropin"] == "/etc/systemd/system/llama.service.d/40-llmfleet-specdec-promoted.conf"
    settings = [(a.key, a.value) for a in es.unit_assignments(promo["text"])]
    # the env file has a name of its own per content, so the previous one stays until the new pair answers
    assert settings[0] == ("EnvironmentFile", promo["env_file"])
    assert promo["env_file"].startswith("/etc/llmfleet-specdec/llama.service.promoted-")
    assert fnmatch.fnmatch(promo["env_file"].rsplit("/", 1)[1], promo["env_pattern"])
    other = dict(report, configs=[dict(c, rendering=dict(c["rendering"], override=dict(
        c["rendering"].get("override") or {}, GGML_SCHED="z"))) for c in report["configs"]])
    assert exec_promotion(other, "d6", unit)["env_file"] != promo["env_file"]
    assert settings[1] == ("ExecStart", "")
    assert list(es.parse_exec(settings[2][1], {})[0].argv) == promo["exec_start"]
    assert promo["exec_start"][-2:] == ["--spec-draft-n-max", "6"] and "# d6 | prose | 1.0x" in promo["text"]
    assert promo["env_text"] == 'GGML_SCHED="x y"\n'
    # already promoted: the same again is allowed; production changed since the run: refused unless forced
    assert exec_promotion(report, "d6", dict(unit, argv=promo["exec_start"]))["exec_start"] == promo["exec_start"]
    changed = dict(unit, argv=[*HAND, "--ctx-size", "8192"])
    with pytest.raises(Exception, match="command line changed since run r1"):
        exec_promotion(report, "d6", changed)
    assert exec_promotion(report, "d6", changed, force=True)["exec_start"] == promo["exec_start"]
    env_form = {"run_id": "r2", "baseline": "baseline", "configs": [{"name": "x", "rendering": {"form": "env"}}]}
    with pytest.raises(Exception, match="measured 'x' in form env"):
        exec_promotion(env_form, "x", unit)


def test_a_promotion_sorts_after_the_operators_override_conf() -> None:
    """systemctl edit's override.conf sorts after 40-...: the promotion takes the late name (zx-, before the A/B's
    zz- and the pins' zy-), so its ExecStart= is the one the unit runs; the other name is the one to remove."""
    from ansible_collections.llmfleet.specdec.plugins.module_utils.systemd import _execstart as es
    from ansible_collections.llmfleet.specdec.plugins.plugin_utils.steps._steps_units import exec_promotion

    folder = "/etc/systemd/system/llama.service.d"
    unit = unit_of(HAND)
    report = _report(unit)
    plain = exec_promotion(report, "d6", unit)
    assert (plain["dropin"], plain["other_dropin"]) == (f"{folder}/{es.PROMOTED_DROPIN}",
                                                        f"{folder}/{es.PROMOTED_DROPIN_LATE}")
    # the collection's own drop-ins (an earlier late promotion, a pin, the A/B's) and an early one do not move it
    ours = dict(unit, dropins=[f"{folder}/10-limits.conf", f"{folder}/{es.PROMOTED_DROPIN_LATE}",
                               "/run/systemd/system/llama.service.d/zy-llmfleet-specdec-ran.conf"])
    assert exec_promotion(report, "d6", ours)["dropin"] == f"{folder}/{es.PROMOTED_DROPIN}"
    edited = dict(unit, dropins=[f"{folder}/{es.PROMOTED_DROPIN}", f"{folder}/override.conf"])
    late = exec_promotion(report, "d6", edited)
    assert (late["dropin"], late["other_dropin"]) == (f"{folder}/{es.PROMOTED_DROPIN_LATE}",
                                                      f"{folder}/{es.PROMOTED_DROPIN}")
    assert late["text"] == plain["text"]
    # the late name sorts after an operator's override.conf and before every pin and the A/B's drop-in, which
    # must still win over it (a renamed pin or drop-in that sorted before it would be overridden by the promotion)
    from ansible_collections.llmfleet.specdec.plugins.module_utils.systemd import _pin, _systemd
    ours_after = [_pin.BUILD_PIN_NAME, _pin.DEPLOY_PIN_NAME, _systemd.PIN_NAME, _systemd.DROPIN_NAME]
    assert "override.conf" < es.PROMOTED_DROPIN_LATE < min(ours_after)
    assert es.PROMOTED_DROPIN < "override.conf" and es.OWN_MARK in es.PROMOTED_DROPIN_LATE


def test_exec_promotion_keeps_names_with_newlines_inside_their_comment() -> None:
    from ansible_collections.llmfleet.specdec.plugins.module_utils.systemd import _execstart as es
    from ansible_collections.llmfleet.specdec.plugins.plugin_utils.steps._steps_units import exec_promotion

    unit = unit_of(HAND)
    report = _report(unit)
    report["configs"][1]["name"] = "d6\nExecStartPre=/bin/sh -c id"
    report["run_id"] = "r1\n[Service]\nUser=root\\"
    promo = exec_promotion(report, report["configs"][1]["name"], unit,
                           ["# d6 | prose\nExecStopPost=/bin/true", "# trailing \\"])
    keys = [a.key for a in es.unit_assignments(promo["text"])]
    assert keys == ["EnvironmentFile", "ExecStart", "ExecStart"]
    assert all(line.startswith("#") or line == "[Service]" or "=" in line for line in promo["text"].splitlines())
    assert not any(line.rstrip().endswith("\\") for line in promo["text"].splitlines() if line.startswith("#"))


def test_a_prefixed_units_process_runs_the_promoted_lines_tail() -> None:
    from ansible_collections.llmfleet.specdec.plugins.plugin_utils.steps._steps_units import exec_watch, runs_command

    prefixed = ["/usr/bin/nice", "-n", "3", "/usr/bin/env", "X=1", "/usr/bin/taskset", "-c", "0", *HAND]
    # nice, env and taskset exec'd the server: /proc/<pid>/cmdline is the line's tail (found on real systemd: the
    # promotion's read-back compared the whole line and put every prefixed unit's promotion back)
    assert runs_command(HAND, prefixed) and runs_command(prefixed, prefixed)
    assert not runs_command([*HAND, "-c", "4096"], prefixed) and not runs_command(None, prefixed)
    # the one test behind the health gate, the read-back and the watch: a tail of the wrong length, or the prefix
    # alone, is not the line
    assert uc.runs_line(HAND, HAND) and uc.runs_line(HAND, prefixed) and not uc.runs_line(None, HAND)
    assert not uc.runs_line(HAND[1:], prefixed) and not uc.runs_line(prefixed[:8], prefixed)
    assert not uc.runs_line(prefixed, HAND)
    report = _report(unit_of(prefixed))
    promoted = next(c for c in report["configs"] if c["name"] == "d6")["rendering"]["exec_start"]
    assert promoted[:3] == ["/usr/bin/nice", "-n", "3"]
    quiet = {"summary": "h: promoted config 'd6' - no drift", "config": "d6", "findings": []}
    live = dict(unit_of(prefixed), argv=promoted, running={"argv": promoted[8:]})
    assert exec_watch(quiet, {"config": "d6", "report": report}, live) == quiet
    other = dict(live, running={"argv": HAND})
    assert [f["kind"] for f in exec_watch(quiet, {"config": "d6", "report": report}, other)["findings"]] == [
        "live-config-differs"]


def test_a_wrapper_winner_is_a_drop_in_of_its_variables_only() -> None:
    from ansible_collections.llmfleet.specdec.plugins.module_utils.systemd import _execstart as es
    from ansible_collections.llmfleet.specdec.plugins.plugin_utils.steps._steps_units import env_carries, exec_promotion

    server = HAND[1:]
    live = {"unit": "llama.service", "installed": True, "form": "env", "kind": "wrapper", "engine": "llamacpp",
            "argv": ["/usr/local/bin/run-llama.sh"], "server_args": server, "env": {"LLAMA_ARG_THREADS": "2"},
            "server_env": {"LLAMA_ARG_THREADS": "1", "LLAMA_ARG_SPEC_DRAFT_N_MAX": "3"},
            "wrapper": {"exec": True, "pid": 7, "set_by_wrapper": {"LLAMA_ARG_THREADS": "1"}}}
    rendered = ab_render([{"name": "baseline"}, {"name": "d1", "env": {"LLAMA_ARG_SPEC_DRAFT_N_MAX": "1",
                                                                       "LLAMA_ARG_N_GPU_LAYERS": None}}],
                         live["server_env"], "baseline", "llamacpp", live)
    report = {"run_id": "r9", "baseline": "baseline",
              "configs": [{"name": n, "rendering": r} for n, r in rendered.items()]}
    promo = exec_promotion(report, "d1", live, ["# d1 | prose | 1.0x"])
    settings = [(a.key, a.value) for a in es.unit_assignments(promo["text"])]
    # the wrapper keeps its ExecStart=: the drop-in only adds the winner's variables (and unsets what it removes)
    assert settings == [("EnvironmentFile", promo["env_file"]), ("UnsetEnvironment", "LLAMA_ARG_N_GPU_LAYERS")]
    assert promo["exec_start"] is None and promo["kind"] == "wrapper"
    assert promo["env_text"] == "LLAMA_ARG_SPEC_DRAFT_N_MAX=1\n"
    assert promo["env"] == {"LLAMA_ARG_SPEC_DRAFT_N_MAX": "1"} and promo["unset"] == ["LLAMA_ARG_N_GPU_LAYERS"]
    assert promo["dropin"] == "/etc/systemd/system/llama.service.d/40-llmfleet-specdec-promoted.conf"
    # the server's own command line changed since the run (read from its process): refused unless forced
    moved = dict(live, server_args=[*server, "-c", "4096"])
    with pytest.raises(Exception, match="runs another command line than run r9 measured"):
        exec_promotion(report, "d1", moved)
    assert exec_promotion(report, "d1", moved, ["# d1 | prose | 1.0x"], force=True)["text"] == promo["text"]
    # production itself and a run measured in form exec have nothing a wrapper's drop-in could carry
    with pytest.raises(Exception, match="production itself"):
        exec_promotion(report, "baseline", live)
    exec_run = _report(unit_of(HAND))
    with pytest.raises(Exception, match="measured 'd6' in form exec"):
        exec_promotion(exec_run, "d6", live)
    # what the new server's environment must carry, named when it does not
    assert env_carries({"LLAMA_ARG_SPEC_DRAFT_N_MAX": "1"}, promo["env"], promo["unset"]) == []
    assert env_carries({"LLAMA_ARG_SPEC_DRAFT_N_MAX": "3", "LLAMA_ARG_N_GPU_LAYERS": "9"}, promo["env"],
                       promo["unset"]) == ["LLAMA_ARG_SPEC_DRAFT_N_MAX: wanted '1', has '3'",
                                           "LLAMA_ARG_N_GPU_LAYERS: wanted unset, has '9'"]
    assert env_carries({}, promo["env"], []) == ["LLAMA_ARG_SPEC_DRAFT_N_MAX: wanted '1', unset"]


def test_the_watch_compares_the_running_and_the_pending_command_line() -> None:
    from ansible_collections.llmfleet.specdec.plugins.plugin_utils.steps._steps_units import exec_watch

    unit = unit_of(HAND)
    report = _report(unit)
    promoted = next(c for c in report["configs"] if c["name"] == "d6")["rendering"]["exec_start"]
    evidence = {"config": "d6", "report": report}
    quiet = {"summary": "h: promoted config 'd6' - no drift", "config": "d6", "findings": []}
    live = dict(unit, argv=promoted, running={"argv": promoted})
    assert exec_watch(quiet, evidence, live) == quiet
    pending = dict(unit, argv=HAND, running={"argv": promoted}, exec_start_source="/etc/x line 3")
    result = exec_watch(quiet, evidence, pending)
    assert [f["kind"] for f in result["findings"]] == ["pending-config-differs"]
    assert result["summary"] == "h: promoted config 'd6' - DRIFT: pending-config-differs"
    both = dict(unit, argv=HAND, running={"argv": HAND})
    assert [f["kind"] for f in exec_watch(quiet, evidence, both)["findings"]] == ["live-config-differs"]
    during_ab = dict(quiet, findings=[{"kind": "ab-in-progress", "severity": "info"}])
    assert exec_watch(during_ab, evidence, both) == during_ab


def test_a_containers_paths_are_read_on_the_host_through_its_bind_mounts() -> None:
    argv = ["/usr/bin/podman", "run", "-v", "/srv/models:/models:ro", "--mount", "type=bind,src=/srv/d,dst=/models/d",
            "-v", "cache:/cache", "-p", "8080:8080", "img", "-m", "/models/t.gguf", "-md", "/models/d/x.gguf"]
    unit = unit_of(argv)
    assert unit["container"]["volumes"] == [["/srv/models", "/models"], ["/srv/d", "/models/d"]]
    r = render_candidate({}, {"LLAMA_ARG_SPEC_DRAFT_N_MAX": "4"}, [], "c", unit=unit)
    assert r["argv"][:4] == ["-m", "/models/t.gguf", "-md", "/models/d/x.gguf"]  # what the server gets
    assert r["host_argv"][:4] == ["-m", "/srv/models/t.gguf", "-md", "/srv/d/x.gguf"]  # what the host reads
    assert r["effective_env"]["LLAMA_ARG_MODEL"] == "/srv/models/t.gguf"
    assert uc.host_path("/modelsX/a", [["/srv", "/models"]]) == "/modelsX/a"


@pytest.mark.parametrize("prefix, env", [
    (["/usr/bin/env", "CUDA_VISIBLE_DEVICES=1", "GGML_CUDA_NO_PINNED=1"],
     {"CUDA_VISIBLE_DEVICES": "1", "GGML_CUDA_NO_PINNED": "1"}),
    (["/usr/bin/nice", "-n", "5", "/usr/bin/taskset", "-c", "0-7", "/usr/bin/numactl", "--cpunodebind=0", "-m", "0"],
     {}),
    (["nice", "-5", "env", "A=1", "taskset", "0xff"], {"A": "1"}),
])
def test_exec_prefixes_are_read_and_a_candidate_keeps_them(prefix: list[str], env: dict) -> None:
    d = uc.describe([*prefix, *HAND], {"B": "2"}, None, "u")
    assert (d["form"], d["kind"], d["engine"], d["server_at"]) == ("exec", "prefixed", "llamacpp", len(prefix) + 1)
    assert d["server_env"] == dict(env, B="2")
    assert uc.exec_tail(d["argv"]) == HAND  # what the unit's process runs once the prefixes exec'd the server
    out = uc.apply_candidate(d, {"LLAMA_ARG_SPEC_DRAFT_N_MAX": "5"}, [], "d5", "u")
    assert out["argv"][:len(prefix)] == prefix and out["argv"][len(prefix)] == LLAMA
    assert out["argv"][out["argv"].index("--spec-draft-n-max") + 1] == "5" and "3" not in out["server_args"]


@pytest.mark.parametrize("argv, says", [
    (["/usr/bin/env", "-i", "A=1", LLAMA], r"`env -i` is not a prefix"),
    (["/usr/bin/taskset", "-p", "0xff", "42"], r"`taskset -p` is not a prefix"),
])
def test_prefixes_that_do_not_simply_exec_the_server_are_refused(argv: list[str], says: str) -> None:
    with pytest.raises(uc.CommandError, match=says):
        uc.describe(argv, {}, None, "u")
