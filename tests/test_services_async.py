"""Async twins of the services: same arguments, results, errors and transactions (§13.1)."""

from __future__ import annotations

import asyncio
import inspect

import pytest
from asgiref.sync import async_to_sync, sync_to_async
from django.db import connections, transaction

from cortex_sessions import services, signals
from cortex_sessions.exceptions import (
    InvalidAgentId,
    InvalidFilter,
    InvalidRole,
    MessageNotFound,
    NoScope,
    SessionNotFound,
)
from cortex_sessions.models import Message, Session
from tests.asyncio_support import async_test

pytestmark = pytest.mark.django_db

ALICE = "org=acme/user=alice"
BOB = "org=acme/user=bob"
AGENT = "agent-1"

#: Public service functions without I/O, so without a twin: a lazy queryset and validators.
NO_IO = {"session_queryset", "check_agent_id", "check_message_count", "check_messages"}


def _sync_services() -> dict[str, object]:
    found = {}
    for name in services.__all__:
        obj = getattr(services, name)
        if inspect.isfunction(obj) and not inspect.iscoroutinefunction(obj) and name not in NO_IO:
            found[name] = obj
    return found


def test_every_public_service_has_an_a_prefixed_async_twin_with_its_signature():
    sync = _sync_services()
    assert "append_messages" in sync  # the discovery itself works
    missing = sorted(name for name in sync if f"a{name}" not in services.__all__)
    assert missing == [], f"services without an async twin in services.__all__: {missing}"
    for name, service in sync.items():
        twin = getattr(services, f"a{name}")
        assert inspect.iscoroutinefunction(twin), name
        assert twin.__name__ == f"a{name}"
        assert inspect.signature(twin) == inspect.signature(service), name
        assert f"services.{name}" in twin.__doc__ and "§13.1" in twin.__doc__


def test_every_async_function_exported_is_the_twin_of_a_service():
    sync = _sync_services()
    for name in services.__all__:
        if inspect.iscoroutinefunction(getattr(services, name)):
            assert name.startswith("a") and name[1:] in sync, name


@async_test
async def test_aresolve_then_aappend_then_alist_round_trip():
    session, created = await services.aresolve_session(scope=ALICE, agent_id=AGENT)
    again, created_again = await services.aresolve_session(scope=ALICE, agent_id=AGENT)
    assert (created, created_again, again.pk) == (True, False, session.pk)

    result = await services.aappend_messages(
        scope=ALICE,
        session_id=session.pk,
        messages=[{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}],
    )
    assert [m.seq for m in result.messages] == [1, 2]
    assert (result.session.message_count, result.session.last_message) == (2, "hello")

    listed = await services.alist_messages(scope=ALICE, session_id=session.pk, limit=1)
    assert [m.seq for m in listed] == [2]
    assert await services.acount_sessions(scope=ALICE) == 1
    assert [s.pk for s in await services.alist_sessions(scope="org=acme")] == [session.pk]
    assert (await services.aget_session(scope=ALICE, session_id=session.pk)).message_count == 2


@async_test
async def test_session_writes_through_twins():
    created = await services.acreate_session(scope=ALICE, agent_id=AGENT, title="One")
    updated = await services.aupdate_session(scope=ALICE, session_id=created.pk, title="Two")
    assert updated.title == "Two"
    promoted = await services.amake_default(scope=ALICE, session_id=created.pk)
    assert promoted.is_default
    await services.aappend_messages(
        scope=ALICE, session_id=created.pk, messages=[{"role": "user", "content": "a"}] * 3
    )
    after_delete = await services.adelete_message(scope=ALICE, session_id=created.pk, seq=3)
    assert after_delete.message_count == 2
    assert await services.aclear_messages(scope=ALICE, session_id=created.pk) == 2
    assert await services.arecount_sessions(scope=ALICE) == []
    await services.adelete_session(scope=ALICE, session_id=created.pk)
    assert not await Session.objects.filter(pk=created.pk).aexists()


@async_test
async def test_twins_raise_the_services_errors_unchanged():
    session = await services.acreate_session(scope=ALICE, agent_id=AGENT)
    with pytest.raises(NoScope):
        await services.alist_sessions(scope="")
    with pytest.raises(SessionNotFound):
        await services.aget_session(scope=BOB, session_id=session.pk)
    with pytest.raises(SessionNotFound):
        await services.aappend_messages(
            scope=BOB, session_id=session.pk, messages=[{"role": "user", "content": "x"}]
        )
    with pytest.raises(SessionNotFound):
        await services.aresolve_session(scope=ALICE, agent_id="agent-2", session_id=session.pk)
    with pytest.raises(MessageNotFound):
        await services.adelete_message(scope=ALICE, session_id=session.pk, seq=1)
    with pytest.raises(InvalidFilter) as info:
        await services.alist_messages(scope=ALICE, session_id=session.pk, limit=0)
    assert info.value.code == "invalid_filter"


@pytest.mark.parametrize("twin", ["alist_sessions", "acount_sessions", "alist_sessions_page"])
@async_test
async def test_twins_take_session_filters_and_a_bad_agent_id_is_refused(twin):
    """``alist_sessions(agent_id="a\tb")`` answered [] (docs/design.md §12.4); the twins take
    the services' ``filters`` and a bad agent id is refused when the filters are built."""
    session = await services.acreate_session(scope=ALICE, agent_id=AGENT)
    await services.acreate_session(scope=ALICE, agent_id="other")
    listed = await getattr(services, twin)(
        scope=ALICE, filters=services.SessionFilters(agent_id=AGENT)
    )
    if twin == "acount_sessions":
        assert listed == 1
    else:
        rows = listed.results if twin == "alist_sessions_page" else listed
        assert [s.pk for s in rows] == [session.pk]
    with pytest.raises(InvalidAgentId) as info:
        await getattr(services, twin)(scope=ALICE, filters=services.SessionFilters(agent_id="a\tb"))
    assert info.value.code == "invalid_agent_id"


@async_test
async def test_aappend_with_one_bad_message_writes_nothing():
    session = await services.acreate_session(scope=ALICE, agent_id=AGENT)
    with pytest.raises(InvalidRole):
        await services.aappend_messages(
            scope=ALICE,
            session_id=session.pk,
            messages=[{"role": "user", "content": "ok"}, {"role": "robot", "content": "no"}],
        )
    assert not await Message.objects.filter(session_id=session.pk).aexists()
    assert (await Session.objects.aget(pk=session.pk)).message_count == 0


def test_twin_runs_in_the_callers_uncommitted_transaction():
    # thread_sensitive=True: inside async_to_sync (an ASGI request, Django's async tests) the
    # service runs on the caller's thread and connection, so it sees rows the caller's open
    # transaction wrote; another connection would not (on PostgreSQL).
    with transaction.atomic():
        session = services.create_session(scope=ALICE, agent_id=AGENT)
        found = async_to_sync(services.aget_session)(scope=ALICE, session_id=session.pk)
        assert found.pk == session.pk
        async_to_sync(services.aappend_messages)(
            scope=ALICE, session_id=session.pk, messages=[{"role": "user", "content": "x"}]
        )
        assert Session.objects.get(pk=session.pk).message_count == 1


@pytest.mark.django_db(transaction=True)
def test_twins_work_under_a_plain_asyncio_run_and_send_signals_after_commit():
    # What a host script does: asyncio.run(...) with no outer async_to_sync.
    sent = []
    receiver = lambda **kwargs: sent.append(kwargs["session"].pk)  # noqa: E731
    signals.messages_appended.connect(receiver, weak=False)

    async def main():
        try:
            session, _ = await services.aresolve_session(scope=ALICE, agent_id=AGENT)
            await services.aappend_messages(
                scope=ALICE, session_id=session.pk, messages=[{"role": "user", "content": "hi"}]
            )
            return session
        finally:
            # The twins ran on asgiref's shared thread, which opened a connection of its own:
            # closed there, or the test database could not be dropped at the end of the run.
            await sync_to_async(connections.close_all)()

    try:
        session = asyncio.run(main())
    finally:
        signals.messages_appended.disconnect(receiver)
    assert sent == [session.pk]
    assert Session.objects.get(pk=session.pk).message_count == 1


def test_async_test_helper_runs_the_coroutine():
    ran = []

    @async_test
    async def probe():
        ran.append(True)

    probe()
    assert ran == [True]
