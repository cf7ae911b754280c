"""Where the screen's tiny-bed error lives: a real speculative round against the parts the screen times.

spec_screen predicts a round (the target's verification of a draft of d tokens, plus the drafter's work) from
what it can time with requests: a batch of d + 1 tokens prefilled on a cached prefix (``measure_batches``: one
output row, one sample). This runs the tiny bed's target with each config loaded and, on that same server, both:

- the real round: per request, from the server's own timings and counters, ``(predicted_ms - plain * t_s) /
  drafts``, where ``plain`` are the tokens generated without a draft (each at production's step ``t_s``),
  ``drafts`` the verification rounds and ``draft_tokens / drafts`` the mean draft length d;
- the screen's part: that server's batch timing interpolated at d + 1 (``_screen._interp``).

n-gram proposers have no drafter, so for them the ratio is the verification's own cost against the screen's
timing of it. A table, medians over the requests; no assert (docs/benchmarks.md says what it showed).

Run: make benchmark-screen-round (PYTHONPATH=tests:.build/collections .venv/bin/python benchmarks/screen_round.py)
"""
from __future__ import annotations

import os
import statistics
import sys
import tempfile
from pathlib import Path

from ansible_collections.llmfleet.specdec.plugins.module_utils.bench._endpoint import Endpoint, measure_batches, plan_requests
from ansible_collections.llmfleet.specdec.plugins.module_utils.screen import _screen
from testbed.server import LlamaServer

CACHE = Path(os.environ.get("LLMFLEET_CACHE") or Path.home() / ".cache" / "llmfleet-specdec")
TARGET = CACHE / "demo-models" / "target.gguf"
DRAFT = CACHE / "demo-models" / "draft.gguf"
NGRAM = ["--spec-type", "ngram-mod", "--spec-ngram-mod-n-match", "8", "--spec-ngram-mod-n-min", "2",
         "--spec-ngram-mod-n-max"]
CONFIGS = [("ngram-mod", "echo", 4, [*NGRAM, "4"]), ("ngram-mod", "echo", 8, [*NGRAM, "8"]),
           ("ngram-mod", "echo", 16, [*NGRAM, "16"]),
           ("draft", "prose", 2, ["-md", str(DRAFT), "--spec-type", "draft-simple", "--spec-draft-n-max", "2"]),
           ("draft", "prose", 4, ["-md", str(DRAFT), "--spec-type", "draft-simple", "--spec-draft-n-max", "4"])]
SIZES = {"echo": {"chars": 600, "n_predict": 96}, "prose": {"chars": 400, "n_predict": 64}}
REPEATS = 5


def prompts(shape: str) -> list[tuple[str, int]]:
    _w, schedule, _d = plan_requests(seed=0, sizes=SIZES, shapes=[shape], prompts_per_shape=4, repeats=1, warmup=0)
    return [(p.prompt, p.n_predict) for _r, p in schedule]


def served(args: list[str], shape: str) -> tuple[list[tuple], dict[int, float]]:
    """Per request (predicted_n, predicted_ms, drafts, draft_tokens, accepted), and the server's batch timings."""
    with LlamaServer(TARGET, args=["-t", "1", "--metrics", *args], log_dir=tempfile.mkdtemp()) as server:
        client = Endpoint(server.url, timeout=600)
        client._json("POST", "/completion", {"prompt": "Warm-up: 7 9 13 quartz vexing jumbo.", "n_predict": 8,
                                             "temperature": 0.0, "cache_prompt": False})
        rows = []
        for text, n_predict in prompts(shape) * REPEATS:
            before = client.spec_counters()
            reply = client._json("POST", "/completion", {"prompt": text, "n_predict": n_predict,
                                                         "temperature": 0.0, "cache_prompt": False})
            after = client.spec_counters()
            t = reply["timings"]
            counted = [after[k] - before[k] for k in ("drafts", "draft_tokens", "accepted_tokens")]
            rows.append((t["predicted_n"], t["predicted_ms"], *counted))
        batches = measure_batches(client, [2, 3, 5, 9, 13, 17])["batches"]
    return rows, {int(b): ms for b, ms in batches.items()}


def main() -> int:
    table = [("config", "K", "shape", "draft len", "tokens/round", "round ms (server)", "batch ms (screen)",
              "ratio", "t_s ms")]
    for name, shape, k, args in CONFIGS:
        base, _dummy = served([], shape)
        t_s = statistics.median(ms / n for n, ms, *_rest in base if n)
        rows, batches = served(args, shape)
        rounds, lens, gains, parts = [], [], [], []
        for n, ms, drafts, draft_tokens, accepted in rows:
            if not drafts:
                continue
            plain = max(n - (accepted + drafts), 0)
            rounds.append((ms - plain * t_s) / drafts)
            lens.append(draft_tokens / drafts)
            gains.append((accepted + drafts) / drafts)
            parts.append(_screen._interp(batches, draft_tokens / drafts + 1) or 0.0)
        if not rounds:
            table.append((name, str(k), shape, "-", "-", "no draft", "-", "-", f"{t_s:.3f}"))
            continue
        real, part = statistics.median(rounds), statistics.median(parts)
        table.append((name, str(k), shape, f"{statistics.median(lens):.2f}", f"{statistics.median(gains):.2f}",
                      f"{real:.3f}", f"{part:.3f}", f"{real / part:.2f}" if part else "-", f"{t_s:.3f}"))
    widths = [max(len(row[i]) for row in table) for i in range(len(table[0]))]
    for row in table:
        print("  ".join(cell.rjust(width) for cell, width in zip(row, widths)))
    print("ratio: the real round over the screen's timing of its verification batch (for a draft model the round "
          "also holds the drafter's work, which the screen times on its side server)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
