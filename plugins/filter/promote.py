# Controller-side filters for promote.yml: a measured winner written into the deployed base env file.
from __future__ import annotations

import re
from typing import Any

from ansible.errors import AnsibleFilterError

BEGIN = "# >>> llmfleet.specdec promotion (managed by playbooks/promote.yml; re-run it to change)"
END = "# <<< llmfleet.specdec promotion"
_ASSIGN = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_]*)=(.*)$")
_UNPROMOTABLE = ("INVALID", "NOT ENGAGED", "FAILED", "INCOMPLETE")


def _fmt(value: Any, pattern: str) -> str:
    return "-" if value is None else pattern.format(value)


def promotion_table(report: dict[str, Any], winner: str) -> list[str]:
    """The measured table as comment lines: winner first, losers marked."""
    verdicts = report.get("verdicts") or []
    lines = [f"# run {report.get('run_id')} on {report.get('host')} ({report.get('finished') or report.get('started')}),"
             f" baseline '{report.get('baseline')}'"]
    lines.append("# config | shape | median tok/s | speedup [95% CI] | verdict | status")
    order = [winner, *sorted({v["config"] for v in verdicts} - {winner})]
    for name in order:
        for v in (x for x in verdicts if x["config"] == name):
            lines.append("# {} | {} | {} | {} [{}, {}] | {} | {}".format(
                name, v.get("shape"), _fmt(v.get("median_tok_s"), "{:.1f}"), _fmt(v.get("speedup"), "{:.2f}x"),
                _fmt(v.get("ci_low"), "{:.2f}"), _fmt(v.get("ci_high"), "{:.2f}"), v.get("verdict"), v.get("status")))
    for name in order[1:]:
        if name != report.get("baseline"):
            lines.append(f"# {name}: measured above; do not switch without re-measuring")
    return lines


def promote_env(current: str, report: dict[str, Any], winner: str, force: bool = False) -> str:
    """The base env file's new text: the winner's variables set (null removes one), the rest kept, and one
    promotion block (replacing an earlier one) holding the measured table as the justification."""
    configs = {c.get("name"): c for c in report.get("configs") or []}
    if winner not in configs:
        raise AnsibleFilterError(f"specdec_promote_config: {winner!r} is not a config of run {report.get('run_id')} "
                                 f"(configs: {', '.join(sorted(configs))})")
    statuses = {v.get("status") for v in report.get("verdicts") or [] if v.get("config") == winner}
    bad = sorted(s for s in statuses if s in _UNPROMOTABLE)
    if bad and not force:
        raise AnsibleFilterError(f"specdec_promote_config: {winner!r} was judged {', '.join(bad)} in run "
                                 f"{report.get('run_id')}; it cannot be promoted (set specdec_promote_force=true "
                                 "only after fixing and re-measuring)")
    env = configs[winner].get("server_config") or {}
    for key, value in env.items():
        if value is not None and any(c in str(value) for c in "\n\r\0"):
            raise AnsibleFilterError(f"{key}: the value holds a newline or NUL byte; it cannot go in an env file")
    # drop an earlier promotion block; set or remove the winner's variables in place
    kept: list[str] = []
    inside = False
    for line in current.splitlines():
        if line.startswith(BEGIN):
            inside = True
            continue
        if inside:
            if line.startswith(END):
                inside = False
            continue
        m = _ASSIGN.match(line)
        if m and m.group(1) in env:
            continue
        kept.append(line)
    while kept and not kept[-1].strip():
        kept.pop()
    block = [BEGIN, f"# promoted: {winner}", *promotion_table(report, winner)]
    block += [f"{k}={'1' if v is True else ('0' if v is False else v)}" for k, v in sorted(env.items()) if v is not None]
    block += [f"# removed: {k}" for k, v in sorted(env.items()) if v is None]
    block.append(END)
    return "\n".join([*kept, "", *block]) + "\n"


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"promote_env": promote_env, "promotion_table": promotion_table}
