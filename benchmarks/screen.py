"""The screen against the full sweep, side by side on the real llama-server: what spec_screen predicts from
production alone (no restart) and what a server with each config loaded really does.

Two beds: the tiny models (tests/testbed/models.py: target.gguf, draft.gguf; ngram-mod on the echo shape) and the
win bed (the memory-bound 413 MB target-win.gguf and its one-layer prefix draft-win.gguf, 2 threads). Per candidate
and K, one row: the screen's mean accepted length and the server's own (/metrics: 1 + accepted / drafts) with their
ratio, the screen's predicted decode tok/s and the measured one with their ratio; then per bed whether the screen's
pick (the best predicted K) equals the full sweep's winner (the best measured), and the production restarts each
plan costs: the screen 0, its confirming A/B (baseline + the pick, 3 rounds) against the full sweep's (baseline +
every K, 3 rounds). Goals: accepted length within 10 %, predicted tok/s within 25 %, the same winner, at most a third
of the sweep's restarts. The screen times the verification as real rounds on a copy of the target where one fits
(spec_screen's verify_copy=auto, as the A/B runs it); each bed's summary says whether it did.

On working hosts too (``--setting``, issue 45): ``quiet`` (nothing beside), ``cpu-hog`` (one CPU-bound process at
normal priority, nice 0, for the screen's duration, stopped after), ``load`` (production answers a steady load
generator during the screen: bounded requests, one at a time, to 127.0.0.1 only, bounded in count and time),
``one-core`` (the servers, the screen and the sweep on CPU 0, as ``taskset -c 0`` pins them: a slower host), ``all``
(each in turn, the default). Each row then says whether its prediction was marked unreliable, its optimistic bound,
what the role's own ``screen_select`` does with it (kept, kept as unreliable, SCREENED OUT; each K a config of one
sweep, as the A/B screens a sweep) and "measured winner sent to the rounds": yes when the config the sweep measured
fastest (the baseline unless a K measured at least spec_ab_min_speedup over production) is not SCREENED OUT. It
must read yes in every row; nothing here is timed against a limit. "by the bound alone" is the same with every
unreliable mark taken off (the optimistic bound decides alone: a NO there is a winner only the marks kept). Each
bed's summary gives the host load the screen recorded. The raw screens and measurements go to
.build/benchmark-screen-<setting>.json.

Run: make benchmark-screen (PYTHONPATH=tests:.build/collections .venv/bin/python benchmarks/screen.py [--setting S])
"""
from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Iterator, Mapping
from urllib.parse import urlsplit

from ansible_collections.llmfleet.specdec.plugins.module_utils.bench._endpoint import Endpoint, plan_requests
from ansible_collections.llmfleet.specdec.plugins.module_utils.screen import _screen
from ansible_collections.llmfleet.specdec.plugins.plugin_utils.steps import _steps_screen
from testbed.server import LlamaServer, find_llama_server

CACHE = Path(os.environ.get("LLMFLEET_CACHE") or Path.home() / ".cache" / "llmfleet-specdec")
ROUNDS = 3
SETTINGS = ("quiet", "cpu-hog", "load", "one-core")
MIN_SPEEDUP = 1.2  # spec_ab_min_speedup's default (roles/spec_ab/defaults/main.yml)
# the hog and the load generator end by themselves after this long even if this script dies first
AT_MOST_S = 1800.0
LOAD_MAX_REQUESTS = 3000
LOAD_INTERVAL_S = 0.25  # a request, then this pause, then the next: one client, steady
LOAD_PROMPTS = ["Users ask: what is the capital of France, and why?", "Write a haiku about rivers and stones.",
                "List three prime numbers above 100 and one below 10.", "Summarise: the cat sat on the mat all day."]
NGRAM = ["--spec-ngram-mod-n-match", "8", "--spec-ngram-mod-n-min", "2", "--spec-ngram-mod-n-max", "16"]
BEDS = [
    {"bed": "tiny", "target": CACHE / "demo-models" / "target.gguf", "threads": "1",
     "sizes": {"prose": {"chars": 400, "n_predict": 64}, "echo": {"chars": 600, "n_predict": 96}},
     "shapes": ["prose", "echo"],
     "candidates": [
         {"name": "draft", "env": {"LLAMA_ARG_SPEC_TYPE": "draft-simple",
                                   "LLAMA_ARG_SPEC_DRAFT_MODEL": str(CACHE / "demo-models" / "draft.gguf")},
          "ks": [1, 2, 3, 4, 6, 8]},
         {"name": "ngram-mod", "env": {"LLAMA_ARG_SPEC_TYPE": "ngram-mod"}, "flags": NGRAM, "shapes": ["echo"]}]},
    {"bed": "win", "target": CACHE / "win-models" / "target-win.gguf", "threads": "2",
     "sizes": {"prose": {"chars": 400, "n_predict": 64}, "structured": {"chars": 300, "n_predict": 64}},
     "shapes": ["prose", "structured"],
     "candidates": [
         {"name": "draft", "env": {"LLAMA_ARG_SPEC_TYPE": "draft-simple",
                                   "LLAMA_ARG_SPEC_DRAFT_MODEL": str(CACHE / "win-models" / "draft-win.gguf")},
          "ks": [1, 2, 4, 8]}]},
]


def served(target: Path, threads: str, args: list[str], conts: list[dict]) -> dict[str, float]:
    """A server with the config loaded, sent the same prompt tokens: its counters and its decode rate."""
    with LlamaServer(target, args=["-t", threads, "--metrics", *args], log_dir=tempfile.mkdtemp()) as server:
        client = Endpoint(server.url, timeout=600)
        # one request first, not counted, as the A/B warms every start up (warmup: 1): the first request of a fresh
        # server pays one-time costs (its buffers, the draft context's first graphs) that production, screened while
        # warm, does not show. Its text shares nothing with the measured prompts (ngram-mod keeps its table).
        client._json("POST", "/completion", {"prompt": "Warm-up: 7 9 13 quartz vexing jumbo.", "n_predict": 8,
                                             "temperature": 0.0, "cache_prompt": False})
        before = client.spec_counters()
        rates = []
        for cont in conts:
            reply = client._json("POST", "/completion", {"prompt": cont["prompt"], "n_predict": cont["budget"],
                                                         "temperature": 0.0, "cache_prompt": False})
            rates.append(float(reply["timings"]["predicted_per_second"]))
        after = client.spec_counters()
    drafts = after["drafts"] - before["drafts"]
    return {"len": 1.0 + (after["accepted_tokens"] - before["accepted_tokens"]) / drafts if drafts else 1.0,
            "tok_s": statistics.median(rates)}


def args_of(candidate: dict, k: int) -> list[str]:
    env = candidate["env"]
    if env["LLAMA_ARG_SPEC_TYPE"] == "draft-simple":
        return ["-md", env["LLAMA_ARG_SPEC_DRAFT_MODEL"], "--spec-type", "draft-simple", "--spec-draft-n-max", str(k)]
    flags = list(candidate.get("flags") or [])
    flags[flags.index("--spec-ngram-mod-n-max") + 1] = str(k)
    return ["--spec-type", "ngram-mod", *flags]


def _hog(until: float) -> None:
    """One CPU-bound process at normal priority: a busy loop, ended by its parent or at ``until``."""
    with contextlib.suppress(OSError):  # nice 0, normal priority, even if this script was started niced
        os.setpriority(os.PRIO_PROCESS, 0, 0)
    x = 0
    while time.time() < until:
        for _step in range(100000):
            x = (x * 31 + 7) % 1000003


def _load(url: str, until: float, max_requests: int, interval: float) -> None:
    """A steady load generator: one client sending short greedy completions to production, one at a time with a
    pause between, at most ``max_requests`` and never past ``until``."""
    client = Endpoint(url, timeout=60)
    for i in range(max_requests):
        if time.time() >= until:
            return
        try:
            client._json("POST", "/completion", {"prompt": LOAD_PROMPTS[i % len(LOAD_PROMPTS)], "n_predict": 16,
                                                 "temperature": 0.0, "cache_prompt": False})
        except Exception:  # production busy or gone: the generator keeps its pace, the screen says what it saw
            pass
        time.sleep(interval)


@contextlib.contextmanager
def beside(setting: str, url: str) -> Iterator[None]:
    """What runs beside the screen in ``setting`` (cpu-hog: the hog; load: the load generator), started before
    it and stopped after it."""
    fork = multiprocessing.get_context("fork")
    proc = None
    if setting == "cpu-hog":
        proc = fork.Process(target=_hog, args=(time.time() + AT_MOST_S,), daemon=True)
    elif setting == "load":
        if urlsplit(url).hostname != "127.0.0.1":
            raise SystemExit(f"the load generator sends to 127.0.0.1 only, not {url}")
        proc = fork.Process(target=_load, args=(url, time.time() + AT_MOST_S, LOAD_MAX_REQUESTS, LOAD_INTERVAL_S),
                            daemon=True)
    if proc is not None:
        proc.start()
        time.sleep(1.0)  # the hog spinning, the generator's first request sent, before the screen's first timing
    try:
        yield
    finally:
        if proc is not None:
            proc.terminate()
            proc.join(10)


@contextlib.contextmanager
def pinned(setting: str) -> Iterator[None]:
    """one-core: this process and every server and side server it starts on CPU 0 (what ``taskset -c 0`` does)."""
    if setting != "one-core":
        yield
        return
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {0})
    try:
        yield
    finally:
        os.sched_setaffinity(0, before)


def sweep_selection(screen: Mapping[str, Any], name: str, min_speedup: float = MIN_SPEEDUP,
                    marks: bool = True) -> dict[str, Any]:
    """What the role's screen_select does with candidate ``name``'s depths: each K a config of one sweep (base
    ``name``, as spec_ab expands a sweep; screen_candidates screens each at its own depth), beside the baseline.
    ``marks=False``: with every unreliable mark taken off, the bound alone decides (what the marks protect)."""
    got = screen["candidates"][name]
    configs = [{"name": "baseline"}, *({"name": f"{name}@k={k}", "base": name} for k in got["k"])]
    per_k = {f"{name}@k={k}": {"screenable": True, "k": {k: row if marks else {**row, "unreliable": False,
                                                                               "unreliable_why": None}},
                               "best_k": int(k)} for k, row in got["k"].items()}
    return _steps_screen.screen_select({"production": screen["production"], "candidates": per_k}, configs,
                                       "baseline", min_speedup, ROUNDS)


def decisions(selection: Mapping[str, Any], name: str) -> dict[int, str]:
    """Per K: kept, kept as unreliable, or SCREENED OUT, from screen_select's result."""
    out = {}
    unreliable = {u["name"] for u in selection.get("unreliable") or []}
    for cfg in selection["keep"]:
        if cfg.startswith(f"{name}@k="):
            out[int(cfg.split("=", 1)[1])] = "kept (unreliable)" if cfg in unreliable else "kept"
    for cfg in selection["screened_out"]:
        out[int(cfg["name"].split("=", 1)[1])] = "SCREENED OUT"
    return out


def measured_winner(measured: Mapping[int, float], base: float, min_speedup: float = MIN_SPEEDUP) -> int | None:
    """The config the sweep measured fastest: the fastest K where it measured at least ``min_speedup`` over
    production (what the rounds would promote), else the baseline (None)."""
    best = max(measured, key=measured.get) if measured else None
    return best if best is not None and base > 0 and measured[best] >= min_speedup * base else None


def winner_sent(measured: Mapping[int, float], base: float, decided: Mapping[int, str],
                min_speedup: float = MIN_SPEEDUP) -> str:
    """"measured winner sent to the rounds": yes unless the measured winner's K was SCREENED OUT (the baseline is
    never screened out); a K the screen did not decide on counts as not sent."""
    win = measured_winner(measured, base, min_speedup)
    if win is None:
        return "yes (baseline)"
    state = decided.get(win)
    return f"yes (K={win})" if state is not None and state != "SCREENED OUT" else f"NO (K={win} {state or 'missing'})"


def load_line(screen: Mapping[str, Any], name: str) -> str:
    """The host load the screen recorded: others' CPU per phase and the load average, production's and the
    drafter's."""
    own = screen["candidates"][name].get("load")
    readings = [*(screen["production"].get("load") or []), *([own] if own else [])]
    phases: dict[str, list[float]] = {}
    loadavg = []
    for r in readings:
        if r.get("other_cores") is not None:
            phases.setdefault(str(r["phase"]), []).append(float(r["other_cores"]))
        loadavg += [float(v) for v in (r.get("loadavg_before"), r.get("loadavg_after")) if v is not None]
    parts = [f"{p} {min(v):.2f}" + (f"-{max(v):.2f}" if max(v) > min(v) else "") for p, v in phases.items()]
    avg = f"; load average {min(loadavg):.2f}-{max(loadavg):.2f}" if loadavg else ""
    busy = sum(1 for r in readings if r.get("busy"))
    return (f"other processes' cores: {', '.join(parts) or 'not measured'}{avg}; {busy} of {len(readings)} phases "
            f"busy; {len(screen['production'].get('unreliable') or [])} reasons on production's timings")


def run_setting(setting: str, binary: str) -> tuple[list[tuple[str, ...]], list[str], list[dict[str, Any]]]:
    """Every bed in ``setting``: the table's rows, the summary lines and the raw record."""
    rows = [("bed", "candidate", "K", "len screen", "len server", "ratio", "tok/s predicted", "[low, high]",
             "tok/s measured", "ratio", "unreliable", "bound", "screen", "measured winner sent to the rounds",
             "by the bound alone")]
    summary, record = [], []
    for bed in BEDS:
        for cand in bed["candidates"]:
            shapes = cand.get("shapes", bed["shapes"])
            spec = {k: v for k, v in cand.items() if k != "shapes"}
            started = time.monotonic()
            with LlamaServer(bed["target"], args=["-t", bed["threads"], "--metrics"],
                             log_dir=tempfile.mkdtemp()) as prod:
                with beside(setting, prod.url):
                    screen = _screen.run_screen(prod.url, [spec], llama_server=binary, drafter_launch="process",
                                                shapes=shapes, sizes=bed["sizes"])
                _w, schedule, _d = plan_requests(seed=0, sizes=bed["sizes"], shapes=shapes, prompts_per_shape=2,
                                                 repeats=1, warmup=0)
                conts = _screen.production_continuations(
                    Endpoint(prod.url, timeout=600),
                    [{"shape": p.shape, "text": p.prompt, "n_predict": p.n_predict} for _r, p in schedule],
                )["continuations"]
            base = served(bed["target"], bed["threads"], [], conts)
            got = screen["candidates"][cand["name"]]
            measured, lines = {}, []
            for k in sorted(int(x) for x in got["k"]):
                real = served(bed["target"], bed["threads"], args_of(cand, k), conts)
                pred = got["k"][str(k)]
                measured[k] = real["tok_s"]
                lines.append([bed["bed"], cand["name"], str(k), f"{pred['mean_accepted_len']:.2f}",
                              f"{real['len']:.2f}", f"{pred['mean_accepted_len'] / real['len']:.2f}",
                              f"{pred['predicted_tok_s']:.1f}", f"[{pred['low']:.1f}, {pred['high']:.1f}]",
                              f"{real['tok_s']:.1f}", f"{pred['predicted_tok_s'] / real['tok_s']:.2f}",
                              "yes" if pred.get("unreliable") else "no",
                              f"{pred['bound_speedup']:.2f}x" if pred.get("bound_speedup") else "-"])
                print(setting, "  ".join(lines[-1]), flush=True)  # as it goes; the aligned table comes at the end
            selection = sweep_selection(screen, cand["name"])
            decided = decisions(selection, cand["name"])
            sent = winner_sent(measured, base["tok_s"], decided)
            strict = winner_sent(measured, base["tok_s"], decisions(sweep_selection(screen, cand["name"], marks=False),
                                                                    cand["name"]))
            rows += [(*line, decided.get(int(line[2]), "-"), sent, strict) for line in lines]
            pick, winner = got["best_k"], max(measured, key=measured.get)
            copy = screen["production"].get("verify_copy") or {}
            timed = (f"the copy {copy['per_round_ms']:.3f} ms a round + {copy['per_row_ms']:.3f} ms a row"
                     if copy.get("used") else f"batches on production ({copy.get('why')})")
            reasons = [u["why"] for u in selection.get("unreliable") or []]
            summary.append(f"{bed['bed']}/{cand['name']} on {', '.join(shapes)}: production {base['tok_s']:.1f} "
                           f"tok/s (the screen read {screen['production']['tok_s']:.1f}); the screen picks K={pick}, "
                           f"the sweep's fastest is K={winner} {measured[winner] / base['tok_s']:.2f}x "
                           f"({'same' if pick == winner else 'DIFFERENT'}); the screen took {screen['elapsed_s']:.0f} s "
                           f"(the bed {time.monotonic() - started:.0f} s); verification timed as {timed}")
            summary.append(f"  host load: {load_line(screen, cand['name'])}")
            if reasons:
                summary.append(f"  unreliable because: {reasons[0][:300]}")
            record.append({"bed": bed["bed"], "candidate": cand["name"], "screen": screen, "measured": measured,
                           "production_tok_s": base["tok_s"], "selection": selection, "sent": sent,
                           "sent_by_the_bound_alone": strict})
    return rows, summary, record


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--setting", choices=[*SETTINGS, "all"], default="all")
    args = parser.parse_args(argv)
    binary = find_llama_server()
    failed = []
    for setting in SETTINGS if args.setting == "all" else [args.setting]:
        print(f"== setting {setting}: {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}, "
              f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f}", flush=True)
        with pinned(setting):
            rows, summary, record = run_setting(setting, binary)
        out = Path(".build") / f"benchmark-screen-{setting}.json"
        out.parent.mkdir(exist_ok=True)
        out.write_text(json.dumps(record, indent=1, default=str))
        widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
        print(f"== setting {setting}")
        for row in rows:
            print("  ".join(cell.rjust(w) for cell, w in zip(row, widths)))
        print()
        print("\n".join(summary))
        print(flush=True)
        failed += [f"{setting} {r['bed']}/{r['candidate']}: {r['sent']}" for r in record if r["sent"].startswith("NO")]
    # not a timed assert: a measured winner SCREENED OUT is a bug in the screen whatever the host did
    for line in failed:
        print(f"a measured winner was SCREENED OUT: {line}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
