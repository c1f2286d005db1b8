from __future__ import annotations

from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class CortexAdkConfig(AppConfig):
    """The Google ADK integration (docs/design.md §13.3): ADK session, app and user state."""

    name = "cortex_sessions.integrations.adk"
    label = "cortex_adk"
    verbose_name = _("Cortex sessions: Google ADK")
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from . import checks  # noqa: F401 - registers the checks
