"""Compaction and the context read (docs/design.md §16.3, §16.4), on every database.

Tokens are counted by :func:`length_tokens` (one token a character of text), so budgets read
plainly: ``"aaaa"`` is 4 tokens.
"""

from __future__ import annotations

from decimal import Decimal

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext, override_settings

from cortex_sessions import services
from cortex_sessions.exceptions import (
    ContextBudgetExceeded,
    EmptyContent,
    InvalidFilter,
    InvalidThroughSeq,
    MessageTooLarge,
    SessionArchived,
    SessionNotFound,
    SummaryTooLarge,
)
from cortex_sessions.models import Message
from cortex_sessions.services.context import context_tokens_of
from tests.asyncio_support import async_test

pytestmark = pytest.mark.django_db

SCOPE = "org=acme/user=1"
OTHER = "org=acme/user=2"


def length_tokens(role, content):
    """A ``TOKEN_COUNTER``: one token per character of the text blocks."""
    return sum(len(block.get("text", "")) for block in content if isinstance(block, dict))


@pytest.fixture(autouse=True)
def _count_characters():
    with override_settings(
        CORTEX_SESSIONS={"TOKEN_COUNTER": "tests.test_context_window.length_tokens"}
    ):
        yield


def _session(scope=SCOPE):
    return services.create_session(scope=scope, agent_id="a")


def _append(session, *items):
    """Append ``(role, text)`` pairs; returns the rows."""
    return services.append_messages(
        scope=SCOPE,
        session_id=session.pk,
        messages=[{"role": role, "content": text} for role, text in items],
    ).messages


def _compact(session, through_seq, summary="S" * 3, **kwargs):
    return services.compact_session(
        scope=SCOPE, session_id=session.pk, through_seq=through_seq, summary=summary, **kwargs
    )


def _seqs(window):
    return [message.seq for message in window.messages]


def _context(session, max_tokens=None, scope=SCOPE):
    return services.context_messages(scope=scope, session_id=session.pk, max_tokens=max_tokens)


def _assert_context_tokens_exact(session):
    session.refresh_from_db()
    assert session.context_tokens == _context(session).tokens
    assert session.context_tokens == context_tokens_of(session, using="default")


# -- the context read -----------------------------------------------------------------------------


def test_context_of_an_uncompacted_session_is_every_message():
    session = _session()
    _append(session, ("user", "aa"), ("assistant", "bbb"), ("user", "c"))
    window = _context(session)
    assert _seqs(window) == [1, 2, 3]
    assert window.tokens == 6
    assert window.compacted_through_seq is None
    assert window.truncated is False


def test_context_of_an_empty_session_is_empty():
    window = _context(_session())
    assert (window.messages, window.tokens, window.truncated) == ([], 0, False)


def test_context_of_a_foreign_or_missing_session_is_not_found():
    session = _session(scope=OTHER)
    with pytest.raises(SessionNotFound):
        _context(session)
    with pytest.raises(SessionNotFound):
        services.context_messages(scope=SCOPE, session_id="not-a-uuid")


def test_budget_drops_the_oldest_messages_whole():
    session = _session()
    _append(session, ("user", "aaaa"), ("assistant", "bbbb"), ("user", "cc"), ("assistant", "d"))
    window = _context(session, max_tokens=7)  # 1 + 2 + 4 = 7 fits; the 4 before does not
    assert _seqs(window) == [2, 3, 4]
    assert window.tokens == 7
    assert window.truncated is True
    assert _seqs(_context(session, max_tokens=11)) == [1, 2, 3, 4]
    assert _context(session, max_tokens=11).truncated is False


def test_budget_never_leaves_a_tool_result_first():
    session = _session()
    _append(
        session,
        ("user", "question"),
        ("assistant", "call"),
        ("tool", "result1"),
        ("tool", "result2"),
        ("assistant", "ok"),
    )
    # 2 + 7 + 7 = 16 fits from seq 3 on, but a tool result would lead: both go.
    window = _context(session, max_tokens=16)
    assert _seqs(window) == [5]
    assert window.truncated is True
    # with the call inside the budget, the results stay after it
    assert _seqs(_context(session, max_tokens=20)) == [2, 3, 4, 5]


def test_the_required_budget_counts_the_tool_results_back_to_a_message_that_may_lead():
    """When the tool rule empties the tail, ``required`` counts back to a message that may lead
    the context: a retry with it gets a context, never the same 422 again."""
    session = _session()
    _append(session, ("user", "q"), ("assistant", "call"), ("tool", "result1"), ("tool", "r2"))
    budget = 10
    for _ in range(5):
        try:
            window = _context(session, max_tokens=budget)
        except ContextBudgetExceeded as exc:
            assert exc.params["required"] > budget
            budget = exc.params["required"]
        else:
            break
    assert _seqs(window) == [2, 3, 4]


def test_budget_that_cannot_hold_the_newest_message_is_refused():
    session = _session()
    _append(session, ("user", "a"), ("assistant", "bbbbb"))
    with pytest.raises(ContextBudgetExceeded) as raised:
        _context(session, max_tokens=4)
    assert raised.value.code == "context_budget_exceeded"
    assert raised.value.params["required"] == 5


def test_budget_whose_only_fit_is_a_tool_result_is_refused():
    session = _session()
    _append(session, ("assistant", "call the tool"), ("tool", "42"))
    with pytest.raises(ContextBudgetExceeded):
        _context(session, max_tokens=5)


@pytest.mark.parametrize("bad", [0, -1, services.MAX_CONTEXT_TOKENS + 1, 1.5, "10", True])
def test_bad_budget_is_invalid_filter(bad):
    session = _session()
    with pytest.raises(InvalidFilter) as raised:
        _context(session, max_tokens=bad)
    assert raised.value.params["field"] == "max_tokens"


def test_context_read_of_a_long_thread_reads_a_bounded_number_of_rows():
    """The walk stops one message past the budget: reading 3 messages of 300 costs the same
    queries as reading 3 of 3 (rows fetched are counted on PostgreSQL, tests/
    test_context_postgres.py)."""
    session = _session()
    _append(session, *[("user", "x" * 10)] * 300)
    with CaptureQueriesContext(connection) as queries:
        window = _context(session, max_tokens=30)
    assert _seqs(window) == [298, 299, 300]
    assert len(queries) <= 3


@pytest.fixture
def hello():
    session = _session()
    _append(session, ("user", "hello"))
    return session


@async_test
async def test_async_twin_reads_the_context(hello):
    window = await services.acontext_messages(scope=SCOPE, session_id=hello.pk)
    assert [m.seq for m in window.messages] == [1]


# -- compaction -----------------------------------------------------------------------------------


def test_compaction_appends_a_summary_and_keeps_every_message():
    session = _session()
    _append(session, ("user", "aaaa"), ("assistant", "bbbb"), ("user", "cc"))
    result = _compact(session, 2, summary="sum")
    summary = result.messages[0]
    assert (summary.seq, summary.role, summary.source) == (4, "user", "checkpoint")
    assert summary.compacts_through_seq == 2
    assert summary.token_count == 3
    assert Message.objects.filter(session=session).count() == 4
    assert result.session.message_count == 4
    assert result.session.last_seq == 4
    assert result.session.context_tokens == 3 + 2
    window = _context(session)
    assert _seqs(window) == [4, 3]
    assert window.compacted_through_seq == 2
    assert window.tokens == 5
    _assert_context_tokens_exact(session)


def test_messages_appended_after_a_compaction_follow_the_summary():
    session = _session()
    _append(session, ("user", "aaaa"), ("assistant", "bbbb"))
    _compact(session, 2)
    _append(session, ("user", "new"))
    assert _seqs(_context(session)) == [3, 4]
    _assert_context_tokens_exact(session)


def test_a_second_compaction_hides_the_first_summary():
    session = _session()
    _append(session, ("user", "aaaa"), ("assistant", "bbbb"))
    _compact(session, 1)  # seq 3, stands for 1
    _append(session, ("user", "cc"))  # seq 4
    _compact(session, 2, summary="second")  # seq 5; seq 3 (an older summary) is after 2
    window = _context(session)
    assert _seqs(window) == [5, 4]
    assert window.compacted_through_seq == 2
    _assert_context_tokens_exact(session)


def test_budget_keeps_the_summary_and_drops_the_oldest_after_it():
    session = _session()
    _append(session, *[("user", "xxxx")] * 5)
    _compact(session, 2, summary="ss")  # seq 6
    window = _context(session, max_tokens=2 + 8)
    assert _seqs(window) == [6, 4, 5]
    assert window.truncated is True
    with pytest.raises(ContextBudgetExceeded):
        _context(session, max_tokens=5)


def test_deleting_the_summary_undoes_the_compaction():
    session = _session()
    _append(session, ("user", "aaaa"), ("assistant", "bbbb"))
    _compact(session, 1)
    second = _compact(session, 2, summary="zz").messages[0]
    services.delete_message(scope=SCOPE, session_id=session.pk, seq=second.seq)
    window = _context(session)
    assert window.compacted_through_seq == 1
    assert _seqs(window) == [3, 2]
    _assert_context_tokens_exact(session)
    services.delete_message(scope=SCOPE, session_id=session.pk, seq=3)
    assert _seqs(_context(session)) == [1, 2]
    _assert_context_tokens_exact(session)


def test_deleting_a_compacted_message_keeps_context_tokens_exact():
    session = _session()
    _append(session, ("user", "aaaa"), ("assistant", "bbbb"), ("user", "c"))
    _compact(session, 2)
    services.delete_message(scope=SCOPE, session_id=session.pk, seq=1)
    _assert_context_tokens_exact(session)
    services.pop_message(scope=SCOPE, session_id=session.pk)  # the summary: undone
    _assert_context_tokens_exact(session)
    assert _context(session).compacted_through_seq is None


def test_deleting_what_a_short_summary_stands_for_never_drives_context_tokens_negative():
    """A covered message (or an older summary) may hold more tokens than the whole context:
    the delete recomputes ``context_tokens`` instead of subtracting what went (it was an
    IntegrityError on the non-negative check)."""
    session = _session()
    _append(session, ("user", "x" * 4000), ("assistant", "x" * 4000), ("user", "x" * 4000))
    _compact(session, 3, summary="short")
    services.delete_message(scope=SCOPE, session_id=session.pk, seq=3)
    _assert_context_tokens_exact(session)
    older = _session()
    _append(older, ("user", "x" * 400), ("assistant", "x" * 400), ("user", "x" * 400))
    _compact(older, 3, summary="long summary " * 400)  # seq 4
    _append(older, ("assistant", "y"))
    _compact(older, 5, summary="short")  # seq 6: the big summary 4 is an older one now
    services.delete_message(scope=SCOPE, session_id=older.pk, seq=4)
    _assert_context_tokens_exact(older)
    services.delete_messages_after(scope=SCOPE, session_id=older.pk, after_seq=1)
    _assert_context_tokens_exact(older)


def test_recount_keeps_the_context_tokens_of_a_compacted_session():
    session = _session()
    _append(session, ("user", "x" * 400), ("assistant", "x" * 400), ("user", "x" * 400))
    _compact(session, 3, summary="short")
    assert services.recount_sessions(scope=SCOPE) == []  # no drift to report
    _assert_context_tokens_exact(session)


def test_delete_after_and_clear_keep_context_tokens_exact():
    session = _session()
    _append(session, ("user", "aaaa"), ("assistant", "bbbb"), ("user", "c"))
    _compact(session, 2)
    _append(session, ("assistant", "dd"))
    services.delete_messages_after(scope=SCOPE, session_id=session.pk, after_seq=4)
    _assert_context_tokens_exact(session)
    services.delete_messages_after(scope=SCOPE, session_id=session.pk, after_seq=3)
    _assert_context_tokens_exact(session)
    services.clear_messages(scope=SCOPE, session_id=session.pk)
    _assert_context_tokens_exact(session)


@pytest.mark.parametrize("through", [0, -1, 4, "2", 1.0, None, True])
def test_through_seq_outside_the_session_is_refused(through):
    session = _session()
    _append(session, ("user", "a"), ("user", "b"), ("user", "c"))
    with pytest.raises(InvalidThroughSeq) as raised:
        _compact(session, through)
    assert raised.value.code == "invalid_through_seq"
    assert Message.objects.filter(session=session).count() == 3


def test_through_seq_not_past_the_newest_compaction_is_refused():
    session = _session()
    _append(session, ("user", "a"), ("user", "b"), ("user", "c"))
    _compact(session, 2)
    for through in (1, 2):
        with pytest.raises(InvalidThroughSeq):
            _compact(session, through)
    assert _compact(session, 3).messages[0].compacts_through_seq == 3


def test_empty_or_too_large_summary_is_refused_and_nothing_written():
    session = _session()
    _append(session, ("user", "a"))
    with pytest.raises(EmptyContent):
        _compact(session, 1, summary="")
    with (
        override_settings(
            CORTEX_SESSIONS={
                "TOKEN_COUNTER": "tests.test_context_window.length_tokens",
                "MAX_MESSAGE_BYTES": 100,
            }
        ),
        pytest.raises(SummaryTooLarge) as refused,
    ):
        _compact(session, 1, summary="x" * 200)
    assert isinstance(refused.value, MessageTooLarge)  # callers catching that still do
    assert refused.value.code == "summary_too_large"
    assert refused.value.params["field"] == "summary"
    assert refused.value.params["limit"] == 100 < refused.value.params["size"]
    session.refresh_from_db()
    assert (session.message_count, session.last_seq) == (1, 1)


def test_compacting_an_archived_session_is_refused():
    session = _session()
    _append(session, ("user", "a"))
    services.archive_session(scope=SCOPE, session_id=session.pk)
    with pytest.raises(SessionArchived):
        _compact(session, 1)


def test_compacting_a_foreign_session_is_not_found():
    session = _session(scope=OTHER)
    services.append_messages(
        scope=OTHER, session_id=session.pk, messages=[{"role": "user", "content": "a"}]
    )
    with pytest.raises(SessionNotFound):
        _compact(session, 1)


def test_compaction_with_a_key_happens_once():
    session = _session()
    _append(session, ("user", "aaaa"), ("assistant", "bbbb"))
    first = _compact(session, 1, idempotency_key="k1")
    again = _compact(session, 1, idempotency_key="k1")
    assert again.messages[0].pk == first.messages[0].pk
    assert Message.objects.filter(session=session).count() == 3


def test_compaction_usage_moves_the_session_totals():
    session = _session()
    _append(session, ("user", "aaaa"))
    usage = {"input_tokens": 100, "output_tokens": 7, "cost": "0.000123"}
    summary = _compact(session, 1, usage=usage).messages[0]
    assert summary.usage == usage
    session.refresh_from_db()
    assert (session.input_tokens, session.output_tokens) == (100, 7)
    assert session.cost == Decimal("0.000123")


@async_test
async def test_async_twin_compacts(hello):
    result = await services.acompact_session(
        scope=SCOPE, session_id=hello.pk, through_seq=1, summary="s"
    )
    assert result.messages[0].compacts_through_seq == 1
    assert result.session.message_count == 2


def test_fork_renumbers_a_summary_and_keeps_its_context():
    session = _session()
    _append(session, ("user", "aaaa"), ("assistant", "bbbb"), ("user", "cc"), ("user", "dd"))
    services.delete_message(scope=SCOPE, session_id=session.pk, seq=1)
    _compact(session, 3)  # seq 5 stands for 2..3
    _append(session, ("assistant", "eee"))  # seq 6
    whole = services.fork_session(scope=SCOPE, session_id=session.pk)
    part = services.fork_session(scope=SCOPE, session_id=session.pk, up_to_seq=5)
    for fork, tail in ((whole, [3, 5]), (part, [3])):
        window = _context(fork)
        assert window.compacted_through_seq == 2  # seqs 2..3 became 1..2
        assert _seqs(window) == [4, *tail]
        _assert_context_tokens_exact(fork)
