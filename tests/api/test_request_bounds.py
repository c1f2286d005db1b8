"""The bounds of one request's work (docs/design.md §12.6): one POST of 20,000
tiny messages held a session's row lock for a minute, and a metadata object of 60,000 keys took
16 s on MariaDB. ``MAX_MESSAGES_PER_APPEND`` and ``MAX_JSON_KEYS`` refuse them with a coded 400,
nothing written, at every door: the API, the services, the import and the admin's forms' rule."""

from __future__ import annotations

import json

import pytest
from django.db import connection

from cortex_sessions import services, signals, transfer
from cortex_sessions.conf import DEFAULTS
from cortex_sessions.exceptions import TooManyKeys, TooManyMessages
from cortex_sessions.models import Message, Session
from tests.api.conftest import BASE, session_url

pytestmark = pytest.mark.django_db

LIMIT = DEFAULTS["MAX_MESSAGES_PER_APPEND"]
KEYS = DEFAULTS["MAX_JSON_KEYS"]


@pytest.fixture
def session(alice_scope):
    return services.create_session(scope=alice_scope, agent_id="coder")


def tiny(count: int) -> list[dict]:
    return [{"role": "user", "content": f"m{n}"} for n in range(count)]


def keys(count: int) -> dict[str, int]:
    return {f"k{n}": n for n in range(count)}


def test_the_defaults_are_documented_values():
    assert (LIMIT, KEYS) == (1000, 1000)


# -- messages per append --------------------------------------------------------------------------


def test_an_append_of_max_messages_per_append_is_accepted(api, session):
    response = api.post(session_url(session.pk, "messages/"), tiny(LIMIT), format="json")
    assert response.status_code == 201
    assert response.json()["session"]["message_count"] == LIMIT


def test_one_message_more_is_400_too_many_messages_and_nothing_is_written(api, session):
    response = api.post(session_url(session.pk, "messages/"), tiny(LIMIT + 1), format="json")
    assert response.status_code == 400
    body = response.json()
    assert body["code"] == "too_many_messages"
    assert "messages" in body["errors"]
    assert not Message.objects.filter(session=session).exists()
    session.refresh_from_db()
    assert (session.message_count, session.last_seq) == (0, 0)


def test_the_count_is_refused_before_the_messages_are_read(api, session, settings):
    """Over the bound, a malformed message is not even looked at: the answer is the bound's."""
    settings.CORTEX_SESSIONS = {**settings.CORTEX_SESSIONS, "MAX_MESSAGES_PER_APPEND": 2}
    body = [*tiny(2), {"role": "nobody", "resolve_references": True}]
    response = api.post(session_url(session.pk, "messages/"), body, format="json")
    assert (response.status_code, response.json()["code"]) == (400, "too_many_messages")


def test_the_setting_is_read_live_by_the_api(api, session, settings):
    settings.CORTEX_SESSIONS = {**settings.CORTEX_SESSIONS, "MAX_MESSAGES_PER_APPEND": 3}
    url = session_url(session.pk, "messages/")
    assert api.post(url, tiny(3), format="json").status_code == 201
    assert api.post(url, tiny(4), format="json").json()["code"] == "too_many_messages"


def test_a_message_with_its_reference_context_fits_the_smallest_bound(
    api, session, alice_scope, settings
):
    """``MAX_MESSAGES_PER_APPEND`` is at least 2 (E018): a user message that resolves a
    reference is stored with its context message in one append of two."""
    settings.CORTEX_SESSIONS = {**settings.CORTEX_SESSIONS, "MAX_MESSAGES_PER_APPEND": 2}
    other = services.create_session(scope=alice_scope, agent_id="coder", title="other")
    services.append_messages(scope=alice_scope, session_id=other.pk, messages=tiny(1))
    response = api.post(
        session_url(session.pk, "messages/"),
        {
            "role": "user",
            "content": "see this",
            "resolve_references": True,
            "references": [{"session_id": str(other.pk)}],
        },
        format="json",
    )
    assert response.status_code == 201
    assert len(response.json()["messages"]) == 2


def test_the_service_takes_max_messages_per_append(alice_scope, session, settings):
    settings.CORTEX_SESSIONS = {"MAX_MESSAGES_PER_APPEND": 5}
    result = services.append_messages(scope=alice_scope, session_id=session.pk, messages=tiny(5))
    assert result.session.message_count == 5


def test_the_service_refuses_one_more_and_writes_nothing(alice_scope, session, settings):
    settings.CORTEX_SESSIONS = {"MAX_MESSAGES_PER_APPEND": 5}
    with pytest.raises(TooManyMessages) as raised:
        services.append_messages(scope=alice_scope, session_id=session.pk, messages=tiny(6))
    assert (raised.value.code, raised.value.field) == ("too_many_messages", "messages")
    assert raised.value.params["limit"] == 5
    assert not Message.objects.filter(session=session).exists()


def test_the_service_refuses_one_more_with_an_idempotency_key(alice_scope, session, settings):
    settings.CORTEX_SESSIONS = {"MAX_MESSAGES_PER_APPEND": 5}
    with pytest.raises(TooManyMessages):
        services.append_messages(
            scope=alice_scope, session_id=session.pk, messages=tiny(6), idempotency_key="k1"
        )
    assert not Message.objects.filter(session=session).exists()


def test_the_import_splits_a_long_conversation_into_bounded_appends(
    alice_scope, settings, django_capture_on_commit_callbacks
):
    """An imported conversation may be longer than one append: it is written in appends of at
    most ``MAX_MESSAGES_PER_APPEND`` (inside the import's transaction), in order."""
    settings.CORTEX_SESSIONS = {"MAX_MESSAGES_PER_APPEND": 3}
    appended: list[int] = []

    def count(sender, *, messages, **kwargs):
        appended.append(len(messages))

    line = transfer.dump_conversation({"id": "long-1", "title": "long", "messages": tiny(8)})
    signals.messages_appended.connect(count)
    try:
        with django_capture_on_commit_callbacks(execute=True):
            session = transfer.import_conversation(
                transfer.parse_conversation(line), scope=alice_scope, agent_id="importer"
            )
    finally:
        signals.messages_appended.disconnect(count)
    assert session is not None and session.message_count == 8
    texts = list(
        Message.objects.filter(session=session).order_by("seq").values_list("content", flat=True)
    )
    assert [blocks[0]["text"] for blocks in texts] == [f"m{n}" for n in range(8)]
    assert appended == [3, 3, 2]  # one messages_appended per append


# -- keys per JSON object -------------------------------------------------------------------------


def test_a_metadata_object_of_max_json_keys_is_accepted(api):
    response = api.post(BASE, {"agent_id": "a", "metadata": keys(KEYS)}, format="json")
    assert response.status_code == 201


@pytest.mark.parametrize(
    "metadata",
    [keys(KEYS + 1), {"nested": {"deeper": keys(KEYS + 1)}}, {"list": [1, keys(KEYS + 1)]}],
    ids=["top-level", "nested", "in-a-list"],
)
def test_an_object_of_one_key_more_is_400_too_many_keys(api, metadata):
    response = api.post(BASE, {"agent_id": "a", "metadata": metadata}, format="json")
    assert response.status_code == 400
    assert response.json()["code"] == "too_many_keys"
    assert not Session.objects.exists()


def test_a_message_with_too_many_keys_in_metadata_or_content_writes_nothing(api, session):
    url = session_url(session.pk, "messages/")
    for message in (
        {"role": "user", "content": "x", "metadata": keys(KEYS + 1)},
        {"role": "user", "content": [{"type": "data", **keys(KEYS + 1)}]},
        {"role": "user", "content": [{"type": "data", "value": keys(KEYS + 1)}]},
    ):
        response = api.post(url, [tiny(1)[0], message], format="json")
        assert (response.status_code, response.json()["code"]) == (400, "too_many_keys")
        response = api.post(url, {**message}, format="json")
        assert (response.status_code, response.json()["code"]) == (400, "too_many_keys")
    assert not Message.objects.filter(session=session).exists()


def test_a_merge_patch_that_grows_metadata_past_the_bound_is_refused(api, alice_scope, settings):
    settings.CORTEX_SESSIONS = {**settings.CORTEX_SESSIONS, "MAX_JSON_KEYS": 100}
    session = services.create_session(scope=alice_scope, agent_id="a", metadata=keys(60))
    more = {f"more{n}": n for n in range(41)}
    response = api.patch(
        session_url(session.pk),
        data=json.dumps({"metadata": more}),
        content_type="application/merge-patch+json",
    )
    assert (response.status_code, response.json()["code"]) == (400, "too_many_keys")
    session.refresh_from_db()
    assert session.metadata == keys(60)


def test_the_services_bound_keys_per_object(alice_scope, session, settings):
    settings.CORTEX_SESSIONS = {"MAX_JSON_KEYS": 100}
    services.update_session(scope=alice_scope, session_id=session.pk, metadata=keys(100))
    with pytest.raises(TooManyKeys) as raised:
        services.update_session(scope=alice_scope, session_id=session.pk, metadata=keys(101))
    assert (raised.value.code, raised.value.field) == ("too_many_keys", "metadata")
    with pytest.raises(TooManyKeys):
        services.append_messages(
            scope=alice_scope,
            session_id=session.pk,
            messages=[{"role": "user", "content": [{"type": "t", "v": keys(101)}]}],
        )
    with pytest.raises(TooManyKeys):
        services.create_session(scope=alice_scope, agent_id="b", metadata={"a": keys(101)})
    session.refresh_from_db()
    assert session.metadata == keys(100) and session.message_count == 0


def test_the_metadata_filter_with_a_nested_object_over_the_bound_is_invalid_filter(api):
    metadata = json.dumps({"k": keys(KEYS + 1)})
    response = api.get(BASE, {"metadata": metadata})
    assert (response.status_code, response.json()["code"]) == (400, "invalid_filter")


@pytest.mark.skipif(connection.vendor != "mysql", reason="MySQL/MariaDB's max_allowed_packet")
@pytest.mark.django_db(transaction=True)
def test_a_keyed_append_whose_response_no_statement_carries_is_413_and_writes_nothing(
    api, session, monkeypatch
):
    # The Idempotency-Key keeps the response, every message of the append in it, in one
    # statement: on MariaDB 17 messages of 1 MB passed its 16 MiB max_allowed_packet, a 500
    # (1153) or a 503 inviting retries that failed alike (2006). services.statement_size
    # measures it first; the server's limit is lowered here.
    from cortex_sessions.models import IdempotencyKey
    from cortex_sessions.services import statement_size

    body = [{"role": "user", "content": f"{n} " + "x" * 300} for n in range(10)]
    url = session_url(session.pk, "messages/")
    monkeypatch.setattr(statement_size, "_limit", lambda alias, total: 4000)
    refused = api.post(url, body, format="json", HTTP_IDEMPOTENCY_KEY="k-1")
    assert refused.status_code == 413, refused.content
    assert refused.json()["code"] == "message_too_large"
    assert "Idempotency-Key" in refused.json()["detail"]
    assert not Message.objects.exists() and not IdempotencyKey.objects.exists()
    assert Session.objects.get(pk=session.pk).message_count == 0
    monkeypatch.undo()
    first = api.post(url, body, format="json", HTTP_IDEMPOTENCY_KEY="k-1")
    again = api.post(url, body, format="json", HTTP_IDEMPOTENCY_KEY="k-1")
    assert first.status_code == again.status_code == 201
    assert again.json() == first.json() and Message.objects.count() == 10
