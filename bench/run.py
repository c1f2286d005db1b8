"""Measure the service API against the psycopg floor, the peers and the backfill.

Every operation is timed ``reps`` times, app and floor interleaved call by call (so a noisy
neighbour hurts both alike), and the median is reported. Each operation is also run once under
``CaptureQueriesContext`` inside a rolled-back transaction: its statements are counted and each
is replayed under ``EXPLAIN (ANALYZE, BUFFERS)``; the plans go to
``bench/results/<scale>/plans/<op>.txt`` and the table says whether any used a sequential scan.
"""

from __future__ import annotations

import json
import os
import platform
import re
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import psycopg

from . import floor
from .db import create_database, database_url
from .generate import BIG_SESSION_TITLE, PEER_SESSION_TITLE, Scale, load_legacy, scope_of

__all__ = ["Row", "machine_info", "run_all"]

RESULTS = Path(__file__).resolve().parent / "results"
CONTROL = re.compile(r"^\s*(BEGIN|COMMIT|ROLLBACK|SAVEPOINT|RELEASE)\b", re.IGNORECASE)
WRITERS = 8

#: Targets for app/floor, by operation family.
TARGETS = {"append": 1.3, "get": 2.0, "list": 2.0}


@dataclass
class Row:
    """One line of the results table."""

    op: str
    app_ms: float | None = None
    floor_ms: float | None = None
    queries: int | None = None
    plan: str = "-"
    target: float | None = None
    note: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def ratio(self) -> float | None:
        """app / floor."""
        if self.app_ms is None or not self.floor_ms:
            return None
        return self.app_ms / self.floor_ms

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready, with the ratio."""
        data = asdict(self)
        data["ratio"] = None if self.ratio is None else round(self.ratio, 2)
        return data


# -- measuring ------------------------------------------------------------------------------------


def timed_pair(
    app: Callable[[Any], Any],
    base: Callable[[Any], Any],
    inputs: Sequence[Any],
    reps: int,
    warmup: int = 5,
) -> tuple[float, float]:
    """Median milliseconds of ``app(x)`` and ``base(x)``, interleaved over ``inputs``.

    Which of the two runs first alternates, so neither always finds the pages the other just
    read in the buffer cache.
    """

    def clock(fn: Callable[[Any], Any], item: Any) -> float:
        started = time.perf_counter()
        fn(item)
        return time.perf_counter() - started

    for index in range(warmup):
        app(inputs[index % len(inputs)])
        base(inputs[index % len(inputs)])
    app_times, base_times = [], []
    for index in range(reps):
        item = inputs[index % len(inputs)]
        if index % 2:
            base_times.append(clock(base, item))
            app_times.append(clock(app, item))
        else:
            app_times.append(clock(app, item))
            base_times.append(clock(base, item))
    return statistics.median(app_times) * 1000, statistics.median(base_times) * 1000


def _plan_summary(text: str) -> str:
    seq = sorted(set(re.findall(r"Seq Scan on (\w+)", text)))
    if seq:
        return "SEQ SCAN " + ",".join(name.replace("cortex_sessions_", "") for name in seq)
    names = re.findall(
        r"(?:Index Scan|Index Only Scan|Bitmap Index Scan)(?: Backward)? (?:using|on) (\w+)", text
    )
    if not names:
        return "no scan"
    short = [name.replace("cortex_sessions_", "").replace("cortex_", "") for name in names]
    return "index " + ",".join(dict.fromkeys(short))


def queries_and_plans(fn: Callable[[], Any], plan_file: Path) -> tuple[int, str]:
    """Run ``fn`` once in a rolled-back transaction, count its statements, and save the
    ``EXPLAIN (ANALYZE, BUFFERS)`` of each, replayed in another rolled-back transaction.

    Returns:
        ``(statements, plan summary)``; transaction control (BEGIN, SAVEPOINT…) is not counted.
    """
    from django.db import connection, transaction
    from django.test.utils import CaptureQueriesContext

    with transaction.atomic():
        with CaptureQueriesContext(connection) as captured:
            fn()
        transaction.set_rollback(True)
    statements = [q["sql"] for q in captured.captured_queries if not CONTROL.match(q["sql"])]
    parts = []
    with transaction.atomic():
        with connection.cursor() as cursor:
            for sql in statements:
                cursor.execute("EXPLAIN (ANALYZE, BUFFERS) " + sql)
                plan = "\n".join(row[0] for row in cursor.fetchall())
                parts.append(f"-- {sql}\n{plan}\n")
        transaction.set_rollback(True)
    text = "\n".join(parts)
    plan_file.parent.mkdir(parents=True, exist_ok=True)
    plan_file.write_text(text)
    return len(statements), _plan_summary(text)


def _concurrent(
    worker: Callable[[int, threading.Barrier, list[float]], None],
) -> tuple[float, float]:
    """Run ``WRITERS`` threads of ``worker``; returns (wall seconds, median latency ms)."""
    barrier = threading.Barrier(WRITERS + 1)
    latencies: list[float] = []
    threads = [
        threading.Thread(target=worker, args=(number, barrier, latencies))
        for number in range(WRITERS)
    ]
    for thread in threads:
        thread.start()
    barrier.wait()
    started = time.perf_counter()
    for thread in threads:
        thread.join()
    wall = time.perf_counter() - started
    return wall, statistics.median(latencies) * 1000


# -- the run --------------------------------------------------------------------------------------


def _fixtures(conn: psycopg.Connection, scale: Scale) -> dict[str, Any]:
    """Inputs drawn from the data: sessions, defaults, the special sessions."""

    def one(title: str) -> tuple:
        return conn.execute(
            "SELECT id, scope FROM cortex_sessions_session WHERE title = %s", [title]
        ).fetchone()

    sample = conn.execute(
        "SELECT id, scope FROM cortex_sessions_session TABLESAMPLE BERNOULLI (5) "
        "WHERE title NOT LIKE 'bench:%%' LIMIT 100"
    ).fetchall()
    defaults = conn.execute(
        "SELECT agent_id, scope FROM cortex_sessions_session TABLESAMPLE BERNOULLI (5) "
        "WHERE is_default LIMIT 100"
    ).fetchall()
    projects = [f"org=o{i % scale.orgs}/project=p{(i * 3) % scale.projects}" for i in range(10)]
    orgs = [f"org=o{i % scale.orgs}" for i in range(10)]
    leaves = [scope_of((i * 7919) % scale.scopes, scale) for i in range(10)]
    return {
        "sample": sample,
        "defaults": defaults,
        "projects": projects,
        "orgs": orgs,
        "leaves": leaves,
        "big": one(BIG_SESSION_TITLE),
        "peer": one(PEER_SESSION_TITLE),
    }


def _org(scope: str) -> str:
    return scope.split("/", 1)[0]


def run_all(
    scale: Scale,
    *,
    reps: int | None = None,
    backfill: bool = True,
    peers: bool = True,
    say: Callable[[str], None] = print,
) -> dict[str, Any]:
    """Run every benchmark of the scale (the database must be generated).

    Returns:
        ``{"scale", "machine", "rows": [...], "backfill": [...], "peers": {...}}``.
    """
    from django.db import connection

    from cortex_sessions import services

    reps = reps or scale.reps
    url = database_url(scale.database)
    plans = RESULTS / scale.name / "plans"
    rows: list[Row] = []
    base = psycopg.connect(url, autocommit=True)
    fx = _fixtures(base, scale)
    connection.ensure_connection()

    def read_op(name: str, target: float | None, app, flo, inputs, note: str = "") -> None:
        app_ms, floor_ms = timed_pair(app, flo, inputs, reps)
        queries, plan = queries_and_plans(lambda: app(inputs[0]), plans / f"{name}.txt")
        row = Row(name, app_ms, floor_ms, queries, plan, target, note)
        rows.append(row)
        say(_format_row(row))

    say(f"-- {scale.name}: {reps} reps per operation, medians")
    say(_header())
    lists = [
        ("list prefix (project)", fx["projects"], {}),
        ("list prefix (org)", fx["orgs"], {}),
        ("list exact", fx["leaves"], {"exact": True}),
        ("list prefix + search", fx["projects"], {"search": "billing"}),
        ("list prefix + default_only", fx["projects"], {"default_only": True}),
    ]
    for name, scopes, kwargs in lists:
        read_op(
            name,
            TARGETS["list"],
            lambda s, kw=kwargs: services.list_sessions(scope=s, limit=50, **kw),
            lambda s, kw=kwargs: floor.list_sessions(base, scope=s, limit=50, **kw),
            scopes,
            "page of 50, -updated_at",
        )
    counts = [
        ("count prefix (project)", fx["projects"], {}),
        ("count prefix (org)", fx["orgs"], {}),
        ("count exact", fx["leaves"], {"exact": True}),
    ]
    for name, scopes, kwargs in counts:
        read_op(
            name,
            None,
            lambda s, kw=kwargs: services.count_sessions(scope=s, **kw),
            lambda s, kw=kwargs: floor.count_sessions(base, scope=s, **kw),
            scopes,
        )
    read_op(
        "get by id",
        TARGETS["get"],
        lambda item: services.get_session(scope=_org(item[1]), session_id=item[0]),
        lambda item: floor.get_session(base, scope=_org(item[1]), session_id=item[0]),
        fx["sample"],
        "scope = the org",
    )
    read_op(
        "resolve default (existing)",
        TARGETS["get"],
        lambda item: services.resolve_session(scope=item[1], agent_id=item[0]),
        lambda item: floor.resolve_existing(base, scope=item[1], agent_id=item[0]),
        fx["defaults"],
    )
    big_id, big_scope = fx["big"]
    read_op(
        "newest 50 of 100k-msg session",
        TARGETS["get"],
        lambda _: services.list_messages(scope=_org(big_scope), session_id=big_id, limit=50),
        lambda _: floor.recent_messages(base, scope=_org(big_scope), session_id=big_id),
        [None],
        "session check + messages",
    )
    peer_id, peer_scope = fx["peer"]
    read_op(
        f"newest 50 of {scale.peer_messages:,}-msg session",
        TARGETS["get"],
        lambda _: services.list_messages(scope=_org(peer_scope), session_id=peer_id, limit=50),
        lambda _: floor.recent_messages(base, scope=_org(peer_scope), session_id=peer_id),
        [None],
        "peer-size session",
    )
    targets = fx["sample"][:20]
    text = "Please look at the failing test in the billing module and propose a fix."
    read_op(
        "append one message",
        TARGETS["append"],
        lambda item: services.append_messages(
            scope=_org(item[1]), session_id=item[0], messages=[{"role": "user", "content": text}]
        ),
        lambda item: floor.append_one(
            base, scope=_org(item[1]), session_id=item[0], role="user", text=text
        ),
        targets,
    )
    rows.extend(_concurrent_appends(url, fx, reps, rows[-1].queries, say))
    base.close()

    results: dict[str, Any] = {
        "scale": asdict(scale),
        "machine": machine_info(url),
        "rows": [row.as_dict() for row in rows],
    }
    if backfill:
        results["backfill"] = run_backfill(scale, say=say)
    if peers:
        from .peers import run_peers

        app_rows = {row.op: row for row in rows}
        results["peers"] = run_peers(
            scale,
            reps=reps,
            app_append_ms=app_rows["append one message"].app_ms,
            app_recent_ms=app_rows[f"newest 50 of {scale.peer_messages:,}-msg session"].app_ms,
            say=say,
        )
    return results


def _concurrent_appends(
    url: str, fx: dict[str, Any], reps: int, queries: int | None, say
) -> list[Row]:
    """8 writers appending to 8 distinct sessions, then 8 writers on one hot session."""
    from django.db import connection

    from cortex_sessions import services

    per_thread = max(10, reps)
    text = "A concurrent append from a benchmark writer."
    rows = []
    distinct = fx["sample"][20 : 20 + WRITERS]
    hot = fx["sample"][40]
    for name, targets in (
        (f"append, {WRITERS} writers, distinct sessions", distinct),
        (f"append, {WRITERS} writers, one hot session", [hot] * WRITERS),
    ):

        def app_worker(
            number: int, barrier: threading.Barrier, latencies: list[float], targets=targets
        ) -> None:
            session_id, scope = targets[number]
            connection.ensure_connection()
            barrier.wait()
            try:
                for _ in range(per_thread):
                    started = time.perf_counter()
                    services.append_messages(
                        scope=_org(scope),
                        session_id=session_id,
                        messages=[{"role": "user", "content": text}],
                    )
                    latencies.append(time.perf_counter() - started)
            finally:
                connection.close()

        def floor_worker(
            number: int, barrier: threading.Barrier, latencies: list[float], targets=targets
        ) -> None:
            session_id, scope = targets[number]
            with psycopg.connect(url, autocommit=True) as conn:
                barrier.wait()
                for _ in range(per_thread):
                    started = time.perf_counter()
                    floor.append_one(
                        conn, scope=_org(scope), session_id=session_id, role="user", text=text
                    )
                    latencies.append(time.perf_counter() - started)

        app_runs, floor_runs = [], []
        for _ in range(3):
            app_runs.append(_concurrent(app_worker))
            floor_runs.append(_concurrent(floor_worker))
        total = WRITERS * per_thread
        app_wall = statistics.median(run[0] for run in app_runs)
        floor_wall = statistics.median(run[0] for run in floor_runs)
        row = Row(
            name,
            statistics.median(run[1] for run in app_runs),
            statistics.median(run[1] for run in floor_runs),
            queries,
            "-",
            TARGETS["append"],
            f"{total / app_wall:,.0f}/s vs floor {total / floor_wall:,.0f}/s",
            {
                "app_appends_per_s": round(total / app_wall),
                "floor_appends_per_s": round(total / floor_wall),
                "appends_per_run": total,
            },
        )
        rows.append(row)
        say(_format_row(row))
    return rows


# -- backfill ---------------------------------------------------------------------------------------


def run_backfill(scale: Scale, *, say: Callable[[str], None] = print) -> list[dict[str, Any]]:
    """Backfill ``scale.backfill_sizes`` legacy messages, each in a fresh child process.

    The child's peak RSS (``ru_maxrss``) minus its RSS just before the backfill shows whether
    memory grows with the row count.
    """
    name = f"{scale.database}_backfill"
    url = database_url(name)
    if create_database(name, recreate=True):
        subprocess.run(
            [sys.executable, "-m", "django", "migrate", "-v0"],
            env={
                **os.environ,
                "BENCH_DATABASE_URL": url,
                "DJANGO_SETTINGS_MODULE": "bench.settings",
            },
            check=True,
        )
    results = []
    for rows in scale.backfill_sizes:
        started = time.perf_counter()
        loaded = load_legacy(url, rows=rows)
        say(f"-- backfill: loaded {rows:,} legacy rows in {time.perf_counter() - started:.0f}s")
        out = subprocess.run(
            [sys.executable, "-m", "bench.backfill_child", url],
            capture_output=True,
            text=True,
            check=True,
        )
        result = {**loaded, **json.loads(out.stdout.strip().splitlines()[-1])}
        results.append(result)
        say(
            f"   backfill {rows:>9,} rows: {result['seconds']:.1f}s, "
            f"{result['rows_per_s']:,.0f} rows/s, {result['queries']:,} queries, peak RSS "
            f"+{result['rss_growth_mb']:.1f} MB; {result['legacy_left']} legacy rows left"
        )
    return results


# -- output -----------------------------------------------------------------------------------------


def machine_info(url: str) -> dict[str, Any]:
    """CPU count, memory, OS, PostgreSQL and library versions."""
    import django

    memory = "?"
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal"):
                memory = f"{int(line.split()[1]) / 1024 / 1024:.1f} GiB"
    except OSError:
        pass
    with psycopg.connect(url) as conn:
        version = conn.execute("SHOW server_version").fetchone()[0]
        buffers = conn.execute("SHOW shared_buffers").fetchone()[0]
    return {
        "nproc": os.cpu_count(),
        "memory": memory,
        "os": platform.platform(),
        "python": platform.python_version(),
        "django": django.get_version(),
        "psycopg": psycopg.__version__,
        "postgresql": version,
        "shared_buffers": buffers,
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    }


def _header() -> str:
    return (
        f"{'operation':<38} {'app ms':>8} {'floor ms':>9} {'app/floor':>9} {'target':>6} "
        f"{'queries':>7}  plan"
    )


def _fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def _format_row(row: Row) -> str:
    ratio = _fmt(row.ratio, ".2f") + "×" if row.ratio is not None else "-"
    target = f"≤{row.target}" if row.target else ""
    if row.target and row.ratio is not None and row.ratio > row.target:
        target += "!"
    return (
        f"{row.op:<38} {_fmt(row.app_ms, '.3f'):>8} {_fmt(row.floor_ms, '.3f'):>9} "
        f"{ratio:>9} {target:>6} {_fmt(row.queries, 'd'):>7}  {row.plan}"
        + (f"  ({row.note})" if row.note else "")
    )


def markdown(results: dict[str, Any]) -> str:
    """The results as Markdown tables (operations, backfill, peers) with the machine."""
    scale = results["scale"]
    machine = results["machine"]
    lines = [
        f"### `{scale['name']}`: {scale['sessions']:,} sessions, {scale['orgs'] * scale['projects'] * scale['users']:,} "
        f"three-level scopes, {scale['agents']} agents, ~{scale['messages']:,} messages "
        f"(+ one 100,000-message session)",
        "",
        f"Machine: {machine['nproc']} CPUs, {machine['memory']}, PostgreSQL {machine['postgresql']} "
        f"(shared_buffers {machine['shared_buffers']}), Python {machine['python']}, Django "
        f"{machine['django']}, psycopg {machine['psycopg']}; {machine['date']}.",
        "",
        "| operation | app ms | floor ms | app/floor | target | queries | plan |",
        "|---|---:|---:|---:|---:|---:|---|",
    ]
    for row in results["rows"]:
        ratio = "-" if row["ratio"] is None else f"{row['ratio']:.2f}×"
        target = f"≤ {row['target']}×" if row["target"] else ""
        note = f" — {row['note']}" if row["note"] else ""
        lines.append(
            f"| {row['op']}{note} | {_fmt(row['app_ms'], '.3f')} | {_fmt(row['floor_ms'], '.3f')} "
            f"| {ratio} | {target} | {_fmt(row['queries'], 'd')} | {row['plan']} |"
        )
    if results.get("backfill"):
        lines += [
            "",
            "| backfill rows | pairs | seconds | rows/s | queries | peak RSS growth |",
            "|---:|---:|---:|---:|---:|---:|",
        ]
        for item in results["backfill"]:
            lines.append(
                f"| {item['rows']:,} | {item['pairs']:,} | {item['seconds']:.1f} | "
                f"{item['rows_per_s']:,.0f} | {item['queries']:,} | {item['rss_growth_mb']:.1f} MB |"
            )
    peers = results.get("peers")
    if peers:
        lines += [
            "",
            f"Peers (same database, session of {scale['peer_messages']:,} messages):",
            "",
            "| store | append one ms | peer/app | newest 50 ms | peer/app |",
            "|---|---:|---:|---:|---:|",
        ]
        for name, item in peers.items():
            if "skipped" in item:
                lines.append(f"| {name} | skipped: {item['skipped']} | | | |")
                continue
            lines.append(
                f"| {name} | {item['append_ms']:.3f} | {_fmt(item.get('append_ratio'), '.2f')}× | "
                f"{item['recent_ms']:.3f} | {_fmt(item.get('recent_ratio'), '.2f')}× |"
            )
    return "\n".join(lines) + "\n"
