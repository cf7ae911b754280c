# Copyright: (c) 2026, llmfleet.specdec contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# Private to the collection: the domain exceptions every module_util raises and every module turns into fail_json once.
from __future__ import annotations


class SpecdecError(Exception):
    """A problem with the operator's input or environment, phrased so it says what to change."""


class GGUFError(SpecdecError):
    """A GGUF file (or URL) that is not a well-formed GGUF header.

    ``offset`` is the byte offset in the file where the problem was found, or None.
    """

    def __init__(self, source: str, offset: int | None, problem: str) -> None:
        self.source = source
        self.offset = offset
        self.problem = problem
        where = f" at byte {offset}" if offset is not None else ""
        super().__init__(f"{source}: {problem}{where}")


class GGUFFetchError(SpecdecError):
    """Reading a GGUF header over HTTP failed (status, missing range support, network)."""
