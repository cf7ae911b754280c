#!/usr/bin/env python3
"""Fuzz the GGUF header path end to end: read_header, model_facts and the module result's serialisation.

Each case is a mutated header: every value type in both byte orders and GGUF v2/v3, nested arrays,
huge and negative counts and values, a string or an array where a number belongs, truncation at every
offset, byte flips, inserted and deleted spans, on synthetic headers and on llama.cpp's own vocabulary
files (``models/ggml-vocab-*.gguf`` of the pinned llama.cpp tree, read at run time). A case runs in a
worker process under a memory cap (RLIMIT_AS) and a per-case deadline and ends as one of:

- parsed: the facts came back and serialised as exit_json does (remove_values, then JSON);
- project error: a SpecdecError (GGUFError ...), the clear error the module turns into fail_json;
- other exception: anything else, a bug (the first few are printed with how to replay them);
- memory error: MemoryError under the cap;
- over 1 s: the case took longer than one second (killed at the deadline).

Run: make fuzz   (or: PYTHONPATH=.build/collections .venv/bin/python benchmarks/fuzz_gguf.py --cases 100000)
Replay one case with its traceback: ... benchmarks/fuzz_gguf.py --replay N
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import random
import resource
import signal
import struct
import sys
import tempfile
import time
import traceback
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

from ansible.module_utils.common.parameters import remove_values

from ansible_collections.llmfleet.specdec.plugins.module_utils.common._errors import SpecdecError
from ansible_collections.llmfleet.specdec.plugins.module_utils.gguf._gguf import ValueType, read_header
from ansible_collections.llmfleet.specdec.plugins.module_utils.gguf._model_facts import model_facts
from ansible_collections.llmfleet.specdec.plugins.module_utils.llamacpp._llamacpp import PINNED

VT = ValueType
FMT = {VT.UINT8: "B", VT.INT8: "b", VT.UINT16: "H", VT.INT16: "h", VT.UINT32: "I", VT.INT32: "i",
       VT.FLOAT32: "f", VT.BOOL: "?", VT.UINT64: "Q", VT.INT64: "q", VT.FLOAT64: "d"}
# llama.cpp's vocabulary files in the pinned tree that `make llama-server` unpacks under the cache ($LLMFLEET_CACHE,
# which the Makefile sets from CACHE=)
VOCAB_GLOB = os.path.join(os.environ.get("LLMFLEET_CACHE") or os.path.expanduser("~/.cache/llmfleet-specdec"),
                          f"src-{PINNED['llama_cpp_python']}", "vendor", "llama.cpp", "models", "ggml-vocab-*.gguf")
VOCAB_KEEP = 48  # array entries kept when a vocabulary file becomes a small seed
SLOW_S = 1.0
OUTCOMES = ("parsed", "project error", "other exception", "memory error", "over 1 s")

# Interesting integers, written where counts, lengths, types and values live.
EDGES = [0, 1, 2, 3, 7, 8, 12, 13, 255, 511, 512, 513, 4096, 40000, 65535, 65536, 65537, 2**31 - 1, 2**31,
         2**32 - 1, 2**32, 2**40, 2**62, 2**63 - 1, 2**63, 2**64 - 2, 2**64 - 1]
ARCHS = ["llama", "qwen35", "qwen3next", "gemma3", "lfm2", "mamba2", "dflash", "granitehybrid"]
ARCH_KEYS = ["block_count", "nextn_predict_layers", "context_length", "embedding_length", "feed_forward_length",
             "attention.head_count", "attention.head_count_kv", "attention.key_length", "attention.value_length",
             "attention.key_length_swa", "attention.value_length_swa", "attention.sliding_window",
             "attention.sliding_window_pattern", "attention.recurrent_layers", "full_attention_interval",
             "expert_count"]
TOKENIZER_KEYS = ["tokenizer.ggml.model", "tokenizer.ggml.pre", "tokenizer.ggml.tokens", "tokenizer.ggml.merges",
                  "tokenizer.ggml.token_type", "tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id",
                  "tokenizer.ggml.add_bos_token", "tokenizer.ggml.add_eos_token", "general.name",
                  "general.architecture", "general.alignment"]


# ---------------------------------------------------------------------------------------------
# Encoding structured headers in either byte order


def enc_value(o: str, vtype: int, v: Any) -> bytes:
    if vtype == VT.STRING:
        b = v.encode("utf-8", "surrogateescape") if isinstance(v, str) else bytes(v)
        return struct.pack(o + "Q", len(b)) + b
    if vtype == VT.ARRAY:
        et, items = v
        return struct.pack(o + "IQ", et, len(items)) + b"".join(enc_value(o, et, x) for x in items)
    return struct.pack(o + FMT[VT(vtype)], v)


def encode(seed: dict[str, Any]) -> bytes:
    o, kvs, tensors = seed["order"], seed["kvs"], seed["tensors"]
    out = [b"GGUF", struct.pack(o + "I", seed["version"]), struct.pack(o + "QQ", len(tensors), len(kvs))]
    for key, vtype, value in kvs:
        out.append(enc_value(o, VT.STRING, key) + struct.pack(o + "I", vtype) + enc_value(o, vtype, value))
    for name, dims, ggml_type, offset in tensors:
        out.append(enc_value(o, VT.STRING, name) + struct.pack(o + "I", len(dims))
                   + b"".join(struct.pack(o + "Q", d) for d in dims) + struct.pack(o + "IQ", ggml_type, offset))
    body = b"".join(out)
    if tensors:
        body += b"\0" * (-len(body) % 32) + b"\0" * 4096
    return body


def random_scalar(rng: random.Random, vtype: int) -> Any:
    if vtype == VT.BOOL:
        return rng.random() < 0.5
    if vtype in (VT.FLOAT32, VT.FLOAT64):
        return rng.choice([0.0, -1.5, 1e30, float("inf"), float("-inf"), float("nan"), 3.0])
    fmt = FMT[VT(vtype)]
    bits = struct.calcsize(fmt) * 8
    signed = fmt.islower()
    lo, hi = (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if signed else (0, (1 << bits) - 1)
    pick = rng.choice([*EDGES, -1, -2, -2 ** 31, rng.randint(0, 64)])
    return min(max(pick, lo), hi)


def random_string(rng: random.Random) -> bytes:
    return rng.choice([b"", b"llama", b"gpt2", b"\xff\xfe", b"\xc3", "é✓".encode(), b"a\0b", b"x" * rng.randint(0, 300),
                       bytes(rng.randrange(256) for _dummy in range(rng.randint(1, 12)))])


def random_value(rng: random.Random, depth: int = 0) -> tuple[int, Any]:
    """A (type, value) of any GGUF type, arrays nested up to three levels, some of them long."""
    vtype = rng.choice(list(VT) if depth < 3 else [t for t in VT if t != VT.ARRAY])
    if vtype == VT.STRING:
        return vtype, random_string(rng)
    if vtype == VT.ARRAY:
        et = rng.choice(list(VT) if depth < 2 else [t for t in VT if t != VT.ARRAY])
        n = rng.choice([0, 1, 2, 3, 4, 9, 65, 513, rng.randint(0, 3000)])
        if et == VT.ARRAY:
            sub = rng.choice([t for t in VT if t != VT.ARRAY])
            items = [(sub, [random_scalar(rng, sub) if sub != VT.STRING else random_string(rng)
                            for _dummy in range(rng.randint(0, 5))]) for _dummy in range(min(n, 6))]
            return vtype, (et, items)
        if et == VT.STRING:
            return vtype, (et, [random_string(rng) if rng.random() < 0.05 else b"t%d" % i for i in range(n)])
        one = random_scalar(rng, et)
        return vtype, (et, [one if rng.random() < 0.7 else random_scalar(rng, et) for _dummy in range(n)])
    return vtype, random_scalar(rng, vtype)


def synthetic_seed(rng: random.Random) -> dict[str, Any]:
    """A plausible header: an architecture's keys, a small tokenizer, every value type, some tensors."""
    arch = rng.choice(ARCHS)
    n_layer = rng.choice([1, 2, 4, 5, 9])
    kvs: list[tuple[str, int, Any]] = [("general.architecture", VT.STRING, arch), ("general.name", VT.STRING, "fuzz"),
                                       (f"{arch}.block_count", VT.UINT32, n_layer),
                                       (f"{arch}.context_length", VT.UINT32, 4096),
                                       (f"{arch}.attention.head_count", VT.UINT32, 4),
                                       (f"{arch}.attention.head_count_kv", VT.ARRAY, (VT.UINT32, [rng.choice([0, 2])
                                                                                                  for _dummy in range(n_layer)])),
                                       (f"{arch}.nextn_predict_layers", VT.UINT32, rng.choice([0, 1])),
                                       (f"{arch}.attention.sliding_window", VT.UINT32, 1024),
                                       (f"{arch}.attention.sliding_window_pattern", VT.ARRAY,
                                        (VT.BOOL, [rng.random() < 0.5 for _dummy in range(n_layer)])),
                                       ("tokenizer.ggml.model", VT.STRING, "gpt2"),
                                       ("tokenizer.ggml.pre", VT.STRING, "gpt-2"),
                                       ("tokenizer.ggml.tokens", VT.ARRAY, (VT.STRING, [b"<s>", b"a", b"\xc3", "é".encode()])),
                                       ("tokenizer.ggml.merges", VT.ARRAY, (VT.STRING, [b"a b"])),
                                       ("tokenizer.ggml.token_type", VT.ARRAY, (VT.INT32, [3, 1, 1, 1])),
                                       ("tokenizer.ggml.bos_token_id", VT.UINT32, 0),
                                       ("tokenizer.ggml.add_bos_token", VT.BOOL, True),
                                       ("t.nested", VT.ARRAY, (VT.ARRAY, [(VT.UINT16, [1, 2]), (VT.STRING, [b"x"])]))]
    for vtype in FMT:
        kvs.append((f"t.{vtype.name.lower()}", vtype, random_scalar(rng, vtype)))
    tensors = []
    for i in range(rng.choice([0, 1, 3])):
        tensors.append((f"blk.{n_layer - 1}.nextn.eh_proj.weight" if i == 0 else f"blk.{i}.w", [32, 2], 0, 256 * i))
    return {"order": rng.choice("<>"), "version": rng.choice([2, 3]), "kvs": kvs, "tensors": tensors}


def vocab_seeds(paths: list[str]) -> list[dict[str, Any]]:
    """llama.cpp's vocabulary files, every key kept, long arrays cut to their first entries."""
    seeds = []
    for path in paths:
        hdr = read_header(path)
        kvs = []
        for key, kv in hdr.kv.items():
            if kv.vtype == VT.ARRAY:
                arr = kv.value
                items = list(arr.iter_bytes(VOCAB_KEEP)) if arr.elem_type == VT.STRING else arr.to_list(VOCAB_KEEP)
                kvs.append((key, VT.ARRAY, (arr.elem_type, items)))
            elif kv.vtype == VT.STRING:
                # raw_bytes(): the stored bytes (older readers only had the decoded text)
                kvs.append((key, VT.STRING, kv.raw_bytes() if hasattr(kv, "raw_bytes") else kv.value))
            else:
                kvs.append((key, kv.vtype, kv.value))
        seeds.append({"order": "<", "version": hdr.version, "kvs": kvs, "tensors": [], "name": Path(path).name})
    return seeds


# ---------------------------------------------------------------------------------------------
# Mutations


def mutate_structure(rng: random.Random, seed: dict[str, Any]) -> dict[str, Any]:
    """Change what a key holds: a facts key gets any type, a huge or negative value, a long array."""
    seed = dict(seed, kvs=list(seed["kvs"]), tensors=list(seed["tensors"]))
    arch = next((v for k, t, v in seed["kvs"] if k == "general.architecture" and t == VT.STRING), "llama")
    arch = arch.decode("utf-8", "replace") if isinstance(arch, bytes) else arch
    for _dummy in range(rng.randint(1, 3)):
        key = rng.choice([f"{arch}.{k}" for k in ARCH_KEYS] + TOKENIZER_KEYS + [k for k, _dummy, _dummy in seed["kvs"]])
        roll = rng.random()
        if roll < 0.35:
            value = random_value(rng)
        elif roll < 0.6:
            value = (rng.choice(list(FMT)), 0)
            value = (value[0], random_scalar(rng, value[0]))
        elif roll < 0.8:  # an array where a number belongs, or a per-layer array of any length
            et = rng.choice([VT.UINT32, VT.INT32, VT.BOOL, VT.UINT64, VT.STRING, VT.FLOAT32])
            n = rng.choice([0, 1, 3, 4, 5, 9, 512, 513, 40000])
            value = (VT.ARRAY, (et, [b"1" if et == VT.STRING else random_scalar(rng, et)] * n))
        else:
            value = (VT.UINT32, rng.choice(EDGES[:18]))
        kvs = [kv for kv in seed["kvs"] if kv[0] != key]
        kvs.insert(rng.randint(0, len(kvs)), (key, value[0], value[1]))
        seed["kvs"] = kvs
    if rng.random() < 0.2:
        seed["order"] = ">" if seed["order"] == "<" else "<"
    if rng.random() < 0.2:
        seed["version"] = 5 - seed["version"]
    return seed


def mutate_bytes(rng: random.Random, data: bytes, order: str) -> bytes:
    buf = bytearray(data)
    for _dummy in range(rng.randint(1, 4)):
        if not buf:
            break
        pos = rng.randrange(len(buf))
        kind = rng.random()
        if kind < 0.3:
            buf[pos] ^= rng.randint(1, 255)
        elif kind < 0.55:
            fmt = rng.choice("QI")
            value = rng.choice([*EDGES, (1 << 64) - rng.randint(1, 9)]) & ((1 << (8 * struct.calcsize(fmt))) - 1)
            buf[pos:pos + struct.calcsize(fmt)] = struct.pack(order + fmt, value)
        elif kind < 0.7:
            buf[pos:pos + 4] = struct.pack(order + "I", rng.randrange(14))  # a type code
        elif kind < 0.8:
            del buf[pos:pos + rng.randint(1, 16)]
        elif kind < 0.9:
            buf[pos:pos] = bytes(rng.randrange(256) for _dummy in range(rng.randint(1, 16)))
        else:
            span = buf[pos:pos + rng.randint(1, 64)]
            buf[rng.randrange(len(buf)):0] = span
    if rng.random() < 0.25 and buf:
        del buf[rng.randrange(len(buf)):]
    return bytes(buf)


class Cases:
    """Case ``i`` is the same bytes on every run and machine: a deterministic function of (seed, i)."""

    def __init__(self, seed: int, vocab_paths: list[str]) -> None:
        self.seed = seed
        self.vocab = vocab_seeds(vocab_paths)
        self.vocab_paths = vocab_paths
        base = random.Random(seed)
        self.synthetic = [synthetic_seed(base) for _dummy in range(24)]
        # truncation at every offset of a few seeds (both byte orders, v2 and v3, one vocabulary file)
        self.cut_seeds = [encode(s) for s in self.synthetic[:4]] + [encode(s) for s in self.vocab[:1]]
        self.cut_total = sum(len(b) for b in self.cut_seeds)

    def case(self, i: int) -> tuple[str, bytes]:
        # every fourth case cuts a seed, until every offset of every cut seed has been tried
        if i % 4 == 0 and i // 4 < self.cut_total:
            at = i // 4
            for data in self.cut_seeds:
                if at < len(data):
                    return "truncation", data[:at]
                at -= len(data)
        rng = random.Random(self.seed * 1_000_003 + i)
        roll = rng.random()
        if self.vocab_paths and roll < 0.004:  # a whole real vocabulary file, a few bytes changed
            path = self.vocab_paths[rng.randrange(len(self.vocab_paths))]
            data = Path(path).read_bytes()
            return "vocab file", mutate_bytes(rng, data, "<") if rng.random() < 0.8 else data
        pool = self.vocab if self.vocab and roll < 0.4 else self.synthetic
        seed = pool[rng.randrange(len(pool))]
        kind = "vocab" if pool is self.vocab else "synthetic"
        roll = rng.random()
        if roll < 0.45:
            seed = mutate_structure(rng, seed)
            data = encode(seed)
            kind += " values"
            if rng.random() < 0.3:
                data, kind = mutate_bytes(rng, data, seed["order"]), kind + "+bytes"
        else:
            data, kind = mutate_bytes(rng, encode(seed), seed["order"]), kind + " bytes"
        return kind, data


# ---------------------------------------------------------------------------------------------
# Running cases in workers


class Deadline(BaseException):
    """Raised by the per-case timer; a BaseException so that no `except Exception` swallows it."""


def _on_alarm(signum: int, frame: Any) -> None:
    raise Deadline()


_STATE: dict[str, Any] = {}


def _init_worker(mem_cap: int, seed: int, vocab_paths: list[str], workdir: str) -> None:
    _STATE["cases"] = Cases(seed, vocab_paths)  # built before the cap: the seeds are not under test
    _STATE["path"] = os.path.join(workdir, f"case-{os.getpid()}.gguf")
    signal.signal(signal.SIGALRM, _on_alarm)
    resource.setrlimit(resource.RLIMIT_AS, (mem_cap, mem_cap))


def run_pipeline(path: str) -> None:
    """What gguf_info does with a file, then what exit_json does with the result."""
    hdr = read_header(path)
    # every key's value too (arrays decoded, nested ones included), but not a whole vocabulary: returning
    # 150k tokens is a choice of output size, not something a header can force
    keys = [k for k, kv in hdr.kv.items() if kv.vtype != ValueType.ARRAY or kv.value.count <= 10_000]
    facts = model_facts(hdr, include_tensors=True, keys=keys[:64])
    result = remove_values({"changed": False, "gguf": facts}, set())
    json.loads(json.dumps(result))


def run_case(i: int, deadline: float) -> tuple[str, float, str]:
    kind, data = _STATE["cases"].case(i)
    path = _STATE["path"]
    with open(path, "wb") as fh:
        fh.write(data)
    start = time.perf_counter()
    outcome, detail = "parsed", ""
    signal.setitimer(signal.ITIMER_REAL, deadline)
    try:
        run_pipeline(path)
    except Deadline:
        outcome = "over 1 s"
    except MemoryError:
        outcome, detail = "memory error", kind
    except SpecdecError:
        outcome = "project error"
    except Exception as exc:  # the bugs this benchmark exists to find
        outcome, detail = "other exception", f"{kind}: {type(exc).__name__}: {str(exc)[:160]}"
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
    took = time.perf_counter() - start
    if took > SLOW_S and outcome != "over 1 s":
        detail = f"{kind}: {outcome} after {took:.2f} s"
        outcome = "over 1 s"
    return outcome, took, detail


def run_chunk(ids: list[int], deadline: float) -> dict[str, Any]:
    counts = dict.fromkeys(OUTCOMES, 0)
    samples: list[tuple[int, str, str]] = []
    slowest = 0.0
    for i in ids:
        outcome, took, detail = run_case(i, deadline)
        counts[outcome] += 1
        slowest = max(slowest, took)
        if outcome not in ("parsed", "project error") and len(samples) < 5:
            samples.append((i, outcome, detail))
    rss_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {"counts": counts, "samples": samples, "slowest": slowest, "rss_kib": rss_kib}


def fuzz(cases: int, *, seed: int = 11, jobs: int = 2, mem_cap_mib: int = 512, deadline: float = 5.0,
         vocab_paths: list[str] | None = None, chunk: int = 250, progress: bool = False) -> dict[str, Any]:
    """Run cases 0..cases-1 in ``jobs`` worker processes; return counts, samples, peak RSS and time."""
    vocab_paths = sorted(glob.glob(VOCAB_GLOB)) if vocab_paths is None else vocab_paths
    totals = dict.fromkeys(OUTCOMES, 0)
    samples: list[tuple[int, str, str]] = []
    peak_kib, slowest = 0, 0.0
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="fuzz-gguf-") as workdir:
        with ProcessPoolExecutor(max_workers=jobs, initializer=_init_worker,
                                 initargs=(mem_cap_mib << 20, seed, vocab_paths, workdir)) as pool:
            chunks = [list(range(a, min(a + chunk, cases))) for a in range(0, cases, chunk)]
            for res in pool.map(run_chunk, chunks, [deadline] * len(chunks)):
                for k, v in res["counts"].items():
                    totals[k] += v
                samples.extend(res["samples"])
                peak_kib = max(peak_kib, res["rss_kib"])
                slowest = max(slowest, res["slowest"])
                done = sum(totals.values())
                if progress and done % 10_000 < chunk:
                    print(f"{done:,} / {cases:,} cases, {time.perf_counter() - start:.0f} s", file=sys.stderr)
    return {"cases": cases, "counts": totals, "samples": samples, "peak_rss_mib": peak_kib / 1024,
            "slowest_s": slowest, "wall_s": time.perf_counter() - start, "vocab_files": len(vocab_paths),
            "mem_cap_mib": mem_cap_mib, "jobs": jobs, "seed": seed,
            "cut_total": Cases(seed, vocab_paths).cut_total}


def table(r: dict[str, Any]) -> str:
    c = r["counts"]
    cuts = f"{min(r['cut_total'], (r['cases'] + 3) // 4):,} of {r['cut_total']:,} truncation offsets"
    rows = [("cases", f"{r['cases']:,}", f"seed {r['seed']}, {r['vocab_files']} llama.cpp vocabulary files, {cuts}"),
            ("parsed", f"{c['parsed']:,}", "facts returned and serialised as exit_json does"),
            ("project error", f"{c['project error']:,}", "GGUFError / SpecdecError naming the input"),
            ("other exception", f"{c['other exception']:,}", "goal: 0"),
            ("over 1 s", f"{c['over 1 s']:,}", f"goal: 0 (slowest case {r['slowest_s']:.3f} s)"),
            ("memory error", f"{c['memory error']:,}", f"goal: 0 (cap {r['mem_cap_mib']} MiB per worker)"),
            ("peak RSS (MiB)", f"{r['peak_rss_mib']:.0f}", f"largest worker, {r['jobs']} workers"),
            ("wall time (s)", f"{r['wall_s']:.0f}", "")]
    w = max(len(n) for n, _dummy, _dummy in rows)
    v = max(len(x) for _dummy, x, _dummy in rows)
    lines = [f"{'measure':<{w}}  {'value':>{v}}  note", f"{'-' * w}  {'-' * v}  ----"]
    lines += [f"{n:<{w}}  {x:>{v}}  {note}".rstrip() for n, x, note in rows]
    return "\n".join(lines)


def replay(i: int, seed: int) -> int:
    cases = Cases(seed, sorted(glob.glob(VOCAB_GLOB)))
    kind, data = cases.case(i)
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, f"case-{i}.gguf")
        Path(path).write_bytes(data)
        print(f"case {i} ({kind}), {len(data)} bytes, written to {path}")
        try:
            run_pipeline(path)
            print("parsed")
        except SpecdecError as exc:
            print(f"project error: {exc}")
        except Exception:
            traceback.print_exc()
            return 1
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", type=int, default=100_000)
    ap.add_argument("--seed", type=int, default=11)
    ap.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1), help="worker processes (default 2)")
    ap.add_argument("--mem-cap-mib", type=int, default=512, help="RLIMIT_AS of each worker")
    ap.add_argument("--deadline", type=float, default=5.0, help="seconds before a case is stopped")
    ap.add_argument("--replay", type=int, help="run one case in this process and print its traceback")
    args = ap.parse_args()
    if args.replay is not None:
        return replay(args.replay, args.seed)
    r = fuzz(args.cases, seed=args.seed, jobs=args.jobs, mem_cap_mib=args.mem_cap_mib, deadline=args.deadline,
             progress=True)
    print(table(r))
    for i, outcome, detail in r["samples"][:20]:
        print(f"case {i}: {outcome}: {detail}   (replay: --replay {i} --seed {args.seed})")
    c = r["counts"]
    return 1 if c["other exception"] or c["memory error"] or c["over 1 s"] else 0


if __name__ == "__main__":
    sys.exit(main())
