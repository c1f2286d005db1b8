from __future__ import annotations

import copy
import uuid

import pytest

from cortex_sessions.references import (
    CancelToken,
    Deadline,
    InvalidReference,
    InvalidReferenceConfig,
    ReferenceCancelled,
    SelfReference,
    SessionReferenceInput,
    TooManyReferences,
    check_cancelled,
    format_mention,
    normalize_inputs,
    readable_content,
    validate_max_reference_bytes,
)

Ref = SessionReferenceInput


def test_duplicate_references_are_dropped_and_the_first_wins():
    result = normalize_inputs(
        [Ref("a", "first"), Ref("b"), Ref("a", "second")],
        current_session_id="me",
        max_references=3,
    )
    assert result == [(0, Ref("a", "first")), (1, Ref("b"))]


def test_reference_to_the_messages_own_session_is_self_reference():
    with pytest.raises(SelfReference):
        normalize_inputs([Ref("a"), Ref("me")], current_session_id="me", max_references=3)


def test_own_session_id_is_compared_as_a_string():
    own = uuid.UUID("01890000-0000-7000-8000-000000000000")
    with pytest.raises(SelfReference):
        normalize_inputs([Ref(str(own))], current_session_id=own, max_references=3)


def test_more_distinct_references_than_allowed_is_too_many():
    with pytest.raises(TooManyReferences):
        normalize_inputs([Ref("a"), Ref("b"), Ref("c")], current_session_id="me", max_references=2)


def test_duplicates_do_not_count_towards_the_limit():
    result = normalize_inputs(
        [Ref("a"), Ref("a"), Ref("b"), Ref("b")], current_session_id="me", max_references=2
    )
    assert [index for index, _ in result] == [0, 2]


def test_self_reference_is_reported_before_too_many():
    refs = [Ref("a"), Ref("b"), Ref("c"), Ref("d"), Ref("me")]
    with pytest.raises(SelfReference):
        normalize_inputs(refs, current_session_id="me", max_references=3)


@pytest.mark.parametrize("limit", [0, 4, -1, True, 2.0, "3", None])
def test_max_references_outside_one_to_three_is_invalid_config(limit):
    with pytest.raises(InvalidReferenceConfig):
        normalize_inputs([], current_session_id="me", max_references=limit)


def test_an_input_that_is_not_a_reference_is_invalid_reference():
    with pytest.raises(InvalidReference):
        normalize_inputs([{"session_id": "a"}], current_session_id="me", max_references=3)


@pytest.mark.parametrize("value", [0, -1, True, 1.5, "100", None])
def test_max_reference_bytes_that_is_not_a_positive_int_is_invalid_config(value):
    with pytest.raises(InvalidReferenceConfig):
        validate_max_reference_bytes(value)


def test_valid_max_reference_bytes_is_returned():
    assert validate_max_reference_bytes(65_536) == 65_536


def test_cancelled_token_raises_cancelled():
    token = CancelToken()
    assert check_cancelled(cancel_token=token) is None
    token.cancel()
    with pytest.raises(ReferenceCancelled):
        check_cancelled(cancel_token=token)


def test_passed_deadline_raises_cancelled():
    assert check_cancelled(deadline=Deadline(10.0), now=9.0) is None
    with pytest.raises(ReferenceCancelled):
        check_cancelled(deadline=Deadline(10.0), now=10.5)


def test_readable_content_parses_text_blocks_without_touching_the_input():
    blocks = [
        {"type": "text", "text": f"look at {format_mention('Plan', 'a')}"},
        {"type": "image", "source": {"url": "x"}},
        {"type": "text", "text": f"and {format_mention('Other', 'b')}"},
    ]
    original = copy.deepcopy(blocks)
    content, references = readable_content(blocks)
    assert blocks == original
    assert content == [
        {"type": "text", "text": "look at @Plan"},
        {"type": "image", "source": {"url": "x"}},
        {"type": "text", "text": "and @Other"},
    ]
    assert references == [Ref("a", "Plan"), Ref("b", "Other")]
    content[1]["source"]["url"] = "changed"
    assert blocks[1]["source"]["url"] == "x"  # a deep copy


def test_readable_content_with_a_malformed_mention_is_invalid_reference():
    with pytest.raises(InvalidReference):
        readable_content([{"type": "text", "text": "@[x](cortex-session:!!)"}])
