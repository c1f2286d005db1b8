"""``CortexSession.pop_item`` in a compacted session (docs/design.md §16.5): it removes and
returns the last item ``get_items`` returns — the SDK's contract — and afterwards the SDK sees
the same history without it, while the transcript's original items stay."""

from __future__ import annotations

from decimal import Decimal

import pytest

pytest.importorskip("agents")

from agents.memory import OpenAIResponsesCompactionSession
from asgiref.sync import sync_to_async

from cortex_sessions import services
from cortex_sessions.integrations.openai_agents import CortexSession, message_to_item
from cortex_sessions.models import Message, Session
from tests.asyncio_support import async_test
from tests.runtimes.test_openai_compaction import COMPACTION_ITEM, ScriptedCompactor

pytestmark = pytest.mark.django_db

SCOPE = "org=acme/user=alice"


def user(text):
    return {"role": "user", "content": text}


async def _compacted(items, compactions=1):
    """A cortex session holding ``items``, compacted ``compactions`` times by the SDK's
    compaction session (each adding one user item in between)."""
    store = CortexSession(scope=SCOPE, agent_id="bot")
    await store.add_items(items)
    sdk = OpenAIResponsesCompactionSession(
        session_id="s", underlying_session=store, client=ScriptedCompactor()
    )
    for round_ in range(compactions):
        if round_:
            await store.add_items([user(f"between {round_}")])
        await sdk.run_compaction({"force": True, "compaction_mode": "input"})
    return store, sdk


async def _originals(store):
    rows = [m async for m in Message.objects.filter(session_id=store.session_id).order_by("seq")]
    return [message_to_item(row) for row in rows if row.compacts_through_seq is None]


async def _check_pops_follow_get_items(store, pops):
    for _ in range(pops):
        seen = await store.get_items()
        popped = await store.pop_item()
        assert popped == (seen[-1] if seen else None)
        assert await store.get_items() == seen[:-1]


@async_test
async def test_after_one_compaction_pop_takes_the_summarys_last_item_and_keeps_the_rest():
    store, _ = await _compacted([user("one"), {"role": "assistant", "content": "two"}])
    originals = await _originals(store)
    assert await store.get_items() == [{"type": "message", **user("one")}, COMPACTION_ITEM]
    assert await store.pop_item() == COMPACTION_ITEM
    assert await store.get_items() == [{"type": "message", **user("one")}]
    assert await store.pop_item() == {"type": "message", **user("one")}
    assert await store.get_items() == []
    assert await store.pop_item() is None
    assert await _originals(store) == originals  # the transcript stays whole


@async_test
async def test_after_two_compactions_pops_follow_what_the_sdk_sees():
    store, _ = await _compacted([user("one"), {"role": "assistant", "content": "two"}], 2)
    originals = await _originals(store)
    seen = await store.get_items()
    assert seen[-1] == COMPACTION_ITEM
    summaries = Message.objects.filter(
        session_id=store.session_id, compacts_through_seq__isnull=False
    )
    assert await summaries.acount() == 2
    await _check_pops_follow_get_items(store, len(seen) + 1)
    assert await _originals(store) == originals
    # Still one live summary, standing for the same messages; the counters are exact.
    session = await Session.objects.aget(pk=store.session_id)
    rows = [m async for m in Message.objects.filter(session=session)]
    assert session.message_count == len(rows)
    window = await services.acontext_messages(scope=SCOPE, session_id=session.pk)
    assert session.context_tokens == window.tokens


@async_test
async def test_items_added_after_the_compaction_pop_first():
    store, _ = await _compacted([user("one"), user("two")])
    await store.add_items([user("three"), {"role": "assistant", "content": "four"}])
    seen = await store.get_items()
    assert await store.pop_item() == {"role": "assistant", "content": "four"}
    assert await store.pop_item() == user("three")
    assert await store.get_items() == seen[:-2]
    await _check_pops_follow_get_items(store, len(seen) - 1)


@async_test
async def test_a_message_between_through_seq_and_the_summary_is_what_the_sdk_sees_last():
    """A summary written through the API may stand for fewer than all messages before it: the
    SDK sees the summary (its text, as one user item), then those messages; a pop takes the
    newest of them, and the summary's text last."""
    store = CortexSession(scope=SCOPE, agent_id="bot")
    await store.add_items([user("one"), user("two"), user("three")])
    await services.acompact_session(
        scope=SCOPE, session_id=store.session_id, through_seq=1, summary="one, in short"
    )  # a text summary: it reads as one item
    assert await store.get_items() == [user("one, in short"), user("two"), user("three")]
    await _check_pops_follow_get_items(store, 4)
    # Message 1 and the summary, now standing for it with no item: the SDK sees nothing.
    assert await Message.objects.filter(session_id=store.session_id).acount() == 2
    assert await store.get_items() == []


@async_test
async def test_popping_a_summarys_item_keeps_its_usage_and_the_totals():
    store, _ = await _compacted([user("one"), user("two")])
    summary = await Message.objects.filter(
        session_id=store.session_id, compacts_through_seq__isnull=False
    ).aget()
    usage = {"input_tokens": 7, "output_tokens": 2, "cost": "0.000100"}
    await Message.objects.filter(pk=summary.pk).aupdate(usage=usage)
    await sync_to_async(services.recount_sessions)(scope=SCOPE, repair=True)
    await store.pop_item()
    session = await Session.objects.aget(pk=store.session_id)
    new = await Message.objects.filter(session=session, compacts_through_seq__isnull=False).aget()
    assert (new.usage, new.compacts_through_seq) == (usage, summary.compacts_through_seq)
    assert (session.input_tokens, session.cost) == (7, Decimal("0.0001"))
    assert await sync_to_async(services.recount_sessions)(scope=SCOPE, repair=False) == []


@async_test
async def test_pop_on_an_empty_session_is_none():
    store = CortexSession(scope=SCOPE, agent_id="bot")
    await store.add_items([user("one")])
    assert await store.pop_item() == user("one")
    assert await store.pop_item() is None


@async_test
async def test_compactions_racing_a_pop_cannot_make_it_lose_a_summary(monkeypatch):
    """A pop decides under the session's lock on every database: no probe of the summary first
    and ``pop_message`` after, which two compactions committing in between (one before the pop
    read, one before it put a popped summary back) turned into a lost summary and an
    ``InvalidThroughSeq`` on SQLite and MariaDB. Here a stale probe and a second compaction are
    injected where that gap was; the pop still takes the item ``get_items`` shows last."""
    from cortex_sessions.integrations import openai_compaction

    store, _ = await _compacted([user("one"), user("two")])
    seen = await store.get_items()
    summary = await Message.objects.filter(
        session_id=store.session_id, compacts_through_seq__isnull=False
    ).aget()
    real_pop = services.pop_message

    def pop_then_compact(**kwargs):
        popped = real_pop(**kwargs)
        services.compact_session(
            scope=SCOPE,
            session_id=store.session_id,
            through_seq=summary.compacts_through_seq,
            summary=summary.content,
        )
        return popped

    stale_probe = lambda session, *, using: False  # noqa: E731 (where a probe was)
    monkeypatch.setattr(openai_compaction, "has_compaction", stale_probe, raising=False)
    monkeypatch.setattr(services, "pop_message", pop_then_compact)

    assert await store.pop_item() == seen[-1]
    assert await store.get_items() == seen[:-1]
    kept = Message.objects.filter(session_id=store.session_id, compacts_through_seq__isnull=False)
    assert await kept.acount() == 1
