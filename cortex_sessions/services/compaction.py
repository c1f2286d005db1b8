"""Compaction that keeps the transcript (docs/design.md §16.3).

A compaction appends its summary as the session's next message — role ``user``, source
``checkpoint``, with the app-owned ``compacts_through_seq`` — and from then on the context read
(§16.4, :mod:`.context`) shows the summary instead of the messages up to ``through_seq``.
Nothing is deleted or rewritten; deleting the summary (§11.4) undoes the compaction.

``context_tokens`` (§16.2) is the sum of ``token_count`` over what the context read returns
without a budget. A compaction, or a delete in a compacted session, changes which messages that
is, so :func:`~.context.refresh_context_tokens` recomputes it in the same transaction, under the
session's row lock (appends, which always land after every compaction, keep adding to it).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping
from typing import Any, cast

from django.db.models import F
from django.utils import timezone

from .. import signals
from ..counters import last_message_of
from ..exceptions import InvalidThroughSeq, MessageTooLarge, SummaryTooLarge
from ..models import Message, Session
from ..scope import Scope
from ._common import (
    MAX_INT64,
    _check_live,
    _db_for_write,
    _locked_session,
    _send_on_commit,
    _session_id,
    _write_transaction,
    check_totals_fit,
)
from .context import live_summary, refresh_context_tokens
from .idempotency import fingerprint, run_once
from .messages import AppendResult, _add_totals, _build_message, _moved_totals, _totals_of
from .sessions import _get

__all__ = ["compact_session"]


def _check_through_seq(value: Any) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= MAX_INT64:
        raise InvalidThroughSeq(
            f"through_seq must be an integer from 1 to the session's last seq; got {value!r}.",
            field="through_seq",
        )
    return value


def compact_session(
    *,
    scope: Scope | str,
    session_id: uuid.UUID | str,
    through_seq: int,
    summary: Any,
    usage: Mapping[str, Any] | None = None,
    idempotency_key: str | None = None,
) -> AppendResult:
    """Compact a session: append ``summary`` as the message that stands for every message up
    to ``through_seq`` in the context read (docs/design.md §16.3).

    The summary is the session's next message (role ``user``, source ``checkpoint``,
    ``compacts_through_seq=through_seq``); ``message_count``, ``last_seq``, ``last_message``,
    the usage totals and ``context_tokens`` move in the same transaction, under the session's
    row lock. Nothing else is touched: every message stays, for admin, search, export and
    references. Deleting the summary undoes the compaction.

    Args:
        scope: the caller's scope; the session must lie at or beneath it.
        session_id: the session.
        through_seq: the newest ``seq`` the summary stands for: from 1 to the session's
            ``last_seq``, and beyond the newest live compaction's ``through_seq``.
        summary: the summary's content: a string (one text block) or a list of content
            blocks, as a message's ``content``.
        usage: what producing the summary cost (docs/design.md §16.1), or ``None``.
        idempotency_key: when given, the compaction happens at most once per key, scope and
            session within ``IDEMPOTENCY_TTL``; a replay returns the summary the first call
            wrote, with the session as it is now (docs/design.md §12.1).

    Returns:
        :class:`~cortex_sessions.services.AppendResult` with the session and the summary.

    Raises:
        NoScope, InvalidScope, SessionNotFound.
        SessionArchived: the session is archived (409).
        InvalidThroughSeq: ``through_seq`` is not an integer in ``1..last_seq`` beyond the
            newest live compaction's (``invalid_through_seq``).
        InvalidContent, EmptyContent, NulCharacter, InvalidText, TooManyKeys: a bad summary
            (as a message's ``content``).
        SummaryTooLarge: the summary is over ``MAX_MESSAGE_BYTES`` as a message's JSON (a
            ``MessageTooLarge``; the API answers 400 ``summary_too_large``, not 413).
        InvalidUsage: a bad ``usage`` (docs/design.md §16.1); its subclass
            UsageTotalOverflow (``usage_total_overflow``, field ``usage``): the summary's usage
            would take a session total past its column.
        InvalidIdempotencyKey, IdempotencyKeyReused, IdempotencyKeyInProgress.
        WriteOutcomeUnknown: the commit failed and may have been carried out (§12.3).
    """
    through = _check_through_seq(through_seq)
    now = timezone.now()
    item: dict[str, Any] = {"role": Message.Role.USER, "content": summary}
    item["source"] = Message.Source.CHECKPOINT
    if usage is not None:
        item["usage"] = usage
    try:
        built = _build_message(item, 0, now)
    except MessageTooLarge as error:
        raise SummaryTooLarge(
            f"The summary is {error.params['size']} bytes of JSON; MAX_MESSAGE_BYTES is "
            f"{error.params['limit']}.",
            field="summary",
            size=error.params["size"],
            limit=error.params["limit"],
        ) from None
    if idempotency_key is None:
        return _compact(scope, session_id, through, built.columns)
    pk = _session_id(session_id)
    outcome = run_once(
        scope=scope,
        endpoint=f"service:compact_session:{pk}",
        key=idempotency_key,
        digest=fingerprint({"through_seq": through, **built.columns, "created_at": None}),
        write=lambda: _compact(scope, pk, through, built.columns),
        record=lambda result: (0, json.dumps([message.pk for message in result.messages])),
    )
    if not outcome.replayed:
        return cast(AppendResult, outcome.result)
    using = _db_for_write()
    written = Message.objects.using(using).filter(pk__in=json.loads(outcome.response))
    return AppendResult(session=_get(scope, pk, None, using=using), messages=list(written))


def _compact(
    scope: Scope | str, session_id: uuid.UUID | str, through: int, columns: dict[str, Any]
) -> AppendResult:
    """Write the summary of :func:`compact_session` in one transaction."""
    using = _db_for_write()
    with _write_transaction(using):
        session = _check_live(_locked_session(scope, session_id))
        current = live_summary(session, using=using)
        floor = (current.compacts_through_seq or 0) if current is not None else 0
        if not floor < through <= session.last_seq:
            raise InvalidThroughSeq(
                f"through_seq must be an integer from {floor + 1} to {session.last_seq} "
                f"(the session's last seq, beyond the newest compaction's {floor}); "
                f"got {through}.",
                field="through_seq",
                minimum=floor + 1,
                maximum=session.last_seq,
            )
        added = _totals_of([columns])
        check_totals_fit(session, added, using, field="usage")
        message = Message(
            session=session,
            agent_id=session.agent_id,
            scope=session.scope,
            seq=session.last_seq + 1,
            **{**columns, "compacts_through_seq": through},
        )
        message.save(using=using, force_insert=True)
        changes: dict[str, Any] = {
            "last_seq": session.last_seq + 1,
            "updated_at": max(session.updated_at, timezone.now()),
        }
        if last := last_message_of(message.role, message.source, message.content):
            changes["last_message"] = last
        Session.objects.using(using).filter(pk=session.pk).update(
            message_count=F("message_count") + 1, **_moved_totals(added), **changes
        )
        changes["message_count"] = session.message_count + 1
        _add_totals(session, added)
        for name, value in changes.items():
            setattr(session, name, value)
        refresh_context_tokens(session, using=using)
    _send_on_commit(signals.messages_appended, session=session, messages=[message])
    return AppendResult(session=session, messages=[message])
