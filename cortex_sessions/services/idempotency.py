"""Exactly-once creating calls with an ``Idempotency-Key`` (docs/design.md §12.1).

One mechanism serves the service API and the REST API:

- :func:`run_once` runs a write at most once per ``(scope, endpoint, key)``. The key's row is
  inserted *after* the write, in the same transaction, and only when a key is given — so a call
  without a key runs exactly the statements it always did. A concurrent duplicate blocks on
  the key's unique index until the first transaction ends; if the first committed, the
  duplicate's own write rolls back and it replays the first outcome; if the first rolled back,
  the duplicate goes ahead. A replay with another input is :class:`IdempotencyKeyReused`.
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
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, TypeVar

from django.db import IntegrityError, router, transaction
from django.utils import timezone

from ..conf import app_settings
from ..exceptions import IdempotencyKeyReused, InvalidIdempotencyKey
from ..models import IdempotencyKey
from ..scope import Scope, canonical_of
from ._common import _signals_held

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


def _live(scope: str, endpoint: str, key: str, using: str) -> IdempotencyKey | None:
    """The key's row on the write database ``using`` if it has not expired (a replica may not
    have it yet, docs/design.md §17.1); an expired row is deleted (it no longer counts)."""
    keys = IdempotencyKey.objects.using(using)
    row = keys.filter(scope=scope, endpoint=endpoint, key=key).first()
    if row is None:
        return None
    if row.created_at < timezone.now() - timedelta(seconds=app_settings.IDEMPOTENCY_TTL):
        keys.filter(pk=row.pk, created_at=row.created_at).delete()
        return None
    return row


def _replay(row: IdempotencyKey, digest: str) -> IdempotentOutcome:
    if row.fingerprint != digest:
        raise IdempotencyKeyReused()
    return IdempotentOutcome(None, row.status_code, row.response, replayed=True)


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

    Args:
        scope: the caller's scope (keys of different scopes never meet).
        endpoint: what is called, e.g. ``"service:append_messages"`` or ``"api:POST /path/"``.
        key: the client's idempotency key (checked by :func:`check_idempotency_key`).
        digest: :func:`fingerprint` of the call's input.
        write: performs the write; runs inside this function's transaction.
        record: turns ``write``'s result into ``(status_code, response text)`` to keep.

    Returns:
        :class:`IdempotentOutcome`: the first call's result, or a replay of it.

    Raises:
        InvalidIdempotencyKey: a malformed key.
        IdempotencyKeyReused: the key was used (and is not expired) with another ``digest``.
        Whatever ``write`` raises; then nothing is recorded and the key stays free.
    """
    check_idempotency_key(key)
    canonical = canonical_of(scope)
    using = router.db_for_write(IdempotencyKey)
    row = _live(canonical, endpoint, key, using)
    if row is not None:
        return _replay(row, digest)
    try:
        # The write's signals wait for the key (manual transaction management: _signals_held).
        with _signals_held(), transaction.atomic(using=using):
            result = write()
            status_code, response = record(result)
            IdempotencyKey.objects.using(using).create(
                scope=canonical,
                endpoint=endpoint,
                key=key,
                fingerprint=digest,
                status_code=status_code,
                response=response,
            )
    except IntegrityError:
        # A concurrent duplicate committed first (this transaction, write included, is rolled
        # back); anything else is not ours to hide.
        row = (
            IdempotencyKey.objects.using(using)
            .filter(scope=canonical, endpoint=endpoint, key=key)
            .first()
        )
        if row is None:
            raise
        return _replay(row, digest)
    return IdempotentOutcome(result, status_code, response, replayed=False)


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
