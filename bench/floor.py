"""The floor: the statements the services issue, sent directly with psycopg (no ORM).

Each function mirrors one service call statement for statement (same predicates, same columns,
same transaction shape), so ``app / floor`` is the price of the ORM and the service's Python work.
Connections use psycopg's defaults (server-side binding, statements auto-prepared after five
runs), which is what a hand-written data layer would get for free.
"""

from __future__ import annotations

import json
from typing import Any

import psycopg

__all__ = [
    "append_one",
    "append_three_statements",
    "context_window",
    "count_sessions",
    "get_session",
    "list_sessions",
    "recent_messages",
    "recent_messages_two_statements",
    "resolve_existing",
    "usage_totals",
]

SESSION_COLUMNS = (
    "id, agent_id, scope, title, metadata, cwd, message_count, last_message, last_seq, "
    "is_default, backfilled_by, created_at, updated_at"
)
SESSION_TABLE = "cortex_sessions_session"
MESSAGE_TABLE = "cortex_sessions_message"
PREVIEW_CHARS = 280


def _scope_where(scope: str, exact: bool, column: str = "scope") -> tuple[str, list[Any]]:
    if exact:
        return f"{column} = %s", [scope]
    return (
        f"{column} >= %s AND {column} < %s AND ({column} = %s OR {column} >= %s)",
        [scope, scope + "0", scope, scope + "/"],
    )


def _filters(
    scope: str, *, exact: bool, default_only: bool, search: str | None
) -> tuple[str, list[Any]]:
    where, params = _scope_where(scope, exact)
    where += " AND archived_at IS NULL"  # lists and counts hide archived sessions (§11.2)
    if default_only:
        where += " AND is_default"
    if search:
        where += " AND UPPER(title::text) LIKE UPPER(%s)"
        params.append(f"%{search}%")
    return where, params


def list_sessions(
    conn: psycopg.Connection,
    *,
    scope: str,
    exact: bool = False,
    default_only: bool = False,
    search: str | None = None,
    limit: int = 50,
    offset: int = 0,
) -> list[tuple]:
    """A page of sessions, newest ``updated_at`` first (as ``services.list_sessions``)."""
    where, params = _filters(scope, exact=exact, default_only=default_only, search=search)
    return conn.execute(
        f"SELECT {SESSION_COLUMNS} FROM {SESSION_TABLE} WHERE {where} "
        "ORDER BY updated_at DESC, id DESC LIMIT %s OFFSET %s",
        [*params, limit, offset],
    ).fetchall()


def count_sessions(
    conn: psycopg.Connection,
    *,
    scope: str,
    exact: bool = False,
    default_only: bool = False,
    search: str | None = None,
) -> int:
    """``SELECT count(*)`` with the list's filters (as ``services.count_sessions``)."""
    where, params = _filters(scope, exact=exact, default_only=default_only, search=search)
    return conn.execute(f"SELECT count(*) FROM {SESSION_TABLE} WHERE {where}", params).fetchone()[0]


_USAGE_SUMS = (
    "count(*), COALESCE(sum(message_count), 0), COALESCE(sum(input_tokens), 0), "
    "COALESCE(sum(output_tokens), 0), COALESCE(sum(cost), 0), COALESCE(sum(context_tokens), 0)"
)


def usage_totals(
    conn: psycopg.Connection, *, scope: str, group_by: str | None = None
) -> list[tuple]:
    """The usage sums of the live sessions within ``scope`` (as ``services.usage_totals``):
    one row, or one per agent or per scope level beneath ``scope``."""
    where, params = _filters(scope, exact=False, default_only=False, search=None)
    if group_by is None:
        return conn.execute(
            f"SELECT {_USAGE_SUMS} FROM {SESSION_TABLE} WHERE {where}", params
        ).fetchall()
    if group_by == "agent_id":
        key: str = "agent_id"
    else:  # the level after "<scope>/", up to the next "/"
        key = f"NULLIF(split_part(substr(scope, {len(scope) + 2}), '/', 1), '')"
    return conn.execute(
        f"SELECT {key} AS k, {_USAGE_SUMS} FROM {SESSION_TABLE} WHERE {where} GROUP BY k "
        "ORDER BY k NULLS FIRST",
        params,
    ).fetchall()


def get_session(conn: psycopg.Connection, *, scope: str, session_id: Any) -> tuple | None:
    """One session by id within ``scope`` (as ``services.get_session``)."""
    where, params = _scope_where(scope, False)
    return conn.execute(
        f"SELECT {SESSION_COLUMNS} FROM {SESSION_TABLE} WHERE id = %s AND {where} LIMIT 21",
        [session_id, *params],
    ).fetchone()


def resolve_existing(conn: psycopg.Connection, *, scope: str, agent_id: str) -> tuple | None:
    """The default session of ``agent_id`` at exactly ``scope`` (``services.resolve_session``)."""
    return conn.execute(
        f"SELECT {SESSION_COLUMNS} FROM {SESSION_TABLE} "
        "WHERE agent_id = %s AND is_default AND scope = %s LIMIT 21",
        [agent_id, scope],
    ).fetchone()


MESSAGE_COLUMNS = (
    "id, session_id, agent_id, scope, seq, role, source, content, metadata, created_at"
)


def recent_messages(
    conn: psycopg.Connection, *, scope: str, session_id: Any, limit: int = 50
) -> list[tuple]:
    """The newest ``limit`` messages in ``seq`` order (as ``services.list_messages``): one
    statement joining the in-scope session to its newest messages."""
    where, params = _scope_where(scope, False, "s.scope")
    rows = conn.execute(
        f"SELECT m.id, m.session_id, m.agent_id, m.scope, m.seq, m.role, m.source, m.content, "
        f"m.metadata, m.created_at FROM {SESSION_TABLE} s JOIN {MESSAGE_TABLE} m "
        f"ON m.session_id = s.id WHERE s.id = %s AND {where} "
        "ORDER BY m.seq DESC LIMIT %s",
        [session_id, *params, limit],
    ).fetchall()
    if not rows:
        raise LookupError(session_id)
    rows.reverse()
    return rows


def recent_messages_two_statements(
    conn: psycopg.Connection, *, scope: str, session_id: Any, limit: int = 50
) -> list[tuple]:
    """The same page as the ORM path reads it: the in-scope check of the session, then the
    messages (two statements)."""
    session = get_session(conn, scope=scope, session_id=session_id)
    if session is None:
        raise LookupError(session_id)
    rows = conn.execute(
        f"SELECT {MESSAGE_COLUMNS} FROM {MESSAGE_TABLE} WHERE session_id = %s "
        "ORDER BY seq DESC LIMIT %s",
        [session[0], limit],
    ).fetchall()
    rows.reverse()
    return rows


def append_one(
    conn: psycopg.Connection, *, scope: str, session_id: Any, role: str, text: str
) -> tuple:
    """Append one message in one statement: update the in-scope live session row (taking its
    lock and the next ``seq``; an archived session takes no messages, §11.2), insert the
    message and move the counters (``services/_pg.py`` does the same for any number of
    messages)."""
    where, params = _scope_where(scope, False)
    content = json.dumps([{"type": "text", "text": text}])
    row = conn.execute(
        f"WITH s AS (UPDATE {SESSION_TABLE} SET last_seq = last_seq + 1, "
        "message_count = message_count + 1, updated_at = now(), last_message = %s "
        f"WHERE id = %s AND archived_at IS NULL AND {where} RETURNING {SESSION_COLUMNS}), "
        f"m AS (INSERT INTO {MESSAGE_TABLE} (session_id, agent_id, scope, seq, role, source, "
        "content, metadata, created_at) SELECT s.id, s.agent_id, s.scope, s.last_seq, %s, "
        "'user', %s, '{}', now() FROM s RETURNING id) SELECT s.*, m.id FROM s, m",
        [text[:PREVIEW_CHARS], session_id, *params, role, content],
    ).fetchone()
    if row is None:
        raise LookupError(session_id)
    return row


def append_three_statements(
    conn: psycopg.Connection, *, scope: str, session_id: Any, role: str, text: str
) -> tuple:
    """Append one message as the ORM path does: lock the session, insert the row with the
    next ``seq``, move the counters; one transaction."""
    where, params = _scope_where(scope, False)
    content = json.dumps([{"type": "text", "text": text}])
    with conn.transaction():
        session = conn.execute(
            f"SELECT {SESSION_COLUMNS} FROM {SESSION_TABLE} WHERE id = %s AND {where} "
            "AND archived_at IS NULL LIMIT 21 FOR UPDATE",
            [session_id, *params],
        ).fetchone()
        if session is None:
            raise LookupError(session_id)
        sid, agent_id, session_scope, last_seq = session[0], session[1], session[2], session[8]
        conn.execute(
            f"INSERT INTO {MESSAGE_TABLE} (session_id, agent_id, scope, seq, role, source, "
            "content, metadata, created_at) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, now()) "
            "RETURNING id",
            [sid, agent_id, session_scope, last_seq + 1, role, "user", content, "{}"],
        ).fetchone()
        conn.execute(
            f"UPDATE {SESSION_TABLE} SET message_count = message_count + 1, last_seq = %s, "
            "updated_at = now(), last_message = %s WHERE id = %s",
            [last_seq + 1, text[:PREVIEW_CHARS], sid],
        )
    return session


#: The context read (docs/design.md §16.4) as a hand-written data layer would send it: one
#: statement that finds the newest compaction summary, walks the tail newest first, one
#: ``(session, seq)`` index probe per message carrying only its ``seq`` and the running token
#: sum, stops one message past the budget, and then fetches the walked rows by ``(session,
#: seq)``. Carrying each message's whole row through the walk instead (a composite column in
#: the recursive CTE) was slower: the rows are copied at every step (docs/performance.md).
_CONTEXT_SQL = f"""
WITH RECURSIVE
s AS (SELECT id, last_seq FROM {SESSION_TABLE} WHERE id = %(id)s AND {{within}}),
c AS (SELECT m.seq, m.compacts_through_seq, m.token_count FROM {MESSAGE_TABLE} m
      WHERE m.session_id = %(id)s AND EXISTS (SELECT 1 FROM s) AND m.role = 'user'
      AND m.source = 'checkpoint' AND m.compacts_through_seq IS NOT NULL
      ORDER BY m.seq DESC LIMIT 1),
k AS (SELECT COALESCE((SELECT compacts_through_seq FROM c), 0) AS floor_seq,
             COALESCE((SELECT token_count FROM c), 0)::bigint AS base),
w AS (SELECT s.last_seq + 1 AS seq, 0::bigint AS tokens, TRUE AS seed FROM s
      UNION ALL
      SELECT n.seq, w.tokens + n.token_count, FALSE FROM w CROSS JOIN LATERAL
        (SELECT m.seq, m.token_count FROM {MESSAGE_TABLE} m
         WHERE m.session_id = %(id)s AND m.seq < w.seq AND m.seq > (SELECT floor_seq FROM k)
         AND m.compacts_through_seq IS NULL ORDER BY m.seq DESC LIMIT 1) n
      WHERE w.seed OR w.tokens + (SELECT base FROM k) <= %(budget)s),
r AS (SELECT c.seq, 0 AS part, c.token_count::bigint AS tokens FROM c
      UNION ALL SELECT w.seq, 1, w.tokens FROM w WHERE NOT w.seed)
SELECT r.part, r.tokens, m.* FROM r CROSS JOIN LATERAL
  (SELECT * FROM {MESSAGE_TABLE} m WHERE m.session_id = %(id)s AND m.seq = r.seq LIMIT 1) m
"""


def context_window(
    conn: psycopg.Connection, *, scope: str, session_id: Any, max_tokens: int
) -> list[tuple]:
    """The summary and the newest messages that fit ``max_tokens`` (as
    ``services.context_messages``), in one statement; the budget and the tool rule are applied
    to the returned rows in Python, as the service does."""
    where, params = _scope_where(scope, False)
    within = where.replace("%s", "%(p{})s")
    within = within.format(*range(within.count("{}")))
    named = {f"p{i}": value for i, value in enumerate(params)}
    sql = _CONTEXT_SQL.replace("{within}", within)
    rows = conn.execute(sql, {"id": session_id, "budget": max_tokens, **named}).fetchall()
    base = next((row[1] for row in rows if row[0] == 0), 0) or 0
    tail = [row for row in rows if row[0] == 1 and row[1] + base <= max_tokens]
    tail.reverse()
    return [row for row in rows if row[0] == 0] + tail
