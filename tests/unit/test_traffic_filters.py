"""The spec_ab role's traffic filters: the bench payload from spec_ab_traffic and the mix weights."""
from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.llmfleet.specdec.plugins.plugin_utils.steps._steps_traffic import ab_traffic, ab_traffic_mix

ITEMS = [{"name": "tickets", "file": "files/tickets.jsonl", "n_predict": 24, "weight": 2},
         {"name": "code", "file": "/srv/code.jsonl", "n_predict": 64}]


def test_payload_carries_each_files_text_and_the_path_for_errors() -> None:
    out = ab_traffic(ITEMS, ["\"a\"", "\"b\""])
    assert out == [{"name": "tickets", "source": "files/tickets.jsonl", "content": "\"a\"", "n_predict": 24},
                   {"name": "code", "source": "/srv/code.jsonl", "content": "\"b\"", "n_predict": 64}]
    assert ab_traffic([], []) == []


def test_weights_join_the_mix_and_zero_or_missing_stay_out() -> None:
    assert ab_traffic_mix(ITEMS) == {"tickets": 2.0}
    assert ab_traffic_mix(None) == {}


@pytest.mark.parametrize("items, match", [
    ([{"name": "x", "n_predict": 4}], r"spec_ab_traffic\[0\]: give name, file"),
    ([{"name": "x", "file": "f", "n_predict": 4, "weight": -1}], r"\(x\).weight: expected a share"),
    ([{"name": "x", "file": "f", "n_predict": 4, "prompts": "inline"}], r"unknown key\(s\) prompts"),
    ("tickets.jsonl", "expected a list"),
])
def test_bad_items_name_the_item_and_the_fix(items, match) -> None:
    with pytest.raises(AnsibleFilterError, match=match):
        ab_traffic_mix(items)
