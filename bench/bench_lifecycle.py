"""Benchmark: forking a 100,000-message session and the metadata filter's plan
(docs/design.md §11.1, §11.3).

Prints figures; it is not a test. Run from the repository root:

    python -m bench.bench_lifecycle [--messages 100000] [--runs 5] [--sessions 20000]

``BENCH_DATABASE_URL`` names the PostgreSQL database (default
``postgres://postgres@127.0.0.1:5432/cortex_bench_lifecycle``); it is created and migrated if
missing, and the rows this script writes are removed at the end.

- **fork**: ``fork_session`` of the whole session and of its first half, median of ``--runs``
  runs: wall time, queries, and the peak Python memory (``tracemalloc``) during the call — the
  copy is one ``INSERT … SELECT``, so neither grows with the session. For comparison, the naive
  fork (read every message into Python, ``bulk_create`` the copies) on the same session.
- **metadata filter**: ``--sessions`` sessions with metadata, then ``EXPLAIN ANALYZE`` of the
  count with ``metadata={"team": …}``, showing the GIN (``jsonb_path_ops``) index in the plan.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import tracemalloc
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as ``python -m bench.…``

DEFAULT_URL = "postgres://postgres@127.0.0.1:5432/cortex_bench_lifecycle"
SCOPE = "org=bench-lifecycle/user=1"
AGENT = "bench-agent"


def setup_django(url: str) -> None:
    """Configure a minimal Django project on ``url``, creating and migrating the database."""
    import dj_database_url
    import django
    import psycopg
    from django.conf import settings
    from django.core.management import call_command

    database = dj_database_url.parse(url, conn_max_age=0)
    if database["ENGINE"] != "django.db.backends.postgresql":
        raise SystemExit("The benchmark needs PostgreSQL (BENCH_DATABASE_URL=postgres://...).")
    admin = {
        "host": database.get("HOST") or None,
        "port": database.get("PORT") or None,
        "user": database.get("USER") or None,
        "password": database.get("PASSWORD") or None,
        "dbname": "postgres",
    }
    with psycopg.connect(**{k: v for k, v in admin.items() if v}, autocommit=True) as conn:
        exists = conn.execute(
            "SELECT 1 FROM pg_database WHERE datname = %s", [database["NAME"]]
        ).fetchone()
        if not exists:
            conn.execute(f'CREATE DATABASE "{database["NAME"]}"')
    settings.configure(
        DATABASES={"default": database},
        INSTALLED_APPS=["django.contrib.contenttypes", "django.contrib.auth", "cortex_sessions"],
        USE_TZ=True,
        TIME_ZONE="UTC",
        SECRET_KEY="cortex-sessions-bench",
        DEFAULT_AUTO_FIELD="django.db.models.BigAutoField",
    )
    django.setup()
    call_command("migrate", verbosity=0)


def build_source(messages: int):
    """A session of ``messages`` alternating user/assistant messages (~200 bytes of text each),
    written by one SQL statement, with its counters set to match."""
    from django.db import connection

    from cortex_sessions import services
    from cortex_sessions.models import Session

    source = services.create_session(scope=SCOPE, agent_id=AGENT, title="fork source")
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO cortex_sessions_message (session_id, agent_id, scope, seq, role, source, "
            "content, metadata, created_at) SELECT %s, %s, %s, g, "
            "CASE WHEN g %% 2 = 1 THEN 'user' ELSE 'assistant' END, "
            "CASE WHEN g %% 2 = 1 THEN 'user' ELSE 'host' END, "
            "jsonb_build_array(jsonb_build_object('type', 'text', 'text', "
            "'message ' || g || ' ' || repeat('lorem ipsum ', 16))), "
            "jsonb_build_object('n', g), now() FROM generate_series(1, %s) AS g",
            [source.pk, AGENT, SCOPE, messages],
        )
        cursor.execute("ANALYZE cortex_sessions_message")
    last = f"message {messages} " + "lorem ipsum " * 16
    Session.objects.filter(pk=source.pk).update(
        message_count=messages, last_seq=messages, last_message=last[:280]
    )
    return Session.objects.get(pk=source.pk)


def time_fork(source, up_to_seq: int | None, runs: int) -> dict:
    """Median ms, queries and peak Python memory of ``fork_session`` over ``runs`` runs."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from cortex_sessions import services
    from cortex_sessions.models import Message, Session

    times, peaks, queries, counts = [], [], [], []
    for _ in range(runs):
        tracemalloc.start()
        with CaptureQueriesContext(connection) as captured:
            started = time.perf_counter()
            fork = services.fork_session(scope=SCOPE, session_id=source.pk, up_to_seq=up_to_seq)
            times.append((time.perf_counter() - started) * 1000)
        peaks.append(tracemalloc.get_traced_memory()[1])
        tracemalloc.stop()
        queries.append(len(captured.captured_queries))
        stored = Session.objects.get(pk=fork.pk)
        counts.append((stored.message_count, Message.objects.filter(session=fork).count()))
        services.delete_session(scope=SCOPE, session_id=fork.pk)
    assert all(count == rows for count, rows in counts), counts
    return {
        "ms": statistics.median(times),
        "queries": max(queries),
        "peak_kib": max(peaks) / 1024,
        "copied": counts[0][1],
    }


def time_naive_fork(source) -> dict:
    """The naive fork: every message read into Python and written back with ``bulk_create``."""
    from django.db import transaction

    from cortex_sessions.models import Message, Session

    tracemalloc.start()
    started = time.perf_counter()
    with transaction.atomic():
        fork = Session.objects.create(agent_id=AGENT, scope=SCOPE, title="naive fork")
        rows = list(Message.objects.filter(session=source).order_by("seq"))
        Message.objects.bulk_create(
            (
                Message(
                    session=fork,
                    agent_id=row.agent_id,
                    scope=row.scope,
                    seq=index,
                    role=row.role,
                    source=row.source,
                    content=row.content,
                    metadata=row.metadata,
                    created_at=row.created_at,
                )
                for index, row in enumerate(rows, start=1)
            ),
            batch_size=2000,
        )
    elapsed = (time.perf_counter() - started) * 1000
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    Session.objects.filter(pk=fork.pk).delete()
    return {"ms": elapsed, "peak_kib": peak / 1024}


def metadata_plan(sessions: int) -> tuple[str, float, int]:
    """``EXPLAIN ANALYZE`` of a metadata-filtered count over ``sessions`` sessions."""
    from django.db import connection, transaction
    from django.test.utils import CaptureQueriesContext

    from cortex_sessions import services
    from cortex_sessions.models import Session

    Session.objects.bulk_create(
        (
            Session(
                agent_id=AGENT,
                scope=SCOPE,
                title=f"s{n}",
                metadata={"team": f"team-{n % 500}", "n": n, "tags": ["a", "b"]},
            )
            for n in range(sessions)
        ),
        batch_size=5000,
    )
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE cortex_sessions_session")
    filters = services.SessionFilters(metadata={"team": "team-7"})
    with transaction.atomic(), CaptureQueriesContext(connection) as captured:
        started = time.perf_counter()
        count = services.count_sessions(scope=SCOPE, filters=filters)
        elapsed = (time.perf_counter() - started) * 1000
    sql = captured.captured_queries[-1]["sql"]
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN (ANALYZE, COSTS OFF) " + sql)
        plan = "\n".join(row[0] for row in cursor.fetchall())
    return plan, elapsed, count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--sessions", type=int, default=20_000)
    parser.add_argument("--no-naive", action="store_true", help="skip the naive fork")
    args = parser.parse_args()
    setup_django(os.environ.get("BENCH_DATABASE_URL", DEFAULT_URL))

    from cortex_sessions.models import Session

    Session.objects.filter(scope=SCOPE).delete()
    try:
        print(f"-- building a source session of {args.messages:,} messages")
        source = build_source(args.messages)
        print(f"-- fork (median of {args.runs} runs)")
        print("| fork | copied | ms | queries | peak Python memory |")
        print("|---|---:|---:|---:|---:|")
        for label, up_to in (("whole", None), ("first half", args.messages // 2)):
            result = time_fork(source, up_to, args.runs)
            print(
                f"| {label} | {result['copied']:,} | {result['ms']:.0f} | {result['queries']} | "
                f"{result['peak_kib']:.0f} KiB |"
            )
        small = build_source(10)
        result = time_fork(small, None, args.runs)
        print(
            f"| whole, 10-message source | {result['copied']} | {result['ms']:.1f} | "
            f"{result['queries']} | {result['peak_kib']:.0f} KiB |"
        )
        if not args.no_naive:
            naive = time_naive_fork(source)
            print(
                f"| naive (load + bulk_create) | {args.messages:,} | {naive['ms']:.0f} | - | "
                f"{naive['peak_kib'] / 1024:.0f} MiB |"
            )
        print(f"-- metadata filter over {args.sessions:,} sessions")
        plan, elapsed, count = metadata_plan(args.sessions)
        print(
            "count_sessions(filters=SessionFilters(metadata={'team': 'team-7'})) "
            f"= {count} in {elapsed:.1f} ms"
        )
        print(plan)
    finally:
        Session.objects.filter(scope=SCOPE).delete()


if __name__ == "__main__":
    main()
