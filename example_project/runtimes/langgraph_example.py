"""LangGraph with cortex_sessions as its checkpointer (docs/langgraph.md).

Two turns of a one-node chat graph against a scripted chat model (no network), checkpointed by
``CortexCheckpointSaver`` in the agent's default session: the second turn sees the first
(LangGraph restores the thread's state from the checkpoint), and the graph's ``messages``
channel is mirrored into the session's messages, so the admin, the REST API and search show the
conversation like any other. Run after ``python manage.py migrate``::

    python -m example_project.runtimes.langgraph_example
"""

from __future__ import annotations

import os
from typing import Any


def main(scope: str = "org=acme/user=42", agent_id: str = "langgraph-city-guide") -> dict[str, Any]:
    """Run two turns in the agent's default session at ``scope``; return what happened."""
    from langchain_core.language_models.fake_chat_models import FakeMessagesListChatModel
    from langchain_core.messages import AIMessage
    from langgraph.graph import START, MessagesState, StateGraph

    from cortex_sessions import services
    from cortex_sessions.integrations.langgraph import CortexCheckpointSaver, thread_config

    model = FakeMessagesListChatModel(
        responses=[AIMessage("San Francisco."), AIMessage("California.")]
    )
    prompts: list[list[str]] = []

    def chat(state: MessagesState) -> dict[str, Any]:
        prompts.append([str(message.content) for message in state["messages"]])
        return {"messages": [model.invoke(state["messages"])]}

    builder = StateGraph(MessagesState)
    builder.add_node("chat", chat)
    builder.add_edge(START, "chat")
    graph = builder.compile(checkpointer=CortexCheckpointSaver(scope=scope, agent_id=agent_id))

    config = thread_config(scope=scope, agent_id=agent_id)  # the agent's default session
    first = graph.invoke(
        {"messages": [("user", "Which city is the Golden Gate Bridge in?")]}, config
    )
    second = graph.invoke({"messages": [("user", "And which state?")]}, config)

    session_id = config["configurable"]["thread_id"]
    stored = services.get_session(scope=scope, session_id=session_id)
    return {
        "answers": [first["messages"][-1].content, second["messages"][-1].content],
        "second_turn_prompt": prompts[-1],
        "session_id": session_id,
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
