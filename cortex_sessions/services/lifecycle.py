"""Thread lifecycle services: fork, archive, unarchive, merge-patch (docs/design.md §11.1–§11.3).

A fork copies a session's messages with one set-based ``INSERT … SELECT``, so the messages never
pass through Python whatever their number. Archiving makes a session read-only (appends,
message deletes and make-default answer ``SessionArchived``) and demotes it if it was the
default, in the same transaction. A merge patch changes the host-owned fields under the
session's row lock, so concurrent patches of different metadata keys all survive.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from datetime import datetime
from typing import Any, cast

from django.db import connections
from django.utils import timezone

from .. import signals
from ..content import check_json_object, check_json_value
from ..counters import newest_conversation_text
from ..exceptions import InvalidInput, InvalidMetadata, InvalidUpToSeq
from ..metadata import merge_patch
from ..models import Message, Session
from ..scope import Scope
from ..usage import sums_of
from ._common import (
    MAX_INT64,
    _check_cwd,
    _check_expires_at,
    _check_title,
    _db_for_write,
    _locked_session,
    _retry_default_race,
    _send_on_commit,
    _write_transaction,
)
from .context import has_compaction, refresh_context_tokens
from .sessions import MAKE_DEFAULT_ATTEMPTS

__all__ = [
    "PATCHABLE_FIELDS",
    "archive_session",
    "fork_session",
    "patch_session",
    "unarchive_session",
]

#: The fields a merge patch of a session may change (the host-owned ones, docs/design.md §3.1).
PATCHABLE_FIELDS = frozenset({"title", "metadata", "cwd", "expires_at"})

#: Message columns a fork does not copy from the source row: the fork's own id, session and seq
#: are written by the ``INSERT … SELECT`` itself.
_OWN_COLUMNS = frozenset({"id", "session", "seq"})


def _copy_messages(source: Session, fork: Session, up_to_seq: int, using: str) -> int:
    """Copy ``source``'s messages with ``seq <= up_to_seq`` into ``fork`` in one statement.

    Every concrete column of the message row is copied as stored except the id (new), the
    session (the fork) and ``seq`` (renumbered ``1..n`` in the source's order). Generated
    columns are left to the database.

    Returns:
        How many messages were copied (on database ``using``, in its open transaction).
    """
    connection = connections[using]
    quote = connection.ops.quote_name
    meta = Message._meta
    copied = [
        cast(str, field.column)
        for field in meta.concrete_fields
        if field.name not in _OWN_COLUMNS and not getattr(field, "generated", False)
    ]
    session_column = quote(meta.get_field("session").column)
    seq_column = quote(cast(str, meta.get_field("seq").column))
    columns = ", ".join(quote(column) for column in copied)
    # A compaction summary's ``compacts_through_seq`` is renumbered as the seqs are: the number
    # of source messages up to it (docs/design.md §16.3).
    through = quote(cast(str, meta.get_field("compacts_through_seq").column))
    values = ", ".join(
        f"CASE WHEN m.{through} IS NULL THEN NULL ELSE (SELECT COUNT(*) FROM "
        f"{quote(meta.db_table)} x WHERE x.{session_column} = %s AND x.{seq_column} <= "
        f"m.{through}) END"
        if column == meta.get_field("compacts_through_seq").column
        else f"m.{quote(column)}"
        for column in copied
    )
    sql = (
        f"INSERT INTO {quote(meta.db_table)} ({session_column}, {seq_column}, {columns}) "
        f"SELECT %s, ROW_NUMBER() OVER (ORDER BY m.{seq_column}), {values} "
        f"FROM {quote(meta.db_table)} m WHERE m.{session_column} = %s AND m.{seq_column} <= %s"
    )
    pk_field = Session._meta.pk
    source_pk = pk_field.get_db_prep_value(source.pk, connection)
    params = [
        pk_field.get_db_prep_value(fork.pk, connection),
        source_pk,
        source_pk,
        up_to_seq,
    ]
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return int(cursor.rowcount)


def fork_session(
    *,
    scope: Scope | str,
    session_id: uuid.UUID | str,
    up_to_seq: int | None = None,
    title: str | None = None,
    metadata: Mapping[str, Any] | None = None,
) -> Session:
    """Branch a session: a new session holding a copy of its messages (docs/design.md §11.1).

    The fork lives at the source's scope, for the source's agent, is never the default and is
    live (not archived) even when the source is archived. It holds the source's messages with
    ``seq <= up_to_seq`` (all when omitted), in order, renumbered ``1..n``, with role, source,
    content, metadata and ``created_at`` unchanged; its counters are exact. ``forked_from``
    names the source (a plain id that outlives the source) and ``forked_at_seq`` the fork
    point. The copy is one ``INSERT … SELECT`` under the source's row lock, so a fork of
    100,000 messages makes the same few queries as a fork of ten and appends to the source
    wait until it commits.

    Args:
        scope: the caller's scope; the source must lie at or beneath it.
        session_id: the session to fork.
        up_to_seq: copy the messages with ``seq`` up to this value, an integer from 0 to the
            source's last ``seq`` (0: an empty fork); ``None``: all of them.
        title: the fork's title; ``None``: the source's.
        metadata: the fork's metadata (a JSON object); ``None``: a copy of the source's.

    Returns:
        The new session with its counters.

    Raises:
        NoScope, InvalidScope, SessionNotFound: the source is missing or out of scope.
        InvalidUpToSeq: ``up_to_seq`` is not an integer from 0 to the source's last ``seq``.
        ValueTooLong, InvalidInput, NulCharacter, InvalidText, InvalidMetadata: a bad title or
            metadata.
    """
    if up_to_seq is not None and (
        not isinstance(up_to_seq, int)
        or isinstance(up_to_seq, bool)
        or not 0 <= up_to_seq <= MAX_INT64
    ):
        raise InvalidUpToSeq(field="up_to_seq")
    if title is not None:
        title = _check_title(title)
    if metadata is not None:
        metadata = check_json_object(dict(metadata) if isinstance(metadata, Mapping) else metadata)
    using = _db_for_write()
    with _write_transaction(using):
        source = _locked_session(scope, session_id)
        if up_to_seq is not None and up_to_seq > source.last_seq:
            raise InvalidUpToSeq(
                f"up_to_seq must be from 0 to {source.last_seq}, the session's last seq; "
                f"got {up_to_seq}.",
                field="up_to_seq",
            )
        whole = up_to_seq is None or up_to_seq >= source.last_seq
        fork_point = source.last_seq if up_to_seq is None else up_to_seq
        now = timezone.now()
        fork = Session.objects.create(
            agent_id=source.agent_id,
            scope=source.scope,
            title=source.title if title is None else title,
            metadata=dict(source.metadata) if metadata is None else metadata,
            cwd=source.cwd,
            # A whole copy has the source's counters (exact: the source row is locked).
            message_count=source.message_count if whole else 0,
            input_tokens=source.input_tokens if whole else 0,
            output_tokens=source.output_tokens if whole else 0,
            cost=source.cost if whole else 0,
            context_tokens=source.context_tokens if whole else 0,
            last_message=source.last_message if whole else "",
            last_seq=source.message_count if whole else 0,
            forked_from=source.pk,
            forked_at_seq=fork_point,
            created_at=now,
            updated_at=now,
        )
        copied = _copy_messages(source, fork, fork_point, using)
        if not whole or copied != fork.message_count:
            fork.message_count = copied
            fork.last_seq = copied
            # The copies exist only in this transaction: read them here (docs/design.md §17.1).
            fork.last_message = newest_conversation_text(
                Message.objects.using(using).filter(session=fork)
            )
            totals = sums_of(Message.objects.using(using).filter(session=fork))._asdict()
            for name, value in totals.items():
                setattr(fork, name, value)
            Session.objects.using(using).filter(pk=fork.pk).update(
                message_count=fork.message_count,
                last_seq=fork.last_seq,
                last_message=fork.last_message,
                **totals,
            )
            if has_compaction(fork, using=using):  # a summary's context (§16.3)
                refresh_context_tokens(fork, using=using)
    _send_on_commit(signals.session_created, session=fork)
    return fork


def record_fork_provenance(
    session: Session, *, forked_from: uuid.UUID, forked_at_seq: int
) -> Session:
    """Record where an imported session was forked from (docs/design.md §11.1).

    For :mod:`cortex_sessions.transfer` only, inside its import transaction: a fork made here
    gets its provenance from :func:`fork_session`. The values are stored as given.

    Returns:
        ``session`` with the two fields set.
    """
    Session.objects.filter(pk=session.pk).update(
        forked_from=forked_from, forked_at_seq=forked_at_seq
    )
    session.forked_from, session.forked_at_seq = forked_from, forked_at_seq
    return session


def archive_session(
    *, scope: Scope | str, session_id: uuid.UUID | str, at: datetime | None = None
) -> Session:
    """Archive a session: it stays readable but refuses writes (docs/design.md §11.2).

    If it is its agent's default it is demoted in the same transaction, so the next
    :func:`~cortex_sessions.services.resolve_session` creates a fresh default. Archiving an
    archived session changes nothing.

    Args:
        scope: the caller's scope; the session must lie at or beneath it.
        session_id: the session.
        at: the archive time to record (importers pass the original); default now.

    Returns:
        The session as stored (``archived_at`` set, ``is_default`` false).

    Raises:
        NoScope, InvalidScope, SessionNotFound.
        InvalidInput: ``at`` is not an aware datetime.
        OperationalError: a deadlock inside a caller's transaction, or on every attempt.
    """
    if at is not None and (not isinstance(at, datetime) or timezone.is_naive(at)):
        raise InvalidInput("at must be an aware datetime.", field="archived_at")
    using = _db_for_write()

    def attempt() -> Session:
        with _write_transaction(using):
            session = _locked_session(scope, session_id)
            if session.archived_at is not None:
                return session
            now = timezone.now()
            Session.objects.using(using).filter(pk=session.pk).update(
                archived_at=at or now, is_default=False, updated_at=now
            )
            session.refresh_from_db(using=using)
        return session

    # Demoting writes the one-default index, so on MySQL/MariaDB it can deadlock with a
    # concurrent make-default; it runs again as make-default does (docs/design.md §15.4).
    return _retry_default_race(using, attempt, attempts=MAKE_DEFAULT_ATTEMPTS)


def unarchive_session(*, scope: Scope | str, session_id: uuid.UUID | str) -> Session:
    """Make an archived session live again (docs/design.md §11.2). It does not become the
    default again; unarchiving a live session changes nothing.

    Returns:
        The session as stored (``archived_at`` null).

    Raises:
        NoScope, InvalidScope, SessionNotFound.
    """
    using = _db_for_write()
    with _write_transaction(using):
        session = _locked_session(scope, session_id)
        if session.archived_at is None:
            return session
        Session.objects.using(using).filter(pk=session.pk).update(
            archived_at=None, updated_at=timezone.now()
        )
        session.refresh_from_db(using=using)
    return session


def patch_session(
    *, scope: Scope | str, session_id: uuid.UUID | str, patch: Mapping[str, Any]
) -> Session:
    """Apply a JSON Merge Patch (RFC 7386) to a session's host-owned fields (§11.3).

    ``title``, ``cwd`` and ``expires_at`` (ISO 8601 with offset, or ``null``: never expires;
    docs/design.md §18.1) are replaced when present. ``metadata`` is merged into the stored
    object key by key, recursively; a ``null`` member deletes that key, and ``"metadata": null``
    empties it. The session row is locked while the patch is read, merged and written, so two
    concurrent patches of different keys both survive. App-owned fields cannot be patched.

    Args:
        scope: the caller's scope; the session must lie at or beneath it.
        session_id: the session.
        patch: a JSON object with any of ``title``, ``metadata``, ``cwd``, ``expires_at``.

    Returns:
        The session as stored after the patch.

    Raises:
        NoScope, InvalidScope, SessionNotFound.
        InvalidInput: ``patch`` is not an object or names another field, or ``expires_at``
            is not an ISO 8601 date-time with offset nor ``null``.
        InvalidMetadata: the ``metadata`` member is neither an object nor ``null``, is
            nested deeper than ``content.MAX_JSON_DEPTH``, or the merged metadata is not
            storable.
        ValueTooLong, NulCharacter, InvalidText: a bad title or cwd, or a NUL or lone
            surrogate anywhere in the ``metadata`` member (in a key whose ``null`` only
            deletes, too).
    """
    if not isinstance(patch, Mapping):
        raise InvalidInput(
            f"A merge patch must be a JSON object, not {type(patch).__name__}.",
            field="non_field_errors",
        )
    unknown = set(patch) - PATCHABLE_FIELDS
    if unknown:
        raise InvalidInput(
            f"A merge patch may change only {', '.join(sorted(PATCHABLE_FIELDS))}; "
            f"got {', '.join(sorted(map(str, unknown)))}.",
            field=str(sorted(map(str, unknown))[0]),
        )
    changes: dict[str, Any] = {}
    if "title" in patch:
        changes["title"] = _check_title(patch["title"])
    if "cwd" in patch:
        changes["cwd"] = _check_cwd(patch["cwd"])
    if "expires_at" in patch:
        changes["expires_at"] = _check_expires_at(patch["expires_at"])
    metadata_patch = patch.get("metadata", {})
    if metadata_patch is not None and not isinstance(metadata_patch, Mapping):
        raise InvalidMetadata(
            f"metadata in a merge patch must be an object or null, not "
            f"{type(metadata_patch).__name__}.",
            field="metadata",
        )
    if metadata_patch is not None:
        # The patch itself is a JSON value taken in: a NUL or a lone surrogate anywhere in it
        # (a key that only deletes included) is refused as in every other input, and so is
        # nesting over MAX_JSON_DEPTH (docs/design.md §12.4).
        check_json_value(metadata_patch, field="metadata")
    using = _db_for_write()
    with _write_transaction(using):
        session = _locked_session(scope, session_id)
        if "metadata" in patch:
            merged = {} if metadata_patch is None else merge_patch(session.metadata, metadata_patch)
            changes["metadata"] = check_json_object(merged)
        changes["updated_at"] = timezone.now()
        Session.objects.using(using).filter(pk=session.pk).update(**changes)
        session.refresh_from_db(using=using)
    return session
