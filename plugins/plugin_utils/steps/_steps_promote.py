# Copyright: (c) 2026, llmfleet.specdec contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# Controller-side steps for promote.yml and role llamacpp_serve: a measured winner, kept across deploys.
# Not filters of their own: roles and playbooks call them through filter llmfleet.specdec.internal.
"""A promotion is a record on the host (``<env dir>/<unit>.promoted.json``) plus a block in the base env file.

- ``report | llmfleet.specdec.internal('promotion_record', winner, force, promoted_at)``: the record promote.yml writes
  on the host: the winner's variables (``set``), the variables it unsets (``unset``; null in the run's
  ``server_config``), and the measured table as comment lines. The gate: only a config with a WIN on the
  run's confirmatory endpoint is promoted, unless ``force``; the record says which (``forced``, ``verdict``).
- ``current_text | llmfleet.specdec.internal('promote_env', report, winner, force)``: the deployed env file with the
  winner applied (its variables taken out of the body, one promotion block, replacing an earlier one,
  holding the table and the winner's assignments).
- ``base_env | llmfleet.specdec.internal('promoted_env', record)``: for role llamacpp_serve, production's variables
  without those the promotion sets or unsets; ``record | llmfleet.specdec.internal('promotion_block')`` the block
  it writes after them. So a later deploy writes the same promotion again instead of undoing it.

Values go through the collection's env-file rules (``module_utils/systemd/_envfile.py``): the process receives
each value byte for byte, and a value no environment can hold is refused naming the variable.
"""
from __future__ import annotations

from typing import Any

from ansible.errors import AnsibleFilterError

from ansible_collections.llmfleet.specdec.plugins.module_utils.bench import _quality
from ansible_collections.llmfleet.specdec.plugins.module_utils.common._errors import SpecdecError
from ansible_collections.llmfleet.specdec.plugins.module_utils.common._secrets import is_masked
from ansible_collections.llmfleet.specdec.plugins.module_utils.state import _host_state
from ansible_collections.llmfleet.specdec.plugins.module_utils.systemd import _envfile as envfile
from ansible_collections.llmfleet.specdec.plugins.plugin_utils.verdicts import _confirm

SCHEMA = "llmfleet.specdec/promotion/1"
BEGIN = "# >>> llmfleet.specdec promotion (managed by playbooks/promote.yml; re-run it to change)"
END = "# <<< llmfleet.specdec promotion"
_UNPROMOTABLE = ("INVALID", "NOT ENGAGED", "FAILED", "INCOMPLETE")


def _fmt(value: Any, pattern: str) -> str:
    return "-" if value is None else pattern.format(value)


_comment = envfile.comment_line


def promotion_table(report: dict[str, Any], winner: str) -> list[str]:
    """The measured table as comment lines: winner first, losers marked."""
    verdicts = report.get("verdicts") or []
    lines = [_comment(f"run {report.get('run_id')} on {report.get('host')} "
                      f"({report.get('finished') or report.get('started')}), baseline '{report.get('baseline')}'")]
    lines.append("# config | shape | median tok/s | speedup [95% CI] | verdict | status")
    order = [winner, *sorted({v["config"] for v in verdicts} - {winner})]
    for name in order:
        for v in (x for x in verdicts if x["config"] == name):
            lines.append(_comment("{} | {} | {} | {} [{}, {}] | {} | {}".format(
                name, v.get("shape"), _fmt(v.get("median_tok_s"), "{:.1f}"), _fmt(v.get("speedup"), "{:.2f}x"),
                _fmt(v.get("ci_low"), "{:.2f}"), _fmt(v.get("ci_high"), "{:.2f}"), v.get("verdict"), v.get("status"))))
    for name in order[1:]:
        if name != report.get("baseline"):
            lines.append(_comment(f"{name}: measured above; do not switch without re-measuring"))
    return lines


def confirmatory_gate(report: dict[str, Any], config: str) -> dict[str, Any]:
    """The config's verdict on the run's confirmatory endpoint (report.json's ``confirmatory``, contract C3):
    ``win`` is true only for a WIN whose lower bound is above 1 + the run's ``win_margin`` (the default margin for
    a report written before it). A report without that section (written before it existed) has no WIN."""
    conf = report.get("confirmatory")
    out: dict[str, Any] = {"win": False, "verdict": None, "endpoint": None, "ratio": None, "low": None,
                           "high": None}
    if not isinstance(conf, dict):
        out["why"] = "the report has no confirmatory verdict: it was written before this collection judged one"
        return out
    row = (conf.get("verdicts") or {}).get(config)
    out["endpoint"] = conf.get("endpoint")
    if not isinstance(row, dict):
        out["why"] = f"{config!r} is not among its candidates (the baseline, or a drafter probe)"
        return out
    declared = conf.get("declared")
    if not isinstance(declared, bool):  # a report written before the flag: the built-in mix said so in words
        declared = not str(conf.get("weights_from") or "").startswith(("equal weights", "the built-in mix"))
    out.update(declared=declared, weights=conf.get("weights") or {}, weights_from=conf.get("weights_from"))
    margin = conf.get("win_margin")
    margin = margin if isinstance(margin, (int, float)) and not isinstance(margin, bool) else _confirm.WIN_MARGIN
    out.update(verdict=row.get("verdict"), ratio=row.get("ratio"), low=row.get("low"), high=row.get("high"),
               win=_confirm.practical(row, margin), win_margin=margin)
    out["why"] = f"its verdict is {row.get('verdict')}" + (
        f", {row['ratio']:.2f}x [{row['low']:.2f}, {row['high']:.2f}]" if row.get("low") is not None else "")
    if row.get("verdict") == "WIN" and not out["win"]:
        out["why"] += (f", a WIN below the practical margin (its lower bound is not above {1.0 + margin:.3f}x, "
                       "1 + spec_ab_win_margin)")
    load = row.get("load")
    if out["win"] and isinstance(load, dict) and load.get("verdict") != "NON-INFERIOR":
        # a WIN on one stream not shown to hold at the production's concurrency (issue 49): never promoted
        out["win"] = False
        out["under_load"] = dict(load)
        margin_eq = conf.get("margin")
        margin_eq = margin_eq if isinstance(margin_eq, (int, float)) and not isinstance(margin_eq, bool) else 0.05
        out["why"] += ", " + _confirm.load_why(load, conf.get("streams"), float(margin_eq))
    if out["win"] and conf.get("recommendation_why"):
        # the run withheld its recommendation (a failed or incomplete baseline start): its WINs carry no promotion
        out["win"] = False
        out["why"] += f", but the run recommends nothing: {conf['recommendation_why']}"
    return out


def promotion_record(report: dict[str, Any], winner: str, force: bool = False,
                     promoted_at: str | None = None, accept_lossy: bool = False, unit: Any = None) -> dict[str, Any]:
    """The promotion as data: what it sets and unsets, and why (the measured table).

    ``unit``: the unit the promotion changes; a run that measured another unit (its report's
    ``environment.unit``) is refused, force or not: its numbers say nothing about this unit's server.
    """
    measured = (report.get("environment") or {}).get("unit") if isinstance(report, dict) else None
    if unit and measured:
        try:
            same = _host_state.service_name(str(unit)) == _host_state.service_name(str(measured))
        except SpecdecError as exc:
            raise AnsibleFilterError(f"specdec_promote_unit: {exc}") from None
        if not same:
            raise AnsibleFilterError(
                f"run {report.get('run_id')} measured unit {measured}, not {unit}: its winner is not promoted onto "
                f"another unit (force or not). Name a run of {unit} with -e specdec_promote_run=<run id>, or set "
                f"specdec_unit={measured} to promote onto the unit that was measured")
    configs = {c.get("name"): c for c in report.get("configs") or []}
    if winner not in configs:
        raise AnsibleFilterError(f"specdec_promote_config: {winner!r} is not a config of run {report.get('run_id')} "
                                 f"(configs: {', '.join(sorted(str(c) for c in configs))})")
    statuses = {v.get("status") for v in report.get("verdicts") or [] if v.get("config") == winner}
    bad = sorted(s for s in statuses if s in _UNPROMOTABLE)
    if bad and not force:
        raise AnsibleFilterError(f"specdec_promote_config: {winner!r} was judged {', '.join(bad)} in run "
                                 f"{report.get('run_id')}; it cannot be promoted (set specdec_promote_force=true "
                                 "only after fixing and re-measuring)")
    try:  # a lossy-by-design winner needs the operator's explicit acceptance (module_utils/bench/_quality.py)
        judging = _quality.promotion_evidence(report, winner, bool(accept_lossy))
    except _quality.QualityError as exc:
        raise AnsibleFilterError(str(exc)) from None
    if ((report.get("confirmatory") or {}).get("smoke") is True
            or (report.get("design") or {}).get("smoke") is True):
        raise AnsibleFilterError(f"specdec_promote_config: run {report.get('run_id')} was a smoke run "
                                 "(spec_ab_smoke): it measured without a verdict and is never promoted, force or "
                                 "not. Measure again without spec_ab_smoke, with spec_ab_max_rounds 2 or more")
    gate = confirmatory_gate(report, winner)
    if gate["win"] and not gate.get("declared", True) and not force:
        weights = ", ".join(f"{s} {w:.0%}" for s, w in gate["weights"].items())
        raise AnsibleFilterError(f"specdec_promote_config: run {report.get('run_id')} was judged on the built-in mix "
                                 f"({weights}), not on declared traffic: its WIN says nothing about your requests. "
                                 "Declare your traffic (specdec_ab_traffic, specdec_ab_mix or spec_ab_primary_shape) "
                                 "and measure again, or set specdec_promote_force=true (the record will say forced)")
    if not gate["win"] and not force:
        raise AnsibleFilterError(f"specdec_promote_config: {winner!r} has no WIN on run {report.get('run_id')}'s "
                                 f"confirmatory endpoint ({gate['why']}); only a WIN is promoted. Measure again with "
                                 "more rounds (spec_ab_max_rounds) or set specdec_promote_force=true to promote it "
                                 "anyway (the record will say forced)")
    env = configs[winner].get("server_config") or {}
    hidden = sorted(k for k, v in env.items() if is_masked(v))
    if hidden:
        raise AnsibleFilterError(f"specdec_promote_config: {winner!r} of run {report.get('run_id')} sets "
                                 f"{', '.join(hidden)}, whose value the report hides (a secret): a promotion cannot "
                                 "write it. Set it in the unit's own env file yourself, leave it out of the candidate, "
                                 "measure again and promote that run")
    values: dict[str, str] = {}
    unset: list[str] = []
    for key, value in env.items():
        try:
            text = envfile.check_env_value(key, value, f"run {report.get('run_id')}: config {winner}")
        except envfile.EnvFileError as exc:
            raise AnsibleFilterError(str(exc)) from None
        if text is None:
            unset.append(key)
        else:
            values[key] = text
    table = promotion_table(report, winner)
    if judging and judging["judging"] == _quality.LOSSY:
        table.append(_comment(f"{winner}: lossy by design, {judging['summary']}; accepted with {judging['accepted']}"))
    table.insert(1, _comment(f"confirmatory: {gate['verdict']} on {gate['endpoint']}"
                             + (f", {gate['ratio']:.2f}x [{gate['low']:.2f}, {gate['high']:.2f}]" if gate["low"] else "")
                             + ("; FORCED (specdec_promote_force=true)" if not gate["win"] else "")
                             + ("; judged on the BUILT-IN mix, not declared traffic (FORCED)"
                                if gate["win"] and not gate.get("declared", True) else "")))
    record = {"schema": SCHEMA, "config": winner, "run_id": report.get("run_id"), "host": report.get("host"),
              "promoted_at": promoted_at, "set": dict(sorted(values.items())), "unset": sorted(unset), "table": table,
              "forced": not gate["win"] or not gate.get("declared", True), "verdict": gate["verdict"],
              "traffic": "declared" if gate.get("declared", True) else "built-in",
              "confirmatory": {k: gate[k] for k in ("endpoint", "verdict", "ratio", "low", "high")}}
    if judging:
        record["judging"] = judging
    return record


def _check_record(record: Any) -> dict[str, Any]:
    if not isinstance(record, dict) or record.get("schema") != SCHEMA:
        raise AnsibleFilterError(f"the promotion record is not a {SCHEMA} document; remove it or run promote.yml again")
    return record


def promotion_block(record: dict[str, Any] | None) -> list[str]:
    """The promotion's lines in the base env file: markers, the table, the winner's assignments."""
    if not record:
        return []
    record = _check_record(record)
    try:
        assignments = envfile.render_lines(record.get("set") or {}, f"promotion of {record.get('config')}")
    except envfile.EnvFileError as exc:
        raise AnsibleFilterError(str(exc)) from None
    return [BEGIN, _comment(f"promoted: {record.get('config')}"), *(record.get("table") or []), *assignments,
            *(_comment(f"removed: {key}") for key in record.get("unset") or []), END]


def promoted_env(base_env: dict[str, Any], record: dict[str, Any] | None) -> dict[str, Any]:
    """Production's variables without those the promotion sets or unsets (the block carries those)."""
    if not record:
        return dict(base_env or {})
    record = _check_record(record)
    taken = set(record.get("set") or {}) | set(record.get("unset") or [])
    return {k: v for k, v in (base_env or {}).items() if k not in taken}


def _without_block(lines: list[str]) -> list[str]:
    kept: list[str] = []
    inside = False
    for line in lines:
        if line.startswith(BEGIN):
            inside = True
            continue
        if inside:
            if line.startswith(END):
                inside = False
            continue
        kept.append(line)
    return kept


def promote_env(current: str, report: dict[str, Any], winner: str, force: bool = False,
                accept_lossy: bool = False, unit: Any = None) -> str:
    """The base env file's new text: the winner's variables set (null removes one), the rest kept, and one
    promotion block (replacing an earlier one) holding the measured table as the justification."""
    record = promotion_record(report, winner, force, accept_lossy=accept_lossy, unit=unit)
    body = "\n".join(_without_block(current.split("\n")))
    taken = set(record["set"]) | set(record["unset"])
    # drop the assignments the promotion owns, whole (a quoted value may span lines)
    drop: set[int] = set()
    for key, first, last in envfile.assignment_spans(body):
        if key in taken:
            drop.update(range(first, last + 1))
    kept = [line for number, line in enumerate(body.split("\n"), start=1) if number not in drop]
    while kept and not kept[-1].strip():
        kept.pop()
    return "\n".join([*kept, "", *promotion_block(record)]) + "\n"
