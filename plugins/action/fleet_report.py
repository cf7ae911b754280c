# Copyright: (c) 2026, llmfleet.specdec contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# Controller side of the fleet report: the hosts' A/B reports by GPU family into fleet.json, fleet.md and a PNG.
from __future__ import annotations

from pathlib import Path
from typing import Any

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase

from ansible_collections.llmfleet.specdec.plugins.module_utils.common._errors import SpecdecError
from ansible_collections.llmfleet.specdec.plugins.module_utils.common._fleet_args import ARGUMENT_SPEC
from ansible_collections.llmfleet.specdec.plugins.module_utils.state._host_state import safe_path_component
from ansible_collections.llmfleet.specdec.plugins.plugin_utils.report import _fleet, _fleet_plots
from ansible_collections.llmfleet.specdec.plugins.plugin_utils.report._files import write_atomic


class ActionModule(ActionBase):
    """Runs on the controller only: it reads the reports it is given and writes under results_dir."""

    TRANSFERS_FILES = False
    _requires_connection = False

    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        result = super().run(tmp, task_vars or {})
        del tmp
        _dummy, args = self.validate_argument_spec(argument_spec=ARGUMENT_SPEC)
        try:
            name = safe_path_component(args["name"], "name")
            document = _fleet.build(args["hosts"], prefix=args["family_prefix"], name=name)
        except (_fleet.FleetError, SpecdecError) as exc:
            raise AnsibleActionFail(str(exc)) from None

        results_dir = Path(args["results_dir"])
        if not results_dir.is_absolute():
            results_dir = Path(self._loader.get_basedir()) / results_dir
        # "_fleet" cannot clash with a host's folder: the A/B writes <results_dir>/<inventory host name>/.
        report_dir = results_dir / "_fleet" / name
        images: dict[str, bytes] = {}
        notes: list[str] = []
        if args["plots"]:
            images, notes = _fleet_plots.render(document)
        files = {report_dir / "fleet.json": _fleet.to_json(document).encode("utf-8"),
                 report_dir / "fleet.md": _fleet.markdown(document, images=sorted(images)).encode("utf-8")}
        for image, data in sorted(images.items()):
            files[report_dir / image] = data
        to_write = [p for p, data in files.items() if not p.exists() or p.read_bytes() != data]
        if not self._task.check_mode:
            for path in to_write:
                write_atomic(path, files[path])

        summary = _fleet.summary_lines(document)
        result.update(
            changed=bool(to_write), report_dir=str(report_dir), files=[str(p) for p in files],
            written=[str(p) for p in to_write], summary=summary, families=document["families"],
            disagreeing=document["disagreeing"], without_report=document["without_report"], plot_notes=notes,
            unjudged_upgrades=document["unjudged_upgrades"])
        if args["stats_key"]:
            result["ansible_stats"] = {"data": {args["stats_key"]: {
                "report_dir": str(report_dir), "disagreeing": document["disagreeing"],
                "families": {f["family"]: f["state"] for f in document["families"]}}},
                "per_host": False, "aggregate": True}
        if args["fail_on_disagreement"] and document["disagreeing"]:
            result["failed"] = True
            result["msg"] = (f"the hosts of GPU families {', '.join(document['disagreeing'])} disagree (see "
                             f"{report_dir / 'fleet.md'}); set fail_on_disagreement=false to only report it")
        return result
