"""Exactly-once creating calls with an ``Idempotency-Key`` (docs/design.md §12.1).

One mechanism serves the service API and the REST API:

- :func:`run_once` runs a write at most once per ``(scope, endpoint, key)``. The key's row is
  claimed — inserted — *first* in the write's transaction, and only when a key is given — so a
  call without a key runs exactly the statements it always did. A concurrent duplicate blocks
  on the key's unique index before running anything until the first transaction ends; if the
  first committed, the duplicate replays the first outcome; if the first rolled back, the
  duplicate goes ahead as the first. Past the database's lock wait timeout the duplicate is
  :class:`IdempotencyKeyInProgress`. A replay with another input is
  :class:`IdempotencyKeyReused`.
- Services take ``idempotency_key=`` (:func:`~cortex_sessions.services.create_session`,
  :func:`~cortex_sessions.services.append_messages`) and record the ids they wrote.
- Views use :func:`cortex_sessions.api.idempotency.idempotent` (one decorator line per
  endpoint), which records the HTTP status and the response body as sent.

To make another creating endpoint idempotent (fork, pop, …): decorate its view action with
``@idempotent`` — nothing else. To give a new service ``idempotency_key=``, wrap its
transaction body in :func:`run_once` as :func:`~cortex_sessions.services.append_messages` does.
"""

from __future__ import annotations

import hashlib
import json
import random
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, TypeVar

from django.db import IntegrityError, OperationalError, router
from django.utils import timezone

from ..conf import app_settings
from ..exceptions import IdempotencyKeyInProgress, IdempotencyKeyReused, InvalidIdempotencyKey
from ..faults import is_deadlock, is_lock_wait_timeout
from ..models import IdempotencyKey
from ..scope import Scope, canonical_of
from ._common import (
    DEADLOCK_BACKOFF_SECONDS,
    _in_callers_transaction,
    _signals_held,
    _write_transaction,
)
from .statement_size import check_text_fits

__all__ = [
    "IDEMPOTENCY_KEY_PATTERN",
    "IdempotentOutcome",
    "check_idempotency_key",
    "fingerprint",
    "prune_idempotency_keys",
    "run_once",
]

T = TypeVar("T")


#: An idempotency key: 1–255 visible ASCII characters but the comma (docs/design.md §12.1).
#: A WSGI server joins two ``Idempotency-Key`` headers into one value with a comma; a key
#: that cannot hold one makes such a request a 400 instead of a write under a made-up key.
IDEMPOTENCY_KEY_PATTERN = r"^[!-+\--~]{1,255}$"
_KEY = re.compile(IDEMPOTENCY_KEY_PATTERN)


def check_idempotency_key(key: Any) -> str:
    """Validate an idempotency key: 1–255 visible ASCII characters (``!`` to ``~``) other than
    the comma (:data:`IDEMPOTENCY_KEY_PATTERN`).

    Returns:
        ``key`` unchanged.

    Raises:
        InvalidIdempotencyKey: anything else (400 ``invalid_idempotency_key``), two keys
            joined by a comma included.
    """
    if not isinstance(key, str) or not _KEY.fullmatch(key):
        raise InvalidIdempotencyKey(field="Idempotency-Key")
    return key


def fingerprint(data: Any) -> str:
    """SHA-256 (hex) of ``data`` as canonical JSON (sorted keys, no spaces; other values by
    ``str``), so equal inputs give equal fingerprints whatever their key order."""
    text = json.dumps(data, sort_keys=True, separators=(",", ":"), default=str, ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


@dataclass(frozen=True)
class IdempotentOutcome:
    """What :func:`run_once` returns.

    Attributes:
        result: the write's return value on the first call; ``None`` on a replay.
        status_code: the recorded status (0 for service calls).
        response: the recorded outcome text (a response body, or the service's ids as JSON).
        replayed: ``True`` when nothing was written and the first outcome is returned.
    """

    result: Any
    status_code: int
    response: str
    replayed: bool


#: How many times :func:`run_once` claims a key: again after a duplicate that held it committed
#: (to read and replay its row) or after InnoDB broke a deadlock between duplicates that waited
#: for a holder that rolled back (docs/design.md §15).
CLAIM_ATTEMPTS = 5


class _Taken(Exception):
    """The key's row exists: a call with the key committed first (or an expired row is left)."""


def _live(
    using: str, scope: str, endpoint: str, key: str, *, locking: bool
) -> IdempotencyKey | None:
    """The key's row if it has not expired; an expired row is deleted (it no longer counts).

    ``locking`` reads with ``FOR UPDATE``, which sees the latest committed row even inside a
    caller's ``REPEATABLE READ`` transaction on MySQL/MariaDB (a plain read would see its
    snapshot, taken before the duplicate committed)."""
    rows = IdempotencyKey.objects.using(using).filter(scope=scope, endpoint=endpoint, key=key)
    row = (rows.select_for_update() if locking else rows).first()
    if row is None:
        return None
    if row.created_at < timezone.now() - timedelta(seconds=app_settings.IDEMPOTENCY_TTL):
        IdempotencyKey.objects.using(using).filter(pk=row.pk, created_at=row.created_at).delete()
        return None
    return row


def _replay(row: IdempotencyKey, digest: str) -> IdempotentOutcome:
    if row.fingerprint != digest:
        raise IdempotencyKeyReused()
    return IdempotentOutcome(None, row.status_code, row.response, replayed=True)


def _claim(using: str, scope: str, endpoint: str, key: str, digest: str) -> IdempotencyKey:
    """Insert the key's row, the first statement of the write's transaction: a concurrent
    duplicate's insert waits on the unique index until this transaction ends.

    Raises:
        _Taken: the row exists (a duplicate committed first).
        OperationalError: the wait ended in a lock wait timeout or a deadlock.
    """
    try:
        return IdempotencyKey.objects.using(using).create(
            scope=scope, endpoint=endpoint, key=key, fingerprint=digest, response=""
        )
    except IntegrityError:
        raise _Taken() from None


def run_once(
    *,
    scope: Scope | str,
    endpoint: str,
    key: str,
    digest: str,
    write: Callable[[], T],
    record: Callable[[T], tuple[int, str]],
) -> IdempotentOutcome:
    """Run ``write`` at most once per ``(scope, endpoint, key)`` (docs/design.md §12.1).

    The key is claimed first, in the transaction that then runs ``write`` and records its
    outcome: a duplicate sent while this call runs waits for it on the key's row and, once it
    commits, replays it without running anything; if it rolls back, the duplicate runs as the
    first. The transaction is the services' (:func:`~cortex_sessions.services._common._write_transaction`),
    so a commit whose outcome is unknown is :class:`~cortex_sessions.exceptions.WriteOutcomeUnknown`
    — a retry with the key then replays the write if it was stored.

    Args:
        scope: the caller's scope (keys of different scopes never meet).
        endpoint: what is called, e.g. ``"service:append_messages:<session uuid>"`` or
            ``"api:POST /path/"`` (with a session's id in canonical form, so one session has one
            endpoint however its id was spelt).
        key: the client's idempotency key (checked by :func:`check_idempotency_key`).
        digest: :func:`fingerprint` of the call's input.
        write: performs the write; runs inside this function's transaction.
        record: turns ``write``'s result into ``(status_code, response text)`` to keep.

    Returns:
        :class:`IdempotentOutcome`: the first call's result, or a replay of it.

    Raises:
        InvalidIdempotencyKey: a malformed key.
        IdempotencyKeyReused: the key was used (and is not expired) with another ``digest``.
        IdempotencyKeyInProgress: a call with the key was still running when the database's
            lock wait timeout (or statement timeout) ended the wait for it.
        WriteOutcomeUnknown: the commit failed and may have been carried out.
        MessageTooLarge: the response to keep is more than one statement of the database
            carries (MySQL/MariaDB's ``max_allowed_packet``, ``statement_size``); nothing
            is recorded or written.
        OperationalError: InnoDB broke a deadlock on the key inside a caller's transaction (it
            rolled that transaction back) or on every attempt.
        Whatever ``write`` raises; then nothing is recorded and the key stays free.
    """
    check_idempotency_key(key)
    canonical = canonical_of(scope)
    using = router.db_for_write(IdempotencyKey)
    outermost = not _in_callers_transaction(using)
    for attempt in range(CLAIM_ATTEMPTS):
        row = _live(using, canonical, endpoint, key, locking=not outermost)
        if row is not None:
            return _replay(row, digest)
        claimed = False
        try:
            # The write's signals wait for the key (manual transaction management: _signals_held).
            with _signals_held(), _write_transaction(using):
                claim = _claim(using, canonical, endpoint, key, digest)
                claimed = True
                result = write()
                status_code, response = record(result)
                check_text_fits(using, response, what="The response the Idempotency-Key keeps")
                IdempotencyKey.objects.using(using).filter(pk=claim.pk).update(
                    status_code=status_code, response=response, created_at=timezone.now()
                )
        except _Taken:
            continue  # a duplicate committed first: its row is read and replayed
        except OperationalError as exc:
            if claimed:
                raise
            if is_lock_wait_timeout(exc):
                raise IdempotencyKeyInProgress() from None
            if not outermost or not is_deadlock(exc) or attempt == CLAIM_ATTEMPTS - 1:
                raise
            time.sleep(random.uniform(0, DEADLOCK_BACKOFF_SECONDS * (attempt + 1)))
            continue
        return IdempotentOutcome(result, status_code, response, replayed=False)
    raise IdempotencyKeyInProgress()


def prune_idempotency_keys(*, older_than: timedelta | None = None) -> int:
    """Delete the keys older than ``IDEMPOTENCY_TTL`` (``manage.py cortex_sessions_prune``).

    Args:
        older_than: override of the lifetime; default ``IDEMPOTENCY_TTL`` seconds.

    Returns:
        How many keys were deleted.
    """
    lifetime = older_than or timedelta(seconds=app_settings.IDEMPOTENCY_TTL)
    deleted, _ = IdempotencyKey.objects.filter(created_at__lt=timezone.now() - lifetime).delete()
    return deleted
