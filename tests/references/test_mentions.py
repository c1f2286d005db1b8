from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cortex_sessions.references import (
    InvalidReference,
    SessionReferenceInput,
    encode_session_uri,
    format_mention,
    parse_references,
)
from tests.references.strategies import PROPERTY

#: Surrounding text that cannot start a mention or a URI, nor glue onto one.
plain_text = st.text(alphabet=st.characters(exclude_characters="@[]\\c"))


def test_mention_escapes_backslash_and_closing_bracket_in_the_label():
    uri = encode_session_uri("s1")
    assert format_mention(r"a]b\c[d", "s1") == f"@[a\\]b\\\\c[d]({uri})"


@PROPERTY
@given(label=st.text(), session_id=st.text(min_size=1), before=plain_text, after=plain_text)
def test_formatted_mention_parses_back_to_its_label_and_id(label, session_id, before, after):
    parsed = parse_references(before + format_mention(label, session_id) + after)
    assert parsed.references == [SessionReferenceInput(session_id, label or None)]
    assert parsed.text == before + "@" + (label or session_id) + after


def test_mentions_are_replaced_by_their_label_in_order_of_appearance():
    text = f"compare {format_mention('Plan A', 'a')} with {format_mention('Plan B', 'b')}."
    parsed = parse_references(text)
    assert parsed.text == "compare @Plan A with @Plan B."
    assert [r.session_id for r in parsed.references] == ["a", "b"]


def test_repeated_mentions_are_all_returned():
    mention = format_mention("x", "a")
    assert len(parse_references(mention + mention).references) == 2


def test_bare_canonical_uri_counts_and_reads_as_at_session_id():
    parsed = parse_references(f"see {encode_session_uri('abc')}.")
    assert parsed.text == "see @abc."
    assert parsed.references == [SessionReferenceInput("abc")]


def test_bare_non_canonical_uri_is_left_as_plain_text():
    text = "the cortex-session:!!! scheme, or cortex-session:ImFiYyI= or cortex-session:Zm9v"
    parsed = parse_references(text)
    assert parsed.text == text
    assert parsed.references == []


def test_uri_glued_to_a_preceding_payload_character_is_not_a_reference():
    text = "x" + encode_session_uri("abc")
    assert parse_references(text).references == []


def test_markdown_link_after_at_bracket_is_left_alone():
    text = "@[docs](https://example.com) and @[x] y"
    parsed = parse_references(text)
    assert parsed.text == text
    assert parsed.references == []


def test_unclosed_at_bracket_is_plain_text_and_later_bare_uris_still_count():
    uri = encode_session_uri("abc")
    parsed = parse_references(f"@[oops {uri}")
    assert parsed.text == "@[oops @abc"
    assert parsed.references == [SessionReferenceInput("abc")]


def test_mention_with_empty_label_reads_as_the_session_id():
    parsed = parse_references(f"@[]({encode_session_uri('abc')})")
    assert parsed.text == "@abc"
    assert parsed.references == [SessionReferenceInput("abc", None)]


def test_earliest_at_bracket_starts_the_mention():
    # A label may contain "@[" (format_mention does not escape it).
    parsed = parse_references(f"@[a @[b]({encode_session_uri('abc')})")
    assert parsed.references == [SessionReferenceInput("abc", "a @[b")]


@pytest.mark.parametrize(
    "text",
    [
        "@[label](cortex-session:!!!)",
        "@[label](cortex-session:)",
        "@[label](cortex-session:ImFiYyI",
        "@[label](cortex-session:ImFiYyI more text",
        "@[label](cortex-session:ImFiYyI=)",  # padding
        "@[label](cortex-session:ImFiYyJ)",  # non-canonical trailing bits
        "@[label](cortex-session:IiI)",  # an empty id
        "@[bad\\escape](cortex-session:ImFiYyI)",
    ],
)
def test_malformed_explicit_mention_is_invalid_reference(text):
    with pytest.raises(InvalidReference):
        parse_references(text)


def test_parsing_a_non_string_is_invalid_reference():
    with pytest.raises(InvalidReference):
        parse_references(None)


def test_format_mention_with_a_non_string_label_is_invalid_reference():
    with pytest.raises(InvalidReference):
        format_mention(None, "abc")


@pytest.mark.parametrize("piece", ["@[", "@[a](x) ", "@[" + "\\]" * 3, "@[]"])
def test_pathological_input_is_parsed_in_linear_time(piece):
    text = piece * 100_000 + " " + format_mention("end", "abc")
    parsed = parse_references(text)
    assert [r.session_id for r in parsed.references] == ["abc"]


def test_many_unterminated_labels_with_escapes_fail_fast_as_one_bad_mention():
    # From the first "@[" everything up to the final "](" is one label, and "\@" is a bad escape.
    with pytest.raises(InvalidReference):
        parse_references("@[\\" * 100_000 + format_mention("end", "abc"))
