"""Database faults answer 503 ``database_unavailable`` with ``Retry-After``, never an HTML 500,
and leave nothing half-written (docs/design.md §12.3). Resolve survives a racing delete.

Run on PostgreSQL and MariaDB with real transactions: a second connection holds the session's
row lock while the request runs with a short lock or statement timeout (``lock_timeout`` /
``statement_timeout``; ``innodb_lock_wait_timeout`` / ``max_statement_time``); the request's own
connection is killed (``pg_terminate_backend``; ``KILL``); serialization failures and deadlocks
are raised by the server with their SQLSTATE or error number inside a write that has already
written a row.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest
from django.db import DEFAULT_DB_ALIAS, connection, connections, transaction
from rest_framework.test import APIClient

from cortex_sessions import services
from cortex_sessions.faults import is_transient_database_error
from cortex_sessions.models import Message, Session
from tests.api.conftest import BASE, session_url

pytestmark = [pytest.mark.concurrent_db, pytest.mark.django_db(transaction=True)]

#: How each database is told to give up waiting: (statement, expected driver error number or
#: SQLSTATE). MariaDB's lock wait timeout is whole seconds; its statement timeout fractional.
TIMEOUTS = {
    "postgresql": {
        "lock_timeout": "SET lock_timeout = '150ms'",
        "statement_timeout": "SET statement_timeout = '150ms'",
    },
    "mysql": {
        "lock_timeout": "SET SESSION innodb_lock_wait_timeout = 1",
        "statement_timeout": "SET SESSION max_statement_time = 0.15",
    },
}

MESSAGE = {"role": "user", "content": "pay invoice 42"}


@pytest.fixture
def session(alice_scope) -> Session:
    return services.create_session(scope=alice_scope, agent_id="a")


@pytest.fixture
def other_connection() -> Iterator:
    """A second connection to the test database, closed after the test."""
    other = connections.create_connection(DEFAULT_DB_ALIAS)
    yield other
    other.close()


@pytest.fixture
def row_locked(session, other_connection) -> Iterator[None]:
    """The session's row, locked FOR UPDATE by the second connection until the test ends."""
    with other_connection.cursor() as cursor:
        cursor.execute("BEGIN" if other_connection.vendor == "postgresql" else "START TRANSACTION")
        cursor.execute(
            f"SELECT 1 FROM {Session._meta.db_table} WHERE id = %s FOR UPDATE", [session.pk]
        )
    yield
    with other_connection.cursor() as cursor:
        cursor.execute("ROLLBACK")


@pytest.fixture
def fresh_connection_after() -> Iterator[None]:
    """Close the test thread's connection afterwards, dropping any ``SET`` or dead socket."""
    yield
    connection.close()


def assert_unavailable(response) -> None:
    assert response.status_code == 503, response.content
    assert response["Content-Type"].startswith("application/json")
    assert response["Retry-After"] == "1"
    body = response.json()
    assert body["code"] == "database_unavailable"
    assert body["detail"]


@pytest.mark.parametrize("setting", ["lock_timeout", "statement_timeout"])
def test_timeout_waiting_for_a_row_lock_is_503_and_writes_nothing(
    api, session, row_locked, fresh_connection_after, setting
):
    with connection.cursor() as cursor:
        cursor.execute(TIMEOUTS[connection.vendor][setting])

    response = api.post(session_url(session.pk, "messages/"), MESSAGE, format="json")

    assert_unavailable(response)
    connection.close()
    assert Message.objects.count() == 0
    session.refresh_from_db()
    assert (session.message_count, session.last_seq) == (0, 0)


def test_killed_connection_is_503(api, session, other_connection, fresh_connection_after):
    connection.ensure_connection()
    with other_connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute(
                "SELECT pg_terminate_backend(%s)", [connection.connection.info.backend_pid]
            )
        else:
            cursor.execute(f"KILL {int(connection.connection.thread_id())}")

    response = api.post(session_url(session.pk, "messages/"), MESSAGE, format="json")

    assert_unavailable(response)
    connection.close()
    assert Message.objects.count() == 0


#: How each database raises a serialization failure / deadlock inside a transaction, and what
#: the driver error then carries (SQLSTATE on PostgreSQL, error number on MySQL/MariaDB).
INJECTED = {
    "postgresql": {
        "serialization_failure": (
            "DO $$ BEGIN RAISE EXCEPTION 'injected' USING ERRCODE = 'serialization_failure'; "
            "END $$",
            "40001",
        ),
        "deadlock": (
            "DO $$ BEGIN RAISE EXCEPTION 'injected' USING ERRCODE = 'deadlock_detected'; END $$",
            "40P01",
        ),
    },
    "mysql": {
        # InnoDB reports both as ER_LOCK_DEADLOCK (1213) with SQLSTATE 40001.
        "serialization_failure": (
            "SIGNAL SQLSTATE '40001' SET MYSQL_ERRNO = 1213, MESSAGE_TEXT = 'injected'",
            1213,
        ),
        "deadlock": (
            "SIGNAL SQLSTATE '40001' SET MYSQL_ERRNO = 1213, MESSAGE_TEXT = 'injected'",
            1213,
        ),
    },
}


def _driver_code(exc: BaseException):
    cause = exc.__cause__
    return getattr(cause, "sqlstate", None) or getattr(cause, "pgcode", None) or cause.args[0]


@pytest.mark.parametrize("fault", ["serialization_failure", "deadlock"])
def test_serialization_failure_and_deadlock_roll_back_and_are_503(api, session, monkeypatch, fault):
    statement, code = INJECTED[connection.vendor][fault]
    real_append = services.append_messages
    raised: list[BaseException] = []

    def append_then_fail(**kwargs):
        with transaction.atomic():
            real_append(**kwargs)  # the message row is written ...
            try:
                with connection.cursor() as cursor:  # ... then the server aborts the transaction
                    cursor.execute(statement)
            except Exception as exc:
                raised.append(exc)
                raise

    monkeypatch.setattr(services, "append_messages", append_then_fail)

    response = api.post(session_url(session.pk, "messages/"), MESSAGE, format="json")

    assert_unavailable(response)
    assert _driver_code(raised[0]) == code
    assert Message.objects.count() == 0
    session.refresh_from_db()
    assert session.message_count == 0


def test_programming_errors_are_not_called_transient():
    with pytest.raises(Exception) as info, transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SELECT * FROM no_such_table_here")
    assert not is_transient_database_error(info.value)


def test_resolve_racing_deletes_of_the_default_always_answers_200_or_201(alice):
    """Case ``resolve-races-delete``: 8 resolvers (125 rounds each, 1,000 resolves) against 4
    deleters of whatever resolve last returned; no resolve may fail."""
    resolvers, rounds, deleters = 8, 125, 4
    latest: list[str] = []
    statuses: list[int] = []
    done = threading.Event()
    lock = threading.Lock()

    def client() -> APIClient:
        api = APIClient()
        api.force_authenticate(alice)
        return api

    def resolve_loop(_: int) -> None:
        api = client()
        try:
            for _round in range(rounds):
                response = api.post(f"{BASE}resolve/", {"agent_id": "a"}, format="json")
                with lock:
                    statuses.append(response.status_code)
                    if response.status_code in (200, 201):
                        latest.append(response.json()["id"])
        finally:
            connections.close_all()

    def delete_loop(_: int) -> None:
        api = client()
        try:
            while not done.is_set():
                with lock:
                    target = latest[-1] if latest else str(uuid.uuid4())
                response = api.delete(session_url(target))
                assert response.status_code in (204, 404), response.content
        finally:
            connections.close_all()

    with ThreadPoolExecutor(max_workers=resolvers + deleters) as pool:
        deleting = [pool.submit(delete_loop, n) for n in range(deleters)]
        resolving = [pool.submit(resolve_loop, n) for n in range(resolvers)]
        for future in resolving:
            future.result(timeout=600)
        done.set()
        for future in deleting:
            future.result(timeout=60)

    assert len(statuses) == resolvers * rounds
    assert set(statuses) <= {200, 201}, sorted(set(statuses))
    assert Session.objects.filter(is_default=True).count() <= 1
