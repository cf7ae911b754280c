# Copyright: (c) 2026, llmfleet.specdec contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# Private to the collection: argument specs shared by several modules, and turning them into reader options.
from __future__ import annotations

from typing import Any

# How a module reads a GGUF header: shared by gguf_info, spec_compat and the preflight modules.
GGUF_READ_ARGS: dict[str, dict[str, Any]] = dict(
    max_header_bytes=dict(type="int", default=256 * 1024 * 1024),
    first_read=dict(type="int", default=8 * 1024 * 1024),
    allow_full_read=dict(type="bool", default=False),
    validate_certs=dict(type="bool", default=True),
    timeout=dict(type="int", default=30),
    total_timeout=dict(type="int"),  # unset: timeout + 300
    # headers carry tokens (Authorization): never echoed back in invocation.module_args or logs
    url_headers=dict(type="dict", default={}, no_log=True),
)


def gguf_read_options(params: dict[str, Any]) -> dict[str, Any]:
    """Keyword arguments for ``_gguf.read_header`` from a module's params."""
    return dict(
        max_header_bytes=params["max_header_bytes"],
        first_read=params["first_read"],
        allow_full_read=params["allow_full_read"],
        validate_certs=params["validate_certs"],
        timeout=params["timeout"],
        total_timeout=params["total_timeout"],
        headers=params["url_headers"] or {},
    )
