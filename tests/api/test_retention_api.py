"""Retention and legal hold through the REST API (docs/design.md §18.1): ``expires_at`` on
create, PUT/PATCH and merge patch; ``legal_hold`` read-only; an expired session answered like
a missing one; every delete of a held session or of its messages 409 ``legal_hold``."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.utils import timezone

from cortex_sessions import services
from cortex_sessions.models import Message, Session
from tests.api.conftest import BASE, session_url

pytestmark = pytest.mark.django_db

MERGE_PATCH = "application/merge-patch+json"


def test_expires_at_is_set_on_create_and_changed_by_patch_and_merge_patch(api):
    response = api.post(
        BASE, {"agent_id": "a", "expires_at": "2031-01-02T03:04:05Z"}, format="json"
    )
    assert response.status_code == 201, response.content
    body = response.json()
    assert body["expires_at"] == "2031-01-02T03:04:05Z" and body["legal_hold"] is False
    url = session_url(body["id"])
    response = api.patch(url, {"expires_at": "2032-01-01T00:00:00+01:00"}, format="json")
    assert response.status_code == 200, response.content
    assert response.json()["expires_at"] == "2031-12-31T23:00:00Z"
    response = api.patch(url, data=json.dumps({"expires_at": None}), content_type=MERGE_PATCH)
    assert response.status_code == 200, response.content
    assert response.json()["expires_at"] is None


@pytest.mark.parametrize(
    "bad",
    [
        "soon",
        "2031-02-30T00:00:00Z",
        5,
        ["2031-01-01"],
        # no UTC offset: refused, never read in the server's time zone (the services and the
        # import read a string alike)
        "2031-01-01T00:00:00",
        "2031-01-01",
    ],
)
def test_a_bad_expires_at_is_400_naming_it_and_nothing_is_written(api, bad):
    response = api.post(BASE, {"agent_id": "a", "expires_at": bad}, format="json")
    assert response.status_code == 400
    assert "expires_at" in response.json()["errors"]
    assert not Session.objects.exists()
    session = api.post(BASE, {"agent_id": "a", "title": "t"}, format="json").json()
    for content_type in ("application/json", MERGE_PATCH):
        response = api.patch(
            session_url(session["id"]),
            data=json.dumps({"title": "changed", "expires_at": bad}),
            content_type=content_type,
        )
        assert response.status_code == 400
        assert "expires_at" in response.json()["errors"]
    assert Session.objects.get(pk=session["id"]).title == "t"


def test_legal_hold_is_read_only_for_the_client(api):
    response = api.post(BASE, {"agent_id": "a", "legal_hold": True}, format="json")
    assert response.status_code == 201 and response.json()["legal_hold"] is False
    url = session_url(response.json()["id"])
    for content_type in ("application/json", MERGE_PATCH):
        response = api.patch(url, data=json.dumps({"legal_hold": True}), content_type=content_type)
        assert response.status_code == 200 and response.json()["legal_hold"] is False
    assert Session.objects.get().legal_hold is False


def test_an_expired_session_is_answered_like_a_missing_one(api, alice_scope):
    session = services.create_session(scope=alice_scope, agent_id="a")
    Session.objects.filter(pk=session.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    for url in (session_url(session.pk), session_url(session.pk, "messages/")):
        response = api.get(url)
        assert (response.status_code, response.json()["code"]) == (404, "session_not_found")
    assert api.get(BASE).json()["count"] == 0
    assert api.get(f"{BASE}count/").json() == {"count": 0}


@pytest.fixture
def held(alice_scope):
    session = services.create_session(scope=alice_scope, agent_id="a")
    services.append_messages(
        scope=alice_scope,
        session_id=session.pk,
        messages=[{"role": "user", "content": "1"}, {"role": "assistant", "content": "2"}],
    )
    Session.objects.filter(pk=session.pk).update(legal_hold=True)
    return session


@pytest.mark.parametrize(
    ("method", "suffix"),
    [
        ("delete", ""),
        ("delete", "messages/"),
        ("delete", "messages/?after_seq=1"),
        ("delete", "messages/2/"),
        ("post", "messages/pop/"),
    ],
)
def test_deleting_a_held_session_or_its_messages_is_409_legal_hold(api, held, method, suffix):
    response = getattr(api, method)(session_url(held.pk, suffix))
    assert response.status_code == 409, response.content
    assert response.json()["code"] == "legal_hold"
    assert Message.objects.filter(session=held).count() == 2
    assert Session.objects.get(pk=held.pk).message_count == 2
