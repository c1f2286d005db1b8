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

from typing import Any

from google.adk.events.event import Event
from google.adk.sessions.base_session_service import (
    BaseSessionService,
    GetSessionConfig,
    ListSessionsResponse,
)
from google.adk.sessions.session import Session as AdkSessionModel

from cortex_sessions.exceptions import ScopeForbidden
from cortex_sessions.scope import Scope, as_scope

from .conf import default_scope, scope_mapper
from .events import EVENT_BLOCK_TYPE, event_to_message, message_to_event
from .ids import MAX_ID_CHARS, AdkIdTooLong, _check_id
from .store import _append, _create, _delete, _get, _list, _user_state

__all__ = [
    "EVENT_BLOCK_TYPE",
    "MAX_ID_CHARS",
    "AdkIdTooLong",
    "CortexSessionService",
    "default_scope",
    "event_to_message",
    "message_to_event",
]


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

    def __init__(self, *, within: Scope | str | None = None, record_usage: bool = False) -> None:
        self.within = as_scope(within) if within is not None else None
        #: Store an event's ``usage_metadata`` as its message's ``usage`` (docs/design.md
        #: §16.1, §16.5): opt-in.
        self.record_usage = record_usage
        #: The key of this service's ``app:`` state: the canonical ``within``, ``""`` unbound.
        self.tenant = self.within.canonical if self.within is not None else ""

    # -- lifecycle, as ADK's database store ------------------------------------------------------

    async def close(self) -> None:
        """Nothing to release: the service holds no engine or connection of its own (Django owns
        the connections). ADK's ``DatabaseSessionService.close()`` disposes its engine."""

    async def __aenter__(self) -> CortexSessionService:
        """``async with CortexSessionService() as service:``, as with ADK's database store."""
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        """Leave the ``async with`` block (:meth:`close`)."""
        await self.close()

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
