"""The context read on PostgreSQL builds its messages from the statement's rows
(``services/_pg_context.py``, docs/design.md §16.4, §14): the same window as ``Manager.raw``
of the same statement and as the ORM path, with the same values, types and loading state, on
many sessions, budgets and scopes.

The ``Manager.raw`` path is forced by making ``_pg_context.serves`` false; the ORM path is the
one SQLite and MariaDB take (``context._walk_orm``), run here on the same PostgreSQL rows.
"""

from __future__ import annotations

from contextlib import contextmanager

import pytest
from django.db import connections
from django.db.models.query import RawQuerySet
from django.test import override_settings
from django.test.utils import CaptureQueriesContext
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cortex_sessions import services
from cortex_sessions.exceptions import ContextBudgetExceeded, SessionNotFound
from cortex_sessions.models import Message
from cortex_sessions.services import _pg, _pg_context, context
from cortex_sessions.services.sessions import _get
from tests.asyncio_support import async_test

pytestmark = pytest.mark.django_db

on_postgresql = pytest.mark.skipif(
    not _pg.enabled("default"),
    reason="the hand-written SQL serves PostgreSQL through psycopg 3 only",
)

SCOPE = "org=acme/user=1"
SCOPES = [SCOPE, "org=acme", "org=acme/user=10", "org=acm", "org=other"]


def length_tokens(role, content):
    """A ``TOKEN_COUNTER``: one token per character of the text blocks."""
    return sum(len(block.get("text", "")) for block in content if isinstance(block, dict))


@pytest.fixture(autouse=True)
def _count_characters():
    with override_settings(
        CORTEX_SESSIONS={"TOKEN_COUNTER": "tests.test_context_pg_rows.length_tokens"}
    ):
        yield


def _message(n: int) -> dict:
    """The ``n``-th message of a thread: every role, text and non-text blocks, metadata and
    usage on some, text lengths varying so budgets cut at different places."""
    role = ("user", "assistant", "tool", "tool", "assistant", "system")[n % 6]
    blocks: list = [{"type": "text", "text": f"m{n} " + "é✓ab"[: n % 4] * (n % 7)}]
    if n % 5 == 0:
        blocks.append({"type": "image", "url": f"https://x/{n}.png", "n": [1, 2.5, None]})
    message: dict = {"role": role, "content": blocks}
    if n % 3 == 0:
        message["metadata"] = {"n": n, "nested": {"k": [True, False]}, "s": "a\u2028b"}
    if role == "assistant" and n % 4 == 1:
        message["usage"] = {"input_tokens": n, "output_tokens": 2 * n, "cost": "0.000125"}
    return message


@pytest.fixture
def threads():
    """Sessions over the scopes of :data:`SCOPES`: empty, uncompacted, compacted twice, one whose
    newest summary was deleted (the older one governs again) and one with only a summary
    after which nothing came."""
    made = []
    empty = services.create_session(scope=SCOPE, agent_id="a")
    made.append(empty)
    for index, scope in enumerate([SCOPE, "org=acme/user=10", SCOPE, SCOPE, SCOPE]):
        session = services.create_session(scope=scope, agent_id="a")
        count = 40 + 7 * index
        services.append_messages(
            scope=scope,
            session_id=session.pk,
            messages=[_message(n + index) for n in range(count)],
        )
        if index >= 2:
            services.compact_session(
                scope=scope, session_id=session.pk, through_seq=10, summary="first " * index
            )
            services.append_messages(
                scope=scope, session_id=session.pk, messages=[_message(n) for n in range(9)]
            )
            if index != 4:
                summary = services.compact_session(
                    scope=scope,
                    session_id=session.pk,
                    through_seq=count if index == 3 else 30,
                    summary=[{"type": "text", "text": "second summary"}],
                    usage={"input_tokens": 3, "output_tokens": 1, "cost": "0.01"},
                ).messages[0]
            if index == 3:
                services.delete_message(scope=scope, session_id=session.pk, seq=summary.seq)
        made.append(session)
    only_summary = services.create_session(scope=SCOPE, agent_id="a")
    services.append_messages(
        scope=SCOPE, session_id=only_summary.pk, messages=[_message(n) for n in range(3)]
    )
    services.compact_session(scope=SCOPE, session_id=only_summary.pk, through_seq=3, summary="s")
    made.append(only_summary)
    return made


@contextmanager
def raw_path():
    """Force the ``Manager.raw`` path (``_pg_context.serves`` false) inside the block."""
    real = _pg_context.serves
    _pg_context.serves = lambda alias: False
    try:
        yield
    finally:
        _pg_context.serves = real


def orm_window(scope, session_id, budget):
    """The window the ORM path (SQLite's and MariaDB's) reads, on this database."""
    context._check_budget(budget)
    session = _get(scope, session_id, None, using="default")
    return context._window(*context._walk_orm("default", session, budget), budget)


def snapshot(window) -> tuple:
    """The window with every concrete value of each message and its loading facts."""
    fields = Message._meta.concrete_fields
    return (
        window.compacted_through_seq,
        window.tokens,
        window.truncated,
        [
            (
                tuple(getattr(m, f.attname) for f in fields),
                tuple(type(getattr(m, f.attname)) for f in fields),
                m._state.db,
                m._state.adding,
            )
            for m in window.messages
        ],
    )


def outcome(read, *args) -> tuple:
    """``("ok", snapshot)`` of ``read(*args)``, or the error's type and details."""
    try:
        return ("ok", snapshot(read(*args)))
    except ContextBudgetExceeded as error:
        return ("budget", error.message, error.params)
    except SessionNotFound:
        return ("missing",)


def fast_window(scope, session_id, budget):
    return services.context_messages(scope=scope, session_id=session_id, max_tokens=budget)


budgets = st.one_of(st.none(), st.integers(min_value=1, max_value=400), st.just(10_000))


@on_postgresql
@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=st.data(), scope=st.sampled_from(SCOPES), budget=budgets)
def test_a_context_read_is_the_raw_and_orm_paths(threads, data, scope, budget):
    session = data.draw(st.sampled_from(threads))
    fast = outcome(fast_window, scope, session.pk, budget)
    with raw_path():
        assert fast == outcome(fast_window, scope, session.pk, budget)
    assert fast == outcome(orm_window, scope, session.pk, budget)


@on_postgresql
def test_every_thread_and_a_tight_budget_cover_each_outcome(threads):
    """The sessions of :func:`threads` do reach each outcome the hypothesis test compares:
    compacted and not, truncated and not, a budget refusal, a foreign session."""
    seen = set()
    for session in threads:
        for budget in (None, 1, 25, 120):
            kind = outcome(fast_window, SCOPE, session.pk, budget)
            if kind[0] == "ok":
                compacted, _, truncated, messages = kind[1]
                seen.add(("ok", compacted is not None, truncated, bool(messages)))
            else:
                seen.add(kind[:1])
    assert {("budget",), ("missing",), ("ok", True, True, True), ("ok", False, False, True)} <= seen
    assert ("ok", False, False, False) in seen  # the empty session


@on_postgresql
def test_the_read_builds_no_raw_queryset(threads, monkeypatch):
    """On PostgreSQL under psycopg 3 the rows become messages without ``Manager.raw``: one
    statement, fetched at once."""

    def no_raw(*args, **kwargs):
        raise AssertionError("Manager.raw ran")

    monkeypatch.setattr(RawQuerySet, "__iter__", no_raw)
    with CaptureQueriesContext(connections["default"]) as captured:
        window = fast_window(SCOPE, threads[4].pk, 200)
    assert len(captured.captured_queries) == 1
    # the newest summary was deleted: the older one governs again
    assert window.messages and window.compacted_through_seq == 10


@on_postgresql
@pytest.mark.parametrize("prepared", [False, True])
def test_prepared_statements_and_another_time_zone_read_the_raw_paths_values(threads, prepared):
    """With ``PREPARED_STATEMENTS`` (server-side binding, ``prepare=True``; a ``NULL`` budget
    binds too) and on a connection a host set to another time zone, the values are still
    those of ``Manager.raw`` and of the ORM path."""
    with connections["default"].cursor() as cursor:
        cursor.execute("SET TIME ZONE 'Asia/Kolkata'")
    try:
        with override_settings(
            CORTEX_SESSIONS={
                "TOKEN_COUNTER": "tests.test_context_pg_rows.length_tokens",
                "PREPARED_STATEMENTS": prepared,
            }
        ):
            for budget in (None, 60, None, 60, 300):  # prepared, then run prepared
                for session in threads[2:5]:
                    fast = outcome(fast_window, SCOPE, session.pk, budget)
                    with raw_path():
                        assert fast == outcome(fast_window, SCOPE, session.pk, budget)
                    assert fast == outcome(orm_window, SCOPE, session.pk, budget)
    finally:
        with connections["default"].cursor() as cursor:
            cursor.execute("SET TIME ZONE 'UTC'")


@async_test
async def test_the_async_twin_reads_what_the_service_does(threads):
    from asgiref.sync import sync_to_async

    for budget in (None, 80):
        session = threads[3]
        window = await services.acontext_messages(
            scope=SCOPE, session_id=session.pk, max_tokens=budget
        )
        expected = await sync_to_async(fast_window)(SCOPE, session.pk, budget)
        assert snapshot(window) == snapshot(expected)


@on_postgresql
@pytest.mark.parametrize("zone", ["UTC", "Europe/Paris"])
def test_use_tz_false_reads_the_raw_paths_naive_times(threads, zone):
    """Without ``USE_TZ`` the messages' times are naive local times, as ``Manager.raw`` and
    the ORM read them, with the same ``fold`` in an hour the zone repeats."""
    from datetime import UTC, datetime

    session = threads[3]
    repeated = datetime(2026, 10, 25, 1, 30, tzinfo=UTC)  # 02:30 in Paris, the second time
    Message.objects.filter(session=session).update(created_at=repeated)
    with override_settings(USE_TZ=False, TIME_ZONE=zone):
        for budget in (None, 90):
            fast = fast_window(SCOPE, session.pk, budget)
            with raw_path():
                raw = fast_window(SCOPE, session.pk, budget)
            orm = orm_window(SCOPE, session.pk, budget)
            assert snapshot(fast) == snapshot(raw) == snapshot(orm)
            folds = [(m.created_at, m.created_at.tzinfo, m.created_at.fold) for m in fast.messages]
            assert folds == [
                (m.created_at, m.created_at.tzinfo, m.created_at.fold) for m in raw.messages
            ]
            assert folds and all(tzinfo is None for _, tzinfo, _ in folds)
            if zone == "Europe/Paris":  # psycopg 3's loader sets the fold, as Django's does
                assert {(t.hour, fold) for t, _, fold in folds[1:]} == {(2, 1)}
