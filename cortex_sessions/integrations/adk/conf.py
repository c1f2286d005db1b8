"""The ADK integration's one setting, read live (docs/design.md §13.3)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

from django.conf import settings
from django.utils.module_loading import import_string

from cortex_sessions.scope import Scope

__all__ = ["DEFAULT_SCOPE", "default_scope", "scope_mapper"]

#: Dotted path of the default mapping.
DEFAULT_SCOPE = "cortex_sessions.integrations.adk.conf.default_scope"


def default_scope(app_name: str, user_id: str) -> Scope:
    """The default mapping of an ADK ``(app_name, user_id)``: ``app=<app_name>/user=<user_id>``.

    Raises:
        InvalidScope: a name is empty, longer than 255 characters or holds control characters.
    """
    return Scope.from_levels([("app", app_name), ("user", user_id)])


def scope_mapper() -> Callable[[str, str], Scope | str]:
    """The callable named by ``settings.CORTEX_SESSIONS_ADK_SCOPE`` (default :func:`default_scope`).

    Raises:
        ImportError: the dotted path cannot be imported.
        TypeError: the setting is neither a dotted path nor a callable.
    """
    value: Any = getattr(settings, "CORTEX_SESSIONS_ADK_SCOPE", DEFAULT_SCOPE)
    if isinstance(value, str):
        value = import_string(value)
    if not callable(value):
        raise TypeError("CORTEX_SESSIONS_ADK_SCOPE must be a callable or a dotted path to one.")
    return cast(Callable[[str, str], Scope | str], value)
