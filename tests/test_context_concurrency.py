"""Concurrent compactions, appends and deletes on one session keep the counters and
``context_tokens`` exact (docs/design.md §16.3), on PostgreSQL and MariaDB."""

from __future__ import annotations

import random

import pytest

from cortex_sessions import services
from cortex_sessions.exceptions import InvalidThroughSeq
from cortex_sessions.models import Message, Session
from cortex_sessions.services.context import context_tokens_of
from tests.test_concurrency import run_together

pytestmark = [pytest.mark.concurrent_db, pytest.mark.django_db(transaction=True)]

SCOPE = "org=acme/user=1"
THREADS = 6
ROUNDS = 8


def test_compactions_appends_and_pops_racing_keep_context_tokens_exact():
    session = services.create_session(scope=SCOPE, agent_id="a")
    services.append_messages(
        scope=SCOPE,
        session_id=session.pk,
        messages=[{"role": "user", "content": "x" * n} for n in range(1, 21)],
    )

    def work(index: int) -> int:
        rng = random.Random(index)
        compacted = 0
        for _ in range(ROUNDS):
            kind = index % 3
            if kind == 0:
                last = Session.objects.get(pk=session.pk).last_seq
                try:
                    services.compact_session(
                        scope=SCOPE,
                        session_id=session.pk,
                        through_seq=rng.randint(max(1, last - 5), last),
                        summary=f"summary {index}",
                    )
                    compacted += 1
                except InvalidThroughSeq:
                    pass  # another compaction got past it first
            elif kind == 1:
                services.append_messages(
                    scope=SCOPE,
                    session_id=session.pk,
                    messages=[{"role": "assistant", "content": "y" * rng.randint(1, 50)}],
                )
            else:
                services.pop_message(scope=SCOPE, session_id=session.pk)
        return compacted

    compactions = sum(run_together(THREADS, work))
    assert compactions >= 1
    session.refresh_from_db()
    rows = Message.objects.filter(session=session)
    assert session.message_count == rows.count()
    assert session.context_tokens == context_tokens_of(session, using="default")
    window = services.context_messages(scope=SCOPE, session_id=session.pk)
    assert window.tokens == session.context_tokens
