"""Duplicates of a keyed write replay the first; they never run their own operation first
(docs/design.md §12.1, case ``keyed-duplicates-race``).

The key's row is claimed first in the write's transaction, so a duplicate in flight waits on it
and then replays the first answer (or, if the first rolled back, runs as the first); past the
lock wait timeout it is 409 ``idempotency_key_in_progress``. A key is bound to the session, not
to how its id is spelt in the URL.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator

import pytest
from django.db import DEFAULT_DB_ALIAS, DatabaseError, connection, connections
from django.utils import timezone
from rest_framework.test import APIClient

from cortex_sessions import services
from cortex_sessions.models import IdempotencyKey, Message, Session
from cortex_sessions.services.idempotency import fingerprint
from tests.api.conftest import BASE, session_url
from tests.test_concurrency import run_together

MESSAGE = {"role": "user", "content": "pay invoice 42"}


def post(api, url, body, key):
    return api.post(url, body, format="json", headers={"Idempotency-Key": key})


def spellings(pk: uuid.UUID) -> list[str]:
    text = str(pk)
    return [text, text.upper(), pk.hex, "{" + text + "}", "urn:uuid:" + text]


# -- one session, five spellings (every database) --------------------------------------------------


@pytest.mark.django_db
@pytest.mark.parametrize("suffix", ["messages/", "messages/pop/"])
def test_one_key_to_one_session_spelt_five_ways_writes_once(api, alice_scope, suffix):
    session = services.create_session(scope=alice_scope, agent_id="a")
    services.append_messages(scope=alice_scope, session_id=session.pk, messages=[MESSAGE] * 5)
    body = MESSAGE if suffix == "messages/" else {}

    answers = [post(api, session_url(pk, suffix), body, "one-key") for pk in spellings(session.pk)]

    assert {a.status_code for a in answers} == {201 if suffix == "messages/" else 200}
    assert len({a.content for a in answers}) == 1
    assert [a.get("Idempotent-Replayed") for a in answers] == [None] + ["true"] * 4
    session.refresh_from_db()
    assert session.message_count == (6 if suffix == "messages/" else 4)
    assert IdempotencyKey.objects.count() == 1


@pytest.mark.django_db
def test_an_id_that_is_not_a_uuid_keeps_its_path_and_is_not_found(api):
    response = post(api, session_url("not-a-uuid", "messages/"), MESSAGE, "k")
    assert response.status_code == 404
    assert not IdempotencyKey.objects.exists()


# -- concurrent duplicates (PostgreSQL, MariaDB: separate connections) -----------------------------


def _client(user) -> APIClient:
    api = APIClient()
    api.force_authenticate(user)
    return api


@pytest.mark.concurrent_db
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("operation", ["pop", "append", "create"])
def test_four_concurrent_duplicates_write_once_and_answer_alike(alice, alice_scope, operation):
    session = services.create_session(scope=alice_scope, agent_id="a")
    services.append_messages(scope=alice_scope, session_id=session.pk, messages=[MESSAGE])
    url, body = {
        "pop": (session_url(session.pk, "messages/pop/"), {}),
        "append": (session_url(session.pk, "messages/"), MESSAGE),
        "create": (BASE, {"agent_id": "b"}),
    }[operation]

    def send(index: int):
        response = post(_client(alice), url, body, "same-key")
        return response.status_code, response.content

    results = run_together(4, send)
    connections.close_all()

    assert len(set(results)) == 1, results
    assert results[0][0] == (201 if operation != "pop" else 200)
    session.refresh_from_db()
    expected_count = {"pop": 0, "append": 2, "create": 1}[operation]
    assert session.message_count == Message.objects.filter(session=session).count()
    assert session.message_count == expected_count
    assert Session.objects.count() == (2 if operation == "create" else 1)
    assert IdempotencyKey.objects.count() == 1


@pytest.fixture
def other_connection() -> Iterator:
    other = connections.create_connection(DEFAULT_DB_ALIAS)
    yield other
    other.close()


def _hold_claim(other, scope: str, url: str, *, body=None, response: str = "") -> None:
    """Insert the row of key ``k`` for ``POST url`` on ``other``, in a transaction left open
    (a first call in flight), with the fingerprint ``body`` has."""
    key_column = "`key`" if other.vendor == "mysql" else "key"
    other.set_autocommit(False)
    with other.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {IdempotencyKey._meta.db_table} "
            f"(scope, endpoint, {key_column}, fingerprint, status_code, response, created_at) "
            "VALUES (%s, %s, %s, %s, %s, %s, %s)",
            [
                str(scope),
                f"api:POST {url}",
                "k",
                fingerprint({"body": body, "query": []}),
                201,
                response,
                timezone.now(),
            ],
        )


@pytest.mark.concurrent_db
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("first", ["rolls back", "commits"])
def test_a_duplicate_waits_for_the_first_then_runs_or_replays(
    alice, alice_scope, other_connection, first
):
    session = services.create_session(scope=alice_scope, agent_id="a")
    url = session_url(session.pk, "messages/")
    _hold_claim(other_connection, alice_scope, url, body=MESSAGE, response='{"first": 1}')
    answers = []
    started = threading.Event()

    def duplicate():
        started.set()
        try:
            answers.append(post(_client(alice), url, MESSAGE, "k"))
        finally:
            connections.close_all()

    thread = threading.Thread(target=duplicate)
    thread.start()
    started.wait(30)
    thread.join(0.5)  # usually blocked on the key by now; the outcome is the same either way
    if first == "commits":
        other_connection.commit()
    else:
        other_connection.rollback()
    thread.join(60)

    (answer,) = answers
    if first == "commits":
        assert answer.status_code == 201 and answer["Idempotent-Replayed"] == "true"
        assert answer.json() == {"first": 1}
        assert not Message.objects.exists()
    else:
        assert answer.status_code == 201 and "Idempotent-Replayed" not in answer
        assert Message.objects.count() == 1
    assert IdempotencyKey.objects.count() == 1


#: How the request's connection is told to stop waiting for a lock soon.
LOCK_TIMEOUT = {
    "postgresql": "SET lock_timeout = '150ms'",
    "mysql": "SET SESSION innodb_lock_wait_timeout = 1",
}


@pytest.mark.concurrent_db
@pytest.mark.django_db(transaction=True)
def test_a_duplicate_past_the_lock_timeout_is_409_in_progress(api, alice_scope, other_connection):
    session = services.create_session(scope=alice_scope, agent_id="a")
    url = session_url(session.pk, "messages/")
    _hold_claim(other_connection, alice_scope, url, body=MESSAGE)
    try:
        with connection.cursor() as cursor:
            cursor.execute(LOCK_TIMEOUT[connection.vendor])
        response = post(api, url, MESSAGE, "k")
    finally:
        other_connection.rollback()
        connection.close()

    assert response.status_code == 409, response.content
    assert response.json()["code"] == "idempotency_key_in_progress"
    assert not Message.objects.exists()


#: A deadlock as each database reports it (PostgreSQL SQLSTATE 40P01, InnoDB 1213).
DEADLOCK = {
    "postgresql": "DO $$ BEGIN RAISE EXCEPTION 'injected' USING ERRCODE = 'deadlock_detected'; "
    "END $$",
    "mysql": "SIGNAL SQLSTATE '40001' SET MYSQL_ERRNO = 1213, MESSAGE_TEXT = 'injected'",
}


@pytest.mark.concurrent_db
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("body", [MESSAGE, [MESSAGE]], ids=["one message", "a list"])
def test_a_deadlock_on_the_key_is_retried_and_writes_once(api, alice_scope, body):
    """InnoDB deadlocks duplicates that waited for a first call that rolled back; the claim
    runs again (here the server raises the deadlock at the first statement writing the key:
    ``run_once``'s claim, or on PostgreSQL the one-statement append of one message, which
    then leaves the key to ``run_once``)."""
    session = services.create_session(scope=alice_scope, agent_id="a")
    table = IdempotencyKey._meta.db_table
    raised: list[BaseException] = []

    def deadlock_once(execute, sql, params, many, context):
        if not raised and "INSERT" in sql.upper() and table in sql:
            try:
                execute(DEADLOCK[connection.vendor], None, False, context)
            except DatabaseError as exc:
                raised.append(exc)
                raise
        return execute(sql, params, many, context)

    with connection.execute_wrapper(deadlock_once):
        response = post(api, session_url(session.pk, "messages/"), body, "k")

    assert raised
    assert response.status_code == 201, response.content
    assert Message.objects.count() == 1
    assert IdempotencyKey.objects.count() == 1


@pytest.mark.django_db
def test_the_schema_declares_the_new_codes_on_every_keyed_operation(settings, client):
    settings.ROOT_URLCONF = "example_project.urls"
    paths = client.get("/api/schema/", {"format": "json"}).json()["paths"]
    keyed = [
        "/api/cortex/sessions/",
        "/api/cortex/sessions/{id}/messages/",
        "/api/cortex/sessions/{id}/fork/",
        "/api/cortex/sessions/{id}/messages/pop/",
    ]
    for path in keyed:
        responses = paths[path]["post"]["responses"]
        assert "idempotency_key_in_progress" in responses["409"]["description"], path
        assert "write_outcome_unknown" in responses["503"]["description"], path
