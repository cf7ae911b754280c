# Copyright: (c) 2026, llmfleet.specdec contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# Filters exposing the speculative-decoding break-even arithmetic (the same code as spec_breakeven) to templates.
"""Speculative-decoding arithmetic for templates (step times in ms, rates in tok/s).

- ``p | llmfleet.specdec.spec_accepted(k=K)``: expected tokens per round,
  A = (1 - p^(K+1)) / (1 - p), K + 1 at p = 1.
- ``p | llmfleet.specdec.spec_rate(k=K, d_s=D, t_s=T)``: tok/s, A / (K * d_s + 1.1 * t_s).
- ``incumbent_tok_s | llmfleet.specdec.spec_breakeven_p(k=K, d_s=D, t_s=T)``: the p at which that
  rate equals the incumbent's; None when even p = 1 cannot reach it.

Bad input (K < 1, p outside [0, 1], a non-positive time or rate) fails naming the input.
Example: ``{{ 25 | llmfleet.specdec.spec_breakeven_p(k=3, d_s=12, t_s=67) | round(2) }}`` gives 0.75.
"""
from __future__ import annotations

from typing import Any

from ansible.errors import AnsibleFilterError

from ansible_collections.llmfleet.specdec.plugins.module_utils.bench._breakeven import (
    VERIFY_FACTOR,
    breakeven_p,
    expected_accepted,
    rate,
)
from ansible_collections.llmfleet.specdec.plugins.module_utils.common._errors import SpecdecError


def _guard(fn, *args: Any) -> Any:
    try:
        return fn(*args)
    except SpecdecError as exc:
        raise AnsibleFilterError(str(exc)) from exc


def spec_accepted(p: float, k: int) -> float:
    """Expected tokens committed per round at acceptance ``p`` and depth ``k``."""
    return _guard(expected_accepted, p, k)


def spec_rate(p: float, k: int, d_s: float, t_s: float, verify_factor: float = VERIFY_FACTOR,
              draft_passes: int | None = None) -> float:
    """Tokens per second at acceptance ``p``, depth ``k``, step times ``d_s``/``t_s`` in ms."""
    return _guard(rate, p, k, d_s, t_s, verify_factor, draft_passes)


def spec_breakeven_p(incumbent_rate: float, k: int, d_s: float, t_s: float,
                     verify_factor: float = VERIFY_FACTOR, draft_passes: int | None = None) -> float | None:
    """The acceptance p at which the drafter matches ``incumbent_rate`` (tok/s); None if impossible."""
    return _guard(breakeven_p, k, d_s, t_s, incumbent_rate, verify_factor, draft_passes)


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {
            "spec_accepted": spec_accepted,
            "spec_rate": spec_rate,
            "spec_breakeven_p": spec_breakeven_p,
        }
