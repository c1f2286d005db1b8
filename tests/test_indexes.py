"""Scope predicates are index-backed on PostgreSQL (docs/design.md §2.3, §3.1)."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from cortex_sessions import services
from cortex_sessions.models import Message, Session
from cortex_sessions.services import _pg, _pg_page

pytestmark = [pytest.mark.django_db, pytest.mark.postgres_only]


@pytest.mark.parametrize("model", [Session, Message])
def test_scope_columns_compare_bytewise(model):
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT collation_name FROM information_schema.columns "
            "WHERE table_name = %s AND column_name = 'scope'",
            [model._meta.db_table],
        )
        assert cursor.fetchone() == ("C",)


@pytest.mark.parametrize("exact", [False, True])
@pytest.mark.parametrize("agent_id", [None, "agent-1"])
def test_list_and_count_at_a_scope_use_an_index(exact, agent_id):
    Session.objects.bulk_create(
        Session(agent_id=f"agent-{n % 3}", scope=f"org=o{n % 7}/user={n}") for n in range(200)
    )
    filters = services.SessionFilters(exact=exact, agent_id=agent_id)
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_seqscan = off")
    plans = [
        services.session_queryset(scope="org=o3", filters=filters)[:50].explain(),
        services.session_queryset(scope="org=o3", filters=filters).order_by().explain(),
    ]
    for plan in plans:
        assert "Seq Scan" not in plan
        assert "cortex_session_" in plan


def test_count_at_a_prefix_is_answered_from_the_scope_index_alone():
    Session.objects.bulk_create(
        Session(agent_id="a", scope=f"org=o{n % 7}/user={n}") for n in range(200)
    )
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_seqscan = off")
    with CaptureQueriesContext(connection) as captured:
        assert services.count_sessions(scope="org=o3") > 0
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN " + captured.captured_queries[-1]["sql"])
        plan = "\n".join(row[0] for row in cursor.fetchall())
    assert "Index Only Scan using cortex_session_scope_idx" in plan, plan
    # the whole prefix is one range of the index, not a filter over all of it
    cond = next(line for line in plan.splitlines() if "Index Cond" in line)
    assert "'org=o3'" in cond and "'org=o30'" in cond, plan


def test_messages_of_a_session_have_one_index_the_seq_index():
    """No index on ``session_id`` alone: with one, the planner read a long session through it
    and sorted every message for a page of the newest (migration 0008)."""
    with connection.cursor() as cursor:
        constraints = connection.introspection.get_constraints(cursor, Message._meta.db_table)
    assert not [
        name
        for name, info in constraints.items()
        if info["index"] and not info["unique"] and info["columns"] == ["session_id"]
    ]


def test_newest_page_of_a_long_session_walks_the_seq_index():
    session = services.create_session(scope="org=o1", agent_id="a")
    for first in (0, 1000):  # two appends: MAX_MESSAGES_PER_APPEND is 1,000
        services.append_messages(
            scope="org=o1",
            session_id=session.pk,
            messages=[{"role": "user", "content": str(n)} for n in range(first, first + 1000)],
        )
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE cortex_sessions_message")
    with CaptureQueriesContext(connection) as captured:
        services.list_messages(scope="org=o1", session_id=session.pk, limit=50)
    statements = [q["sql"] for q in captured.captured_queries]
    if _pg.serves("default"):
        # One call of the newest-page function (migration 0023): explain the statement it runs.
        assert [sql for sql in statements if _pg_page.NEWEST in sql] == statements
        sql = _pg_page._sql_messages(False, False, False)
        params = [session.pk, 50, session.pk, *_pg.scope_params("org=o1")]
    else:  # the ORM path (psycopg 2) checks the session, then reads the page
        (sql,) = [sql for sql in statements if "cortex_sessions_message" in sql]
        params = None
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN " + sql, params)
        plan = "\n".join(row[0] for row in cursor.fetchall())
    assert "cortex_message_session_seq" in plan
    assert "Sort" not in plan


def test_session_table_is_vacuumed_early_and_plans_prefixes_with_fine_statistics():
    """Migration 0009: every append moves ``updated_at`` (in three indexes, so never a HOT
    update); vacuuming after 1% of rows changed keeps prefix counts index-only, and the scope's
    statistics target lets the planner see how many sessions a prefix holds."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT reloptions FROM pg_class WHERE relname = %s", [Session._meta.db_table]
        )
        options = set(cursor.fetchone()[0])
        cursor.execute(
            "SELECT attstattarget FROM pg_attribute WHERE attrelid = %s::regclass "
            "AND attname = 'scope'",
            [Session._meta.db_table],
        )
        target = cursor.fetchone()[0]
    assert {
        "autovacuum_vacuum_scale_factor=0.01",
        "autovacuum_analyze_scale_factor=0.02",
    } <= options
    assert target == 1000


def test_recent_index_holds_the_scope_so_a_prefix_page_is_checked_in_the_index():
    with connection.cursor() as cursor:
        constraints = connection.introspection.get_constraints(cursor, Session._meta.db_table)
    assert constraints["cortex_session_recent_idx"]["columns"] == ["updated_at", "id", "scope"]
