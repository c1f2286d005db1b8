"""An append larger than one statement carries (``services.statement_size``, docs/design.md
§12.6, §15): on PostgreSQL past what one call of the append function's ``jsonb`` array holds,
on MySQL/MariaDB past the server's ``max_allowed_packet``. The messages are inserted in as
many statements as needed, in one transaction, and stored as given; a message no statement
could carry is refused before anything is written."""

from __future__ import annotations

import json

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from cortex_sessions import services
from cortex_sessions.exceptions import MessageTooLarge
from cortex_sessions.models import Message, Session
from cortex_sessions.services import _pg, statement_size
from cortex_sessions.services.message_input import build_message

pytestmark = pytest.mark.django_db

SCOPE = "org=acme/user=1"


@pytest.fixture
def session():
    return services.create_session(scope=SCOPE, agent_id="agent-1")


def _built(item, index):
    return build_message(item, index, timezone.now())


def _messages(count: int, characters: int) -> list[dict]:
    texts = [f"{n} " + 'é\\"x' * (characters // 4) for n in range(count)]
    return [
        {"role": "user" if n % 2 == 0 else "assistant", "content": text}
        for n, text in enumerate(texts)
    ]


def _inserts(captured) -> list[str]:
    return [q["sql"] for q in captured.captured_queries if "INSERT INTO" in q["sql"]]


def _stored_as_given(session, messages, before=0):
    stored = list(Message.objects.filter(session=session).order_by("seq"))
    assert [m.seq for m in stored] == list(range(1, before + len(messages) + 1))
    assert [m.text for m in stored[before:]] == [m["content"] for m in messages]
    row = Session.objects.get(pk=session.pk)
    assert (row.message_count, row.last_seq) == (before + len(messages),) * 2
    assert messages[-1]["content"].startswith(row.last_message.removesuffix("…"))


def _quoted(value) -> int:
    """The bytes of ``value`` as Django's MySQL backend sends it: ``json.dumps`` (non-ASCII
    characters as escapes), then quotes and backslashes escaped by the driver."""
    text = json.dumps(value)
    return len(text.replace("\\", "\\\\").replace('"', '\\"').encode())


@pytest.mark.parametrize("text", ['a"b\\c', "é😀", "ソフト\\u0041", "plain"])
def test_statement_bytes_bound_the_quoted_json(text):
    built = _built({"role": "user", "content": text, "metadata": {"k": text}}, 0)
    quoted = _quoted(built.columns["content"]) + _quoted(built.columns["metadata"])
    assert statement_size.statement_bytes(built) >= statement_size.ROW_BYTES + quoted
    assert statement_size.statement_bytes(built) <= statement_size.ROW_BYTES + 3 * quoted


def test_fits_one_call_counts_utf8_bytes_only_when_characters_cannot_tell(monkeypatch):
    built = [_built(m, index=0) for m in _messages(2, 400)]
    size = sum(len(t.encode()) for m in built for t in (m.content_json, m.metadata_json))
    for limit, fits in [(size * 4, True), (size, True), (size - 1, False), (100, False)]:
        monkeypatch.setattr(statement_size, "ONE_CALL_BYTES", limit)
        assert statement_size.fits_one_call(built) is fits, limit


def test_batches_cut_where_the_next_message_would_pass_the_limit(monkeypatch):
    built = [_built(m, index=0) for m in _messages(5, 200)]
    size = statement_size.statement_bytes(built[0])
    monkeypatch.setattr(statement_size, "_limit", lambda alias, total: 2 * size + size // 2)
    runs = statement_size.insert_batches("default", built)
    assert [(run.start, run.stop) for run in runs] == [(0, 2), (2, 4), (4, 5)]
    monkeypatch.setattr(statement_size, "_limit", lambda alias, total: 10 * size)
    assert statement_size.insert_batches("default", built) == [slice(0, 5)]


@pytest.mark.django_db(transaction=True)
def test_an_append_past_one_statement_is_inserted_in_several_in_one_transaction(
    monkeypatch, session
):
    first = _messages(1, 40)
    services.append_messages(scope=SCOPE, session_id=session.pk, messages=first)
    messages = _messages(7, 2000)
    size = statement_size.statement_bytes(_built(messages[0], index=0))
    monkeypatch.setattr(statement_size, "ONE_CALL_BYTES", 1000)  # PostgreSQL: the ORM path
    monkeypatch.setattr(statement_size, "_limit", lambda alias, total: 3 * size)
    with CaptureQueriesContext(connection) as captured:
        result = services.append_messages(scope=SCOPE, session_id=session.pk, messages=messages)
    message_inserts = [sql for sql in _inserts(captured) if Message._meta.db_table in sql]
    assert len(message_inserts) == 3  # 3 + 3 + 1
    if _pg.enabled("default"):
        assert not any(_pg.APPEND_MANY in q["sql"] for q in captured.captured_queries)
    assert [m.seq for m in result.messages] == list(range(2, 9))
    assert result.session.message_count == 8
    _stored_as_given(session, messages, before=1)


@pytest.mark.django_db(transaction=True)
def test_a_message_no_statement_carries_is_refused_and_nothing_is_written(monkeypatch, session):
    messages = _messages(3, 2000)
    monkeypatch.setattr(statement_size, "ONE_CALL_BYTES", 1000)
    monkeypatch.setattr(statement_size, "_limit", lambda alias, total: 3000)
    with pytest.raises(MessageTooLarge) as caught:
        services.append_messages(scope=SCOPE, session_id=session.pk, messages=messages)
    assert caught.value.code == "message_too_large" and caught.value.field == "content"
    assert "index 0" in str(caught.value)
    assert not Message.objects.exists()
    assert Session.objects.get(pk=session.pk).message_count == 0


@pytest.mark.skipif(connection.vendor != "mysql", reason="MySQL/MariaDB's max_allowed_packet")
@pytest.mark.django_db(transaction=True)
def test_an_append_past_max_allowed_packet_is_stored_whole_on_mysql(session):
    # 20 messages of 1 MiB: more than MariaDB's default 16 MiB packet in one INSERT, which the
    # server refused (1153) or dropped the connection for (2006).
    with connection.cursor() as cursor:
        cursor.execute("SELECT @@max_allowed_packet")
        (packet,) = cursor.fetchone()
    text = "x" * ((1 << 20) - 100)
    count = packet // len(text) + 4
    if count > 1000:  # MAX_MESSAGES_PER_APPEND
        pytest.skip(f"max_allowed_packet is {packet} bytes")
    messages = [{"role": "user", "content": f"{n} {text}"} for n in range(count)]
    with CaptureQueriesContext(connection) as captured:
        services.append_messages(scope=SCOPE, session_id=session.pk, messages=messages)
    assert len(_inserts(captured)) >= 2
    _stored_as_given(session, messages)


@pytest.mark.skipif(connection.vendor == "mysql", reason="PostgreSQL and SQLite")
def test_a_recorded_response_is_not_measured_where_a_value_may_be_a_gigabyte(monkeypatch):
    # A keyed append of 270 messages of 1 MB is stored and replayed on PostgreSQL: its
    # response is not measured against any statement limit there.
    def read(alias, total):
        raise AssertionError("no limit is read")

    monkeypatch.setattr(statement_size, "_limit", read)
    statement_size.check_text_fits("default", "é" * 1000, what="The response")


@pytest.mark.skipif(connection.vendor != "mysql", reason="MySQL/MariaDB's max_allowed_packet")
def test_a_recorded_response_is_measured_against_the_servers_packet(monkeypatch):
    monkeypatch.setattr(statement_size, "_limit", lambda alias, total: 4000)
    statement_size.check_text_fits("default", "x" * 1000, what="The response")
    with pytest.raises(MessageTooLarge, match="The response takes up to"):
        statement_size.check_text_fits("default", "é" * 1000, what="The response")
