# Copyright: (c) 2026, llmfleet.specdec contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# Controller-side steps for the A/B's screen: which candidates deserve a production restart. Called through filter
# llmfleet.specdec.internal by roles/spec_ab/tasks/screen.yml.
"""- ``serving_unit | llmfleet.specdec.internal('screen_binary')``: the llama-server binary production's unit runs
  (directly or through the collection's launcher), for the drafter's side server; None when the screen cannot say
  (a container, vLLM).
- ``configs | llmfleet.specdec.internal('screen_candidates', baseline, preflight_results)``: the configs spec_screen
  takes, each at its own depth, with the preflight's KV fit.
- ``screen | llmfleet.specdec.internal('screen_select', configs, baseline, min_speedup, rounds)``: which configs the
  rounds measure and which are SCREENED OUT, with the restarts that saves.

Why choosing the family this way keeps the confirmatory error rate: the screen reads production alone, never a
candidate's measured rate, so which candidates enter the family is decided before, and independently of, the
measurements the verdicts rest on; the rounds then control the family-wise false WIN over the candidates that
enter (Dunnett over those), as for any family fixed in advance (docs/statistics.md).
"""
from __future__ import annotations

from typing import Any

from ansible.errors import AnsibleFilterError

_DEPTH_VARS = ("LLAMA_ARG_SPEC_DRAFT_N_MAX",)


def screen_binary(unit: Any) -> str | None:
    if not isinstance(unit, dict) or unit.get("engine") not in (None, "llamacpp"):
        return None
    argv = [str(w) for w in unit.get("argv") or []]
    if unit.get("kind") == "launcher" and unit.get("launcher") in argv:
        at = argv.index(unit["launcher"]) + 1
    elif unit.get("kind") == "direct" and isinstance(unit.get("server_at"), int):
        at = unit["server_at"]
    else:
        return None
    return argv[at] if 0 <= at < len(argv) else None


def screen_candidates(configs: Any, baseline: str, preflight: Any = None) -> list[dict[str, Any]]:
    """Each candidate as spec_screen takes it; with the preflight's results, its KV fit beside production
    (``fits``: a drafter kv_budget says does not fit is never started as a side server)."""
    if not isinstance(configs, list):
        raise AnsibleFilterError("screen_candidates: give the run's configs (a list)")
    fits = {r.get("name"): r.get("fits") for r in preflight or [] if isinstance(r, dict)}
    out = []
    for config in configs:
        if config.get("name") == baseline:
            continue
        item = {"name": config["name"], "env": dict(config.get("env") or {}), "flags": list(config.get("flags") or [])}
        depth = next((item["env"][v] for v in _DEPTH_VARS if item["env"].get(v) not in (None, "")), None)
        if depth is not None:
            item["ks"] = [int(depth)]
        if fits.get(config["name"]) is False:
            item["fits"] = False
        out.append(item)
    return out


def screen_select(screen: Any, configs: Any, baseline: str, min_speedup: float, rounds: int) -> dict[str, Any]:
    """Keep the baseline, every candidate the screen could not judge, and every screenable one whose predicted upper
    bound reaches ``min_speedup`` against production; of a sweep (configs of one ``base``), the best predicted and
    those whose interval overlaps it. The rest is SCREENED OUT, with its prediction."""
    if not isinstance(screen, dict) or not isinstance(configs, list):
        raise AnsibleFilterError("screen_select: give spec_screen's screen and the run's configs")
    rate = float((screen.get("production") or {}).get("tok_s") or 0.0)
    found = screen.get("candidates") or {}
    predicted: dict[str, dict[str, Any]] = {}
    for config in configs:
        row = found.get(config.get("name"))
        if row and row.get("screenable") and row.get("k") and rate > 0:
            best = row["k"][str(row["best_k"])]
            predicted[config["name"]] = {"k": row["best_k"], "predicted_tok_s": best["predicted_tok_s"],
                                         "low": best["low"], "high": best["high"],
                                         "speedup": best["predicted_tok_s"] / rate, "speedup_high": best["high"] / rate,
                                         "mean_accepted_len": best["mean_accepted_len"]}
    out: dict[str, Any] = {"keep": [], "screened_out": [], "unscreened": [], "production_tok_s": rate}
    by_base: dict[str, list[str]] = {}
    for config in configs:
        if config.get("name") in predicted:
            by_base.setdefault(str(config.get("base") or config["name"]), []).append(config["name"])
    for config in configs:
        name = config.get("name")
        if name == baseline:
            out["keep"].append(name)
            continue
        if name not in predicted:
            out["keep"].append(name)
            row = found.get(name) or {}
            out["unscreened"].append({"name": name, "why": row.get("why") or "not screened"})
            continue
        p = predicted[name]
        why = None
        if p["speedup_high"] < float(min_speedup):
            why = (f"predicted {p['speedup']:.2f}x [{p['low'] / rate:.2f}, {p['speedup_high']:.2f}] of production at "
                   f"K={p['k']}: its upper bound is below spec_ab_min_speedup {float(min_speedup):.2f}x")
        else:
            family = by_base.get(str(config.get("base") or name), [name])
            top = max(family, key=lambda n: predicted[n]["predicted_tok_s"])
            if name != top and p["high"] < predicted[top]["low"]:
                why = (f"predicted {p['speedup']:.2f}x at K={p['k']}, below {top} ({predicted[top]['speedup']:.2f}x) "
                       "with no overlap: the sweep is confirmed at its best depth")
        if why:
            out["screened_out"].append(dict(p, name=name, why=why))
        else:
            out["keep"].append(name)
    out["restarts_saved"] = len(out["screened_out"]) * int(rounds)
    return out
