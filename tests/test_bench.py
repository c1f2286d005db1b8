"""The benchmark harness itself (``bench/``): a writer of a concurrent load that fails is
reported with its error, and neither the parent nor the other writers wait for it."""

from __future__ import annotations

import queue
import re
import socket
import threading
import time

import pytest

pytest.importorskip("psycopg")  # the bench drives psycopg 3 (its `bench` extra)

from bench import run


def _finishes(call, seconds: float = 60) -> BaseException | None:
    """Run ``call`` in a daemon thread; the error it raised, or fail the test when it has not
    returned after ``seconds`` (a writer waited for forever)."""
    outcome: list[BaseException | None] = []

    def target() -> None:
        try:
            call()
        except BaseException as error:
            outcome.append(error)
        else:
            outcome.append(None)

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), "the run still waits for a writer that failed"
    return outcome[0]


def test_a_writer_thread_failing_before_the_barrier_is_reported():
    def worker(number: int, start, latencies: list[float]) -> None:
        if number == 3:
            raise LookupError("no such session")
        start()
        latencies.append(0.001)

    error = _finishes(lambda: run._concurrent(worker))
    assert isinstance(error, RuntimeError)
    assert str(error) == f"1 of {run.WRITERS} writer threads failed (the first: writer 3)"
    assert isinstance(error.__cause__, LookupError)  # the failing writer's own error


def test_a_writer_thread_returning_without_its_start_is_reported_at_once(monkeypatch):
    # Without the check the other writers waited out the barrier's timeout, and the run
    # reported "0 of 8 writers never reached it (hung)".
    monkeypatch.setattr(run, "WRITER_BARRIER_TIMEOUT", 30)

    def worker(number: int, start, latencies: list[float]) -> None:
        if number == 6:
            return  # a worker with a bug: no start(), no error
        start()
        latencies.append(0.001)

    error = _finishes(lambda: run._concurrent(worker), seconds=10)
    assert isinstance(error, RuntimeError)
    assert str(error) == f"1 of {run.WRITERS} writer threads failed (the first: writer 6)"
    assert str(error.__cause__) == "writer 6 returned without calling start()"


def test_a_writer_thread_starting_twice_is_reported_at_once(monkeypatch):
    # Its second wait broke the barrier only after its timeout, and as a broken start it was
    # not counted: the run passed, its time including the wait.
    monkeypatch.setattr(run, "WRITER_BARRIER_TIMEOUT", 30)

    def worker(number: int, start, latencies: list[float]) -> None:
        start()
        if number == 1:
            start()
        latencies.append(0.001)

    error = _finishes(lambda: run._concurrent(worker), seconds=10)
    assert isinstance(error, RuntimeError)
    assert str(error.__cause__) == "writer 1 called start() twice"


def test_writer_threads_timing_no_call_are_reported():
    def worker(number: int, start, latencies: list[float]) -> None:
        start()  # and no timed call

    error = _finishes(lambda: run._concurrent(worker))
    assert isinstance(error, RuntimeError)
    assert str(error) == f"none of the {run.WRITERS} writer threads timed a call"


def test_a_writer_thread_that_never_reaches_the_barrier_times_it_out(monkeypatch):
    monkeypatch.setattr(run, "WRITER_BARRIER_TIMEOUT", 1)
    stuck = threading.Event()

    def worker(number: int, start, latencies: list[float]) -> None:
        if number == 5:
            stuck.wait(30)  # hung in its warm-up
        start()
        latencies.append(0.001)

    try:
        error = _finishes(lambda: run._concurrent(worker))
    finally:
        stuck.set()
    assert isinstance(error, RuntimeError)
    assert str(error) == (
        f"the writer threads' start barrier timed out after 1 s: 1 of {run.WRITERS} writers "
        "never reached it (hung)"
    )


def test_a_writer_thread_that_hangs_after_the_start_fails_the_run(monkeypatch):
    monkeypatch.setattr(run, "WRITER_TIMEOUT", 1)
    stuck = threading.Event()

    def worker(number: int, start, latencies: list[float]) -> None:
        start()
        if number == 2:
            stuck.wait(30)  # a statement that never returns
        latencies.append(0.001)

    try:
        error = _finishes(lambda: run._concurrent(worker))
    finally:
        stuck.set()
    assert isinstance(error, RuntimeError)
    assert str(error) == f"1 of {run.WRITERS} writer threads still run after 1 s"


def test_writer_processes_failing_to_connect_are_reported():
    # Nothing listens on port 1: every writer's connection is refused before the barrier.
    url = "postgresql://nobody@127.0.0.1:1/nothing"
    targets = [(None, "org=a")] * run.WRITERS
    error = _finishes(lambda: run._concurrent_processes("floor", url, targets, 1, "x"))
    assert isinstance(error, RuntimeError)
    assert re.fullmatch(r"writer process \d failed: OperationalError: .*", str(error), re.DOTALL)


def test_writer_processes_that_never_reach_the_barrier_are_stopped(monkeypatch):
    """A writer that hangs before the barrier (here: a server that accepts the connection and
    never answers), or is killed outright, reports nothing: the barrier times out, the run
    fails after its timeout and the writers still running are stopped."""
    monkeypatch.setattr(run, "WRITER_BARRIER_TIMEOUT", 2)
    monkeypatch.setattr(run, "WRITER_TIMEOUT", 2)
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(run.WRITERS)
        url = f"postgresql://nobody@127.0.0.1:{silent.getsockname()[1]}/nothing"
        targets = [(None, "org=a")] * run.WRITERS
        error = _finishes(lambda: run._concurrent_processes("floor", url, targets, 1, "x"))
    assert isinstance(error, RuntimeError)
    assert str(error) == (
        f"{run.WRITERS} of {run.WRITERS} writer processes were not ready after 2 s (set-up and "
        f"warm-up): writers {list(range(run.WRITERS))} hung"
    )


def _state(pid: int) -> str:
    """A process's state letter from ``/proc`` (``T``: stopped by a signal)."""
    with open(f"/proc/{pid}/stat") as stat:
        return stat.read().rsplit(")", 1)[1].split()[0]


def _acquire(semaphore) -> None:
    """A spawned process's target (module level, so ``spawn`` can import it)."""
    semaphore.acquire()


class _Writer:
    """What :func:`run._gather` reads of a writer process."""

    def __init__(self, exitcode=None):
        self.exitcode = exitcode


@pytest.mark.parametrize("phase", ["ready", "done"])
def test_a_writer_process_killed_while_it_waits_fails_the_run_at_once(monkeypatch, phase):
    """Killed outright (``SIGKILL``: exit code -9) while the others wait for the start or run:
    it never puts a word, and the parent says so at its second look after the death (one look
    leaves a message in the pipe the time to arrive) instead of waiting for the timeout."""
    monkeypatch.setattr(run, "WRITER_POLL", 0.05)
    messages: queue.Queue = queue.Queue()
    writers = [_Writer() for _ in range(run.WRITERS)]
    for number in range(run.WRITERS - 1):
        messages.put((phase, number) if phase == "ready" else (phase, number, [0.001]))
    writers[-1].exitcode = -9
    started = time.perf_counter()
    with pytest.raises(RuntimeError) as excinfo:
        run._gather(messages, writers, phase, timeout=60)
    assert time.perf_counter() - started < 5
    assert str(excinfo.value) == (
        f"writer process {run.WRITERS - 1} ended (exit code -9) before it was {phase}, without "
        "a word (killed?)"
    )


def test_a_writer_process_that_ended_after_its_word_is_not_taken_for_dead(monkeypatch):
    monkeypatch.setattr(run, "WRITER_POLL", 0.05)
    messages: queue.Queue = queue.Queue()
    writers = [_Writer(exitcode=0) for _ in range(run.WRITERS)]
    for number in range(run.WRITERS):
        messages.put(("done", number, [number / 1000]))
    got = run._gather(messages, writers, "done", timeout=60)
    assert got == {number: [number / 1000] for number in range(run.WRITERS)}


def test_a_released_start_is_not_held_up_by_a_killed_waiter():
    """The start is a semaphore: a writer process killed while it waits on it does not stop
    the release for the others (a ``multiprocessing.Barrier`` waits for every sleeper)."""
    import multiprocessing

    context = multiprocessing.get_context("spawn")
    start = context.Semaphore(0)
    waiter = context.Process(target=_acquire, args=(start,))
    waiter.start()
    time.sleep(1)  # waiting on the semaphore
    waiter.kill()
    waiter.join()
    assert waiter.exitcode == -9
    _finishes(lambda: [start.release() for _ in range(run.WRITERS)], seconds=10)
    assert all(start.acquire(timeout=1) for _ in range(run.WRITERS))


def test_a_writer_thread_failing_with_a_broken_barrier_of_its_own_is_reported():
    """After a good start a writer's ``BrokenBarrierError`` is its own failure (say, a barrier
    of its own code), not "met the start barrier another broke": the run fails, naming it, and
    the writers still waking from the start are not broken by it."""

    def worker(number: int, start, latencies: list[float]) -> None:
        start()
        if number == 4:
            raise threading.BrokenBarrierError
        latencies.append(0.001)

    error = _finishes(lambda: run._concurrent(worker))
    assert isinstance(error, RuntimeError)
    assert str(error) == f"1 of {run.WRITERS} writer threads failed (the first: writer 4)"


def test_a_writer_process_killed_after_it_was_ready_fails_the_ready_phase(monkeypatch):
    """A writer ends only after ``done``: one killed while it waits for the start is reported
    at once, though the others are still warming up (not when they are all ready)."""
    monkeypatch.setattr(run, "WRITER_POLL", 0.05)
    messages: queue.Queue = queue.Queue()
    writers = [_Writer() for _ in range(run.WRITERS)]
    messages.put(("ready", 0))  # the others never say a word: still warming up
    writers[0].exitcode = -9
    started = time.perf_counter()
    with pytest.raises(RuntimeError) as excinfo:
        run._gather(messages, writers, "ready", timeout=60)
    assert time.perf_counter() - started < 5
    assert str(excinfo.value) == (
        "writer process 0 ended (exit code -9) after it was ready, before it was done, without "
        "a word (killed?)"
    )


def test_a_stopped_writer_process_is_killed_rather_than_waited_for(monkeypatch):
    """``SIGSTOP`` holds ``SIGTERM`` until the process continues: the parent kills a writer
    that has not ended after ``WRITER_JOIN_TIMEOUT`` instead of waiting for it forever."""
    import multiprocessing
    import os
    import signal

    monkeypatch.setattr(run, "WRITER_JOIN_TIMEOUT", 1)
    context = multiprocessing.get_context("spawn")
    start = context.Semaphore(0)
    waiter = context.Process(target=_acquire, args=(start,))
    waiter.start()
    os.kill(waiter.pid, signal.SIGSTOP)
    # Stopped for sure before the SIGTERM: a process not yet scheduled since SIGSTOP would
    # take the lower-numbered SIGTERM first and end by it.
    deadline = time.perf_counter() + 30
    while _state(waiter.pid) != "T":
        assert time.perf_counter() < deadline, "the writer never stopped"
        time.sleep(0.05)
    try:
        _finishes(lambda: run._reap([waiter], stop=True), seconds=20)
    finally:
        if waiter.exitcode is None:
            os.kill(waiter.pid, signal.SIGKILL)
    assert waiter.exitcode == -signal.SIGKILL


def test_the_writer_processes_outcome_is_the_median_latency_and_the_cpu_per_append():
    outcomes = [([0.001, 0.003], 0.004, 0.002), ([0.002, 0.010], 0.002, 0.006)]
    cpu: dict = {}
    assert run._writers_outcome(outcomes, cpu) == pytest.approx(2.5)
    # 6 ms of writer CPU and 8 ms of server CPU over four appends
    assert cpu == {"client": pytest.approx(1.5), "server": pytest.approx(2.0)}
    assert run._writers_outcome(outcomes) == pytest.approx(2.5)  # no cpu asked for


def test_the_server_cpu_is_unknown_when_one_writer_could_not_read_it():
    cpu: dict = {}
    run._writers_outcome([([0.001], 0.001, 0.001), ([0.001], 0.001, None)], cpu)
    assert cpu == {"client": pytest.approx(1.0), "server": None}


def test_a_process_cpu_is_read_from_proc_or_is_none():
    import os

    before = run._process_cpu(os.getpid())
    if before is None:
        pytest.skip("no /proc here")
    sum(range(3_000_000))  # some CPU
    assert run._process_cpu(os.getpid()) >= before >= 0
    assert run._process_cpu(2**22 + 1) is None  # above Linux's highest pid: no such process
    # Only a PostgreSQL server process counts as the server's: a pid of the server's on
    # another machine may be some other process here.
    assert run._backend_cpu(os.getpid()) is None
    assert run._backend_cpu(2**22 + 1) is None


def test_the_cpu_note_gives_each_kind_and_records_it():
    row = run.Row("append, 8 writer processes, distinct sessions")
    cpu = {
        "app": [
            {"client": 1.0, "server": 1.2},
            {"client": 1.2, "server": 1.0},
            {"client": 1.1, "server": 1.1},
        ],
        "floor": [{"client": 0.5, "server": None}],
    }
    note = run._cpu_note(row, cpu)
    assert note == "CPU ms per append (writer + server): app 1.10 + 1.10, floor 0.50"
    assert row.extra == {
        "app_cpu_ms": {"client": 1.1, "server": 1.1},
        "floor_cpu_ms": {"client": 0.5, "server": None},
    }


def test_a_local_server_process_cpu_is_read():
    import os

    import psycopg

    url = os.environ.get("DATABASE_URL", "")
    if not url.startswith("postgres") or not os.path.exists("/proc/self/stat"):
        pytest.skip("needs a PostgreSQL server on this machine (DATABASE_URL)")
    with psycopg.connect(url.rsplit("/", 1)[0] + "/postgres", autocommit=True) as conn:
        pid = conn.info.backend_pid
        before = run._backend_cpu(pid)
        conn.execute("SELECT count(*) FROM generate_series(1, 300000)")
        after = run._backend_cpu(pid)
    assert before is not None and after is not None
    assert after >= before >= 0


@pytest.mark.django_db(transaction=True)
def test_a_function_calls_plan_is_the_plan_of_its_statement(tmp_path):
    """The bench's plan column shows the indexes the statement inside each hot-path function
    uses, the newest page's table function called in ``FROM`` included (its own plan is a bare
    ``Function Scan``: "no scan" in the column)."""
    from cortex_sessions import services
    from cortex_sessions.services import _pg

    if not _pg.enabled("default"):
        pytest.skip("the hot-path functions are PostgreSQL's (psycopg 3)")
    scope = "org=bench-plan/user=1"
    session = services.create_session(scope=scope, agent_id="agent-1")
    services.append_messages(
        scope=scope, session_id=session.pk, messages=[{"role": "user", "content": "hi"}]
    )
    calls = {
        "newest": lambda: services.list_messages(scope=scope, session_id=session.pk, limit=50),
        "get": lambda: services.get_session(scope=scope, session_id=session.pk),
    }
    for name, call in calls.items():
        statements, summary = run.queries_and_plans(call, tmp_path / f"{name}.txt")
        text = (tmp_path / f"{name}.txt").read_text()
        assert statements == 1, text
        assert "-- its statement:" in text, text
        assert summary.startswith("index session_pkey"), (name, summary)
