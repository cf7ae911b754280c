# Copyright: (c) 2026, llmfleet.specdec contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# Public filters env_file_lines and env_file_values (one .yml each): systemd EnvironmentFile= text written and read
# by the same rules the collection's modules use.
from __future__ import annotations

from typing import Any

from ansible_collections.llmfleet.specdec.plugins.plugin_utils.steps._steps_envfile import env_file_lines, env_file_values


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"env_file_lines": env_file_lines, "env_file_values": env_file_values}
