# Copyright: (c) 2026, llmfleet.specdec contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The steps the roles and playbooks call on the controller, through filter ``internal`` and the public
filters: one ``_steps_<topic>.py`` per topic (the A/B, the screen, builds, promotion, the watch, units, env files,
traffic, timing, vLLM, the fleet, the host's state, paths, variables, reports). Thin: each step shapes data and
calls the verdicts, the report or a module_util. Never runs on a host.
"""
