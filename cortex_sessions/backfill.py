"""The default-session backfill of docs/design.md §4, shared by migration 0003 and a management command.

It takes the models as arguments so the migration can pass its historical models. Memory is
bounded by ``batch_size``: pairs are read with keyset pagination and messages are attached
``batch_size`` at a time, each batch in its own transaction that also moves the counters. A
pair's default has its counters set from its rows before the first batch, and every batch
moves ``message_count`` and ``last_message`` with the rows it attaches, so the counters are
exact at every commit and an interrupted run can simply be run again.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.db import IntegrityError, connections, transaction
from django.db.models import Count, F, Min, Q
from django.utils import timezone

from .counters import newest_conversation_text

__all__ = [
    "BACKFILL_MARKER",
    "DEFAULT_BATCH_SIZE",
    "BackfillReport",
    "backfill_default_sessions",
    "reverse_backfill",
]

#: ``backfilled_by`` of the sessions the backfill creates: the name of migration 0003.
BACKFILL_MARKER = "0003_backfill_default_sessions"
DEFAULT_BATCH_SIZE = 1000
DEFAULT_TITLE = "Default"
#: Databases where one ``UPDATE`` numbering the batch with ``row_number()`` attaches it:
#: ``UPDATE … FROM`` on PostgreSQL and SQLite, ``UPDATE … JOIN`` on MySQL and MariaDB.
SET_BASED_VENDORS = frozenset({"postgresql", "sqlite", "mysql"})


@dataclass
class BackfillReport:
    """What a backfill did (or, in a dry run, would do)."""

    pairs: int = 0
    sessions_created: int = 0
    messages_attached: int = 0
    batches: int = 0


def _legacy_pairs(messages: Any, batch_size: int) -> Any:
    """Yield lists of at most ``batch_size`` ``(agent_id, scope)`` pairs with legacy rows."""
    last: tuple[str, str] | None = None
    while True:
        pairs = (
            messages.filter(session__isnull=True)
            .values_list("agent_id", "scope")
            .order_by("agent_id", "scope")
            .distinct()
        )
        if last is not None:
            pairs = pairs.filter(Q(agent_id__gt=last[0]) | Q(agent_id=last[0], scope__gt=last[1]))
        page = list(pairs[:batch_size])
        if not page:
            return
        yield page
        last = page[-1]


def _default_session(
    sessions: Any, messages: Any, agent_id: str, scope: str, marker: str
) -> tuple[Any, bool]:
    """The default session of the pair, created (marked with ``marker``) when there is none.

    A created session is dated by the pair's oldest legacy row.
    """
    existing = sessions.filter(agent_id=agent_id, scope=scope, is_default=True).first()
    if existing is not None:
        return existing, False
    first = messages.filter(session__isnull=True, agent_id=agent_id, scope=scope).aggregate(
        first=Min("created_at")
    )["first"]
    try:
        with transaction.atomic(using=sessions.db):
            return (
                sessions.create(
                    agent_id=agent_id,
                    scope=scope,
                    title=DEFAULT_TITLE,
                    is_default=True,
                    backfilled_by=marker,
                    created_at=first or timezone.now(),
                ),
                True,
            )
    except IntegrityError:
        # A run resolved the default meanwhile: the constraint decided, use the winner.
        return sessions.get(agent_id=agent_id, scope=scope, is_default=True), False


def _attach_set_based(messages: Any, session: Any, batch_size: int) -> int:
    """Attach the next ``batch_size`` legacy rows in one ``UPDATE`` that numbers them with
    ``row_number()`` in id order; returns how many. PostgreSQL, SQLite ≥ 3.33 (``UPDATE …
    FROM``), MySQL 8 and MariaDB 10.11 (``UPDATE … JOIN``, the numbered batch a derived table,
    which its ``LIMIT`` keeps materialized)."""
    model = messages.model
    meta = model._meta
    connection = connections[messages.db]
    quote = connection.ops.quote_name
    table = quote(meta.db_table)
    pk, session_col, seq, agent_col, scope_col = (
        quote(meta.get_field(name).column) for name in ("id", "session", "seq", "agent_id", "scope")
    )
    batch = (
        f"(SELECT {pk} AS id, row_number() OVER (ORDER BY {pk}) AS rn FROM {table} "
        f"WHERE {session_col} IS NULL AND {agent_col} = %s AND {scope_col} = %s "
        f"ORDER BY {pk} LIMIT %s) AS batch"
    )
    session_value = meta.get_field("session").get_db_prep_value(session.pk, connection)
    batch_params = [session.agent_id, session.scope, batch_size]
    set_params = [session_value, session.last_seq]
    if connection.vendor == "mysql":
        sql = (
            f"UPDATE {table} JOIN {batch} ON {table}.{pk} = batch.id "
            f"SET {table}.{session_col} = %s, {table}.{seq} = %s + batch.rn"
        )
        params = batch_params + set_params
    else:
        sql = (
            f"UPDATE {table} SET {session_col} = %s, {seq} = %s + batch.rn "
            f"FROM {batch} WHERE {table}.{pk} = batch.id"
        )
        params = set_params + batch_params
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return int(cursor.rowcount)


def _attach_row_by_row(messages: Any, session: Any, batch_size: int) -> int:
    """Attach the next ``batch_size`` legacy rows with ``bulk_update`` (any database)."""
    ids = list(
        messages.filter(session__isnull=True, agent_id=session.agent_id, scope=session.scope)
        .order_by("id")
        .values_list("id", flat=True)[:batch_size]
    )
    rows = [
        messages.model(pk=pk, session_id=session.pk, seq=session.last_seq + offset)
        for offset, pk in enumerate(ids, start=1)
    ]
    messages.bulk_update(rows, ["session", "seq"], batch_size=batch_size)
    return len(ids)


def _attach_batch(sessions: Any, messages: Any, session_pk: Any, batch_size: int) -> int:
    """Attach the next ``batch_size`` legacy rows of the session's pair; returns how many.

    The rows are numbered in id order after the session's ``last_seq``; on PostgreSQL, SQLite,
    MySQL and MariaDB one set-based statement does it, with no per-row work in Python.
    """
    using = sessions.db
    with transaction.atomic(using=using):
        session = sessions.select_for_update().get(pk=session_pk)
        if connections[using].vendor in SET_BASED_VENDORS:
            attached = _attach_set_based(messages, session, batch_size)
        else:
            attached = _attach_row_by_row(messages, session, batch_size)
        if not attached:
            return 0
        changes: dict[str, Any] = {
            "message_count": F("message_count") + attached,
            "last_seq": session.last_seq + attached,
            "updated_at": timezone.now(),
        }
        # The batch's rows are now the session's newest: a conversation message among them
        # is the new last_message; without one, the previous value stays right.
        newest = newest_conversation_text(
            messages.filter(session_id=session.pk, seq__gt=session.last_seq)
        )
        if newest:
            changes["last_message"] = newest
        sessions.filter(pk=session.pk).update(**changes)
    return attached


def _settle_counters(sessions: Any, messages: Any, session_pk: Any) -> None:
    """Set ``message_count``/``last_message`` from the rows (also on a pre-existing default).

    Run before a pair's first batch, so the batches, which move the counters incrementally,
    start from exact values.
    """
    with transaction.atomic(using=sessions.db):
        session = sessions.select_for_update().get(pk=session_pk)
        rows = messages.filter(session_id=session.pk)
        sessions.filter(pk=session.pk).update(
            message_count=rows.aggregate(count=Count("pk"))["count"],
            last_message=newest_conversation_text(rows),
        )


def backfill_default_sessions(
    *,
    session_model: Any,
    message_model: Any,
    using: str = "default",
    batch_size: int = DEFAULT_BATCH_SIZE,
    dry_run: bool = False,
    marker: str = BACKFILL_MARKER,
    progress: Callable[[str], None] | None = None,
) -> BackfillReport:
    """Give every ``(agent_id, scope)`` with unsessioned messages its default session (§4).

    For each pair: take the existing default or create one (title ``"Default"``,
    ``is_default``, ``backfilled_by=marker``), attach the legacy messages in their original
    (id) order with ``seq`` continuing after the session's ``last_seq``, and set
    ``message_count``/``last_message`` from the rows. Idempotent: a second run finds nothing.

    Args:
        session_model, message_model: the Session and Message models (historical ones in a
            migration).
        using: database alias.
        batch_size: pairs per page and messages per transaction; bounds memory and queries.
        dry_run: count what would be done and write nothing.
        marker: value of ``backfilled_by`` on created sessions.
        progress: called with a one-line message after each batch.

    Returns:
        A :class:`BackfillReport`.

    Raises:
        ValueError: ``batch_size`` is below 1.
    """
    if batch_size < 1:
        raise ValueError("batch_size must be at least 1.")
    sessions = session_model._default_manager.using(using)
    messages = message_model._default_manager.using(using)
    report = BackfillReport()
    say = progress or (lambda line: None)
    for pairs in _legacy_pairs(messages, batch_size):
        for agent_id, scope in pairs:
            report.pairs += 1
            if dry_run:
                exists = sessions.filter(agent_id=agent_id, scope=scope, is_default=True).exists()
                report.sessions_created += 0 if exists else 1
                report.messages_attached += messages.filter(
                    session__isnull=True, agent_id=agent_id, scope=scope
                ).count()
                continue
            session, created = _default_session(sessions, messages, agent_id, scope, marker)
            report.sessions_created += int(created)
            _settle_counters(sessions, messages, session.pk)
            attached = batch_size
            while attached == batch_size:  # a short batch was the pair's last
                attached = _attach_batch(sessions, messages, session.pk, batch_size)
                if not attached:
                    break
                report.messages_attached += attached
                report.batches += 1
                say(
                    f"{report.messages_attached} messages attached "
                    f"({report.pairs} agent/scope pairs, {report.sessions_created} sessions "
                    "created)"
                )
    return report


def reverse_backfill(
    *, session_model: Any, message_model: Any, using: str = "default", marker: str = BACKFILL_MARKER
) -> int:
    """Undo the backfill: detach the messages of sessions it created and delete those sessions.

    Organic sessions (any other ``backfilled_by``) are untouched and no message is deleted:
    detached messages become legacy rows again (``session`` and ``seq`` null) (docs/design.md §4).

    Returns:
        How many sessions were deleted.
    """
    sessions = session_model._default_manager.using(using)
    messages = message_model._default_manager.using(using)
    deleted = 0
    while page := list(
        sessions.filter(backfilled_by=marker).order_by("pk").values_list("pk", flat=True)[:1000]
    ):
        for session_pk in page:
            with transaction.atomic(using=using):
                messages.filter(session_id=session_pk).update(session=None, seq=None)
                sessions.filter(pk=session_pk).delete()
            deleted += 1
    return deleted
