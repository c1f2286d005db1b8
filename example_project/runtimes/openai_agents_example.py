"""The OpenAI Agents SDK with cortex_sessions as its session store (docs/openai-agents.md).

Two turns of ``Runner.run`` against a scripted model (no network): the second turn sees the
first, because ``CortexSession`` keeps the history in a cortex session that the admin and the
REST API show like any other. Run after ``python manage.py migrate``::

    python -m example_project.runtimes.openai_agents_example
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from typing import Any

from agents import Agent, RunConfig, Runner
from agents.items import ModelResponse
from agents.models.interface import Model
from agents.usage import Usage
from openai.types.responses import ResponseOutputMessage, ResponseOutputText


class ScriptedModel(Model):
    """A model that answers with the next of its scripted replies and records what it was sent."""

    def __init__(self, replies: list[str]) -> None:
        self.replies = list(replies)
        self.inputs: list[Any] = []

    async def get_response(self, system_instructions, input, *args: Any, **kwargs: Any):
        self.inputs.append(input)
        message = ResponseOutputMessage(
            id=f"msg_{len(self.inputs)}",
            type="message",
            role="assistant",
            status="completed",
            content=[
                ResponseOutputText(
                    type="output_text", text=self.replies.pop(0), annotations=[], logprobs=[]
                )
            ],
        )
        return ModelResponse(output=[message], usage=Usage(), response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        raise NotImplementedError("this example does not stream")


async def main(scope: str = "org=acme/user=42", agent_id: str = "city-guide") -> dict[str, Any]:
    """Run two turns in the agent's default session at ``scope``; return what happened."""
    from cortex_sessions import services
    from cortex_sessions.integrations.openai_agents import CortexSession

    model = ScriptedModel(["San Francisco.", "California."])
    agent = Agent(name="City guide", instructions="Answer in one line.", model=model)
    session = CortexSession(scope=scope, agent_id=agent_id)
    offline = RunConfig(tracing_disabled=True)  # the example never talks to the network

    first = await Runner.run(
        agent, "Which city is the Golden Gate Bridge in?", session=session, run_config=offline
    )
    second = await Runner.run(agent, "And which state?", session=session, run_config=offline)

    stored = await services.aget_session(scope=scope, session_id=session.session_id)
    return {
        "answers": [first.final_output, second.final_output],
        "second_turn_input": model.inputs[-1],
        "session_id": session.session_id,
        "message_count": stored.message_count,
        "last_message": stored.last_message,
    }


if __name__ == "__main__":
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "example_project.settings")
    import django

    django.setup()
    outcome = asyncio.run(main())
    print("answers:", outcome["answers"])
    print(f"session {outcome['session_id']}: {outcome['message_count']} messages,")
    print(f"last message {outcome['last_message']!r} (see it in the admin and the API)")
