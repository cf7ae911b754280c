# Copyright: (c) 2026, llmfleet.specdec contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""llama.cpp's rules, as the pinned tree states them.

The speculative types and their chain laws, build gates and the vocabulary verdict (``_llamacpp``), the vocabulary
load step by step (``_llamacpp_vocab``), llama-server's command line as data (``_flags``, the generated
``_flags_table``), and the n-gram proposers ported token for token (``_ngram``). Pure rules and data: never starts
or asks a server, never reads a unit; reads GGUF facts through ``gguf``.
"""
