"""What ADK keeps besides events (docs/design.md §13.3).

Events are cortex :class:`~cortex_sessions.models.Message` rows; these models hold the rest:
which cortex session an ADK session is (ADK ids are any string; cortex ids are UUIDs), the
session's own state, and the ``app:`` and ``user:`` state ADK shares across sessions.
"""

from __future__ import annotations

from django.db import models
from django.utils.translation import gettext_lazy as _

from cortex_sessions.fields import ExactCharField
from cortex_sessions.models import Session

__all__ = ["AdkAppState", "AdkSession", "AdkUserState"]


class AdkSession(models.Model):
    """An ADK session: ``(app_name, user_id, adk_id)`` → one cortex session, plus its state."""

    session = models.OneToOneField(
        Session, on_delete=models.CASCADE, related_name="adk", verbose_name=_("session")
    )
    app_name = ExactCharField(_("app name"), max_length=255)
    user_id = ExactCharField(_("user id"), max_length=255)
    adk_id = ExactCharField(_("ADK session id"), max_length=255)
    #: The session-scoped state (keys without ``app:``/``user:``/``temp:`` prefixes).
    state = models.JSONField(_("state"), default=dict, blank=True)

    class Meta:
        verbose_name = _("ADK session")
        verbose_name_plural = _("ADK sessions")
        constraints = [
            models.UniqueConstraint(
                fields=["app_name", "user_id", "adk_id"], name="cortex_adk_session_unique_id"
            )
        ]

    def __str__(self) -> str:
        return f"{self.app_name}/{self.user_id}/{self.adk_id}"


class AdkAppState(models.Model):
    """State shared by every session of an app (ADK's ``app:`` keys, stored without prefix)."""

    app_name = ExactCharField(_("app name"), max_length=255, unique=True)
    state = models.JSONField(_("state"), default=dict, blank=True)

    class Meta:
        verbose_name = _("ADK app state")
        verbose_name_plural = _("ADK app states")

    def __str__(self) -> str:
        return str(self.app_name)


class AdkUserState(models.Model):
    """State shared by a user's sessions of an app (ADK's ``user:`` keys, stored without prefix)."""

    app_name = ExactCharField(_("app name"), max_length=255)
    user_id = ExactCharField(_("user id"), max_length=255)
    state = models.JSONField(_("state"), default=dict, blank=True)

    class Meta:
        verbose_name = _("ADK user state")
        verbose_name_plural = _("ADK user states")
        constraints = [
            models.UniqueConstraint(
                fields=["app_name", "user_id"], name="cortex_adk_user_state_unique"
            )
        ]

    def __str__(self) -> str:
        return f"{self.app_name}/{self.user_id}"
