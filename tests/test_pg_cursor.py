"""``_pg_run.execute``'s server-binding cursors (docs/design.md §14.2): the one of
``PREPARED_STATEMENTS`` and the one the LangGraph saver asks for (``server_binding``, binary
parameters) read a timestamp as ``connection.cursor()`` does, in Django's time zone, and register
a time zone loader of their own only when the connection's disagrees, as Django's
``create_cursor`` does (making the loader class and copying the cursor's adapters cost ~75 µs).
"""

from __future__ import annotations

import pytest
from django.db import connection
from django.test import override_settings

from cortex_sessions.services import _pg, _pg_run

pytestmark = [
    pytest.mark.django_db,
    pytest.mark.skipif(
        not _pg.enabled("default"),
        reason="the hand-written SQL serves PostgreSQL through psycopg 3 only",
    ),
]

#: A time whose wall clock differs between UTC and Paris.
TIMESTAMP = "SELECT '2026-03-29 01:30:00+00'::timestamptz"

ZONES = [{}, {"TIME_ZONE": "Europe/Paris"}, {"USE_TZ": False, "TIME_ZONE": "Europe/Paris"}]


@pytest.mark.parametrize("prepared", [False, True], ids=["server-binding", "prepared"])
@pytest.mark.parametrize("zone", ZONES, ids=["UTC", "Paris", "USE_TZ False"])
def test_a_server_binding_cursor_reads_a_timestamp_as_djangos_cursor(prepared, zone):
    connection.ensure_connection()  # connected in UTC: the settings below change it afterwards
    with override_settings(**zone, CORTEX_SESSIONS={"PREPARED_STATEMENTS": prepared}):
        with connection.cursor() as cursor:
            cursor.execute(TIMESTAMP)
            (expected,) = cursor.fetchone()
        rows, _ = _pg_run.execute(connection, TIMESTAMP, [], server_binding=True)
    (got,) = rows[0]
    assert (got.isoformat(), got.tzinfo) == (expected.isoformat(), expected.tzinfo)


@pytest.mark.parametrize("prepare", [False, True], ids=["server-binding", "prepared"])
def test_a_server_binding_cursor_shares_the_connections_loader_when_the_zones_agree(prepare):
    import psycopg
    from psycopg.pq import Format

    connection.ensure_connection()
    oid = psycopg.adapters.types["timestamptz"].oid
    own = connection.connection.adapters.get_loader(oid, Format.TEXT)
    assert own.timezone == connection.timezone  # Django's loader, in the connection's zone
    with _pg_run._cursor(connection, prepare=prepare, server_binding=True) as cursor:
        assert cursor.cursor.adapters.get_loader(oid, Format.TEXT) is own
