"""The saver's writes on PostgreSQL: one call of a PL/pgSQL function each (docs/design.md §14,
§19.1).

``put`` of a checkpoint to an existing thread and ``put_writes`` are the calls a graph makes at
every step. Through the ORM they took a transaction of up to nine statements (``BEGIN``, the
session locked and checked, the blobs, the checkpoint, the parent checkpoint and its
``messages`` blob read back, the mirrored append, ``COMMIT``); here each is one statement that
calls a function (:data:`PUT`, :data:`WRITES`), which commits itself (or joins the caller's
transaction):

- :data:`PUT`: the session row checked (scope, agent, not expired) and locked, the blobs
  inserted (kept when present), the checkpoint upserted, and — only when the checkpoint row is
  new — the mirrored messages appended with the session's counters moved, as
  ``services.append_messages`` moves them (§5). The messages to mirror are worked out before
  the call (:mod:`.mirror`), so the parent's blob is not read inside it.
- :data:`WRITES`: the scope check and the ``INSERT … ON CONFLICT`` of a task's writes.

Why functions: the statements are large, and the server planned them on every call (about half
of each call's server time, docs/performance.md); PL/pgSQL plans a function's statement once
per server session and keeps it, behind any pooler, as the core's hot paths do
(:func:`cortex_sessions.services._pg.function_sql`). Migration ``cortex_langgraph``
``0002_functions`` creates them (a frozen copy of :func:`function_sql`; a test checks they
agree); with the app's migrations disabled, :func:`create_functions` does on ``post_migrate``.

Each call reports when no live session within the scope matched (then it wrote nothing): the
caller goes the ORM way, which creates a new thread's session or raises the error that fits.
Other databases always go the ORM way. Hand-written SQL on public Django and psycopg APIs only,
as ``services/_pg.py``, run as the core's statements are
(:func:`cortex_sessions.services._pg_run.execute`), on a server-binding cursor: the checkpoint's
and the channels' bytes go as binary parameters, not as escaped text inside the statement.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from datetime import datetime
from functools import cache
from typing import Any

from django.db import DatabaseError, connections

from ...counters import last_message_of_rows
from ...exceptions import SessionArchived
from ...models import Message, Session
from ...services import _pg
from ...services._common import (
    autocommit_write,
    has_receivers,
    send_on_commit,
    total_overflow,
)
from ...services._pg_run import (
    PlpgsqlFunction,
    built,
    create_unmigrated_functions,
    execute,
    function_ddl,
    messages_json,
    text_plan,
    text_values,
)
from ...signals import messages_appended
from ...usage import Totals, totals_of
from . import _pg_reads
from .mirror import MirroredRow
from .models import Checkpoint, CheckpointBlob, CheckpointWrite

__all__ = [
    "PUT",
    "WRITES",
    "create_functions",
    "function_sql",
    "put_checkpoint",
    "put_writes",
]


#: The PL/pgSQL function of :func:`put_checkpoint`. Its name changes with its statement or
#: result (as the core's, :data:`cortex_sessions.services._pg.APPEND_ONE`), so code and
#: database on two sides of a migration fail at parse time, before writing (``_v2``:
#: ``0003_packed_writes``; ``_v3``: the mirrored messages parsed as ``jsonb``,
#: ``0005_put_jsonb``).
PUT = "cortex_langgraph_put_v3"
#: The PL/pgSQL function of :func:`put_writes`, versioned as :data:`PUT`.
WRITES = "cortex_langgraph_writes_v2"

#: How :func:`_packed`'s rows become columns in a statement: each element ``x.e`` of the
#: JSON array and its bytes, cut from the joined ``bytea`` parameter (``%s``) by the start
#: and length the row carries (a ``null`` length: ``NULL``).
_ROWS = "json_array_elements(%s::json) AS x(e)"
_BYTES = "substring(%s FROM (x.e ->> {start})::integer FOR (x.e ->> {length})::integer)"


def _packed(rows: Sequence[Sequence[Any]]) -> tuple[bytes, str]:
    """Rows whose last value is ``bytes`` or ``None`` as two parameters: the bytes joined, and
    a JSON array of the rows with that value replaced by its 1-based start and its length in
    the joined bytes (``None``: a ``null`` length), read back by :data:`_ROWS` and
    :data:`_BYTES`.

    Why not one array per column for ``unnest``: psycopg dumps an array parameter element by
    element in Python, about 15 µs an array on a cursor's first use (each statement's
    cursor is new), ~60 µs for the four of a task's writes, a third of the gap to
    ``PostgresSaver.put_writes``; a ``bytea`` and a text cost ~1 µs each, and the bytes
    still go as one binary parameter (docs/performance.md).
    """
    described: list[list[Any]] = []
    chunks: list[bytes] = []
    start = 1
    for *values, data in rows:
        if data is None:
            described.append([*values, start, None])
            continue
        described.append([*values, start, len(data)])
        chunks.append(data)
        start += len(data)
    return b"".join(chunks), json.dumps(described)


def _session_check(lock: bool) -> str:
    """``v``: the session by id, within a scope (the four parameters of ``_pg``), not expired,
    of an agent (``NULL``: any), with its ``archived_at``; locked with ``lock``."""
    table = Session._meta.db_table
    suffix = " FOR NO KEY UPDATE" if lock else ""
    return (
        f'v AS (SELECT s."id", s."archived_at" FROM {table} s WHERE s."id" = %s'
        f' AND {_pg.WITHIN_FILTER} AND s."agent_id" = COALESCE(%s, s."agent_id"){suffix})'
    )


def _session_text() -> str:
    """Every column of the updated session row ``s`` as the elements of a text array."""
    return ", ".join(f's."{field.column}"::text' for field in Session._meta.concrete_fields)


def _put_statement() -> str:
    """The statement :data:`PUT` runs, into its ``text[]`` variable ``result``.

    - ``v`` reads and locks the session row (a concurrent put or append of the thread waits);
    - ``c`` upserts the checkpoint when the session is not archived, returning whether the row
      is new (``xmax = 0``);
    - ``b`` inserts the blobs (parallel arrays; none: nothing), keeping a channel version
      already stored;
    - ``s`` moves the session's counters by the mirrored messages, only when ``c`` inserted;
    - ``m`` inserts those messages numbered from the ``last_seq`` ``s`` returned.

    ``result``: whether the session is live (not archived) and whether the checkpoint is new
    (``'true'``/``'false'``; the latter ``NULL`` when archived), then — when ``s`` ran — the
    session's columns after the update and each new message's id and seq, in seq order;
    ``NULL`` when there is no such session.

    Parameters: session id, the four scope parameters, agent id or ``NULL``; namespace,
    checkpoint id, parent id, type, checkpoint bytes, metadata (JSON text), created_at; the
    namespace, then the blobs as :func:`_packed` gives them (the bytes, then the JSON of
    ``[channel, version, type, start, length]`` rows); n, n, the four totals,
    updated_at, last_message (NULL: keep), session id, n; n, then the messages as one JSON
    text (``services._pg_run.messages_json``, as the core's multi-message append: one string
    escape where seven arrays cost psycopg's array dumper per element, docs/performance.md),
    parsed once as ``jsonb`` as the core's ``_v2`` parses it (``_v2`` of this function read it
    as ``json``, which each of a message's seven reads parsed again).
    """
    checkpoint, blob = Checkpoint._meta.db_table, CheckpointBlob._meta.db_table
    session, message = Session._meta.db_table, Message._meta.db_table
    columns = ", ".join(f's."{f.column}"' for f in Session._meta.concrete_fields)
    return (
        f"WITH {_session_check(lock=True)}, c AS ("
        f' INSERT INTO {checkpoint} ("session_id", "checkpoint_ns", "checkpoint_id",'
        ' "parent_checkpoint_id", "type", "checkpoint", "metadata", "created_at")'
        ' SELECT v."id", %s, %s, %s, %s, %s, %s::jsonb, %s FROM v WHERE v."archived_at" IS NULL'
        ' ON CONFLICT ("session_id", "checkpoint_ns", "checkpoint_id") DO UPDATE SET'
        ' "parent_checkpoint_id" = EXCLUDED."parent_checkpoint_id", "type" = EXCLUDED."type",'
        ' "checkpoint" = EXCLUDED."checkpoint", "metadata" = EXCLUDED."metadata"'
        " RETURNING (xmax = 0) AS inserted"
        f'), b AS (INSERT INTO {blob} ("session_id", "checkpoint_ns", "channel", "version",'
        ' "type", "blob") SELECT v."id", %s, x.e ->> 0, x.e ->> 1, x.e ->> 2,'
        f" {_BYTES.format(start=3, length=4)} FROM v, {_ROWS}"
        ' WHERE v."archived_at" IS NULL'
        ' ON CONFLICT ("session_id", "checkpoint_ns", "channel", "version") DO NOTHING'
        f"), s AS ("
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
        ' SELECT s."id", s."agent_id", s."scope", s."last_seq" - %s + v.ord, v.e ->> 0,'
        " v.e ->> 1, v.e -> 2, v.e -> 3, (v.e ->> 4)::timestamptz, (v.e ->> 5)::jsonb,"
        " (v.e ->> 6)::integer FROM s, jsonb_array_elements(%s::jsonb)"
        ' WITH ORDINALITY AS v(e, ord) RETURNING "id", "seq"'
        ') SELECT ARRAY[(v."archived_at" IS NULL)::text, (SELECT c.inserted FROM c)::text]'
        f" || CASE WHEN s.\"id\" IS NULL THEN '{{}}'::text[] ELSE ARRAY[{_session_text()}] END"
        ' || COALESCE((SELECT array_agg(x.t ORDER BY m."seq", x.o) FROM m,'
        ' unnest(ARRAY[m."id"::text, m."seq"::text]) WITH ORDINALITY AS x(t, o)),'
        " '{}'::text[]) INTO result FROM v LEFT JOIN s ON TRUE"
    )


def _writes_statement() -> str:
    """The statement :data:`WRITES` runs, into its ``boolean`` variable ``result``: the session
    checked (``v``, unlocked: the rows' foreign key holds it against a delete) and the writes
    inserted when it is not archived, keeping a task's write already stored under an index,
    or with the last parameter true overwriting it. ``result``: whether the session is live
    (``NULL``: no such session).

    Parameters: session id, the four scope parameters, agent id or ``NULL``; namespace,
    checkpoint id, task id, task path, then the writes as :func:`_packed` gives them (the
    bytes, then the JSON of ``[idx, channel, type, start, length]`` rows), then whether to
    replace."""
    table = CheckpointWrite._meta.db_table
    return (
        f"WITH {_session_check(lock=False)}, w AS ("
        f' INSERT INTO {table} ("session_id", "checkpoint_ns", "checkpoint_id", "task_id",'
        ' "task_path", "idx", "channel", "type", "blob")'
        ' SELECT v."id", %s, %s, %s, %s, (x.e ->> 0)::integer, x.e ->> 1, x.e ->> 2,'
        f" {_BYTES.format(start=3, length=4)} FROM v, {_ROWS}"
        ' WHERE v."archived_at" IS NULL'
        ' ON CONFLICT ("session_id", "checkpoint_ns", "checkpoint_id", "task_id", "idx")'
        ' DO UPDATE SET "channel" = EXCLUDED."channel", "type" = EXCLUDED."type",'
        ' "blob" = EXCLUDED."blob", "task_path" = EXCLUDED."task_path" WHERE %s'
        ') SELECT v."archived_at" IS NULL INTO result FROM v'
    )


@cache
def _functions() -> dict[str, PlpgsqlFunction]:
    """The functions :func:`function_sql` creates, by name."""
    check = ("uuid", *_pg.SCOPE_TYPES, "text")  # session id, scope, agent id or NULL
    put = (
        *check,
        *("text", "text", "text", "text", "bytea", "text", "timestamptz"),  # the checkpoint
        *("text", "bytea", "text"),  # the namespace, the blobs (_packed)
        *("integer", "integer", "bigint", "bigint", "numeric", "bigint"),  # n, n, totals
        *("timestamptz", "text", "uuid", "integer", "integer"),  # updated_at … n, n
        "text",  # the messages, one JSON array (services._pg_run.messages_json)
    )
    writes = (*check, "text", "text", "text", "text", "bytea", "text")  # … the writes (_packed)
    return {
        PUT: PlpgsqlFunction(put, _put_statement, "text[]", generic_plan=True),
        WRITES: PlpgsqlFunction(
            (*writes, "boolean"), _writes_statement, "boolean", generic_plan=True
        ),
        _pg_reads.LATEST: PlpgsqlFunction(
            _pg_reads.LATEST_ARGUMENTS,
            _pg_reads.latest_statement,
            _pg_reads.LATEST_RESULT,
            volatility="STABLE",
            generic_plan=True,
        ),
    }


@cache
def _sql_call(function: str) -> str:
    """The statement that calls ``function`` (a scalar call, as the core's:
    ``services._pg._sql_call`` says why), each argument cast to its type (the server then
    resolves the call whatever type psycopg gave a list), every array in binary (``%b``):
    psycopg writes a text array element by element, escaping each (a ``bytea[]`` of the
    channels' bytes as escaped text), about five times the time of the binary form."""
    marks = ", ".join(
        f"{'%b' if kind.endswith('[]') else '%s'}::{kind}"
        for kind in _functions()[function].arguments
    )
    return f"SELECT {function}({marks})"


def function_sql(function: str) -> tuple[str, str]:
    """The SQL that creates ``function`` (:data:`PUT`, :data:`WRITES` or
    :data:`._pg_reads.LATEST`) on PostgreSQL and the SQL that drops it, as ``(create, drop)``,
    built as the core's (:func:`cortex_sessions.services._pg_run.function_ddl`). Migration
    ``0002_functions`` holds a frozen copy (``tests/runtimes/test_langgraph_writes.py`` checks
    they agree): a change to a statement or to the session's columns comes with a migration
    adding the function under a new name.

    Each is created with ``plan_cache_mode = force_generic_plan``: PL/pgSQL keeps a plan per
    connection only when the server picks the generic plan, and for the latest read, whose
    generic plan it estimates dearer than a custom one, it planned the statement again on
    every call (``EXPLAIN ANALYZE``: 0.57 ms a call, 0.14 ms with the setting; the writes are
    the same either way).

    Raises:
        KeyError: ``function`` is not one of the three.
    """
    return function_ddl(function, _functions()[function])


def create_functions(*, app_config: Any, using: str, **kwargs: Any) -> None:
    """``post_migrate`` receiver: create :data:`PUT`, :data:`WRITES` and
    :data:`._pg_reads.LATEST` on a PostgreSQL database whose tables were made from the models
    because this app's migrations are disabled (pytest-django's ``--nomigrations``,
    ``TEST["MIGRATE"] = False``). With migrations enabled it does nothing: migration
    ``0002_functions`` owns them."""
    create_unmigrated_functions(app_config, using, Checkpoint, _functions())


@cache
def _session_plan() -> Any:
    """How :data:`PUT`'s session columns become the session's values."""
    return text_plan(Session._meta.concrete_fields)


def put_checkpoint(
    alias: str,
    *,
    canonical: str,
    agent_id: str | None,
    session_id: uuid.UUID,
    checkpoint: tuple[str, str, str, str, bytes],
    metadata: str,
    blobs: Sequence[tuple[str, str, str, bytes | None]],
    mirrored: Sequence[MirroredRow],
    now: datetime,
) -> bool | None:
    """Store a checkpoint of an existing thread and mirror its new messages, in one call of
    :data:`PUT`; ``messages_appended`` is sent on commit when messages were appended.

    Args:
        alias: the write database (PostgreSQL, ``services._pg.serves``).
        canonical, agent_id: the scope the session must lie at or beneath, and its agent
            (``None``: any).
        checkpoint: ``(namespace, checkpoint id, parent id, type, bytes)``, checked.
        metadata: the checkpoint's metadata as JSON text, storable.
        blobs: ``(channel, version, type, bytes or None)`` of the updated channels.
        mirrored: the messages to append when the checkpoint row is new (at most
            ``MAX_MESSAGES_PER_APPEND``).
        now: the messages' default ``created_at`` and the session's new ``updated_at``.

    Returns:
        Whether the checkpoint row is new; ``None`` when no live session ``session_id`` lies
        within ``canonical`` (of ``agent_id``): nothing was written.

    Raises:
        SessionArchived: the session is archived; nothing was written.
        UsageTotalOverflow: the mirrored messages would take a session total past its column
            (docs/design.md §16.1); nothing was written.
        WriteOutcomeUnknown: the connection failed without the server's answer (§12.3).
        django.db.Error: as the ORM would (``ProgrammingError`` before migration ``0002``).
    """
    ns, checkpoint_id, parent_id, kind, data = checkpoint
    rows = [row.columns for row in mirrored]
    count = len(rows)
    totals: Totals = totals_of((row["usage"], row["token_count"]) for row in rows)
    last = last_message_of_rows(rows)
    params: list[Any] = [session_id, *_pg.scope_params(canonical), agent_id]
    params += [ns, checkpoint_id, parent_id, kind, data, metadata, now, ns]
    params += _packed(blobs)
    params += [count, count, *totals, now, last, session_id, count, count]
    params.append(
        messages_json(rows, [(r.content_json, r.metadata_json, r.usage_json) for r in mirrored])
    )
    connection = connections[alias]
    try:
        with autocommit_write(alias):
            result, zone = execute(connection, _sql_call(PUT), params, server_binding=True)
    except DatabaseError as exc:  # a session total past its column: nothing written (§16.1)
        if (refused := total_overflow(exc, alias)) is not None:
            raise refused from exc
        raise
    array = result[0][0]
    if array is None:
        return None
    live, inserted, *rest = array
    if live != "true":
        raise SessionArchived()
    if rest and has_receivers(messages_appended):
        # (the instances are built for the receivers only: send_on_commit sends to none else)
        plan = _session_plan()
        width = len(plan.attnames)
        session = Session.from_db(alias, plan.attnames, text_values(connection, rest, zone, plan))
        written = rest[width:]
        messages = []
        for index, row in enumerate(rows):
            message_id, seq = int(written[2 * index]), int(written[2 * index + 1])
            common = {"id": message_id, "agent_id": session.agent_id, "scope": session.scope}
            message = built(Message, alias, {**row, **common, "seq": seq, "session_id": session_id})
            message.session = session
            messages.append(message)
        send_on_commit(messages_appended, session=session, messages=messages)
    return bool(inserted == "true")


def put_writes(
    alias: str,
    *,
    canonical: str,
    agent_id: str | None,
    session_id: uuid.UUID,
    key: tuple[str, str, str, str],
    rows: Sequence[tuple[int, str, str, bytes | None]],
    replace: bool,
) -> bool:
    """Store a task's pending writes in one call of :data:`WRITES`.

    Args:
        key: ``(namespace, checkpoint id, task id, task path)``, checked.
        rows: ``(idx, channel, type, bytes or None)``, one per index (``None``: stored as
            ``NULL``).
        replace: overwrite a write stored under the same task and index (LangGraph's special
            channels) rather than keep it.

    Returns:
        ``False`` when no live session ``session_id`` lies within ``canonical`` (of
        ``agent_id``): nothing was written.

    Raises:
        SessionArchived: the session is archived; nothing was written.
        WriteOutcomeUnknown, django.db.Error: as :func:`put_checkpoint`.
    """
    params: list[Any] = [session_id, *_pg.scope_params(canonical), agent_id, *key]
    params += [*_packed(rows), replace]
    with autocommit_write(alias):
        result, _ = execute(connections[alias], _sql_call(WRITES), params, server_binding=True)
    live = result[0][0]
    if live is None:
        return False
    if not live:
        raise SessionArchived()
    return True
