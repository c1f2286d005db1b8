"""Adapters that make cortex_sessions the session store of agent runtimes (docs/design.md §13, §19).

- :mod:`cortex_sessions.integrations.openai_agents` — the OpenAI Agents SDK's ``Session``
  protocol (extra ``[openai-agents]``).
- :mod:`cortex_sessions.integrations.adk` — Google ADK's ``BaseSessionService``, a small Django
  app of its own (extra ``[adk]``).
- :mod:`cortex_sessions.integrations.langchain` — LangChain's ``BaseChatMessageHistory``
  (extra ``[langchain]``), and the conversion of LangChain messages the LangGraph saver shares.
- :mod:`cortex_sessions.integrations.langgraph` — LangGraph's ``BaseCheckpointSaver``, a small
  Django app of its own (extra ``[langgraph]``).
- :mod:`cortex_sessions.integrations.pydantic_ai` — Pydantic AI message history helpers (extra
  ``[pydantic-ai]``).
- :mod:`cortex_sessions.integrations.blocks` — the content blocks the adapters write and read
  (a readable text copy, the record kept verbatim); it imports no SDK.

Each adapter imports its SDK at import time; the core app never imports them.
"""
