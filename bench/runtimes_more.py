"""The LangGraph, LangChain and Pydantic AI rows of ``python -m bench.runtimes`` (docs/design.md §19).

Each runner takes ``(url, items, reps)`` (``url``: the PostgreSQL database Django is set up on),
seeds one thread or session per store through its own API, runs ``ANALYZE`` and times the
operations call by call, alternating which store goes first. Every store here is synchronous
(the SDKs' PostgreSQL stores are used through their sync APIs, on one psycopg 3 connection
opened as their docs open it); the adapter's Django connection is opened before timing, as a
request or a worker's would be.

- ``CortexCheckpointSaver`` vs ``langgraph-checkpoint-postgres``'s ``PostgresSaver``: ``put`` of
  a checkpoint whose ``messages`` channel gained one message, ``get_tuple`` of the latest,
  ``list`` of the thread's checkpoints, ``put_writes`` of a task's two writes;
- ``CortexChatMessageHistory`` vs ``langchain-postgres``'s ``PostgresChatMessageHistory``:
  ``add_messages`` of a turn (two messages), ``messages`` (the whole history);
- Pydantic AI has no store of its own: ``save_messages``/``load_history`` against the plain-SQL
  floor its docs suggest (one ``INSERT`` of a run's messages as JSON, one ``SELECT`` of the
  conversation's rows, decoded with ``ModelMessagesTypeAdapter``).

A runner whose peer package is missing raises ``ImportError``; ``bench.runtimes`` prints it as
skipped.
"""

from __future__ import annotations

import statistics
import time
import uuid
from collections.abc import Callable
from typing import Any

__all__ = ["langchain", "langchain_stores", "langgraph", "pydantic_ai", "time_calls"]

TEXT = "Please look at the failing test in the billing module and propose a fix."
SCOPE = "org=bench/user=1"
#: Checkpoints seeded per LangGraph thread (a long-running thread's steps).
CHECKPOINTS = 50


def time_calls(calls: dict[str, Callable[[], Any]], reps: int) -> dict[str, float]:
    """Median milliseconds of each (blocking) call by name, after five warm-up rounds, the
    order rotated every repetition so drift hits every call alike."""
    names = list(calls)
    for _ in range(5):
        for name in names:
            calls[name]()
    times: dict[str, list[float]] = {name: [] for name in names}
    for rep in range(reps):
        for name in names[rep % len(names) :] + names[: rep % len(names)]:
            started = time.perf_counter()
            calls[name]()
            times[name].append(time.perf_counter() - started)
    return {name: statistics.median(values) * 1000 for name, values in times.items()}


def _pair(ours: Callable[[], Any], theirs: Callable[[], Any], reps: int) -> tuple[float, float]:
    """Median milliseconds of each (blocking) call, alternating which goes first."""
    figures = time_calls({"ours": ours, "theirs": theirs}, reps)
    return figures["ours"], figures["theirs"]


def _ready() -> None:
    """``ANALYZE`` (autovacuum is off on the bench server) and leave Django's connection open."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")


def _rows(pair: str, rows: list[tuple[str, float, float]]) -> list[dict[str, Any]]:
    return [{"pair": pair, "op": op, "ours_ms": a, "theirs_ms": b} for op, a, b in rows]


def _message(n: int) -> Any:
    from langchain_core.messages import AIMessage, HumanMessage

    kind = HumanMessage if n % 2 == 0 else AIMessage
    return kind(content=f"{TEXT} {n}", id=f"m{n}")


class _Thread:
    """One store's LangGraph thread: the latest config and checkpoint, advanced by :meth:`put`."""

    def __init__(self, saver: Any, config: dict[str, Any]) -> None:
        self.saver = saver
        self.config = config
        self.messages: list[Any] = []
        self.versions: dict[str, Any] = {}

    def put(self, n: int) -> None:
        from langgraph.checkpoint.base import empty_checkpoint

        self.messages = [*self.messages, _message(n)]
        checkpoint = empty_checkpoint()
        new_versions = {}
        for channel in ("messages", "step"):
            version = self.saver.get_next_version(self.versions.get(channel), None)
            new_versions[channel] = self.versions[channel] = version
        checkpoint["channel_values"] = {"messages": self.messages, "step": n}
        checkpoint["channel_versions"] = dict(self.versions)
        checkpoint["versions_seen"] = {"agent": dict(self.versions)}
        checkpoint["updated_channels"] = ["messages", "step"]
        metadata = {"source": "loop", "step": n, "parents": {}}
        self.config = self.saver.put(self.config, checkpoint, metadata, new_versions)

    def put_writes(self, n: int) -> None:
        writes = [("messages", [_message(n)]), ("step", n)]
        self.saver.put_writes(self.config, writes, str(uuid.uuid4()))

    def thread(self) -> dict[str, Any]:
        return {"configurable": {**self.config["configurable"], "checkpoint_id": None}}


def langgraph(url: str, items: int, reps: int) -> list[dict[str, Any]]:
    """CortexCheckpointSaver vs PostgresSaver (langgraph-checkpoint-postgres)."""
    from langgraph.checkpoint.postgres import PostgresSaver
    from psycopg import connect
    from psycopg.rows import dict_row

    from cortex_sessions.integrations.langgraph import CortexCheckpointSaver

    conn = connect(url, autocommit=True, prepare_threshold=0, row_factory=dict_row)
    try:
        theirs_saver = PostgresSaver(conn)
        theirs_saver.setup()
        thread_id = str(uuid.uuid4())
        base = {"thread_id": thread_id, "checkpoint_ns": ""}
        ours = _Thread(
            CortexCheckpointSaver(scope=SCOPE, agent_id="bench"), {"configurable": dict(base)}
        )
        theirs = _Thread(theirs_saver, {"configurable": dict(base)})
        for n in range(CHECKPOINTS):
            ours.put(n)
            theirs.put(n)
        _ready()
        counter = iter(range(CHECKPOINTS, 10**9))
        rows = [
            (
                "get_tuple (latest)",
                *_pair(
                    lambda: ours.saver.get_tuple(ours.thread()),
                    lambda: theirs.saver.get_tuple(theirs.thread()),
                    reps,
                ),
            ),
            (
                f"list a thread ({CHECKPOINTS} checkpoints)",
                *_pair(
                    lambda: list(ours.saver.list(ours.thread())),
                    lambda: list(theirs.saver.list(theirs.thread())),
                    max(reps // 5, 20),
                ),
            ),
            (
                "put_writes (2 writes)",
                *_pair(
                    lambda: ours.put_writes(next(counter)),
                    lambda: theirs.put_writes(next(counter)),
                    reps,
                ),
            ),
        ]
        # put last: each call adds a checkpoint (and a message to the channel) to its thread.
        step = iter(range(CHECKPOINTS, 10**9))
        last = {"n": 0}

        def put(thread: _Thread) -> None:
            last["n"] = next(step)
            thread.put(last["n"])

        rows.append(("put (1 new message)", *_pair(lambda: put(ours), lambda: put(theirs), reps)))
        mine = ours.saver.get_tuple(ours.thread())
        assert mine is not None and mine.checkpoint["channel_values"]["step"] > CHECKPOINTS
        return _rows("CortexCheckpointSaver vs PostgresSaver", rows)
    finally:
        conn.close()


def langchain_stores(conn: Any) -> tuple[Any, Any]:
    """A new ``CortexChatMessageHistory`` (of a new session) and a new
    ``PostgresChatMessageHistory`` on psycopg connection ``conn``, as ``(ours, theirs)``."""
    from langchain_postgres import PostgresChatMessageHistory

    from cortex_sessions import services
    from cortex_sessions.integrations.langchain import CortexChatMessageHistory

    table = "bench_langchain_messages"
    PostgresChatMessageHistory.create_tables(conn, table)
    theirs = PostgresChatMessageHistory(table, str(uuid.uuid4()), sync_connection=conn)
    created = services.create_session(scope=SCOPE, agent_id="bench")
    ours = CortexChatMessageHistory(scope=SCOPE, agent_id="bench", session_id=created.pk)
    return ours, theirs


def langchain(url: str, items: int, reps: int) -> list[dict[str, Any]]:
    """CortexChatMessageHistory vs PostgresChatMessageHistory (langchain-postgres)."""
    from psycopg import connect

    conn = connect(url, autocommit=True)
    try:
        ours, theirs = langchain_stores(conn)
        for start in range(0, items, 100):
            batch = [_message(n) for n in range(start, min(start + 100, items))]
            ours.add_messages(batch)
            theirs.add_messages(batch)
        _ready()
        whole = _pair(lambda: ours.messages, lambda: theirs.messages, max(reps // 5, 20))
        assert [m.content for m in ours.messages] == [m.content for m in theirs.messages]
        counter = iter(range(items, 10**9))

        def turn() -> list[Any]:
            return [_message(next(counter)), _message(next(counter))]

        added = _pair(lambda: ours.add_messages(turn()), lambda: theirs.add_messages(turn()), reps)
        rows = [("add_messages (a turn: 2)", *added), (f"messages (all {items:,})", *whole)]
        return _rows("CortexChatMessageHistory vs PostgresChatMessageHistory", rows)
    finally:
        conn.close()


def pydantic_ai(url: str, items: int, reps: int) -> list[dict[str, Any]]:
    """save_messages/load_history vs the plain-SQL floor (Pydantic AI has no store of its own)."""
    from psycopg import connect
    from pydantic_ai.messages import (
        ModelMessagesTypeAdapter,
        ModelRequest,
        ModelResponse,
        TextPart,
        UserPromptPart,
    )

    from cortex_sessions import services
    from cortex_sessions.integrations.pydantic_ai import load_history, save_messages

    def run(n: int) -> list[Any]:
        return [
            ModelRequest(parts=[UserPromptPart(content=f"{TEXT} {n}")]),
            ModelResponse(parts=[TextPart(content=f"{TEXT} {n + 1}")], model_name="bench"),
        ]

    conn = connect(url, autocommit=True)
    try:
        conn.execute(
            "CREATE TABLE IF NOT EXISTS bench_pydantic_ai_floor (id bigserial PRIMARY KEY, "
            "conversation uuid NOT NULL, messages jsonb NOT NULL)"
        )
        conn.execute(
            "CREATE INDEX IF NOT EXISTS bench_pydantic_ai_floor_conv "
            "ON bench_pydantic_ai_floor (conversation, id)"
        )
        conversation = uuid.uuid4()

        def floor_save(messages: list[Any]) -> None:
            conn.execute(
                "INSERT INTO bench_pydantic_ai_floor (conversation, messages) VALUES (%s, %s)",
                (conversation, ModelMessagesTypeAdapter.dump_json(messages).decode()),
            )

        def floor_load() -> list[Any]:
            rows = conn.execute(
                "SELECT messages::text FROM bench_pydantic_ai_floor WHERE conversation = %s "
                "ORDER BY id",
                (conversation,),
            ).fetchall()
            return [m for (text,) in rows for m in ModelMessagesTypeAdapter.validate_json(text)]

        session = services.create_session(scope=SCOPE, agent_id="bench")

        def ours_save(messages: list[Any]) -> None:
            save_messages(scope=SCOPE, agent_id="bench", messages=messages, session_id=session.pk)

        def ours_load() -> list[Any]:
            return load_history(scope=SCOPE, agent_id="bench", session_id=session.pk)

        for n in range(0, items, 2):
            ours_save(run(n))
            floor_save(run(n))
        _ready()
        loaded = _pair(ours_load, floor_load, max(reps // 5, 20))
        assert len(ours_load()) == len(floor_load())
        counter = iter(range(items, 10**9, 2))
        saved = _pair(
            lambda: ours_save(run(next(counter))), lambda: floor_save(run(next(counter))), reps
        )
        rows = [("save a run (2 messages)", *saved), (f"load history ({items:,})", *loaded)]
        return _rows("Pydantic AI save/load vs plain-SQL floor (no SDK store)", rows)
    finally:
        conn.close()
