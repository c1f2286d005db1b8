"""The OpenAI Agents SDK's ``OpenAIResponsesCompactionSession`` over a cortex session keeps the
transcript (docs/design.md §16.5): run with the SDK's ``Runner`` and a scripted model and
compaction endpoint, the SDK sees the compacted history while the cortex session holds every
original item plus the compaction summary."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

pytest.importorskip("agents")

from agents import Agent, RunConfig, Runner
from agents.items import ModelResponse
from agents.memory import OpenAIResponsesCompactionSession
from agents.usage import Usage

from cortex_sessions import services
from cortex_sessions.integrations.openai_agents import CortexSession, message_to_item
from cortex_sessions.integrations.openai_compaction import CompactingCortexSession
from cortex_sessions.models import Message
from example_project.runtimes.openai_agents_example import ScriptedModel
from tests.asyncio_support import async_test

pytestmark = pytest.mark.django_db

SCOPE = "org=acme/user=alice"
COMPACTION_ITEM = {"type": "compaction", "encrypted_content": "opaque-summary"}


class RespondingModel(ScriptedModel):
    """A scripted model whose answers carry a response id, as the Responses API's do (the
    SDK compacts only after a response it can name)."""

    async def get_response(self, system_instructions, input, *args: Any, **kwargs: Any):
        response = await super().get_response(system_instructions, input, *args, **kwargs)
        return ModelResponse(
            output=response.output, usage=Usage(), response_id=f"resp_{len(self.inputs)}"
        )


class ScriptedCompactor:
    """Stands in for the OpenAI client: ``responses.compact`` keeps the user messages and adds
    one opaque compaction item, as the API does, and records what it was sent."""

    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []
        self.responses = SimpleNamespace(compact=self.compact)

    async def compact(self, **kwargs: Any) -> Any:
        self.calls.append(kwargs)
        kept = [
            {"type": "message", "role": "user", "content": item["content"]}
            for item in kwargs.get("input", [])
            if isinstance(item, dict) and item.get("role") == "user"
        ]
        return SimpleNamespace(output=[*kept, COMPACTION_ITEM], usage=None)


def _sdk_items(rows):
    return [item for row in rows if (item := message_to_item(row)) is not None]


@async_test
async def test_compaction_through_the_runner_keeps_every_original_item():
    store = CompactingCortexSession(scope=SCOPE, agent_id="bot")
    compactor = ScriptedCompactor()
    session = OpenAIResponsesCompactionSession(
        session_id="s",
        underlying_session=store,
        client=compactor,
        compaction_mode="input",
        should_trigger_compaction=lambda context: len(context["session_items"]) >= 4,
    )
    model = RespondingModel(["San Francisco.", "California.", "Sacramento."])
    agent = Agent(name="guide", instructions="One line.", model=model)
    offline = RunConfig(tracing_disabled=True)
    await Runner.run(agent, "Which city is the bridge in?", session=session, run_config=offline)
    await Runner.run(agent, "Which state?", session=session, run_config=offline)

    assert compactor.calls, "the SDK never compacted"
    compacted = await session.get_items()
    assert COMPACTION_ITEM in compacted
    assert not any(item.get("role") == "assistant" for item in compacted)

    rows = [m async for m in Message.objects.filter(session_id=store.session_id).order_by("seq")]
    summaries = [row for row in rows if row.compacts_through_seq is not None]
    assert len(summaries) == 1
    assert summaries[0].source == "checkpoint"
    originals = [row for row in rows if row.compacts_through_seq is None]
    texts = [item.get("content") for item in _sdk_items(originals)]
    assert "Which city is the bridge in?" in texts
    assert "Which state?" in texts
    assert len(originals) == 4  # two user inputs, two answers: nothing deleted

    # the next turn sees the compacted history, then its own input
    await Runner.run(agent, "Capital?", session=session, run_config=offline)
    seen = model.inputs[-1]
    assert COMPACTION_ITEM in seen
    assert not any(isinstance(item, dict) and item.get("role") == "assistant" for item in seen[:-1])
    window = await services.acontext_messages(scope=SCOPE, session_id=store.session_id)
    newest = await Message.objects.filter(
        session_id=store.session_id, compacts_through_seq__isnull=False
    ).alatest("seq")
    assert window.messages[0] == newest
    assert await Message.objects.filter(session_id=store.session_id).acount() > len(rows)


@async_test
async def test_manual_compaction_replaces_nothing_in_the_transcript():
    store = CompactingCortexSession(scope=SCOPE, agent_id="bot")
    items = [
        {"role": "user", "content": "one"},
        {"role": "assistant", "content": "two"},
        {"role": "user", "content": "three"},
    ]
    await store.add_items(items)
    session = OpenAIResponsesCompactionSession(
        session_id="s", underlying_session=store, client=ScriptedCompactor()
    )
    await session.run_compaction({"force": True, "compaction_mode": "input"})
    assert await store.get_items() == [
        {"type": "message", "role": "user", "content": "one"},
        {"type": "message", "role": "user", "content": "three"},
        COMPACTION_ITEM,
    ]
    plain = CortexSession(scope=SCOPE, agent_id="bot", session_id=store.session_id)
    assert (await plain.get_items())[:3] == items  # the whole transcript, in order
    await store.add_items([{"role": "user", "content": "four"}])
    assert (await store.get_items())[-2:] == [COMPACTION_ITEM, {"role": "user", "content": "four"}]
    assert await store.get_items(limit=1) == [{"role": "user", "content": "four"}]
