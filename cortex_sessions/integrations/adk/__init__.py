"""Google ADK's ``BaseSessionService`` over cortex sessions (docs/design.md §13.3).

A small Django app of its own (app label ``cortex_adk``): add
``"cortex_sessions.integrations.adk"`` to ``INSTALLED_APPS`` next to ``"cortex_sessions"`` and run
``migrate``; install with the ``[adk]`` extra. Then::

    from cortex_sessions.integrations.adk import CortexSessionService

    runner = Runner(agent=agent, app_name="support", session_service=CortexSessionService())

``CortexSessionService`` is imported lazily, so the app (its models and migration) loads even
where ADK itself is not installed.
"""

from __future__ import annotations

from typing import Any

__all__ = ["CortexSessionService", "default_scope"]


def __getattr__(name: str) -> Any:
    if name == "CortexSessionService":
        from .service import CortexSessionService

        return CortexSessionService
    if name == "default_scope":
        from .conf import default_scope

        return default_scope
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
