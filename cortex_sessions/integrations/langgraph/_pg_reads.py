"""The saver's reads of one thread on PostgreSQL, in one statement (docs/design.md §19.1).

``get_tuple`` and ``list`` of a thread through the ORM cost three statements (the checkpoints
with the session join for scope, agent and expiry, their pending writes, the channel values
they name) and a model instance per row. Here one statement returns the checkpoints, each with
its pending writes as an array (as ``langgraph-checkpoint-postgres`` reads them), and with them
the channel values they most likely name:

- the latest checkpoint of a namespace (``get_tuple`` without a ``checkpoint_id``): the newest
  version of every channel of the namespace, one index probe per channel. In a thread that
  never forked, those are exactly the versions the latest checkpoint names (a version is a
  counter that only grows, :meth:`~.saver.CortexCheckpointSaver.get_next_version`);
- every checkpoint of the thread (``list`` without ``before`` or ``limit``): every value of the
  thread (or of the namespace), which its checkpoints name between them.

A checkpoint's channel versions are inside its serialized body, which only Python decodes: a
version it names that the statement did not return (a fork, a read by ``checkpoint_id``, a
page of ``list``) is read by a second statement, by key. Nothing is returned for a thread
outside the scope, of another agent or expired (the session checks are in the statement).

SQL only through public Django and psycopg APIs, on the core's hot-path cursor
(:func:`cortex_sessions.services._pg_run.execute`: logged, hooked and prepared with
``PREPARED_STATEMENTS`` as the core's statements, docs/design.md §14); psycopg 2, SQLite and
MySQL/MariaDB keep the ORM path of :mod:`.store`, which returns the same tuples.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping
from functools import cache
from typing import Any

from django.db import connections
from langgraph.checkpoint.base import CheckpointTuple, writes_sort_key
from langgraph.checkpoint.serde.base import SerializerProtocol

from ...models import Session
from ...scope import Scope
from ...services._pg import enabled, scope_params
from ...services._pg_run import execute
from .models import Checkpoint, CheckpointBlob, CheckpointWrite

__all__ = [
    "LATEST",
    "LATEST_ARGUMENTS",
    "LATEST_RESULT",
    "latest_statement",
    "read_tuples",
    "serves",
]

#: The PL/pgSQL function that reads the latest checkpoint of a thread's namespace
#: (``get_tuple`` without a ``checkpoint_id``): :func:`_statement`'s ``latest`` mode, whose
#: plan the server then keeps per connection (it planned the statement on every call, more
#: than its run took). Created with the saver's write functions
#: (:func:`._pg_writes.function_sql`, migration ``0002_functions``); versioned as they are.
LATEST = "cortex_langgraph_latest_v1"
#: :data:`LATEST`'s argument types: the session id, the four scope parameters and the agent
#: id (or ``NULL``); session id and namespace twice (the channel probes); session id,
#: namespace, limit.
LATEST_ARGUMENTS = (
    *("uuid", "text", "text", "text", "text", "text"),
    *("uuid", "text", "uuid", "text", "uuid", "text", "bigint"),
)
#: :data:`LATEST`'s rows: :func:`_statement`'s, its varchar columns as ``text``.
LATEST_RESULT = (
    "TABLE(r_kind integer, r_ns text, r_id text, r_parent text, r_type text, r_body bytea,"
    " r_metadata jsonb, r_newest bytea[], r_writes bytea[])"
)

#: A blob key: ``(checkpoint_ns, channel, version)`` within the thread.
_Key = tuple[str, str, str]


def serves(alias: str) -> bool:
    """Whether :func:`read_tuples` serves reads on the database ``alias``: PostgreSQL through
    psycopg 3, as the core's hot paths (:func:`cortex_sessions.services._pg.enabled`)."""
    return enabled(alias)


def read_tuples(
    serde: SerializerProtocol,
    alias: str,
    scope: Scope,
    agent_id: str | None,
    *,
    session_id: uuid.UUID,
    checkpoint_ns: str | None,
    checkpoint_id: str | None,
    before: str | None,
    limit: int | None,
) -> list[CheckpointTuple]:
    """The checkpoint tuples of thread ``session_id``, newest first (by checkpoint id, then
    namespace), as :func:`.store.list_tuples` returns them, in one statement (two when a
    checkpoint names channel versions the first did not read).

    Args:
        serde: the saver's serializer (``loads_typed``).
        alias: the PostgreSQL database to read (:func:`serves`).
        scope, agent_id: the session must lie at or beneath ``scope`` and, unless ``None``,
            belong to ``agent_id``.
        session_id: the thread.
        checkpoint_ns: only this namespace (``None``: every namespace of the thread).
        checkpoint_id: only this checkpoint; before: only checkpoints with a smaller id
            (both already checked for length by the caller).
        limit: at most this many (``None``: all; ``>= 1``).

    Returns:
        ``[]`` for a thread that is missing, outside ``scope``, another agent's or expired.

    Raises:
        django.db.Error: as any ORM query raises it (:func:`~cortex_sessions.services._pg_run.execute`).
    """
    connection = connections[alias]
    quote = connection.ops.quote_name
    canonical = scope.canonical
    checks = [session_id, *scope_params(canonical), agent_id]
    where, where_params = _checkpoint_filter(checkpoint_ns, checkpoint_id, before)
    if limit == 1 and checkpoint_ns is not None and checkpoint_id is None and before is None:
        blobs_mode = "latest"
    elif limit is None and checkpoint_id is None and before is None:
        blobs_mode = "all"
    else:
        blobs_mode = "none"
    sql, params = _statement(
        quote,
        where,
        blobs_mode,
        one_ns=checkpoint_ns is not None,
        limited=limit is not None,
    )
    values: list[Any] = [*checks]
    if blobs_mode == "latest":
        values += [session_id, checkpoint_ns, session_id, checkpoint_ns]
    values += [session_id, *where_params]
    if limit is not None:
        values.append(limit)
    if blobs_mode == "all":
        values.append(session_id)
        if checkpoint_ns is not None:
            values.append(checkpoint_ns)
    assert len(values) == params
    if blobs_mode == "latest":
        sql = _latest_call()
    # prepared with PREPARED_STATEMENTS (§14.2); the call of LATEST, whose arguments are cast
    # to its declared types, binds them server-side without it too (as the saver's writes):
    # psycopg then sends the 13 values as they are instead of quoting each into the text
    rows, _ = execute(connection, sql, values, server_binding=blobs_mode == "latest")
    page = [row for row in rows if row[0] == 0]
    if not page:
        return []
    blobs: dict[_Key, tuple[str, Any]] = {
        (row[1], row[2], row[3]): (row[4], row[5]) for row in rows if row[0] == 1
    }
    for channel, version, kind, data in page[0][7] or ():  # the newest of each channel
        blobs[page[0][1], bytes(channel).decode(), bytes(version).decode()] = (
            bytes(kind).decode(),
            data,
        )
    checkpoints = [_loads(serde, row[4], row[5]) for row in page]
    missing = {
        (row[1], str(channel), str(version))
        for row, checkpoint in zip(page, checkpoints, strict=True)
        for channel, version in (checkpoint.get("channel_versions") or {}).items()
    }.difference(blobs)
    if missing:
        blobs.update(_blobs_by_key(connection, session_id, sorted(missing)))
    return [
        _tuple(serde, str(session_id), row, checkpoint, blobs)
        for row, checkpoint in zip(page, checkpoints, strict=True)
    ]


def _loads(serde: SerializerProtocol, kind: str, data: Any) -> Any:
    """A stored value through the serializer: ``(type, bytes)``, or ``(type, None)`` for a
    ``NULL`` (a serializer that gave no bytes gets none back, as from LangGraph's in-memory
    saver)."""
    value: tuple[str, Any] = (kind, bytes(data) if data is not None else None)
    return serde.loads_typed(value)


def _config(thread_id: str, ns: str, checkpoint_id: str) -> dict[str, Any]:
    return {
        "configurable": {
            "thread_id": thread_id,
            "checkpoint_ns": ns,
            "checkpoint_id": checkpoint_id,
        }
    }


def _tuple(
    serde: SerializerProtocol,
    thread_id: str,
    row: tuple[Any, ...],
    checkpoint: dict[str, Any],
    blobs: Mapping[_Key, tuple[str, Any]],
) -> CheckpointTuple:
    """One tuple from a checkpoint row ``(kind, ns, id, parent, type, body, metadata, newest
    values, writes)``, its decoded body and the blobs read."""
    _, ns, checkpoint_id, parent_id, _, _, metadata, _, writes = row
    checkpoint["channel_values"] = {
        channel: _loads(serde, *blob)
        for channel, version in (checkpoint.get("channel_versions") or {}).items()
        if (blob := blobs.get((ns, str(channel), str(version)))) is not None and blob[0] != "empty"
    }
    pending = sorted(
        (
            (
                bytes(task_id).decode(),
                bytes(channel).decode(),
                bytes(kind).decode(),
                data,
                bytes(task_path).decode(),
                int(bytes(idx)),
            )
            for task_id, channel, kind, data, task_path, idx in writes or ()
        ),
        key=lambda w: writes_sort_key(w[4], w[0], w[5]),
    )
    return CheckpointTuple(
        config=_config(thread_id, ns, checkpoint_id),  # type: ignore[arg-type]
        checkpoint=checkpoint,  # type: ignore[arg-type]
        metadata=json.loads(metadata) if isinstance(metadata, str | bytes) else metadata,
        parent_config=(
            _config(thread_id, ns, parent_id)  # type: ignore[arg-type]
            if parent_id
            else None
        ),
        pending_writes=[
            (task_id, channel, _loads(serde, kind, data))
            for task_id, channel, kind, data, _, _ in pending
        ],
    )


def _checkpoint_filter(
    checkpoint_ns: str | None, checkpoint_id: str | None, before: str | None
) -> tuple[str, list[str]]:
    """The checkpoint part's extra conditions and their parameters."""
    where, params = "", []
    if checkpoint_ns is not None:
        where += " AND c.checkpoint_ns = %s"
        params.append(checkpoint_ns)
    if checkpoint_id is not None:
        where += " AND c.checkpoint_id = %s"
        params.append(checkpoint_id)
    if before is not None:
        where += " AND c.checkpoint_id < %s"
        params.append(before)
    return where, params


def _utf8(column: str) -> str:
    return f"convert_to({column}, 'UTF8')"


@cache
def _statement(
    quote: Any, where: str, blobs_mode: str, *, one_ns: bool, limited: bool
) -> tuple[str, int]:
    """The statement of :func:`read_tuples` and its number of parameters.

    Rows: ``(0, ns, checkpoint_id, parent_id, type, body, metadata, newest, writes)`` per
    checkpoint in order (``newest``: the latest mode's values, ``[channel, version, type,
    blob]`` each, else ``NULL``; ``writes``: ``[task_id, channel, type, blob, task_path, idx]``
    each), then in the all mode ``(1, ns, channel, version, type, blob, NULL, NULL, NULL)`` per
    value of the thread.
    """
    session = quote(Session._meta.db_table)
    checkpoint = quote(Checkpoint._meta.db_table)
    blob = quote(CheckpointBlob._meta.db_table)
    write = quote(CheckpointWrite._meta.db_table)
    params = 6
    # the session checks of every read: §2.3's scope range, the agent (``COALESCE``: any, when
    # ``NULL``), §18.1's expiry on the server's clock (as services/_pg.py); the scope test in a
    # ``CASE``, which the planner does not estimate against the scope column's statistics (on
    # every call: the statement is not prepared), for a row found by its key anyway
    sql = (
        f"WITH RECURSIVE ok AS (SELECT 1 FROM {session} s WHERE s.id = %s AND CASE WHEN"
        " s.scope >= %s AND s.scope < %s AND (s.scope = %s OR s.scope >= %s)"
        " AND (s.expires_at IS NULL OR s.expires_at > statement_timestamp()) THEN TRUE END"
        " AND s.agent_id = COALESCE(%s, s.agent_id))"
    )
    if blobs_mode == "latest":
        # the newest value of each channel of the namespace, one index probe per channel
        # (a skip scan of the unique key: session, namespace, channel, version)
        probe = (
            f"SELECT b.checkpoint_ns, b.channel, b.version, b.type, b.blob FROM {blob} b"
            " WHERE b.session_id = %s AND b.checkpoint_ns = %s{} ORDER BY b.channel DESC,"
            " b.version DESC LIMIT 1"
        )
        # (both keys descending: a backward scan of the key, no sort; channels last to first)
        sql += (
            f", ch AS (({probe.format('')}) UNION ALL SELECT n.* FROM ch CROSS JOIN LATERAL"
            f" ({probe.format(' AND b.channel < ch.channel')}) n)"
        )
        params += 4
    writes = ", ".join(
        [
            _utf8("w.task_id"),
            _utf8("w.channel"),
            _utf8("w.type"),
            "w.blob",
            _utf8("w.task_path"),
            _utf8("w.idx::text"),
        ]
    )
    latest = (
        "(SELECT array_agg(ARRAY[convert_to(ch.channel, 'UTF8'), convert_to(ch.version, 'UTF8'),"
        " convert_to(ch.type, 'UTF8'), ch.blob]) FROM ch)"
        if blobs_mode == "latest"
        else "NULL::bytea[]"
    )
    sql += (
        " (SELECT 0 AS kind, c.checkpoint_ns, c.checkpoint_id, c.parent_checkpoint_id, c.type,"
        f" c.checkpoint, c.metadata, {latest}, (SELECT array_agg(ARRAY[{writes}]) FROM {write} w"
        " WHERE w.session_id = c.session_id AND w.checkpoint_ns = c.checkpoint_ns"
        f" AND w.checkpoint_id = c.checkpoint_id) FROM {checkpoint} c"
        f" WHERE c.session_id = %s AND EXISTS (SELECT 1 FROM ok){where}"
        " ORDER BY c.checkpoint_id DESC, c.checkpoint_ns"
    )
    params += 1 + where.count("%s")
    sql += " LIMIT %s)" if limited else ")"
    params += 1 if limited else 0
    if blobs_mode == "all":
        sql += (
            " UNION ALL (SELECT 1, b.checkpoint_ns, b.channel, b.version, b.type, b.blob,"
            f" NULL::jsonb, NULL::bytea[], NULL::bytea[] FROM {blob} b WHERE b.session_id = %s"
            f"{' AND b.checkpoint_ns = %s' if one_ns else ''} AND EXISTS (SELECT 1 FROM ok))"
        )
        params += 2 if one_ns else 1
        # checkpoints first, newest first (the blobs' order does not matter)
        sql += " ORDER BY 1, 3 DESC, 2"
    return sql, params


def latest_statement() -> str:
    """The statement :data:`LATEST` returns the rows of: :func:`_statement` of the latest
    checkpoint of one namespace, with ``%s`` placeholders (:data:`LATEST_ARGUMENTS`)."""
    sql, _ = _statement(_quoted, " AND c.checkpoint_ns = %s", "latest", one_ns=True, limited=True)
    return (
        "SELECT r.kind, r.ns::text, r.id::text, r.parent::text, r.type::text, r.body,"
        f" r.metadata, r.newest, r.writes FROM ({sql}) AS r(kind, ns, id, parent, type, body,"
        " metadata, newest, writes)"
    )


def _quoted(name: str) -> str:
    """A table name quoted as PostgreSQL's ``quote_name`` quotes it."""
    return f'"{name}"'


@cache
def _latest_call() -> str:
    """The statement that calls :data:`LATEST` (a table function: it returns rows), each
    argument cast to its type."""
    marks = ", ".join(f"%s::{kind}" for kind in LATEST_ARGUMENTS)
    return f"SELECT * FROM {LATEST}({marks})"


def _blobs_by_key(
    connection: Any, session_id: uuid.UUID, keys: list[_Key]
) -> dict[_Key, tuple[str, Any]]:
    """The blobs of thread ``session_id`` with the given keys (those that exist), in one
    statement (the caller's statement already checked the session)."""
    blob = connection.ops.quote_name(CheckpointBlob._meta.db_table)
    sql = (
        "SELECT b.checkpoint_ns, b.channel, b.version, b.type, b.blob"
        f" FROM {blob} b JOIN unnest(%s::text[], %s::text[], %s::text[]) AS k(ns, channel,"
        " version) ON b.checkpoint_ns = k.ns AND b.channel = k.channel"
        " AND b.version = k.version WHERE b.session_id = %s"
    )
    rows, _ = execute(
        connection,
        sql,
        [[key[0] for key in keys], [key[1] for key in keys], [key[2] for key in keys], session_id],
    )
    return {(ns, channel, version): (kind, data) for ns, channel, version, kind, data in rows}
