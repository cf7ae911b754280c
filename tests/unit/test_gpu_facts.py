# Tests for the GPU tool parsers, the sysfs reader and the gpu_facts module, on recorded tool output formats.
from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest
from ansible.module_utils.testing import patch_module_args

from ansible_collections.llmfleet.specdec.plugins.module_utils.common._errors import SpecdecError
from ansible_collections.llmfleet.specdec.plugins.module_utils.memory import _gpu as gpu
from ansible_collections.llmfleet.specdec.plugins.modules import gpu_info

FIX = Path(__file__).parent / "fixtures" / "gpu"
SYSFS = FIX / "sysfs"
MEMINFO = FIX / "proc" / "meminfo"
MIB, GIB = gpu.MIB, gpu.GIB
NVIDIA_ARGS = "--query-gpu=index,name,memory.total,memory.free,memory.used,pci.bus_id,compute_cap"


def text(name: str) -> str:
    return (FIX / name).read_text()


# --------------------------------------------------------------------------- nvidia-smi


def test_nvidia_smi_two_rtx3090():
    devs = gpu.parse_nvidia_smi_csv(text("nvidia-smi-2x-rtx3090.csv"))
    assert [d["index"] for d in devs] == [0, 1]
    d0 = devs[0]
    assert d0["name"] == "NVIDIA GeForce RTX 3090"
    assert d0["backend"] == "cuda" and d0["source"] == "nvidia-smi"
    assert d0["total_bytes"] == 24576 * MIB
    assert d0["free_bytes"] == 9016 * MIB and d0["used_bytes"] == 15228 * MIB
    # nvidia-smi's free excludes driver-reserved memory: free + used < total
    assert d0["free_bytes"] + d0["used_bytes"] < d0["total_bytes"]
    assert d0["pci_bus_id"] == "0000:01:00.0" and devs[1]["pci_bus_id"] == "0000:02:00.0"
    assert d0["compute_cap"] == "8.6"
    assert d0["apu"] is False and d0["usable_bytes"] == d0["total_bytes"] and d0["usable_free_bytes"] == 9016 * MIB


def test_nvidia_smi_header_and_units_form_reads_the_same():
    with_header = gpu.parse_nvidia_smi_csv(text("nvidia-smi-rtx3090-header.csv"))
    plain = gpu.parse_nvidia_smi_csv(text("nvidia-smi-2x-rtx3090.csv"))[:1]
    assert with_header == plain


def test_nvidia_smi_reordered_header_is_read_by_name():
    out = "name, index, memory.used [MiB], memory.total [MiB]\nNVIDIA GeForce RTX 3090, 3, 100 MiB, 24576 MiB\n"
    (d,) = gpu.parse_nvidia_smi_csv(out)
    assert (d["index"], d["used_bytes"], d["total_bytes"]) == (3, 100 * MIB, 24576 * MIB)
    assert d["free_bytes"] == (24576 - 100) * MIB


def test_nvidia_smi_not_available_memory_is_none_with_a_note():
    (d,) = gpu.parse_nvidia_smi_csv("0, NVIDIA GB10, [N/A], [N/A], [N/A], 0000000F:01:00.0, 12.1\n")
    assert d["total_bytes"] is None and d["free_bytes"] is None
    assert d["pci_bus_id"] == "000f:01:00.0"
    assert "no memory size" in d["notes"][0]


def test_nvidia_smi_no_devices():
    assert gpu.parse_nvidia_smi_csv("No devices were found\n") == []


@pytest.mark.parametrize("fixture,message", [
    ("nvidia-smi-driver-failed.txt",
     "nvidia-smi: the NVIDIA driver is not reachable (line 1: \"NVIDIA-SMI has failed because it couldn't"),
    ("nvidia-smi-malformed.csv", "nvidia-smi: memory.total is not a size: 'ERR!' (line 2: '1, NVIDIA GeForce RTX 3090, ERR!"),
])
def test_nvidia_smi_unexpected_output_names_tool_and_line(fixture, message):
    with pytest.raises(gpu.GPUToolError) as err:
        gpu.parse_nvidia_smi_csv(text(fixture))
    assert str(err.value).startswith(message), str(err.value)


def test_nvidia_smi_wrong_field_count():
    with pytest.raises(SpecdecError, match=r"expected 7 comma-separated fields .* got 4 \(line 1: '0, NVIDIA"):
        gpu.parse_nvidia_smi_csv("0, NVIDIA GeForce RTX 3090, 24576, 9016\n")


# --------------------------------------------------------------------------- rocm-smi


def test_rocm_smi_discrete_card_with_large_gtt_is_not_an_apu():
    (d,) = gpu.parse_rocm_smi_json(text("rocm-smi-rx7900xt.json"))
    assert d["name"] == "Radeon RX 7900 XT" and d["backend"] == "rocm" and d["index"] == 0
    assert d["total_bytes"] == 21458059264 and d["used_bytes"] == 1523712000
    assert d["free_bytes"] == 21458059264 - 1523712000
    assert d["gtt_total_bytes"] == 33554432000 and d["gtt_free_bytes"] == 33554432000 - 22446080
    assert d["pci_bus_id"] == "0000:03:00.0" and d["gfx_target"] == "gfx1100"
    # its GTT is larger than its VRAM, as on any discrete card in a big host: still not an APU
    assert d["apu"] is False and d["usable_bytes"] == d["total_bytes"]


def test_rocm_smi_strix_halo_96g_carveout_skips_warning_and_is_an_apu():
    (d,) = gpu.parse_rocm_smi_json(text("rocm-smi-strix-halo-96g.json"))
    assert d["name"].startswith("Strix Halo")
    assert d["total_bytes"] == 96 * GIB and d["gtt_total_bytes"] == 108000 * MIB
    assert d["pci_bus_id"] == "0000:c5:00.0"  # rocm-smi prints it upper case
    assert d["apu"] is True and "gfx1151" in d["apu_reason"]
    assert d["usable_bytes"] == 96 * GIB + 108000 * MIB
    assert d["usable_free_bytes"] == d["free_bytes"] + d["gtt_free_bytes"]
    assert any(n.startswith("APU: ") and "VRAM + GTT" in n for n in d["notes"])


def test_apu_gtt_is_capped_at_host_memory():
    (d,) = gpu.parse_rocm_smi_json(text("rocm-smi-strix-halo-96g.json"))
    gpu.apply_apu(d, d["apu_reason"], host_mem_total=32 * GIB)
    assert d["usable_bytes"] == 96 * GIB + 32 * GIB
    assert sum("capped at the host's MemTotal" in n for n in d["notes"]) == 1


@pytest.mark.parametrize("fixture,message", [
    ("rocm-smi-truncated.json",
     "rocm-smi: output is not valid JSON: Expecting value (line 5: '        \"VRAM Total Used Memory (B)\":')"),
    ("rocm-smi-no-driver.txt",
     "rocm-smi: expected JSON output (line 1: 'ERROR:root:Driver not initialized (amdgpu not found in modules)')"),
    ("rocm-smi-bad-number.json", "rocm-smi: card0: 'VRAM Total Memory (B)' is not a byte count: '20 GiB'"),
])
def test_rocm_smi_unexpected_output(fixture, message):
    with pytest.raises(gpu.GPUToolError) as err:
        gpu.parse_rocm_smi_json(text(fixture))
    assert str(err.value).startswith(message), str(err.value)


def test_rocm_smi_without_meminfo_says_which_flag():
    with pytest.raises(SpecdecError, match="card0 has no 'VRAM Total Memory \\(B\\)': run it with --showmeminfo vram"):
        gpu.parse_rocm_smi_json('{"card0": {"Card Series": "Radeon RX 7900 XT"}}')


# --------------------------------------------------------------------------- amd-smi


def test_amd_smi_strix_halo_512m_carveout_with_static():
    (d,) = gpu.parse_amd_smi_json(text("amd-smi-metric-strix-halo.json"), text("amd-smi-static-strix-halo.json"))
    assert d["name"] == "Radeon 8060S Graphics" and d["backend"] == "rocm" and d["source"] == "amd-smi"
    assert (d["total_bytes"], d["used_bytes"], d["free_bytes"]) == (512 * MIB, 186 * MIB, 326 * MIB)
    assert (d["gtt_total_bytes"], d["gtt_free_bytes"]) == (96 * GIB, 97098 * MIB)
    assert d["pci_bus_id"] == "0000:c5:00.0" and d["gfx_target"] == "gfx1151"
    assert d["apu"] is True and d["usable_bytes"] == 512 * MIB + 96 * GIB
    assert d["usable_free_bytes"] == (326 + 97098) * MIB


def test_amd_smi_without_static_still_spots_the_carveout():
    (d,) = gpu.parse_amd_smi_json(text("amd-smi-metric-strix-halo.json"))
    assert d["name"] == "gpu 0"
    assert d["apu"] is True and "heuristic" in d["apu_reason"]


def test_amd_smi_list_form_after_a_warning_line():
    devs = gpu.parse_amd_smi_json(text("amd-smi-metric-mi300x-list.json"))
    assert [d["index"] for d in devs] == [0, 1]
    assert devs[0]["total_bytes"] == 196592 * MIB and devs[0]["free_bytes"] == 179439 * MIB
    assert devs[1]["gtt_total_bytes"] is None
    assert not any(d["apu"] for d in devs)


@pytest.mark.parametrize("metric,message", [
    ('{"gpu_data": [{"gpu": 0}]}', "amd-smi: gpu 0: no mem_usage object"),
    ('[{"gpu": 0, "mem_usage": {"total_vram": {"value": "lots", "unit": "MB"}}}]',
     "amd-smi: gpu 0: total_vram is not a size"),
    ('[{"gpu": 0, "mem_usage": {"total_vram": {"value": 8, "unit": "PB"}}}]',
     "amd-smi: gpu 0: total_vram has an unknown unit 'PB'"),
    ('{"cards": []}', "amd-smi: expected a list of"),
    ("Traceback (most recent call last):\n", "amd-smi: expected JSON output (line 1: 'Traceback"),
])
def test_amd_smi_unexpected_output(metric, message):
    with pytest.raises(gpu.GPUToolError) as err:
        gpu.parse_amd_smi_json(metric)
    assert str(err.value).startswith(message), str(err.value)


# --------------------------------------------------------------------------- sysfs


def test_sysfs_fixture_strix_halo_and_skips_other_drivers_and_connectors():
    devs = gpu.read_sysfs(str(SYSFS))
    assert len(devs) == 1  # card0 is the NVIDIA card (no mem_info files); connectors and renderD are not cards
    (d,) = devs
    assert d["index"] == 1 and d["backend"] == "sysfs" and d["name"] == "PCI 1002:1586"
    assert d["total_bytes"] == 512 * MIB and d["used_bytes"] == 195035136
    assert d["gtt_total_bytes"] == 96 * GIB and d["gtt_used_bytes"] == 1264582656
    assert d["pci_bus_id"] == "0000:c5:00.0"
    assert d["apu"] is True and "0x1586 (Strix Halo)" in d["apu_reason"]
    assert d["usable_bytes"] == 512 * MIB + 96 * GIB


def test_sysfs_garbage_names_the_file(tmp_path):
    dev = tmp_path / "class" / "drm" / "card0" / "device"
    dev.mkdir(parents=True)
    (dev / "mem_info_vram_total").write_text("lots\n")
    with pytest.raises(gpu.GPUToolError) as err:
        gpu.read_sysfs(str(tmp_path))
    assert str(err.value) == f"sysfs: {dev / 'mem_info_vram_total'} does not hold a byte count ('lots')"


def test_sysfs_absent_is_empty(tmp_path):
    assert gpu.read_sysfs(str(tmp_path)) == []


def test_meminfo():
    assert gpu.read_mem_total(str(MEMINFO)) == 133160512 * 1024
    assert gpu.read_mem_total(str(FIX / "nope")) is None


# --------------------------------------------------------------------------- merging and collecting


def fake_runner(outputs: dict[str, str | tuple[int, str, str]]):
    """A run_tool that answers by the tool's first argument with recorded output."""
    calls = []

    def run(argv):
        calls.append(argv)
        key = os.path.basename(argv[0]) + " " + argv[1]
        out = outputs[key]
        return out if isinstance(out, tuple) else (0, out, "")

    run.calls = calls
    return run


def test_collect_merges_the_same_device_by_pci_address():
    run = fake_runner({
        "amd-smi metric": text("amd-smi-metric-strix-halo.json"),
        "amd-smi static": text("amd-smi-static-strix-halo.json"),
        f"nvidia-smi {NVIDIA_ARGS}": text("nvidia-smi-2x-rtx3090.csv"),
    })
    facts = gpu.collect(gpu.TOOLS, lambda t: f"/usr/bin/{t}" if t != "rocm-smi" else None, run,
                        sysfs_root=str(SYSFS), meminfo=str(MEMINFO))
    assert facts["errors"] == []
    names = [(d["name"], d["seen_by"]) for d in facts["devices"]]
    assert names == [("NVIDIA GeForce RTX 3090", ["nvidia-smi"]), ("NVIDIA GeForce RTX 3090", ["nvidia-smi"]),
                     ("Radeon 8060S Graphics", ["amd-smi", "sysfs"])]
    assert [s["tool"] for s in facts["sources"]] == ["nvidia-smi", "amd-smi", "sysfs"]
    assert facts["host_mem_total_bytes"] == 133160512 * 1024
    assert len(facts["by_source"]["sysfs"]) == 1
    assert ["/usr/bin/amd-smi", "static", "--asic", "--bus", "--vram", "--json"] in run.calls


def test_merge_fills_gtt_from_a_later_source():
    no_gtt = json.loads(text("rocm-smi-strix-halo-96g.json").split("\n", 2)[2])
    for key in ("GTT Total Memory (B)", "GTT Total Used Memory (B)"):
        del no_gtt["card0"][key]
    no_gtt["card0"]["PCI Bus"] = "0000:C5:00.0"
    rocm = gpu.parse_rocm_smi_json(json.dumps(no_gtt))
    assert rocm[0]["usable_bytes"] == 96 * GIB and "reports no GTT size" in rocm[0]["notes"][0]
    (merged,) = gpu.merge_devices({"rocm-smi": rocm, "sysfs": gpu.read_sysfs(str(SYSFS))})
    assert merged["seen_by"] == ["rocm-smi", "sysfs"]
    assert merged["gtt_total_bytes"] == 96 * GIB and "GTT from sysfs" in merged["notes"]
    assert merged["usable_bytes"] == 96 * GIB + 96 * GIB
    assert sum(n.startswith("APU: ") for n in merged["notes"]) == 1


def test_collect_retries_nvidia_smi_without_compute_cap():
    old_args = "--query-gpu=index,name,memory.total,memory.free,memory.used,pci.bus_id"
    run = fake_runner({
        f"nvidia-smi {NVIDIA_ARGS}": (2, 'Field "compute_cap" is not a valid field to query.\n', ""),
        f"nvidia-smi {old_args}": "".join(line.rsplit(",", 1)[0] + "\n"
                                          for line in text("nvidia-smi-2x-rtx3090.csv").splitlines()),
    })
    facts = gpu.collect(["nvidia-smi"], lambda t: "/usr/bin/nvidia-smi", run, meminfo=str(MEMINFO))
    assert facts["errors"] == [] and len(facts["devices"]) == 2
    assert "compute_cap" not in facts["devices"][0]
    assert len(run.calls) == 2


def test_collect_reports_a_failing_tool_and_keeps_the_others():
    run = fake_runner({f"nvidia-smi {NVIDIA_ARGS}": (9, text("nvidia-smi-driver-failed.txt"), "")})
    facts = gpu.collect(["nvidia-smi", "sysfs"], lambda t: "/usr/bin/nvidia-smi", run,
                        sysfs_root=str(SYSFS), meminfo=str(MEMINFO))
    assert facts["errors"] == [f"nvidia-smi: `/usr/bin/nvidia-smi {NVIDIA_ARGS} --format=csv,noheader,nounits` "
                               "exited with 9 (\"NVIDIA-SMI has failed because it couldn't communicate with the "
                               "NVIDIA driver. Make sure that the latest NVIDIA driver is installed and running.\")"]
    assert [s["ok"] for s in facts["sources"]] == [False, True]
    assert len(facts["devices"]) == 1


def test_collect_required_tool_missing_and_unknown_tool():
    facts = gpu.collect(["rocm-smi"], lambda t: None, fake_runner({}), required=["rocm-smi"], meminfo=str(MEMINFO))
    assert facts["errors"] == ["rocm-smi: not installed (not on PATH nor in /opt/rocm/bin)"]
    with pytest.raises(SpecdecError, match="tools: unknown 'cuda-smi'"):
        gpu.collect(["cuda-smi"], lambda t: None, fake_runner({}))


# --------------------------------------------------------------------------- the module


def install_fake(bin_dir: Path, tool: str, expect_args: list[str], fixture: str, rc: int = 0,
                 stderr: bool = False) -> None:
    """An executable that prints the recorded output when called with exactly the expected arguments."""
    bin_dir.mkdir(exist_ok=True)
    script = bin_dir / tool
    script.write_text(
        "#!/bin/sh\n"
        f'if [ "$*" != "{" ".join(expect_args)}" ]; then echo "unexpected arguments: $*" >&2; exit 64; fi\n'
        f'cat "{FIX / fixture}"{" >&2" if stderr else ""}\n'
        f"exit {rc}\n")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)


@pytest.fixture
def fake_bin(tmp_path, monkeypatch):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    return bin_dir


def run_module(args: dict, capsys) -> dict:
    with patch_module_args(args), pytest.raises(SystemExit):
        gpu_info.main()
    return json.loads(capsys.readouterr().out)


def test_module_with_recorded_nvidia_smi_and_sysfs_tree(fake_bin, capsys):
    install_fake(fake_bin, "nvidia-smi", gpu.nvidia_smi_args(), "nvidia-smi-2x-rtx3090.csv")
    out = run_module({"sysfs_root": str(SYSFS), "meminfo": str(MEMINFO)}, capsys)
    assert out["changed"] is False and "failed" not in out
    facts = out["gpu_info"]
    assert facts["errors"] == []
    assert [(d["source"], d["pci_bus_id"]) for d in facts["devices"]] == [
        ("nvidia-smi", "0000:01:00.0"), ("nvidia-smi", "0000:02:00.0"), ("sysfs", "0000:c5:00.0")]
    assert facts["sources"][0] == {"tool": "nvidia-smi", "path": str(fake_bin / "nvidia-smi"), "devices": 2, "ok": True}
    assert facts["devices"][2]["apu"] is True


def test_module_check_mode_reports_the_same(fake_bin, capsys):
    install_fake(fake_bin, "nvidia-smi", gpu.nvidia_smi_args(), "nvidia-smi-2x-rtx3090.csv")
    args = {"tools": ["nvidia-smi"], "sysfs_root": str(SYSFS), "meminfo": str(MEMINFO)}
    assert run_module(args, capsys) == run_module({**args, "_ansible_check_mode": True}, capsys)


def test_module_rocm_smi_recorded_output(fake_bin, capsys):
    install_fake(fake_bin, "rocm-smi", gpu.rocm_smi_args(), "rocm-smi-strix-halo-96g.json")
    out = run_module({"tools": ["rocm-smi"], "meminfo": str(MEMINFO)}, capsys)
    (d,) = out["gpu_info"]["devices"]
    assert d["name"].startswith("Strix Halo") and d["total_bytes"] == 96 * GIB
    # GTT 108000 MiB is below this host's MemTotal, so nothing is capped
    assert d["usable_bytes"] == 96 * GIB + 108000 * MIB


def test_module_strict_fails_on_unexpected_output(fake_bin, capsys):
    install_fake(fake_bin, "nvidia-smi", gpu.nvidia_smi_args(), "nvidia-smi-malformed.csv")
    args = {"tools": ["nvidia-smi", "sysfs"], "sysfs_root": str(SYSFS), "meminfo": str(MEMINFO)}
    lenient = run_module(args, capsys)
    assert "failed" not in lenient
    assert lenient["gpu_info"]["errors"][0].startswith("nvidia-smi: memory.total is not a size: 'ERR!' (line 2")
    strict = run_module({**args, "strict": True}, capsys)
    assert strict["failed"] is True and strict["msg"].startswith("nvidia-smi: memory.total is not a size")


def test_module_fails_when_an_explicit_tool_is_missing(fake_bin, capsys):
    out = run_module({"tools": ["rocm-smi"], "meminfo": str(MEMINFO)}, capsys)
    assert out["failed"] is True
    assert out["msg"] == "rocm-smi: not installed (not on PATH nor in /opt/rocm/bin)"


def test_module_fails_when_the_only_tool_prints_garbage(fake_bin, capsys):
    install_fake(fake_bin, "rocm-smi", gpu.rocm_smi_args(), "rocm-smi-truncated.json")
    out = run_module({"tools": ["rocm-smi"], "meminfo": str(MEMINFO)}, capsys)
    assert out["failed"] is True
    assert out["msg"].startswith("rocm-smi: output is not valid JSON: Expecting value (line 5")


def test_module_rocm_smi_without_driver_logs_to_stderr_and_exits_0(fake_bin, capsys):
    install_fake(fake_bin, "rocm-smi", gpu.rocm_smi_args(), "rocm-smi-no-driver.txt", stderr=True)
    out = run_module({"tools": ["rocm-smi"], "meminfo": str(MEMINFO)}, capsys)
    assert out["failed"] is True
    assert out["msg"].endswith("printed nothing but an error "
                               "('ERROR:root:Driver not initialized (amdgpu not found in modules)')")


def test_module_rejects_an_unknown_tool(capsys):
    out = run_module({"tools": ["cuda-smi"]}, capsys)
    assert out["failed"] is True and "cuda-smi" in out["msg"] and "tools" in out["msg"]


def test_old_name_gpu_facts_still_runs_gpu_info_with_a_deprecation(tmp_path):
    # The rename to gpu_info keeps playbooks that call llmfleet.specdec.gpu_facts and read .gpu_facts working
    # (meta/runtime.yml plugin_routing), with ansible-core's deprecation warning naming the replacement.
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    playbook = tmp_path / "old_name.yml"
    playbook.write_text(
        "- hosts: localhost\n  gather_facts: false\n  tasks:\n"
        "    - llmfleet.specdec.gpu_facts:\n        tools: []\n        sysfs_root: " + str(SYSFS) + "\n"
        "        meminfo: " + str(MEMINFO) + "\n      register: old\n"
        "    - ansible.builtin.assert:\n        that:\n"
        "          - old.gpu_facts.devices | length > 0\n          - old.gpu_facts == old.gpu_info\n")
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(root / ".build" / "collections"),
               ANSIBLE_DEPRECATION_WARNINGS="true", ANSIBLE_PYTHON_INTERPRETER=sys.executable, ANSIBLE_NOCOLOR="1")
    proc = subprocess.run([str(Path(sys.executable).parent / "ansible-playbook"), "-i", "localhost,", "-c", "local",
                           str(playbook)], capture_output=True, text=True, timeout=300, env=env, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout + proc.stderr
    assert "gpu_facts" in out and "deprecated" in out.lower() and "llmfleet.specdec.gpu_info" in out
