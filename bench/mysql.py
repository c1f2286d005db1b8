"""``python -m bench.mysql``: the service API on MariaDB/MySQL against its own floor, small scale.

The data set is the ``small`` one of :mod:`bench.generate` (10,000 sessions over 100 three-level
scopes and 10 agents, ~50,000 messages, one 100,000-message session), written with multi-row
``INSERT``s through ``mysqlclient``. The floor sends the statements the services issue directly
through ``mysqlclient`` (no ORM), statement for statement, so ``app / floor`` is the price of
the ORM and the services' Python work on this database. Every operation's statements are
counted and replayed under ``EXPLAIN``; the plan column says which index each used, or
``FULL SCAN``. Then the backfill of 100,000 legacy messages, forward and reversed.

The database is ``BENCH_MYSQL_URL`` (default ``mysql://root@127.0.0.1:3306/cortex_bench_mysql``);
results go to ``bench/results/mysql-small.json`` and ``.md``. Needs the ``bench`` and ``mysql``
extras. docs/performance.md reports the figures (docs/design.md §15).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import statistics
import time
from datetime import timedelta
from typing import Any
from urllib.parse import urlsplit

import MySQLdb
from uuid6 import uuid7

from .generate import EPOCH, SCALES, Scale, agent_of, scope_of
from .run import RESULTS, TARGETS, Row, _format_row, _header, timed_pair
from .setup import setup_django

__all__ = ["main"]

DEFAULT_URL = "mysql://root@127.0.0.1:3306/cortex_bench_mysql"
SESSION_TABLE = "cortex_sessions_session"
MESSAGE_TABLE = "cortex_sessions_message"
SESSION_COLUMNS = (
    "id, agent_id, scope, title, metadata, cwd, message_count, last_message, last_seq, "
    "is_default, backfilled_by, created_at, updated_at"
)
BIG_TITLE = "bench: big session"
PREVIEW_CHARS = 280
BACKFILL_ROWS = 100_000
CHUNK = 2_000
TEXT = "Please look at the failing test in the billing module and propose a fix."


def _connect(url: str, *, database: bool = True) -> Any:
    parts = urlsplit(url)
    kwargs: dict[str, Any] = {
        "host": parts.hostname or "127.0.0.1",
        "port": parts.port or 3306,
        "user": parts.username or "root",
        "password": parts.password or "",
        "charset": "utf8mb4",
        "autocommit": True,
    }
    if database:
        kwargs["database"] = parts.path.lstrip("/")
    conn = MySQLdb.connect(**kwargs)
    conn.cursor().execute("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED")
    return conn


# -- the floor ------------------------------------------------------------------------------------


def _scope_where(scope: str, exact: bool) -> tuple[str, list[Any]]:
    if exact:
        return "scope = %s", [scope]
    return (
        "scope >= %s AND scope < %s AND (scope = %s OR scope >= %s)",
        [scope, scope + "0", scope, scope + "/"],
    )


def floor_list(conn: Any, *, scope: str, exact: bool = False, limit: int = 50) -> list[tuple]:
    """A page of live sessions, newest first (``services.list_sessions``, which hides archived
    sessions by default)."""
    where, params = _scope_where(scope, exact)
    where += " AND archived_at IS NULL"
    cursor = conn.cursor()
    cursor.execute(
        f"SELECT {SESSION_COLUMNS} FROM {SESSION_TABLE} WHERE {where} "
        "ORDER BY updated_at DESC, id DESC LIMIT %s",
        [*params, limit],
    )
    return list(cursor.fetchall())


def floor_count(conn: Any, *, scope: str, exact: bool = False) -> int:
    """``COUNT(*)`` of the live sessions at a scope (``services.count_sessions``)."""
    where, params = _scope_where(scope, exact)
    where += " AND archived_at IS NULL"
    cursor = conn.cursor()
    cursor.execute(f"SELECT COUNT(*) FROM {SESSION_TABLE} WHERE {where}", params)
    return cursor.fetchone()[0]


def floor_get(conn: Any, *, scope: str, session_id: str) -> tuple | None:
    """One session by id within ``scope`` (``services.get_session``)."""
    where, params = _scope_where(scope, False)
    cursor = conn.cursor()
    cursor.execute(
        f"SELECT {SESSION_COLUMNS} FROM {SESSION_TABLE} WHERE id = %s AND {where} LIMIT 21",
        [session_id, *params],
    )
    return cursor.fetchone()


def floor_resolve(conn: Any, *, scope: str, agent_id: str) -> tuple | None:
    """The default of ``agent_id`` at exactly ``scope`` (``services.resolve_session``)."""
    cursor = conn.cursor()
    cursor.execute(
        f"SELECT {SESSION_COLUMNS} FROM {SESSION_TABLE} "
        "WHERE agent_id = %s AND is_default AND scope = %s LIMIT 21",
        [agent_id, scope],
    )
    return cursor.fetchone()


def floor_recent(conn: Any, *, scope: str, session_id: str, limit: int = 50) -> list[tuple]:
    """The session check, then its newest ``limit`` messages (``services.list_messages``)."""
    session = floor_get(conn, scope=scope, session_id=session_id)
    if session is None:
        raise LookupError(session_id)
    cursor = conn.cursor()
    cursor.execute(
        "SELECT id, session_id, agent_id, scope, seq, role, source, content, metadata, "
        f"created_at FROM {MESSAGE_TABLE} WHERE session_id = %s ORDER BY seq DESC LIMIT %s",
        [session[0], limit],
    )
    rows = list(cursor.fetchall())
    rows.reverse()
    return rows


def floor_append(conn: Any, *, scope: str, session_id: str, text: str) -> None:
    """Lock the session, insert the next ``seq``, move the counters; one transaction
    (``services.append_messages``)."""
    where, params = _scope_where(scope, False)
    content = json.dumps([{"type": "text", "text": text}])
    cursor = conn.cursor()
    conn.begin()
    try:
        cursor.execute(
            f"SELECT {SESSION_COLUMNS} FROM {SESSION_TABLE} WHERE id = %s AND {where} "
            "LIMIT 21 FOR UPDATE",
            [session_id, *params],
        )
        session = cursor.fetchone()
        if session is None:
            raise LookupError(session_id)
        sid, agent_id, session_scope, last_seq = session[0], session[1], session[2], session[8]
        cursor.execute(
            f"INSERT INTO {MESSAGE_TABLE} (session_id, agent_id, scope, seq, role, source, "
            "content, metadata, created_at) VALUES (%s, %s, %s, %s, 'user', 'user', %s, '{}', "
            "NOW(6))",
            [sid, agent_id, session_scope, last_seq + 1, content],
        )
        cursor.execute(
            f"UPDATE {SESSION_TABLE} SET message_count = message_count + 1, last_seq = %s, "
            "updated_at = NOW(6), last_message = %s WHERE id = %s",
            [last_seq + 1, text[:PREVIEW_CHARS], sid],
        )
        conn.commit()
    except BaseException:
        conn.rollback()
        raise


# -- data -----------------------------------------------------------------------------------------


def _insert_many(conn: Any, table: str, columns: str, rows: list[tuple]) -> None:
    cursor = conn.cursor()
    marks = "(" + ", ".join(["%s"] * len(rows[0])) + ")"
    for start in range(0, len(rows), CHUNK):
        cursor.executemany(
            f"INSERT INTO {table} ({columns}) VALUES {marks}", rows[start : start + CHUNK]
        )


def _message(session_id: Any, agent: str, scope: str, seq: int | None, stamp: Any) -> tuple:
    role = "user" if (seq or 0) % 2 else "assistant"
    content = json.dumps([{"type": "text", "text": f"{TEXT} ({seq})"}])
    return (session_id, agent, scope, seq, role, "user", content, "{}", stamp)


def generate(conn: Any, scale: Scale) -> dict[str, int]:
    """Load the scale's sessions and messages (counters exact, one default per pair)."""
    rng = random.Random(7)
    sessions, messages, defaults = [], [], set()
    for number in range(scale.sessions):
        scope_index = number % scale.scopes
        scope = scope_of(scope_index, scale)
        agent = agent_of(scope_index, rng.randrange(scale.agents_per_scope), scale)
        count = rng.randint(0, 2 * scale.messages // scale.sessions)
        stamp = EPOCH + timedelta(minutes=number)
        is_default = (agent, scope) not in defaults
        defaults.add((agent, scope))
        session_id = str(uuid7())
        text = f"{TEXT} ({count})" if count else ""
        sessions.append(
            (session_id, agent, scope, f"session {number}", "{}", count, text, count, is_default)
        )
        messages.extend(
            _message(session_id, agent, scope, seq, stamp) for seq in range(1, count + 1)
        )
    big_id, big_scope, big_agent = str(uuid7()), scope_of(0, scale), agent_of(0, 0, scale)
    big = scale.big_session_messages
    sessions.append(
        (big_id, big_agent, big_scope, BIG_TITLE, "{}", big, f"{TEXT} ({big})", big, False)
    )
    messages.extend(_message(big_id, big_agent, big_scope, seq, EPOCH) for seq in range(1, big + 1))
    columns = (
        "id, agent_id, scope, title, metadata, message_count, last_message, last_seq, "
        "is_default, backfilled_by, created_at, updated_at"
    )
    _insert_many(
        conn,
        SESSION_TABLE,
        columns,
        [(*row, "", EPOCH, EPOCH + timedelta(minutes=n)) for n, row in enumerate(sessions)],
    )
    _insert_many(
        conn,
        MESSAGE_TABLE,
        "session_id, agent_id, scope, seq, role, source, content, metadata, created_at",
        messages,
    )
    conn.cursor().execute(f"ANALYZE TABLE {SESSION_TABLE}, {MESSAGE_TABLE}")
    return {"sessions": len(sessions), "messages": len(messages)}


# -- plans ----------------------------------------------------------------------------------------


def queries_and_plan(fn: Any) -> tuple[int, str]:
    """Run ``fn`` once in a rolled-back transaction; count its statements and summarise their
    ``EXPLAIN``: the indexes used (``(index only)`` when the table rows are not read), or
    ``FULL SCAN <table>``."""
    from django.db import connection, transaction
    from django.test.utils import CaptureQueriesContext

    with transaction.atomic():
        with CaptureQueriesContext(connection) as captured:
            fn()
        transaction.set_rollback(True)
    statements = [
        q["sql"]
        for q in captured.captured_queries
        if not q["sql"].upper().startswith(("SAVEPOINT", "RELEASE", "ROLLBACK", "BEGIN", "COMMIT"))
    ]
    keys: list[str] = []
    full: list[str] = []
    with transaction.atomic():
        with connection.cursor() as cursor:
            for sql in statements:
                cursor.execute("EXPLAIN " + sql)
                names = [column[0] for column in cursor.description]
                for row in cursor.fetchall():
                    plan = dict(zip(names, row, strict=True))
                    if plan.get("select_type") == "INSERT":
                        continue  # EXPLAIN INSERT … VALUES reports type ALL: it reads nothing
                    if plan.get("type") == "ALL":
                        full.append(str(plan.get("table")).replace("cortex_sessions_", ""))
                    elif plan.get("key"):
                        extra = [part.strip() for part in str(plan.get("Extra") or "").split(";")]
                        only = " (index only)" if "Using index" in extra else ""
                        keys.append(str(plan["key"]).replace("cortex_", "") + only)
        transaction.set_rollback(True)
    if full:
        return len(statements), "FULL SCAN " + ",".join(dict.fromkeys(full))
    return len(statements), "index " + ",".join(dict.fromkeys(keys)) if keys else "no scan"


# -- the run --------------------------------------------------------------------------------------


def _org(scope: str) -> str:
    return scope.split("/", 1)[0]


def _text(row: tuple) -> tuple:
    """A fetched row with ``VARBINARY`` values (scopes) decoded to ``str``."""
    return tuple(value.decode() if isinstance(value, bytes) else value for value in row)


def run(url: str, scale: Scale, reps: int) -> dict[str, Any]:
    """Time every operation, app against floor; then the backfill."""
    from django.db import connection

    from cortex_sessions import services

    base = _connect(url)
    cursor = base.cursor()
    cursor.execute(
        f"SELECT id, scope FROM {SESSION_TABLE} WHERE title LIKE 'session %%' "
        "ORDER BY id LIMIT 100 OFFSET 1000"
    )
    sample = [_text(row) for row in cursor.fetchall()]
    cursor.execute(
        f"SELECT agent_id, scope FROM {SESSION_TABLE} WHERE is_default ORDER BY id LIMIT 100"
    )
    defaults = [_text(row) for row in cursor.fetchall()]
    cursor.execute(f"SELECT id, scope FROM {SESSION_TABLE} WHERE title = %s", [BIG_TITLE])
    big_id, big_scope = _text(cursor.fetchone())
    projects = [f"org=o{i % scale.orgs}/project=p{(i * 3) % scale.projects}" for i in range(10)]
    orgs = [f"org=o{i % scale.orgs}" for i in range(10)]
    leaves = [scope_of((i * 7919) % scale.scopes, scale) for i in range(10)]
    connection.ensure_connection()
    rows: list[Row] = []

    def op(name: str, target: float | None, app: Any, flo: Any, inputs: list, note: str = ""):
        app_ms, floor_ms = timed_pair(app, flo, inputs, reps)
        queries, plan = queries_and_plan(lambda: app(inputs[0]))
        row = Row(name, app_ms, floor_ms, queries, plan, target, note)
        rows.append(row)
        print(_format_row(row), flush=True)

    print(f"-- MariaDB {scale.name}: {reps} reps per operation, medians")
    print(_header())
    for name, scopes, exact in (
        ("list prefix (project)", projects, False),
        ("list prefix (org)", orgs, False),
        ("list exact", leaves, True),
    ):
        filters = services.SessionFilters(exact=exact)
        op(
            name,
            TARGETS["list"],
            lambda s, f=filters: services.list_sessions(scope=s, filters=f, limit=50),
            lambda s, exact=exact: floor_list(base, scope=s, exact=exact),
            scopes,
            "page of 50, -updated_at",
        )
    for name, scopes, exact in (
        ("count prefix (project)", projects, False),
        ("count prefix (org)", orgs, False),
        ("count exact", leaves, True),
    ):
        filters = services.SessionFilters(exact=exact)
        op(
            name,
            None,
            lambda s, f=filters: services.count_sessions(scope=s, filters=f),
            lambda s, exact=exact: floor_count(base, scope=s, exact=exact),
            scopes,
        )
    op(
        "get by id",
        TARGETS["get"],
        lambda item: services.get_session(scope=_org(item[1]), session_id=item[0]),
        lambda item: floor_get(base, scope=_org(item[1]), session_id=item[0]),
        sample,
        "scope = the org",
    )
    op(
        "resolve default (existing)",
        TARGETS["get"],
        lambda item: services.resolve_session(scope=item[1], agent_id=item[0]),
        lambda item: floor_resolve(base, scope=item[1], agent_id=item[0]),
        defaults,
    )
    op(
        f"newest 50 of {scale.big_session_messages // 1000}k-msg session",
        TARGETS["get"],
        lambda _: services.list_messages(scope=_org(big_scope), session_id=big_id, limit=50),
        lambda _: floor_recent(base, scope=_org(big_scope), session_id=big_id),
        [None],
        "session check + messages",
    )
    op(
        "append one message",
        TARGETS["append"],
        lambda item: services.append_messages(
            scope=_org(item[1]), session_id=item[0], messages=[{"role": "user", "content": TEXT}]
        ),
        lambda item: floor_append(base, scope=_org(item[1]), session_id=item[0], text=TEXT),
        sample[:20],
    )
    base.close()
    return {"rows": [row.as_dict() for row in rows], "backfill": run_backfill(url)}


def run_backfill(url: str) -> dict[str, Any]:
    """``BACKFILL_ROWS`` legacy messages over 100 pairs: backfill forward, then reverse."""
    from django.db import connection

    from cortex_sessions.backfill import backfill_default_sessions, reverse_backfill
    from cortex_sessions.models import Message, Session

    conn = _connect(url)
    rows = [
        (None, f"legacy-{n % 10}", f"org=legacy/user=u{n % 10}", None, EPOCH)
        for n in range(BACKFILL_ROWS)
    ]
    _insert_many(
        conn,
        MESSAGE_TABLE,
        "session_id, agent_id, scope, seq, role, source, content, metadata, created_at",
        [
            (s, a, sc, q, "user", "user", json.dumps([{"type": "text", "text": "hi"}]), "{}", t)
            for s, a, sc, q, t in rows
        ],
    )
    started = time.perf_counter()
    report = backfill_default_sessions(session_model=Session, message_model=Message)
    forward = time.perf_counter() - started
    started = time.perf_counter()
    deleted = reverse_backfill(session_model=Session, message_model=Message)
    backward = time.perf_counter() - started
    conn.cursor().execute(f"DELETE FROM {MESSAGE_TABLE} WHERE session_id IS NULL")
    conn.close()
    connection.close()
    result = {
        "rows": BACKFILL_ROWS,
        "pairs": report.pairs,
        "forward_s": round(forward, 2),
        "forward_rows_per_s": round(BACKFILL_ROWS / forward),
        "reverse_s": round(backward, 2),
        "sessions_deleted": deleted,
    }
    print(
        f"-- backfill {BACKFILL_ROWS:,} legacy rows ({report.pairs} pairs): forward "
        f"{forward:.1f}s ({BACKFILL_ROWS / forward:,.0f} rows/s), reverse {backward:.1f}s"
    )
    return result


def machine_info(url: str) -> dict[str, Any]:
    """CPU count, OS, server and library versions."""
    import django

    conn = _connect(url)
    cursor = conn.cursor()
    cursor.execute("SELECT VERSION(), @@innodb_buffer_pool_size")
    version, pool = cursor.fetchone()
    conn.close()
    return {
        "nproc": os.cpu_count(),
        "os": platform.platform(),
        "python": platform.python_version(),
        "django": django.get_version(),
        "mysqlclient": ".".join(map(str, MySQLdb.version_info[:3])),
        "server": version,
        "innodb_buffer_pool_size": pool,
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    }


def markdown(results: dict[str, Any]) -> str:
    """The results as a Markdown table."""
    lines = [
        "| operation | app ms | floor ms | app/floor | target | queries | plan |",
        "|---|---:|---:|---:|---:|---:|---|",
    ]
    for row in results["rows"]:
        target = f"≤{row['target']}×" if row["target"] else "-"
        lines.append(
            f"| {row['op']} | {row['app_ms']:.2f} | {row['floor_ms']:.2f} | {row['ratio']:.2f}× "
            f"| {target} | {row['queries']} | {row['plan']} |"
        )
    backfill = results["backfill"]
    lines.append("")
    lines.append(
        f"Backfill of {backfill['rows']:,} legacy rows ({backfill['pairs']} pairs): forward "
        f"{backfill['forward_s']} s ({backfill['forward_rows_per_s']:,} rows/s), reverse "
        f"{backfill['reverse_s']} s."
    )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    """Create and load the database when needed, migrate, run, write the results."""
    parser = argparse.ArgumentParser(
        prog="python -m bench.mysql", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--regenerate", action="store_true", help="drop and reload the data")
    parser.add_argument("--reps", type=int, default=30, help="timed repetitions per operation")
    args = parser.parse_args(argv)
    url = os.environ.get("BENCH_MYSQL_URL", DEFAULT_URL)
    scale = SCALES["small"]
    name = urlsplit(url).path.lstrip("/")
    server = _connect(url, database=False)
    if args.regenerate:
        server.cursor().execute(f"DROP DATABASE IF EXISTS `{name}`")
    server.cursor().execute(f"CREATE DATABASE IF NOT EXISTS `{name}` CHARACTER SET utf8mb4")
    server.close()
    setup_django(url)
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    conn = _connect(url)
    cursor = conn.cursor()
    cursor.execute(f"SELECT COUNT(*) FROM {SESSION_TABLE}")
    if cursor.fetchone()[0] < scale.sessions:
        print(f"-- generating {scale.name} into {name}")
        started = time.perf_counter()
        print(json.dumps(generate(conn, scale)))
        print(f"-- generated in {time.perf_counter() - started:.0f}s")
    conn.close()
    results = {"scale": scale.name, "machine": machine_info(url), **run(url, scale, args.reps)}
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "mysql-small.json").write_text(json.dumps(results, indent=2, default=str))
    (RESULTS / "mysql-small.md").write_text(markdown(results))
    print(f"-- wrote {RESULTS / 'mysql-small.json'} and {RESULTS / 'mysql-small.md'}")
    print(f"-- median app/floor: {statistics.median(r['ratio'] for r in results['rows']):.2f}×")


if __name__ == "__main__":
    main()
