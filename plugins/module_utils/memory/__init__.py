# Copyright: (c) 2026, llmfleet.specdec contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Memory: llama.cpp's KV arithmetic (``_kv``), devices and where layers and caches land (``_placement``),
the fix search behind module ``kv_budget`` (``_sizing``), a config's memory beside the baseline's (``_knobs``) and
what nvidia-smi, rocm-smi and sysfs report (``_gpu``). Arithmetic and parsers only: never runs a server or
changes a host.
"""
