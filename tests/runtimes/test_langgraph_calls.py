"""The Python around each ``CortexCheckpointSaver`` call, kept small without losing a check
(docs/design.md §19.1): a thread's config parsed once (thread id, scope, agent), the
connection a sync call opened closed after it, one it found kept.
"""

from __future__ import annotations

import threading
import uuid

import pytest

pytest.importorskip("langgraph")

from django.db import connection, connections

from cortex_sessions.exceptions import InvalidAgentId, InvalidInput, ScopeForbidden
from cortex_sessions.integrations.langgraph import CortexCheckpointSaver
from cortex_sessions.scope import as_scope

pytestmark = pytest.mark.django_db

ACME = "org=acme"
ALICE = "org=acme/user=alice"
GLOBEX = "org=globex"
AGENT = "graph-bot"


def _config(thread_id, **extra):
    return {"configurable": {"thread_id": thread_id, **extra}}


def test_a_threads_parse_is_kept_and_each_call_gets_its_own_namespace_and_checkpoint():
    saver = CortexCheckpointSaver(scope=ACME, agent_id=AGENT)
    thread_id = uuid.uuid4()
    first = saver._target(_config(str(thread_id), scope=ALICE, checkpoint_id="a"))
    second = saver._target(_config(str(thread_id), scope=ALICE, checkpoint_ns="n"))
    assert (first.checkpoint_ns, first.checkpoint_id) == ("", "a")
    assert (second.checkpoint_ns, second.checkpoint_id) == ("n", None)
    for target in (first, second):
        assert (target.scope, target.agent_id) == (as_scope(ALICE), AGENT)
        assert (target.thread_id, target.session_id) == (str(thread_id), thread_id)
    other = saver._target(_config(str(thread_id), agent_id="other-bot"))
    assert (other.scope, other.agent_id) == (as_scope(ACME), "other-bot")
    by_uuid = saver._target(_config(thread_id))  # not a str: parsed, not kept
    assert (by_uuid.thread_id, by_uuid.session_id) == (str(thread_id), thread_id)


@pytest.mark.parametrize(
    ("extra", "error"),
    [
        ({"scope": GLOBEX}, ScopeForbidden),
        ({"agent_id": "bad\x01agent"}, InvalidAgentId),
    ],
)
def test_a_config_that_is_refused_is_refused_every_time(extra, error):
    saver = CortexCheckpointSaver(scope=ACME, agent_id=AGENT)
    thread_id = str(uuid.uuid4())
    saver._target(_config(thread_id))
    for _ in range(2):
        with pytest.raises(error):
            saver._target(_config(thread_id, **extra))
    with pytest.raises(InvalidInput):
        saver._target(_config("not-a-uuid"))


def test_a_saver_bound_anew_parses_its_configs_anew():
    saver = CortexCheckpointSaver(scope=ALICE, agent_id=AGENT)
    thread_id = str(uuid.uuid4())
    assert saver._target(_config(thread_id)).scope == as_scope(ALICE)
    saver.scope, saver.agent_id = as_scope(GLOBEX), "other-bot"
    target = saver._target(_config(thread_id))
    assert (target.scope, target.agent_id) == (as_scope(GLOBEX), "other-bot")
    with pytest.raises(ScopeForbidden):
        saver._target(_config(thread_id, scope=ALICE))


def test_the_kept_parses_are_bounded():
    saver = CortexCheckpointSaver(scope=ACME, agent_id=AGENT)
    size = saver._targets.size
    for _ in range(size + 5):
        saver._target(_config(str(uuid.uuid4())))
    assert 0 < len(saver._targets._threads) <= size


@pytest.mark.skipif(
    connection.vendor == "sqlite", reason="Django never closes an in-memory SQLite database"
)
@pytest.mark.django_db(transaction=True)
def test_a_sync_call_closes_the_connection_it_opened_and_keeps_one_it_found():
    """A sync graph run calls the saver from LangGraph's worker threads: a connection the call
    opened is closed after it, one the thread had open stays open."""
    saver = CortexCheckpointSaver(scope=ACME, agent_id=AGENT)
    open_after = {}

    def worker(had_one: bool) -> None:
        try:
            if had_one:
                connection.ensure_connection()
            assert saver.get_tuple(_config(str(uuid.uuid4()))) is None
            open_after[had_one] = [
                conn.alias for conn in connections.all(initialized_only=True) if conn.connection
            ]
        finally:
            connections.close_all()

    for had_one in (False, True):
        thread = threading.Thread(target=worker, args=(had_one,))
        thread.start()
        thread.join()
    assert open_after == {False: [], True: [connection.alias]}
