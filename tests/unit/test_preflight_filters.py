"""The preflight filters that read what hosts hold: the llamacpp_build record's build number."""
from __future__ import annotations

import base64
import json

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.llmfleet.specdec.plugins.plugin_utils.steps._steps_preflight import build_from_record

PATH = "/etc/llmfleet-specdec/llamacpp-build.json"


def slurped(value: object) -> str:
    raw = value if isinstance(value, bytes) else json.dumps(value).encode()
    return base64.b64encode(raw).decode()


def test_the_record_names_the_build() -> None:
    assert build_from_record(slurped({"build_number": 10133, "version": "b10133"}), PATH) == "b10133"
    assert build_from_record(slurped({"build_number": "9100"}), PATH) == "b9100"


def test_no_record_or_no_number_means_the_pinned_tree() -> None:
    assert build_from_record("", PATH) == ""
    assert build_from_record(None, PATH) == ""
    assert build_from_record(slurped({"build_number": None, "commit": "0c1e57098"}), PATH) == ""


@pytest.mark.parametrize("value, says", [
    (b"{not json", "is not JSON"),
    ([1, 2], "is not a JSON object"),
    ({"build_number": "b10133"}, "build_number 'b10133' is not a whole number"),
    ({"build_number": True}, "build_number True is not a whole number"),
    ({"build_number": -3}, "build_number -3 is not a whole number"),
])
def test_a_broken_record_is_an_error_naming_the_file(value: object, says: str) -> None:
    with pytest.raises(AnsibleFilterError) as err:
        build_from_record(slurped(value), PATH)
    assert str(err.value).startswith(PATH) and says in str(err.value)
    assert "specdec_llamacpp_build" in str(err.value)
