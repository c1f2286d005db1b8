"""Usage of messages and its sums (docs/design.md §16.1): validation of a message's ``usage``
and the amounts an append adds to (or a delete takes from) its session's totals.

Pure functions, no database: the services call them (docs/design.md §7.1).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from decimal import Decimal
from typing import Any, NamedTuple

from .content import check_json_value
from .exceptions import InvalidUsage, UsageTotalOverflow

__all__ = [
    "COST_PATTERN",
    "MAX_TOTAL_COST",
    "MAX_TOTAL_TOKENS",
    "MAX_USAGE_TOKENS",
    "MODEL_MAX_CHARS",
    "SQLITE_MAX_TOTAL_COST",
    "TOKEN_KEYS",
    "TOTAL_COST_PATTERN",
    "USAGE_KEYS",
    "Totals",
    "check_totals",
    "check_usage",
    "sums_of",
    "totals_of",
]

#: The token counts a usage may carry, each a non-negative integer.
TOKEN_KEYS = ("input_tokens", "output_tokens", "cached_input_tokens", "reasoning_tokens")
#: Every key a usage may carry.
USAGE_KEYS = frozenset({*TOKEN_KEYS, "model", "cost"})
MODEL_MAX_CHARS = 255
#: Largest token count in a usage (a trillion): far above any model's, and low enough that a
#: session's 64-bit totals hold the sum of millions of such messages.
MAX_USAGE_TOKENS = 10**12
#: A message's cost: a non-negative decimal below 10^10, at most 6 fractional digits, no sign,
#: exponent or spaces. The session's ``cost`` (``numeric(20, 6)``) holds sums below 10^14:
#: ten thousand messages of the largest cost; a write that would take it further is refused
#: (:func:`check_totals`).
COST_PATTERN = re.compile(r"(?:0|[1-9][0-9]{0,9})(?:\.[0-9]{1,6})?")
#: A session's ``cost`` stays below this (``numeric(20, 6)``: 14 integer digits).
MAX_TOTAL_COST = Decimal(10**14)
#: A session's ``cost`` stays below this on SQLite, which stores the column as an 8-byte float
#: read back with 15 significant digits: a total within 0.05 of 10^14 (and the float's error
#: of up to 1/64 on top) would read back as 10^14, which ``numeric(20, 6)`` cannot hold.
SQLITE_MAX_TOTAL_COST = MAX_TOTAL_COST - Decimal("0.1")
#: The largest ``input_tokens``, ``output_tokens`` or ``context_tokens`` of a session: a
#: signed 64-bit integer's (PostgreSQL's ``bigint``, SQLite's integer).
MAX_TOTAL_TOKENS = 2**63 - 1
#: A session's cost as a text key (a list cursor): up to 14 integer digits.
TOTAL_COST_PATTERN = re.compile(r"(?:0|[1-9][0-9]{0,13})(?:\.[0-9]{1,6})?")


class Totals(NamedTuple):
    """What some messages add to their session's totals (docs/design.md §16.1-§16.2)."""

    input_tokens: int = 0
    output_tokens: int = 0
    cost: Decimal = Decimal(0)
    context_tokens: int = 0

    def __add__(self, other: Any) -> Totals:  # a sum, not a concatenation
        return Totals(*(mine + theirs for mine, theirs in zip(self, other, strict=True)))


def check_usage(usage: Any, *, field: str = "usage") -> dict[str, Any] | None:
    """Validate a message's ``usage`` (docs/design.md §16.1).

    Args:
        usage: ``None``, or a mapping with any of the keys ``input_tokens``,
            ``output_tokens``, ``cached_input_tokens``, ``reasoning_tokens`` (integers from 0
            to 10**12, never ``bool``), ``model`` (a string of at most 255 characters) and
            ``cost`` (a string: a non-negative decimal below 10**10 with at most 6 fractional
            digits, e.g. ``"0.0123"``; a JSON number is refused, as binary floats cannot
            carry money exactly).
        field: the input field named in the error.

    Returns:
        ``None``, or a new dict of the given keys with the values as given (``cost`` as its
        string).

    Raises:
        InvalidUsage: anything else (code ``invalid_usage``).
        NulCharacter, InvalidText: ``model`` holds NUL or a lone surrogate.
    """
    if usage is None:
        return None
    if not isinstance(usage, Mapping):
        raise InvalidUsage("usage must be an object or null.", field=field)
    unknown = [key for key in usage if key not in USAGE_KEYS]
    if unknown:
        raise InvalidUsage(
            f"usage has unknown keys: {', '.join(sorted(map(str, unknown)))}; allowed: "
            f"{', '.join(sorted(USAGE_KEYS))}.",
            field=field,
        )
    checked: dict[str, Any] = {}
    for key, value in usage.items():
        if key in TOKEN_KEYS:
            if type(value) is not int or not 0 <= value <= MAX_USAGE_TOKENS:
                raise InvalidUsage(
                    f"usage.{key} must be an integer from 0 to {MAX_USAGE_TOKENS}; got {value!r}.",
                    field=field,
                )
        elif key == "model":
            if not isinstance(value, str) or len(value) > MODEL_MAX_CHARS:
                raise InvalidUsage(
                    f"usage.model must be a string of at most {MODEL_MAX_CHARS} characters.",
                    field=field,
                )
            check_json_value(value, field=field)
        elif not isinstance(value, str) or not COST_PATTERN.fullmatch(value):
            raise InvalidUsage(
                "usage.cost must be a non-negative decimal given as a JSON string, with at most "
                f'6 fractional digits (e.g. "0.0042"); got {value!r}.',
                field=field,
            )
        checked[key] = value
    return checked


def totals_of(rows: Iterable[tuple[Mapping[str, Any] | None, int]]) -> Totals:
    """The sums of ``(usage, token_count)`` pairs: what those messages add to their session
    (docs/design.md §16.1-§16.2).

    Args:
        rows: each message's validated ``usage`` (or ``None``) and its ``token_count``.

    Returns:
        :class:`Totals` (``cost`` a ``Decimal``).
    """
    input_tokens = output_tokens = context_tokens = 0
    cost = Decimal(0)
    for usage, token_count in rows:
        context_tokens += token_count
        if usage:
            input_tokens += usage.get("input_tokens", 0)
            output_tokens += usage.get("output_tokens", 0)
            if "cost" in usage:
                cost += Decimal(usage["cost"])
    return Totals(input_tokens, output_tokens, cost, context_tokens)


def check_totals(
    current: Totals, added: Totals, *, max_cost: Decimal = MAX_TOTAL_COST, field: str = "messages"
) -> None:
    """Refuse a write that would take a session's totals past what their columns hold
    (docs/design.md §16.1): the ORM path checks under the session's row lock, before it writes;
    PostgreSQL's one statement lets the database refuse instead.

    Args:
        current: the session's totals, as read under its row lock.
        added: what the write adds (:func:`totals_of`; never negative).
        max_cost: the bound ``cost`` stays below: :data:`MAX_TOTAL_COST`, or
            :data:`SQLITE_MAX_TOTAL_COST` on SQLite.
        field: the input field named in the error.

    Raises:
        UsageTotalOverflow: ``cost`` would reach ``max_cost``, or a token total would pass
            :data:`MAX_TOTAL_TOKENS` (``params``: ``field``, ``total``, ``limit``).
    """
    for name in Totals._fields:
        theirs = getattr(added, name)
        if not theirs:
            continue
        total = getattr(current, name) + theirs
        if name == "cost" and total >= max_cost:
            raise UsageTotalOverflow(
                f"The append would take the session's cost to {total}; it must stay below "
                f"{max_cost}. Nothing was written.",
                field=field,
                total=name,
                limit=str(max_cost),
            )
        if name != "cost" and total > MAX_TOTAL_TOKENS:
            raise UsageTotalOverflow(
                f"The append would take the session's {name} to {total}; it may be at most "
                f"{MAX_TOTAL_TOKENS}. Nothing was written.",
                field=field,
                total=name,
                limit=str(MAX_TOTAL_TOKENS),
            )


def sums_of(messages: Any) -> Totals:
    """The totals of the messages of the queryset ``messages``, summed by the database in one
    aggregate query (docs/design.md §16.1-§16.2): for a fork and the recount, which must not
    load every row.

    Returns:
        :class:`Totals` (zeros for no rows).
    """
    from django.db.models import BigIntegerField, DecimalField, Sum, Value
    from django.db.models.fields.json import KeyTextTransform
    from django.db.models.functions import Cast, Coalesce

    def total(expression: Any, field: Any, zero: Any) -> Any:
        return Coalesce(Sum(Cast(expression, field)), Value(zero), output_field=field)

    money = DecimalField(max_digits=20, decimal_places=6)
    found = messages.aggregate(
        input_tokens=total(KeyTextTransform("input_tokens", "usage"), BigIntegerField(), 0),
        output_tokens=total(KeyTextTransform("output_tokens", "usage"), BigIntegerField(), 0),
        cost=total(KeyTextTransform("cost", "usage"), money, Decimal(0)),
        context_tokens=total("token_count", BigIntegerField(), 0),
    )
    return Totals(
        int(found["input_tokens"]),
        int(found["output_tokens"]),
        Decimal(found["cost"]).quantize(Decimal("0.000001")),
        int(found["context_tokens"]),
    )
