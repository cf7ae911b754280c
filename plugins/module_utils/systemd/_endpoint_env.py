# Copyright: (c) 2026, llmfleet.specdec contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# Private to the collection: which env-file variables name a serving unit's endpoint, for each engine.
"""llama-server reads its endpoint from ``LLAMA_ARG_HOST``/``LLAMA_ARG_PORT`` (common/arg.cpp). A vLLM unit has no
such variables of its own: role vllm_serve writes ``VLLM_SERVE_HOST``/``VLLM_SERVE_PORT``, which its launcher passes
to ``vllm serve`` as ``--host``/``--port``. vLLM env files written before that rename carry the llama.cpp names; the
launcher and unit_override still read those when the vLLM names are absent.
"""
from __future__ import annotations

from typing import Mapping, Tuple

LLAMACPP_ENDPOINT = ("LLAMA_ARG_HOST", "LLAMA_ARG_PORT")
VLLM_ENDPOINT = ("VLLM_SERVE_HOST", "VLLM_SERVE_PORT")


def endpoint_names(env: Mapping[str, str]) -> Tuple[str, str]:
    """The (host, port) variable names an env file uses: vLLM's when it sets either of them, else llama.cpp's."""
    if any(name in env for name in VLLM_ENDPOINT):
        return VLLM_ENDPOINT
    return LLAMACPP_ENDPOINT
