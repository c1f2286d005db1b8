"""Migration ``0012_message_search`` forward and backward on a populated table
(docs/design.md §11.5): PostgreSQL gets the generated column, computed for the rows already
there, and both GIN indexes; other databases are untouched."""

from __future__ import annotations

import pytest
from django.db import connection

from cortex_sessions import search, services
from tests.test_migrations import APP, migrator  # noqa: F401  (the fixture, used below)

pytestmark = pytest.mark.django_db(transaction=True)

BEFORE = "0011_session_lifecycle"
SEARCH = "0012_message_search"


def _schema() -> tuple[bool, set[str]]:
    """Whether the message table has the search column, and which search indexes exist."""
    with connection.cursor() as cursor:
        columns = {
            column.name
            for column in connection.introspection.get_table_description(
                cursor, "cortex_sessions_message"
            )
        }
        indexes = set(connection.introspection.get_constraints(cursor, "cortex_sessions_message"))
        indexes |= set(connection.introspection.get_constraints(cursor, "cortex_sessions_session"))
    return search.SEARCH_COLUMN in columns, indexes & {search.MESSAGE_INDEX, search.TITLE_INDEX}


def _rows(apps):
    Message = apps.get_model(APP, "Message")
    Session = apps.get_model(APP, "Session")
    return (
        list(Session.objects.order_by("pk").values_list("pk", "title", "message_count")),
        list(Message.objects.order_by("pk").values_list("pk", "session", "seq", "role", "content")),
    )


def test_the_search_migration_runs_forward_and_backward_on_populated_data(migrator):  # noqa: F811
    apps = migrator.migrate(BEFORE)
    Session = apps.get_model(APP, "Session")
    Message = apps.get_model(APP, "Message")
    texts = [("user", "user", "the invoice of march"), ("tool", "host", "invoice tool output")]
    for n in range(3):
        session = Session.objects.create(agent_id="a", scope=f"org=acme/user={n}", title=f"s{n}")
        for seq, (role, source, text) in enumerate(texts, start=1):
            Message.objects.create(
                session=session,
                agent_id="a",
                scope=session.scope,
                seq=seq,
                role=role,
                source=source,
                content=[{"type": "text", "text": text}],
            )
        Session.objects.filter(pk=session.pk).update(message_count=2, last_seq=2)
    before = _rows(apps)
    assert _schema() == (False, set())

    apps = migrator.migrate(SEARCH)
    assert _rows(apps) == before
    postgres = connection.vendor == "postgresql"
    expected = (True, {search.MESSAGE_INDEX, search.TITLE_INDEX}) if postgres else (False, set())
    assert _schema() == expected
    migrator.migrate(migrator.latest)
    if connection.vendor != "mysql":  # rows written before the migration are found
        assert (
            services.count_sessions(scope="org=acme", filters=services.SessionFilters(q="march"))
            == 3
        )
        assert (
            services.count_sessions(scope="org=acme", filters=services.SessionFilters(q="output"))
            == 0
        )  # tool: not indexed
    if postgres:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT count(*) FROM cortex_sessions_message WHERE search_vector IS NOT NULL"
            )
            assert cursor.fetchone() == (3,)  # the user messages; tool output has none

    apps = migrator.migrate(BEFORE)
    assert _schema() == (False, set())
    assert _rows(apps) == before

    apps = migrator.migrate(SEARCH)
    assert _schema() == expected
    assert _rows(apps) == before
