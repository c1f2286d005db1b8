"""Message services: append, list, delete, clear (docs/design.md §5, §7.1). What a message to
append is and its validation live in :mod:`.message_input`, whose names this module
re-exports (``MessageInput``, ``build_message``, ``check_message_count``, ``check_messages``)."""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.db import DatabaseError, connections
from django.db.models import F
from django.utils import timezone

from .. import signals
from ..counters import last_message_of, last_message_of_rows, newest_conversation_text
from ..exceptions import InvalidInput, MessageNotFound, SessionNotFound
from ..models import Message, Session
from ..scope import Scope, canonical_of
from ..search import check_query, filter_messages
from ..search_limits import search_timeout
from ..usage import Totals, totals_of
from . import _pg, _pg_page
from ._common import (
    _autocommit_write,
    _check_int,
    _check_live,
    _check_not_held,
    _db_for_read,
    _db_for_write,
    _locked_session,
    _send_on_commit,
    _session_id,
    _write_transaction,
    check_totals_fit,
    has_receivers,
    total_overflow,
)
from .context import has_compaction, refresh_context_tokens
from .keyed_append import append_once
from .message_input import (  # re-exported: their import paths stay
    MessageInput as MessageInput,
)
from .message_input import (
    _build_message as _build_message,
)
from .message_input import (
    _BuiltMessage as _BuiltMessage,
)
from .message_input import (
    build_message as build_message,
)
from .message_input import (
    check_message_count as check_message_count,
)
from .message_input import (
    check_messages as check_messages,
)
from .sessions import _get
from .statement_size import fits_one_call, insert_batches


@dataclass(frozen=True)
class AppendResult:
    """What :func:`append_messages` wrote: the session with its new counters, and the rows."""

    session: Session
    messages: list[Message] = field(default_factory=list)


def _newest_text(session: Session, using: str) -> str:
    """``last_message`` of ``session`` from its rows on database ``using``: the write database
    whose transaction holds the session's row lock (docs/design.md §5, §17.1)."""
    return newest_conversation_text(Message.objects.using(using).filter(session=session))


def _totals_of(rows: Sequence[Mapping[str, Any]]) -> Totals:
    """What message rows (column values, or values read back) add to their session's totals
    (docs/design.md §16.1-§16.2)."""
    return totals_of((row["usage"], row["token_count"]) for row in rows)


def _moved_totals(totals: Totals, sign: int = 1) -> dict[str, Any]:
    """The ``update()`` keyword arguments that move a session's totals by ``totals`` (``sign``
    ``-1``: take them away), as ``F()`` expressions, so the row's own values are moved."""
    return {name: F(name) + sign * amount for name, amount in totals._asdict().items() if amount}


def _add_totals(session: Session, totals: Totals, sign: int = 1) -> None:
    """Move the totals of the ``session`` instance as :func:`_moved_totals` moved its row."""
    for name, amount in totals._asdict().items():
        setattr(session, name, getattr(session, name) + sign * amount)


def _deleted_totals(messages: Any) -> Totals:
    """What the message rows of the queryset ``messages`` add to their session (read before
    they are deleted, under the session's row lock)."""
    return totals_of(messages.values_list("usage", "token_count"))


def _after_delete(
    session: Session,
    deleted: int,
    using: str,
    removed: Totals | None = None,
    *,
    compacted: bool = False,
) -> Session:
    """Move the counters of the locked ``session`` after ``deleted`` of its rows went, in the
    database and on ``session`` itself, in the transaction open on database ``using``
    (docs/design.md §5, §17.1); ``removed``: what those rows added to the usage totals
    (§16.1-§16.2)."""
    removed = removed or Totals()
    if compacted:  # context_tokens is recomputed below, never moved by what went (§16.3)
        removed = removed._replace(context_tokens=0)
    session.message_count -= deleted
    session.last_message = _newest_text(session, using)
    session.updated_at = timezone.now()
    Session.objects.using(using).filter(pk=session.pk).update(
        message_count=F("message_count") - deleted,
        last_message=session.last_message,
        updated_at=session.updated_at,
        **_moved_totals(removed, -1),
    )
    _add_totals(session, removed, -1)
    if compacted:  # which rows the context holds may have changed (docs/design.md §16.3)
        refresh_context_tokens(session, using=using)
    return session


def append_messages(
    *,
    scope: Scope | str,
    session_id: uuid.UUID | str,
    messages: Sequence[MessageInput | Mapping[str, Any]],
    idempotency_key: str | None = None,
) -> AppendResult:
    """Append one or many messages to a session, atomically (docs/design.md §5, §7.1).

    All messages are validated before anything is written; then, in one transaction holding
    the session's row lock, they get the next ``seq`` values and ``message_count``,
    ``last_message`` and ``updated_at`` move with them. Nothing is written if any input is bad.
    One call carries at most ``MAX_MESSAGES_PER_APPEND`` messages, so no append holds the
    session's lock for long (docs/design.md §12.6); send more in several calls.

    Args:
        scope: the caller's scope; the session must lie at or beneath it.
        session_id: the session to append to.
        messages: :class:`MessageInput` objects or mappings with the same keys.
        idempotency_key: when given, the append happens at most once per key, scope and
            session within ``IDEMPOTENCY_TTL``: a replay with the same messages writes nothing
            and returns the rows the first call wrote, with the session as it is now
            (docs/design.md §12.1). Without it, nothing changes on this path.

    Returns:
        :class:`AppendResult` with the refreshed session and the new rows in order.

    Raises:
        NoScope, InvalidScope, SessionNotFound.
        SessionArchived: the session is archived (docs/design.md §11.2).
        InvalidInput (and its subclasses InvalidRole, InvalidSource, InvalidContent,
        EmptyContent, MessageTooLarge, NulCharacter, InvalidMetadata, TooManyKeys): bad input.
        TooManyMessages: more than ``MAX_MESSAGES_PER_APPEND`` messages (``too_many_messages``).
        UsageTotalOverflow: the messages would take the session's ``cost`` to 10^14 or more
            (on SQLite 99999999999999.9) or a token total past 2^63 - 1
            (``usage_total_overflow``, docs/design.md §16.1); nothing is written.
        InvalidIdempotencyKey: a malformed key.
        IdempotencyKeyReused: the key was used with other messages or another session.
        IdempotencyKeyInProgress: a call with the key still ran past the lock wait timeout.
        WriteOutcomeUnknown: the commit failed and may have been carried out (§12.3).
    """
    if type(messages) is not list and (  # a list, the usual case, skips the ABC checks
        isinstance(messages, Mapping | MessageInput) or not isinstance(messages, Sequence)
    ):
        raise InvalidInput("messages must be a list of messages.", field="messages")
    if not messages:
        raise InvalidInput("At least one message is required.", field="messages")
    check_message_count(len(messages))
    # One clock reading: the messages' default created_at and the session's updated_at.
    now = timezone.now()
    rows = [_build_message(item, index, now) for index, item in enumerate(messages)]
    if idempotency_key is not None:
        return append_once(scope, session_id, rows, idempotency_key, now)
    return _append_rows(scope, session_id, rows, now)


def append_built(
    *,
    scope: Scope | str,
    session_id: uuid.UUID | str,
    built: Sequence[_BuiltMessage],
    instances: bool = True,
) -> AppendResult:
    """:func:`append_messages` of messages :func:`_build_message` validated already: the
    runtime adapters build each message's content and validate and encode it once
    (:func:`cortex_sessions.integrations.blocks.record_message`, docs/design.md §19.2, §19.3),
    where handing their mappings to :func:`append_messages` would validate them again.

    Args:
        scope, session_id: as for :func:`append_messages`.
        built: the validated messages, in order (their ``created_at``: the clock read when
            they were built, unless given).
        instances: ``False`` when the caller does not read ``AppendResult.messages`` (the
            adapters' appends): on PostgreSQL the new rows are then not made into
            :class:`~cortex_sessions.models.Message` instances unless a receiver of
            ``messages_appended`` is connected at the write, which gets them as always
            (docs/design.md §12.2, §14); with none, ``messages`` is empty and no signal is
            sent (there is no one to send it to). What is written is the same either way.

    Returns:
        :class:`AppendResult`, as :func:`append_messages` returns it (``messages`` empty as
        ``instances`` says).

    Raises:
        InvalidInput: no message; TooManyMessages: more than ``MAX_MESSAGES_PER_APPEND``.
        And what :func:`append_messages` raises once its input is valid (no idempotency key).
    """
    if not built:
        raise InvalidInput("At least one message is required.", field="messages")
    check_message_count(len(built))
    return _append_rows(scope, session_id, list(built), timezone.now(), instances=instances)


def _append_rows(
    scope: Scope | str,
    session_id: uuid.UUID | str,
    built: list[_BuiltMessage],
    now: datetime,
    *,
    key: tuple[Any, ...] = (),
    instances: bool = True,
) -> AppendResult:
    """Write validated messages at the end of the session, in one transaction (docs/design.md
    §5); ``now`` (the time :func:`append_messages` read) is the session's new ``updated_at`` on
    PostgreSQL, whose one statement is sent with it (unless the row holds a later one).
    ``instances``: as for :func:`append_built` (the ORM path builds them whatever it says)."""
    columns = [message.columns for message in built]
    alias = _db_for_write()
    # One statement (docs/design.md §14), unless the messages are more than one call's array
    # holds (statement_size): the ORM path then inserts them in as many statements as needed.
    if _pg.serves(alias) and (len(built) == 1 or fits_one_call(built)):
        texts = [
            (message.content_json, message.metadata_json, message.usage_json) for message in built
        ]
        # The rows as instances only for a caller or a receiver that reads them: as Django's
        # own signals, the receivers are those connected at the write (send_on_commit).
        wanted = instances or has_receivers(signals.messages_appended)
        return _append_pg(alias, scope, session_id, columns, texts, now, key, instances=wanted)
    added = _totals_of(columns)
    batches = insert_batches(alias, built)  # before the lock: it may read a server setting
    with _write_transaction(alias):
        session = _check_live(_locked_session(scope, session_id))
        check_totals_fit(session, added, alias)
        rows = [
            Message(
                session=session,
                agent_id=session.agent_id,
                scope=session.scope,
                seq=session.last_seq + offset,
                **row,
            )
            for offset, row in enumerate(columns, start=1)
        ]
        created = [
            message
            for batch in batches
            for message in Message.objects.using(alias).bulk_create(rows[batch])
        ]
        changes: dict[str, Any] = {
            "last_seq": session.last_seq + len(created),
            # Read under the row lock, so never behind a prior append's; and never behind the
            # row's own value (set by another server's clock), as the PostgreSQL statement.
            "updated_at": max(session.updated_at, timezone.now()),
        }
        for message in reversed(created):
            if last := last_message_of(message.role, message.source, message.content):
                changes["last_message"] = last
                break
        Session.objects.using(alias).filter(pk=session.pk).update(
            message_count=F("message_count") + len(created),
            **_moved_totals(added),
            **changes,
        )
        # The row is locked, so the new values are known without reading the row back.
        changes["message_count"] = session.message_count + len(created)
        _add_totals(session, added)
        for name, value in changes.items():
            setattr(session, name, value)
    _send_on_commit(signals.messages_appended, session=session, messages=created)
    return AppendResult(session=session, messages=created)


def _append_pg(
    alias: str,
    scope: Scope | str,
    session_id: uuid.UUID | str,
    rows: list[dict[str, Any]],
    texts: list[tuple[str, str, str | None]],
    now: datetime,
    key: tuple[Any, ...] = (),
    *,
    instances: bool = True,
) -> AppendResult:
    """:func:`append_messages` on PostgreSQL: the same checks, one statement (``_pg``; with
    ``key``, it records that idempotency key too). ``instances`` false: the new rows are not built
    and no ``messages_appended`` is sent (:func:`_append_rows` found no receiver)."""
    canonical = canonical_of(scope)
    last = last_message_of_rows(rows)
    pk = _session_id(session_id)
    for attempt in range(2):
        try:
            with _autocommit_write(alias):
                appended = _pg.append_rows(
                    alias,
                    canonical=canonical,
                    session_id=pk,
                    rows=rows,
                    json_texts=texts,
                    last_message=last,
                    updated_at=now if attempt == 0 else timezone.now(),
                    totals=_totals_of(rows),
                    key=key,
                    instances=instances,
                )
        except DatabaseError as exc:  # a total past its column: nothing written (§16.1)
            if (refused := total_overflow(exc, alias)) is not None:
                raise refused from exc
            raise
        if appended is not None:
            break
        # Nothing written: the statement only appends to a live session in scope. Tell a
        # missing (or foreign) session from an archived one (docs/design.md §11.2); a session
        # unarchived in between is tried once more.
        _check_live(_get(canonical, pk, None, using=alias))
    else:
        raise SessionNotFound()
    session, created = appended
    if instances:
        _send_on_commit(signals.messages_appended, session=session, messages=created)
    return AppendResult(session=session, messages=created)


def list_messages(
    *,
    scope: Scope | str,
    session_id: uuid.UUID | str,
    limit: int = 50,
    after_seq: int | None = None,
    before_seq: int | None = None,
    q: str | None = None,
) -> list[Message]:
    """Messages of a session in chronological (``seq``) order (docs/design.md §7.1).

    Args:
        limit: most messages returned, ``>= 1``.
        after_seq: return the oldest ``limit`` messages with ``seq > after_seq``.
        before_seq: return the newest ``limit`` messages with ``seq < before_seq``.
            Without either, the newest ``limit`` messages. Both may be combined.
        q: only the conversation messages matching this search (docs/design.md §11.5, as
            :func:`~cortex_sessions.services.list_sessions`), paged as above; each has
            ``search_match`` (snippet, ``seq``, rank).

    Raises:
        NoScope, InvalidScope, SessionNotFound.
        InvalidFilter: ``limit`` is not an integer ``>= 1`` or a seq bound not one ``>= 0``;
            a bad ``q``, or ``q`` on MySQL/MariaDB.
        NulCharacter, InvalidText: ``q`` holds NUL or a lone surrogate.
        SearchTimeout: the search ran past ``SEARCH_TIMEOUT`` (docs/design.md §11.5).
    """
    _check_int(limit, field="limit", minimum=1)
    if after_seq is not None:
        _check_int(after_seq, field="after_seq", minimum=0)
    if before_seq is not None:
        _check_int(before_seq, field="before_seq", minimum=0)
    if q is not None:
        check_query(q)
    alias = _db_for_read(scope)
    if _pg.serves(alias) and q is None:
        canonical = canonical_of(scope)
        page = _pg_page.newest_messages(
            alias,
            canonical=canonical,
            session_id=_session_id(session_id),
            limit=limit,
            after_seq=after_seq,
            before_seq=before_seq,
        )
        if page is None:
            raise SessionNotFound()
        return page
    session = _get(scope, session_id, None, using=alias)
    queryset = Message.objects.using(alias).filter(session=session)
    if q is not None:
        queryset = filter_messages(queryset, q=q, connection=connections[alias])
    if after_seq is not None:
        queryset = queryset.filter(seq__gt=after_seq)
    if before_seq is not None:
        queryset = queryset.filter(seq__lt=before_seq)
    if after_seq is not None and before_seq is None:
        queryset = queryset.order_by("seq")[:limit]
    else:
        queryset = queryset.order_by("-seq")[:limit]
    with search_timeout(alias, active=q is not None):
        rows = list(queryset)
    return rows if after_seq is not None and before_seq is None else rows[::-1]


def delete_message(*, scope: Scope | str, session_id: uuid.UUID | str, seq: int) -> Session:
    """Delete one message; its ``seq`` is never reused and the counters follow (docs/design.md §5).

    Returns:
        The session with its new counters.

    Raises:
        NoScope, InvalidScope, SessionNotFound, MessageNotFound.
        SessionArchived: the session is archived (docs/design.md §11.2).
        LegalHold: the session is on legal hold; its messages are frozen (§18.1).
        InvalidFilter: ``seq`` is not an integer ``>= 1``.
    """
    _check_int(seq, field="seq", minimum=1)
    using = _db_for_write()
    with _write_transaction(using):
        session = _check_not_held(_check_live(_locked_session(scope, session_id)))
        doomed = Message.objects.using(using).filter(session=session, seq=seq)
        removed = _deleted_totals(doomed)
        compacted = has_compaction(session, using=using)
        deleted, _ = doomed.delete()
        if not deleted:
            raise MessageNotFound()
        _after_delete(session, deleted, using, removed, compacted=compacted)
    return session


def clear_messages(*, scope: Scope | str, session_id: uuid.UUID | str) -> int:
    """Delete every message of a session; counters go to zero in the same transaction (§5).

    Returns:
        How many messages were deleted.

    Raises:
        NoScope, InvalidScope, SessionNotFound.
        SessionArchived: the session is archived (docs/design.md §11.2).
        LegalHold: the session is on legal hold; its messages are frozen (§18.1).
    """
    using = _db_for_write()
    with _write_transaction(using):
        session = _check_not_held(_check_live(_locked_session(scope, session_id)))
        deleted, _ = Message.objects.using(using).filter(session=session).delete()
        Session.objects.using(using).filter(pk=session.pk).update(
            message_count=0,
            last_message="",
            updated_at=timezone.now(),
            **Totals()._asdict(),
        )
    return deleted
