"""``CortexSession`` where the OpenAI Agents SDK's own stores set the behaviour
(docs/design.md §13.2, §19.4): settings, items that are not JSON, and the ``Session``
protocol check."""

from __future__ import annotations

import pytest

pytest.importorskip("agents")

from agents.memory import Session as SDKSession
from agents.memory import SessionSettings

from cortex_sessions.exceptions import InvalidContent
from cortex_sessions.integrations.openai_agents import CortexSession, ItemNotJSON
from cortex_sessions.models import Message, Session
from tests.asyncio_support import async_test

pytestmark = pytest.mark.django_db

SCOPE = "org=acme/user=alice"


def test_an_unknown_session_settings_key_is_a_type_error_as_in_the_sdks_stores():
    with pytest.raises(TypeError, match="limitt"):
        CortexSession(scope=SCOPE, agent_id="a", session_settings={"limitt": 1})
    with pytest.raises(TypeError, match="SessionSettings"):  # neither a dict nor settings
        CortexSession(scope=SCOPE, agent_id="a", session_settings=5)
    assert CortexSession(
        scope=SCOPE, agent_id="a", session_settings={"limit": 3}
    ).session_settings == SessionSettings(limit=3)


@pytest.mark.parametrize(
    "item",
    [
        {"role": "user", "content": {1, 2}},
        {"role": "user", "content": b"bytes"},
        {"role": "user", "content": "x", 1: "an int key"},
        {"role": "user", "content": object()},
    ],
    ids=["set", "bytes", "int key", "object"],
)
@async_test
async def test_an_item_that_is_not_json_is_invalid_content_and_a_type_error(item):
    session = CortexSession(scope=SCOPE, agent_id="a")
    with pytest.raises(ItemNotJSON) as raised:
        await session.add_items([{"role": "user", "content": "fine"}, item])
    assert isinstance(raised.value, InvalidContent)
    assert isinstance(raised.value, TypeError)
    assert raised.value.code == "invalid_content"
    assert not await Message.objects.aexists()


def test_isinstance_of_the_sdks_session_protocol_creates_no_session_in_sync_code(
    django_assert_num_queries,
):
    session = CortexSession(scope=SCOPE, agent_id="a")
    with django_assert_num_queries(0):
        assert isinstance(session, SDKSession)
    assert not Session.objects.exists()


@async_test
async def test_isinstance_of_the_sdks_session_protocol_does_not_raise_in_async_code():
    session = CortexSession(scope=SCOPE, agent_id="a")
    assert isinstance(session, SDKSession)
    await session.add_items([{"role": "user", "content": "hi"}])
    assert isinstance(session, SDKSession)
    assert session.session_id == str((await Session.objects.aget()).pk)
