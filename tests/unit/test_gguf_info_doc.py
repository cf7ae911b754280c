"""gguf_info's documentation parses as meant: no description cut in two by flow-style YAML."""
from __future__ import annotations

from typing import Any

import yaml

from ansible_collections.llmfleet.specdec.plugins.modules import gguf_info

FIELD_KEYS = {"description", "type", "sample", "elements", "returned", "contains"}


def _fields(tree: dict[str, Any], path: str = "") -> list[tuple[str, dict[str, Any]]]:
    out = []
    for name, field in tree.items():
        out.append((path + name, field))
        if isinstance(field, dict) and isinstance(field.get("contains"), dict):
            out += _fields(field["contains"], path + name + ".")
    return out


def test_every_return_value_has_only_field_keys() -> None:
    # `{description: Layers, including MTP layers., type: int}` parses as a description "Layers" and a
    # stray key "including MTP layers."; ansible-doc then renders a cut sentence
    for path, field in _fields(yaml.safe_load(gguf_info.RETURN)):
        assert isinstance(field, dict), path
        assert set(field) <= FIELD_KEYS, (path, set(field) - FIELD_KEYS)
        assert field.get("description"), path


def test_block_count_description_is_whole() -> None:
    field = yaml.safe_load(gguf_info.RETURN)["gguf"]["contains"]["block_count"]
    text = " ".join(field["description"]) if isinstance(field["description"], list) else field["description"]
    assert "including the MTP (nextn) layers" in text and "512" in text
