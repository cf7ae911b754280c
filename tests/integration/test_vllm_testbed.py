# The vLLM test bed itself: the models are deterministic. That the real vLLM speculates on them with the one-layer
# draft (counters at every position, most drafts accepted at the first) is asserted where a vLLM serving that draft
# starts anyway: molecule/vllm's unit_override step (one vLLM start fewer in `make test`).
from __future__ import annotations

import json
import subprocess
from pathlib import Path

from testbed.vllm_server import find_vllm_models, find_vllm_venv

ROOT = Path(__file__).resolve().parents[2]
GENERATOR = ROOT / "tests" / "testbed" / "vllm_models.py"


def test_models_are_byte_identical_on_every_run(tmp_path):
    """A fresh run writes the bytes of the cached set (make vllm-testbed wrote it in another process, earlier)."""
    python = str(find_vllm_venv() / "bin" / "python")
    proc = subprocess.run([python, str(GENERATOR), str(tmp_path / "a")], capture_output=True, text=True,
                          timeout=600, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    first = json.loads((tmp_path / "a" / "index.json").read_text())
    second = json.loads((find_vllm_models() / "index.json").read_text())
    assert first == second
    assert set(first["files"]) >= {"target/model.safetensors", "draft/model.safetensors", "target/tokenizer.json"}
    # the draft shares the target's tokenizer and chat template byte for byte
    assert first["files"]["draft/tokenizer.json"] == first["files"]["target/tokenizer.json"]
    # a complete set is kept: the second call on the same folder writes nothing
    before = (tmp_path / "a" / "target" / "model.safetensors").stat().st_mtime_ns
    subprocess.run([python, str(GENERATOR), str(tmp_path / "a")], capture_output=True, timeout=600, check=True)
    assert (tmp_path / "a" / "target" / "model.safetensors").stat().st_mtime_ns == before
