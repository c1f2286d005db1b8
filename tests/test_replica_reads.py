"""Services on a host with read replicas and a router (docs/design.md §17.1).

The failures of a real streaming standby are reproduced without one: a router sends every read
to the alias ``stale``, a second connection to the test database that holds a snapshot taken
before the service call (``REPEATABLE READ``), as a replica that has not replayed the call's
writes would. A service that read through the router inside its own write would then store a
deleted message's text as ``last_message``, return an archived session live, or pop one message
twice. On SQLite (no second snapshot) the router records where each read went instead.
"""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
from django.db import connections, transaction
from django.test import override_settings

import cortex_sessions
from cortex_sessions import routing, services
from cortex_sessions.models import Message, Session
from cortex_sessions.references.service import prepare_references, reference_candidates
from tests.routers import (
    SCOPED_MODELS,
    STRICT_ALIAS,
    RecordingRouter,
    RoutingViolation,
    StrictReplicaRouter,
)

SCOPE = "org=acme/user=1"

# Each test installs its own router, over the strict one when that is on.
pytestmark = pytest.mark.django_db(transaction=True)


def _chat(*texts: str) -> Session:
    """A session of agent ``a`` holding ``texts`` as alternating user/assistant messages."""
    session = services.create_session(scope=SCOPE, agent_id="a")
    roles = ["user", "assistant"]
    messages = [{"role": roles[i % 2], "content": text} for i, text in enumerate(texts)]
    return services.append_messages(scope=SCOPE, session_id=session.pk, messages=messages).session


class StaleReplica:
    """The alias ``stale``: a connection to the test database whose reads see a snapshot taken
    by :meth:`freeze`, and a router sending every read there (``router.reads`` records them)."""

    def __init__(self) -> None:
        self.router = RecordingRouter(alias="stale")
        self.connection = connections["stale"]

    def freeze(self) -> None:
        """From now on, reads on ``stale`` see the database as it is now."""
        with self.connection.cursor() as cursor:
            if self.connection.vendor == "postgresql":
                cursor.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
            else:
                cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
                cursor.execute("START TRANSACTION WITH CONSISTENT SNAPSHOT")
            cursor.execute(f"SELECT COUNT(*) FROM {Message._meta.db_table}")


@pytest.fixture
def stale(transactional_db):
    """A :class:`StaleReplica` behind ``override_settings(DATABASE_ROUTERS=…)``; its connection is
    closed (the snapshot dropped) before the test database is flushed."""
    default = connections["default"]
    # A connection made here, not a configured alias: the test case allows it, as a thread's.
    connections["stale"] = type(default)(copy.deepcopy(default.settings_dict), alias="stale")
    replica = StaleReplica()
    try:
        with override_settings(DATABASE_ROUTERS=[replica.router]):
            yield replica
    finally:
        replica.connection.close()
        del connections["stale"]


@pytest.fixture
def recorded():
    """A :class:`RecordingRouter` sending reads to ``default``, installed for the test."""
    router = RecordingRouter()
    with override_settings(DATABASE_ROUTERS=[router]):
        yield router


def _assert_replica_safe(router: RecordingRouter) -> None:
    """No read went through the router inside a transaction; each read of a scoped model
    named its scope."""
    inside = [read.model.__name__ for read in router.reads if read.in_transaction]
    assert inside == []
    unscoped = [
        read.model.__name__
        for read in router.reads
        if issubclass(read.model, SCOPED_MODELS) and "scope" not in read.hints
    ]
    assert unscoped == []


# -- against a stale replica (PostgreSQL, MySQL/MariaDB) -------------------------------------------


@pytest.mark.concurrent_db
def test_delete_message_stores_the_newest_remaining_text_not_the_deleted_one(stale):
    session = _chat("question", "answer")
    stale.freeze()

    returned = services.delete_message(scope=SCOPE, session_id=session.pk, seq=2)

    assert (returned.last_message, returned.message_count) == ("question", 1)
    stored = Session.objects.using("default").get(pk=session.pk)
    assert (stored.last_message, stored.message_count) == ("question", 1)


@pytest.mark.concurrent_db
def test_archive_and_unarchive_return_the_state_they_wrote(stale):
    session = services.resolve_session(scope=SCOPE, agent_id="a")[0]
    stale.freeze()

    archived = services.archive_session(scope=SCOPE, session_id=session.pk)
    assert archived.archived_at is not None and archived.is_default is False
    live = services.unarchive_session(scope=SCOPE, session_id=session.pk)
    assert live.archived_at is None


@pytest.mark.concurrent_db
def test_make_default_and_patch_return_the_state_they_wrote(stale):
    session = _chat("hello")
    stale.freeze()

    assert services.make_default(scope=SCOPE, session_id=session.pk).is_default is True
    patched = services.patch_session(scope=SCOPE, session_id=session.pk, patch={"title": "New"})
    assert patched.title == "New"
    assert services.update_session(scope=SCOPE, session_id=session.pk, title="Newer").title == (
        "Newer"
    )


@pytest.mark.concurrent_db
def test_a_partial_fork_counts_the_messages_it_copied(stale):
    session = _chat("one", "two", "three")
    stale.freeze()

    fork = services.fork_session(scope=SCOPE, session_id=session.pk, up_to_seq=2)

    assert (fork.message_count, fork.last_message) == (2, "two")
    stored = Session.objects.using("default").get(pk=fork.pk)
    assert (stored.message_count, stored.last_message) == (2, "two")


@pytest.mark.concurrent_db
def test_two_pops_never_return_the_same_message(stale):
    session = _chat("one", "two", "three")
    stale.freeze()

    first = services.pop_message(scope=SCOPE, session_id=session.pk)
    second = services.pop_message(scope=SCOPE, session_id=session.pk)

    assert (first.message.seq, second.message.seq) == (3, 2)
    assert (second.session.message_count, second.session.last_message) == (1, "one")


@pytest.mark.concurrent_db
def test_keyed_writes_replay_from_the_primary(stale):
    stale.freeze()  # the replica has none of what follows

    created = services.create_session(scope=SCOPE, agent_id="a", idempotency_key="k1")
    again = services.create_session(scope=SCOPE, agent_id="a", idempotency_key="k1")
    assert again.pk == created.pk
    message = {"role": "user", "content": "hi"}
    first = services.append_messages(
        scope=SCOPE, session_id=created.pk, messages=[message], idempotency_key="k2"
    )
    replay = services.append_messages(
        scope=SCOPE, session_id=created.pk, messages=[message], idempotency_key="k2"
    )
    assert [m.pk for m in replay.messages] == [m.pk for m in first.messages]
    assert replay.session.message_count == 1


@pytest.mark.concurrent_db
def test_resolve_finds_the_default_it_created_and_recount_reads_the_rows(stale):
    session, _ = services.resolve_session(scope=SCOPE, agent_id="a")
    stale.freeze()
    services.append_messages(
        scope=SCOPE, session_id=session.pk, messages=[{"role": "user", "content": "x"}]
    )

    assert services.resolve_session(scope=SCOPE, agent_id="a") == (session, False)
    assert services.recount_sessions(scope=SCOPE, session_ids=[session.pk]) == []


@pytest.mark.concurrent_db
def test_reads_outside_a_write_go_to_the_replica_with_their_scope(stale):
    """The reads a router may send to a replica do go there, with their hints: the replica
    serves what it has (stale by design, docs/design.md §17.1)."""
    session = _chat("hello")
    stale.freeze()
    services.append_messages(
        scope=SCOPE, session_id=session.pk, messages=[{"role": "user", "content": "more"}]
    )

    assert services.get_session(scope=SCOPE, session_id=session.pk).message_count == 1
    assert services.count_sessions(scope=SCOPE) == 1
    assert [r.hints["scope"] for r in stale.router.reads if r.model is Session] == [SCOPE] * 2


# -- where each read went, on every database -------------------------------------------------------


def test_no_service_routes_a_read_inside_its_own_transaction(recorded):
    session = _chat("one", "two", "three")
    other = services.create_session(scope=SCOPE, agent_id="a", idempotency_key="k")
    services.create_session(scope=SCOPE, agent_id="a", idempotency_key="k")
    services.delete_message(scope=SCOPE, session_id=session.pk, seq=3)
    services.pop_message(scope=SCOPE, session_id=session.pk)
    services.delete_messages_after(scope=SCOPE, session_id=session.pk, after_seq=0)
    services.fork_session(scope=SCOPE, session_id=session.pk, up_to_seq=0)
    services.make_default(scope=SCOPE, session_id=other.pk)
    services.archive_session(scope=SCOPE, session_id=other.pk)
    services.unarchive_session(scope=SCOPE, session_id=other.pk)
    services.patch_session(scope=SCOPE, session_id=other.pk, patch={"metadata": {"k": 1}})
    services.update_session(scope=SCOPE, session_id=other.pk, title="t")
    services.resolve_session(scope=SCOPE, agent_id="b")
    services.recount_sessions(scope=SCOPE)
    services.recount_sessions(all_scopes=True)
    services.clear_messages(scope=SCOPE, session_id=other.pk)
    services.delete_session(scope=SCOPE, session_id=other.pk)

    _assert_replica_safe(recorded)


def test_every_routed_read_names_its_scope(recorded):
    session = _chat("hello")
    services.get_session(scope=SCOPE, session_id=session.pk)
    services.list_sessions(scope=SCOPE)
    services.count_sessions(scope=SCOPE)
    services.list_sessions_page(scope=SCOPE)
    services.list_messages(scope=SCOPE, session_id=session.pk)
    other = services.create_session(scope=SCOPE, agent_id="a", title="other")
    reference_candidates(scope=SCOPE, session_id=session.pk, query="oth")
    prepare_references(
        scope=SCOPE, session_id=session.pk, content="see", references=[str(other.pk)]
    )

    assert recorded.reads, "the reads went through the router"
    _assert_replica_safe(recorded)
    assert {read.hints["scope"] for read in recorded.reads} == {SCOPE}


def test_a_read_inside_a_hosts_transaction_runs_on_its_database(recorded):
    with transaction.atomic():
        session = services.create_session(scope=SCOPE, agent_id="a")
        assert services.get_session(scope=SCOPE, session_id=session.pk) == session
        assert routing.db_for_read(Session, scope=SCOPE) == "default"
    assert recorded.reads == []


# -- the strict router itself (what --strict-replica-router runs the suite with) -------------------


def _routed_by_the_app(model, **hints):
    """``StrictReplicaRouter().db_for_read(model, **hints)`` called from a frame whose code is
    the app's, as a service's unqualified queryset would call it."""
    probe = Path(cortex_sessions.__file__).parent / "services" / "_probe.py"
    names = {"router": StrictReplicaRouter(), "model": model, "hints": hints}
    exec(compile("result = router.db_for_read(model, **hints)", str(probe), "exec"), names)
    return names["result"]


def test_the_strict_router_sends_a_scoped_read_outside_a_transaction_to_the_replica():
    assert _routed_by_the_app(Session, scope=SCOPE) == STRICT_ALIAS
    session = services.create_session(scope=SCOPE, agent_id="a")
    assert _routed_by_the_app(Message, instance=session) == STRICT_ALIAS


def test_the_strict_router_refuses_a_read_routed_inside_a_transaction():
    with transaction.atomic(), pytest.raises(RoutingViolation, match="transaction is open"):
        _routed_by_the_app(Session, scope=SCOPE)


def test_the_strict_router_refuses_a_read_without_its_scope():
    with pytest.raises(RoutingViolation, match="without the scope hint"):
        _routed_by_the_app(Message)
