"""Peer session stores on the same PostgreSQL database: append one item, read the newest 50.

- OpenAI Agents SDK: ``agents.extensions.memory.sqlalchemy_session.SQLAlchemySession``
  (SQLAlchemy async engine on asyncpg), tables ``agent_sessions`` / ``agent_messages``.
- Google ADK: ``google.adk.sessions.DatabaseSessionService`` (SQLAlchemy async on asyncpg),
  tables ``sessions`` / ``events`` / ``app_states`` / ``user_states``.

Both are installed by the ``bench`` extra (``pip install -e .[bench]``); a peer that fails to
import or to run is skipped with a printed message. Each peer's session is seeded through its
own API with ``scale.peer_messages`` items, and compared with the app reading a session of the
same size.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from collections.abc import Awaitable, Callable
from typing import Any

from .db import database_url
from .generate import Scale

__all__ = ["run_peers"]

TEXT = "Please look at the failing test in the billing module and propose a fix."


async def _median_ms(call: Callable[[], Awaitable[Any]], reps: int, warmup: int = 5) -> float:
    for _ in range(warmup):
        await call()
    times = []
    for _ in range(reps):
        started = time.perf_counter()
        await call()
        times.append(time.perf_counter() - started)
    return statistics.median(times) * 1000


def _async_url(scale: Scale) -> str:
    return database_url(scale.database).replace("postgres://", "postgresql+asyncpg://", 1)


async def _openai_agents(scale: Scale, reps: int, say) -> dict[str, Any]:
    from agents.extensions.memory.sqlalchemy_session import SQLAlchemySession
    from sqlalchemy.ext.asyncio import create_async_engine

    engine = create_async_engine(_async_url(scale))
    try:
        session = SQLAlchemySession(f"bench-{scale.name}", engine=engine, create_tables=True)
        await session.clear_session()
        started = time.perf_counter()
        for start in range(0, scale.peer_messages, 1000):
            await session.add_items(
                [
                    {"role": "user" if n % 2 == 0 else "assistant", "content": f"{TEXT} {n}"}
                    for n in range(start, min(start + 1000, scale.peer_messages))
                ]
            )
        say(
            f"   openai-agents: seeded {scale.peer_messages:,} items in "
            f"{time.perf_counter() - started:.1f}s"
        )
        recent = await _median_ms(lambda: session.get_items(limit=50), reps)
        append = await _median_ms(
            lambda: session.add_items([{"role": "user", "content": TEXT}]), reps
        )
        assert len(await session.get_items(limit=50)) == 50
        return {"append_ms": append, "recent_ms": recent}
    finally:
        await engine.dispose()


async def _google_adk(scale: Scale, reps: int, say) -> dict[str, Any]:
    from google.adk.events import Event
    from google.adk.sessions import DatabaseSessionService
    from google.adk.sessions.base_session_service import GetSessionConfig
    from google.genai import types

    service = DatabaseSessionService(db_url=_async_url(scale))
    try:
        app, user, sid = "bench", "u0", f"bench-{scale.name}"
        old = await service.get_session(app_name=app, user_id=user, session_id=sid)
        if old is not None:
            await service.delete_session(app_name=app, user_id=user, session_id=sid)
        session = await service.create_session(app_name=app, user_id=user, session_id=sid)

        def event(n: int) -> Event:
            role = "user" if n % 2 == 0 else "model"
            return Event(
                author="user" if role == "user" else "agent",
                invocation_id="bench",
                content=types.Content(role=role, parts=[types.Part(text=f"{TEXT} {n}")]),
            )

        started = time.perf_counter()
        for n in range(scale.peer_messages):
            await service.append_event(session, event(n))
        session.events.clear()  # keep the in-memory copy small; storage keeps every event
        say(
            f"   google-adk: seeded {scale.peer_messages:,} events in "
            f"{time.perf_counter() - started:.1f}s"
        )
        config = GetSessionConfig(num_recent_events=50)

        async def read() -> Any:
            return await service.get_session(
                app_name=app, user_id=user, session_id=sid, config=config
            )

        recent = await _median_ms(read, reps)
        counter = iter(range(10**9))

        async def append() -> Any:
            result = await service.append_event(session, event(next(counter)))
            session.events.clear()
            return result

        append_ms = await _median_ms(append, reps)
        assert len((await read()).events) == 50
        return {"append_ms": append_ms, "recent_ms": recent}
    finally:
        await service.close()


def run_peers(
    scale: Scale,
    *,
    reps: int,
    app_append_ms: float | None,
    app_recent_ms: float | None,
    say: Callable[[str], None] = print,
) -> dict[str, dict[str, Any]]:
    """Time each peer; ratios are peer / app (above 1: the peer is slower).

    Returns:
        ``{peer: {"append_ms", "recent_ms", "append_ratio", "recent_ratio"}}`` or
        ``{peer: {"skipped": reason}}``.
    """
    results: dict[str, dict[str, Any]] = {}
    for name, runner in (
        ("openai-agents SQLAlchemySession", _openai_agents),
        ("google-adk DatabaseSessionService", _google_adk),
    ):
        try:
            item = asyncio.run(runner(scale, reps, say))
        except ImportError as exc:
            say(f"   {name}: skipped, not installed ({exc}); pip install -e .[bench]")
            results[name] = {"skipped": f"not installed ({exc.name or exc})"}
            continue
        except Exception as exc:  # a peer's failure must not end the run
            say(f"   {name}: skipped, failed: {exc!r}")
            results[name] = {"skipped": f"failed: {type(exc).__name__}: {exc}"[:200]}
            continue
        if app_append_ms:
            item["append_ratio"] = item["append_ms"] / app_append_ms
        if app_recent_ms:
            item["recent_ratio"] = item["recent_ms"] / app_recent_ms
        results[name] = item
        say(
            f"   {name}: append {item['append_ms']:.3f} ms ({item.get('append_ratio', 0):.2f}× app), "
            f"newest 50 {item['recent_ms']:.3f} ms ({item.get('recent_ratio', 0):.2f}× app)"
        )
    return results
