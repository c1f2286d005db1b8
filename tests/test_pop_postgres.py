"""``pop_message`` on PostgreSQL: one statement when it can be, and exactly the ORM path's
result — the removed message, ``message_count``, ``last_message`` — in every case
(docs/design.md §5, §11.4, §14)."""

from __future__ import annotations

from decimal import Decimal

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from cortex_sessions import services
from cortex_sessions.counters import newest_conversation_text
from cortex_sessions.exceptions import MessageNotFound, SessionArchived, SessionNotFound
from cortex_sessions.models import Message, Session

pytestmark = [pytest.mark.django_db, pytest.mark.postgres_only]

SCOPE = "org=acme/user=1"
LONG = "x" * 300
TEXTS = {
    "short": ["first", "second"],
    "long ascii": [LONG, "tail"],
    "long cjk": ["字" * 300, "tail"],
    "a combining mark at the cut": ["e" * 279 + "\u0301" * 30, "tail"],
    "an emoji sequence at the cut": ["a" * 278 + "👩‍👩‍👧" * 5, "tail"],
    "blank then text": ["real", [{"type": "text", "text": " \u3000\n"}, {"type": "x"}], "tail"],
    "only blank": [[{"type": "text", "text": "\u2003"}, {"type": "x"}], "tail"],
}


def _session(texts, *, roles=None):
    session = services.create_session(scope=SCOPE, agent_id="a")
    services.append_messages(
        scope=SCOPE,
        session_id=session.pk,
        messages=[
            {"role": (roles or {}).get(n, "user" if n % 2 == 0 else "assistant"), "content": text}
            for n, text in enumerate(texts)
        ],
    )
    return session


@pytest.mark.parametrize("texts", TEXTS.values(), ids=TEXTS.keys())
def test_a_pop_leaves_the_counters_the_orm_path_computes(texts):
    session = _session(texts)
    newest = Message.objects.filter(session=session).order_by("-seq").first()
    popped = services.pop_message(scope=SCOPE, session_id=session.pk)
    assert (popped.message.pk, popped.message.seq) == (newest.pk, newest.seq)
    assert popped.message.content == newest.content
    stored = Session.objects.get(pk=session.pk)
    expected = newest_conversation_text(Message.objects.filter(session=session))
    assert stored.last_message == popped.session.last_message == expected
    assert stored.message_count == popped.session.message_count == len(texts) - 1
    assert stored.last_seq == len(texts)


def test_a_pop_of_a_plain_conversation_is_one_statement():
    session = _session(["question", "answer", "follow-up"])
    with CaptureQueriesContext(connection) as captured:
        popped = services.pop_message(scope=SCOPE, session_id=session.pk)
    assert len(captured.captured_queries) == 1
    assert popped.message.content == [{"type": "text", "text": "follow-up"}]
    assert popped.session.last_message == "answer"


def test_a_tool_message_popped_keeps_the_conversation_text():
    session = _session(["question", "answer", "tool output"], roles={2: "tool"})
    popped = services.pop_message(scope=SCOPE, session_id=session.pk)
    assert popped.session.last_message == "answer"
    assert popped.message.role == "tool"


def test_pops_until_empty_then_message_not_found():
    session = _session(["one", "two"])
    assert services.pop_message(scope=SCOPE, session_id=session.pk).session.last_message == "one"
    assert services.pop_message(scope=SCOPE, session_id=session.pk).session.last_message == ""
    with pytest.raises(MessageNotFound):
        services.pop_message(scope=SCOPE, session_id=session.pk)


def test_archived_and_out_of_scope_sessions_are_refused_as_before():
    session = _session(["one"])
    with pytest.raises(SessionNotFound):
        services.pop_message(scope="org=globex", session_id=session.pk)
    services.archive_session(scope=SCOPE, session_id=session.pk)
    with pytest.raises(SessionArchived):
        services.pop_message(scope=SCOPE, session_id=session.pk)
    assert Message.objects.filter(session=session).count() == 1


def _compacted(tail):
    """A session of four messages with usage, compacted through seq 2, then ``tail`` appended."""
    session = _session(["one", "two", "three", "four"])
    services.compact_session(
        scope=SCOPE,
        session_id=session.pk,
        through_seq=2,
        summary="one and two",
        usage={"input_tokens": 7, "cost": "0.5"},
    )
    if tail:
        services.append_messages(
            scope=SCOPE,
            session_id=session.pk,
            messages=[
                {"role": "assistant", "content": t, "usage": {"output_tokens": 3, "cost": "0.25"}}
                for t in tail
            ],
        )
    return session


def _recounted(session):
    """The session's counters as the ORM path computes them from its rows."""
    from cortex_sessions.services.context import context_tokens_of

    rows = Message.objects.filter(session=session)
    return (
        rows.count(),
        sum((m.usage or {}).get("output_tokens", 0) for m in rows),
        sum(Decimal((m.usage or {}).get("cost", "0")) for m in rows),
        context_tokens_of(session, using="default"),
    )


def _counters(session):
    stored = Session.objects.get(pk=session.pk)
    return (stored.message_count, stored.output_tokens, stored.cost, stored.context_tokens)


def test_a_pop_after_a_compaction_of_a_message_it_shows_is_one_statement_and_exact():
    # §16.3-§16.4: the newest message lies past the summary's through_seq, so the context loses
    # exactly its token_count; the statement tells the summary and its through_seq itself.
    session = _compacted(["five", "six"])
    with CaptureQueriesContext(connection) as captured:
        popped = services.pop_message(scope=SCOPE, session_id=session.pk)
    assert len(captured.captured_queries) == 1
    assert popped.message.content == [{"type": "text", "text": "six"}]
    assert _counters(session) == _recounted(session)
    assert popped.session.context_tokens == _recounted(session)[3]
    assert popped.session.last_message == "five"


def test_the_one_statement_leaves_a_summary_it_would_pop_to_the_orm_path():
    from cortex_sessions.services.undo import pop_in_one_statement

    session = _compacted([])
    before = _counters(session)
    assert pop_in_one_statement(scope=SCOPE, session_id=session.pk) is None
    assert _counters(session) == before  # nothing written
    assert Message.objects.filter(session=session, compacts_through_seq=2).exists()
    popped = services.pop_message(scope=SCOPE, session_id=session.pk)  # the ORM path: undone
    assert popped.message.compacts_through_seq == 2
    assert _counters(session) == _recounted(session)
