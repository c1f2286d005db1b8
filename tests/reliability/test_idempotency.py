"""``Idempotency-Key``: a retried creating call writes once and answers as the first did
(docs/design.md §12.1)."""

from __future__ import annotations

import io
from datetime import timedelta

import pytest
from django.core.management import call_command
from django.db import connection, connections
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from rest_framework.test import APIClient

from cortex_sessions import services
from cortex_sessions.checks import check_settings
from cortex_sessions.exceptions import IdempotencyKeyReused, InvalidIdempotencyKey
from cortex_sessions.models import IdempotencyKey, Message, Session
from tests.api.conftest import BASE, session_url
from tests.test_concurrency import run_together

pytestmark = pytest.mark.django_db

SCOPE = "org=acme/user=1"
MESSAGE = {"role": "user", "content": "pay invoice 42"}


@pytest.fixture
def session(alice_scope) -> Session:
    return services.create_session(scope=alice_scope, agent_id="a")


def post(api, url, body, key=None, **extra):
    headers = {"Idempotency-Key": key} if key is not None else {}
    return api.post(url, body, format="json", headers=headers, **extra)


# -- over HTTP -------------------------------------------------------------------------------------


def test_a_replayed_append_writes_once_and_answers_the_first_body_byte_for_byte(api, session):
    url = session_url(session.pk, "messages/")
    first = post(api, url, MESSAGE, key="retry-1")
    services.append_messages(scope=session.scope, session_id=session.pk, messages=[MESSAGE])
    again = post(api, url, MESSAGE, key="retry-1")

    assert first.status_code == again.status_code == 201
    assert again.content == first.content
    assert again["Idempotent-Replayed"] == "true"
    assert "Idempotent-Replayed" not in first
    assert Message.objects.filter(session=session).count() == 2  # the retry wrote nothing


def test_a_replayed_create_writes_one_session(api):
    first = post(api, BASE, {"agent_id": "a", "title": "t"}, key="create-1")
    again = post(api, BASE, {"title": "t", "agent_id": "a"}, key="create-1")  # key order differs
    assert first.status_code == again.status_code == 201
    assert again.content == first.content
    assert Session.objects.count() == 1


@pytest.mark.parametrize(
    "second", [{"role": "user", "content": "pay invoice 43"}, [MESSAGE, MESSAGE]]
)
def test_the_same_key_with_another_body_is_422_and_writes_nothing(api, session, second):
    url = session_url(session.pk, "messages/")
    assert post(api, url, MESSAGE, key="k").status_code == 201
    response = post(api, url, second, key="k")
    assert response.status_code == 422
    assert response.json()["code"] == "idempotency_key_reused"
    assert Message.objects.filter(session=session).count() == 1


def test_keys_are_per_endpoint_and_per_caller_scope(api, session, alice_scope, make_user):
    other = services.create_session(scope=alice_scope, agent_id="a")
    assert post(api, session_url(session.pk, "messages/"), MESSAGE, key="k").status_code == 201
    assert post(api, session_url(other.pk, "messages/"), MESSAGE, key="k").status_code == 201
    bob = APIClient()
    bob.force_authenticate(make_user("bob", org="acme"))
    assert post(api, BASE, {"agent_id": "a"}, key="k").status_code == 201
    response = post(bob, BASE, {"agent_id": "a"}, key="k")
    assert response.status_code == 201 and "Idempotent-Replayed" not in response
    assert Message.objects.count() == 2
    assert Session.objects.count() == 4


def test_a_failed_first_attempt_leaves_the_key_free(api, session):
    url = session_url(session.pk, "messages/")
    assert post(api, url, {"role": "user", "content": ""}, key="k").status_code == 400
    assert post(api, url, MESSAGE, key="k").status_code == 201
    assert post(api, url, MESSAGE, key="k")["Idempotent-Replayed"] == "true"
    assert Message.objects.count() == 1


@pytest.mark.parametrize("key", ["", "a b", "ключ", "x" * 256, "tab\there"])
def test_a_malformed_key_is_a_400(api, session, key):
    response = post(api, session_url(session.pk, "messages/"), MESSAGE, key=key)
    assert response.status_code == 400
    assert response.json()["code"] == "invalid_idempotency_key"
    assert not Message.objects.exists()


def test_an_expired_key_no_longer_replays(api, session, settings):
    settings.CORTEX_SESSIONS = {**settings.CORTEX_SESSIONS, "IDEMPOTENCY_TTL": 60}
    url = session_url(session.pk, "messages/")
    post(api, url, MESSAGE, key="k")
    IdempotencyKey.objects.update(created_at=timezone.now() - timedelta(seconds=61))
    assert "Idempotent-Replayed" not in post(api, url, MESSAGE, key="k")
    assert Message.objects.count() == 2


def test_without_a_key_the_append_path_runs_no_idempotency_statement(api, session):
    table = IdempotencyKey._meta.db_table
    with CaptureQueriesContext(connection) as queries:
        response = post(api, session_url(session.pk, "messages/"), MESSAGE)
    assert response.status_code == 201
    assert not [q for q in queries.captured_queries if table in q["sql"]]
    assert not IdempotencyKey.objects.exists()


def test_the_schema_documents_the_header(api, settings, client):
    settings.ROOT_URLCONF = "example_project.urls"
    schema = client.get("/api/schema/", {"format": "json"}).json()
    for path in ("/api/cortex/sessions/", "/api/cortex/sessions/{id}/messages/"):
        names = [p["name"] for p in schema["paths"][path]["post"]["parameters"]]
        assert "Idempotency-Key" in names
        assert "422" in schema["paths"][path]["post"]["responses"]


# -- services, prune, check ------------------------------------------------------------------------


def test_services_take_an_idempotency_key():
    first = services.create_session(scope=SCOPE, agent_id="a", idempotency_key="c")
    again = services.create_session(scope=SCOPE, agent_id="a", idempotency_key="c")
    assert again.pk == first.pk and Session.objects.count() == 1
    with pytest.raises(IdempotencyKeyReused):
        services.create_session(scope=SCOPE, agent_id="b", idempotency_key="c")

    appended = services.append_messages(
        scope=SCOPE, session_id=first.pk, messages=[MESSAGE], idempotency_key="m"
    )
    replayed = services.append_messages(
        scope=SCOPE, session_id=str(first.pk), messages=[MESSAGE], idempotency_key="m"
    )
    assert [m.pk for m in replayed.messages] == [m.pk for m in appended.messages]
    assert replayed.session.message_count == 1
    with pytest.raises(IdempotencyKeyReused):
        services.append_messages(
            scope=SCOPE, session_id=first.pk, messages=[MESSAGE, MESSAGE], idempotency_key="m"
        )
    with pytest.raises(InvalidIdempotencyKey):
        services.append_messages(
            scope=SCOPE, session_id=first.pk, messages=[MESSAGE], idempotency_key=""
        )
    assert Message.objects.count() == 1


def test_prune_deletes_expired_keys_only(settings):
    settings.CORTEX_SESSIONS = {"IDEMPOTENCY_TTL": 3600}
    services.create_session(scope=SCOPE, agent_id="a", idempotency_key="old")
    services.create_session(scope=SCOPE, agent_id="a", idempotency_key="new")
    IdempotencyKey.objects.filter(key="old").update(created_at=timezone.now() - timedelta(hours=2))
    out = io.StringIO()
    call_command("cortex_sessions_prune", stdout=out)
    assert "Deleted 1 idempotency key(s) older than 3600 seconds." in out.getvalue()
    assert list(IdempotencyKey.objects.values_list("key", flat=True)) == ["new"]


@pytest.mark.parametrize("ttl", [0, -1, "86400", 1.5, None])
def test_a_bad_idempotency_ttl_is_check_error_e012(settings, ttl):
    settings.CORTEX_SESSIONS = {"IDEMPOTENCY_TTL": ttl}
    assert "cortex_sessions.E012" in [message.id for message in check_settings()]


# -- concurrent duplicates (PostgreSQL, MariaDB) ---------------------------------------------------


@pytest.mark.concurrent_db
@pytest.mark.django_db(transaction=True)
def test_sixteen_concurrent_duplicates_write_exactly_once(alice, alice_scope):
    session = services.create_session(scope=alice_scope, agent_id="a")
    url = session_url(session.pk, "messages/")

    def send(index: int):
        api = APIClient()
        api.force_authenticate(alice)
        response = post(api, url, MESSAGE, key="same-key")
        return response.status_code, response.content

    results = run_together(16, send)
    connections.close_all()

    assert {status for status, _ in results} == {201}
    assert len({content for _, content in results}) == 1
    assert Message.objects.filter(session=session).count() == 1
    session.refresh_from_db()
    assert (session.message_count, session.last_seq) == (1, 1)
    assert IdempotencyKey.objects.count() == 1


@pytest.mark.concurrent_db
@pytest.mark.django_db(transaction=True)
def test_sixteen_concurrent_service_creates_with_one_key_create_one_session():
    results = run_together(
        16,
        lambda index: services.create_session(scope=SCOPE, agent_id="a", idempotency_key="same").pk,
    )
    assert len(set(results)) == 1
    assert Session.objects.count() == 1


@pytest.mark.django_db
def test_an_append_key_is_fingerprinted_by_the_input_as_given():
    # The fingerprint is of what the caller sent, the explicit created_at as given (naive
    # here), not of the value stored (made aware): a retry of the same call must match the
    # key recorded by any version that fingerprinted the input.
    import warnings
    from datetime import datetime

    from cortex_sessions.services.idempotency import fingerprint

    session = services.create_session(scope="org=acme", agent_id="a")
    given = datetime(2020, 1, 1, 12)
    message = {"role": "user", "content": "hi", "created_at": given}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a naive datetime with USE_TZ
        services.append_messages(
            scope="org=acme", session_id=session.pk, messages=[message], idempotency_key="k1"
        )
    expected = fingerprint(
        [
            {
                "role": "user",
                "source": "user",
                "content": [{"type": "text", "text": "hi"}],
                "metadata": {},
                "created_at": given,
                "explicit_time": True,
            }
        ]
    )
    assert IdempotencyKey.objects.get(key="k1").fingerprint == expected
