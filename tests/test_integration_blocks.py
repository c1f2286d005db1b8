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


def _outcome(build):
    try:
        built = build()
    except Exception as error:  # the refusal, compared by class, code, field and text
        return type(error), getattr(error, "code", None), getattr(error, "field", None), str(error)
    return built


_RECORD = {"type": "ai", "data": {"id": "m", "tool_calls": [{"n": 1.5, "ok": True, "x": None}]}}
BLOCK_CASES = {
    "text and record": ("assistant", [{"type": "text", "text": "Hi"}, {"type": "r", "m": _RECORD}]),
    "record alone": ("tool", [{"type": "r", "m": _RECORD, "text_at": ["data", "content"]}]),
    "user": ("user", [{"type": "text", "text": "é 😀"}, {"type": "r", "m": {}}]),
    "NUL": ("user", [{"type": "r", "m": {"k": "a\x00b"}}]),
    "lone surrogate": ("user", [{"type": "text", "text": "\ud800"}, {"type": "r", "m": {}}]),
    "key not a string": ("user", [{"type": "r", "m": {1: "one"}}]),
    "too many keys": ("user", [{"type": "r", "m": {f"k{n}": n for n in range(1001)}}]),
    "nested too deep": ("user", [{"type": "r", "m": nested(40)}]),
    "not JSON": ("user", [{"type": "r", "m": {1.5, 2}}]),
    "bad role": ("robot", [{"type": "r", "m": {}}]),
    "too large": ("user", [{"type": "text", "text": "x" * 2000}, {"type": "r", "m": {}}]),
}


@pytest.mark.parametrize("case", sorted(BLOCK_CASES))
def test_the_adapters_builder_builds_and_refuses_as_build_message(case, settings):
    # record_message's blocks skip normalize_content's checks of the list (they hold by
    # construction), never the content rule, the size or the token count.
    from datetime import UTC, datetime

    from cortex_sessions.services.message_input import build_blocks, build_message

    settings.CORTEX_SESSIONS = {"MAX_MESSAGE_BYTES": 2000}
    role, content = BLOCK_CASES[case]
    now = datetime.now(UTC)
    ours = _outcome(lambda: build_blocks(role, content, now))
    theirs = _outcome(lambda: build_message({"role": role, "content": content}, 0, now))
    assert ours == theirs
    if case in ("text and record", "record alone", "user"):
        assert ours.columns["source"] == ("user" if role == "user" else "host")
