"""The saver's writes on PostgreSQL: one statement each (docs/design.md §14, §19.1).

``put`` of a checkpoint to an existing thread and ``put_writes`` are the calls a graph makes at
every step. Through the ORM they took a transaction of up to nine statements (``BEGIN``, the
session locked and checked, the blobs, the checkpoint, the parent checkpoint and its
``messages`` blob read back, the mirrored append, ``COMMIT``); here each is one statement,
which commits itself (or joins the caller's transaction):

- :func:`put_checkpoint`: the session row checked (scope, agent, not expired) and locked, the
  blobs inserted (kept when present), the checkpoint upserted, and — only when the checkpoint
  row is new — the mirrored messages appended with the session's counters moved, as
  ``services.append_messages`` moves them (§5). The messages to mirror are worked out before
  the statement (:mod:`.mirror`), so the parent's blob is not read inside it.
- :func:`put_writes`: the scope check and the ``INSERT … ON CONFLICT`` in one statement.

Each returns ``None`` when the statement found no such live session within the scope (then it
wrote nothing): the caller goes the ORM way, which creates a new thread's session or raises the
error that fits. Other databases always go the ORM way. Hand-written SQL on public Django and
psycopg APIs only, as ``services/_pg.py``.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from datetime import datetime
from functools import cache
from typing import Any, cast

from django.db import connections

from ...conf import app_settings
from ...counters import last_message_of
from ...exceptions import SessionArchived
from ...models import Message, Session
from ...services import _pg
from ...services._common import _autocommit_write, _send_on_commit
from ...services._pg_run import _debug_wrapper, _preparing_cursor, built, instances
from ...signals import messages_appended
from ...usage import Totals, totals_of
from .mirror import MirroredRow
from .models import Checkpoint, CheckpointBlob, CheckpointWrite

__all__ = ["put_checkpoint", "put_writes", "serves"]

serves = _pg.serves


def _execute(connection: Any, sql: str, params: Sequence[Any]) -> list[tuple[Any, ...]]:
    """Run one statement on Django ``connection`` and return its rows, on a ``psycopg.Cursor``
    (server-side binding: the checkpoint's and the channels' bytes go as binary parameters,
    not as escaped text inside the statement; prepared with ``PREPARED_STATEMENTS``, §14.2)
    wrapped as ``connection.cursor()`` wraps its own, so ``execute_wrapper`` hooks,
    ``CaptureQueriesContext`` and query logging see it.

    Raises:
        django.db.Error: as any ORM query raises it.
    """
    import psycopg
    from django.db.backends.postgresql.psycopg_any import register_tzloader

    connection.close_if_health_check_failed()
    connection.ensure_connection()
    connection.validate_thread_sharing()
    with connection.wrap_database_errors:
        if app_settings.PREPARED_STATEMENTS:  # as the core's hot paths (§14.2)
            if connection.connection.prepare_threshold is None:
                connection.connection.prepare_threshold = 2**31 - 1
            raw = _preparing_cursor()(connection.connection)
        else:
            raw = psycopg.Cursor(connection.connection)
        register_tzloader(connection.timezone, raw)
    if connection.queries_logged:
        cursor = _debug_wrapper()(raw, connection)
    else:
        cursor = connection.make_cursor(raw)
    with cursor:
        cursor.execute(sql, params)
        return cast(list[tuple[Any, ...]], cursor.fetchall())


def _columns(rows: Sequence[Sequence[Any]], width: int) -> list[list[Any]]:
    """``rows`` (each ``width`` values) as ``width`` parallel lists, for ``unnest``."""
    return [[row[i] for row in rows] for i in range(width)]


def _session_check(lock: bool) -> str:
    """``v``: the session by id, within a scope (the four parameters of ``_pg``), not expired,
    of an agent (``NULL``: any), with its ``archived_at``; locked with ``lock``."""
    table = Session._meta.db_table
    suffix = " FOR NO KEY UPDATE" if lock else ""
    return (
        f'v AS (SELECT s."id", s."archived_at" FROM {table} s WHERE s."id" = %s'
        f' AND {_pg._WITHIN_FILTER} AND s."agent_id" = COALESCE(%s, s."agent_id"){suffix})'
    )


@cache
def _sql_put(blobs: int) -> str:
    """The statement of :func:`put_checkpoint`.

    - ``v`` reads and locks the session row (a concurrent put or append of the thread waits);
    - ``c`` upserts the checkpoint when the session is not archived, returning whether the row
      is new (``xmax = 0``);
    - ``b`` inserts the ``blobs`` blobs (none: no ``b``), keeping a channel version already
      stored (each its own parameters: bytes go as binary parameters, which an array would
      send as escaped text);
    - ``s`` moves the session's counters by the mirrored messages, only when ``c`` inserted;
    - ``m`` inserts those messages numbered from the ``last_seq`` ``s`` returned.

    Returns one row — whether the session is live (not archived), whether the checkpoint is
    new, the session's columns after the update (``NULL`` when ``s`` did not run), the new
    messages' ids and seqs — or none when there is no such session.

    Parameters: session id, the four scope parameters, agent id or ``NULL``; namespace,
    checkpoint id, parent id, type, checkpoint bytes, metadata (JSON text), created_at;
    with blobs the namespace, then channel, version, type and bytes of each; n, n, the four totals, updated_at,
    last_message (NULL: keep), session id, n; n, then :func:`_arrays`' seven arrays.
    """
    checkpoint, blob = Checkpoint._meta.db_table, CheckpointBlob._meta.db_table
    session, message = Session._meta.db_table, Message._meta.db_table
    columns = ", ".join(f's."{f.column}"' for f in Session._meta.concrete_fields)
    blobs_cte = ""
    if blobs:
        values = ", ".join(["(%s::text, %s::text, %s::text, %s::bytea)"] * blobs)
        blobs_cte = (
            f', b AS (INSERT INTO {blob} ("session_id", "checkpoint_ns", "channel", "version",'
            ' "type", "blob") SELECT v."id", %s, x.channel, x.version, x.type, x.blob FROM v,'
            f' (VALUES {values}) AS x(channel, version, type, blob) WHERE v."archived_at" IS NULL'
            ' ON CONFLICT ("session_id", "checkpoint_ns", "channel", "version") DO NOTHING)'
        )
    return (
        f"WITH {_session_check(lock=True)}, c AS ("
        f' INSERT INTO {checkpoint} ("session_id", "checkpoint_ns", "checkpoint_id",'
        ' "parent_checkpoint_id", "type", "checkpoint", "metadata", "created_at")'
        ' SELECT v."id", %s, %s, %s, %s, %s, %s::jsonb, %s FROM v WHERE v."archived_at" IS NULL'
        ' ON CONFLICT ("session_id", "checkpoint_ns", "checkpoint_id") DO UPDATE SET'
        ' "parent_checkpoint_id" = EXCLUDED."parent_checkpoint_id", "type" = EXCLUDED."type",'
        ' "checkpoint" = EXCLUDED."checkpoint", "metadata" = EXCLUDED."metadata"'
        f" RETURNING (xmax = 0) AS inserted"
        f"){blobs_cte}, s AS ("
        f' UPDATE {session} s SET "last_seq" = s."last_seq" + %s,'
        ' "message_count" = s."message_count" + %s,'
        ' "input_tokens" = s."input_tokens" + %s, "output_tokens" = s."output_tokens" + %s,'
        ' "cost" = s."cost" + %s, "context_tokens" = s."context_tokens" + %s,'
        ' "updated_at" = GREATEST(s."updated_at", %s),'
        ' "last_message" = COALESCE(%s, s."last_message")'
        ' WHERE s."id" = %s AND %s > 0 AND EXISTS (SELECT 1 FROM c WHERE c.inserted)'
        f" RETURNING {columns}"
        f"), m AS ("
        f" INSERT INTO {message}"
        ' ("session_id", "agent_id", "scope", "seq", "role", "source", "content", "metadata",'
        ' "created_at", "usage", "token_count")'
        ' SELECT s."id", s."agent_id", s."scope", s."last_seq" - %s + v.ord, v.role, v.source,'
        " v.content::jsonb, v.metadata::jsonb, v.created_at, v.usage::jsonb, v.token_count"
        " FROM s, unnest(%s::text[], %s::text[], %s::text[], %s::text[], %s::timestamptz[],"
        " %s::text[], %s::integer[]) WITH ORDINALITY AS v(role, source, content, metadata,"
        ' created_at, usage, token_count, ord) RETURNING "id", "seq"'
        f') SELECT v."archived_at" IS NULL, (SELECT c.inserted FROM c),'
        ' (SELECT array_agg(m."id" ORDER BY m."seq") FROM m),'
        ' (SELECT array_agg(m."seq" ORDER BY m."seq") FROM m),'
        f" {columns} FROM v LEFT JOIN s ON TRUE"
    )


def put_checkpoint(
    alias: str,
    *,
    canonical: str,
    agent_id: str | None,
    session_id: uuid.UUID,
    checkpoint: tuple[str, str, str, str, bytes],
    metadata: dict[str, Any],
    blobs: Sequence[tuple[str, str, str, bytes | None]],
    mirrored: Sequence[MirroredRow],
    now: datetime,
) -> bool | None:
    """Store a checkpoint of an existing thread and mirror its new messages, in one statement
    (:func:`_sql_put`); ``messages_appended`` is sent on commit when messages were appended.

    Args:
        alias: the write database (PostgreSQL, :func:`serves`).
        canonical, agent_id: the scope the session must lie at or beneath, and its agent
            (``None``: any).
        checkpoint: ``(namespace, checkpoint id, parent id, type, bytes)``, checked.
        metadata: the checkpoint's metadata, storable JSON.
        blobs: ``(channel, version, type, bytes or None)`` of the updated channels.
        mirrored: the messages to append when the checkpoint row is new (at most
            ``MAX_MESSAGES_PER_APPEND``).
        now: the messages' default ``created_at`` and the session's new ``updated_at``.

    Returns:
        Whether the checkpoint row is new; ``None`` when no live session ``session_id`` lies
        within ``canonical`` (of ``agent_id``): nothing was written.

    Raises:
        SessionArchived: the session is archived; nothing was written.
        WriteOutcomeUnknown: the connection failed without the server's answer (§12.3).
        django.db.Error: as the ORM would.
    """
    ns, checkpoint_id, parent_id, kind, data = checkpoint
    rows = [row.columns for row in mirrored]
    count = len(rows)
    totals: Totals = totals_of((row["usage"], row["token_count"]) for row in rows)
    last = None
    for row in reversed(rows):
        if text := last_message_of(row["role"], row["source"], row["content"]):
            last = text
            break
    params: list[Any] = [session_id, *_pg._scope_params(canonical), agent_id]
    params += [ns, checkpoint_id, parent_id, kind, data, json.dumps(metadata), now]
    if blobs:
        params += [ns, *(value for blob in blobs for value in blob)]
    params += [count, count, *totals, now, last, session_id, count, count]
    arrays = _arrays(rows, [(r.content_json, r.metadata_json, r.usage_json) for r in mirrored])
    params += _columns(arrays, 7)
    connection = connections[alias]
    with _autocommit_write(alias):
        result = _execute(connection, _sql_put(len(blobs)), params)
    if not result:
        return None
    live, inserted, ids, seqs, *session_columns = result[0]
    if not live:
        raise SessionArchived()
    if ids:
        (session,) = instances(connection, alias, Session, [session_columns])
        messages = []
        for row, message_id, seq in zip(rows, ids, seqs, strict=True):
            common = {"id": message_id, "agent_id": session.agent_id, "scope": session.scope}
            message = built(Message, alias, {**row, **common, "seq": seq, "session_id": session_id})
            message.session = session
            messages.append(message)
        _send_on_commit(messages_appended, session=session, messages=messages)
    return bool(inserted)


def _arrays(
    rows: Sequence[dict[str, Any]], json_texts: Sequence[tuple[str, str, str | None]]
) -> list[tuple[Any, ...]]:
    """The parallel arrays of :func:`_sql_put`'s messages (role … token count), transposed."""
    return [
        (r["role"], r["source"], content, metadata, r["created_at"], usage, r["token_count"])
        for r, (content, metadata, usage) in zip(rows, json_texts, strict=True)
    ]


@cache
def _sql_writes(replace: bool) -> str:
    """The statement of :func:`put_writes`: the session checked (``v``, unlocked: the rows'
    foreign key holds it against a delete) and the writes inserted when it is not archived,
    keeping a task's write already stored under an index, or with ``replace`` overwriting it.
    One row (whether the session is live) or none (no such session).

    Parameters: session id, the four scope parameters, agent id or ``NULL``; namespace,
    checkpoint id, task id, task path, then the indexes, channels, types and blobs arrays."""
    table = CheckpointWrite._meta.db_table
    action = (
        'DO UPDATE SET "channel" = EXCLUDED."channel", "type" = EXCLUDED."type",'
        ' "blob" = EXCLUDED."blob", "task_path" = EXCLUDED."task_path"'
        if replace
        else "DO NOTHING"
    )
    return (
        f"WITH {_session_check(lock=False)}, w AS ("
        f' INSERT INTO {table} ("session_id", "checkpoint_ns", "checkpoint_id", "task_id",'
        ' "task_path", "idx", "channel", "type", "blob")'
        ' SELECT v."id", %s, %s, %s, %s, x.idx, x.channel, x.type, x.blob FROM v,'
        " unnest(%s::integer[], %s::text[], %s::text[], %s::bytea[]) AS x(idx, channel, type,"
        ' blob) WHERE v."archived_at" IS NULL'
        ' ON CONFLICT ("session_id", "checkpoint_ns", "checkpoint_id", "task_id", "idx")'
        f" {action}"
        ') SELECT v."archived_at" IS NULL FROM v'
    )


def put_writes(
    alias: str,
    *,
    canonical: str,
    agent_id: str | None,
    session_id: uuid.UUID,
    key: tuple[str, str, str, str],
    rows: Sequence[tuple[int, str, str, bytes]],
    replace: bool,
) -> bool:
    """Store a task's pending writes in one statement (:func:`_sql_writes`).

    Args:
        key: ``(namespace, checkpoint id, task id, task path)``, checked.
        rows: ``(idx, channel, type, bytes)``, one per index (the first of a repeated one).
        replace: overwrite a write stored under the same task and index (LangGraph's special
            channels) rather than keep it.

    Returns:
        ``False`` when no live session ``session_id`` lies within ``canonical`` (of
        ``agent_id``): nothing was written.

    Raises:
        SessionArchived: the session is archived; nothing was written.
        WriteOutcomeUnknown, django.db.Error: as :func:`put_checkpoint`.
    """
    params: list[Any] = [session_id, *_pg._scope_params(canonical), agent_id, *key]
    params += _columns(rows, 4)
    with _autocommit_write(alias):
        result = _execute(connections[alias], _sql_writes(replace), params)
    if not result:
        return False
    if not result[0][0]:
        raise SessionArchived()
    return True
