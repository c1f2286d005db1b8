"""The read-only list of imported conversations' external ids (``cortex_sessions.transfer``)."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest
from django.utils.translation import gettext_lazy as _

from ..models import ImportedConversation
from .base import ReadOnlyModelAdmin, session_change_link

__all__ = ["ImportedConversationAdmin"]


@admin.register(ImportedConversation)
class ImportedConversationAdmin(ReadOnlyModelAdmin):
    """Read-only list of the external ids sessions were imported under (``transfer``).

    Rows are written by ``cortex_sessions_import`` in the transaction that creates the session
    and go away with it; the admin only shows them, searchable by external id, agent or scope.
    """

    list_display = ("external_id", "agent_id", "scope", "session_link", "imported_at")
    list_filter = ("agent_id",)
    search_fields = ("external_id", "agent_id", "scope")
    list_select_related = ("session",)
    ordering = ("-imported_at", "-id")

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        """Always ``False``: a row goes away with its session."""
        return False

    @admin.display(description=_("session"), ordering="session_id")
    def session_link(self, obj: ImportedConversation) -> str:
        """The imported session, linked to its admin page."""
        return session_change_link(self.admin_site, obj.session_id, obj.session)
