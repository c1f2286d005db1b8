"""A page of one session's messages on PostgreSQL, with the scope check, in one statement
(docs/design.md §7.1, §14): :func:`newest_messages`, which ``services.list_messages`` calls
for a page without ``q``.

The newest page (no bounds: what an agent runtime reads every turn) is a call of the PL/pgSQL
table function :data:`NEWEST` (``0023_newest_page_function``), whose statement the server plans
once per session and keeps (:func:`._pg._sql_call`): sent inline, the statement is planned on
every call, which took twice as long as running it (docs/performance.md). A page with
``after_seq`` or ``before_seq`` sends the statement inline (:func:`_sql_messages`). Public APIs
only, as :mod:`._pg` (``tests/test_pg_public.py`` checks).
"""

from __future__ import annotations

import uuid
from functools import cache
from typing import Any

from django.db import connections
from django.db.models import (
    BigIntegerField,
    BooleanField,
    CharField,
    DateTimeField,
    DecimalField,
    IntegerField,
    JSONField,
    Model,
    TextField,
    UUIDField,
)

from ..models import Message, Session
from ._pg import WITHIN_FILTER, _columns, _sql_call, scope_params
from ._pg_run import PlpgsqlFunction, execute, instances

__all__ = ["NEWEST", "newest_function", "newest_messages"]

#: The PL/pgSQL table function that returns the newest page of a session's messages within a
#: scope (``0023_newest_page_function``): the rows of :func:`_sql_messages` for a page without
#: bounds, newest first, each column cast to its type in the function's ``TABLE``. Versioned
#: as ``_pg.APPEND_ONE``: a change to the message's columns or to the statement comes with a
#: migration that adds the function under a new name.
NEWEST = "cortex_sessions_newest_v1"

#: A page of messages reads every column but ``session_id``, which is the id asked for (no
#: need to send it and parse it back 50 times).
_PAGE_OMITS = "session"

#: The PostgreSQL type of a column of :data:`NEWEST`'s ``TABLE``, by field class (in this
#: order: a ``BigAutoField`` is a ``BigIntegerField``, which is an ``IntegerField``).
_SQL_TYPES: tuple[tuple[Any, str], ...] = (
    (BigIntegerField, "bigint"),
    (IntegerField, "integer"),
    (DecimalField, "numeric"),
    (BooleanField, "boolean"),
    (UUIDField, "uuid"),
    (DateTimeField, "timestamptz"),
    (JSONField, "jsonb"),
    (CharField | TextField, "text"),
)


def _fields(model: type[Model], omit: str | None = None) -> tuple[Any, ...]:
    """``model``'s concrete fields in order, without the one named ``omit``."""
    return tuple(field for field in model._meta.concrete_fields if field.name != omit)


def _sql_type(field: Any) -> str:
    """The type :data:`NEWEST` returns ``field``'s column as.

    Raises:
        AssertionError: a field type this does not know (a model change must add it).
    """
    for types, name in _SQL_TYPES:
        if isinstance(field, types):
            return name
    raise AssertionError(f"no SQL type for {field!r}")  # pragma: no cover - a code change


@cache
def _page_omitted_at() -> int:
    """The position of the column a page of messages omits (:data:`_PAGE_OMITS`) in
    ``Message._meta.concrete_fields``, where :func:`newest_messages` puts it back."""
    return [field.name for field in Message._meta.concrete_fields].index(_PAGE_OMITS)


@cache
def _sql_messages(after: bool, before: bool, forward: bool, typed: bool = False) -> str:
    """A page of one in-scope session's messages, with the scope check, in one statement.

    The session is read first (``s``: at most one row, by primary key and scope) and the page
    is a lateral subquery on ``(session_id, seq)`` — the unique index
    ``cortex_message_session_seq``, walked in ``seq`` order and stopped at ``limit`` — so an
    empty session still returns one row (of NULLs) and a session out of scope returns none.
    The subquery names the session id as a parameter rather than ``s.id``, so the planner
    knows which session it reads (a session of 100,000 messages is planned as one). With
    ``typed``, each column is cast to its type in :data:`NEWEST`'s ``TABLE``
    (:func:`newest_function`; ``RETURN QUERY`` takes exactly those types).

    Parameters: id, [after_seq], [before_seq], limit, id, the four scope parameters.
    """
    bounds = ""
    if after:
        bounds += ' AND m."seq" > %s'
    if before:
        bounds += ' AND m."seq" < %s'
    order = "ASC" if forward else "DESC"
    page_columns = ", ".join(
        f'p."{field.column}"' + (f"::{_sql_type(field)}" if typed else "")
        for field in _fields(Message, _PAGE_OMITS)
    )
    return (
        f"SELECT {page_columns} FROM {Session._meta.db_table} s"
        f" LEFT JOIN LATERAL (SELECT {_columns(Message, 'm.')}"
        f' FROM {Message._meta.db_table} m WHERE m."session_id" = %s{bounds}'
        f' ORDER BY m."seq" {order} LIMIT %s) p ON TRUE'
        f' WHERE s."id" = %s AND {WITHIN_FILTER}'
    )


def newest_function() -> PlpgsqlFunction:
    """:data:`NEWEST` as ``_pg.function_sql`` creates it: a ``STABLE`` table function of the
    arguments id, limit, id, the four scope parameters (:func:`_sql_messages`' for a page
    without bounds), returning the page's columns (every message column but ``session_id``)."""
    columns = ", ".join(
        f'"{field.column}" {_sql_type(field)}' for field in _fields(Message, _PAGE_OMITS)
    )
    return PlpgsqlFunction(
        ("uuid", "bigint", "uuid", "text", "text", "text", "text"),
        lambda: _sql_messages(False, False, False, typed=True),
        f"TABLE ({columns})",
        volatility="STABLE",
    )


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
    statement (without bounds, a call of :data:`NEWEST`); the bounds mean what
    ``services.list_messages`` says.

    Returns:
        The messages (oldest first), or ``None`` when the session does not exist within
        ``canonical``.

    Raises:
        django.db.Error: as the ORM would.
    """
    forward = after_seq is not None and before_seq is None
    params: list[Any] = [session_id]
    if after_seq is not None:
        params.append(after_seq)
    if before_seq is not None:
        params.append(before_seq)
    params += [limit, session_id, *scope_params(canonical)]
    call = after_seq is None and before_seq is None
    if call:
        sql = _sql_call(NEWEST)
    else:
        sql = _sql_messages(after_seq is not None, before_seq is not None, forward)
    connection = connections[alias]
    result, _ = execute(connection, sql, params, c_times=True, server_binding=call)
    if not result:
        return None
    page = [row for row in result if row[0] is not None]  # none: the session's row of NULLs
    at = _page_omitted_at()
    messages: list[Message] = instances(connection, alias, Message, page, insert=(at, session_id))
    if not forward:
        messages.reverse()
    return messages
