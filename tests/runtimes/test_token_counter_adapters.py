"""A ``TOKEN_COUNTER`` that raises refuses the adapters' writes too (docs/design.md §16.2,
§16.5): they write through the services, so the OpenAI Agents session's ``add_items`` (and its
compaction hook) and ADK's ``append_event`` (with its state delta) raise ``TokenCountError``
and write nothing."""

from __future__ import annotations

import pytest
from django.test import override_settings

from cortex_sessions import services
from cortex_sessions.exceptions import TokenCountError
from cortex_sessions.models import Message, Session
from tests.asyncio_support import async_test

pytestmark = pytest.mark.django_db

FAILING = {"TOKEN_COUNTER": "tests.test_token_counter_failures.tokenizer_down"}


async def _state():
    sessions = [row async for row in Session.objects.order_by("pk").values()]
    messages = [row async for row in Message.objects.order_by("pk").values()]
    return sessions, messages


@async_test
async def test_openai_agents_add_items_and_compaction_write_nothing():
    pytest.importorskip("agents")
    from cortex_sessions.integrations.openai_agents import CortexSession

    scope = "org=acme/user=1"
    pinned = await services.acreate_session(scope=scope, agent_id="bot")
    session = CortexSession(scope=scope, agent_id="bot", session_id=pinned.pk)
    await session.add_items([{"role": "user", "content": "Hello"}])
    before = await _state()
    with override_settings(CORTEX_SESSIONS=FAILING):
        with pytest.raises(TokenCountError):
            await session.add_items([{"role": "assistant", "content": "Hi"}])
        with pytest.raises(TokenCountError):
            await session._atomic_replace_items([{"role": "user", "content": "compacted"}])
    assert await _state() == before


@async_test
async def test_adk_append_event_writes_neither_the_event_nor_its_state():
    pytest.importorskip("google.adk")
    from google.adk.events import Event, EventActions
    from google.genai import types

    from cortex_sessions.integrations.adk import CortexSessionService

    service = CortexSessionService()
    session = await service.create_session(app_name="app", user_id="u", state={"k": "v0"})
    event = Event(
        invocation_id="i",
        author="user",
        content=types.Content(role="user", parts=[types.Part(text="hi")]),
        actions=EventActions(state_delta={"k": "v1", "app:a": "x", "user:b": "y"}),
    )
    with override_settings(CORTEX_SESSIONS=FAILING), pytest.raises(TokenCountError):
        await service.append_event(session=session, event=event)
    stored = await service.get_session(app_name="app", user_id="u", session_id=session.id)
    assert stored.events == []
    assert stored.state == {"k": "v0"}
    assert not await Message.objects.filter(session_id=session.id).aexists()
