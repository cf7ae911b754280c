# Copyright: (c) 2026, llmfleet.specdec contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The bottom layer: what every other package may use and that knows nothing of llama.cpp, vLLM or systemd.

The domain errors every module turns into ``fail_json`` once (``_errors``), the one bounded HTTP client
(``_http``), version gates (``_version``), the statistics the bench and the judge share (``_stats``), secret-looking
variables masked wherever they are shown (``_secrets``), and the argument specs shared by an action plugin and its
module's documentation (``_report_args``, ``_fleet_args``).
Never touches: a server, a unit, a model file; never imports another package of the collection.
"""
