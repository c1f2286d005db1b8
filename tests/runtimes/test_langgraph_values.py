"""What ``CortexCheckpointSaver`` stores of a value, the same on every database and on both of
PostgreSQL's paths (its functions and the ORM), as LangGraph's own savers store it
(docs/design.md §19.1): a serializer's ``(type, None)`` kept as ``None``, a special channel
written twice in one ``put_writes`` keeping its last write.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest

pytest.importorskip("langgraph")

from django.db import OperationalError, connection
from langgraph.checkpoint.base import ERROR, INTERRUPT, empty_checkpoint
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

from cortex_sessions.integrations.langgraph import CortexCheckpointSaver, _pg_reads, _pg_writes
from cortex_sessions.integrations.langgraph.models import (
    Checkpoint,
    CheckpointBlob,
    CheckpointWrite,
)
from cortex_sessions.models import Session
from cortex_sessions.services import _pg

pytestmark = pytest.mark.django_db

ACME = "org=acme"
AGENT = "graph-bot"


class NoBytesForNone(JsonPlusSerializer):
    """A serializer that gives ``None`` no bytes (``("nothing", None)``) and wants none back."""

    def dumps_typed(self, obj: Any) -> tuple[str, Any]:
        if obj is None:
            return "nothing", None
        return super().dumps_typed(obj)

    def loads_typed(self, data: tuple[str, Any]) -> Any:
        kind, blob = data
        if kind == "nothing":
            assert blob is None, f"a value stored without bytes came back as {blob!r}"
            return None
        return super().loads_typed(data)


@pytest.fixture(params=["functions", "orm"])
def path(request, monkeypatch):
    """Each test once as the database serves it, once through the ORM (PostgreSQL's functions
    off; the same on other databases)."""
    if request.param == "orm":
        monkeypatch.setattr(_pg, "serves", lambda alias: False)
        monkeypatch.setattr(_pg_reads, "serves", lambda alias: False)
    return request.param


def _checkpoint(saver, values):
    checkpoint = empty_checkpoint()
    checkpoint["channel_values"] = dict(values)
    checkpoint["channel_versions"] = {key: saver.get_next_version(None, None) for key in values}
    return checkpoint


def _stored(saver, values, writes, task_id="task"):
    """Put a checkpoint with ``values`` to a new thread, then each of ``writes`` (lists of
    writes, one ``put_writes`` each); the checkpoint's config."""
    config = {"configurable": {"thread_id": str(uuid.uuid4()), "checkpoint_ns": ""}}
    checkpoint = _checkpoint(saver, values)
    config = saver.put(config, checkpoint, {"step": 1}, checkpoint["channel_versions"])
    for batch in writes:
        saver.put_writes(config, batch, task_id)
    return config


def _reads(saver, config):
    """The checkpoint tuple by ``get_tuple`` (latest), by id and by ``list``, which must agree."""
    thread = {"configurable": {**config["configurable"], "checkpoint_id": None}}
    latest = saver.get_tuple(thread)
    assert saver.get_tuple(config) == latest
    assert list(saver.list(thread)) == [latest]
    assert list(saver.list(thread, filter={"step": 1})) == [latest]  # the ORM's read
    return latest


def test_a_value_the_serializer_gives_no_bytes_is_stored_as_null_and_read_back_as_none(path):
    saver = CortexCheckpointSaver(scope=ACME, agent_id=AGENT, serde=NoBytesForNone())
    config = _stored(saver, {"gone": None, "kept": 1}, [[("a", None), ("b", 2)]])
    written = CheckpointWrite.objects.filter(session_id=config["configurable"]["thread_id"])
    assert {row.channel: row.blob for row in written} == {
        "a": None,
        "b": saver.serde.dumps_typed(2)[1],
    }
    blob = CheckpointBlob.objects.get(channel="gone")
    assert (blob.type, blob.blob) == ("nothing", None)
    latest = _reads(saver, config)
    assert latest.checkpoint["channel_values"] == {"gone": None, "kept": 1}
    assert sorted(latest.pending_writes) == [("task", "a", None), ("task", "b", 2)]


def test_none_bytes_read_back_as_langgraphs_in_memory_saver_reads_them(path):
    serde = NoBytesForNone()
    ours = CortexCheckpointSaver(scope=ACME, agent_id=AGENT, serde=serde)
    theirs = InMemorySaver(serde=serde)
    writes = [[("a", None), (ERROR, None)]]
    mine = _reads(ours, _stored(ours, {"gone": None}, writes))
    reference = theirs.get_tuple(_stored(theirs, {"gone": None}, writes))
    assert mine.checkpoint["channel_values"] == reference.checkpoint["channel_values"]
    assert sorted(mine.pending_writes) == sorted(reference.pending_writes)


def test_a_special_channel_written_twice_in_one_call_keeps_its_last_write(path):
    saver = CortexCheckpointSaver(scope=ACME, agent_id=AGENT)
    writes = [
        [(ERROR, "first"), (ERROR, "second")],  # every write special: replaces, last wins
        [("ch", 1), (INTERRUPT, "one"), (INTERRUPT, "two")],  # mixed: kept stored, last wins
    ]
    config = _stored(saver, {"step": 1}, writes)
    latest = _reads(saver, config)
    assert sorted(latest.pending_writes, key=str) == sorted(
        [("task", ERROR, "second"), ("task", "ch", 1), ("task", INTERRUPT, "two")], key=str
    )
    memory = InMemorySaver()
    reference = memory.get_tuple(_stored(memory, {"step": 1}, writes))
    assert sorted(latest.pending_writes, key=str) == sorted(reference.pending_writes, key=str)


@pytest.mark.skipif(connection.vendor != "mysql", reason="MySQL/MariaDB's max_allowed_packet")
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("new_thread", [True, False], ids=["new-thread", "existing-thread"])
def test_a_put_over_max_allowed_packet_is_refused_with_nothing_written(new_thread):
    """A value over the server's ``max_allowed_packet`` (docs/langgraph.md): the server drops
    the connection, the ``put`` (or ``put_writes``) raises ``OperationalError`` naming the
    setting and writes nothing (the thread's new session included), and the next call works."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT @@max_allowed_packet")
        (limit,) = cursor.fetchone()
    saver = CortexCheckpointSaver(scope=ACME, agent_id=AGENT)
    config = {"configurable": {"thread_id": str(uuid.uuid4()), "checkpoint_ns": ""}}
    if not new_thread:
        config = saver.put(config, empty_checkpoint(), {"step": 0}, {})
    # three values each 4 MiB over the limit (3 × 20 MB at MariaDB's default 16 MiB): the
    # server drops the connection (2006) rather than answering 1153 as for a smaller excess
    big = b"x" * (limit + (4 << 20))
    checkpoint = _checkpoint(saver, {"big": big, "bigger": big, "biggest": big})
    with pytest.raises(OperationalError, match=r"escapes into its text.*max_allowed_packet"):
        saver.put(config, checkpoint, {"step": 1}, checkpoint["channel_versions"])
    thread_id = config["configurable"]["thread_id"]
    assert Session.objects.filter(pk=thread_id).count() == (0 if new_thread else 1)
    assert Checkpoint.objects.filter(session_id=thread_id).count() == (0 if new_thread else 1)
    assert not CheckpointBlob.objects.filter(session_id=thread_id).exists()
    checkpoint = _checkpoint(saver, {"small": b"x"})
    config = saver.put(config, checkpoint, {"step": 1}, checkpoint["channel_versions"])
    assert saver.get_tuple(config).checkpoint["channel_values"] == {"small": b"x"}
    with pytest.raises(OperationalError, match="max_allowed_packet"):
        saver.put_writes(config, [("small", 1), ("big", big), ("bigger", big)], "task")
    assert not CheckpointWrite.objects.filter(session_id=thread_id).exists()
    saver.put_writes(config, [("small", 1)], "task")
    assert saver.get_tuple(config).pending_writes == [("task", "small", 1)]


@pytest.mark.skipif(connection.vendor != "postgresql", reason="the PostgreSQL functions")
@pytest.mark.parametrize(
    "setting", [None, "client_encoding TO 'SJIS'", "DateStyle TO 'German'"], ids=str
)
def test_the_writes_serve_a_connection_as_the_cores_hot_paths_do(setting):
    """The writes take the core's way into the hot paths (``services._pg.serves``): a host's
    encoding or ``DateStyle`` sends them the ORM way, and they still store what they are
    given."""
    saver = CortexCheckpointSaver(scope=ACME, agent_id=AGENT)
    config = _stored(saver, {"step": 1}, [])
    if setting:
        with connection.cursor() as cursor:
            cursor.execute(f"SET {setting}")
    assert not hasattr(_pg_writes, "serves")
    assert _pg.serves("default") is (setting is None)
    if setting is None or "client_encoding" in setting:
        saver.put_writes(config, [("ch", "ソ¥")], "task")
        assert saver.get_tuple(config).pending_writes == [("task", "ch", "ソ¥")]


@pytest.mark.skipif(connection.vendor != "postgresql", reason="the PostgreSQL functions")
@pytest.mark.django_db(transaction=True)
def test_the_writes_open_a_closed_connection_and_take_their_function():
    connection.close()
    assert _pg.serves("default") and connection.connection is not None
    saver = CortexCheckpointSaver(scope=ACME, agent_id=AGENT)
    config = _stored(saver, {"step": 1}, [])
    connection.close()
    saver.put_writes(config, [("ch", 1)], "task")
    assert saver.get_tuple(config).pending_writes == [("task", "ch", 1)]
