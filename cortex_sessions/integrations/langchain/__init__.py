"""LangChain's ``BaseChatMessageHistory`` over cortex sessions (docs/design.md §19.2).

Install with the ``[langchain]`` extra. Use::

    from cortex_sessions.integrations.langchain import CortexChatMessageHistory

    history = CortexChatMessageHistory(scope="org=acme/user=42", agent_id="support-bot")
    history.add_messages([HumanMessage("Hi"), AIMessage("Hello!")])

- :mod:`.history` — :class:`CortexChatMessageHistory`.
- :mod:`.messages` — how a LangChain message is stored as a cortex message and read back
  (shared with the LangGraph checkpoint saver, §19.1).

Both import ``langchain_core`` at import time; the core app never imports them.
"""

from __future__ import annotations

from typing import Any

__all__ = ["MESSAGE_BLOCK_TYPE", "CortexChatMessageHistory", "from_cortex", "to_cortex"]


def __getattr__(name: str) -> Any:
    if name == "CortexChatMessageHistory":
        from .history import CortexChatMessageHistory

        return CortexChatMessageHistory
    if name in ("MESSAGE_BLOCK_TYPE", "from_cortex", "to_cortex"):
        from . import messages

        return getattr(messages, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
