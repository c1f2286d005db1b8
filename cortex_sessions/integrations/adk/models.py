"""What ADK keeps besides events (docs/design.md §13.3).

Events are cortex :class:`~cortex_sessions.models.Message` rows; these models hold the rest:
which cortex session an ADK session is (ADK ids are any string; cortex ids are UUIDs), the
session's own state, and the ``app:`` and ``user:`` state ADK shares across sessions, each keyed
by its tenant as well (the service's ``within`` bound for app state, the mapped scope for user
state and for session ids), so no tenant reads another's or learns which ids it uses.

An ADK session and a user state are unique by a ``key``: the SHA-256 of their natural key
(:func:`session_key`, :func:`user_state_key`). The natural keys themselves are too long to index:
a 1,024-byte scope and three 255-character names in four-byte UTF-8 are over PostgreSQL's
2,704-byte B-tree entry limit and InnoDB's 3,072-byte key limit (docs/design.md §13.3, §15).

Importing this module in a host that has not installed the integration's app raises
``ImproperlyConfigured``: the models would otherwise silently join the core app (their module
lies inside the ``cortex_sessions`` package) and ask for a migration there.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

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

__all__ = ["AdkAppState", "AdkSession", "AdkUserState", "session_key", "user_state_key"]

#: Length of a ``key``: a SHA-256 in hex.
KEY_CHARS = 64


def _digest(*parts: str) -> str:
    # A JSON array with ASCII escapes: unambiguous (no separator a part could contain), and
    # encodable for any ``str``, lone surrogates included. Migration 0003 repeats this function.
    text = json.dumps(list(parts), ensure_ascii=True, separators=(",", ":"))
    return hashlib.sha256(text.encode("ascii")).hexdigest()


def session_key(scope: str, app_name: str, user_id: str, adk_id: str) -> str:
    """The unique key of an ADK session: a session id is unique per scope, app and user.

    Args:
        scope: the canonical scope of the session's cortex session (where its user maps to).
        app_name, user_id, adk_id: ADK's names of the session.

    Returns:
        64 lower-case hex digits (SHA-256).
    """
    return _digest(scope, app_name, user_id, adk_id)


def user_state_key(scope: str, app_name: str, user_id: str) -> str:
    """The unique key of a user state: one per scope, app and user (64 hex digits, SHA-256)."""
    return _digest(scope, app_name, user_id)


class AdkSession(models.Model):
    """An ADK session: ``(app_name, user_id, adk_id)`` at a scope → one cortex session, plus its
    state.

    ``key`` is :func:`session_key` of the cortex session's scope and the three names, unique: the
    same ADK id can be used at every scope (by every tenant) once. A cortex session's scope never
    changes, so neither does the key; :meth:`save` fills it in when it is blank.
    """

    session = models.OneToOneField(
        Session, on_delete=models.CASCADE, related_name="adk", verbose_name=_("session")
    )
    app_name = ExactCharField(_("app name"), max_length=255)
    user_id = ExactCharField(_("user id"), max_length=255)
    adk_id = ExactCharField(_("ADK session id"), max_length=255)
    key = ExactCharField(_("key"), max_length=KEY_CHARS, ascii=True, editable=False)
    #: The session-scoped state (keys without ``app:``/``user:``/``temp:`` prefixes).
    state = models.JSONField(_("state"), default=dict, blank=True)

    class Meta:
        verbose_name = _("ADK session")
        verbose_name_plural = _("ADK sessions")
        constraints = [
            models.UniqueConstraint(fields=["key"], name="cortex_adk_session_unique_key")
        ]
        indexes = [models.Index(fields=["app_name", "user_id"], name="cortex_adk_session_user")]

    def __str__(self) -> str:
        return f"{self.app_name}/{self.user_id}/{self.adk_id}"

    def save(self, *args: Any, **kwargs: Any) -> None:
        """Save, filling in a blank ``key`` from the cortex session's scope and the names."""
        if not self.key:
            self.key = session_key(self.session.scope, self.app_name, self.user_id, self.adk_id)
        super().save(*args, **kwargs)


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
    ``key`` is :func:`user_state_key` of the three, unique; :meth:`save` fills it in when blank.
    """

    scope = ScopeField(_("scope"), blank=True, default="")
    app_name = ExactCharField(_("app name"), max_length=255)
    user_id = ExactCharField(_("user id"), max_length=255)
    key = ExactCharField(_("key"), max_length=KEY_CHARS, ascii=True, editable=False)
    state = models.JSONField(_("state"), default=dict, blank=True)

    class Meta:
        verbose_name = _("ADK user state")
        verbose_name_plural = _("ADK user states")
        constraints = [
            models.UniqueConstraint(fields=["key"], name="cortex_adk_user_state_unique_key")
        ]

    def __str__(self) -> str:
        return f"{self.scope}: {self.app_name}/{self.user_id}"

    def save(self, *args: Any, **kwargs: Any) -> None:
        """Save, filling in a blank ``key`` from the scope and the names."""
        if not self.key:
            self.key = user_state_key(self.scope, self.app_name, self.user_id)
        super().save(*args, **kwargs)
