# Copyright: (c) 2026, llmfleet.specdec contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# Public filters vllm_speculative_config, vllm_speculative_json and vllm_speculative_cli (one .yml each):
# vLLM's --speculative-config from a candidate, by the same code spec_lint checks it with.
from __future__ import annotations

from typing import Any

from ansible_collections.llmfleet.specdec.plugins.plugin_utils.steps._steps_vllm import (
    vllm_speculative_cli,
    vllm_speculative_config,
    vllm_speculative_json,
)


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"vllm_speculative_config": vllm_speculative_config, "vllm_speculative_json": vllm_speculative_json,
                "vllm_speculative_cli": vllm_speculative_cli}
