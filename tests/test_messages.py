"""Messages and the counters that describe them (docs/design.md §3.2, §5)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest
from django.db import connection
from django.test import override_settings
from django.test.utils import CaptureQueriesContext
from hypothesis import given, settings
from hypothesis import strategies as st

from cortex_sessions import services
from cortex_sessions.content import json_text, preview
from cortex_sessions.exceptions import (
    EmptyContent,
    InvalidContent,
    InvalidInput,
    InvalidMetadata,
    InvalidRole,
    InvalidSource,
    MessageNotFound,
    MessageTooLarge,
    NulCharacter,
    SessionNotFound,
)
from cortex_sessions.models import Message, Session
from cortex_sessions.services import MessageInput, _pg
from cortex_sessions.services.messages import _build_message

pytestmark = pytest.mark.django_db

SCOPE = "org=acme/user=alice"


@pytest.fixture
def session():
    return services.create_session(scope=SCOPE, agent_id="agent-1", title="t")


def append(session, *messages, scope=SCOPE):
    return services.append_messages(scope=scope, session_id=session.pk, messages=list(messages))


def stored(session):
    return Session.objects.get(pk=session.pk)


def test_append_one_message_moves_count_last_message_and_updated_at(session):
    result = append(session, {"role": "user", "content": "hello"})
    assert [m.seq for m in result.messages] == [1]
    assert result.messages[0].content == [{"type": "text", "text": "hello"}]
    assert result.messages[0].source == "user"
    assert (result.session.message_count, result.session.last_message) == (1, "hello")
    assert result.session.updated_at > session.updated_at
    row = Message.objects.get()
    assert (row.agent_id, row.scope, row.session_id) == ("agent-1", SCOPE, session.pk)


def test_append_returns_the_session_as_stored_without_reading_it_back(session):
    append(session, {"role": "assistant", "content": "first"})
    with CaptureQueriesContext(connection) as captured:
        result = append(session, {"role": "user", "content": "second"})
    statements = [
        q["sql"].split()[0].upper()
        for q in captured.captured_queries
        if q["sql"].split()[0].upper() not in {"BEGIN", "COMMIT", "SAVEPOINT", "RELEASE"}
    ]
    if _pg.enabled(connection.alias):  # one statement: update + insert (services/_pg.py),
        assert statements == ["SELECT"]  # inside the function cortex_sessions_append_one
    else:
        assert statements == ["SELECT", "INSERT", "UPDATE"]  # lock, insert, counters; no re-read
    row = stored(session)
    for name in ("message_count", "last_seq", "last_message", "updated_at", "title", "scope"):
        assert getattr(result.session, name) == getattr(row, name), name


def test_append_many_assigns_consecutive_seqs_in_order(session):
    append(session, {"role": "user", "content": "a"})
    result = append(
        session,
        {"role": "assistant", "content": [{"type": "text", "text": "b"}]},
        MessageInput(role="user", content="c", metadata={"k": 1}),
    )
    assert [m.seq for m in result.messages] == [2, 3]
    assert list(Message.objects.order_by("seq").values_list("seq", flat=True)) == [1, 2, 3]
    assert (stored(session).message_count, stored(session).last_message) == (3, "c")


def test_non_text_blocks_are_kept_as_given(session):
    blocks = [
        {"type": "image", "url": "https://x/y.png", "meta": {"w": 3}},
        {"type": "text", "text": "cap"},
    ]
    message = append(session, {"role": "user", "content": blocks}).messages[0]
    assert Message.objects.get(pk=message.pk).content == blocks
    assert message.text == "cap"


@pytest.mark.parametrize(
    ("message", "error", "code"),
    [
        ({"role": "robot", "content": "x"}, InvalidRole, "invalid_role"),
        ({"role": None, "content": "x"}, InvalidRole, "invalid_role"),
        ({"role": "user", "content": "x", "source": "web"}, InvalidSource, "invalid_source"),
        ({"role": "user", "content": ""}, EmptyContent, "empty_content"),
        ({"role": "user", "content": "   \n"}, EmptyContent, "empty_content"),
        ({"role": "user", "content": []}, EmptyContent, "empty_content"),
        ({"role": "user"}, InvalidContent, "invalid_content"),
        ({"role": "user", "content": 5}, InvalidContent, "invalid_content"),
        ({"role": "user", "content": [{"text": "no type"}]}, InvalidContent, "invalid_content"),
        ({"role": "user", "content": [{"type": "text"}]}, InvalidContent, "invalid_content"),
        ({"role": "user", "content": ["bare"]}, InvalidContent, "invalid_content"),
        ({"role": "user", "content": "a\x00b"}, NulCharacter, "nul_character"),
        ({"role": "user", "content": "a\ud800b"}, InvalidInput, "invalid_text"),
        # In a choice as in every string: NUL and lone surrogates have codes of their own.
        ({"role": "us\x00er", "content": "x"}, NulCharacter, "nul_character"),
        ({"role": "user\udc00", "content": "x"}, InvalidInput, "invalid_text"),
        ({"role": "user", "content": "x", "source": "\x00"}, NulCharacter, "nul_character"),
        (
            {"role": "user", "content": [{"type": "image", "alt": "\x00"}]},
            NulCharacter,
            "nul_character",
        ),
        ({"role": "user", "content": "x", "metadata": [1]}, InvalidMetadata, "invalid_metadata"),
        (
            {"role": "user", "content": "x", "metadata": {"k": "\x00"}},
            NulCharacter,
            "nul_character",
        ),
        ({"role": "user", "content": "x", "seq": 7}, InvalidInput, "invalid"),
    ],
)
def test_bad_message_raises_a_coded_error_and_writes_nothing(session, message, error, code):
    with pytest.raises(error) as info:
        append(session, {"role": "user", "content": "fine"}, message)
    assert info.value.code == code
    assert Message.objects.count() == 0
    assert (stored(session).message_count, stored(session).last_seq) == (0, 0)


@pytest.mark.parametrize(
    ("message", "field", "detail"),
    [
        (
            {"role": "robot", "content": "x"},
            "role",
            "role must be one of user, assistant, system, tool; got 'robot'.",
        ),
        (
            {"role": "user", "content": "x", "source": "web"},
            "source",
            "source must be one of user, checkpoint, session-reference, host; got 'web'.",
        ),
    ],
)
def test_a_choice_outside_its_values_is_refused_naming_the_field_and_the_values(
    session, message, field, detail
):
    with pytest.raises(InvalidInput) as info:
        append(session, message)
    assert (info.value.field, str(info.value)) == (field, detail)


@override_settings(CORTEX_SESSIONS={"MAX_MESSAGE_BYTES": 100})
def test_message_over_max_message_bytes_is_refused(session):
    append(session, {"role": "user", "content": "x" * 60})
    with pytest.raises(MessageTooLarge) as info:
        append(session, {"role": "user", "content": "é" * 60})  # 120 bytes of UTF-8
    assert info.value.code == "message_too_large"
    assert stored(session).message_count == 1


def test_empty_message_list_is_refused(session):
    with pytest.raises(InvalidInput):
        append(session)
    with pytest.raises(InvalidInput):
        services.append_messages(scope=SCOPE, session_id=session.pk, messages={"role": "user"})


def test_append_to_a_session_out_of_scope_is_not_found_and_writes_nothing(session):
    with pytest.raises(SessionNotFound):
        append(session, {"role": "user", "content": "x"}, scope="org=acme/user=bob")
    assert Message.objects.count() == 0


def test_last_message_comes_from_conversation_messages_only(session):
    append(session, {"role": "user", "content": "question"})
    append(
        session,
        {"role": "tool", "content": "tool output"},
        {"role": "system", "content": "system prompt"},
        {"role": "user", "content": "injected", "source": "host"},
        {"role": "user", "content": "snapshot", "source": "session-reference"},
        {"role": "assistant", "content": [{"type": "image", "url": "u"}]},
    )
    assert (stored(session).message_count, stored(session).last_message) == (6, "question")
    append(session, {"role": "user", "content": "summary", "source": "checkpoint"})
    assert stored(session).last_message == "summary"


@override_settings(CORTEX_SESSIONS={"LAST_MESSAGE_PREVIEW_CHARS": 5})
def test_last_message_is_cut_to_the_preview_length_with_an_ellipsis(session):
    append(session, {"role": "assistant", "content": "abcdefgh"})
    assert stored(session).last_message == "abcde…"
    append(session, {"role": "assistant", "content": "abcde"})
    assert stored(session).last_message == "abcde"


def test_preview_never_splits_a_character():
    assert preview("ab🎉cd", 3) == "ab🎉…"
    assert preview("abe\u0301cd", 3) == "ab…"  # e + combining acute stay together
    assert preview("a👩\u200d👩\u200d👧b", 3) == "a…"  # family emoji is not cut apart
    assert preview("日本語のテキスト", 3) == "日本語…"


def test_delete_message_updates_counters_and_never_reuses_its_seq(session):
    append(session, {"role": "user", "content": "one"}, {"role": "assistant", "content": "two"})
    after = services.delete_message(scope=SCOPE, session_id=session.pk, seq=2)
    assert (after.message_count, after.last_message) == (1, "one")
    result = append(session, {"role": "user", "content": "three"})
    assert result.messages[0].seq == 3
    with pytest.raises(MessageNotFound):
        services.delete_message(scope=SCOPE, session_id=session.pk, seq=2)


def test_delete_message_moves_the_counters_as_every_delete_does_without_reading_them_back(
    session,
):
    """delete_message moves the counters through the one helper the undo services use: the
    session it returns holds what was stored, and no SELECT follows the counters' UPDATE."""
    append(session, {"role": "user", "content": "one"}, {"role": "assistant", "content": "two"})
    with CaptureQueriesContext(connection) as captured:
        after = services.delete_message(scope=SCOPE, session_id=session.pk, seq=2)
    sql = [query["sql"].lstrip() for query in captured.captured_queries]
    table = Session._meta.db_table
    update = max(i for i, text in enumerate(sql) if text.startswith("UPDATE") and table in text)
    assert not [text for text in sql[update + 1 :] if text.startswith("SELECT")]
    row = stored(session)
    assert (after.message_count, after.last_message, after.updated_at) == (
        row.message_count,
        row.last_message,
        row.updated_at,
    )


def test_clear_messages_zeroes_the_counters_and_keeps_seq_increasing(session):
    append(session, *[{"role": "user", "content": f"m{n}"} for n in range(4)])
    assert services.clear_messages(scope=SCOPE, session_id=session.pk) == 4
    assert (stored(session).message_count, stored(session).last_message) == (0, "")
    assert not Message.objects.exists()
    assert append(session, {"role": "user", "content": "again"}).messages[0].seq == 5


def test_list_messages_returns_newest_page_in_chronological_order(session):
    append(session, *[{"role": "user", "content": f"m{n}"} for n in range(1, 11)])

    def seqs(**kwargs):
        return [m.seq for m in services.list_messages(scope=SCOPE, session_id=session.pk, **kwargs)]

    assert seqs(limit=3) == [8, 9, 10]
    assert seqs(limit=3, before_seq=8) == [5, 6, 7]
    assert seqs(limit=3, after_seq=2) == [3, 4, 5]
    assert seqs(limit=50) == list(range(1, 11))
    with pytest.raises(InvalidInput):
        seqs(limit=0)


@pytest.mark.parametrize(
    "kwargs", [{"after_seq": "x"}, {"before_seq": -1}, {"limit": 2**64}, {"after_seq": True}]
)
def test_bad_message_page_arguments_are_invalid_filter(session, kwargs):
    with pytest.raises(InvalidInput) as info:
        services.list_messages(scope=SCOPE, session_id=session.pk, **kwargs)
    assert info.value.code == "invalid_filter"


@pytest.mark.parametrize("seq", ["abc", 1.5, 0, True])
def test_delete_message_with_a_seq_that_is_not_a_positive_integer_deletes_nothing(session, seq):
    append(session, {"role": "user", "content": "keep"})
    with pytest.raises(InvalidInput):
        services.delete_message(scope=SCOPE, session_id=session.pk, seq=seq)
    assert stored(session).message_count == 1 == Message.objects.count()


def test_list_messages_out_of_scope_is_not_found(session):
    with pytest.raises(SessionNotFound):
        services.list_messages(scope="org=other", session_id=session.pk)


def test_recount_repairs_drift_and_reports_it(session):
    append(session, {"role": "user", "content": "real"})
    Session.objects.filter(pk=session.pk).update(message_count=42, last_message="stale")
    drifts = services.recount_sessions(scope=SCOPE)
    assert [(d.session_id, d.stored_count, d.actual_count) for d in drifts] == [(session.pk, 42, 1)]
    assert (stored(session).message_count, stored(session).last_message) == (1, "real")
    assert services.recount_sessions(scope=SCOPE) == []


@given(st.text(st.characters(blacklist_characters="\x00", blacklist_categories=["Cs"])))
@settings(max_examples=300)
def test_a_text_message_is_encoded_as_its_one_text_block(text):
    # A string's JSON is composed around the encoded string (the encoder's fast path): it must
    # be the very text the list of blocks encodes to, which is what is stored and measured.
    if not text.strip():
        return
    built = _build_message({"role": "user", "content": text}, 0, datetime.now(UTC))
    assert built.columns["content"] == [{"type": "text", "text": text}]
    assert built.content_json == json_text(built.columns["content"], field="content")


@pytest.mark.parametrize("count", [1, 2], ids=["one", "two"])
@pytest.mark.parametrize(
    "created_at",
    [
        datetime(1, 1, 1, tzinfo=timezone(timedelta(hours=5, minutes=30))),  # year 0 in UTC
        datetime(9999, 12, 31, 23, tzinfo=timezone(timedelta(hours=-5))),  # year 10000 in UTC
    ],
    ids=["before-year-1", "after-year-9999"],
)
def test_a_created_at_outside_the_years_1_to_9999_in_utc_is_refused(session, created_at, count):
    """Every database stores ``created_at`` in UTC: an aware time whose UTC lies outside the
    years 1-9999 is an ``InvalidInput`` (PostgreSQL stored it as a BC time no read could load),
    and nothing is written."""
    messages = [{"role": "user", "content": "a", "created_at": created_at}]
    messages += [{"role": "assistant", "content": "b"}] * (count - 1)

    with pytest.raises(InvalidInput) as raised:
        services.append_messages(scope=SCOPE, session_id=session.pk, messages=messages)

    assert raised.value.field == "created_at"
    session.refresh_from_db()
    assert (session.message_count, Message.objects.filter(session=session).count()) == (0, 0)
