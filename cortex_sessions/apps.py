from __future__ import annotations

from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class CortexSessionsConfig(AppConfig):
    """App config: registers the system checks of docs/design.md §9, the SQL function the
    metadata filter needs on SQLite (:mod:`cortex_sessions.sqlite_json`, §11.3), and the
    ``post_migrate`` receiver that creates the hot paths' functions on PostgreSQL when this app's
    migrations are disabled (:func:`cortex_sessions.services._pg.create_functions`, §14.1)."""

    name = "cortex_sessions"
    verbose_name = _("Cortex sessions")
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from django.db import connections
        from django.db.backends.signals import connection_created
        from django.db.models.signals import post_migrate

        from . import (
            checks,  # noqa: F401 - registers the checks
            sqlite_json,
        )
        from .services import _pg

        post_migrate.connect(_pg.create_functions, sender=self, dispatch_uid=_pg.APPEND_ONE)

        connection_created.connect(sqlite_json.register, dispatch_uid=sqlite_json.SQL_FUNCTION)
        # A connection opened before the app was ready never sends the signal again.
        for connection in connections.all(initialized_only=True):
            if connection.connection is not None:
                sqlite_json.register(connection=connection)
