"""The saver's one-statement reads on PostgreSQL (``langgraph/_pg_reads.py``, docs/design.md §19.1).

Every test reads the same threads through the PostgreSQL statement and through the ORM path
(which SQLite and MySQL/MariaDB use) and compares: the same tuples, in the same order, the same
``None`` for a thread that is missing, outside the scope, another agent's or expired. On
PostgreSQL the statement counts are pinned too: ``get_tuple`` of the latest checkpoint and a
whole thread's ``list`` in one statement, two when a checkpoint names values the first did not
read (a fork, a read by id, a page).
"""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest

pytest.importorskip("langgraph")

from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from langgraph.checkpoint.base import empty_checkpoint

from cortex_sessions.integrations.langgraph import CortexCheckpointSaver, _pg_reads
from cortex_sessions.models import Session
from tests.asyncio_support import async_test

pytestmark = pytest.mark.django_db

ACME = "org=acme"
ALICE = "org=acme/user=alice"
GLOBEX = "org=globex"
AGENT = "graph-bot"

postgres_only = pytest.mark.skipif(
    connection.vendor != "postgresql", reason="the one-statement reads are PostgreSQL's"
)


def _config(thread_id, ns="", **extra):
    return {"configurable": {"thread_id": str(thread_id), "checkpoint_ns": ns, **extra}}


class _Thread:
    """A thread advanced step by step, as a graph does: channels keep their versions until
    updated."""

    def __init__(self, saver, thread_id=None, ns=""):
        self.saver = saver
        self.thread_id = thread_id or uuid.uuid4()
        self.ns = ns
        self.versions: dict[str, str] = {}
        self.values: dict[str, object] = {}
        self.last: str | None = None

    def put(self, updates, *, parent=None, metadata=None):
        parent = self.last if parent is None else parent
        new_versions = {}
        for channel, value in updates.items():
            self.versions[channel] = self.saver.get_next_version(self.versions.get(channel), None)
            new_versions[channel] = self.versions[channel]
            self.values[channel] = value
        checkpoint = empty_checkpoint()
        checkpoint["channel_values"] = dict(self.values)
        checkpoint["channel_versions"] = dict(self.versions)
        config = _config(self.thread_id, self.ns, checkpoint_id=parent)
        stored = self.saver.put(
            config,
            checkpoint,
            metadata or {"source": "loop", "step": len(self.values)},
            new_versions,
        )
        self.last = stored["configurable"]["checkpoint_id"]
        return self.last

    def write(self, checkpoint_id, writes, task_id="task", task_path=""):
        self.saver.put_writes(
            _config(self.thread_id, self.ns, checkpoint_id=checkpoint_id),
            writes,
            task_id,
            task_path,
        )


def _orm(monkeypatch):
    """Make the store take its ORM path, whatever the database."""
    monkeypatch.setattr(_pg_reads, "serves", lambda alias: False)


def _both(monkeypatch, read):
    """``read()`` through the statement, then through the ORM path."""
    fast = read()
    with monkeypatch.context() as patch:
        _orm(patch)
        slow = read()
    return fast, slow


def _seed(saver, steps=5):
    thread = _Thread(saver)
    for step in range(steps):
        thread.put({"messages": [f"m{n}" for n in range(step + 1)], "step": step})
        if step % 2:
            thread.write(thread.last, [("messages", [f"w{step}"]), ("step", step)], task_id="b")
            thread.write(thread.last, [("__error__", "boom")], task_id="a")
    return thread


def test_get_tuple_and_list_match_the_orm_path(monkeypatch):
    saver = CortexCheckpointSaver(scope=ACME, agent_id=AGENT)
    thread = _seed(saver)
    latest, orm_latest = _both(monkeypatch, lambda: saver.get_tuple(_config(thread.thread_id)))
    assert latest == orm_latest
    assert latest.checkpoint["channel_values"] == thread.values
    listed, orm_listed = _both(monkeypatch, lambda: list(saver.list(_config(thread.thread_id))))
    assert listed == orm_listed
    assert len(listed) == 5 and listed[0] == latest
    assert [t.pending_writes for t in listed[:2]] == [
        [],
        [("a", "__error__", "boom"), ("b", "messages", ["w3"]), ("b", "step", 3)],
    ]


def _statements(saver, read):
    """``(result, statements)`` of ``read()`` on the database the saver reads."""
    from cortex_sessions import routing
    from cortex_sessions.integrations.langgraph.models import Checkpoint

    alias = routing.db_for_read(Checkpoint, scope=saver.scope)
    from django.db import connections

    with CaptureQueriesContext(connections[alias]) as captured:
        result = read()
    return result, len(captured.captured_queries)


@postgres_only
def test_the_latest_checkpoint_and_a_whole_thread_take_one_statement():
    saver = CortexCheckpointSaver(scope=ACME, agent_id=AGENT)
    thread = _seed(saver, steps=6)
    latest, count = _statements(saver, lambda: saver.get_tuple(_config(thread.thread_id)))
    assert (latest.checkpoint["channel_values"], count) == (thread.values, 1)
    listed, count = _statements(saver, lambda: list(saver.list(_config(thread.thread_id))))
    assert (len(listed), count) == (6, 1)
    # without a namespace: every namespace of the thread, still one statement
    listed, count = _statements(
        saver, lambda: list(saver.list({"configurable": {"thread_id": str(thread.thread_id)}}))
    )
    assert (len(listed), count) == (6, 1)


@postgres_only
def test_a_read_by_id_or_a_page_reads_the_values_it_names_by_key():
    saver = CortexCheckpointSaver(scope=ACME, agent_id=AGENT)
    thread = _seed(saver, steps=4)
    first = saver.get_tuple(_config(thread.thread_id, checkpoint_id=thread.last)).parent_config
    old, count = _statements(saver, lambda: saver.get_tuple(first))
    assert (old.checkpoint["channel_values"]["step"], count) == (2, 2)
    page, count = _statements(
        saver, lambda: list(saver.list(_config(thread.thread_id), before=first, limit=2))
    )
    assert ([t.checkpoint["channel_values"]["step"] for t in page], count) == ([1, 0], 2)


def test_a_fork_reads_the_versions_its_checkpoint_names_not_the_newest(monkeypatch):
    saver = CortexCheckpointSaver(scope=ACME, agent_id=AGENT)
    thread = _Thread(saver)
    root = thread.put({"messages": ["a"], "step": 0})
    thread.put({"messages": ["a", "b"], "step": 1})
    thread.put({"messages": ["a", "b", "c"], "step": 2})
    # a fork from the root: its versions are below the abandoned branch's newest
    fork = _Thread(saver, thread.thread_id)
    fork.versions = dict(
        saver.get_tuple(_config(thread.thread_id, checkpoint_id=root)).checkpoint[
            "channel_versions"
        ]
    )
    fork.values = {"messages": ["a"], "step": 0}
    fork.put({"messages": ["a", "x"]}, parent=root)
    latest, orm_latest = _both(monkeypatch, lambda: saver.get_tuple(_config(thread.thread_id)))
    assert latest == orm_latest
    assert latest.checkpoint["channel_values"] == {"messages": ["a", "x"], "step": 0}
    listed, orm_listed = _both(monkeypatch, lambda: list(saver.list(_config(thread.thread_id))))
    assert listed == orm_listed and len(listed) == 4


def test_namespaces_before_limit_and_ids_match_the_orm_path(monkeypatch):
    saver = CortexCheckpointSaver(scope=ACME, agent_id=AGENT)
    thread = _seed(saver, steps=4)
    sub = _Thread(saver, thread.thread_id, ns="child:1")
    for step in range(3):
        sub.put({"inner": step})
    base = {"configurable": {"thread_id": str(thread.thread_id)}}
    middle = list(saver.list(_config(thread.thread_id)))[1].config
    reads = [
        lambda: list(saver.list(base)),
        lambda: list(saver.list(base, limit=3)),
        lambda: list(saver.list(_config(thread.thread_id, ns="child:1"))),
        lambda: list(saver.list(_config(thread.thread_id), before=middle)),
        lambda: list(saver.list(_config(thread.thread_id), before=middle, limit=1)),
        lambda: list(saver.list(_config(thread.thread_id), limit=0)),
        lambda: saver.get_tuple(_config(thread.thread_id, ns="child:1")),
        lambda: saver.get_tuple(middle),
        lambda: saver.get_tuple(_config(thread.thread_id, checkpoint_id="missing")),
        lambda: saver.get_tuple(_config(thread.thread_id, ns="nowhere")),
        lambda: saver.get_tuple(_config(uuid.uuid4())),
    ]
    for read in reads:
        fast, slow = _both(monkeypatch, read)
        assert fast == slow
    assert len(list(saver.list(base))) == 7
    assert saver.get_tuple(_config(thread.thread_id, ns="child:1")).checkpoint[
        "channel_values"
    ] == {"inner": 2}


def test_threads_outside_the_scope_of_another_agent_or_expired_are_not_read(monkeypatch):
    saver = CortexCheckpointSaver(scope=ACME, agent_id=AGENT)
    thread = _Thread(saver)
    thread.put({"messages": ["a"]}, metadata={"source": "input"})
    config = _config(thread.thread_id)
    others = [
        CortexCheckpointSaver(scope=GLOBEX, agent_id=AGENT),
        CortexCheckpointSaver(scope=ACME, agent_id="other-bot"),
        CortexCheckpointSaver(scope=ALICE, agent_id=AGENT),
    ]
    for other in others:
        fast, slow = _both(monkeypatch, lambda other=other: other.get_tuple(config))
        assert fast is None and slow is None
        assert list(other.list(config)) == []
    assert CortexCheckpointSaver(scope=ACME).get_tuple(config) is not None  # any agent
    Session.objects.filter(pk=thread.thread_id).update(
        expires_at=timezone.now() - timedelta(seconds=1)
    )
    fast, slow = _both(monkeypatch, lambda: saver.get_tuple(config))
    assert fast is None and slow is None
    assert list(saver.list(config)) == []


def test_names_with_backslashes_and_non_ascii_round_trip(monkeypatch):
    saver = CortexCheckpointSaver(scope=ACME, agent_id=AGENT)
    thread = _Thread(saver, ns="sub\\x:é")
    thread.put({"chan\\nel ü": "value"})
    thread.write(thread.last, [("chan\\nel ü", "pending")], task_id="t\\ask ☃", task_path="p\\0")
    fast, slow = _both(
        monkeypatch, lambda: saver.get_tuple(_config(thread.thread_id, ns=thread.ns))
    )
    assert fast == slow
    assert fast.checkpoint["channel_values"] == {"chan\\nel ü": "value"}
    assert fast.pending_writes == [("t\\ask ☃", "chan\\nel ü", "pending")]


@async_test
async def test_the_async_reads_take_the_same_path(monkeypatch):
    from asgiref.sync import sync_to_async

    saver = CortexCheckpointSaver(scope=ACME, agent_id=AGENT)
    thread = await sync_to_async(_seed, thread_sensitive=True)(saver, 3)
    config = _config(thread.thread_id)
    latest = await saver.aget_tuple(config)
    listed = [item async for item in saver.alist(config)]
    assert latest.checkpoint["channel_values"] == thread.values and len(listed) == 3
    _orm(monkeypatch)
    assert latest == await saver.aget_tuple(config)
    assert listed == [item async for item in saver.alist(config)]


@postgres_only
def test_prepared_statements_read_the_same(monkeypatch, settings):
    settings.CORTEX_SESSIONS = {
        **getattr(settings, "CORTEX_SESSIONS", {}),
        "PREPARED_STATEMENTS": True,
    }
    saver = CortexCheckpointSaver(scope=ACME, agent_id=AGENT)
    thread = _seed(saver, steps=3)
    first = list(saver.list(_config(thread.thread_id)))[-1].config
    for read in (
        lambda: saver.get_tuple(_config(thread.thread_id)),
        lambda: list(saver.list(_config(thread.thread_id))),
        lambda: saver.get_tuple(first),
        lambda: list(saver.list(_config(thread.thread_id), limit=2)),
        lambda: CortexCheckpointSaver(scope=GLOBEX).get_tuple(_config(thread.thread_id)),
    ):
        for _ in range(6):  # past the server's custom-plan runs, to its generic plan
            read()
        fast, slow = _both(monkeypatch, read)
        assert fast == slow


@postgres_only
def test_the_latest_values_are_a_skip_scan_of_the_key_without_a_sort():
    """One backward index probe per channel, however long the thread: no sort of its values."""
    from cortex_sessions import routing
    from cortex_sessions.integrations.langgraph.models import Checkpoint

    saver = CortexCheckpointSaver(scope=ACME, agent_id=AGENT)
    thread = _seed(saver, steps=4)
    alias = routing.db_for_read(Checkpoint, scope=saver.scope)
    from django.db import connections

    with CaptureQueriesContext(connections[alias]) as captured:
        saver.get_tuple(_config(thread.thread_id))
    (query,) = captured.captured_queries
    # one call of the function that keeps the statement's plan per connection
    assert query["sql"].startswith(f"SELECT * FROM {_pg_reads.LATEST}(")
    canonical, thread_id = saver.scope.canonical, thread.thread_id
    scope = [canonical, canonical + "0", canonical, canonical + "/"]
    values = [thread_id, *scope, AGENT, thread_id, "", thread_id, "", thread_id, "", 1]
    with connections[alias].cursor() as cursor:
        cursor.execute("EXPLAIN " + _pg_reads.latest_statement(), values)
        plan = "\n".join(row[0] for row in cursor.fetchall())
    assert "Recursive Union" in plan and "Index Scan Backward" in plan
    assert "Sort" not in plan


@postgres_only
def test_the_latest_read_binds_its_arguments_server_side(monkeypatch):
    """The call of ``LATEST`` (its arguments cast to the declared types) goes with server-side
    binding, as the saver's writes: psycopg quotes no value into its text. Other reads keep
    Django's binding."""
    sent = []
    execute = _pg_reads.execute

    def spy(connection, sql, params, **kwargs):
        sent.append((sql.startswith(f"SELECT * FROM {_pg_reads.LATEST}("), kwargs))
        return execute(connection, sql, params, **kwargs)

    monkeypatch.setattr(_pg_reads, "execute", spy)
    saver = CortexCheckpointSaver(scope=ACME, agent_id=AGENT)
    thread = _seed(saver, steps=2)
    assert saver.get_tuple(_config(thread.thread_id)).checkpoint["channel_values"] == thread.values
    assert len(list(saver.list(_config(thread.thread_id)))) == 2
    assert sent == [(True, {"server_binding": True}), (False, {"server_binding": False})]
