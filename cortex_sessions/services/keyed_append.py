"""A keyed append (``append_messages(idempotency_key=…)``, docs/design.md §12.1): the key's
fingerprint, the one-statement path on PostgreSQL that records the key with the append
(``_pg.keyed_append``), and :func:`~.idempotency.run_once` for every other case."""

from __future__ import annotations

import json
import uuid
from datetime import datetime
from typing import TYPE_CHECKING, cast

from django.db import IntegrityError, OperationalError, router
from django.utils import timezone

from ..faults import is_lock_wait_timeout
from ..models import IdempotencyKey, Message
from ..scope import Scope, canonical_of
from . import _pg
from ._common import _db_for_write, _in_callers_transaction, _session_id
from .idempotency import check_idempotency_key, fingerprint, run_once
from .sessions import _get

if TYPE_CHECKING:
    from .messages import AppendResult, _BuiltMessage

__all__ = ["append_once"]


#: Columns :func:`_build_message` derives from the input (the token counter's answer may
#: change with the setting): not part of an idempotency key's fingerprint.
_DERIVED = frozenset({"token_count", "compacts_through_seq"})


def append_once(
    scope: Scope | str,
    session_id: uuid.UUID | str,
    rows: list[_BuiltMessage],
    key: str,
    now: datetime,
) -> AppendResult:
    """:func:`~.messages.append_messages` with an idempotency key (docs/design.md §12.1).

    Returns:
        :class:`~.messages.AppendResult`: the first call's, or its replay.

    Raises:
        What :func:`~.messages.append_messages` raises with a key.
    """
    from .messages import AppendResult, _append_rows

    pk = _session_id(session_id)
    inputs = [
        {
            **{name: value for name, value in row.columns.items() if name not in _DERIVED},
            "explicit_time": row.given_time is not None,
            "created_at": row.given_time,
        }
        for row in rows
    ]
    for row, given in zip(rows, inputs, strict=True):
        if row.columns["usage"] is None:  # as 1.0.0 fingerprinted a message without usage
            del given["usage"]
    endpoint, digest = f"service:append_messages:{pk}", fingerprint(inputs)
    appended = _append_keyed_pg(scope, pk, rows, now, (endpoint, key, digest))
    if appended is not None:
        return appended
    outcome = run_once(
        scope=scope,
        endpoint=endpoint,
        key=key,
        digest=digest,
        write=lambda: _append_rows(scope, pk, rows, now),
        record=lambda result: (0, json.dumps([message.pk for message in result.messages])),
    )
    if not outcome.replayed:
        return cast(AppendResult, outcome.result)
    # A replay reads where the first call wrote: a replica may not have its rows yet (§17.1).
    using = _db_for_write()
    written = Message.objects.using(using).filter(pk__in=json.loads(outcome.response))
    session = _get(scope, pk, None, using=using)
    return AppendResult(session=session, messages=list(written.order_by("seq")))


def _append_keyed_pg(
    scope: Scope | str,
    pk: uuid.UUID,
    rows: list[_BuiltMessage],
    now: datetime,
    keyed: tuple[str, str, str],
) -> AppendResult | None:
    """A keyed one-message append on PostgreSQL, outside a caller's transaction, in one
    statement that also records the key (``_pg.keyed_append``, docs/design.md §12.1): the
    :func:`~.idempotency.run_once` guarantees hold (a duplicate waits on the session's row
    lock, then fails on the key and writes nothing), at the cost of one statement.

    Returns:
        The append, or ``None`` when :func:`~.idempotency.run_once` must serve the call: not
        this case, the key's row exists (a replay, a reused or an expired key), or a lock wait
        timed out (the key may be in progress: ``run_once`` tells).

    Raises:
        InvalidIdempotencyKey, and what ``messages._append_rows`` raises.
    """
    from .messages import _append_rows

    alias = _db_for_write()
    if (
        len(rows) != 1
        or not _pg.serves(alias)
        or router.db_for_write(IdempotencyKey) != alias
        or _in_callers_transaction(alias)
    ):
        return None
    endpoint, key, digest = keyed
    record = (canonical_of(scope), endpoint, check_idempotency_key(key), digest, timezone.now())
    try:
        return _append_rows(scope, pk, rows, now, key=record)
    except IntegrityError:  # the key's unique index: nothing was written
        return None
    except OperationalError as exc:
        if is_lock_wait_timeout(exc):
            return None
        raise
