"""``python -m bench.runtimes``: each agent-runtime adapter against its SDK's own database store.

On one PostgreSQL database (``cortex_bench_runtimes`` on the bench server, or
``BENCH_RUNTIMES_DATABASE``; created and migrated if missing), every store holds one session
seeded with ``--items`` items through its own API, then two operations are timed (median of ``--reps``, after warm-up), alternating the stores so drift
hits both alike:

- append one item: ``add_items([item])`` / ``append_event(session, event)``;
- read the newest 50: ``get_items(limit=50)`` / ``get_session(config=GetSessionConfig(
  num_recent_events=50))``;
- OpenAI Agents SDK: read the whole history ``get_items()``, and ``pop_item()`` (last: each call
  removes an item);
- ADK: ``list_sessions(app_name, user_id)`` of a user with 50 sessions (each with an event and
  session and user state).

Pairs (adapter vs SDK store, same engine and server):

- ``CortexSession`` vs the OpenAI Agents SDK's ``SQLAlchemySession`` (async SQLAlchemy on asyncpg);
- ``CortexSessionService`` vs Google ADK's ``DatabaseSessionService`` (async SQLAlchemy on asyncpg);
- ``CortexCheckpointSaver`` vs ``PostgresSaver``, ``CortexChatMessageHistory`` vs
  ``PostgresChatMessageHistory``, and Pydantic AI's ``save_messages``/``load_history`` vs a
  plain-SQL floor (it has no store of its own): :mod:`bench.runtimes_more`, skipped with a
  printed line when a peer package is not installed.

The ratio is adapter / SDK store: at most 1.2 is the target (docs/design.md §13.4). Figures are
in docs/performance.md.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import time
from collections.abc import Awaitable, Callable
from typing import Any

from . import runtimes_more
from .db import create_database, database_url
from .setup import setup_django

DATABASE = os.environ.get("BENCH_RUNTIMES_DATABASE", "cortex_bench_runtimes")
TEXT = "Please look at the failing test in the billing module and propose a fix."
TARGET = 1.2
#: Sessions of the user whose sessions ADK's ``list_sessions`` lists.
LISTED = 50
#: The pairs ``--only`` may name, in the order they run.
PAIRS = ("openai-agents", "adk", "langgraph", "langchain", "pydantic-ai")


async def _pair(
    ours: Callable[[], Awaitable[Any]], theirs: Callable[[], Awaitable[Any]], reps: int
) -> tuple[float, float]:
    """Median milliseconds of each call, alternating which goes first."""
    for _ in range(10):
        await ours()
        await theirs()
    times: dict[str, list[float]] = {"ours": [], "theirs": []}
    for rep in range(reps):
        order = [("ours", ours), ("theirs", theirs)]
        if rep % 2:
            order.reverse()
        for name, call in order:
            started = time.perf_counter()
            await call()
            times[name].append(time.perf_counter() - started)
    return statistics.median(times["ours"]) * 1000, statistics.median(times["theirs"]) * 1000


def _async_url() -> str:
    return database_url(DATABASE).replace("postgres://", "postgresql+asyncpg://", 1)


async def _analyze() -> None:
    """``ANALYZE`` the whole database once the stores are seeded, as autovacuum would have
    done by then on a live server (the bench server runs with ``autovacuum = off``): without
    statistics the planner may sort a whole session for its newest 50 rows, and which store
    that hits first depends on the order of the seeding, not on the store."""
    from asgiref.sync import sync_to_async
    from django.db import connection

    def analyze() -> None:
        with connection.cursor() as cursor:
            cursor.execute("ANALYZE")

    await sync_to_async(analyze)()


def _item(n: int) -> dict[str, Any]:
    return {"role": "user" if n % 2 == 0 else "assistant", "content": f"{TEXT} {n}"}


async def openai_agents(items: int, reps: int) -> list[dict[str, Any]]:
    """CortexSession vs SQLAlchemySession."""
    from agents.extensions.memory.sqlalchemy_session import SQLAlchemySession
    from sqlalchemy.ext.asyncio import create_async_engine

    from cortex_sessions import services
    from cortex_sessions.integrations.openai_agents import CortexSession

    engine = create_async_engine(_async_url())
    try:
        theirs = SQLAlchemySession("bench-runtimes", engine=engine, create_tables=True)
        await theirs.clear_session()
        created = await services.acreate_session(scope="org=bench/user=1", agent_id="bench")
        ours = CortexSession(scope="org=bench/user=1", agent_id="bench", session_id=created.pk)
        for start in range(0, items, 500):
            batch = [_item(n) for n in range(start, min(start + 500, items))]
            await theirs.add_items(batch)
            await ours.add_items(batch)
        await _analyze()
        counter = iter(range(items, 10**9))
        rows = []
        append = await _pair(
            lambda: ours.add_items([_item(next(counter))]),
            lambda: theirs.add_items([_item(next(counter))]),
            reps,
        )
        rows.append(("append one item", *append))
        read = await _pair(
            lambda: ours.get_items(limit=50), lambda: theirs.get_items(limit=50), reps
        )
        rows.append(("read newest 50", *read))
        everything = await _pair(ours.get_items, theirs.get_items, max(reps // 5, 20))
        rows.append((f"read all ({items:,}+)", *everything))
        assert await ours.get_items(limit=50) == (await ours.get_items())[-50:]
        # pop_item last: each call removes an item (reps of each store's items are popped).
        popped = await _pair(ours.pop_item, theirs.pop_item, min(reps, items // 3))
        rows.append(("pop one item", *popped))
        return [
            {"pair": "CortexSession vs SQLAlchemySession", "op": op, "ours_ms": a, "theirs_ms": b}
            for op, a, b in rows
        ]
    finally:
        await engine.dispose()


async def google_adk(items: int, reps: int) -> list[dict[str, Any]]:
    """CortexSessionService vs DatabaseSessionService."""
    from google.adk.events import Event
    from google.adk.sessions import DatabaseSessionService
    from google.adk.sessions.base_session_service import GetSessionConfig
    from google.genai import types

    from cortex_sessions.integrations.adk import CortexSessionService

    theirs = DatabaseSessionService(db_url=_async_url())
    ours = CortexSessionService()
    try:
        app, user, sid = "bench", "u0", "bench-runtimes"
        for service in (theirs, ours):
            if await service.get_session(app_name=app, user_id=user, session_id=sid):
                await service.delete_session(app_name=app, user_id=user, session_id=sid)
        sessions = {
            id(service): await service.create_session(app_name=app, user_id=user, session_id=sid)
            for service in (theirs, ours)
        }

        def event(n: int) -> Event:
            role = "user" if n % 2 == 0 else "model"
            return Event(
                author="user" if role == "user" else "agent",
                invocation_id="bench",
                content=types.Content(role=role, parts=[types.Part(text=f"{TEXT} {n}")]),
            )

        async def append(service: Any, n: int) -> None:
            session = sessions[id(service)]
            await service.append_event(session, event(n))
            session.events.clear()  # keep the in-memory copy small; storage keeps every event

        for n in range(items):
            await append(theirs, n)
            await append(ours, n)
        await _analyze()
        config = GetSessionConfig(num_recent_events=50)

        def read(service: Any) -> Awaitable[Any]:
            return service.get_session(app_name=app, user_id=user, session_id=sid, config=config)

        counter = iter(range(items, 10**9))
        rows = [
            (
                "append one event",
                *await _pair(
                    lambda: append(ours, next(counter)),
                    lambda: append(theirs, next(counter)),
                    reps,
                ),
            ),
            ("read newest 50", *await _pair(lambda: read(ours), lambda: read(theirs), reps)),
        ]
        assert len((await read(ours)).events) == 50
        # A user with LISTED sessions, each with an event and session and user state.
        lister = "lister"
        for service in (theirs, ours):
            for old in (await service.list_sessions(app_name=app, user_id=lister)).sessions:
                await service.delete_session(app_name=app, user_id=lister, session_id=old.id)
            for n in range(LISTED):
                listed = await service.create_session(
                    app_name=app, user_id=lister, state={"n": n, "user:seen": n}
                )
                await service.append_event(listed, event(n))
        await _analyze()

        def listing(service: Any) -> Awaitable[Any]:
            return service.list_sessions(app_name=app, user_id=lister)

        rows.append(
            (
                f"list {LISTED} sessions",
                *await _pair(lambda: listing(ours), lambda: listing(theirs), reps),
            )
        )
        assert len((await listing(ours)).sessions) == LISTED
        return [
            {
                "pair": "CortexSessionService vs DatabaseSessionService",
                "op": op,
                "ours_ms": a,
                "theirs_ms": b,
            }
            for op, a, b in rows
        ]
    finally:
        await theirs.close()


def main(argv: list[str] | None = None) -> None:
    """Parse the command line, prepare the database, run both pairs and print the table."""
    parser = argparse.ArgumentParser(prog="python -m bench.runtimes")
    parser.add_argument("--items", type=int, default=1000, help="items seeded per session")
    parser.add_argument("--reps", type=int, default=300, help="timed repetitions per operation")
    parser.add_argument(
        "--only",
        action="append",
        choices=PAIRS,
        help="run only this pair (repeatable; default: every pair)",
    )
    args = parser.parse_args(argv)
    only = set(args.only or PAIRS)
    create_database(DATABASE)
    setup_django(database_url(DATABASE))
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    rows: list[dict[str, Any]] = []
    for name, runner in (("openai-agents", openai_agents), ("adk", google_adk)):
        if name in only:
            rows.extend(asyncio.run(runner(args.items, args.reps)))
    skipped: list[str] = []
    for name, sync_runner in (
        ("langgraph", runtimes_more.langgraph),
        ("langchain", runtimes_more.langchain),
        ("pydantic-ai", runtimes_more.pydantic_ai),
    ):
        if name not in only:
            continue
        try:
            rows.extend(sync_runner(database_url(DATABASE), args.items, args.reps))
        except ImportError as exc:
            skipped.append(f"{name}: skipped, not installed ({exc.name or exc})")
    print(f"Sessions of {args.items:,} items; medians of {args.reps} reps; ratio = adapter / SDK")
    print("(the machine may be shared: figures move between runs; compare within one run)")
    print("| pair | operation | adapter ms | SDK store ms | ratio | target |")
    print("|---|---|---:|---:|---:|---:|")
    for row in rows:
        ratio = row["ours_ms"] / row["theirs_ms"]
        mark = "ok" if ratio <= TARGET else "over"
        print(
            f"| {row['pair']} | {row['op']} | {row['ours_ms']:.3f} | {row['theirs_ms']:.3f} | "
            f"{ratio:.2f}× | ≤ {TARGET}× ({mark}) |"
        )
    for line in skipped:
        print(line)


if __name__ == "__main__":
    main()
