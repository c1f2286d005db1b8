"""``CortexCheckpointSaver.put`` and ``put_writes`` as few statements as LangGraph's own
PostgreSQL saver sends (docs/design.md §14, §19.1), with every guarantee of the ORM path: the
mirror's exact counters and signal (§5), only new messages mirrored, archived and missing
sessions refused with nothing written, LangGraph's replay rules for pending writes.
"""

from __future__ import annotations

import importlib
import json
import uuid

import pytest

pytest.importorskip("langgraph")

from django.apps import apps as django_apps
from django.db import connection
from django.db.models.signals import post_migrate
from django.test import override_settings
from django.test.utils import CaptureQueriesContext
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.checkpoint.base import ERROR, empty_checkpoint

from cortex_sessions import services, signals
from cortex_sessions.exceptions import MessageTooLarge, SessionArchived, SessionNotFound
from cortex_sessions.integrations.langgraph import (
    CortexCheckpointSaver,
    _pg_reads,
    _pg_writes,
    mirror,
)
from cortex_sessions.integrations.langgraph.models import (
    Checkpoint,
    CheckpointBlob,
    CheckpointWrite,
)
from cortex_sessions.models import Message, Session
from cortex_sessions.services import _pg

pytestmark = pytest.mark.django_db

ACME = "org=acme"
AGENT = "graph-bot"


class _Thread:
    """A thread advanced one checkpoint at a time, as a graph's loop advances it."""

    def __init__(self, saver: CortexCheckpointSaver, thread_id: uuid.UUID | None = None):
        self.saver = saver
        self.thread_id = thread_id or uuid.uuid4()
        self.config = {"configurable": {"thread_id": str(self.thread_id), "checkpoint_ns": ""}}
        self.versions: dict[str, str] = {}

    def put(self, messages, **values):
        checkpoint = empty_checkpoint()
        checkpoint["channel_values"] = {"messages": list(messages), **values}
        new_versions = {}
        for channel in checkpoint["channel_values"]:
            version = self.saver.get_next_version(self.versions.get(channel), None)
            new_versions[channel] = self.versions[channel] = version
        checkpoint["channel_versions"] = dict(self.versions)
        self.config = self.saver.put(self.config, checkpoint, {"step": 1}, new_versions)
        return self.config["configurable"]["checkpoint_id"]


def _texts(thread_id):
    return [m.text for m in Message.objects.filter(session_id=thread_id).order_by("seq")]


def test_mirrored_messages_move_the_counters_exactly_and_are_signalled(
    django_capture_on_commit_callbacks,
):
    thread = _Thread(CortexCheckpointSaver(scope=ACME, agent_id=AGENT))
    a, b, c = HumanMessage("a", id="a"), AIMessage("b", id="b"), HumanMessage("c", id="c")
    thread.put([a])
    received = []

    def receiver(sender, session, messages, **kwargs):
        received.append(
            (session.message_count, session.last_seq, [(m.pk, m.seq) for m in messages])
        )

    signals.messages_appended.connect(receiver)
    try:
        with django_capture_on_commit_callbacks(execute=True):
            thread.put([a, b, c])
            thread.put([a, b, c], step=2)  # the messages channel is written again, unchanged
    finally:
        signals.messages_appended.disconnect(receiver)
    session = Session.objects.get(pk=thread.thread_id)
    rows = list(Message.objects.filter(session=session).order_by("seq"))
    assert [row.text for row in rows] == ["a", "b", "c"]
    assert (session.message_count, session.last_seq, session.last_message) == (3, 3, "c")
    assert received == [(3, 3, [(rows[1].pk, 2), (rows[2].pk, 3)])]


def test_a_parent_this_process_did_not_store_is_read_back():
    """Another process's checkpoint (or one this process forgot) is read from the database."""
    thread = _Thread(CortexCheckpointSaver(scope=ACME, agent_id=AGENT))
    a, b = HumanMessage("a", id="a"), AIMessage("b", id="b")
    thread.put([a])
    mirror.forget(thread.thread_id)
    thread.put([a, b])
    assert _texts(thread.thread_id) == ["a", "b"]


def test_a_remembered_parent_is_not_read_back(django_capture_on_commit_callbacks):
    """The channel's value at a checkpoint this process committed is remembered (on commit)."""
    thread = _Thread(CortexCheckpointSaver(scope=ACME, agent_id=AGENT))
    a, b = HumanMessage("a", id="a"), AIMessage("b", id="b")
    with django_capture_on_commit_callbacks(execute=True):
        thread.put([a])
    with CaptureQueriesContext(connection) as queries:
        thread.put([a, b])
    reads = [
        q["sql"]
        for q in queries.captured_queries
        if q["sql"].lstrip().upper().startswith("SELECT")
        and (Checkpoint._meta.db_table in q["sql"] or CheckpointBlob._meta.db_table in q["sql"])
    ]
    assert reads == []
    assert _texts(thread.thread_id) == ["a", "b"]


@pytest.mark.skipif(connection.vendor != "postgresql", reason="the PostgreSQL statements")
def test_put_and_put_writes_of_an_existing_thread_are_one_statement_each_on_postgresql(
    django_capture_on_commit_callbacks,
):
    thread = _Thread(CortexCheckpointSaver(scope=ACME, agent_id=AGENT))
    a, b = HumanMessage("a", id="a"), AIMessage("b", id="b")
    with django_capture_on_commit_callbacks(execute=True):
        thread.put([a])
    with CaptureQueriesContext(connection) as queries:
        checkpoint_id = thread.put([a, b])
    assert len(queries.captured_queries) == 1
    assert queries.captured_queries[0]["sql"].startswith(f"SELECT {_pg_writes.PUT}(")
    with CaptureQueriesContext(connection) as queries:
        thread.saver.put_writes(thread.config, [("messages", [b]), ("step", 2)], "task-1")
    assert len(queries.captured_queries) == 1
    assert queries.captured_queries[0]["sql"].startswith(f"SELECT {_pg_writes.WRITES}(")
    assert _texts(thread.thread_id) == ["a", "b"]
    assert Checkpoint.objects.filter(session_id=thread.thread_id).count() == 2
    assert CheckpointWrite.objects.filter(checkpoint_id=checkpoint_id).count() == 2


def test_pending_writes_keep_a_stored_write_of_an_index_and_special_channels_replace():
    thread = _Thread(CortexCheckpointSaver(scope=ACME, agent_id=AGENT))
    thread.put([])
    saver, config = thread.saver, thread.config
    saver.put_writes(config, [("ch", 1)], "task")
    saver.put_writes(config, [("ch", 2)], "task")  # a replay: the stored write stays
    saver.put_writes(config, [(ERROR, "first"), (ERROR, "second")], "task")  # the last
    saver.put_writes(config, [(ERROR, "third")], "other")
    saver.put_writes(config, [(ERROR, "fourth")], "other")  # special channels replace
    writes = saver.get_tuple(config).pending_writes
    assert sorted(writes, key=str) == sorted(
        [("task", "ch", 1), ("task", ERROR, "second"), ("other", ERROR, "fourth")], key=str
    )


def test_an_archived_or_foreign_thread_gets_nothing_written():
    thread = _Thread(CortexCheckpointSaver(scope=ACME, agent_id=AGENT))
    a = HumanMessage("a", id="a")
    thread.put([a])
    services.archive_session(scope=ACME, session_id=thread.thread_id)
    with pytest.raises(SessionArchived):
        thread.put([a, AIMessage("b", id="b")])
    with pytest.raises(SessionArchived):
        thread.saver.put_writes(thread.config, [("ch", 1)], "task")
    other_agent = _Thread(CortexCheckpointSaver(scope=ACME, agent_id="other"), thread.thread_id)
    other_agent.config = thread.config
    with pytest.raises(SessionNotFound):
        other_agent.saver.put_writes(thread.config, [("ch", 1)], "task")
    assert Checkpoint.objects.count() == 1
    assert CheckpointBlob.objects.count() == 1
    assert not CheckpointWrite.objects.exists()
    session = Session.objects.get(pk=thread.thread_id)
    assert (session.message_count, _texts(thread.thread_id)) == (1, ["a"])


def test_a_mirrored_message_the_session_refuses_refuses_the_checkpoint(settings):
    thread = _Thread(CortexCheckpointSaver(scope=ACME, agent_id=AGENT))
    a = HumanMessage("a", id="a")
    thread.put([a])
    settings.CORTEX_SESSIONS = {
        **getattr(settings, "CORTEX_SESSIONS", {}),
        "MAX_MESSAGE_BYTES": 2000,
    }
    with pytest.raises(MessageTooLarge):
        thread.put([a, AIMessage("b" * 5000, id="b")])
    assert Checkpoint.objects.count() == 1
    assert _texts(thread.thread_id) == ["a"]


@pytest.mark.skipif(connection.vendor != "postgresql", reason="the PostgreSQL statements")
def test_prepared_statements_prepare_the_write_statements(settings):
    """``PREPARED_STATEMENTS`` (docs/design.md §14.2) prepares them, as the core's hot paths."""
    settings.CORTEX_SESSIONS = {
        **getattr(settings, "CORTEX_SESSIONS", {}),
        "PREPARED_STATEMENTS": True,
    }
    thread = _Thread(CortexCheckpointSaver(scope=ACME, agent_id=AGENT))
    a = HumanMessage("a", id="a")
    thread.put([a])
    for step in range(2):
        thread.put([a, AIMessage(f"b{step}", id=f"b{step}")])
        thread.saver.put_writes(thread.config, [("step", step)], f"task-{step}")
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT statement FROM pg_prepared_statements WHERE statement LIKE %s",
            [f"SELECT {_pg_writes.WRITES}(%"],
        )
        writes = cursor.fetchall()
        cursor.execute(
            "SELECT statement FROM pg_prepared_statements WHERE statement LIKE %s",
            [f"SELECT {_pg_writes.PUT}(%"],
        )
        puts = cursor.fetchall()
    assert len(writes) == 1 and len(puts) == 1
    assert _texts(thread.thread_id) == ["a", "b0", "b1"]


def _function_exists(drop: str) -> bool:
    signature = drop.removeprefix("DROP FUNCTION IF EXISTS ")
    with connection.cursor() as cursor:
        cursor.execute("SELECT to_regprocedure(%s) IS NOT NULL", [signature])
        return bool(cursor.fetchone()[0])


@pytest.mark.skipif(connection.vendor != "postgresql", reason="the PostgreSQL functions")
def test_the_migrations_create_the_functions_the_code_calls():
    """The migrations' frozen SQL is what the code describes today (the put of ``0005``, the
    writes of ``0003``, the latest read of ``0002``): a change to a statement or to the
    session's columns needs a migration that adds the function under a new name. ``0003``
    drops ``0002``'s writes and ``0005`` ``0003``'s put, and the database has the functions
    the code calls and not those."""
    functions = importlib.import_module(
        "cortex_sessions.integrations.langgraph.migrations.0002_functions"
    )
    packed = importlib.import_module(
        "cortex_sessions.integrations.langgraph.migrations.0003_packed_writes"
    )
    put = importlib.import_module(
        "cortex_sessions.integrations.langgraph.migrations.0005_put_jsonb"
    )
    assert _pg_writes.function_sql(_pg_writes.PUT) == (put.CREATE_PUT, put.DROP_PUT)
    assert put.V2 is packed and "jsonb_array_elements" in put.CREATE_PUT
    assert _pg_writes.function_sql(_pg_writes.WRITES) == (
        packed.CREATE_WRITES,
        packed.DROP_WRITES,
    )
    assert _pg_writes.function_sql(_pg_reads.LATEST) == (
        functions.CREATE_LATEST,
        functions.DROP_LATEST,
    )
    assert packed.V1 is functions
    assert not _function_exists(functions.DROP_PUT)
    assert not _function_exists(functions.DROP_WRITES)
    assert not _function_exists(packed.DROP_PUT)
    for drop in (put.DROP_PUT, packed.DROP_WRITES, functions.DROP_LATEST):
        assert _function_exists(drop)
        # the plan kept per connection: the server re-planned the latest read on every call
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT proconfig FROM pg_proc WHERE oid = to_regprocedure(%s)",
                [drop.removeprefix("DROP FUNCTION IF EXISTS ")],
            )
            assert cursor.fetchone()[0] == ["plan_cache_mode=force_generic_plan"]


@pytest.mark.skipif(connection.vendor != "postgresql", reason="the PostgreSQL functions")
def test_migrations_disabled_the_functions_come_from_post_migrate(
    django_capture_on_commit_callbacks,
):
    """With the app's migrations disabled, ``post_migrate`` creates the functions (DDL is
    transactional: the test's rollback restores them); with them enabled it leaves them to
    the migration."""
    config = django_apps.get_app_config("cortex_langgraph")
    names = (_pg_writes.PUT, _pg_writes.WRITES, _pg_reads.LATEST)
    drops = [_pg_writes.function_sql(name)[1] for name in names]
    with connection.cursor() as cursor:
        for drop in drops:
            cursor.execute(drop)
    with override_settings(MIGRATION_MODULES={}):
        post_migrate.send(sender=config, app_config=config, using="default", verbosity=0)
    assert not any(map(_function_exists, drops))
    with override_settings(MIGRATION_MODULES={"cortex_langgraph": None}):
        post_migrate.send(sender=config, app_config=config, using="default", verbosity=0)
    assert all(map(_function_exists, drops))
    thread = _Thread(CortexCheckpointSaver(scope=ACME, agent_id=AGENT))
    a, b = HumanMessage("a", id="a"), AIMessage("b", id="b")
    with django_capture_on_commit_callbacks(execute=True):
        thread.put([a])
    thread.put([a, b])
    thread.saver.put_writes(thread.config, [("step", 1)], "task")
    assert _texts(thread.thread_id) == ["a", "b"]
    assert Session.objects.get(pk=thread.thread_id).message_count == 2
    assert thread.saver.get_tuple(thread.config).pending_writes == [("task", "step", 1)]


@pytest.mark.skipif(connection.vendor != "postgresql", reason="the PostgreSQL function")
def test_the_function_stores_and_signals_what_the_orm_path_does(
    monkeypatch, django_capture_on_commit_callbacks
):
    """The mirrored rows and the session's counters through :data:`_pg_writes.PUT` (its
    arrays sent in binary, the session read back from text) equal the ORM path's."""
    tricky = 'quote " backslash \\ brace { } comma , NUL-free ünïcode ✓ \n newline'
    usage = {"input_tokens": 7, "output_tokens": 5, "total_tokens": 12}

    def run(thread):
        a = HumanMessage("a", id="a")
        b = AIMessage(tricky, id="b", usage_metadata=usage)
        c = HumanMessage([{"type": "text", "text": "c"}], id="c")
        with django_capture_on_commit_callbacks(execute=True):
            thread.put([a])
            thread.put([a, b, c])
        columns = ("seq", "role", "source", "content", "metadata", "usage", "token_count")
        rows = list(
            Message.objects.filter(session_id=thread.thread_id)
            .order_by("seq")
            .values_list(*columns)
        )
        session = Session.objects.get(pk=thread.thread_id)
        return rows, session

    received = []

    def receiver(sender, session, messages, **kwargs):
        received.append(session)

    signals.messages_appended.connect(receiver)
    try:
        fast_rows, fast = run(_Thread(CortexCheckpointSaver(scope=ACME, agent_id=AGENT)))
        signalled = received[-1]
        monkeypatch.setattr(_pg, "serves", lambda alias: False)
        slow_rows, slow = run(_Thread(CortexCheckpointSaver(scope=ACME, agent_id=AGENT)))
    finally:
        signals.messages_appended.disconnect(receiver)
    assert fast_rows == slow_rows
    assert fast_rows[1][3][0] == {"type": "text", "text": tricky}
    fields = ("message_count", "last_seq", "last_message", "input_tokens", "output_tokens")
    fields += ("cost", "context_tokens", "agent_id", "scope", "archived_at")
    assert [getattr(fast, f) for f in fields] == [getattr(slow, f) for f in fields]
    for field in Session._meta.concrete_fields:  # the session the signal got, as stored
        assert getattr(signalled, field.attname) == getattr(fast, field.attname), field.name


@pytest.mark.skipif(connection.vendor != "postgresql", reason="the PostgreSQL function")
def test_the_put_call_sends_the_mirrored_messages_as_one_json_text(monkeypatch):
    """:data:`_pg_writes.PUT` takes the messages as one JSON text (``_pg_run.messages_json``,
    as the core's multi-message append), not as seven arrays psycopg dumps element by element."""
    sent = []
    execute = _pg_writes.execute

    def spy(connection, sql, params, **kwargs):
        sent.append((sql, list(params)))
        return execute(connection, sql, params, **kwargs)

    monkeypatch.setattr(_pg_writes, "execute", spy)
    thread = _Thread(CortexCheckpointSaver(scope=ACME, agent_id=AGENT))
    a, b = HumanMessage("a", id="a"), AIMessage('b "quoted"', id="b")
    thread.put([a])
    thread.put([a, b])
    sql, params = sent[-1]
    assert sql.startswith(f"SELECT {_pg_writes.PUT}(") and sql.endswith("%s::text)")
    assert not any(isinstance(value, list) and len(value) == 1 for value in params[-7:])
    messages = json.loads(params[-1])
    assert [(m[0], m[1], m[2][0]["text"]) for m in messages] == [
        ("assistant", "host", 'b "quoted"')
    ]
    assert _texts(thread.thread_id) == ["a", 'b "quoted"']


@pytest.mark.skipif(connection.vendor != "postgresql", reason="the PostgreSQL functions")
def test_blobs_and_writes_go_as_one_bytes_and_one_json_text_and_are_stored_exactly(monkeypatch):
    """:data:`_pg_writes.PUT`'s blobs and :data:`_pg_writes.WRITES`'s writes go as the joined
    bytes and one JSON text (``_pg_writes._packed``), not four arrays psycopg dumps element by
    element, and each row gets back exactly its own bytes: several of different lengths, an
    empty one, and a channel without a value (``"empty"``, no bytes)."""
    sent = []
    execute = _pg_writes.execute

    def spy(connection, sql, params, **kwargs):
        sent.append(list(params))
        return execute(connection, sql, params, **kwargs)

    monkeypatch.setattr(_pg_writes, "execute", spy)
    saver = CortexCheckpointSaver(scope=ACME, agent_id=AGENT)
    thread = _Thread(saver)
    thread.put([])
    checkpoint = empty_checkpoint()
    checkpoint["channel_values"] = {"big": "x" * 5000, "small": 1, "blank": b""}
    versions = {name: saver.get_next_version(None, None) for name in ("big", "small", "blank")}
    versions["gone"] = saver.get_next_version(None, None)  # a version without a value
    checkpoint["channel_versions"] = versions
    thread.config = saver.put(thread.config, checkpoint, {"step": 2}, versions)
    saver.put_writes(thread.config, [("a", "y" * 3000), ("b", b""), ("c", 7)], "task")
    assert not any(isinstance(value, list) for params in sent[-2:] for value in params)
    stored = {
        (row.channel, row.type): bytes(row.blob) if row.blob is not None else None
        for row in CheckpointBlob.objects.filter(session_id=thread.thread_id)
    }
    for name in ("big", "small", "blank"):
        kind, data = saver.serde.dumps_typed(checkpoint["channel_values"][name])
        assert stored[(name, kind)] == data
    assert stored[("gone", "empty")] is None
    writes = {
        row.channel: (row.type, bytes(row.blob))
        for row in CheckpointWrite.objects.filter(session_id=thread.thread_id, task_id="task")
    }
    assert writes == {
        channel: saver.serde.dumps_typed(value)
        for channel, value in (("a", "y" * 3000), ("b", b""), ("c", 7))
    }
    latest = saver.get_tuple(thread.config)
    assert latest.checkpoint["channel_values"] == {"big": "x" * 5000, "small": 1, "blank": b""}
    assert sorted(latest.pending_writes) == [
        ("task", "a", "y" * 3000),
        ("task", "b", b""),
        ("task", "c", 7),
    ]


@pytest.mark.skipif(connection.vendor != "postgresql", reason="the PostgreSQL functions")
@pytest.mark.django_db(transaction=True)
def test_a_database_at_0002_moves_to_the_packed_writes_and_back():
    """A database that ran ``0002_functions`` (the ``_v1`` writes, four arrays each) gets the
    ``_v2`` functions from ``0003_packed_writes`` and loses the ``_v1`` ones, those ``0002``
    created while it was changed in place too; backward, the reverse. The saver works on the
    migrated database."""
    from django.db.migrations.executor import MigrationExecutor

    functions = importlib.import_module(
        "cortex_sessions.integrations.langgraph.migrations.0002_functions"
    )
    packed = importlib.import_module(
        "cortex_sessions.integrations.langgraph.migrations.0003_packed_writes"
    )
    # What 0002 created for a while on the development branch, changed in place: the _v1 names
    # with the packed signatures.
    in_place = [
        (create.replace(new, old), drop.replace(new, old))
        for create, drop, new, old in [
            (packed.CREATE_PUT, packed.DROP_PUT, "put_v2", "put_v1"),
            (packed.CREATE_WRITES, packed.DROP_WRITES, "writes_v2", "writes_v1"),
        ]
    ]
    assert [drop for _, drop in in_place] == packed.CHANGED_IN_PLACE
    executor = MigrationExecutor(connection)
    executor.migrate([("cortex_langgraph", "0002_functions")])
    try:
        assert _function_exists(functions.DROP_PUT) and _function_exists(functions.DROP_WRITES)
        assert not _function_exists(packed.DROP_PUT)
        assert not _function_exists(packed.DROP_WRITES)
        with connection.cursor() as cursor:
            for create, _ in in_place:
                cursor.execute(create)
    finally:
        executor = MigrationExecutor(connection)
        executor.migrate(executor.loader.graph.leaf_nodes())
    assert not _function_exists(functions.DROP_PUT)
    assert not _function_exists(functions.DROP_WRITES)
    assert not any(_function_exists(drop) for _, drop in in_place)
    assert _function_exists(packed.DROP_WRITES)
    assert not _function_exists(packed.DROP_PUT)  # 0005 replaced it
    thread = _Thread(CortexCheckpointSaver(scope=ACME, agent_id=AGENT))
    thread.put([HumanMessage("a", id="a")])
    thread.saver.put_writes(thread.config, [("step", 1)], "task")
    assert _texts(thread.thread_id) == ["a"]
    assert thread.saver.get_tuple(thread.config).pending_writes == [("task", "step", 1)]


@pytest.mark.skipif(connection.vendor != "postgresql", reason="the PostgreSQL functions")
@pytest.mark.django_db(transaction=True)
def test_a_database_at_0004_moves_to_the_jsonb_put_and_back():
    """``0005_put_jsonb`` replaces ``0003``'s put (the mirrored messages read as ``json``) with
    ``_v3`` (read as ``jsonb``); backward, the reverse. Both mirror the same rows."""
    from django.db.migrations.executor import MigrationExecutor

    packed = importlib.import_module(
        "cortex_sessions.integrations.langgraph.migrations.0003_packed_writes"
    )
    put = importlib.import_module(
        "cortex_sessions.integrations.langgraph.migrations.0005_put_jsonb"
    )
    executor = MigrationExecutor(connection)
    executor.migrate([("cortex_langgraph", "0004_write_blob_null")])
    try:
        assert _function_exists(packed.DROP_PUT) and not _function_exists(put.DROP_PUT)
    finally:
        executor = MigrationExecutor(connection)
        executor.migrate(executor.loader.graph.leaf_nodes())
    assert _function_exists(put.DROP_PUT) and not _function_exists(packed.DROP_PUT)
    thread = _Thread(CortexCheckpointSaver(scope=ACME, agent_id=AGENT))
    a, b = HumanMessage("a é \\u0041", id="a"), AIMessage("b", id="b")
    thread.put([a])
    thread.put([a, b])
    assert _texts(thread.thread_id) == ["a é \\u0041", "b"]
    session = Session.objects.get(pk=thread.thread_id)
    assert (session.message_count, session.last_seq) == (2, 2)
    # a message without usage: SQL NULL, not JSON null
    assert Message.objects.filter(session=session, usage__isnull=True).count() == 2
