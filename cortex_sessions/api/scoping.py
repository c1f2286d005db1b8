"""From a request to the scope it may read and write (docs/design.md §2.5).

The host's ``SCOPE_RESOLVER`` gives the widest scope a request may use. A client may narrow it,
for one request, with the ``X-Cortex-Scope`` header or the ``scope`` query parameter (canonical
form, §2.2) to a scope at or beneath the resolved one; anything wider or beside it is refused.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from typing import Any

from rest_framework.exceptions import NotAuthenticated

from cortex_sessions.conf import app_settings
from cortex_sessions.exceptions import InvalidScope, NoScope, ScopeForbidden
from cortex_sessions.scope import Scope, as_scope

from .exceptions import InvalidQuery

__all__ = [
    "SCOPE_HEADER",
    "SCOPE_QUERY_PARAM",
    "SESSION_SCOPE_KEY",
    "narrow_scope",
    "resolve_request_scope",
    "session_cached_resolver",
]

#: Header that narrows a request's scope (``X-Cortex-Scope``).
SCOPE_HEADER = "X-Cortex-Scope"
#: The header's key in ``request.META`` (WSGI): read there, not through ``request.headers``,
#: whose first use builds a dict of every header of the request (docs/design.md §14.5).
_SCOPE_META = "HTTP_X_CORTEX_SCOPE"
#: Query parameter that narrows a request's scope.
SCOPE_QUERY_PARAM = "scope"
#: Key of :func:`session_cached_resolver`'s entry in ``request.session``.
SESSION_SCOPE_KEY = "_cortex_scope"


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
    header = request.META.get(_SCOPE_META)
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


def session_cached_resolver(
    resolver: Callable[[Any], Scope | str | None], *, max_age: float = 60.0
) -> Callable[[Any], Scope | str | None]:
    """A ``SCOPE_RESOLVER`` that keeps ``resolver``'s answer in the login session for
    ``max_age`` seconds, so the requests of one logged-in client skip the resolver's own work
    (a membership query, say) in between (docs/design.md §14.5).

    Use it only for a resolver whose answer depends on the user alone and may be up to
    ``max_age`` seconds old (a changed membership takes that long to apply)::

        # myhost/scopes.py
        org_scope = session_cached_resolver(org_scope_resolver, max_age=60)
        # settings.py: CORTEX_SESSIONS = {"SCOPE_RESOLVER": "myhost.scopes.org_scope"}

    The entry holds the user's pk, the canonical scope and the time it was resolved; a request
    of another user, an expired entry, an anonymous request or one without a stored session
    (HTTP Basic, a token: no cookie) calls ``resolver``. A ``None`` answer is never kept.

    Args:
        resolver: the resolver ``(request) -> Scope | str | None``.
        max_age: seconds an answer is reused; each refresh writes the session once.

    Returns:
        The caching resolver.

    Raises:
        ValueError: ``max_age`` is negative.
    """
    if max_age < 0:
        raise ValueError("max_age must be 0 or more")

    @functools.wraps(resolver)
    def cached(request: Any) -> Scope | str | None:
        user = getattr(request, "user", None)
        session = getattr(request, "session", None)
        if (
            user is None
            or not user.is_authenticated
            or session is None
            or session.session_key is None
        ):
            return resolver(request)
        now = time.time()
        entry = session.get(SESSION_SCOPE_KEY)
        if (
            isinstance(entry, list)
            and len(entry) == 3
            and entry[0] == str(user.pk)
            and isinstance(entry[2], int | float)
            and 0 <= now - entry[2] < max_age
        ):
            return as_scope(entry[1])
        resolved = resolver(request)
        if resolved is not None and resolved != "":
            session[SESSION_SCOPE_KEY] = [str(user.pk), str(as_scope(resolved)), now]
        return resolved

    return cached
