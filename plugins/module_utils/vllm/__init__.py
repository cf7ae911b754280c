# Copyright: (c) 2026, llmfleet.specdec contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""vLLM's rules: its ``--speculative-config`` and legacy flags as ``vllm serve`` reads them (``_vllm``),
what it decides from the checkpoints (``_vllm_checkpoints``) and how much KV cache it allocates (``_vllm_memory``).
Never touches: llama.cpp's rules, a running server, a unit.
"""
