"""``python -m bench.replicas``: reads on a streaming standby against reads on the primary,
under the bench's load of 8 writer processes (docs/scaling.md, docs/design.md §17.2).

Needs ``CORTEX_REPLICA_URL`` (or ``--replica-url``): a hot standby of the bench's PostgreSQL
server (``BENCH_SERVER_URL``), as ``.ci/standby.sh start`` prints it; without one it says so
and exits with status 1, measuring nothing.

It loads a small data set into ``<BENCH_DB_PREFIX>_replicas`` on the primary (the scale
``small``'s shape, ``--sessions`` sessions; reused when already there), waits for the standby to
replay it, then starts :data:`bench.run.WRITERS` writer processes appending one message at a
time through the services (``--appends`` each, as ``python -m bench`` does), with the app
routed by ``cortex_sessions.routers.ReplicaRouter`` (``READ_REPLICAS = ["replica"]``). While
they write, one reader times, in turn:

- ``list``: a page of 50 of one agent's sessions in an org (``SessionFilters(agent_id=…)``);
- ``count``: how many sessions that list has;
- ``search``: a page of 50 sessions of the org matching ``q=billing`` (the writers' messages
  hold the word too);

each served three ways: ``primary`` (inside ``primary_reads()``: always the primary),
``router`` (a caller with no writes of its own, as an API request without a consistency token:
the replica when it lags less than ``REPLICA_MAX_LAG``), and ``router+token`` (a caller whose
token is the primary's WAL position read just before the read: a client reading right after its
own write, the worst case for the replica). It prints, per read and way, the median and 95th
percentile milliseconds and the share of reads the router sent to the primary; a read that the
replica failed (a recovery conflict cancelled it) runs again on the primary as the API would,
and is counted. A sampler reads the primary's ``pg_current_wal_lsn()`` every
:data:`LAG_INTERVAL` seconds, how many bytes the standby's ``pg_last_wal_replay_lsn()`` is
behind it, and how many milliseconds pass until the standby has replayed it.

The figures go to ``bench/results/replicas.json`` too (``--output`` names another file).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import psycopg

from . import run
from .db import database_url
from .generate import SCALES, Scale, generate

__all__ = [
    "NO_STANDBY",
    "LagSampler",
    "main",
    "measure",
    "percentile",
    "replica_database_url",
    "report",
    "scale_of",
]

#: The environment variable naming the standby (as for tests/replicas/).
REPLICA_ENV = "CORTEX_REPLICA_URL"
#: What is printed (and the exit status 1) when no standby is configured.
NO_STANDBY = (
    "python -m bench.replicas: no standby configured, nothing measured. Set CORTEX_REPLICA_URL "
    "(or --replica-url) to a streaming standby of the bench's PostgreSQL server; "
    "`.ci/standby.sh start` starts one on port 5433 and prints the URL to export."
)
#: The reads timed, and the ways each is served.
READS = ("list", "count", "search")
WAYS = ("primary", "router", "router+token")
#: The word searched for (``q=``); the generator's texts and the writers' messages hold it.
SEARCH_WORD = "billing"
WRITER_TEXT = "billing question from the replica bench: is the invoice ready?"
#: Seconds between two samples of the standby's replay lag.
LAG_INTERVAL = 0.05
#: Seconds the standby may take to replay the loaded data (or one sampled position).
CATCH_UP_SECONDS = 60.0
#: SQLSTATE of a standby query cancelled by a recovery conflict (the API's retry treats it as
#: "retry on the primary", not as "replica down").
RECOVERY_CONFLICT = "40001"


def scale_of(sessions: int) -> Scale:
    """The data set: the ``small`` scale's shape with ``sessions`` sessions (five messages each
    on average) and small special sessions; its database is ``<BENCH_DB_PREFIX>_replicas``."""
    return replace(
        SCALES["small"],
        name="replicas",
        sessions=sessions,
        messages=sessions * 5,
        big_session_messages=100,
        peer_messages=50,
    )


def replica_database_url(standby_url: str, database: str) -> str:
    """``standby_url`` (any database of the standby) with its database replaced by ``database``
    (a standby holds every database of its primary)."""
    parts = urlsplit(standby_url)
    return urlunsplit((parts.scheme, parts.netloc, "/" + database, parts.query, parts.fragment))


def percentile(values: Sequence[float], share: float) -> float:
    """The nearest-rank ``share`` percentile (``0.95``: the 95th) of non-empty ``values``."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(share * len(ordered)) - 1)]


def _check_standby(url: str) -> None:
    """Exit with a message when ``url`` cannot be reached or is not a standby."""
    try:
        with psycopg.connect(url, autocommit=True, connect_timeout=10) as conn:
            in_recovery = conn.execute("SELECT pg_is_in_recovery()").fetchone()[0]
    except psycopg.Error as exc:
        raise SystemExit(
            f"python -m bench.replicas: cannot reach the standby {url}: {exc}"
        ) from exc
    if not in_recovery:
        raise SystemExit(
            f"python -m bench.replicas: {url} is not a standby (pg_is_in_recovery() is false)"
        )


def _replay_behind(standby: psycopg.Connection, lsn: str) -> int:
    """Bytes of WAL up to ``lsn`` the standby has not replayed yet (0 when it has)."""
    row = standby.execute(
        "SELECT pg_wal_lsn_diff(%s::pg_lsn, pg_last_wal_replay_lsn())", [lsn]
    ).fetchone()
    return max(0, int(row[0]))


def _wait_for_replay(primary_url: str, standby_url: str) -> None:
    """Wait until the standby's copy of the database has replayed the primary's current WAL
    position; exit with a message after :data:`CATCH_UP_SECONDS`."""
    with psycopg.connect(primary_url, autocommit=True) as primary:
        lsn = primary.execute("SELECT pg_current_wal_lsn()::text").fetchone()[0]
    deadline = time.monotonic() + CATCH_UP_SECONDS
    last: Exception | None = None
    while time.monotonic() < deadline:
        try:
            with psycopg.connect(standby_url, autocommit=True, connect_timeout=10) as standby:
                if _replay_behind(standby, lsn) == 0:
                    return
        except psycopg.Error as exc:  # the database is not on the standby yet
            last = exc
        time.sleep(0.2)
    raise SystemExit(
        f"python -m bench.replicas: the standby {standby_url} did not replay the primary's "
        f"{lsn} within {CATCH_UP_SECONDS:.0f} s; is it a standby of {primary_url}? "
        f"(last error: {last})"
    )


class LagSampler(threading.Thread):
    """Every :data:`LAG_INTERVAL` seconds until :attr:`stop` is set: the primary's
    ``pg_current_wal_lsn()``, the bytes the standby is behind it, and the milliseconds until the
    standby has replayed it (polled every millisecond). Samples go to :attr:`samples` as
    ``(bytes, ms)``; an error ends the thread and is kept in :attr:`error`."""

    def __init__(self, primary_url: str, standby_url: str) -> None:
        super().__init__(daemon=True)
        self.primary_url = primary_url
        self.standby_url = standby_url
        self.stop = threading.Event()
        self.samples: list[tuple[int, float]] = []
        self.error: BaseException | None = None

    def run(self) -> None:
        """The sampling loop."""
        try:
            with (
                psycopg.connect(self.primary_url, autocommit=True) as primary,
                psycopg.connect(self.standby_url, autocommit=True) as standby,
            ):
                while True:  # one sample at least, however short the load
                    lsn = primary.execute("SELECT pg_current_wal_lsn()::text").fetchone()[0]
                    read = time.perf_counter()
                    behind = first = _replay_behind(standby, lsn)
                    while behind and time.perf_counter() - read < CATCH_UP_SECONDS:
                        time.sleep(0.001)
                        behind = _replay_behind(standby, lsn)
                    self.samples.append((first, (time.perf_counter() - read) * 1000))
                    if self.stop.wait(LAG_INTERVAL):
                        break
        except BaseException as error:
            self.error = error


def _inputs(primary_url: str) -> list[tuple[str, str]]:
    """``(org, agent)`` pairs with the most sessions: the list's and count's inputs."""
    with psycopg.connect(primary_url, autocommit=True) as conn:
        return [
            (org, agent)
            for org, agent, _ in conn.execute(
                "SELECT split_part(scope, '/', 1) AS org, agent_id, count(*) "
                "FROM cortex_sessions_session GROUP BY 1, 2 ORDER BY 3 DESC, 1, 2 LIMIT 10"
            ).fetchall()
        ]


def _targets(primary_url: str) -> list[tuple[Any, str]]:
    """One session per writer: ``(id, scope)``."""
    with psycopg.connect(primary_url, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT id, scope FROM cortex_sessions_session WHERE title NOT LIKE 'bench:%%' "
            "ORDER BY id LIMIT %s",
            [run.WRITERS],
        ).fetchall()
    if len(rows) < run.WRITERS:
        raise SystemExit(
            f"python -m bench.replicas: fewer than {run.WRITERS} sessions to append to"
        )
    return [(row[0], row[1]) for row in rows]


def _read_calls(org: str, agent: str) -> dict[str, Callable[[], object]]:
    from cortex_sessions import services

    by_agent = services.SessionFilters(agent_id=agent)
    searched = services.SessionFilters(q=SEARCH_WORD)
    return {
        "list": lambda: services.list_sessions(scope=org, filters=by_agent, limit=50),
        "count": lambda: services.count_sessions(scope=org, filters=by_agent),
        "search": lambda: services.list_sessions(scope=org, filters=searched, limit=50),
    }


def _sqlstate(exc: BaseException) -> str | None:
    value = getattr(exc.__cause__, "sqlstate", None)
    return value if isinstance(value, str) else None


def _timed_read(
    call: Callable[[], object], way: str, token: Callable[[], str]
) -> tuple[float, bool, bool]:
    """Run ``call`` the ``way`` named; returns (seconds, served by the primary, the replica
    failed it and it ran again on the primary). The token, when the way needs one, is read
    before the clock starts."""
    from django.db import InterfaceError, OperationalError

    from cortex_sessions import consistency, routers

    sent = token() if way == "router+token" else None
    with consistency.consistency_context(sent):
        started = time.perf_counter()
        try:
            if way == "primary":
                with consistency.primary_reads():
                    call()
            else:
                call()
        except (OperationalError, InterfaceError) as exc:
            alias = consistency.replica_used()
            if alias is None or way == "primary":
                raise
            if _sqlstate(exc) != RECOVERY_CONFLICT:
                routers.mark_down(alias)
            with consistency.primary_reads():  # as the API does (docs/scaling.md, Failures)
                call()
            return time.perf_counter() - started, True, True
        seconds = time.perf_counter() - started
        return seconds, consistency.replica_used() is None, False


def measure(
    scale: Scale, standby_url: str, *, appends: int, say: Callable[[str], None] = print
) -> dict[str, Any]:
    """Time the reads under the writers' load (Django set up with ``BENCH_REPLICA_URL``; the
    data loaded and replayed). See the module's docstring.

    Returns:
        ``{"sessions", "writers", "appends", "load": {...}, "reads": [...], "lag": {...}}``.

    Raises:
        RuntimeError: the load failed (a writer process), the reader saw no read while the
            writers wrote, or the lag sampler failed.
    """
    from django.db import connections

    from cortex_sessions import routers

    primary_url = database_url(scale.database)
    inputs = _inputs(primary_url)
    targets = _targets(primary_url)
    token_conn = psycopg.connect(primary_url, autocommit=True)

    def token() -> str:
        return str(token_conn.execute("SELECT pg_current_wal_lsn()::text").fetchone()[0])

    calls = [_read_calls(org, agent) for org, agent in inputs]
    routers.forget_statuses()
    for way in WAYS:  # untimed: connections, plans, the router's first status
        for read in READS:
            _timed_read(calls[0][read], way, token)

    samples: dict[tuple[str, str], list[float]] = {(r, w): [] for r in READS for w in WAYS}
    to_primary = dict.fromkeys(samples, 0)
    retried = dict.fromkeys(samples, 0)
    started = threading.Event()
    finished = threading.Event()
    load: dict[str, Any] = {}

    sampler = LagSampler(primary_url, replica_database_url(standby_url, scale.database))

    def writers() -> None:
        try:
            load["wall"], load["median_ms"] = run._concurrent_processes(
                "app", primary_url, targets, appends, WRITER_TEXT, on_start=started.set
            )
        except BaseException as error:
            load["error"] = error
        finally:
            started.set()
            finished.set()
            sampler.stop.set()  # the lag is sampled under the load only

    loader = threading.Thread(target=writers, daemon=True)
    loader.start()
    started.wait()
    sampler.start()
    turn = 0
    try:
        while not finished.is_set():
            call = calls[turn % len(calls)]
            for offset in range(len(WAYS)):  # each way first in turn
                way = WAYS[(turn + offset) % len(WAYS)]
                for read in READS:
                    if finished.is_set():
                        break
                    seconds, primary, failed = _timed_read(call[read], way, token)
                    samples[read, way].append(seconds * 1000)
                    to_primary[read, way] += primary
                    retried[read, way] += failed
            turn += 1
    finally:
        sampler.stop.set()
        loader.join()
        sampler.join()
        token_conn.close()
        connections.close_all()
    if "error" in load:
        raise RuntimeError("the writers' load failed") from load["error"]
    if sampler.error is not None:
        raise RuntimeError("the replay lag sampler failed") from sampler.error
    if not samples[READS[0], WAYS[0]]:
        raise RuntimeError("no read was timed while the writers wrote")
    total = run.WRITERS * appends
    reads = [
        {
            "read": read,
            "way": way,
            "reads": len(samples[read, way]),
            "median_ms": round(statistics.median(samples[read, way]), 2),
            "p95_ms": round(percentile(samples[read, way], 0.95), 2),
            "to_primary": round(to_primary[read, way] / len(samples[read, way]), 3),
            "replica_failed": retried[read, way],
        }
        for read in READS
        for way in WAYS
    ]
    lag: dict[str, Any] = {"samples": len(sampler.samples), "interval_s": LAG_INTERVAL}
    if sampler.samples:
        behind = [float(sample[0]) for sample in sampler.samples]
        millis = [sample[1] for sample in sampler.samples]
        for name, values in (("bytes", behind), ("ms", millis)):
            lag[name] = {
                "median": round(statistics.median(values), 2),
                "p95": round(percentile(values, 0.95), 2),
                "max": round(max(values), 2),
            }
    result = {
        "sessions": scale.sessions,
        "writers": run.WRITERS,
        "appends": total,
        "load": {
            "wall_s": round(load["wall"], 2),
            "appends_per_s": round(total / load["wall"]),
            "append_median_ms": round(load["median_ms"], 2),
        },
        "reads": reads,
        "lag": lag,
    }
    for line in report(result):
        say(line)
    return result


def report(result: dict[str, Any]) -> list[str]:
    """The printed lines of a :func:`measure` result."""
    load = result["load"]
    lines = [
        f"-- replicas: {result['sessions']:,} sessions; {result['writers']} writer processes, "
        f"{result['appends']:,} one-message appends in {load['wall_s']} s "
        f"({load['appends_per_s']:,}/s, append median {load['append_median_ms']} ms)",
        f"{'read':<8} {'served by':<14} {'reads':>6} {'median ms':>10} {'p95 ms':>8} "
        f"{'to primary':>11} {'replica failed':>15}",
    ]
    for row in result["reads"]:
        lines.append(
            f"{row['read']:<8} {row['way']:<14} {row['reads']:>6} {row['median_ms']:>10.2f} "
            f"{row['p95_ms']:>8.2f} {row['to_primary']:>10.0%} {row['replica_failed']:>15}"
        )
    lag = result["lag"]
    if "ms" in lag:
        lines.append(
            f"replay lag ({lag['samples']} samples, every {lag['interval_s']} s): "
            f"behind by {lag['bytes']['median']:,.0f} B median, {lag['bytes']['p95']:,.0f} B p95, "
            f"{lag['bytes']['max']:,.0f} B max; replayed after {lag['ms']['median']} ms median, "
            f"{lag['ms']['p95']} ms p95, {lag['ms']['max']} ms max"
        )
    else:
        lines.append("replay lag: no sample (the load ended first)")
    return lines


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be 1 or more, not {value}")
    return value


def _generated(scale: Scale) -> bool:
    try:
        with psycopg.connect(database_url(scale.database)) as conn:
            count = conn.execute("SELECT count(*) FROM cortex_sessions_session").fetchone()[0]
    except psycopg.Error:
        return False
    return bool(count >= scale.sessions)


def main(argv: list[str] | None = None) -> None:
    """Parse the command line and run (see the module's docstring).

    Raises:
        SystemExit: status 1: no standby is configured (:data:`NO_STANDBY`), it cannot be reached, is
            not a standby, or does not replay the primary.
    """
    parser = argparse.ArgumentParser(
        prog="python -m bench.replicas", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--replica-url", default=os.environ.get(REPLICA_ENV))
    parser.add_argument(
        "--sessions",
        type=_positive,
        default=2_000,
        help=f"sessions loaded (at least {run.WRITERS})",
    )
    parser.add_argument(
        "--appends", type=_positive, default=500, help="timed appends of each writer process"
    )
    parser.add_argument("--regenerate", action="store_true", help="reload the data first")
    parser.add_argument(
        "--output",
        type=Path,
        default=run.RESULTS / "replicas.json",
        help="where the figures are written (default: bench/results/replicas.json)",
    )
    args = parser.parse_args(argv)
    if not args.replica_url:
        raise SystemExit(NO_STANDBY)
    _check_standby(args.replica_url)
    scale = scale_of(args.sessions)
    standby = replica_database_url(args.replica_url, scale.database)
    os.environ["BENCH_REPLICA_URL"] = standby  # bench.settings: the replica alias and router
    from .setup import setup_django

    setup_django(database_url(scale.database))
    if args.regenerate or not _generated(scale):
        print(f"-- loading {scale.sessions:,} sessions into {scale.database}", flush=True)
        print(json.dumps(generate(scale)), flush=True)
    else:
        from django.core.management import call_command

        call_command("migrate", verbosity=0)  # the schema under test is the checkout's
    from django.db import connections

    connections.close_all()
    _wait_for_replay(database_url(scale.database), standby)
    result = measure(scale, args.replica_url, appends=args.appends)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(result, indent=2))
    print(f"-- wrote {args.output}")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
