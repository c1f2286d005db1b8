"""The context read on PostgreSQL is one statement whose rows read are bounded by what it
returns (docs/design.md §16.4), however long the thread."""

from __future__ import annotations

import json

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext, override_settings

from cortex_sessions import services
from cortex_sessions.models import Message
from cortex_sessions.scope import canonical_of
from cortex_sessions.services._pg_context import context_params, context_sql

pytestmark = [pytest.mark.django_db, pytest.mark.postgres_only]

SCOPE = "org=acme/user=1"


@pytest.fixture(autouse=True)
def _ten_tokens_a_message():
    with override_settings(
        CORTEX_SESSIONS={"TOKEN_COUNTER": "tests.test_context_postgres.ten_tokens"}
    ):
        yield


def ten_tokens(role, content):
    return 10


@pytest.fixture
def long_thread():
    session = services.create_session(scope=SCOPE, agent_id="a")
    for _ in range(3):
        services.append_messages(
            scope=SCOPE,
            session_id=session.pk,
            messages=[{"role": "user", "content": "x"}] * 1000,
        )
    services.compact_session(scope=SCOPE, session_id=session.pk, through_seq=1000, summary="s")
    return session


def _rows_read(plan, table):
    """Rows the plan's scans of ``table`` returned, over all their loops."""
    total = 0
    if plan.get("Relation Name") == table:
        total += plan["Actual Rows"] * plan["Actual Loops"]
    for child in plan.get("Plans", []):
        total += _rows_read(child, table)
    return total


def test_context_read_is_one_statement(long_thread):
    with CaptureQueriesContext(connection) as queries:
        window = services.context_messages(scope=SCOPE, session_id=long_thread.pk, max_tokens=100)
    assert len(queries) == 1
    assert [m.seq for m in window.messages] == [3001, *range(2992, 3001)]


@pytest.mark.parametrize(("budget", "kept"), [(100, 9), (1000, 99), (None, 2000)])
def test_rows_read_are_bounded_by_the_rows_returned(long_thread, budget, kept):
    params = context_params(canonical_of(SCOPE), long_thread.pk, budget)
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + context_sql(), params)
        plan = cursor.fetchone()[0][0]
    plan = plan if isinstance(plan, dict) else json.loads(plan)
    read = _rows_read(plan["Plan"], Message._meta.db_table)
    # the summary (found and re-read), the kept tail twice (walked, then joined), and the one
    # message past the budget twice: 3,001 messages, whatever their number
    returned = kept + 1
    assert read <= 2 * returned + 4, read


@pytest.mark.django_db(transaction=True)
def test_the_bench_floor_returns_the_same_rows():
    """``bench.floor.context_window``, the raw SQL the bench compares with, reads the rows the
    service returns (else its figure would compare unlike work)."""
    psycopg = pytest.importorskip("psycopg")
    from bench import floor

    session = services.create_session(scope=SCOPE, agent_id="a")
    services.append_messages(
        scope=SCOPE, session_id=session.pk, messages=[{"role": "user", "content": "x"}] * 300
    )
    services.compact_session(scope=SCOPE, session_id=session.pk, through_seq=100, summary="s")
    params = connection.get_connection_params()
    params.pop("cursor_factory", None)
    params.pop("context", None)
    with psycopg.connect(**params, autocommit=True) as raw:
        for budget in (50, 500, 5000):
            window = services.context_messages(
                scope=SCOPE, session_id=session.pk, max_tokens=budget
            )
            rows = floor.context_window(raw, scope=SCOPE, session_id=session.pk, max_tokens=budget)
            assert [row[2] for row in rows] == [message.pk for message in window.messages]
