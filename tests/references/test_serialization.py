from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from cortex_sessions.references import json_text_cost, tag_safe_json, utf8_len
from cortex_sessions.references.serialization import char_json_cost
from tests.references.strategies import PROPERTY, tricky_text


def test_tag_safe_json_is_compact_and_writes_every_less_than_as_an_escape():
    assert tag_safe_json({"a": ["<b>", "é"]}) == '{"a":["\\u003cb>","é"]}'


@PROPERTY
@given(st.one_of(tricky_text, st.text()))
def test_tag_safe_json_round_trips_and_holds_no_less_than(text):
    encoded = tag_safe_json({"text": text})
    assert "<" not in encoded
    assert json.loads(encoded) == {"text": text}


@PROPERTY
@given(st.one_of(tricky_text, st.text()))
def test_json_cost_of_a_text_is_the_sum_of_its_characters_costs(text):
    assert json_text_cost(text) == sum(char_json_cost(c) for c in text)
    assert json_text_cost(text) == utf8_len(tag_safe_json(text)) - 2
