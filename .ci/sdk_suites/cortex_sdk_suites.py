"""pytest plugin: the SDKs' own session tests, unmodified, against the adapters
(docs/design.md §19.4; run by ``.ci/sdk_suites/run``).

- The OpenAI Agents SDK's session tests (``tests/memory/test_session.py`` and
  ``test_session_limit.py`` of its sdist) construct ``SQLiteSession(session_id, db_path)``;
  here each such name a test module holds stands for :class:`SuiteSession`, a
  :class:`~cortex_sessions.integrations.openai_agents.CortexSession` following the default
  session of agent ``session_id`` at a scope of its own per test and database file (so two
  objects with the same id and file share their items, as two ``SQLiteSession`` do).
- ADK's session-service tests (``tests/unittests/sessions/test_session_service.py``) build their
  service with ``get_session_service(service_type, …)``; here it returns a
  :class:`~cortex_sessions.integrations.adk.CortexSessionService` bound to a tenant of its own per
  test, with ``CORTEX_SESSIONS_ADK_SCOPE`` mapping ``(app, user)`` beneath that tenant, so no test
  sees another's sessions, app state or user state. Of the fixture's four store types one is run
  (the others would run the same service again).

The tests that cannot apply are skipped with their reason (:data:`NOT_APPLICABLE`, also listed in
docs/sdk-suites.md); every other test of those files runs and must pass.
"""

from __future__ import annotations

import hashlib
import itertools
import os
from typing import Any

import pytest

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "cortex_sdk_settings")

#: Tests of the SDKs' suites that cannot apply to the adapters: test name → reason.
NOT_APPLICABLE: dict[str, str] = {
    # -- OpenAI Agents SDK, tests/memory/test_session.py
    "test_await_mutation_cancellation_hides_later_failure_without_loop_error": (
        "tests SQLiteSession's private _await_mutation helper"
    ),
    "test_sqlite_session_close_closes_worker_thread_connections": (
        "SQLiteSession's per-thread sqlite3 connections; Django owns the adapter's connections"
    ),
    "test_sqlite_session_reaps_connections_from_exited_worker_threads": (
        "SQLiteSession's per-thread sqlite3 connections; Django owns the adapter's connections"
    ),
    "test_sqlite_session_closes_retired_connections_before_the_next_allocation": (
        "SQLiteSession's per-thread sqlite3 connections; Django owns the adapter's connections"
    ),
    "test_sqlite_session_keeps_connections_of_live_worker_threads": (
        "SQLiteSession's per-thread sqlite3 connections; Django owns the adapter's connections"
    ),
    "test_sqlite_session_closed_rejects_empty_add_items": (
        "SQLiteSession.close() closes its database; the adapter has none of its own to close"
    ),
    "test_sqlite_session_pop_item_skips_corrupt_most_recent": (
        "writes undecodable rows into SQLiteSession's own table with sqlite3; the adapter's "
        "equivalent (messages without an item) is tests/runtimes/test_openai_agents.py's"
    ),
    "test_sqlite_session_pop_item_returns_none_after_dropping_only_corrupt_rows": (
        "writes undecodable rows into SQLiteSession's own table with sqlite3"
    ),
    "test_sqlite_session_get_items_limit_skips_corrupt_newest_rows": (
        "writes undecodable rows into SQLiteSession's own table with sqlite3"
    ),
    "test_sqlite_session_get_items_session_settings_limit_skips_corrupt_rows": (
        "writes undecodable rows into SQLiteSession's own table with sqlite3"
    ),
    "test_sqlite_session_file_lock_is_shared_across_instances": (
        "SQLiteSession's lock per database file; the adapter locks the session row"
    ),
    "test_sqlite_session_failed_add_items_releases_write_lock": (
        "SQLiteSession's lock per database file; the adapter locks the session row"
    ),
    "test_sqlite_session_failed_clear_session_rolls_back": (
        "drops SQLiteSession's own tables with sqlite3 to make the write fail"
    ),
    "test_sqlite_session_failed_pop_item_releases_write_lock": (
        "drops SQLiteSession's own tables with sqlite3 to make the write fail"
    ),
    "test_sqlite_session_rollback_failure_evicts_connection": (
        "SQLiteSession's private registry of sqlite3 connections (_connections_lock)"
    ),
    "test_sqlite_session_close_retries_quarantined_connection": (
        "SQLiteSession's private registry of sqlite3 connections (_connections_lock)"
    ),
    "test_sqlite_session_post_commit_cancellation_propagates_after_known_outcome": (
        "pauses SQLiteSession's sqlite3 commit through its private connection registry; the "
        "adapter's equivalent (a cancelled write settles, then raises CancelledError) is "
        "tests/runtimes/test_openai_agents.py's"
    ),
    # -- ADK, tests/unittests/sessions/test_session_service.py: tests of other stores
    "test_database_session_service_": "tests DatabaseSessionService's engine and SQL sessions",
    "test_sqlite_session_service_": "tests SqliteSessionService's URL handling",
    "test_append_event_raises_if_app_state_row_missing": (
        "deletes DatabaseSessionService's app_states row with SQLAlchemy"
    ),
    "test_append_event_raises_if_user_state_row_missing": (
        "deletes DatabaseSessionService's user_states row with SQLAlchemy"
    ),
    "test_append_event_allows_timestamp_drift_for_current_session": (
        "constructs DatabaseSessionService itself"
    ),
    "test_append_event_allows_markerless_current_session": (
        "constructs DatabaseSessionService itself"
    ),
    "test_append_event_when_session_is_same_ref_as_storage_session": (
        "reads InMemorySessionService's in-process dict"
    ),
    "test_create_session_calls_rollback_on_commit_failure": (
        "replaces DatabaseSessionService's SQLAlchemy session factory"
    ),
    "test_append_event_calls_rollback_on_commit_failure": (
        "replaces DatabaseSessionService's SQLAlchemy session factory"
    ),
    "test_append_event_reads_storage_revision_before_commit": (
        "replaces DatabaseSessionService's SQLAlchemy session factory and schema methods"
    ),
    "test_create_session_reads_storage_revision_before_commit": (
        "replaces DatabaseSessionService's SQLAlchemy session factory and schema methods"
    ),
    "test_delete_session_calls_rollback_on_commit_failure": (
        "replaces DatabaseSessionService's SQLAlchemy session factory"
    ),
    "test_service_recovers_after_multiple_failures": (
        "replaces DatabaseSessionService's SQLAlchemy session factory"
    ),
    "test_concurrent_prepare_tables_no_race_condition": (
        "DatabaseSessionService's lazy table creation; the adapter's tables are migrations"
    ),
    "test_prepare_tables_": (
        "DatabaseSessionService's lazy table creation; the adapter's tables are migrations"
    ),
    "test_public_prepare_tables_eager_initialization": (
        "DatabaseSessionService's lazy table creation; the adapter's tables are migrations"
    ),
    "test_get_or_create_state_": "tests DatabaseSessionService's private _get_or_create_state",
    "test_create_session_sequential_same_app_name": "constructs DatabaseSessionService itself",
    "test_append_event_locks_only_scopes_with_deltas": (
        "spies on DatabaseSessionService's private _select_required_state"
    ),
    "test_vertex_ai_session_service_": "tests VertexAiSessionService",
}

#: The one ``session_service`` fixture parameter of ADK's suite that is run.
ADK_PARAMETER = "SessionServiceType.DATABASE"

_runs = itertools.count(1)


def not_applicable(name: str) -> str | None:
    """The reason test ``name`` (without its parameters) cannot apply, or ``None``."""
    for listed, reason in NOT_APPLICABLE.items():
        if name == listed or (listed.endswith("_") and name.startswith(listed)):
            return reason
    return None


def pytest_configure(config: pytest.Config) -> None:
    """Set Django up and create the test database (``test_<name>``, or SQLite in memory)."""
    import django
    from django.test.utils import setup_databases, setup_test_environment

    django.setup()
    setup_test_environment()
    config.stash[_DATABASES] = setup_databases(verbosity=0, interactive=False)


def pytest_unconfigure(config: pytest.Config) -> None:
    """Drop the test database."""
    import asyncio

    from asgiref.sync import sync_to_async
    from django.db import connections
    from django.test.utils import teardown_databases, teardown_test_environment

    # The adapters ran their queries on asgiref's one thread for thread-sensitive calls: close
    # its connections there, or PostgreSQL refuses to drop a database still in use.
    asyncio.run(sync_to_async(connections.close_all, thread_sensitive=True)())
    if _DATABASES in config.stash:
        teardown_databases(config.stash[_DATABASES], verbosity=0)
        teardown_test_environment()


_DATABASES = pytest.StashKey[Any]()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Skip the tests that cannot apply, with their reason, and all but one of the ADK
    fixture's store types."""
    for item in items:
        name = getattr(item, "originalname", item.name)
        reason = not_applicable(name)
        if reason is not None:
            item.add_marker(pytest.mark.skip(reason=f"cannot apply: {reason}"))
            continue
        params = getattr(getattr(item, "callspec", None), "params", {})
        if "session_service" in params and str(params["session_service"]) != ADK_PARAMETER:
            item.add_marker(pytest.mark.skip(reason="the same service as " + ADK_PARAMETER))


@pytest.fixture(autouse=True)
def _cortex_stores(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Any:
    """Put the adapters where the test module builds the SDK's stores (see the module docs)."""
    from django.test import override_settings

    run = next(_runs)
    module = request.module
    if hasattr(module, "SQLiteSession"):
        monkeypatch.setattr(module, "SQLiteSession", _suite_session_class(run))
    if not hasattr(module, "get_session_service"):
        yield
        return
    from cortex_sessions.integrations.adk import CortexSessionService
    from cortex_sessions.scope import Scope

    def scope(app_name: str, user_id: str) -> Scope:
        return Scope.from_levels([("run", str(run)), ("app", app_name), ("user", user_id)])

    def get_session_service(*args: Any, **kwargs: Any) -> CortexSessionService:
        return CortexSessionService(within=f"run={run}")

    monkeypatch.setattr(module, "get_session_service", get_session_service)
    with override_settings(CORTEX_SESSIONS_ADK_SCOPE=scope):
        yield


def _suite_session_class(run: int) -> type:
    from cortex_sessions.integrations.openai_agents import CortexSession

    class SuiteSession(CortexSession):
        """``SQLiteSession(session_id, db_path=":memory:", …, session_settings=None)`` as a
        ``CortexSession``: the default session of agent ``session_id`` at
        ``run=<test>/db=<file>`` (an in-memory database is one object's own)."""

        def __init__(
            self,
            session_id: str,
            db_path: Any = ":memory:",
            sessions_table: str = "agent_sessions",
            messages_table: str = "agent_messages",
            session_settings: Any = None,
        ) -> None:
            database = str(db_path)
            key = (
                f"memory-{id(self)}"
                if database == ":memory:"
                else hashlib.sha256(database.encode()).hexdigest()[:16]
            )
            super().__init__(
                scope=f"run={run}/db={key}",
                agent_id=session_id,
                session_settings=session_settings,
            )

        def close(self) -> None:
            """``SQLiteSession.close()``: the adapter holds no connection of its own."""

    return SuiteSession
