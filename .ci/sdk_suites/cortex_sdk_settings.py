"""Django settings of the SDK suites' runs (``.ci/sdk_suites/run``, docs/design.md §19.4).

The SDKs' tests bring their own top-level ``tests`` package, so the app's ``tests.settings``
cannot be imported beside them: these are the few settings the adapters need. ``DATABASE_URL``
picks the database, as for the app's own suite; unset means SQLite.
"""

from __future__ import annotations

import os

import dj_database_url

SECRET_KEY = "cortex-sessions-sdk-suites"
USE_TZ = True
TIME_ZONE = "UTC"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
DATABASES = {
    "default": dj_database_url.parse(
        os.environ.get("DATABASE_URL") or "sqlite:///:memory:", conn_max_age=0
    )
}
if DATABASES["default"]["ENGINE"] == "django.db.backends.mysql":
    DATABASES["default"]["OPTIONS"] = {
        "charset": "utf8mb4",
        "isolation_level": "read committed",
        "init_command": "SET sql_mode = 'STRICT_TRANS_TABLES'",
    }
    DATABASES["default"]["TEST"] = {"CHARSET": "utf8mb4", "COLLATION": "utf8mb4_unicode_ci"}
INSTALLED_APPS = [
    "django.contrib.contenttypes",
    "django.contrib.auth",
    "cortex_sessions",
    "cortex_sessions.integrations.adk",
]
