"""The saver's database work: rows in, checkpoint tuples out (docs/design.md §19.1).

Every function here is synchronous and runs as one unit: writes in one transaction on the
write database (the session row locked first, so one thread's puts queue behind each other),
reads on the database :func:`cortex_sessions.routing.db_for_read` picks (docs/design.md §17.1).
Values go through the saver's serializer (``dumps_typed`` / ``loads_typed``).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, cast

from django.db import OperationalError, connections, transaction
from django.db.models import Q
from django.db.models.fields.json import KeyTransform
from django.utils import timezone
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    CheckpointTuple,
    get_serializable_checkpoint_metadata,
    writes_sort_key,
)
from langgraph.checkpoint.base import (
    Checkpoint as LGCheckpoint,
)
from langgraph.checkpoint.serde.base import SerializerProtocol

from ... import routing
from ...exceptions import (
    InvalidInput,
    InvalidMetadata,
    InvalidText,
    NulCharacter,
    SessionArchived,
    SessionNotFound,
    ValueTooLong,
)
from ...models import Session, not_expired_q
from ...scope import Scope, scope_q
from ...services import _pg
from ..blocks import is_storable
from . import _pg_reads, _pg_writes, mirror, threads
from ._pg_reads import _config, _loads
from .models import ID_CHARS, NAME_CHARS, TYPE_CHARS, Checkpoint, CheckpointBlob, CheckpointWrite

__all__ = ["delete_thread", "list_tuples", "put_checkpoint", "put_writes"]


def _bounded(value: str, limit: int | None, field: str) -> str:
    """``value``, checked as a name the saver stores: at most ``limit`` characters (any
    length when ``None``), no NUL
    (which PostgreSQL cannot store) and no lone surrogate (which no database can encode).

    Raises:
        ValueTooLong, NulCharacter, InvalidText: naming ``field``; nothing is written.
    """
    if limit is not None and len(value) > limit:
        raise ValueTooLong(f"{field} is longer than {limit} characters.", field=field)
    if "\x00" in value:
        raise NulCharacter(f"{field} contains a NUL character.", field=field)
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidText(f"{field} contains a lone surrogate.", field=field) from None
    return value


def _json_metadata(metadata: Mapping[str, Any]) -> tuple[dict[str, Any], str]:
    """``metadata`` as the JSON the metadata column stores (no NUL, lone surrogate or NaN):
    ``(the value, its JSON text)``, encoded and decoded once.

    Raises:
        InvalidMetadata: it is not storable JSON (field ``metadata``).
    """
    try:
        text = json.dumps(dict(metadata), allow_nan=False)
    except (TypeError, ValueError, RecursionError) as error:
        raise InvalidMetadata(f"metadata is not valid JSON: {error}", field="metadata") from None
    value = json.loads(text)
    if not is_storable(value):
        raise InvalidMetadata(
            "metadata holds text the database cannot store (NUL, a lone surrogate) or is "
            "nested too deep.",
            field="metadata",
        )
    return cast(dict[str, Any], value), text


def _live_session(target: threads.Target, alias: str, *, lock: bool = True) -> Session:
    """The session of ``target``'s thread (:func:`.threads.create_or_get`: created when the id
    names none; locked as ``lock`` says), refused when archived.

    Raises:
        InvalidInput, SessionNotFound: as :func:`.threads.create_or_get`.
        SessionArchived: the session is archived (docs/design.md §11.2).
    """
    session = threads.create_or_get(target, alias, lock=lock)
    if session.archived_at is not None:
        raise SessionArchived()
    return session


#: Values of at least this many bytes in one statement make a dropped MySQL/MariaDB connection
#: most likely the server's ``max_allowed_packet`` refusing the statement (1 MiB: the smallest
#: default, MySQL 5.7's 4 MiB, is above it; MariaDB's and MySQL 8's is 16 MiB and 64 MiB).
_LARGE_STATEMENT = 1 << 20
#: The errors of MySQL/MariaDB and their clients for a refused packet or the connection the
#: server then drops: ER_NET_PACKET_TOO_LARGE, CR_SERVER_GONE_ERROR, CR_SERVER_LOST.
_PACKET_ERRORS = (1153, 2006, 2013)


@contextmanager
def _packet_named(alias: str, size: int) -> Iterator[None]:
    """On MySQL/MariaDB, a statement carrying ``size`` bytes of values (at least
    :data:`_LARGE_STATEMENT`) that the server refuses or drops the connection for raises
    ``OperationalError`` naming ``max_allowed_packet`` (docs/langgraph.md), with the driver's
    error as its cause, instead of the bare "Server has gone away"; nothing was written (the
    transaction was rolled back). Any other error passes as it is.

    Raises:
        django.db.OperationalError: as said.
    """
    try:
        yield
    except OperationalError as exc:
        code = exc.args[0] if exc.args else None
        if size < _LARGE_STATEMENT or code not in _PACKET_ERRORS:
            raise
        if connections[alias].vendor != "mysql":
            raise
        raise OperationalError(
            code,
            f"{exc.args[1] if len(exc.args) > 1 else exc}: the statement carried {size:,} bytes"
            " of values, which the driver escapes into its text (up to twice as many: a NUL,"
            " quote or backslash byte takes two), likely more than the server's"
            " max_allowed_packet; nothing was written (raise max_allowed_packet,"
            " docs/langgraph.md)",
        ) from exc


def put_checkpoint(
    serde: SerializerProtocol,
    target: threads.Target,
    checkpoint: LGCheckpoint,
    metadata: Mapping[str, Any],
    new_versions: Mapping[str, Any],
    *,
    config: Any,
    messages_key: str | None,
) -> dict[str, Any]:
    """Store one checkpoint, the blobs of its updated channels, and mirror its new messages.

    Returns:
        The stored checkpoint's config (thread id, namespace, checkpoint id).

    Raises:
        InvalidInput, InvalidMetadata, ValueTooLong, SessionNotFound, SessionArchived: see
            :meth:`CortexCheckpointSaver.put`.
        django.db.OperationalError: on MySQL/MariaDB, over ``max_allowed_packet``
            (:func:`_packet_named`); nothing written.
    """
    ns = _bounded(target.checkpoint_ns, NAME_CHARS, "checkpoint_ns")
    checkpoint_id = _bounded(str(checkpoint["id"]), ID_CHARS, "checkpoint_id")
    parent_id = _bounded(target.checkpoint_id or "", ID_CHARS, "checkpoint_id")
    values: dict[str, Any] = dict(checkpoint.get("channel_values") or {})
    stripped = {key: value for key, value in checkpoint.items() if key != "channel_values"}
    kind, data = serde.dumps_typed(stripped)
    _bounded(kind, TYPE_CHARS, "type")
    blob_rows = []
    for channel, version in new_versions.items():
        _bounded(channel, NAME_CHARS, "channel")
        blob_kind, blob = (
            serde.dumps_typed(values[channel]) if channel in values else ("empty", None)
        )
        _bounded(blob_kind, TYPE_CHARS, "type")
        blob_rows.append((channel, _bounded(str(version), ID_CHARS, "version"), blob_kind, blob))
    stored_metadata, metadata_text = _json_metadata(
        get_serializable_checkpoint_metadata(config, dict(metadata))  # type: ignore[arg-type]
    )

    alias = routing.db_for_write(Session)
    pk = target.session_id
    mirrored = bool(messages_key) and ns == "" and messages_key in new_versions
    current = values.get(messages_key) if mirrored and messages_key else None

    def previous() -> Any:
        found = mirror.recall(alias, pk, parent_id)
        if found is mirror.MISSING:
            return _parent_value(serde, alias, pk, parent_id, messages_key or "")
        return found

    def keep() -> None:  # what the next put of the thread finds as its parent's, on commit
        kept = current if mirrored else mirror.recall(alias, pk, parent_id)
        if messages_key and ns == "" and kept is not mirror.MISSING:
            transaction.on_commit(
                lambda: mirror.remember(alias, pk, checkpoint_id, kept), using=alias
            )

    config_out = _config(target.thread_id, ns, checkpoint_id)
    if _pg.serves(alias) and _put_pg(
        alias,
        target,
        pk,
        (ns, checkpoint_id, parent_id, kind, data),
        metadata_text,
        blob_rows,
        current,
        previous,
    ):
        keep()
        return config_out
    size = len(data or b"") + sum(len(blob) for *_, blob in blob_rows if blob is not None)
    with _packet_named(alias, size), transaction.atomic(using=alias):
        session = _live_session(target, alias)
        CheckpointBlob.objects.using(alias).bulk_create(
            [
                CheckpointBlob(
                    session=session,
                    checkpoint_ns=ns,
                    channel=channel,
                    version=version,
                    type=blob_kind,
                    blob=blob,
                )
                for channel, version, blob_kind, blob in blob_rows
            ],
            ignore_conflicts=True,
        )
        existing = Checkpoint.objects.using(alias).filter(
            session=session, checkpoint_ns=ns, checkpoint_id=checkpoint_id
        )
        fields = {
            "parent_checkpoint_id": parent_id,
            "type": kind,
            "checkpoint": data,
            "metadata": stored_metadata,
        }
        if existing.update(**fields) == 0:
            Checkpoint.objects.using(alias).create(
                session=session, checkpoint_ns=ns, checkpoint_id=checkpoint_id, **fields
            )
            if mirrored:
                mirror.mirror_messages(session, current, previous)
        keep()
    return config_out


def _put_pg(
    alias: str,
    target: threads.Target,
    pk: Any,
    checkpoint: tuple[str, str, str, str, bytes],
    metadata: str,
    blob_rows: list[tuple[str, str, str, bytes | None]],
    current: Any,
    previous: Callable[[], Any],
) -> bool:
    """:func:`put_checkpoint` of an existing thread on PostgreSQL, in one statement
    (:mod:`._pg_writes`); ``False`` (nothing written) when the ORM path must run instead: a
    new thread, a thread outside the scope, or mirrored messages it refuses.

    Raises:
        SessionArchived: the session is archived.
    """
    now = timezone.now()
    fresh = (
        mirror.new_messages(current, previous())
        if isinstance(current, Sequence) and current
        else []
    )
    rows = mirror.mirrored_rows(fresh, now)
    if rows is None:
        return False
    return (
        _pg_writes.put_checkpoint(
            alias,
            canonical=target.scope.canonical,
            agent_id=target.agent_id,
            session_id=pk,
            checkpoint=checkpoint,
            metadata=metadata,
            blobs=blob_rows,
            mirrored=rows,
            now=now,
        )
        is not None
    )


def _parent_value(
    serde: SerializerProtocol, alias: str, session_id: Any, parent_id: str, channel: str
) -> Any:
    """The value of ``channel`` at the root-namespace checkpoint ``parent_id``, or ``None``."""
    if not parent_id:
        return None
    parent = (
        Checkpoint.objects.using(alias)
        .filter(session_id=session_id, checkpoint_ns="", checkpoint_id=parent_id)
        .values_list("type", "checkpoint")
        .first()
    )
    if parent is None:
        return None
    version = _loads(serde, *parent).get("channel_versions", {}).get(channel)
    if version is None:
        return None
    blob = (
        CheckpointBlob.objects.using(alias)
        .filter(session_id=session_id, checkpoint_ns="", channel=channel, version=str(version))
        .values_list("type", "blob")
        .first()
    )
    if blob is None or blob[0] == "empty":
        return None
    return _loads(serde, *blob)


def put_writes(
    serde: SerializerProtocol,
    target: threads.Target,
    writes: Sequence[tuple[str, Any]],
    task_id: str,
    task_path: str,
) -> None:
    """Store a task's pending writes against the target checkpoint, as LangGraph's own savers
    store them (``PostgresSaver``, ``InMemorySaver``):

    - each write goes under its index in ``writes``, or a special channel's fixed one
      (``WRITES_IDX_MAP``: error, interrupt, …); a special channel written twice in one call
      keeps its last write (their upsert of each write in turn);
    - a write already stored under the same task and index is kept (LangGraph replays writes);
      when every write is to a special channel, they replace the stored ones;
    - a value the serializer gives no bytes for (``(type, None)``) is stored as ``NULL`` and
      read back as ``None``, on every database;
    - a thread id that names no session creates it, as :func:`put_checkpoint` does (a sync
      graph run may write a new thread's first writes before its first checkpoint's ``put``
      has committed; docs/design.md §19.1).

    Raises:
        InvalidInput: the config names no ``checkpoint_id``; or the thread must be created and
            no ``agent_id`` is known.
        ValueTooLong, SessionNotFound, SessionArchived.
        django.db.OperationalError: on MySQL/MariaDB, over ``max_allowed_packet``
            (:func:`_packet_named`); nothing written.
    """
    if not target.checkpoint_id:
        raise InvalidInput(
            "put_writes needs the checkpoint_id of the checkpoint written to.",
            field="checkpoint_id",
        )
    ns = _bounded(target.checkpoint_ns, NAME_CHARS, "checkpoint_ns")
    checkpoint_id = _bounded(target.checkpoint_id, ID_CHARS, "checkpoint_id")
    _bounded(task_id, NAME_CHARS, "task_id")
    _bounded(task_path, None, "task_path")
    by_idx: dict[int, tuple[int, str, str, bytes | None]] = {}
    replace = True
    for position, (channel, value) in enumerate(writes):
        kind, blob = serde.dumps_typed(value)
        _bounded(kind, TYPE_CHARS, "type")
        idx = WRITES_IDX_MAP.get(channel, position)
        replace = replace and channel in WRITES_IDX_MAP
        by_idx[idx] = (idx, _bounded(channel, NAME_CHARS, "channel"), kind, blob)
    if not by_idx:
        return
    rows = list(by_idx.values())
    alias = routing.db_for_write(Session)
    # On PostgreSQL one statement, when the session is visible; when not (a new thread's, or
    # another tenant's, agent's or an expired one), the ORM below creates it or refuses.
    if _pg.serves(alias) and _pg_writes.put_writes(
        alias,
        canonical=target.scope.canonical,
        agent_id=target.agent_id,
        session_id=target.session_id,
        key=(ns, checkpoint_id, task_id, task_path),
        rows=rows,
        replace=replace,
    ):
        return
    size = sum(len(blob) for *_, blob in rows if blob is not None)
    with _packet_named(alias, size), transaction.atomic(using=alias):
        # A sync graph run writes its first tasks' writes from LangGraph's worker threads
        # while the put of the checkpoint they follow, which creates a new thread's session,
        # may not have committed yet: the first of the two creates it, the other gets it.
        # Unlocked, as the PostgreSQL statement reads it: the writes do not change the row.
        session = _live_session(target, alias, lock=False)
        key = {"session": session, "checkpoint_ns": ns, "checkpoint_id": checkpoint_id}
        stored = CheckpointWrite.objects.using(alias).filter(task_id=task_id, **key)
        if replace:
            stored.filter(idx__in=[idx for idx, *_ in rows]).delete()
        taken = set(stored.values_list("idx", flat=True))
        CheckpointWrite.objects.using(alias).bulk_create(
            [
                CheckpointWrite(
                    task_id=task_id,
                    idx=idx,
                    channel=channel,
                    type=kind,
                    blob=blob,
                    task_path=task_path,
                    **key,
                )
                for idx, channel, kind, blob in rows
                if idx not in taken
            ],
            ignore_conflicts=True,
        )


def list_tuples(
    serde: SerializerProtocol,
    scope: Scope,
    agent_id: str | None,
    *,
    thread_id: str | uuid.UUID | None,
    checkpoint_ns: str | None,
    checkpoint_id: str | None,
    filter: Mapping[str, Any] | None,
    before: str | None,
    limit: int | None,
) -> list[CheckpointTuple]:
    """Checkpoint tuples newest first (by checkpoint id), as ``BaseCheckpointSaver.list`` and
    ``get_tuple`` describe them, of one thread or of every thread at or beneath ``scope``.

    Returns:
        ``[]`` for a thread outside ``scope`` (or of another agent) as for a missing one.
    """
    if limit is not None and limit <= 0:
        return []
    if before is not None:
        before = _bounded(before, ID_CHARS, "before")
    alias = routing.db_for_read(Checkpoint, scope=scope)
    if thread_id is not None and not filter and _pg_reads.serves(alias):
        # one statement on PostgreSQL (two when a checkpoint names values it did not read)
        return _pg_reads.read_tuples(
            serde,
            alias,
            scope,
            agent_id,
            session_id=threads.thread_uuid(thread_id),
            checkpoint_ns=(
                None
                if checkpoint_ns is None
                else _bounded(checkpoint_ns, NAME_CHARS, "checkpoint_ns")
            ),
            checkpoint_id=(
                None
                if checkpoint_id is None
                else _bounded(checkpoint_id, ID_CHARS, "checkpoint_id")
            ),
            before=before,
            limit=limit,
        )
    rows = Checkpoint.objects.using(alias).filter(
        scope_q(scope, field="session__scope"), not_expired_q(prefix="session__")
    )
    if agent_id is not None:
        rows = rows.filter(session__agent_id=agent_id)
    if thread_id is not None:
        rows = rows.filter(session_id=threads.thread_uuid(thread_id))
    if checkpoint_ns is not None:
        rows = rows.filter(checkpoint_ns=_bounded(checkpoint_ns, NAME_CHARS, "checkpoint_ns"))
    if checkpoint_id is not None:
        rows = rows.filter(checkpoint_id=_bounded(checkpoint_id, ID_CHARS, "checkpoint_id"))
    if before is not None:
        rows = rows.filter(checkpoint_id__lt=before)
    for number, (key, value) in enumerate((filter or {}).items()):
        name = f"_filter_{number}"
        rows = rows.alias(**{name: KeyTransform(key, "metadata")}).filter(**{name: value})
    rows = rows.order_by("-checkpoint_id", "session_id", "checkpoint_ns")
    page = list(rows[:limit] if limit is not None else rows)
    if not page:
        return []
    return _tuples(serde, alias, page)


def _tuples(serde: SerializerProtocol, alias: str, page: list[Checkpoint]) -> list[CheckpointTuple]:
    """Build tuples for ``page``: one query for its pending writes, and one for the channel
    values of every checkpoint in it (one per ``_BLOB_CHUNK`` distinct channel versions), so a
    thread's ``list`` costs the same few statements whatever its length."""
    writes: dict[tuple[Any, str, str], list[CheckpointWrite]] = {}
    wanted = Q()
    for row in page:
        wanted |= Q(
            session_id=row.session_id,
            checkpoint_ns=row.checkpoint_ns,
            checkpoint_id=row.checkpoint_id,
        )
    for write in CheckpointWrite.objects.using(alias).filter(wanted).order_by("task_id", "idx"):
        writes.setdefault((write.session_id, write.checkpoint_ns, write.checkpoint_id), []).append(
            write
        )
    checkpoints = [_loads(serde, row.type, row.checkpoint) for row in page]
    blobs = _blobs(alias, page, checkpoints)
    out = []
    for row, checkpoint in zip(page, checkpoints, strict=True):
        checkpoint["channel_values"] = {
            channel: _loads(serde, blob.type, blob.blob)
            for channel, version in (checkpoint.get("channel_versions") or {}).items()
            if (blob := blobs.get((row.session_id, row.checkpoint_ns, channel, str(version))))
            is not None
            and blob.type != "empty"
        }
        thread_id = str(row.session_id)
        pending = sorted(
            writes.get((row.session_id, row.checkpoint_ns, row.checkpoint_id), []),
            key=lambda w: writes_sort_key(w.task_path, w.task_id, w.idx),
        )
        out.append(
            CheckpointTuple(
                config=_config(thread_id, row.checkpoint_ns, row.checkpoint_id),  # type: ignore[arg-type]
                checkpoint=checkpoint,
                metadata=row.metadata,
                parent_config=(
                    _config(thread_id, row.checkpoint_ns, row.parent_checkpoint_id)  # type: ignore[arg-type]
                    if row.parent_checkpoint_id
                    else None
                ),
                pending_writes=[
                    (w.task_id, w.channel, _loads(serde, w.type, w.blob)) for w in pending
                ],
            )
        )
    return out


#: Distinct channel versions read per blob query of :func:`_blobs`.
_BLOB_CHUNK = 500


def _blobs(
    alias: str, page: list[Checkpoint], checkpoints: list[Any]
) -> dict[tuple[Any, str, str, str], CheckpointBlob]:
    """The blob rows the checkpoints of ``page`` name (``checkpoints``: their decoded bodies),
    by ``(session_id, checkpoint_ns, channel, version)``; each distinct one read once."""
    keys = {
        (row.session_id, row.checkpoint_ns, channel, str(version))
        for row, checkpoint in zip(page, checkpoints, strict=True)
        for channel, version in (checkpoint.get("channel_versions") or {}).items()
    }
    ordered = sorted(keys, key=lambda key: (str(key[0]), key[1], key[2], key[3]))
    found: dict[tuple[Any, str, str, str], CheckpointBlob] = {}
    for start in range(0, len(ordered), _BLOB_CHUNK):
        wanted = Q()
        for session_id, ns, channel, version in ordered[start : start + _BLOB_CHUNK]:
            wanted |= Q(session_id=session_id, checkpoint_ns=ns, channel=channel, version=version)
        for blob in CheckpointBlob.objects.using(alias).filter(wanted):
            found[(blob.session_id, blob.checkpoint_ns, blob.channel, blob.version)] = blob
    return found


def delete_thread(scope: Scope, agent_id: str | None, thread_id: str) -> None:
    """Delete the thread's session (and with it its checkpoints, blobs, writes and messages);
    nothing when it is missing, outside ``scope`` or another agent's."""
    from ... import services

    try:
        pk = threads.thread_uuid(thread_id)
        mirror.forget(pk)
        services.get_session(scope=scope, session_id=pk, agent_id=agent_id)
        services.delete_session(scope=scope, session_id=pk)
    except (SessionNotFound, InvalidInput):
        return
