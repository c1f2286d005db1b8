"""Benchmark: the context read of a 100,000-message session (docs/design.md §16.4).

Prints figures; it is not a test. Run from the repository root as a module (with ``bench/``
itself on ``sys.path``, its ``http.py`` would shadow the standard library's):

    python -m bench.bench_context [--messages 100000] [--max-tokens 8000] [--reps 200]

``BENCH_DATABASE_URL`` names the PostgreSQL database (default
``postgres://postgres@127.0.0.1:5432/cortex_bench_context``); it is created and migrated if
missing, and the session this script writes is removed at the end.

- **context read**: ``services.context_messages(max_tokens=…)`` of the session, uncompacted
  and after a compaction through its middle, against the best raw SQL for the same rows sent
  with psycopg (``bench.floor.context_window``): medians of ``--reps`` paired calls, and the
  ratio (target <= 1.5x).
- **plan**: ``EXPLAIN (ANALYZE, BUFFERS)`` of the app's statement, with the rows its scans of
  the message table read: the messages returned plus the one past the budget (and the
  summary), twice (walked, then fetched), however long the session.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

from bench.bench_lifecycle import setup_django

DEFAULT_URL = "postgres://postgres@127.0.0.1:5432/cortex_bench_context"
SCOPE = "org=bench-context/user=1"
AGENT = "bench-agent"


def build_session(messages: int):
    """A session of ``messages`` alternating user/assistant messages (~200 bytes of text
    each, ``token_count`` as the default estimate gives it), written by one statement."""
    from django.db import connection

    from cortex_sessions import services
    from cortex_sessions.models import Message, Session
    from cortex_sessions.services.context import refresh_context_tokens
    from cortex_sessions.tokens import count_tokens

    session = services.create_session(scope=SCOPE, agent_id=AGENT, title="context source")
    text = "message 00000 " + "lorem ipsum " * 16
    tokens = count_tokens("user", [{"type": "text", "text": text}])
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO cortex_sessions_message (session_id, agent_id, scope, seq, role, source, "
            "content, metadata, created_at, token_count) SELECT %s, %s, %s, g, "
            "CASE WHEN g %% 2 = 1 THEN 'user' ELSE 'assistant' END, "
            "CASE WHEN g %% 2 = 1 THEN 'user' ELSE 'host' END, "
            "jsonb_build_array(jsonb_build_object('type', 'text', 'text', "
            "'message ' || lpad(g::text, 5, '0') || ' ' || repeat('lorem ipsum ', 16))), "
            "'{}'::jsonb, now(), %s FROM generate_series(1, %s) AS g",
            [session.pk, AGENT, SCOPE, tokens, messages],
        )
        cursor.execute("ANALYZE cortex_sessions_message")
    Session.objects.filter(pk=session.pk).update(message_count=messages, last_seq=messages)
    session = Session.objects.get(pk=session.pk)
    refresh_context_tokens(session, using="default")
    assert Message.objects.filter(session=session).count() == messages
    return session


def paired(app, floor, reps: int) -> tuple[float, float]:
    """Median ms of ``app()`` and ``floor()``, called alternately ``reps`` times each."""
    app_ms, floor_ms = [], []
    for _ in range(10):
        app(), floor()
    for _ in range(reps):
        started = time.perf_counter()
        app()
        app_ms.append((time.perf_counter() - started) * 1000)
        started = time.perf_counter()
        floor()
        floor_ms.append((time.perf_counter() - started) * 1000)
    return statistics.median(app_ms), statistics.median(floor_ms)


def rows_read(plan: dict, table: str) -> int:
    """Rows the plan's scans of ``table`` returned, over all their loops."""
    total = plan["Actual Rows"] * plan["Actual Loops"] if plan.get("Relation Name") == table else 0
    return total + sum(rows_read(child, table) for child in plan.get("Plans", []))


def explain(session_id, max_tokens: int) -> tuple[str, int]:
    """The app statement's ``EXPLAIN (ANALYZE, BUFFERS)`` text and its message rows read."""
    from django.db import connection

    from cortex_sessions.scope import canonical_of
    from cortex_sessions.services._pg_context import context_params, context_sql

    params = context_params(canonical_of(SCOPE), session_id, max_tokens)
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN (ANALYZE, BUFFERS) " + context_sql(), params)
        text = "\n".join(row[0] for row in cursor.fetchall())
        cursor.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + context_sql(), params)
        plan = cursor.fetchone()[0][0]["Plan"]
    return text, rows_read(plan, "cortex_sessions_message")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--max-tokens", type=int, default=8000)
    parser.add_argument("--reps", type=int, default=200)
    args = parser.parse_args()
    url = os.environ.get("BENCH_DATABASE_URL", DEFAULT_URL)
    setup_django(url)
    import psycopg

    from bench import floor
    from cortex_sessions import services

    session = build_session(args.messages)
    base = psycopg.connect(url, autocommit=True)
    try:
        for label in ("uncompacted", f"compacted through {args.messages // 2}"):
            if label != "uncompacted":
                services.compact_session(
                    scope=SCOPE,
                    session_id=session.pk,
                    through_seq=args.messages // 2,
                    summary="The first half, summarized. " * 40,
                )
            window = services.context_messages(
                scope=SCOPE, session_id=session.pk, max_tokens=args.max_tokens
            )
            rows = floor.context_window(
                base, scope=SCOPE, session_id=session.pk, max_tokens=args.max_tokens
            )
            assert [m.pk for m in window.messages] == [row[2] for row in rows], "not the same rows"
            app_ms, floor_ms = paired(
                lambda: services.context_messages(
                    scope=SCOPE, session_id=session.pk, max_tokens=args.max_tokens
                ),
                lambda: floor.context_window(
                    base, scope=SCOPE, session_id=session.pk, max_tokens=args.max_tokens
                ),
                args.reps,
            )
            plan, read = explain(session.pk, args.max_tokens)
            print(
                f"context read of a {args.messages:,}-message session ({label}), "
                f"max_tokens={args.max_tokens}: {len(window.messages)} messages, "
                f"{window.tokens} tokens; app {app_ms:.3f} ms, floor {floor_ms:.3f} ms, "
                f"ratio {app_ms / floor_ms:.2f}x (target <= 1.5x); message rows read: {read}"
            )
            print(plan)
            print()
    finally:
        base.close()
        services.delete_session(scope=SCOPE, session_id=session.pk)


if __name__ == "__main__":
    main()
