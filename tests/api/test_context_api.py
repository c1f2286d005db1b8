"""REST endpoints of the context window: ``POST /sessions/{id}/compact/`` and
``GET /sessions/{id}/context/`` (docs/design.md §16.3, §16.4)."""

from __future__ import annotations

import pytest

from cortex_sessions import services
from cortex_sessions.models import Message, Session
from tests.api.conftest import ORG_RESOLVER, session_url

pytestmark = pytest.mark.django_db


def length_tokens(role, content):
    """A ``TOKEN_COUNTER``: one token per character of the text blocks."""
    return sum(len(block.get("text", "")) for block in content if isinstance(block, dict))


@pytest.fixture(autouse=True)
def org_resolver(settings):
    settings.CORTEX_SESSIONS = {
        "SCOPE_RESOLVER": ORG_RESOLVER,
        "TOKEN_COUNTER": "tests.api.test_context_api.length_tokens",
    }


@pytest.fixture
def chat(alice_scope):
    session = services.create_session(scope=alice_scope, agent_id="a")
    services.append_messages(
        scope=alice_scope,
        session_id=session.pk,
        messages=[
            {"role": "user", "content": "aaaa"},
            {"role": "assistant", "content": "bbbb"},
            {"role": "user", "content": "cc"},
            {"role": "assistant", "content": "d"},
        ],
    )
    return session


def _state():
    return (
        list(Session.objects.order_by("pk").values()),
        list(Message.objects.order_by("pk").values_list("pk", "seq", "compacts_through_seq")),
    )


def test_context_of_an_uncompacted_session(api, chat):
    response = api.get(session_url(chat.pk, "context/"))
    assert response.status_code == 200, response.json()
    body = response.json()
    assert [m["seq"] for m in body["messages"]] == [1, 2, 3, 4]
    assert body["compacted_through_seq"] is None
    assert body["tokens"] == 11
    assert body["truncated"] is False


def test_context_with_a_budget(api, chat):
    body = api.get(session_url(chat.pk, "context/?max_tokens=7")).json()
    assert [m["seq"] for m in body["messages"]] == [2, 3, 4]
    assert (body["tokens"], body["truncated"]) == (7, True)


def test_budget_too_small_is_422(api, chat):
    services.append_messages(
        scope=chat.scope, session_id=chat.pk, messages=[{"role": "user", "content": "eeeee"}]
    )
    response = api.get(session_url(chat.pk, "context/?max_tokens=4"))
    assert response.status_code == 422
    body = response.json()
    assert body["code"] == "context_budget_exceeded"
    # The budget that answers, machine-readable: a client retrying with it gets the context.
    assert body["params"] == {"max_tokens": 4, "required": 5}
    retry = api.get(session_url(chat.pk, f"context/?max_tokens={body['params']['required']}"))
    assert retry.status_code == 200
    assert [m["seq"] for m in retry.json()["messages"]] == [5]


def test_other_errors_carry_no_params(api, chat):
    body = api.get(session_url(chat.pk, "context/?max_tokens=0")).json()
    assert "params" not in body  # field and the like stay internal


@pytest.mark.parametrize("value", ["0", "-1", "10000001", "1.5", "ten", ""])
def test_bad_max_tokens_is_400_invalid_filter(api, chat, value):
    response = api.get(session_url(chat.pk, f"context/?max_tokens={value}"))
    assert response.status_code == 400
    assert response.json()["code"] == "invalid_filter"


def test_unknown_context_parameter_is_400(api, chat):
    response = api.get(session_url(chat.pk, "context/?max_token=5"))
    assert response.status_code == 400


def test_context_of_a_foreign_session_is_404(api, make_user):
    bob = make_user("bob", org="other")
    session = services.create_session(scope=f"org=other/user={bob.pk}", agent_id="a")
    assert api.get(session_url(session.pk, "context/")).status_code == 404
    response = api.post(
        session_url(session.pk, "compact/"), {"through_seq": 1, "summary": "s"}, format="json"
    )
    assert response.status_code == 404


def test_compact_then_read(api, chat):
    response = api.post(
        session_url(chat.pk, "compact/"), {"through_seq": 2, "summary": "sum"}, format="json"
    )
    assert response.status_code == 201, response.json()
    body = response.json()
    (summary,) = body["messages"]
    assert (summary["seq"], summary["role"], summary["source"]) == (5, "user", "checkpoint")
    assert summary["compacts_through_seq"] == 2
    assert body["session"]["message_count"] == 5
    assert Session.objects.get(pk=chat.pk).context_tokens == 3 + 2 + 1
    context = api.get(session_url(chat.pk, "context/")).json()
    assert [m["seq"] for m in context["messages"]] == [5, 3, 4]
    assert context["compacted_through_seq"] == 2
    # the transcript is whole
    assert [m["seq"] for m in api.get(session_url(chat.pk, "messages/")).json()["results"]] == [
        1,
        2,
        3,
        4,
        5,
    ]


def test_deleting_the_summary_undoes_it(api, chat):
    api.post(session_url(chat.pk, "compact/"), {"through_seq": 2, "summary": "s"}, format="json")
    assert api.delete(session_url(chat.pk, "messages/5/")).status_code == 200
    context = api.get(session_url(chat.pk, "context/")).json()
    assert context["compacted_through_seq"] is None
    assert [m["seq"] for m in context["messages"]] == [1, 2, 3, 4]


@pytest.mark.parametrize(
    ("body", "code"),
    [
        ({"through_seq": 0, "summary": "s"}, "invalid_through_seq"),
        ({"through_seq": 5, "summary": "s"}, "invalid_through_seq"),
        ({"through_seq": "2", "summary": "s"}, "invalid_through_seq"),
        ({"through_seq": None, "summary": "s"}, "invalid_through_seq"),
        ({"through_seq": 2, "summary": ""}, "empty_content"),
        ({"through_seq": 2, "summary": None}, "invalid_content"),
        ({"through_seq": 2}, "required"),
        ({"through_seq": 2, "summary": "s", "extra": 1}, "unknown_field"),
        ({"through_seq": 2, "summary": "s", "usage": {"tokens": 1}}, "invalid_usage"),
    ],
)
def test_bad_compaction_is_400_and_writes_nothing(api, chat, body, code):
    before = _state()
    response = api.post(session_url(chat.pk, "compact/"), body, format="json")
    assert response.status_code == 400, response.json()
    payload = response.json()
    codes = {payload["code"]} | {
        error.get("code") for errors in payload.get("errors", {}).values() for error in errors
    }
    assert code in codes, payload
    assert _state() == before


def test_through_seq_not_past_the_previous_compaction_is_400(api, chat):
    api.post(session_url(chat.pk, "compact/"), {"through_seq": 2, "summary": "s"}, format="json")
    response = api.post(
        session_url(chat.pk, "compact/"), {"through_seq": 2, "summary": "s"}, format="json"
    )
    assert response.status_code == 400
    assert response.json()["code"] == "invalid_through_seq"


def test_compacting_an_archived_session_is_409(api, chat):
    services.archive_session(scope=chat.scope, session_id=chat.pk)
    response = api.post(
        session_url(chat.pk, "compact/"), {"through_seq": 2, "summary": "s"}, format="json"
    )
    assert response.status_code == 409
    assert response.json()["code"] == "session_archived"


def test_summary_over_max_message_bytes_is_a_400_summary_too_large(api, chat, settings):
    settings.CORTEX_SESSIONS = {**settings.CORTEX_SESSIONS, "MAX_MESSAGE_BYTES": 100}
    before = _state()
    response = api.post(
        session_url(chat.pk, "compact/"), {"through_seq": 2, "summary": "x" * 200}, format="json"
    )
    assert response.status_code == 400  # the "each a 400 with its code"
    body = response.json()
    assert body["code"] == "summary_too_large"
    assert [error["code"] for error in body["errors"]["summary"]] == ["summary_too_large"]
    assert _state() == before
    # An ordinary append over the limit keeps its 413 message_too_large.
    append = api.post(
        session_url(chat.pk, "messages/"), {"role": "user", "content": "x" * 200}, format="json"
    )
    assert (append.status_code, append.json()["code"]) == (413, "message_too_large")
    assert _state() == before


def test_an_empty_summary_is_a_400_empty_content(api, chat):
    before = _state()
    for summary in ("", []):
        response = api.post(
            session_url(chat.pk, "compact/"), {"through_seq": 2, "summary": summary}, format="json"
        )
        assert (response.status_code, response.json()["code"]) == (400, "empty_content")
    assert _state() == before


def test_compact_with_idempotency_key_replays(api, chat):
    url = session_url(chat.pk, "compact/")
    body = {"through_seq": 2, "summary": "s"}
    first = api.post(url, body, format="json", HTTP_IDEMPOTENCY_KEY="k")
    again = api.post(url, body, format="json", HTTP_IDEMPOTENCY_KEY="k")
    assert first.status_code == again.status_code == 201
    assert again.json() == first.json()
    assert Message.objects.filter(session=chat, compacts_through_seq__isnull=False).count() == 1
    other = api.post(url, {**body, "summary": "t"}, format="json", HTTP_IDEMPOTENCY_KEY="k")
    assert other.status_code == 422


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("messages/", {"role": "user", "content": "more"}),
        ("compact/", {"through_seq": 2, "summary": "s"}),
    ],
)
def test_a_failing_token_counter_is_a_503_token_counter_failed(api, chat, settings, path, body):
    settings.CORTEX_SESSIONS = {
        **settings.CORTEX_SESSIONS,
        "TOKEN_COUNTER": "tests.test_token_counter_failures.tokenizer_down",
    }
    before = _state()
    response = api.post(session_url(chat.pk, path), body, format="json")
    assert response.status_code == 503
    assert response.json()["code"] == "token_counter_failed"
    assert response["Retry-After"] == "1"
    assert _state() == before
