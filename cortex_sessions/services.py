"""The service API: every business rule of sessions and messages lives here (DESIGN §7.1).

Functions are keyword-only and take the caller's scope explicitly: reads match that scope and
everything beneath it (DESIGN §2.3); a missing or empty scope raises ``NoScope`` (§2.4). Views,
admin actions and management commands call these functions and nothing else writes app-owned
columns. Every write that touches more than one row runs in one transaction on the database the
router picks for the model (DESIGN §10).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.db import IntegrityError, router, transaction
from django.db.models import Count, F
from django.utils import timezone

from . import signals
from .conf import app_settings
from .content import (
    check_json_object,
    ensure_storable_text,
    json_bytes,
    normalize_content,
)
from .counters import last_message_of, newest_conversation_text
from .exceptions import (
    DefaultConflict,
    InvalidAgentId,
    InvalidFilter,
    InvalidInput,
    InvalidRole,
    InvalidSource,
    MessageNotFound,
    MessageTooLarge,
    SessionNotFound,
    ValueTooLong,
)
from .models import Message, Session, SessionQuerySet
from .scope import Scope, as_scope

__all__ = [
    "ORDERING_FIELDS",
    "AppendResult",
    "CounterDrift",
    "MessageInput",
    "append_messages",
    "check_agent_id",
    "clear_messages",
    "count_sessions",
    "create_session",
    "delete_message",
    "delete_session",
    "get_session",
    "list_messages",
    "list_sessions",
    "make_default",
    "recount_sessions",
    "resolve_session",
    "session_queryset",
    "update_session",
]

#: Orderings a session list accepts, each optionally prefixed with ``-`` (DESIGN §7.2).
ORDERING_FIELDS = ("created_at", "updated_at", "title", "message_count")
DEFAULT_ORDERING = "-updated_at"
TITLE_MAX_CHARS = 500
#: Largest integer a filter, page bound or ``seq`` may be (a signed 64-bit column).
MAX_INT64 = 2**63 - 1
AGENT_ID_MAX_CHARS = 255

_UNSET: Any = object()


# -- value objects --------------------------------------------------------------------------------


@dataclass(frozen=True)
class MessageInput:
    """One message to append (DESIGN §3.2, §7.3).

    Attributes:
        role: ``user``, ``assistant``, ``system`` or ``tool``.
        content: a string (becomes one text block) or a list of content blocks.
        source: ``user``, ``checkpoint``, ``session-reference`` or ``host``; defaults to
            ``user`` for the ``user`` role and ``host`` for the others.
        metadata: host-owned JSON object.
        created_at: when the message was written; defaults to now (importers pass the original).
    """

    role: str
    content: Any
    source: str | None = None
    metadata: Mapping[str, Any] | None = None
    created_at: datetime | None = None


@dataclass(frozen=True)
class AppendResult:
    """What :func:`append_messages` wrote: the session with its new counters, and the rows."""

    session: Session
    messages: list[Message] = field(default_factory=list)


@dataclass(frozen=True)
class CounterDrift:
    """A session whose stored counters differed from its rows (DESIGN §5)."""

    session_id: uuid.UUID
    stored_count: int
    actual_count: int
    stored_last_message: str
    actual_last_message: str


# -- validation helpers ---------------------------------------------------------------------------


def _check_agent_id(agent_id: Any) -> str:
    if not isinstance(agent_id, str) or not agent_id.strip():
        raise InvalidAgentId("agent_id is required.", field="agent_id")
    if len(agent_id) > AGENT_ID_MAX_CHARS:
        raise InvalidAgentId(field="agent_id")
    if any(
        ord(char) < 32 or ord(char) == 127 or 0xD800 <= ord(char) <= 0xDFFF for char in agent_id
    ):
        raise InvalidAgentId(field="agent_id")
    return agent_id


def check_agent_id(agent_id: Any) -> str:
    """Validate an agent id as the services do (1–255 characters, no control characters).

    For callers that must refuse a bad agent id before doing any work (e.g. an import).

    Returns:
        ``agent_id`` unchanged.

    Raises:
        InvalidAgentId: it is not a non-blank string of at most 255 characters without
            control characters.
    """
    return _check_agent_id(agent_id)


def _check_title(title: Any) -> str:
    if not isinstance(title, str):
        raise InvalidInput("title must be a string.", field="title")
    ensure_storable_text(title, field="title")
    if len(title) > TITLE_MAX_CHARS:
        raise ValueTooLong(
            f"title is {len(title)} characters; at most {TITLE_MAX_CHARS} are allowed.",
            field="title",
        )
    return title


def _check_cwd(cwd: Any) -> str | None:
    if cwd is None:
        return None
    if not isinstance(cwd, str):
        raise InvalidInput("cwd must be a string or null.", field="cwd")
    ensure_storable_text(cwd, field="cwd")
    return cwd


def _check_int(value: Any, *, field: str, minimum: int) -> int:
    """An integer from ``minimum`` to the largest 64-bit value, or ``InvalidFilter``."""
    if not isinstance(value, int) or isinstance(value, bool) or not minimum <= value <= MAX_INT64:
        raise InvalidFilter(
            f"{field} must be an integer from {minimum} to {MAX_INT64}; got {value!r}.",
            field=field,
        )
    return value


def _check_filter_text(value: Any, *, field: str) -> str | None:
    """``None``, or a string that can be compared on any database (no NUL, no lone surrogate)."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise InvalidFilter(f"{field} must be a string; got {value!r}.", field=field)
    ensure_storable_text(value, field=field)
    return value


def _check_metadata(metadata: Any) -> dict[str, Any]:
    """``None`` → ``{}``; a mapping → a validated dict copy; anything else → ``InvalidMetadata``
    (``dict()`` of a list of pairs would otherwise silently turn it into an object)."""
    if metadata is None:
        return {}
    return check_json_object(dict(metadata) if isinstance(metadata, Mapping) else metadata)


def _session_id(session_id: Any) -> uuid.UUID:
    """Parse a session id; anything that is not a UUID is simply not found (DESIGN §7.3)."""
    if isinstance(session_id, uuid.UUID):
        return session_id
    try:
        return uuid.UUID(str(session_id))
    except (TypeError, ValueError, AttributeError):
        raise SessionNotFound() from None


def _db_for_write() -> str:
    return router.db_for_write(Session)


def _build_message(item: MessageInput | Mapping[str, Any], index: int) -> dict[str, Any]:
    """Validate one message input; returns the column values (without session and seq)."""
    if isinstance(item, Mapping):
        unknown = set(item) - {"role", "content", "source", "metadata", "created_at"}
        if unknown:
            raise InvalidInput(
                f"messages[{index}] has unknown keys: {', '.join(sorted(map(str, unknown)))}.",
                field="messages",
            )
        item = MessageInput(
            role=item.get("role"),  # type: ignore[arg-type]
            content=item.get("content"),
            source=item.get("source"),
            metadata=item.get("metadata"),
            created_at=item.get("created_at"),
        )
    elif not isinstance(item, MessageInput):
        raise InvalidInput(f"messages[{index}] must be an object.", field="messages")
    if item.role not in Message.Role.values:
        raise InvalidRole(
            f"role must be one of {', '.join(Message.Role.values)}; got {item.role!r}.",
            field="role",
        )
    source = item.source
    if source is None:
        source = Message.Source.USER if item.role == Message.Role.USER else Message.Source.HOST
    if source not in Message.Source.values:
        raise InvalidSource(
            f"source must be one of {', '.join(Message.Source.values)}; got {source!r}.",
            field="source",
        )
    content = normalize_content(item.content)
    metadata = _check_metadata(item.metadata)
    size = json_bytes(content, field="content") + json_bytes(metadata, field="metadata")
    limit = app_settings.MAX_MESSAGE_BYTES
    if size > limit:
        raise MessageTooLarge(
            f"The message is {size} bytes of JSON; MAX_MESSAGE_BYTES is {limit}.",
            field="content",
            size=size,
            limit=limit,
        )
    created_at = item.created_at
    if created_at is not None and not isinstance(created_at, datetime):
        raise InvalidInput("created_at must be a datetime.", field="created_at")
    return {
        "role": item.role,
        "source": source,
        "content": content,
        "metadata": metadata,
        "created_at": created_at or timezone.now(),
    }


# -- session reads --------------------------------------------------------------------------------


def session_queryset(
    *,
    scope: Scope | str,
    agent_id: str | None = None,
    exact: bool = False,
    default_only: bool = False,
    search: str | None = None,
    ordering: str | None = None,
) -> SessionQuerySet:
    """The sessions a list at ``scope`` shows, filtered and ordered (DESIGN §7.2).

    Args:
        scope: the caller's scope; rows at it and beneath it match, or only at it with ``exact``.
        agent_id: only this agent's sessions.
        exact: match rows stored at ``scope`` itself only.
        default_only: only default sessions.
        search: case-insensitive substring of the title; ``%`` and ``_`` match literally.
        ordering: one of ``ORDERING_FIELDS``, optionally ``-``-prefixed; default
            ``-updated_at``. Ties are broken by id in the same direction so pages are stable.

    Returns:
        An unevaluated queryset (callers paginate it).

    Raises:
        NoScope, InvalidScope: the scope is missing or malformed.
        InvalidFilter: ``ordering`` is not an accepted value, or ``agent_id``/``search`` is
            not a string.
        NulCharacter, InvalidText: ``agent_id``/``search`` holds NUL or a lone surrogate.
    """
    queryset = Session.objects.within(scope, exact=exact)
    agent_id = _check_filter_text(agent_id, field="agent_id")
    search = _check_filter_text(search, field="search")
    if agent_id is not None:
        queryset = queryset.filter(agent_id=agent_id)
    if default_only:
        queryset = queryset.filter(is_default=True)
    if search:
        queryset = queryset.filter(title__icontains=search)
    ordering = ordering or DEFAULT_ORDERING
    if (
        not isinstance(ordering, str)
        or ordering.lstrip("-") not in ORDERING_FIELDS
        or ordering.count("-") > 1
    ):
        raise InvalidFilter(
            f"ordering must be one of {', '.join(ORDERING_FIELDS)} (optionally prefixed with "
            f"'-'); got {ordering!r}.",
            field="ordering",
        )
    tie = "-id" if ordering.startswith("-") else "id"
    return queryset.order_by(ordering, tie)


def list_sessions(
    *,
    scope: Scope | str,
    agent_id: str | None = None,
    exact: bool = False,
    default_only: bool = False,
    search: str | None = None,
    ordering: str | None = None,
    limit: int | None = None,
    offset: int = 0,
) -> list[Session]:
    """A page of the sessions at ``scope`` (DESIGN §7.2; filters as :func:`session_queryset`).

    Args:
        limit: most rows returned (``None``: no limit); an integer ``>= 0``.
        offset: rows skipped; an integer ``>= 0``.

    Raises:
        NoScope, InvalidScope.
        InvalidFilter: a bad ordering, filter or page bound (as :func:`session_queryset`).
    """
    _check_int(offset, field="offset", minimum=0)
    if limit is not None:
        _check_int(limit, field="limit", minimum=0)
    queryset = session_queryset(
        scope=scope,
        agent_id=agent_id,
        exact=exact,
        default_only=default_only,
        search=search,
        ordering=ordering,
    )
    end = None if limit is None else offset + limit
    return list(queryset[offset:end])


def count_sessions(
    *,
    scope: Scope | str,
    agent_id: str | None = None,
    exact: bool = False,
    default_only: bool = False,
    search: str | None = None,
) -> int:
    """How many sessions :func:`list_sessions` would list with the same filters (DESIGN §7.2).

    Raises:
        NoScope, InvalidScope.
    """
    return (
        session_queryset(
            scope=scope, agent_id=agent_id, exact=exact, default_only=default_only, search=search
        )
        .order_by()
        .count()
    )


def get_session(
    *, scope: Scope | str, session_id: uuid.UUID | str, agent_id: str | None = None
) -> Session:
    """The session ``session_id`` if it lies at or beneath ``scope`` (and is ``agent_id``'s).

    Raises:
        NoScope, InvalidScope: the scope is missing or malformed.
        SessionNotFound: no such session, out of scope, or another agent's — all alike (§6.1).
    """
    queryset = Session.objects.within(scope)
    if _check_filter_text(agent_id, field="agent_id") is not None:
        queryset = queryset.filter(agent_id=agent_id)
    try:
        return queryset.get(pk=_session_id(session_id))
    except Session.DoesNotExist:
        raise SessionNotFound() from None


def _locked_session(scope: Scope | str, session_id: uuid.UUID | str) -> Session:
    """The in-scope session row, locked for update until the transaction ends."""
    try:
        return Session.objects.within(scope).select_for_update().get(pk=_session_id(session_id))
    except Session.DoesNotExist:
        raise SessionNotFound() from None


# -- session writes -------------------------------------------------------------------------------


def create_session(
    *,
    scope: Scope | str,
    agent_id: str,
    title: str = "",
    metadata: Mapping[str, Any] | None = None,
    cwd: str | None = None,
    is_default: bool = False,
) -> Session:
    """Create a session of ``agent_id`` at exactly ``scope`` (DESIGN §3.1).

    Args:
        scope: where the session lives; stored in canonical form and never changed (§2.6).
        agent_id: the host's opaque agent identifier, 1–255 characters.
        title: host-owned, at most 500 characters.
        metadata: host-owned JSON object (default ``{}``).
        cwd: working directory the session is recorded in, or ``None``.
        is_default: create it as the agent's default at ``scope``.

    Returns:
        The new session.

    Raises:
        NoScope, InvalidScope: bad scope.
        InvalidAgentId, ValueTooLong, InvalidMetadata, NulCharacter, InvalidInput: bad fields.
        DefaultConflict: ``is_default`` and the agent already has a default at ``scope``.
    """
    canonical = as_scope(scope).canonical
    values = {
        "agent_id": _check_agent_id(agent_id),
        "title": _check_title(title),
        "metadata": _check_metadata(metadata),
        "cwd": _check_cwd(cwd),
        "is_default": bool(is_default),
    }
    try:
        with transaction.atomic(using=_db_for_write()):
            session = Session.objects.create(scope=canonical, **values)
    except IntegrityError:
        if (
            is_default
            and Session.objects.filter(agent_id=agent_id, scope=canonical, is_default=True).exists()
        ):
            raise DefaultConflict() from None
        raise
    _send_on_commit(signals.session_created, session=session)
    return session


def update_session(
    *,
    scope: Scope | str,
    session_id: uuid.UUID | str,
    title: str = _UNSET,
    metadata: Mapping[str, Any] = _UNSET,
    cwd: str | None = _UNSET,
) -> Session:
    """Change the host-owned fields of a session: ``title``, ``metadata``, ``cwd`` (DESIGN §7.1).

    Only the given fields are written, with ``updated_at``; counters, scope, ``is_default`` and
    ``backfilled_by`` are never written, so an append that lands between a client's read and
    this update is never undone (DESIGN §5).

    Returns:
        The session as stored after the update (counters read fresh).

    Raises:
        NoScope, InvalidScope, SessionNotFound, ValueTooLong, InvalidMetadata, NulCharacter,
        InvalidInput.
    """
    changes: dict[str, Any] = {}
    if title is not _UNSET:
        changes["title"] = _check_title(title)
    if metadata is not _UNSET:
        changes["metadata"] = check_json_object(metadata)
    if cwd is not _UNSET:
        changes["cwd"] = _check_cwd(cwd)
    session_pk = get_session(scope=scope, session_id=session_id).pk
    changes["updated_at"] = timezone.now()
    Session.objects.filter(pk=session_pk).update(**changes)
    return get_session(scope=scope, session_id=session_pk)


def delete_session(*, scope: Scope | str, session_id: uuid.UUID | str) -> None:
    """Delete a session and its messages in one transaction (DESIGN §7.1, §6.3).

    Deleting the default is allowed; the next :func:`resolve_session` creates a new one.

    Raises:
        NoScope, InvalidScope, SessionNotFound.
    """
    with transaction.atomic(using=_db_for_write()):
        session = _locked_session(scope, session_id)
        details = {"session_id": session.pk, "agent_id": session.agent_id, "scope": session.scope}
        Message.objects.filter(session=session).delete()
        session.delete()
    _send_on_commit(signals.session_deleted, **details)


def resolve_session(
    *, scope: Scope | str, agent_id: str, session_id: uuid.UUID | str | None = None
) -> tuple[Session, bool]:
    """The thread a run uses (DESIGN §6.1).

    With ``session_id``: that session, only if it lies within ``scope`` and belongs to
    ``agent_id``. Without: the default session of ``agent_id`` at exactly ``scope``, created on
    first use. Concurrent first calls create exactly one default: the partial unique constraint
    decides and the loser re-reads the winner's row (``QuerySet.get_or_create``).

    Returns:
        ``(session, created)``.

    Raises:
        NoScope, InvalidScope, InvalidAgentId.
        SessionNotFound: ``session_id`` is missing, out of scope or another agent's.
    """
    _check_agent_id(agent_id)
    if session_id is not None:
        return get_session(scope=scope, session_id=session_id, agent_id=agent_id), False
    canonical = as_scope(scope).canonical
    session, created = Session.objects.get_or_create(
        agent_id=agent_id, scope=canonical, is_default=True
    )
    if created:
        _send_on_commit(signals.session_created, session=session)
    return session, created


def _lock_current_defaults(session: Session) -> None:
    """Hold the row locks of every current default of the session's agent and scope.

    Under READ COMMITTED a ``SELECT … FOR UPDATE`` that waited for a concurrent swap skips the
    row that swap demoted and cannot see the row it promoted, so lock, re-read, and lock again
    until the defaults seen are all locked. Concurrent swaps then queue on the same row.
    """
    defaults = Session.objects.filter(
        agent_id=session.agent_id, scope=session.scope, is_default=True
    ).exclude(pk=session.pk)
    locked: set[uuid.UUID] = set()
    while True:
        locked |= set(defaults.select_for_update().values_list("pk", flat=True))
        if set(defaults.values_list("pk", flat=True)) <= locked:
            return


def make_default(*, scope: Scope | str, session_id: uuid.UUID | str) -> Session:
    """Make a session its agent's default at its scope, demoting the old one (DESIGN §6.2).

    Demotion and promotion happen in one transaction, so there is never a moment with two
    defaults. Concurrent swaps of the same agent and scope queue on the current default's row
    lock, so each one demotes the default the previous one promoted and the last to commit
    wins; the partial unique constraint backs this up, and a swap that still collides (with a
    default created at that moment by :func:`resolve_session`) retries on fresh data.

    Returns:
        The session, now the default, as committed.

    Raises:
        NoScope, InvalidScope, SessionNotFound.
        DefaultConflict: the swap kept colliding with concurrent writers (after 5 attempts).
    """
    attempts = 5
    for attempt in range(attempts):
        try:
            with transaction.atomic(using=_db_for_write()):
                session = _locked_session(scope, session_id)
                if session.is_default:
                    return session
                _lock_current_defaults(session)
                now = timezone.now()
                Session.objects.filter(
                    agent_id=session.agent_id, scope=session.scope, is_default=True
                ).update(is_default=False, updated_at=now)
                Session.objects.filter(pk=session.pk).update(is_default=True, updated_at=now)
                session.refresh_from_db()
                return session
        except IntegrityError:
            if attempt == attempts - 1:
                raise DefaultConflict() from None
    raise AssertionError("unreachable")  # pragma: no cover


# -- messages -------------------------------------------------------------------------------------


def _newest_text(session: Session) -> str:
    return newest_conversation_text(Message.objects.filter(session=session))


def append_messages(
    *,
    scope: Scope | str,
    session_id: uuid.UUID | str,
    messages: Sequence[MessageInput | Mapping[str, Any]],
) -> AppendResult:
    """Append one or many messages to a session, atomically (DESIGN §5, §7.1).

    All messages are validated before anything is written; then, in one transaction holding
    the session's row lock, they get the next ``seq`` values and ``message_count``,
    ``last_message`` and ``updated_at`` move with them. Nothing is written if any input is bad.

    Args:
        scope: the caller's scope; the session must lie at or beneath it.
        session_id: the session to append to.
        messages: :class:`MessageInput` objects or mappings with the same keys.

    Returns:
        :class:`AppendResult` with the refreshed session and the new rows in order.

    Raises:
        NoScope, InvalidScope, SessionNotFound.
        InvalidInput (and its subclasses InvalidRole, InvalidSource, InvalidContent,
        EmptyContent, MessageTooLarge, NulCharacter, InvalidMetadata): bad input.
    """
    if isinstance(messages, Mapping | MessageInput) or not isinstance(messages, Sequence):
        raise InvalidInput("messages must be a list of messages.", field="messages")
    if not messages:
        raise InvalidInput("At least one message is required.", field="messages")
    rows = [_build_message(item, index) for index, item in enumerate(messages)]
    with transaction.atomic(using=_db_for_write()):
        session = _locked_session(scope, session_id)
        created = Message.objects.bulk_create(
            Message(
                session=session,
                agent_id=session.agent_id,
                scope=session.scope,
                seq=session.last_seq + offset,
                **row,
            )
            for offset, row in enumerate(rows, start=1)
        )
        changes: dict[str, Any] = {
            "last_seq": session.last_seq + len(created),
            "updated_at": timezone.now(),
        }
        for message in reversed(created):
            if last := last_message_of(message.role, message.source, message.content):
                changes["last_message"] = last
                break
        Session.objects.filter(pk=session.pk).update(
            message_count=F("message_count") + len(created), **changes
        )
        # The row is locked, so the new values are known without reading the row back.
        changes["message_count"] = session.message_count + len(created)
        for name, value in changes.items():
            setattr(session, name, value)
    _send_on_commit(signals.messages_appended, session=session, messages=created)
    return AppendResult(session=session, messages=created)


def list_messages(
    *,
    scope: Scope | str,
    session_id: uuid.UUID | str,
    limit: int = 50,
    after_seq: int | None = None,
    before_seq: int | None = None,
) -> list[Message]:
    """Messages of a session in chronological (``seq``) order (DESIGN §7.1).

    Args:
        limit: most messages returned, ``>= 1``.
        after_seq: return the oldest ``limit`` messages with ``seq > after_seq``.
        before_seq: return the newest ``limit`` messages with ``seq < before_seq``.
            Without either, the newest ``limit`` messages. Both may be combined.

    Raises:
        NoScope, InvalidScope, SessionNotFound.
        InvalidFilter: ``limit`` is not an integer ``>= 1`` or a seq bound not one ``>= 0``.
    """
    _check_int(limit, field="limit", minimum=1)
    if after_seq is not None:
        _check_int(after_seq, field="after_seq", minimum=0)
    if before_seq is not None:
        _check_int(before_seq, field="before_seq", minimum=0)
    session = get_session(scope=scope, session_id=session_id)
    queryset = Message.objects.filter(session=session)
    if after_seq is not None:
        queryset = queryset.filter(seq__gt=after_seq)
    if before_seq is not None:
        queryset = queryset.filter(seq__lt=before_seq)
    if after_seq is not None and before_seq is None:
        return list(queryset.order_by("seq")[:limit])
    return list(reversed(queryset.order_by("-seq")[:limit]))


def delete_message(*, scope: Scope | str, session_id: uuid.UUID | str, seq: int) -> Session:
    """Delete one message; its ``seq`` is never reused and the counters follow (DESIGN §5).

    Returns:
        The session with its new counters.

    Raises:
        NoScope, InvalidScope, SessionNotFound, MessageNotFound.
        InvalidFilter: ``seq`` is not an integer ``>= 1``.
    """
    _check_int(seq, field="seq", minimum=1)
    with transaction.atomic(using=_db_for_write()):
        session = _locked_session(scope, session_id)
        deleted, _ = Message.objects.filter(session=session, seq=seq).delete()
        if not deleted:
            raise MessageNotFound()
        Session.objects.filter(pk=session.pk).update(
            message_count=F("message_count") - deleted,
            last_message=_newest_text(session),
            updated_at=timezone.now(),
        )
        session.refresh_from_db()
    return session


def clear_messages(*, scope: Scope | str, session_id: uuid.UUID | str) -> int:
    """Delete every message of a session; counters go to zero in the same transaction (§5).

    Returns:
        How many messages were deleted.

    Raises:
        NoScope, InvalidScope, SessionNotFound.
    """
    with transaction.atomic(using=_db_for_write()):
        session = _locked_session(scope, session_id)
        deleted, _ = Message.objects.filter(session=session).delete()
        Session.objects.filter(pk=session.pk).update(
            message_count=0, last_message="", updated_at=timezone.now()
        )
    return deleted


# -- maintenance ----------------------------------------------------------------------------------


def recount_sessions(
    *,
    scope: Scope | str | None = None,
    all_scopes: bool = False,
    session_ids: Iterable[uuid.UUID | str] | None = None,
    repair: bool = True,
) -> list[CounterDrift]:
    """Verify ``message_count`` and ``last_message`` against the rows, repairing drift (§5).

    An operator tool: pass a ``scope`` or, to check every session, ``all_scopes=True``.
    Each session is checked and repaired in its own transaction under its row lock.

    Args:
        scope: check sessions at and beneath this scope.
        all_scopes: check every session instead (``scope`` must then be ``None``).
        session_ids: check only these sessions (those of them within ``scope``), e.g. the
            ones an operator selected in the admin.
        repair: write the correct values (``False``: only report).

    Returns:
        One :class:`CounterDrift` for each session whose stored values were wrong.

    Raises:
        NoScope: neither ``scope`` nor ``all_scopes`` was given.
        InvalidScope: ``scope`` is malformed.
        SessionNotFound: an entry of ``session_ids`` is not a UUID.
    """
    if all_scopes and scope is not None:
        raise InvalidInput("Give a scope or all_scopes=True, not both.", field="scope")
    sessions = Session.objects.all() if all_scopes else Session.objects.within(scope)  # type: ignore[arg-type]
    if session_ids is not None:
        sessions = sessions.filter(pk__in=[_session_id(value) for value in session_ids])
    drifts: list[CounterDrift] = []
    for session_pk in sessions.order_by("pk").values_list("pk", flat=True).iterator():
        with transaction.atomic(using=_db_for_write()):
            session = Session.objects.select_for_update().filter(pk=session_pk).first()
            if session is None:
                continue
            actual = Message.objects.filter(session=session).aggregate(n=Count("pk"))["n"]
            last = _newest_text(session)
            if actual == session.message_count and last == session.last_message:
                continue
            drifts.append(
                CounterDrift(
                    session_id=session.pk,
                    stored_count=session.message_count,
                    actual_count=actual,
                    stored_last_message=session.last_message,
                    actual_last_message=last,
                )
            )
            if repair:
                Session.objects.filter(pk=session.pk).update(
                    message_count=actual, last_message=last
                )
    return drifts


def _send_on_commit(signal: Any, **kwargs: Any) -> None:
    transaction.on_commit(lambda: signal.send(sender=Session, **kwargs), using=_db_for_write())
