"""Error responses of the API: one body shape, one status per error class (docs/design.md §7.3).

Every error body is ``{"code": str, "detail": str}``; validation errors add
``"errors": {field: [{"code", "detail"}, ...]}`` with nested fields flattened to dotted paths
(``"1.role"`` for the second message of a list). Our views install :func:`exception_handler`
through ``get_exception_handler()``; the host's ``REST_FRAMEWORK["EXCEPTION_HANDLER"]`` is left
alone and never consulted for our views.

Status codes come from, in order:

1. an integer ``http_status`` attribute on the exception (so a later error class that carries
   ``code`` and ``http_status`` — the session-reference errors of §8.9 — maps with no change here);
2. :data:`ERROR_STATUS`, looked up along the exception's class hierarchy (most specific first).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any

from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.core.exceptions import RequestDataTooBig
from django.http import Http404
from rest_framework import exceptions as drf_exceptions
from rest_framework import status
from rest_framework.response import Response
from rest_framework.views import set_rollback

from cortex_sessions import exceptions as core
from cortex_sessions.faults import RETRY_AFTER_SECONDS, is_transient_database_error

logger = logging.getLogger("cortex_sessions")

__all__ = [
    "ERROR_STATUS",
    "SAME_AS_APP_CODE",
    "DatabaseUnavailable",
    "InvalidQuery",
    "OutcomeUnknown",
    "ReferencesNotAllowed",
    "RequestTooLarge",
    "error_body",
    "exception_handler",
    "status_for",
]

#: HTTP status of each core exception class; the most specific class in the MRO wins.
ERROR_STATUS: dict[type[BaseException], int] = {
    core.InvalidInput: status.HTTP_400_BAD_REQUEST,
    core.InvalidScope: status.HTTP_400_BAD_REQUEST,
    core.NoScope: status.HTTP_403_FORBIDDEN,
    core.ScopeForbidden: status.HTTP_403_FORBIDDEN,
    core.SessionNotFound: status.HTTP_404_NOT_FOUND,
    core.MessageNotFound: status.HTTP_404_NOT_FOUND,
    core.ErasureNotFound: status.HTTP_404_NOT_FOUND,
    core.DefaultConflict: status.HTTP_409_CONFLICT,
    core.SessionArchived: status.HTTP_409_CONFLICT,
    core.LegalHold: status.HTTP_409_CONFLICT,
    core.IdempotencyKeyInProgress: status.HTTP_409_CONFLICT,
    core.WriteOutcomeUnknown: status.HTTP_503_SERVICE_UNAVAILABLE,
    core.IdempotencyKeyReused: status.HTTP_422_UNPROCESSABLE_ENTITY,
    core.ContextBudgetExceeded: status.HTTP_422_UNPROCESSABLE_ENTITY,
    core.MessageTooLarge: status.HTTP_413_REQUEST_ENTITY_TOO_LARGE,
    core.SummaryTooLarge: status.HTTP_400_BAD_REQUEST,
    core.SearchTimeout: status.HTTP_503_SERVICE_UNAVAILABLE,
    core.TokenCountError: status.HTTP_503_SERVICE_UNAVAILABLE,
    core.CortexSessionsError: status.HTTP_400_BAD_REQUEST,
}


class InvalidQuery(drf_exceptions.ValidationError):
    """A query parameter (filter, ordering, page bound, scope) is not acceptable: 400
    ``invalid_filter`` with the offending parameters under ``errors`` (docs/design.md §7.2);
    when every offence breaks one rule of its own (``invalid_agent_id``, ``too_long``,
    ``nul_character``), that rule's code."""

    default_code = "invalid_filter"
    default_detail = "Invalid query parameters."

    @classmethod
    def naming(cls, names: Iterable[str], message: str, code: str) -> InvalidQuery:
        """The error for ``names``, each with ``message`` and field code ``code``
        (``unknown_parameter``, ``repeated_parameter``, …)."""
        return cls({name: [drf_exceptions.ErrorDetail(message, code=code)] for name in names})

    @classmethod
    def repeated(cls, names: Iterable[str]) -> InvalidQuery:
        """400 ``invalid_filter`` naming parameters given more than once (code
        ``repeated_parameter``): every parameter of the API takes one value, and reading one
        of several silently would answer a request the client did not make
        (docs/design.md §12.4)."""
        return cls.naming(names, "Give this parameter once.", "repeated_parameter")


class ReferencesNotAllowed(drf_exceptions.ValidationError):
    """``resolve_references`` or ``references`` sent where they do not apply — a list of
    messages, a role other than ``user``, a source other than ``user``, or ``references``
    without ``resolve_references: true``: 400 ``references_not_allowed`` naming the field
    (docs/design.md §8.8)."""

    default_code = "references_not_allowed"
    default_detail = "Session references apply only to a single message with role 'user'."


class RequestTooLarge(drf_exceptions.APIException):
    """The request body is larger than Django's ``DATA_UPLOAD_MAX_MEMORY_SIZE``: 413."""

    status_code = status.HTTP_413_REQUEST_ENTITY_TOO_LARGE
    default_code = "request_too_large"
    default_detail = "The request body is too large."


class DatabaseUnavailable(drf_exceptions.APIException):
    """A transient database fault — lock or statement timeout, lost or killed connection,
    serialization failure, deadlock — rolled the request's transaction back: 503
    ``database_unavailable`` with ``Retry-After`` (docs/design.md §12.3). Nothing was written;
    the same request may be sent again."""

    status_code = status.HTTP_503_SERVICE_UNAVAILABLE
    default_code = "database_unavailable"
    default_detail = "The database is busy or unreachable; nothing was written. Retry shortly."

    def __init__(self) -> None:
        super().__init__()
        self.wait = RETRY_AFTER_SECONDS


class OutcomeUnknown(drf_exceptions.APIException):
    """The connection failed while the request's write was being committed
    (:class:`cortex_sessions.exceptions.WriteOutcomeUnknown`): 503 ``write_outcome_unknown``
    with ``Retry-After`` (docs/design.md §12.3). The write may or may not be stored: retry with
    the same ``Idempotency-Key``, which replays it if it was, or read back first."""

    status_code = status.HTTP_503_SERVICE_UNAVAILABLE
    default_code = core.WriteOutcomeUnknown.code
    default_detail = core.WriteOutcomeUnknown.default_message

    def __init__(self) -> None:
        super().__init__()
        self.wait = RETRY_AFTER_SECONDS


def status_for(exc: BaseException) -> int | None:
    """The HTTP status for an application error, or ``None`` when it is not one.

    Args:
        exc: any exception.

    Returns:
        ``exc.http_status`` when it is an integer and ``exc`` has a string ``code``; else the
        :data:`ERROR_STATUS` entry of the most specific class of ``exc``; else ``None``.
    """
    http_status = getattr(exc, "http_status", None)
    if isinstance(http_status, int) and isinstance(getattr(exc, "code", None), str):
        return http_status
    for cls in type(exc).__mro__:
        if cls in ERROR_STATUS:
            return ERROR_STATUS[cls]
    return None


#: DRF's and Django's own field error codes, renamed to the app's code of the same rule so a
#: client sees one code per rule whichever layer caught it (docs/design.md §12.4): a NUL is
#: ``nul_character`` and a lone surrogate ``invalid_text`` as when the services refuse them;
#: every over-long text is ``too_long``; a value of the wrong JSON type, outside a parameter's
#: choices, out of range or empty is ``invalid``. A field with a rule of its own (``agent_id``,
#: ``role``, ``metadata``, …) recodes its errors itself (``StrictFieldMixin.rule_code``).
SAME_AS_APP_CODE = {
    "null_characters_not_allowed": core.NulCharacter.code,
    "surrogate_characters_not_allowed": core.InvalidText.code,
    "max_length": core.ValueTooLong.code,
    "max_string_length": core.ValueTooLong.code,
    "null": "invalid",
    "blank": "invalid",
    "invalid_choice": "invalid",
    "min_length": "invalid",
    "min_value": "invalid",
    "max_value": "invalid",
    "not_a_dict": "invalid",
}


#: Field codes of a value's shape, not of a rule: a body whose every field error has one of
#: these answers the exception's own code at the top (``invalid``, ``invalid_filter``).
_GENERIC_CODES = frozenset(
    {
        "invalid",
        "required",
        "empty",
        "not_a_list",
        # query strings: undefined or repeated parameters are 400 ``invalid_filter``
        "unknown_parameter",
        "repeated_parameter",
    }
)


def _code_of(item: Any) -> str:
    code = getattr(item, "code", None) or "invalid"
    return SAME_AS_APP_CODE.get(code, code)


def _flatten(errors: Any, prefix: str = "") -> dict[str, list[dict[str, str]]]:
    """Flatten DRF's nested ``ErrorDetail`` structure into ``{dotted.path: [{code, detail}]}``."""
    flat: dict[str, list[dict[str, str]]] = {}
    if isinstance(errors, Mapping):
        for key, value in errors.items():
            flat.update(_flatten(value, f"{prefix}.{key}" if prefix else str(key)))
    elif (
        isinstance(errors, list)
        and errors
        and all(isinstance(item, drf_exceptions.ErrorDetail | str) for item in errors)
    ):
        flat[prefix or "non_field_errors"] = [
            {"code": _code_of(item), "detail": str(item)} for item in errors
        ]
    elif isinstance(errors, list):
        for index, value in enumerate(errors):
            if value:
                flat.update(_flatten(value, f"{prefix}.{index}" if prefix else str(index)))
    elif errors:
        flat[prefix or "non_field_errors"] = [{"code": _code_of(errors), "detail": str(errors)}]
    return flat


def error_body(
    code: str,
    detail: str,
    errors: Mapping[str, list[dict[str, str]]] | None = None,
    params: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Build an error body: ``{"code", "detail"}`` plus ``"errors"`` and ``"params"`` (the
    machine-readable values an error carries for the client, e.g. ``required`` of
    ``context_budget_exceeded``) when given."""
    body: dict[str, Any] = {"code": code, "detail": detail}
    if errors:
        body["errors"] = dict(errors)
    if params:
        body["params"] = dict(params)
    return body


def _domain_response(exc: BaseException, http_status: int) -> Response:
    code = str(getattr(exc, "code", "error"))
    detail = str(getattr(exc, "message", None) or exc or code)
    errors = None
    params = getattr(exc, "params", None)
    field = getattr(exc, "field", None) or (
        params.get("field") if isinstance(params, dict) else None
    )
    if field or isinstance(exc, core.InvalidInput):
        errors = {str(field or "non_field_errors"): [{"code": code, "detail": detail}]}
    headers: dict[str, str] = {}
    # SearchTimeout, TokenCountError: 503 with Retry-After
    retry_after = getattr(exc, "retry_after", None)
    if isinstance(retry_after, int) and not isinstance(retry_after, bool):
        headers["Retry-After"] = str(retry_after)
    public = {
        name: params[name]
        for name in getattr(exc, "api_params", ())
        if isinstance(params, dict) and name in params
    }
    set_rollback()
    return Response(error_body(code, detail, errors, public), status=http_status, headers=headers)


def _api_response(exc: drf_exceptions.APIException) -> Response:
    headers: dict[str, str] = {}
    if getattr(exc, "auth_header", None):
        headers["WWW-Authenticate"] = exc.auth_header  # type: ignore[attr-defined]
    if getattr(exc, "wait", None):
        headers["Retry-After"] = f"{int(exc.wait)}"  # type: ignore[attr-defined]
    if isinstance(exc, drf_exceptions.ValidationError):
        errors = _flatten(exc.detail)
        codes = {item["code"] for items in errors.values() for item in items}
        # One rule, one code (docs/design.md §12.4): input refused under a single rule carries
        # that rule's code at the top too, in a body or a query string alike (an agent id
        # refused for any reason is `invalid_agent_id`, a NUL anywhere `nul_character`).
        code = exc.default_code
        if len(codes) == 1 and not codes & _GENERIC_CODES:
            code = next(iter(codes))
        detail = str(exc.default_detail)
    else:
        detail = (
            str(exc.detail) if not isinstance(exc.detail, list | dict) else str(exc.default_detail)
        )
        code = getattr(exc.detail, "code", None) or exc.default_code
        errors = None
    set_rollback()
    return Response(error_body(code, detail, errors), status=exc.status_code, headers=headers)


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    """Turn an exception raised in one of our views into an error response (docs/design.md §7.3).

    Args:
        exc: the exception.
        context: DRF's handler context (``view``, ``args``, ``kwargs``, ``request``).

    Returns:
        The response (503 ``database_unavailable`` with ``Retry-After`` for a transient database
        fault, see :func:`cortex_sessions.faults.is_transient_database_error`; 503
        ``search_timeout`` with ``Retry-After`` for a search past ``SEARCH_TIMEOUT``; 503
        ``write_outcome_unknown`` with ``Retry-After`` for a commit whose outcome is unknown,
        see :class:`OutcomeUnknown`), or ``None`` for
        an unexpected exception (DRF then re-raises it: a bug
        on our side is a 500 and is logged, never hidden).
    """
    if isinstance(exc, Http404):
        exc = drf_exceptions.NotFound()
    elif isinstance(exc, DjangoPermissionDenied):
        exc = drf_exceptions.PermissionDenied()
    elif isinstance(exc, RequestDataTooBig):
        exc = RequestTooLarge()
    elif is_transient_database_error(exc):
        logger.warning("Transient database fault answered 503: %s", exc, exc_info=exc)
        exc = DatabaseUnavailable()
    elif isinstance(exc, core.WriteOutcomeUnknown):
        exc = OutcomeUnknown()
    if isinstance(exc, drf_exceptions.APIException):
        return _api_response(exc)
    http_status = status_for(exc)
    if http_status is not None:
        return _domain_response(exc, http_status)
    return None
