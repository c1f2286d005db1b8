"""Erasure by scope: delete every session at or beneath a scope and every row tied to it
(docs/design.md §18.2).

:func:`erase_scope` records an :class:`~cortex_sessions.models.Erasure` and works through the
scope in bounded transactions, each deleting at most ``batch_size`` rows of one table (or
``batch_size`` sessions) and adding what it deleted to the record's ``counts`` in the same
transaction. No lock is held for the whole scope, the record is exact at every commit, and a run
that is killed (a worker restart, SIGKILL) leaves a ``running`` record that
:func:`resume_erasure` finishes: what was deleted is gone and counted, what was not is found
again. The order of the work:

1. Sessions, ``batch_size`` at a time (each batch locked in id order), skipping those on legal hold: their messages
   first, ``batch_size`` rows per transaction with the batch's sessions locked, then the
   sessions themselves in one transaction with every row that cascades from them (import
   records, the ADK integration's ``AdkSession`` rows, any host model with a ``CASCADE`` foreign
   key to ``Session``) and the rows of :ref:`participants <erasure-participants>` tied to
   those sessions.
2. Legacy messages stored at the scope without a session (docs/design.md §4).
3. ``Idempotency-Key`` records at or beneath the scope (the recorded answers hold content).
4. Each participant's rows keyed by scope rather than by session (ADK app and user state).

Sessions created at the scope while an erasure runs are erased too, up to the moment it
finishes; a session put on legal hold before its batch is locked is kept. Nothing outside the
scope is touched: every statement carries the scope predicate or the ids of sessions read
with it.

.. _erasure-participants:

Integrations join through their ``AppConfig`` (the registry is the installed apps): an app
config may define either or both of

- ``cortex_erase_sessions(session_ids, *, using, dry_run) -> Mapping[str, int]``: delete (or,
  with ``dry_run``, count) the app's rows tied to these sessions that no ``CASCADE`` foreign key
  reaches. Called inside the transaction that deletes the sessions, before they go.
- ``cortex_erase_scope(scope, *, held_scopes, using, dry_run) -> Mapping[str, int]``: delete
  (or count) the app's rows keyed by ``scope`` (a canonical string) or beneath it, keeping
  those that serve a session on legal hold (``held_scopes``: the canonical scopes of the held
  sessions at or beneath ``scope``). Called once, in its own transaction, at the end.

Both return rows per model label (``"app_label.Model"``) and must touch nothing else.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Protocol

from django.apps import apps
from django.db import router, transaction
from django.db.models import Model, Q
from django.db.models.deletion import CASCADE
from django.utils import timezone

from ..exceptions import ErasureNotFound, InvalidInput
from ..models import Erasure, IdempotencyKey, Message, Session
from ..scope import canonical_of, scope_q

__all__ = [
    "ERASURE_BATCH",
    "ErasureParticipant",
    "erase_scope",
    "erasure_participants",
    "get_erasure",
    "resume_erasure",
    "unfinished_erasure",
]

#: Rows (sessions, messages, records) deleted per transaction unless told otherwise.
ERASURE_BATCH = 500
#: Largest ``batch_size`` accepted: one transaction stays short and its ``IN`` list small.
MAX_ERASURE_BATCH = 10_000

Counts = dict[str, int]
OnBatch = Callable[[Erasure], None]


class ErasureParticipant(Protocol):
    """What an ``AppConfig`` defines to have its rows erased with a scope (both optional)."""

    def cortex_erase_sessions(
        self, session_ids: Sequence[uuid.UUID], *, using: str, dry_run: bool
    ) -> Mapping[str, int]: ...

    def cortex_erase_scope(
        self, scope: str, *, held_scopes: frozenset[str], using: str, dry_run: bool
    ) -> Mapping[str, int]: ...


def erasure_participants(hook: str) -> list[Callable[..., Mapping[str, int]]]:
    """The installed app configs' ``hook`` methods (``cortex_erase_sessions`` or
    ``cortex_erase_scope``), in ``INSTALLED_APPS`` order."""
    found = (getattr(config, hook, None) for config in apps.get_app_configs())
    return [method for method in found if callable(method)]


def _held() -> Q:
    """Sessions on legal hold (docs/design.md §18.1): erasure never deletes them."""
    return Q(legal_hold=True)


def _add(total: Counts, more: Mapping[str, int]) -> None:
    for label, count in more.items():
        if count:
            total[label] = total.get(label, 0) + count


def _check_batch_size(batch_size: int) -> None:
    if (
        not isinstance(batch_size, int)
        or isinstance(batch_size, bool)
        or not 1 <= batch_size <= MAX_ERASURE_BATCH
    ):
        raise InvalidInput(
            f"batch_size must be an integer from 1 to {MAX_ERASURE_BATCH}.", field="batch_size"
        )


# -- counting (dry run) ---------------------------------------------------------------------------


def _cascades() -> list[tuple[type[Model], str]]:
    """``(model, field name)`` of every foreign key to ``Session`` that cascades."""
    found = []
    for relation in Session._meta.related_objects:
        if relation.on_delete is CASCADE:
            found.append((relation.related_model, relation.field.name))
    return found


def _held_scopes(canonical: str, using: str) -> frozenset[str]:
    held = Session.objects.using(using).filter(scope_q(canonical)).filter(_held())
    return frozenset(held.values_list("scope", flat=True).distinct())


def _dry_run(canonical: str, using: str) -> Counts:
    counts: Counts = {}
    sessions = Session.objects.using(using).filter(scope_q(canonical)).exclude(_held())
    _add(counts, {Session._meta.label: sessions.count()})
    ids = sessions.values("pk")
    for model, name in _cascades():
        tied = model._default_manager.using(using).filter(**{f"{name}__in": ids})
        _add(counts, {model._meta.label: tied.count()})
    legacy = Message.objects.using(using).filter(scope_q(canonical), session__isnull=True)
    _add(counts, {Message._meta.label: legacy.count()})
    keys = IdempotencyKey.objects.using(using).filter(scope_q(canonical))
    _add(counts, {IdempotencyKey._meta.label: keys.count()})
    hooks = erasure_participants("cortex_erase_sessions")
    after: uuid.UUID | None = None
    while hooks:  # the ids in bounded pieces, by keyset
        page = sessions if after is None else sessions.filter(pk__gt=after)
        piece = list(page.order_by("pk").values_list("pk", flat=True)[:ERASURE_BATCH])
        for hook in hooks:
            _add(counts, hook(piece, using=using, dry_run=True))
        if len(piece) < ERASURE_BATCH:
            break
        after = piece[-1]
    held_scopes = _held_scopes(canonical, using)
    for hook in erasure_participants("cortex_erase_scope"):
        _add(counts, hook(canonical, held_scopes=held_scopes, using=using, dry_run=True))
    return counts


# -- the work -------------------------------------------------------------------------------------


def _record(erasure: Erasure, using: str, deleted: Mapping[str, int]) -> None:
    """Add ``deleted`` to the record's counts, in the caller's transaction (row locked)."""
    record = Erasure.objects.using(using).select_for_update().get(pk=erasure.pk)
    counts = dict(record.counts)
    _add(counts, deleted)
    Erasure.objects.using(using).filter(pk=erasure.pk).update(
        counts=counts, status=Erasure.Status.RUNNING
    )
    erasure.counts = counts
    erasure.status = Erasure.Status.RUNNING


def _lock_sessions(pks: Iterable[uuid.UUID], using: str) -> list[uuid.UUID]:
    """Lock the sessions of ``pks`` that still exist and are not held; their ids."""
    locked = Session.objects.using(using).select_for_update().filter(pk__in=list(pks))
    return list(locked.exclude(_held()).order_by("pk").values_list("pk", flat=True))


def _delete_messages(erasure: Erasure, pks: list[uuid.UUID], using: str, batch: int) -> None:
    """Delete the messages of sessions ``pks``, ``batch`` rows per transaction."""
    while True:
        with transaction.atomic(using=using):
            live = _lock_sessions(pks, using)
            rows = Message.objects.using(using).filter(session_id__in=live)
            # No ORDER BY: the database stops at the batch, never sorting every message of
            # the sessions (a session may hold millions).
            ids = list(rows.order_by().values_list("pk", flat=True)[:batch])
            if not ids:
                return
            deleted = Message.objects.using(using).filter(pk__in=ids).delete()[1]
            _record(erasure, using, deleted)


def _delete_sessions(erasure: Erasure, pks: list[uuid.UUID], using: str) -> None:
    """Delete sessions ``pks`` (those still there and not held) with what cascades from them and
    the participants' rows tied to them, in one transaction."""
    with transaction.atomic(using=using):
        live = _lock_sessions(pks, using)
        if not live:
            return
        deleted: Counts = {}
        for hook in erasure_participants("cortex_erase_sessions"):
            _add(deleted, hook(live, using=using, dry_run=False))
        _add(deleted, Session.objects.using(using).filter(pk__in=live).delete()[1])
        _record(erasure, using, deleted)


def _delete_in_batches(
    erasure: Erasure, rows: Any, using: str, batch: int, on_batch: OnBatch | None
) -> None:
    """Delete the rows of queryset ``rows`` (no cascades), ``batch`` per transaction."""
    while True:
        with transaction.atomic(using=using):
            ids = list(rows.order_by().values_list("pk", flat=True)[:batch])  # any batch
            if not ids:
                return
            _record(erasure, using, rows.model.objects.using(using).filter(pk__in=ids).delete()[1])
        if on_batch is not None:
            on_batch(erasure)


def _run(erasure: Erasure, using: str, batch: int, on_batch: OnBatch | None) -> Erasure:
    canonical = erasure.scope
    if on_batch is not None:
        on_batch(erasure)
    sessions = Session.objects.using(using).filter(scope_q(canonical)).exclude(_held())
    while True:
        # Until a batch finds nothing: a concurrent erasure of the same scope may have taken
        # rows from under this one's batch, so a short batch does not mean the end.
        # Any batch, read through the scope index without sorting the scope; the batch is
        # locked in id order (_lock_sessions), so concurrent erasures never deadlock.
        pks = list(sessions.order_by().values_list("pk", flat=True)[:batch])
        if not pks:
            break
        _delete_messages(erasure, pks, using, batch)
        _delete_sessions(erasure, pks, using)
        if on_batch is not None:
            on_batch(erasure)
    legacy = Message.objects.using(using).filter(scope_q(canonical), session__isnull=True)
    _delete_in_batches(erasure, legacy, using, batch, on_batch)
    keys = IdempotencyKey.objects.using(using).filter(scope_q(canonical))
    _delete_in_batches(erasure, keys, using, batch, on_batch)
    with transaction.atomic(using=using):
        held_scopes = _held_scopes(canonical, using)
        deleted: Counts = {}
        for hook in erasure_participants("cortex_erase_scope"):
            _add(deleted, hook(canonical, held_scopes=held_scopes, using=using, dry_run=False))
        _record(erasure, using, deleted)
        held = Session.objects.using(using).filter(scope_q(canonical)).filter(_held()).count()
        finished = timezone.now()
        Erasure.objects.using(using).filter(pk=erasure.pk).update(
            status=Erasure.Status.DONE, skipped_held=held, finished_at=finished
        )
    erasure.status, erasure.skipped_held, erasure.finished_at = Erasure.Status.DONE, held, finished
    if on_batch is not None:
        on_batch(erasure)
    return erasure


def erase_scope(
    *,
    scope: str,
    dry_run: bool = False,
    requested_by: str | None = None,
    batch_size: int = ERASURE_BATCH,
    on_batch: OnBatch | None = None,
) -> Erasure:
    """Delete every session at or beneath ``scope`` and every row tied to it (docs/design.md §18.2).

    The work and its guarantees are in the module docstring: bounded transactions, exact
    counts, resumable with :func:`resume_erasure`, sessions on legal hold kept and counted in
    ``skipped_held``, nothing outside the scope touched. Everything runs on the write database
    of ``Session`` (the record too). Inside a caller's transaction the batches are savepoints
    and the caller's commit is the one that counts.

    Args:
        scope: a canonical scope string (or ``Scope``); never empty: there is no "erase
            everything".
        dry_run: only count what would be deleted; nothing is written, not even the record.
        requested_by: who asks (a user's primary key, ``"cli:<name>"``), kept on the record.
        batch_size: rows (or sessions) per transaction, 1–10,000.
        on_batch: called with the record once it is written, after each committed batch and
            once at the end (progress output).

    Returns:
        The :class:`~cortex_sessions.models.Erasure`, ``done``, with ``counts`` per model label
        (``{"cortex_sessions.Session": 3, "cortex_sessions.Message": 41, ...}``; tables with no
        row deleted are absent). With ``dry_run`` an unsaved record whose ``counts`` are what
        would be deleted now and ``skipped_held`` the held sessions.

    Raises:
        NoScope: ``scope`` is missing or empty.
        InvalidScope: ``scope`` is not a canonical scope.
        InvalidInput: ``batch_size`` is out of range, or ``requested_by`` is over 255 characters.
    """
    canonical = canonical_of(scope)
    _check_batch_size(batch_size)
    requester = "" if requested_by is None else str(requested_by)
    if len(requester) > 255:
        raise InvalidInput("requested_by is at most 255 characters.", field="requested_by")
    using = router.db_for_write(Session)
    if dry_run:
        with transaction.atomic(using=using):  # one consistent view of the counts
            counts = _dry_run(canonical, using)
            held = Session.objects.using(using).filter(scope_q(canonical)).filter(_held()).count()
        return Erasure(
            scope=canonical,
            status=Erasure.Status.DONE,
            counts=counts,
            skipped_held=held,
            requested_by=requester,
        )
    erasure = Erasure.objects.using(using).create(scope=canonical, requested_by=requester)
    return _run(erasure, using, batch_size, on_batch)


def resume_erasure(
    *,
    erasure_id: uuid.UUID | str,
    batch_size: int = ERASURE_BATCH,
    on_batch: OnBatch | None = None,
) -> Erasure:
    """Finish an erasure that was interrupted (its record ``pending`` or ``running``).

    Resuming a ``done`` erasure runs it again, deleting what was written at the scope since
    (its counts grow by that); the record keeps one history per scope and request.

    Args:
        erasure_id: the record's id.
        batch_size: rows (or sessions) per transaction, 1–10,000.
        on_batch: as for :func:`erase_scope`.

    Returns:
        The record, ``done``, its counts those of every run together.

    Raises:
        ErasureNotFound: no record has this id (or it is not a UUID).
        InvalidInput: ``batch_size`` is out of range.
    """
    _check_batch_size(batch_size)
    return _run(
        get_erasure(erasure_id=erasure_id), router.db_for_write(Session), batch_size, on_batch
    )


def get_erasure(*, erasure_id: uuid.UUID | str) -> Erasure:
    """The erasure record ``erasure_id``, read from the write database (progress is current).

    Raises:
        ErasureNotFound: no record has this id, or it is not a UUID.
    """
    try:
        pk = erasure_id if isinstance(erasure_id, uuid.UUID) else uuid.UUID(str(erasure_id))
    except ValueError:
        raise ErasureNotFound() from None
    found = Erasure.objects.using(router.db_for_write(Session)).filter(pk=pk).first()
    if found is None:
        raise ErasureNotFound()
    return found


def unfinished_erasure(*, scope: str) -> Erasure | None:
    """The oldest ``pending`` or ``running`` erasure of exactly ``scope``, if any.

    Raises:
        NoScope, InvalidScope: ``scope`` is missing or malformed.
    """
    canonical = canonical_of(scope)
    unfinished = Erasure.objects.using(router.db_for_write(Session)).filter(
        scope=canonical, status__in=[Erasure.Status.PENDING, Erasure.Status.RUNNING]
    )
    return unfinished.order_by("created_at", "pk").first()
