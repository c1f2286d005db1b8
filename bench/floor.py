"""The floor: the best hand-written SQL for the work each service call does, sent directly with
psycopg (no ORM).

Each function does what the service call does for the same result, in as few statements as
raw SQL allows, hand-written and minimal (not a copy of the app's statements), so ``app /
floor`` is the price of the ORM and the service's Python work, not of work the floor skips:

- every read returns every column the API shows (a session's usage totals, ``context_tokens``,
  ``expires_at``, ``legal_hold``, fork columns; a message's ``usage``, ``token_count`` and
  ``compacts_through_seq``), and hides expired sessions (``expires_at`` past, docs/design.md
  §18.1) as well as foreign ones;
- an append computes the message's ``token_count`` in Python (the default counter's rule:
  UTF-8 bytes of the text / 4, rounded up, plus 4; §16.2), stores it with ``usage``, and moves
  ``message_count``, ``last_seq``, ``last_message``, ``updated_at``, the usage totals and
  ``context_tokens`` on the session in the same statement (§5, §16.1), refusing an archived
  or expired session;
- a keyed append (:func:`append_one_keyed`) fingerprints its input (SHA-256 of canonical JSON)
  and records the key row in the append's own statement (§12.1).

Connections use psycopg's defaults (server-side binding, statements auto-prepared after five
runs), which is what a hand-written data layer would get for free.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

import psycopg

__all__ = [
    "append_one",
    "append_one_keyed",
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
    "is_default, backfilled_by, created_at, updated_at, archived_at, forked_from, "
    "forked_at_seq, input_tokens, output_tokens, cost, context_tokens, expires_at, legal_hold"
)
SESSION_TABLE = "cortex_sessions_session"
MESSAGE_TABLE = "cortex_sessions_message"
KEY_TABLE = "cortex_sessions_idempotencykey"
PREVIEW_CHARS = 280
#: A live session has not expired (docs/design.md §18.1); ``{t}`` is the table's alias.
NOT_EXPIRED = "({t}expires_at IS NULL OR {t}expires_at > statement_timestamp())"


def _live(alias: str = "") -> str:
    return NOT_EXPIRED.format(t=f"{alias}." if alias else "")


def token_count(text: str) -> int:
    """The default counter's estimate of one text message (docs/design.md §16.2)."""
    return -(-len(text.encode("utf-8")) // 4) + 4


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
    # lists and counts hide expired (§18.1) and archived sessions (§11.2)
    where += f" AND {_live()} AND archived_at IS NULL"
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
        f"SELECT {SESSION_COLUMNS} FROM {SESSION_TABLE} WHERE id = %s AND {where} AND {_live()}",
        [session_id, *params],
    ).fetchone()


def resolve_existing(conn: psycopg.Connection, *, scope: str, agent_id: str) -> tuple | None:
    """The default session of ``agent_id`` at exactly ``scope`` (``services.resolve_session``)."""
    return conn.execute(
        f"SELECT {SESSION_COLUMNS} FROM {SESSION_TABLE} "
        f"WHERE agent_id = %s AND is_default AND scope = %s AND {_live()}",
        [agent_id, scope],
    ).fetchone()


MESSAGE_COLUMNS = (
    "id, session_id, agent_id, scope, seq, role, source, content, metadata, created_at, "
    "usage, token_count, compacts_through_seq"
)


def recent_messages(
    conn: psycopg.Connection, *, scope: str, session_id: Any, limit: int = 50
) -> list[tuple]:
    """The newest ``limit`` messages in ``seq`` order (as ``services.list_messages``): one
    statement joining the in-scope live session to its newest messages."""
    where, params = _scope_where(scope, False, "s.scope")
    columns = ", ".join(f"m.{name.strip()}" for name in MESSAGE_COLUMNS.split(","))
    rows = conn.execute(
        f"SELECT {columns} FROM {SESSION_TABLE} s JOIN {MESSAGE_TABLE} m "
        f"ON m.session_id = s.id WHERE s.id = %s AND {where} AND {_live('s')} "
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


def _append_sql(keyed: bool) -> str:
    """The one-statement append: ``s`` updates the in-scope live session row (taking its lock
    and the next ``seq``; archived and expired sessions take no messages, §11.2, §18.1) and
    moves every counter, ``m`` inserts the message; keyed, ``k`` records the key's row once
    the message is written."""
    key = (
        f", k AS (INSERT INTO {KEY_TABLE} (scope, endpoint, key, fingerprint, status_code, "
        "response, created_at) SELECT s.scope, %s, %s, %s, 0, json_build_array(m.id)::text, "
        "now() FROM s, m)"
        if keyed
        else ""
    )
    return (
        f"WITH s AS (UPDATE {SESSION_TABLE} SET last_seq = last_seq + 1, "
        "message_count = message_count + 1, updated_at = now(), last_message = %s, "
        "input_tokens = input_tokens + %s, output_tokens = output_tokens + %s, "
        "cost = cost + %s, context_tokens = context_tokens + %s "
        f"WHERE id = %s AND archived_at IS NULL AND {_live()} AND {{where}} "
        f"RETURNING {SESSION_COLUMNS}), "
        f"m AS (INSERT INTO {MESSAGE_TABLE} (session_id, agent_id, scope, seq, role, source, "
        "content, metadata, created_at, usage, token_count) SELECT s.id, s.agent_id, s.scope, "
        f"s.last_seq, %s, 'user', %s, '{{{{}}}}', now(), %s, %s FROM s RETURNING id){key} "
        "SELECT s.*, m.id FROM s, m"
    )


def _append_params(
    scope: str, session_id: Any, role: str, text: str, usage: dict[str, Any] | None
) -> tuple[str, list[Any]]:
    where, params = _scope_where(scope, False)
    content = json.dumps([{"type": "text", "text": text}])
    usage = usage or {}
    totals = [usage.get("input_tokens", 0), usage.get("output_tokens", 0), usage.get("cost", 0)]
    tokens = token_count(text)
    return where, [
        text[:PREVIEW_CHARS],
        *totals,
        tokens,
        session_id,
        *params,
        role,
        content,
        json.dumps(usage) if usage else None,
        tokens,
    ]


def append_one(
    conn: psycopg.Connection,
    *,
    scope: str,
    session_id: Any,
    role: str,
    text: str,
    usage: dict[str, Any] | None = None,
) -> tuple:
    """Append one text message in one statement (:func:`_append_sql`): its ``token_count``
    computed here, the session's counters, usage totals and ``context_tokens`` moved.

    Returns:
        The session's columns after the append, then the new message's id.

    Raises:
        LookupError: no live session ``session_id`` within ``scope`` (nothing written).
    """
    where, params = _append_params(scope, session_id, role, text, usage)
    row = conn.execute(_append_sql(False).format(where=where), params).fetchone()
    if row is None:
        raise LookupError(session_id)
    return row


def append_one_keyed(
    conn: psycopg.Connection,
    *,
    scope: str,
    session_id: Any,
    role: str,
    text: str,
    key: str,
    usage: dict[str, Any] | None = None,
) -> tuple:
    """:func:`append_one` with an idempotency key recorded in the same statement (the key's
    fingerprint: SHA-256 of the input as canonical JSON; docs/design.md §12.1).

    Raises:
        LookupError: no live session ``session_id`` within ``scope`` (nothing written).
        psycopg.errors.UniqueViolation: the key was recorded before (nothing written).
    """
    where, params = _append_params(scope, session_id, role, text, usage)
    body = {"role": role, "content": [{"type": "text", "text": text}], "usage": usage}
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    digest = hashlib.sha256(canonical.encode("utf-8")).hexdigest()
    endpoint = f"floor:append:{session_id}"
    row = conn.execute(
        _append_sql(True).format(where=where), [*params, endpoint, key, digest]
    ).fetchone()
    if row is None:
        raise LookupError(session_id)
    return row


def append_three_statements(
    conn: psycopg.Connection, *, scope: str, session_id: Any, role: str, text: str
) -> tuple:
    """Append one message as the ORM path does: lock the live session, insert the row with
    the next ``seq`` and its ``token_count``, move the counters; one transaction."""
    where, params = _scope_where(scope, False)
    content = json.dumps([{"type": "text", "text": text}])
    tokens = token_count(text)
    with conn.transaction():
        session = conn.execute(
            f"SELECT {SESSION_COLUMNS} FROM {SESSION_TABLE} WHERE id = %s AND {where} "
            f"AND archived_at IS NULL AND {_live()} FOR UPDATE",
            [session_id, *params],
        ).fetchone()
        if session is None:
            raise LookupError(session_id)
        sid, agent_id, session_scope, last_seq = session[0], session[1], session[2], session[8]
        conn.execute(
            f"INSERT INTO {MESSAGE_TABLE} (session_id, agent_id, scope, seq, role, source, "
            "content, metadata, created_at, token_count) "
            "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, now(), %s) RETURNING id",
            [sid, agent_id, session_scope, last_seq + 1, role, "user", content, "{}", tokens],
        ).fetchone()
        conn.execute(
            f"UPDATE {SESSION_TABLE} SET message_count = message_count + 1, last_seq = %s, "
            "updated_at = now(), last_message = %s, context_tokens = context_tokens + %s "
            "WHERE id = %s",
            [last_seq + 1, text[:PREVIEW_CHARS], tokens, sid],
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
s AS (SELECT id, last_seq FROM {SESSION_TABLE} WHERE id = %(id)s AND {{within}}
      AND (expires_at IS NULL OR expires_at > statement_timestamp())),
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
