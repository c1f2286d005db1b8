"""A compaction the host makes through the API or ``services.compact_session`` (a *text*
summary) as ``CortexSession`` sees it (docs/design.md §16.5): the summary reads as one item,
a message of its role holding its text, followed by the items after what it stands for; a pop
takes the items after it first, then the summary's text, and never a message of the
transcript."""

from __future__ import annotations

import pytest

pytest.importorskip("agents")

from agents import Agent, RunConfig, Runner
from asgiref.sync import sync_to_async

from cortex_sessions import services
from cortex_sessions.integrations.openai_agents import CortexSession, message_to_item
from cortex_sessions.integrations.openai_compaction import COMPACTION_BLOCK_TYPE
from cortex_sessions.models import Message
from example_project.runtimes.openai_agents_example import ScriptedModel
from tests.asyncio_support import async_test

pytestmark = pytest.mark.django_db

SCOPE = "org=acme/user=alice"
SUMMARY = "The user asked about billing; we agreed to refund the March invoice."


def user(text):
    return {"role": "user", "content": text}


async def _store_with(items):
    store = CortexSession(scope=SCOPE, agent_id="bot")
    await store.add_items(items)
    return store


async def _host_compacts(store, through_seq, summary=SUMMARY):
    pk = await sync_to_async(_session_pk)(store)
    return await sync_to_async(services.compact_session)(
        scope=SCOPE, session_id=pk, through_seq=through_seq, summary=summary
    )


def _session_pk(store):
    return Message.objects.filter(session__scope=SCOPE).values_list("session_id", flat=True)[0]


async def _transcript(store):
    pk = await sync_to_async(_session_pk)(store)
    rows = [m async for m in Message.objects.filter(session_id=pk).order_by("seq")]
    return [(row.seq, message_to_item(row)) for row in rows if row.compacts_through_seq is None]


@async_test
async def test_a_host_text_summary_reads_as_one_item_followed_by_the_tail():
    store = await _store_with([user("one"), user("two"), user("three")])
    await _host_compacts(store, through_seq=2)
    assert await store.get_items() == [user(SUMMARY), user("three")]
    assert await store.get_items(limit=1) == [user("three")]
    assert await store.get_items(limit=2) == [user(SUMMARY), user("three")]


@async_test
async def test_a_host_summary_of_everything_is_what_the_sdk_sees():
    store = await _store_with([user("one"), {"role": "assistant", "content": "two"}])
    await _host_compacts(store, through_seq=2)
    assert await store.get_items() == [user(SUMMARY)]


@async_test
async def test_pops_take_the_tail_then_the_summary_text_and_keep_the_transcript():
    store = await _store_with([user("one"), user("two"), user("three")])
    await _host_compacts(store, through_seq=2)
    before = await _transcript(store)
    assert await store.pop_item() == user("three")
    assert await store.get_items() == [user(SUMMARY)]
    assert await store.pop_item() == user(SUMMARY)
    assert await store.get_items() == []
    assert await store.pop_item() is None
    # The covered messages stay in the transcript, and stay covered: the SDK still sees nothing.
    assert await _transcript(store) == before[:2]
    assert await store.get_items() == []
    summaries = [
        m
        async for m in Message.objects.filter(
            session__scope=SCOPE, compacts_through_seq__isnull=False
        )
    ]
    assert [s.compacts_through_seq for s in summaries] == [2]
    assert {"type": COMPACTION_BLOCK_TYPE} in summaries[0].content


@async_test
async def test_items_added_after_a_host_summary_pop_back_in_order():
    store = await _store_with([user("one")])
    await _host_compacts(store, through_seq=1)
    await store.add_items([user("four"), {"role": "assistant", "content": "five"}])
    seen = await store.get_items()
    assert seen == [user(SUMMARY), user("four"), {"role": "assistant", "content": "five"}]
    for expected in reversed(seen):
        assert await store.pop_item() == expected
    assert await store.pop_item() is None


@async_test
async def test_a_host_summary_given_as_blocks_reads_as_its_text():
    store = await _store_with([user("one"), user("two")])
    await _host_compacts(
        store,
        through_seq=1,
        summary=[{"type": "text", "text": "Part A"}, {"type": "text", "text": "Part B"}],
    )
    assert await store.get_items() == [user("Part A\nPart B"), user("two")]


@async_test
async def test_the_sdk_compacting_after_a_host_summary_keeps_what_it_saw():
    store = await _store_with([user("one"), user("two")])
    await _host_compacts(store, through_seq=2)
    await store.add_items([user("three")])
    seen = await store.get_items()
    await store._atomic_replace_items(seen)  # the SDK's compaction hook, items as it saw them
    assert await store.get_items() == seen


@async_test
async def test_the_runner_sends_the_model_the_host_summary_then_the_tail():
    store = await _store_with([user("Which city is the bridge in?")])
    await store.add_items([{"role": "assistant", "content": "San Francisco."}])
    await _host_compacts(store, through_seq=2)
    model = ScriptedModel(["California."])
    agent = Agent(name="guide", instructions="One line.", model=model)
    await Runner.run(
        agent, "Which state?", session=store, run_config=RunConfig(tracing_disabled=True)
    )
    sent = model.inputs[-1]
    texts = [item.get("content") for item in sent if isinstance(item, dict)]
    assert texts[0] == SUMMARY  # the model sees the summary, not the messages it stands for
    assert "Which city is the bridge in?" not in texts
    assert texts[-1] == "Which state?"
