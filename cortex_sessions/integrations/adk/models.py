"""What ADK keeps besides events (docs/design.md §13.3).

Events are cortex :class:`~cortex_sessions.models.Message` rows; these models hold the rest:
which cortex session an ADK session is (ADK ids are any string; cortex ids are UUIDs), the
session's own state, and the ``app:`` and ``user:`` state ADK shares across sessions, each keyed
by its tenant as well (the service's ``within`` bound for app state, the mapped scope for user
state), so no tenant reads another's.

Importing this module in a host that has not installed the integration's app raises
``ImproperlyConfigured``: the models would otherwise silently join the core app (their module
lies inside the ``cortex_sessions`` package) and ask for a migration there.
"""

from __future__ import annotations

from django.apps import apps
from django.core.exceptions import ImproperlyConfigured
from django.db import models
from django.utils.translation import gettext_lazy as _

from cortex_sessions.fields import ExactCharField, ScopeField
from cortex_sessions.models import Session

#: The integration's app, which must be in ``INSTALLED_APPS`` for these models to load.
APP_NAME = "cortex_sessions.integrations.adk"

if not apps.is_installed(APP_NAME):
    raise ImproperlyConfigured(
        f"The Google ADK integration needs its app: add {APP_NAME!r} to INSTALLED_APPS "
        "(after 'cortex_sessions') and run migrate."
    )

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
    """State shared by an app's sessions within one tenant (ADK's ``app:`` keys, stored without
    prefix).

    ``tenant`` is the canonical ``within`` scope of the services that read and write it (``""``
    for services bound to no tenant): a service bound to ``org=acme`` never sees the ``app:``
    state of one bound to ``org=globex``, though both serve the same ``app_name``.
    """

    tenant = ScopeField(_("tenant"), blank=True, default="")
    app_name = ExactCharField(_("app name"), max_length=255)
    state = models.JSONField(_("state"), default=dict, blank=True)

    class Meta:
        verbose_name = _("ADK app state")
        verbose_name_plural = _("ADK app states")
        constraints = [
            models.UniqueConstraint(
                fields=["tenant", "app_name"], name="cortex_adk_app_state_unique"
            )
        ]

    def __str__(self) -> str:
        return f"{self.tenant}: {self.app_name}" if self.tenant else str(self.app_name)


class AdkUserState(models.Model):
    """State shared by a user's sessions of an app (ADK's ``user:`` keys, stored without prefix).

    ``scope`` is the scope ``(app_name, user_id)`` maps to, where the user's sessions live: a
    mapping that puts the same user id of two tenants at two scopes keeps two user states.
    """

    scope = ScopeField(_("scope"), blank=True, default="")
    app_name = ExactCharField(_("app name"), max_length=255)
    user_id = ExactCharField(_("user id"), max_length=255)
    state = models.JSONField(_("state"), default=dict, blank=True)

    class Meta:
        verbose_name = _("ADK user state")
        verbose_name_plural = _("ADK user states")
        constraints = [
            models.UniqueConstraint(
                fields=["scope", "app_name", "user_id"], name="cortex_adk_user_state_unique"
            )
        ]

    def __str__(self) -> str:
        return f"{self.scope}: {self.app_name}/{self.user_id}"
