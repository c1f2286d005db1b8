"""The API's keyed append of one message records its key in the append's own statement on
PostgreSQL (docs/design.md §12.1, §14): the statements of a plain append, every guarantee of
``run_once``, and a replay that answers the first body byte for byte whichever path recorded
the key. API keys and service keys are two namespaces (an API key never replays a service
call's, nor the other way round)."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest
from django.db import DEFAULT_DB_ALIAS, connection
from django.test.utils import CaptureQueriesContext

from cortex_sessions import services
from cortex_sessions.models import IdempotencyKey, Message, Session
from cortex_sessions.services import _pg, keyed_append
from cortex_sessions.services.keyed_append import RECORDED_TAG, replay_recorded
from tests.api.conftest import session_url

MESSAGE = {"role": "user", "content": "pay invoice 42"}
RICH = {
    "role": "assistant",
    "content": [{"type": "text", "text": "Grüße, 見積もり ✓"}, {"type": "text", "text": "b"}],
    "metadata": {"z": 1, "a": [1.5, None, True], "ключ": "значение"},
    "usage": {"input_tokens": 12, "output_tokens": 7, "model": "m-1", "cost": "0.001200"},
}

one_statement = pytest.mark.skipif(
    not _pg.enabled(DEFAULT_DB_ALIAS), reason="the one-statement append: psycopg 3 only"
)


@pytest.fixture
def session(alice_scope) -> Session:
    return services.create_session(scope=alice_scope, agent_id="a")


def post(api, session, body, key="k"):
    headers = {} if key is None else {"Idempotency-Key": key}
    return api.post(session_url(session.pk, "messages/"), body, format="json", headers=headers)


@one_statement
@pytest.mark.postgres_only
@pytest.mark.django_db(transaction=True)
def test_a_keyed_append_of_one_message_runs_the_statements_of_a_plain_one(api, session):
    post(api, session, MESSAGE, key=None)  # warm: the scope's and the user's first reads
    with CaptureQueriesContext(connection) as plain:
        assert post(api, session, MESSAGE, key=None).status_code == 201
    with CaptureQueriesContext(connection) as keyed:
        assert post(api, session, MESSAGE).status_code == 201

    table = IdempotencyKey._meta.db_table
    assert len(keyed.captured_queries) == len(plain.captured_queries)
    (statement,) = [q["sql"] for q in keyed.captured_queries if table in q["sql"]]
    assert f"{_pg.APPEND_ONE}(" in statement
    row = IdempotencyKey.objects.get()
    assert (row.scope, row.endpoint, row.key, row.status_code) == (
        session.scope,
        f"api:POST {session_url(session.pk, 'messages/')}",
        "k",
        201,
    )
    assert json.loads(row.response)[0] == RECORDED_TAG


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("body", [MESSAGE, RICH, {**MESSAGE, "created_at": "2020-02-03T04:05:06Z"}])
def test_a_replay_answers_the_first_body_byte_for_byte_after_the_session_moved_on(
    api, session, body
):
    first = post(api, session, body)
    services.append_messages(scope=session.scope, session_id=session.pk, messages=[MESSAGE])
    services.pop_message(scope=session.scope, session_id=session.pk)
    services.pop_message(scope=session.scope, session_id=session.pk)  # the first's own message
    services.update_session(scope=session.scope, session_id=session.pk, title="renamed")
    again = post(api, session, body)

    assert first.status_code == again.status_code == 201, again.content
    assert again.content == first.content
    assert again["Idempotent-Replayed"] == "true" and "Idempotent-Replayed" not in first
    assert not Message.objects.exists()  # the replay wrote nothing back
    assert IdempotencyKey.objects.count() == 1


@pytest.mark.django_db(transaction=True)
def test_a_key_recorded_by_one_path_replays_on_the_other(api, session, monkeypatch):
    # Recorded by the one statement (on PostgreSQL), replayed by run_once (as inside a
    # caller's transaction); and recorded by run_once, replayed by the one statement's path.
    first = post(api, session, MESSAGE, key="one")
    with monkeypatch.context() as patched:
        patched.setattr(keyed_append, "_in_callers_transaction", lambda alias: True)
        again = post(api, session, MESSAGE, key="one")
        general = post(api, session, MESSAGE, key="general")
    replayed = post(api, session, MESSAGE, key="general")

    assert again.content == first.content and again["Idempotent-Replayed"] == "true"
    assert replayed.content == general.content and replayed["Idempotent-Replayed"] == "true"
    assert "Idempotent-Replayed" not in general
    assert Message.objects.count() == 2 and IdempotencyKey.objects.count() == 2
    responses = {row.key: row.response for row in IdempotencyKey.objects.all()}
    assert json.loads(responses["general"]) == general.json()  # the answer's text


@pytest.mark.django_db(transaction=True)
def test_api_keys_and_service_keys_are_two_namespaces(api, session):
    services.append_messages(
        scope=session.scope, session_id=session.pk, messages=[MESSAGE], idempotency_key="K"
    )
    api_first = post(api, session, MESSAGE, key="K")
    service_again = services.append_messages(
        scope=session.scope, session_id=session.pk, messages=[MESSAGE], idempotency_key="K"
    )
    api_again = post(api, session, MESSAGE, key="K")

    assert api_first.status_code == 201 and "Idempotent-Replayed" not in api_first
    assert [m.seq for m in service_again.messages] == [1]  # the service's replay
    assert api_again["Idempotent-Replayed"] == "true" and api_again.content == api_first.content
    assert api_first.json()["messages"][0]["seq"] == 2
    assert Message.objects.count() == 2
    endpoints = sorted(row.endpoint for row in IdempotencyKey.objects.all())
    assert endpoints == [
        f"api:POST {session_url(session.pk, 'messages/')}",
        f"service:append_messages:{session.pk}",
    ]


@pytest.mark.django_db(transaction=True)
def test_a_reused_key_a_missing_session_and_bad_input_write_nothing(api, session, missing_id):
    assert post(api, session, MESSAGE).status_code == 201
    reused = post(api, session, {"role": "user", "content": "other"})
    assert reused.status_code == 422 and reused.json()["code"] == "idempotency_key_reused"
    missing = api.post(
        session_url(missing_id, "messages/"),
        MESSAGE,
        format="json",
        headers={"Idempotency-Key": "m"},
    )
    assert missing.status_code == 404
    bad = post(api, session, {"role": "nobody", "content": "x"}, key="b")
    assert bad.status_code == 400
    assert Message.objects.count() == 1 and IdempotencyKey.objects.count() == 1
    assert post(api, session, MESSAGE, key="b").status_code == 201  # the key stayed free


@pytest.mark.django_db(transaction=True)
def test_an_archived_session_is_409_and_keeps_the_key_free(api, session):
    services.archive_session(scope=session.scope, session_id=session.pk)
    response = post(api, session, MESSAGE)
    assert response.status_code == 409 and response.json()["code"] == "session_archived"
    assert not IdempotencyKey.objects.exists()


def test_a_response_the_one_statement_did_not_record_is_not_rebuilt():
    assert replay_recorded("7b4e5b0f-2c5c-4a43-a6b0-3d1d0e1c1a11", '{"session": {}}') is None
    assert replay_recorded("7b4e5b0f-2c5c-4a43-a6b0-3d1d0e1c1a11", "[12]") is None


@one_statement
@pytest.mark.postgres_only
@pytest.mark.django_db(transaction=True)
def test_the_recorded_message_keeps_its_time_and_tokens(api, session, settings):
    first = post(api, session, MESSAGE)
    # A token counter changed in between does not change the replay.
    counter = "tests.reliability.test_keyed_append_api.many_tokens"
    settings.CORTEX_SESSIONS = {**settings.CORTEX_SESSIONS, "TOKEN_COUNTER": counter}
    again = post(api, session, MESSAGE)
    assert again.content == first.content
    created = datetime.fromisoformat(again.json()["messages"][0]["created_at"])
    assert created.tzinfo is not None and created <= datetime.now(UTC)
    assert again.json()["messages"][0]["token_count"] != 999
    assert post(api, session, MESSAGE, key="new").json()["messages"][0]["token_count"] == 999


def many_tokens(role: str, content: object) -> int:
    return 999


def _archive(session):
    services.archive_session(scope=session.scope, session_id=session.pk)


def _expire(session):
    Session.objects.filter(pk=session.pk).update(expires_at=datetime(2000, 1, 1, tzinfo=UTC))


def _delete(session):
    services.delete_session(scope=session.scope, session_id=session.pk)


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    "gone", [_archive, _expire, _delete], ids=["archived", "expired", "deleted"]
)
def test_a_replay_answers_201_after_the_session_was_archived_expired_or_deleted(api, session, gone):
    """A client retrying a stored write (e.g. after ``write_outcome_unknown``) gets its first
    answer whatever happened to the session since, on every database: the one-statement path
    matches no live session and hands the call to ``run_once``, which replays."""
    first = post(api, session, MESSAGE)
    gone(session)
    again = post(api, session, MESSAGE)
    assert (again.status_code, again.content) == (201, first.content)
    assert again.headers["Idempotent-Replayed"] == "true"


@pytest.mark.django_db(transaction=True)
def test_a_service_replay_of_one_message_after_the_session_was_archived(session):
    """The service's keyed append of one message replays as one of several does, on every
    database (a replay reads the session back: an expired or deleted one is not found)."""
    message = services.MessageInput(role="user", content="pay invoice 42")
    first = services.append_messages(
        scope=session.scope, session_id=session.pk, messages=[message], idempotency_key="k"
    )
    _archive(session)
    again = services.append_messages(
        scope=session.scope, session_id=session.pk, messages=[message], idempotency_key="k"
    )
    assert [m.pk for m in again.messages] == [m.pk for m in first.messages]
