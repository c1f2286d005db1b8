"""Admin for the ADK integration: browse ADK sessions and shared state (docs/design.md §13.3).

Nothing here is added or changed: ADK state changes only through ``CortexSessionService`` (events
with state deltas), so no form can undo a runtime's write. Deleting stays allowed, so deleting a
cortex session in its admin takes its ADK row with it. The events themselves are the cortex
session's messages, browsable in the session admin.
"""

from __future__ import annotations

from django.contrib import admin
from django.utils.translation import gettext_lazy as _

from cortex_sessions.admin.base import ReadOnlyModelAdmin, session_change_link

from .models import AdkAppState, AdkSession, AdkUserState


@admin.register(AdkSession)
class AdkSessionAdmin(ReadOnlyModelAdmin):
    list_display = ("adk_id", "app_name", "user_id", "cortex_session")
    list_filter = ("app_name",)
    search_fields = ("adk_id", "app_name", "user_id")
    readonly_fields = ("adk_id", "app_name", "user_id", "cortex_session", "state")
    fields = readonly_fields
    list_select_related = ("session",)

    @admin.display(description=_("cortex session"))
    def cortex_session(self, obj: AdkSession) -> str:
        return session_change_link(self.admin_site, obj.session_id, obj.session_id)


@admin.register(AdkAppState)
class AdkAppStateAdmin(ReadOnlyModelAdmin):
    list_display = ("app_name", "tenant")
    search_fields = ("app_name", "tenant")
    readonly_fields = ("tenant", "app_name", "state")
    fields = readonly_fields


@admin.register(AdkUserState)
class AdkUserStateAdmin(ReadOnlyModelAdmin):
    list_display = ("app_name", "user_id", "scope")
    list_filter = ("app_name",)
    search_fields = ("app_name", "user_id", "scope")
    readonly_fields = ("scope", "app_name", "user_id", "state")
    fields = readonly_fields
