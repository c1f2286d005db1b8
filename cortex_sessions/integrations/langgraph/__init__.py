"""LangGraph's ``BaseCheckpointSaver`` over cortex sessions (docs/design.md §19.1).

A small Django app of its own (app label ``cortex_langgraph``): add
``"cortex_sessions.integrations.langgraph"`` to ``INSTALLED_APPS`` next to ``"cortex_sessions"``
and run ``migrate``; install with the ``[langgraph]`` extra. Then::

    from cortex_sessions.integrations.langgraph import CortexCheckpointSaver, thread_config

    graph = builder.compile(checkpointer=CortexCheckpointSaver(scope="org=acme", agent_id="bot"))
    config = thread_config(scope="org=acme/user=42", agent_id="bot")  # the default session
    graph.invoke({"messages": [("user", "Hi")]}, config)

``CortexCheckpointSaver`` and ``thread_config`` are imported lazily, so the app (its models and
migration) loads even where LangGraph itself is not installed.
"""

from __future__ import annotations

from typing import Any

__all__ = ["CortexCheckpointSaver", "athread_config", "thread_config"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from . import saver

        return getattr(saver, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
