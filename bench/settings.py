"""Django settings for the benchmarks: only what the core app needs, on PostgreSQL (or MariaDB
for ``python -m bench.mysql``).

The database comes from ``BENCH_DATABASE_URL`` (set by ``python -m bench`` from ``--scale``);
``BENCH_REPLICA_URL`` (set by ``python -m bench.replicas``) adds a standby of it as the read
replica ``replica``, routed by ``ReplicaRouter``.
"""

from __future__ import annotations

import os

import dj_database_url

SECRET_KEY = "cortex-sessions-bench"
DEBUG = False
USE_TZ = True
TIME_ZONE = "UTC"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

DATABASES = {
    "default": dj_database_url.parse(
        os.environ.get(
            "BENCH_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/cortex_bench_small"
        ),
        conn_max_age=None,
    )
}

if DATABASES["default"]["ENGINE"] == "django.db.backends.mysql":
    # README "Databases": the connection options cortex_sessions expects on MySQL/MariaDB.
    DATABASES["default"]["OPTIONS"] = {
        "charset": "utf8mb4",
        "isolation_level": "read committed",
        "init_command": "SET sql_mode = 'STRICT_TRANS_TABLES'",
    }

INSTALLED_APPS = [
    "django.contrib.contenttypes",
    "django.contrib.auth",
    "cortex_sessions",
    "cortex_sessions.integrations.adk",
]

try:  # the LangGraph saver's app (``bench.runtimes``), when langgraph is installed
    import langgraph.checkpoint.base  # noqa: F401
except ImportError:  # pragma: no cover
    pass
else:
    INSTALLED_APPS.append("cortex_sessions.integrations.langgraph")

CORTEX_SESSIONS: dict = {}

if os.environ.get("BENCH_REPLICA_URL"):
    # ``python -m bench.replicas``: a streaming standby of the primary, read through
    # ReplicaRouter (docs/scaling.md).
    DATABASES["replica"] = dj_database_url.parse(os.environ["BENCH_REPLICA_URL"], conn_max_age=None)
    DATABASE_ROUTERS = ["cortex_sessions.routers.ReplicaRouter"]
    CORTEX_SESSIONS["READ_REPLICAS"] = ["replica"]
