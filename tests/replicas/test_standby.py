"""``ReplicaRouter`` against a real streaming standby whose replay the tests pause, so that what
the primary writes is deterministically missing on the replica (docs/design.md §17.3): the
caller's own writes are never stale, and a replica's trouble is never a 5xx."""

from __future__ import annotations

import os
import subprocess
import threading
import time
from pathlib import Path

import pytest
from django.db import connections
from rest_framework.test import APIClient

from cortex_sessions import consistency, services
from cortex_sessions.models import Session
from example_project.tenancy.models import Membership

from .conftest import standby_connection, wait_for_replay

pytestmark = [
    pytest.mark.postgres_only,
    pytest.mark.django_db(transaction=True, databases=["default", "replica"]),
]

ORG_RESOLVER = "example_project.tenancy.resolver.org_scope_resolver"
SCOPE = "org=acme/user=1"


def _messages(n: int) -> list[dict[str, str]]:
    return [{"role": "user", "content": f"message {i}"} for i in range(1, n + 1)]


def _new_session(n: int = 0) -> Session:
    session = services.create_session(scope=SCOPE, agent_id="coder", title="t")
    if n:
        services.append_messages(scope=SCOPE, session_id=session.id, messages=_messages(n))
    return session


def _text(content) -> str:
    return content if isinstance(content, str) else "".join(part["text"] for part in content)


def _as_another_caller(read):
    """Run ``read`` as a caller that wrote nothing (what a replica shows anyone)."""
    with consistency.consistency_context():
        return read()


def test_get_after_create_sees_the_session_while_the_replica_does_not(paused_replay):
    session = _new_session()

    assert services.get_session(scope=SCOPE, session_id=session.id).id == session.id
    # The replica really is behind: a caller that wrote nothing reads from it, and misses it.
    assert not _as_another_caller(lambda: Session.objects.filter(pk=session.id).exists())


def test_list_after_append_over_the_api_with_the_token(settings, django_user_model, paused_replay):
    settings.CORTEX_SESSIONS = {**settings.CORTEX_SESSIONS, "SCOPE_RESOLVER": ORG_RESOLVER}
    user = django_user_model.objects.create_user(username="alice", password="pw")
    Membership.objects.create(user=user, org="acme", is_org_admin=False)
    wait_for_replay()  # the user is on the replica; what follows is not
    with standby_connection() as standby:
        standby.execute("SELECT pg_wal_replay_pause()")
    client = APIClient()
    client.force_authenticate(user)

    created = client.post("/api/cortex/sessions/", {"agent_id": "coder"}, format="json")
    token = created[consistency.TOKEN_HEADER]
    url = f"/api/cortex/sessions/{created.data['id']}/messages/"
    appended = client.post(url, _messages(3), format="json", HTTP_X_CORTEX_CONSISTENCY_TOKEN=token)
    assert appended.status_code == 201
    token = appended[consistency.TOKEN_HEADER]
    assert consistency.parse_lsn(token) >= consistency.parse_lsn(created[consistency.TOKEN_HEADER])

    listed = client.get(url, HTTP_X_CORTEX_CONSISTENCY_TOKEN=token)
    assert listed.status_code == 200
    assert [_text(m["content"]) for m in listed.data["results"]] == [
        "message 1",
        "message 2",
        "message 3",
    ]
    got = client.get(
        f"/api/cortex/sessions/{created.data['id']}/", HTTP_X_CORTEX_CONSISTENCY_TOKEN=token
    )
    assert got.data["message_count"] == 3
    # Without the token a request is a caller that wrote nothing: stale by design.
    assert client.get(url).status_code == 404


def test_counters_after_delete_pop_fork_archive_make_default(paused_replay):
    session = _new_session(3)

    deleted = services.delete_message(scope=SCOPE, session_id=session.id, seq=3)
    assert (deleted.message_count, deleted.last_message) == (2, "message 2")
    popped = services.pop_message(scope=SCOPE, session_id=session.id)
    assert _text(popped.message.content) == "message 2"
    assert (popped.session.message_count, popped.session.last_message) == (1, "message 1")
    fork = services.fork_session(scope=SCOPE, session_id=session.id)
    assert (fork.message_count, fork.last_message) == (1, "message 1")
    made = services.make_default(scope=SCOPE, session_id=fork.id)
    assert made.is_default
    archived = services.archive_session(scope=SCOPE, session_id=session.id)
    assert archived.archived_at is not None

    again = services.get_session(scope=SCOPE, session_id=session.id)
    assert (again.message_count, again.last_message, again.archived_at) == (
        1,
        "message 1",
        archived.archived_at,
    )
    assert services.get_session(scope=SCOPE, session_id=fork.id).is_default
    listed = services.list_messages(scope=SCOPE, session_id=fork.id)
    assert [_text(m.content) for m in listed] == ["message 1"]


def test_concurrent_pops_return_different_messages(paused_replay):
    session = _new_session(4)
    popped: list[str] = []
    errors: list[BaseException] = []
    start = threading.Barrier(4)

    def pop() -> None:
        try:
            start.wait()
            popped.append(
                _text(services.pop_message(scope=SCOPE, session_id=session.id).message.content)
            )
        except BaseException as exc:  # reported below
            errors.append(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=pop) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert errors == []
    assert sorted(popped) == [f"message {i}" for i in range(1, 5)]
    assert services.get_session(scope=SCOPE, session_id=session.id).message_count == 0


def test_a_read_the_replica_serves_goes_there(replica_router):
    session = _new_session(1)
    wait_for_replay()
    routed: list[str] = []

    def spy(execute, sql, params, many, context):
        routed.append(context["connection"].alias)
        return execute(sql, params, many, context)

    with connections["replica"].execute_wrapper(spy):
        assert services.get_session(scope=SCOPE, session_id=session.id).message_count == 1
    assert routed  # the replica had replayed the caller's writes, so it answered


STANDBY_DIR = os.environ.get("CORTEX_STANDBY_DIR")
SCRIPT = Path(__file__).resolve().parents[2] / ".ci" / "standby.sh"


def _standby(command: str) -> None:
    subprocess.run(
        [str(SCRIPT), command], env={**os.environ, "STANDBY_DIR": STANDBY_DIR or ""}, check=True
    )


@pytest.mark.skipif(not STANDBY_DIR, reason="set CORTEX_STANDBY_DIR to let a test stop it")
def test_standby_stopped_mid_test_reads_from_the_primary(
    settings, django_user_model, replica_router
):
    settings.CORTEX_SESSIONS = {**settings.CORTEX_SESSIONS, "SCOPE_RESOLVER": ORG_RESOLVER}
    user = django_user_model.objects.create_user(username="bob", password="pw")
    Membership.objects.create(user=user, org="acme", is_org_admin=False)
    client = APIClient()
    client.force_authenticate(user)
    created = client.post("/api/cortex/sessions/", {"agent_id": "coder"}, format="json")
    wait_for_replay()
    assert client.get("/api/cortex/sessions/").data["count"] == 1  # the replica answers
    _standby("halt")
    try:
        listed = client.get("/api/cortex/sessions/")
        assert listed.status_code == 200
        assert [s["id"] for s in listed.data["results"]] == [created.data["id"]]
        got = services.get_session(scope=f"org=acme/user={user.pk}", session_id=created.data["id"])
        assert str(got.id) == created.data["id"]
    finally:
        _standby("start")


def test_a_read_cancelled_by_a_recovery_conflict_runs_again_on_the_primary(
    settings, django_user_model, replica_router
):
    settings.CORTEX_SESSIONS = {**settings.CORTEX_SESSIONS, "SCOPE_RESOLVER": ORG_RESOLVER}
    user = django_user_model.objects.create_user(username="carol", password="pw")
    Membership.objects.create(user=user, org="acme", is_org_admin=False)
    client = APIClient()
    client.force_authenticate(user)
    created = client.post("/api/cortex/sessions/", {"agent_id": "coder"}, format="json")
    wait_for_replay()
    reading = threading.Event()
    cancelled: list[BaseException] = []

    def slow_replica_read(execute, sql, params, many, context):
        """Before the app's first replica statement, one that holds the table's lock for
        long: the primary's ACCESS EXCLUSIVE lock, replayed, cancels it after 1 s
        (max_standby_streaming_delay of .ci/standby.sh)."""
        if not reading.is_set() and "pg_is_in_recovery" not in sql:  # the router's own probe
            reading.set()
            try:
                context["cursor"].execute(
                    "SELECT count(*), pg_sleep(30) FROM cortex_sessions_session"
                )
            except BaseException as exc:
                cancelled.append(exc)
                raise
        return execute(sql, params, many, context)

    def lock_on_primary() -> None:
        reading.wait(30)
        time.sleep(0.3)  # the standby's statement has its lock by then
        with connections["default"].cursor() as cursor:
            cursor.execute("BEGIN")
            cursor.execute("LOCK TABLE cortex_sessions_session IN ACCESS EXCLUSIVE MODE")
            cursor.execute("COMMIT")
        connections.close_all()

    locker = threading.Thread(target=lock_on_primary)
    locker.start()
    with connections["replica"].execute_wrapper(slow_replica_read):
        listed = client.get("/api/cortex/sessions/")
    locker.join()

    assert cancelled, "the replica statement was not cancelled"
    assert "conflict with recovery" in str(cancelled[0])
    assert listed.status_code == 200
    assert [s["id"] for s in listed.data["results"]] == [created.data["id"]]
