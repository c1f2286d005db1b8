"""Conformance of ``CortexSessionService`` with Google ADK's ``BaseSessionService`` (§13.3).

Covers every case of ADK's own session-service tests (InMemory and Database stores): empty get,
create/get/delete, ids and list order, ``app:``/``user:``/``temp:`` state rules, state merged
into new sessions, events with bytes and with every field, ``GetSessionConfig`` filters — plus
duplicate ids, partial events, stale writers, user state, the scope mapping, tenant safety,
visibility in the admin and the API, and ADK's ``Runner`` across two turns.
"""

from __future__ import annotations

import contextvars
import datetime as dt
import random
import subprocess
import sys
import textwrap
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

pytest.importorskip("google.adk")

import pydantic  # ADK's dependency: present whenever google.adk is
from asgiref.sync import async_to_sync
from django.core.management import call_command
from django.db import connections
from google.adk.errors.already_exists_error import AlreadyExistsError
from google.adk.errors.session_not_found_error import SessionNotFoundError
from google.adk.events import Event, EventActions
from google.adk.sessions import BaseSessionService, _session_util
from google.adk.sessions.base_session_service import GetSessionConfig, ListSessionsResponse
from google.genai import types
from rest_framework.test import APIClient

from cortex_sessions import services
from cortex_sessions.content import MAX_JSON_DEPTH
from cortex_sessions.exceptions import InvalidInput, InvalidScope, NulCharacter, ScopeForbidden
from cortex_sessions.integrations.adk import CortexSessionService
from cortex_sessions.integrations.adk.models import (
    AdkAppState,
    AdkSession,
    AdkUserState,
)
from cortex_sessions.integrations.adk.service import EVENT_BLOCK_TYPE, AdkIdTooLong
from cortex_sessions.models import Message, Session
from cortex_sessions.scope import MAX_CANONICAL_BYTES
from example_project.runtimes.adk_example import main
from tests.asyncio_support import async_test

pytestmark = pytest.mark.django_db

APP = "my_app"


def text_event(text, author="user", **kwargs):
    role = "user" if author == "user" else "model"
    return Event(
        invocation_id="invocation",
        author=author,
        content=types.Content(role=role, parts=[types.Part(text=text)]),
        **kwargs,
    )


@pytest.fixture
def service():
    return CortexSessionService()


def run(coroutine_function, *args, **kwargs):
    return async_to_sync(coroutine_function)(*args, **kwargs)


# -- ADK's own cases -------------------------------------------------------------------------------


def test_constructed_without_arguments_it_is_an_adk_session_service():
    assert isinstance(CortexSessionService(), BaseSessionService)


@async_test
async def test_get_empty_session(service):
    assert await service.get_session(app_name=APP, user_id="test_user", session_id="123") is None


@async_test
async def test_create_get_and_delete_session(service):
    session = await service.create_session(app_name=APP, user_id="u", state={"key": "value"})
    assert (session.app_name, session.user_id, session.state) == (APP, "u", {"key": "value"})
    assert session.id
    got = await service.get_session(app_name=APP, user_id="u", session_id=session.id)
    assert got == session
    await service.delete_session(app_name=APP, user_id="u", session_id=session.id)
    assert await service.get_session(app_name=APP, user_id="u", session_id=session.id) is None
    assert not await Session.objects.filter(pk=session.id).aexists()


@async_test
async def test_generated_id_is_the_cortex_session_id(service):
    session = await service.create_session(app_name=APP, user_id="u")
    stored = await Session.objects.aget(pk=session.id)
    assert (stored.scope, stored.agent_id) == (f"app={APP}/user=u", APP)


@async_test
async def test_create_with_given_ids_and_list_them_in_order(service):
    ids = [f"session{i}" for i in range(5)]
    for session_id in ids:
        await service.create_session(app_name=APP, user_id="u", session_id=session_id)
    listed = (await service.list_sessions(app_name=APP, user_id="u")).sessions
    assert [s.id for s in listed] == ids
    assert all(s.events == [] for s in listed)


@async_test
async def test_a_given_id_is_unique_per_app_and_user(service):
    await service.create_session(app_name=APP, user_id="u", session_id="s")
    with pytest.raises(AlreadyExistsError):
        await service.create_session(app_name=APP, user_id="u", session_id="s")
    other = await service.create_session(app_name=APP, user_id="v", session_id="s")
    assert other.id == "s"
    assert await Session.objects.acount() == 2


@async_test
async def test_ids_differing_only_in_case_or_a_trailing_space_are_different(service):
    """App names, user ids and session ids compare exactly on every database (on MySQL/MariaDB
    too, whose default collations fold case; docs/design.md §15)."""
    users = ["u", "U", "u "]
    for user in users:
        await service.create_session(
            app_name=APP, user_id=user, session_id="s", state={"user:name": user}
        )
    await service.create_session(app_name=APP.upper(), user_id="u", session_id="s")

    for user in users:
        stored = await service.get_session(app_name=APP, user_id=user, session_id="s")
        assert stored.state["user:name"] == user
    assert await AdkUserState.objects.filter(app_name=APP).acount() == 3
    assert await Session.objects.acount() == 4


@async_test
async def test_session_state_follows_adks_prefix_rules(service):
    s11 = await service.create_session(
        app_name=APP, user_id="user1", state={"key11": "value11"}, session_id="session11"
    )
    await service.create_session(
        app_name=APP, user_id="user1", state={"key12": "value12"}, session_id="session12"
    )
    await service.create_session(app_name=APP, user_id="user2", session_id="session2")
    assert s11.state.get("key11") == "value11"

    event = text_event(
        "text",
        actions=EventActions(
            state_delta={
                "app:key": "value",
                "user:key1": "value1",
                "temp:key": "temp",
                "key11": "value11_new",
            }
        ),
    )
    await service.append_event(session=s11, event=event)
    assert s11.state.get("app:key") == "value"
    assert s11.state.get("key11") == "value11_new"
    assert s11.state.get("user:key1") == "value1"
    # temp state reaches the running session only, never storage
    stored_event = (
        await service.get_session(app_name=APP, user_id="user1", session_id="session11")
    ).events[0]
    assert "temp:key" not in stored_event.actions.state_delta

    s12 = await service.get_session(app_name=APP, user_id="user1", session_id="session12")
    assert s12.state.get("key12") == "value12"
    assert s12.state.get("user:key1") == "value1"
    assert not s12.state.get("temp:key")

    s2 = await service.get_session(app_name=APP, user_id="user2", session_id="session2")
    assert s2.state.get("app:key") == "value"
    assert not s2.state.get("user:key1")

    s11 = await service.get_session(app_name=APP, user_id="user1", session_id="session11")
    assert s11.state.get("key11") == "value11_new"
    assert s11.state.get("user:key1") == "value1"
    assert not s11.state.get("temp:key")

    assert (await AdkAppState.objects.aget(app_name=APP)).state == {"key": "value"}
    assert (await AdkUserState.objects.aget(app_name=APP, user_id="user1")).state == {
        "key1": "value1"
    }
    assert await service.get_user_state(app_name=APP, user_id="user1") == {"key1": "value1"}
    assert await service.get_user_state(app_name=APP, user_id="user2") == {}


def _deep(levels: int) -> object:
    value: object = 1
    for _ in range(levels):
        value = {"k": value}
    return value


#: State no database stores as JSON, each refused by some database with its own error before:
#: NUL and NaN on PostgreSQL, NaN on SQLite, NaN and 32-deep nesting on MariaDB.
BAD_STATE = {
    "nul": {"k": "a\x00b"},
    "nul-in-user-state": {"user:k": "\x00"},
    "nul-key": {"app:\x00": 1},
    "nan": {"k": float("nan")},
    "infinity-in-app-state": {"app:k": float("inf")},
    "too-deep": {"k": _deep(MAX_JSON_DEPTH)},
}


@pytest.mark.parametrize("state", BAD_STATE.values(), ids=BAD_STATE.keys())
def test_state_no_database_stores_is_refused_with_the_apps_error_and_nothing_written(
    service, state
):
    with pytest.raises(InvalidInput) as raised:
        run(service.create_session, app_name=APP, user_id="u", state=state, session_id="s")
    assert raised.value.field == "state"
    assert not AdkSession.objects.exists()
    assert not AdkAppState.objects.exists() and not AdkUserState.objects.exists()
    assert not Session.objects.exists()

    session = run(service.create_session, app_name=APP, user_id="u", session_id="t")
    event = text_event("x", actions=EventActions(state_delta=state))
    with pytest.raises(InvalidInput):
        run(service.append_event, session=session, event=event)
    assert AdkSession.objects.get().state == {}
    assert not Message.objects.exists()
    assert all(row.state == {} for row in [*AdkAppState.objects.all(), *AdkUserState.objects.all()])


def test_state_as_deep_as_every_database_stores_is_kept(service):
    state = {"k": _deep(MAX_JSON_DEPTH - 1)}  # the state object is the first level
    session = run(service.create_session, app_name=APP, user_id="u", state=state)
    assert run(service.get_session, app_name=APP, user_id="u", session_id=session.id).state == state


@async_test
async def test_a_new_session_gets_the_persisted_app_and_user_state(service):
    s1 = await service.create_session(
        app_name=APP, user_id="user", state={"key1": "value1"}, session_id="session1"
    )
    event = text_event(
        "text",
        actions=EventActions(
            state_delta={"app:key": "value", "user:key1": "value1", "temp:key": "temp"}
        ),
    )
    await service.append_event(session=s1, event=event)
    assert s1.state.get("app:key") == "value" and s1.state.get("key1") == "value1"
    # ADK applies temp: keys to the running session object only; storage never sees them.
    stored = await service.get_session(app_name=APP, user_id="user", session_id="session1")
    assert "temp:key" not in stored.state

    s2 = await service.create_session(app_name=APP, user_id="user", state={}, session_id="s2")
    assert s2.state.get("app:key") == "value"
    assert s2.state.get("user:key1") == "value1"
    assert not s2.state.get("key1")
    assert not s2.state.get("temp:key")


@async_test
async def test_initial_state_with_prefixes_goes_to_app_and_user_state(service):
    session = await service.create_session(
        app_name=APP,
        user_id="u",
        state={"app:theme": "dark", "user:name": "Ada", "temp:x": 1, "plain": [1, {"a": None}]},
    )
    assert session.state == {"app:theme": "dark", "user:name": "Ada", "plain": [1, {"a": None}]}
    assert (await AdkSession.objects.aget(adk_id=session.id)).state == {"plain": [1, {"a": None}]}


@async_test
async def test_append_event_with_bytes(service):
    session = await service.create_session(app_name=APP, user_id="user")
    content = types.Content(
        role="user", parts=[types.Part.from_bytes(data=b"test_image_data", mime_type="image/png")]
    )
    grounding = types.GroundingMetadata(
        search_entry_point=types.SearchEntryPoint(sdk_blob=b"test_sdk_blob")
    )
    event = Event(
        invocation_id="invocation", author="user", content=content, grounding_metadata=grounding
    )
    await service.append_event(session=session, event=event)
    assert session.events[0].content == content
    got = await service.get_session(app_name=APP, user_id="user", session_id=session.id)
    assert len(got.events) == 1
    assert got.events[0].content == content
    assert got.events[0].grounding_metadata == grounding


@async_test
async def test_append_a_complete_event_round_trips(service):
    session = await service.create_session(app_name=APP, user_id="user")
    event = Event(
        invocation_id="invocation",
        author="user",
        content=types.Content(role="user", parts=[types.Part(text="test_text")]),
        turn_complete=True,
        partial=False,
        actions=EventActions(artifact_delta={"file": 0}, transfer_to_agent="agent", escalate=True),
        long_running_tool_ids={"tool1"},
        error_code="error_code",
        error_message="error_message",
        interrupted=True,
    )
    await service.append_event(session=session, event=event)
    assert await service.get_session(app_name=APP, user_id="user", session_id=session.id) == session


@async_test
async def test_get_session_with_config(service):
    session = await service.create_session(app_name=APP, user_id="user")
    for i in range(1, 6):
        await service.append_event(session, Event(author="user", timestamp=i))

    def get(**config):
        return service.get_session(
            app_name=APP,
            user_id="user",
            session_id=session.id,
            config=GetSessionConfig(**config) if config else None,
        )

    assert len((await get()).events) == 5
    recent = (await get(num_recent_events=3)).events
    assert [e.timestamp for e in recent] == [3, 4, 5]
    after = (await get(after_timestamp=4.0)).events
    assert [e.timestamp for e in after] == [4, 5]
    assert (await get(after_timestamp=50)).events == []
    assert [e.timestamp for e in (await get(after_timestamp=4.0, num_recent_events=3)).events] == [
        4,
        5,
    ]
    assert (await get(num_recent_events=0)).events == []
    assert len((await get(num_recent_events=10)).events) == 5


# -- beyond ADK's cases ---------------------------------------------------------------------------


@async_test
async def test_partial_events_are_not_stored(service):
    session = await service.create_session(app_name=APP, user_id="u")
    returned = await service.append_event(session, text_event("stream chunk", partial=True))
    assert returned.partial and session.events == []
    assert await Message.objects.acount() == 0


@async_test
async def test_append_to_a_missing_session_raises(service):
    session = await service.create_session(app_name=APP, user_id="u")
    await service.delete_session(app_name=APP, user_id="u", session_id=session.id)
    with pytest.raises(SessionNotFoundError):
        await service.append_event(session, text_event("hello"))
    await service.delete_session(app_name=APP, user_id="u", session_id=session.id)  # no error


@async_test
async def test_a_stale_copy_cannot_append_over_a_newer_write(service):
    await service.create_session(app_name=APP, user_id="u", session_id="s")
    first = await service.get_session(app_name=APP, user_id="u", session_id="s")
    second = await service.get_session(app_name=APP, user_id="u", session_id="s")
    await service.append_event(first, text_event("one"))
    await service.append_event(first, text_event("two"))  # its own writes keep it current
    with pytest.raises(Exception) as info:
        await service.append_event(second, text_event("three"))
    assert type(info.value).__name__ == "StaleSessionError"
    fresh = await service.get_session(app_name=APP, user_id="u", session_id="s")
    assert [e.content.parts[0].text for e in fresh.events] == ["one", "two"]


@async_test
async def test_each_event_is_one_message_with_the_event_json_verbatim(service):
    session = await service.create_session(app_name=APP, user_id="u")
    call = Event(
        author="guide",
        content=types.Content(
            role="model",
            parts=[types.Part(function_call=types.FunctionCall(name="weather", args={"c": "P"}))],
        ),
    )
    for event in (text_event("hi"), text_event("hello!", author="guide"), call):
        await service.append_event(session, event)
    rows = [m async for m in Message.objects.filter(session_id=session.id).order_by("seq")]
    assert [m.role for m in rows] == ["user", "assistant", "tool"]
    for row, event in zip(rows, session.events, strict=True):
        block = {
            "type": EVENT_BLOCK_TYPE,
            "event": event.model_dump(mode="json", exclude_none=True),
        }
        assert block in row.content
        assert row.created_at.timestamp() == pytest.approx(event.timestamp, abs=1e-6)
    stored = await Session.objects.aget(pk=session.id)
    assert (stored.message_count, stored.last_message) == (3, "hello!")


@async_test
async def test_messages_added_through_the_api_read_as_events(service):
    session = await service.create_session(app_name=APP, user_id="u")
    await service.append_event(session, text_event("question"))
    await services.aappend_messages(
        scope=f"app={APP}/user=u",
        session_id=session.id,
        messages=[{"role": "assistant", "content": "an operator's answer"}],
    )
    events = (await service.get_session(app_name=APP, user_id="u", session_id=session.id)).events
    assert [(e.author, e.content.parts[0].text) for e in events] == [
        ("user", "question"),
        (APP, "an operator's answer"),
    ]


@async_test
async def test_list_without_user_lists_every_users_sessions_with_their_state(service):
    await service.create_session(app_name=APP, user_id="a", session_id="x", state={"k": 1})
    await service.create_session(app_name=APP, user_id="b", session_id="y", state={"user:n": 2})
    await service.create_session(app_name="other", user_id="a", session_id="z")
    listed = (await service.list_sessions(app_name=APP)).sessions
    assert [(s.user_id, s.id, s.state) for s in listed] == [
        ("a", "x", {"k": 1}),
        ("b", "y", {"user:n": 2}),
    ]
    assert (await service.list_sessions(app_name=APP, user_id="c")).sessions == []


# -- the scope mapping and tenant safety ----------------------------------------------------------


def upper_org(app_name, user_id):
    return f"org={app_name}/user={user_id}"


@async_test
async def test_the_scope_mapping_is_a_setting(service, settings):
    settings.CORTEX_SESSIONS_ADK_SCOPE = "tests.runtimes.test_adk.upper_org"
    session = await service.create_session(app_name="acme", user_id="7")
    assert (await Session.objects.aget(pk=session.id)).scope == "org=acme/user=7"
    assert service.scope_for("acme", "7").canonical == "org=acme/user=7"


def test_a_bad_scope_mapping_setting_is_a_system_check_error(settings):
    settings.CORTEX_SESSIONS_ADK_SCOPE = "tests.runtimes.test_adk.no_such_function"
    with pytest.raises(Exception, match=r"cortex_adk\.E001"):
        call_command("check")


@async_test
async def test_names_that_make_no_scope_are_refused(service):
    with pytest.raises(InvalidScope):
        await service.create_session(app_name="bad\nname", user_id="u")
    with pytest.raises(InvalidScope):
        await service.get_session(app_name=APP, user_id="", session_id="s")


@async_test
async def test_another_user_can_neither_read_nor_write_the_session(service):
    owner = await service.create_session(app_name=APP, user_id="alice", session_id="s")
    await service.append_event(owner, text_event("secret"))
    assert await service.get_session(app_name=APP, user_id="bob", session_id="s") is None
    forged = owner.model_copy(update={"user_id": "bob"})
    with pytest.raises(SessionNotFoundError):
        await service.append_event(forged, text_event("intrusion"))
    await service.delete_session(app_name=APP, user_id="bob", session_id="s")
    assert [s.id for s in (await service.list_sessions(app_name=APP, user_id="bob")).sessions] == []
    kept = await service.get_session(app_name=APP, user_id="alice", session_id="s")
    assert [e.content.parts[0].text for e in kept.events] == ["secret"]


@async_test
async def test_a_service_bound_to_a_tenant_refuses_every_other_scope(settings):
    settings.CORTEX_SESSIONS_ADK_SCOPE = "tests.runtimes.test_adk.upper_org"
    acme, other = CortexSessionService(within="org=acme"), CortexSessionService()
    theirs = await other.create_session(app_name="globex", user_id="1", session_id="s")
    await other.append_event(theirs, text_event("globex data"))
    mine = await acme.create_session(app_name="acme", user_id="1", session_id="s")
    assert mine.id == "s"
    for call in (
        acme.get_session(app_name="globex", user_id="1", session_id="s"),
        acme.create_session(app_name="globex", user_id="2"),
        acme.delete_session(app_name="globex", user_id="1", session_id="s"),
        acme.list_sessions(app_name="globex", user_id="1"),
        acme.append_event(theirs, text_event("intrusion")),
    ):
        with pytest.raises(ScopeForbidden):
            await call
    assert (await acme.list_sessions(app_name="globex")).sessions == []
    assert [
        e.content.parts[0].text
        for e in (await other.get_session(app_name="globex", user_id="1", session_id="s")).events
    ] == ["globex data"]


@async_test
async def test_a_session_moved_out_of_the_mapped_scope_is_invisible(service, settings):
    session = await service.create_session(app_name=APP, user_id="u", session_id="s")
    settings.CORTEX_SESSIONS_ADK_SCOPE = "tests.runtimes.test_adk.upper_org"
    assert await service.get_session(app_name=APP, user_id="u", session_id="s") is None
    with pytest.raises(SessionNotFoundError):
        await service.append_event(session, text_event("x"))


# -- concurrency ----------------------------------------------------------------------------------


@pytest.mark.concurrent_db
@pytest.mark.django_db(transaction=True)
def test_concurrent_state_deltas_of_different_sessions_all_survive():
    service = CortexSessionService()
    sessions = [
        run(service.create_session, app_name=APP, user_id="u", session_id=f"s{i}") for i in range(6)
    ]
    barrier = threading.Barrier(len(sessions))

    def write(index):
        try:
            barrier.wait(timeout=30)
            event = text_event(
                f"e{index}",
                actions=EventActions(state_delta={f"app:k{index}": index, f"user:k{index}": index}),
            )
            run(service.append_event, sessions[index], event)
        finally:
            connections.close_all()

    with ThreadPoolExecutor(max_workers=len(sessions)) as pool:
        list(pool.map(write, range(len(sessions))))
    assert AdkAppState.objects.get(app_name=APP).state == {f"k{i}": i for i in range(6)}
    assert AdkUserState.objects.get(app_name=APP, user_id="u").state == {
        f"k{i}": i for i in range(6)
    }


# -- ADK's Runner ---------------------------------------------------------------------------------


def test_runner_keeps_history_across_two_turns_and_the_session_shows_in_api_and_admin(
    django_user_model, admin_client, settings
):
    user = django_user_model.objects.create_user(username="ada", password="pw")
    settings.CORTEX_SESSIONS_ADK_SCOPE = "tests.runtimes.test_adk.user_scope"
    outcome = run(main, app_name="city-guide", user_id=str(user.pk))
    assert outcome["second_turn_request"] == [
        "Which city is the Golden Gate Bridge in?",
        "San Francisco.",
        "And which state?",
    ]
    assert outcome["message_count"] == 4 and outcome["last_message"] == "California."

    api = APIClient()
    api.force_authenticate(user)
    listed = api.get("/api/cortex/sessions/").json()["results"]
    assert [(s["id"], s["agent_id"], s["last_message"]) for s in listed] == [
        (outcome["session_id"], "city-guide", "California.")
    ]
    messages = api.get(f"/api/cortex/sessions/{outcome['session_id']}/messages/").json()
    assert [m["role"] for m in messages["results"]] == ["user", "assistant", "user", "assistant"]
    page = admin_client.get("/admin/cortex_sessions/session/")
    assert "California." in page.content.decode()


def user_scope(app_name, user_id):
    """Maps ADK users onto the REST API's default scope (``user=<pk>``) for the test above."""
    return f"user={user_id}"


# -- values ADK's database store accepts (JSON-safe state), ids, re-deliveries ---------------------


class Preferences(pydantic.BaseModel):
    theme: str = "dark"
    since: dt.date = dt.date(2024, 1, 2)


RICH_STATE = {
    "when": dt.datetime(2024, 5, 6, 7, 8, 9, tzinfo=dt.UTC),
    "app:prefs": Preferences(),
    "user:blob": b"\x01\x02",
    "day": dt.date(2024, 1, 1),
}


@async_test
async def test_rich_state_values_are_stored_as_adks_database_store_stores_them(service):
    """Datetimes, pydantic models and bytes in initial state and in a state delta are stored in
    ADK's own JSON-safe form (``_session_util.extract_json_safe_state_delta``), not refused."""
    session = await service.create_session(app_name=APP, user_id="u", state=RICH_STATE)
    delta = {"seen": dt.datetime(2025, 1, 1, tzinfo=dt.UTC), "user:prefs": Preferences()}
    await service.append_event(session, text_event("x", actions=EventActions(state_delta=delta)))

    got = await service.get_session(app_name=APP, user_id="u", session_id=session.id)
    expected = _session_util.extract_json_safe_state_delta({**RICH_STATE, **delta})
    assert got.state == {
        **expected["session"],
        **{f"app:{k}": v for k, v in expected["app"].items()},
        **{f"user:{k}": v for k, v in expected["user"].items()},
    }
    assert got.state["day"] == "2024-01-01"
    assert got.state["app:prefs"] == {"theme": "dark", "since": "2024-01-02"}
    assert got.events[0].actions.state_delta["seen"] == "2025-01-01T00:00:00Z"


@async_test
async def test_a_tool_writing_a_datetime_into_state_runs_under_adks_runner(service):
    from google.adk.agents import LlmAgent
    from google.adk.models.base_llm import BaseLlm
    from google.adk.models.llm_response import LlmResponse
    from google.adk.runners import Runner
    from google.adk.tools.tool_context import ToolContext

    class ScriptedModel(BaseLlm):
        model: str = "scripted"
        responses: list[types.Content] = pydantic.Field(default_factory=list)

        async def generate_content_async(self, llm_request, stream=False):
            yield LlmResponse(content=self.responses.pop(0))

    def stamp(tool_context: ToolContext) -> str:
        """Record when the user was last seen."""
        tool_context.state["last_seen"] = dt.datetime(2024, 1, 1, tzinfo=dt.UTC)
        return "ok"

    model = ScriptedModel(
        responses=[
            types.Content(
                role="model",
                parts=[types.Part(function_call=types.FunctionCall(name="stamp", args={}))],
            ),
            types.Content(role="model", parts=[types.Part(text="done")]),
        ]
    )
    runner = Runner(
        agent=LlmAgent(name="a", model=model, tools=[stamp]), app_name=APP, session_service=service
    )
    session = await service.create_session(app_name=APP, user_id="u")
    message = types.Content(role="user", parts=[types.Part(text="go")])
    async for _ in runner.run_async(user_id="u", session_id=session.id, new_message=message):
        pass
    got = await service.get_session(app_name=APP, user_id="u", session_id=session.id)
    assert got.state["last_seen"] == "2024-01-01T00:00:00Z"


@async_test
async def test_state_with_a_nul_is_a_coded_error_and_writes_nothing(service):
    session = await service.create_session(app_name=APP, user_id="u")
    with pytest.raises(NulCharacter):
        await service.append_event(
            session, text_event("x", actions=EventActions(state_delta={"user:b": b"\x00"}))
        )
    with pytest.raises(NulCharacter):
        await service.create_session(app_name=APP, user_id="u", state={"k": "a\x00b"})
    assert await Message.objects.acount() == 0
    assert await Session.objects.acount() == 1
    assert not await AdkUserState.objects.aexists()


@async_test
async def test_an_event_with_text_postgresql_cannot_store_round_trips(service):
    session = await service.create_session(app_name=APP, user_id="u")
    event = text_event("NUL \x00 inside")
    await service.append_event(session, event)
    got = await service.get_session(app_name=APP, user_id="u", session_id=session.id)
    assert got.events == [event]
    assert (await Session.objects.aget(pk=session.id)).last_message == "NUL  inside"


@async_test
async def test_an_event_nested_deeper_than_the_json_rule_round_trips(service):
    deep: dict = {"leaf": 1}
    for _ in range(40):
        deep = {"d": deep}
    session = await service.create_session(app_name=APP, user_id="u")
    event = Event(
        author="guide",
        invocation_id="i",
        content=types.Content(
            role="user",
            parts=[types.Part(function_response=types.FunctionResponse(name="f", response=deep))],
        ),
    )
    await service.append_event(session, event)
    got = await service.get_session(app_name=APP, user_id="u", session_id=session.id)
    assert got.events == [event]


@async_test
async def test_num_recent_events_counts_events_not_other_messages(service):
    session = await service.create_session(app_name=APP, user_id="u", session_id="s")
    for text in ("a", "b", "c"):
        await service.append_event(session, text_event(text))
    await services.aappend_messages(
        scope=f"app={APP}/user=u",
        session_id=(await AdkSession.objects.aget(adk_id="s")).session_id,
        messages=[{"role": "system", "content": "host note"}, {"role": "tool", "content": "t"}],
    )
    for n, expected in ((1, ["c"]), (2, ["b", "c"]), (3, ["a", "b", "c"]), (9, ["a", "b", "c"])):
        got = await service.get_session(
            app_name=APP, user_id="u", session_id="s", config=GetSessionConfig(num_recent_events=n)
        )
        assert [e.content.parts[0].text for e in got.events] == expected


@async_test
async def test_a_padded_session_id_is_stripped_in_every_call(service):
    """As ADK's in-memory store: create, get and delete all strip the id."""
    created = await service.create_session(app_name=APP, user_id="u", session_id=" s2 ")
    assert created.id == "s2"
    got = await service.get_session(app_name=APP, user_id="u", session_id=" s2 ")
    assert got is not None and got.id == "s2"
    await service.delete_session(app_name=APP, user_id="u", session_id="\ts2 ")
    assert await service.get_session(app_name=APP, user_id="u", session_id="s2") is None


@async_test
async def test_an_equal_event_appended_again_is_stored_once(service):
    """A retried append of an equal event is a no-op, as in ADK's in-memory store; a different
    event that merely shares its id is stored."""
    session = await service.create_session(app_name=APP, user_id="u")
    event = text_event("once", actions=EventActions(state_delta={"n": 1}))
    await service.append_event(session, event)
    again = await service.append_event(session, session.events[-1])
    assert again == event
    assert await Message.objects.acount() == 1 and len(session.events) == 1
    twin = text_event("other text", id=event.id)
    await service.append_event(session, twin)
    got = await service.get_session(app_name=APP, user_id="u", session_id=session.id)
    assert [e.content.parts[0].text for e in got.events] == ["once", "other text"]


def test_an_id_over_255_characters_is_refused_before_any_query(service, django_assert_num_queries):
    long_id = "x" * 256
    with django_assert_num_queries(0):
        with pytest.raises(AdkIdTooLong) as info:
            run(service.create_session, app_name=APP, user_id="u", session_id=long_id)
        assert isinstance(info.value, ValueError)
        assert (info.value.code, info.value.field) == ("too_long", "session_id")
        with pytest.raises(AdkIdTooLong):
            run(service.list_sessions, app_name=APP, user_id="u" * 256)
        assert run(service.get_session, app_name=APP, user_id="u", session_id=long_id) is None
        run(service.delete_session, app_name=APP, user_id="u", session_id=long_id)
    created = run(service.create_session, app_name=APP, user_id="u", session_id="x" * 255)
    assert created.id == "x" * 255


@pytest.mark.parametrize("bad_id", ["x\x00y", "\x00", "x\ud800"])
def test_an_id_no_session_can_have_names_none_on_every_database(
    service, bad_id, django_assert_num_queries
):
    """An id ``create_session`` refuses (NUL, a lone surrogate) is a missing session for get,
    delete and append, without a query: PostgreSQL would refuse the NUL parameter."""
    with pytest.raises(InvalidInput):  # NulCharacter or InvalidText
        run(service.create_session, app_name=APP, user_id="u", session_id=bad_id)
    with django_assert_num_queries(0):
        assert run(service.get_session, app_name=APP, user_id="u", session_id=bad_id) is None
        run(service.delete_session, app_name=APP, user_id="u", session_id=bad_id)
    real = run(service.create_session, app_name=APP, user_id="u")
    forged = real.model_copy(update={"id": bad_id})
    with pytest.raises(SessionNotFoundError):
        run(service.append_event, forged, text_event("hi"))


# -- app: and user: state under tenancy -----------------------------------------------------------

#: The tenant a request serves, as a multi-tenant host keeps it (e.g. set by a middleware).
current_tenant: contextvars.ContextVar[str] = contextvars.ContextVar("current_tenant")


def tenant_scope(app_name, user_id):
    """Same app and user ids in every tenant: the tenant comes from the request's context."""
    return f"org={current_tenant.get()}/app={app_name}/user={user_id}"


@async_test
async def test_app_and_user_state_never_cross_tenants(settings):
    settings.CORTEX_SESSIONS_ADK_SCOPE = "tests.runtimes.test_adk.tenant_scope"
    acme, globex = (
        CortexSessionService(within="org=acme"),
        CortexSessionService(within="org=globex"),
    )

    current_tenant.set("acme")
    mine = await acme.create_session(app_name=APP, user_id="1", state={"app:plan": "gold"})
    secret = {"app:acme_secret": "ACME-ONLY", "user:acme_note": "acme's user 1"}
    await acme.append_event(mine, text_event("x", actions=EventActions(state_delta=secret)))

    current_tenant.set("globex")
    theirs = await globex.create_session(app_name=APP, user_id="1")
    assert theirs.state == {}
    assert await globex.get_user_state(app_name=APP, user_id="1") == {}
    await globex.append_event(
        theirs, text_event("y", actions=EventActions(state_delta={"app:plan": "free"}))
    )
    assert (await globex.get_session(app_name=APP, user_id="1", session_id=theirs.id)).state == {
        "app:plan": "free"
    }
    assert [s.state for s in (await globex.list_sessions(app_name=APP)).sessions] == [
        {"app:plan": "free"}
    ]

    current_tenant.set("acme")
    assert (await acme.get_session(app_name=APP, user_id="1", session_id=mine.id)).state == {
        "app:plan": "gold",
        "app:acme_secret": "ACME-ONLY",
        "user:acme_note": "acme's user 1",
    }
    assert await acme.get_user_state(app_name=APP, user_id="1") == {"acme_note": "acme's user 1"}


@async_test
async def test_services_bound_to_the_same_tenant_share_app_state(settings):
    settings.CORTEX_SESSIONS_ADK_SCOPE = "tests.runtimes.test_adk.tenant_scope"
    current_tenant.set("acme")
    first, second = CortexSessionService(within="org=acme"), CortexSessionService(within="org=acme")
    await first.create_session(app_name=APP, user_id="1", state={"app:k": "v"})
    other_user = await second.create_session(app_name=APP, user_id="2")
    assert other_user.state == {"app:k": "v"}
    assert await CortexSessionService().list_sessions(app_name=APP, user_id="2") == (
        ListSessionsResponse(sessions=[other_user.model_copy(update={"state": {}})])
    )


def tenant_services(bound):
    """acme's and globex's service: bound to their tenant, or both unbound (then only the
    mapping tells the tenants apart)."""
    if bound:
        return CortexSessionService(within="org=acme"), CortexSessionService(within="org=globex")
    return CortexSessionService(), CortexSessionService()


@pytest.mark.parametrize("bound", [True, False], ids=["bound", "unbound"])
@async_test
async def test_two_tenants_use_the_same_session_id_and_each_sees_only_its_own(settings, bound):
    """Ids are unique per mapped scope, app and user, not across tenants (migration 0003)."""
    settings.CORTEX_SESSIONS_ADK_SCOPE = "tests.runtimes.test_adk.tenant_scope"
    acme, globex = tenant_services(bound)

    current_tenant.set("acme")
    mine = await acme.create_session(app_name=APP, user_id="1", session_id="s", state={"k": "a"})
    await acme.append_event(mine, text_event("acme's secret"))
    current_tenant.set("globex")
    theirs = await globex.create_session(
        app_name=APP, user_id="1", session_id="s", state={"k": "g"}
    )
    assert (theirs.id, theirs.state, theirs.events) == ("s", {"k": "g"}, [])
    await globex.append_event(theirs, text_event("globex's own"))
    with pytest.raises(AlreadyExistsError):  # still unique within the tenant
        await globex.create_session(app_name=APP, user_id="1", session_id="s")

    def texts(session):
        return [e.content.parts[0].text for e in session.events]

    got = await globex.get_session(app_name=APP, user_id="1", session_id="s")
    assert (got.state, texts(got)) == ({"k": "g"}, ["globex's own"])
    listed = (await globex.list_sessions(app_name=APP, user_id="1")).sessions
    assert [(s.id, s.state) for s in listed] == [("s", {"k": "g"})]
    if bound:  # an unbound service's list without a user spans every scope
        assert [s.state for s in (await globex.list_sessions(app_name=APP)).sessions] == [
            {"k": "g"}
        ]
    await globex.delete_session(app_name=APP, user_id="1", session_id="s")
    assert await globex.get_session(app_name=APP, user_id="1", session_id="s") is None

    current_tenant.set("acme")
    got = await acme.get_session(app_name=APP, user_id="1", session_id="s")
    assert (got.state, texts(got)) == ({"k": "a"}, ["acme's secret"])
    await acme.append_event(got, text_event("more"))
    assert [s.id for s in (await acme.list_sessions(app_name=APP, user_id="1")).sessions] == ["s"]
    assert await AdkSession.objects.acount() == 1


async def _outcomes(service, session_id, forged):
    """What every call answers for ``session_id`` (and ``forged``, a session object naming it),
    with the id itself blanked out of messages."""

    async def outcome(awaitable):
        try:
            result = await awaitable
        except Exception as exc:  # comparing what was raised is the point
            return ("raised", type(exc), str(exc).replace(session_id, "<id>"))
        return ("returned", result)

    return [
        await outcome(service.get_session(app_name=APP, user_id="1", session_id=session_id)),
        await outcome(service.append_event(forged, text_event("intrusion"))),
        await outcome(service.delete_session(app_name=APP, user_id="1", session_id=session_id)),
        await outcome(service.list_sessions(app_name=APP, user_id="1")),
        await outcome(service.get_user_state(app_name=APP, user_id="1")),
    ]


@pytest.mark.parametrize("bound", [True, False], ids=["bound", "unbound"])
@async_test
async def test_another_tenants_session_id_is_exactly_a_missing_one(settings, bound):
    """No call tells a tenant whether another uses an id: same results, same errors."""
    settings.CORTEX_SESSIONS_ADK_SCOPE = "tests.runtimes.test_adk.tenant_scope"
    acme, globex = tenant_services(bound)
    current_tenant.set("acme")
    used = await acme.create_session(
        app_name=APP, user_id="1", session_id="used", state={"user:n": 1}
    )
    await acme.append_event(used, text_event("acme's secret"))

    current_tenant.set("globex")
    missing = used.model_copy(update={"id": "missing", "events": []})
    foreign = used.model_copy(update={"events": []})
    assert await _outcomes(globex, "used", foreign) == await _outcomes(globex, "missing", missing)
    assert (await _outcomes(globex, "used", foreign))[1][1] is SessionNotFoundError
    created = await globex.create_session(app_name=APP, user_id="1", session_id="used")
    assert (created.id, created.state, created.events) == ("used", {}, [])
    assert await Message.objects.filter(session__scope="org=globex/app=my_app/user=1").acount() == 0

    current_tenant.set("acme")
    kept = await acme.get_session(app_name=APP, user_id="1", session_id="used")
    assert [e.content.parts[0].text for e in kept.events] == ["acme's secret"]


def _wide(count, seed):
    """``count`` random four-byte UTF-8 characters (CJK Extension B): nothing a database can
    compress, so an index entry holding them is as long as it gets."""
    rng = random.Random(seed)
    return "".join(chr(rng.randrange(0x20000, 0x2A6E0)) for _ in range(count))


#: A canonical scope of exactly MAX_CANONICAL_BYTES bytes: ``a=`` 254 four-byte characters,
#: ``/b=`` one three-byte one.
LONGEST_SCOPE = f"a={_wide(254, 1)}/b=\u4e00"


def longest_scope(app_name, user_id):
    return LONGEST_SCOPE


def test_the_longest_names_at_the_longest_scope_are_stored_on_every_database(settings):
    """Every key the integration indexes holds maximal values without a database error: on
    PostgreSQL the natural keys of an ADK session and a user state were over the B-tree entry
    limit (2,704 bytes) and made a 500; they are indexed by their hash now (migration 0003)."""
    assert len(LONGEST_SCOPE.encode()) == MAX_CANONICAL_BYTES
    settings.CORTEX_SESSIONS_ADK_SCOPE = "tests.runtimes.test_adk.longest_scope"
    service = CortexSessionService(within=LONGEST_SCOPE)  # the longest app state tenant, too
    app, user, session_id = _wide(255, 2), _wide(255, 3), _wide(255, 4)
    state = {"app:a": 1, "user:u": 2, "k": 3}

    created = run(
        service.create_session, app_name=app, user_id=user, session_id=session_id, state=state
    )
    assert created.state == state
    with pytest.raises(AlreadyExistsError):
        run(service.create_session, app_name=app, user_id=user, session_id=session_id)
    delta = {"app:a": 10, "user:u": 20, "k": 30}
    run(service.append_event, created, text_event("x", actions=EventActions(state_delta=delta)))
    got = run(service.get_session, app_name=app, user_id=user, session_id=session_id)
    assert (got.id, got.state, len(got.events)) == (session_id, delta, 1)
    assert [s.id for s in run(service.list_sessions, app_name=app, user_id=user).sessions] == [
        session_id
    ]
    assert run(service.get_user_state, app_name=app, user_id=user) == {"u": 20}
    run(service.delete_session, app_name=app, user_id=user, session_id=session_id)
    assert run(service.get_session, app_name=app, user_id=user, session_id=session_id) is None


def test_rows_saved_without_a_key_get_theirs(service):
    """``save()`` fills in the key the service looks rows up by (for rows a host writes)."""
    cortex = services.create_session(scope=f"app={APP}/user=u", agent_id=APP)
    AdkSession.objects.create(session=cortex, app_name=APP, user_id="u", adk_id="s")
    AdkUserState.objects.create(
        scope=f"app={APP}/user=u", app_name=APP, user_id="u", state={"n": 1}
    )
    assert run(service.get_session, app_name=APP, user_id="u", session_id="s").state == {
        "user:n": 1
    }


# -- the integration's app must be installed ------------------------------------------------------


def test_importing_the_service_without_its_app_installed_names_the_app_to_add(tmp_path):
    script = textwrap.dedent(
        """
        import django
        from django.conf import settings
        from django.core.exceptions import ImproperlyConfigured

        settings.configure(
            INSTALLED_APPS=["django.contrib.contenttypes", "django.contrib.auth", "cortex_sessions"],
            DATABASES={"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"}},
        )
        django.setup()
        try:
            from cortex_sessions.integrations.adk import CortexSessionService
        except ImproperlyConfigured as exc:
            print("ImproperlyConfigured:", exc)
        else:
            print("imported")
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        cwd=Path(__file__).resolve().parents[2],
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("ImproperlyConfigured:")
    assert "'cortex_sessions.integrations.adk' to INSTALLED_APPS" in result.stdout


@pytest.mark.parametrize("within", [None, f"app={APP}"], ids=["unbound", "bound"])
@pytest.mark.parametrize("user_id", ["1", None], ids=["one-user", "every-user"])
@async_test
async def test_an_archived_session_is_in_no_list(within, user_id):
    """An archived session is left out of every listing, one user's or every user's, by a bound
    or an unbound service, as the app's own lists leave it out (docs/design.md §11.2)."""
    service = CortexSessionService(within=within)
    kept = await service.create_session(app_name=APP, user_id="1", session_id="kept")
    archived = await service.create_session(app_name=APP, user_id="1", session_id="archived")
    row = await AdkSession.objects.select_related("session").aget(adk_id=archived.id)
    await services.aarchive_session(scope=row.session.scope, session_id=row.session_id)

    listed = (await service.list_sessions(app_name=APP, user_id=user_id)).sessions

    assert [s.id for s in listed] == [kept.id]


@pytest.mark.parametrize("timestamp", [1e20, float("nan"), -1e12, 253402300800.0])
@async_test
async def test_an_event_time_no_database_can_store_is_refused(service, timestamp):
    """An event ``timestamp`` that is no time between the years 1 and 9999 is a coded
    ``InvalidInput``, never a raw ``OverflowError``/``ValueError``; nothing is written."""
    session = await service.create_session(app_name=APP, user_id="1")

    with pytest.raises(InvalidInput) as raised:
        await service.append_event(session, text_event("hi", timestamp=timestamp))

    assert raised.value.field == "timestamp"
    assert await Message.objects.acount() == 0
