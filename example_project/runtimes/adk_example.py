"""Google ADK with cortex_sessions as its session service (docs/adk.md).

Two turns of ADK's ``Runner`` against a scripted model (no network): the second turn's request
holds the first turn, because ``CortexSessionService`` keeps the events as messages of a cortex
session that the admin and the REST API show like any other. Run after
``python manage.py migrate``::

    python -m example_project.runtimes.adk_example
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncGenerator
from typing import Any

from google.adk.agents import LlmAgent
from google.adk.models.base_llm import BaseLlm
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.adk.runners import Runner
from google.genai import types
from pydantic import Field


class ScriptedLlm(BaseLlm):
    """A model that answers with the next of its scripted replies and records each request."""

    model: str = "scripted"
    replies: list[str] = Field(default_factory=list)
    requests: list[LlmRequest] = Field(default_factory=list)

    async def generate_content_async(
        self, llm_request: LlmRequest, stream: bool = False
    ) -> AsyncGenerator[LlmResponse, None]:
        self.requests.append(llm_request)
        yield LlmResponse(
            content=types.Content(role="model", parts=[types.Part(text=self.replies.pop(0))])
        )


def request_texts(request: LlmRequest) -> list[str]:
    """The texts of a request's contents, in order."""
    return [part.text for content in request.contents for part in content.parts or [] if part.text]


async def main(app_name: str = "city-guide", user_id: str = "42") -> dict[str, Any]:
    """Run two turns for ``user_id``; return what happened."""
    from cortex_sessions import services
    from cortex_sessions.integrations.adk import CortexSessionService

    model = ScriptedLlm(replies=["San Francisco.", "California."])
    agent = LlmAgent(name="guide", model=model, instruction="Answer in one line.")
    session_service = CortexSessionService()
    runner = Runner(agent=agent, app_name=app_name, session_service=session_service)

    session = await session_service.create_session(
        app_name=app_name, user_id=user_id, state={"user:units": "metric"}
    )
    for question in ("Which city is the Golden Gate Bridge in?", "And which state?"):
        message = types.Content(role="user", parts=[types.Part(text=question)])
        async for _event in runner.run_async(
            user_id=user_id, session_id=session.id, new_message=message
        ):
            pass

    scope = session_service.scope_for(app_name, user_id)
    stored = await services.aget_session(scope=scope, session_id=session.id)
    return {
        "second_turn_request": request_texts(model.requests[-1]),
        "session_id": session.id,
        "scope": scope.canonical,
        "message_count": stored.message_count,
        "last_message": stored.last_message,
    }


if __name__ == "__main__":
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "example_project.settings")
    import django

    django.setup()
    outcome = asyncio.run(main())
    print("the model's second request:", outcome["second_turn_request"])
    print(f"session {outcome['session_id']} at {outcome['scope']}: {outcome['message_count']}")
    print(f"messages, last message {outcome['last_message']!r} (see the admin and the API)")
