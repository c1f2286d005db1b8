"""System checks of the ADK integration (docs/design.md §13.3).

- ``cortex_adk.E001``: ``CORTEX_SESSIONS_ADK_SCOPE`` cannot be imported or is not callable.
"""

from __future__ import annotations

from typing import Any

from django.core import checks


@checks.register()
def check_scope_setting(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    """``CORTEX_SESSIONS_ADK_SCOPE`` names (or is) a callable ``(app_name, user_id) -> scope``."""
    from .conf import scope_mapper

    try:
        scope_mapper()
    except Exception as exc:
        return [
            checks.Error(
                f"CORTEX_SESSIONS_ADK_SCOPE is not a usable callable: {exc}",
                hint="Give a dotted path to a function (app_name, user_id) -> Scope | str.",
                id="cortex_adk.E001",
            )
        ]
    return []
