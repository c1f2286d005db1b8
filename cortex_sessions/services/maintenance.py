"""Operator services: verify and repair counters and usage totals (docs/design.md §5, §16.1-§16.2)."""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from decimal import Decimal

from django.db.models import Count

from ..exceptions import InvalidInput
from ..models import Message, Session
from ..scope import Scope
from ..usage import Totals, sums_of
from ._common import _db_for_read, _db_for_write, _session_id, _write_transaction
from .context import context_tokens_of
from .messages import _newest_text


@dataclass(frozen=True)
class CounterDrift:
    """A session whose stored counters differed from its rows (docs/design.md §5), or whose
    usage totals did (``input_tokens``, ``output_tokens``, ``cost``, ``context_tokens``:
    §16.1-§16.2)."""

    session_id: uuid.UUID
    stored_count: int
    actual_count: int
    stored_last_message: str
    actual_last_message: str
    stored_totals: Totals = field(default_factory=Totals)
    actual_totals: Totals = field(default_factory=Totals)

    @property
    def drifted_totals(self) -> list[str]:
        """The names of the usage totals that differed, in :class:`~cortex_sessions.usage.Totals`
        order."""
        return [
            name
            for name, stored, actual in zip(
                Totals._fields, self.stored_totals, self.actual_totals, strict=True
            )
            if stored != actual
        ]


# -- maintenance ----------------------------------------------------------------------------------


def recount_sessions(
    *,
    scope: Scope | str | None = None,
    all_scopes: bool = False,
    session_ids: Iterable[uuid.UUID | str] | None = None,
    repair: bool = True,
) -> list[CounterDrift]:
    """Verify ``message_count``, ``last_message`` and the usage totals (``input_tokens``,
    ``output_tokens``, ``cost``, ``context_tokens``) against the rows, repairing drift (§5,
    §16.1-§16.2).

    An operator tool: pass a ``scope`` or, to check every session, ``all_scopes=True``.
    Each session is checked and repaired in its own transaction under its row lock.

    Args:
        scope: check sessions at and beneath this scope.
        all_scopes: check every session instead (``scope`` must then be ``None``).
        session_ids: check only these sessions (those of them within ``scope``), e.g. the
            ones an operator selected in the admin.
        repair: write the correct values (``False``: only report).

    Returns:
        One :class:`CounterDrift` for each session whose stored values were wrong.

    Raises:
        NoScope: neither ``scope`` nor ``all_scopes`` was given.
        InvalidScope: ``scope`` is malformed.
        SessionNotFound: an entry of ``session_ids`` is not a UUID.
    """
    if all_scopes and scope is not None:
        raise InvalidInput("Give a scope or all_scopes=True, not both.", field="scope")
    # Which sessions to check may come from a replica (one created since is checked next
    # time); each check reads its rows in its own transaction on the write database.
    listed = Session.objects.using(_db_for_read(None if all_scopes else scope))
    sessions = listed.all() if all_scopes else listed.within(scope)  # type: ignore[arg-type]
    if session_ids is not None:
        sessions = sessions.filter(pk__in=[_session_id(value) for value in session_ids])
    drifts: list[CounterDrift] = []
    for session_pk in sessions.order_by("pk").values_list("pk", flat=True).iterator():
        using = _db_for_write()
        with _write_transaction(using):
            session = Session.objects.using(using).select_for_update().filter(pk=session_pk).first()
            if session is None:
                continue
            rows = Message.objects.using(using).filter(session=session)
            actual = rows.aggregate(n=Count("pk"))["n"]
            last = _newest_text(session, using)
            # context_tokens is the context's (a compaction leaves out what it stands for,
            # docs/design.md §16.2-§16.4), not every row's
            totals = sums_of(rows)._replace(context_tokens=context_tokens_of(session, using=using))
            stored = _stored_totals(session)
            if (actual, last, totals) == (session.message_count, session.last_message, stored):
                continue
            drifts.append(
                CounterDrift(
                    session_id=session.pk,
                    stored_count=session.message_count,
                    actual_count=actual,
                    stored_last_message=session.last_message,
                    actual_last_message=last,
                    stored_totals=stored,
                    actual_totals=totals,
                )
            )
            if repair:
                Session.objects.using(using).filter(pk=session.pk).update(
                    message_count=actual, last_message=last, **totals._asdict()
                )
    return drifts


def _stored_totals(session: Session) -> Totals:
    """The usage totals ``session`` holds, comparable with :func:`~cortex_sessions.usage.sums_of`'s."""
    return Totals(
        session.input_tokens,
        session.output_tokens,
        Decimal(session.cost).quantize(Decimal("0.000001")),
        session.context_tokens,
    )
