"""Benchmark: message search on PostgreSQL (docs/design.md §11.5), and its migration.

Prints figures; it is not a test. Run from the repository root against a database that
``python -m bench.generate`` filled:

    python -m bench.bench_search --scale large [--migration] [--runs 15]

- ``--migration``: migrate the app back to ``0011`` (dropping the search column) and forward to
  ``0012`` while a second connection tries a one-row write of ``cortex_sessions_message`` every
  50 ms (``lock_timeout`` 100 ms): the time of each DDL statement and the longest stretch during
  which writes were refused, i.e. how long the migration locked the table for writes.
- Searches inside one org's scope (``org=o1``, a tenth of the data) and one user's, through
  the service: ``list_sessions(filters=SessionFilters(q=…), limit=50)`` (the page, snippets
  included) and the ``count_sessions(filters=SessionFilters(q=…))`` an API page also makes, each against hand-written SQL for the same
  work sent with psycopg (the floor); median and p95 of ``--runs`` runs, and the
  ``EXPLAIN (ANALYZE, BUFFERS)`` plan of the service's page query. The generated corpus has only 61 distinct words, each in a large share of messages,
  so the script first writes a few messages with rare words (a realistic "that conversation
  about the invoice") and removes them at the end; the common-word query shows the worst case.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import threading
import time
from typing import Any

import psycopg

from .db import database_url, psycopg_conninfo
from .generate import SCALES

ORG = "org=o1"
AGENT = "bench-search"
#: Rare words written into a few sessions of the org (and of another org, which must not show).
NEEDLES = {"invoice": 40, "kubernetes": 400}
#: (scope, query): rare words in an org, then common ones (the bounded worst case), then a
#: common word in one user's scope.
CASES = [
    (ORG, "invoice"),
    (ORG, "kubernetes"),
    (ORG, '"sent on monday" invoice'),
    (ORG, "invoice -monday"),
    (ORG, "migration"),
    (ORG, "the"),
    (ORG, "migration merge python lock"),
    ("org=o1/project=p2/user=u7", "migration"),
]
PROBE_EVERY_SECONDS = 0.05
PROBE_LOCK_TIMEOUT_MS = 100


# -- migration -----------------------------------------------------------------------------------


class WriteProbe(threading.Thread):
    """Tries ``UPDATE … WHERE id = <one message>`` (rolled back) every 50 ms with a short
    ``lock_timeout``, recording when a write was refused (waited past the timeout)."""

    def __init__(self, url: str) -> None:
        super().__init__(daemon=True)
        self.url = url
        self.stop = threading.Event()
        self.refused: list[float] = []
        self.attempts = 0

    def run(self) -> None:
        with psycopg.connect(psycopg_conninfo(self.url)) as conn:
            (message_id,) = conn.execute("SELECT min(id) FROM cortex_sessions_message").fetchone()
            conn.rollback()
            while not self.stop.is_set():
                moment = time.perf_counter()
                self.attempts += 1
                try:
                    conn.execute(f"SET LOCAL lock_timeout = '{PROBE_LOCK_TIMEOUT_MS}ms'")
                    conn.execute(
                        "UPDATE cortex_sessions_message SET metadata = metadata WHERE id = %s",
                        [message_id],
                    )
                except psycopg.errors.LockNotAvailable:
                    self.refused.append(moment)
                finally:
                    conn.rollback()
                time.sleep(PROBE_EVERY_SECONDS)

    def longest_refusal(self) -> float:
        """Seconds of the longest run of consecutive refused writes (0 if none)."""
        longest, start, last = 0.0, None, None
        gap = PROBE_EVERY_SECONDS + PROBE_LOCK_TIMEOUT_MS / 1000 + 0.5
        for moment in self.refused:
            if last is None or moment - last > gap:
                start = moment
            last = moment
            longest = max(longest, last - start + PROBE_LOCK_TIMEOUT_MS / 1000)
        return longest


def measure_migration(url: str) -> None:
    """Migrate back to ``0011`` and forward to ``0012`` with a write probe running."""
    from django.core.management import call_command
    from django.db import connection

    print("-- migration 0012 on the populated table")
    call_command("migrate", "cortex_sessions", "0011", verbosity=0)
    statements: list[tuple[str, float]] = []

    def timed(execute, sql, params, many, context):  # type: ignore[no-untyped-def]
        started = time.perf_counter()
        try:
            return execute(sql, params, many, context)
        finally:
            if sql.lstrip().upper().startswith(("ALTER", "CREATE", "DROP")):
                statements.append((sql, time.perf_counter() - started))

    probe = WriteProbe(url)
    probe.start()
    time.sleep(0.5)
    started = time.perf_counter()
    with connection.execute_wrapper(timed):
        call_command("migrate", "cortex_sessions", "0012", verbosity=0)
    total = time.perf_counter() - started
    time.sleep(0.5)
    probe.stop.set()
    probe.join()
    for sql, seconds in statements:
        print(f"  {seconds:8.1f} s  {sql[:100]}")
    print(
        f"  migrate 0012: {total:.1f} s in all; writes refused (lock_timeout "
        f"{PROBE_LOCK_TIMEOUT_MS} ms) for at most {probe.longest_refusal():.1f} s in a row "
        f"({len(probe.refused)} of {probe.attempts} probe writes refused)"
    )


# -- search --------------------------------------------------------------------------------------


def plant_needles() -> list[Any]:
    """Sessions in ``ORG`` (and the same number in ``org=o2``) with one rare word each."""
    from cortex_sessions import services

    planted = []
    for word, count in NEEDLES.items():
        for number in range(count):
            for org in (ORG, "org=o2"):
                session = services.create_session(
                    scope=f"{org}/project=p{number % 10}/user=u{number % 100}",
                    agent_id=AGENT,
                    title=f"bench search {number}",
                )
                services.append_messages(
                    scope=org,
                    session_id=session.pk,
                    messages=[
                        {"role": "user", "content": f"what about the {word} from last week?"},
                        {"role": "assistant", "content": f"The {word} was sent on Monday."},
                        {"role": "tool", "content": f"tool output mentioning {word}"},
                    ],
                )
                planted.append(session.pk)
    return planted


def time_service(scope: str, q: str, runs: int) -> tuple[list[float], list[float], int, list[str]]:
    """Milliseconds of ``list_sessions(filters=SessionFilters(q=…), limit=50)`` (the page) and
    of ``count_sessions(filters=SessionFilters(q=…))`` at ``scope``; the count; the SQL of both."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from cortex_sessions import services

    filters = services.SessionFilters(q=q)
    pages, counts, count, sql = [], [], 0, []
    for _ in range(runs):
        with CaptureQueriesContext(connection) as captured:
            started = time.perf_counter()
            page = services.list_sessions(scope=scope, filters=filters, limit=50)
            middle = time.perf_counter()
            count = services.count_sessions(scope=scope, filters=filters)
            pages.append((middle - started) * 1000)
            counts.append((time.perf_counter() - middle) * 1000)
        sql = [query["sql"] for query in captured.captured_queries]
        assert all(session.search_match is not None for session in page)
    return pages, counts, count, sql


#: The floor: the same work written by hand — the newest ``SEARCH_CANDIDATES`` (1,000) hits and
#: as many title hits within the scope, each candidate ranked by its best message or title,
#: the first 50 with the snippet of their best message — and the count.
_FLOOR_CANDIDATES = """
WITH hits AS MATERIALIZED (
    (SELECT m.session_id FROM cortex_sessions_message m
     WHERE m.search_vector @@ TSQ AND m.scope >= %(lo)s AND m.scope < %(hi)s
       AND m.session_id IN (SELECT s.id FROM cortex_sessions_session s
                            WHERE s.scope >= %(lo)s AND s.scope < %(hi)s
                              AND s.archived_at IS NULL)
     ORDER BY m.id DESC LIMIT 1000)
    UNION ALL
    (SELECT s.id FROM cortex_sessions_session s
     WHERE to_tsvector('simple'::regconfig, s.title) @@ TSQ
       AND s.scope >= %(lo)s AND s.scope < %(hi)s AND s.archived_at IS NULL
     ORDER BY s.id DESC LIMIT 1000)
)
"""
FLOOR_PAGE = (
    _FLOOR_CANDIDATES
    + """,
ranked AS (
    SELECT s.id, s.title, s.updated_at, GREATEST(
        COALESCE((SELECT max(ts_rank(m.search_vector, TSQ)) FROM cortex_sessions_message m
                  WHERE m.session_id = s.id AND (m.search_vector @@ TSQ) IS TRUE), 0),
        CASE WHEN to_tsvector('simple'::regconfig, s.title) @@ TSQ
             THEN ts_rank(to_tsvector('simple'::regconfig, s.title), TSQ) ELSE 0 END) AS rank
    FROM (SELECT DISTINCT session_id FROM hits) h
    JOIN cortex_sessions_session s ON s.id = h.session_id
    ORDER BY rank DESC, s.updated_at DESC, s.id DESC LIMIT 50
)
SELECT r.id, r.title, r.rank, best.seq, ts_headline('simple'::regconfig, best.text, TSQ)
FROM ranked r LEFT JOIN LATERAL (
    SELECT m.seq, m.content->0->>'text' AS text FROM cortex_sessions_message m
    WHERE m.session_id = r.id AND (m.search_vector @@ TSQ) IS TRUE
    ORDER BY ts_rank(m.search_vector, TSQ) DESC, m.seq DESC LIMIT 1
) best ON true
ORDER BY r.rank DESC, r.updated_at DESC, r.id DESC
"""
)
FLOOR_COUNT = _FLOOR_CANDIDATES + "SELECT count(DISTINCT session_id) FROM hits"
#: The query, inlined as a constant the planner can read the statistics of.
_TSQ = "websearch_to_tsquery('simple'::regconfig, %(q)s)"
FLOOR_PAGE = FLOOR_PAGE.replace("TSQ", _TSQ)
FLOOR_COUNT = FLOOR_COUNT.replace("TSQ", _TSQ)


def time_floor(url: str, scope: str, q: str, runs: int) -> tuple[list[float], list[float]]:
    """Milliseconds of :data:`FLOOR_PAGE` and of :data:`FLOOR_COUNT` sent with psycopg."""
    params = {"q": q, "lo": scope + "/", "hi": scope + "0"}
    pages, counts = [], []
    # prepare_threshold=None: plan each statement for its values, as Django's statements are
    # (a prepared generic plan cannot see how common the word is).
    with psycopg.connect(psycopg_conninfo(url), prepare_threshold=None) as conn:
        for _ in range(runs):
            started = time.perf_counter()
            conn.execute(FLOOR_PAGE, params).fetchall()
            middle = time.perf_counter()
            conn.execute(FLOOR_COUNT, params).fetchall()
            pages.append((middle - started) * 1000)
            counts.append((time.perf_counter() - middle) * 1000)
    return pages, counts


def explain(sql: str) -> str:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) " + sql)
        return "\n".join(row[0] for row in cursor.fetchall())


def p95(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]


def main(argv: list[str] | None = None) -> None:
    """Command line: ``python -m bench.bench_search --scale large [--migration]``."""
    from .setup import setup_django

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", choices=sorted(SCALES), default="small")
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--migration", action="store_true", help="measure migration 0012")
    parser.add_argument("--plans", action="store_true", help="print every page plan")
    args = parser.parse_args(argv)
    url = os.environ.get("BENCH_DATABASE_URL") or database_url(SCALES[args.scale].database)
    setup_django(url)
    print(f"database {url.rsplit('/', 1)[1]}; load average {os.getloadavg()}")
    if args.migration:
        measure_migration(url)
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    from cortex_sessions.models import Session

    Session.objects.filter(agent_id=AGENT).delete()
    planted = plant_needles()
    try:
        with psycopg.connect(psycopg_conninfo(url), autocommit=True) as conn:
            # The planted rows wait in the GIN indexes' pending lists (which every search
            # reads whole) until a vacuum merges them, as autovacuum does on a live table.
            conn.execute("SELECT gin_clean_pending_list('cortex_msg_search_idx'::regclass)")
            conn.execute(
                "SELECT gin_clean_pending_list('cortex_session_title_search_idx'::regclass)"
            )
            conn.execute("ANALYZE cortex_sessions_message")
            conn.execute("ANALYZE cortex_sessions_session")
        print(f"-- {len(planted)} sessions planted; ms, median / p95 of {args.runs} runs")
        print("| scope | query | sessions | page | count | floor page | floor count | load |")
        print("|---|---|---:|---:|---:|---:|---:|---|")
        plans = []
        for scope, q in CASES:
            pages, counts, count, sql = time_service(scope, q, args.runs)
            floor_pages, floor_counts = time_floor(url, scope, q, args.runs)
            load = "/".join(f"{value:.1f}" for value in os.getloadavg())
            figures = " | ".join(
                f"{statistics.median(values):.1f} / {p95(values):.1f}"
                for values in (pages, counts, floor_pages, floor_counts)
            )
            print(f"| `{scope}` | `{q}` | {count:,} | {figures} | {load} |")
            if args.plans or (scope, q) == CASES[0]:
                plans.append((scope, q, explain(sql[0])))
        for scope, q, plan in plans:
            print(f"-- plan of the page query, q={json.dumps(q)} at {scope}:")
            print(plan)
    finally:
        Session.objects.filter(agent_id=AGENT).delete()


if __name__ == "__main__":
    main()
