"""The newest page of messages as a call of the PL/pgSQL function ``_pg_page.NEWEST``
(``0023_newest_page_function``), and the reads of one session or page whose parameters go apart
from the statement (server-side binding, never prepared unless ``PREPARED_STATEMENTS``):
docs/design.md §7.1, §14. The pages' contents are pinned against the ORM path in
``tests/test_hot_paths.py``; these tests are about how they are sent."""

from __future__ import annotations

import importlib
import uuid

import pytest
from django.db import ProgrammingError, connection
from django.test import override_settings
from django.test.utils import CaptureQueriesContext

from cortex_sessions import services
from cortex_sessions.exceptions import SessionNotFound
from cortex_sessions.services import _pg, _pg_page
from tests.pg_support import prepare_at_once, prepared_statements

pytestmark = [
    pytest.mark.django_db,
    pytest.mark.skipif(
        not _pg.enabled("default"),
        reason="the hand-written SQL serves PostgreSQL through psycopg 3 only",
    ),
]

SCOPE = "org=acme/user=alice"
#: The page's columns as the function returns them: every message column but ``session_id``.
PAGE = (
    "TABLE(id bigint, agent_id text, scope text, seq bigint, role text, source text, "
    "content jsonb, metadata jsonb, created_at timestamp with time zone, usage jsonb, "
    "token_count integer, compacts_through_seq integer)"
)


@pytest.fixture
def session():
    created = services.create_session(scope=SCOPE, agent_id="agent-1")
    services.append_messages(
        scope=SCOPE,
        session_id=created.pk,
        messages=[{"role": "user", "content": str(n)} for n in range(5)],
    )
    return created


def _migration():
    return importlib.import_module("cortex_sessions.migrations.0023_newest_page_function")


def _result(signature: str) -> str | None:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_get_function_result(to_regprocedure(%s))", [signature])
        return cursor.fetchone()[0]


def _run_0023(*, forwards: bool) -> None:
    ((operation,),) = (on.database_operations for on in _migration().Migration.operations)
    with connection.schema_editor() as editor:
        if forwards:
            operation.database_forwards("cortex_sessions", editor, None, None)
        else:
            operation.database_backwards("cortex_sessions", editor, None, None)


def test_0023_creates_the_function_the_code_calls_and_backward_drops_it():
    migration = _migration()
    create, drop = _pg.function_sql(_pg_page.NEWEST)
    assert (create, drop) == (migration.CREATE_NEWEST, migration.DROP_NEWEST)
    signature = drop.removeprefix("DROP FUNCTION IF EXISTS ")
    assert _result(signature) == PAGE
    _run_0023(forwards=False)
    assert _result(signature) is None
    _run_0023(forwards=True)
    assert _result(signature) == PAGE


@pytest.mark.parametrize("prepared", [False, True])
def test_the_newest_page_is_a_call_of_the_function_and_a_bounded_page_is_not(session, prepared):
    settings = override_settings(CORTEX_SESSIONS={"PREPARED_STATEMENTS": prepared})
    with settings, CaptureQueriesContext(connection) as captured:
        newest = services.list_messages(scope="org=acme", session_id=session.pk, limit=2)
        before = services.list_messages(scope=SCOPE, session_id=session.pk, before_seq=5)
        after = services.list_messages(scope=SCOPE, session_id=session.pk, after_seq=3)
    newest_call, *bounded = [query["sql"] for query in captured.captured_queries]
    assert newest_call.startswith(f"SELECT * FROM {_pg_page.NEWEST}(")
    assert len(bounded) == 2 and not any(_pg_page.NEWEST in sql for sql in bounded)
    assert [m.seq for m in newest] == [4, 5]
    assert [m.seq for m in before] == [1, 2, 3, 4]
    assert [m.seq for m in after] == [4, 5]


def test_the_newest_page_of_a_missing_empty_or_foreign_session(session):
    empty = services.create_session(scope=SCOPE, agent_id="agent-1")
    assert services.list_messages(scope=SCOPE, session_id=empty.pk) == []
    with pytest.raises(SessionNotFound):
        services.list_messages(scope="org=other", session_id=session.pk)
    with pytest.raises(SessionNotFound):
        services.list_messages(scope=SCOPE, session_id=uuid.uuid4())


@pytest.mark.django_db(transaction=True)
def test_this_code_on_a_database_without_0023_refuses_the_newest_page():
    session = services.create_session(scope=SCOPE, agent_id="agent-1")
    _run_0023(forwards=False)
    try:
        with pytest.raises(ProgrammingError, match="does not exist"):
            services.list_messages(scope=SCOPE, session_id=session.pk)
        assert services.list_messages(scope=SCOPE, session_id=session.pk, after_seq=0) == []
    finally:
        _run_0023(forwards=True)


def _cursor_classes(calls) -> list[type]:
    """The class of the psycopg cursor each statement of ``calls()`` ran on."""
    seen: list[type] = []

    def note(execute, sql, params, many, context):
        seen.append(type(context["cursor"].cursor))
        return execute(sql, params, many, context)

    with connection.execute_wrapper(note):
        calls()
    return seen


def test_get_resolve_and_the_newest_page_send_their_parameters_apart(session):
    services.resolve_session(scope=SCOPE, agent_id="agent-1")  # the default exists: one call

    def calls():
        services.get_session(scope=SCOPE, session_id=session.pk)
        services.resolve_session(scope=SCOPE, agent_id="agent-1")
        services.list_messages(scope=SCOPE, session_id=session.pk)
        services.list_messages(scope=SCOPE, session_id=session.pk, after_seq=1)

    *functions, bounded = _cursor_classes(calls)
    assert len(functions) == 3
    import psycopg  # the module runs only where psycopg 3 serves (pytestmark)

    assert not any(issubclass(cls, psycopg.ClientCursor) for cls in functions)
    assert issubclass(bounded, psycopg.ClientCursor)  # as Django binds


def test_server_binding_prepares_nothing_whatever_the_threshold(session):
    # A host's prepare_threshold would have psycopg prepare a statement it ran that often;
    # the hot paths' are unnamed unless PREPARED_STATEMENTS (a pooler in transaction mode).
    with prepare_at_once():
        for _ in range(3):
            services.get_session(scope=SCOPE, session_id=session.pk)
            services.list_messages(scope=SCOPE, session_id=session.pk)
        assert not any(
            name in sql for sql in prepared_statements() for name in (_pg.GET, _pg_page.NEWEST)
        )
        with override_settings(CORTEX_SESSIONS={"PREPARED_STATEMENTS": True}):
            services.get_session(scope=SCOPE, session_id=session.pk)
            services.list_messages(scope=SCOPE, session_id=session.pk)
        prepared = prepared_statements()
        for name in (_pg.GET, _pg_page.NEWEST):
            assert any(name in sql for sql in prepared)
