"""From a request to the scope it may read and write (docs/design.md §2.5).

The host's ``SCOPE_RESOLVER`` gives the widest scope a request may use. A client may narrow it,
for one request, with the ``X-Cortex-Scope`` header or the ``scope`` query parameter (canonical
form, §2.2) to a scope at or beneath the resolved one; anything wider or beside it is refused.
"""

from __future__ import annotations

from typing import Any

from rest_framework.exceptions import NotAuthenticated

from cortex_sessions.conf import app_settings
from cortex_sessions.exceptions import InvalidScope, NoScope, ScopeForbidden
from cortex_sessions.scope import Scope, as_scope

from .exceptions import InvalidQuery

__all__ = ["SCOPE_HEADER", "SCOPE_QUERY_PARAM", "narrow_scope", "resolve_request_scope"]

#: Header that narrows a request's scope (``X-Cortex-Scope``).
SCOPE_HEADER = "X-Cortex-Scope"
#: Query parameter that narrows a request's scope.
SCOPE_QUERY_PARAM = "scope"


def narrow_scope(base: Scope, requested: Any, *, field: str = SCOPE_QUERY_PARAM) -> Scope:
    """``requested`` as a scope, if it lies at or beneath ``base``.

    Args:
        base: the scope the caller may use.
        requested: a canonical scope string (or ``Scope``) the caller asks for.
        field: name reported with a parse error.

    Returns:
        The requested scope.

    Raises:
        InvalidScope: ``requested`` is not a canonical scope (400 ``invalid_scope``).
        ScopeForbidden: it is wider than or beside ``base`` (403 ``scope_forbidden``).
    """
    try:
        scope = as_scope(requested)
    except NoScope:
        raise InvalidScope("The requested scope is empty.", field=field) from None
    except InvalidScope as exc:
        raise InvalidScope(exc.message, field=field) from None
    if not base.contains(scope):
        raise ScopeForbidden()
    return scope


def _header_text(value: str) -> str:
    """The header as the client sent it: WSGI hands header bytes over decoded as Latin-1, and
    a canonical scope is UTF-8 (values may hold any character, docs/design.md §2.1).

    Raises:
        InvalidScope: the header's bytes are not UTF-8.
    """
    try:
        return value.encode("latin-1").decode("utf-8")
    except UnicodeError:
        raise InvalidScope(
            f"The {SCOPE_HEADER} header must be UTF-8.", field=SCOPE_HEADER
        ) from None


def resolve_request_scope(request: Any) -> Scope:
    """The scope this request works in: the resolver's, possibly narrowed (docs/design.md §2.5).

    Args:
        request: the DRF request (already authenticated).

    Returns:
        The scope.

    Raises:
        NotAuthenticated: the resolver gave no scope and the request is anonymous (401/403).
        NoScope: the resolver gave no scope to an authenticated request (403 ``no_scope``).
        InvalidScope: the header or parameter is malformed or empty (two headers arrive joined
            by a comma, which no canonical scope holds), or the two disagree (400).
        InvalidQuery: the parameter is repeated (400 ``invalid_filter``, field code
            ``repeated_parameter``).
        ScopeForbidden: the requested scope is not at or beneath the resolved one (403).
    """
    resolved = app_settings.SCOPE_RESOLVER(request)
    if resolved is None or resolved == "":
        user = getattr(request, "user", None)
        if user is None or not user.is_authenticated:
            raise NotAuthenticated()
        raise NoScope()
    base = as_scope(resolved)
    # An empty header or parameter is an empty scope — 400, never "not given" (§2.4).
    header = request.headers.get(SCOPE_HEADER)
    if header is not None:
        header = _header_text(header)
    params = request.query_params.getlist(SCOPE_QUERY_PARAM)
    if len(params) > 1:
        raise InvalidQuery.repeated([SCOPE_QUERY_PARAM])
    param = params[0] if params else None
    if header is not None and param is not None and header != param:
        raise InvalidScope(
            f"The {SCOPE_HEADER} header and the '{SCOPE_QUERY_PARAM}' parameter disagree.",
            field=SCOPE_QUERY_PARAM,
        )
    if header is not None:
        return narrow_scope(base, header, field=SCOPE_HEADER)
    if param is not None:
        return narrow_scope(base, param)
    return base
