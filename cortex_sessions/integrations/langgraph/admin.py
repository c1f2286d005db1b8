"""Admin for the LangGraph integration: browse a thread's checkpoints (docs/design.md §19.1).

Nothing here is added or changed: checkpoints are written only by ``CortexCheckpointSaver``.
Deleting stays allowed, so deleting a cortex session in its admin takes its checkpoints with it.
The thread itself is the cortex session (its messages are the conversation the graph's
``messages`` channel mirrored), browsable in the session admin.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils.translation import gettext_lazy as _

from cortex_sessions.admin.base import ReadOnlyModelAdmin, session_change_link

from .models import Checkpoint


@admin.register(Checkpoint)
class CheckpointAdmin(ReadOnlyModelAdmin):
    list_display = ("checkpoint_id", "thread", "scope", "checkpoint_ns", "step", "source")
    list_filter = ("session__agent_id",)
    search_fields = ("=checkpoint_id", "=session__id", "^session__scope", "checkpoint_ns")
    readonly_fields = (
        "thread",
        "scope",
        "checkpoint_ns",
        "checkpoint_id",
        "parent_checkpoint_id",
        "metadata",
        "created_at",
    )
    fields = readonly_fields
    list_select_related = ("session",)

    def get_queryset(self, request: HttpRequest) -> QuerySet[Checkpoint]:
        """Checkpoints with their session (the thread), read in the same query."""
        return super().get_queryset(request).select_related("session")

    @admin.display(description=_("thread (cortex session)"))
    def thread(self, obj: Checkpoint) -> str:
        return session_change_link(self.admin_site, obj.session_id, obj.session_id)

    @admin.display(description=_("scope"), ordering="session__scope")
    def scope(self, obj: Checkpoint) -> str:
        return obj.session.scope

    @admin.display(description=_("step"))
    def step(self, obj: Checkpoint) -> Any:
        return (obj.metadata or {}).get("step")

    @admin.display(description=_("source"))
    def source(self, obj: Checkpoint) -> Any:
        return (obj.metadata or {}).get("source")
