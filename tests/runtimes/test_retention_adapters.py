"""The agent-runtime adapters hide an expired session, as every read does (docs/design.md
§18.1): the OpenAI Agents SDK session (pinned and default-following) and the ADK service."""

from __future__ import annotations

from datetime import timedelta

import pytest
from asgiref.sync import async_to_sync
from django.utils import timezone

from cortex_sessions import services
from cortex_sessions.models import Session

pytestmark = pytest.mark.django_db

SCOPE = "org=acme/user=alice"


def _expire(pk) -> None:
    Session.objects.filter(pk=pk).update(expires_at=timezone.now() - timedelta(seconds=5))


def test_openai_session_does_not_read_an_expired_session():
    pytest.importorskip("agents")
    from cortex_sessions.exceptions import SessionNotFound
    from cortex_sessions.integrations.openai_agents import CortexSession

    pinned_id = services.create_session(scope=SCOPE, agent_id="a").pk
    services.append_messages(
        scope=SCOPE, session_id=pinned_id, messages=[{"role": "user", "content": "secret"}]
    )
    pinned = CortexSession(scope=SCOPE, agent_id="a", session_id=pinned_id)
    assert len(async_to_sync(pinned.get_items)()) == 1  # resolved while live
    _expire(pinned_id)
    for limit in (None, 1):  # every item (ORM pages), the newest (one statement on PostgreSQL)
        with pytest.raises(SessionNotFound):
            async_to_sync(pinned.get_items)(limit=limit)

    following = CortexSession(scope=SCOPE, agent_id="a")
    async_to_sync(following.add_items)([{"role": "user", "content": "old"}])
    old = Session.objects.get(scope=SCOPE, is_default=True)
    _expire(old.pk)
    assert async_to_sync(following.get_items)() == []  # a new default, not the expired one
    assert Session.objects.get(scope=SCOPE, is_default=True).pk != old.pk


def test_adk_service_does_not_return_an_expired_session():
    pytest.importorskip("google.adk")
    from cortex_sessions.integrations.adk import CortexSessionService

    service = CortexSessionService()
    created = async_to_sync(service.create_session)(app_name="app", user_id="u")
    assert async_to_sync(service.get_session)(app_name="app", user_id="u", session_id=created.id)
    _expire(created.id)
    got = async_to_sync(service.get_session)(app_name="app", user_id="u", session_id=created.id)
    assert got is None
    listed = async_to_sync(service.list_sessions)(app_name="app", user_id="u")
    assert listed.sessions == []
    # every user's sessions of the app, on a service bound to no tenant
    assert async_to_sync(service.list_sessions)(app_name="app").sessions == []
