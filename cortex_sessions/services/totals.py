"""Usage totals over a scope: per-tenant accounting (docs/design.md §16.1).

:func:`usage_totals` sums the sessions' app-owned totals (``message_count``,
``input_tokens``, ``output_tokens``, ``cost``, ``context_tokens``) over the caller's scope with
the list filters, whole or grouped by agent or by the next scope level beneath the caller's, in
one statement whose rows come from the scope range the session indexes serve.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from django.db import connections
from django.db.models import (
    BigIntegerField,
    Case,
    CharField,
    Count,
    DecimalField,
    F,
    FloatField,
    IntegerField,
    Q,
    Sum,
    Value,
    When,
)
from django.db.models.functions import Cast, Coalesce, StrIndex, Substr

from ..exceptions import InvalidFilter
from ..scope import Scope, canonical_of
from .filters import SessionFilters, session_filters
from .sessions import _filtered

__all__ = ["GROUP_BY", "UsageTotals", "usage_totals"]

#: What :func:`usage_totals` may group by (``None``: no grouping).
GROUP_BY = ("agent_id", "scope")

_MONEY = DecimalField(max_digits=20, decimal_places=6)
_MICRO = Decimal("0.000001")


@dataclass(frozen=True)
class UsageTotals:
    """Sums over some sessions (docs/design.md §16.1).

    Attributes:
        key: the group: an agent id (``group_by="agent_id"``), the canonical scope one level
            beneath the caller's (``group_by="scope"``; ``None`` for the sessions stored at
            exactly the caller's scope), or ``None`` without grouping.
        sessions: how many sessions.
        message_count: their messages.
        input_tokens, output_tokens: the sums of their messages' ``usage`` token counts.
        cost: the sum of their messages' ``usage.cost`` (a ``Decimal``, six places).
        context_tokens: the sum of their ``context_tokens`` (docs/design.md §16.2).
    """

    key: str | None
    sessions: int
    message_count: int
    input_tokens: int
    output_tokens: int
    cost: Decimal
    context_tokens: int


def _sums(vendor: str = "") -> dict[str, Any]:
    """The aggregates of one group (zero, never ``NULL``, over no rows). On SQLite the token
    totals are summed as floats: its integer ``SUM`` raises "integer overflow" once a sum of
    sessions passes 2^63 - 1, which each session's total may reach (docs/design.md §16.1); the
    float sum is exact below 2^53 (docs/context-window.md)."""
    whole = BigIntegerField()

    def tokens(column: str) -> Any:
        if vendor == "sqlite":
            return Coalesce(Sum(Cast(column, FloatField())), Value(0.0), output_field=FloatField())
        return Coalesce(Sum(column), Value(0), output_field=whole)

    return {
        "sessions": Count("pk"),
        "total_messages": Coalesce(Sum("message_count"), Value(0), output_field=whole),
        "total_input": tokens("input_tokens"),
        "total_output": tokens("output_tokens"),
        "total_cost": Coalesce(Sum("cost"), Value(Decimal(0)), output_field=_MONEY),
        "total_context": tokens("context_tokens"),
    }


def _totals(key: str | None, row: Mapping[str, Any]) -> UsageTotals:
    return UsageTotals(
        key=key,
        sessions=int(row["sessions"]),
        message_count=int(row["total_messages"]),
        input_tokens=int(row["total_input"]),
        output_tokens=int(row["total_output"]),
        cost=Decimal(row["total_cost"]).quantize(_MICRO),
        context_tokens=int(row["total_context"]),
    )


def _child_level(canonical: str) -> Any:
    """The level beneath ``canonical`` of a row's scope (``key=value``), ``NULL`` for a row
    at ``canonical`` itself: the text after ``canonical/`` up to the next ``/``. A ``/``
    inside a value is percent-encoded (docs/design.md §2.2), so every ``/`` separates levels."""
    rest = Substr("scope", len(canonical) + 2)
    slash = StrIndex(rest, Value("/"))
    return Case(
        When(scope=canonical, then=Value(None)),
        When(Q(slash=0), then=rest),
        default=Substr(rest, 1, F("slash") - 1),
        output_field=CharField(),
    ), slash


def usage_totals(
    *,
    scope: Scope | str,
    filters: SessionFilters | None = None,
    group_by: str | None = None,
) -> UsageTotals | list[UsageTotals]:
    """The usage totals of the sessions a list at ``scope`` with ``filters`` shows, whole or
    grouped, in one statement (docs/design.md §16.1).

    Args:
        scope: the caller's scope; sessions at it and beneath it count (only at it with
            ``filters.exact``).
        filters: the list filters (:class:`~cortex_sessions.services.SessionFilters`; default:
            every live session).
        group_by: ``None`` (one total), ``"agent_id"`` (one per agent) or ``"scope"`` (one per
            scope level directly beneath ``scope``, e.g. each ``org=acme/user=…`` under
            ``org=acme``; sessions stored at ``scope`` itself form the group ``None``).

    Returns:
        One :class:`UsageTotals` (``key`` ``None``; zeros when no session matches), or with
        ``group_by`` a list of them, one per group that has sessions, ordered by key (the
        ``None`` group first).

    Raises:
        NoScope, InvalidScope: the scope is missing or malformed.
        InvalidFilter: ``group_by`` is not ``None``, ``"agent_id"`` or ``"scope"``;
            ``filters.q`` on MySQL/MariaDB.
        TypeError: ``filters`` is not a ``SessionFilters`` (or ``None``).
    """
    if group_by is not None and group_by not in GROUP_BY:
        raise InvalidFilter(
            f"group_by must be one of {', '.join(GROUP_BY)}, or absent; got {group_by!r}.",
            field="group_by",
        )
    filters = session_filters(filters)
    queryset = _filtered(scope, filters, annotate=False).order_by()
    sums = _sums(connections[queryset.db].vendor)
    if group_by is None:
        return _totals(None, queryset.aggregate(**sums))
    if group_by == "agent_id":
        by_agent = queryset.values("agent_id").annotate(**sums).order_by("agent_id")
        return [_totals(row["agent_id"], row) for row in by_agent]
    canonical = canonical_of(scope)
    level, slash = _child_level(canonical)
    rows = (
        queryset.annotate(slash=Coalesce(slash, Value(0), output_field=IntegerField()))
        .annotate(level=level)
        .values("level")
        .annotate(**sums)
        .order_by(F("level").asc(nulls_first=True))
    )
    return [_totals(_scope_key(canonical, row["level"]), row) for row in rows]


def _scope_key(canonical: str, level: str | bytes | None) -> str | None:
    """The group key of a level beneath ``canonical`` (MySQL/MariaDB return the binary
    column's substring as bytes)."""
    if level is None:
        return None
    if isinstance(level, bytes):
        level = level.decode()
    return f"{canonical}/{level}"
