# Copyright: (c) 2026, llmfleet.specdec contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Measuring a running server: the client and the measuring loop (``_endpoint``), whose server answers
(``_bench_owner``), other clients around each request (``_busy``), the traffic shapes and the operator's own prompts
(``_shapes``, ``_traffic``), load with N requests in flight and its gate (``_load``, ``_loadgate``), which configs
must be lossless (``_quality``) and what the numbers mean: the break-even arithmetic and the spec counters
(``_breakeven``). Never changes a unit; the server it measures is already running.
"""
