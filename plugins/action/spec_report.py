# Copyright: (c) 2026, llmfleet.specdec contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# Controller side of the A/B protocol: judge a run and write report.json, report.md, PNG plots and the host's history.
from __future__ import annotations

import math
import platform
from pathlib import Path
from typing import Any

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase
from ansible.release import __version__ as ansible_version

from ansible_collections.llmfleet.specdec.plugins.module_utils.common._errors import SpecdecError
from ansible_collections.llmfleet.specdec.plugins.module_utils.common._report_args import ARGUMENT_SPEC
from ansible_collections.llmfleet.specdec.plugins.module_utils.state._host_state import merge_history
from ansible_collections.llmfleet.specdec.plugins.plugin_utils.report import _plots, _report
from ansible_collections.llmfleet.specdec.plugins.plugin_utils.report._files import update_locked, write_atomic
from ansible_collections.llmfleet.specdec.plugins.plugin_utils.verdicts import _judge


def _d_s(value: Any) -> float | dict[str, float] | None:
    """d_s_ms as one number or a number per config name; a clear failure otherwise."""
    if value is None or value == "":
        return None

    def number(v: Any, where: str) -> float:
        try:
            out = float(v)
        except (TypeError, ValueError):
            raise AnsibleActionFail(f"{where}: expected the drafter's step in milliseconds, got {v!r}") from None
        if not math.isfinite(out) or out <= 0:
            raise AnsibleActionFail(f"{where}: must be a number of milliseconds greater than 0, got {v!r}")
        return out

    if isinstance(value, dict):
        return {str(k): number(v, f"d_s_ms.{k}") for k, v in value.items()}
    return number(value, "d_s_ms")


def _history_bytes(path: Path, document: dict[str, Any]) -> bytes:
    """history.jsonl with this run's line appended, or replacing the line of an earlier report of the same run
    (the same merge the host's own history gets)."""
    old = path.read_text(encoding="utf-8") if path.exists() else ""
    return merge_history(old, _report.history_line(document)).encode("utf-8")


class ActionModule(ActionBase):
    """Runs on the controller only: it reads the run it is given and writes under results_dir."""

    TRANSFERS_FILES = False
    _requires_connection = False

    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        task_vars = task_vars or {}
        result = super().run(tmp, task_vars)
        del tmp
        _dummy, args = self.validate_argument_spec(argument_spec=ARGUMENT_SPEC)
        run = dict(args["run"])
        if not run.get("host"):
            run["host"] = task_vars.get("inventory_hostname")
        d_s = _d_s(args.get("d_s_ms"))
        environment = dict(args["environment"] or {})
        environment.setdefault("controller", {
            "ansible_core": ansible_version, "python": platform.python_version(),
            "matplotlib": _matplotlib_version()})
        try:
            judged = _judge.judge(run, d_s_ms=d_s, n_boot=args["bootstrap_resamples"], seed=args["seed"])
            document = _report.build_document(run, judged, environment)
        except SpecdecError as exc:
            raise AnsibleActionFail(str(exc)) from None

        results_dir = Path(args["results_dir"])
        if not results_dir.is_absolute():
            results_dir = Path(self._loader.get_basedir()) / results_dir
        host_dir = results_dir / document["host"]
        report_dir = host_dir / document["run_id"]

        warnings: list[str] = []
        images: dict[str, bytes] = {}
        plot_notes: list[str] = []
        if args["plots"]:
            images, plot_notes = _plots.render(document)
            if not images and _plots.matplotlib_missing():
                warnings.extend(plot_notes)
        files: dict[Path, bytes] = {
            report_dir / "report.json": _report.to_json(document).encode("utf-8"),
            report_dir / "report.md": _report.markdown(document, images=list(images)).encode("utf-8"),
        }
        for name, data in sorted(images.items()):
            files[report_dir / name] = data
        if args["history"]:
            history = host_dir / "history.jsonl"
            files[history] = _history_bytes(history, document)

        to_write = [p for p, data in files.items() if not p.exists() or p.read_bytes() != data]
        if not self._task.check_mode:
            for path in to_write:
                if path.name == "history.jsonl":  # shared by every run on the host: merged again under its lock
                    line = _report.history_line(document)
                    update_locked(path, lambda old, line=line: merge_history(old, line))
                else:
                    write_atomic(path, files[path])

        summary = _report.summary_lines(document)
        stats = dict(_report.history_record(document), report_dir=str(report_dir), summary=summary)
        result.update(
            changed=bool(to_write),
            report_dir=str(report_dir),
            files=[str(p) for p in files],
            written=[str(p) for p in to_write],
            run_id=document["run_id"],
            host=document["host"],
            summary=summary,
            recommendation=judged["recommendation"],
            judged=judged,
            plot_notes=plot_notes,
            stats={document["host"]: stats},
        )
        if args["stats_key"]:
            result["ansible_stats"] = {"data": {args["stats_key"]: {document["host"]: stats}},
                                       "per_host": False, "aggregate": True}
        if warnings:
            result["warnings"] = warnings
        return result


def _matplotlib_version() -> str | None:
    try:
        import matplotlib
    except ImportError:
        return None
    return str(matplotlib.__version__)
