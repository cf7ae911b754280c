# Copyright: (c) 2026, llmfleet.specdec contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# Private to the collection: the promoted evidence in the host's state directory, read and checked (no judgement).
"""The promotion's evidence, ``<state dir>/promoted/<unit>.json`` (written by playbooks/promote.yml), as data.

Pure reading: where the file is (:func:`evidence_path`), whether it can be read at all (:func:`check_evidence`), the
promoted config's entry of the run's report (:func:`promoted_config`) and the env its process received while it was
measured (:func:`promoted_env`), for the build sentinel (``bench/_sentinel``) and the watch (``watch/_drift``,
which raises its own ``DriftInputError`` through ``error``).
"""
from __future__ import annotations

import os
from typing import Any, Dict, Mapping

from ansible_collections.llmfleet.specdec.plugins.module_utils.common._errors import SpecdecError
from ansible_collections.llmfleet.specdec.plugins.module_utils.state._host_state import safe_path_component

EVIDENCE_SCHEMA = "llmfleet.specdec/promoted/1"


class EvidenceError(SpecdecError):
    """A piece of evidence that cannot be read as one; the message names the file and what to do."""


def evidence_path(state_dir: str, unit: str) -> str:
    """The unit's evidence file: promote.yml names it after specdec_unit as the inventory spells it (with or without
    ``.service``), so the first of the two that exists, else the one without the suffix."""
    stem = unit[: -len(".service")] if unit.endswith(".service") else unit
    names = dict.fromkeys([safe_path_component(unit, "unit"), safe_path_component(stem, "unit")])
    candidates = [os.path.join(state_dir, "promoted", name + ".json") for name in names]
    return next((c for c in candidates if os.path.exists(c)), candidates[-1])


def check_evidence(evidence: Any, where: str, error: type = EvidenceError) -> Dict[str, Any]:
    """The promoted evidence document, checked enough to be read; an unusable one fails naming the file."""
    if not isinstance(evidence, Mapping) or evidence.get("schema") != EVIDENCE_SCHEMA:
        raise error(f"{where} is not a {EVIDENCE_SCHEMA} document; run playbooks/promote.yml again "
                    "(it writes this file) or remove the file")
    report = evidence.get("report")
    if not isinstance(report, Mapping) or not isinstance(report.get("configs"), list):
        raise error(f"{where}: its 'report' holds no configs; run playbooks/promote.yml again")
    name = evidence.get("config")
    if not any(isinstance(c, Mapping) and c.get("name") == name for c in report["configs"]):
        raise error(f"{where}: the promoted config {name!r} is not a config of run {report.get('run_id')}; "
                    "run playbooks/promote.yml again")
    return dict(evidence)


def promoted_config(evidence: Mapping[str, Any]) -> Dict[str, Any]:
    name = evidence["config"]
    return dict(next(c for c in evidence["report"]["configs"] if isinstance(c, Mapping) and c.get("name") == name))


def promoted_env(evidence: Mapping[str, Any], error: type = EvidenceError) -> Dict[str, str]:
    """The env the promoted config's process received while it was measured (its rendering)."""
    config = promoted_config(evidence)
    env = (config.get("rendering") or {}).get("env")
    if not isinstance(env, Mapping):
        raise error(f"the evidence of {evidence.get('config')!r} (run {evidence['report'].get('run_id')}) "
                    "has no rendering.env; it predates one-rendering reports: re-run the A/B and promote")
    return {str(k): str(v) for k, v in env.items()}
