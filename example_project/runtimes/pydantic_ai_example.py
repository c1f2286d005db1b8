"""Pydantic AI with its message history in cortex_sessions (docs/pydantic-ai.md).

Two turns of a Pydantic AI agent against a scripted model (``FunctionModel``, no network): each
turn loads the history with ``load_history`` and saves the run's ``new_messages()`` with
``save_messages``, so the second turn sees the first, and the conversation is a cortex session
the admin and the REST API show like any other. Run after ``python manage.py migrate``::

    python -m example_project.runtimes.pydantic_ai_example
"""

from __future__ import annotations

import os
from typing import Any


def main(scope: str = "org=acme/user=42", agent_id: str = "pydantic-city-guide") -> dict[str, Any]:
    """Run two turns in the agent's default session at ``scope``; return what happened."""
    from pydantic_ai import Agent
    from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, TextPart
    from pydantic_ai.models.function import AgentInfo, FunctionModel

    from cortex_sessions import services
    from cortex_sessions.integrations.pydantic_ai import load_history, save_messages

    replies = ["San Francisco.", "California."]
    prompts: list[list[str]] = []

    def scripted(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        prompts.append(
            [
                str(getattr(part, "content", ""))
                for message in messages
                for part in message.parts
                if isinstance(message, ModelRequest) or isinstance(part, TextPart)
            ]
        )
        return ModelResponse(parts=[TextPart(replies.pop(0))])

    agent = Agent(FunctionModel(scripted), instructions="Answer in one line.")
    answers = []
    for question in ["Which city is the Golden Gate Bridge in?", "And which state?"]:
        history = load_history(scope=scope, agent_id=agent_id)
        result = agent.run_sync(question, message_history=history)
        session = save_messages(scope=scope, agent_id=agent_id, messages=result.new_messages())
        answers.append(result.output)

    stored = services.get_session(scope=scope, session_id=session.pk)
    return {
        "answers": answers,
        "second_turn_prompt": prompts[-1],
        "session_id": str(stored.pk),
        "message_count": stored.message_count,
        "last_message": stored.last_message,
    }


if __name__ == "__main__":
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "example_project.settings")
    import django

    django.setup()
    outcome = main()
    print("answers:", outcome["answers"])
    print("the model's second prompt:", outcome["second_turn_prompt"])
    print(f"session {outcome['session_id']}: {outcome['message_count']} messages,")
    print(f"last message {outcome['last_message']!r} (see it in the admin and the API)")
