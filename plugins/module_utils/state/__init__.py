# Copyright: (c) 2026, llmfleet.specdec contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The host's own A/B record: safe path names, the history, the per-unit lock and its takeover only on proof
(``_host_state``). It reads systemd to prove a holder gone; it never changes a unit and never measures.
"""
