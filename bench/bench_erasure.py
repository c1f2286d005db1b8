"""Benchmark: erasing a 100,000-session scope and exporting a 100,000-message scope
(docs/design.md §18.2, §18.3).

Prints figures; it is not a test. Run from the repository root:

    python -m bench.bench_erasure [--sessions 100000] [--messages 5] [--others 100000]
        [--batch-size 500] [--export-messages 100000]

``BENCH_DATABASE_URL`` names the PostgreSQL database (default
``postgres://postgres@127.0.0.1:5432/cortex_bench_erasure``); it is created and migrated if
missing, and the rows this script writes are removed at the end.

- **erasure**: ``--sessions`` sessions of ``--messages`` messages each, with an import record
  and an ``Idempotency-Key`` record per 100 sessions, at ``org=erase/…`` under 1,000 user scopes
  (the shape of one org of the ``large`` scale: 100,000 of its 1,000,000 sessions), beside
  ``--others`` sessions of another org; then ``erase_scope``: wall time, rows deleted per
  second, transactions, and the longest transaction (the longest any row lock is held), with
  the other org checked untouched.
- **export**: a scope of ``--export-messages`` messages (1,000 sessions) streamed by
  ``export_conversations`` (what ``GET /sessions/export/`` streams) to nowhere: the process's
  resident memory before and at its peak during the export, and Python's own peak
  (``tracemalloc``), neither of which grows with the scope.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import resource
import statistics
import time
import tracemalloc
from collections.abc import Iterator
from typing import Any

from bench.bench_lifecycle import setup_django

DEFAULT_URL = "postgres://postgres@127.0.0.1:5432/cortex_bench_erasure"
ERASED = "org=erase"
OTHER = "org=keep"
EXPORTED = "org=export"


def _fill(scope_prefix: str, sessions: int, messages: int, users: int) -> None:
    """``sessions`` sessions under ``users`` user scopes of ``scope_prefix``, ``messages``
    messages each, written by SQL (counters consistent)."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO cortex_sessions_session (id, agent_id, scope, title, metadata, "
            "message_count, last_message, last_seq, is_default, backfilled_by, created_at, "
            "updated_at, legal_hold) SELECT gen_random_uuid(), 'bench', "
            "%s || '/user=' || (g %% %s), 'bench ' || g, '{}'::jsonb, %s, 'last', %s, false, "
            "'', now(), now(), false FROM generate_series(1, %s) AS g",
            [scope_prefix, users, messages, messages, sessions],
        )
        cursor.execute(
            "INSERT INTO cortex_sessions_message (session_id, agent_id, scope, seq, role, "
            "source, content, metadata, created_at) SELECT s.id, s.agent_id, s.scope, m, 'user', "
            "'user', jsonb_build_array(jsonb_build_object('type', 'text', 'text', "
            "'message ' || m || ' ' || repeat('lorem ipsum ', 8))), '{}'::jsonb, now() "
            "FROM cortex_sessions_session s, generate_series(1, %s) AS m "
            "WHERE s.scope >= %s AND s.scope < %s",
            [messages, scope_prefix, scope_prefix + "0"],
        )
        cursor.execute(
            "INSERT INTO cortex_sessions_importedconversation (session_id, agent_id, scope, "
            "external_id, imported_at) SELECT id, agent_id, scope, 'ext-' || id, now() "
            "FROM cortex_sessions_session WHERE scope >= %s AND scope < %s "
            "AND title LIKE '%%00'",
            [scope_prefix, scope_prefix + "0"],
        )
        cursor.execute(
            "INSERT INTO cortex_sessions_idempotencykey (scope, endpoint, key, fingerprint, "
            "status_code, response, created_at) SELECT %s || '/user=' || g, 'bench', 'k' || g, "
            "'f', 201, '{}', now() FROM generate_series(1, %s) AS g",
            [scope_prefix, max(1, sessions // 100)],
        )
        cursor.execute("ANALYZE")


def _clean() -> None:
    from cortex_sessions.models import Erasure, IdempotencyKey, Message, Session
    from cortex_sessions.scope import scope_q

    for scope in (ERASED, OTHER, EXPORTED):
        Message.objects.filter(scope_q(scope)).delete()
        Session.objects.within(scope).delete()
        IdempotencyKey.objects.filter(scope_q(scope)).delete()
    Erasure.objects.filter(scope=ERASED).delete()


@contextlib.contextmanager
def _timed_transactions(durations: list[float]) -> Iterator[None]:
    """Record the wall time of every ``transaction.atomic`` block the erasure opens."""
    from django.db import transaction

    import cortex_sessions.services.erasure as erasure

    real = erasure.transaction

    class Timed:
        @staticmethod
        @contextlib.contextmanager
        def atomic(using: Any = None) -> Iterator[None]:
            started = time.perf_counter()
            with transaction.atomic(using=using):
                yield
            durations.append(time.perf_counter() - started)

    erasure.transaction = Timed  # type: ignore[assignment]
    try:
        yield
    finally:
        erasure.transaction = real


def bench_erasure(sessions: int, messages: int, others: int, batch_size: int) -> None:
    """Fill, erase, print."""
    from cortex_sessions import services
    from cortex_sessions.models import Session

    print(f"-- filling {ERASED}: {sessions:,} sessions x {messages} messages; {OTHER}: {others:,}")
    started = time.perf_counter()
    _fill(ERASED, sessions, messages, users=1000)
    _fill(OTHER, others, messages, users=1000)
    print(f"-- filled in {time.perf_counter() - started:.0f}s")
    kept = Session.objects.within(OTHER).count()
    durations: list[float] = []
    with _timed_transactions(durations):
        started = time.perf_counter()
        record = services.erase_scope(scope=ERASED, batch_size=batch_size, requested_by="bench")
        elapsed = time.perf_counter() - started
    rows = sum(record.counts.values())
    print(f"-- erase_scope({ERASED!r}, batch_size={batch_size})")
    print("| rows deleted | seconds | rows/s | sessions/s | transactions | longest | median |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    print(
        f"| {rows:,} | {elapsed:.1f} | {rows / elapsed:,.0f} | "
        f"{record.counts.get('cortex_sessions.Session', 0) / elapsed:,.0f} | {len(durations):,} | "
        f"{max(durations) * 1000:.0f} ms | {statistics.median(durations) * 1000:.1f} ms |"
    )
    print(f"counts: {dict(sorted(record.counts.items()))}")
    assert Session.objects.within(OTHER).count() == kept, "another org was touched"
    assert not Session.objects.within(ERASED).exists()


def _rss_kib() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def bench_export(messages: int) -> None:
    """Fill a scope of ``messages`` messages (1,000 sessions) and stream its export."""
    from cortex_sessions.transfer import export_conversations

    per_session = max(1, messages // 1000)
    _fill(EXPORTED, 1000, per_session, users=10)
    before = _rss_kib()
    peak = before
    tracemalloc.start()
    started = time.perf_counter()
    written = lines = 0
    for piece in export_conversations(scope=EXPORTED):
        written += len(piece.encode("utf-8"))
        lines += piece.count("\n")
        if lines % 50 == 0:
            peak = max(peak, _rss_kib())
    elapsed = time.perf_counter() - started
    _, python_peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    peak = max(peak, _rss_kib())
    print(f"-- export of {EXPORTED}: {lines:,} sessions, {1000 * per_session:,} messages")
    print("| bytes | seconds | RSS before | RSS peak | Python peak (tracemalloc) |")
    print("|---:|---:|---:|---:|---:|")
    print(
        f"| {written / 2**20:,.0f} MiB | {elapsed:.1f} | {before / 1024:.0f} MiB | "
        f"{peak / 1024:.0f} MiB | {python_peak / 2**20:.1f} MiB |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=100_000)
    parser.add_argument("--messages", type=int, default=5, help="messages per session")
    parser.add_argument("--others", type=int, default=100_000)
    parser.add_argument("--batch-size", type=int, default=500)
    parser.add_argument("--export-messages", type=int, default=100_000)
    args = parser.parse_args()
    setup_django(os.environ.get("BENCH_DATABASE_URL", DEFAULT_URL))
    _clean()
    try:
        bench_export(args.export_messages)
        bench_erasure(args.sessions, args.messages, args.others, args.batch_size)
    finally:
        _clean()


if __name__ == "__main__":
    main()
