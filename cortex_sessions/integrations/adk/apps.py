from __future__ import annotations

from collections.abc import Mapping

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

    def cortex_erase_scope(
        self, scope: str, *, held_scopes: frozenset[str], using: str, dry_run: bool
    ) -> Mapping[str, int]:
        """Erasure by scope (docs/design.md §18.2): the ADK user and app state at or beneath
        ``scope``; see :func:`cortex_sessions.integrations.adk.erasure.erase_scope_state`."""
        from .erasure import erase_scope_state

        return erase_scope_state(scope, held_scopes=held_scopes, using=using, dry_run=dry_run)
