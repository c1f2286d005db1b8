"""The content blocks both runtime adapters write and read (cortex_sessions.integrations.blocks;
docs/design.md §13.2, §13.3): one rule for the readable copy and the verbatim block, whichever
SDK the record came from."""

from __future__ import annotations

import json

import pytest

from cortex_sessions.content import MAX_JSON_DEPTH
from cortex_sessions.integrations.blocks import (
    find_block,
    is_storable,
    text_blocks,
    verbatim_block,
)


def nested(levels: int) -> object:
    value: object = "leaf"
    for _ in range(levels):
        value = [value]
    return value


@pytest.mark.parametrize("value", ["a\x00b", "lone \ud800", {"k\x00": 1}, [["x\x00"]]])
def test_text_postgresql_cannot_store_is_not_storable(value):
    assert is_storable(value) is False


def test_storable_counts_the_levels_that_enclose_the_value():
    deepest = nested(MAX_JSON_DEPTH - 1)  # MAX_JSON_DEPTH levels of containers with the leaf's
    assert is_storable(deepest) is True
    assert is_storable(deepest, depth=2) is False
    assert is_storable(nested(MAX_JSON_DEPTH - 3), depth=2) is True


@pytest.mark.parametrize("text", ["", "   ", "\n\t"])
def test_blank_text_gives_no_text_block(text):
    assert text_blocks(text) == []


def test_text_block_keeps_storable_text_as_is_and_cleans_what_is_not():
    assert text_blocks("Hi there") == [{"type": "text", "text": "Hi there"}]
    assert text_blocks("a\x00b \ud800!") == [{"type": "text", "text": "ab ?!"}]


def test_verbatim_block_keeps_storable_data_as_json_and_the_rest_as_json_text():
    calls: list[object] = []

    def as_json(value: object) -> str:
        calls.append(value)
        return json.dumps(value)

    assert verbatim_block("kind", "item", {"a": [1]}, as_json=as_json) == {
        "type": "kind",
        "item": {"a": [1]},
    }
    assert calls == []  # only what is not storable is turned into text
    assert verbatim_block("kind", "item", {"a": "x\x00"}, as_json=as_json) == {
        "type": "kind",
        "item_json": '{"a": "x\\u0000"}',
    }
    too_deep = {"a": nested(MAX_JSON_DEPTH - 2)}  # storable as content, not inside a block
    assert is_storable(too_deep)
    assert set(verbatim_block("kind", "item", too_deep, as_json=as_json)) == {"type", "item_json"}


def test_find_block_returns_the_first_block_of_the_type():
    content = [
        {"type": "text", "text": "hi"},
        "not a block",
        {"type": "kind", "item": 1},
        {"type": "kind", "item": 2},
    ]
    assert find_block(content, "kind") == {"type": "kind", "item": 1}
    assert find_block(content, "other") is None
    assert find_block(None, "kind") is None
    assert find_block([], "kind") is None
