# Copyright: (c) 2026, llmfleet.specdec contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# The steps of playbooks/tasks/check_vars.yml that name a variable the collection does not know, and an older name.
# Not filters of their own: roles and playbooks call them through filter llmfleet.specdec.internal.
"""``query('ansible.builtin.varnames', ...) | llmfleet.specdec.internal('var_warnings')``: a warning for each
variable with one of the collection's prefixes that the collection does not know (with the nearest known name), and
for each older name of a setting (with the name to use)."""
from __future__ import annotations

import difflib
import functools
import re
from pathlib import Path
from typing import Any

from ansible.utils.display import Display

ROOT = Path(__file__).resolve().parents[3]
PREFIXES = ("specdec_", "spec_ab_", "spec_preflight_", "llamacpp_serve_", "llamacpp_build_", "vllm_serve_",
            "spec_watch_")
# An older name -> the one name of the setting. Each keeps working (the roles still read it) until 1.0.0.
DEPRECATED = {
    "specdec_backend": "specdec_engine",
    "spec_preflight_backend": "spec_preflight_engine",
    "spec_ab_max_minutes": "spec_ab_budget_minutes",
    "specdec_rollback_hosts": "specdec_target_hosts",
}
_NAME = re.compile(r"\b((?:" + "|".join(p[:-1] for p in PREFIXES) + r")_[a-z0-9_]*[a-z0-9])\b")


@functools.lru_cache(maxsize=4)
def known_names(root: Path = ROOT) -> frozenset[str]:
    """Every name of the collection's prefixes that its variable page, roles and playbooks use: the settings (the
    page's tables, the roles' defaults and argument specs), what the plays set for themselves (a fact of an earlier
    play is no misspelt setting) and the names of the inventories that come with it."""
    files = [*root.glob("roles/*/defaults/main.yml"),
             *root.glob("roles/*/meta/argument_specs.yml"), *root.glob("roles/*/tasks/*.yml"),
             *root.glob("roles/*/vars/*.yml"), *root.glob("roles/*/templates/*"), *root.glob("playbooks/**/*.yml"),
             # the inventories that come with it (the example's and the test beds' helper names)
             *root.glob("examples/**/*.yml"), *root.glob("inventory/**/*.yml"), *root.glob("molecule/**/*.yml")]
    names: set[str] = set()
    try:  # the variable page's tables (its prose quotes misspelt names as examples)
        page = (root / "docs" / "variables.md").read_text(encoding="utf-8")
        names.update(re.findall(r"^\| `([a-z0-9_]+)`", page, re.M))
    except OSError:
        pass
    for path in files:
        try:
            names.update(_NAME.findall(path.read_text(encoding="utf-8")))
        except (OSError, UnicodeDecodeError):
            continue
    return frozenset(names)


def var_notes(names: Any, host: str = "", known: frozenset[str] | None = None) -> list[str]:
    """One line per name given that is an older name of a setting or not a variable of the collection."""
    known = known_names() if known is None else known
    settings = sorted(known - set(DEPRECATED))
    where = f" (given for {host})" if host else ""
    notes = []
    for name in sorted({str(n) for n in names or []}):
        if not name.startswith(PREFIXES):
            continue
        if name in DEPRECATED:
            notes.append(f"{name} is deprecated, use {DEPRECATED[name]}{where}: it still works, and is removed in "
                         "1.0.0")
        elif name not in known:
            near = difflib.get_close_matches(name, settings, n=1, cutoff=0.75)
            hint = f"; did you mean {near[0]}?" if near else "; see docs/variables.md for the variables it reads"
            notes.append(f"{name}{where} is not a variable of llmfleet.specdec and is ignored{hint}")
    return notes


def var_warnings(names: Any, host: str = "") -> list[str]:
    """var_notes, each also shown as a warning (once per run: the display keeps one of each text)."""
    notes = var_notes(names, host)
    for note in notes:
        Display().warning(note)
    return notes
