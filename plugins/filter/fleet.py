# Copyright: (c) 2026, llmfleet.specdec contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# Public filter ab_batch (documented in ab_batch.yml): specdec_ab_batch checked as a play's serial.
from __future__ import annotations

from typing import Any

from ansible_collections.llmfleet.specdec.plugins.plugin_utils.steps._steps_fleet import ab_batch


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"ab_batch": ab_batch}
