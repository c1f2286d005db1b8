"""Measure the service API against the psycopg floor, the peers and the backfill.

Every operation is timed ``reps`` times (the hot paths at least :data:`HOT_REPS` times), app
and floor interleaved call by call (so a noisy neighbour hurts both alike), and the median is
reported. Each operation is also run once under
``CaptureQueriesContext`` inside a rolled-back transaction: its statements are counted and each
is replayed under ``EXPLAIN (ANALYZE, BUFFERS)``; the plans go to
``bench/results/<scale>/plans/<op>.txt`` and the table says whether any used a sequential scan.
"""

from __future__ import annotations

import json
import os
import platform
import queue
import re
import statistics
import subprocess
import sys
import threading
import time
import uuid
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
#: Fewest timed repetitions of a hot path (append, newest 50, get, resolve): each call takes
#: about a millisecond, and the median of a few dozen moves by 10% from run to run on a
#: shared machine, which is the size of the differences the targets speak of.
HOT_REPS = 300
#: Fewest appends each writer makes in one run of a concurrent load.
WRITER_APPENDS = 200
#: Untimed appends each writer makes on its new connection before a run starts, app and floor
#: alike: the first calls of a new connection pay one-time costs that a web server's worker
#: pays once in thousands of requests (the server compiling the append function and planning
#: its statement; psycopg preparing the floor's statement at its sixth run; the app's caches),
#: ~6 ms for the app's first append and ~5 ms for the floor's here.
WRITER_WARMUP = 10
#: Paired rounds of each concurrent load (:func:`_paired`): one run of 1,600 appends moves by
#: ±20% with the machine (checkpoints, neighbours on a shared host); the median of the
#: per-round ratios moves by a few percent.
WRITER_ROUNDS = 9
#: Seconds the parent waits for every writer to be ready (a writer process's set-up and
#: warm-up take a few seconds), and a ready writer for the start: past it the run fails.
WRITER_BARRIER_TIMEOUT = 120
#: Seconds the parent waits for all writers' results after the start (a run takes a few
#: seconds); then the run fails, and the writer processes still running are stopped.
WRITER_TIMEOUT = 600
#: Seconds between the parent's looks at its writer processes while it waits for them: one
#: that died without a word (killed outright) fails the run at the next look.
WRITER_POLL = 1.0
#: Seconds the parent waits for a writer process to end once its run is over (or stopped with
#: SIGTERM); then it is killed (SIGKILL ends a process that SIGSTOP holds, SIGTERM does not).
WRITER_JOIN_TIMEOUT = 10.0

#: Targets for app/floor, by operation family (docs/performance.md): the hot paths (append with
#: and without a key, newest 50, get, resolve) and the context read within 1.5× the
#: one-statement floor (they run on public APIs only), the lists within 2.0×.
TARGETS = {"append": 1.5, "get": 1.5, "newest": 1.5, "list": 2.0, "context": 1.5}
#: The budget of the context read's benchmark (docs/design.md §16.4), in tokens.
CONTEXT_BUDGET = 8000


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
    #: The app with ``PREPARED_STATEMENTS`` on (hot paths only).
    prepared_ms: float | None = None
    #: A second floor: the statements the ORM path sends (three for an append, two for a
    #: page of messages), for comparison with the one-statement floor.
    floor2_ms: float | None = None

    @property
    def ratio(self) -> float | None:
        """app / floor."""
        if self.app_ms is None or not self.floor_ms:
            return None
        return self.app_ms / self.floor_ms

    @property
    def prepared_ratio(self) -> float | None:
        """app with prepared statements / floor."""
        if self.prepared_ms is None or not self.floor_ms:
            return None
        return self.prepared_ms / self.floor_ms

    @property
    def ratio2(self) -> float | None:
        """app / second floor."""
        if self.app_ms is None or not self.floor2_ms:
            return None
        return self.app_ms / self.floor2_ms

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready, with the ratios."""
        data = asdict(self)
        for name in ("ratio", "prepared_ratio", "ratio2"):
            value = getattr(self, name)
            data[name] = None if value is None else round(value, 2)
        return data


# -- measuring ------------------------------------------------------------------------------------


def timed(
    fns: Sequence[Callable[[Any], Any]], inputs: Sequence[Any], reps: int, warmup: int = 5
) -> list[float]:
    """Median milliseconds of each ``fn(x)``, the functions interleaved call by call over
    ``inputs``.

    The order in which they run rotates, so none always finds the pages another just read in
    the buffer cache.
    """

    def clock(fn: Callable[[Any], Any], item: Any) -> float:
        started = time.perf_counter()
        fn(item)
        return time.perf_counter() - started

    for index in range(warmup):
        for fn in fns:
            fn(inputs[index % len(inputs)])
    times: list[list[float]] = [[] for _ in fns]
    for index in range(reps):
        item = inputs[index % len(inputs)]
        order = list(range(len(fns)))
        shift = index % len(fns)
        for number in order[shift:] + order[:shift]:
            times[number].append(clock(fns[number], item))
    return [statistics.median(series) * 1000 for series in times]


def timed_pair(
    app: Callable[[Any], Any],
    base: Callable[[Any], Any],
    inputs: Sequence[Any],
    reps: int,
    warmup: int = 5,
) -> tuple[float, float]:
    """Median milliseconds of ``app(x)`` and ``base(x)``, interleaved over ``inputs``."""
    app_ms, base_ms = timed([app, base], inputs, reps, warmup)
    return app_ms, base_ms


def prepared(fn: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """``fn`` run with ``CORTEX_SESSIONS["PREPARED_STATEMENTS"] = True`` (the settings dict
    is changed in place around the call: ``override_settings`` would cost more than the call)."""
    from django.conf import settings

    def call(item: Any) -> Any:
        settings.CORTEX_SESSIONS["PREPARED_STATEMENTS"] = True
        try:
            return fn(item)
        finally:
            settings.CORTEX_SESSIONS["PREPARED_STATEMENTS"] = False

    return call


def queries_outside_a_transaction(fn: Callable[[], Any]) -> int:
    """How many statements one call of ``fn`` sends in autocommit (transaction control not
    counted); what it writes stays."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    with CaptureQueriesContext(connection) as captured:
        fn()
    return len([q for q in captured.captured_queries if not CONTROL.match(q["sql"])])


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


#: A call of one of the app's PL/pgSQL functions (append, get, resolve: docs/design.md §14.1),
#: whose own plan is a bare ``Result``, or of a table function called in ``FROM`` (the newest
#: page), whose own plan is a ``Function Scan``: the plans that matter are those of its statement.
FUNCTION_CALL = re.compile(r"^SELECT (?:\* FROM )?cortex_sessions_\w+\(")


def _nested_plans(connection: Any, cursor: Any, sql: str) -> str:
    """The plans of the statements the function call ``sql`` runs, as the server runs them
    (its kept plan, ``$n`` where a generic one): ``auto_explain`` with nested statements,
    reported to the client as ``LOG`` messages, run with ``cursor`` in its transaction (which
    the caller rolls back)."""
    raw = connection.connection
    found: list[str] = []

    def collect(diagnostic: Any) -> None:
        text = diagnostic.message_primary or ""
        if "plan:" in text and not FUNCTION_CALL.search(text.split("Query Text: ", 1)[-1]):
            found.append(text.split("plan:", 1)[1].strip())

    raw.add_notice_handler(collect)
    try:
        cursor.execute("LOAD 'auto_explain'")
        for setting in ("log_min_duration", "log_nested_statements", "log_analyze", "log_buffers"):
            value = "0" if setting == "log_min_duration" else "on"
            cursor.execute(f"SET LOCAL auto_explain.{setting} = {value}")
        cursor.execute("SET LOCAL client_min_messages = log")
        cursor.execute(sql)
        cursor.execute("SET LOCAL client_min_messages = notice")
    finally:
        raw.remove_notice_handler(collect)
    return "\n".join(f"-- its statement:\n{plan}" for plan in found)


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
                if FUNCTION_CALL.match(sql):
                    plan += "\n" + _nested_plans(connection, cursor, sql)
                parts.append(f"-- {sql}\n{plan}\n")
        transaction.set_rollback(True)
    text = "\n".join(parts)
    plan_file.parent.mkdir(parents=True, exist_ok=True)
    plan_file.write_text(text)
    return len(statements), _plan_summary(text)


def _concurrent(
    worker: Callable[[int, Callable[[], None], list[float]], None],
) -> tuple[float, float]:
    """Run ``WRITERS`` threads of ``worker``; returns (wall seconds, median latency ms).

    ``worker(number, start, latencies)`` warms up, calls ``start()`` — a barrier of the
    writers and the parent — and appends each timed call's seconds to ``latencies``. The
    barrier's waits time out after :data:`WRITER_BARRIER_TIMEOUT`, and a writer that fails
    before its start breaks it for everyone (one that fails after it breaks nothing); the
    parent waits :data:`WRITER_TIMEOUT` for the writers to end (threads cannot be stopped: a
    hung one is left running as a daemon).

    Raises:
        RuntimeError: a writer raised, returned without calling ``start()`` or called it
            twice (the first one's error is the cause; writers whose start met the barrier
            another broke are not counted as failed), a writer never reached the barrier, one
            still runs after :data:`WRITER_TIMEOUT`, or none timed a call.
    """
    barrier = threading.Barrier(WRITERS + 1, timeout=WRITER_BARRIER_TIMEOUT)
    latencies: list[float] = []
    errors: dict[int, BaseException] = {}
    started_writers: set[int] = set()
    broken_starts: set[int] = set()  # writers whose start met a broken barrier

    def run(number: int) -> None:
        def start() -> None:
            if number in started_writers:  # a second wait would break the barrier later
                raise RuntimeError(f"writer {number} called start() twice")
            try:
                barrier.wait()
            except threading.BrokenBarrierError:
                broken_starts.add(number)
                raise
            started_writers.add(number)

        try:
            worker(number, start, latencies)
            if number not in started_writers and number not in broken_starts:
                # Else the others would wait out the barrier's timeout and the run would
                # report them all as hung.
                raise RuntimeError(f"writer {number} returned without calling start()")
        except BaseException as error:
            errors[number] = error
            # Aborting a barrier that has just let everyone through breaks the waits of the
            # writers not yet awake: only a writer that has not started aborts.
            if number not in started_writers:
                barrier.abort()

    threads = [
        threading.Thread(target=run, args=(number,), daemon=True) for number in range(WRITERS)
    ]
    for thread in threads:
        thread.start()
    try:
        barrier.wait()
        broken = False
    except threading.BrokenBarrierError:
        broken = True
    started = time.perf_counter()
    # After a broken barrier the writers waiting at it end at once; a hung one never does.
    limit = WRITER_POLL if broken else WRITER_TIMEOUT
    for thread in threads:
        thread.join(max(0.0, started + limit - time.perf_counter()))
    wall = time.perf_counter() - started
    failed = {n: e for n, e in errors.items() if n not in broken_starts}
    if failed:
        number, error = min(failed.items())
        raise RuntimeError(
            f"{len(failed)} of {WRITERS} writer threads failed (the first: writer {number})"
        ) from error
    hung = sum(thread.is_alive() for thread in threads)
    if broken:  # yet nobody failed: a writer never arrived in time
        raise RuntimeError(
            f"the writer threads' start barrier timed out after {WRITER_BARRIER_TIMEOUT} s: "
            f"{hung} of {WRITERS} writers never reached it (hung)"
        )
    if hung:
        raise RuntimeError(f"{hung} of {WRITERS} writer threads still run after {WRITER_TIMEOUT} s")
    if not latencies:
        raise RuntimeError(f"none of the {WRITERS} writer threads timed a call")
    return wall, statistics.median(latencies) * 1000


def _app_appends(target: tuple[Any, str], appends: int, text: str, latencies: list[float]) -> None:
    """``appends`` one-message appends of ``text`` to ``target`` (session id, scope) through
    ``services.append_messages`` at the scope's org, each one's seconds added to ``latencies``."""
    from cortex_sessions import services

    session_id, scope = target
    for _ in range(appends):
        started = time.perf_counter()
        services.append_messages(
            scope=_org(scope), session_id=session_id, messages=[{"role": "user", "content": text}]
        )
        latencies.append(time.perf_counter() - started)


def _floor_appends(
    conn: psycopg.Connection,
    target: tuple[Any, str],
    appends: int,
    text: str,
    latencies: list[float],
) -> None:
    """:func:`_app_appends` with the floor's one statement on ``conn``."""
    session_id, scope = target
    for _ in range(appends):
        started = time.perf_counter()
        floor.append_one(conn, scope=_org(scope), session_id=session_id, role="user", text=text)
        latencies.append(time.perf_counter() - started)


def _process_writer(
    kind: str,
    url: str,
    number: int,
    target: tuple[Any, str],
    appends: int,
    text: str,
    start: Any,
    messages: Any,
) -> None:
    """Writer process ``number`` of :func:`_concurrent_processes` (module level: ``spawn``
    imports it): Django set up afresh (``app``; ``prepared``: with ``PREPARED_STATEMENTS``) or
    a psycopg connection (``floor``), then :data:`WRITER_WARMUP` untimed one-message appends
    to ``target``; puts ``("ready", number)`` on ``messages`` and waits for a unit of the
    ``start`` semaphore, then makes ``appends`` timed ones and puts ``("done", number,
    (latencies, client CPU seconds, server CPU seconds))``, or at any point ``("error",
    number, text of its error)``. The CPU is what the timed appends used: this process's
    (``time.process_time``) and its server process's (:func:`_backend_cpu`; ``None`` when the
    server runs on another machine)."""
    latencies: list[float] = []
    cpu: list[Any] = []

    def timed_appends(backend_pid: int, run: Callable[[], None]) -> None:
        server, client = _backend_cpu(backend_pid), time.process_time()
        run()
        client = time.process_time() - client
        after = _backend_cpu(backend_pid)
        cpu.extend([client, None if server is None or after is None else after - server])

    def started() -> None:
        messages.put(("ready", number))
        if not start.acquire(timeout=WRITER_BARRIER_TIMEOUT):
            raise TimeoutError(f"no start within {WRITER_BARRIER_TIMEOUT} s of being ready")

    try:
        if kind == "floor":
            with psycopg.connect(url, autocommit=True) as conn:
                _floor_appends(conn, target, WRITER_WARMUP, text, [])
                started()
                timed_appends(
                    conn.info.backend_pid,
                    lambda: _floor_appends(conn, target, appends, text, latencies),
                )
        else:
            from .setup import setup_django

            setup_django(url)
            from django.conf import settings
            from django.db import connection

            settings.CORTEX_SESSIONS["PREPARED_STATEMENTS"] = kind == "prepared"
            _app_appends(target, WRITER_WARMUP, text, [])
            started()
            timed_appends(
                connection.connection.info.backend_pid,
                lambda: _app_appends(target, appends, text, latencies),
            )
            connection.close()
    except BaseException as error:
        messages.put(("error", number, f"{type(error).__name__}: {error}"))
        raise
    messages.put(("done", number, (latencies, *cpu)))


def _backend_cpu(pid: int) -> float | None:
    """CPU seconds the server process ``pid`` has used (:func:`_process_cpu`), when it runs on
    this machine; ``None`` otherwise (no process ``pid`` here, or one that is not a PostgreSQL
    server process: the server runs elsewhere)."""
    try:
        with open(f"/proc/{pid}/comm") as comm:
            if comm.read().strip() != "postgres":
                return None
    except OSError:
        return None
    return _process_cpu(pid)


def _process_cpu(pid: int) -> float | None:
    """CPU seconds (user + system) process ``pid`` has used, from ``/proc``; ``None`` where
    that cannot be read (no such process, not Linux)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _gather(messages: Any, processes: Sequence[Any], phase: str, timeout: float) -> dict[int, Any]:
    """Wait until every writer process put ``(phase, number, …)`` on ``messages``; returns
    ``{number: the message's third element, or None}``.

    Looks at the processes every :data:`WRITER_POLL` seconds: a message travels through a
    pipe, so one that died without a word (killed outright; the operating system's exit code
    is negative) is only judged after its messages had the time to arrive. A writer ends only
    after ``done``, so one that ended after it was ready, while others still warm up, fails the
    ``ready`` phase at once.

    Raises:
        RuntimeError: a writer put ``("error", …)`` (its text), one died without putting
            ``done``, or ``timeout`` seconds passed first (the writers it still waits for hung).
    """
    waiting = f"{phase} after {timeout} s" + (" (set-up and warm-up)" if phase == "ready" else "")
    got: dict[int, Any] = {}
    deadline = time.perf_counter() + timeout
    dead: set[int] = set()
    while len(got) < len(processes):
        left = deadline - time.perf_counter()
        if left <= 0:
            missing = sorted(set(range(len(processes))) - set(got))
            raise RuntimeError(
                f"{len(missing)} of {len(processes)} writer processes were not {waiting}: "
                f"writers {missing} hung"
            )
        try:
            kind, number, *rest = messages.get(timeout=min(WRITER_POLL, left))
        except queue.Empty:
            for number, process in enumerate(processes):
                finished = phase == "done" and number in got
                if number in dead and not finished:  # dead at the last look, still silent
                    when = (
                        "after it was ready, before it was done"
                        if number in got
                        else (f"before it was {phase}")
                    )
                    raise RuntimeError(
                        f"writer process {number} ended (exit code {process.exitcode}) {when},"
                        " without a word (killed?)"
                    ) from None
                if process.exitcode is not None:
                    dead.add(number)
            continue
        if kind == "error":
            raise RuntimeError(f"writer process {number} failed: {rest[0]}")
        if kind == phase:
            got[number] = rest[0] if rest else None
    return got


def _reap(processes: Sequence[Any], *, stop: bool) -> None:
    """Wait for writer processes to end, sending each ``SIGTERM`` first if ``stop``; one still
    running after :data:`WRITER_JOIN_TIMEOUT` seconds is killed (``SIGKILL``, which also ends a
    process held by ``SIGSTOP``, where ``SIGTERM`` waits for it to continue)."""
    if stop:
        for process in processes:
            process.terminate()
    for process in processes:
        process.join(WRITER_JOIN_TIMEOUT)
        if process.exitcode is None:
            process.kill()
            process.join()


def _concurrent_processes(
    kind: str,
    url: str,
    targets: Sequence[tuple[Any, str]],
    appends: int,
    text: str,
    on_start: Callable[[], None] | None = None,
    cpu: dict[str, float | None] | None = None,
) -> tuple[float, float]:
    """Run ``WRITERS`` writer processes (``kind``: ``app``, ``prepared`` or ``floor``), as a
    web server's workers are; returns (wall seconds from the start to the last writer's end,
    median latency ms). Processes are started with ``spawn``, so none inherits a connection.

    The start is a semaphore the parent releases once per writer when all are ready, not a
    ``multiprocessing.Barrier``: a process killed while it waits at one leaves the others
    waiting for it forever (the barrier's condition waits for every sleeper to wake).
    ``on_start``, if given, is called once the writers are released (``python -m
    bench.replicas`` starts its readers then). ``cpu``, if given, receives the CPU
    milliseconds an append took on average: ``client`` (the writer processes') and ``server``
    (their server processes'; ``None`` when the server runs elsewhere).

    Raises:
        RuntimeError: a writer failed, died, or was not ready or done in time (see
            :func:`_gather`); the writers still running are stopped first.
    """
    import multiprocessing

    context = multiprocessing.get_context("spawn")
    start = context.Semaphore(0)
    messages = context.Queue()
    processes = [
        context.Process(
            target=_process_writer,
            args=(kind, url, number, targets[number], appends, text, start, messages),
        )
        for number in range(WRITERS)
    ]
    for process in processes:
        process.start()
    try:
        _gather(messages, processes, "ready", WRITER_BARRIER_TIMEOUT)
        for _ in processes:
            start.release()
        started = time.perf_counter()
        if on_start is not None:
            on_start()
        outcomes = _gather(messages, processes, "done", WRITER_TIMEOUT)
        wall = time.perf_counter() - started
    except BaseException:
        _reap(processes, stop=True)  # a writer still running after a failure is stopped
        raise
    _reap(processes, stop=False)
    return wall, _writers_outcome(list(outcomes.values()), cpu)


def _writers_outcome(
    outcomes: Sequence[tuple[list[float], float, float | None]],
    cpu: dict[str, float | None] | None = None,
) -> float:
    """The median latency in milliseconds of the writer processes' ``outcomes`` (each
    ``(latencies in seconds, client CPU seconds, server CPU seconds or None)``, as
    :func:`_process_writer` reports them); ``cpu``, if given, receives the CPU milliseconds
    per append of the writers (``client``) and of their server processes (``server``: ``None``
    when a writer could not read its server process's)."""
    latencies = [value for outcome in outcomes for value in outcome[0]]
    if cpu is not None:
        servers = [outcome[2] for outcome in outcomes if outcome[2] is not None]
        cpu["client"] = sum(outcome[1] for outcome in outcomes) / len(latencies) * 1000
        cpu["server"] = (
            sum(servers) / len(latencies) * 1000 if len(servers) == len(outcomes) else None
        )
    return statistics.median(latencies) * 1000


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
    heavy: int = 0,
    say: Callable[[str], None] = print,
) -> dict[str, Any]:
    """Run every benchmark of the scale (the database must be generated); with ``heavy``, then
    append that many messages and show the plans of prefix reads (:func:`after_heavy_appends`).

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
    # What autovacuum would have done since the last run (the bench server has it off): the
    # appends of an earlier run leave dead versions of the session rows and, at the top of the
    # recent index, dead entries that a newest-first list would walk through.
    base.execute(f"VACUUM (ANALYZE, INDEX_CLEANUP ON) {floor.SESSION_TABLE}")
    fx = _fixtures(base, scale)
    connection.ensure_connection()

    def read_op(
        name: str, target: float | None, app, flo, inputs, note: str = "", with_prepared=False
    ) -> None:
        # A list's row also times the app with PREPARED_STATEMENTS (``with_prepared``): its
        # statement is then planned once per connection, as the floor's is after psycopg's
        # fifth run, so the prepared column shows what per-call planning costs the app.
        fns = [app, prepared(app), flo] if with_prepared else [app, flo]
        medians = timed(fns, inputs, reps)
        queries, plan = queries_and_plans(lambda: app(inputs[0]), plans / f"{name}.txt")
        row = Row(name, medians[0], medians[-1], queries, plan, target, note)
        if with_prepared:
            row.prepared_ms = medians[1]
        rows.append(row)
        say(_format_row(row))

    def hot_op(
        name: str, target: float, app, flo, inputs, note: str = "", flo2=None, plan=True
    ) -> None:
        fns = [app, prepared(app), flo] + ([flo2] if flo2 else [])
        medians = timed(fns, inputs, max(reps, HOT_REPS))
        if plan:
            queries, plan = queries_and_plans(lambda: app(inputs[0]), plans / f"{name}.txt")
        else:  # a call that differs inside a transaction: counted outside one, not planned
            queries, plan = queries_outside_a_transaction(lambda: app(inputs[0])), "-"
        row = Row(name, medians[0], medians[2], queries, plan, target, note)
        row.prepared_ms = medians[1]
        row.floor2_ms = medians[3] if flo2 else None
        rows.append(row)
        say(_format_row(row))

    say(
        f"-- {scale.name}: {reps} reps per operation ({max(reps, HOT_REPS)} for the hot paths), "
        "medians"
    )
    say(_header())
    lists = [
        ("list prefix (project)", fx["projects"], {}),
        ("list prefix (org)", fx["orgs"], {}),
        ("list exact", fx["leaves"], {"exact": True}),
        ("list prefix + search", fx["projects"], {"search": "billing"}),
        ("list prefix + default_only", fx["projects"], {"default_only": True}),
    ]
    for name, scopes, kwargs in lists:
        filters = services.SessionFilters(**kwargs)
        read_op(
            name,
            TARGETS["list"],
            lambda s, f=filters: services.list_sessions(scope=s, filters=f, limit=50),
            lambda s, kw=kwargs: floor.list_sessions(base, scope=s, limit=50, **kw),
            scopes,
            "page of 50, -updated_at",
            with_prepared=True,
        )
    # Page 21 of an org's sessions: by offset (the database skips 1,000 rows) and by cursor
    # (keyset: starts after the 1,000th row), against page 1.
    cursors = {}
    for org in fx["orgs"]:
        page = services.list_sessions_page(scope=org, limit=1000)
        cursors[org] = page.next_cursor
    read_op(
        "list prefix (org), page 21 by offset",
        TARGETS["list"],
        lambda s: services.list_sessions(scope=s, limit=50, offset=1000),
        lambda s: floor.list_sessions(base, scope=s, limit=50, offset=1000),
        fx["orgs"],
        "limit 50 offset 1000",
    )
    read_op(
        "list prefix (org), page 21 by cursor",
        TARGETS["list"],
        lambda s: services.list_sessions_page(scope=s, limit=50, cursor=cursors[s]),
        lambda s: floor.list_sessions(base, scope=s, limit=50, offset=1000),
        fx["orgs"],
        "keyset; floor: limit 50 offset 1000",
    )
    counts = [
        ("count prefix (project)", fx["projects"], {}),
        ("count prefix (org)", fx["orgs"], {}),
        ("count exact", fx["leaves"], {"exact": True}),
    ]
    for name, scopes, kwargs in counts:
        filters = services.SessionFilters(**kwargs)
        read_op(
            name,
            None,
            lambda s, f=filters: services.count_sessions(scope=s, filters=f),
            lambda s, kw=kwargs: floor.count_sessions(base, scope=s, **kw),
            scopes,
        )
    # Per-tenant accounting (docs/design.md §16.1): an org's usage, whole and grouped.
    for name, group_by in (
        ("usage totals (org)", None),
        ("usage by agent (org)", "agent_id"),
        ("usage by scope level (org)", "scope"),
    ):
        read_op(
            name,
            None,
            lambda s, g=group_by: services.usage_totals(scope=s, group_by=g),
            lambda s, g=group_by: floor.usage_totals(base, scope=s, group_by=g),
            fx["orgs"],
            "one statement over the org's live sessions",
        )
    hot_op(
        "get by id",
        TARGETS["get"],
        lambda item: services.get_session(scope=_org(item[1]), session_id=item[0]),
        lambda item: floor.get_session(base, scope=_org(item[1]), session_id=item[0]),
        fx["sample"],
        "scope = the org",
    )
    hot_op(
        "resolve default (existing)",
        TARGETS["get"],
        lambda item: services.resolve_session(scope=item[1], agent_id=item[0]),
        lambda item: floor.resolve_existing(base, scope=item[1], agent_id=item[0]),
        fx["defaults"],
    )
    for key, label in (
        ("big", "100k-msg session"),
        ("peer", f"{scale.peer_messages:,}-msg session"),
    ):
        session_id, session_scope = fx[key]
        hot_op(
            f"newest 50 of {label}",
            TARGETS["newest"],
            lambda _, i=session_id, s=session_scope: services.list_messages(
                scope=_org(s), session_id=i, limit=50
            ),
            lambda _, i=session_id, s=session_scope: floor.recent_messages(
                base, scope=_org(s), session_id=i
            ),
            [None],
            "floor: 1 statement; floor 2: session check + page",
            flo2=lambda _, i=session_id, s=session_scope: floor.recent_messages_two_statements(
                base, scope=_org(s), session_id=i
            ),
        )
    big_id, big_scope = fx["big"]
    hot_op(
        f"context read of 100k-msg session, max_tokens={CONTEXT_BUDGET}",
        TARGETS["context"],
        lambda _: services.context_messages(
            scope=_org(big_scope), session_id=big_id, max_tokens=CONTEXT_BUDGET
        ),
        lambda _: floor.context_window(
            base, scope=_org(big_scope), session_id=big_id, max_tokens=CONTEXT_BUDGET
        ),
        [None],
        "1 statement: a walk newest first stopped one message past the budget",
    )
    targets = fx["sample"][:20]
    text = "Please look at the failing test in the billing module and propose a fix."
    hot_op(
        "append one message",
        TARGETS["append"],
        lambda item: services.append_messages(
            scope=_org(item[1]), session_id=item[0], messages=[{"role": "user", "content": text}]
        ),
        lambda item: floor.append_one(
            base, scope=_org(item[1]), session_id=item[0], role="user", text=text
        ),
        targets,
        "floor: 1 statement; floor 2: lock + insert + update",
        flo2=lambda item: floor.append_three_statements(
            base, scope=_org(item[1]), session_id=item[0], role="user", text=text
        ),
    )
    unkeyed_queries = rows[-1].queries
    hot_op(
        "append one message with Idempotency-Key",
        TARGETS["append"],
        lambda item: services.append_messages(
            scope=_org(item[1]),
            session_id=item[0],
            messages=[{"role": "user", "content": text}],
            idempotency_key=f"bench-{uuid.uuid4()}",  # a new key each call: no replay
        ),
        lambda item: floor.append_one_keyed(
            base,
            scope=_org(item[1]),
            session_id=item[0],
            role="user",
            text=text,
            key=f"bench-{uuid.uuid4()}",
        ),
        targets,
        "a new key each call, recorded with the append; floor: the same, 1 statement",
        plan=False,  # inside a caller's transaction the key takes run_once's statements
    )
    rows.extend(_concurrent_appends(url, fx, reps, unkeyed_queries, say))
    base.close()

    results: dict[str, Any] = {
        "scale": asdict(scale),
        "machine": machine_info(url),
        "rows": [row.as_dict() for row in rows],
    }
    if heavy:
        results["after_appends"] = after_heavy_appends(url, scale, fx, heavy, say=say)
    if backfill:
        results["backfill"] = run_backfill(scale, say=say)
    if peers:
        from .peers import run_peers

        results["peers"] = run_peers(scale, reps=reps, say=say)
    return results


def _paired(
    url: str, kinds: dict[str, Callable[[], tuple[float, float]]], rounds: int
) -> dict[str, list[tuple[float, float]]]:
    """Run each of ``kinds`` (name: a run returning (wall seconds, median latency ms)) once a
    round for ``rounds`` rounds, the order rotating from round to round, so that a slow moment
    of the machine (a checkpoint, a neighbour) falls on each kind alike and every app run has
    a floor run of its own round to be compared with.

    The session table is vacuumed before each run (untimed), as autovacuum would have by then
    with migration ``0009``'s settings: a run updates the same few rows 1,600 times, none
    of them a HOT update, and the bench server runs with autovacuum off, so without it every run
    would find more dead row versions and index entries than the one before."""
    names = list(kinds)
    runs: dict[str, list[tuple[float, float]]] = {name: [] for name in names}
    with psycopg.connect(url, autocommit=True) as conn:
        for number in range(rounds):
            shift = number % len(names)
            for name in names[shift:] + names[:shift]:
                conn.execute(f"VACUUM {floor.SESSION_TABLE}")
                runs[name].append(kinds[name]())
    return runs


def _throughput_ratios(
    runs: list[tuple[float, float]], floor_runs: list[tuple[float, float]]
) -> tuple[float, float, float]:
    """(median, lowest, highest) of the per-round throughput ratios app / floor (the floor's
    wall time over the app's, same appends)."""
    ratios = [floor[0] / app[0] for app, floor in zip(runs, floor_runs, strict=True)]
    return statistics.median(ratios), min(ratios), max(ratios)


def _writers_row(
    name: str,
    runs: dict[str, list[tuple[float, float]]],
    total: int,
    queries: int | None,
    rounds: int,
) -> Row:
    """One table row of a concurrent run: throughputs (median of the rounds) and the median,
    lowest and highest per-round ratio to the floor, for the app and (when run) the app with
    prepared statements."""
    app, floor_runs = runs["app"], runs["floor"]
    prepared = runs.get("prepared")
    ratio, low, high = _throughput_ratios(app, floor_runs)
    rate = {
        name: total / statistics.median(run[0] for run in value) for name, value in runs.items()
    }
    note = f"{rate['app']:,.0f}/s"
    extra: dict[str, Any] = {
        "app_appends_per_s": round(rate["app"]),
        "floor_appends_per_s": round(rate["floor"]),
        "throughput_ratio": round(ratio, 2),
        "throughput_ratio_range": [round(low, 2), round(high, 2)],
        "appends_per_run": total,
        "rounds": rounds,
    }
    if prepared is not None:
        p_ratio, p_low, p_high = _throughput_ratios(prepared, floor_runs)
        note += f" (prepared {rate['prepared']:,.0f}/s)"
        extra.update(
            prepared_appends_per_s=round(rate["prepared"]),
            prepared_throughput_ratio=round(p_ratio, 2),
            prepared_throughput_ratio_range=[round(p_low, 2), round(p_high, 2)],
        )
    note += (
        f" vs floor {rate['floor']:,.0f}/s: {ratio:.2f}× the floor's throughput"
        f" (rounds {low:.2f}–{high:.2f}×"
        + (f"; prepared {p_ratio:.2f}×" if prepared is not None else "")
        + f"; median of {rounds} paired rounds)"
    )
    row = Row(
        name,
        statistics.median(run[1] for run in app),
        statistics.median(run[1] for run in floor_runs),
        queries,
        "-",
        TARGETS["append"],
        note,
        extra,
    )
    if prepared is not None:
        row.prepared_ms = statistics.median(run[1] for run in prepared)
    return row


def _concurrent_appends(
    url: str, fx: dict[str, Any], reps: int, queries: int | None, say
) -> list[Row]:
    """8 writer threads appending to 8 distinct sessions, then 8 on one hot session, then 8
    writer processes on the distinct sessions; each load in :data:`WRITER_ROUNDS` paired
    rounds (:func:`_paired`) of the app, the app with prepared statements and the floor."""
    from django.conf import settings
    from django.db import connection

    per_thread = max(WRITER_APPENDS, reps)
    total = WRITERS * per_thread
    text = "A concurrent append from a benchmark writer."
    rows = []
    distinct = fx["sample"][20 : 20 + WRITERS]
    hot = fx["sample"][40]
    for name, targets in (
        (f"append, {WRITERS} writer threads, distinct sessions", distinct),
        (f"append, {WRITERS} writer threads, one hot session", [hot] * WRITERS),
    ):

        def app_worker(
            number: int, start: Callable[[], None], latencies: list[float], targets=targets
        ) -> None:
            try:
                _app_appends(targets[number], WRITER_WARMUP, text, [])
                start()
                _app_appends(targets[number], per_thread, text, latencies)
            finally:
                connection.close()

        def floor_worker(
            number: int, start: Callable[[], None], latencies: list[float], targets=targets
        ) -> None:
            with psycopg.connect(url, autocommit=True) as conn:
                _floor_appends(conn, targets[number], WRITER_WARMUP, text, [])
                start()
                _floor_appends(conn, targets[number], per_thread, text, latencies)

        def prepared_run(app_worker=app_worker) -> tuple[float, float]:
            settings.CORTEX_SESSIONS["PREPARED_STATEMENTS"] = True
            try:
                return _concurrent(app_worker)
            finally:
                settings.CORTEX_SESSIONS["PREPARED_STATEMENTS"] = False

        runs = _paired(
            url,
            {
                "app": lambda app_worker=app_worker: _concurrent(app_worker),
                "prepared": prepared_run,
                "floor": lambda floor_worker=floor_worker: _concurrent(floor_worker),
            },
            WRITER_ROUNDS,
        )
        rows.append(_writers_row(name, runs, total, queries, WRITER_ROUNDS))
        say(_format_row(rows[-1]))
    # The same distinct-session load from 8 processes: no interpreter lock between writers.
    # Each run also measures the CPU an append took, in the writers and in their server
    # processes: with more runnable processes than CPUs, latency follows CPU per append.
    cpu: dict[str, list[dict[str, float | None]]] = {"app": [], "prepared": [], "floor": []}

    def process_run(kind: str) -> tuple[float, float]:
        cpu[kind].append({})
        return _concurrent_processes(kind, url, distinct, per_thread, text, cpu=cpu[kind][-1])

    runs = _paired(
        url,
        {kind: lambda kind=kind: process_run(kind) for kind in ("app", "prepared", "floor")},
        WRITER_ROUNDS,
    )
    row = _writers_row(
        f"append, {WRITERS} writer processes, distinct sessions",
        runs,
        total,
        queries,
        WRITER_ROUNDS,
    )
    row.note += "; " + _cpu_note(row, cpu)
    rows.append(row)
    say(_format_row(row))
    return rows


def _cpu_note(row: Row, cpu: dict[str, list[dict[str, float | None]]]) -> str:
    """The CPU milliseconds per append of each kind (median of the rounds), writer processes'
    and server processes', added to ``row.extra``; returns them as a note."""
    parts = []
    for kind, measured in cpu.items():
        client = statistics.median(run["client"] for run in measured)
        servers = [run["server"] for run in measured]
        server = None if None in servers else statistics.median(servers)
        row.extra[f"{kind}_cpu_ms"] = {
            "client": round(client, 3),
            "server": None if server is None else round(server, 3),
        }
        parts.append(f"{kind} {client:.2f}" + ("" if server is None else f" + {server:.2f}"))
    return "CPU ms per append (writer + server): " + ", ".join(parts)


# -- plans after a heavy append run ---------------------------------------------------------------

HEAVY_BATCH = 1000


def _table_state(conn: psycopg.Connection) -> dict[str, Any]:
    row = conn.execute(
        "SELECT s.n_tup_upd, s.n_tup_hot_upd, s.n_dead_tup, c.relpages, c.relallvisible, "
        "s.last_autovacuum, s.last_autoanalyze FROM pg_stat_user_tables s "
        "JOIN pg_class c ON c.oid = s.relid WHERE s.relname = 'cortex_sessions_session'"
    ).fetchone()
    names = ("updates", "hot_updates", "dead_rows", "pages", "all_visible_pages")
    state = dict(zip(names, row[:5], strict=True))
    state["last_autovacuum"] = str(row[5]) if row[5] else None
    state["last_autoanalyze"] = str(row[6]) if row[6] else None
    return state


def after_heavy_appends(
    url: str, scale: Scale, fx: dict[str, Any], appends: int, *, say: Callable[[str], None] = print
) -> dict[str, Any]:
    """Append ``appends`` messages spread over many sessions, then plan and time the prefix
    reads (count and list of a project and an org) three times: as the table is, after an
    ``ANALYZE`` (what autoanalyze does, without a vacuum), and after a ``VACUUM``.

    Every append moves the session's ``updated_at``, which three indexes hold, so no counter
    update is HOT: each leaves a dead row version and clears the page's all-visible bit, and the
    index-only scans of prefix counts then read the table. The appends are written set-based
    (``HEAVY_BATCH`` sessions per statement, the same row changes as the app's one-statement
    append) so a run of 75,000 takes seconds.

    Returns:
        ``{"appends", "autovacuum", "before": table state, "after": table state,
        "states": {state: {op: {"ms", "plan"}}}}``.
    """
    from cortex_sessions import services

    plans = RESULTS / scale.name / "plans"
    with psycopg.connect(url, autocommit=True) as conn:
        autovacuum = conn.execute("SHOW autovacuum").fetchone()[0]
        before = _table_state(conn)
        ids = [
            row[0]
            for row in conn.execute(
                "SELECT id FROM cortex_sessions_session TABLESAMPLE SYSTEM (20) LIMIT 50000"
            )
        ]
        started = time.perf_counter()
        done = 0
        while done < appends:
            count = min(HEAVY_BATCH, appends - done)
            batch = [ids[(done + n) % len(ids)] for n in range(count)]
            conn.execute(
                "WITH s AS (UPDATE cortex_sessions_session SET last_seq = last_seq + 1, "
                "message_count = message_count + 1, updated_at = now(), "
                "last_message = 'a heavy append' WHERE id = ANY(%s) "
                "RETURNING id, agent_id, scope, last_seq) "
                "INSERT INTO cortex_sessions_message (session_id, agent_id, scope, seq, role, "
                "source, content, metadata, created_at) SELECT id, agent_id, scope, last_seq, "
                '\'user\', \'user\', \'[{"type": "text", "text": "a heavy append"}]\', '
                "'{}', now() FROM s",
                [batch],
            )
            done += count
        seconds = time.perf_counter() - started
        after = _table_state(conn)
        say(
            f"-- {appends:,} appends over {len(ids):,} sessions in {seconds:.0f}s: "
            f"{after['updates'] - before['updates']:,} updates, "
            f"{after['hot_updates'] - before['hot_updates']:,} HOT; autovacuum {autovacuum}"
        )
        ops = {
            "count prefix (project)": lambda: services.count_sessions(scope=fx["projects"][0]),
            "count prefix (org)": lambda: services.count_sessions(scope=fx["orgs"][0]),
            "list prefix (project)": lambda: services.list_sessions(
                scope=fx["projects"][0], limit=50
            ),
            "list prefix (org)": lambda: services.list_sessions(scope=fx["orgs"][0], limit=50),
        }
        states: dict[str, dict[str, Any]] = {}
        for state, command in (
            ("as the table is", None),
            ("after ANALYZE", "ANALYZE cortex_sessions_session"),
            ("after VACUUM", "VACUUM (ANALYZE) cortex_sessions_session"),
        ):
            if command:
                conn.execute(command)
            states[state] = {}
            for name, fn in ops.items():
                slug = re.sub(r"[^a-z]+", "-", f"after appends {state} {name}".lower()).strip("-")
                _, plan = queries_and_plans(fn, plans / f"{slug}.txt")
                ms = statistics.median(_clock_ms(fn) for _ in range(5))
                states[state][name] = {"ms": round(ms, 3), "plan": plan}
                say(f"   {state:<16} {name:<24} {ms:9.3f} ms  {plan}")
            states[state]["table"] = _table_state(conn)
    return {
        "appends": appends,
        "sessions": len(ids),
        "seconds": round(seconds, 1),
        "autovacuum": autovacuum,
        "before": before,
        "after": after,
        "states": states,
    }


def _clock_ms(fn: Callable[[], Any]) -> float:
    started = time.perf_counter()
    fn()
    return (time.perf_counter() - started) * 1000


# -- backfill ---------------------------------------------------------------------------------------


def run_backfill(scale: Scale, *, say: Callable[[str], None] = print) -> list[dict[str, Any]]:
    """Backfill ``scale.backfill_sizes`` legacy messages, each in a fresh child process.

    Each child is started from a lean parent (``bench.lean``), so its peak RSS is its own and
    not the runner's inherited high-water mark; the peak minus its RSS just before the backfill
    shows whether memory grows with the row count. A second run of the same size, with the
    rows reloaded, reports tracemalloc's peak of Python's heap.
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
        result = {**loaded, **_backfill_child(url)}
        # The same backfill again with tracemalloc on (rows reloaded), for Python's heap peak.
        load_legacy(url, rows=rows)
        result["heap_peak_mb"] = _backfill_child(url, "--tracemalloc")["heap_peak_mb"]
        results.append(result)
        say(
            f"   backfill {rows:>9,} rows: {result['seconds']:.1f}s, "
            f"{result['rows_per_s']:,.0f} rows/s, {result['queries']:,} queries, RSS "
            f"{result['rss_before_mb']:.1f} MB before, peak {result['rss_peak_mb']:.1f} MB "
            f"(+{result['rss_growth_mb']:.1f}); tracemalloc peak {result['heap_peak_mb']:.1f} MB; "
            f"{result['legacy_left']} legacy rows left"
        )
    return results


def _backfill_child(url: str, *flags: str) -> dict[str, Any]:
    """Run ``bench.backfill_child`` from a lean parent (``bench.lean``); its JSON line."""
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench.lean",
            sys.executable,
            "-m",
            "bench.backfill_child",
            url,
            *flags,
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


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
        "load_average": [round(value, 1) for value in os.getloadavg()],
    }


def _header() -> str:
    return (
        f"{'operation':<38} {'app ms':>8} {'prep ms':>8} {'floor ms':>9} {'app/floor':>9} "
        f"{'prep/fl':>8} {'floor2 ms':>9} {'app/fl2':>8} {'target':>6} {'queries':>7}  plan"
    )


def _fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def _format_row(row: Row) -> str:
    ratio = _fmt(row.ratio, ".2f") + "×" if row.ratio is not None else "-"
    target = f"≤{row.target}" if row.target else ""
    if row.target and row.ratio is not None and row.ratio > row.target:
        target += "!"
    prep_ratio = _fmt(row.prepared_ratio, ".2f") + "×" if row.prepared_ratio is not None else "-"
    ratio2 = _fmt(row.ratio2, ".2f") + "×" if row.ratio2 is not None else "-"
    return (
        f"{row.op:<38} {_fmt(row.app_ms, '.3f'):>8} {_fmt(row.prepared_ms, '.3f'):>8} "
        f"{_fmt(row.floor_ms, '.3f'):>9} {ratio:>9} {prep_ratio:>8} "
        f"{_fmt(row.floor2_ms, '.3f'):>9} {ratio2:>8} {target:>6} {_fmt(row.queries, 'd'):>7}  "
        f"{row.plan}" + (f"  ({row.note})" if row.note else "")
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
        f"{machine['django']}, psycopg {machine['psycopg']}; {machine['date']}; load average "
        f"{', '.join(map(str, machine.get('load_average', [])))} at the end of the run.",
        "",
        "| operation | app ms | app prepared ms | floor ms | app/floor | prepared/floor "
        "| floor 2 ms | app/floor 2 | target | queries | plan |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]

    def times(value: float | None) -> str:
        return "-" if value is None else f"{value:.2f}×"

    for row in results["rows"]:
        target = f"≤ {row['target']}×" if row["target"] else ""
        note = f" — {row['note']}" if row["note"] else ""
        lines.append(
            f"| {row['op']}{note} | {_fmt(row['app_ms'], '.3f')} "
            f"| {_fmt(row.get('prepared_ms'), '.3f')} | {_fmt(row['floor_ms'], '.3f')} "
            f"| {times(row['ratio'])} | {times(row.get('prepared_ratio'))} "
            f"| {_fmt(row.get('floor2_ms'), '.3f')} | {times(row.get('ratio2'))} "
            f"| {target} | {_fmt(row['queries'], 'd')} | {row['plan']} |"
        )
    if results.get("backfill"):
        lines += [
            "",
            "| backfill rows | pairs | seconds | rows/s | queries | RSS before | peak RSS "
            "| growth | tracemalloc peak |",
            "|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for item in results["backfill"]:
            lines.append(
                f"| {item['rows']:,} | {item['pairs']:,} | {item['seconds']:.1f} | "
                f"{item['rows_per_s']:,.0f} | {item['queries']:,} | {item['rss_before_mb']:.1f} MB "
                f"| {item['rss_peak_mb']:.1f} MB | {item['rss_growth_mb']:.1f} MB "
                f"| {item['heap_peak_mb']:.1f} MB |"
            )
    heavy = results.get("after_appends")
    if heavy:
        before, after = heavy["before"], heavy["after"]
        lines += [
            "",
            f"After {heavy['appends']:,} appends over {heavy['sessions']:,} sessions "
            f"({after['updates'] - before['updates']:,} session updates, "
            f"{after['hot_updates'] - before['hot_updates']:,} of them HOT; server autovacuum "
            f"{heavy['autovacuum']}):",
            "",
            "| read | " + " | ".join(heavy["states"]) + " |",
            "|---|" + "---|" * len(heavy["states"]),
        ]
        names = [name for name in next(iter(heavy["states"].values())) if name != "table"]
        for name in names:
            cells = [
                f"{state[name]['ms']:.2f} ms, {state[name]['plan']}"
                for state in heavy["states"].values()
            ]
            lines.append(f"| {name} | " + " | ".join(cells) + " |")
        cells = [
            f"{state['table']['all_visible_pages']:,} of {state['table']['pages']:,} pages"
            for state in heavy["states"].values()
        ]
        lines.append("| all-visible pages | " + " | ".join(cells) + " |")
    peers = results.get("peers")
    if peers:
        lines += [
            "",
            f"Peers (same database; each store and the app hold the same "
            f"{scale['peer_messages']:,} items, timed call by call; ratio = peer / app):",
            "",
            "| store | append one ms | app ms | peer/app | newest 50 ms | app ms | peer/app |",
            "|---|---:|---:|---:|---:|---:|---:|",
        ]
        for name, item in peers.items():
            if "skipped" in item:
                lines.append(f"| {name} | skipped: {item['skipped']} | | | | | |")
                continue
            lines.append(
                f"| {name} | {item['append_ms']:.3f} | {_fmt(item.get('app_append_ms'), '.3f')} | "
                f"{_fmt(item.get('append_ratio'), '.2f')}× | {item['recent_ms']:.3f} | "
                f"{_fmt(item.get('app_recent_ms'), '.3f')} | "
                f"{_fmt(item.get('recent_ratio'), '.2f')}× |"
            )
    return "\n".join(lines) + "\n"
