# Copyright: (c) 2026, llmfleet.specdec contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Screening candidates against the running production server with no restart: production's greedy tokens,
the drafting rounds replayed against them and the timed prediction (``_screen``), a copy of the target that times a
real round (``_screen_copy``), and the servers the screen starts beside production (``_side``). Never restarts or
changes production: everything it starts is its own and stopped in every case.
"""
