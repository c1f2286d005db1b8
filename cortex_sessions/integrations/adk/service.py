"""``CortexSessionService``: Google ADK sessions stored as cortex sessions (docs/design.md §13.3).

Mapping:

- ``(app_name, user_id)`` → a scope, through ``settings.CORTEX_SESSIONS_ADK_SCOPE`` (a dotted path
  or callable ``(app_name, user_id) -> Scope | str``; default ``app=<app_name>/user=<user_id>``).
  The cortex session lives at exactly that scope, with ``agent_id = app_name``.
- An ADK session → one cortex :class:`~cortex_sessions.models.Session` and one
  :class:`~.models.AdkSession` row (ADK's id, any string, and the session state). A generated
  id is the cortex session's UUID, so the ids in ADK, the admin and the API agree. An id is
  unique per mapped scope, app and user: the same id is free at every other scope (tenant),
  and nothing a call returns or raises tells whether it is used there.
- An event → one message: ``user`` when the user wrote it, ``tool`` when it carries function
  calls or responses, else ``assistant``; a text block with the event's text (so
  ``last_message`` reads naturally), then ``{"type": "adk_event", "event": {...}}`` with the
  event's JSON (``model_dump(mode="json", exclude_none=True)``, as ADK's own database store
  keeps it) verbatim, or as its JSON text (``"event_json"``) when it holds text PostgreSQL
  cannot store (NUL, lone surrogates). ``created_at`` is the event's timestamp.
- State: keys without a prefix live on the ADK session; ``app:`` keys in
  :class:`~.models.AdkAppState` (per tenant: the service's ``within`` scope, ``""`` when unbound)
  and ``user:`` keys in :class:`~.models.AdkUserState` (per mapped scope), stored without the
  prefix and merged back with it; ``temp:`` keys are never stored. Values are made JSON-safe
  exactly as ADK's own database store does (datetimes, pydantic models, bytes …).

Every write is one transaction on the database the router picks. A service may be bound to a
tenant with ``CortexSessionService(within=scope)``: then every ``(app_name, user_id)`` must map
to a scope at or beneath it, or the call is refused with ``ScopeForbidden``.
"""

from __future__ import annotations

import datetime as dt
import json
from typing import Any, cast

from asgiref.sync import sync_to_async
from django.db import IntegrityError, router
from django.db.models import Value
from google.adk.events.event import Event
from google.adk.sessions import _session_util
from google.adk.sessions.base_session_service import (
    BaseSessionService,
    GetSessionConfig,
    ListSessionsResponse,
)
from google.adk.sessions.session import Session as AdkSessionModel
from google.adk.sessions.state import State
from google.genai import types

from cortex_sessions import routing, services
from cortex_sessions.content import (
    MAX_JSON_DEPTH,
    check_json_object,
    check_json_value,
    content_text,
)
from cortex_sessions.exceptions import InvalidInput, ScopeForbidden, SessionNotFound, ValueTooLong
from cortex_sessions.models import Message
from cortex_sessions.models import Session as CortexSession
from cortex_sessions.scope import Scope, as_scope
from cortex_sessions.services._common import _signals_held, _write_transaction

from .conf import default_scope, scope_mapper
from .models import AdkAppState, AdkSession, AdkUserState, session_key, user_state_key

try:  # ADK >= 1.x ships these; older versions fall back to ValueError like their own stores.
    from google.adk.errors.already_exists_error import AlreadyExistsError
except ImportError:  # pragma: no cover
    AlreadyExistsError = ValueError  # type: ignore[misc,assignment]
try:
    from google.adk.errors.session_not_found_error import SessionNotFoundError
except ImportError:  # pragma: no cover
    SessionNotFoundError = ValueError  # type: ignore[misc,assignment]
try:
    from google.adk.errors._stale_session_error import StaleSessionError
except ImportError:  # pragma: no cover
    StaleSessionError = ValueError  # type: ignore[misc,assignment]

__all__ = [
    "EVENT_BLOCK_TYPE",
    "MAX_ID_CHARS",
    "AdkIdTooLong",
    "CortexSessionService",
    "default_scope",
    "event_to_message",
    "message_to_event",
]

#: The ``type`` of the content block that keeps an ADK event verbatim.
EVENT_BLOCK_TYPE = "adk_event"
#: Longest app name, user id or session id, in characters (the columns' length).
MAX_ID_CHARS = 255


class AdkIdTooLong(ValueTooLong, ValueError):
    """An app name, user id or session id over :data:`MAX_ID_CHARS` characters.

    Code ``too_long`` (a cortex :class:`~cortex_sessions.exceptions.ValueTooLong`), and a
    ``ValueError``, as ADK raises for bad arguments; ``field`` names the argument.
    """


def _check_id(field: str, value: str | None) -> None:
    if value is not None and len(value) > MAX_ID_CHARS:
        raise AdkIdTooLong(
            f"{field} is {len(value)} characters long; at most {MAX_ID_CHARS} are allowed.",
            field=field,
        )


def _strip(session_id: str | None) -> str | None:
    """A session id as ADK's in-memory store takes it: surrounding whitespace removed."""
    return session_id.strip() if session_id else session_id


def _storable(value: Any, *, depth: int = 0) -> bool:
    """Whether ``value``, stored ``depth`` levels deep inside a message's content, passes the
    content rule (no NUL, no lone surrogate, not nested too deep; docs/design.md §12.4)."""
    try:
        check_json_value(value, field="content", max_depth=MAX_JSON_DEPTH - depth)
    except InvalidInput:
        return False
    return True


def _state_deltas(state: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """``state`` split into ``app``/``user``/``session`` deltas, JSON-safe as ADK's database
    store makes them (``_session_util.extract_json_safe_state_delta``: datetimes, pydantic
    models, bytes … serialized faithfully; what cannot be, by its string form).

    Each delta is checked by the rule of every stored JSON object (``check_json_object``,
    docs/design.md §12.4) before anything is written.

    Raises:
        NulCharacter, InvalidText: a key or string holds NUL or a lone surrogate, which
            PostgreSQL cannot store in JSON (refused on every database alike).
        InvalidInput: a value is nested deeper than the JSON rule allows, or is NaN or an
            infinity, which no database stores as JSON (``field="state"``).
    """
    extract = getattr(_session_util, "extract_json_safe_state_delta", None)
    if extract is None:  # pragma: no cover - ADK before the JSON-safe helper
        from pydantic_core import to_jsonable_python

        deltas = cast(
            dict[str, dict[str, Any]],
            to_jsonable_python(_session_util.extract_state_delta(state), serialize_unknown=True),
        )
    else:
        deltas = extract(state)
    for part in deltas.values():  # each is stored (merged) as one JSON object
        check_json_object(part, field="state")
    return deltas


def _timestamp(value: dt.datetime) -> float:
    return value.timestamp()


def _when(timestamp: float) -> dt.datetime:
    return dt.datetime.fromtimestamp(timestamp, tz=dt.UTC)


def _event_text(event: Event) -> str:
    content = event.content
    if content is None or not content.parts:
        return ""
    return "\n".join(
        part.text for part in content.parts if part.text and not getattr(part, "thought", False)
    )


def _event_role(event: Event) -> str:
    if event.author == "user":
        return "user"
    parts = (event.content.parts if event.content else None) or []
    if any(part.function_call or part.function_response for part in parts):
        return "tool"
    return "assistant"


def event_to_message(event: Event) -> dict[str, Any]:
    """The message an ADK event is stored as (docs/design.md §13.3).

    Returns:
        A mapping for :func:`cortex_sessions.services.append_messages`.
    """
    content: list[dict[str, Any]] = []
    text = _event_text(event)
    if text.strip():
        if not _storable(text):
            text = text.replace("\x00", "").encode("utf-8", "replace").decode("utf-8")
        content.append({"type": "text", "text": text})
    # The JSON ADK's own database store keeps (its schema v1 ``event_data``).
    data = event.model_dump(mode="json", exclude_none=True)
    if _storable(data, depth=2):  # content list > event block > event
        content.append({"type": EVENT_BLOCK_TYPE, "event": data})
    else:
        content.append({"type": EVENT_BLOCK_TYPE, "event_json": json.dumps(data)})
    return {"role": _event_role(event), "content": content, "created_at": _when(event.timestamp)}


def message_to_event(message: Message, app_name: str) -> Event | None:
    """The event a message reads back as; ``None`` for a message that is no event (§13.3).

    Messages other writers add (the REST API, the admin) read as plain text events: a ``user``
    message as the user's, an ``assistant`` message as the app's; other roles are skipped.
    """
    return _event_of(
        message.role,
        message.content,
        cast(int, message.seq),  # messages of a session always have one
        message.created_at,
        message.session_id,
        app_name,
    )


def _event_of(
    role: str, content: Any, seq: int, created_at: dt.datetime, session_pk: Any, app_name: str
) -> Event | None:
    for block in content or ():
        if isinstance(block, dict) and block.get("type") == EVENT_BLOCK_TYPE:
            if "event" in block:
                return Event.model_validate(block["event"])
            return Event.model_validate_json(block["event_json"])
    if role not in ("user", "assistant"):
        return None
    text = content_text(content)
    if not text:
        return None
    return Event(
        id=f"cortex-{session_pk}-{seq}",
        invocation_id="",
        author="user" if role == "user" else app_name,
        content=types.Content(
            role="user" if role == "user" else "model", parts=[types.Part(text=text)]
        ),
        timestamp=_timestamp(created_at),
    )


class CortexSessionService(BaseSessionService):
    """ADK's ``BaseSessionService`` on cortex_sessions (docs/design.md §13.3).

    Args:
        within: optional tenant bound: every ``(app_name, user_id)`` must map to a scope at or
            beneath it; a call for one outside raises ``ScopeForbidden``. ``None`` (the
            default, and what ADK's no-argument construction gives): no bound beyond the
            mapping.

    ``app:`` state is shared by the sessions of an app *within the service's tenant*: services
    with the same ``within`` (or none) share it, services bound to different tenants never do.
    ``user:`` state is shared by a user's sessions of an app at the scope the user maps to.
    Session ids are unique per mapped scope, app and user: every call finds only sessions at the
    scope its ``(app_name, user_id)`` maps to, and a session of another scope with the same names
    is to it exactly a missing one (``None``, ``SessionNotFoundError``, a free id).

    Raises (from every method):
        AdkIdTooLong: ``app_name`` or ``user_id`` (or ``create_session``'s ``session_id``) is over
            255 characters (code ``too_long``; also a ``ValueError``), before any query.
        InvalidScope: the mapping gives no valid scope for ``(app_name, user_id)`` (with the
            default mapping: an empty name or one with control characters).
        ScopeForbidden: the mapped scope lies outside ``within``.
    """

    def __init__(self, *, within: Scope | str | None = None) -> None:
        self.within = as_scope(within) if within is not None else None
        #: The key of this service's ``app:`` state: the canonical ``within``, ``""`` unbound.
        self.tenant = self.within.canonical if self.within is not None else ""

    # -- mapping ----------------------------------------------------------------------------------

    def scope_for(self, app_name: str, user_id: str) -> Scope:
        """The scope of ``(app_name, user_id)`` by ``CORTEX_SESSIONS_ADK_SCOPE``.

        Raises:
            InvalidScope, NoScope: the mapping's result is no valid scope.
            ScopeForbidden: it lies outside ``within``.
        """
        _check_id("app_name", app_name)
        _check_id("user_id", user_id)
        scope = as_scope(scope_mapper()(app_name, user_id))
        if self.within is not None and not self.within.contains(scope):
            raise ScopeForbidden()
        return scope

    # -- BaseSessionService -----------------------------------------------------------------------

    async def create_session(
        self,
        *,
        app_name: str,
        user_id: str,
        state: dict[str, Any] | None = None,
        session_id: str | None = None,
    ) -> AdkSessionModel:
        """Create a session with the given or a generated id and initial ``state``.

        ``app:`` and ``user:`` keys of ``state`` update the shared app and user state; ``temp:``
        keys are dropped; the rest is the session's state. The returned session's state has the
        app and user state merged in.

        ``session_id`` is stripped of surrounding whitespace, as ADK's in-memory store does
        (``get_session`` and ``delete_session`` strip it too); ``None`` or blank: generated.

        Raises:
            AlreadyExistsError: ``session_id`` is taken for this app and user at the scope they
                map to. The same id at another scope (another tenant's) neither raises it nor
                is touched: ids are unique per scope, app and user.
            AdkIdTooLong: ``session_id`` is over 255 characters.
            NulCharacter, InvalidText: a state key or value holds NUL or a lone surrogate.
        """
        return await _create(self, app_name, user_id, state, session_id)

    async def get_session(
        self,
        *,
        app_name: str,
        user_id: str,
        session_id: str,
        config: GetSessionConfig | None = None,
    ) -> AdkSessionModel | None:
        """The session with its events (oldest first) and merged state, or ``None``.

        ``config.num_recent_events`` keeps only the newest N events (``0``: none; messages
        that read as no event, e.g. another writer's ``system`` message, do not count);
        ``config.after_timestamp`` only events with ``timestamp >=`` it; both may be combined.
        ``session_id`` is stripped; one over 255 characters names no session (``None``).
        """
        return await _get(self, app_name, user_id, session_id, config)

    async def list_sessions(
        self, *, app_name: str, user_id: str | None = None
    ) -> ListSessionsResponse:
        """The app's sessions (of one user, or of every user when ``user_id`` is ``None``),
        without events, with merged state, least recently updated first."""
        return await _list(self, app_name, user_id)

    async def delete_session(self, *, app_name: str, user_id: str, session_id: str) -> None:
        """Delete the session and its messages; a missing session is not an error.

        ``session_id`` is stripped, as ``create_session`` stores it.
        """
        await _delete(self, app_name, user_id, session_id)

    async def get_user_state(self, *, app_name: str, user_id: str) -> dict[str, Any]:
        """The user's shared state, keys without the ``user:`` prefix (``{}`` when none)."""
        return await _user_state(self, app_name, user_id)

    async def append_event(self, session: AdkSessionModel, event: Event) -> Event:
        """Store an event and apply its state delta, in one transaction.

        Partial events are returned unstored. ``temp:`` keys reach the in-memory ``session``
        only; ``app:``/``user:`` keys update the shared state; the rest the session's state.
        An event equal to one already in ``session.events`` (same id, same fields: a retried
        append) is returned and neither stored nor applied again, as ADK's in-memory store
        does; an event that merely shares an id is stored.

        Raises:
            SessionNotFoundError: the session does not exist (or is another tenant's).
            StaleSessionError: the stored session moved on (another writer appended) since
                ``session`` was read; read it again.
            NulCharacter, InvalidText: a state delta key or value holds NUL or a lone
                surrogate (nothing is stored).
        """
        if event.partial:
            return event
        if any(seen.id == event.id and seen == event for seen in session.events):
            return event
        self._apply_temp_state(session, event)
        event = self._trim_temp_delta_state(event)
        await _append(self, session, event)
        return self._commit_event_to_session(session, event)


# -- database work, each one sync_to_async call -----------------------------------------------------


def _db() -> str:
    return router.db_for_write(AdkSession)


def _user_state_q(scope: str, app_name: str, user_id: str) -> dict[str, Any]:
    """The lookup of the user state row at ``scope``: its key (the unique index), and the names
    it stands for."""
    return {
        "key": user_state_key(scope, app_name, user_id),
        "scope": scope,
        "app_name": app_name,
        "user_id": user_id,
    }


def _shared_state(
    tenant: str, scope: str, app_name: str, user_id: str, using: str
) -> dict[str, Any]:
    """The app's (in ``tenant``) and the user's (at ``scope``) shared state, prefixed, in one
    query on database ``using``."""
    app = (
        AdkAppState.objects.using(using)
        .filter(tenant=tenant, app_name=app_name)
        .annotate(kind=Value(State.APP_PREFIX))
        .values_list("kind", "state")
    )
    user = (
        AdkUserState.objects.using(using)
        .filter(**_user_state_q(scope, app_name, user_id))
        .annotate(kind=Value(State.USER_PREFIX))
        .values_list("kind", "state")
    )
    merged: dict[str, Any] = {}
    for prefix, state in sorted(app.union(user, all=True), key=lambda row: row[0]):
        for key, value in (state or {}).items():
            merged[prefix + key] = value
    return merged


def _create_shared_state_rows(
    tenant: str, scope: str, app_name: str, user_id: str, deltas: dict[str, dict[str, Any]]
) -> None:
    """Create the ``app``/``user`` state rows the deltas will lock, each in its own transaction.

    Created before the append's transaction, not inside it: on MySQL/MariaDB a concurrent insert
    of the same key leaves InnoDB's shared lock of the duplicate-key check on the row until the
    transaction ends, and two such holders then deadlock when both ask for its row lock
    (docs/design.md §15). Outside it the shared lock ends with the insert.
    """
    if deltas["app"]:
        AdkAppState.objects.get_or_create(tenant=tenant, app_name=app_name)
    if deltas["user"]:
        AdkUserState.objects.get_or_create(**_user_state_q(scope, app_name, user_id))


def _update_shared_state(
    tenant: str, scope: str, app_name: str, user_id: str, deltas: dict[str, dict[str, Any]]
) -> None:
    """Merge ``app``/``user`` deltas into their rows under row locks (same transaction)."""
    if deltas["app"]:
        app_row, _ = AdkAppState.objects.select_for_update().get_or_create(
            tenant=tenant, app_name=app_name
        )
        app_row.state = {**app_row.state, **deltas["app"]}
        app_row.save(update_fields=["state"])
    if deltas["user"]:
        user_row, _ = AdkUserState.objects.select_for_update().get_or_create(
            **_user_state_q(scope, app_name, user_id)
        )
        user_row.state = {**user_row.state, **deltas["user"]}
        user_row.save(update_fields=["state"])


def _find(
    service: CortexSessionService,
    app_name: str,
    user_id: str,
    session_id: str,
    *,
    write: bool = False,
) -> tuple[Scope, AdkSession | None]:
    """``(scope, row)``: the AdkSession row of the session at exactly the mapped scope, where
    ``create_session`` puts it, else ``(scope, None)``.

    One query, by the unique key (which holds the scope), the scope also checked in the join: a
    session of another scope (another tenant's, with the same names) is never found, exactly as
    a missing one. With ``write`` (the row is about to be written) it is read on the write
    database, else where the router sends a read of the scope (docs/design.md §17.1).
    """
    scope = service.scope_for(app_name, user_id)
    if not _nameable(session_id):
        return scope, None
    using = _db() if write else routing.db_for_read(AdkSession, scope=scope)
    return scope, _session_row(scope.canonical, app_name, user_id, session_id, using)


def _nameable(session_id: str) -> bool:
    """Whether ``session_id`` could name a stored session: at most :data:`MAX_ID_CHARS`
    characters, without NUL or a lone surrogate, which ``create_session`` refuses. Any other
    id names no session, on every database, without a query (PostgreSQL refuses NUL in a
    query parameter, and a lone surrogate has no UTF-8 form to hash)."""
    if len(session_id) > MAX_ID_CHARS:
        return False
    try:
        check_json_value(session_id, field="session_id")  # the rule every stored string follows
    except InvalidInput:  # NulCharacter, InvalidText
        return False
    return True


def _session_row(
    scope: str, app_name: str, user_id: str, session_id: str, using: str
) -> AdkSession | None:
    return (
        AdkSession.objects.using(using)
        .select_related("session")
        .filter(key=session_key(scope, app_name, user_id, session_id))
        .filter(session__scope=scope, app_name=app_name, user_id=user_id, adk_id=session_id)
        .first()
    )


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
    return _build(service, scope.canonical, row, [], cortex.updated_at, cortex.last_seq, _db())


def _get_sync(
    service: CortexSessionService,
    app_name: str,
    user_id: str,
    session_id: str,
    config: GetSessionConfig | None,
) -> AdkSessionModel | None:
    session_id = cast(str, _strip(session_id))
    scope, row = _find(service, app_name, user_id, session_id)
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
    return _build(service, scope.canonical, row, events, cortex.updated_at, cortex.last_seq, using)


def _list_sync(
    service: CortexSessionService, app_name: str, user_id: str | None
) -> ListSessionsResponse:
    listed = service.within if user_id is None else service.scope_for(app_name, user_id)
    # The list, its sessions (a subquery) and their shared state on one database.
    using = routing.db_for_read(AdkSession, scope=listed)
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
    sessions = [
        _build(
            service,
            row.session.scope,
            row,
            [],
            row.session.updated_at,
            row.session.last_seq,
            using,
        )
        for row in rows
    ]
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
            raise StaleSessionError(
                "The session was changed by another writer since it was read; read it again."
            )
        result = services.append_messages(
            scope=scope, session_id=row.session_id, messages=[event_to_message(event)]
        )
        if deltas["session"]:
            # Every ADK write of this state holds the cortex session's row lock (taken above),
            # so reading the stored state here and writing it back loses no concurrent key.
            rows = AdkSession.objects.using(_db()).filter(pk=row.pk)
            stored = rows.values_list("state", flat=True).get()
            rows.update(state={**stored, **deltas["session"]})
        _update_shared_state(tenant, scope.canonical, app_name, user_id, deltas)
    session.last_update_time = _timestamp(result.session.updated_at)
    _set_marker(session, result.session.last_seq)


_create = sync_to_async(_create_sync, thread_sensitive=True)
_get = sync_to_async(_get_sync, thread_sensitive=True)
_list = sync_to_async(_list_sync, thread_sensitive=True)
_delete = sync_to_async(_delete_sync, thread_sensitive=True)
_user_state = sync_to_async(_user_state_sync, thread_sensitive=True)
_append = sync_to_async(_append_sync, thread_sensitive=True)
