"""The policies every view of the API sets for itself (docs/design.md §7.3, §12.4):
:class:`CortexAPIMixin`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, cast

from rest_framework import viewsets
from rest_framework.exceptions import MethodNotAllowed
from rest_framework.request import Request

from cortex_sessions.scope import Scope

from .authentication import authenticate
from .consistency import ConsistencyTokenMixin
from .exceptions import InvalidQuery, exception_handler
from .parsers import JSONObjectParser
from .permissions import HasCortexScope
from .schema import CortexAutoSchema
from .scoping import SCOPE_QUERY_PARAM

__all__ = ["CortexAPIMixin"]


if TYPE_CHECKING:
    _ViewBase = viewsets.GenericViewSet[Any]
else:  # a mixin; the view set it is mixed into brings DRF's behaviour
    _ViewBase = object


class CortexAPIMixin(ConsistencyTokenMixin, _ViewBase):
    """Policies every cortex_sessions view sets for itself, independent of the host's defaults:
    the scope permission, the strict JSON parser, the app's exception handler, and strict query
    parameters (docs/design.md §12.4).

    A query parameter the action does not define is 400 ``invalid_filter`` naming it (code
    ``unknown_parameter`` under its name), so a misspelled filter never answers as if no filter
    had been given. Every action takes ``scope`` and DRF's ``format``; the others are listed in
    :attr:`query_parameters` under ``"<action>.<method>"`` (e.g. ``"messages.get"``) or, for
    every method, ``"<action>"``. To give an action a parameter, add its name there — one line.
    """

    permission_classes = [HasCortexScope]
    parser_classes = [JSONObjectParser]
    schema = CortexAutoSchema()
    #: Query parameters by action (``"<action>"`` or ``"<action>.<method>"``), besides
    #: :attr:`common_query_parameters`.
    query_parameters: Mapping[str, frozenset[str]] = {}
    #: Query parameters every action takes.
    common_query_parameters = frozenset({SCOPE_QUERY_PARAM, "format"})

    def allowed_query_parameters(self) -> frozenset[str]:
        """The query parameters the current action and method take."""
        action = getattr(self, "action", None) or ""
        method = (self.request.method or "").lower()
        extra = self.query_parameters.get(f"{action}.{method}", self.query_parameters.get(action))
        return self.common_query_parameters | (extra or frozenset())

    def check_query_parameters(self, request: Request) -> None:
        """Refuse the query parameters the action does not define, and any parameter given
        more than once (every parameter takes one value).

        Raises:
            InvalidQuery: 400 ``invalid_filter``, one ``unknown_parameter`` error per undefined
                name, else one ``repeated_parameter`` error per repeated name.
        """
        if request.method == "OPTIONS":
            return
        unknown = sorted(set(request.query_params) - self.allowed_query_parameters())
        if unknown:
            raise InvalidQuery.naming(unknown, "Unknown query parameter.", "unknown_parameter")
        repeated = sorted(name for name, values in request.query_params.lists() if len(values) > 1)
        if repeated:
            raise InvalidQuery.repeated(repeated)

    def perform_authentication(self, request: Request) -> None:
        """DRF's authentication, refusing credentials no database can be asked about (a NUL
        byte) as 401/403 ``authentication_failed``: see
        :func:`cortex_sessions.api.authentication.authenticate`."""
        authenticate(request)

    def initial(self, request: Request, *args: Any, **kwargs: Any) -> None:
        """The method first, then DRF's checks (authentication, permissions, throttles), then
        the query parameters.

        Raises:
            MethodNotAllowed: the endpoint does not declare the request's method: 405
                ``method_not_allowed`` with ``Allow``, whatever else is wrong with the request
                (a bad scope, no credentials), so a client learns what it can fix first
                (docs/design.md §7.3).
        """
        method = (request.method or "").lower()
        if method not in self.http_method_names or not hasattr(self, method):
            raise MethodNotAllowed(request.method or "")
        super().initial(request, *args, **kwargs)
        self.check_query_parameters(request)

    def get_exception_handler(self) -> Any:
        """The app's handler (``{"code", "detail"}`` bodies), never the host's global one."""
        return exception_handler

    @property
    def scope(self) -> Scope:
        """The request's scope, resolved (and possibly narrowed) by ``HasCortexScope``."""
        scope: Scope = cast(Any, self.request).cortex_scope  # set by HasCortexScope
        return scope
