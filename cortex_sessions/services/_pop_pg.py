"""``pop_message`` on PostgreSQL in one statement (docs/design.md §11.4, §14).

The ORM path of :func:`~cortex_sessions.services.pop_message` is five statements in a
transaction: lock the session, read its newest message, delete it, read the newest conversation
text left, update the counters. Here one statement does all of it — the session row is locked,
the newest message deleted and the counters (``message_count``, the usage totals and
``context_tokens``, docs/design.md §5, §16.1-§16.2) moved together — for the case it can do exactly:

- the session exists in scope, is live, not expired and not on legal hold (docs/design.md
  §18.1), and has a message that is no compaction summary and lies past the ``through_seq`` of
  the newest summary, if any (docs/design.md §16.3-§16.4: the context then shows it, so
  ``context_tokens`` loses exactly its ``token_count``; popping a summary changes which rows
  the context holds, and the ORM path recomputes it);
- no other writer committed to the session between the statement's snapshot and its lock
  (every write of a session's messages updates the session row, so its ``xmin`` tells);
- the new ``last_message`` (docs/design.md §5) is one SQL can write exactly as
  :func:`~cortex_sessions.content.preview` would: the newest conversation message's text when it
  has no more than ``LAST_MESSAGE_PREVIEW_CHARS`` characters, or its cut when the two characters
  around the cut are ones between which Unicode always has a grapheme boundary (ASCII printable,
  CJK ideographs).

Otherwise it writes nothing and returns ``None``, and the caller takes the ORM path, whose
transaction decides (and raises ``SessionNotFound``, ``SessionArchived``, ``MessageNotFound``).
"""

from __future__ import annotations

import uuid
from datetime import datetime
from functools import cache
from typing import Any

from django.db import connections
from django.db.models import Model

from ..conf import app_settings
from ..content import CONVERSATION_USER_SOURCES, ELLIPSIS
from ..models import Message, Session

__all__ = ["pop_newest"]

#: Python's ``str.isspace`` characters, as a PostgreSQL bracket expression: a text of only these
#: is blank (``text.strip() == ""``), as ``last_message_of`` decides.
_SPACE = (
    "\\t\\n\\u000b\\f\\r\\u001c-\\u001f \\u0085\\u00a0\\u1680\\u2000-\\u200a\\u2028\\u2029"
    "\\u202f\\u205f\\u3000"
)
#: Characters between any two of which UAX #29 always puts a grapheme boundary.
_SAFE = "\\u0020-\\u007e\\u4e00-\\u9fff"


def pop_newest(
    alias: str, *, canonical: str, session_id: uuid.UUID, now: datetime
) -> tuple[Session, Message] | None:
    """Remove the newest message of the session in one statement (see the module docs).

    Args:
        alias: the write database (PostgreSQL).
        canonical: the caller's scope, canonical; the session must lie at or beneath it.
        session_id: the session.
        now: the session's new ``updated_at``.

    Returns:
        ``(session, message)``: the session with its new counters and the removed message as
        it was stored; ``None`` when nothing was written (the ORM path decides).
    """
    connection = connections[alias]
    limit = app_settings.LAST_MESSAGE_PREVIEW_CHARS
    params: dict[str, Any] = {
        "pk": session_id,
        "scope": canonical,
        "scope_end": canonical + "0",
        "scope_below": canonical + "/",
        "sources": list(CONVERSATION_USER_SOURCES),
        "limit": limit,
        "ellipsis": ELLIPSIS,
        "now": now,
    }
    with connection.cursor() as cursor:
        cursor.execute(_statement(connection.ops.quote_name), params)
        row = cursor.fetchone()
    if row is None:
        return None
    # the row is the message's columns, then the session's, in field order (the statement's
    # ``d.*, u.*``): no ``cursor.description``, whose column objects cost more than the row
    split = len(Message._meta.concrete_fields)
    message = _instance(Message, alias, row[:split], connection)
    session = _instance(Session, alias, row[split:], connection)
    return session, message


def _instance(model: type[Model], alias: str, values: Any, connection: Any) -> Any:
    """A ``model`` instance from a row of its concrete fields' columns in field order, as the
    ORM would build it."""
    fields = model._meta.concrete_fields
    attnames, converted = [], []
    for field, value in zip(fields, values, strict=True):
        if value is not None and hasattr(field, "from_db_value"):
            value = field.from_db_value(value, None, connection)
        attnames.append(field.attname)
        converted.append(value)
    return model.from_db(alias, attnames, converted)


@cache
def _statement(quote_name: Any) -> str:
    """The statement of :func:`pop_newest`, built once."""
    sessions = quote_name(Session._meta.db_table)
    messages = quote_name(Message._meta.db_table)
    message_columns = ", ".join(quote_name(field.column) for field in Message._meta.concrete_fields)
    session_returning = ", ".join(
        quote_name(field.column) for field in Session._meta.concrete_fields
    )
    text = (
        "(SELECT string_agg(b.value ->> 'text', E'\\n' ORDER BY b.ordinality) "
        "FROM jsonb_array_elements(CASE WHEN jsonb_typeof(c.content) = 'array' "
        "THEN c.content ELSE '[]'::jsonb END) WITH ORDINALITY AS b "
        "WHERE b.value ->> 'type' = 'text' AND jsonb_typeof(b.value -> 'text') = 'string')"
    )

    def spent(key: str, kind: str) -> str:
        """What the removed message's ``usage`` says it spent of ``key`` (0 when it says nothing)."""
        return f"COALESCE((usage ->> '{key}')::{kind}, 0)"

    return f"""
WITH s AS (
    SELECT id, archived_at, legal_hold, expires_at, xmin::text AS version FROM {sessions}
    WHERE id = %(pk)s AND scope >= %(scope)s AND scope < %(scope_end)s
      AND (scope = %(scope)s OR scope >= %(scope_below)s)
    FOR UPDATE
), seen AS (
    SELECT xmin::text AS version FROM {sessions} WHERE id = %(pk)s
), m AS (
    SELECT id, seq, compacts_through_seq FROM {messages} WHERE session_id = %(pk)s
    ORDER BY seq DESC LIMIT 1
), cp AS (
    SELECT compacts_through_seq AS through FROM {messages} x WHERE x.session_id = %(pk)s
      AND x.role = 'user' AND x.source = 'checkpoint' AND x.compacts_through_seq IS NOT NULL
    ORDER BY x.seq DESC LIMIT 1
), t AS (
    SELECT {text} AS text FROM {messages} c, m
    WHERE c.session_id = %(pk)s AND c.seq < m.seq
      AND (c.role = 'assistant' OR (c.role = 'user' AND c.source = ANY(%(sources)s)))
    ORDER BY c.seq DESC
), last AS (
    SELECT text FROM t WHERE text !~ '^[{_SPACE}]*$' LIMIT 1
), chk AS (
    SELECT
        s.archived_at IS NULL AND s.version = seen.version AND m.id IS NOT NULL
        AND NOT s.legal_hold
        AND (s.expires_at IS NULL OR s.expires_at > statement_timestamp())
        AND m.compacts_through_seq IS NULL AND (cp.through IS NULL OR m.seq > cp.through)
        AND (last.text IS NULL OR char_length(last.text) <= %(limit)s
             OR substr(last.text, %(limit)s, 2) ~ '^[{_SAFE}]{{2}}$') AS ok,
        CASE WHEN last.text IS NULL THEN ''
             WHEN char_length(last.text) <= %(limit)s THEN last.text
             ELSE substr(last.text, 1, %(limit)s) || %(ellipsis)s END AS last_message
    FROM s CROSS JOIN seen LEFT JOIN m ON true LEFT JOIN cp ON true LEFT JOIN last ON true
), d AS (
    DELETE FROM {messages} WHERE id = (SELECT id FROM m) AND (SELECT ok FROM chk)
    RETURNING {message_columns}
), u AS (
    UPDATE {sessions} SET message_count = message_count - 1,
        last_message = (SELECT last_message FROM chk), updated_at = %(now)s,
        input_tokens = input_tokens - (SELECT {spent("input_tokens", "bigint")} FROM d),
        output_tokens = output_tokens - (SELECT {spent("output_tokens", "bigint")} FROM d),
        cost = cost - (SELECT {spent("cost", "numeric")} FROM d),
        context_tokens = context_tokens - (SELECT token_count FROM d)
    WHERE id = (SELECT session_id FROM d)
    RETURNING {session_returning}
)
SELECT d.*, u.* FROM d, u
"""
