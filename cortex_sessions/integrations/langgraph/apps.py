from __future__ import annotations

from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class CortexLangGraphConfig(AppConfig):
    """The LangGraph integration (docs/design.md §19.1): checkpoints, channel blobs and pending
    writes of graphs whose threads are cortex sessions."""

    name = "cortex_sessions.integrations.langgraph"
    label = "cortex_langgraph"
    verbose_name = _("Cortex sessions: LangGraph")
    default_auto_field = "django.db.models.BigAutoField"
