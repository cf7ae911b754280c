# Copyright: (c) 2026, llmfleet.specdec contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The GGUF file format and what its keys mean.

The streaming header parser with its bounds (``_gguf``), where the bytes come from, a file or HTTP ranges
(``_gguf_source``), the model's facts (layers, heads, SWA, MTP/nextn, tokenizer fingerprint: ``_model_facts``) and
how a module takes a header's arguments (``_argspec``). Never touches: llama.cpp's rules about those facts (that is
``llamacpp``), a server or a unit.
"""
