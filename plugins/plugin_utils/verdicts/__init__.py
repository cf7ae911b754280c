# Copyright: (c) 2026, llmfleet.specdec contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The statistics of a run and its verdicts: the block design, Dunnett's critical values and the sequential
looks (``_design``), the confirmatory verdict and recommendation (``_confirm``), judging a run (``_judge``) after its
form is checked (``_run_check``), prediction against measurement (``_predict``), and the run's time planned from the
box (``_timing``). Pure computation: no file, no host, no plot.
"""
