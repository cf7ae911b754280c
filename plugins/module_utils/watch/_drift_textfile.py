# Copyright: (c) 2026, llmfleet.specdec contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# Private to the collection: a drift watch's result as a node_exporter textfile, written atomically.
"""A watch result (``_drift_host.watch``) in the Prometheus text format, for node_exporter's textfile collector.

Operators of llama.cpp and vLLM already run Prometheus and alert from there: ``spec_watch`` writes
``<dir>/llmfleet_specdec_<unit>.prom`` (``dir`` is the collector's ``--collector.textfile.directory``) through a
temporary file in the same directory and a rename, so node_exporter never reads half a file. Every series carries
the unit; every finding kind the watch knows has its own series (1 found, 0 not), so an alert can name the kind.
Standard library only: the file is written on the fleet host.
"""
from __future__ import annotations

import math
import os
import re
import tempfile
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from ansible_collections.llmfleet.specdec.plugins.module_utils.common._errors import SpecdecError
from ansible_collections.llmfleet.specdec.plugins.module_utils.watch._drift import DRIFT_KINDS, INFO_KINDS

PREFIX = "llmfleet_specdec_"
MODE = 0o644  # node_exporter runs as its own user and must read it; nothing secret is in it

# name, help, type: every metric the file can hold, in the order written
METRICS: Tuple[Tuple[str, str, str], ...] = (
    ("watch_timestamp_seconds", "When the drift watch ran (Unix time); an old value means the watch stopped.",
     "gauge"),
    ("promoted_info", "The promoted config and the A/B run it came from (1); 0 with empty labels when nothing "
     "is promoted.", "gauge"),
    ("measured_acceptance", "Lowest and highest acceptance the A/B measured for the promoted config over its "
     "rounds and shapes.", "gauge"),
    ("measured_mean_accepted_length", "Lowest and highest mean accepted length the A/B measured for the promoted "
     "config.", "gauge"),
    ("live_acceptance", "Acceptance over the watch's window (accepted of drafted tokens, two reads of /metrics).",
     "gauge"),
    ("live_mean_accepted_length", "Mean accepted length over the watch's window (1 + accepted per draft).",
     "gauge"),
    ("live_window_draft_tokens", "Tokens drafted in the watch's window (how much traffic the live values rest on).",
     "gauge"),
    ("evidence_age_seconds", "Age of the measurement the promotion rests on.", "gauge"),
    ("finding", "1 when the watch reports this finding for the unit, else 0 (severity drift: production may no "
     "longer be the winner; info: something could not be judged).", "gauge"),
    ("drift", "1 when any drift finding is reported for the unit.", "gauge"),
)

_NAME_SAFE = re.compile(r"[^A-Za-z0-9_.@-]")


def _escape(value: Any) -> str:
    """A label value as the text format writes it: backslash, double quote and newline escaped."""
    return str(value).replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _labels(labels: Mapping[str, Any]) -> str:
    return "{" + ",".join(f'{k}="{_escape(v)}"' for k, v in labels.items()) + "}"


def _number(value: Any) -> Optional[float]:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def _value(v: float) -> str:
    return repr(float(v))


def samples(result: Mapping[str, Any], now: float) -> Dict[str, List[Tuple[Dict[str, Any], float]]]:
    """Each metric's samples (labels, value) from a watch result."""
    unit = str(result.get("unit") or "")
    out: Dict[str, List[Tuple[Dict[str, Any], float]]] = {name: [] for name, _h, _t in METRICS}
    out["watch_timestamp_seconds"].append(({"unit": unit}, now))
    config = result.get("config")
    out["promoted_info"].append(({"unit": unit, "config": config or "", "run_id": result.get("run_id") or ""},
                                 1.0 if config else 0.0))
    measured = result.get("measured") or {}
    for metric, low, high in (("measured_acceptance", "acceptance_low", "acceptance_high"),
                              ("measured_mean_accepted_length", "mean_len_low", "mean_len_high")):
        for bound, key in (("low", low), ("high", high)):
            v = _number(measured.get(key))
            if v is not None:
                out[metric].append(({"unit": unit, "bound": bound}, v))
    delta = ((result.get("live") or {}).get("window") or {}).get("delta") or {}
    dtoks, acc, drafts = (_number(delta.get(k)) for k in ("draft_tokens", "accepted_tokens", "drafts"))
    if dtoks is not None:
        out["live_window_draft_tokens"].append(({"unit": unit}, dtoks))
        if dtoks > 0 and acc is not None:
            out["live_acceptance"].append(({"unit": unit}, acc / dtoks))
        if drafts and acc is not None:
            out["live_mean_accepted_length"].append(({"unit": unit}, 1.0 + acc / drafts))
    age = _number(result.get("evidence_age_seconds"))
    if age is not None:
        out["evidence_age_seconds"].append(({"unit": unit}, age))
    found = {f.get("kind") for f in result.get("findings") or [] if isinstance(f, Mapping)}
    for kind in (*DRIFT_KINDS, *INFO_KINDS):
        severity = "drift" if kind in DRIFT_KINDS else "info"
        out["finding"].append(({"unit": unit, "finding": kind, "severity": severity}, 1.0 if kind in found else 0.0))
    out["drift"].append(({"unit": unit}, 1.0 if found & set(DRIFT_KINDS) else 0.0))
    return out


def render(result: Mapping[str, Any], now: float) -> str:
    """The textfile: HELP and TYPE for every metric that has a sample, then its samples."""
    lines: List[str] = []
    by_name = samples(result, now)
    for name, text, kind in METRICS:
        if not by_name[name]:
            continue
        lines.append(f"# HELP {PREFIX}{name} {text}")
        lines.append(f"# TYPE {PREFIX}{name} {kind}")
        lines.extend(f"{PREFIX}{name}{_labels(labels)} {_value(v)}" for labels, v in by_name[name])
    return "\n".join(lines) + "\n"


def textfile_path(directory: str, unit: str) -> str:
    stem = unit[: -len(".service")] if unit.endswith(".service") else unit
    return os.path.join(directory, f"llmfleet_specdec_{_NAME_SAFE.sub('_', stem)}.prom")


def check_directory(directory: str) -> None:
    """Refuse a textfile directory that is not there, before the watch waits out its window."""
    if not os.path.isabs(directory):
        raise SpecdecError(f"textfile_dir {directory!r} must be an absolute path, for example "
                           "/var/lib/node_exporter/textfile_collector (node_exporter's --collector.textfile.directory)")
    if not os.path.isdir(directory):
        raise SpecdecError(f"textfile_dir {directory}: no such directory; create it (node_exporter's "
                           "--collector.textfile.directory) or leave textfile_dir unset")


def write(directory: str, unit: str, text: str, *, check_mode: bool = False) -> Dict[str, Any]:
    """Write ``text`` as the unit's textfile in ``directory``, atomically (a temp file there, then rename)."""
    check_directory(directory)
    path = textfile_path(directory, unit)
    if check_mode:
        return {"path": path, "written": False}
    # the ".prom" suffix only on the final name: node_exporter reads *.prom and must never see the temp file
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".llmfleet_specdec_", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            # the mode through the descriptor, never by path: the directory is often writable by node_exporter's
            # user, who could swap a symlink in for the temp name and have root chmod any file
            os.fchmod(fh.fileno(), MODE)
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except OSError as exc:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise SpecdecError(f"textfile_dir {directory}: cannot write {path} ({exc.strerror or exc}); check that the "
                           "directory is writable by the user the watch runs as") from None
    return {"path": path, "written": True}


def kinds() -> Sequence[str]:
    """Every finding kind a textfile has a series for."""
    return (*DRIFT_KINDS, *INFO_KINDS)
