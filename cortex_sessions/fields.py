"""Model fields of the app."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.db import models

from .scope import MAX_CANONICAL_BYTES

__all__ = ["ScopeField"]


if TYPE_CHECKING:
    _CharField = models.CharField[str, str]
else:  # Django's model fields are not subscriptable at run time
    _CharField = models.CharField


class ScopeField(_CharField):
    """A canonical scope string (docs/design.md §2.2), compared byte-wise.

    Prefix matching is a range on the canonical string (see ``scope.scope_q``); that range is
    only exact under byte-order collation, so the column gets ``COLLATE "C"`` on PostgreSQL and
    ``utf8mb4_bin`` on MySQL/MariaDB (SQLite compares bytes already). The collation is chosen per
    connection and never written into migrations, which stay database-independent.
    """

    description = "Canonical scope"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("max_length", MAX_CANONICAL_BYTES)
        super().__init__(*args, **kwargs)

    def db_parameters(self, connection: Any) -> dict[str, Any]:
        params = super().db_parameters(connection)
        if connection.vendor == "postgresql":
            params["collation"] = "C"
        elif connection.vendor == "mysql":
            params["collation"] = "utf8mb4_bin"
        return params
