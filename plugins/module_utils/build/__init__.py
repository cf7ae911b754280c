# Copyright: (c) 2026, llmfleet.specdec contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""llama.cpp builds on a host: how one is built, as data (``_build``), what toolchain is installed
(``_toolchain``), and moving ``current`` to a new build: the canary beside production, the switch under its own
dead-man, the way back (``_activate``, ``_build_deadman``). Uses the change vehicle and the host's guard; never
measures speculation and never judges an A/B.
"""
