"""Pagination of the session list: limit/offset, strict (docs/design.md §7.3).

Default page size ``PAGE_SIZE`` (50), largest ``MAX_PAGE_SIZE`` (1000), both read live from
``CORTEX_SESSIONS``. Unlike DRF's ``LimitOffsetPagination``, a bad ``limit`` or ``offset`` (not an
integer, negative, zero limit, above the maximum) is a 400 ``invalid_filter``, never silently
replaced by the default.
"""

from __future__ import annotations

import re
from typing import Any, cast

from rest_framework.exceptions import ErrorDetail
from rest_framework.pagination import LimitOffsetPagination
from rest_framework.response import Response
from rest_framework.utils.urls import replace_query_param

from cortex_sessions.conf import app_settings
from cortex_sessions.services.keyset import paginate_keyset

from .exceptions import InvalidQuery
from .filters import EMPTY_VALUE_MESSAGE

__all__ = ["MAX_OFFSET", "SessionPagination", "parse_int_param"]

_INT_RE = re.compile(r"-?[0-9]{1,19}")

#: Largest offset accepted (fits a signed 64-bit integer on every database).
MAX_OFFSET = 2**63 - 1


def parse_int_param(
    request: Any,
    name: str,
    *,
    default: Any,
    minimum: int,
    maximum: int,
    message: str | None = None,
) -> Any:
    """Read an integer query parameter strictly.

    Args:
        request: the DRF request.
        name: the parameter.
        default: returned when the parameter is absent.
        minimum, maximum: inclusive bounds.
        message: the error's ``detail``; default "<name> must be an integer from <minimum> to
            <maximum>." (pass one when ``maximum`` is only a storage limit, not the real one).

    Returns:
        The integer, or ``default`` when the parameter is absent.

    Raises:
        InvalidQuery: empty (an empty value is never "not given": ``DELETE …/messages/?after_seq=``
            must not delete every message), not a base-10 integer, or outside the bounds (400
            ``invalid_filter``).
    """
    raw = request.query_params.get(name)
    if raw is None:
        return default
    if raw == "":
        raise InvalidQuery({name: [ErrorDetail(EMPTY_VALUE_MESSAGE, code="invalid")]})
    value = int(raw) if _INT_RE.fullmatch(raw) else None
    if value is None or not minimum <= value <= maximum:
        detail = message or f"{name} must be an integer from {minimum} to {maximum}."
        raise InvalidQuery({name: [ErrorDetail(detail, code="invalid")]})
    return value


class SessionPagination(LimitOffsetPagination):
    """``LimitOffsetPagination`` with the app's settings and strict parameters, and keyset
    pages when the request has a ``cursor``.

    Limit/offset: ``{"count", "next", "previous", "results"}``; a page costs two queries (the
    count and the rows) whatever its size, and the rows query skips ``offset`` rows.
    Keyset (``?cursor=``, empty for the first page; then follow ``next`` / ``previous``):
    ``{"next", "previous", "results"}``, one query a page whatever its position; stable when
    sort keys are equal (the id breaks ties). ``offset`` and ``cursor`` together are a 400.
    """

    cursor_query_param = "cursor"
    #: The keyset page of the current request (``None``: limit/offset).
    keyset_page: Any = None

    def paginate_queryset(self, queryset: Any, request: Any, view: Any = None) -> Any:
        """The rows of the page; keyset when the request has ``cursor``.

        Raises:
            InvalidQuery: a bad ``limit`` or ``offset``, or ``offset`` with ``cursor``.
            InvalidFilter: a bad ``cursor`` (400 ``invalid_filter``).
        """
        self.keyset_page = None
        if self.cursor_query_param not in request.query_params:
            return super().paginate_queryset(queryset, request, view)
        self.request = request
        self.limit = self.get_limit(request)
        if self.offset_query_param in request.query_params:
            message = "offset and cursor exclude each other; follow the next link of a page."
            raise InvalidQuery({"offset": [ErrorDetail(message, code="invalid")]})
        cursor = request.query_params[self.cursor_query_param] or None
        self.keyset_page = paginate_keyset(queryset, cursor=cursor, limit=self.limit)
        return self.keyset_page.results

    def _cursor_link(self, cursor: str | None) -> str | None:
        if cursor is None:
            return None
        assert self.request is not None  # set by paginate_queryset
        url = self.request.build_absolute_uri()
        return replace_query_param(url, self.cursor_query_param, cursor)

    def get_paginated_response(self, data: Any) -> Response:
        """``{"count", "next", "previous", "results"}``, or without ``count`` for a keyset page."""
        if self.keyset_page is None:
            return super().get_paginated_response(data)
        return Response(
            {
                "next": self._cursor_link(self.keyset_page.next_cursor),
                "previous": self._cursor_link(self.keyset_page.previous_cursor),
                "results": data,
            }
        )

    def get_paginated_response_schema(self, schema: Any) -> dict[str, Any]:
        """The page object of either mode: ``count`` only with limit/offset."""
        page = super().get_paginated_response_schema(schema)
        page["required"] = ["results"]
        page["properties"]["count"]["description"] = (
            "Sessions matching the filters (limit/offset pages only; absent with cursor)."
        )
        for name in ("next", "previous"):
            page["properties"][name]["description"] = (
                f"The {name} page's URL (offset or cursor, as the request), or null."
            )
        return page

    @property
    def default_limit(self) -> int:  # type: ignore[override]
        """``CORTEX_SESSIONS["PAGE_SIZE"]``, read on every request."""
        return app_settings.PAGE_SIZE

    @property
    def max_limit(self) -> int:  # type: ignore[override]
        """``CORTEX_SESSIONS["MAX_PAGE_SIZE"]``, read on every request."""
        return app_settings.MAX_PAGE_SIZE

    def get_limit(self, request: Any) -> int:
        """The page size: ``limit`` from 1 to ``MAX_PAGE_SIZE``, default ``PAGE_SIZE``.

        Raises:
            InvalidQuery: a bad ``limit``.
        """
        return cast(
            int,
            parse_int_param(
                request,
                self.limit_query_param,
                default=min(self.default_limit, self.max_limit),
                minimum=1,
                maximum=self.max_limit,
            ),
        )

    def get_offset(self, request: Any) -> int:
        """Rows skipped: ``offset`` >= 0, default 0.

        Raises:
            InvalidQuery: a bad ``offset``.
        """
        return cast(
            int,
            parse_int_param(
                request, self.offset_query_param, default=0, minimum=0, maximum=MAX_OFFSET
            ),
        )

    def get_schema_operation_parameters(self, view: Any) -> list[dict[str, Any]]:
        """The ``limit``, ``offset`` and ``cursor`` parameters, for the OpenAPI schema."""
        return [
            {
                "name": self.limit_query_param,
                "required": False,
                "in": "query",
                "description": (
                    f"Page size, 1 to MAX_PAGE_SIZE ({self.max_limit}); default PAGE_SIZE "
                    f"({self.default_limit})."
                ),
                "schema": {"type": "integer", "minimum": 1, "maximum": self.max_limit},
            },
            {
                "name": self.offset_query_param,
                "required": False,
                "in": "query",
                "description": "Number of sessions to skip.",
                "schema": {"type": "integer", "minimum": 0, "maximum": MAX_OFFSET},
            },
            {
                "name": self.cursor_query_param,
                "required": False,
                "in": "query",
                "description": (
                    "Keyset paging: empty for the first page, then the cursor of a next or "
                    "previous link. The response has no count; not with offset."
                ),
                "schema": {"type": "string", "maxLength": 4096},
            },
        ]
