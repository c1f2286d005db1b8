"""The read-only list of erasures by scope (docs/design.md §18.2)."""

from __future__ import annotations

import json
from typing import Any

from django.contrib import admin
from django.http import HttpRequest
from django.utils.translation import gettext_lazy as _

from ..models import Erasure
from .base import ReadOnlyModelAdmin

__all__ = ["ErasureAdmin"]


@admin.register(Erasure)
class ErasureAdmin(ReadOnlyModelAdmin):
    """Erasure records, list and detail only: no add, change or delete.

    A record is the evidence that a scope was erased (who asked, when, rows per table, held
    sessions kept), written only by :func:`cortex_sessions.services.erase_scope`; it keeps no
    content. Erase with ``manage.py cortex_sessions_erase`` or ``POST /erasures/``.
    """

    list_display = (
        "scope",
        "status",
        "deleted_rows",
        "skipped_held",
        "requested_by",
        "created_at",
        "finished_at",
    )
    list_filter = ("status",)
    search_fields = ("scope", "requested_by")
    ordering = ("-created_at", "-id")
    fields = (
        "id",
        "scope",
        "status",
        "counts_by_table",
        "skipped_held",
        "requested_by",
        "created_at",
        "finished_at",
    )
    readonly_fields = fields

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        """Always ``False``: the record of an erasure stays."""
        return False

    @admin.display(description=_("rows deleted"))
    def deleted_rows(self, obj: Erasure) -> int:
        """Rows deleted, all tables together."""
        return sum(obj.counts.values())

    @admin.display(description=_("deleted rows per table"))
    def counts_by_table(self, obj: Erasure) -> str:
        """``counts`` as indented JSON, tables in name order."""
        return json.dumps(dict(sorted(obj.counts.items())), indent=2)
