"""The example host's ``SCOPE_RESOLVER`` (docs/design.md §2.5)."""

from __future__ import annotations

from typing import Any

from cortex_sessions.scope import Scope

from .models import Membership


def org_scope_resolver(request: Any) -> Scope | None:
    """The scope of a request from the user's :class:`Membership` (one query).

    Args:
        request: the (DRF) request, already authenticated.

    Returns:
        ``org=<org>`` for an org admin, ``org=<org>/user=<pk>`` for a member, and ``None``
        (the API answers 401/403) for an anonymous user or a user without a membership.
    """
    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated:
        return None
    membership = Membership.objects.filter(user_id=user.pk).only("org", "is_org_admin").first()
    if membership is None:
        return None
    org = Scope.from_levels([("org", membership.org)])
    return org if membership.is_org_admin else org.child("user", str(user.pk))
