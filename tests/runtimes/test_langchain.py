"""``CortexChatMessageHistory`` against LangChain's ``BaseChatMessageHistory`` (docs/design.md §19.2).

Exact round trips of every message type (human, ai with tool calls and usage, tool, system,
chat, function, chunks), order, the async twins, clear, the default session and pinned ones,
tenant safety, bad input writing nothing, and messages other writers added.
"""

from __future__ import annotations

import uuid

import pytest

pytest.importorskip("langchain_core")

from langchain_core.chat_history import BaseChatMessageHistory
from langchain_core.messages import (
    AIMessage,
    AIMessageChunk,
    ChatMessage,
    FunctionMessage,
    HumanMessage,
    RemoveMessage,
    SystemMessage,
    ToolMessage,
)

from cortex_sessions import services
from cortex_sessions.exceptions import (
    InvalidContent,
    InvalidInput,
    SessionArchived,
    SessionNotFound,
)
from cortex_sessions.integrations.langchain import CortexChatMessageHistory
from cortex_sessions.integrations.langchain.messages import (
    MESSAGE_BLOCK_TYPE,
    from_cortex,
    to_cortex,
)
from cortex_sessions.models import Message, Session
from tests.asyncio_support import async_test

pytestmark = pytest.mark.django_db

ALICE = "org=acme/user=alice"
BOB = "org=acme/user=bob"
AGENT = "helper"


def conversation():
    """One message of every kind, with the fields LangChain round-trips."""
    return [
        SystemMessage("You are terse.", id="sys-1"),
        HumanMessage("What is 2 + 2?", id="h-1", name="alice"),
        AIMessage(
            "",
            id="ai-1",
            tool_calls=[{"name": "add", "args": {"a": 2, "b": 2}, "id": "call-1"}],
            usage_metadata={"input_tokens": 10, "output_tokens": 5, "total_tokens": 15},
            response_metadata={"model_name": "scripted"},
        ),
        ToolMessage("4", tool_call_id="call-1", id="t-1", name="add"),
        AIMessage([{"type": "text", "text": "It is 4."}], id="ai-2"),
        ChatMessage("an operator note", role="developer", id="c-1"),
        FunctionMessage("legacy", name="f", id="f-1"),
        AIMessageChunk("partial", id="chunk-1"),
        HumanMessage("Ünïcode ✓ '; DROP TABLE x; --", additional_kwargs={"k": [1, None]}),
    ]


def test_history_is_a_base_chat_message_history():
    history = CortexChatMessageHistory(scope=ALICE, agent_id=AGENT)
    assert isinstance(history, BaseChatMessageHistory)


def test_every_message_type_round_trips_exactly_in_order():
    history = CortexChatMessageHistory(scope=ALICE, agent_id=AGENT)
    sent = conversation()
    history.add_messages(sent)
    assert history.messages == sent
    assert [type(m) for m in history.messages] == [type(m) for m in sent]
    again = CortexChatMessageHistory(scope=ALICE, agent_id=AGENT)  # a new object, same default
    assert again.messages == sent


def test_roles_and_readable_text_are_stored():
    history = CortexChatMessageHistory(scope=ALICE, agent_id=AGENT)
    history.add_messages(conversation()[:5])
    rows = list(Message.objects.filter(session_id=history.session_id).order_by("seq"))
    assert [row.role for row in rows] == ["system", "user", "assistant", "tool", "assistant"]
    assert rows[1].content[0] == {"type": "text", "text": "What is 2 + 2?"}
    assert rows[2].content[0]["type"] == MESSAGE_BLOCK_TYPE  # no text: only the verbatim block
    session = Session.objects.get(pk=history.session_id)
    assert session.message_count == 5
    assert session.last_message == "It is 4."


def test_chat_message_roles_map():
    assert to_cortex(ChatMessage("x", role="developer"))["role"] == "system"
    assert to_cortex(ChatMessage("x", role="user"))["role"] == "user"
    assert to_cortex(ChatMessage("x", role="critic"))["role"] == "tool"


def test_messages_other_writers_added_read_back_by_role():
    history = CortexChatMessageHistory(scope=ALICE, agent_id=AGENT)
    history.add_messages([HumanMessage("Hi", id="h")])
    services.append_messages(
        scope=ALICE,
        session_id=history.session_id,
        messages=[
            {"role": "assistant", "content": "From the operator."},
            {"role": "tool", "content": "no tool call id"},
            {"role": "system", "content": "Be kind."},
        ],
    )
    assert history.messages == [
        HumanMessage("Hi", id="h"),
        AIMessage("From the operator."),
        SystemMessage("Be kind."),
    ]
    assert from_cortex("tool", [{"type": "text", "text": "x"}]) is None


def test_text_postgresql_cannot_store_is_kept_as_json_text():
    history = CortexChatMessageHistory(scope=ALICE, agent_id=AGENT)
    sent = [HumanMessage("nul \x00 inside", id="n")]
    history.add_messages(sent)
    assert history.messages == sent
    row = Message.objects.get(session_id=history.session_id)
    assert "message_json" in row.content[-1]


def test_bad_input_writes_nothing():
    history = CortexChatMessageHistory(scope=ALICE, agent_id=AGENT)
    with pytest.raises(InvalidInput, match="RemoveMessage removes"):
        history.add_messages([HumanMessage("ok"), RemoveMessage(id="x")])
    with pytest.raises(InvalidInput, match="BaseMessage, not str") as caught:
        history.add_messages([HumanMessage("ok"), "not a message"])  # type: ignore[list-item]
    assert "RemoveMessage" not in str(caught.value)
    assert history.messages == []
    assert Message.objects.count() == 0


@pytest.mark.parametrize("value", [float("nan"), float("inf"), -float("inf")])
def test_nan_and_infinity_are_refused_not_stored_as_null(value):
    # LangChain's JSON-mode dump writes them as null, which would read back as None.
    history = CortexChatMessageHistory(scope=ALICE, agent_id=AGENT)
    for bad in (
        AIMessage("x", additional_kwargs={"v": value}),
        AIMessage("x", response_metadata={"scores": [1.0, {"s": value}]}),
    ):
        with pytest.raises(InvalidContent) as caught:
            history.add_messages([HumanMessage("ok"), bad])
        assert caught.value.field == "content"
    assert Message.objects.count() == 0
    fine = [AIMessage("x", additional_kwargs={"v": 1.5, "small": -2.5e-300})]
    history.add_messages(fine)
    assert history.messages == fine


def test_empty_add_writes_nothing():
    history = CortexChatMessageHistory(scope=ALICE, agent_id=AGENT)
    history.add_messages([])
    assert Message.objects.count() == 0


def test_clear_empties_the_session_and_keeps_it():
    history = CortexChatMessageHistory(scope=ALICE, agent_id=AGENT)
    history.add_messages(conversation())
    pk = history.session_id
    history.clear()
    assert history.messages == []
    assert Session.objects.get(pk=pk).message_count == 0


def test_more_than_one_append_batch(settings):
    settings.CORTEX_SESSIONS = {"MAX_MESSAGES_PER_APPEND": 3}
    history = CortexChatMessageHistory(scope=ALICE, agent_id=AGENT)
    sent = [HumanMessage(f"m{i}", id=f"m{i}") for i in range(8)]
    history.add_messages(sent)
    assert history.messages == sent


def test_default_session_is_the_agents_default_at_scope():
    history = CortexChatMessageHistory(scope=ALICE, agent_id=AGENT)
    history.add_message(HumanMessage("hello"))
    default, created = services.resolve_session(scope=ALICE, agent_id=AGENT)
    assert not created
    assert default.pk == history.session_id


def test_pinned_session_outside_scope_or_of_another_agent_is_not_found():
    theirs = services.create_session(scope=BOB, agent_id=AGENT)
    with pytest.raises(SessionNotFound):
        _ = CortexChatMessageHistory(scope=ALICE, agent_id=AGENT, session_id=theirs.pk).messages
    other_agent = services.create_session(scope=ALICE, agent_id="other")
    with pytest.raises(SessionNotFound):
        CortexChatMessageHistory(
            scope=ALICE, agent_id=AGENT, session_id=other_agent.pk
        ).add_messages([HumanMessage("x")])
    with pytest.raises(SessionNotFound):
        CortexChatMessageHistory(scope=ALICE, agent_id=AGENT, session_id=uuid.uuid4()).clear()
    assert Message.objects.count() == 0


def test_pinned_archived_session_reads_and_refuses_writes():
    session = services.create_session(scope=ALICE, agent_id=AGENT)
    history = CortexChatMessageHistory(scope=ALICE, agent_id=AGENT, session_id=str(session.pk))
    history.add_messages([HumanMessage("before", id="b")])
    services.archive_session(scope=ALICE, session_id=session.pk)
    assert history.messages == [HumanMessage("before", id="b")]
    with pytest.raises(SessionArchived):
        history.add_messages([HumanMessage("after")])


def test_histories_of_two_scopes_are_apart():
    alice = CortexChatMessageHistory(scope=ALICE, agent_id=AGENT)
    bob = CortexChatMessageHistory(scope=BOB, agent_id=AGENT)
    alice.add_messages([HumanMessage("alice's")])
    bob.add_messages([HumanMessage("bob's")])
    assert [m.content for m in alice.messages] == ["alice's"]
    assert [m.content for m in bob.messages] == ["bob's"]


@async_test
async def test_async_twins_round_trip():
    history = CortexChatMessageHistory(scope=ALICE, agent_id=AGENT)
    sent = conversation()
    await history.aadd_messages(sent)
    assert await history.aget_messages() == sent
    await history.aclear()
    assert await history.aget_messages() == []
