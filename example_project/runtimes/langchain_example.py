"""LangChain with cortex_sessions as its chat message history (docs/langchain.md).

Two turns of a scripted chat model (no network) that reads its history from and writes it to
``CortexChatMessageHistory``: the second turn sees the first, because ``CortexChatMessageHistory`` keeps the conversation in a
cortex session that the admin and the REST API show like any other. Run after
``python manage.py migrate``::

    python -m example_project.runtimes.langchain_example
"""

from __future__ import annotations

import os
from typing import Any


def main(scope: str = "org=acme/user=42", agent_id: str = "langchain-city-guide") -> dict[str, Any]:
    """Run two turns in the agent's default session at ``scope``; return what happened."""
    from langchain_core.language_models.fake_chat_models import FakeMessagesListChatModel
    from langchain_core.messages import AIMessage, HumanMessage, SystemMessage

    from cortex_sessions import services
    from cortex_sessions.integrations.langchain import CortexChatMessageHistory

    model = FakeMessagesListChatModel(
        responses=[AIMessage("San Francisco."), AIMessage("California.")]
    )
    prompts: list[list[str]] = []

    def turn(question: str) -> str:
        # A fresh history object each turn, as a request handler would make one.
        history = CortexChatMessageHistory(scope=scope, agent_id=agent_id)
        prompt = [SystemMessage("Answer in one line."), *history.messages, HumanMessage(question)]
        prompts.append([str(message.content) for message in prompt])
        answer = model.invoke(prompt)
        history.add_messages([HumanMessage(question), answer])
        return str(answer.content)

    answers = [turn("Which city is the Golden Gate Bridge in?"), turn("And which state?")]

    history = CortexChatMessageHistory(scope=scope, agent_id=agent_id)
    stored = services.get_session(scope=scope, session_id=history.session_id)
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
