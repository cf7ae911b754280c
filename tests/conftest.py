# Shared pytest setup: make the collection importable as ansible_collections.llmfleet.specdec.
from __future__ import annotations

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LINK = ROOT / ".build" / "collections" / "ansible_collections" / "llmfleet" / "specdec"

# `make collection` creates this link; create it here too so a bare `pytest` works from a clone.
if not LINK.exists():
    LINK.parent.mkdir(parents=True, exist_ok=True)
    os.symlink(ROOT, LINK)
