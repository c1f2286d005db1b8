"""A fault while a write commits is never answered "nothing was written" (docs/design.md §12.3).

Case ``commit-then-503``: on MariaDB the connection was lost right after the COMMIT of an append
(in Django's ``set_autocommit(True)``), and the answer was 503 ``database_unavailable`` saying
nothing was written, though the message was stored. Faults are injected on the request's own
connection, on every database: the driver's lost-connection error raised by ``commit()`` or by
``set_autocommit(True)`` after the COMMIT went through (the write is stored: 503
``write_outcome_unknown``), by a write statement before the COMMIT (nothing is stored: 503
``database_unavailable``), or by ``commit()`` refusing the COMMIT (a serialization failure:
nothing is stored, 503 ``database_unavailable``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from django.db import DatabaseError, connection

from cortex_sessions import services
from cortex_sessions.exceptions import WriteOutcomeUnknown
from cortex_sessions.models import IdempotencyKey, Message, Session
from cortex_sessions.services import _pg
from tests.api.conftest import BASE, session_url

pytestmark = pytest.mark.django_db(transaction=True)

MESSAGE = {"role": "user", "content": "pay invoice 42"}


def driver_error(kind: str) -> DatabaseError:
    """The driver's error of ``kind``, wrapped as Django wraps it (``__cause__`` kept).

    ``lost``: the connection is gone (the client never saw the server's answer);
    ``refused``: the server answered with a serialization failure (it rolled back).
    """
    database = connection.Database
    if connection.vendor == "mysql":
        exc = (
            database.OperationalError(2013, "Lost connection to server during query")
            if kind == "lost"
            else database.OperationalError(1213, "Deadlock found when trying to get lock")
        )
    elif connection.vendor == "postgresql":
        if kind == "lost":
            exc = database.OperationalError("server closed the connection unexpectedly")
        else:
            exc = database.errors.SerializationFailure("could not serialize access")
    else:
        exc = database.OperationalError(
            "disk I/O error" if kind == "lost" else "database is locked"
        )
    try:
        with connection.wrap_database_errors:
            raise exc
    except DatabaseError as wrapped:
        return wrapped
    raise AssertionError("unreachable")  # pragma: no cover


@contextmanager
def fault_in(method: str, *, after_real_call: bool, kind: str = "lost") -> Iterator[list[Any]]:
    """Make the connection's ``commit()`` or ``set_autocommit(True)`` fail once, after (or
    instead of) the real call; yields the list of calls that failed."""
    real: Callable[..., Any] = getattr(connection, method)
    failed: list[Any] = []

    def faulty(*args: Any, **kwargs: Any) -> Any:
        if failed or (method == "set_autocommit" and args != (True,)):
            return real(*args, **kwargs)
        failed.append(args)
        if after_real_call:
            real(*args, **kwargs)
        raise driver_error(kind)

    setattr(connection, method, faulty)
    try:
        yield failed
    finally:
        delattr(connection, method)  # the class's own method again
        if not connection.get_autocommit():  # set_autocommit(True) failed: restore it
            connection.set_autocommit(True)


@contextmanager
def fault_in_first_insert() -> Iterator[list[str]]:
    """Fail the first INSERT with a lost connection, before it reaches the server."""
    failed: list[str] = []

    def wrapper(execute, sql, params, many, context):
        if not failed and sql.lstrip().upper().startswith("INSERT"):
            failed.append(sql)
            kind = "refused" if connection.vendor == "sqlite" else "lost"  # "database is locked"
            raise driver_error(kind)
        return execute(sql, params, many, context)

    with connection.execute_wrapper(wrapper):
        yield failed


def assert_503(response, code: str) -> None:
    assert response.status_code == 503, response.content
    assert response["Content-Type"].startswith("application/json")
    assert response["Retry-After"] == "1"
    assert response.json()["code"] == code


def keyed_append(api, session: Session, key: str = "k-1", body=(MESSAGE,)):
    """A keyed append; by default a list of one message, which ``run_once`` serves on every
    database (one message alone takes the one-statement path on PostgreSQL, faulted by
    :func:`fault_at_append_statement`)."""
    return api.post(
        session_url(session.pk, "messages/"),
        list(body) if isinstance(body, tuple) else body,
        format="json",
        headers={"Idempotency-Key": key},
    )


@pytest.mark.parametrize("method", ["commit", "set_autocommit"])
def test_a_lost_connection_after_the_commit_of_a_create_is_write_outcome_unknown(api, method):
    with fault_in(method, after_real_call=method == "commit") as failed:
        response = api.post(BASE, {"agent_id": "a"}, format="json")

    assert failed
    assert_503(response, "write_outcome_unknown")
    assert "Idempotency-Key" in response.json()["detail"]
    assert "nothing was written" not in response.json()["detail"]
    assert Session.objects.count() == 1  # the write went through


@pytest.mark.parametrize("method", ["commit", "set_autocommit"])
def test_a_keyed_append_whose_commit_was_lost_replays_on_retry(api, alice_scope, method):
    session = services.create_session(scope=alice_scope, agent_id="a")
    with fault_in(method, after_real_call=method == "commit") as failed:
        first = keyed_append(api, session)
    assert failed
    assert_503(first, "write_outcome_unknown")
    assert Message.objects.filter(session=session).count() == 1

    again = keyed_append(api, session)

    assert again.status_code == 201, again.content
    assert again["Idempotent-Replayed"] == "true"
    assert Message.objects.filter(session=session).count() == 1
    session.refresh_from_db()
    assert session.message_count == 1


def test_a_lost_connection_before_the_commit_is_database_unavailable_and_writes_nothing(
    api, alice_scope
):
    session = services.create_session(scope=alice_scope, agent_id="a")
    with fault_in_first_insert() as failed:
        response = keyed_append(api, session)

    assert failed
    assert_503(response, "database_unavailable")
    assert not Message.objects.exists()
    assert not IdempotencyKey.objects.exists()
    retried = keyed_append(api, session)
    assert retried.status_code == 201 and "Idempotent-Replayed" not in retried
    assert Message.objects.count() == 1


@pytest.mark.skipif(
    connection.vendor == "postgresql" and not _pg.enabled("default"),
    reason="psycopg 2: an error made in Python has no SQLSTATE (the server sets pgcode), so it "
    "cannot stand for a refusal; faults._sqlstate reads pgcode from real ones",
)
def test_a_commit_the_database_refuses_is_database_unavailable_and_writes_nothing(api):
    with fault_in("commit", after_real_call=False, kind="refused") as failed:
        response = api.post(BASE, {"agent_id": "a"}, format="json")

    assert failed
    assert_503(response, "database_unavailable")
    assert not Session.objects.exists()


def test_the_services_raise_write_outcome_unknown_chained_to_the_fault(alice_scope):
    with (
        fault_in("commit", after_real_call=True),
        pytest.raises(WriteOutcomeUnknown) as info,
    ):
        services.create_session(scope=alice_scope, agent_id="a")

    assert info.value.code == "write_outcome_unknown"
    assert isinstance(info.value.__cause__, DatabaseError)
    assert Session.objects.count() == 1


def test_inside_a_callers_transaction_the_commit_and_its_fault_are_the_callers(alice_scope):
    from django.db import transaction

    with (
        fault_in("commit", after_real_call=True),
        pytest.raises(DatabaseError) as info,
        transaction.atomic(),
    ):
        services.create_session(scope=alice_scope, agent_id="a")

    assert not isinstance(info.value, WriteOutcomeUnknown)


@contextmanager
def fault_at_append_statement(*, after_real_call: bool, answered: bool) -> Iterator[list[str]]:
    """Fail the one-statement append (PostgreSQL, autocommit) once: after the server ran and
    committed it, the answer lost (a bare psycopg error); or before, with the server's answer
    (``admin_shutdown``: the statement never ran)."""
    failed: list[str] = []

    def wrapper(execute, sql, params, many, context):
        if failed or "cortex_sessions_append" not in sql:  # _pg.APPEND_ONE: one message
            return execute(sql, params, many, context)
        failed.append(sql)
        if after_real_call:
            execute(sql, params, many, context)
        database = connection.Database
        exc = (
            database.errors.AdminShutdown("terminating connection")
            if answered
            else database.OperationalError("server closed the connection unexpectedly")
        )
        with connection.wrap_database_errors:
            raise exc

    with connection.execute_wrapper(wrapper):
        yield failed


@pytest.mark.postgres_only
@pytest.mark.skipif(not _pg.enabled("default"), reason="the one-statement append: psycopg 3 only")
def test_a_lost_answer_to_the_one_statement_append_is_write_outcome_unknown(api, alice_scope):
    session = services.create_session(scope=alice_scope, agent_id="a")
    with fault_at_append_statement(after_real_call=True, answered=False) as failed:
        response = api.post(session_url(session.pk, "messages/"), MESSAGE, format="json")

    assert failed
    assert_503(response, "write_outcome_unknown")
    assert Message.objects.filter(session=session).count() == 1


@pytest.mark.postgres_only
@pytest.mark.skipif(not _pg.enabled("default"), reason="the one-statement append: psycopg 3 only")
def test_a_one_statement_append_the_server_refused_is_database_unavailable(api, alice_scope):
    session = services.create_session(scope=alice_scope, agent_id="a")
    with fault_at_append_statement(after_real_call=False, answered=True) as failed:
        response = api.post(session_url(session.pk, "messages/"), MESSAGE, format="json")

    assert failed
    assert_503(response, "database_unavailable")
    assert not Message.objects.exists()


@pytest.mark.postgres_only
@pytest.mark.skipif(not _pg.enabled("default"), reason="the one-statement append: psycopg 3 only")
def test_a_keyed_one_statement_append_whose_answer_was_lost_replays_on_retry(api, alice_scope):
    session = services.create_session(scope=alice_scope, agent_id="a")
    with fault_at_append_statement(after_real_call=True, answered=False) as failed:
        first = keyed_append(api, session, body=MESSAGE)
    assert failed and IdempotencyKey._meta.db_table in failed[0]  # the key's own statement
    assert_503(first, "write_outcome_unknown")

    again = keyed_append(api, session, body=MESSAGE)
    once_more = keyed_append(api, session, body=MESSAGE)

    assert again.status_code == once_more.status_code == 201, again.content
    assert again["Idempotent-Replayed"] == once_more["Idempotent-Replayed"] == "true"
    assert again.content == once_more.content
    assert again.json()["messages"][0]["seq"] == 1
    assert Message.objects.filter(session=session).count() == 1
    assert IdempotencyKey.objects.count() == 1


@pytest.mark.postgres_only
@pytest.mark.skipif(not _pg.enabled("default"), reason="the one-statement append: psycopg 3 only")
def test_a_keyed_one_statement_append_the_server_refused_leaves_the_key_free(api, alice_scope):
    session = services.create_session(scope=alice_scope, agent_id="a")
    with fault_at_append_statement(after_real_call=False, answered=True) as failed:
        response = keyed_append(api, session, body=MESSAGE)

    assert failed
    assert_503(response, "database_unavailable")
    assert not Message.objects.exists() and not IdempotencyKey.objects.exists()
    retried = keyed_append(api, session, body=MESSAGE)
    assert retried.status_code == 201 and "Idempotent-Replayed" not in retried
    assert Message.objects.count() == 1
