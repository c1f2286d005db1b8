"""The session an adapter writes to: a pinned one, or the agent's default, followed
(docs/design.md §13.2, §19.2). Shared by the OpenAI Agents SDK session and the LangChain
message history."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import TypeVar

from ..exceptions import SessionArchived, SessionNotFound
from ..models import Session

__all__ = ["DEFAULT_ATTEMPTS", "on_session"]

T = TypeVar("T")

#: How many times a default-following adapter resolves the default for one operation: a
#: default deleted or archived between the resolve and the operation is resolved again.
DEFAULT_ATTEMPTS = 3


def on_session(
    operation: Callable[[uuid.UUID], T],
    *,
    pinned: bool,
    current_pk: uuid.UUID | None,
    resolve: Callable[[], Session],
) -> T:
    """Run ``operation(pk)`` on the adapter's session.

    Args:
        operation: the work, given the session's primary key.
        pinned: whether the adapter names its session; it is then checked once (``resolve``
            when ``current_pk`` is still ``None``), and afterwards the services the operation
            calls check the scope themselves.
        current_pk: the pinned session's key once checked, else ``None``.
        resolve: resolves (and checks) the session: the pinned one, or the agent's default.

    Returns:
        What ``operation`` returns.

    Raises:
        SessionNotFound, SessionArchived: from the pinned session's operation, or from the
            default's on the last of :data:`DEFAULT_ATTEMPTS` attempts; and what ``resolve``
            and ``operation`` raise otherwise.
    """
    if pinned:
        return operation(current_pk if current_pk is not None else resolve().pk)
    for attempt in range(1, DEFAULT_ATTEMPTS + 1):
        pk = resolve().pk
        try:
            return operation(pk)
        except (SessionNotFound, SessionArchived):
            if attempt == DEFAULT_ATTEMPTS:
                raise
    raise AssertionError("unreachable")  # pragma: no cover
