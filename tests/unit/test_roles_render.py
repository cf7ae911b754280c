# Renders the example fleet's builds, units and env files (tests/unit/render/render_fleet.yml) and checks them offline.
from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from ansible_collections.llmfleet.specdec.plugins.module_utils.build import _build as build
from ansible_collections.llmfleet.specdec.plugins.module_utils.lint._lint import lint
from ansible_collections.llmfleet.specdec.plugins.module_utils.llamacpp._flags import parse as parse_flags
from ansible_collections.llmfleet.specdec.plugins.module_utils.systemd import _execstart as es
from ansible_collections.llmfleet.specdec.plugins.module_utils.systemd._envfile import read_env_values
from ansible_collections.llmfleet.specdec.plugins.plugin_utils.steps import _steps_ab as ab_filters
from ansible_collections.llmfleet.specdec.plugins.plugin_utils.steps import _steps_vllm as vllm_filters

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
PLAYBOOK = ROOT / "tests" / "unit" / "render" / "render_fleet.yml"
LAUNCHER = ROOT / "roles" / "vllm_serve" / "files" / "vllm-serve-exec"
FLEET = ("frank-dragoon", "frank-zealot")


def ansible(tool: str, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_NOCOLOR="1",
               ANSIBLE_COLLECTIONS_PATH=str(ROOT / ".build" / "collections"))
    return subprocess.run([str(BIN / tool), *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, check=False)


def render(out: Path, *extra: str) -> Path:
    # ansible_connection=local and no become: nothing leaves the controller; the hosts' .invalid names are never used
    proc = ansible("ansible-playbook", str(PLAYBOOK), "-e", "ansible_connection=local", "-e", "ansible_become=false",
                   "-e", f"ansible_python_interpreter={sys.executable}", "-e", f"specdec_render_dir={out}", *extra)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return out


@pytest.fixture(scope="module")
def rendered(tmp_path_factory) -> Path:
    return render(tmp_path_factory.mktemp("fleet"))


@pytest.fixture(scope="module")
def dragoon_vulkan(tmp_path_factory) -> Path:
    return render(tmp_path_factory.mktemp("vulkan"), "-l", "frank-dragoon", "-e", "specdec_gpu_api=vulkan")


@pytest.fixture(scope="module")
def zealot_podman(tmp_path_factory) -> Path:
    return render(tmp_path_factory.mktemp("podman"), "-l", "frank-zealot", "-e", "vllm_serve_container_engine=podman")


def built(root: Path, host: str) -> dict:
    return json.loads((root / host / "build.json").read_text())


def env_file(root: Path, host: str, name: str) -> dict[str, str]:
    return read_env_values((root / host / name).read_text())


def exec_start(root: Path, host: str, name: str) -> list[str]:
    """The argv systemd hands the process: its own parser, specifiers and $-expansion at spawn (with a HOME set,
    so that a word the template left open to expansion would come back changed)."""
    line = next(x for x in (root / host / name).read_text().splitlines() if x.startswith("ExecStart="))
    (command,) = es.parse_exec(line[len("ExecStart="):], {"n": name, "N": name.rsplit(".", 1)[0], "h": "/root"})
    return list(es.expand_argv(command.argv, {"HOME": "/root", "X": "x"}).argv)


# --------------------------------------------------------------------------- inventory and playbooks


def test_inventory_graph_shows_the_fleet_beside_the_demo_host():
    proc = ansible("ansible-inventory", "--graph")
    assert proc.returncode == 0, proc.stderr
    lines = [x.strip(" |-") for x in proc.stdout.splitlines()]
    for name in ("@demo:", "specdec-demo", "@fleet:", "@gpu_gfx1151:", "frank-dragoon", "@gpu_sm86:", "frank-zealot"):
        assert name in lines
    assert "WARNING" not in proc.stderr


def test_fleet_addresses_are_examples():
    hosts = yaml.safe_load((ROOT / "inventory" / "hosts.yml").read_text())["all"]["children"]["fleet"]["children"]
    addresses = [h["ansible_host"] for g in hosts.values() for h in g["hosts"].values()]
    assert addresses and all(a.endswith(".example.invalid") for a in addresses)


def test_every_playbook_passes_syntax_check():
    # one ansible-playbook for all of them (it checks each playbook it is given, in turn, and names the one that
    # fails): a process start per playbook cost more than the checks
    playbooks = sorted([str(p.relative_to(ROOT)) for p in (ROOT / "playbooks").glob("*.yml")] + ["spec-ab.yml"])
    proc = ansible("ansible-playbook", "--syntax-check", *playbooks)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "ERROR" not in proc.stderr
    assert re.findall(r"(?m)^playbook: (\S+)$", proc.stdout) == playbooks, proc.stdout


# --------------------------------------------------------------------------- what the preflight and spec_ab read


@pytest.mark.parametrize("host", FLEET)
def test_host_vars_carry_what_preflight_and_ab_read(rendered, host):
    spec = built(rendered, host)["specdec"]
    assert spec["engine"] == "llamacpp"
    assert build.parse_build_number(spec["llamacpp_build"]) == 10133
    assert spec["unit"] == "llama-server" and spec["endpoint"] == "http://127.0.0.1:8080"
    assert set(spec["breakeven"]) == {"t_s", "d_s", "incumbent_rate"}
    assert spec["gpu_tools"]
    names = [c["name"] for c in spec["configs"]]
    assert names[0] == "baseline" and spec["configs"][0]["env"] == {}
    assert {"draft-dflash", "draft-dflash+ngram-mod", "ngram-mod"} <= set(names)
    expanded = ab_filters.ab_expand(spec["configs"])
    assert len({c["name"] for c in expanded}) == len(expanded)


def test_dragoon_has_the_mtp_sidecar_config(rendered):
    configs = {c["name"]: c for c in built(rendered, "frank-dragoon")["specdec"]["configs"]}
    mtp = configs["draft-mtp"]
    assert mtp["env"]["LLAMA_ARG_SPEC_TYPE"] == "draft-mtp"
    assert mtp["env"]["LLAMA_ARG_SPEC_DRAFT_MODEL"].endswith("Qwen3.6-27B-MTP-ONLY-Q8_0.gguf")
    assert mtp["sweep"] == {"LLAMA_ARG_SPEC_DRAFT_N_MAX": ["1", "2", "3"]}


# Header facts of the fleet's model files as the field notes list them (the files live on the hosts, not here):
# the targets carry no MTP head, the z-lab DFlash drafts are dflash-architecture files with target layers and a
# 2048-token sliding window, the MTP-only sidecar is a qwen35 file holding just the nextn layer.
TARGET_FACTS = {"architecture": "qwen35", "mtp": {"nextn_predict_layers": 0, "tensors": [], "has_mtp": False}}
DRAFT_FACTS = {
    "DFlash": {"architecture": "dflash", "sliding_window": 2048, "spec_type_autodetect": "draft-dflash",
               "values": {"dflash.target_layers": [1, 16, 31, 46, 61], "dflash.block_size": 16}},
    "MTP-ONLY": {"architecture": "qwen35", "spec_type_autodetect": "draft-mtp",
                 "mtp": {"nextn_predict_layers": 1, "tensors": ["blk.64.nextn.eh_proj.weight"], "has_mtp": True}},
}


def draft_facts(env: dict) -> dict | None:
    path = env.get("LLAMA_ARG_SPEC_DRAFT_MODEL", "")
    return next((dict(f, path=path) for key, f in DRAFT_FACTS.items() if key in path), None)


@pytest.mark.parametrize("host", FLEET)
def test_every_config_lints_clean(rendered, host):
    """Each config, layered over production's env as spec_ab layers it, is legal for the host's build and speculates
    with exactly the types it names."""
    spec = built(rendered, host)["specdec"]
    for config in ab_filters.ab_expand(spec["configs"]):
        env = dict(spec["base_env"], **config["env"])
        parsed = parse_flags(config.get("flags") or [], env)
        assert parsed["problems"] == [], (config["name"], parsed["problems"])
        result = lint("llamacpp", parsed, target_facts=TARGET_FACTS, draft_facts=draft_facts(env),
                      build=spec["llamacpp_build"])
        assert result["errors"] == [], (config["name"], result["errors"])
        assert result["silent_off"] == [], (config["name"], result["silent_off"])
        named = [t for t in env.get("LLAMA_ARG_SPEC_TYPE", "").split(",") if t]
        assert sorted(result["effective_chain"]) == sorted(named), config["name"]


# --------------------------------------------------------------------------- the builds


def test_zealot_builds_cuda_for_compute_capability_8_6(rendered):
    b = built(rendered, "frank-zealot")
    plan = b["plan"]
    assert plan["name"] == "b10133-cuda" and plan["prefix"] == "/opt/llama.cpp/b10133-cuda"
    assert plan["backends"] == ["cpu", "cuda"]
    configure = plan["configure"]
    assert configure[:2] == ["cmake", "-S"]
    assert "-DGGML_CUDA=ON" in configure and "-DCMAKE_CUDA_ARCHITECTURES=86" in configure
    assert "-DLLAMA_BUILD_NUMBER=10133" in configure
    assert not any(a.startswith(("-DGGML_HIP", "-DGGML_VULKAN", "-DGPU_TARGETS")) for a in configure)
    assert plan["source"] == {"kind": "git", "repo": "https://github.com/ggml-org/llama.cpp.git", "ref": "b10133"}
    assert " ".join(shlex.quote(a) for a in configure) in b["script"].splitlines()
    assert b["prebuilt_name"] == "b10133-cuda.tar.gz"


def test_dragoon_builds_hip_for_gfx1151(rendered):
    plan = built(rendered, "frank-dragoon")["plan"]
    assert plan["name"] == "b10133-hip"
    assert "-DGGML_HIP=ON" in plan["configure"] and "-DGPU_TARGETS=gfx1151" in plan["configure"]
    assert plan["env"]["HIPCXX"] == "/opt/rocm/llvm/bin/clang" and plan["env"]["HIP_PATH"] == "/opt/rocm"
    assert not any(a.startswith("-DGGML_CUDA") for a in plan["configure"])


def test_dragoon_on_vulkan_is_one_variable(rendered, dragoon_vulkan):
    plan = built(dragoon_vulkan, "frank-dragoon")["plan"]
    assert plan["name"] == "b10133-vulkan" and "-DGGML_VULKAN=ON" in plan["configure"]
    assert not any(a.startswith(("-DGGML_HIP", "-DGPU_TARGETS")) for a in plan["configure"])
    assert env_file(dragoon_vulkan, "frank-dragoon", "llama-server.env")["LLAMA_ARG_DEVICE"] == "Vulkan0"
    assert env_file(rendered, "frank-dragoon", "llama-server.env")["LLAMA_ARG_DEVICE"] == "ROCm0"
    assert not (dragoon_vulkan / "frank-zealot").exists()


# --------------------------------------------------------------------------- the serving units


@pytest.mark.parametrize("host", FLEET)
def test_llama_server_unit_runs_current_with_production_env(rendered, host):
    argv = exec_start(rendered, host, "llama-server.service")
    assert argv == ["/usr/bin/python3", "/usr/local/libexec/llmfleet-specdec/llamacpp-serve-exec",
                    "/opt/llama.cpp/current/bin/llama-server"]
    unit = (rendered / host / "llama-server.service").read_text()
    assert "EnvironmentFile=/etc/llmfleet-specdec/llama-server.env" in unit
    base = built(rendered, host)["specdec"]["base_env"]
    assert env_file(rendered, host, "llama-server.env") == {k: str(v) for k, v in base.items()}


def test_dragoon_unit_may_open_the_gpu_device_nodes(rendered):
    assert "SupplementaryGroups=render video" in (rendered / "frank-dragoon" / "llama-server.service").read_text()


def test_zealot_archived_vllm_unit(rendered):
    argv = exec_start(rendered, "frank-zealot", "vllm.service")
    assert argv[:3] == ["/usr/bin/python3", "/usr/local/libexec/llmfleet-specdec/vllm-serve-exec", "docker"]
    assert argv[3:] == ["run", "--rm", "--name", "vllm-dflash", "--network", "host", "--ipc", "host", "--gpus", "all",
                        "-v", "/var/cache/vllm/huggingface:/var/cache/vllm/huggingface", "vllm/vllm-openai:v0.20.1"]
    env = env_file(rendered, "frank-zealot", "vllm.env")
    # the field notes' legacy flags, mapped by the collection's own vLLM code into --speculative-config
    assert json.loads(env["VLLM_SPECULATIVE_CONFIG"]) == {
        "method": "dflash", "model": "z-lab/Qwen3.6-35B-A3B-DFlash", "num_speculative_tokens": 8}
    assert shlex.split(env["VLLM_SERVE_ARGS"]) == [
        "--attention-backend", "flash_attn", "--max-num-batched-tokens", "32768", "--kv-cache-dtype", "fp8",
        "--gpu-memory-utilization", "0.95"]
    assert env["VLLM_SERVE_MODEL"] == "cyankiwi/Qwen3.6-35B-A3B-AWQ-4bit"
    assert (env["VLLM_SERVE_HOST"], env["VLLM_SERVE_PORT"]) == ("127.0.0.1", "8000")
    assert "LLAMA_ARG_HOST" not in env and "LLAMA_ARG_PORT" not in env
    assert not (rendered / "frank-dragoon" / "vllm.service").exists()
    # docker keeps the container under its own scope: no --cgroups=split to ask for, no cgroup to delegate
    assert "--cgroups=split" not in argv
    assert "Delegate=" not in (rendered / "frank-zealot" / "vllm.service").read_text()


def test_unit_templates_quote_every_word_for_systemd_not_for_a_shell(tmp_path):
    # words that a shell quote leaves to systemd: a specifier, ${X}, a whole-word $X, a C escape, a blank
    words = ["docker", "run", "-e", "NAME=%n", "${HOME}", "$X", "a\\nb", "two words", "it's"]
    extra = json.dumps({"vllm_serve_exec_prefix": words, "vllm_serve_env_file": "/etc/llmfleet-specdec/v%i.env"})
    root = render(tmp_path, "-l", "frank-zealot", "-e", extra)
    argv = exec_start(root, "frank-zealot", "vllm.service")
    assert argv[2:] == words
    unit = (root / "frank-zealot" / "vllm.service").read_text()
    assert "EnvironmentFile=/etc/llmfleet-specdec/v%%i.env" in unit


def test_vllm_unit_keeps_a_promotion_on_redeploy(tmp_path):
    """vllm_serve writes the promotion record's block again (as llamacpp_serve does), so deploy.yml keeps it."""
    from ansible_collections.llmfleet.specdec.plugins.plugin_utils.steps._steps_promote import BEGIN, promotion_record

    ngram = '{"method":"ngram","num_speculative_tokens":4,"prompt_lookup_max":4}'
    report = {"run_id": "20261201T000000Z", "host": "frank-zealot", "baseline": "baseline",
              "configs": [{"name": "baseline", "server_config": {}},
                          {"name": "ngram", "server_config": {"VLLM_SPECULATIVE_CONFIG": ngram, "HF_HOME": None}}],
              "verdicts": [{"config": "ngram", "shape": "echo", "status": "OK", "verdict": "win", "speedup": 1.4}],
              "confirmatory": {"endpoint": "e2e", "weights": {"echo": 1.0}, "alpha": 0.05,
                               "verdicts": {"ngram": {"verdict": "WIN", "ratio": 1.4, "low": 1.2, "high": 1.6}},
                               "recommendation": "ngram"}}
    record = promotion_record(report, "ngram", promoted_at="2026-12-01T01:00:00+00:00")
    out = render(tmp_path / "promoted", "-l", "frank-zealot", "-e", json.dumps({"vllm_serve_promotion": record}))
    text = (out / "frank-zealot" / "vllm.env").read_text()
    env = read_env_values(text)
    assert env["VLLM_SPECULATIVE_CONFIG"] == ngram and "HF_HOME" not in env
    assert text.count(BEGIN) == 1 and "# promoted: ngram" in text
    assert env["VLLM_SERVE_MODEL"] == "cyankiwi/Qwen3.6-35B-A3B-AWQ-4bit"  # the rest of production unchanged


def test_podman_runs_the_container_inside_the_units_cgroup(zealot_podman, tmp_path):
    """--cgroups=split and Delegate=yes: what lets unit_override tie the port to a container-mode unit."""
    argv = exec_start(zealot_podman, "frank-zealot", "vllm.service")
    assert argv[2:] == ["podman", "run", "--rm", "--replace", "--cgroups=split", "--name", "vllm-dflash",
                        "--network", "host", "--ipc", "host", "--device", "nvidia.com/gpu=all",
                        "-v", "/var/cache/vllm/huggingface:/var/cache/vllm/huggingface", "vllm/vllm-openai:v0.20.1"]
    unit = (zealot_podman / "frank-zealot" / "vllm.service").read_text().splitlines()
    assert "Delegate=yes" in unit and "ExecStopPost=-podman rm -f vllm-dflash" in unit
    assert not any(line.startswith("User=") for line in unit)
    # the launcher keeps it: the command podman gets, with the env passed in before the image
    engine = tmp_path / "podman"
    engine.write_text(f"#!{sys.executable}\nimport json, sys\nprint(json.dumps(sys.argv[1:]))\n")
    engine.chmod(0o755)
    proc = run_launcher(tmp_path, env_file(zealot_podman, "frank-zealot", "vllm.env"), [str(engine), *argv[3:]])
    assert proc.returncode == 0, proc.stderr
    sent = json.loads(proc.stdout)
    image = sent.index("vllm/vllm-openai:v0.20.1")
    assert sent[:4] == ["run", "--rm", "--replace", "--cgroups=split"] and sent[image - 2:image] == ["-e", "HF_HOME"]


def test_molecule_stand_in_podman_refuses_a_run_outside_the_units_cgroup(tmp_path):
    """molecule/build's stand-in for podman proves the role passes --cgroups=split: without it, it refuses."""
    stand_in = ROOT / "molecule" / "build" / "files" / "stand-in-podman"
    run = [sys.executable, str(stand_in), "run", "--rm", "--replace", "--name", "x", "--network", "host", "img:1",
           "model", "--port", "8001"]
    proc = subprocess.run(run, capture_output=True, text=True, timeout=30,
                          env={"PATH": os.environ["PATH"], "STAND_IN_PODMAN_STATE": str(tmp_path)}, check=False)
    assert proc.returncode == 125 and "--cgroups=split" in proc.stderr and proc.stdout == ""
    version = subprocess.run([sys.executable, str(stand_in), "--version"], capture_output=True, text=True, timeout=30,
                             check=False)
    assert version.returncode == 0 and version.stdout.startswith("podman version")


# --------------------------------------------------------------------------- the vLLM launcher, run for real


def run_launcher(tmp_path: Path, env: dict[str, str], prefix: list[str] | None = None) -> subprocess.CompletedProcess:
    recorder = tmp_path / "record"
    recorder.write_text(f"#!{sys.executable}\nimport json, sys\nprint(json.dumps(sys.argv[1:]))\n")
    recorder.chmod(0o755)
    return subprocess.run([sys.executable, str(LAUNCHER), *(prefix or [str(recorder), "serve"])],
                          env={"PATH": os.environ["PATH"], **env}, capture_output=True, text=True, timeout=30, check=False)


def test_launcher_builds_vllm_serve_arguments_from_the_env_file(rendered, tmp_path):
    """The unit's own ExecStart and env file, with a recorder in docker's place: the command docker would get."""
    env = env_file(rendered, "frank-zealot", "vllm.env")
    engine = tmp_path / "docker"
    engine.write_text(f"#!{sys.executable}\nimport json, sys\nprint(json.dumps(sys.argv[1:]))\n")
    engine.chmod(0o755)
    prefix = exec_start(rendered, "frank-zealot", "vllm.service")[3:]
    proc = run_launcher(tmp_path, env, [str(engine), *prefix])
    assert proc.returncode == 0, proc.stderr
    argv = json.loads(proc.stdout)
    image = argv.index("vllm/vllm-openai:v0.20.1")
    assert argv[image - 2:image] == ["-e", "HF_HOME"]
    assert argv[image + 1:] == [
        "cyankiwi/Qwen3.6-35B-A3B-AWQ-4bit", "--host", "127.0.0.1", "--port", "8000",
        "--attention-backend", "flash_attn", "--max-num-batched-tokens", "32768", "--kv-cache-dtype", "fp8",
        "--gpu-memory-utilization", "0.95",
        "--speculative-config", '{"method":"dflash","model":"z-lab/Qwen3.6-35B-A3B-DFlash","num_speculative_tokens":8}']


def test_launcher_passes_env_into_the_container_before_the_image(tmp_path):
    recorder = tmp_path / "engine"
    recorder.write_text(f"#!{sys.executable}\nimport json, sys\nprint(json.dumps(sys.argv[1:]))\n")
    recorder.chmod(0o755)
    proc = subprocess.run([sys.executable, str(LAUNCHER), str(recorder), "run", "--rm", "img:1"],
                          env={"PATH": os.environ["PATH"], "VLLM_SERVE_MODEL": "m", "VLLM_SERVE_PASS_ENV": "HF_HOME X",
                               "VLLM_EXTRA_ARGS": "--max-model-len 8192"},
                          capture_output=True, text=True, timeout=30, check=False)
    assert json.loads(proc.stdout) == ["run", "--rm", "-e", "HF_HOME", "-e", "X", "img:1", "m", "--host", "127.0.0.1",
                                       "--port", "8000", "--max-model-len", "8192"]


@pytest.mark.parametrize("env, message", [
    ({"VLLM_SERVE_MODEL": "m", "VLLM_SPECULATIVE_CONFIG": "{method: ngram}"}, "VLLM_SPECULATIVE_CONFIG is not JSON"),
    ({"VLLM_SERVE_MODEL": "m", "VLLM_SPECULATIVE_CONFIG": "[1]"}, "must be a JSON object"),
    ({"VLLM_SERVE_MODEL": "m", "VLLM_EXTRA_ARGS": "--x 'y"}, "VLLM_EXTRA_ARGS is not shell-quoted"),
    ({}, "VLLM_SERVE_MODEL is empty"),
])
def test_launcher_refuses_before_vllm_starts(tmp_path, env, message):
    proc = run_launcher(tmp_path, env)
    assert proc.returncode == 2 and message in proc.stderr and proc.stdout == ""


# --------------------------------------------------------------------------- the vLLM filters


def test_vllm_filters_map_legacy_flags_and_refuse_what_vllm_refuses():
    from ansible.errors import AnsibleFilterError

    mapped = vllm_filters.vllm_speculative_config(
        {}, ["--spec-method", "dflash", "--spec-model", "z-lab/Qwen3.6-35B-A3B-DFlash", "--spec-tokens", "8"],
        vllm_version="0.20.1", attention_backend="flash_attn")
    assert mapped == {"method": "dflash", "model": "z-lab/Qwen3.6-35B-A3B-DFlash", "num_speculative_tokens": 8}
    assert vllm_filters.vllm_speculative_cli(mapped) == [
        "--speculative-config", '{"method":"dflash","model":"z-lab/Qwen3.6-35B-A3B-DFlash","num_speculative_tokens":8}']
    assert vllm_filters.vllm_speculative_config({}, []) == {} and vllm_filters.vllm_speculative_json({}) == ""
    with pytest.raises(AnsibleFilterError, match=r"needs vLLM >= 0\.20\.1"):
        vllm_filters.vllm_speculative_config({"method": "dflash", "model": "d", "num_speculative_tokens": 8},
                                             vllm_version="0.19.1", attention_backend="flash_attn")
    with pytest.raises(AnsibleFilterError, match="mutually exclusive"):
        vllm_filters.vllm_speculative_config({"method": "dflash", "model": "d", "num_speculative_tokens": 8},
                                             ["--spec-tokens", "4"])
    with pytest.raises(AnsibleFilterError, match="non-causal"):
        vllm_filters.vllm_speculative_config({"method": "dflash", "model": "d", "num_speculative_tokens": 8},
                                             attention_backend="triton_attn")
    warnings = vllm_filters.vllm_speculative_warnings({"method": "dflash", "model": "d", "num_speculative_tokens": 8})
    assert any(w.startswith("dflash-attention-backend-auto") for w in warnings)


# --------------------------------------------------------------------------- the roles document what they read


@pytest.mark.parametrize("role", ["llamacpp_build", "vllm_serve"])
def test_every_default_is_documented_in_argument_specs(role):
    defaults = yaml.safe_load((ROOT / "roles" / role / "defaults" / "main.yml").read_text())
    spec = yaml.safe_load((ROOT / "roles" / role / "meta" / "argument_specs.yml").read_text())
    options = spec["argument_specs"]["main"]["options"]
    assert sorted(defaults) == sorted(k for k in options if k in defaults)
    assert all(k.startswith(role + "_") for k in options)
    undocumented = [k for k in options if not options[k].get("description")]
    assert undocumented == []
