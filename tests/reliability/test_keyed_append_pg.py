"""A keyed one-message append on PostgreSQL records its key in the append's own statement
(docs/design.md §12.1, §14): one statement instead of a read, a claim, the append, the
record and the transaction's BEGIN and COMMIT, with every guarantee of ``run_once``."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator

import pytest
from django.db import DEFAULT_DB_ALIAS, connection, connections, transaction
from django.test.utils import CaptureQueriesContext

from cortex_sessions import services
from cortex_sessions.exceptions import (
    IdempotencyKeyInProgress,
    IdempotencyKeyReused,
    SessionNotFound,
)
from cortex_sessions.models import IdempotencyKey, Message
from cortex_sessions.services import _pg
from cortex_sessions.services.idempotency import fingerprint
from tests.test_concurrency import run_together

pytestmark = pytest.mark.skipif(
    not _pg.enabled(DEFAULT_DB_ALIAS), reason="the one-statement append: psycopg 3 only"
)

SCOPE = "org=acme/user=1"
MESSAGE = {"role": "user", "content": "pay invoice 42"}


def _append(session, key="k", messages=(MESSAGE,)):
    return services.append_messages(
        scope=SCOPE, session_id=session.pk, messages=list(messages), idempotency_key=key
    )


@pytest.mark.django_db(transaction=True)
def test_a_keyed_append_is_one_statement_that_records_the_key():
    session = services.create_session(scope=SCOPE, agent_id="a")
    with CaptureQueriesContext(connection) as captured:
        result = _append(session)
    (statement,) = [query["sql"] for query in captured.captured_queries]
    assert f"{_pg.APPEND_ONE}(" in statement and IdempotencyKey._meta.db_table in statement
    row = IdempotencyKey.objects.get()
    assert (row.scope, row.endpoint, row.key, row.status_code) == (
        SCOPE,
        f"service:append_messages:{session.pk}",
        "k",
        0,
    )
    assert json.loads(row.response) == [result.messages[0].pk]  # what run_once records
    replayed = _append(session)
    assert [m.pk for m in replayed.messages] == [result.messages[0].pk]
    assert replayed.session.message_count == 1 and Message.objects.count() == 1


@pytest.mark.django_db(transaction=True)
def test_the_key_row_matches_what_run_once_records():
    # The same append on the general path (inside a caller's transaction) records the same
    # row: the replay cannot tell which path wrote the key.
    session = services.create_session(scope=SCOPE, agent_id="a")
    fast = _append(session, key="fast")
    with transaction.atomic():
        slow = _append(session, key="slow")
    rows = {row.key: row for row in IdempotencyKey.objects.all()}
    for key, result in (("fast", fast), ("slow", slow)):
        assert json.loads(rows[key].response) == [result.messages[0].pk]
        assert rows[key].fingerprint == rows["fast"].fingerprint
    assert rows["fast"].fingerprint == fingerprint(
        [{**rows_input(), "explicit_time": False, "created_at": None}]
    )


def rows_input() -> dict:
    return {
        "role": "user",
        "source": "user",
        "content": [{"type": "text", "text": "pay invoice 42"}],
        "metadata": {},
    }


@pytest.mark.django_db(transaction=True)
def test_a_reused_key_and_a_missing_session_write_nothing():
    session = services.create_session(scope=SCOPE, agent_id="a")
    _append(session)
    with pytest.raises(IdempotencyKeyReused):
        _append(session, messages=[{"role": "user", "content": "other"}])
    other = services.create_session(scope="org=other", agent_id="a")
    with pytest.raises(SessionNotFound):  # out of scope: no key row either
        _append(other, key="k2")
    assert Message.objects.count() == 1 and IdempotencyKey.objects.count() == 1


@pytest.mark.concurrent_db
@pytest.mark.django_db(transaction=True)
def test_sixteen_concurrent_keyed_appends_write_once_and_answer_alike():
    session = services.create_session(scope=SCOPE, agent_id="a")
    results = run_together(16, lambda index: [m.pk for m in _append(session).messages])
    assert len({tuple(result) for result in results}) == 1
    assert Message.objects.filter(session=session).count() == 1
    session.refresh_from_db()
    assert (session.message_count, session.last_seq) == (1, 1)
    assert IdempotencyKey.objects.count() == 1


@pytest.fixture
def other_connection() -> Iterator:
    other = connections.create_connection(DEFAULT_DB_ALIAS)
    yield other
    other.close()


@pytest.mark.concurrent_db
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("first", ["commits", "rolls back"])
def test_a_duplicate_waits_for_the_first_then_replays_or_runs(other_connection, first):
    session = services.create_session(scope=SCOPE, agent_id="a")
    other_connection.set_autocommit(False)
    with other_connection.cursor() as cursor:  # a first call in flight, holding its key
        cursor.execute(
            f"INSERT INTO {IdempotencyKey._meta.db_table} (scope, endpoint, key, fingerprint,"
            " status_code, response, created_at) VALUES (%s, %s, 'k', %s, 0, '[]', now())",
            [
                SCOPE,
                f"service:append_messages:{session.pk}",
                fingerprint([{**rows_input(), "explicit_time": False, "created_at": None}]),
            ],
        )
    answers: list = []

    def duplicate() -> None:
        try:
            answers.append(_append(session))
        finally:
            connections.close_all()

    thread = threading.Thread(target=duplicate)
    thread.start()
    thread.join(0.5)  # blocked on the key by now; the outcome is the same either way
    assert answers == []
    if first == "commits":
        other_connection.commit()
    else:
        other_connection.rollback()
    thread.join(60)
    (answer,) = answers
    if first == "commits":
        assert answer.messages == [] and not Message.objects.exists()  # replayed "[]"
    else:
        assert [m.seq for m in answer.messages] == [1] and Message.objects.count() == 1
    assert IdempotencyKey.objects.count() == 1


@pytest.mark.concurrent_db
@pytest.mark.django_db(transaction=True)
def test_a_duplicate_past_the_lock_timeout_is_in_progress(other_connection):
    session = services.create_session(scope=SCOPE, agent_id="a")
    other_connection.set_autocommit(False)
    with other_connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {IdempotencyKey._meta.db_table} (scope, endpoint, key, fingerprint,"
            " status_code, response, created_at) VALUES (%s, %s, 'k', 'f', 0, '', now())",
            [SCOPE, f"service:append_messages:{session.pk}"],
        )
    try:
        with connection.cursor() as cursor:
            cursor.execute("SET lock_timeout = '150ms'")
        with pytest.raises(IdempotencyKeyInProgress):
            _append(session)
    finally:
        other_connection.rollback()
        connection.close()
    assert not Message.objects.exists()
    session.refresh_from_db()
    assert session.message_count == 0
