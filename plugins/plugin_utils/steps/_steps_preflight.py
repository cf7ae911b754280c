# Copyright: (c) 2026, llmfleet.specdec contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# Controller-side steps that fold preflight module results into one verdict per config and a table.
# Not filters of their own: roles and playbooks call them through filter llmfleet.specdec.internal.
from __future__ import annotations

import base64
import json
from typing import Any

from ansible.errors import AnsibleFilterError

from ansible_collections.llmfleet.specdec.plugins.module_utils.bench import _quality
from ansible_collections.llmfleet.specdec.plugins.module_utils.systemd._render import changes_production

# llama.cpp's context-backed drafters; an ngram layer costs ~nothing per round
_CONTEXT_BACKED = ("draft-dspark", "draft-dflash", "draft-eagle3", "draft-mtp", "draft-simple")


def costliest_drafter(chain: list[str] | None) -> str | None:
    """The implementation of a chain that decides its cost per round: the drafter, else the first ngram."""
    chain = list(chain or [])
    for kind in _CONTEXT_BACKED:
        if kind in chain:
            return kind
    return chain[0] if chain else None


def _first(findings: list[dict[str, Any]] | None) -> str:
    findings = findings or []
    if not findings:
        return ""
    f = findings[0]
    more = f" (+{len(findings) - 1})" if len(findings) > 1 else ""
    return f"{f.get('code', '?')}{more}"


def _mib(n: int | None) -> str:
    return "?" if n is None else f"{n / 1048576:.1f} MiB"


def _worth(result: dict[str, Any] | None) -> tuple[str, dict[str, Any] | None]:
    if not result or result.get("skipped"):
        return "-", None
    if result.get("failed"):
        return "error: " + str(result.get("msg", ""))[:60], None
    b = result.get("breakeven") or {}
    rows = b.get("breakeven") or []
    band = (b.get("realistic") or {}).get("verdict")
    if not rows:
        return band or "?", b
    item = result.get("item")
    lint = item[1] if isinstance(item, (list, tuple)) and len(item) > 1 and isinstance(item[1], dict) else {}
    k = str((lint.get("config") or {}).get("draft_n_max") or 3)
    row = next((r for r in rows if str(r.get("k")) == k), rows[0])  # the config's own depth (K = 1, 3, 7 beside it)
    p = row.get("breakeven_p")
    return f"{band or '?'} (break-even p {'none' if p is None else f'{p:.2f}'} at K={row.get('k')})", b


def _judging(config: dict[str, Any], rendered: dict[str, Any] | None, reference_env: dict[str, Any] | None,
             baseline: str | None) -> tuple[str, str | None]:
    """How the A/B will judge the config against the baseline (module_utils/bench/_quality.py), as a table cell;
    or why it is refused. Without a baseline config, production's env is the reference."""
    name = config.get("name")
    if not rendered or name not in rendered or reference_env is None:
        return "-", None
    refused = rendered[name].get("refused") or []
    if refused:
        return "-", "; ".join(r["message"] for r in refused)
    if name == baseline or not changes_production(rendered[name]):
        return "baseline", None
    if rendered[name].get("form") == "exec" and baseline in rendered:
        # the command line is the config: compare every option, wherever production sets it
        reference_env = rendered[baseline].get("effective_env") or reference_env
    try:
        c = _quality.classify(rendered[name].get("effective_env") or rendered[name].get("env") or {}, reference_env,
                              str(name), config.get("lossless"))
    except _quality.QualityError as exc:
        return "-", str(exc)
    if c["judging"] == _quality.LOSSY:
        kinds = sorted({n["kind"] for n in c["numerics"]}) or ["declared"]
        return f"lossy by design ({', '.join(kinds)})", None
    return "lossless" + (" (declared)" if c["source"].startswith("declared") else ""), None


def preflight_results(configs: list[dict[str, Any]], lint: list[dict[str, Any]], kv: list[dict[str, Any]],
                      worth: list[dict[str, Any]], rendered: dict[str, Any] | None = None,
                      reference_env: dict[str, Any] | None = None, baseline: str | None = None) -> list[dict[str, Any]]:
    """One verdict dict per config from the registered loop results of the preflight role; with the
    renderings and the reference env (the baseline's, else production's): how the A/B will judge it."""
    by_name = {}
    for r in worth or []:
        item = r.get("item")
        if isinstance(item, (list, tuple)) and item:
            by_name[item[0].get("name")] = r
    out = []
    for config, lint_r, kv_r in zip(configs, lint, kv):
        name = config.get("name")
        judged, refused = _judging(config, rendered, reference_env, baseline)
        if refused:
            out.append({"name": name, "legal": False, "error": refused, "silent_off": [], "fits": None,
                        "errors": [{"code": "judging", "reason": refused}],
                        "worth": "-", "effective_chain": [], "judged_as": "-", "memory": "-"})
            continue
        # a config spec_lint could not read (a draft that is not there, a file that is no GGUF): refused with
        # its reason, never started; the role's lint loop keeps going past it (failed_when: false)
        if lint_r.get("failed") or ("ok" not in lint_r and lint_r.get("msg")):
            out.append({"name": name, "legal": False, "error": lint_r.get("msg"), "silent_off": [], "fits": None,
                        "errors": [{"code": "unreadable", "reason": lint_r.get("msg")}],
                        "worth": "-", "effective_chain": [], "judged_as": "-", "memory": "-"})
            continue
        budget = kv_r.get("kv_budget") if not kv_r.get("failed") else None
        worth_text, worth_data = _worth(by_name.get(name))
        out.append({
            "name": name,
            "legal": bool(lint_r.get("ok")),
            "errors": lint_r.get("errors") or [],
            "silent_off": lint_r.get("silent_off") or [],
            "warnings": lint_r.get("lint_warnings") or [],
            "effective_chain": lint_r.get("effective_chain") or [],
            "fits": None if budget is None else budget.get("fits"),
            "kv_bytes": None if budget is None else sum(
                (budget.get(m) or {}).get("total_bytes") or 0 for m in ("target", "draft")),
            "kv_summary": [] if budget is None else budget.get("summary") or [],
            "kv_fixes": [] if budget is None else budget.get("fixes") or [],
            "kv_error": kv_r.get("msg") if kv_r.get("failed") else None,
            "worth": worth_text,
            "breakeven": worth_data,
            "judged_as": judged,
            "memory": "-" if judged == "baseline" else ((budget or {}).get("against_baseline") or {}).get("summary") or "-",
            "against_baseline": (budget or {}).get("against_baseline"),
        })
    return out


def preflight_table(results: list[dict[str, Any]]) -> list[str]:
    """Readable lines: config | legal? | silently off? | fits? | worth it? | chain."""
    lines = ["config | legal? | silently off? | fits? (KV) | worth it? | chain that runs | judged as | memory vs baseline"]
    for r in results:
        if r.get("error"):
            lines.append(f"{r['name']} | ERROR: {r['error']} | - | - | - | - | - | -")
            continue
        legal = "yes" if r["legal"] else "NO: " + _first(r.get("errors"))
        off = "no" if not r["silent_off"] else "YES: " + _first(r["silent_off"])
        fits = {True: "yes", False: "NO", None: "?"}[r["fits"]] + f" ({_mib(r.get('kv_bytes'))})"
        if r.get("kv_error"):
            fits = "? (" + str(r["kv_error"])[:50] + ")"
        chain = ",".join(r["effective_chain"]) or "none"
        lines.append(f"{r['name']} | {legal} | {off} | {fits} | {r['worth'] if r['legal'] else '-'} | {chain} | "
                     f"{r.get('judged_as', '-')} | {r.get('memory', '-')}")
    for r in results:
        if r.get("error"):  # its row says it all
            continue
        for kind in ("errors", "silent_off"):
            for f in r.get(kind) or []:
                lines.append(f"  {r['name']}: {f.get('code')}: {f.get('reason')} -> {f.get('fix')}")
    return lines


def build_from_record(content: str | None, path: str = "the build record") -> str:
    """The build (``b<number>``) in a llamacpp_build record as slurp returns it (base64); '' when there is
    no record or it names no build number (a commit-only build)."""
    if not content:
        return ""
    try:
        record = json.loads(base64.b64decode(content))
    except ValueError as exc:
        raise AnsibleFilterError(f"{path} is not JSON ({exc}): rerun the llamacpp_build role on the host, or set "
                                 "specdec_llamacpp_build in inventory") from None
    if not isinstance(record, dict):
        raise AnsibleFilterError(f"{path} is not a JSON object: rerun the llamacpp_build role on the host, or set "
                                 "specdec_llamacpp_build in inventory")
    number = record.get("build_number")
    if number is None:
        return ""
    if isinstance(number, bool) or not str(number).isdigit():
        raise AnsibleFilterError(f"{path}: build_number {number!r} is not a whole number: rerun the llamacpp_build "
                                 "role on the host, or set specdec_llamacpp_build in inventory")
    return f"b{int(number)}"
