"""Session endpoints: create, read, update, delete, count, resolve, make-default (docs/design.md §7.3)."""

from __future__ import annotations

import pytest

from cortex_sessions import services
from cortex_sessions.models import Session
from tests.api.conftest import BASE, session_url

pytestmark = pytest.mark.django_db

SESSION_FIELDS = {
    "id",
    "agent_id",
    "scope",
    "title",
    "metadata",
    "cwd",
    "message_count",
    "last_message",
    "is_default",
    "backfilled_by",
    "created_at",
    "updated_at",
    "archived_at",
    "forked_from",
    "forked_at_seq",
    "expires_at",
    "legal_hold",
    "input_tokens",
    "output_tokens",
    "cost",
    "context_tokens",
}


def test_create_session_stores_it_at_the_request_scope(api, alice_scope):
    response = api.post(
        BASE,
        {"agent_id": "coder", "title": "Fix bug", "metadata": {"k": 1}, "cwd": "/src"},
        format="json",
    )
    assert response.status_code == 201
    body = response.json()
    assert set(body) == SESSION_FIELDS
    assert body["scope"] == alice_scope
    assert (body["agent_id"], body["title"], body["metadata"], body["cwd"]) == (
        "coder",
        "Fix bug",
        {"k": 1},
        "/src",
    )
    assert body["message_count"] == 0 and body["is_default"] is False
    assert Session.objects.get(pk=body["id"]).scope == alice_scope


def test_create_session_at_a_narrower_scope_from_the_body(api, alice_scope):
    response = api.post(
        BASE, {"agent_id": "coder", "scope": f"{alice_scope}/project=x"}, format="json"
    )
    assert response.status_code == 201
    assert response.json()["scope"] == f"{alice_scope}/project=x"


@pytest.mark.parametrize("scope", ["org=acme", "org=globex/user=1", "org=acme/user=999999"])
def test_create_session_at_a_wider_or_sibling_body_scope_is_forbidden(api, scope):
    response = api.post(BASE, {"agent_id": "coder", "scope": scope}, format="json")
    assert response.status_code == 403
    assert response.json()["code"] == "scope_forbidden"
    assert not Session.objects.exists()


def test_create_session_with_a_malformed_body_scope_is_invalid_scope(api):
    response = api.post(BASE, {"agent_id": "coder", "scope": "no-equals"}, format="json")
    assert response.status_code == 400
    assert response.json()["code"] == "invalid_scope"
    assert "scope" in response.json()["errors"]


def test_create_session_ignores_read_only_fields(api, alice_scope):
    response = api.post(
        BASE,
        {
            "agent_id": "coder",
            "id": "00000000-0000-0000-0000-000000000001",
            "scope": alice_scope,
            "message_count": 99,
            "last_message": "forged",
            "backfilled_by": "forged",
            "is_default": True,
            "created_at": "2000-01-01T00:00:00Z",
            "updated_at": "2000-01-01T00:00:00Z",
        },
        format="json",
    )
    assert response.status_code == 201
    body = response.json()
    assert body["id"] != "00000000-0000-0000-0000-000000000001"
    assert body["message_count"] == 0
    assert body["last_message"] == "" and body["backfilled_by"] == ""
    assert body["is_default"] is False
    assert not body["created_at"].startswith("2000")


@pytest.mark.parametrize(
    ("payload", "code", "field"),
    [
        ({}, "invalid", "agent_id"),
        ({"agent_id": ""}, "invalid_agent_id", "agent_id"),
        ({"agent_id": "a\x01b"}, "invalid_agent_id", "agent_id"),
        ({"agent_id": "a" * 256}, "invalid_agent_id", "agent_id"),
        ({"agent_id": "a", "title": "t" * 501}, "too_long", "title"),
        ({"agent_id": "a", "metadata": [1, 2]}, "invalid_metadata", "metadata"),
        ({"agent_id": "a", "metadata": "text"}, "invalid_metadata", "metadata"),
        ({"agent_id": "a", "title": "nul\x00"}, "nul_character", "title"),
        ({"agent_id": "a", "metadata": {"k": "nul\x00"}}, "nul_character", "metadata"),
        ({"agent_id": "a", "cwd": ["x"]}, "invalid", "cwd"),
        ({"agent_id": "a", "metadata": [["k", 1]]}, "invalid_metadata", "metadata"),
    ],
)
def test_create_session_with_bad_fields_is_a_400_with_field_errors(api, payload, code, field):
    response = api.post(BASE, payload, format="json")
    assert response.status_code == 400
    body = response.json()
    assert body["code"] == code
    assert field in body["errors"]
    assert all({"code", "detail"} <= set(item) for item in body["errors"][field])
    assert not Session.objects.exists()


def test_retrieve_session_returns_it(api, alice_scope):
    session = services.create_session(scope=alice_scope, agent_id="coder", title="T")
    response = api.get(session_url(session.pk))
    assert response.status_code == 200
    assert response.json()["id"] == str(session.pk)
    assert response.json()["title"] == "T"


def test_patch_changes_only_the_given_fields(api, alice_scope):
    session = services.create_session(
        scope=alice_scope, agent_id="coder", title="Old", metadata={"a": 1}, cwd="/w"
    )
    response = api.patch(session_url(session.pk), {"title": "New"}, format="json")
    assert response.status_code == 200
    body = response.json()
    assert (body["title"], body["metadata"], body["cwd"]) == ("New", {"a": 1}, "/w")


def test_put_replaces_title_metadata_and_cwd(api, alice_scope):
    session = services.create_session(scope=alice_scope, agent_id="coder", title="Old")
    response = api.put(
        session_url(session.pk), {"title": "New", "metadata": {"b": 2}, "cwd": None}, format="json"
    )
    assert response.status_code == 200
    session.refresh_from_db()
    assert (session.title, session.metadata, session.cwd) == ("New", {"b": 2}, None)


@pytest.mark.parametrize("method", ["patch", "put"])
def test_update_ignores_read_only_fields(api, alice_scope, method):
    session = services.create_session(scope=alice_scope, agent_id="coder", title="Old")
    services.append_messages(
        scope=alice_scope, session_id=session.pk, messages=[{"role": "user", "content": "hi"}]
    )
    response = getattr(api, method)(
        session_url(session.pk),
        {
            "title": "New",
            "id": "00000000-0000-0000-0000-000000000001",
            "agent_id": "other-agent",
            "scope": "org=acme",
            "message_count": 99,
            "last_message": "forged",
            "backfilled_by": "forged",
            "is_default": True,
            "created_at": "2000-01-01T00:00:00Z",
        },
        format="json",
    )
    assert response.status_code == 200
    session.refresh_from_db()
    assert session.title == "New"
    assert session.agent_id == "coder"
    assert session.scope == alice_scope
    assert session.message_count == 1
    assert session.last_message == "hi"
    assert session.backfilled_by == ""
    assert session.is_default is False
    assert session.created_at.year != 2000


def test_patch_with_non_object_metadata_is_refused(api, alice_scope):
    session = services.create_session(scope=alice_scope, agent_id="coder", metadata={"a": 1})
    response = api.patch(session_url(session.pk), {"metadata": [1]}, format="json")
    assert response.status_code == 400
    assert response.json()["code"] == "invalid_metadata"
    session.refresh_from_db()
    assert session.metadata == {"a": 1}


def test_delete_session_removes_it_and_its_messages(api, alice_scope):
    session = services.create_session(scope=alice_scope, agent_id="coder")
    services.append_messages(
        scope=alice_scope, session_id=session.pk, messages=[{"role": "user", "content": "hi"}]
    )
    response = api.delete(session_url(session.pk))
    assert response.status_code == 204
    assert not Session.objects.exists()
    assert api.get(session_url(session.pk)).status_code == 404


def test_count_returns_the_number_of_matching_sessions(api, alice_scope):
    for agent in ("a", "a", "b"):
        services.create_session(scope=alice_scope, agent_id=agent)
    assert api.get(f"{BASE}count/").json() == {"count": 3}
    assert api.get(f"{BASE}count/", {"agent_id": "a"}).json() == {"count": 2}


def test_count_refuses_bad_filters(api):
    response = api.get(f"{BASE}count/", {"default_only": "maybe"})
    assert response.status_code == 400
    assert response.json()["code"] == "invalid_filter"


def test_resolve_creates_the_default_once_then_returns_it(api, alice_scope):
    first = api.post(f"{BASE}resolve/", {"agent_id": "coder"}, format="json")
    assert first.status_code == 201
    assert first.json()["is_default"] is True
    assert first.json()["scope"] == alice_scope
    second = api.post(f"{BASE}resolve/", {"agent_id": "coder"}, format="json")
    assert second.status_code == 200
    assert second.json()["id"] == first.json()["id"]


def test_resolve_with_a_session_id_returns_that_session(api, alice_scope):
    session = services.create_session(scope=alice_scope, agent_id="coder")
    response = api.post(
        f"{BASE}resolve/", {"agent_id": "coder", "session_id": str(session.pk)}, format="json"
    )
    assert response.status_code == 200
    assert response.json()["id"] == str(session.pk)


def test_resolve_with_another_agents_session_is_not_found(api, alice_scope):
    session = services.create_session(scope=alice_scope, agent_id="coder")
    response = api.post(
        f"{BASE}resolve/", {"agent_id": "writer", "session_id": str(session.pk)}, format="json"
    )
    assert response.status_code == 404
    assert response.json() == {"code": "session_not_found", "detail": "Session not found."}


@pytest.mark.parametrize(
    ("payload", "code"),
    [
        ({}, "invalid"),
        ({"agent_id": ""}, "invalid_agent_id"),
        ({"agent_id": "a", "session_id": "not-a-uuid"}, "invalid"),
    ],
)
def test_resolve_with_bad_input_is_a_400(api, payload, code):
    response = api.post(f"{BASE}resolve/", payload, format="json")
    assert response.status_code == 400
    assert response.json()["code"] == code


def test_make_default_swaps_the_default(api, alice_scope):
    old, _ = services.resolve_session(scope=alice_scope, agent_id="coder")
    new = services.create_session(scope=alice_scope, agent_id="coder")
    response = api.post(session_url(new.pk, "make-default/"))
    assert response.status_code == 200
    assert response.json()["is_default"] is True
    old.refresh_from_db()
    assert old.is_default is False
    assert Session.objects.filter(is_default=True).count() == 1


def test_make_default_on_the_default_is_a_no_op(api, alice_scope):
    session, _ = services.resolve_session(scope=alice_scope, agent_id="coder")
    response = api.post(session_url(session.pk, "make-default/"))
    assert response.status_code == 200
    assert response.json()["is_default"] is True
