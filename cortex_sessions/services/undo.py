"""Undo and regenerate: remove the newest messages of a session (docs/design.md §11.4).

Each service locks the session row, removes messages and moves the counters in one
transaction (docs/design.md §5), so concurrent callers queue: two pops never return the same message.
``last_seq`` is left alone, so a removed ``seq`` is never given again.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from django.db import connections
from django.utils import timezone

from ..exceptions import MessageNotFound
from ..models import Message, Session
from ..scope import Scope, canonical_of
from ..usage import totals_of
from . import _pop_pg
from ._common import (
    _autocommit_write,
    _check_int,
    _check_live,
    _check_not_held,
    _db_for_write,
    _locked_session,
    _session_id,
    _write_transaction,
)
from .context import has_compaction
from .messages import _after_delete, _deleted_totals

__all__ = [
    "MessagesDeleted",
    "PoppedMessage",
    "delete_messages_after",
    "pop_in_one_statement",
    "pop_message",
]


@dataclass(frozen=True)
class MessagesDeleted:
    """What :func:`delete_messages_after` did: the session with its new counters, and how
    many messages were removed."""

    session: Session
    deleted: int


@dataclass(frozen=True)
class PoppedMessage:
    """What :func:`pop_message` did: the session with its new counters, and the removed
    message (its former ``id`` and ``seq`` kept)."""

    session: Session
    message: Message


def delete_messages_after(
    *, scope: Scope | str, session_id: uuid.UUID | str, after_seq: int = 0
) -> MessagesDeleted:
    """Remove every message of a session with ``seq > after_seq`` (docs/design.md §11.4).

    ``after_seq=0`` removes them all. The counters move in the same transaction; nothing is
    written (not even ``updated_at``) when no message lies after ``after_seq``.

    Args:
        scope: the caller's scope; the session must lie at or beneath it.
        session_id: the session.
        after_seq: keep the messages up to this ``seq``; an integer ``>= 0``.

    Returns:
        :class:`MessagesDeleted`.

    Raises:
        NoScope, InvalidScope, SessionNotFound.
        SessionArchived: the session is archived.
        LegalHold: the session is on legal hold; its messages are frozen (§18.1).
        InvalidFilter: ``after_seq`` is not an integer ``>= 0``.
    """
    _check_int(after_seq, field="after_seq", minimum=0)
    using = _db_for_write()
    with _write_transaction(using):
        session = _check_not_held(_check_live(_locked_session(scope, session_id)))
        doomed = Message.objects.using(using).filter(session=session, seq__gt=after_seq)
        removed = _deleted_totals(doomed)
        compacted = has_compaction(session, using=using)
        deleted, _ = doomed.delete()
        if deleted:
            _after_delete(session, deleted, using, removed, compacted=compacted)
    return MessagesDeleted(session=session, deleted=deleted)


def pop_message(*, scope: Scope | str, session_id: uuid.UUID | str) -> PoppedMessage:
    """Remove and return the newest message of a session (docs/design.md §11.4).

    The session row is locked first, so concurrent pops queue and each returns a different
    message; the counters move in the same transaction. On PostgreSQL that is one statement
    whenever it can be (``_pop_pg``: a live session with messages, no concurrent writer, a
    ``last_message`` SQL writes exactly); otherwise, and on every other database, a transaction
    of the ORM's statements.

    Returns:
        :class:`PoppedMessage` with the removed message as it was stored.

    Raises:
        NoScope, InvalidScope, SessionNotFound.
        SessionArchived: the session is archived.
        LegalHold: the session is on legal hold; its messages are frozen (§18.1).
        MessageNotFound: the session has no messages.
    """
    using = _db_for_write()
    popped = pop_in_one_statement(scope=scope, session_id=session_id, using=using)
    if popped is not None:
        return popped
    with _write_transaction(using):
        session = _check_not_held(_check_live(_locked_session(scope, session_id)))
        # Read in the transaction holding the row lock: a replica's newest message may be
        # one a concurrent pop has already removed (docs/design.md §17.1).
        message = Message.objects.using(using).filter(session=session).order_by("-seq").first()
        if message is None:
            raise MessageNotFound("The session has no messages.")
        compacted = has_compaction(session, using=using)
        Message.objects.using(using).filter(pk=message.pk).delete()
        removed = totals_of([(message.usage, message.token_count)])
        _after_delete(session, 1, using, removed, compacted=compacted)
    return PoppedMessage(session=session, message=message)


def pop_in_one_statement(
    *, scope: Scope | str, session_id: uuid.UUID | str, using: str | None = None
) -> PoppedMessage | None:
    """:func:`pop_message`'s one statement on PostgreSQL, alone (docs/design.md §11.4, §14).

    It removes the newest message when that is no compaction summary (§16.3) and the statement
    can move every counter exactly (``_pop_pg``'s module docs list when); otherwise, and on
    every other database, it writes nothing. A caller that must not pop a summary (the OpenAI
    Agents adapter, whose pop of one rewrites it, §16.5) takes its own locked path then.

    Args:
        scope: the caller's scope (a ``Scope`` or its canonical string).
        session_id: the session.
        using: the write database, when the caller has it (else the router's).

    Returns:
        :class:`PoppedMessage`, or ``None`` when nothing was written (the statement cannot
        decide: a missing, archived, held or empty session, a summary as the newest message, a
        concurrent writer, …; the ORM path raises or decides).

    Raises:
        NoScope, InvalidScope: a malformed scope; SessionNotFound: a malformed session id.
    """
    using = using or _db_for_write()
    if connections[using].vendor != "postgresql":
        return None
    with _autocommit_write(using):
        popped = _pop_pg.pop_newest(
            using,
            canonical=canonical_of(scope),
            session_id=_session_id(session_id),
            now=timezone.now(),
        )
    return None if popped is None else PoppedMessage(session=popped[0], message=popped[1])
