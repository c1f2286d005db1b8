"""Settings for the test suite. ``DATABASE_URL`` picks the database; unset means SQLite."""

from __future__ import annotations

import os
import sys

import dj_database_url

SECRET_KEY = "cortex-sessions-tests"
DEBUG = False
USE_TZ = True
TIME_ZONE = "UTC"
ROOT_URLCONF = "tests.urls"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

DATABASES = {
    "default": dj_database_url.parse(
        os.environ.get("DATABASE_URL") or "sqlite:///:memory:", conn_max_age=0
    )
}
if DATABASES["default"]["ENGINE"] == "django.db.backends.mysql":
    # README "Databases": 4-byte UTF-8 on the connection and in the test database, strict
    # mode (a too-long value is an error, never a truncation), READ COMMITTED as on PostgreSQL.
    DATABASES["default"]["OPTIONS"] = {
        "charset": "utf8mb4",
        "isolation_level": "read committed",
        "init_command": "SET sql_mode = 'STRICT_TRANS_TABLES'",
    }
    DATABASES["default"]["TEST"] = {"CHARSET": "utf8mb4", "COLLATION": "utf8mb4_unicode_ci"}

#: ``pytest --strict-replica-router`` (or ``CORTEX_STRICT_ROUTER=1``, for CI): every read goes
#: through tests.routers.StrictReplicaRouter to the alias ``strict_replica``, a test mirror of
#: ``default`` (no second test database), and a read routed inside an open transaction or
#: without its scope hint fails the test (docs/design.md §17.1). Read here, not in conftest.py:
#: pytest-django loads these settings before any conftest's options exist.
STRICT_REPLICA_ROUTER = (
    os.environ.get("CORTEX_STRICT_ROUTER") == "1" or "--strict-replica-router" in sys.argv[1:]
)
if STRICT_REPLICA_ROUTER:
    DATABASES["strict_replica"] = {
        **DATABASES["default"],
        "TEST": {**DATABASES["default"].get("TEST", {}), "MIRROR": "default"},
    }
    DATABASE_ROUTERS = ["tests.routers.StrictReplicaRouter"]

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "django_filters",
    "drf_spectacular",
    "cortex_sessions",
    "cortex_sessions.integrations.adk",
    "cortex_sessions.integrations.langgraph",
    "example_project.tenancy",
    "example_project.demo",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
]

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ]
        },
    }
]

STATIC_URL = "/static/"
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]

REST_FRAMEWORK = {"DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema"}

CORTEX_SESSIONS: dict[str, object] = {}

if os.environ.get("CORTEX_REPLICA_URL") and DATABASES["default"]["ENGINE"].endswith("postgresql"):
    # tests/replicas/: a streaming standby of the default PostgreSQL database's server
    # (.ci/standby.sh). It replicates the whole cluster, so the test database pytest-django
    # creates on the primary appears on it by itself: a test mirror, never created or flushed.
    DATABASES["replica"] = dj_database_url.parse(os.environ["CORTEX_REPLICA_URL"], conn_max_age=0)
    DATABASES["replica"]["TEST"] = {"MIRROR": "default"}
