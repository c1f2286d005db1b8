"""The database work of :class:`~.service.CortexSessionService` (docs/design.md §13.3).

Each ADK call is one ``sync_to_async(thread_sensitive=True)`` call of a function here; every write
is one transaction on the database the router picks.
"""

from __future__ import annotations

import datetime as dt
from typing import TYPE_CHECKING, Any, cast

from asgiref.sync import sync_to_async
from django.db import IntegrityError, router
from django.db.models import OuterRef, QuerySet, Subquery
from google.adk.events.event import Event
from google.adk.sessions.base_session_service import GetSessionConfig, ListSessionsResponse
from google.adk.sessions.session import Session as AdkSessionModel

from cortex_sessions import routing, services
from cortex_sessions.exceptions import InvalidThroughSeq, SessionNotFound
from cortex_sessions.models import Message, not_expired_q
from cortex_sessions.models import Session as CortexSession
from cortex_sessions.scope import Scope
from cortex_sessions.services._common import _signals_held, _write_transaction

from ..runtime_usage import adk_usage
from .events import _event_of, _timestamp, _when, event_to_message
from .ids import _check_id, _nameable, _strip
from .models import AdkSession, AdkUserState, session_key
from .state import (
    _create_shared_state_rows,
    _prefixed,
    _shared_state,
    _shared_states,
    _state_deltas,
    _update_shared_state,
    _user_state_q,
)
from .store_pg import serves, session_with_events, user_sessions

if TYPE_CHECKING:
    from .service import CortexSessionService

try:  # ADK >= 1.x ships these; older versions fall back to ValueError like their own stores.
    from google.adk.errors.already_exists_error import AlreadyExistsError
except ImportError:  # pragma: no cover
    AlreadyExistsError = ValueError  # type: ignore[misc,assignment]
try:
    from google.adk.errors.session_not_found_error import SessionNotFoundError
except ImportError:  # pragma: no cover
    SessionNotFoundError = ValueError  # type: ignore[misc,assignment]
try:  # public since ADK 1.x: ``google.adk.errors.StaleSessionError`` (a ``ValueError``)
    from google.adk.errors import StaleSessionError
except ImportError:  # pragma: no cover
    StaleSessionError = ValueError  # type: ignore[misc,assignment]

#: The text of :class:`StaleSessionError`, word for word ADK's own database and SQLite stores'
#: (ADK's session-service tests match ``"modified in storage"``).
STALE_SESSION_MESSAGE = (
    "The session has been modified in storage since it was loaded. "
    "Please reload the session before appending more events."
)


def _db() -> str:
    return router.db_for_write(AdkSession)


def _find(
    service: CortexSessionService,
    app_name: str,
    user_id: str,
    session_id: str,
    *,
    write: bool = False,
    last_event: bool = False,
) -> tuple[Scope, AdkSession | None]:
    """``(scope, row)``: the AdkSession row of the session at exactly the mapped scope, where
    ``create_session`` puts it, else ``(scope, None)``.

    One query, by the unique key (which holds the scope), the scope also checked in the join: a
    session of another scope (another tenant's, with the same names) is never found, exactly as
    a missing one. With ``write`` (the row is about to be written) it is read on the write
    database, else where the router sends a read of the scope (docs/design.md §17.1). With
    ``last_event`` the row carries ``last_event_at`` (:func:`_with_last_event`), which only a
    read of the session needs: writes and deletes skip the subquery.
    """
    scope = service.scope_for(app_name, user_id)
    if not _nameable(session_id):
        return scope, None
    using = _db() if write else routing.db_for_read(AdkSession, scope=scope)
    return scope, _session_row(
        scope.canonical, app_name, user_id, session_id, using, last_event=last_event
    )


def _session_row(
    scope: str,
    app_name: str,
    user_id: str,
    session_id: str,
    using: str,
    *,
    last_event: bool = False,
) -> AdkSession | None:
    rows = AdkSession.objects.using(using).select_related("session")
    return (
        (_with_last_event(rows) if last_event else rows)
        .filter(key=session_key(scope, app_name, user_id, session_id))
        .filter(session__scope=scope, app_name=app_name, user_id=user_id, adk_id=session_id)
        .filter(not_expired_q(prefix="session__"))  # hidden until swept (§18.1)
        .first()
    )


def _with_last_event(rows: QuerySet[AdkSession]) -> QuerySet[AdkSession]:
    """``rows`` annotated with ``last_event_at``: the ``created_at`` of each session's newest
    message (its newest event's timestamp), or ``None``; a subquery of the same statement."""
    newest = Message.objects.filter(session_id=OuterRef("session_id")).order_by("-seq")
    return rows.annotate(last_event_at=Subquery(newest.values("created_at")[:1]))


def _last_update(row: AdkSession) -> dt.datetime:
    """A session's ``last_update_time``, as ADK's stores keep it: when its newest event
    happened (the event's timestamp), or when it was created if it has none."""
    last_event_at = getattr(row, "last_event_at", None)
    return last_event_at if last_event_at is not None else row.session.created_at


def _build(
    service: CortexSessionService,
    scope: str,
    row: AdkSession,
    events: list[Event],
    updated_at: dt.datetime,
    last_seq: int,
    using: str,
) -> AdkSessionModel:
    shared = _shared_state(service.tenant, scope, row.app_name, row.user_id, using)
    session = AdkSessionModel(
        id=row.adk_id,
        app_name=row.app_name,
        user_id=row.user_id,
        state={**row.state, **shared},
        events=events,
        last_update_time=_timestamp(updated_at),
    )
    _set_marker(session, last_seq)
    return session


def _set_marker(session: AdkSessionModel, last_seq: int) -> None:
    if "_storage_update_marker" in getattr(type(session), "__private_attributes__", {}):
        session._storage_update_marker = str(last_seq)


def _create_sync(
    service: CortexSessionService,
    app_name: str,
    user_id: str,
    state: dict[str, Any] | None,
    session_id: str | None,
) -> AdkSessionModel:
    scope = service.scope_for(app_name, user_id)
    session_id = _strip(session_id) or None
    _check_id("session_id", session_id)
    deltas = _state_deltas(state or {})
    tenant = service.tenant
    _create_shared_state_rows(tenant, scope.canonical, app_name, user_id, deltas)
    try:
        with _signals_held(), _write_transaction(_db()):
            cortex = services.create_session(scope=scope, agent_id=app_name, title=session_id or "")
            adk_id = session_id or str(cortex.pk)
            row = AdkSession.objects.create(
                session=cortex,
                app_name=app_name,
                user_id=user_id,
                adk_id=adk_id,
                key=session_key(scope.canonical, app_name, user_id, adk_id),
                state=deltas["session"],
            )
            _update_shared_state(tenant, scope.canonical, app_name, user_id, deltas)
    except IntegrityError:
        # Only a session at this scope can hold the key: another scope's never makes this fail.
        if session_id and _session_row(scope.canonical, app_name, user_id, session_id, _db()):
            raise AlreadyExistsError(f"Session with id {session_id} already exists.") from None
        raise
    # The shared state just written is read back where it was written (docs/design.md §17.1).
    return _build(service, scope.canonical, row, [], cortex.created_at, cortex.last_seq, _db())


def _get_sync(
    service: CortexSessionService,
    app_name: str,
    user_id: str,
    session_id: str,
    config: GetSessionConfig | None,
) -> AdkSessionModel | None:
    session_id = cast(str, _strip(session_id))
    scope = service.scope_for(app_name, user_id)
    using = routing.db_for_read(AdkSession, scope=scope)
    if _nameable(session_id) and serves(using):
        after = (
            _when(config.after_timestamp) if config and config.after_timestamp is not None else None
        )
        found = session_with_events(
            service,
            app_name,
            user_id,
            session_id,
            scope,
            using,
            after=after,
            limit=config.num_recent_events if config is not None else None,
        )
        if found is None:
            return None
        if found.complete:
            _set_marker(found.session, found.last_seq)
            return found.session
        # The newest page held messages that are no event: the ORM reads on, page by page.
    scope, row = _find(service, app_name, user_id, session_id, last_event=True)
    if row is None:
        return None
    cortex = row.session
    using = routing.db_for_read(Message, scope=scope)
    messages = (
        Message.objects.using(using)
        .filter(session_id=cortex.pk)
        .values_list("seq", "role", "content", "created_at")
    )
    limit = None
    if config is not None:
        if config.after_timestamp is not None:
            messages = messages.filter(created_at__gte=_when(config.after_timestamp))
        limit = config.num_recent_events

    def read(rows: Any) -> list[Event]:
        return [
            event
            for seq, role, content, created_at in rows
            if (event := _event_of(role, content, seq, created_at, cortex.pk, app_name)) is not None
        ]

    if limit is None:
        events = read(messages.order_by("seq"))
    else:
        # The newest ``limit`` events: read newest first, a page at a time, until ``limit``
        # events are found, so messages that are no event (a host's ``system`` note) do not
        # count. Usually one page.
        newest_first: list[Event] = []
        newest = messages.order_by("-seq")
        while len(newest_first) < limit:
            page = list(newest[:limit])
            newest_first.extend(read(page))
            if len(page) < limit:
                break
            newest = newest.filter(seq__lt=page[-1][0])
        events = list(reversed(newest_first[:limit]))
    return _build(service, scope.canonical, row, events, _last_update(row), cortex.last_seq, using)


def _list_sync(
    service: CortexSessionService, app_name: str, user_id: str | None
) -> ListSessionsResponse:
    """:meth:`~.service.CortexSessionService.list_sessions`: two statements whatever the number
    of sessions (the sessions with their newest event's time, then the app's and their users'
    shared state), as ADK's database store reads them; one user's sessions on PostgreSQL in one
    (:mod:`.store_pg`)."""
    listed = service.within if user_id is None else service.scope_for(app_name, user_id)
    # The list, its sessions (a subquery) and their shared state on one database.
    using = routing.db_for_read(AdkSession, scope=listed)
    if user_id is not None and listed is not None and serves(using):
        found_pg = user_sessions(service, app_name, user_id, listed, using)
        for session, last_seq in found_pg:
            _set_marker(session, last_seq)
        return _listed([session for session, _ in found_pg])
    rows = AdkSession.objects.using(using).select_related("session").filter(app_name=app_name)
    if user_id is not None:
        scope = service.scope_for(app_name, user_id)
        rows = rows.filter(user_id=user_id).filter(
            session__in=services.session_queryset(
                scope=scope, filters=services.SessionFilters(exact=True)
            ).using(using)
        )
    elif service.within is not None:
        rows = rows.filter(session__in=services.session_queryset(scope=service.within).using(using))
    else:  # an unbound service: still never an archived or expired session (§11.2, §18.1)
        rows = rows.filter(not_expired_q(prefix="session__"), session__archived_at__isnull=True)
    found = list(_with_last_event(rows))
    if not found:
        return ListSessionsResponse(sessions=[])
    app_state, user_states = _shared_states(
        service.tenant, app_name, {(row.session.scope, row.user_id) for row in found}, using
    )
    sessions = []
    for row in found:
        session = AdkSessionModel(
            id=row.adk_id,
            app_name=row.app_name,
            user_id=row.user_id,
            state={
                **row.state,
                **_prefixed(app_state, user_states.get((row.session.scope, row.user_id), {})),
            },
            events=[],
            last_update_time=_timestamp(_last_update(row)),
        )
        _set_marker(session, row.session.last_seq)
        sessions.append(session)
    return _listed(sessions)


def _listed(sessions: list[AdkSessionModel]) -> ListSessionsResponse:
    """The response of ``list_sessions``: least recently updated first, as ADK's database store
    orders them (then by user and id)."""
    sessions.sort(key=lambda s: (s.last_update_time, s.user_id, s.id))
    return ListSessionsResponse(sessions=sessions)


def _delete_sync(
    service: CortexSessionService, app_name: str, user_id: str, session_id: str
) -> None:
    session_id = cast(str, _strip(session_id))
    scope, row = _find(service, app_name, user_id, session_id, write=True)
    if row is None:
        return
    try:
        services.delete_session(scope=scope, session_id=row.session_id)
    except SessionNotFound:
        return


def _user_state_sync(service: CortexSessionService, app_name: str, user_id: str) -> dict[str, Any]:
    scope = service.scope_for(app_name, user_id)
    state = (
        AdkUserState.objects.using(routing.db_for_read(AdkUserState, scope=scope))
        .filter(**_user_state_q(scope.canonical, app_name, user_id))
        .values_list("state", flat=True)
        .first()
    )
    return dict(state or {})


def _append_sync(service: CortexSessionService, session: AdkSessionModel, event: Event) -> None:
    app_name, user_id = session.app_name, session.user_id
    scope, row = _find(service, app_name, user_id, session.id, write=True)
    if row is None:
        raise SessionNotFoundError(f"Session {session.id} not found.")
    deltas = _state_deltas((event.actions.state_delta if event.actions else None) or {})
    marker = getattr(session, "_storage_update_marker", None)
    tenant = service.tenant
    _create_shared_state_rows(tenant, scope.canonical, app_name, user_id, deltas)
    with _signals_held(), _write_transaction(_db()):
        # Lock the cortex session first, as every append does, then the ADK row.
        last_seq = (
            CortexSession.objects.using(_db())
            .select_for_update()
            .filter(pk=row.session_id)
            .values_list("last_seq", flat=True)
            .get()
        )
        if marker is not None and marker != str(last_seq):
            raise StaleSessionError(STALE_SESSION_MESSAGE)
        result = _store_event(scope, row.session_id, event, record_usage=service.record_usage)
        if deltas["session"]:
            # Every ADK write of this state holds the cortex session's row lock (taken above),
            # so reading the stored state here and writing it back loses no concurrent key.
            rows = AdkSession.objects.using(_db()).filter(pk=row.pk)
            stored = rows.values_list("state", flat=True).get()
            rows.update(state={**stored, **deltas["session"]})
        _update_shared_state(tenant, scope.canonical, app_name, user_id, deltas)
    # As ADK's stores: the session was last updated when its newest event happened, as stored
    # (to the microsecond), so a session read back compares equal.
    session.last_update_time = _timestamp(result.messages[-1].created_at)
    _set_marker(session, result.session.last_seq)


def _store_event(
    scope: Scope, session_id: Any, event: Event, *, record_usage: bool = False
) -> services.AppendResult:
    """Store ``event`` as the session's next message, in the caller's transaction, which holds
    the session's row lock. A compaction event (``event.actions.compaction``, ADK's
    ``EventsCompactionConfig``) is stored as a cortex compaction (docs/design.md §16.3, §16.5)
    standing for every message up to the compacted range's end, so the context read matches
    what ADK sends its model; ADK still reads every event back, as from its own stores. With
    ``record_usage`` the event's ``usage_metadata`` is the message's ``usage`` (§16.1)."""
    message = event_to_message(event)
    usage = adk_usage(event.usage_metadata, event.model_version) if record_usage else None
    compaction = event.actions.compaction if event.actions else None
    if compaction is not None:
        through = (
            Message.objects.using(_db())
            .filter(session_id=session_id, created_at__lte=_when(compaction.end_timestamp))
            .order_by("-seq")
            .values_list("seq", flat=True)
            .first()
        )
        if through is not None:
            try:
                return services.compact_session(
                    scope=scope,
                    session_id=session_id,
                    through_seq=through,
                    summary=message["content"],
                    usage=usage,
                )
            except InvalidThroughSeq:
                pass  # not past the newest compaction: kept as an ordinary event
    if usage is not None:
        message["usage"] = usage
    return services.append_messages(scope=scope, session_id=session_id, messages=[message])


_create = sync_to_async(_create_sync, thread_sensitive=True)
_get = sync_to_async(_get_sync, thread_sensitive=True)
_list = sync_to_async(_list_sync, thread_sensitive=True)
_delete = sync_to_async(_delete_sync, thread_sensitive=True)
_user_state = sync_to_async(_user_state_sync, thread_sensitive=True)
_append = sync_to_async(_append_sync, thread_sensitive=True)
