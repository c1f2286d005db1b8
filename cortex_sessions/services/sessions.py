"""Session services: list, count, get, create, update, delete, resolve, make-default (docs/design.md §6, §7)."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from datetime import datetime
from typing import Any, cast

from django.db import IntegrityError, connections
from django.db.models import F, Value
from django.db.models.functions import Greatest
from django.utils import timezone

from .. import signals
from ..content import check_json_object
from ..exceptions import DefaultConflict, InvalidFilter, SessionNotFound
from ..metadata import filter_by_metadata
from ..models import Message, Session, SessionQuerySet, not_expired_q
from ..scope import Scope, canonical_of, scope_q
from ..search import filter_sessions
from ..search_limits import search_timeout
from . import _pg, _pg_lists
from ._common import (
    DEFAULT_ORDERING,
    ORDERING_FIELDS,
    UNCHANGED,
    Unchanged,
    _check_agent_id,
    _check_agent_id_filter,
    _check_cwd,
    _check_expires_at,
    _check_int,
    _check_live,
    _check_metadata,
    _check_not_held,
    _check_title,
    _db_for_read,
    _db_for_write,
    _locked_session,
    _retry_default_race,
    _send_on_commit,
    _session_id,
    _write_transaction,
)
from .filters import SessionFilters, session_filters
from .idempotency import fingerprint, run_once


def _retire_expired_default(using: str, *, agent_id: str, canonical: str) -> None:
    """Take ``is_default`` from the agent's expired default at ``canonical``, if it has one,
    so a new default can be created in the same transaction (docs/design.md §18.1). The
    update locks that row (through the one-default index, as make-default's demotion does)."""
    Session.objects.using(using).defaults_of(agent_id=agent_id, scope=canonical).filter(
        expires_at__lte=timezone.now()
    ).update(is_default=False)


#: How many times :func:`resolve_session` reads-then-creates before giving up on a default
#: that concurrent writers keep creating and deleting.
RESOLVE_ATTEMPTS = 10

# -- session reads --------------------------------------------------------------------------------


def session_queryset(
    *,
    scope: Scope | str,
    filters: SessionFilters | None = None,
    ordering: str | None = None,
) -> SessionQuerySet:
    """The sessions a list at ``scope`` shows, filtered and ordered (docs/design.md §7.2, §11.2,
    §11.3, §11.5).

    Args:
        scope: the caller's scope; rows at it and beneath it match, or only at it with
            ``filters.exact``.
        filters: which sessions (:class:`~cortex_sessions.services.SessionFilters`); ``None``:
            ``SessionFilters()``, every live session of the scope. With ``filters.q`` each row
            has ``search_match`` (:class:`~cortex_sessions.matches.SearchMatch`).
        ordering: one of ``ORDERING_FIELDS``, optionally ``-``-prefixed; default
            ``-updated_at``. Ties are broken by id in the same direction so pages are stable.
            With ``filters.q`` and no ``ordering`` the best matches come first (PostgreSQL's
            rank, then ``-updated_at``; SQLite has no rank: ``-updated_at``).

    Returns:
        An unevaluated queryset (callers paginate it).

    Raises:
        NoScope, InvalidScope: the scope is missing or malformed.
        InvalidFilter: ``ordering`` is not an accepted value, or ``filters.q`` on a database
            without search (MySQL/MariaDB).
        TypeError: ``filters`` is not a ``SessionFilters`` (or ``None``).
    """
    return _session_queryset(scope, session_filters(filters), ordering, using=None)


def _session_queryset(
    scope: Scope | str, filters: SessionFilters, ordering: str | None, *, using: str | None
) -> SessionQuerySet:
    """:func:`session_queryset` on the database ``using`` (``None``: the router's read
    database for ``scope``), for a caller that has asked the router already."""
    queryset = _filtered(scope, filters, annotate=True, using=using)
    explicit_ordering = ordering is not None
    ordering = check_ordering(ordering)
    tie = "-id" if ordering.startswith("-") else "id"
    if filters.q is not None and not explicit_ordering:  # best first (SQLite: rank is NULL)
        return queryset.order_by(F("search_rank").desc(), ordering, tie)
    return queryset.order_by(ordering, tie)


def check_ordering(ordering: Any) -> str:
    """The ordering a session list sorts by: ``ordering`` itself, or ``DEFAULT_ORDERING`` for
    ``None`` (or ``""``), as :func:`session_queryset` takes it (docs/design.md §7.2).

    Returns:
        One of ``ORDERING_FIELDS``, optionally ``-``-prefixed.

    Raises:
        InvalidFilter: ``ordering`` is not such a string.
    """
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
    return ordering


def _filtered(
    scope: Scope | str, filters: SessionFilters, *, annotate: bool, using: str | None = None
) -> SessionQuerySet:
    """The sessions within ``scope`` that ``filters`` keep, unordered; a search's rows get its
    rank and snippet only with ``annotate`` (a count needs neither).

    Raises:
        NoScope, InvalidScope: the scope is missing or malformed.
        InvalidFilter: ``filters.q`` on a database without search (MySQL/MariaDB).
    """
    alias = _db_for_read(scope) if using is None else using  # the router asked once per call
    queryset = Session.objects.using(alias).within(scope, exact=filters.exact)
    if filters.agent_id is not None:
        queryset = queryset.filter(agent_id=filters.agent_id)
    if filters.default_only:
        queryset = queryset.filter(is_default=True)
    if filters.search is not None:
        queryset = queryset.filter(title__icontains=filters.search)
    if filters.archived is not None:
        queryset = queryset.filter(archived_at__isnull=not filters.archived)
    if filters.metadata is not None:
        queryset = cast(SessionQuerySet, filter_by_metadata(queryset, filters.metadata))
    if filters.q is not None:
        queryset = filter_sessions(
            queryset,
            q=filters.q,
            scope_q=scope_q(scope, exact=filters.exact),
            connection=connections[queryset.db],
            annotate=annotate,
        )
    return queryset


def list_sessions(
    *,
    scope: Scope | str,
    filters: SessionFilters | None = None,
    ordering: str | None = None,
    limit: int | None = None,
    offset: int = 0,
) -> list[Session]:
    """A page of the sessions at ``scope`` (docs/design.md §7.2; ``filters`` and ``ordering``
    as :func:`session_queryset`).

    Args:
        limit: most rows returned (``None``: no limit); an integer ``>= 0``.
        offset: rows skipped; an integer ``>= 0``.

    Raises:
        NoScope, InvalidScope.
        InvalidFilter: a bad ordering or page bound, or ``filters.q`` on MySQL/MariaDB (as
            :func:`session_queryset`).
        TypeError: ``filters`` is not a ``SessionFilters`` (or ``None``).
        SearchTimeout: with ``filters.q``, the search ran past ``SEARCH_TIMEOUT``
            (docs/design.md §11.5).
    """
    _check_int(offset, field="offset", minimum=0)
    if limit is not None:
        _check_int(limit, field="limit", minimum=0)
    filters = session_filters(filters)
    alias = _db_for_read(scope)
    if _pg_lists.handles(alias, filters):  # one statement, no queryset (docs/design.md §14)
        canonical = canonical_of(scope)
        ordering = check_ordering(ordering)
        if limit == 0:
            return []
        return _pg_lists.list_sessions(
            alias,
            canonical=canonical,
            filters=filters,
            ordering=ordering,
            limit=limit,
            offset=offset,
        )
    queryset = _session_queryset(scope, filters, ordering, using=alias)
    end = None if limit is None else offset + limit
    with search_timeout(queryset.db, active=filters.q is not None):
        return list(queryset[offset:end])


def count_sessions(*, scope: Scope | str, filters: SessionFilters | None = None) -> int:
    """How many sessions :func:`list_sessions` would list with the same ``scope`` and
    ``filters`` (docs/design.md §7.2).

    Raises:
        NoScope, InvalidScope.
        InvalidFilter: ``filters.q`` on MySQL/MariaDB.
        TypeError: ``filters`` is not a ``SessionFilters`` (or ``None``).
        SearchTimeout: with ``filters.q``, the search ran past ``SEARCH_TIMEOUT``
            (docs/design.md §11.5).
    """
    filters = session_filters(filters)
    alias = _db_for_read(scope)
    if _pg_lists.handles(alias, filters):  # one statement, no queryset (docs/design.md §14)
        return _pg_lists.count_sessions(alias, canonical=canonical_of(scope), filters=filters)
    queryset = _filtered(scope, filters, annotate=False, using=alias)
    with search_timeout(queryset.db, active=filters.q is not None):
        return queryset.order_by().count()


def get_session(
    *, scope: Scope | str, session_id: uuid.UUID | str, agent_id: str | None = None
) -> Session:
    """The session ``session_id`` if it lies at or beneath ``scope`` (and is ``agent_id``'s).

    Raises:
        NoScope, InvalidScope: the scope is missing or malformed.
        InvalidAgentId, NulCharacter, InvalidText: ``agent_id`` is given and is not an agent
            id (:func:`check_agent_id`).
        SessionNotFound: no such session, out of scope, or another agent's — all alike (§6.1).
    """
    return _get(scope, session_id, agent_id, using=_db_for_read(scope))


def _get(
    scope: Scope | str, session_id: uuid.UUID | str, agent_id: str | None, *, using: str
) -> Session:
    """:func:`get_session` on database ``using``: the services' reads that a write depends on
    (a replay, the state a write returns) pass the write database (docs/design.md §17.1)."""
    alias = using
    if _pg.serves(alias):
        canonical = canonical_of(scope)
        agent_id = _check_agent_id_filter(agent_id)
        session = _pg.get_session(
            alias, canonical=canonical, session_id=_session_id(session_id), agent_id=agent_id
        )
        if session is None:
            raise SessionNotFound()
        return session
    queryset = Session.objects.using(alias).within(scope)
    if _check_agent_id_filter(agent_id) is not None:
        queryset = queryset.filter(agent_id=agent_id)
    try:
        return queryset.get(pk=_session_id(session_id))
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
    idempotency_key: str | None = None,
    expires_at: datetime | str | None = None,
) -> Session:
    """Create a session of ``agent_id`` at exactly ``scope`` (docs/design.md §3.1).

    Args:
        scope: where the session lives; stored in canonical form and never changed (§2.6).
        agent_id: the host's opaque agent identifier, 1–255 characters.
        title: host-owned, at most 500 characters.
        metadata: host-owned JSON object (default ``{}``).
        cwd: working directory the session is recorded in, or ``None``.
        is_default: create it as the agent's default at ``scope``.
        idempotency_key: when given, the session is created at most once per key and scope
            within ``IDEMPOTENCY_TTL``; a replay with the same fields creates nothing and
            returns the first session as it is now (docs/design.md §12.1).
        expires_at: when the session expires (an aware ``datetime`` or an ISO 8601 string
            with offset), or ``None`` for never (docs/design.md §18.1). A time already past
            is stored, and the session is hidden from reads at once.

    Returns:
        The new session (or, on a replay, the one the first call created).

    Raises:
        NoScope, InvalidScope: bad scope.
        InvalidAgentId, ValueTooLong, InvalidMetadata, NulCharacter, InvalidInput: bad fields.
        DefaultConflict: ``is_default`` and the agent already has a default at ``scope``.
        InvalidIdempotencyKey: a malformed key.
        IdempotencyKeyReused: the key was used with other fields.
        IdempotencyKeyInProgress: a call with the key still ran past the lock wait timeout.
        SessionNotFound: a replay whose session has been deleted since.
        WriteOutcomeUnknown: the commit failed and may have been carried out (§12.3).
    """
    canonical = canonical_of(scope)
    values = {
        "agent_id": _check_agent_id(agent_id),
        "title": _check_title(title),
        "metadata": _check_metadata(metadata),
        "cwd": _check_cwd(cwd),
        "is_default": bool(is_default),
        "expires_at": _check_expires_at(expires_at),
    }
    if idempotency_key is not None:
        outcome = run_once(
            scope=canonical,
            endpoint="service:create_session",
            key=idempotency_key,
            digest=fingerprint(_fingerprinted(values)),
            write=lambda: _create(canonical, values),
            record=lambda session: (0, str(session.pk)),
        )
        if not outcome.replayed:
            return cast(Session, outcome.result)
        try:
            return Session.objects.using(_db_for_write()).get(pk=outcome.response)
        except Session.DoesNotExist:
            raise SessionNotFound() from None
    return _create(canonical, values)


def _fingerprinted(values: dict[str, Any]) -> dict[str, Any]:
    """``values`` as an idempotency fingerprint takes them: ``expires_at`` as ISO 8601 text,
    and left out when ``None`` (so keys recorded before it existed still replay)."""
    expires_at = values["expires_at"]
    rest = {key: value for key, value in values.items() if key != "expires_at"}
    return rest if expires_at is None else {**rest, "expires_at": expires_at.isoformat()}


def _create(canonical: str, values: dict[str, Any]) -> Session:
    """Insert the session row; a second default is :class:`DefaultConflict`."""
    agent_id, is_default = values["agent_id"], values["is_default"]
    using = _db_for_write()
    try:
        with _write_transaction(using):
            session = Session.objects.create(scope=canonical, **values)
    except IntegrityError:
        if (
            is_default
            and Session.objects.using(using)
            .filter(agent_id=agent_id, scope=canonical, is_default=True)
            .exists()
        ):
            raise DefaultConflict() from None
        raise
    _send_on_commit(signals.session_created, session=session)
    return session


def update_session(
    *,
    scope: Scope | str,
    session_id: uuid.UUID | str,
    title: str | Unchanged = UNCHANGED,
    metadata: Mapping[str, Any] | Unchanged = UNCHANGED,
    cwd: str | Unchanged | None = UNCHANGED,
    expires_at: datetime | str | Unchanged | None = UNCHANGED,
) -> Session:
    """Change the host-owned fields of a session: ``title``, ``metadata``, ``cwd``,
    ``expires_at`` (docs/design.md §7.1, §18.1).

    Only the given fields are written, with ``updated_at``; counters, scope, ``is_default`` and
    ``backfilled_by`` are never written, so an append that lands between a client's read and
    this update is never undone (docs/design.md §5).

    Args:
        title, metadata, cwd, expires_at: the new values; a field left out (its default
            ``UNCHANGED``) is not written. ``expires_at`` is an aware ``datetime``, an ISO
            8601 string with offset, or ``None`` (never expires).

    Returns:
        The session as stored after the update (counters read fresh) — also when the new
        ``expires_at`` has passed already, though reads hide it from then on.

    Raises:
        NoScope, InvalidScope, SessionNotFound, ValueTooLong, InvalidMetadata, NulCharacter,
        InvalidInput.
    """
    changes: dict[str, Any] = {}
    if title is not UNCHANGED:
        changes["title"] = _check_title(title)
    if metadata is not UNCHANGED:
        changes["metadata"] = check_json_object(metadata)
    if cwd is not UNCHANGED:
        changes["cwd"] = _check_cwd(cwd)
    if expires_at is not UNCHANGED:
        changes["expires_at"] = _check_expires_at(expires_at)
    using = _db_for_write()  # the row is read back from where it was written (§17.1)
    session_pk = _get(scope, session_id, None, using=using).pk
    # The clock is read before the update waits for the row lock: a concurrent write that
    # committed a later time meanwhile keeps it (``updated_at`` never moves back).
    changes["updated_at"] = Greatest(F("updated_at"), Value(timezone.now()))
    Session.objects.using(using).filter(pk=session_pk).update(**changes)
    if "expires_at" in changes:  # the row as written, even if it has just expired
        try:
            return Session.objects.using(using).get(pk=session_pk)
        except Session.DoesNotExist:
            raise SessionNotFound() from None
    return _get(scope, session_pk, None, using=using)


def delete_session(*, scope: Scope | str, session_id: uuid.UUID | str) -> None:
    """Delete a session and its messages in one transaction (docs/design.md §7.1, §6.3).

    Deleting the default is allowed; the next :func:`resolve_session` creates a new one. A
    session on legal hold is never deleted (docs/design.md §18.1).

    A delete the database rolled back to break a deadlock (deleting the default writes the
    one-default index, as a concurrent :func:`make_default` does on MySQL/MariaDB) runs again,
    unless a caller's transaction encloses it (docs/design.md §15.4).

    Raises:
        NoScope, InvalidScope, SessionNotFound.
        LegalHold: the session is on legal hold; nothing is deleted.
        OperationalError: a deadlock inside a caller's transaction, or on every attempt.
    """
    using = _db_for_write()

    def attempt() -> dict[str, Any]:
        with _write_transaction(using):
            session = _check_not_held(_locked_session(scope, session_id))
            details = {
                "session_id": session.pk,
                "agent_id": session.agent_id,
                "scope": session.scope,
            }
            Message.objects.using(using).filter(session=session).delete()
            session.delete(using=using)
        return details

    details = _retry_default_race(using, attempt, attempts=MAKE_DEFAULT_ATTEMPTS)
    _send_on_commit(signals.session_deleted, **details)


def resolve_session(
    *, scope: Scope | str, agent_id: str, session_id: uuid.UUID | str | None = None
) -> tuple[Session, bool]:
    """The thread a run uses (docs/design.md §6.1).

    With ``session_id``: that session, only if it lies within ``scope`` and belongs to
    ``agent_id``. Without: the default session of ``agent_id`` at exactly ``scope``, created on
    first use. Concurrent first calls create exactly one default: the partial unique constraint
    decides and the loser re-reads the winner's row. When that row is deleted between the
    collision and the re-read, the loser tries again (reading, then creating), up to
    ``RESOLVE_ATTEMPTS`` times (docs/design.md §12.3). A create the database rolled back to
    break a deadlock (on MySQL/MariaDB when it races :func:`make_default`) runs again the same
    way, as make-default's swaps do, unless a caller's transaction encloses it
    (docs/design.md §15.4).

    An expired default (``expires_at`` passed, not swept yet) is never returned: the create
    retires it first, in its own transaction and under its row lock (``is_default`` false;
    the sweep deletes it later), so the one-default constraint stays race-free — a concurrent
    resolve waits for that lock, then collides with the new default and reads it
    (docs/design.md §18.1).

    Returns:
        ``(session, created)``.

    Raises:
        NoScope, InvalidScope, InvalidAgentId.
        NulCharacter, InvalidText: ``agent_id`` holds NUL or a lone surrogate.
        SessionNotFound: ``session_id`` is missing, out of scope or another agent's.
        DefaultConflict: every attempt collided with a concurrent create that was deleted
            again before it could be read (a resolve/delete storm; 409, safe to retry).
        OperationalError: a deadlock inside a caller's transaction, or on every attempt.
    """
    _check_agent_id(agent_id)
    if session_id is not None:
        return get_session(scope=scope, session_id=session_id, agent_id=agent_id), False
    canonical = canonical_of(scope)
    alias = _db_for_write()

    def attempt() -> tuple[Session, bool]:
        session: Session | None
        if _pg.serves(alias):  # one statement, no queryset to build (docs/design.md §14)
            session = _pg.resolve_default(alias, canonical=canonical, agent_id=agent_id)
        else:
            # On the write database: a replica's stale "no default" would create a second one.
            session = (
                Session.objects.using(alias)
                .filter(not_expired_q(), agent_id=agent_id, scope=canonical, is_default=True)
                .first()
            )
        if session is not None:
            return session, False
        # A collision with a concurrent resolve's default (which may be deleted again before
        # the re-read) reads, or creates, once more (docs/design.md §12.3).
        with _write_transaction(alias):
            _retire_expired_default(alias, agent_id=agent_id, canonical=canonical)
            return Session.objects.create(agent_id=agent_id, scope=canonical, is_default=True), True

    session, created = _retry_default_race(alias, attempt, attempts=RESOLVE_ATTEMPTS)
    if created:
        _send_on_commit(signals.session_created, session=session)
    return session, created


#: How often :func:`make_default` tries before giving up.
MAKE_DEFAULT_ATTEMPTS = 10


def _lock_current_defaults(session: Session, using: str) -> None:
    """Hold the row locks of every current default of the session's agent and scope.

    Under READ COMMITTED a ``SELECT … FOR UPDATE`` that waited for a concurrent swap skips the
    row that swap demoted and cannot see the row it promoted, so lock again until a locking
    read finds no default it had not locked. Concurrent swaps then queue on the same row. The
    re-read locks too: a locking read sees the newest committed rows at any isolation level,
    where a plain one under a host's REPEATABLE READ on MySQL/MariaDB reads the transaction's
    first snapshot and would never show the promoted row (the loop did not end).
    """
    defaults = (
        Session.objects.using(using)
        .defaults_of(agent_id=session.agent_id, scope=session.scope)
        .exclude(pk=session.pk)
        .select_for_update()
    )
    locked = set(defaults.values_list("pk", flat=True))
    while True:
        seen = set(defaults.values_list("pk", flat=True))
        if seen <= locked:
            return
        locked |= seen


def make_default(*, scope: Scope | str, session_id: uuid.UUID | str) -> Session:
    """Make a session its agent's default at its scope, demoting the old one (docs/design.md §6.2).

    Demotion and promotion happen in one transaction, so there is never a moment with two
    defaults. Concurrent swaps of the same agent and scope queue on the current default's row
    lock, so each one demotes the default the previous one promoted and the last to commit
    wins; the partial unique constraint backs this up, and a swap that still collides (with a
    default created at that moment by :func:`resolve_session`) retries on fresh data. A swap
    the database rolled back to break a deadlock (InnoDB's locks on the one-default index
    make these a normal event on MySQL/MariaDB, docs/design.md §15) is retried the same way,
    unless the caller's transaction encloses it (the error then propagates).

    Returns:
        The session, now the default, as committed.

    Raises:
        NoScope, InvalidScope, SessionNotFound.
        SessionArchived: the session is archived (docs/design.md §11.2).
        DefaultConflict: the swap kept colliding with concurrent writers (after
            ``MAKE_DEFAULT_ATTEMPTS`` attempts).
        OperationalError: the database kept breaking deadlocks with this swap (as many
            attempts), or failed otherwise.
    """
    using = _db_for_write()

    def attempt() -> Session:
        with _write_transaction(using):
            session = _check_live(_locked_session(scope, session_id))
            if session.is_default:
                return session
            _lock_current_defaults(session, using)
            now = timezone.now()
            Session.objects.using(using).defaults_of(
                agent_id=session.agent_id, scope=session.scope
            ).update(is_default=False, updated_at=now)
            Session.objects.using(using).filter(pk=session.pk).update(
                is_default=True, updated_at=now
            )
            session.refresh_from_db(using=using)
            return session

    return _retry_default_race(using, attempt, attempts=MAKE_DEFAULT_ATTEMPTS)
