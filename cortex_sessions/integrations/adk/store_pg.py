"""``CortexSessionService``'s reads on PostgreSQL, each in one statement (docs/design.md §13.3,
§14, §19.4): one user's sessions (``list_sessions``) and one session with its events
(``get_session``).

``list_sessions(app_name, user_id)`` through the ORM is two statements (the sessions with their
newest event's time, then the app's and the user's shared state), a model instance per row and
a queryset compiled per call. Here PostgreSQL returns all of it in one row: the app's and the
user's shared state, and the sessions as one JSON array (id, own state, ``last_seq``, and
``last_update_time`` in microseconds since the epoch), which the client decodes in one call.
``get_session`` through the ORM is three statements (the session row with its newest event's
time, its messages, the shared state); here one returns the row, the shared state and the page
of messages as one JSON array, PostgreSQL picking each message's ``adk_event`` block so the
client decodes only that. SQLite and MySQL/MariaDB keep the ORM path of :mod:`.store`; both
paths return equal sessions (``tests/runtimes/test_adk_parity.py``).
"""

from __future__ import annotations

import datetime as dt
import json
from functools import cache
from typing import TYPE_CHECKING, Any, NamedTuple

from django.db import connections
from google.adk.sessions.session import Session as AdkSessionModel

from cortex_sessions.models import Message
from cortex_sessions.models import Session as CortexSession
from cortex_sessions.scope import Scope

from .events import EVENT_BLOCK_TYPE, _event_from
from .models import AdkAppState, AdkSession, AdkUserState, session_key, user_state_key
from .state import _prefixed

if TYPE_CHECKING:
    from .service import CortexSessionService

__all__ = ["SessionRead", "serves", "session_with_events", "user_sessions"]


class SessionRead(NamedTuple):
    """What :func:`session_with_events` read: the session, its ``last_seq`` (the caller's
    stale-writer marker), and whether its events are complete (``False``: the newest page held
    messages that are no event, so fewer than the events asked for; read it through the ORM,
    which reads on)."""

    session: AdkSessionModel
    last_seq: int
    complete: bool


def serves(using: str) -> bool:
    """Whether :func:`user_sessions` serves reads on the database ``using``: it is
    PostgreSQL."""
    return bool(connections[using].vendor == "postgresql")


def user_sessions(
    service: CortexSessionService, app_name: str, user_id: str, scope: Scope, using: str
) -> list[tuple[AdkSessionModel, int]]:
    """The live sessions of ``app_name``'s ``user_id`` at exactly ``scope`` (the scope the two
    map to), without events, with merged state, in one statement on ``using``.

    Live as :func:`cortex_sessions.services.session_queryset` with ``exact=True`` keeps them:
    neither archived nor expired (docs/design.md §18.1).

    Args:
        service: the service (its ``tenant`` keys the ``app:`` state).
        app_name, user_id: ADK's names (already checked by ``service.scope_for``).
        scope: the scope they map to.
        using: the database alias; PostgreSQL (:func:`serves`).

    Returns:
        ``(session, last_seq)`` per ADK session, unordered: the session's ``state`` is the session's own state with the app's and the
        user's shared state merged in (prefixed); ``last_update_time`` the newest event's
        timestamp (its message's ``created_at``), or the session's creation time without one,
        in seconds since the epoch, to the microsecond as ``datetime.timestamp()`` gives it;
        ``last_seq`` the cortex session's (the caller's stale-writer marker).
    """
    canonical = scope.canonical
    connection = connections[using]
    params = [
        service.tenant,
        app_name,
        user_state_key(canonical, app_name, user_id),
        canonical,
        app_name,
        user_id,
        app_name,
        user_id,
        canonical,
    ]
    with connection.cursor() as cursor:
        cursor.execute(_user_sessions_sql(connection.ops.quote_name), params)
        app_text, user_text, rows_text = cursor.fetchone()
    shared = _prefixed(_object(app_text), _object(user_text))
    sessions = []
    for adk_id, state, last_seq, micros in json.loads(rows_text):
        # Every value comes from our own typed columns (or the caller's names, which the row
        # matched exactly): validating them again, as the constructor would, checks nothing.
        session = AdkSessionModel.model_construct(
            id=adk_id,
            app_name=app_name,
            user_id=user_id,
            state={**(state or {}), **shared},
            events=[],
            # int / int is correctly rounded, as ``datetime.timestamp()`` computes it.
            last_update_time=micros / 1_000_000,
        )
        sessions.append((session, last_seq))
    return sessions


def session_with_events(
    service: CortexSessionService,
    app_name: str,
    user_id: str,
    session_id: str,
    scope: Scope,
    using: str,
    *,
    after: dt.datetime | None,
    limit: int | None,
) -> SessionRead | None:
    """The session ``session_id`` of ``app_name``'s ``user_id`` at exactly ``scope``, with its
    events (oldest first) and merged state, in one statement on ``using``; ``None`` when there
    is none there (or it expired, docs/design.md §18.1).

    Args:
        service: the service (its ``tenant`` keys the ``app:`` state).
        app_name, user_id: ADK's names (already checked by ``service.scope_for``).
        session_id: ADK's id, stripped and nameable (``ids._nameable``).
        scope: the scope the names map to.
        using: the database alias; PostgreSQL (:func:`serves`).
        after: only messages created at or after it (``GetSessionConfig.after_timestamp``).
        limit: only the newest ``limit`` messages (``num_recent_events``; ``None``: all).

    Returns:
        A :class:`SessionRead`, or ``None``. ``last_update_time`` is as in
        :func:`user_sessions`; events read as :func:`.events.message_to_event` reads them.
    """
    canonical = scope.canonical
    connection = connections[using]
    params = [
        f'$[*] ? (@.type() == "object" && @.type == "{EVENT_BLOCK_TYPE}")',
        after,
        after,
        None if limit is None else max(limit, 0),
        service.tenant,
        app_name,
        user_state_key(canonical, app_name, user_id),
        canonical,
        app_name,
        user_id,
        session_key(canonical, app_name, user_id, session_id),
        canonical,
        app_name,
        user_id,
        session_id,
    ]
    with connection.cursor() as cursor:
        cursor.execute(_session_sql(connection.ops.quote_name), params)
        row = cursor.fetchone()
    if row is None:
        return None
    pk, state, last_seq, micros, page_text, app_text, user_text = row
    page = json.loads(page_text)
    events = [
        event
        for seq, role, block, content, at in page
        if (event := _event_from(role, block, content, seq, at / 1_000_000, pk, app_name))
        is not None
    ]
    complete = limit is None or len(page) < limit or len(events) >= limit
    events.reverse()  # the page is newest first
    # As in ``user_sessions``: every value comes from our own columns or the matched names.
    session = AdkSessionModel.model_construct(
        id=session_id,
        app_name=app_name,
        user_id=user_id,
        state={**(_object(state)), **_prefixed(_object(app_text), _object(user_text))},
        events=events,
        last_update_time=micros / 1_000_000,
    )
    return SessionRead(session, last_seq, complete)


def _object(text: str | None) -> dict[str, Any]:
    """A stored JSON object's text decoded; ``{}`` for no row (or a JSON ``null``)."""
    return (json.loads(text) if text is not None else None) or {}


@cache
def _user_sessions_sql(quote_name: Any) -> str:
    """The statement of :func:`user_sessions`, built once."""
    sessions = quote_name(AdkSession._meta.db_table)
    cortex = quote_name(CortexSession._meta.db_table)
    messages = quote_name(Message._meta.db_table)
    newest = (  # the newest event's time, as ``store._with_last_event``: the (session_id, seq) index
        f"(SELECT m.created_at FROM {messages} m WHERE m.session_id = a.session_id"
        " ORDER BY m.seq DESC LIMIT 1)"
    )
    return (
        f"SELECT (SELECT state::text FROM {quote_name(AdkAppState._meta.db_table)}"
        " WHERE tenant = %s AND app_name = %s), "
        f"(SELECT state::text FROM {quote_name(AdkUserState._meta.db_table)}"
        " WHERE key = %s AND scope = %s AND app_name = %s AND user_id = %s), "
        "(SELECT coalesce(json_agg(json_build_array(a.adk_id, a.state, s.last_seq, "
        f"(extract(epoch FROM coalesce({newest}, s.created_at)) * 1000000)::bigint))::text,"
        " '[]') "
        f"FROM {sessions} a JOIN {cortex} s ON s.id = a.session_id "
        "WHERE a.app_name = %s AND a.user_id = %s AND s.scope = %s AND s.archived_at IS NULL"
        # an expired session is hidden until the sweep deletes it (§18.1)
        " AND (s.expires_at IS NULL OR s.expires_at > statement_timestamp()))"
    )


@cache
def _session_sql(quote_name: Any) -> str:
    """The statement of :func:`session_with_events`, built once."""
    messages = quote_name(Message._meta.db_table)
    page = (
        "SELECT seq, role, content, created_at, jsonb_path_query_first(content, %s::jsonpath)"
        f" AS block FROM {messages} m WHERE m.session_id = a.session_id"
        " AND (%s::timestamptz IS NULL OR m.created_at >= %s)"
        " ORDER BY m.seq DESC LIMIT %s"
    )
    return (
        "SELECT a.session_id, a.state::text, s.last_seq, (extract(epoch FROM coalesce("
        f"(SELECT m.created_at FROM {messages} m WHERE m.session_id = a.session_id"
        " ORDER BY m.seq DESC LIMIT 1), s.created_at)) * 1000000)::bigint, "
        # the page, newest first; content only where the text fallback reads it
        "(SELECT coalesce(json_agg(json_build_array(p.seq, p.role, p.block, CASE WHEN p.block"
        " IS NULL AND p.role IN ('user', 'assistant') THEN p.content END,"
        " (extract(epoch FROM p.created_at) * 1000000)::bigint) ORDER BY p.seq DESC)::text,"
        f" '[]') FROM ({page}) p), "
        f"(SELECT state::text FROM {quote_name(AdkAppState._meta.db_table)}"
        " WHERE tenant = %s AND app_name = %s), "
        f"(SELECT state::text FROM {quote_name(AdkUserState._meta.db_table)}"
        " WHERE key = %s AND scope = %s AND app_name = %s AND user_id = %s) "
        f"FROM {quote_name(AdkSession._meta.db_table)} a"
        f" JOIN {quote_name(CortexSession._meta.db_table)} s ON s.id = a.session_id"
        " WHERE a.key = %s AND s.scope = %s AND a.app_name = %s AND a.user_id = %s"
        " AND a.adk_id = %s"
        # an expired session is hidden until the sweep deletes it (§18.1)
        " AND (s.expires_at IS NULL OR s.expires_at > statement_timestamp())"
    )
