# Copyright: (c) 2026, llmfleet.specdec contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# Controller side: how the report actions write their files (one home for spec_report and fleet_report).
"""Result files hold the operator's prompts and the model's answers: files are 0600, folders this creates 0700.

``update_locked`` changes a shared file (a host's ``history.jsonl``) read-change-write under ``flock`` of a
``.lock`` file beside it, so two runs that finish at once never lose each other's line.
"""
from __future__ import annotations

import fcntl
import os
import tempfile
from pathlib import Path
from typing import Callable

FILE_MODE = 0o600
DIR_MODE = 0o700


def ensure_dir(path: Path) -> None:
    """``path`` and the folders above it that do not exist yet, each created 0700 (umask aside)."""
    missing = []
    current = path
    while not current.exists():
        missing.append(current)
        current = current.parent
    for folder in reversed(missing):
        folder.mkdir(mode=DIR_MODE, exist_ok=True)
        os.chmod(folder, DIR_MODE)


def write_atomic(path: Path, data: bytes, mode: int = FILE_MODE) -> None:
    """Write ``data`` to ``path`` through a temporary file in the same folder, so a reader never sees half a file."""
    ensure_dir(path.parent)
    fd, tmp = tempfile.mkstemp(dir=str(path.parent), prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            os.fchmod(fh.fileno(), mode)
            fh.write(data)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def update_locked(path: Path, change: Callable[[str], str], mode: int = FILE_MODE) -> bool:
    """``path``'s text replaced by ``change(text)`` under an exclusive flock of ``<path>.lock``; True if it changed."""
    ensure_dir(path.parent)
    lock = os.open(str(path) + ".lock", os.O_RDWR | os.O_CREAT, FILE_MODE)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)
        old = path.read_text(encoding="utf-8") if path.exists() else ""
        new = change(old)
        if new == old and path.exists():
            return False
        write_atomic(path, new.encode("utf-8"), mode)
        return True
    finally:
        os.close(lock)
