from __future__ import annotations

from typing import Any

from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class CortexLangGraphConfig(AppConfig):
    """The LangGraph integration (docs/design.md §19.1): checkpoints, channel blobs and pending
    writes of graphs whose threads are cortex sessions. On ``post_migrate`` it creates the
    saver's PostgreSQL functions when this app's migrations are disabled
    (:func:`._pg_writes.create_functions`)."""

    name = "cortex_sessions.integrations.langgraph"
    label = "cortex_langgraph"
    verbose_name = _("Cortex sessions: LangGraph")
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from django.db.models.signals import post_migrate

        post_migrate.connect(
            _create_functions, sender=self, dispatch_uid="cortex_langgraph_functions"
        )


def _create_functions(**kwargs: Any) -> None:
    """``post_migrate`` receiver: :func:`._pg_writes.create_functions`, imported only here, so
    that the app (its models and migrations) loads without ``langgraph`` installed; without it
    there is no saver to call the functions, and nothing is created."""
    try:
        from . import _pg_writes
    except ImportError:
        return
    _pg_writes.create_functions(**kwargs)
