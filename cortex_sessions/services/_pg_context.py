"""The context read on PostgreSQL in one hand-written statement (docs/design.md §16.4, §14).

:func:`context_sql` finds the session's live compaction summary and walks its tail newest first,
one ``(session, seq)`` index probe per message, stopping one message past the budget: it reads
the rows it returns plus one, however long the thread. :func:`walk` runs it and builds the
messages. Under psycopg 3 with the server session as Django sets it up (:func:`._pg.serves`) the
rows are fetched at once on a Django cursor with psycopg's own ``timestamptz`` loader
(:func:`._pg_run.execute` with ``c_times``) and become instances as the ORM builds them (each
field's ``from_db_value``, then ``Model.from_db``: :func:`._pg_run.instances`); that is what
``Manager.raw`` did here before, with about 40% less Python CPU a call (docs/performance.md).
Elsewhere (psycopg 2, or a session whose ``DateStyle`` or encoding a host changed)
``Manager.raw`` runs the same statement. Both give the ORM's values
(``tests/test_context_pg_rows.py`` compares them).

Public APIs only (``tests/test_pg_public.py`` checks).
"""

from __future__ import annotations

import uuid
from functools import cache
from typing import Any

from django.db import connections

from ..models import Message, Session
from ._pg import serves
from ._pg_run import execute, instances

__all__ = ["context_params", "context_sql", "walk"]


@cache
def context_sql() -> str:
    """The context read in one statement (docs/design.md §16.4).

    ``s``: the session, by primary key and scope (none when it is missing or foreign). ``c``:
    its newest compaction summary, from the checkpoint partial index newest first. ``w``: a
    recursive walk of the tail newest first from a seed row past ``last_seq``, one backward
    probe of the unique ``(session, seq)`` index per message, carrying the running token sum;
    it goes on only while the sum (with the summary's tokens) fits the budget, so it stops one
    message past it. The walk is written so that no plan can read the session's other rows:
    each step is a ``LIMIT 1`` below the previous ``seq``, and the rows are then fetched by
    ``(session, seq)`` in a lateral join (its ``LIMIT 1`` keeps the planner from turning the
    probes into a hash join over the whole session). The result is every message column, in
    ``Message._meta.concrete_fields`` order, then ``context_part``: 0 for the summary, 1 for
    the walked messages (in no particular order); or one row of ``NULL`` columns when the
    session exists but both are empty, so an empty session is told from a foreign one (no row).

    Parameters (named, :func:`context_params`): ``id``, ``lo``, ``hi``, ``exact``, ``below``
    (the scope range of :func:`cortex_sessions.scope.scope_q`), ``budget`` (``NULL``: none).
    """
    message = Message._meta.db_table
    session = Session._meta.db_table
    columns = ", ".join(f'm."{f.column}"' for f in Message._meta.concrete_fields)
    return (
        "WITH RECURSIVE"
        f' s AS (SELECT s."id", s."last_seq" FROM {session} s WHERE s."id" = %(id)s'
        ' AND s."scope" >= %(lo)s AND s."scope" < %(hi)s'
        ' AND (s."scope" = %(exact)s OR s."scope" >= %(below)s)'
        # an expired session is hidden until the sweep deletes it (docs/design.md §18.1)
        ' AND (s."expires_at" IS NULL OR s."expires_at" > statement_timestamp())),'
        f' c AS (SELECT m."seq", m."compacts_through_seq", m."token_count" FROM {message} m'
        ' WHERE m."session_id" = %(id)s AND EXISTS (SELECT 1 FROM s)'
        " AND m.\"role\" = 'user' AND m.\"source\" = 'checkpoint'"
        ' AND m."compacts_through_seq" IS NOT NULL ORDER BY m."seq" DESC LIMIT 1),'
        ' k AS (SELECT COALESCE((SELECT "compacts_through_seq" FROM c), 0) AS floor_seq,'
        ' COALESCE((SELECT "token_count" FROM c), 0)::bigint AS base),'
        ' w AS (SELECT s."last_seq" + 1 AS seq, 0::bigint AS tokens, TRUE AS seed FROM s'
        ' UNION ALL SELECT n."seq", w.tokens + n.tokens, FALSE FROM w CROSS JOIN LATERAL'
        f' (SELECT m."seq", m."token_count"::bigint AS tokens FROM {message} m'
        ' WHERE m."session_id" = %(id)s AND m."seq" < w."seq"'
        ' AND m."seq" > (SELECT floor_seq FROM k) AND m."compacts_through_seq" IS NULL'
        ' ORDER BY m."seq" DESC LIMIT 1) n'
        " WHERE %(budget)s::bigint IS NULL OR w.seed"
        " OR w.tokens + (SELECT base FROM k) <= %(budget)s),"
        ' r AS (SELECT c."seq", 0 AS part FROM c'
        ' UNION ALL SELECT w."seq", 1 FROM w WHERE NOT w.seed)'
        f" SELECT x.* FROM s LEFT JOIN LATERAL (SELECT {columns}, r.part AS context_part"
        f" FROM r CROSS JOIN LATERAL (SELECT * FROM {message} m"
        ' WHERE m."session_id" = %(id)s AND m."seq" = r."seq" LIMIT 1) m) x ON TRUE'
    )


def context_params(canonical: str, session_id: uuid.UUID, budget: int | None) -> dict[str, Any]:
    """The parameters of :func:`context_sql`: the session's id, the scope range of the
    canonical scope ``canonical`` and the budget in tokens (``None``: none)."""
    return {
        "id": session_id,
        "lo": canonical,
        "hi": canonical + "0",
        "exact": canonical,
        "below": canonical + "/",
        "budget": budget,
    }


def walk(
    alias: str, canonical: str, session_id: uuid.UUID, budget: int | None
) -> tuple[Message | None, list[Message]] | None:
    """Run :func:`context_sql` on PostgreSQL database ``alias``.

    Args:
        alias: a PostgreSQL database alias.
        canonical: the caller's scope, canonical (``scope.canonical_of``).
        session_id: the session.
        budget: the budget in tokens, or ``None``.

    Returns:
        ``None`` when the session does not exist within ``canonical``; else ``(the live
        summary or None, the walked messages newest first)``, built as the ORM builds rows read
        from ``alias`` (``Model.from_db``).

    Raises:
        django.db.Error: as the ORM would.
    """
    params = context_params(canonical, session_id, budget)
    if serves(alias):
        connection = connections[alias]
        result, _ = execute(connection, context_sql(), params, c_times=True)
        if not result:
            return None
        parts = [row[-1] for row in result if row[-1] is not None]
        messages = instances(
            connection, alias, Message, [row[:-1] for row in result if row[-1] is not None]
        )
    else:
        raw: list[Any] = list(Message.objects.using(alias).raw(context_sql(), params))
        if not raw:
            return None
        parts = [message.context_part for message in raw if message.context_part is not None]
        messages = [message for message in raw if message.context_part is not None]
    summary = next((m for m, part in zip(messages, parts, strict=True) if part == 0), None)
    walked = [m for m, part in zip(messages, parts, strict=True) if part == 1]
    walked.sort(key=lambda message: -message.seq)
    return summary, walked
