"""The ``X-Cortex-Consistency-Token`` header and reads a replica failed (docs/design.md §17.2).

Each API request is its own caller for :mod:`cortex_sessions.consistency`, starting at the
position the client sends in ``X-Cortex-Consistency-Token`` (the value of that header in an
earlier response). Every response names the position the client's writes, as far as this
server knows them, end at; a client that sends it back reads its own writes, from a replica
when one has replayed them (``cortex_sessions.routers.ReplicaRouter``), else from the primary.
A malformed token is not an error: that request reads from the primary.

A read (``GET``, ``HEAD``, ``OPTIONS``) that fails on a replica with a database error (the
replica went down mid-request, or cancelled the query for a recovery conflict) runs once more
with every read on the primary: a client never sees a 5xx for a replica's trouble.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.db import DEFAULT_DB_ALIAS, InterfaceError, OperationalError, connections, transaction
from drf_spectacular.utils import OpenApiParameter
from rest_framework.permissions import SAFE_METHODS
from rest_framework.response import Response
from rest_framework.views import APIView

from cortex_sessions import consistency, routers

__all__ = ["TOKEN_PARAMETERS", "ConsistencySchemaMixin", "ConsistencyTokenMixin"]

_DESCRIPTION = (
    "Read-your-writes on read replicas: the WAL position (`<hex>/<hex>`) the client's writes "
    "end at. Send back the value of the latest response's header; reads then never miss "
    "those writes. Optional; a malformed value reads from the primary."
)

#: The header as a request parameter and as a response header of every operation.
TOKEN_PARAMETERS = [
    OpenApiParameter(
        consistency.TOKEN_HEADER,
        str,
        OpenApiParameter.HEADER,
        required=False,
        description=_DESCRIPTION,
    ),
    OpenApiParameter(
        consistency.TOKEN_HEADER,
        str,
        OpenApiParameter.HEADER,
        required=False,
        response=True,
        description="The position to send back in the next request (absent before any write).",
    ),
]

#: SQLSTATE of a query a standby cancelled for a recovery conflict (``serialization_failure``).
_RECOVERY_CONFLICT = "40001"
#: The token header's key in ``request.META`` (WSGI): read there, not through ``request.headers``,
#: whose first use builds a dict of every header of the request (docs/design.md §14.5).
_TOKEN_META = "HTTP_X_CORTEX_CONSISTENCY_TOKEN"

if TYPE_CHECKING:
    from drf_spectacular.openapi import AutoSchema

    _ViewBase = APIView
    _SchemaBase = AutoSchema
else:
    _ViewBase = object
    _SchemaBase = object


def _sqlstate(exc: BaseException) -> str | None:
    cause = exc.__cause__  # psycopg 3 names it sqlstate, psycopg 2 pgcode
    value = getattr(cause, "sqlstate", None) or getattr(cause, "pgcode", None)
    return value if isinstance(value, str) else None


class ConsistencySchemaMixin(_SchemaBase):
    """For an ``AutoSchema``: every operation documents the consistency token header."""

    def get_override_parameters(self) -> list[Any]:
        """drf-spectacular's parameters, plus :data:`TOKEN_PARAMETERS`."""
        return [*super().get_override_parameters(), *TOKEN_PARAMETERS]


class ConsistencyTokenMixin(_ViewBase):
    """For an ``APIView``: the request runs as its own caller at the client's token, the
    response carries the token, and a read a replica failed runs again on the primary."""

    _replica_failed: str | None = None

    def dispatch(self, request: Any, *args: Any, **kwargs: Any) -> Any:
        """DRF's dispatch, inside :func:`~cortex_sessions.consistency.consistency_context`."""
        with consistency.consistency_context(request.META.get(_TOKEN_META)):
            self._replica_failed = None
            response = super().dispatch(request, *args, **kwargs)
            if self._replica_failed is not None:
                self._replica_failed = None
                with consistency.primary_reads():
                    response = super().dispatch(request, *args, **kwargs)
            position = consistency.current_position()
        primary = routers.ReplicaRouter.primary
        if connections[primary].in_atomic_block:  # ATOMIC_REQUESTS: named once it commits
            transaction.on_commit(lambda: _set_token(response, position), using=primary)
        else:
            _set_token(response, position)
        return response

    def handle_exception(self, exc: Exception) -> Response:
        """A database error of a read that used a replica: marks the read for a second run on
        the primary (:meth:`dispatch`); anything else goes to DRF's handling."""
        alias = consistency.replica_used()
        request = getattr(self, "request", None)
        if (
            alias is not None
            and isinstance(exc, OperationalError | InterfaceError)
            and request is not None
            and request.method in SAFE_METHODS
            and not consistency.reads_pinned_to_primary()
        ):
            if _sqlstate(exc) != _RECOVERY_CONFLICT:
                routers.mark_down(alias)  # unreachable: leave it out for a while
            self._replica_failed = alias
            return Response(status=503)  # replaced by the run on the primary
        return super().handle_exception(exc)


def _set_token(response: Any, position: consistency.Position) -> None:
    if position.lsn is None and not position.pending:
        return  # nothing written that a token could name: consistency.token would be None
    with consistency.consistency_context(position=position):
        value = consistency.token(DEFAULT_DB_ALIAS)
    if value is not None:
        response[consistency.TOKEN_HEADER] = value
