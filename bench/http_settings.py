"""Django settings of ``python -m bench.http``: the example project's, served by gunicorn against
the bench's PostgreSQL database (``BENCH_DATABASE_URL``), with the plain-view floor of
:mod:`bench.http_floor` mounted next to the API (``bench.http_urls``)."""

from __future__ import annotations

import os

import dj_database_url

from example_project.settings import *  # noqa: F403  # the host under test is the example's

DEBUG = False
ROOT_URLCONF = "bench.http_urls"
DATABASES = {
    "default": dj_database_url.parse(
        os.environ.get(
            "BENCH_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/cortex_bench_http"
        ),
        conn_max_age=None,  # a worker keeps its connection, as a production host does
    )
}
# Logging off the hot path: a 4xx in a run is counted by wrk, not written to stderr each time.
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "loggers": {"django": {"level": "ERROR"}},
}
