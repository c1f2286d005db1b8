"""The graph's ``messages`` channel mirrored into the session's messages (docs/design.md §19.1).

When a checkpoint of the root namespace updates the messages channel, the messages the channel
holds that its value at the parent checkpoint did not (by LangChain message ``id``; by equality
for a message without one) are appended to the session, stored as the LangChain adapter stores
them (:mod:`cortex_sessions.integrations.langchain.messages`). The saver calls this in the
transaction that inserts the checkpoint row, and only when the row is new, so a repeated ``put``
of one checkpoint mirrors nothing twice. Edits and removals of earlier messages (a
``RemoveMessage``, an update with the same id) are not mirrored: the session keeps what was said.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from langchain_core.messages import BaseMessage

from ... import services
from ...conf import app_settings
from ...models import Session
from ..langchain.messages import to_cortex

__all__ = ["mirror_messages", "new_messages"]


def new_messages(current: Any, previous: Any) -> list[BaseMessage]:
    """The messages of ``current`` that ``previous`` did not hold, in order.

    Args:
        current: the channel's value at the new checkpoint (a list of messages, normally).
        previous: its value at the parent checkpoint, or ``None``.

    Returns:
        The new ``BaseMessage`` objects; ``[]`` when ``current`` is not a list.
    """
    if not isinstance(current, Sequence) or isinstance(current, str | bytes):
        return []
    before = list(previous) if isinstance(previous, Sequence) else []
    seen = {m.id for m in before if isinstance(m, BaseMessage) and m.id}
    anonymous = [m for m in before if isinstance(m, BaseMessage) and not m.id]
    return [
        m
        for m in current
        if isinstance(m, BaseMessage)
        and (m.id not in seen if m.id else m not in anonymous)
        and m.type != "remove"
    ]


def mirror_messages(
    session: Session,
    current: Any,
    previous: Callable[[], Any],
) -> int:
    """Append the new messages of the channel to ``session`` (in the caller's transaction).

    Args:
        session: the thread's session (locked by the caller).
        current: the channel's value at the new checkpoint.
        previous: returns its value at the parent checkpoint (called only when needed).

    Returns:
        How many messages were appended.

    Raises:
        SessionArchived: the session is archived.
        InvalidInput (InvalidContent, MessageTooLarge, …): a message cannot be stored.
    """
    if not isinstance(current, Sequence) or not current:
        return 0
    fresh = new_messages(current, previous())
    if not fresh:
        return 0
    rows = [to_cortex(message) for message in fresh]
    batch = app_settings.MAX_MESSAGES_PER_APPEND
    for start in range(0, len(rows), batch):
        services.append_messages(
            scope=session.scope, session_id=session.pk, messages=rows[start : start + batch]
        )
    return len(rows)
