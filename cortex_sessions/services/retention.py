"""The expiry sweep and legal hold (docs/design.md §18.1): :func:`expire_sessions` deletes the
sessions whose ``expires_at`` has passed and applies the ``RETENTION`` policies, in bounded
batches that several workers may run at once; :func:`set_retention` sets one session's legal
hold and ``expires_at``.

Every batch is one short transaction: it locks up to ``batch_size`` due sessions with
``SELECT … FOR UPDATE SKIP LOCKED`` (PostgreSQL, MariaDB 10.6+, MySQL 8), so concurrent
workers never wait for each other nor take the same session, and acts on exactly the rows it
locked (no deadlock: a batch waits for no lock another batch holds). A killed run loses at most
its open batch, which rolls back; the next run starts over on what is still due. On SQLite
(one writer at a time) the batches run the same way without ``SKIP LOCKED``.
"""

from __future__ import annotations

import random
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, TypeVar

from django.db import OperationalError, connections
from django.db.models import Q
from django.utils import timezone

from .. import signals
from ..conf import app_settings
from ..exceptions import InvalidInput, SessionNotFound
from ..faults import is_deadlock
from ..models import Message, Session
from ..retention import Policy, parse_policies
from ..scope import Scope, scope_q
from ._common import (
    DEADLOCK_BACKOFF_SECONDS,
    UNCHANGED,
    Unchanged,
    _check_expires_at,
    _check_int,
    _db_for_write,
    _in_callers_transaction,
    _send_on_commit,
    _session_id,
    _write_transaction,
)

__all__ = ["DEFAULT_BATCH_SIZE", "ExpiryReport", "expire_sessions", "set_retention"]

_T = TypeVar("_T")

#: Sessions one batch of :func:`expire_sessions` locks and acts on, by default.
DEFAULT_BATCH_SIZE = 500


@dataclass
class ExpiryReport:
    """What :func:`expire_sessions` did (or, with ``dry_run``, would do).

    Attributes:
        expired: sessions deleted because their ``expires_at`` had passed.
        deleted: sessions deleted by a ``delete`` policy.
        archived: sessions archived by an ``archive`` policy.
        messages: messages deleted with those sessions.
        held: due sessions on legal hold, skipped (never deleted), counted once per step
            that found them due (the expired step, each ``delete`` policy).
        batches: transactions committed.
        lines: one line per batch and per step, for the command to print.
    """

    expired: int = 0
    deleted: int = 0
    archived: int = 0
    messages: int = 0
    held: int = 0
    batches: int = 0
    lines: list[str] = field(default_factory=list)


def expire_sessions(
    *,
    batch_size: int = DEFAULT_BATCH_SIZE,
    dry_run: bool = False,
    now: datetime | None = None,
    policies: list[dict[str, Any]] | None = None,
    progress: Callable[[str], None] | None = None,
) -> ExpiryReport:
    """Delete the expired sessions and apply the retention policies (docs/design.md §18.1).

    First every session whose ``expires_at`` is at or before ``now`` is deleted with its
    messages (and the rows that cascade from it: its import record, its ADK row); then each
    policy in order: ``delete`` deletes the sessions at or beneath its scope (of its agent)
    whose ``updated_at`` is ``after`` seconds or more before ``now``, archived or not;
    ``archive`` archives the live ones (``archived_at`` set, ``is_default`` false, as
    ``archive_session`` does). A session on legal hold is never deleted: it is skipped and
    counted in ``held``. An ``archive`` policy archives held sessions too — archiving
    deletes nothing. ``session_deleted`` is sent for every deleted session after its batch
    commits.

    Safe to run from several processes at once (each batch locks its rows with ``SKIP
    LOCKED``, so no session is handled twice and no worker waits for another), and to kill:
    the batches committed stay done, the open one rolls back, and a rerun finishes the rest.

    Args:
        batch_size: sessions per batch (per transaction), ``>= 1``.
        dry_run: count what is due (``held`` included) without writing anything.
        now: the time to expire against (an aware datetime); default the current time, read
            once at the start, so a run ends even while sessions keep expiring.
        policies: the policies to apply; default the ``RETENTION`` setting.
        progress: called with each line of :attr:`ExpiryReport.lines` as it is added (the
            command prints them as it goes).

    Returns:
        :class:`ExpiryReport`: this run's exact counts.

    Raises:
        InvalidFilter: ``batch_size`` is not an integer ``>= 1``.
        PolicyError: a policy is malformed (the system checks ``E023``/``E024`` report it
            first).
    """
    _check_int(batch_size, field="batch_size", minimum=1)
    checked = parse_policies(app_settings.RETENTION if policies is None else policies)
    now = now or timezone.now()
    report = ExpiryReport()
    using = _db_for_write()

    def say(line: str) -> None:
        report.lines.append(line)
        if progress is not None:
            progress(line)

    expired = Q(expires_at__lte=now)
    _delete_due(using, expired, "expired", report, batch_size, dry_run, say)
    for policy in checked:
        due = _policy_q(policy, now)
        if policy.action == "delete":
            _delete_due(using, due, policy.describe(), report, batch_size, dry_run, say)
        else:
            _archive_due(using, due, policy.describe(), report, batch_size, dry_run, now, say)
    return report


def _policy_q(policy: Policy, now: datetime) -> Q:
    condition = scope_q(policy.scope) & Q(updated_at__lte=policy.cutoff(now))
    if policy.agent_id is not None:
        condition &= Q(agent_id=policy.agent_id)
    return condition


#: How many times a batch the database rolled back to break a deadlock runs again.
BATCH_ATTEMPTS = 10


def _retried(using: str, batch: Callable[[], _T]) -> _T:
    """``batch()`` — one batch in its own transaction — run again when the database rolled it
    back to break a deadlock (InnoDB locks the message rows a delete examines, so two workers'
    deletes can meet; nothing of the batch was written), up to :data:`BATCH_ATTEMPTS` times.
    Inside a caller's transaction a deadlock propagates (it rolled the caller's work back)."""
    outermost = not _in_callers_transaction(using)
    for attempt in range(1, BATCH_ATTEMPTS + 1):
        try:
            return batch()
        except OperationalError as exc:
            if not outermost or not is_deadlock(exc) or attempt == BATCH_ATTEMPTS:
                raise
            time.sleep(random.uniform(0, DEADLOCK_BACKOFF_SECONDS * attempt))
    raise AssertionError("unreachable")  # pragma: no cover


def _locked_batch(using: str, due: Q, batch_size: int) -> list[tuple[uuid.UUID, str, str]]:
    """Up to ``batch_size`` due sessions as ``(id, agent_id, scope)``, locked until the
    transaction ends; rows another transaction holds are skipped where the database can."""
    queryset = Session.objects.using(using).filter(due).order_by()
    if connections[using].features.has_select_for_update_skip_locked:
        queryset = queryset.select_for_update(skip_locked=True)
    else:
        queryset = queryset.select_for_update()
    return list(queryset.values_list("pk", "agent_id", "scope")[:batch_size])


def _delete_due(
    using: str,
    due: Q,
    what: str,
    report: ExpiryReport,
    batch_size: int,
    dry_run: bool,
    say: Callable[[str], None],
) -> None:
    held = Session.objects.using(using).filter(due, legal_hold=True).count()
    deletable = due & Q(legal_hold=False)
    if dry_run:
        count = Session.objects.using(using).filter(deletable).count()
        say(f"{what}: would delete {count} sessions; {held} on legal hold kept")
        _count(report, what, count)
        report.held += held
        return
    total = messages = 0

    def batch() -> tuple[list[uuid.UUID], int]:
        with _write_transaction(using):
            rows = _locked_batch(using, deletable, batch_size)
            ids = [pk for pk, _, _ in rows]
            if not ids:
                return ids, 0
            deleted_messages, _ = Message.objects.using(using).filter(session_id__in=ids).delete()
            Session.objects.using(using).filter(pk__in=ids).delete()
            for pk, agent_id, scope in rows:
                _send_on_commit(
                    signals.session_deleted, session_id=pk, agent_id=agent_id, scope=scope
                )
        return ids, deleted_messages

    while True:
        ids, deleted_messages = _retried(using, batch)
        if not ids:
            break
        # committed: only now is the batch reported
        total += len(ids)
        messages += deleted_messages
        report.batches += 1
        say(
            f"{what}: batch {report.batches}: deleted {len(ids)} sessions, {deleted_messages} messages"
        )
    _count(report, what, total)
    report.messages += messages
    report.held += held
    say(f"{what}: deleted {total} sessions, {messages} messages; {held} on legal hold kept")


def _count(report: ExpiryReport, what: str, count: int) -> None:
    if what == "expired":
        report.expired += count
    else:
        report.deleted += count


def _archive_due(
    using: str,
    due: Q,
    what: str,
    report: ExpiryReport,
    batch_size: int,
    dry_run: bool,
    now: datetime,
    say: Callable[[str], None],
) -> None:
    live = due & Q(archived_at__isnull=True)
    if dry_run:
        count = Session.objects.using(using).filter(live).count()
        say(f"{what}: would archive {count} sessions")
        report.archived += count
        return
    total = 0

    def batch() -> list[uuid.UUID]:
        with _write_transaction(using):
            ids = [pk for pk, _, _ in _locked_batch(using, live, batch_size)]
            if ids:
                Session.objects.using(using).filter(pk__in=ids).update(
                    archived_at=now, is_default=False, updated_at=timezone.now()
                )
        return ids

    while True:
        ids = _retried(using, batch)
        if not ids:
            break
        total += len(ids)
        report.batches += 1
        say(f"{what}: batch {report.batches}: archived {len(ids)} sessions")
    report.archived += total
    say(f"{what}: archived {total} sessions")


def set_retention(
    *,
    scope: Scope | str,
    session_id: uuid.UUID | str,
    legal_hold: bool | Unchanged = UNCHANGED,
    expires_at: datetime | str | Unchanged | None = UNCHANGED,
) -> Session:
    """The host's retention controls of one session, expired or not (docs/design.md §18.1):
    put it on legal hold or take it off, and set or clear its ``expires_at``.

    A held session is never deleted — not by ``delete_session``, the admin, the expiry sweep
    nor erasure — and its messages are frozen (message deletes, clear, undo and pop raise
    ``LegalHold``). Only the host calls this (the admin, host code): the REST API's client
    cannot set ``legal_hold``. Unlike every read, this finds a session whose ``expires_at``
    has passed and the sweep has not deleted yet, so an operator can still hold it or clear
    its ``expires_at``.

    Args:
        legal_hold: the new hold; left out (``UNCHANGED``), not written.
        expires_at: an aware ``datetime``, an ISO 8601 string with offset, or ``None`` for
            never; left out, not written.

    Returns:
        The session as stored; ``updated_at`` does not move (no edit of the thread).

    Raises:
        NoScope, InvalidScope, SessionNotFound.
        InvalidInput: a bad ``expires_at``, or a ``legal_hold`` that is not a ``bool``
            (nothing written).
    """
    changes: dict[str, Any] = {}
    if legal_hold is not UNCHANGED:
        if not isinstance(legal_hold, bool):  # "false" or None would decide a hold by accident
            raise InvalidInput("legal_hold must be True or False.", field="legal_hold")
        changes["legal_hold"] = legal_hold
    if expires_at is not UNCHANGED:
        changes["expires_at"] = _check_expires_at(expires_at)
    using = _db_for_write()
    with _write_transaction(using):
        try:
            session = (
                Session.objects.using(using)
                .within(scope, expired=True)
                .select_for_update()
                .get(pk=_session_id(session_id))
            )
        except Session.DoesNotExist:
            raise SessionNotFound() from None
        if changes:
            Session.objects.using(using).filter(pk=session.pk).update(**changes)
            for name, value in changes.items():
                setattr(session, name, value)
    return session
