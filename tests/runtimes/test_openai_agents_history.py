"""``CortexSession.get_items()`` of a whole history: on PostgreSQL a page per statement
(``openai_agents_history``), elsewhere the ORM; both return the same items (§13.2, §14)."""

from __future__ import annotations

import pytest

pytest.importorskip("agents")

from asgiref.sync import async_to_sync
from django.db import connection
from django.test.utils import CaptureQueriesContext

from cortex_sessions import services
from cortex_sessions.exceptions import SessionNotFound
from cortex_sessions.integrations import openai_agents
from cortex_sessions.integrations.openai_agents import CortexSession

pytestmark = pytest.mark.django_db

SCOPE = "org=acme/user=alice"
ITEMS = [
    {"role": "user", "content": "hello"},
    {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
    {"role": "assistant", "content": [{"type": "output_text", "text": "a\x00b"}]},  # item_json
    {"type": "function_call_output", "call_id": "c1", "output": "42"},
]


def _session_with_history():
    created = services.create_session(scope=SCOPE, agent_id="a")
    session = CortexSession(scope=SCOPE, agent_id="a", session_id=created.pk)
    async_to_sync(session.add_items)(ITEMS[:2])
    services.append_messages(  # another writer's messages: one reads as an item, one is skipped
        scope=SCOPE,
        session_id=created.pk,
        messages=[
            {"role": "assistant", "content": "from the API"},
            {"role": "tool", "content": "a tool note without an item"},
        ],
    )
    async_to_sync(session.add_items)(ITEMS[2:])
    return session


EXPECTED = [*ITEMS[:2], {"role": "assistant", "content": "from the API"}, *ITEMS[2:]]


def test_the_whole_history_reads_back_exactly_in_one_statement():
    session = _session_with_history()
    with CaptureQueriesContext(connection) as captured:
        assert async_to_sync(session.get_items)() == EXPECTED
    if connection.vendor == "postgresql":
        # the items-only page tells a message without an item; the page is then read whole
        assert len(captured.captured_queries) == 2


@pytest.mark.parametrize("page", [1, 2, 5])
def test_a_history_longer_than_a_page_reads_back_whole(monkeypatch, page):
    monkeypatch.setattr(openai_agents, "_HISTORY_PAGE", page)
    monkeypatch.setattr(openai_agents, "_PAGE", page)
    session = _session_with_history()
    assert async_to_sync(session.get_items)() == EXPECTED


def test_an_empty_history_is_empty_and_another_scopes_session_is_not_found():
    created = services.create_session(scope=SCOPE, agent_id="a")
    assert (
        async_to_sync(CortexSession(scope=SCOPE, agent_id="a", session_id=created.pk).get_items)()
        == []
    )
    services.append_messages(
        scope=SCOPE, session_id=created.pk, messages=[{"role": "user", "content": "x"}]
    )
    with pytest.raises(SessionNotFound):
        async_to_sync(
            CortexSession(scope="org=globex", agent_id="a", session_id=created.pk).get_items
        )()


@pytest.mark.postgres_only
def test_a_history_of_a_thousand_items_is_one_statement_on_postgresql():
    created = services.create_session(scope=SCOPE, agent_id="a")
    session = CortexSession(scope=SCOPE, agent_id="a", session_id=created.pk)
    items = [{"role": "user", "content": f"item {n}"} for n in range(1000)]
    async_to_sync(session.add_items)(items)
    with CaptureQueriesContext(connection) as captured:
        assert async_to_sync(session.get_items)() == items
    assert len(captured.captured_queries) == 1
    # each message's item alone is aggregated, not its role, block and content
    assert "json_agg(block -> 'item' ORDER BY seq)" in captured.captured_queries[0]["sql"]
