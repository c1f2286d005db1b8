"""Column types and index use on MySQL/MariaDB (docs/design.md §2.3, §15)."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from cortex_sessions import services
from cortex_sessions.models import ImportedConversation, Message, Session

pytestmark = [pytest.mark.django_db, pytest.mark.mysql_only]


def _columns(model) -> dict[str, tuple[str, str | None]]:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT column_name, column_type, collation_name FROM information_schema.columns "
            "WHERE table_schema = DATABASE() AND table_name = %s",
            [model._meta.db_table],
        )
        return {name: (kind, collation) for name, kind, collation in cursor.fetchall()}


def _explain(sql: str, params: tuple) -> list[dict]:
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN " + sql, params)
        names = [column[0] for column in cursor.description]
        return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]


@pytest.mark.parametrize("model", [Session, Message, ImportedConversation])
def test_scope_columns_are_varbinary_so_they_compare_bytewise_without_padding(model):
    assert _columns(model)["scope"] == ("varbinary(1024)", None)


@pytest.mark.parametrize(
    ("model", "column"),
    [
        (Session, "agent_id"),
        (Message, "agent_id"),
        (ImportedConversation, "agent_id"),
        (ImportedConversation, "external_id"),
    ],
)
def test_identifier_columns_have_a_binary_no_pad_collation(model, column):
    expected = "utf8mb4_nopad_bin" if connection.mysql_is_mariadb else "utf8mb4_0900_bin"
    assert _columns(model)[column] == ("varchar(255)", expected)


def test_the_one_default_rule_is_a_unique_index_on_the_generated_column():
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT non_unique, GROUP_CONCAT(column_name ORDER BY seq_in_index) "
            "FROM information_schema.statistics WHERE table_schema = DATABASE() "
            "AND table_name = %s AND index_name = 'cortex_session_one_default' "
            "GROUP BY non_unique",
            [Session._meta.db_table],
        )
        assert cursor.fetchall() == ((0, "agent_id,scope,default_flag"),)
        cursor.execute(
            "SELECT extra, generation_expression FROM information_schema.columns "
            "WHERE table_schema = DATABASE() AND table_name = %s AND column_name = %s",
            [Session._meta.db_table, "default_flag"],
        )
        extra, expression = cursor.fetchone()
    assert extra in {"STORED GENERATED", "PERSISTENT GENERATED"}
    assert "is_default" in expression


@pytest.mark.parametrize("exact", [False, True])
def test_list_and_count_at_a_prefix_are_index_range_reads(exact):
    Session.objects.bulk_create(
        Session(agent_id=f"agent-{n % 3}", scope=f"org=o{n % 50}/user={n}") for n in range(2000)
    )
    queries = [
        services.session_queryset(scope="org=o3", filters=services.SessionFilters(exact=exact))[
            :50
        ],
        services.session_queryset(
            scope="org=o3", filters=services.SessionFilters(exact=exact)
        ).order_by(),
    ]
    for queryset in queries:
        sql, params = queryset.query.sql_with_params()
        (plan,) = _explain(sql, params)
        assert plan["type"] in {"range", "ref"}, plan
        assert plan["key"].startswith("cortex_session_"), plan


def test_count_at_a_prefix_is_answered_from_the_scope_index_alone():
    Session.objects.bulk_create(
        Session(agent_id="a", scope=f"org=o{n % 50}/user={n}") for n in range(2000)
    )
    with CaptureQueriesContext(connection) as captured:
        assert services.count_sessions(scope="org=o3") == 40
    sql = captured.captured_queries[-1]["sql"]
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN " + sql)
        names = [column[0] for column in cursor.description]
        (plan,) = [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]
    assert plan["type"] == "range", plan
    assert plan["key"] == "cortex_session_scope_idx", plan
    # "Using index" (index-only), not "Using index condition" (rows read from the table).
    assert "Using index" in [part.strip() for part in plan["Extra"].split(";")], plan


@pytest.mark.parametrize("model", [Session, Message])
def test_no_index_duplicates_another(model):
    """Without partial indexes, a partial index would be a full twin of another index
    (docs/design.md §15.3): every index of the table has its own column list."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT index_name, GROUP_CONCAT(column_name ORDER BY seq_in_index) "
            "FROM information_schema.statistics WHERE table_schema = DATABASE() "
            "AND table_name = %s GROUP BY index_name",
            [model._meta.db_table],
        )
        indexes = dict(cursor.fetchall())
    columns = list(indexes.values())
    assert len(columns) == len(set(columns)), indexes
