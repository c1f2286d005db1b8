"""The context read: what a model should see of a session (docs/design.md §16.4).

The newest live compaction summary (a message with ``compacts_through_seq``, §16.3), then every
message after its ``through_seq`` except older summaries, in ``seq`` order; with a budget the
oldest of those are dropped whole until the tokens fit. Nothing is written: the transcript stays
whole, the read only chooses.

On PostgreSQL it is one statement (:func:`._pg_context.context_sql`) that walks the session's
messages newest first on the unique ``(session, seq)`` index and stops one message past the
budget, so it reads the rows it returns plus one, however long the thread. Elsewhere the ORM
reads the summary, then the tail in pages of :data:`_PAGE` newest first, stopping at the first
page past the budget.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any

from django.db import connections
from django.db.models import Q, Sum

from ..exceptions import ContextBudgetExceeded, InvalidFilter, SessionNotFound
from ..models import Message, Session
from ..scope import Scope, canonical_of
from ._common import _db_for_read, _session_id
from ._pg_context import walk
from .sessions import _get

__all__ = [
    "MAX_CONTEXT_TOKENS",
    "ContextWindow",
    "context_messages",
    "context_tokens_of",
    "has_compaction",
    "live_summary",
    "refresh_context_tokens",
]

#: The largest ``max_tokens`` a context read takes: ten times the largest context window of
#: any model today, so a client's real budget always fits and a typo is an error.
MAX_CONTEXT_TOKENS = 10_000_000

#: Messages the ORM path reads per round trip while walking the tail newest first.
_PAGE = 64


@dataclass(frozen=True)
class ContextWindow:
    """What :func:`context_messages` returns (docs/design.md §16.4).

    Attributes:
        messages: the summary (when a compaction governs), then the kept messages after its
            ``through_seq``, in ``seq`` order.
        compacted_through_seq: the governing compaction's ``through_seq``, or ``None``.
        tokens: the sum of ``token_count`` over ``messages``.
        truncated: whether the budget dropped any message after the summary.
    """

    messages: list[Message] = field(default_factory=list)
    compacted_through_seq: int | None = None
    tokens: int = 0
    truncated: bool = False


def _check_budget(max_tokens: Any) -> int | None:
    """``None`` or an integer from 1 to :data:`MAX_CONTEXT_TOKENS`; else ``InvalidFilter``."""
    if max_tokens is None:
        return None
    if (
        not isinstance(max_tokens, int)
        or isinstance(max_tokens, bool)
        or not 1 <= max_tokens <= MAX_CONTEXT_TOKENS
    ):
        raise InvalidFilter(
            f"max_tokens must be an integer from 1 to {MAX_CONTEXT_TOKENS}; got {max_tokens!r}.",
            field="max_tokens",
        )
    return max_tokens


def context_messages(
    *,
    scope: Scope | str,
    session_id: uuid.UUID | str,
    max_tokens: int | None = None,
) -> ContextWindow:
    """What a model should see of a session now (docs/design.md §16.4).

    The newest live compaction summary, then every message with ``seq`` above its
    ``through_seq`` (older summaries excepted), in ``seq`` order; without a compaction, every
    message. With ``max_tokens`` the oldest messages after the summary are dropped whole until
    the ``token_count`` sum (summary included) fits, and then any ``tool`` messages left at the
    start of the kept tail go too, so a tool result never shows without its call. Without a
    budget nothing is dropped: ``tokens`` is then the session's ``context_tokens``.

    Args:
        scope: the caller's scope; the session must lie at or beneath it.
        session_id: the session.
        max_tokens: the budget in tokens (as ``token_count`` counts them), an integer from 1
            to :data:`MAX_CONTEXT_TOKENS`, or ``None`` for no budget.

    Returns:
        :class:`ContextWindow`.

    Raises:
        NoScope, InvalidScope, SessionNotFound.
        InvalidFilter: ``max_tokens`` is not an integer from 1 to ``MAX_CONTEXT_TOKENS``
            (field ``max_tokens``).
        ContextBudgetExceeded: ``max_tokens`` cannot hold the summary and the newest message
            (after the tool rule, the newest message that may lead the tail).
    """
    budget = _check_budget(max_tokens)
    alias = _db_for_read(scope)
    if connections[alias].vendor == "postgresql":
        summary, walked, more = _walk_pg(alias, scope, _session_id(session_id), budget)
    else:
        session = _get(scope, session_id, None, using=alias)
        summary, walked, more = _walk_orm(alias, session, budget)
    return _window(summary, walked, more, budget)


#: A compaction summary: a ``user``/``checkpoint`` message (so the checkpoint index
#: ``cortex_msg_checkpoint_idx`` serves the lookup) with ``compacts_through_seq``.
_SUMMARY_Q = Q(
    role=Message.Role.USER,
    source=Message.Source.CHECKPOINT,
    compacts_through_seq__isnull=False,
)


def live_summary(session: Session, *, using: str) -> Message | None:
    """The session's newest compaction summary (the live one, docs/design.md §16.3), or
    ``None``, read on database ``using`` from the checkpoint index newest first."""
    return Message.objects.using(using).filter(_SUMMARY_Q, session=session).order_by("-seq").first()


def has_compaction(session: Session, *, using: str) -> bool:
    """Whether ``session`` holds a compaction summary, live or older (docs/design.md §16.3):
    a delete in such a session recomputes ``context_tokens`` (:func:`refresh_context_tokens`)
    instead of subtracting what it removed."""
    return Message.objects.using(using).filter(_SUMMARY_Q, session=session).exists()


def context_tokens_of(session: Session, *, using: str) -> int:
    """The tokens of ``session``'s context without a budget (docs/design.md §16.2, §16.4):
    the live summary's ``token_count`` plus that of every message after its ``through_seq``
    except older summaries (every message without a compaction), summed by the database."""
    summary = live_summary(session, using=using)
    floor = summary.compacts_through_seq if summary is not None else 0
    tail = Message.objects.using(using).filter(
        session=session, seq__gt=floor, compacts_through_seq__isnull=True
    )
    total = tail.aggregate(total=Sum("token_count"))["total"] or 0
    return int(total) + (summary.token_count if summary is not None else 0)


def refresh_context_tokens(session: Session, *, using: str) -> int:
    """Recompute ``context_tokens`` of the locked ``session`` from its rows and store it, in
    the transaction open on database ``using`` (docs/design.md §16.2, §16.3).

    Returns:
        The new value (also set on ``session``).
    """
    value = context_tokens_of(session, using=using)
    Session.objects.using(using).filter(pk=session.pk).update(context_tokens=value)
    session.context_tokens = value
    return value


def _walk_orm(
    alias: str, session: Session, budget: int | None
) -> tuple[Message | None, list[Message], bool]:
    """The summary, the tail newest first up to and including the first message that does
    not fit, and whether such a message was met."""
    summary = live_summary(session, using=alias)
    floor = summary.compacts_through_seq if summary is not None else 0
    room = None if budget is None else budget - (summary.token_count if summary else 0)
    tail = Message.objects.using(alias).filter(
        session=session, seq__gt=floor, compacts_through_seq__isnull=True
    )
    walked: list[Message] = []
    total = 0
    below: int | None = None
    while True:
        page = tail if below is None else tail.filter(seq__lt=below)
        rows = list(page.order_by("-seq")[: _PAGE if room is not None else None])
        for message in rows:
            walked.append(message)
            total += message.token_count
            if room is not None and total > room:
                return summary, walked, True
        if room is None or len(rows) < _PAGE:
            return summary, walked, False
        below = rows[-1].seq


def _window(
    summary: Message | None, walked: list[Message], more: bool, budget: int | None
) -> ContextWindow:
    """Apply the budget and the tool rule to the walked tail (newest first)."""
    base = summary.token_count if summary is not None else 0
    kept = walked[:-1] if more else walked
    kept.reverse()
    truncated = more
    if truncated:
        while kept and kept[0].role == Message.Role.TOOL:
            kept.pop(0)
    if budget is not None and walked and not kept:
        # Not even the newest message fits next to the summary (or only as a tool result
        # whose call does not): a context without it would be wrong, not short. ``required``
        # counts every walked message, the first past the budget included: exact when that
        # one may lead the tail, else a lower bound; either way past ``budget``, so a retry
        # with it moves on.
        required = base + sum(message.token_count for message in walked)
        raise ContextBudgetExceeded(
            f"max_tokens is {budget}; the summary and the newest messages a context can start "
            f"with take at least {required}.",
            field="max_tokens",
            max_tokens=budget,
            required=required,
        )
    if budget is not None and summary is not None and base > budget:
        raise ContextBudgetExceeded(
            f"max_tokens is {budget}; the compaction summary alone takes {base}.",
            field="max_tokens",
            max_tokens=budget,
            required=base,
        )
    messages = ([summary] if summary is not None else []) + kept
    return ContextWindow(
        messages=messages,
        compacted_through_seq=summary.compacts_through_seq if summary is not None else None,
        tokens=base + sum(message.token_count for message in kept),
        truncated=truncated,
    )


def _walk_pg(
    alias: str, scope: Scope | str, session_id: uuid.UUID, budget: int | None
) -> tuple[Message | None, list[Message], bool]:
    """:func:`_walk_orm` on PostgreSQL, in the one statement of
    :func:`._pg_context.context_sql` (:func:`._pg_context.walk`)."""
    found = walk(alias, canonical_of(scope), session_id, budget)
    if found is None:
        raise SessionNotFound()
    summary, walked = found
    base = summary.token_count if summary is not None else 0
    total = base + sum(message.token_count for message in walked)
    more = budget is not None and bool(walked) and total > budget
    return summary, walked, more
