"""playbooks/preflight.yml on the demo host, then the real llama-server run with each config.

The playbook's structured verdicts (job stats) must say, for every config, exactly what the
server then does: refuse to start, start with speculation silently off, or speculate.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from testbed.models import write_standard_set
from testbed.server import LlamaServer

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]


def run_preflight(cache: Path, *extra: str) -> tuple[dict, str]:
    """playbooks/preflight.yml on the demo host: (verdicts by config name, the printed table)."""
    env = dict(os.environ, LLMFLEET_CACHE=str(cache), ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"),
               ANSIBLE_STDOUT_CALLBACK="ansible.builtin.json", ANSIBLE_NOCOLOR="1",
               ANSIBLE_SHOW_CUSTOM_STATS="1")
    bindir = Path(sys.executable).parent
    proc = subprocess.run([str(bindir / "ansible-playbook"), "playbooks/preflight.yml", "-l", "specdec-demo", *extra],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    out = json.loads(proc.stdout)
    results = out["global_custom_stats"]["specdec_preflight"]["specdec-demo"]
    table = next(t for play in out["plays"] for t in play["tasks"] if t["task"]["name"].endswith("preflight table"))
    lines = table["hosts"]["specdec-demo"]["msg"]
    first = [t for play in out["plays"] for t in play["tasks"] if "The answer first" in t["task"]["name"]]
    FIRST[:] = first[0]["hosts"]["specdec-demo"]["msg"] if first and "msg" in first[0]["hosts"]["specdec-demo"] else []
    return {r["name"]: r for r in results}, "\n".join(lines)


FIRST: list[str] = []  # the "answer first" lines of the last run_preflight


def _configs_file(where: Path, *names: str) -> Path:
    """Extra vars naming some of the demo host's configs (as inventory defines them), for a shorter preflight."""
    host_vars = yaml.safe_load((ROOT / "inventory" / "host_vars" / "specdec-demo.yml").read_text())
    chosen = [c for c in host_vars["specdec_configs"] if c["name"] in names]
    assert [c["name"] for c in chosen] == list(names)
    path = where / "configs.json"
    path.write_text(json.dumps({"specdec_configs": chosen}))
    return path


@pytest.fixture(scope="module")
def demo_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    cache = tmp_path_factory.mktemp("cache")
    write_standard_set(cache / "demo-models")
    return cache


@pytest.fixture(scope="module")
def preflight(demo_cache: Path) -> tuple[dict, str, Path]:
    results, table = run_preflight(demo_cache)
    return results, table, demo_cache / "demo-models"


def test_table_answers_the_four_questions(preflight: tuple[dict, str, Path]) -> None:
    results, table, _dummy = preflight
    first = list(FIRST)
    # the answer first, per speculative candidate, in the field notes' order (before the table)
    at = first.index("draft-n7:")
    assert [line.strip()[:2] for line in first[at + 1:at + 6]] == ["1.", "2.", "3.", "4.", "5."]
    assert "K=1 p=" in first[at + 2] and "K=3 p=" in first[at + 2] and "K=7 p=" in first[at + 2]
    assert first[at + 4].startswith("  4. fit: fits beside the weights")
    assert "the confirming A/B" in first[at + 5]
    assert "baseline:" not in first and "mtp-old-name:" not in first
    assert table.splitlines()[0] == ("config | legal? | silently off? | fits? (KV) | worth it? | chain that runs | "
                                     "judged as | memory vs baseline")
    assert set(results) == {"baseline", "draft-n3", "draft-n7", "ngram-mod", "draft-n3+ngram-mod",
                            "draft-without-type", "draft-other-tokenizer", "mtp-old-name", "q4_0", "kv-q8_0"}
    assert results["mtp-old-name"]["legal"] is False
    assert [f["code"] for f in results["draft-without-type"]["silent_off"]] == ["draft-without-type"]
    assert [f["code"] for f in results["draft-other-tokenizer"]["silent_off"]] == ["draft-vocab-incompatible"]
    assert results["draft-n3+ngram-mod"]["effective_chain"] == ["ngram-mod", "draft-simple"]  # fixed internal order
    assert all(r["fits"] is True for r in results.values())
    # a draft doubles nothing here but adds its own KV: 2 layers of the target's 4
    assert results["draft-n3"]["kv_bytes"] == results["baseline"]["kv_bytes"] * 3 // 2
    # the field notes' depths K = 1, 3, 7 and the config's own reach the arithmetic; the table cell is the config's
    assert [r["k"] for r in results["draft-n7"]["breakeven"]["breakeven"]] == [1, 3, 7]
    assert "at K=7)" in results["draft-n7"]["worth"] and "at K=3)" in results["draft-n3"]["worth"]
    assert results["baseline"]["worth"] == "-"


def test_table_says_how_each_config_is_judged_and_what_it_does_to_memory(preflight: tuple[dict, str, Path]) -> None:
    results, table, models = preflight
    assert results["baseline"]["judged_as"] == "baseline"
    assert results["draft-n3"]["judged_as"] == "lossless"
    kv = results["kv-q8_0"]
    assert kv["judged_as"] == "lossy by design (KV cache type, backend kernels)"
    # q8_0 stores 32 values in 34 bytes, f16 in 64
    assert kv["against_baseline"]["kv_ratio"] == 34 / 64
    assert kv["against_baseline"]["weights_ratio"] == 1.0
    q4 = results["q4_0"]
    assert q4["judged_as"] == "lossy by design (model file)"
    assert q4["against_baseline"]["kv_ratio"] == 1.0
    # the weights: the real files' tensor data, read with gguf's own reader
    import gguf

    def tensor_bytes(name: str) -> int:
        return sum(int(t.n_bytes) for t in gguf.GGUFReader(models / name).tensors)

    assert q4["against_baseline"]["weights_ratio"] == tensor_bytes("target-q4_0.gguf") / tensor_bytes("target.gguf")
    assert q4["against_baseline"]["weights_ratio"] < 0.25
    # a drafter adds its own KV (2 layers of the target's 4) and weights
    assert results["draft-n3"]["against_baseline"]["kv_ratio"] == 1.5
    assert results["draft-n3"]["against_baseline"]["weights_ratio"] > 1.0
    row = next(line for line in table.splitlines() if line.startswith("kv-q8_0 |"))
    assert row.endswith("| lossy by design (KV cache type, backend kernels) | KV 0.53x (4.00 MiB -> 2.12 MiB); weights same")


def test_the_server_does_what_preflight_said(preflight: tuple[dict, str, Path], tmp_path: Path) -> None:
    import yaml

    results, _dummy, models = preflight
    host_vars = yaml.safe_load((ROOT / "inventory/host_vars/specdec-demo.yml").read_text())
    for config in host_vars["specdec_configs"]:
        verdict = results[config["name"]]
        env = {k: str(v).replace("{{ specdec_models_dir }}", str(models)) for k, v in config["env"].items()}
        server = LlamaServer(models / "target.gguf", env=env, ctx_size=4096, log_dir=tmp_path / config["name"])
        try:
            if not verdict["legal"]:
                server.start(wait=False)
                assert server.wait_exit(30) != 0, config["name"]
                continue
            server.start(wait=True)
            speculating = [s["speculative"] for s in server.slots()]
            expected = bool(verdict["effective_chain"]) and not verdict["silent_off"]
            assert speculating == [expected], (config["name"], server.log_text()[-1500:])
        finally:
            server.stop()


def test_the_build_record_on_the_host_sets_the_rules(preflight: tuple[dict, str, Path], demo_cache: Path,
                                                     tmp_path: Path) -> None:
    """Without specdec_llamacpp_build in inventory, the build llamacpp_build recorded on the host decides:
    on b9100 the MTP type was still named `mtp`, so the name is no longer the refusal there; the demo
    target's missing nextn layers are."""
    results, table, _dummy = preflight
    assert table.splitlines()[-1].startswith("llama.cpp build: pinned tree, from the tree the collection pins")
    record = tmp_path / "llamacpp-build.json"
    record.write_text(json.dumps({"schema": "llmfleet.specdec/llamacpp-build/1", "build_number": 9100,
                                  "version": "b9100", "backend": "cpu"}))
    # the two runs below are asked about one config and the table's last line: they preflight only that config
    # and the baseline (the full run above has all ten)
    only = "@" + str(_configs_file(tmp_path, "baseline", "mtp-old-name"))
    old, old_table = run_preflight(demo_cache, "-e", f"spec_preflight_build_record={record}", "-e", only)
    assert set(old) == {"baseline", "mtp-old-name"}
    assert old_table.splitlines()[-1] == f"llama.cpp build: b9100, from {record}"
    assert [e["code"] for e in results["mtp-old-name"]["errors"]] == ["spec-type-renamed"]
    assert [e["code"] for e in old["mtp-old-name"]["errors"]] == ["mtp-context-without-nextn"]
    assert [w["code"] for w in old["mtp-old-name"]["warnings"]] == ["old-build"]
    # inventory wins over the record
    _dummy, pinned_table = run_preflight(demo_cache, "-e", f"spec_preflight_build_record={record}",
                                         "-e", "specdec_llamacpp_build=b10133", "-e", only)
    assert pinned_table.splitlines()[-1] == "llama.cpp build: b10133, from inventory (specdec_llamacpp_build)"
