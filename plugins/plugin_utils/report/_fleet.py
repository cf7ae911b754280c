# Copyright: (c) 2026, llmfleet.specdec contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# Private to the collection, controller only: one report across the hosts of a multi-host A/B run, by GPU family.
"""The fleet report (schema ``llmfleet.specdec/fleet-report/1``).

Input: per host its inventory groups and the A/B report its run left (schema ``llmfleet.specdec/ab-report/1``),
or why there is none. The GPU family of a host is its one inventory group whose name starts with the family
prefix (``gpu_`` by default, as in the example inventory), or the family given for it explicitly.

Per host the report names its recommendation (the confirmatory verdict of its run: the best WIN on the run's
one endpoint, else keep the baseline) and, per shape, its pick: the OK config with a ``WIN`` on that shape
(exploratory) and the largest speedup, else the baseline. The hosts of one family agree when their
recommendations, their picks, every config's status and every (config, shape) verdict direction agree: the same
GPU, build and model should give the same answer, so a family whose hosts disagree is flagged. ``INCONCLUSIVE``
on one host against ``WIN`` on another is a different pick (flagged); ``WIN`` against ``LOSS`` is a
contradiction (flagged). Reports written before the verdict words changed (``win``, ``loss``) read the same.

Per host, too, its unit's build era when the play read one (``build_era``, from the promoted evidence and the build
record: the build that measured the promoted config, the build the unit runs, and whether the build sentinel judged
that upgrade); ``unjudged_upgrades`` names the hosts whose unit runs a build the sentinel did not judge.
"""
from __future__ import annotations

import json
from typing import Any, Mapping, Sequence

from ansible_collections.llmfleet.specdec.plugins.module_utils.common._fleet_args import DEFAULT_PREFIX

SCHEMA = "llmfleet.specdec/fleet-report/1"
AB_SCHEMA = "llmfleet.specdec/ab-report/1"
UNGROUPED = "(no GPU family group)"
OK = "OK"
WIN = "WIN"
LOSS = "LOSS"

# A family's state in the report.
AGREE = "agree"
DISAGREE = "DISAGREE"
ONE_HOST = "one host"
NOT_COMPARED = "not compared"


class FleetError(Exception):
    """Input the fleet report cannot use, phrased so it says what to change."""


def family_of(host: str, groups: Sequence[str], prefix: str = DEFAULT_PREFIX, family: str | None = None) -> str:
    """The host's GPU family: ``family`` when given, else its one group named ``<prefix>...``, else UNGROUPED."""
    if family:
        return str(family)
    if not prefix:
        raise FleetError("the GPU family prefix is empty: every group would be a family; set it to the prefix of "
                         "the inventory groups that name GPU families (for example gpu_)")
    found = sorted({str(g) for g in groups if str(g).startswith(prefix)})
    if len(found) > 1:
        raise FleetError(f"host {host} is in {len(found)} GPU family groups ({', '.join(found)}): a host has one GPU "
                         f"family; put it in exactly one {prefix}* group, or set specdec_gpu_family for it")
    return found[0] if found else UNGROUPED


def _check_report(host: str, report: Any) -> Mapping[str, Any]:
    if not isinstance(report, Mapping):
        raise FleetError(f"host {host}: its A/B report is {type(report).__name__}, not a report document; "
                         f"give the parsed report.json of its run")
    if report.get("schema") != AB_SCHEMA:
        raise FleetError(f"host {host}: its report has schema {report.get('schema')!r}, not {AB_SCHEMA!r}; "
                         f"give the report.json an A/B run wrote (not partial.json or history.jsonl)")
    if report.get("host") != host:
        raise FleetError(f"host {host}: the report given for it is host {report.get('host')!r}'s (run "
                         f"{report.get('run_id')!r}); each host's own report must be given under its own name")
    for key in ("verdicts", "judged"):
        if not isinstance(report.get(key), (list if key == "verdicts" else Mapping)):
            raise FleetError(f"host {host}: its report (run {report.get('run_id')!r}) has no {key!r}; "
                             f"give a report.json written by spec_report")
    return report


def _shapes(report: Mapping[str, Any]) -> list[str]:
    shapes = report["judged"].get("shapes")
    if isinstance(shapes, list):
        return [str(s) for s in shapes]
    seen: list[str] = []
    for v in report["verdicts"]:
        if v.get("shape") not in seen:
            seen.append(v.get("shape"))
    return seen


def host_summary(host: str, report: Mapping[str, Any]) -> dict[str, Any]:
    """What the fleet report keeps of one host's run: picks per shape, statuses, verdict directions."""
    report = _check_report(host, report)
    baseline = str(report.get("baseline") or report["judged"].get("baseline") or "baseline")
    shapes = _shapes(report)
    configs: dict[str, dict[str, Any]] = {}
    for v in report["verdicts"]:
        name = str(v.get("config"))
        c = configs.setdefault(name, {"status": v.get("status"), "shapes": {}})
        word = v.get("verdict")
        c["shapes"][str(v.get("shape"))] = {"verdict": word.upper() if word in ("win", "loss") else word,
                                            "speedup": v.get("speedup")}
    picks: dict[str, dict[str, Any]] = {}
    for shape in shapes:
        best: tuple[float, str] | None = None
        for name, c in configs.items():
            r = c["shapes"].get(shape)
            if name == baseline or c["status"] != OK or not r or r["verdict"] != WIN:
                continue
            speedup = float(r["speedup"] or 0.0)
            if best is None or speedup > best[0]:
                best = (speedup, name)
        picks[shape] = ({"config": best[1], "verdict": WIN, "speedup": best[0]} if best
                        else {"config": baseline, "verdict": "keep", "speedup": None})
    rec = report.get("recommendation") or report["judged"].get("recommendation") or {}
    conf = report.get("confirmatory")
    error = report.get("run_error") or report["judged"].get("run_error")
    return {
        "host": host,
        "run_id": report.get("run_id"),
        "baseline": baseline,
        "result": "stopped early" if error else "reported",
        "error": error,
        "shapes": shapes,
        "picks": picks,
        # the confirmatory recommendation (null: keep the baseline); an older report's only from a declared mix
        # a run whose baseline start failed recommends nothing (not even keeping the baseline): null, as its
        # report's recommendation section says
        "recommendation": ((conf.get("recommendation") or (None if conf.get("recommendation_why") else baseline))
                           if isinstance(conf, Mapping) else rec.get("config") if rec.get("mix") else None),
        "configs": configs,
    }


def _disagreements(members: list[dict[str, Any]]) -> list[str]:
    """Why the hosts of one family do not give the same answer (empty: they agree)."""
    out: list[str] = []
    names = [m["host"] for m in members]
    recs = {m["host"]: m["recommendation"] for m in members if m["recommendation"] is not None}
    if len(set(recs.values())) > 1:
        out.append("recommendation: " + ", ".join(f"{h} {r}" for h, r in recs.items()))
    shared = [s for s in members[0]["shapes"] if all(s in m["shapes"] for m in members[1:])]
    for shape in shared:
        picks = {m["host"]: m["picks"][shape] for m in members}
        if len({p["config"] for p in picks.values()}) > 1:
            out.append(f"{shape}: " + ", ".join(
                f"{h} picks {p['config']}" + (f" (win {p['speedup']:.2f}x)" if p["verdict"] == WIN else "")
                for h, p in picks.items()))
    configs = [c for c in members[0]["configs"] if all(c in m["configs"] for m in members[1:])]
    for name in configs:
        statuses = {m["host"]: m["configs"][name]["status"] for m in members}
        if len(set(statuses.values())) > 1:
            out.append(f"config {name} status: " + ", ".join(f"{h} {s}" for h, s in statuses.items()))
            continue
        for shape in shared:
            verdicts = {h: m["configs"][name]["shapes"].get(shape, {}).get("verdict") for h, m in zip(names, members)}
            if WIN in verdicts.values() and LOSS in verdicts.values():
                out.append(f"{name} on {shape} contradicts: " + ", ".join(f"{h} {v}" for h, v in verdicts.items()))
    return out


def _build_era(host: str, era: Any) -> dict[str, Any] | None:
    """A host's build era as the play read it (spec_watch's ``build_era`` and the promoted config), or None."""
    if era is None:
        return None
    if not isinstance(era, Mapping) or not isinstance(era.get("line"), str):
        raise FleetError(f"host {host}: its build_era is {type(era).__name__}, not a build era; give what step "
                         f"fleet_build_era returns (or leave it out)")
    return {k: era.get(k) for k in ("config", "measured_on", "runs", "same_build", "sentinel", "line")}


def _unjudged(era: Mapping[str, Any] | None) -> bool:
    """An upgrade of a promoted unit that the build sentinel did not judge (both builds known and different)."""
    return bool(era and era.get("measured_on") and era.get("runs") and not era.get("same_build")
                and not era.get("sentinel"))


def build(runs: Sequence[Mapping[str, Any]], prefix: str = DEFAULT_PREFIX, name: str | None = None
          ) -> dict[str, Any]:
    """The fleet document from ``[{host, groups, family?, report?, error?}]``, one entry per host."""
    if not isinstance(runs, Sequence) or isinstance(runs, (str, bytes)) or not runs:
        raise FleetError("no hosts given: the fleet report needs one entry per host ({host, groups, report})")
    hosts: list[dict[str, Any]] = []
    seen: set[str] = set()
    for i, run in enumerate(runs):
        if not isinstance(run, Mapping) or not run.get("host"):
            raise FleetError(f"entry {i} of the hosts has no host name: each entry is {{host, groups, report}}")
        host = str(run["host"])
        if host in seen:
            raise FleetError(f"host {host} is given twice: give each host once, with the report of its run")
        seen.add(host)
        groups = run.get("groups") or []
        if isinstance(groups, (str, bytes)) or not isinstance(groups, Sequence):
            raise FleetError(f"host {host}: groups must be a list of inventory group names (group_names), "
                             f"got {type(groups).__name__}")
        family = family_of(host, groups, prefix, run.get("family"))
        if run.get("report") is None:
            entry = {"host": host, "run_id": None, "result": "no report", "shapes": [], "picks": {},
                     "recommendation": None, "configs": {}, "baseline": None,
                     "error": str(run.get("error") or "no A/B report was found for this host")}
        else:
            entry = host_summary(host, run["report"])
        entry["family"] = family
        entry["build_era"] = _build_era(host, run.get("build_era"))
        hosts.append(entry)
    hosts.sort(key=lambda h: (h["family"] == UNGROUPED, h["family"], h["host"]))

    families: list[dict[str, Any]] = []
    for fam in sorted({h["family"] for h in hosts}, key=lambda f: (f == UNGROUPED, f)):
        members = [h for h in hosts if h["family"] == fam]
        compared = [h for h in members if h["result"] == "reported"]
        left_out = [h["host"] for h in members if h["result"] != "reported"]
        if fam == UNGROUPED:
            state, why = NOT_COMPARED, [f"these hosts are in no {prefix}* group: their GPUs are not known to match"]
        elif len(compared) < 2:
            state, why = (ONE_HOST if len(members) == 1 else NOT_COMPARED), []
        else:
            why = _disagreements(compared)
            state = DISAGREE if why else AGREE
        families.append({"family": fam, "hosts": [h["host"] for h in members],
                         "compared": [h["host"] for h in compared], "left_out": left_out,
                         "state": state, "disagreements": why})
    return {
        "schema": SCHEMA,
        "name": name,
        "family_prefix": prefix,
        "hosts": hosts,
        "families": families,
        "disagreeing": [f["family"] for f in families if f["state"] == DISAGREE],
        "without_report": [h["host"] for h in hosts if h["result"] != "reported"],
        "unjudged_upgrades": [h["host"] for h in hosts if _unjudged(h["build_era"])],
    }


def to_json(document: Mapping[str, Any]) -> str:
    return json.dumps(document, indent=2, sort_keys=True, default=str) + "\n"


def _cell(pick: Mapping[str, Any] | None) -> str:
    if not pick:
        return "-"
    if pick["verdict"] == WIN:
        return f"**{_md(pick['config'])}** win {pick['speedup']:.2f}x"
    return f"keep {_md(pick['config'])}"


def _md(text: Any) -> str:
    """Text safe inside a Markdown table cell."""
    return str(text).replace("|", "\\|").replace("\n", " ")


def markdown(document: Mapping[str, Any], images: Sequence[str] = ()) -> str:
    """The fleet report: one table per GPU family (host, run, recommendation, pick per shape), flags first."""
    hosts = document["hosts"]
    fams = document["families"]
    out = [f"# Speculative-decoding A/B across the fleet: {len(hosts)} host{'' if len(hosts) == 1 else 's'}, "
           f"{len(fams)} GPU famil{'y' if len(fams) == 1 else 'ies'}", ""]
    if document.get("name"):
        out += [f"Report {_md(document['name'])}.", ""]
    out += ["Per host and shape: the config that won there with the largest speedup (**bold**), or `keep` the "
            "baseline when none won. Hosts of one GPU family should give the same answer (same GPU, build and "
            "model); a family where they do not is flagged.", ""]
    if document["disagreeing"]:
        out.append("**Families whose hosts disagree: " + ", ".join(_md(f) for f in document["disagreeing"])
                   + "** (look for a different build, model file, driver or load on the odd host, then re-run)")
    else:
        out.append("No family's hosts disagree.")
    if document["without_report"]:
        out.append("")
        out.append("Hosts without a complete report (not compared): " + ", ".join(
            _md(h) for h in document["without_report"]))
    by_host = {h["host"]: h for h in hosts}
    for fam in fams:
        members = [by_host[h] for h in fam["hosts"]]
        shapes: list[str] = []
        for h in members:
            shapes += [s for s in h["shapes"] if s not in shapes]
        out += ["", f"## {_md(fam['family'])}: {fam['state']}", ""]
        for why in fam["disagreements"]:
            out.append(f"- {_md(why)}")
        if fam["disagreements"]:
            out.append("")
        out.append("| host | run | result | recommendation |" + "".join(f" {_md(s)} |" for s in shapes))
        out.append("| --- | --- | --- | --- |" + " --- |" * len(shapes))
        for h in members:
            result = h["result"] if not h.get("error") else f"{h['result']}: {h['error']}"
            cells = [_cell(h["picks"].get(s)) for s in shapes]
            out.append(f"| {_md(h['host'])} | {_md(h['run_id'] or '-')} | {_md(result)} | "
                       f"{_md(h['recommendation'] or '-')} |" + "".join(f" {c} |" for c in cells))
    out += _era_table(hosts)
    if images:
        out += ["", "## Plots", ""]
        out += [f"![{name}]({name})" for name in images]
    out.append("")
    return "\n".join(out)


def _pct(value: Any) -> str:
    return "-" if value is None else f"{100.0 * float(value):.1f} %"


def _upgrade_cell(era: Mapping[str, Any]) -> str:
    judged = era.get("sentinel")
    if era.get("same_build"):
        return "the same build"
    if judged:
        numbers = (f"on {_md(judged.get('config'))}: acceptance {_pct(judged.get('canary_acceptance'))} against "
                   f"{_pct(judged.get('production_acceptance'))}")
        return (f"**ACCEPTED SLOWER** (-e specdec_build_accept_slower) {numbers}" if judged.get("accepted_slower")
                else f"passed the build sentinel {numbers}")
    if _unjudged(era):
        return "**an upgrade the build sentinel did NOT judge**"
    return _md(era["line"].split(": ", 1)[-1])


def _era_table(hosts: Sequence[Mapping[str, Any]]) -> list[str]:
    """The build era of each host's promoted unit: which build measured the evidence, which it runs, the sentinel."""
    out = ["", "## Build era", ""]
    eras = [(h["host"], h.get("build_era")) for h in hosts]
    if not any(era for _host, era in eras):
        return [*out, "No host has a promoted config: there is no evidence whose build could have changed."]
    out += ["Per host, its unit's promoted config: the build that measured its evidence, the build the unit runs now, "
            "and whether the build sentinel judged that upgrade (its canary's acceptance against production's).", "",
            "| host | promoted config | measured on | runs | upgrade |", "| --- | --- | --- | --- | --- |"]
    for host, era in eras:
        if not era:
            out.append(f"| {_md(host)} | - | - | - | no promoted config |")
            continue
        out.append(f"| {_md(host)} | {_md(era.get('config') or '-')} | {_md(era.get('measured_on') or 'unrecorded')} "
                   f"| {_md(era.get('runs') or 'unrecorded')} | {_upgrade_cell(era)} |")
    return out


def summary_lines(document: Mapping[str, Any]) -> list[str]:
    """One line per family for the play's output."""
    lines = []
    for fam in document["families"]:
        line = f"{fam['family']}: {fam['state']} ({', '.join(fam['hosts'])})"
        if fam["disagreements"]:
            line += ": " + "; ".join(fam["disagreements"])
        lines.append(line)
    if document.get("unjudged_upgrades"):
        lines.append("build era: the units of " + ", ".join(document["unjudged_upgrades"]) + " run a build the build "
                     "sentinel did not judge against their promoted config (see the report's Build era)")
    return lines
