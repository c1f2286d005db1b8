"""Scope predicates are index-backed on PostgreSQL (docs/design.md §2.3, §3.1)."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from cortex_sessions import services
from cortex_sessions.models import Message, Session

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
    filters = {"scope": "org=o3", "exact": exact, "agent_id": agent_id}
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_seqscan = off")
    plans = [
        services.session_queryset(**filters)[:50].explain(),
        services.session_queryset(**filters).order_by().explain(),
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
