"""The thread-lifecycle migration runs forward and backward on a populated database
(docs/design.md §11.1–§11.3)."""

from __future__ import annotations

import pytest
from django.db import connection
from django.db.migrations.loader import MigrationLoader

from cortex_sessions import services
from tests.test_migrations import APP, Migrator

pytestmark = pytest.mark.django_db(transaction=True)

INDEX = "cortex_session_metadata_gin"


def _lifecycle_migration() -> tuple[str, str]:
    """``(name, previous)``: the lifecycle migration and the one it applies on top of."""
    # The originals' graph: on a database migrated through the squash, 0011 is replaced.
    graph = MigrationLoader(connection, replace_migrations=False).graph
    (name,) = [key[1] for key in graph.nodes if key[0] == APP and key[1].endswith("lifecycle")]
    (previous,) = [key[1] for key in graph.node_map[(APP, name)].parents if key[0] == APP]
    return name, previous


def _has_metadata_index() -> bool:
    with connection.cursor() as cursor:
        return INDEX in connection.introspection.get_constraints(cursor, "cortex_sessions_session")


@pytest.fixture
def migrator():
    migrator = Migrator()
    try:
        yield migrator
    finally:
        migrator.migrate(migrator.latest)


def _snapshot(apps):
    Session = apps.get_model(APP, "Session")
    Message = apps.get_model(APP, "Message")
    fields = ["id", "agent_id", "scope", "title", "metadata", "message_count", "last_seq"]
    return (
        list(Session.objects.order_by("pk").values_list(*fields)),
        list(Message.objects.order_by("pk").values_list("pk", "session", "seq", "content")),
    )


def test_lifecycle_migration_runs_forward_and_backward_on_populated_data(migrator):
    name, previous = _lifecycle_migration()
    apps = migrator.migrate(previous)
    Session = apps.get_model(APP, "Session")
    Message = apps.get_model(APP, "Message")
    sessions = [
        Session.objects.create(agent_id="a", scope=f"org=acme/user={n}", metadata={"n": n})
        for n in range(3)
    ]
    for session in sessions:
        for seq in (1, 2):
            Message.objects.create(
                session=session,
                agent_id="a",
                scope=session.scope,
                seq=seq,
                role="user",
                content=[{"type": "text", "text": f"{session.pk} {seq}"}],
            )
        Session.objects.filter(pk=session.pk).update(message_count=2, last_seq=2)
    before = _snapshot(apps)

    apps = migrator.migrate(name)
    LiveSession = apps.get_model(APP, "Session")
    assert _snapshot(apps) == before
    assert list(
        LiveSession.objects.order_by()
        .values_list("archived_at", "forked_from", "forked_at_seq")
        .distinct()
    ) == [(None, None, None)]
    assert _has_metadata_index() is (connection.vendor == "postgresql")

    # Use the new columns, then go back: the old columns keep their data.
    migrator.migrate(migrator.latest)
    services.archive_session(scope="org=acme", session_id=sessions[0].pk)
    fork = services.fork_session(scope="org=acme", session_id=sessions[1].pk)
    after_fork = _snapshot(apps)

    apps = migrator.migrate(previous)
    assert _snapshot(apps) == after_fork
    assert not _has_metadata_index()

    apps = migrator.migrate(name)
    assert _snapshot(apps) == after_fork
    LiveSession = apps.get_model(APP, "Session")
    assert LiveSession.objects.get(pk=fork.pk).forked_from is None  # dropped going back
    assert _has_metadata_index() is (connection.vendor == "postgresql")
