"""promote.yml's filter: the winner into the base env file, the table as justification, losers marked."""
from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.llmfleet.specdec.plugins.filter.promote import BEGIN, END, promote_env

REPORT = {
    "run_id": "20261129T100000Z", "host": "frank-zealot", "baseline": "baseline", "finished": "2026-11-29T10:10:00",
    "configs": [
        {"name": "baseline", "server_config": {}},
        {"name": "ngram-mod", "server_config": {"LLAMA_ARG_SPEC_TYPE": "ngram-mod", "LLAMA_ARG_SPEC_DRAFT_N_MAX": None}},
        {"name": "draft-n7", "server_config": {"LLAMA_ARG_SPEC_TYPE": "draft-simple"}},
        {"name": "broken", "server_config": {"LLAMA_ARG_SPEC_TYPE": "ngram-mod"}},
    ],
    "verdicts": [
        {"config": "ngram-mod", "shape": "echo", "status": "OK", "verdict": "win", "median_tok_s": 41.0,
         "speedup": 1.64, "ci_low": 1.5, "ci_high": 1.8},
        {"config": "draft-n7", "shape": "echo", "status": "OK", "verdict": "loss", "median_tok_s": 20.0,
         "speedup": 0.8, "ci_low": 0.7, "ci_high": 0.9},
        {"config": "broken", "shape": "echo", "status": "INVALID", "verdict": "invalid", "median_tok_s": 50.0,
         "speedup": 2.0, "ci_low": 1.9, "ci_high": 2.1},
    ],
}
CURRENT = "# production\nLLAMA_ARG_PORT=8080\nLLAMA_ARG_SPEC_DRAFT_N_MAX=3\nLLAMA_ARG_CTX_SIZE=4096\n"


def test_winner_is_written_with_its_justification() -> None:
    text = promote_env(CURRENT, REPORT, "ngram-mod")
    lines = text.splitlines()
    assert "LLAMA_ARG_PORT=8080" in lines and "LLAMA_ARG_CTX_SIZE=4096" in lines
    assert "LLAMA_ARG_SPEC_TYPE=ngram-mod" in lines
    assert not any(line.startswith("LLAMA_ARG_SPEC_DRAFT_N_MAX=") for line in lines)  # null removes it
    assert "# ngram-mod | echo | 41.0 | 1.64x [1.50, 1.80] | win | OK" in lines
    assert "# draft-n7: measured above; do not switch without re-measuring" in lines
    assert lines.count(BEGIN) == 1 and lines.count(END) == 1


def test_promoting_again_replaces_the_block_and_is_stable() -> None:
    once = promote_env(CURRENT, REPORT, "ngram-mod")
    assert promote_env(once, REPORT, "ngram-mod") == once
    other = promote_env(once, REPORT, "draft-n7")
    assert other.count(BEGIN) == 1 and "LLAMA_ARG_SPEC_TYPE=draft-simple" in other
    assert "LLAMA_ARG_SPEC_TYPE=ngram-mod" not in other


def test_invalid_or_unknown_configs_are_refused() -> None:
    with pytest.raises(AnsibleFilterError, match="INVALID"):
        promote_env(CURRENT, REPORT, "broken")
    assert "LLAMA_ARG_SPEC_TYPE=ngram-mod" in promote_env(CURRENT, REPORT, "broken", force=True)
    with pytest.raises(AnsibleFilterError, match="not a config"):
        promote_env(CURRENT, REPORT, "nope")


def test_a_value_with_a_newline_is_refused() -> None:
    report = dict(REPORT, configs=[{"name": "x", "server_config": {"LLAMA_ARG_ALIAS": "a\nLLAMA_ARG_PORT=1"}}], verdicts=[])
    with pytest.raises(AnsibleFilterError, match="LLAMA_ARG_ALIAS"):
        promote_env(CURRENT, report, "x")
