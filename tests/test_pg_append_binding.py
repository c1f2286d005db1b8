"""The appends on PostgreSQL of one message and of many send their parameters apart from the
statement (server-side binding, docs/design.md §14.2), as get, resolve and the newest page do;
the keyed ones (the service's and the API's recorded one, a CTE around the call) stay bound as
Django binds, which cost the server less; and none of them is prepared unless
``PREPARED_STATEMENTS``, whatever ``prepare_threshold`` the host set (a pooler in transaction
mode). What they store and return is pinned in ``tests/test_hot_paths.py``."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test import override_settings

from cortex_sessions import services
from cortex_sessions.services import _pg
from cortex_sessions.services.keyed_append import KeyedCall, append_recorded
from tests.pg_support import prepare_at_once, prepared_statements

pytestmark = [
    pytest.mark.django_db(transaction=True),  # the keyed appends' one statement: no caller's
    pytest.mark.skipif(
        not _pg.enabled("default"),
        reason="the hand-written SQL serves PostgreSQL through psycopg 3 only",
    ),
]

SCOPE = "org=acme/user=alice"


@pytest.fixture
def session():
    return services.create_session(scope=SCOPE, agent_id="agent-1")


def _appends(session, tag: str) -> None:
    """One of each append, keyed ones with keys of ``tag``."""
    one = [{"role": "user", "content": f"one {tag}"}]
    services.append_messages(scope=SCOPE, session_id=session.pk, messages=one)
    many = [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]
    services.append_messages(scope=SCOPE, session_id=session.pk, messages=many)
    services.append_messages(
        scope=SCOPE, session_id=session.pk, messages=one, idempotency_key=f"key-{tag}"
    )
    keyed = KeyedCall(SCOPE, f"api:POST /messages/{session.pk}", f"api-{tag}", "digest")
    message = services.MessageInput(role="user", content=f"api {tag}")
    assert append_recorded(session.pk, message, keyed, status_code=201) is not None


def _statements(calls) -> list[tuple[str, type]]:
    """``(sql, class of the psycopg cursor)`` of each statement ``calls()`` ran."""
    seen: list[tuple[str, type]] = []

    def note(execute, sql, params, many, context):
        seen.append((sql, type(context["cursor"].cursor)))
        return execute(sql, params, many, context)

    with connection.execute_wrapper(note):
        calls()
    return seen


def test_a_call_of_an_append_function_sends_its_parameters_apart(session):
    import psycopg  # the module runs only where psycopg 3 serves (pytestmark)

    statements = _statements(lambda: _appends(session, "apart"))
    starts = [
        f"SELECT {_pg.APPEND_ONE}(",
        f"SELECT {_pg.APPEND_MANY}(",
        f"WITH a AS (SELECT {_pg.APPEND_ONE}(",  # the service's keyed append
        f"WITH a AS (SELECT {_pg.APPEND_ONE}(",  # the API's recorded one
    ]
    assert len(statements) == len(starts)
    for (sql, _cls), start in zip(statements, starts, strict=True):
        assert sql.startswith(start)
    for _sql, cls in statements[:2]:
        assert issubclass(cls, psycopg.Cursor)
        assert not issubclass(cls, psycopg.ClientCursor)  # Django's own binds client-side
    for _sql, cls in statements[2:]:
        assert issubclass(cls, psycopg.ClientCursor)
    assert session.messages.count() == 5


def test_the_appends_prepare_nothing_unless_prepared_statements(session):
    with prepare_at_once():  # a host's threshold
        for round_ in range(3):
            _appends(session, f"unprepared-{round_}")
        unprepared = prepared_statements()
        assert not any(_pg.APPEND_ONE in sql or _pg.APPEND_MANY in sql for sql in unprepared)
        with override_settings(CORTEX_SESSIONS={"PREPARED_STATEMENTS": True}):
            _appends(session, "prepared")
        prepared = [sql for sql in prepared_statements() if sql not in unprepared]
        assert sum(_pg.APPEND_ONE in sql for sql in prepared) == 3  # one, keyed, recorded
        assert sum(_pg.APPEND_MANY in sql for sql in prepared) == 1
        assert all("$1" in sql and "'" not in sql for sql in prepared)  # no literal parameter
