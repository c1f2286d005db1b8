"""The squashed migrations (docs/design.md §4): ``0001_squashed_0011_sessions`` and
``0012_squashed_0018_search_and_functions`` replace the pre-release originals, and the ADK
app's ``0001_squashed_0003_adk_state`` its three.

- A new database migrated through the squashes has the schema of one migrated through the
  originals: tables, columns, indexes, constraints and, on PostgreSQL, the functions' and
  triggers' definitions, the indexes' SQL and the session table's storage settings.
- A database at an original finishes with the originals (and the squash that none of its
  migrations ran), keeping its rows.
- Going back from the squashes into the originals and forward again keeps the rows.
- The squashes create each table, index and function once, and ``makemigrations`` finds
  nothing to do.
"""

from __future__ import annotations

import importlib
import re
from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.db.migrations.loader import MigrationLoader
from django.db.migrations.operations import RunSQL
from django.db.migrations.recorder import MigrationRecorder

from cortex_sessions import services
from cortex_sessions.migrations._operations import OnVendors
from cortex_sessions.models import Message, Session
from cortex_sessions.services import _pg, _pg_page
from tests.test_migrations import APP, migrator, originals_only  # noqa: F401  (the fixture)

SQUASHES = ("0001_squashed_0011_sessions", "0012_squashed_0018_search_and_functions")
ORIGINALS = (
    "0001_message_log",
    "0002_sessions",
    "0003_backfill_default_sessions",
    "0004_message_reference_indexes",
    "0005_imported_conversations",
    "0006_session_recent_index",
    "0007_idempotency_keys",
    "0008_message_session_index_is_the_seq_index",
    "0009_session_recent_index_with_scope",
    "0010_mysql_exact_columns_and_default_flag",
    "0011_session_lifecycle",
    "0012_message_search",
    "0013_append_one_function",
    "0014_append_one_narrow_row",
    "0015_append_one_monotonic_updated_at",
    "0016_append_one_returns_an_array",
    "0017_get_and_resolve_functions",
    "0018_drop_pre_release_append_functions",
)
#: The migrations after the squashes, which every database runs after them, in order.
LATER = (
    "0019_context_window",
    "0020_retention",
    "0021_erasures",
    "0022_append_many_function",
    "0023_newest_page_function",
)
ADK = "cortex_adk"
ADK_SQUASH = "0001_squashed_0003_adk_state"
ADK_ORIGINALS = (
    "0001_adk_sessions_and_state",
    "0002_tenant_keyed_shared_state",
    "0003_tenant_unique_session_ids",
)
SCOPE = "org=acme/user=1"


def _loader() -> MigrationLoader:
    return MigrationLoader(None, ignore_no_migrations=True)


def _squash(name: str) -> Any:
    return importlib.import_module(f"cortex_sessions.migrations.{name}")


# -- the squashes as written -------------------------------------------------------------------


def test_the_squashes_replace_every_original_in_order():
    loader = _loader()
    on_disk = sorted(name for app, name in loader.disk_migrations if app == APP)
    assert on_disk == sorted(ORIGINALS + SQUASHES + LATER)
    replaced = [
        name for squash in SQUASHES for _, name in loader.disk_migrations[(APP, squash)].replaces
    ]
    assert replaced == list(ORIGINALS)
    on_disk = sorted(name for app, name in loader.disk_migrations if app == ADK)
    assert on_disk == sorted((*ADK_ORIGINALS, ADK_SQUASH))
    replaced = [name for _, name in loader.disk_migrations[(ADK, ADK_SQUASH)].replaces]
    assert replaced == list(ADK_ORIGINALS)


def _sql(operation: Any) -> list[str]:
    """The forward SQL of the ``RunSQL`` operations in ``operation`` (an ``OnVendors``)."""
    if isinstance(operation, RunSQL):
        return [operation.sql] if isinstance(operation.sql, str) else list(operation.sql)
    if isinstance(operation, OnVendors):
        return [sql for inner in operation.database_operations for sql in _sql(inner)]
    return []


def test_the_squashes_create_each_table_index_and_function_once():
    """No create-then-alter: only models created in their final form, the backfill, and
    vendor-conditional SQL and search schema; each function created once, as the code calls
    it (none of the three pre-release append functions)."""
    loader = _loader()
    operations = [op for name in SQUASHES for op in loader.disk_migrations[(APP, name)].operations]
    kinds = [type(operation).__name__ for operation in operations]
    assert set(kinds) == {"CreateModel", "RunPython", "OnVendors", "MessageSearchSchema"}
    models = [op.name for op in operations if type(op).__name__ == "CreateModel"]
    assert sorted(models) == ["IdempotencyKey", "ImportedConversation", "Message", "Session"]
    statements = [sql for operation in operations for sql in _sql(operation)]
    functions = re.findall(r"CREATE OR REPLACE FUNCTION (\w+)\(", "\n".join(statements))
    # The versions of 1.0.0, which 0019_context_window replaces.
    assert sorted(functions) == sorted(
        ["cortex_sessions_append_one_v4", "cortex_sessions_get_v1", "cortex_sessions_resolve_v1"]
    )
    adk = loader.disk_migrations[(ADK, ADK_SQUASH)].operations
    assert [(type(op).__name__, op.name) for op in adk] == [
        ("CreateModel", "AdkAppState"),
        ("CreateModel", "AdkUserState"),
        ("CreateModel", "AdkSession"),
    ]


def test_the_migration_after_the_squash_holds_the_function_sql_the_code_describes():
    """The squash's functions are 1.0.0's; the later migrations replace each under a new name
    (``0019_context_window``, then ``0020_retention``), the newest with the SQL the code
    describes today (docs/design.md §14.1)."""
    squash = _squash(SQUASHES[1])
    # the newest migration that (re)creates the functions
    latest = [m for m in map(_squash, LATER) if hasattr(m, "CREATE_APPEND_ONE")][-1]
    for name in ("APPEND_ONE", "GET", "RESOLVE"):
        code = _pg.function_sql(getattr(_pg, name))
        assert code == (getattr(latest, f"CREATE_{name}"), getattr(latest, f"DROP_{name}"))
        assert getattr(squash, f"DROP_{name}") != code[1]


@pytest.mark.django_db
def test_makemigrations_finds_nothing_to_do():
    out = StringIO()
    call_command("makemigrations", "--check", "--dry-run", stdout=out)  # exits 1 on a change
    assert "No changes detected" in out.getvalue()


# -- a new database ----------------------------------------------------------------------------


def _schema() -> dict[str, Any]:
    """The app's schema as the database describes it: per table its columns (in order) and
    its constraints and indexes; on PostgreSQL also the definitions of the app's functions,
    triggers and indexes, and the session table's storage settings and statistics targets."""
    schema: dict[str, Any] = {}
    introspection = connection.introspection
    with connection.cursor() as cursor:
        tables = sorted(
            name
            for name in introspection.table_names(cursor)
            if name.startswith((f"{APP}_", f"{ADK}_"))
        )
        for table in tables:
            columns = [
                tuple(column) for column in introspection.get_table_description(cursor, table)
            ]
            schema[table] = (columns, introspection.get_constraints(cursor, table))
        if connection.vendor == "postgresql":
            queries = {
                "functions": "SELECT p.proname, pg_get_functiondef(p.oid) FROM pg_proc p"
                " JOIN pg_namespace n ON n.oid = p.pronamespace"
                " WHERE n.nspname = current_schema() AND p.proname LIKE 'cortex%%'",
                "triggers": "SELECT tgrelid::regclass::text, tgname, pg_get_triggerdef(oid)"
                " FROM pg_trigger WHERE NOT tgisinternal AND tgrelid::regclass::text LIKE 'cortex%%'",
                "indexes": "SELECT tablename, indexname, indexdef FROM pg_indexes"
                " WHERE schemaname = current_schema() AND tablename LIKE 'cortex%%'",
                "storage": "SELECT relname, reloptions FROM pg_class"
                " WHERE relname LIKE 'cortex%%' AND relkind = 'r'",
                "statistics": "SELECT attrelid::regclass::text, attname, attstattarget"
                " FROM pg_attribute WHERE attrelid::regclass::text LIKE 'cortex%%'"
                " AND attnum > 0 AND NOT attisdropped",
                "generated": "SELECT table_name, column_name, generation_expression"
                " FROM information_schema.columns WHERE table_schema = current_schema()"
                " AND table_name LIKE 'cortex%%' AND is_generated = 'ALWAYS'",
            }
            for key, sql in queries.items():
                cursor.execute(sql)
                schema[key] = sorted(map(tuple, cursor.fetchall()), key=repr)
    return schema


def _migrate_app_to_zero() -> None:
    """``migrate cortex_sessions zero`` (the ADK app, which depends on it, goes first)."""
    MigrationExecutor(connection).migrate([(APP, None)])


@pytest.fixture
def restore():
    """Leave the database at the latest migrations of every app for the other tests."""
    yield
    executor = MigrationExecutor(connection)
    executor.migrate(executor.loader.graph.leaf_nodes())


@pytest.mark.django_db(transaction=True)
def test_a_new_database_through_the_squashes_has_the_schema_of_the_originals(restore):
    _migrate_app_to_zero()
    executor = MigrationExecutor(connection)
    targets = executor.loader.graph.leaf_nodes(APP) + executor.loader.graph.leaf_nodes(ADK)
    plan = executor.migration_plan(targets)
    assert [(migration.name, backwards) for migration, backwards in plan] == [
        (name, False) for name in (*SQUASHES, *LATER, ADK_SQUASH)
    ]
    executor.migrate(targets)
    squashed = _schema()
    assert set(squashed) >= {f"{APP}_session", f"{APP}_message", f"{ADK}_adksession"}
    if connection.vendor == "postgresql":
        functions = {_pg.APPEND_ONE, _pg.APPEND_MANY, _pg.GET, _pg.RESOLVE, _pg_page.NEWEST}
        assert {name for name, _ in squashed["functions"]} == functions

    _migrate_app_to_zero()
    executor = MigrationExecutor(connection)
    originals_only(executor.loader)
    targets = executor.loader.graph.leaf_nodes(APP) + executor.loader.graph.leaf_nodes(ADK)
    plan = executor.migration_plan(targets)
    assert [(migration.name, backwards) for migration, backwards in plan] == [
        (name, False) for name in (*ORIGINALS, *LATER, *ADK_ORIGINALS)
    ]
    executor.migrate(targets)
    assert _schema() == squashed
    # Every original applied: Django records the squashes as applied too.
    applied = MigrationRecorder(connection).applied_migrations()
    assert all((APP, name) in applied for name in SQUASHES) and (ADK, ADK_SQUASH) in applied


# -- databases migrated by earlier commits -----------------------------------------------------


def _write(apps: Any) -> None:
    """Two sessions with two messages each, through the historical models of ``apps``."""
    HistSession = apps.get_model(APP, "Session")
    HistMessage = apps.get_model(APP, "Message")
    for n in range(2):
        session = HistSession.objects.create(
            agent_id="agent", scope=SCOPE, title=f"thread {n}", is_default=n == 0
        )
        for seq in (1, 2):
            HistMessage.objects.create(
                session=session,
                agent_id="agent",
                scope=SCOPE,
                seq=seq,
                role="user",
                content=[{"type": "text", "text": f"{n}.{seq}"}],
            )
        HistSession.objects.filter(pk=session.pk).update(
            message_count=2, last_seq=2, last_message=f"{n}.2"
        )


def _rows() -> tuple[list[Any], list[Any]]:
    return (
        list(
            Session.objects.order_by("pk").values_list(
                "pk", "agent_id", "scope", "title", "is_default", "message_count", "last_seq"
            )
        ),
        list(Message.objects.order_by("pk").values_list("pk", "session", "seq", "content")),
    )


@pytest.mark.parametrize(
    ("at", "rest"),
    [
        # Inside the first squash's range: its remaining original, then the second squash,
        # none of whose originals ran.
        ("0010_mysql_exact_columns_and_default_flag", ["0011_session_lifecycle", SQUASHES[1]]),
        # Inside the second squash's range: the remaining originals.
        ("0014_append_one_narrow_row", list(ORIGINALS[14:])),
        # Migrated by the commit before the squash: the cleanup only.
        ("0017_get_and_resolve_functions", ["0018_drop_pre_release_append_functions"]),
    ],
)
@pytest.mark.django_db(transaction=True)
def test_a_database_at_an_original_finishes_with_the_originals_and_keeps_its_rows(
    migrator,  # noqa: F811
    at,
    rest,
):
    _write(migrator.migrate(at))
    # A database an earlier commit migrated has no record of the squashes (going back from
    # them, Django leaves theirs).
    MigrationRecorder(connection).migration_qs.filter(app=APP, name__in=SQUASHES).delete()
    executor = MigrationExecutor(connection)
    plan = executor.migration_plan(executor.loader.graph.leaf_nodes(APP))
    assert [(migration.name, backwards) for migration, backwards in plan] == [
        (name, False) for name in (*rest, *LATER)
    ]

    call_command("migrate", verbosity=0)  # what the host runs on upgrading

    sessions, messages = _rows()
    assert [row[3:] for row in sessions] == [("thread 0", True, 2, 2), ("thread 1", False, 2, 2)]
    assert [row[2:] for row in messages] == [
        (seq, [{"type": "text", "text": f"{n}.{seq}"}]) for n in range(2) for seq in (1, 2)
    ]
    applied = MigrationRecorder(connection).applied_migrations()
    assert all((APP, name) in applied for name in ORIGINALS + SQUASHES)
    if connection.vendor == "postgresql":
        assert _pre_release_functions() == [False, False, False]
    # This code serves the database: on PostgreSQL through the functions of the squash range.
    first = sessions[0][0]
    result = services.append_messages(
        scope=SCOPE, session_id=first, messages=[{"role": "user", "content": "after"}]
    )
    assert [m.seq for m in result.messages] == [3]
    assert services.resolve_session(scope=SCOPE, agent_id="agent")[0].pk == first


def _pre_release_functions() -> list[bool]:
    """Whether each of the append functions of 0013 to 0015 exists (PostgreSQL)."""
    found = []
    with connection.cursor() as cursor:
        for name in ORIGINALS[12:15]:
            drop = importlib.import_module(f"cortex_sessions.migrations.{name}").DROP
            cursor.execute(
                "SELECT to_regprocedure(%s) IS NOT NULL",
                [drop.removeprefix("DROP FUNCTION IF EXISTS ")],
            )
            found.append(cursor.fetchone()[0])
    return found


@pytest.mark.django_db(transaction=True)
def test_back_from_the_squashes_to_an_original_and_forward_again_keeps_the_rows(
    migrator,  # noqa: F811
):
    """From the squashed state back to ``0017`` (Django plans with the originals: ``0018``
    backward creates the pre-release append functions again on PostgreSQL) and forward."""
    session = services.create_session(scope=SCOPE, agent_id="agent", title="kept")
    services.append_messages(
        scope=SCOPE,
        session_id=session.pk,
        messages=[{"role": "user", "content": "one"}, {"role": "assistant", "content": "two"}],
    )
    before = _rows()
    postgres = connection.vendor == "postgresql"
    if postgres:
        assert _pre_release_functions() == [False, False, False]

    migrator.migrate("0017_get_and_resolve_functions")
    assert _rows() == before
    if postgres:
        assert _pre_release_functions() == [True, True, True]

    migrator.migrate(migrator.latest)
    assert _rows() == before
    if postgres:
        assert _pre_release_functions() == [False, False, False]
    result = services.append_messages(
        scope=SCOPE, session_id=session.pk, messages=[{"role": "user", "content": "three"}]
    )
    assert [m.seq for m in result.messages] == [3]
    assert MigrationExecutor(connection).loader.graph.leaf_nodes(APP) == [(APP, LATER[-1])]
