"""The OpenAI Agents SDK's compaction over a cortex session, keeping the transcript
(docs/design.md §16.5).

The SDK's ``OpenAIResponsesCompactionSession`` wraps a session and, when the history grows,
replaces it with the compacted items ``responses.compact`` returns: through the wrapped
session's ``_atomic_replace_items(items)`` hook where the session's type defines one, else by
``clear_session()`` then ``add_items(items)``, which on a cortex session would delete the
transcript. :class:`~cortex_sessions.integrations.openai_agents.CortexSession` defines the hook (:func:`replace_with_compaction`) as a
cortex compaction (§16.3) instead: the compacted items become one summary message (role
``user``, source ``checkpoint``, a marker block and one item block per item) standing for
every message so far,
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

``CortexSession.pop_item`` pops the newest item *the SDK sees* (:func:`pop_window_item`): the
newest message after the summary, as ever; when the newest message is the summary itself, the
newest message it is shown with, and when there is none, the summary's own last item — the
summary is replaced, in one transaction, by one standing for the same messages with the items
before it. The transcript's original items are never deleted by a pop of the summary's items.

A summary the host wrote (through the API or ``services.compact_session``, a text) holds no
item: the SDK sees it as one, a message of its role with its text, as any message written
through the API reads; a pop of it leaves an adapter summary with no items in its place.
"""

from __future__ import annotations

import uuid
from typing import Any, cast

from django.db import connections

from .. import routing, services
from ..exceptions import InvalidThroughSeq
from ..models import Message
from ..scope import Scope
from ..services._common import (
    _check_live,
    _check_not_held,
    _db_for_write,
    _locked_session,
    _write_transaction,
)
from ..services.undo import pop_in_one_statement
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

__all__ = [
    "COMPACTION_BLOCK_TYPE",
    "pop_window_item",
    "read_history",
    "replace_with_compaction",
    "summary_content",
    "window_items",
]

#: The readable text of a compaction summary written by the SDK's compaction (its items, an
#: encrypted ``compaction`` item among them, have little text of their own).
SUMMARY_TEXT = "Conversation compacted by the OpenAI Agents SDK ({count} items)."

#: The ``type`` of the content block that marks a summary written by this adapter: its items are
#: its item blocks, none at all once a pop took the last. A summary without it (and without item
#: blocks) is the host's — written through the API or ``services.compact_session`` — and reads
#: as one item, a message of its role holding its text (docs/design.md §16.5).
COMPACTION_BLOCK_TYPE = "openai_agents_compaction"


def summary_content(items: list[Any]) -> list[dict[str, Any]]:
    """The content of the summary message that stands for the compacted ``items``: a text
    block, the adapter's marker block (:data:`COMPACTION_BLOCK_TYPE`), then each item's
    verbatim block in order (as
    :func:`~cortex_sessions.integrations.openai_agents.item_to_message` stores one item).

    Args:
        items: the SDK items the summary stands for, oldest first; may be empty.

    Returns:
        A list of content blocks (dicts) for ``services.compact_session``'s ``summary``.

    Raises:
        InvalidInput, InvalidContent: an item is not a JSON object.
    """
    content = text_blocks(SUMMARY_TEXT.format(count=len(items)))
    content.append({"type": COMPACTION_BLOCK_TYPE})
    for item in items:
        content.extend(
            block for block in item_to_message(item)["content"] if block["type"] != "text"
        )
    return content


def _items_of(message: Message) -> list[dict[str, Any]]:
    """Every item a message holds: one for an ordinary message (or none); for a summary this
    adapter wrote (item blocks or :data:`COMPACTION_BLOCK_TYPE`), its item blocks' items, and
    for any other summary (the host's text), one item as an ordinary message reads."""
    content = message.content if isinstance(message.content, list) else []
    blocks = [
        block
        for block in content
        if isinstance(block, dict) and block.get("type") in (ITEM_BLOCK_TYPE, COMPACTION_BLOCK_TYPE)
    ]
    if message.compacts_through_seq is None or not blocks:
        item = message_to_item(message)
        return [] if item is None else [item]
    items = [
        message_to_item(Message(role=message.role, content=[block]))
        for block in blocks
        if block["type"] == ITEM_BLOCK_TYPE
    ]
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
    existence test (the checkpoint index of docs/design.md §8.5): on PostgreSQL part of the
    page statement itself, so a read of an uncompacted session is one statement."""
    if history.serves(scope):  # the page statement tells it (one statement)
        return _read_items(pk, scope, limit)
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


def _pop_once(pk: uuid.UUID, scope: Scope) -> tuple[bool, dict[str, Any] | None]:
    """One step of :func:`pop_window_item`: ``(done, item)``; ``done`` is ``False`` when a
    message that reads as no item was removed (the caller pops again)."""
    using = _db_for_write()
    if connections[using].vendor == "postgresql":
        # One statement pops the newest message unless it is a summary (it tells in the same
        # statement, on the checkpoint index); when it cannot, the locked path below decides.
        # Elsewhere the locked path always decides: a probe for a summary, then a pop, leaves a
        # gap in which compactions commit (a popped summary could not be put back).
        fast = pop_in_one_statement(scope=scope, session_id=pk, using=using)
        if fast is not None:
            item = message_to_item(fast.message)
            return item is not None, item
    with _write_transaction(using):
        session = _check_not_held(_check_live(_locked_session(scope, pk)))
        messages = Message.objects.using(using).filter(session=session)
        newest = messages.order_by("-seq").first()
        if newest is None:
            return True, None
        through = newest.compacts_through_seq
        if through is not None:  # the summary: the newest message shown with it, if any
            newest = (
                messages.filter(
                    seq__gt=through, seq__lt=newest.seq, compacts_through_seq__isnull=True
                )
                .order_by("-seq")
                .first()
            ) or newest
        seq = cast(int, newest.seq)  # a stored message has one
        if newest.compacts_through_seq is None:
            services.delete_message(scope=scope, session_id=pk, seq=seq)
            item = message_to_item(newest)
            return item is not None, item
        items = _items_of(newest)
        if not items:  # the SDK sees nothing: the session is empty to it
            return True, None
        services.delete_message(scope=scope, session_id=pk, seq=seq)
        services.compact_session(
            scope=scope,
            session_id=pk,
            through_seq=newest.compacts_through_seq,
            summary=summary_content(items[:-1]),
            usage=newest.usage,
        )
        return True, items[-1]


def pop_window_item(pk: uuid.UUID, scope: Scope) -> dict[str, Any] | None:
    """:meth:`CortexSession.pop_item`: remove and return the newest item of what
    :meth:`~CortexSession.get_items` returns (the SDK's contract; docs/design.md §16.5).

    When the newest message is no compaction summary that is that message: on PostgreSQL one
    statement (``services.undo.pop_in_one_statement``, which tells a summary itself, compacted
    session or not), elsewhere one transaction under the session's row lock (a probe for a
    summary before a pop would leave a gap for compactions to commit in). In a compacted session the SDK sees the newest summary's items, then the items of
    the messages after what it stands for; so when the newest message is that summary, the pop
    removes the newest message after its ``through_seq`` (older summaries aside), and when there
    is none, the summary is replaced — same ``through_seq``, same ``usage`` — by one holding its
    items but the last, which is returned. Each step is one transaction under the session's row
    lock; a message that reads as no item is removed on the way and the next one popped.

    Returns:
        The item, or ``None`` when the SDK's history is (or became) empty.

    Raises:
        SessionNotFound, SessionArchived, LegalHold: as ``services.pop_message``.
        InvalidThroughSeq: the summary cannot be rewritten (its ``through_seq`` is not past the
            previous summary's, which only an import of such a file gives); nothing changes.
    """
    while True:
        done, item = _pop_once(pk, scope)
        if done:
            return item
