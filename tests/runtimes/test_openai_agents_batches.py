"""``CortexSession.add_items`` past ``MAX_MESSAGES_PER_APPEND`` (docs/design.md §12.6, §13.2):
the SDK takes any number of items, so a long list is written as bounded appends — in order,
each its own transaction — and bad input anywhere in it still writes nothing."""

from __future__ import annotations

import pytest

pytest.importorskip("agents")

from asgiref.sync import async_to_sync

from cortex_sessions import services
from cortex_sessions.exceptions import MessageTooLarge
from cortex_sessions.integrations.openai_agents import CortexSession
from cortex_sessions.models import Message
from tests.asyncio_support import async_test

pytestmark = pytest.mark.django_db

ALICE = "org=acme/user=alice"
AGENT = "assistant-1"


def numbered(count: int) -> list[dict]:
    return [{"role": "user" if n % 2 else "assistant", "content": str(n)} for n in range(count)]


@pytest.fixture
def appends(monkeypatch):
    """The sizes of the ``append_messages`` calls the adapter makes, in order."""
    sizes: list[int] = []
    append = services.append_messages

    def counting(**kwargs):
        sizes.append(len(kwargs["messages"]))
        return append(**kwargs)

    monkeypatch.setattr(services, "append_messages", counting)
    return sizes


@pytest.fixture
def bound(settings):
    settings.CORTEX_SESSIONS = {"MAX_MESSAGES_PER_APPEND": 3}
    return 3


@async_test
async def test_add_items_up_to_the_bound_is_one_append(bound, appends):
    session = CortexSession(scope=ALICE, agent_id=AGENT)
    await session.add_items(numbered(bound))
    assert await session.get_items() == numbered(bound)
    assert appends == [3]


@async_test
async def test_add_items_past_the_bound_is_written_in_bounded_appends_in_order(bound, appends):
    session = CortexSession(scope=ALICE, agent_id=AGENT)
    await session.add_items(numbered(bound * 2 + 2))
    assert await session.get_items() == numbered(8)
    assert appends == [3, 3, 2]


def test_a_bad_item_at_the_end_of_a_long_list_writes_nothing(bound, settings, appends):
    settings.CORTEX_SESSIONS = {**settings.CORTEX_SESSIONS, "MAX_MESSAGE_BYTES": 2000}
    pinned = services.create_session(scope=ALICE, agent_id=AGENT)
    session = CortexSession(scope=ALICE, agent_id=AGENT, session_id=pinned.pk)
    with pytest.raises(MessageTooLarge):
        async_to_sync(session.add_items)([*numbered(7), {"role": "user", "content": "x" * 5000}])
    assert appends == []
    assert not Message.objects.filter(session_id=pinned.pk).exists()
