"""The benchmark harness itself (``bench/``): a writer of a concurrent load that fails is
reported with its error, and neither the parent nor the other writers wait for it."""

from __future__ import annotations

import socket
import threading

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
    def worker(number: int, barrier: threading.Barrier, latencies: list[float]) -> None:
        if number == 3:
            raise LookupError("no such session")
        barrier.wait()
        latencies.append(0.001)

    error = _finishes(lambda: run._concurrent(worker))
    assert isinstance(error, RuntimeError)
    assert str(error).startswith(f"{run.WRITERS} of {run.WRITERS} writer threads failed")
    assert isinstance(error.__cause__, LookupError)  # the failing writer's own error


def test_writer_processes_failing_to_connect_are_reported():
    # Nothing listens on port 1: every writer's connection is refused before the barrier.
    url = "postgresql://nobody@127.0.0.1:1/nothing"
    targets = [(None, "org=a")] * run.WRITERS
    error = _finishes(lambda: run._concurrent_processes("floor", url, targets, 1, "x"))
    assert isinstance(error, RuntimeError)
    assert "writer processes failed: OperationalError" in str(error)


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
        f"{run.WRITERS} of {run.WRITERS} writer processes reported nothing in 2 s (killed, or hung)"
    )
