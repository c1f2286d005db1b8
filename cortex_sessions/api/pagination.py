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

from cortex_sessions.conf import app_settings

from .exceptions import InvalidQuery

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
        default: returned when the parameter is absent or empty.
        minimum, maximum: inclusive bounds.
        message: the error's ``detail``; default "<name> must be an integer from <minimum> to
            <maximum>." (pass one when ``maximum`` is only a storage limit, not the real one).

    Returns:
        The integer, or ``default``.

    Raises:
        InvalidQuery: not a base-10 integer, or outside the bounds (400 ``invalid_filter``).
    """
    raw = request.query_params.get(name)
    if raw is None or raw == "":
        return default
    value = int(raw) if _INT_RE.fullmatch(raw) else None
    if value is None or not minimum <= value <= maximum:
        detail = message or f"{name} must be an integer from {minimum} to {maximum}."
        raise InvalidQuery({name: [ErrorDetail(detail, code="invalid")]})
    return value


class SessionPagination(LimitOffsetPagination):
    """``LimitOffsetPagination`` with the app's settings and strict parameters.

    The response is ``{"count", "next", "previous", "results"}``; a page costs two queries (the
    count and the rows) whatever its size.
    """

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
        """The ``limit`` and ``offset`` parameters with their bounds, for the OpenAPI schema."""
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
        ]
