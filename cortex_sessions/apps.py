from __future__ import annotations

from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class CortexSessionsConfig(AppConfig):
    """App config: registers the system checks of docs/design.md §9."""

    name = "cortex_sessions"
    verbose_name = _("Cortex sessions")
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from . import checks  # noqa: F401 - registers the checks
