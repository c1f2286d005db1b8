"""Settings of the example host. SQLite by default; ``DATABASE_URL`` picks another database."""

from __future__ import annotations

import os
from pathlib import Path

BASE_DIR = Path(__file__).resolve().parent.parent

SECRET_KEY = os.environ.get("DJANGO_SECRET_KEY", "example-project-not-for-production")
DEBUG = os.environ.get("DJANGO_DEBUG", "1") == "1"
ALLOWED_HOSTS = ["127.0.0.1", "localhost", "testserver"]

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
    "drf_spectacular_sidecar",
    "cortex_sessions",
    "cortex_sessions.integrations.adk",
    "cortex_sessions.integrations.langgraph",
    "example_project.tenancy",
    "example_project.demo",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    # Drops a session cookie or Authorization header holding a NUL byte, which Django's session
    # and auth backends would send to the database (PostgreSQL: a 500 on every page).
    "cortex_sessions.middleware.NulCredentialsMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "example_project.urls"

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

WSGI_APPLICATION = "example_project.wsgi.application"


def _database() -> dict:
    url = os.environ.get("DATABASE_URL")
    if url:
        import dj_database_url

        database = dj_database_url.parse(url)
        if database["ENGINE"] == "django.db.backends.mysql":
            # MySQL/MariaDB (README "Databases"): 4-byte UTF-8, strict mode, READ COMMITTED.
            database["OPTIONS"] = {
                "charset": "utf8mb4",
                "isolation_level": "read committed",
                "init_command": "SET sql_mode = 'STRICT_TRANS_TABLES'",
            }
        return database
    return {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": os.environ.get("CORTEX_SQLITE_PATH", str(BASE_DIR / "db.sqlite3")),
        # WAL lets the dev server read while an import writes; synchronous=NORMAL is durable
        # enough for a demo database and makes the per-conversation commits of an import cheap.
        "OPTIONS": {
            "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
            "transaction_mode": "IMMEDIATE",
        },
    }


DATABASES = {"default": _database()}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

USE_TZ = True
TIME_ZONE = "UTC"
LANGUAGE_CODE = "en-us"
USE_I18N = True
STATIC_URL = "/static/"

REST_FRAMEWORK = {
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "rest_framework.authentication.SessionAuthentication",
        "rest_framework.authentication.BasicAuthentication",
    ],
}

SPECTACULAR_SETTINGS = {
    "TITLE": "cortex_sessions example API",
    "DESCRIPTION": "Scoped AI-agent conversation sessions.",
    "VERSION": "0.1.0",
    # Swagger UI and ReDoc from the installed drf-spectacular-sidecar: the docs work offline.
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
}

CORTEX_SESSIONS: dict = {
    # org=<org>/user=<pk> for members, org=<org> for org admins (example_project/tenancy).
    "SCOPE_RESOLVER": "example_project.tenancy.resolver.org_scope_resolver",
}
