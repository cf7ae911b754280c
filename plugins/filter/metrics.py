# Copyright: (c) 2026, llmfleet.specdec contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# Public filter spec_counters (documented in spec_counters.yml): a server's speculative-decoding counters from /metrics.
from __future__ import annotations

from typing import Any

from ansible_collections.llmfleet.specdec.plugins.plugin_utils.steps._steps_ab import spec_counters


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"spec_counters": spec_counters}
