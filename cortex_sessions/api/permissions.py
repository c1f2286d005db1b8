"""Permission classes of the API (docs/design.md §2.5, §7.3)."""

from __future__ import annotations

from typing import Any

from rest_framework.permissions import BasePermission

from .scoping import resolve_request_scope

__all__ = ["CanEraseScope", "HasCortexScope"]

#: The Django permission that lets a host operator erase any scope (docs/design.md §18.2).
ERASE_PERMISSION = "cortex_sessions.erase_scope"


class HasCortexScope(BasePermission):
    """Allow a request that resolves to a scope; remember the scope on ``request.cortex_scope``.

    Whether a request is allowed is the host's ``SCOPE_RESOLVER``'s decision: a resolver that
    returns ``None`` refuses the request (anonymous → ``not_authenticated``, authenticated →
    403 ``no_scope``). A resolver may serve anonymous callers (an API-key header, say) by
    returning a scope for them. Narrowing errors propagate as ``invalid_scope`` (400) or
    ``scope_forbidden`` (403).
    """

    def has_permission(self, request: Any, view: Any) -> bool:
        """Resolve the scope and store it on the request.

        Returns:
            ``True``; refusals are raised as exceptions with their own codes.

        Raises:
            NotAuthenticated, NoScope, InvalidScope, ScopeForbidden: see
            :func:`~cortex_sessions.api.scoping.resolve_request_scope`.
        """
        request.cortex_scope = resolve_request_scope(request)
        return True


class CanEraseScope(BasePermission):
    """Allow a user holding ``cortex_sessions.erase_scope`` (docs/design.md §18.2).

    A host permission, not tenant membership: the ``SCOPE_RESOLVER`` is not asked, so an org
    admin without the permission is refused like anyone else, and a holder may erase any scope.
    A refusal is 403 ``permission_denied`` (401/403 ``not_authenticated`` when anonymous).
    """

    def has_permission(self, request: Any, view: Any) -> bool:
        """Whether the request's user has the permission.

        Returns:
            ``True`` for a holder, else ``False`` (DRF raises ``PermissionDenied`` or
            ``NotAuthenticated``).
        """
        user = getattr(request, "user", None)
        return bool(user is not None and user.is_authenticated and user.has_perm(ERASE_PERMISSION))
