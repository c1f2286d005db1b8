"""A keyed append (``append_messages(idempotency_key=…)``, docs/design.md §12.1): the key's
fingerprint, the one-statement path on PostgreSQL that records the key with the append
(``_pg.keyed_append``), and :func:`~.idempotency.run_once` for every other case.

The API's keyed append of one message takes the same one statement
(:func:`append_recorded`, :func:`replay_recorded`), under the API's own endpoint: its key row
holds what rebuilds the first answer instead of the answer's text.
"""

from __future__ import annotations

import json
import uuid
from datetime import datetime
from typing import TYPE_CHECKING, NamedTuple, cast

from django.db import IntegrityError, OperationalError, connections, router
from django.utils import timezone

from ..exceptions import SessionArchived, SessionNotFound, UsageTotalOverflow
from ..faults import is_deadlock, is_lock_wait_timeout
from ..models import IdempotencyKey, Message, Session
from ..scope import Scope, canonical_of
from . import _pg
from ._common import _db_for_write, _in_callers_transaction, _session_id
from ._pg_run import built, text_values
from .idempotency import check_idempotency_key, fingerprint, run_once
from .sessions import _get

if TYPE_CHECKING:
    from .messages import AppendResult, MessageInput, _BuiltMessage

__all__ = ["RECORDED_TAG", "KeyedCall", "append_once", "append_recorded", "replay_recorded"]


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
        this case, the key's row exists (a replay, a reused or an expired key), no live session
        (``run_once`` replays a recorded first call, or raises), or a lock wait timed out (the
        key may be in progress: ``run_once`` tells).

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
    except (IntegrityError, SessionNotFound, SessionArchived, UsageTotalOverflow):
        # Nothing was written: the key's unique index, or no live session (archived, expired
        # or deleted since a first call that ``run_once`` may replay, §12.1), or a usage total
        # past its column — which the database tells before the key's index, so a replay of a
        # first call that fit is ``run_once``'s to answer too (§16.1).
        return None
    except OperationalError as exc:
        if is_lock_wait_timeout(exc):
            return None
        raise


# -- the API's keyed append of one message ---------------------------------------------------------

#: The first element of the response :func:`append_recorded` records: a JSON array
#: ``[tag, the message's columns, the session's narrow array]``, which no answer body recorded
#: by :func:`~.idempotency.run_once` (a JSON object) can start like.
RECORDED_TAG = "cortex_sessions:append:1"
_RECORDED_START = json.dumps([RECORDED_TAG])[:-1]


class KeyedCall(NamedTuple):
    """A call's idempotency key as :func:`~.idempotency.run_once` takes it (docs/design.md
    §12.1): the caller's ``scope``, the ``endpoint`` (e.g. ``"api:POST <path>"``), the client's
    ``key`` and the ``digest`` (:func:`~.idempotency.fingerprint`) of the call's input."""

    scope: Scope | str
    endpoint: str
    key: str
    digest: str


def append_recorded(
    session_id: uuid.UUID | str, message: MessageInput, keyed: KeyedCall, *, status_code: int
) -> AppendResult | None:
    """Append one message and record ``keyed`` in the append's own statement, on PostgreSQL
    outside a caller's transaction (``_pg.keyed_append(recorded=True)``, docs/design.md
    §12.1): the key's row holds ``status_code`` and what :func:`replay_recorded` rebuilds the
    result from, so a replay answers what the first call answered. A duplicate in flight
    waits on the session's row lock, then fails on the key's unique index: nothing written.

    Args:
        session_id: the session (a malformed id is not found).
        message: the message, as :func:`~.messages.append_messages` takes one.
        keyed: the key, recorded under ``keyed.endpoint`` (not the service's endpoint).
        status_code: the status to record (the API's 201).

    Returns:
        :class:`~.messages.AppendResult`, or ``None`` when nothing was written and
        :func:`~.idempotency.run_once` must serve the call: not PostgreSQL, the key's database
        is not the write database, a caller's transaction, the key's row exists (a replay, a
        reused or an expired key), no live session (``run_once`` replays a recorded first
        call, or raises), or a lock wait timed out or deadlocked (the key may be in
        progress: ``run_once`` tells).

    Raises:
        What :func:`~.messages.append_messages` raises for one message without a key
        (bad input, SessionNotFound, SessionArchived, WriteOutcomeUnknown, …).
    """
    from .messages import _append_rows, _build_message

    alias = _db_for_write()
    if (
        not _pg.serves(alias)
        or router.db_for_write(IdempotencyKey) != alias
        or _in_callers_transaction(alias)
    ):
        return None
    now = timezone.now()
    row = _build_message(message, 0, now)
    columns = row.columns
    recorded = (
        f'{{"role":{json.dumps(columns["role"])},"source":{json.dumps(columns["source"])},'
        f'"content":{row.content_json},"metadata":{row.metadata_json},'
        f'"usage":{row.usage_json or "null"},'
        f'"created_at":{json.dumps(columns["created_at"].isoformat())},'
        f'"token_count":{int(columns["token_count"])}}}'
    )
    canonical = canonical_of(keyed.scope)
    key = (canonical, keyed.endpoint, keyed.key, keyed.digest, status_code, RECORDED_TAG)
    try:
        return _append_rows(keyed.scope, session_id, [row], now, key=(*key, recorded, now))
    except (IntegrityError, SessionNotFound, SessionArchived, UsageTotalOverflow):
        # Nothing was written: the key's unique index, or no live session (archived, expired
        # or deleted since a first call that ``run_once`` replays, §12.1), or a usage total
        # past its column, told before the key's index: ``run_once`` replays a first call
        # that fit, or refuses this one on its own path (§16.1).
        return None
    except OperationalError as exc:
        if is_lock_wait_timeout(exc) or is_deadlock(exc):  # one statement: nothing written
            return None
        raise


def replay_recorded(session_id: uuid.UUID | str, response: str) -> AppendResult | None:
    """The result :func:`append_recorded` returned, rebuilt from the ``response`` it recorded
    (docs/design.md §12.1): the session as that append left it and the message it wrote,
    whatever happened to them since.

    Args:
        session_id: the session of the key's endpoint.
        response: a key row's ``response``.

    Returns:
        :class:`~.messages.AppendResult`, or ``None`` when ``response`` is not one
        :func:`append_recorded` wrote (e.g. an answer body ``run_once`` recorded).

    Raises:
        SessionNotFound: ``session_id`` is not a UUID.
    """
    from .messages import AppendResult

    if not response.startswith(_RECORDED_START):
        return None
    _tag, columns, array = json.loads(response)
    alias, pk = _db_for_write(), _session_id(session_id)
    connection = connections[alias]
    plan = _pg._session_plan(narrow=True)
    loaded = text_values(connection, array, connection.timezone, plan)
    values = dict(zip(plan.attnames, loaded, strict=True))
    session: Session = built(Session, alias, {**values, "id": pk, "archived_at": None})
    columns["created_at"] = datetime.fromisoformat(columns["created_at"])
    common = {"agent_id": session.agent_id, "scope": session.scope, "session_id": pk}
    ids = {"id": int(array[-2]), "seq": int(array[-1]), "compacts_through_seq": None}
    message = built(Message, alias, {**columns, **common, **ids})
    message.session = session
    return AppendResult(session=session, messages=[message])
