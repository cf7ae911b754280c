# Copyright: (c) 2026, llmfleet.specdec contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The speculative-config lint (module ``spec_lint``): the entry points (``_lint``) and llama.cpp's per-stage
checks (``_lint_rules``), over llama.cpp's rules, vLLM's, the GGUF facts and the KV arithmetic. Predicts what a
server would do before anything is loaded: never starts a server, never reads or changes a unit.
"""
