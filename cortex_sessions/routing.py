"""Which database each read of the app runs on (docs/design.md §17.1).

A host that adds read replicas adds a database router (``DATABASE_ROUTERS``) whose
``db_for_read`` may send a read to a replica that has not replayed the latest writes. The app
therefore never lets a read that a write depends on go through ``db_for_read``:

- a read made while a transaction is open on the model's write database (the service's own
  ``transaction.atomic``, a host's ``atomic()`` or ``ATOMIC_REQUESTS``, manual transaction
  management) runs on that database, in that transaction (:func:`db_for_read` returns it);
- every other read asks the router, with the hints ``scope=`` (the canonical scope string the
  read is confined to, ``None`` for an operator's read of every scope) and, where there is one,
  ``instance=`` (the model instance the read follows from), so a router can route by tenant or
  pin a caller to the primary (docs/design.md §17.2).

Services pick the alias once and pass it on (``QuerySet.using(alias)``,
``refresh_from_db(using=alias)``, ``connections[alias]``), using only Django's public routing
API (``django.db.router``).
"""

from __future__ import annotations

from typing import Any

from django.db import connections, router
from django.db.models import Model

from .scope import Scope, canonical_of

__all__ = ["db_for_read", "db_for_write", "in_transaction", "read_hints"]


def db_for_write(model: type[Model]) -> str:
    """The alias the router picks for writes of ``model`` (``router.db_for_write``)."""
    return router.db_for_write(model)


def in_transaction(alias: str) -> bool:
    """Whether a transaction is open on database ``alias`` now: an ``atomic()`` block, or
    autocommit turned off by the host (manual transaction management). Never connects."""
    return _open(connections[alias])


def _open(connection: Any) -> bool:
    """:func:`in_transaction` of a Django connection object."""
    if connection.in_atomic_block:
        return True
    return connection.connection is not None and not connection.get_autocommit()


def read_hints(scope: Scope | str | None, instance: Model | None = None) -> dict[str, Any]:
    """The router hints of a read confined to ``scope`` (docs/design.md §17.1).

    Args:
        scope: the caller's scope, or ``None`` for a read of every scope (an operator's).
        instance: the model instance the read follows from, if any.

    Returns:
        ``{"scope": canonical string or None}``, plus ``"instance"`` when given.

    Raises:
        InvalidScope: ``scope`` is given but malformed (an empty one is ``NoScope``).
    """
    hints: dict[str, Any] = {"scope": None if scope is None else canonical_of(scope)}
    if instance is not None:
        hints["instance"] = instance
    return hints


def db_for_read(
    model: type[Model], *, scope: Scope | str | None, instance: Model | None = None
) -> str:
    """The database a read of ``model`` confined to ``scope`` runs on (docs/design.md §17.1).

    Args:
        model: the model read.
        scope: the caller's scope (a :class:`~cortex_sessions.scope.Scope` or canonical
            string), or ``None`` for a read of every scope.
        instance: the model instance the read follows from, if any (a router hint).

    Returns:
        The model's write database when a transaction is open on it (:func:`in_transaction`):
        the read sees that transaction's writes and never waits for a replica. Otherwise what
        ``router.db_for_read(model, scope=…, instance=…)`` picks.

    Raises:
        NoScope, InvalidScope: ``scope`` is given but empty or malformed.
    """
    hints = read_hints(scope, instance)
    # The write database is asked for only while some transaction is open: a router may treat
    # db_for_write as a write about to happen (ReplicaRouter remembers one, docs/design.md §17.2).
    if any(map(_open, connections.all(initialized_only=True))):
        write = router.db_for_write(model, **hints)
        if in_transaction(write):
            return write
    return router.db_for_read(model, **hints)
