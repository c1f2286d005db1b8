"""Session lists and counts on PostgreSQL in one hand-written statement (docs/design.md §7.2, §14).

``services.list_sessions``, ``count_sessions`` and ``list_sessions_page`` build a queryset, have
the ORM compile it and instantiate each row: for a page of 50 sessions that Python work took
2–3× what the statement itself takes (docs/performance.md). Here, on PostgreSQL (psycopg 3,
:func:`._pg.serves`) and for every filter but ``metadata`` and ``q`` (which keep the ORM path),
the same statement — the same predicates, in the same order, with the same parameters, the same
``ORDER BY`` and page bounds — is written once per *shape* (which filters are present, the
ordering, the keyset bound, whether there is a limit or an offset) and kept
(:func:`_list_sql`), and the rows become instances as the ORM builds them (``c_times`` and
:func:`._pg_run.instances`: each field's ``from_db_value``, then ``Model.from_db``). The
results are the ORM path's: the same sessions, in the same order, with the same values
(``tests/test_pg_lists.py`` compares the two on many filter combinations).

Public APIs only (``tests/test_pg_public.py`` checks): statements run on a Django cursor
(:func:`._pg_run.execute`), so ``CaptureQueriesContext``, ``execute_wrapper`` hooks, query logging
and Django's error classes see them as any ORM query; the title filter's pattern is escaped by
``connection.ops.prep_for_like_query``, as the ORM's ``icontains`` escapes it.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from functools import cache
from typing import Any, NamedTuple

from django.db import connections
from django.utils import timezone

from ..models import Session
from ._pg import serves
from ._pg_run import execute, instances
from .filters import SessionFilters

__all__ = ["KeysetBound", "count_sessions", "handles", "list_sessions"]


class KeysetBound(NamedTuple):
    """Where a keyset page starts (``services.keyset``): rows strictly after ``(key, pk)`` in
    the direction of ``op``.

    Attributes:
        op: ``"lt"`` (rows with a smaller sort key, or an equal key and a smaller id) or ``"gt"``.
        key: the sort key of the row the page follows (as ``keyset._decode`` returns it: an
            aware ``datetime``, ``int``, ``Decimal`` or ``str``).
        pk: the id of that row.
    """

    op: str
    key: Any
    pk: uuid.UUID


def handles(alias: str, filters: SessionFilters) -> bool:
    """Whether this module serves a list or count of ``filters`` on database ``alias``: the
    hot-path SQL serves it (:func:`._pg.serves`) and neither ``metadata`` nor ``q`` is set
    (those keep the ORM path, docs/design.md §11.3, §11.5).

    Raises:
        django.db.Error: the connection cannot be opened (:func:`._pg.serves`).
    """
    return filters.metadata is None and filters.q is None and serves(alias)


_TABLE = Session._meta.db_table
#: The column of each concrete field, by name (the orderings' sort keys among them).
_COLUMNS = {field.name: field.column for field in Session._meta.concrete_fields}
_OPERATORS = {"lt": "<", "gt": ">", "lte": "<=", "gte": ">="}


class _Shape(NamedTuple):
    """What a list statement's text depends on (its parameters aside)."""

    exact: bool
    agent: bool
    default_only: bool
    search: bool
    archived: bool | None
    ordering: str
    keyset: str | None
    reverse: bool
    limited: bool
    offset: bool


def _where(shape: _Shape) -> str:
    """The ``WHERE`` of ``shape``, predicate for predicate the ORM path's
    (``SessionQuerySet.within``, then ``services.sessions._filtered``). Parameters: the scope
    (one, or the four of ``scope_q``), the current time, then the agent id and the title
    pattern when present."""
    if shape.exact:
        parts = ['s."scope" = %s']
    else:
        parts = ['s."scope" >= %s AND s."scope" < %s AND (s."scope" = %s OR s."scope" >= %s)']
    parts.append('(s."expires_at" IS NULL OR s."expires_at" > %s)')
    if shape.agent:
        parts.append('s."agent_id" = %s')
    if shape.default_only:
        parts.append('s."is_default"')
    if shape.search:
        parts.append('UPPER(s."title"::text) LIKE UPPER(%s)')
    if shape.archived is not None:
        parts.append(f's."archived_at" IS {"NOT " if shape.archived else ""}NULL')
    return " AND ".join(parts)


@cache
def _count_sql(shape: _Shape) -> str:
    """``SELECT COUNT(*)`` of the rows of ``shape`` (parameters as :func:`_where`)."""
    return f'SELECT COUNT(*) FROM "{_TABLE}" s WHERE {_where(shape)}'


@cache
def _list_sql(shape: _Shape) -> str:
    """The list statement of ``shape``: every session column, :func:`_where`, then the keyset
    bound (``key <= k AND (key < k OR (key = k AND id < pk))`` for ``lt``, as
    ``keyset.paginate_keyset`` filters; parameters k, k, k, pk), ordered by the sort key and
    the id in the same direction (both flipped with ``reverse``), then ``LIMIT %s`` and
    ``OFFSET %s`` when the shape has them. A limited page past an offset selects the ids through
    the offset first and then the page's rows by id (the same rows in the same order, with the
    same parameters; docs/performance.md)."""
    columns = ", ".join(f's."{field.column}"' for field in Session._meta.concrete_fields)
    where = _where(shape)
    name = shape.ordering.lstrip("-")
    column = _COLUMNS[name]
    if shape.keyset is not None:
        op = _OPERATORS[shape.keyset]
        bound = _OPERATORS[shape.keyset + "e"]
        where += (
            f' AND s."{column}" {bound} %s AND (s."{column}" {op} %s'
            f' OR (s."{column}" = %s AND s."id" {op} %s))'
        )
    descending = shape.ordering.startswith("-") != shape.reverse
    direction = "DESC" if descending else "ASC"
    order = f' ORDER BY s."{column}" {direction}, s."id" {direction}'
    if shape.limited and shape.offset:
        # A page past an offset: the rows skipped are read only as far as the sort needs them
        # (sort key and id, an index-only scan where an index covers the filters), then the
        # page's rows are fetched by id; sorting every skipped row whole took 3x the time.
        outer = ", ".join(f'p."{field.column}"' for field in Session._meta.concrete_fields)
        return (
            f'SELECT {outer} FROM "{_TABLE}" p WHERE p."id" IN'
            f' (SELECT s."id" FROM "{_TABLE}" s WHERE {where}{order} LIMIT %s OFFSET %s)'
            f' ORDER BY p."{column}" {direction}, p."id" {direction}'
        )
    sql = f'SELECT {columns} FROM "{_TABLE}" s WHERE {where}{order}'
    if shape.limited:
        sql += " LIMIT %s"
    if shape.offset:
        sql += " OFFSET %s"
    return sql


def _params(connection: Any, canonical: str, filters: SessionFilters, now: datetime) -> list[Any]:
    """The parameters of :func:`_where` for ``filters``, in its order."""
    if filters.exact:
        params: list[Any] = [canonical, now]
    else:
        params = [canonical, canonical + "0", canonical, canonical + "/", now]
    if filters.agent_id is not None:
        params.append(filters.agent_id)
    if filters.search is not None:
        params.append(f"%{connection.ops.prep_for_like_query(filters.search)}%")
    return params


def _shape(filters: SessionFilters, **rest: Any) -> _Shape:
    return _Shape(
        exact=filters.exact,
        agent=filters.agent_id is not None,
        default_only=filters.default_only,
        search=filters.search is not None,
        archived=filters.archived,
        **rest,
    )


def list_sessions(
    alias: str,
    *,
    canonical: str,
    filters: SessionFilters,
    ordering: str,
    limit: int | None,
    offset: int = 0,
    after: KeysetBound | None = None,
    reverse: bool = False,
) -> list[Session]:
    """The sessions within ``canonical`` that ``filters`` keep, ordered by ``ordering`` and
    the id, in one statement on ``alias`` (:func:`handles` must be true).

    Args:
        alias: a database alias this module serves (:func:`handles`).
        canonical: the caller's scope, canonical (``scope.canonical_of``).
        filters: checked filters without ``metadata`` or ``q``.
        ordering: a checked ordering (``sessions.check_ordering``): one of
            ``ORDERING_FIELDS``, optionally ``-``-prefixed; the id breaks ties the same way.
        limit: most rows (``None``: all), an integer ``>= 1`` (the caller returns ``[]`` for 0
            without a query, as the ORM does).
        offset: rows skipped, ``>= 0``.
        after: only rows after this keyset position (:class:`KeysetBound`).
        reverse: read the list backwards (a keyset page before a cursor).

    Returns:
        The sessions as the ORM path builds them (``Model.from_db`` on ``alias``).

    Raises:
        django.db.Error: as the ORM would.
    """
    connection = connections[alias]
    shape = _shape(
        filters,
        ordering=ordering,
        keyset=None if after is None else after.op,
        reverse=reverse,
        limited=limit is not None,
        offset=offset > 0,
    )
    params = _params(connection, canonical, filters, timezone.now())
    if after is not None:
        params += [after.key, after.key, after.key, after.pk]
    if limit is not None:
        params.append(limit)
    if offset > 0:
        params.append(offset)
    rows, _ = execute(connection, _list_sql(shape), params, c_times=True)
    return instances(connection, alias, Session, rows)


def count_sessions(alias: str, *, canonical: str, filters: SessionFilters) -> int:
    """How many sessions :func:`list_sessions` would list with ``canonical`` and ``filters``,
    in one statement on ``alias`` (:func:`handles` must be true).

    Raises:
        django.db.Error: as the ORM would.
    """
    connection = connections[alias]
    shape = _shape(filters, ordering="", keyset=None, reverse=False, limited=False, offset=False)
    params = _params(connection, canonical, filters, timezone.now())
    rows, _ = execute(connection, _count_sql(shape), params)
    return int(rows[0][0])
