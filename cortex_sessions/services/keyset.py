"""Keyset (cursor) pagination of session lists: page N costs what page 1 costs (docs/design.md §14).

A page is read with ``WHERE (sort key, id) < (last row's sort key, last row's id)`` (``>`` for an
ascending order) and ``LIMIT``, so the database walks the index from where the previous page
ended instead of skipping ``offset`` rows. The id breaks ties, so rows with equal sort keys are
neither repeated nor skipped, and a row inserted or moved while a client pages shows up at most
once (it is seen or not, according to its new position).

A cursor is opaque to clients, as in DRF's ``CursorPagination``: URL-safe base64 of a small JSON
object with the ordering it belongs to, the position (sort key and id of the row it follows) and
the direction (``next`` or ``previous``). A cursor that does not decode, or that belongs to another
ordering, is ``InvalidFilter`` (400 ``invalid_filter``), never silently page 1.
"""

from __future__ import annotations

import base64
import binascii
import json
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

from django.db.models import Q

from ..content import check_json_value, parse_json
from ..exceptions import CortexSessionsError, InvalidFilter
from ..models import Session, SessionQuerySet
from ..scope import Scope, canonical_of
from ..search_limits import search_timeout
from ..usage import TOTAL_COST_PATTERN
from . import _pg_lists
from ._common import MAX_INT64, _check_int, _db_for_read
from .filters import SessionFilters, session_filters
from .sessions import _session_queryset, check_ordering

__all__ = ["SessionPage", "list_sessions_page", "paginate_keyset"]

#: Longest cursor accepted, in characters (a position is a sort key of at most 500 characters).
MAX_CURSOR_CHARS = 4096


@dataclass(frozen=True)
class SessionPage:
    """One keyset page of sessions.

    Attributes:
        results: the sessions of the page, in the list's order.
        next_cursor: the cursor of the following page, or ``None`` on the last page.
        previous_cursor: the cursor of the page before, or ``None`` on the first page.
    """

    results: list[Session] = field(default_factory=list)
    next_cursor: str | None = None
    previous_cursor: str | None = None


def _invalid(detail: str = "cursor is not a cursor of this list.") -> InvalidFilter:
    return InvalidFilter(detail, field="cursor")


def _encode(ordering: str, row: Session, *, previous: bool) -> str:
    key = getattr(row, ordering.lstrip("-"))
    if isinstance(key, datetime):
        key = key.isoformat()
    elif isinstance(key, Decimal):  # cost: its exact digits, six after the point
        key = f"{key.quantize(_MICRO):f}"
    data = {"o": ordering, "k": key, "i": str(row.pk), "d": "p" if previous else "n"}
    raw = json.dumps(data, separators=(",", ":"), ensure_ascii=False).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


#: The members of a cursor object, each a string: ordering, sort key (a string, or the count
#: for ``message_count``), id, direction.
_CURSOR_KEYS = frozenset({"o", "k", "i", "d"})


#: A datetime key lies between these (UTC): SQLite and MySQL/MariaDB compare a naive
#: value in the connection's time zone, which may be up to a day away from UTC, and a year
#: outside 1–9999 does not exist in Python.
_FIRST_DAY = datetime.min.replace(tzinfo=UTC) + timedelta(days=1)
_LAST_DAY = datetime.max.replace(tzinfo=UTC) - timedelta(days=1)


def _decode(cursor: Any, ordering: str) -> tuple[Any, uuid.UUID, bool]:
    """``(sort key, id, previous)`` of a cursor of ``ordering``, every part checked before any
    database sees it (docs/design.md §14.3).

    A cursor comes from the client, so anything is refused that :func:`_encode` would not have
    written or that some database cannot compare: text that is not URL-safe base64 of UTF-8
    JSON, JSON that is not an object of exactly the four members with their types, an id that
    is not a UUID in its canonical form, a text key with NUL or a lone surrogate (no UTF-8
    encoding), a datetime without an offset, or one that is not at least a day inside the
    calendar (years 1 to 9999) in UTC: SQLite and MySQL/MariaDB compare it as a naive value in
    the connection's time zone, which ``0001-01-01T00:00:00+14:00`` (year 0 in UTC) does not
    have; no row is stored that close to the calendar's ends.

    Returns:
        The key (an aware UTC ``datetime`` for ``created_at``/``updated_at``, an ``int`` for
        ``message_count`` and the token totals, a ``Decimal`` for ``cost``, a ``str`` for
        ``title``), the id, and whether the cursor points
        backwards (a previous page).

    Raises:
        InvalidFilter: not a cursor, or a cursor of another ordering.
    """
    if not isinstance(cursor, str) or len(cursor) > MAX_CURSOR_CHARS:
        raise _invalid()
    try:
        data = parse_json(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode())
    except (ValueError, binascii.Error):  # UnicodeDecodeError is a ValueError
        raise _invalid() from None
    if not isinstance(data, dict) or data.keys() != _CURSOR_KEYS:
        raise _invalid()
    key, pk, direction = data["k"], data["i"], data["d"]
    if not isinstance(data["o"], str) or not isinstance(pk, str) or direction not in ("n", "p"):
        raise _invalid()
    if data["o"] != ordering:
        raise _invalid("cursor belongs to another ordering; start again without it.")
    try:
        parsed_pk = uuid.UUID(pk)
        if str(parsed_pk) != pk:
            raise ValueError(pk)
        key = _decode_key(key, ordering.lstrip("-"))
    except (ValueError, TypeError, OverflowError, CortexSessionsError):
        raise _invalid() from None
    return key, parsed_pk, direction == "p"


#: Orderings whose key is a non-negative integer (docs/design.md §5, §16.1-§16.2).
_INTEGER_KEYS = frozenset({"message_count", "input_tokens", "output_tokens", "context_tokens"})
_MICRO = Decimal("0.000001")


def _decode_key(key: Any, name: str) -> Any:
    """The sort key of a cursor, checked for ``name`` (see :func:`_decode`).

    Raises:
        ValueError, TypeError, OverflowError, CortexSessionsError: not a key of ``name``.
    """
    if name in _INTEGER_KEYS:
        return _check_int(key, field="cursor", minimum=0)
    if not isinstance(key, str):
        raise TypeError(key)
    if name == "cost":
        if not TOTAL_COST_PATTERN.fullmatch(key):
            raise ValueError(key)
        return Decimal(key)
    check_json_value(key, field="cursor")  # NulCharacter, InvalidText: NUL, lone surrogate
    if name not in ("created_at", "updated_at"):
        return key
    moment = datetime.fromisoformat(key)
    if moment.tzinfo is None:
        raise ValueError(key)
    moment = moment.astimezone(UTC)  # OverflowError: year 0 or 10000 in UTC
    if not _FIRST_DAY <= moment <= _LAST_DAY:
        raise ValueError(key)
    return moment


def _ordering_of(queryset: SessionQuerySet) -> str:
    """The sort key of a queryset from :func:`session_queryset` (ordered by key, then id).

    Raises:
        InvalidFilter: the queryset is a search ordered by rank (``q`` without ``ordering``):
            a rank is no position to resume from.
    """
    order = [str(term) for term in queryset.query.order_by]
    if order and "search_rank" in order[0]:
        raise _invalid(
            "cursor pages of a search (q) need an ordering (e.g. ordering=-updated_at); "
            "results ordered by rank page with limit and offset."
        )
    if len(order) != 2 or order[1].lstrip("-") != "id":
        raise ValueError("paginate_keyset needs a queryset from session_queryset().")
    return order[0]


def paginate_keyset(queryset: SessionQuerySet, *, cursor: str | None, limit: int) -> SessionPage:
    """The page of ``queryset`` that ``cursor`` points at (the first page without one).

    Args:
        queryset: sessions as :func:`session_queryset` returns them (filtered; ordered by one
            of ``ORDERING_FIELDS`` with the id as tie-break in the same direction).
        cursor: ``None`` or a cursor from a previous :class:`SessionPage` of the same list.
        limit: the page size, ``>= 1``.

    Returns:
        The :class:`SessionPage` (one query: ``limit + 1`` rows tell whether more follow).

    Raises:
        InvalidFilter: a bad ``limit`` or ``cursor``.
    """
    _check_int(limit, field="limit", minimum=1)
    if limit >= MAX_INT64:
        raise InvalidFilter("limit is too large.", field="limit")
    ordering = _ordering_of(queryset)
    name = ordering.lstrip("-")
    descending = ordering.startswith("-")
    previous = False
    if cursor is not None:
        key, pk, previous = _decode(cursor, ordering)
        # "After" in the list's own direction; "before" (a previous page) is the other way.
        after_is_less = descending != previous
        op = "lt" if after_is_less else "gt"
        bound = "lte" if after_is_less else "gte"
        # The redundant bound on the sort key alone gives the index a range to start from.
        queryset = queryset.filter(
            Q(**{f"{name}__{bound}": key})
            & (Q(**{f"{name}__{op}": key}) | Q(**{name: key, f"pk__{op}": pk}))
        )
    if previous:
        queryset = queryset.reverse()
    return _page(
        list(queryset[: limit + 1]), ordering, cursor=cursor, limit=limit, previous=previous
    )


def _page(
    rows: list[Session], ordering: str, *, cursor: str | None, limit: int, previous: bool
) -> SessionPage:
    """The :class:`SessionPage` of ``rows``, the ``limit + 1`` rows read after ``cursor`` (in
    the list's direction, or against it for a ``previous`` cursor)."""
    more = len(rows) > limit
    rows = rows[:limit]
    if previous:
        rows.reverse()
    if not rows:
        return SessionPage([], None, None)
    has_next = more if not previous else True
    has_previous = (cursor is not None) if not previous else more
    return SessionPage(
        results=rows,
        next_cursor=_encode(ordering, rows[-1], previous=False) if has_next else None,
        previous_cursor=_encode(ordering, rows[0], previous=True) if has_previous else None,
    )


def list_sessions_page(
    *,
    scope: Scope | str,
    filters: SessionFilters | None = None,
    ordering: str | None = None,
    limit: int = 50,
    cursor: str | None = None,
) -> SessionPage:
    """A keyset page of the sessions at ``scope`` (``filters`` and ``ordering`` as
    :func:`session_queryset`).

    Start without ``cursor``; pass ``next_cursor`` (or ``previous_cursor``) of the page you have
    to get the one after (or before) it, with the same filters and ordering. Each page is one
    query whose cost does not grow with how far the client has paged (docs/design.md §14).
    A search (``filters.q``, docs/design.md §11.5) pages by cursor only with an explicit
    ``ordering`` (on PostgreSQL its default order is the rank).

    Returns:
        :class:`SessionPage`.

    Raises:
        NoScope, InvalidScope.
        InvalidFilter: a bad ordering, ``limit`` or ``cursor`` (a cursor of another ordering
            included); ``filters.q`` without ``ordering``, or on MySQL/MariaDB.
        TypeError: ``filters`` is not a ``SessionFilters`` (or ``None``).
        SearchTimeout: with ``filters.q``, the search ran past ``SEARCH_TIMEOUT``
            (docs/design.md §11.5).
    """
    filters = session_filters(filters)
    if filters.q is not None and ordering is None:
        raise _invalid(
            "cursor pages of a search (q) need an ordering (e.g. ordering=-updated_at); "
            "results ordered by rank page with limit and offset."
        )
    alias = _db_for_read(scope)
    if _pg_lists.handles(alias, filters):  # one statement, no queryset (docs/design.md §14)
        return _fast_page(alias, scope, filters, ordering, limit=limit, cursor=cursor)
    queryset = _session_queryset(scope, filters, ordering, using=alias)
    with search_timeout(queryset.db, active=filters.q is not None):
        return paginate_keyset(queryset, cursor=cursor, limit=limit)


def _fast_page(
    alias: str,
    scope: Scope | str,
    filters: SessionFilters,
    ordering: str | None,
    *,
    limit: int,
    cursor: str | None,
) -> SessionPage:
    """:func:`list_sessions_page` in one statement (:mod:`._pg_lists`): the same checks in the
    same order (scope, ordering, limit, cursor), then the same page.

    Raises:
        NoScope, InvalidScope, InvalidFilter: as :func:`list_sessions_page`.
    """
    canonical = canonical_of(scope)
    ordering = check_ordering(ordering)
    _check_int(limit, field="limit", minimum=1)
    if limit >= MAX_INT64:
        raise InvalidFilter("limit is too large.", field="limit")
    after, previous = None, False
    if cursor is not None:
        key, pk, previous = _decode(cursor, ordering)
        after_is_less = ordering.startswith("-") != previous
        after = _pg_lists.KeysetBound("lt" if after_is_less else "gt", key, pk)
    rows = _pg_lists.list_sessions(
        alias,
        canonical=canonical,
        filters=filters,
        ordering=ordering,
        limit=limit + 1,
        after=after,
        reverse=previous,
    )
    return _page(rows, ordering, cursor=cursor, limit=limit, previous=previous)
