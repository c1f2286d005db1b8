"""Pydantic AI history in cortex sessions: ``save_messages`` / ``load_history`` (docs/design.md §19.3).

A run's ``new_messages()`` land in a session and ``message_history=`` reads them back equal
(with ``TestModel`` calling a tool, and a ``FunctionModel`` that checks what it was sent), the
async twins, pinned and default sessions, tenant safety, bad input writing nothing, and messages
other writers added.
"""

from __future__ import annotations

import uuid

import pytest

pytest.importorskip("pydantic_ai")

from pydantic_ai import Agent
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    RetryFeedbackPart,
    RetryInfo,
    SystemPromptPart,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.models.test import TestModel

from cortex_sessions import services
from cortex_sessions.exceptions import (
    InvalidContent,
    InvalidInput,
    SessionArchived,
    SessionNotFound,
)
from cortex_sessions.integrations.pydantic_ai import (
    MESSAGE_BLOCK_TYPE,
    aload_history,
    asave_messages,
    load_history,
    save_messages,
    to_cortex,
)
from cortex_sessions.models import Message
from example_project.runtimes.pydantic_ai_example import main
from tests.asyncio_support import async_test

pytestmark = pytest.mark.django_db

ALICE = "org=acme/user=alice"
BOB = "org=acme/user=bob"
AGENT = "pyd-bot"


def tool_agent() -> Agent:
    agent = Agent(TestModel(), instructions="Be brief.")

    @agent.tool_plain
    def add(a: int, b: int) -> int:
        """Add two numbers."""
        return a + b

    return agent


def test_a_runs_new_messages_round_trip_exactly_and_feed_the_next_run():
    agent = tool_agent()
    first = agent.run_sync("What is 1 + 2?")
    session = save_messages(scope=ALICE, agent_id=AGENT, messages=first.new_messages())
    history = load_history(scope=ALICE, agent_id=AGENT)
    assert history == first.all_messages()
    second = agent.run_sync("Again", message_history=history)
    save_messages(scope=ALICE, agent_id=AGENT, messages=second.new_messages())
    assert load_history(scope=ALICE, agent_id=AGENT) == second.all_messages()
    roles = list(
        Message.objects.filter(session=session).order_by("seq").values_list("role", flat=True)
    )
    assert roles[:4] == ["user", "assistant", "tool", "assistant"]


def test_the_model_is_sent_the_saved_history():
    seen: list[list[ModelMessage]] = []

    def scripted(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        seen.append(list(messages))
        return ModelResponse(parts=[TextPart(f"answer {len(seen)}")])

    agent = Agent(FunctionModel(scripted))
    first = agent.run_sync("one")
    save_messages(scope=ALICE, agent_id=AGENT, messages=first.new_messages())
    agent.run_sync("two", message_history=load_history(scope=ALICE, agent_id=AGENT))
    assert seen[-1][:2] == first.all_messages()


def test_roles_and_text_of_every_kind():
    assert to_cortex(ModelRequest(parts=[UserPromptPart("hi")]))["role"] == "user"
    assert to_cortex(ModelRequest(parts=[SystemPromptPart("sys")]))["role"] == "system"
    tool = to_cortex(ModelRequest(parts=[ToolReturnPart("add", 3, tool_call_id="c1")]))
    assert (tool["role"], tool["content"][0]["text"]) == ("tool", "3")
    feedback = RetryFeedbackPart("bad output", retry=RetryInfo(cause="validation_error"))
    retry = to_cortex(ModelRequest(parts=[feedback]))
    assert retry["role"] == "tool"
    assert "bad output" in retry["content"][0]["text"]
    reply = to_cortex(ModelResponse(parts=[TextPart("Hello")]))
    assert reply["role"] == "assistant"
    assert reply["content"][0] == {"type": "text", "text": "Hello"}
    assert reply["content"][1]["type"] == MESSAGE_BLOCK_TYPE


def test_text_postgresql_cannot_store_round_trips_as_json_text():
    sent = [ModelRequest(parts=[UserPromptPart("nul \x00 here")])]
    session = save_messages(scope=ALICE, agent_id=AGENT, messages=sent)
    assert load_history(scope=ALICE, agent_id=AGENT, session_id=session.pk) == sent
    assert "message_json" in Message.objects.get(session=session).content[-1]


def test_bad_input_writes_nothing():
    good = ModelRequest(parts=[UserPromptPart("ok")])
    with pytest.raises(InvalidInput):
        save_messages(scope=ALICE, agent_id=AGENT, messages=[good, {"kind": "request"}])
    assert not Message.objects.exists()


@pytest.mark.parametrize(
    "args", [{"\ud800": 1}, {"ok": [{"deep \udfff": None}]}], ids=["key", "nested key"]
)
def test_a_lone_surrogate_in_a_key_is_refused_not_replaced(args):
    # Pydantic's JSON-mode dump writes such a key as U+FFFD characters: stored, it would read
    # back as another key. Values keep round-tripping (as JSON text), and so does a real U+FFFD.
    good = ModelRequest(parts=[UserPromptPart("ok")])
    bad = ModelResponse(parts=[ToolCallPart("f", args, tool_call_id="c1")])
    with pytest.raises(InvalidContent) as caught:
        save_messages(scope=ALICE, agent_id=AGENT, messages=[good, bad])
    assert caught.value.field == "content"
    assert not Message.objects.exists()
    kept = [
        ModelResponse(parts=[ToolCallPart("f", {"\ufffd key": "\ud800 value"}, tool_call_id="c")])
    ]
    session = save_messages(scope=ALICE, agent_id=AGENT, messages=kept)
    assert load_history(scope=ALICE, agent_id=AGENT, session_id=session.pk) == kept


@pytest.mark.parametrize("content", [{"k": "\ud800"}, ["a\ud800"]], ids=["dict", "list"])
def test_a_tool_return_pydantic_cannot_write_as_json_round_trips(content):
    # A lone surrogate in a value is kept (as JSON text), as in a tool call's arguments; the
    # readable copy is made without Pydantic's JSON writer, which refuses it.
    sent = [ModelRequest(parts=[ToolReturnPart("f", content, tool_call_id="c1")])]
    session = save_messages(scope=ALICE, agent_id=AGENT, messages=sent)
    assert load_history(scope=ALICE, agent_id=AGENT, session_id=session.pk) == sent
    assert Message.objects.get(session=session).role == "tool"


def test_more_than_one_append_batch(settings):
    settings.CORTEX_SESSIONS = {"MAX_MESSAGES_PER_APPEND": 2}
    sent = [ModelRequest(parts=[UserPromptPart(f"m{i}")]) for i in range(5)]
    save_messages(scope=ALICE, agent_id=AGENT, messages=sent)
    assert load_history(scope=ALICE, agent_id=AGENT) == sent


def test_messages_other_writers_added_read_back_by_role():
    session = save_messages(
        scope=ALICE, agent_id=AGENT, messages=[ModelRequest(parts=[UserPromptPart("hi")])]
    )
    services.append_messages(
        scope=ALICE,
        session_id=session.pk,
        messages=[
            {"role": "assistant", "content": "From the operator."},
            {"role": "tool", "content": "orphan"},
            {"role": "system", "content": "Be kind."},
        ],
    )
    history = load_history(scope=ALICE, agent_id=AGENT)
    assert [type(m) for m in history] == [ModelRequest, ModelResponse, ModelRequest]
    assert history[1].parts[0].content == "From the operator."
    assert isinstance(history[2].parts[0], SystemPromptPart)


def test_pinned_sessions_are_checked_and_archived_ones_refuse_writes():
    theirs = services.create_session(scope=BOB, agent_id=AGENT)
    with pytest.raises(SessionNotFound):
        load_history(scope=ALICE, agent_id=AGENT, session_id=theirs.pk)
    with pytest.raises(SessionNotFound):
        save_messages(scope=ALICE, agent_id=AGENT, messages=[], session_id=uuid.uuid4())
    ours = services.create_session(scope=ALICE, agent_id=AGENT)
    services.archive_session(scope=ALICE, session_id=ours.pk)
    assert load_history(scope=ALICE, agent_id=AGENT, session_id=ours.pk) == []
    with pytest.raises(SessionArchived):
        save_messages(
            scope=ALICE,
            agent_id=AGENT,
            messages=[ModelRequest(parts=[UserPromptPart("x")])],
            session_id=ours.pk,
        )


@async_test
async def test_async_twins_round_trip():
    agent = tool_agent()
    result = await agent.run("What is 2 + 3?")
    await asave_messages(scope=ALICE, agent_id=AGENT, messages=result.new_messages())
    assert await aload_history(scope=ALICE, agent_id=AGENT) == result.all_messages()


def test_example_runs_two_turns():
    outcome = main(scope=ALICE, agent_id=AGENT)
    assert outcome["answers"] == ["San Francisco.", "California."]
    assert outcome["second_turn_prompt"] == [
        "Which city is the Golden Gate Bridge in?",
        "San Francisco.",
        "And which state?",
    ]
    assert (outcome["message_count"], outcome["last_message"]) == (4, "California.")
