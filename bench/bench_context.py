"""Benchmark: the context read of a 100,000-message session (docs/design.md §16.4).

Prints figures; it is not a test. Run from the repository root as a module (with ``bench/``
itself on ``sys.path``, its ``http.py`` would shadow the standard library's):

    python -m bench.bench_context [--messages 100000] [--max-tokens 8000] [--reps 200]

``BENCH_DATABASE_URL`` names the PostgreSQL database (default
``postgres://postgres@127.0.0.1:5432/cortex_bench_context``); it is created and migrated if
missing, and the session this script writes is removed at the end.

- **context read**: ``services.context_messages(max_tokens=…)`` of the session, uncompacted
  and after a compaction through its middle, against the best raw SQL for the same rows sent
  with psycopg (``bench.floor.context_window``, auto-prepared after five runs as psycopg does):
  medians of ``--reps`` interleaved calls, and the ratio (target <= 1.5x); the app with
  ``PREPARED_STATEMENTS`` too, and each side's mean CPU time in this process (the Python
  work, which a busy database server does not inflate).
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


def paired(calls: dict, reps: int) -> dict[str, tuple[float, float]]:
    """``{name: (median wall ms, mean CPU ms of this process)}`` of each of ``calls``, called
    in turn ``reps`` times each. The CPU time is the Python side alone (building the rows),
    which a loaded database server does not inflate as it does the wall time."""
    wall: dict[str, list[float]] = {name: [] for name in calls}
    cpu: dict[str, list[float]] = {name: [] for name in calls}
    for _ in range(10):
        for call in calls.values():
            call()
    for _ in range(reps):
        for name, call in calls.items():
            started, used = time.perf_counter(), time.process_time()
            call()
            cpu[name].append((time.process_time() - used) * 1000)
            wall[name].append((time.perf_counter() - started) * 1000)
    return {name: (statistics.median(wall[name]), statistics.mean(cpu[name])) for name in calls}


def prepared(call):
    """``call`` run with ``CORTEX_SESSIONS["PREPARED_STATEMENTS"] = True`` (the settings dict
    changed in place around it, as ``bench.run.prepared`` does)."""
    from django.conf import settings

    def run():
        settings.CORTEX_SESSIONS["PREPARED_STATEMENTS"] = True
        try:
            return call()
        finally:
            settings.CORTEX_SESSIONS["PREPARED_STATEMENTS"] = False

    return run


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
    from django.conf import settings

    settings.CORTEX_SESSIONS = {"PREPARED_STATEMENTS": False}  # before the app reads it

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

            def app():
                return services.context_messages(
                    scope=SCOPE, session_id=session.pk, max_tokens=args.max_tokens
                )

            times = paired(
                {
                    "app": app,
                    "floor": lambda: floor.context_window(
                        base, scope=SCOPE, session_id=session.pk, max_tokens=args.max_tokens
                    ),
                    "prepared": prepared(app),
                },
                args.reps,
            )
            (app_ms, app_cpu), (floor_ms, floor_cpu) = times["app"], times["floor"]
            prepared_ms = times["prepared"][0]
            plan, read = explain(session.pk, args.max_tokens)
            print(
                f"context read of a {args.messages:,}-message session ({label}), "
                f"max_tokens={args.max_tokens}: {len(window.messages)} messages, "
                f"{window.tokens} tokens; app {app_ms:.3f} ms, floor {floor_ms:.3f} ms, "
                f"ratio {app_ms / floor_ms:.2f}x (target <= 1.5x); app with "
                f"PREPARED_STATEMENTS {prepared_ms:.3f} ms ({prepared_ms / floor_ms:.2f}x); "
                f"Python CPU a call: app {app_cpu:.3f} ms, floor {floor_cpu:.3f} ms; "
                f"message rows read: {read}"
            )
            print(plan)
            print()
    finally:
        base.close()
        services.delete_session(scope=SCOPE, session_id=session.pk)


if __name__ == "__main__":
    main()
