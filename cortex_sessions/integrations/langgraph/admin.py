"""Admin for the LangGraph integration: browse a thread's checkpoints (docs/design.md §19.1).

Nothing here is added, changed or deleted on its own: checkpoints are written only by
``CortexCheckpointSaver``, and a checkpoint deleted alone would leave its pending writes behind
and the thread reading its parent. They go with their session: deleting a cortex session in
its admin takes its checkpoints with it (never a session on legal hold, docs/design.md §18.1).
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

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        """Only as part of deleting its session in the session admin (whose delete view asks
        about each row the delete takes along), and never under a legal hold; never from this
        admin's own pages (no delete view, no bulk action)."""
        match = getattr(request, "resolver_match", None)
        opts = self.model._meta
        if obj is None or (
            match is not None
            and (match.url_name or "").startswith(f"{opts.app_label}_{opts.model_name}_")
        ):
            return False
        return not obj.session.legal_hold and super().has_delete_permission(request, obj)

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
