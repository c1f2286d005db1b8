"""``CortexSession`` pop and newest-``limit`` read in one statement on PostgreSQL, compacted
session or not (docs/design.md §13.2, §14, §16.5), and the same items on every database."""

from __future__ import annotations

import uuid

import pytest

pytest.importorskip("agents")

from asgiref.sync import async_to_sync
from django.db import connection
from django.test.utils import CaptureQueriesContext

from cortex_sessions import services
from cortex_sessions.integrations.openai_agents import CortexSession, _pop_item
from cortex_sessions.integrations.openai_compaction import read_history, summary_content
from cortex_sessions.models import Message, Session
from cortex_sessions.scope import Scope
from cortex_sessions.services.context import context_tokens_of

pytestmark = pytest.mark.django_db

SCOPE = "org=acme/user=alice"


def user(n):
    return {"role": "user" if n % 2 else "assistant", "content": f"item {n}"}


def _store(count, *, compact_through=None, after=0):
    """A pinned store of ``count`` items; compacted through ``compact_through`` (the summary
    holding a compaction item and the last of those items), then ``after`` more items."""
    created = services.create_session(scope=SCOPE, agent_id="bot")
    store = CortexSession(scope=SCOPE, agent_id="bot", session_id=created.pk)
    async_to_sync(store.add_items)([user(n) for n in range(1, count + 1)])
    if compact_through is not None:
        services.compact_session(
            scope=SCOPE,
            session_id=created.pk,
            through_seq=compact_through,
            summary=summary_content([{"type": "compaction", "encrypted_content": "x"}, user(0)]),
        )
        async_to_sync(store.add_items)([user(n) for n in range(100, 100 + after)])
    async_to_sync(store.resolve)()
    return store, created.pk


def _items(store, limit=None):
    return async_to_sync(store.get_items)(limit)


def _pop(pk):
    return _pop_item(pk, Scope.parse(SCOPE))


def _exact(pk):
    stored = Session.objects.get(pk=pk)
    assert stored.message_count == Message.objects.filter(session_id=pk).count()
    assert stored.context_tokens == context_tokens_of(stored, using="default")


@pytest.mark.postgres_only
def test_a_pop_of_an_uncompacted_session_is_one_statement():
    store, pk = _store(3)
    with CaptureQueriesContext(connection) as captured:
        assert _pop(pk) == user(3)
    assert len(captured.captured_queries) == 1
    assert _items(store) == [user(1), user(2)]
    _exact(pk)


@pytest.mark.postgres_only
def test_a_pop_of_an_item_after_the_summary_is_one_statement():
    store, pk = _store(3, compact_through=3, after=2)
    seen = _items(store)
    with CaptureQueriesContext(connection) as captured:
        assert _pop(pk) == seen[-1] == user(101)
    assert len(captured.captured_queries) == 1
    assert _items(store) == seen[:-1]
    _exact(pk)


@pytest.mark.postgres_only
@pytest.mark.parametrize("compacted", [False, True])
def test_reading_the_newest_items_is_one_statement_unless_compacted(compacted):
    store, pk = _store(60, compact_through=30 if compacted else None, after=5)
    with CaptureQueriesContext(connection) as captured:
        newest = read_history(pk, Scope.parse(SCOPE), 50)
    assert newest == _items(store)[-50:]
    # one statement tells a compaction too; a compacted session reads the context after it
    assert (len(captured.captured_queries) == 1) is not compacted


@pytest.mark.parametrize(
    "shape", [(4, None, 0), (4, 4, 0), (4, 4, 3), (4, 2, 2)], ids=["plain", "bare", "tail", "gap"]
)
def test_pops_follow_what_get_items_returns_compacted_or_not(shape):
    count, through, after = shape
    store, pk = _store(count, compact_through=through, after=after)
    while seen := _items(store):
        for limit in (1, 2, len(seen) + 5):
            assert _items(store, limit) == seen[-limit:]
        assert _pop(pk) == seen[-1]
        assert _items(store) == seen[:-1]
        _exact(pk)
    assert _pop(pk) is None


def test_a_missing_or_foreign_session_is_not_found_for_pop_and_read():
    from cortex_sessions.exceptions import SessionNotFound

    _, pk = _store(1)
    for missing in (uuid.uuid4(), pk):
        scope = Scope.parse("org=acme/user=bob" if missing == pk else SCOPE)
        with pytest.raises(SessionNotFound):
            _pop_item(missing, scope)
        with pytest.raises(SessionNotFound):
            read_history(missing, scope, 50)


@pytest.mark.concurrent_db
@pytest.mark.django_db(transaction=True)
def test_concurrent_pops_of_a_compacted_session_take_each_item_once():
    # Pops racing one another in a compacted session: the items after the summary, then the
    # summary's own (rewritten under the row lock), each returned once; counters exact.
    import threading
    from concurrent.futures import ThreadPoolExecutor

    from django.db import connections

    store, pk = _store(4, compact_through=4, after=12)
    seen = _items(store)
    threads = 6
    barrier = threading.Barrier(threads)

    def popper(_index):
        mine = []
        try:
            barrier.wait(timeout=30)
            worker = CortexSession(scope=SCOPE, agent_id="bot", session_id=pk)
            while (item := async_to_sync(worker.pop_item)()) is not None:
                mine.append(item)
        finally:
            connections.close_all()
        return mine

    with ThreadPoolExecutor(max_workers=threads) as pool:
        results = list(pool.map(popper, range(threads)))
    popped = [item for result in results for item in result]
    assert len(popped) == len(seen)
    assert sorted(map(repr, popped)) == sorted(map(repr, seen))
    assert _items(store) == []
    _exact(pk)
