"""Fixtures of the tests against a real PostgreSQL streaming standby (docs/design.md §17.3).

They run when ``CORTEX_REPLICA_URL`` names a standby of the server ``DATABASE_URL`` names
(``.ci/standby.sh start`` prints it; with ``DATABASE_URL`` on PostgreSQL, tests/settings.py then
adds the ``replica`` alias, a test mirror of ``default``) and skip otherwise. ``CORTEX_STANDBY_DIR`` (the script's
``STANDBY_DIR``) lets one test stop the standby and start it again.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest
from django.conf import settings
from django.db import connections

from cortex_sessions import routers
from cortex_sessions.consistency import parse_lsn

if TYPE_CHECKING:  # psycopg 3 is imported where a standby is used: a psycopg 2 run skips here
    import psycopg

#: Seconds the standby may take to replay what the primary wrote before a test fails.
CATCH_UP_SECONDS = 60


def pytest_collection_modifyitems(config, items):
    """Skip every test here unless a standby is configured (fail instead, on PostgreSQL, with
    ``CI_REQUIRE_REPLICA=1``, as CI runs them)."""
    if "replica" in settings.DATABASES:
        return
    postgres = settings.DATABASES["default"]["ENGINE"].endswith("postgresql")
    if postgres and os.environ.get("CI_REQUIRE_REPLICA") == "1":
        raise pytest.UsageError("CI_REQUIRE_REPLICA=1 but CORTEX_REPLICA_URL is not set")
    skip = pytest.mark.skip(reason="needs a streaming standby: set CORTEX_REPLICA_URL")
    for item in items:
        if "tests/replicas/" in str(item.fspath).replace(os.sep, "/"):
            item.add_marker(skip)


def standby_connection() -> psycopg.Connection:
    """A connection of the test's own to the standby, outside Django (autocommit)."""
    import psycopg

    replica = connections["replica"].settings_dict
    return psycopg.connect(
        host=replica["HOST"] or "127.0.0.1",
        port=int(replica["PORT"] or 5432),
        user=replica["USER"] or "postgres",
        dbname="postgres",
        autocommit=True,
    )


def primary_lsn() -> int:
    with connections["default"].cursor() as cursor:
        cursor.execute("SELECT pg_current_wal_lsn()::text")
        return parse_lsn(cursor.fetchone()[0])


def wait_for_replay() -> None:
    """Resume replay and wait until the standby has replayed all the primary wrote."""
    target = primary_lsn()
    deadline = time.monotonic() + CATCH_UP_SECONDS
    with standby_connection() as standby:
        standby.execute("SELECT pg_wal_replay_resume()")
        while True:
            replayed = standby.execute("SELECT pg_last_wal_replay_lsn()::text").fetchone()[0]
            if parse_lsn(replayed) >= target:
                return
            if time.monotonic() > deadline:
                raise AssertionError(f"the standby did not replay up to {target:X}")
            time.sleep(0.05)


@pytest.fixture
def replica_router(settings) -> Iterator[None]:
    """``ReplicaRouter`` with the ``replica`` alias, the standby caught up with the primary."""
    settings.DATABASE_ROUTERS = ["cortex_sessions.routers.ReplicaRouter"]
    settings.CORTEX_SESSIONS = {
        **getattr(settings, "CORTEX_SESSIONS", {}),
        "READ_REPLICAS": ["replica"],
        "REPLICA_MAX_LAG": 3600,
    }
    routers.forget_statuses()
    wait_for_replay()
    yield
    wait_for_replay()
    routers.forget_statuses()


@pytest.fixture
def paused_replay(replica_router) -> Iterator[None]:
    """The standby, caught up, stops replaying: what the primary writes next is not on it."""
    with standby_connection() as standby:
        standby.execute("SELECT pg_wal_replay_pause()")
        while (
            standby.execute("SELECT pg_get_wal_replay_pause_state()").fetchone()[0] == "not paused"
        ):
            time.sleep(0.01)
    yield
    wait_for_replay()
