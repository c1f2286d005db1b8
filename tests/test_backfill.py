"""The default-session backfill (docs/design.md §4), on both of its attach paths."""

from __future__ import annotations

import pytest

from cortex_sessions import backfill, services
from cortex_sessions.models import Message, Session

pytestmark = pytest.mark.django_db

PAIR_A = ("agent-a", "org=acme/user=alice")
PAIR_B = ("agent-b", "org=acme/user=bob")


@pytest.fixture(params=["set-based", "row-by-row"])
def attach_path(request, monkeypatch):
    if request.param == "row-by-row":
        monkeypatch.setattr(backfill, "SET_BASED_VENDORS", frozenset())
    return request.param


def legacy(pair, *texts, role="user"):
    agent_id, scope = pair
    return [
        Message.objects.create(
            agent_id=agent_id,
            scope=scope,
            role=role,
            source="user" if role == "user" else "host",
            content=[{"type": "text", "text": text}],
        )
        for text in texts
    ]


def run(batch_size=1000):
    return backfill.backfill_default_sessions(
        session_model=Session, message_model=Message, batch_size=batch_size
    )


def test_each_pair_gets_a_default_with_its_rows_in_id_order(attach_path):
    a_rows = legacy(PAIR_A, "a1", "a2", "a3")
    legacy(PAIR_B, "b1")
    a_rows += legacy(PAIR_A, "a4")
    report = run(batch_size=2)
    assert (report.pairs, report.sessions_created, report.messages_attached) == (2, 2, 5)
    session = Session.objects.get(agent_id=PAIR_A[0], scope=PAIR_A[1])
    assert session.is_default and session.backfilled_by == backfill.BACKFILL_MARKER
    seqs = Message.objects.filter(session=session).order_by("id").values_list("seq", flat=True)
    assert list(seqs) == [1, 2, 3, 4]
    assert [m.pk for m in Message.objects.filter(session=session).order_by("seq")] == [
        m.pk for m in a_rows
    ]
    assert (session.message_count, session.last_seq, session.last_message) == (4, 4, "a4")


def test_an_existing_default_keeps_its_messages_and_seq_continues(attach_path):
    agent_id, scope = PAIR_A
    default, _ = services.resolve_session(scope=scope, agent_id=agent_id)
    services.append_messages(
        scope=scope, session_id=default.pk, messages=[{"role": "user", "content": "new"}]
    )
    legacy(PAIR_A, "old1", "old2")
    report = run()
    assert (report.sessions_created, report.messages_attached) == (0, 2)
    default.refresh_from_db()
    assert default.backfilled_by == ""
    assert (default.message_count, default.last_seq) == (3, 3)
    by_seq = Message.objects.filter(session=default).order_by("seq")
    assert [m.text for m in by_seq] == ["new", "old1", "old2"]


def test_a_second_run_finds_nothing(attach_path):
    legacy(PAIR_A, "a1", "a2")
    run(batch_size=1)
    report = run(batch_size=1)
    assert (report.pairs, report.messages_attached) == (0, 0)
    assert not Message.objects.filter(session__isnull=True).exists()
