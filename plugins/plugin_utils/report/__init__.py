# Copyright: (c) 2026, llmfleet.specdec contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The report of a judged run and of the fleet: Markdown and JSON (``_report``), the PNG plots, matplotlib
optional (``_plots``, ``_fleet_plots``), the fleet report (``_fleet``) and result files written atomically
(``_files``). Renders what the verdicts decided; never judges and never touches a host.
"""
