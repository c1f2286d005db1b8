"""Undo and regenerate: remove the newest messages of a session (docs/design.md §11.4).

Each service locks the session row, removes messages and moves the counters in one
transaction (docs/design.md §5), so concurrent callers queue: two pops never return the same message.
``last_seq`` is left alone, so a removed ``seq`` is never given again.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from ..exceptions import MessageNotFound
from ..models import Message, Session
from ..scope import Scope
from ._common import (
    _check_int,
    _check_live,
    _check_not_held,
    _db_for_write,
    _locked_session,
    _write_transaction,
)
from .messages import _after_delete

__all__ = ["MessagesDeleted", "PoppedMessage", "delete_messages_after", "pop_message"]


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
        deleted, _ = (
            Message.objects.using(using).filter(session=session, seq__gt=after_seq).delete()
        )
        if deleted:
            _after_delete(session, deleted, using)
    return MessagesDeleted(session=session, deleted=deleted)


def pop_message(*, scope: Scope | str, session_id: uuid.UUID | str) -> PoppedMessage:
    """Remove and return the newest message of a session (docs/design.md §11.4).

    The session row is locked first, so concurrent pops queue and each returns a different
    message; the counters move in the same transaction.

    Returns:
        :class:`PoppedMessage` with the removed message as it was stored.

    Raises:
        NoScope, InvalidScope, SessionNotFound.
        SessionArchived: the session is archived.
        LegalHold: the session is on legal hold; its messages are frozen (§18.1).
        MessageNotFound: the session has no messages.
    """
    using = _db_for_write()
    with _write_transaction(using):
        session = _check_not_held(_check_live(_locked_session(scope, session_id)))
        # Read in the transaction holding the row lock: a replica's newest message may be
        # one a concurrent pop has already removed (docs/design.md §17.1).
        message = Message.objects.using(using).filter(session=session).order_by("-seq").first()
        if message is None:
            raise MessageNotFound("The session has no messages.")
        Message.objects.using(using).filter(pk=message.pk).delete()
        _after_delete(session, 1, using)
    return PoppedMessage(session=session, message=message)
