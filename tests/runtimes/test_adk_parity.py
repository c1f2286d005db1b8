"""``CortexSessionService`` where ADK's own stores set the behaviour (docs/design.md
§13.3, §19.4): the list's statements, ``last_update_time`` and the stale writer's error."""

from __future__ import annotations

import datetime as dt

import pytest

pytest.importorskip("google.adk")

from asgiref.sync import async_to_sync
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from google.adk.errors import StaleSessionError
from google.adk.events import Event

from cortex_sessions.integrations.adk import CortexSessionService
from cortex_sessions.models import Session as CortexSession
from tests.asyncio_support import async_test

pytestmark = pytest.mark.django_db

APP = "parity_app"


@pytest.fixture
def service():
    return CortexSessionService()


async def _add_sessions(service, numbers, users):
    for n in numbers:
        user = users[n % len(users)]
        session = await service.create_session(
            app_name=APP, user_id=user, session_id=f"s{n}", state={"user:n": n, "k": n}
        )
        await service.append_event(session, Event(author="user", invocation_id="i"))


def _listed(service, user_id):
    with CaptureQueriesContext(connection) as captured:
        listed = async_to_sync(service.list_sessions)(app_name=APP, user_id=user_id)
    return len(listed.sessions), len(captured.captured_queries)


@pytest.mark.parametrize("user_id", ["u", None], ids=["one user", "every user"])
def test_list_sessions_sends_as_many_statements_for_forty_sessions_as_for_one(service, user_id):
    users = ("u",) if user_id else ("u", "v", "w")
    async_to_sync(_add_sessions)(service, range(1), users)
    one = _listed(service, user_id)
    async_to_sync(_add_sessions)(service, range(1, 41), users)
    forty = _listed(service, user_id)
    assert one[0] == 1
    assert forty[0] == 41
    # One user's on PostgreSQL: one statement (``store_pg``); else two (sessions, shared state).
    expected = 1 if user_id and connection.vendor == "postgresql" else 2
    assert forty[1] == one[1] == expected


@async_test
async def test_one_users_list_is_the_same_on_the_one_statement_path_as_through_the_orm(
    service, monkeypatch
):
    from cortex_sessions.integrations.adk import store

    await service.create_session(app_name=APP, user_id="u", session_id="a", state={"app:g": 1})
    b = await service.create_session(
        app_name=APP, user_id="u", session_id="b", state={"user:p": [1, {"x": None}], "k": "b"}
    )
    await service.append_event(b, Event(author="user", invocation_id="i", timestamp=1.000001))
    await service.create_session(app_name=APP, user_id="u", session_id="c", state={"k": 3})
    await service.create_session(app_name=APP, user_id="v", session_id="d")  # another user
    gone = await service.create_session(app_name=APP, user_id="u", session_id="gone")
    await CortexSession.objects.filter(adk__adk_id=gone.id).aupdate(archived_at=timezone.now())
    stale = await service.create_session(app_name=APP, user_id="u", session_id="old")
    await CortexSession.objects.filter(adk__adk_id=stale.id).aupdate(
        expires_at=timezone.now() - dt.timedelta(seconds=1)
    )

    async def listed():
        sessions = (await service.list_sessions(app_name=APP, user_id="u")).sessions
        return [(s, s._storage_update_marker) for s in sessions]

    fast = await listed()
    monkeypatch.setattr(store, "serves", lambda using: False)
    slow = await listed()
    assert [s.id for s, _ in fast] == ["b", "a", "c"]  # least recently updated first
    assert fast == slow
    assert [type(s.last_update_time) for s, _ in fast] == [float] * 3
    assert fast[0][0].last_update_time == 1.000001
    assert fast[0][0].state == {"app:g": 1, "user:p": [1, {"x": None}], "k": "b"}
    # Each listed session is what a get reads (without events), its marker included.
    for session, marker in fast:
        got = await service.get_session(app_name=APP, user_id="u", session_id=session.id)
        assert (got.model_copy(update={"events": []}), got._storage_update_marker) == (
            session,
            marker,
        )


@async_test
async def test_listed_sessions_carry_their_own_users_state_and_the_apps(service):
    await service.create_session(app_name=APP, user_id="a", session_id="x", state={"app:g": 1})
    await service.create_session(app_name=APP, user_id="a", session_id="y", state={"user:p": "a"})
    await service.create_session(app_name=APP, user_id="b", session_id="z", state={"k": "z"})
    listed = (await service.list_sessions(app_name=APP)).sessions
    assert {(s.user_id, s.id): s.state for s in listed} == {
        ("a", "x"): {"app:g": 1, "user:p": "a"},
        ("a", "y"): {"app:g": 1, "user:p": "a"},
        ("b", "z"): {"app:g": 1, "k": "z"},
    }
    for session in listed:
        got = await service.get_session(
            app_name=APP, user_id=session.user_id, session_id=session.id
        )
        assert got.state == session.state
        assert got.last_update_time == session.last_update_time


@async_test
async def test_last_update_time_after_an_append_is_the_events_timestamp(service):
    session = await service.create_session(app_name=APP, user_id="u")
    assert (
        await service.get_session(app_name=APP, user_id="u", session_id=session.id)
    ).last_update_time == session.last_update_time
    stamp = session.last_update_time + 10
    await service.append_event(session, Event(author="user", invocation_id="i", timestamp=stamp))
    assert session.last_update_time == pytest.approx(stamp, abs=1e-6)
    got = await service.get_session(app_name=APP, user_id="u", session_id=session.id)
    assert got.last_update_time == pytest.approx(stamp, abs=1e-6)
    (listed,) = (await service.list_sessions(app_name=APP, user_id="u")).sessions
    assert listed.last_update_time == pytest.approx(stamp, abs=1e-6)


@async_test
async def test_a_stale_writer_gets_adks_error_and_text(service):
    session = await service.create_session(app_name=APP, user_id="u")
    stale = await service.get_session(app_name=APP, user_id="u", session_id=session.id)
    await service.append_event(session, Event(author="user", invocation_id="one"))
    with pytest.raises(StaleSessionError, match="modified in storage"):
        await service.append_event(stale, Event(author="user", invocation_id="two"))
    with pytest.raises(ValueError, match="Please reload the session"):
        await service.append_event(stale, Event(author="user", invocation_id="two"))


@async_test
async def test_the_service_is_an_async_context_manager_as_adks_database_store():
    async with CortexSessionService() as service:
        session = await service.create_session(app_name=APP, user_id="u")
    assert await service.get_session(app_name=APP, user_id="u", session_id=session.id)
    await service.close()
