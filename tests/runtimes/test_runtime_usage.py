"""Usage the runtimes report lands on the messages when the host turns it on
(docs/design.md §16.1, §16.5)."""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("agents")

from agents import Agent, RunConfig, Runner
from agents.items import ModelResponse
from agents.usage import Usage
from openai.types.responses.response_usage import InputTokensDetails, OutputTokensDetails

from cortex_sessions import services
from cortex_sessions.integrations.openai_agents import CortexSession
from cortex_sessions.integrations.runtime_usage import adk_usage
from cortex_sessions.models import Message
from example_project.runtimes.openai_agents_example import ScriptedModel
from tests.asyncio_support import async_test

pytestmark = pytest.mark.django_db

SCOPE = "org=acme/user=alice"


class CountingModel(ScriptedModel):
    """A scripted model that reports 100 input tokens (20 cached), 7 output (2 reasoning)."""

    async def get_response(self, system_instructions, input, *args: Any, **kwargs: Any):
        response = await super().get_response(system_instructions, input, *args, **kwargs)
        usage = Usage(
            requests=1,
            input_tokens=100,
            output_tokens=7,
            total_tokens=107,
            input_tokens_details=InputTokensDetails(cached_tokens=20, cache_write_tokens=0),
            output_tokens_details=OutputTokensDetails(reasoning_tokens=2),
        )
        return ModelResponse(output=response.output, usage=usage, response_id=None)


async def _two_turns(session):
    agent = Agent(name="guide", instructions="One line.", model=CountingModel(["A.", "B."]))
    offline = RunConfig(tracing_disabled=True)
    await Runner.run(agent, "first?", session=session, run_config=offline)
    await Runner.run(agent, "second?", session=session, run_config=offline)


@async_test
async def test_openai_usage_is_recorded_per_turn_when_turned_on():
    session = CortexSession(scope=SCOPE, agent_id="bot", record_usage=True)
    await _two_turns(session)
    rows = [m async for m in Message.objects.filter(session_id=session.session_id).order_by("seq")]
    answers = [row for row in rows if row.role == "assistant"]
    expected = {
        "input_tokens": 100,
        "output_tokens": 7,
        "cached_input_tokens": 20,
        "reasoning_tokens": 2,
    }
    assert [row.usage for row in answers] == [expected, expected]
    assert all(row.usage is None for row in rows if row.role != "assistant")
    stored = await services.aget_session(scope=SCOPE, session_id=session.session_id)
    assert (stored.input_tokens, stored.output_tokens) == (200, 14)


@async_test
async def test_openai_usage_is_not_recorded_by_default():
    session = CortexSession(scope=SCOPE, agent_id="bot")
    await _two_turns(session)
    rows = [m async for m in Message.objects.filter(session_id=session.session_id)]
    assert rows
    assert all(row.usage is None for row in rows)


def test_adk_usage_metadata_maps_to_usage():
    types = pytest.importorskip("google.genai.types")
    metadata = types.GenerateContentResponseUsageMetadata(
        prompt_token_count=50, candidates_token_count=5, cached_content_token_count=10
    )
    assert adk_usage(metadata, "gemini-2.5-flash") == {
        "input_tokens": 50,
        "output_tokens": 5,
        "cached_input_tokens": 10,
        "model": "gemini-2.5-flash",
    }
    assert adk_usage(None) is None
    assert adk_usage(types.GenerateContentResponseUsageMetadata()) is None


@async_test
async def test_adk_usage_metadata_is_recorded_when_turned_on():
    pytest.importorskip("google.adk")
    from google.adk.agents import LlmAgent
    from google.adk.models.llm_response import LlmResponse
    from google.adk.runners import Runner as AdkRunner
    from google.genai import types

    from cortex_sessions.integrations.adk import CortexSessionService
    from example_project.runtimes.adk_example import ScriptedLlm

    class MeteredLlm(ScriptedLlm):
        async def generate_content_async(self, llm_request, stream=False):
            async for response in super().generate_content_async(llm_request, stream):
                yield LlmResponse(
                    content=response.content,
                    model_version="scripted-1",
                    usage_metadata=types.GenerateContentResponseUsageMetadata(
                        prompt_token_count=40, candidates_token_count=4
                    ),
                )

    for record, expected in ((True, {"input_tokens": 40, "output_tokens": 4}), (False, None)):
        agent = LlmAgent(name="guide", model=MeteredLlm(replies=["A."]), instruction="One line.")
        service = CortexSessionService(record_usage=record)
        runner = AdkRunner(agent=agent, app_name="guide", session_service=service)
        session = await service.create_session(app_name="guide", user_id=f"u-{record}")
        message = types.Content(role="user", parts=[types.Part(text="hi")])
        async for _ in runner.run_async(
            user_id=f"u-{record}", session_id=session.id, new_message=message
        ):
            pass
        rows = [m async for m in Message.objects.filter(session_id=session.id).order_by("seq")]
        answer = rows[-1]
        assert answer.role == "assistant"
        assert answer.usage == (None if expected is None else {**expected, "model": "scripted-1"})
