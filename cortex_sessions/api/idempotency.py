"""``Idempotency-Key`` on the API's creating POSTs (docs/design.md §12.1).

Decorate a view action with :func:`idempotent` and a request carrying the header runs it at
most once per caller scope and endpoint (method + path) within ``IDEMPOTENCY_TTL``:

- the first request runs the action; its status and body (as rendered JSON) are recorded in the
  same transaction as the action's writes, and only a 2xx answer is recorded — an error leaves
  the key free, so a retry after a 4xx/5xx/503 really runs again;
- a replay with the same body returns the recorded status and the same body, byte for byte,
  with ``Idempotent-Replayed: true``, and writes nothing;
- the same key with another body (or query) is 422 ``idempotency_key_reused``;
- a replay sent while the first is still running waits for it (the key's row, claimed first in
  the first request's transaction) and then replays it; past the database's lock wait timeout it
  is 409 ``idempotency_key_in_progress``;
- the endpoint names a session by its canonical id, so one session spelt several ways in the URL
  (upper case, no dashes, braces, ``urn:uuid:``) is one endpoint;
- a malformed key (not 1–255 visible ASCII, or holding a comma: two headers joined) is 400
  ``invalid_idempotency_key``.

Without the header nothing changes: the action runs as it always did, with no extra statement.
Wiring another endpoint (``/fork/``, ``/messages/pop/``, …) is one line::

    @idempotent
    @action(detail=True, methods=["post"])
    def fork(self, request, pk): ...

An action that can write and record its key in one statement (the append of one message on
PostgreSQL) is decorated ``@idempotent_with(OneStatement(write, replay))``: a keyed request
tries ``write`` first, and only when it wrote nothing goes the way above; a replay whose row
``write`` recorded is answered by ``replay`` (:class:`OneStatement`).

``IDEMPOTENCY_PARAMETER`` documents the header in the OpenAPI schema
(``@extend_schema(parameters=[IDEMPOTENCY_PARAMETER])``).
"""

from __future__ import annotations

import functools
import json
import uuid
from collections.abc import Callable
from typing import Any, NamedTuple, cast

from drf_spectacular.utils import OpenApiParameter
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.utils.encoders import JSONEncoder

from cortex_sessions.services.idempotency import (
    IDEMPOTENCY_KEY_PATTERN,
    check_idempotency_key,
    fingerprint,
    run_once,
)
from cortex_sessions.services.keyed_append import KeyedCall

__all__ = [
    "IDEMPOTENCY_HEADER",
    "IDEMPOTENCY_PARAMETER",
    "REPLAYED_HEADER",
    "OneStatement",
    "endpoint_of",
    "idempotent",
    "idempotent_with",
]

IDEMPOTENCY_HEADER = "Idempotency-Key"
#: The header's key in ``request.META`` (WSGI): read there, not through ``request.headers``,
#: whose first use builds a dict of every header of the request (docs/design.md §14.5).
_IDEMPOTENCY_META = "HTTP_IDEMPOTENCY_KEY"
REPLAYED_HEADER = "Idempotent-Replayed"

IDEMPOTENCY_PARAMETER = OpenApiParameter(
    IDEMPOTENCY_HEADER,
    {"type": "string", "minLength": 1, "maxLength": 255, "pattern": IDEMPOTENCY_KEY_PATTERN},
    OpenApiParameter.HEADER,
    description=(
        "Makes the request safe to retry: within IDEMPOTENCY_TTL (default 24 h) a replay with "
        "the same body returns the first response and writes nothing (header "
        "`Idempotent-Replayed: true`); another body under the same key is 422 "
        "`idempotency_key_reused`; a duplicate sent while the first runs waits for it and replays "
        "it (409 `idempotency_key_in_progress` past the database's lock wait timeout). 1-255 "
        "visible ASCII characters without a comma (two headers arrive joined by one): else 400 "
        "`invalid_idempotency_key`."
    ),
)


def endpoint_of(request: Request, kwargs: dict[str, Any]) -> str:
    """The endpoint a key is recorded under: ``api:<METHOD> <path>``, the path's ``pk`` segment
    written as the canonical (lower-case, dashed) UUID when it is one, so every spelling of a
    session's id that the views accept names one endpoint (docs/design.md §12.1).

    Args:
        request: the request.
        kwargs: the view's URL keyword arguments (``self.kwargs``).

    Returns:
        The endpoint text; the path as requested when ``pk`` is absent or not a UUID.
    """
    path = request.path
    raw = kwargs.get("pk")
    if isinstance(raw, str):
        try:
            canonical = str(uuid.UUID(raw))
        except ValueError:
            pass
        else:
            path = "/".join(canonical if part == raw else part for part in path.split("/"))
    return f"api:{request.method} {path}"


class _Rendered(Exception):
    """Carries a non-2xx response out of the transaction so nothing is recorded or kept."""

    def __init__(self, response: Response) -> None:
        self.response = response


class OneStatement(NamedTuple):
    """An action's path that writes and records its key in one statement (docs/design.md
    §12.1, §14), for :func:`idempotent_with`.

    Attributes:
        write: ``write(view, request, kwargs, keyed) -> Response | None``: run the action
            recording ``keyed`` (a :class:`~cortex_sessions.services.keyed_append.KeyedCall`)
            in its write's statement, answering as the action would; ``None`` when it wrote
            nothing and the key must be served the general way (:func:`idempotent`). What it
            raises is answered as the action's errors are (the key stays free).
        replay: ``replay(view, kwargs, response) -> data | None``: the body of a replay of a
            key row ``write`` recorded (``response``: its text), ``None`` for any other row.
    """

    write: Callable[[Any, Request, dict[str, Any], KeyedCall], Response | None]
    replay: Callable[[Any, dict[str, Any], str], Any]


def idempotent(action: Callable[..., Response]) -> Callable[..., Response]:
    """Make a creating view action honour ``Idempotency-Key`` (docs/design.md §12.1).

    Args:
        action: a viewset method ``(self, request, *args, **kwargs) -> Response`` of a view
            using :class:`cortex_sessions.api.mixins.CortexAPIMixin` (``self.scope``).

    Returns:
        The wrapped action. Errors it raises propagate unchanged (and roll its writes back);
        besides them: 400 ``invalid_idempotency_key``, 409 ``idempotency_key_in_progress``,
        422 ``idempotency_key_reused``, 503 ``write_outcome_unknown``.
    """
    return _keyed(action, None)


def idempotent_with(
    one_statement: OneStatement,
) -> Callable[[Callable[..., Response]], Callable[..., Response]]:
    """:func:`idempotent`, trying ``one_statement.write`` first (docs/design.md §12.1).

    Args:
        one_statement: the action's one-statement path (:class:`OneStatement`).

    Returns:
        A decorator of the action, as :func:`idempotent` with its errors.
    """
    return functools.partial(_keyed, one_statement=one_statement)


def _keyed(
    action: Callable[..., Response], one_statement: OneStatement | None
) -> Callable[..., Response]:
    """The wrapper :func:`idempotent` and :func:`idempotent_with` return."""

    @functools.wraps(action)
    def wrapper(self: Any, request: Request, *args: Any, **kwargs: Any) -> Response:
        key = request.META.get(_IDEMPOTENCY_META)
        if key is None:
            return action(self, request, *args, **kwargs)
        check_idempotency_key(key)
        digest = fingerprint({"body": request.data, "query": sorted(request.query_params.lists())})
        view_kwargs = getattr(self, "kwargs", None) or kwargs
        endpoint = endpoint_of(request, view_kwargs)
        if one_statement is not None:
            keyed = KeyedCall(self.scope, endpoint, key, digest)
            written = one_statement.write(self, request, view_kwargs, keyed)
            if written is not None:
                return written

        def write() -> Response:
            response = action(self, request, *args, **kwargs)
            if not 200 <= response.status_code < 300:
                raise _Rendered(response)
            return response

        def record(response: Response) -> tuple[int, str]:
            return response.status_code, json.dumps(
                response.data, cls=JSONEncoder, ensure_ascii=False
            )

        try:
            outcome = run_once(
                scope=self.scope,
                endpoint=endpoint,
                key=key,
                digest=digest,
                write=write,
                record=record,
            )
        except _Rendered as rendered:
            return rendered.response
        if not outcome.replayed:
            return cast(Response, outcome.result)
        data = None
        if one_statement is not None:
            data = one_statement.replay(self, view_kwargs, outcome.response)
        return Response(
            json.loads(outcome.response) if data is None else data,
            status=outcome.status_code,
            headers={REPLAYED_HEADER: "true"},
        )

    return wrapper
