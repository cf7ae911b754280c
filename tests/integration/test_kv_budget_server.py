"""kv_budget's sizes against the real llama-server: the server's own load log is the oracle.

For each case the prediction (``_placement.kv_plan`` on the header facts of the real GGUF files) is
compared with what llama-server prints at load, per context (target, then draft or MTP) and per
cache (full, then sliding-window):

- ``llama_context: n_ctx / n_ctx_seq / n_seq_max`` - integers, exact;
- ``llama_kv_cache: size = ... (cells, layers, seqs/streams), K (type): ..., V (type): ...`` - the
  predicted line, formatted as llama.cpp formats it, must equal the printed one character for
  character: cells, layers, slots, streams and type names are exact; sizes are MiB to 2 decimals;
- ``llama_kv_cache: CPU KV buffer size = ...`` - the per-device buffer equals the tensor sum (no
  alignment padding: every tensor holds a multiple of 256 cells).

Bytes, exactly: llama.cpp allocates K as ``row_bytes x cells x streams`` per layer, and cells and
streams are printed as integers, so a printed K (or V) of ``m`` MiB pins the per-cell row sum to the
interval ``(m +- 0.005) MiB / (cells x streams)``. Once ``cells x streams`` exceeds 10486 that interval
is narrower than one byte and holds exactly one whole number: the log then fixes the bytes exactly,
and the test asserts they equal the prediction. Below that the 2-decimal print is all the log gives,
and the line equality above is the check (the rounding of a 2-decimal MiB print, at most 5243 bytes).
"""
from __future__ import annotations

import math
import re
import time
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from ansible_collections.llmfleet.specdec.plugins.module_utils.gguf._gguf import read_header
from ansible_collections.llmfleet.specdec.plugins.module_utils.gguf._model_facts import model_facts
from ansible_collections.llmfleet.specdec.plugins.module_utils.memory import _kv as kv
from ansible_collections.llmfleet.specdec.plugins.module_utils.memory import _placement as placement
from ansible_collections.llmfleet.specdec.plugins.module_utils.memory import _sizing as sizing
from testbed.models import ModelSpec, write_model
from testbed.server import LlamaServer

pytestmark = pytest.mark.integration

MIB = kv.MIB
# 0.01 MiB in bytes: below this many cells x streams the printed MiB cannot pin a byte count
EXACT_FROM = math.ceil(0.01 * MIB)

_KV = re.compile(r"(llama_kv_cache: size = .*?)\s*$")
_SIZES = re.compile(r"\(\s*(\d+) cells,\s*(\d+) layers,\s*(\d+)/(\d+) seqs\), K \((\w+)\):\s*([\d.]+) MiB, "
                    r"V \((\w+)\):\s*([\d.]+) MiB")
_BUF = re.compile(r"llama_kv_cache:\s+(\S+) KV buffer size =\s+([\d.]+) MiB")
_CTX = re.compile(r"llama_context: (n_seq_max|n_ctx|n_ctx_seq)\s+= (\d+)")

# name -> (target, draft, llama-server args, kv_plan config)
CASES: dict[str, tuple[str, str | None, list[str], dict[str, Any]]] = {}


def _case(name: str, target: str, draft: str | None, args: list[str], **config: Any) -> None:
    CASES[name] = (target, draft, args, config)


for _ctx in (512, 2048, 4096, 16384):
    _case(f"llama+draft c{_ctx} np1 f16", "target.gguf", "draft.gguf", ["-c", str(_ctx), "-np", "1"],
          ctx_size=_ctx, parallel=1)
for _t in ("q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "iq4_nl", "bf16", "f32"):
    _case(f"cache {_t} fa on, draft q8_0", "target.gguf", "draft.gguf",
          ["-c", "16384", "-np", "1", "-fa", "on", "-ctk", _t, "-ctv", _t, "-ctkd", "q8_0", "-ctvd", "q8_0"],
          ctx_size=16384, parallel=1, flash_attn="on", cache_type_k=_t, cache_type_v=_t,
          draft_cache_type_k="q8_0", draft_cache_type_v="q8_0")
_case("cache q4_0 K only, fa off", "target.gguf", "draft.gguf",
      ["-c", "4096", "-np", "1", "-fa", "off", "-ctk", "q4_0", "-ctkd", "q5_1"],
      ctx_size=4096, parallel=1, flash_attn="off", cache_type_k="q4_0", draft_cache_type_k="q5_1")
_case("cache q8_0 -np 2 c2048", "target.gguf", "draft.gguf",
      ["-c", "2048", "-np", "2", "-fa", "on", "-ctk", "q8_0", "-ctv", "q8_0"],
      ctx_size=2048, parallel=2, flash_attn="on", cache_type_k="q8_0", cache_type_v="q8_0")
for _np in (1, 2, 4):
    _case(f"slots -np {_np} c4096", "target.gguf", "draft.gguf", ["-c", "4096", "-np", str(_np)],
          ctx_size=4096, parallel=_np)
    _case(f"slots -np {_np} -kvu c4096", "target.gguf", "draft.gguf", ["-c", "4096", "-np", str(_np), "-kvu"],
          ctx_size=4096, parallel=_np, kv_unified=True)
# -np -1 is llama-server's "auto" (what it runs without -np): 4 slots, unified
_case("slots auto (4, unified) c8192", "target.gguf", "draft.gguf", ["-c", "8192", "-np", "-1"], ctx_size=8192)
_case("slots -np 3 c4096 (rounds up to 4608)", "target.gguf", None, ["-c", "4096", "-np", "3"],
      ctx_size=4096, parallel=3)
_case("context 1000 padded to 1024", "target.gguf", "draft.gguf", ["-c", "1000", "-np", "1"],
      ctx_size=1000, parallel=1)
for _np, _ctx in ((1, 2048), (2, 2048), (4, 4096), (1, 16384), (2, 16384)):
    _case(f"swa -np {_np} c{_ctx}", "target-swa.gguf", "draft.gguf", ["-c", str(_ctx), "-np", str(_np)],
          ctx_size=_ctx, parallel=_np)
_case("swa -np 4 -kvu c16384", "target-swa.gguf", "draft.gguf", ["-c", "16384", "-np", "4", "-kvu"],
      ctx_size=16384, parallel=4, kv_unified=True)
_case("swa auto slots c16384", "target-swa.gguf", "draft.gguf", ["-c", "16384", "-np", "-1"], ctx_size=16384)
_case("swa -ub 128 c4096", "target-swa.gguf", None, ["-c", "4096", "-np", "1", "-ub", "128"],
      ctx_size=4096, parallel=1, ubatch_size=128)
_case("swa c300 (ubatch follows -c)", "target-swa.gguf", None, ["-c", "300", "-np", "1"], ctx_size=300, parallel=1)
_case("swa --swa-full c4096", "target-swa.gguf", None, ["-c", "4096", "-np", "1", "--swa-full"],
      ctx_size=4096, parallel=1, swa_full=True)
_case("swa q8_0 fa on c16384", "target-swa.gguf", "draft.gguf",
      ["-c", "16384", "-np", "1", "-fa", "on", "-ctk", "q8_0", "-ctv", "q8_0"],
      ctx_size=16384, parallel=1, flash_attn="on", cache_type_k="q8_0", cache_type_v="q8_0")
for _fa in ("on", "off"):
    _case(f"per-layer kv heads fa {_fa} c16384", "target-kvarray.gguf", None,
          ["-c", "16384", "-np", "1", "-fa", _fa], ctx_size=16384, parallel=1, flash_attn=_fa)
_case("per-layer kv heads -np 2 q4_0", "target-kvarray.gguf", "draft.gguf",
      ["-c", "8192", "-np", "2", "-fa", "on", "-ctk", "q4_0", "-ctv", "q4_0"],
      ctx_size=8192, parallel=2, flash_attn="on", cache_type_k="q4_0", cache_type_v="q4_0")
_case("mtp context on the target", "target-mtp.gguf", None,
      ["-c", "16384", "-np", "1", "--spec-type", "draft-mtp", "-ctkd", "q8_0", "-ctvd", "q8_0", "-fa", "on"],
      ctx_size=16384, parallel=1, spec_type=["draft-mtp"], flash_attn="on",
      draft_cache_type_k="q8_0", draft_cache_type_v="q8_0")

# llama-server's own defaults (target.gguf trains at 4096). A case without "-c" or "-np" starts the
# server without that flag: -c omitted is 0 and, with --fit on, the training context per stream.
_case("defaults: no -c, no -np (auto: 4 slots, unified)", "target.gguf", "draft.gguf", [])
_case("no -c, -np 3: fit gives 4096 per slot", "target.gguf", "draft.gguf", ["-np", "3"], parallel=3)
_case("no -c, -np 2 -kvu: one stream of 4096", "target.gguf", None, ["-np", "2", "-kvu"],
      parallel=2, kv_unified=True)
_case("-c 0 -np 2", "target.gguf", "draft.gguf", ["-c", "0", "-np", "2"], ctx_size=0, parallel=2)
_case("no -c, -np 4 -fit off: 4096 shared", "target.gguf", "draft.gguf", ["-np", "4", "-fit", "off"],
      parallel=4, fit=False)
_case("-np -1 -no-kvu c4096 (auto stays unified)", "target.gguf", None, ["-c", "4096", "-np", "-1", "-no-kvu"],
      ctx_size=4096, parallel=-1, kv_unified=False)
_case("no -c, --kv-unified-per-slot 1024 -np 2", "target.gguf", None, ["-np", "2", "--kv-unified-per-slot", "1024"],
      parallel=2, kv_unified_per_slot=1024)
_case("swa no -c -np 2", "target-swa.gguf", "draft.gguf", ["-np", "2"], parallel=2)


class _DefaultsServer(LlamaServer):
    """LlamaServer without its own -c / -np where the case leaves them to llama-server's defaults."""

    def __init__(self, *args: Any, omit: tuple[str, ...] = (), **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.omit = omit

    def command(self) -> list[str]:
        cmd = super().command()
        base, extra = cmd[:len(cmd) - len(self.args)], cmd[len(cmd) - len(self.args):]
        kept: list[str] = []
        skip = False
        for i, word in enumerate(base):
            if skip:
                skip = False
            elif i > 0 and word in self.omit:
                skip = True
            else:
                kept.append(word)
        return kept + extra


@pytest.fixture(scope="module")
def facts_of(standard_models: dict[str, Path]) -> Any:
    cache: dict[str, dict[str, Any]] = {}

    def get(name: str | None) -> dict[str, Any] | None:
        if name is None:
            return None
        if name not in cache:
            cache[name] = model_facts(read_header(str(standard_models[name])), include_tensors=True)
        return cache[name]
    return get


def parse_contexts(log: str) -> list[dict[str, Any]]:
    """The load log cut into contexts: their n_ctx lines, cache lines and buffer lines, in order."""
    contexts: list[dict[str, Any]] = []
    for line in log.splitlines():
        m = _CTX.search(line)
        if m and m.group(1) == "n_seq_max":
            contexts.append({"ints": {}, "caches": [], "buffers": []})
        if not contexts:
            continue
        if m:
            contexts[-1]["ints"][m.group(1)] = int(m.group(2))
        elif (k := _KV.search(line)) is not None:
            contexts[-1]["caches"].append(k.group(1))
        elif (b := _BUF.search(line)) is not None:
            contexts[-1]["buffers"].append((b.group(1), b.group(2)))
    return [c for c in contexts if c["caches"]]


def run_server(binary: str, model: Path, draft: Path | None, args: list[str], log_dir: Path,
               expected_lines: int) -> str:
    """Starts llama-server, waits until it printed every KV line expected (or exited), stops it.

    The case's -np comes after LlamaServer's own and wins (llama.cpp keeps the last value); a case
    without -c or -np starts the server without it, so llama-server's own default applies."""
    args = list(args)
    ctx = 2048
    omit: tuple[str, ...] = () if "-np" in args else ("-np",)
    if "-c" in args:
        i = args.index("-c")
        ctx = int(args[i + 1])
        del args[i:i + 2]
    else:
        omit += ("-c",)
    server = _DefaultsServer(model, draft=draft, args=[*args, "-lv", "4"], binary=binary, log_dir=log_dir,
                             ctx_size=ctx, omit=omit)
    server.start(wait=False)
    deadline = time.monotonic() + 30
    try:
        while time.monotonic() < deadline:
            printed = sum(1 for line in server.log_text().splitlines() if _KV.search(line))
            if printed >= expected_lines or server.returncode is not None:
                break
            time.sleep(0.02)
    finally:
        server.stop()
    return server.log_text()


def pinned_row_sum(printed_mib: str, cells_x_streams: int) -> int | None:
    """The per-cell row-byte sum a printed MiB value allows, when exactly one whole number fits."""
    mib = Decimal(printed_mib)
    lo = (mib - Decimal("0.005")) * MIB / cells_x_streams
    hi = (mib + Decimal("0.005")) * MIB / cells_x_streams
    first, last = math.ceil(lo), math.floor(hi)
    return first if first == last else None


def _mib2(n: int) -> str:
    return f"{n / MIB:8.2f}".strip()


@pytest.mark.parametrize("case", list(CASES))
def test_predicted_kv_equals_the_server_log(case: str, llama_server_bin: str, standard_models: dict[str, Path],
                                            facts_of: Any, tmp_path: Path) -> None:
    target, draft, args, config = CASES[case]
    plan = placement.kv_plan(facts_of(target), facts_of(draft), config)
    assert not plan["problems"], plan["problems"]
    predicted = [c for c in (plan["target"], plan["draft"]) if c is not None]
    n_lines = sum(len(c["log_lines"]) for c in predicted)
    log = run_server(llama_server_bin, standard_models[target], standard_models[draft] if draft else None,
                     args, tmp_path, n_lines)
    printed = parse_contexts(log)
    assert len(printed) == len(predicted), log[-3000:]
    exact = 0
    for want, got in zip(predicted, printed):
        ctx = want["context"]
        assert got["ints"] == {"n_seq_max": ctx["n_seq_max"], "n_ctx": ctx["n_ctx"], "n_ctx_seq": ctx["n_ctx_seq"]}
        assert got["caches"] == want["log_lines"]
        buffers = iter(got["buffers"])
        for cache, line in zip(want["caches"], got["caches"]):
            cells, _layers, _seqs, streams, _tk, k_mib, _tv, v_mib = _SIZES.search(line).groups()
            assert int(cells) == cache["cells"] and int(streams) == cache["streams"]
            rows = int(cells) * int(streams)
            for printed_mib, key in ((k_mib, "k_row_bytes"), (v_mib, "v_row_bytes")):
                pinned = pinned_row_sum(printed_mib, rows)
                if rows >= EXACT_FROM:
                    assert pinned == sum(r[key] for r in cache["rows"]), (line, cache["rows"])
                    exact += 1
                elif pinned is not None:
                    assert pinned == sum(r[key] for r in cache["rows"])
            if cache["layers"]:   # a cache without layers allocates no buffer
                dev, buf_mib = next(buffers)
                assert (dev, buf_mib) == ("CPU", _mib2(cache["bytes"]))
    if any(c["cells"] * c["streams"] >= EXACT_FROM for w in predicted for c in w["caches"]):
        assert exact > 0


def test_quantized_v_without_flash_attention_is_refused_as_predicted(llama_server_bin: str,
                                                                     standard_models: dict[str, Path],
                                                                     facts_of: Any, tmp_path: Path) -> None:
    r = sizing.kv_budget(facts_of("target.gguf"), None,
                         {"ctx_size": 2048, "parallel": 1, "cache_type_v": "q8_0", "flash_attn": "off"})
    assert r["loads"] is False
    server = LlamaServer(standard_models["target.gguf"], args=["-np", "1", "-ctv", "q8_0", "-fa", "off"],
                         binary=llama_server_bin, log_dir=tmp_path)
    assert server.wait_exit(timeout=30) != 0
    assert "quantized V cache requires flash_attn" in server.log_text()


def test_k_block_not_dividing_the_head_is_refused_as_predicted(llama_server_bin: str, tmp_path: Path) -> None:
    """Heads of 48 values: a q8_0 K row of 2 x 48 = 96 values is whole blocks, but llama.cpp's flash
    attention check wants the head itself to be whole blocks."""
    model = write_model(tmp_path / "head48.gguf", ModelSpec(key_length=48, value_length=48, name="testbed-head48"))
    f = model_facts(read_header(str(model)))
    r = sizing.kv_budget(f, None, {"ctx_size": 2048, "parallel": 1, "cache_type_k": "q8_0", "flash_attn": "on"})
    assert r["loads"] is False and any("does not divide n_embd_head_k=48" in p for p in r["problems"])
    server = LlamaServer(model, args=["-np", "1", "-ctk", "q8_0", "-fa", "on"], binary=llama_server_bin,
                         log_dir=tmp_path)
    assert server.wait_exit(timeout=30) != 0
    assert "does not divide n_embd_head_k=48" in server.log_text()
    # and the same model with f16 loads, sized as predicted
    ok = placement.kv_plan(f, None, {"ctx_size": 2048, "parallel": 1})
    log = run_server(llama_server_bin, model, None, ["-c", "2048", "-np", "1"], tmp_path / "ok", 1)
    assert parse_contexts(log)[0]["caches"] == ok["target"]["log_lines"]
