"""The OpenAI Agents SDK's compaction over a cortex session, keeping the transcript
(docs/design.md §16.5).

The SDK's ``OpenAIResponsesCompactionSession`` wraps a session and, when the history grows,
replaces it with the compacted items ``responses.compact`` returns: through the wrapped
session's ``_atomic_replace_items(items)`` hook where the session's type defines one, else by
``clear_session()`` then ``add_items(items)``, which on a cortex session would delete the
transcript. :class:`~cortex_sessions.integrations.openai_agents.CortexSession` defines the hook (:func:`replace_with_compaction`) as a
cortex compaction (§16.3) instead: the compacted items become one summary message (role
``user``, source ``checkpoint``, one item block per item) standing for every message so far,
and, once a session holds one, ``CortexSession.get_items`` reads the context (§16.4) — the summary's items,
then the items added after it — so the SDK sees the compacted history while the admin, the
API, search and export still see every original item::

    from agents.memory import OpenAIResponsesCompactionSession

    session = OpenAIResponsesCompactionSession(
        session_id="support",
        underlying_session=CortexSession(scope="org=acme/user=42", agent_id="bot"),
    )
    await Runner.run(agent, "Hello", session=session)

Deleting the summary message (``DELETE /sessions/{id}/messages/{seq}/``) undoes a compaction.
"""

from __future__ import annotations

import uuid
from typing import Any

from .. import routing, services
from ..exceptions import InvalidThroughSeq
from ..models import Message
from ..scope import Scope
from . import openai_agents_history as history
from .blocks import text_blocks
from .openai_agents import (
    ITEM_BLOCK_TYPE,
    CortexSession,
    _read_items,
    _settled,
    item_to_message,
    message_to_item,
)

__all__ = ["read_history", "replace_with_compaction", "summary_content", "window_items"]

#: The readable text of a compaction summary written by the SDK's compaction (its items, an
#: encrypted ``compaction`` item among them, have little text of their own).
SUMMARY_TEXT = "Conversation compacted by the OpenAI Agents SDK ({count} items)."


def summary_content(items: list[Any]) -> list[dict[str, Any]]:
    """The content of the summary message that stands for the compacted ``items``: a text
    block, then each item's verbatim block in order (as
    :func:`~cortex_sessions.integrations.openai_agents.item_to_message` stores one item).

    Raises:
        InvalidInput, InvalidContent: an item is not a JSON object.
    """
    content = text_blocks(SUMMARY_TEXT.format(count=len(items)))
    for item in items:
        content.extend(
            block for block in item_to_message(item)["content"] if block["type"] != "text"
        )
    return content


def _items_of(message: Message) -> list[dict[str, Any]]:
    """Every item a message holds: one for an ordinary message (or none), all of a summary's."""
    if message.compacts_through_seq is None:
        item = message_to_item(message)
        return [] if item is None else [item]
    blocks = [
        block
        for block in message.content
        if isinstance(block, dict) and block.get("type") == ITEM_BLOCK_TYPE
    ]
    items = [message_to_item(Message(role=message.role, content=[block])) for block in blocks]
    return [item for item in items if item is not None]


def window_items(scope: Scope | str, pk: uuid.UUID) -> list[dict[str, Any]]:
    """The SDK items of the session's context (docs/design.md §16.4), oldest first."""
    window = services.context_messages(scope=scope, session_id=pk)
    return [item for message in window.messages for item in _items_of(message)]


def _compact(scope: Scope, pk: uuid.UUID, items: list[Any]) -> None:
    """Stand ``items`` for every message so far, as one cortex compaction; on an empty
    session (nothing to compact) they are appended as ordinary items."""
    session = services.get_session(scope=scope, session_id=pk)
    if session.last_seq == 0:
        if items:
            services.append_messages(
                scope=scope, session_id=pk, messages=[item_to_message(i) for i in items]
            )
        return
    try:
        services.compact_session(
            scope=scope,
            session_id=pk,
            through_seq=session.last_seq,
            summary=summary_content(items),
        )
    except InvalidThroughSeq:
        # Nothing was added since the newest compaction (its summary is the last message):
        # the context already is a compacted history; keep it rather than stack a second.
        return


async def replace_with_compaction(session: CortexSession, items: list[Any]) -> bool:
    """:meth:`CortexSession._atomic_replace_items`: ``items`` stand for every message of
    ``session`` so far, as one cortex compaction (docs/design.md §16.3, §16.5).

    Returns:
        ``True`` (the replacement is done).

    Raises:
        InvalidInput, InvalidContent: an item is not a JSON object; nothing is written.
        MessageTooLarge, SessionNotFound, SessionArchived: as ``CortexSession.add_items``.
    """
    compacted = list(items)
    summary_content(compacted)  # bad items raise here, before any read or write
    scope = session.scope
    await _settled(session._run(lambda pk: _compact(scope, pk, compacted)))
    return True


def read_history(pk: uuid.UUID, scope: Scope, limit: int | None) -> list[dict[str, Any]]:
    """What :meth:`CortexSession.get_items` returns: the session's items, or, once it holds a
    compaction summary (docs/design.md §16.3), the context's (§16.4) — the newest summary's
    items, then the items after what it stands for. Telling the two apart is one indexed
    existence test (the checkpoint index of docs/design.md §8.5)."""
    if limit is None and history.serves(scope):  # the page statement tells it (one statement)
        return _read_items(pk, scope, None)
    using = routing.db_for_read(Message, scope=scope)
    compacted = (
        Message.objects.using(using)
        .filter(session_id=pk, role="user", source="checkpoint", compacts_through_seq__isnull=False)
        .exists()
    )
    if not compacted:
        return _read_items(pk, scope, limit)
    items = window_items(scope, pk)
    return items if limit is None else items[-limit:]
