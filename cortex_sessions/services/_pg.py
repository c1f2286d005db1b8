"""Hand-written SQL for the hot paths on PostgreSQL: one round trip per call (docs/design.md §14).

The three calls an agent runtime makes on every turn — append, read the newest messages, and
get/resolve the session — are each one statement here. Everything else (and every other
database) goes through the ORM. The service functions in ``messages.py`` and ``sessions.py``
validate their arguments exactly as before, then call :func:`enabled` and, on PostgreSQL, the
functions of this module instead of building querysets. The rules live in the service
functions; this module only sends SQL and turns rows into the same model instances the ORM
would have built (``Model.from_db`` with each field's ``from_db_value``).

Why hand-written SQL: on a sub-millisecond statement, Django's fixed cost (building and
compiling a queryset, client-side binding) is 2-3 times the database's own time, and the ORM
has no way to say "update this row and insert rows numbered from its new ``last_seq``" in one
statement; the ORM path needs three (lock, insert, update). See docs/performance.md.

Statements go through a Django cursor wrapper, so ``CaptureQueriesContext``,
``connection.execute_wrapper`` hooks, ``django.db.backends`` logging and Django's database
error classes behave as for any ORM query. With ``CORTEX_SESSIONS["PREPARED_STATEMENTS"]``
(default off) the statements are sent with server-side binding and prepared once per
connection (``prepare=True`` in psycopg 3); see :func:`_cursor` and docs/performance.md for the
PgBouncer caveat.

The scope predicate is the one :func:`cortex_sessions.scope.scope_q` builds: an index range on
the canonical string (the column has ``COLLATE "C"``) plus a filter that keeps exactly the
scope and what lies beneath it.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from datetime import datetime
from functools import cache
from typing import Any, cast

from django.db import connections
from django.db.models import Model

from ..conf import app_settings
from ..models import Message, Session

__all__ = [
    "append_rows",
    "enabled",
    "get_session",
    "newest_messages",
    "resolve_default",
]


def enabled(alias: str) -> bool:
    """Whether the hot-path SQL serves database ``alias`` (PostgreSQL only)."""
    return connections[alias].vendor == "postgresql"


# -- statements -----------------------------------------------------------------------------------


def _columns(model: type[Model], prefix: str = "") -> str:
    return ", ".join(f'{prefix}"{field.column}"' for field in model._meta.concrete_fields)


#: The canonical-string range of ``scope_q(scope)``: ``scope`` itself and every scope beneath
#: it. Parameters: (canonical, canonical + "0", canonical, canonical + "/"); see _scope_params.
_WITHIN = '(s."scope" >= %s AND s."scope" < %s AND (s."scope" = %s OR s."scope" >= %s))'


def _scope_params(canonical: str) -> list[str]:
    return [canonical, canonical + "0", canonical, canonical + "/"]


@cache
def _sql_get(with_agent: bool) -> str:
    """One session by id within a scope (and of one agent)."""
    agent = ' AND s."agent_id" = %s' if with_agent else ""
    return (
        f"SELECT {_columns(Session, 's.')} FROM {Session._meta.db_table} s "
        f'WHERE s."id" = %s AND {_WITHIN}{agent}'
    )


@cache
def _sql_resolve() -> str:
    """The default session of an agent at exactly a scope (served by the partial unique index
    ``cortex_session_one_default``)."""
    return (
        f"SELECT {_columns(Session, 's.')} FROM {Session._meta.db_table} s "
        'WHERE s."agent_id" = %s AND s."scope" = %s AND s."is_default"'
    )


@cache
def _sql_append() -> str:
    """Append messages to an in-scope session in one statement.

    - ``s`` updates the session row: it takes the row lock (a concurrent append waits, then
      re-checks the ``WHERE`` on the row it committed, as ``SELECT … FOR UPDATE`` would), moves
      ``last_seq`` and ``message_count`` by the number of messages, sets ``updated_at`` and,
      when the messages carry conversation text, ``last_message``; it returns the new row.
    - ``m`` inserts the messages, numbered ``last_seq - n + 1 … last_seq`` from the row ``s``
      returned, with the session's agent and scope; the inputs come as parallel arrays
      (``unnest … WITH ORDINALITY`` keeps their order), so one statement text serves any
      number of messages and prepares once.
    - The outer ``SELECT`` returns the session's columns once per message, with the message's
      id and seq. No row at all means no such live session within the scope (missing, foreign
      or archived, docs/design.md §11.2): nothing was written.

    Parameters: n, updated_at, last_message (NULL: keep), id, the four scope parameters,
    roles, sources, contents (JSON text), metadata (JSON text), created_at values.
    """
    table = Session._meta.db_table
    return (
        f"WITH s AS ("
        f' UPDATE {table} s SET "last_seq" = s."last_seq" + %s,'
        f' "message_count" = s."message_count" + %s,'
        f' "updated_at" = %s,'
        f' "last_message" = COALESCE(%s, s."last_message")'
        f' WHERE s."id" = %s AND s."archived_at" IS NULL AND {_WITHIN}'
        f" RETURNING {_columns(Session, 's.')}"
        f"), m AS ("
        f" INSERT INTO {Message._meta.db_table}"
        f' ("session_id", "agent_id", "scope", "seq", "role", "source", "content", "metadata",'
        f' "created_at")'
        f' SELECT s."id", s."agent_id", s."scope", s."last_seq" - %s + v.ord, v.role, v.source,'
        f" v.content::jsonb, v.metadata::jsonb, v.created_at"
        f" FROM s, unnest(%s::text[], %s::text[], %s::text[], %s::text[], %s::timestamptz[])"
        f" WITH ORDINALITY AS v(role, source, content, metadata, created_at, ord)"
        f' RETURNING "id", "seq"'
        f') SELECT {_columns(Session, "s.")}, m."id", m."seq" FROM s, m ORDER BY m."seq"'
    )


@cache
def _sql_messages(after: bool, before: bool, forward: bool) -> str:
    """A page of one in-scope session's messages, with the scope check, in one statement.

    The session is read first (``s``: at most one row, by primary key and scope) and the page
    is a lateral subquery on ``(session_id, seq)`` — the unique index
    ``cortex_message_session_seq``, walked in ``seq`` order and stopped at ``limit`` — so an
    empty session still returns one row (of NULLs) and a session out of scope returns none.
    The subquery names the session id as a parameter rather than ``s.id``, so the planner
    knows which session it reads (a session of 100,000 messages is planned as one).

    Parameters: id, [after_seq], [before_seq], limit, id, the four scope parameters.
    """
    bounds = ""
    if after:
        bounds += ' AND m."seq" > %s'
    if before:
        bounds += ' AND m."seq" < %s'
    order = "ASC" if forward else "DESC"
    return (
        f"SELECT {_columns(Message, 'p.')} FROM {Session._meta.db_table} s"
        f" LEFT JOIN LATERAL (SELECT {_columns(Message, 'm.')}"
        f' FROM {Message._meta.db_table} m WHERE m."session_id" = %s{bounds}'
        f' ORDER BY m."seq" {order} LIMIT %s) p ON TRUE'
        f' WHERE s."id" = %s AND {_WITHIN}'
    )


# -- execution ------------------------------------------------------------------------------------


def _execute(alias: str, sql: str, params: Sequence[Any]) -> list[tuple[Any, ...]]:
    """Run one statement on database ``alias`` and return all its rows.

    Django's own cursor is used (client-side binding, as for every ORM query) unless
    ``PREPARED_STATEMENTS`` is on; then see :func:`_prepared_cursor`.
    """
    connection = connections[alias]
    cursor = _prepared_cursor(connection) if app_settings.PREPARED_STATEMENTS else None
    with cursor or connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cast(list[tuple[Any, ...]], cursor.fetchall())


@cache
def _preparing_cursor_class() -> Any:
    """psycopg 3's server-binding cursor as Django configures it, sending every statement with
    ``prepare=True``."""
    from django.db.backends.postgresql.base import ServerBindingCursor

    class PreparingCursor(ServerBindingCursor):
        def execute(self, query: Any, params: Any = None, **kwargs: Any) -> Any:
            kwargs["prepare"] = True
            return super().execute(query, params, **kwargs)  # type: ignore[misc]  # untyped base

    return PreparingCursor


@cache
def _debug_wrapper_class() -> Any:
    """Django's ``CursorDebugWrapper`` logging the statement as written (``%s`` placeholders,
    parameters alongside): its usual text comes from the client-side cursor's last query,
    which a server-binding cursor running a prepared statement does not keep."""
    from django.db.backends.utils import CursorDebugWrapper, CursorWrapper

    class PreparedDebugWrapper(CursorDebugWrapper):
        def execute(self, sql: Any, params: Any = None) -> Any:
            with self.debug_sql(sql, params):
                return CursorWrapper.execute(self, sql, params)

    return PreparedDebugWrapper


def _prepared_cursor(connection: Any) -> Any:
    """A Django cursor wrapper (query logging, ``execute_wrapper`` hooks, Django's error
    classes) around a psycopg 3 cursor that binds parameters on the server and prepares each
    statement: the first call on a connection prepares it (a ``Parse`` in the same round
    trip) and later calls only bind and execute, skipping the planner. It mirrors what
    ``connection.cursor()`` does, with another cursor class.

    Prepared statements live in one server session, so they break under a pooler that hands a
    client's statements to several server sessions (PgBouncer in transaction or statement mode
    before 1.21, or with ``max_prepared_statements = 0``); hence the setting is off by default.
    On psycopg 2 (no server-side binding) Django's ordinary cursor is returned.
    """
    connection.ensure_connection()
    with connection.wrap_database_errors:
        raw = connection.connection
        if not hasattr(raw, "prepare_threshold"):  # psycopg 2
            return connection.cursor()
        if raw.prepare_threshold is None:
            # Django turns psycopg's preparing off (``prepare_threshold = None``) unless the
            # host's OPTIONS set it, and then psycopg ignores ``prepare=True`` too. A threshold
            # no query reaches turns it back on for explicit requests only: Django's own
            # cursors bind client-side and never prepare anything.
            raw.prepare_threshold = 2**31 - 1
        cursor = _preparing_cursor_class()(raw)
    connection.validate_thread_sharing()
    if connection.queries_logged:
        return _debug_wrapper_class()(cursor, connection)
    return connection.make_cursor(cursor)


# -- rows to instances ----------------------------------------------------------------------------


@cache
def _converters(model: type[Model]) -> tuple[tuple[int, Any], ...]:
    """``(column position, from_db_value)`` of each concrete field that has one (JSON text →
    Python for ``JSONField``); the other columns come from psycopg as the ORM gets them."""
    return tuple(
        (index, field.from_db_value)
        for index, field in enumerate(model._meta.concrete_fields)
        if hasattr(field, "from_db_value")
    )


def _instances(model: type[Model], alias: str, rows: Sequence[Sequence[Any]]) -> list[Any]:
    """Model instances of ``rows`` (all concrete columns, in field order), as the ORM builds
    them: each field's ``from_db_value``, then ``Model.from_db``."""
    connection = connections[alias]
    converters = _converters(model)
    from_db = model.from_db
    instances = []
    for values in rows:
        row = list(values)
        for index, convert in converters:
            if row[index] is not None:
                row[index] = convert(row[index], None, connection)
        instances.append(from_db(alias, None, row))  # type: ignore[arg-type]  # None: all fields
    return instances


def _instance(model: type[Model], alias: str, values: Sequence[Any]) -> Any:
    return _instances(model, alias, [values])[0]


# -- the hot paths --------------------------------------------------------------------------------


def get_session(
    alias: str, *, canonical: str, session_id: uuid.UUID, agent_id: str | None
) -> Session | None:
    """The session ``session_id`` within ``canonical`` (and of ``agent_id``), or ``None``."""
    params: list[Any] = [session_id, *_scope_params(canonical)]
    if agent_id is not None:
        params.append(agent_id)
    rows = _execute(alias, _sql_get(agent_id is not None), params)
    return _instance(Session, alias, rows[0]) if rows else None


def resolve_default(alias: str, *, canonical: str, agent_id: str) -> Session | None:
    """The default session of ``agent_id`` at exactly ``canonical``, or ``None``."""
    rows = _execute(alias, _sql_resolve(), [agent_id, canonical])
    return _instance(Session, alias, rows[0]) if rows else None


def append_rows(
    alias: str,
    *,
    canonical: str,
    session_id: uuid.UUID,
    rows: Sequence[dict[str, Any]],
    last_message: str | None,
    updated_at: datetime,
) -> tuple[Session, list[Message]] | None:
    """Append validated message ``rows`` (column values as ``messages._build_message`` makes
    them) to the session, in one statement (see :func:`_sql_append`).

    Returns:
        ``(session as updated, the new messages in seq order)``, or ``None`` when the session
        does not exist within ``canonical`` (nothing was written).
    """
    content = Message._meta.get_field("content")
    metadata = Message._meta.get_field("metadata")
    count = len(rows)
    params = [
        count,
        count,
        updated_at,
        last_message,
        session_id,
        *_scope_params(canonical),
        count,
        [row["role"] for row in rows],
        [row["source"] for row in rows],
        [_json_text(content, row["content"]) for row in rows],
        [_json_text(metadata, row["metadata"]) for row in rows],
        [row["created_at"] for row in rows],
    ]
    result = _execute(alias, _sql_append(), params)
    if not result:
        return None
    width = len(Session._meta.concrete_fields)
    session = _instance(Session, alias, result[0][:width])
    messages = []
    for row, values in zip(rows, result, strict=True):
        message = Message(
            id=values[width],
            session=session,
            agent_id=session.agent_id,
            scope=session.scope,
            seq=values[width + 1],
            **row,
        )
        message._state.adding = False
        message._state.db = alias
        messages.append(message)
    return session, messages


def _json_text(field: Any, value: Any) -> str:
    """``value`` as the JSON text the ORM would store for ``field`` (its encoder applies)."""
    return json.dumps(value, cls=field.encoder)


def newest_messages(
    alias: str,
    *,
    canonical: str,
    session_id: uuid.UUID,
    limit: int,
    after_seq: int | None,
    before_seq: int | None,
) -> list[Message] | None:
    """A page of the session's messages in ``seq`` order, with the scope check, in one
    statement; the bounds mean what ``services.list_messages`` says.

    Returns:
        The messages (oldest first), or ``None`` when the session does not exist within
        ``canonical``.
    """
    forward = after_seq is not None and before_seq is None
    params: list[Any] = [session_id]
    if after_seq is not None:
        params.append(after_seq)
    if before_seq is not None:
        params.append(before_seq)
    params += [limit, session_id, *_scope_params(canonical)]
    sql = _sql_messages(after_seq is not None, before_seq is not None, forward)
    result = _execute(alias, sql, params)
    if not result:
        return None
    messages = _instances(Message, alias, [row for row in result if row[0] is not None])
    if not forward:
        messages.reverse()
    return messages
