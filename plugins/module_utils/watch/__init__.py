# Copyright: (c) 2026, llmfleet.specdec contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The watch: the promoted evidence against what a host holds now, as pure functions (``_drift``), that
reading of the host made without changing anything (``_drift_host``), and its result as a node_exporter textfile
(``_drift_textfile``). Reads the build record, the unit and the server; never changes any of them.
"""
