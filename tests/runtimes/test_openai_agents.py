"""Conformance of ``CortexSession`` with the OpenAI Agents SDK's ``Session`` protocol (§13.2).

Covers what the SDK's own tests ask of its bundled stores (SQLiteSession, SQLAlchemySession):
direct operations, exact round trips of every item kind, ``limit`` and ``session_settings``,
pop on empty, concurrent pops, isolation, unicode and SQL-looking text, empty adds, failed adds
writing nothing, and ``Runner.run`` across turns (with ``session_settings`` overrides) — plus
what only a scoped store has: tenant safety, the default session, and visibility in the
admin and the REST API.
"""

from __future__ import annotations

import asyncio
import copy
import threading
import uuid
from concurrent.futures import ThreadPoolExecutor

import pytest

pytest.importorskip("agents")

from agents import Agent, RunConfig, Runner
from agents.memory import Session as SDKSession
from agents.memory import SessionSettings
from asgiref.sync import async_to_sync, sync_to_async
from django.db import connections
from django.test import override_settings
from django.test.utils import CaptureQueriesContext
from rest_framework.test import APIClient

from cortex_sessions import services
from cortex_sessions.content import MAX_JSON_DEPTH
from cortex_sessions.exceptions import (
    InvalidContent,
    InvalidInput,
    InvalidScope,
    MessageTooLarge,
    SessionArchived,
    SessionNotFound,
)
from cortex_sessions.integrations.openai_agents import (
    ITEM_BLOCK_TYPE,
    CortexSession,
)
from cortex_sessions.models import Message, Session
from example_project.runtimes.openai_agents_example import ScriptedModel, main
from tests.asyncio_support import async_test

pytestmark = pytest.mark.django_db

ALICE = "org=acme/user=alice"
BOB = "org=acme/user=bob"
AGENT = "assistant-1"

USER_TEXT = {"role": "user", "content": "Hello"}
USER_PARTS = {
    "role": "user",
    "type": "message",
    "content": [
        {"type": "input_text", "text": "Look at this"},
        {"type": "input_image", "image_url": "https://example.com/a.png", "detail": "auto"},
    ],
}
ASSISTANT_OUTPUT = {
    "id": "msg_1",
    "type": "message",
    "role": "assistant",
    "status": "completed",
    "content": [{"type": "output_text", "text": "Hi there!", "annotations": [], "logprobs": []}],
}
SYSTEM = {"role": "system", "content": "Be brief."}
DEVELOPER = {"role": "developer", "content": "Use metric units."}
FUNCTION_CALL = {
    "type": "function_call",
    "call_id": "call_1",
    "name": "get_weather",
    "arguments": '{"city": "Paris"}',
    "id": "fc_1",
    "status": "completed",
}
FUNCTION_OUTPUT = {"type": "function_call_output", "call_id": "call_1", "output": "22°C, sunny"}
REASONING = {
    "id": "rs_1",
    "type": "reasoning",
    "summary": [{"type": "summary_text", "text": "Thinking about the weather"}],
}
ODD = {
    "role": "user",
    "content": '\'; DROP TABLE cortex_sessions_message; -- "quotes" \\ back 🎉 café 中文 \u200d',
    "extra": {"nested": [1, 2.5, None, True, {"deep": []}], "big": 2**53 + 1},
}
ALL_ITEMS = [
    USER_TEXT,
    USER_PARTS,
    ASSISTANT_OUTPUT,
    SYSTEM,
    DEVELOPER,
    FUNCTION_CALL,
    FUNCTION_OUTPUT,
    REASONING,
    ODD,
]


def session_at(scope=ALICE, agent_id=AGENT, **kwargs) -> CortexSession:
    return CortexSession(scope=scope, agent_id=agent_id, **kwargs)


def run(coroutine_function, *args, **kwargs):
    return async_to_sync(coroutine_function)(*args, **kwargs)


def texts(items):
    return [item.get("content") for item in items]


def numbered(count, start=1):
    return [
        {"role": "user" if n % 2 else "assistant", "content": str(n)}
        for n in range(start, start + count)
    ]


READS = (lambda s: s.get_items(), lambda s: s.get_items(limit=1))
WRITES = (lambda s: s.add_items([SYSTEM]), lambda s: s.pop_item(), lambda s: s.clear_session())


async def assert_each_raises(error, session, operations=(*READS, *WRITES, lambda s: s.resolve())):
    for operation in operations:
        with pytest.raises(error):
            await operation(session)


# -- protocol and direct operations ---------------------------------------------------------------


def test_cortex_session_implements_the_sdk_session_protocol():
    session = session_at(session_id=services.create_session(scope=ALICE, agent_id=AGENT).pk)
    assert isinstance(session, SDKSession)
    assert isinstance(session.session_settings, SessionSettings)


@async_test
async def test_direct_operations_add_get_pop_clear():
    session = session_at()
    await session.add_items([USER_TEXT, {"role": "assistant", "content": "Hi there!"}])
    assert texts(await session.get_items()) == ["Hello", "Hi there!"]

    popped = await session.pop_item()
    assert popped == {"role": "assistant", "content": "Hi there!"}
    assert await session.get_items() == [USER_TEXT]

    await session.clear_session()
    assert await session.get_items() == []
    assert await session.pop_item() is None


@async_test
async def test_every_item_kind_round_trips_exactly_in_order():
    session = session_at()
    original = copy.deepcopy(ALL_ITEMS)
    await session.add_items(ALL_ITEMS[:4])
    await session.add_items(ALL_ITEMS[4:])
    assert await session.get_items() == original
    assert original == ALL_ITEMS  # the caller's items are not mutated
    # and a fresh object on the same session reads the same
    assert await session_at(session_id=session.session_id).get_items() == original


@async_test
async def test_items_postgresql_cannot_store_as_json_still_round_trip():
    session = session_at()
    items = [
        {"role": "user", "content": "nul \x00 inside"},
        {"type": "function_call_output", "call_id": "c", "output": "lone \ud800 surrogate"},
    ]
    await session.add_items(items)
    assert await session.get_items() == items


@async_test
async def test_items_nested_deeper_than_every_database_stores_still_round_trip():
    """An item sits two levels down in a message's content (block list, block): one that would
    push the content past MAX_JSON_DEPTH is kept as JSON text, like one with a NUL, so MariaDB
    (whose JSON check refuses 32 levels) stores it as every other database does."""
    deep: object = "leaf"
    for _ in range(MAX_JSON_DEPTH - 2):  # with the item itself: 30 levels, 32 in the content
        deep = {"k": deep}
    items = [{"type": "function_call_output", "call_id": "c", "output": "x", "extra": deep}]
    session = session_at()
    await session.add_items(items)
    assert await session.get_items() == items


@async_test
async def test_each_item_is_one_message_with_its_role_and_the_item_kept_verbatim():
    session = session_at()
    await session.add_items(ALL_ITEMS)
    rows = [m async for m in Message.objects.filter(session_id=session.session_id).order_by("seq")]
    assert [m.role for m in rows] == [
        "user",
        "user",
        "assistant",
        "system",
        "system",
        "tool",
        "tool",
        "tool",
        "user",
    ]
    assert [m.seq for m in rows] == list(range(1, 10))
    for row, item in zip(rows, ALL_ITEMS, strict=True):
        assert {"type": ITEM_BLOCK_TYPE, "item": item} in row.content
    # readable text for people: message text and tool output, none for a bare function call
    assert rows[2].content[0] == {"type": "text", "text": "Hi there!"}
    assert rows[6].content[0] == {"type": "text", "text": "22°C, sunny"}
    assert rows[5].content == [{"type": ITEM_BLOCK_TYPE, "item": FUNCTION_CALL}]


@async_test
async def test_last_message_and_counters_are_readable_and_exact():
    session = session_at()
    await session.add_items([USER_TEXT, ASSISTANT_OUTPUT, FUNCTION_CALL])
    stored = await Session.objects.aget(pk=session.session_id)
    assert (stored.message_count, stored.last_message) == (3, "Hi there!")
    await session.pop_item()
    await session.pop_item()
    stored = await Session.objects.aget(pk=session.session_id)
    assert (stored.message_count, stored.last_message) == (1, "Hello")


# -- limit and session settings -------------------------------------------------------------------


@async_test
async def test_get_items_with_limit_returns_the_newest_in_chronological_order():
    session = session_at()
    await session.add_items(numbered(4))
    assert texts(await session.get_items(limit=2)) == ["3", "4"]
    assert texts(await session.get_items(limit=1)) == ["4"]
    assert len(await session.get_items()) == 4
    assert texts(await session.get_items(limit=10)) == ["1", "2", "3", "4"]
    assert await session.get_items(limit=0) == []


@async_test
async def test_get_items_reads_long_histories_past_one_page():
    session = session_at()
    await session.add_items(numbered(2100))
    items = await session.get_items()
    assert texts(items) == [str(n) for n in range(1, 2101)]
    assert texts(await session.get_items(limit=1500))[0] == "601"


@async_test
async def test_session_settings_limit_is_the_default_and_an_explicit_limit_wins():
    session = session_at(session_settings=SessionSettings(limit=3))
    await session.add_items(numbered(5))
    assert texts(await session.get_items()) == ["3", "4", "5"]
    assert texts(await session.get_items(limit=2)) == ["4", "5"]
    as_dict = session_at(session_id=session.session_id, session_settings={"limit": 1})
    assert texts(await as_dict.get_items()) == ["5"]
    assert session_at().session_settings.limit is None


# -- pop ------------------------------------------------------------------------------------------


@async_test
async def test_pop_returns_items_newest_first_until_empty():
    session = session_at()
    await session.add_items(numbered(3))
    assert [(await session.pop_item())["content"] for _ in range(3)] == ["3", "2", "1"]
    assert await session.pop_item() is None
    stored = await Session.objects.aget(pk=session.session_id)
    assert (stored.message_count, stored.last_message) == (0, "")


@async_test
async def test_pop_from_a_new_default_session_is_none():
    assert await session_at().pop_item() is None


@async_test
async def test_seq_is_never_reused_after_pop_or_clear():
    session = session_at()
    await session.add_items(numbered(2))
    await session.pop_item()
    await session.add_items(numbered(1, start=9))
    await session.clear_session()
    await session.add_items(numbered(1, start=10))
    seqs = [m.seq async for m in Message.objects.filter(session_id=session.session_id)]
    assert seqs == [4]


@async_test
async def test_pop_is_a_lifecycle_service(monkeypatch):
    # On PostgreSQL pop_message's one statement alone, which leaves a compaction summary to the
    # adapter's locked path; elsewhere that locked path, deleting the newest message with
    # services.delete_message under the session's lock (docs/design.md §16.5)
    from cortex_sessions.integrations import openai_compaction

    session = session_at()
    await session.add_items(numbered(2))
    calls = []
    postgresql = connections["default"].vendor == "postgresql"
    module, name = (
        (openai_compaction, "pop_in_one_statement") if postgresql else (services, "delete_message")
    )
    real = getattr(module, name)

    def spy(**kwargs):
        calls.append(kwargs)
        return real(**kwargs)

    monkeypatch.setattr(module, name, spy)
    assert (await session.pop_item())["content"] == "2"
    expected = {"scope": session.scope, "session_id": uuid.UUID(session.session_id)}
    assert calls == [{**expected, "using": "default"} if postgresql else {**expected, "seq": 2}]


@async_test
async def test_pop_drops_newest_messages_that_are_no_item_and_returns_the_next_item():
    session = session_at()
    await session.add_items([USER_TEXT])
    await services.aappend_messages(
        scope=ALICE,
        session_id=session.session_id,
        messages=[{"role": "tool", "content": "no item"}, {"role": "tool", "content": "none"}],
    )
    assert await session.pop_item() == USER_TEXT
    stored = await Session.objects.aget(pk=session.session_id)
    assert (stored.message_count, stored.last_seq) == (0, 3)
    await services.aappend_messages(
        scope=ALICE, session_id=session.session_id, messages=[{"role": "tool", "content": "x"}]
    )
    assert await session.pop_item() is None  # only rows that are no item: dropped, then empty
    assert await Message.objects.acount() == 0


@pytest.mark.parametrize("operation", ["add", "pop", "clear"])
@async_test
async def test_a_cancelled_write_settles_before_the_cancellation_propagates(operation, monkeypatch):
    # The SDK's own stores wait for a write's transaction before re-raising a cancellation
    # (test_mutation_cancellation_waits_for_transaction_exit in its suite).
    session = session_at()
    await session.add_items([USER_TEXT])
    from cortex_sessions.integrations import openai_compaction

    name = {"add": "append_messages", "pop": "delete_message", "clear": "clear_messages"}[operation]
    module = services
    if operation == "pop" and connections["default"].vendor == "postgresql":
        module, name = openai_compaction, "pop_in_one_statement"  # the pop's one statement
    service = getattr(module, name)
    started, release, finished = threading.Event(), threading.Event(), threading.Event()

    def slow(**kwargs):
        started.set()
        release.wait(timeout=30)
        try:
            return service(**kwargs)
        finally:
            finished.set()

    monkeypatch.setattr(module, name, slow)
    call = {
        "add": lambda: session.add_items([SYSTEM]),
        "pop": session.pop_item,
        "clear": session.clear_session,
    }[operation]
    task = asyncio.ensure_future(call())
    for _ in range(3000):
        if started.is_set():
            break
        await asyncio.sleep(0.01)
    assert started.is_set()
    try:
        task.cancel()
        await asyncio.sleep(0.01)
        task.cancel()
        await asyncio.sleep(0.01)
        assert not task.done()
    finally:
        release.set()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert finished.is_set()
    monkeypatch.undo()
    expected = {"add": [USER_TEXT, SYSTEM], "pop": [], "clear": []}[operation]
    assert await session.get_items() == expected


@pytest.mark.concurrent_db
@pytest.mark.django_db(transaction=True)
def test_concurrent_pops_never_return_one_item_twice():
    session = session_at()
    run(session.add_items, numbered(40))
    threads = 8
    barrier = threading.Barrier(threads)

    def popper(_index):
        mine = []
        try:
            barrier.wait(timeout=30)
            worker = session_at(session_id=session.session_id)
            while (item := run(worker.pop_item)) is not None:
                mine.append(item["content"])
        finally:
            connections.close_all()
        return mine

    with ThreadPoolExecutor(max_workers=threads) as pool:
        results = list(pool.map(popper, range(threads)))
    popped = [content for result in results for content in result]
    assert sorted(popped, key=int) == [str(n) for n in range(1, 41)]
    assert len(set(popped)) == 40
    stored = Session.objects.get(pk=session.session_id)
    assert (stored.message_count, stored.last_message) == (0, "")


# -- writes are atomic and validated --------------------------------------------------------------


@async_test
async def test_add_empty_list_writes_nothing_and_creates_nothing_extra():
    session = session_at()
    await session.add_items([])
    assert await session.get_items() == []
    assert await Message.objects.acount() == 0


@async_test
async def test_a_batch_with_a_bad_item_writes_nothing():
    session = session_at()
    await session.add_items([USER_TEXT])
    with pytest.raises(InvalidInput):
        await session.add_items([{"role": "user", "content": "fine"}, "not an item"])
    with pytest.raises(InvalidInput):
        await session.add_items([{"role": "user", "content": "fine"}, {"n": float("nan")}])
    with (
        override_settings(CORTEX_SESSIONS={"MAX_MESSAGE_BYTES": 2000}),
        pytest.raises(MessageTooLarge),
    ):
        await session.add_items([USER_TEXT, {"role": "user", "content": "x" * 5000}])
    assert await session.get_items() == [USER_TEXT]


class _SameText(str):
    """A ``str`` subclass key unequal to every other key, whatever its text."""

    __hash__ = object.__hash__

    def __eq__(self, other: object) -> bool:
        return self is other


@pytest.mark.parametrize("key", [1, True, None, ("a",), b"a", _SameText("1")])
@pytest.mark.parametrize("kept_as_json_text", [False, True], ids=["item", "item_json"])
@async_test
async def test_an_item_with_a_key_that_is_not_a_string_is_refused_and_writes_nothing(
    key, kept_as_json_text
):
    """JSON object keys are strings: an item with another key (or two keys with one text) is
    not JSON, whether it would be kept as it is or as JSON text (a NUL in it), and is refused
    like any bad content, never stored with the key made a string (``{1: "a", "1": "b"}``
    would become two equal keys)."""
    session = session_at()
    await session.add_items([USER_TEXT])
    extra = {key: "a", "1": "b"}
    if kept_as_json_text:
        extra["nul"] = "\x00"
    bad = {"type": "function_call_output", "call_id": "c", "output": "x", "extra": [extra]}
    with pytest.raises(InvalidContent, match=r"object key that is not a string|same text"):
        await session.add_items([{"role": "user", "content": "fine"}, bad])
    assert await session.get_items() == [USER_TEXT]


@async_test
async def test_an_item_kept_as_json_text_is_still_json():
    session = session_at()
    for bad in ({"output": "\x00", "n": float("nan")}, {"output": "\x00", "s": {1, 2}}):
        with pytest.raises(InvalidContent, match="not valid JSON"):
            await session.add_items([bad])
    assert await session.get_items() == []


# -- the default session and explicit ids ---------------------------------------------------------


@async_test
async def test_no_session_id_means_the_agents_default_session_at_exactly_the_scope():
    first = session_at()
    await first.add_items([USER_TEXT])
    second = session_at()
    assert await second.get_items() == [USER_TEXT]
    assert second.session_id == first.session_id
    stored = await Session.objects.aget(pk=first.session_id)
    assert (stored.is_default, stored.scope, stored.agent_id) == (True, ALICE, AGENT)
    other_agent = session_at(agent_id="assistant-2")
    assert await other_agent.get_items() == []
    assert (await other_agent.resolve()).pk != stored.pk


@async_test
async def test_session_id_is_the_cortex_id_as_a_string():
    created = await services.acreate_session(scope=ALICE, agent_id=AGENT)
    assert session_at(session_id=created.pk).session_id == str(created.pk)
    lazy = session_at()
    assert lazy.session_id == ""  # no session chosen yet, and no query to choose one
    resolved = await lazy.resolve()
    assert lazy.session_id == str(resolved.pk)


def test_session_id_of_the_default_is_empty_until_an_operation_chooses_it(
    django_assert_num_queries,
):
    session = session_at()
    with django_assert_num_queries(0):
        assert session.session_id == ""
    async_to_sync(session.get_items)()
    assert session.session_id == str(Session.objects.get(is_default=True).pk)


async def default_of(scope=ALICE, agent_id=AGENT):
    return await Session.objects.aget(scope=scope, agent_id=agent_id, is_default=True)


async def stored_texts(session_id):
    return [
        content_text
        async for content_text in Message.objects.filter(session_id=session_id)
        .order_by("seq")
        .values_list("content__0__text", flat=True)
    ]


@async_test
async def test_a_default_following_session_follows_make_default_between_two_writes():
    session = session_at()
    await session.add_items([{"role": "user", "content": "first"}])
    old = session.session_id
    newer = await services.acreate_session(scope=ALICE, agent_id=AGENT)
    await services.amake_default(scope=ALICE, session_id=newer.pk)
    await session.add_items([{"role": "user", "content": "second"}])
    assert session.session_id == str(newer.pk) != old
    assert await stored_texts(old) == ["first"]
    assert await stored_texts(newer.pk) == ["second"]
    assert texts(await session.get_items()) == ["second"]
    # and back again: every operation asks which session is the default now
    await services.amake_default(scope=ALICE, session_id=old)
    assert texts(await session.get_items()) == ["first"]
    assert (await session.pop_item())["content"] == "first"
    assert session.session_id == old


@async_test
async def test_a_deleted_default_session_is_replaced_by_a_fresh_default():
    session = session_at()
    await session.add_items([USER_TEXT])
    old = session.session_id
    await services.adelete_session(scope=ALICE, session_id=old)
    await session.add_items([SYSTEM])
    fresh = await default_of()
    assert session.session_id == str(fresh.pk) != old
    assert await session.get_items() == [SYSTEM]
    assert await Session.objects.acount() == 1


@async_test
async def test_an_archived_default_is_left_alone_and_a_fresh_default_takes_the_writes():
    session = session_at()
    await session.add_items([USER_TEXT])
    old = session.session_id
    await services.aarchive_session(scope=ALICE, session_id=old)  # demotes it (§11.2)
    await session.add_items([SYSTEM])
    fresh = await default_of()
    assert session.session_id == str(fresh.pk) != old
    assert await session.get_items() == [SYSTEM]
    assert await session_at(session_id=old).get_items() == [USER_TEXT]  # still readable
    assert await session.pop_item() == SYSTEM
    await session.clear_session()
    assert await stored_texts(old) == ["Hello"]


@pytest.mark.parametrize("change", ["delete", "archive"])
@async_test
async def test_a_default_lost_between_the_resolve_and_the_write_is_resolved_again(
    change, monkeypatch
):
    session = session_at()
    await session.add_items([USER_TEXT])
    old = session.session_id
    append = services.append_messages
    lost = []

    def append_after_losing_the_default(**kwargs):
        if not lost:  # another writer gets in between, once
            lost.append(kwargs["session_id"])
            if change == "delete":
                services.delete_session(scope=ALICE, session_id=kwargs["session_id"])
            else:
                services.archive_session(scope=ALICE, session_id=kwargs["session_id"])
        return append(**kwargs)

    monkeypatch.setattr(services, "append_messages", append_after_losing_the_default)
    await session.add_items([SYSTEM])
    assert lost == [uuid.UUID(old)]
    assert session.session_id == str((await default_of()).pk) != old
    assert await session.get_items() == [SYSTEM]


@async_test
async def test_the_default_at_another_scope_or_of_another_agent_is_never_followed():
    session = session_at()
    await session.add_items([USER_TEXT])
    for scope, agent_id in [(BOB, AGENT), (ALICE + "/project=x", AGENT), (ALICE, "other-agent")]:
        elsewhere = await services.acreate_session(scope=scope, agent_id=agent_id)
        await services.amake_default(scope=scope, session_id=elsewhere.pk)
        await services.aappend_messages(
            scope=scope, session_id=elsewhere.pk, messages=[{"role": "user", "content": "x"}]
        )
    assert await session.get_items() == [USER_TEXT]
    await session.add_items([SYSTEM])
    assert session.session_id == str((await default_of()).pk)
    assert await session.get_items() == [USER_TEXT, SYSTEM]


def test_resolving_the_default_is_one_statement():
    session = session_at()
    run(session.resolve)  # created on first use
    with CaptureQueriesContext(connections["default"]) as queries:
        run(session.resolve)
    assert len(queries) == 1, [q["sql"] for q in queries]


@async_test
async def test_session_id_and_follows_default_describe_the_object():
    pinned = session_at(session_id=(await services.acreate_session(scope=ALICE, agent_id=AGENT)).pk)
    follower = session_at()
    assert (pinned.follows_default, follower.follows_default) == (False, True)
    assert "<default>" in repr(follower) and pinned.session_id in repr(pinned)


@async_test
async def test_a_deleted_pinned_session_is_not_found_for_every_operation():
    created = await services.acreate_session(scope=ALICE, agent_id=AGENT)
    session = session_at(session_id=created.pk)
    await session.add_items([USER_TEXT])
    await services.adelete_session(scope=ALICE, session_id=created.pk)
    await assert_each_raises(SessionNotFound, session)
    assert session.session_id == str(created.pk)
    assert await Session.objects.acount() == 0  # no default was made in its place


@async_test
async def test_an_archived_pinned_session_reads_but_refuses_writes():
    created = await services.acreate_session(scope=ALICE, agent_id=AGENT)
    session = session_at(session_id=created.pk)
    await session.add_items([USER_TEXT])
    await services.aarchive_session(scope=ALICE, session_id=created.pk)
    await assert_each_raises(SessionArchived, session, WRITES)
    assert await session.get_items() == [USER_TEXT]


# -- tenant safety --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("scope", "agent_id"),
    [(BOB, AGENT), ("org=other", AGENT), ("org=acme/user=alice2", AGENT), (ALICE, "other-agent")],
)
@async_test
async def test_another_scope_or_agent_can_neither_read_nor_write_the_session(scope, agent_id):
    owner = session_at()
    await owner.add_items([USER_TEXT, ASSISTANT_OUTPUT])
    intruder = session_at(scope=scope, agent_id=agent_id, session_id=owner.session_id)
    await assert_each_raises(SessionNotFound, intruder)
    assert await owner.get_items() == [USER_TEXT, ASSISTANT_OUTPUT]


@async_test
async def test_a_parent_scope_may_use_a_session_beneath_it():
    owner = session_at()
    await owner.add_items([USER_TEXT])
    parent = session_at(scope="org=acme", session_id=owner.session_id)
    assert await parent.get_items() == [USER_TEXT]


@async_test
async def test_defaults_of_two_scopes_are_isolated():
    alice, bob = session_at(scope=ALICE), session_at(scope=BOB)
    await alice.add_items([{"role": "user", "content": "I like cats."}])
    await bob.add_items([{"role": "user", "content": "I like dogs."}])
    assert texts(await alice.get_items()) == ["I like cats."]
    assert texts(await bob.get_items()) == ["I like dogs."]
    assert alice.session_id != bob.session_id


def test_bad_scope_or_session_id_is_refused():
    with pytest.raises(InvalidScope):
        session_at(scope="Not A Scope")
    with pytest.raises(SessionNotFound):
        run(session_at(session_id="not-a-uuid").get_items)


# -- history written by others --------------------------------------------------------------------


@async_test
async def test_messages_added_through_the_services_read_as_items():
    session = session_at()
    await session.add_items([USER_TEXT])
    await services.aappend_messages(
        scope=ALICE,
        session_id=session.session_id,
        messages=[
            {"role": "assistant", "content": "typed by an operator"},
            {"role": "tool", "content": "no item: skipped"},
        ],
    )
    assert await session.get_items() == [
        USER_TEXT,
        {"role": "assistant", "content": "typed by an operator"},
    ]
    assert texts(await session.get_items(limit=1)) == ["typed by an operator"]
    assert (await session.pop_item()) == {"role": "assistant", "content": "typed by an operator"}


# -- the SDK's Runner -----------------------------------------------------------------------------


@async_test
async def test_runner_keeps_history_across_two_turns():
    model = ScriptedModel(["San Francisco", "California"])
    agent = Agent(name="test", model=model)
    session = session_at()
    first = await Runner.run(agent, "What city is the Golden Gate Bridge in?", session=session)
    second = await Runner.run(agent, "What state is it in?", session=session)
    assert (first.final_output, second.final_output) == ("San Francisco", "California")
    second_input = model.inputs[-1]
    assert len(second_input) == 3
    assert "Golden Gate Bridge" in str(second_input[0]) and "San Francisco" in str(second_input[1])
    items = await session.get_items()
    assert [item.get("role") for item in items] == ["user", "assistant", "user", "assistant"]


@async_test
async def test_streamed_runs_keep_history_across_two_turns():
    testing = pytest.importorskip("agents.testing")  # the SDK's streaming test model (>= 0.24)
    model = testing.ScriptedModel(
        [[testing.assistant_message("San Francisco")], [testing.assistant_message("California")]]
    )
    agent = Agent(name="test", model=model)
    session = session_at()
    for question in ("What city is the Golden Gate Bridge in?", "What state is it in?"):
        result = Runner.run_streamed(agent, question, session=session)
        async for _event in result.stream_events():
            pass
    assert result.final_output == "California"
    assert "San Francisco" in str(model.last_call.input)
    assert texts(await session.get_items())[::2] == [
        "What city is the Golden Gate Bridge in?",
        "What state is it in?",
    ]


@pytest.mark.django_db(transaction=True)
def test_run_sync_keeps_history_across_two_turns():
    # Runner.run_sync drives its own event loop in this thread; the adapter's database work
    # then runs on asgiref's shared sync thread, on its own connection.
    model = ScriptedModel(["San Francisco", "California"])
    agent = Agent(name="test", model=model)
    session = session_at()
    try:
        Runner.run_sync(agent, "What city is the Golden Gate Bridge in?", session=session)
        second = Runner.run_sync(agent, "What state is it in?", session=session)
    finally:
        # close the shared sync thread's connection (asyncio.run: no async_to_sync around it)
        asyncio.run(sync_to_async(connections.close_all, thread_sensitive=True)())
    assert second.final_output == "California"
    assert "San Francisco" in str(model.inputs[-1])
    stored = Session.objects.get(is_default=True)
    assert (stored.message_count, stored.last_message) == (4, "California")


@async_test
async def test_runner_session_settings_override_limits_the_history_sent():
    model = ScriptedModel(["one", "two", "three"])
    agent = Agent(name="test", model=model)
    session = session_at()
    await Runner.run(agent, "Message 1", session=session)
    await Runner.run(agent, "Message 2", session=session)
    await Runner.run(
        agent,
        "Message 3",
        session=session,
        run_config=RunConfig(session_settings=SessionSettings(limit=0)),
    )
    assert [item.get("content") for item in model.inputs[-1]] == ["Message 3"]
    assert len(await session.get_items()) == 6


@async_test
async def test_two_sessions_keep_separate_histories_through_the_runner():
    model = ScriptedModel(["cats noted", "dogs noted", "You said cats"])
    agent = Agent(name="test", model=model)
    cats, dogs = session_at(scope=ALICE), session_at(scope=BOB)
    await Runner.run(agent, "I like cats.", session=cats)
    await Runner.run(agent, "I like dogs.", session=dogs)
    await Runner.run(agent, "What animal did I say I like?", session=cats)
    sent = str(model.inputs[-1])
    assert "cats" in sent and "dogs" not in sent


def test_runner_session_is_visible_through_the_api_and_the_admin(django_user_model, admin_client):
    user = django_user_model.objects.create_user(username="alice", password="pw")
    scope = f"user={user.pk}"
    outcome = run(main, scope=scope, agent_id="city-guide")
    assert outcome["answers"] == ["San Francisco.", "California."]
    assert outcome["message_count"] == 4 and outcome["last_message"] == "California."

    api = APIClient()
    api.force_authenticate(user)
    listed = api.get("/api/cortex/sessions/").json()["results"]
    assert [(s["id"], s["agent_id"], s["last_message"]) for s in listed] == [
        (outcome["session_id"], "city-guide", "California.")
    ]
    messages = api.get(f"/api/cortex/sessions/{outcome['session_id']}/messages/").json()
    assert [m["role"] for m in messages["results"]] == ["user", "assistant", "user", "assistant"]
    assert messages["results"][0]["content"][0] == {
        "type": "text",
        "text": "Which city is the Golden Gate Bridge in?",
    }

    page = admin_client.get("/admin/cortex_sessions/session/")
    assert page.status_code == 200
    assert "California." in page.content.decode()
    detail = admin_client.get(f"/admin/cortex_sessions/session/{outcome['session_id']}/change/")
    assert "Which city is the Golden Gate Bridge in?" in detail.content.decode()


@pytest.mark.parametrize("scope", [BOB, "org=acme/user=alice-x", "org=acme/user=alic", "org=other"])
def test_the_one_query_read_checks_the_scope_itself(scope):
    # Defence in depth: the read path a resolved CortexSession uses (raw SQL on PostgreSQL,
    # the ORM elsewhere) filters by scope too, siblings sharing a prefix included.
    from cortex_sessions.integrations.openai_agents import _read_items
    from cortex_sessions.scope import Scope

    owner = session_at()
    run(owner.add_items, [USER_TEXT])
    assert _read_items(uuid.UUID(owner.session_id), Scope.parse(ALICE), 50) == [USER_TEXT]
    assert _read_items(uuid.UUID(owner.session_id), Scope.parse("org=acme"), 50) == [USER_TEXT]
    for limit in (50, None):
        with pytest.raises(SessionNotFound):
            _read_items(uuid.UUID(owner.session_id), Scope.parse(scope), limit)
