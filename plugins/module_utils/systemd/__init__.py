# Copyright: (c) 2026, llmfleet.specdec contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The change vehicle: a serving unit as systemd runs it, and every change to it under a dead-man.

Reading: systemd's own syntax (``_execstart``, ``_envfile``), the calls and paths (``_systemd``), /proc and cgroups
(``_procview``), what a unit's command line runs (``_unit_command``, ``_unit_wrapper``), the unit as its next start
would run it (``_serving_unit``), its endpoint's variables (``_endpoint_env``), its last start (``_start_info``), and a
candidate rendered once in the unit's own form (``_render``). Changing: the dead-man timer (``_deadman``), the pin of
what ran (``_pin``), the A/B drop-in (``_unit_override``) and the unit's own files (``_unit_deploy``).
Never measures a server's speed, never judges a result, never keeps the host's A/B record.
"""
