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
from google.adk.sessions.base_session_service import GetSessionConfig
from google.genai import types

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


async def _add_events_and_other_messages(service):
    from cortex_sessions import services

    session = await service.create_session(
        app_name=APP, user_id="u", session_id="s", state={"k": 1, "app:a": [1], "user:u": "x"}
    )
    for n in range(4):
        text = "nul \x00 is kept as JSON text" if n == 2 else f"event {n}"
        await service.append_event(
            session,
            Event(
                author="user" if n % 2 == 0 else "agent",
                invocation_id="i",
                timestamp=10.000001 + n,
                content=types.Content(role="user", parts=[types.Part(text=text)]),
            ),
        )
    await services.aappend_messages(
        scope=f"app={APP}/user=u",
        session_id=(await CortexSession.objects.aget(adk__adk_id="s")).pk,
        messages=[
            {"role": "assistant", "content": "an operator's answer", "created_at": _at(20)},
            {"role": "system", "content": "host note", "created_at": _at(21)},
            {"role": "tool", "content": "t", "created_at": _at(22)},
        ],
    )


def test_get_session_is_the_same_on_the_one_statement_path_as_through_the_orm(service, monkeypatch):
    from cortex_sessions.integrations.adk import store

    async_to_sync(_add_events_and_other_messages)(service)
    configs = [None] + [
        GetSessionConfig(num_recent_events=n, after_timestamp=after)
        for n in (None, 0, 1, 2, 3, 5, 9)
        for after in (None, 11.000001, 12.5)
    ]

    def read(config):
        got = async_to_sync(service.get_session)(
            app_name=APP, user_id="u", session_id="s", config=config
        )
        return got, got._storage_update_marker

    fast = [read(config) for config in configs]
    one_page = [None, GetSessionConfig(num_recent_events=9), GetSessionConfig(after_timestamp=12.5)]
    with CaptureQueriesContext(connection) as captured:
        for config in one_page:
            read(config)
    monkeypatch.setattr(store, "serves", lambda using: False)
    slow = [read(config) for config in configs]
    assert fast == slow
    (whole, _), (last_two, _) = fast[0], slow[configs.index(GetSessionConfig(num_recent_events=2))]
    assert [e.author for e in whole.events] == ["user", "agent", "user", "agent", APP]
    assert whole.events[2].content.parts[0].text == "nul \x00 is kept as JSON text"
    assert whole.last_update_time == 22.0
    assert whole.state == {"k": 1, "app:a": [1], "user:u": "x"}
    assert [e.timestamp for e in last_two.events] == [13.000001, 20.0]
    # One statement a read on PostgreSQL (three through the ORM) when the newest page holds the
    # events asked for; else (``num_recent_events=2``: the page holds the tool and system
    # messages) the ORM reads on, and the equality above covers it.
    expected = 1 if connection.vendor == "postgresql" else 3
    assert len(captured.captured_queries) == expected * len(one_page)


@async_test
async def test_get_session_of_a_missing_or_unnameable_id_is_none_on_every_path(service):
    await service.create_session(app_name=APP, user_id="u", session_id="s")
    for session_id in ("t", "s\x00", "x" * 256):
        assert await service.get_session(app_name=APP, user_id="u", session_id=session_id) is None
    assert await service.get_session(app_name=APP, user_id="v", session_id="s") is None


def _at(seconds):
    return dt.datetime.fromtimestamp(seconds, tz=dt.UTC)


def test_append_and_delete_find_the_session_without_reading_its_messages(service):
    """Only a read needs the newest event's time: the lookup of a write or a delete skips it."""
    from cortex_sessions.models import Message

    session = async_to_sync(service.create_session)(app_name=APP, user_id="u", session_id="s")
    calls = (
        lambda: async_to_sync(service.append_event)(
            session, Event(author="user", invocation_id="i")
        ),
        lambda: async_to_sync(service.delete_session)(app_name=APP, user_id="u", session_id="s"),
    )
    for call in calls:
        with CaptureQueriesContext(connection) as captured:
            call()
        lookup = captured.captured_queries[0]["sql"]
        assert "adksession" in lookup
        assert Message._meta.db_table not in lookup
