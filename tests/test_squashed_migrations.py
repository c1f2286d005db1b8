"""The squashed migrations (docs/design.md §4): ``0001_squashed_0011_sessions`` and
``0012_squashed_0018_search_and_functions`` replace the pre-release originals,
``0019_squashed_0023_context_retention_erasure_and_functions`` those after 1.0.0, and the ADK
app's ``0001_squashed_0003_adk_state`` its three.

- A new database migrated through the squashes has the schema of one migrated through the
  originals: tables, columns, indexes, constraints and, on PostgreSQL, the functions' and
  triggers' definitions, the indexes' SQL and the session table's storage settings.
- A database at an original finishes with the originals (and the squash that none of its
  migrations ran), keeping its rows.
- Going back from the squashes into the originals and forward again keeps the rows.
- The squashes create each table, index and function once (a new database on PostgreSQL runs
  one ``CREATE FUNCTION`` per function), and ``makemigrations`` finds nothing to do.
- A database at 1.0.0 (``0018``) migrates through the third squash to the schema the originals
  give, with its rows and their token counts, and back to 1.0.0's schema.
"""

from __future__ import annotations

import importlib
import re
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
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

SQUASHES = (
    "0001_squashed_0011_sessions",
    "0012_squashed_0018_search_and_functions",
    "0019_squashed_0023_context_retention_erasure_and_functions",
)
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
    "0019_context_window",
    "0020_retention",
    "0021_erasures",
    "0022_append_many_function",
    "0023_newest_page_function",
)
#: The migrations after the last squash (a new database runs them after it).
AFTER = ("0024_append_many_jsonb",)
#: 1.0.0's last migration: the originals of the first two squashes, none of the third's.
RELEASED = ORIGINALS.index("0018_drop_pre_release_append_functions") + 1
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
    assert on_disk == sorted(ORIGINALS + SQUASHES + AFTER)
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


#: The functions of 1.0.0 (``0012_squashed_0018_search_and_functions``), which the third squash
#: drops; and those the code calls, which it creates.
RELEASED_FUNCTIONS = (
    "cortex_sessions_append_one_v4",
    "cortex_sessions_get_v1",
    "cortex_sessions_resolve_v1",
)
#: (Each name is the one its SQL creates, e.g. ``cortex_sessions_append_one_v6``.) The
#: multi-message append the third squash creates is ``0022``'s ``_v1``; the code calls
#: ``0024``'s ``_v2`` (:data:`APPEND_MANY_V1`).
APPEND_MANY_V1 = "cortex_sessions_append_many_v1"
FUNCTIONS = (_pg.APPEND_ONE, _pg.GET, _pg.RESOLVE, APPEND_MANY_V1, _pg_page.NEWEST)
#: The functions :data:`AFTER` creates, and those a migrated database ends with.
AFTER_FUNCTIONS = (_pg.APPEND_MANY,)
MIGRATED_FUNCTIONS = (*FUNCTIONS, *AFTER_FUNCTIONS)


def _reverse_sql(operation: Any) -> list[str]:
    """The backward SQL of the ``RunSQL`` operations in ``operation`` (an ``OnVendors``)."""
    if isinstance(operation, RunSQL):
        sql = operation.reverse_sql
        return [sql] if isinstance(sql, str) else list(sql)
    if isinstance(operation, OnVendors):
        return [sql for inner in operation.database_operations for sql in _reverse_sql(inner)]
    return []


def _created(statements: list[str]) -> Counter[str]:
    """How many times ``statements`` create each function, by name."""
    return Counter(re.findall(r"CREATE (?:OR REPLACE )?FUNCTION (\w+)\(", "\n".join(statements)))


def _dropped(statements: list[str]) -> Counter[str]:
    return Counter(re.findall(r"DROP FUNCTION (?:IF EXISTS )?(\w+)\(", "\n".join(statements)))


def test_the_squashes_create_each_table_index_and_function_once():
    """No create-then-alter: only models created in their final form, the backfill, and
    vendor-conditional SQL and search schema in the first two; in the third the columns and
    indexes it adds to 1.0.0's tables (each once; the indexes it removes are 1.0.0's, built
    again ending with ``expires_at``), the erasure table and the token-count data step. Each
    function is created once, as the code calls it (none of the pre-release append functions,
    none of ``0019``'s versions), and the third squash drops 1.0.0's, only them."""
    loader = _loader()
    first = [op for name in SQUASHES[:2] for op in loader.disk_migrations[(APP, name)].operations]
    kinds = [type(operation).__name__ for operation in first]
    assert set(kinds) == {"CreateModel", "RunPython", "OnVendors", "MessageSearchSchema"}
    models = [op.name for op in first if type(op).__name__ == "CreateModel"]
    assert sorted(models) == ["IdempotencyKey", "ImportedConversation", "Message", "Session"]
    third = loader.disk_migrations[(APP, SQUASHES[2])].operations
    kinds = [type(operation).__name__ for operation in third]
    assert set(kinds) == {
        "AddField", "RemoveIndex", "AddIndex", "CreateModel", "OnVendors", "RunPython"
    }  # fmt: skip
    fields = [(op.model_name, op.name) for op in third if type(op).__name__ == "AddField"]
    assert len(fields) == len(set(fields)) == 9
    added = [op.index.name for op in third if type(op).__name__ == "AddIndex"]
    removed = [op.name for op in third if type(op).__name__ == "RemoveIndex"]
    assert len(added) == len(set(added)) and set(removed) < set(added)
    released = loader.project_state((APP, SQUASHES[1])).models[APP, "session"].options["indexes"]
    assert set(removed) <= {index.name for index in released}
    assert [op.name for op in third if type(op).__name__ == "CreateModel"] == ["Erasure"]
    assert kinds[-1] == "RunPython"  # the data step, after every change of the schema

    statements = [sql for name in SQUASHES for op in _operations(name) for sql in _sql(op)]
    assert _created(statements) == Counter((*RELEASED_FUNCTIONS, *FUNCTIONS))
    assert _dropped(statements) == Counter(RELEASED_FUNCTIONS)
    # Backward the third squash creates 1.0.0's again and drops its own.
    backward = [sql for op in _operations(SQUASHES[2]) for sql in _reverse_sql(op)]
    assert _created(backward) == Counter(RELEASED_FUNCTIONS)
    assert _dropped(backward) == Counter(FUNCTIONS)
    adk = loader.disk_migrations[(ADK, ADK_SQUASH)].operations
    assert [(type(op).__name__, op.name) for op in adk] == [
        ("CreateModel", "AdkAppState"),
        ("CreateModel", "AdkUserState"),
        ("CreateModel", "AdkSession"),
    ]


def _operations(name: str) -> list[Any]:
    return _loader().disk_migrations[(APP, name)].operations


def test_the_squashes_hold_the_function_sql_the_code_describes():
    """The second squash's functions are 1.0.0's; the third holds each function the code calls
    with the SQL the code describes today, under a name of its own (docs/design.md §14.1), but
    the multi-message append, which is ``0022``'s (``0024`` adds the one the code calls), and
    drops 1.0.0's with the second squash's SQL (backward: creates them with it)."""
    released, squash = _squash(SQUASHES[1]), _squash(SQUASHES[2])
    constants = {
        _pg.APPEND_ONE: "APPEND_ONE",
        _pg.GET: "GET",
        _pg.RESOLVE: "RESOLVE",
        APPEND_MANY_V1: "APPEND_MANY",
        _pg_page.NEWEST: "NEWEST",
    }
    assert set(constants) == set(FUNCTIONS)
    v1 = importlib.import_module("cortex_sessions.migrations.0022_append_many_function")
    for function, name in constants.items():
        if function == APPEND_MANY_V1:
            code = (v1.CREATE_APPEND_MANY, v1.DROP_APPEND_MANY)
        else:
            code = _pg.function_sql(function)
        assert code == (getattr(squash, f"CREATE_{name}"), getattr(squash, f"DROP_{name}"))
        assert code in squash.FUNCTIONS
        if hasattr(released, f"DROP_{name}"):
            assert getattr(released, f"DROP_{name}") != code[1]
    assert len(squash.FUNCTIONS) == len(FUNCTIONS)
    drop = squash._released()
    assert drop.sql == [released.DROP_APPEND_ONE, released.DROP_GET, released.DROP_RESOLVE]
    assert drop.reverse_sql == [
        released.CREATE_APPEND_ONE,
        released.CREATE_GET,
        released.CREATE_RESOLVE,
    ]


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


@contextmanager
def _recorded() -> Iterator[list[str]]:
    """The SQL statements the connection runs meanwhile (``connection.execute_wrapper``)."""
    statements: list[str] = []

    def record(execute: Any, sql: Any, params: Any, many: bool, context: Any) -> Any:
        statements.append(str(sql))
        return execute(sql, params, many, context)

    with connection.execute_wrapper(record):
        yield statements


def _function_names() -> list[str]:
    """The app's functions on this PostgreSQL database, by name."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT p.proname FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace"
            " WHERE n.nspname = current_schema() AND p.proname LIKE 'cortex_sessions%%'"
        )
        return sorted(name for (name,) in cursor.fetchall())


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
        (name, False) for name in (*SQUASHES, *AFTER, ADK_SQUASH)
    ]
    with _recorded() as statements:
        executor.migrate(targets)
    squashed = _schema()
    assert set(squashed) >= {f"{APP}_session", f"{APP}_message", f"{ADK}_adksession"}
    assert f"{APP}_erasure" in squashed
    if connection.vendor == "postgresql":
        # Each function created once: the third squash's five and the later migrations', and
        # 1.0.0's three, which the third squash drops.
        assert _created(statements) == Counter((*RELEASED_FUNCTIONS, *MIGRATED_FUNCTIONS))
        assert _dropped(statements) == Counter(RELEASED_FUNCTIONS)
        assert {name for name, _ in squashed["functions"]} == set(MIGRATED_FUNCTIONS)
        assert _function_names() == sorted(MIGRATED_FUNCTIONS)
    else:
        assert not _created(statements) and not _dropped(statements)

    _migrate_app_to_zero()
    executor = MigrationExecutor(connection)
    originals_only(executor.loader)
    targets = executor.loader.graph.leaf_nodes(APP) + executor.loader.graph.leaf_nodes(ADK)
    plan = executor.migration_plan(targets)
    assert [(migration.name, backwards) for migration, backwards in plan] == [
        (name, False) for name in (*ORIGINALS, *AFTER, *ADK_ORIGINALS)
    ]
    with _recorded() as statements:
        executor.migrate(targets)
    assert _schema() == squashed
    if connection.vendor == "postgresql":
        # What the squashes spare a new database: 15 functions created and 9 dropped through
        # the originals, against 9 and 3 through the squashes (AFTER's one included in each).
        created, dropped = _created(statements), _dropped(statements)
        assert (sum(created.values()), sum(dropped.values())) == (15, 9)
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
        (
            "0010_mysql_exact_columns_and_default_flag",
            ["0011_session_lifecycle", *SQUASHES[1:], *AFTER],
        ),
        # Inside the second squash's range: its remaining originals, then the third squash.
        ("0014_append_one_narrow_row", [*ORIGINALS[14:RELEASED], SQUASHES[2], *AFTER]),
        # Migrated by the commit before the second squash: the cleanup, then the third.
        (
            "0017_get_and_resolve_functions",
            ["0018_drop_pre_release_append_functions", SQUASHES[2], *AFTER],
        ),
        # At 1.0.0: the third squash.
        ("0018_drop_pre_release_append_functions", [SQUASHES[2], *AFTER]),
        # Inside the third squash's range (migrated by a commit after 1.0.0): the remaining
        # originals.
        ("0020_retention", [*ORIGINALS[RELEASED + 2 :], *AFTER]),
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
        (name, False) for name in rest
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
        assert _function_names() == sorted(MIGRATED_FUNCTIONS)
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


def _at_release(mover: Any) -> Any:
    """Bring the database to 1.0.0's last migration as 1.0.0 left it (every original to
    ``0018`` and the first two squashes recorded, nothing of the third); return its apps."""
    apps = mover.migrate(ORIGINALS[RELEASED - 1])
    recorder = MigrationRecorder(connection)
    recorder.migration_qs.filter(app=APP, name=SQUASHES[2]).delete()
    applied = {name for app, name in recorder.applied_migrations() if app == APP}
    assert applied == set(ORIGINALS[:RELEASED]) | set(SQUASHES[:2])
    return apps


def _token_counts() -> tuple[list[int], list[int]]:
    """Each message's ``token_count`` and each session's ``context_tokens``, by id."""
    return (
        list(Message.objects.order_by("pk").values_list("token_count", flat=True)),
        list(Session.objects.order_by("pk").values_list("context_tokens", flat=True)),
    )


@pytest.mark.django_db(transaction=True)
def test_a_database_at_1_0_0_migrates_through_the_third_squash_as_through_the_originals(
    migrator,  # noqa: F811
):
    """From 1.0.0 (``0018``) Django plans the third squash alone: on PostgreSQL it drops 1.0.0's
    three functions and creates each of its five once (then ``0024`` the append the code calls); its data step counts
    the tokens of the rows 1.0.0 wrote. The schema (columns, indexes, constraints, function
    definitions) and the rows are those the originals ``0019`` to ``0023`` give the same
    database. Backward, the squash leaves 1.0.0's schema, functions included."""
    _write(_at_release(migrator))
    released = _schema()
    postgres = connection.vendor == "postgresql"
    if postgres:
        assert _function_names() == sorted(RELEASED_FUNCTIONS)
    executor = MigrationExecutor(connection)
    plan = executor.migration_plan(executor.loader.graph.leaf_nodes(APP))
    assert [(migration.name, backwards) for migration, backwards in plan] == [
        (name, False) for name in (SQUASHES[2], *AFTER)
    ]
    with _recorded() as statements:
        executor.migrate(executor.loader.graph.leaf_nodes(APP))
    squashed, rows, counts = _schema(), _rows(), _token_counts()
    assert f"{APP}_erasure" in squashed
    assert all(counts[0]) and counts[1] == [sum(counts[0][:2]), sum(counts[0][2:])]
    if postgres:
        assert _created(statements) == Counter(MIGRATED_FUNCTIONS)
        assert _dropped(statements) == Counter(RELEASED_FUNCTIONS)
        assert _function_names() == sorted(MIGRATED_FUNCTIONS)

    # Backward: Django plans the squash's backward (1.0.0's squashes stay).
    executor = MigrationExecutor(connection)
    plan = executor.migration_plan([(APP, SQUASHES[1])])
    assert [(migration.name, backwards) for migration, backwards in plan][-1] == (
        SQUASHES[2],
        True,
    )
    executor.migrate([(APP, SQUASHES[1])])
    assert _schema() == released
    if postgres:
        assert _function_names() == sorted(RELEASED_FUNCTIONS)

    # The same database through the originals.
    MigrationRecorder(connection).migration_qs.filter(app=APP, name=SQUASHES[2]).delete()
    executor = MigrationExecutor(connection)
    originals_only(executor.loader)
    plan = executor.migration_plan(executor.loader.graph.leaf_nodes(APP))
    assert [(migration.name, backwards) for migration, backwards in plan] == [
        (name, False) for name in (*ORIGINALS[RELEASED:], *AFTER)
    ]
    executor.migrate(executor.loader.graph.leaf_nodes(APP))
    assert _schema() == squashed
    assert (_rows(), _token_counts()) == (rows, counts)


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
    assert MigrationExecutor(connection).loader.graph.leaf_nodes(APP) == [(APP, AFTER[-1])]
