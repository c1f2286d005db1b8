"""Peer session stores on the same PostgreSQL database: append one item, read the newest 50.

- OpenAI Agents SDK: ``agents.extensions.memory.sqlalchemy_session.SQLAlchemySession``
  (SQLAlchemy async engine on asyncpg), tables ``agent_sessions`` / ``agent_messages``.
- Google ADK: ``google.adk.sessions.DatabaseSessionService`` (SQLAlchemy async on asyncpg),
  tables ``sessions`` / ``events`` / ``app_states`` / ``user_states``.

Both are installed by the ``bench`` extra (``pip install -e .[bench]``); a peer that fails to
import or to run is skipped with a printed message. Each peer's session is seeded through its
own API with ``scale.peer_messages`` items, and the app's own session (title ``bench: peer
items``, outside the sampled data) is seeded with the same items through
``services.append_messages``, so both read the same texts. The database is then analyzed (as
autovacuum would have done: the bench server runs without it), and each operation is timed
call by call against the app's (``services.append_messages`` of one message,
``services.list_messages(limit=50)``), alternating which goes first.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import time
from collections.abc import Awaitable, Callable
from typing import Any

from .db import database_url
from .generate import Scale

__all__ = ["run_peers"]

TEXT = "Please look at the failing test in the billing module and propose a fix."
APP_TITLE = "bench: peer items"
APP_SCOPE = "org=bench-peers/user=1"


def _text(n: int) -> str:
    return f"{TEXT} {n}"


def _seed_app(items: int) -> Any:
    """The app's session holding the same ``items`` texts as the peers' (emptied first)."""
    from cortex_sessions import services
    from cortex_sessions.models import Session

    session = Session.objects.filter(title=APP_TITLE).first() or services.create_session(
        scope=APP_SCOPE, agent_id="bench-peers", title=APP_TITLE
    )
    services.clear_messages(scope=APP_SCOPE, session_id=session.pk)
    for start in range(0, items, 1000):
        services.append_messages(
            scope=APP_SCOPE,
            session_id=session.pk,
            messages=[
                {"role": "user" if n % 2 == 0 else "assistant", "content": _text(n)}
                for n in range(start, min(start + 1000, items))
            ],
        )
    return session.pk


def _analyze() -> None:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")


async def _pair_ms(
    app: Callable[[], Any], peer: Callable[[], Awaitable[Any]], reps: int, warmup: int = 5
) -> tuple[float, float]:
    """Median milliseconds of ``app()`` (a blocking call) and ``await peer()``, call by call,
    alternating which goes first."""
    for _ in range(warmup):
        app()
        await peer()
    app_times, peer_times = [], []
    for rep in range(reps):
        for which in ("app", "peer") if rep % 2 == 0 else ("peer", "app"):
            started = time.perf_counter()
            if which == "app":
                app()
            else:
                await peer()
            (app_times if which == "app" else peer_times).append(time.perf_counter() - started)
    return statistics.median(app_times) * 1000, statistics.median(peer_times) * 1000


def _app_calls(session_id: Any) -> tuple[Callable[[], Any], Callable[[], Any]]:
    """The app's append of one message and read of the newest 50, on its peer-items session."""
    from cortex_sessions import services

    def append() -> Any:
        return services.append_messages(
            scope=APP_SCOPE, session_id=session_id, messages=[{"role": "user", "content": TEXT}]
        )

    def recent() -> Any:
        return services.list_messages(scope=APP_SCOPE, session_id=session_id, limit=50)

    return append, recent


def _async_url(scale: Scale) -> str:
    return database_url(scale.database).replace("postgres://", "postgresql+asyncpg://", 1)


async def _openai_agents(scale: Scale, reps: int, say, app_session: Any) -> dict[str, Any]:
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
                    {"role": "user" if n % 2 == 0 else "assistant", "content": _text(n)}
                    for n in range(start, min(start + 1000, scale.peer_messages))
                ]
            )
        say(
            f"   openai-agents: seeded {scale.peer_messages:,} items in "
            f"{time.perf_counter() - started:.1f}s"
        )
        _analyze()
        app_append, app_recent = _app_calls(app_session)
        app_recent_ms, recent = await _pair_ms(
            app_recent, lambda: session.get_items(limit=50), reps
        )
        app_append_ms, append = await _pair_ms(
            app_append, lambda: session.add_items([{"role": "user", "content": TEXT}]), reps
        )
        assert len(await session.get_items(limit=50)) == 50
        return {
            "append_ms": append,
            "recent_ms": recent,
            "app_append_ms": app_append_ms,
            "app_recent_ms": app_recent_ms,
        }
    finally:
        await engine.dispose()


async def _google_adk(scale: Scale, reps: int, say, app_session: Any) -> dict[str, Any]:
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
                content=types.Content(role=role, parts=[types.Part(text=_text(n))]),
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

        _analyze()
        app_append, app_recent = _app_calls(app_session)
        app_recent_ms, recent = await _pair_ms(app_recent, read, reps)
        counter = iter(range(10**9))

        async def append() -> Any:
            result = await service.append_event(session, event(next(counter)))
            session.events.clear()
            return result

        app_append_ms, append_ms = await _pair_ms(app_append, append, reps)
        assert len((await read()).events) == 50
        return {
            "append_ms": append_ms,
            "recent_ms": recent,
            "app_append_ms": app_append_ms,
            "app_recent_ms": app_recent_ms,
        }
    finally:
        await service.close()


def run_peers(
    scale: Scale, *, reps: int, say: Callable[[str], None] = print
) -> dict[str, dict[str, Any]]:
    """Time each peer against the app on the same items; ratios are peer / app (above 1: the
    peer is slower).

    Returns:
        ``{peer: {"append_ms", "recent_ms", "app_append_ms", "app_recent_ms", "append_ratio",
        "recent_ratio"}}`` or ``{peer: {"skipped": reason}}``.
    """
    app_session = _seed_app(scale.peer_messages)
    say(f"   app: seeded {scale.peer_messages:,} items into {APP_TITLE!r}")
    results: dict[str, dict[str, Any]] = {}
    for name, runner in (
        ("openai-agents SQLAlchemySession", _openai_agents),
        ("google-adk DatabaseSessionService", _google_adk),
    ):
        # The app's calls are blocking and run on the event loop between the peer's awaits,
        # so the two are timed call by call (no thread hop added to either); Django refuses
        # that unless told it is intended.
        os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
        try:
            item = asyncio.run(runner(scale, reps, say, app_session))
        except ImportError as exc:
            say(f"   {name}: skipped, not installed ({exc}); pip install -e .[bench]")
            results[name] = {"skipped": f"not installed ({exc.name or exc})"}
            continue
        except Exception as exc:  # a peer's failure must not end the run
            say(f"   {name}: skipped, failed: {exc!r}")
            results[name] = {"skipped": f"failed: {type(exc).__name__}: {exc}"[:200]}
            continue
        finally:
            os.environ.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
        item["append_ratio"] = item["append_ms"] / item["app_append_ms"]
        item["recent_ratio"] = item["recent_ms"] / item["app_recent_ms"]
        results[name] = item
        say(
            f"   {name}: append {item['append_ms']:.3f} ms vs app {item['app_append_ms']:.3f} "
            f"({item['append_ratio']:.2f}× app), newest 50 {item['recent_ms']:.3f} ms vs app "
            f"{item['app_recent_ms']:.3f} ({item['recent_ratio']:.2f}× app)"
        )
    return results
