"""The ADK integration's part in erasure by scope (docs/design.md §18.2, §13.3).

``AdkSession`` rows go with their cortex session (a ``CASCADE`` foreign key). What is keyed by
scope instead goes here: the ``user:`` state of every user mapped at or beneath the scope
(:class:`~.models.AdkUserState` ``scope``) and the ``app:`` state of every service bound at or
beneath it (:class:`~.models.AdkAppState` ``tenant``). State that serves a session on legal hold
stays: a row whose scope is a held session's scope or one of its ancestors. App state of services
bound to no tenant (``tenant=""``) belongs to no scope and is never erased.
"""

from __future__ import annotations

from collections.abc import Mapping

from cortex_sessions.scope import Scope, scope_q

__all__ = ["erase_scope_state"]


def _ancestors(scopes: frozenset[str]) -> set[str]:
    """Every scope in ``scopes`` and every scope above one of them (canonical strings)."""
    found: set[str] = set()
    for canonical in scopes:
        levels = Scope.parse(canonical).levels
        for depth in range(1, len(levels) + 1):
            found.add(Scope.from_levels(levels[:depth]).canonical)
    return found


def erase_scope_state(
    scope: str, *, held_scopes: frozenset[str], using: str, dry_run: bool
) -> Mapping[str, int]:
    """Delete (or with ``dry_run`` count) the ADK user and app state at or beneath ``scope``.

    Args:
        scope: the canonical scope erased.
        held_scopes: canonical scopes of the held sessions at or beneath ``scope``.
        using: the database alias.
        dry_run: count only.

    Returns:
        ``{"cortex_adk.AdkUserState": n, "cortex_adk.AdkAppState": m}``.
    """
    from .models import AdkAppState, AdkUserState

    kept = _ancestors(held_scopes)
    users = AdkUserState.objects.using(using).filter(scope_q(scope)).exclude(scope__in=kept)
    states = (
        AdkAppState.objects.using(using)
        .filter(scope_q(scope, field="tenant"))
        .exclude(tenant__in=kept)
    )
    if dry_run:
        return {AdkUserState._meta.label: users.count(), AdkAppState._meta.label: states.count()}
    return {**users.delete()[1], **states.delete()[1]}
