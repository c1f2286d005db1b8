"""Races proven with real threads and real transactions (docs/design.md §5, §6, §10, §15).

They run on PostgreSQL and on MySQL/MariaDB. Each worker thread has its own database connection;
a barrier releases them together and every thread closes its connections when done. SQLite
serializes writers, so these are skipped there.
"""

from __future__ import annotations

import random
import signal
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import pytest
from django.db import connection, connections, transaction

from cortex_sessions import services
from cortex_sessions.backfill import BACKFILL_MARKER, backfill_default_sessions
from cortex_sessions.exceptions import CortexSessionsError
from cortex_sessions.models import Message, Session
from tests.factories import MessageFactory

pytestmark = [pytest.mark.concurrent_db, pytest.mark.django_db(transaction=True)]

SCOPE = "org=acme/user=1"
AGENT = "agent-1"
T = TypeVar("T")


def run_together(threads: int, work: Callable[[int], T]) -> list[T]:
    """Run ``work(index)`` in ``threads`` threads released at once; return results in order.

    An exception in a worker is re-raised here.
    """
    barrier = threading.Barrier(threads)

    def worker(index: int) -> T:
        try:
            barrier.wait(timeout=30)
            return work(index)
        finally:
            connections.close_all()

    with ThreadPoolExecutor(max_workers=threads) as pool:
        futures = [pool.submit(worker, index) for index in range(threads)]
        return [future.result(timeout=300) for future in futures]


def test_concurrent_first_resolves_create_exactly_one_default():
    def resolve(index: int) -> tuple[Any, bool]:
        session, created = services.resolve_session(scope=SCOPE, agent_id=AGENT)
        return session.pk, created

    results = run_together(32, resolve)

    assert len({pk for pk, _ in results}) == 1
    assert sum(created for _, created in results) == 1
    assert Session.objects.count() == 1
    assert Session.objects.get().is_default


def test_concurrent_appends_get_gapless_seqs_and_exact_counters():
    session = services.create_session(scope=SCOPE, agent_id=AGENT)
    threads, appends = 8, 100

    def append(index: int) -> list[int]:
        seqs = []
        for number in range(appends):
            result = services.append_messages(
                scope=SCOPE,
                session_id=session.pk,
                messages=[{"role": "user", "content": f"thread {index} message {number}"}],
            )
            seqs.append(result.messages[0].seq)
        return seqs

    per_thread = run_together(threads, append)

    total = threads * appends
    for seqs in per_thread:
        assert seqs == sorted(seqs)  # each thread's messages stay in its own order
    session.refresh_from_db()
    seqs = sorted(Message.objects.filter(session=session).values_list("seq", flat=True))
    assert seqs == list(range(1, total + 1))
    assert session.message_count == total == Message.objects.filter(session=session).count()
    assert session.last_seq == total
    newest = Message.objects.get(session=session, seq=total)
    assert session.last_message == newest.text


def held_write_raced_by_an_append(
    session: Session, write: Callable[[], T], *, hold: str = ""
) -> tuple[T, Any]:
    """Run ``write`` in a thread, held just before its first statement starting with ``hold``
    (after it read its clock, before it waits for any row lock) while this thread appends one
    message to ``session`` and commits; then let it go. Returns (``write``'s result, the
    append's result)."""
    waiting, go = threading.Event(), threading.Event()

    def hold_statement(execute, sql, params, many, context):
        if sql.lstrip().upper().startswith(hold) and not waiting.is_set():
            waiting.set()
            assert go.wait(timeout=30)
        return execute(sql, params, many, context)

    def held() -> T:
        try:
            with connection.execute_wrapper(hold_statement):
                return write()
        finally:
            connections.close_all()

    with ThreadPoolExecutor(max_workers=1) as pool:
        slow = pool.submit(held)
        assert waiting.wait(timeout=30)
        time.sleep(0.01)  # a clock that reads the same twice would prove nothing
        fast = services.append_messages(
            scope=SCOPE, session_id=session.pk, messages=[{"role": "user", "content": "fast"}]
        )
        go.set()
        return slow.result(timeout=30), fast


@pytest.mark.parametrize("count", [1, 2])
def test_updated_at_never_moves_back_under_a_concurrent_append(count):
    """An append that read its clock, then waited while another append committed a later
    time, keeps the later ``updated_at`` (docs/design.md §3.1: it moves on every message
    write), and returns what it stored. On PostgreSQL the statement is sent with the time the
    caller read before waiting for the row lock; the ORM path reads it under the lock."""
    session = services.create_session(scope=SCOPE, agent_id=AGENT)
    messages = [{"role": "user", "content": f"slow {n}"} for n in range(count)]
    late, fast = held_write_raced_by_an_append(
        session,
        lambda: services.append_messages(scope=SCOPE, session_id=session.pk, messages=messages),
    )

    stored = Session.objects.get(pk=session.pk)
    assert [m.seq for m in late.messages] == list(range(2, 2 + count))  # it waited: after
    assert late.messages[0].created_at < fast.messages[0].created_at  # its clock was earlier
    assert stored.updated_at >= fast.session.updated_at
    assert late.session.updated_at == stored.updated_at  # returned as stored
    assert (stored.message_count, stored.last_seq) == (1 + count, 1 + count)


def test_updated_at_never_moves_back_under_an_update_racing_an_append():
    """update_session reads its clock before its UPDATE waits for the row lock; an append
    that committed a later time meanwhile keeps it."""
    session = services.create_session(scope=SCOPE, agent_id=AGENT)
    late, fast = held_write_raced_by_an_append(
        session,
        lambda: services.update_session(scope=SCOPE, session_id=session.pk, title="late"),
        hold="UPDATE",
    )

    stored = Session.objects.get(pk=session.pk)
    assert stored.updated_at >= fast.session.updated_at
    assert (late.updated_at, late.title) == (stored.updated_at, "late")


def test_concurrent_make_default_swaps_leave_exactly_one_default():
    sessions = [
        services.create_session(scope=SCOPE, agent_id=AGENT, is_default=index == 0)
        for index in range(5)
    ]
    ids = [session.pk for session in sessions]
    threads, swaps = 8, 20

    def swap(index: int) -> list[str]:
        rng = random.Random(index)
        errors = []
        for _ in range(swaps):
            target = rng.choice(ids)
            try:
                promoted = services.make_default(scope=SCOPE, session_id=target)
            except CortexSessionsError as exc:
                errors.append(exc.code)
            else:
                assert promoted.pk == target
        return errors

    errors = [code for codes in run_together(threads, swap) for code in codes]

    # Any other exception (IntegrityError, a deadlock) would have been re-raised above; swaps
    # queue on the current default's lock, so none may give up with DefaultConflict either.
    assert errors == []
    assert Session.objects.filter(agent_id=AGENT, scope=SCOPE, is_default=True).count() == 1
    assert Session.objects.count() == 5


def test_resolves_racing_make_default_swaps_never_fail():
    """16 first resolves and 16 make-defaults of different sessions at a pair with no default
    yet, several rounds: InnoDB breaks the deadlocks they form on the one-default index by
    rolling one side back, and resolve runs again as make-default does (docs/design.md §15.4)."""
    threads, rounds = 32, 5
    for round_ in range(rounds):
        scope = f"{SCOPE}/round={round_}"
        others = [services.create_session(scope=scope, agent_id=AGENT) for _ in range(threads // 2)]

        def race(index: int, scope: str = scope, others: list[Session] = others) -> Any:
            if index % 2:
                return services.resolve_session(scope=scope, agent_id=AGENT)[0].pk
            return services.make_default(scope=scope, session_id=others[index // 2].pk).pk

        run_together(threads, race)  # re-raises any worker's error

        assert Session.objects.defaults_of(agent_id=AGENT, scope=scope).count() == 1
        assert Session.objects.filter(scope=scope).count() in (threads // 2, threads // 2 + 1)


@pytest.mark.parametrize("write", ["archive", "delete"])
def test_demoting_writes_racing_make_default_never_fail(write):
    """Archiving or deleting the default while another thread makes a sibling the default:
    both write the one-default index, so InnoDB may break a deadlock between them by rolling one
    back; the demoting write runs again as make-default does (docs/design.md §11.2, §15.4)."""
    rounds = 12
    for round_ in range(rounds):
        scope = f"{SCOPE}/{write}={round_}"
        default, _ = services.resolve_session(scope=scope, agent_id=AGENT)
        other = services.create_session(scope=scope, agent_id=AGENT)

        def race(
            index: int, scope: str = scope, default: Session = default, other: Session = other
        ) -> Any:
            if index == 0:
                return services.make_default(scope=scope, session_id=other.pk).pk
            if write == "archive":
                return services.archive_session(scope=scope, session_id=default.pk).pk
            return services.delete_session(scope=scope, session_id=default.pk)

        run_together(2, race)  # re-raises any worker's error

        assert Session.objects.defaults_of(agent_id=AGENT, scope=scope).count() <= 1
        assert Session.objects.filter(pk=other.pk, is_default=True).exists()


def _backend_id(connection: Any) -> int:
    """The server's id of ``connection``'s session (PostgreSQL pid, MariaDB thread id)."""
    connection.ensure_connection()
    if connection.vendor == "postgresql":
        return connection.connection.info.backend_pid
    return connection.connection.thread_id()


def _blocked_by(connection: Any, waiter_id: int) -> bool:
    """Whether the session ``waiter_id`` waits for a lock that ``connection`` holds."""
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute("SELECT pg_backend_pid() = ANY(pg_blocking_pids(%s))", [waiter_id])
        else:
            # MariaDB does not list every such wait in INNODB_LOCK_WAITS (a unique-key lookup
            # waits while the optimizer reads it as a constant), so: the waiter is inside a
            # locking read, and only this connection's open transaction can hold it there.
            cursor.execute(
                "SELECT COUNT(*) > 0 FROM information_schema.PROCESSLIST "
                "WHERE ID = %s AND COMMAND = 'Query' AND INFO LIKE %s",
                [waiter_id, "%FOR UPDATE"],
            )
        return bool(cursor.fetchone()[0])


def test_make_default_succeeds_while_other_swaps_keep_overlapping_it(monkeypatch):
    """Each attempt of ``make_default(target)`` overlaps a swap by another connection.

    The other swap has demoted the current default and promoted a third session but not yet
    committed; it commits as soon as the target's transaction waits for its lock. Deterministic:
    ``pg_blocking_pids`` tells when the target's transaction waits. The swap to ``target`` is
    the later one, so it must win (docs/design.md §6.2: the last swap to commit wins).
    On MySQL/MariaDB the process list tells it: the target's connection sits in a locking read.
    """
    first, target, third = (
        services.create_session(scope=SCOPE, agent_id=AGENT, is_default=index == 0)
        for index in range(3)
    )
    overlaps = 6  # more than make_default's attempts
    go, held, done = threading.Event(), threading.Event(), threading.Event()
    waiter_pid = _backend_id(connection)

    def other_swaps() -> int:
        rounds = 0
        try:
            for round_ in range(overlaps):
                if not go.wait(timeout=10) or done.is_set():
                    break
                go.clear()
                with transaction.atomic():
                    current = (
                        Session.objects.defaults_of(agent_id=AGENT, scope=SCOPE)
                        .select_for_update()
                        .get()
                    )
                    other = third if current.pk == first.pk else first
                    Session.objects.filter(pk=current.pk).update(is_default=False)
                    Session.objects.filter(pk=other.pk).update(is_default=True)
                    held.set()
                    deadline = time.monotonic() + 10
                    while not _blocked_by(connection, waiter_pid) and not done.is_set():
                        assert time.monotonic() < deadline, f"round {round_}: never waited"
                        time.sleep(0.005)
                rounds += 1
            return rounds
        finally:
            connections.close_all()

    locked_session = services.sessions._locked_session

    def lock_then_overlap(*args: Any, **kwargs: Any) -> Session:
        session = locked_session(*args, **kwargs)
        held.clear()
        go.set()
        assert held.wait(timeout=10)
        return session

    monkeypatch.setattr(services.sessions, "_locked_session", lock_then_overlap)
    with ThreadPoolExecutor(max_workers=1) as pool:
        helper = pool.submit(other_swaps)
        try:
            promoted = services.make_default(scope=SCOPE, session_id=target.pk)
        finally:
            done.set()
            go.set()
            helper.result(timeout=30)

    assert promoted.pk == target.pk
    assert list(Session.objects.filter(is_default=True).values_list("pk", flat=True)) == [target.pk]


def test_concurrent_title_updates_never_lose_an_append():
    session = services.create_session(scope=SCOPE, agent_id=AGENT, title="start")
    appenders, appends, updates = 4, 50, 50

    def work(index: int) -> None:
        if index < appenders:
            for number in range(appends):
                services.append_messages(
                    scope=SCOPE,
                    session_id=session.pk,
                    messages=[{"role": "assistant", "content": f"a{index}-{number}"}],
                )
        elif index % 2:
            for number in range(updates):
                services.update_session(scope=SCOPE, session_id=session.pk, title=f"u{number}")
        else:
            # A read-modify-write through the model (as an admin form does) with counters
            # read before every append: saving the title must not write them back.
            stale = Session.objects.get(pk=session.pk)
            for number in range(updates):
                stale.title = f"s{number}"
                stale.save()

    run_together(appenders + 4, work)

    session.refresh_from_db()
    total = appenders * appends
    assert session.message_count == total == Message.objects.filter(session=session).count()
    assert session.last_seq == total
    assert session.last_message == Message.objects.get(session=session, seq=total).text
    assert session.title in {f"u{updates - 1}", f"s{updates - 1}"}


def test_concurrent_backfill_runs_attach_every_legacy_row_once_in_order():
    pairs = [("a", SCOPE), ("b", SCOPE), ("a", "org=acme/user=2")]
    legacy: dict[tuple[str, str], list[int]] = {pair: [] for pair in pairs}
    for _ in range(30):
        for agent_id, scope in pairs:
            row = MessageFactory(agent_id=agent_id, scope=scope, session=None, seq=None)
            legacy[(agent_id, scope)].append(row.pk)

    reports = run_together(
        4,
        lambda index: backfill_default_sessions(
            session_model=Session, message_model=Message, batch_size=4
        ),
    )

    assert sum(report.messages_attached for report in reports) == 90
    assert sum(report.sessions_created for report in reports) == 3
    for (agent_id, scope), ids in legacy.items():
        default = Session.objects.get(agent_id=agent_id, scope=scope, is_default=True)
        assert default.backfilled_by == BACKFILL_MARKER
        attached = list(default.messages.order_by("seq").values_list("pk", "seq"))
        assert attached == list(zip(ids, range(1, 31), strict=True))
        assert (default.message_count, default.last_seq) == (30, 30)
        assert default.last_message == Message.objects.get(pk=ids[-1]).text
    assert Session.objects.count() == 3


@pytest.mark.mysql_only
def test_make_default_in_a_repeatable_read_transaction_sees_a_swap_made_since_its_snapshot():
    # A host that runs its transaction at REPEATABLE READ (MariaDB's server default; the app
    # asks for READ COMMITTED) read the defaults, another connection swapped the default, then
    # the host's make-default re-read them: its plain re-read kept showing the first snapshot,
    # the locking read the newest rows, and the loop between them never ended.
    scope = "org=acme/user=rr"
    first, _ = services.resolve_session(scope=scope, agent_id="a")
    second = services.create_session(scope=scope, agent_id="a")
    third = services.create_session(scope=scope, agent_id="a")

    def timed_out(signum: int, frame: Any) -> None:
        raise TimeoutError("make_default did not return")

    previous = signal.signal(signal.SIGALRM, timed_out)
    try:
        with transaction.atomic():
            with connection.cursor() as cursor:  # this transaction only (not yet begun)
                cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
            snapshot = list(Session.objects.filter(agent_id="a", is_default=True))
            assert [s.pk for s in snapshot] == [first.pk]
            run_together(1, lambda _: services.make_default(scope=scope, session_id=second.pk))
            signal.alarm(20)
            try:
                services.make_default(scope=scope, session_id=third.pk)
            finally:
                signal.alarm(0)
    finally:
        signal.signal(signal.SIGALRM, previous)
    defaults = Session.objects.filter(agent_id="a", scope=scope, is_default=True)
    assert list(defaults.values_list("pk", flat=True)) == [third.pk]


@pytest.mark.mysql_only
@pytest.mark.parametrize("receiver_catches", [False, True], ids=["raises", "catches"])
def test_a_receiver_made_the_deadlock_victim_under_manual_transactions_fails_the_call(
    receiver_catches,
):
    # Under manual transaction management the receivers run in the host's transaction. One
    # that deadlocks with another connection makes InnoDB roll back the host's whole
    # transaction, the write included: the call must raise, never return as if the write
    # stood (a receiver that caught the error in its own atomic() hid it).
    from django.db import DatabaseError

    from cortex_sessions import signals

    held = services.create_session(scope=SCOPE, agent_id="held")
    contested = services.create_session(scope=SCOPE, agent_id="contested")
    heavy = services.create_session(scope=SCOPE, agent_id="heavy")
    services.append_messages(
        scope=SCOPE, session_id=heavy.pk, messages=[{"role": "user", "content": "x"}] * 300
    )
    ready = threading.Event()

    def other() -> None:
        # More undo than the host, so InnoDB picks the host as the victim.
        try:
            with transaction.atomic():
                Message.objects.filter(session=heavy).update(metadata={"w": 1})
                Session.objects.filter(pk=contested.pk).update(title="other")
                ready.set()
                Session.objects.filter(pk=held.pk).update(title="other")  # waits for the host
        finally:
            ready.set()
            connections.close_all()

    def receiver(sender: Any, **kwargs: Any) -> None:
        try:
            with transaction.atomic():
                Session.objects.filter(pk=contested.pk).update(title="receiver")
        except DatabaseError:
            if not receiver_catches:
                raise

    signals.session_created.connect(receiver, weak=False, dispatch_uid="deadlocking")
    thread = threading.Thread(target=other)
    transaction.set_autocommit(False)
    try:
        Session.objects.filter(pk=held.pk).update(title="host")
        thread.start()
        ready.wait(10)
        time.sleep(0.5)  # the other connection now waits for the host's row
        with pytest.raises(DatabaseError):
            services.create_session(scope=SCOPE, agent_id="written")
        transaction.rollback()
    finally:
        transaction.set_autocommit(True)
        signals.session_created.disconnect(dispatch_uid="deadlocking")
        thread.join(30)
    assert not Session.objects.filter(agent_id="written").exists()
    assert Session.objects.get(pk=held.pk).title == "other"
