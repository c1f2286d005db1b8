"""Thread lifecycle on PostgreSQL: scale, plans and races with real threads
(docs/design.md §11.1–§11.4)."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from cortex_sessions import services
from cortex_sessions.exceptions import MessageNotFound, SessionArchived
from cortex_sessions.models import Message, Session
from tests.test_concurrency import run_together

pytestmark = pytest.mark.postgres_only

SCOPE = "org=acme/user=1"


def _fill(session: Session, count: int) -> None:
    """Give ``session`` ``count`` messages with one SQL statement, counters set to match."""
    table = connection.ops.quote_name(Message._meta.db_table)
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {table} (session_id, agent_id, scope, seq, role, source, content, "
            "metadata, created_at) SELECT %s, %s, %s, g, "
            "CASE WHEN g %% 2 = 1 THEN 'user' ELSE 'assistant' END, "
            "CASE WHEN g %% 2 = 1 THEN 'user' ELSE 'host' END, "
            "jsonb_build_array(jsonb_build_object('type', 'text', 'text', 'm' || g)), "
            "'{}'::jsonb, now() FROM generate_series(1, %s) AS g",
            [session.pk, session.agent_id, session.scope, count],
        )
    Session.objects.filter(pk=session.pk).update(
        message_count=count, last_seq=count, last_message=f"m{count}"
    )


@pytest.mark.django_db
def test_fork_of_100000_messages_makes_constant_queries_and_reads_no_message():
    small = services.create_session(scope=SCOPE, agent_id="a")
    large = services.create_session(scope=SCOPE, agent_id="a")
    _fill(small, 10)
    _fill(large, 100_000)
    message_table = Message._meta.db_table

    results = []
    for source, up_to in ((small, None), (large, None), (small, 5), (large, 50_000)):
        with CaptureQueriesContext(connection) as queries:
            fork = services.fork_session(scope=SCOPE, session_id=source.pk, up_to_seq=up_to)
        inserts = [q["sql"] for q in queries.captured_queries if q["sql"].startswith("INSERT INTO")]
        assert sum(message_table in sql and "SELECT" in sql for sql in inserts) == 1
        results.append((len(queries), fork))

    assert results[0][0] == results[1][0]  # whole forks: 10 vs 100,000 messages
    assert results[2][0] == results[3][0]  # partial forks
    whole, half = Session.objects.get(pk=results[1][1].pk), Session.objects.get(pk=results[3][1].pk)
    assert (whole.message_count, whole.last_seq, whole.last_message) == (
        100_000,
        100_000,
        "m100000",
    )
    assert (half.message_count, half.last_seq, half.last_message) == (50_000, 50_000, "m50000")
    assert Message.objects.filter(session=whole).count() == 100_000
    assert Message.objects.filter(session=half).count() == 50_000


@pytest.mark.django_db
def test_metadata_filter_is_served_by_the_gin_index():
    Session.objects.bulk_create(
        Session(agent_id="a", scope=SCOPE, metadata={"team": f"t{n % 50}", "n": n})
        for n in range(500)
    )
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE cortex_sessions_session")
        cursor.execute("SET LOCAL enable_seqscan = off")
    queryset = services.session_queryset(
        scope=SCOPE, filters=services.SessionFilters(metadata={"team": "t7"}, archived=None)
    )
    plan = queryset.order_by().explain()
    assert "cortex_session_metadata_gin" in plan, plan
    assert queryset.count() == 10


@pytest.mark.django_db(transaction=True)
def test_concurrent_merge_patches_of_different_keys_all_survive():
    session = services.create_session(scope=SCOPE, agent_id="a", metadata={"base": 0})
    threads, rounds = 8, 15

    def patch(index: int) -> None:
        for number in range(rounds):
            services.patch_session(
                scope=SCOPE,
                session_id=session.pk,
                patch={"metadata": {f"t{index}_{number}": number}},
            )

    run_together(threads, patch)

    metadata = Session.objects.get(pk=session.pk).metadata
    expected = {"base": 0} | {
        f"t{index}_{number}": number for index in range(threads) for number in range(rounds)
    }
    assert metadata == expected


@pytest.mark.django_db(transaction=True)
def test_concurrent_pops_never_return_one_message_twice():
    session = services.create_session(scope=SCOPE, agent_id="a")
    total = 120
    services.append_messages(
        scope=SCOPE,
        session_id=session.pk,
        messages=[{"role": "user", "content": f"m{n}"} for n in range(total)],
    )

    def pop_all(index: int) -> list[int]:
        popped = []
        while True:
            try:
                popped.append(services.pop_message(scope=SCOPE, session_id=session.pk).message.seq)
            except MessageNotFound:
                return popped

    per_thread = run_together(8, pop_all)

    seqs = [seq for popped in per_thread for seq in popped]
    assert sorted(seqs) == list(range(1, total + 1))
    assert all(popped == sorted(popped, reverse=True) for popped in per_thread)
    stored = Session.objects.get(pk=session.pk)
    assert (stored.message_count, stored.last_message, stored.last_seq) == (0, "", total)


@pytest.mark.django_db(transaction=True)
def test_no_append_lands_after_a_concurrent_archive_commits():
    session = services.create_session(scope=SCOPE, agent_id="a")

    def work(index: int) -> list[str]:
        if index == 0:
            services.archive_session(scope=SCOPE, session_id=session.pk)
            return ["archived"]
        outcomes = []
        for number in range(30):
            try:
                services.append_messages(
                    scope=SCOPE,
                    session_id=session.pk,
                    messages=[{"role": "user", "content": f"{index}-{number}"}],
                )
                outcomes.append("ok")
            except SessionArchived:
                outcomes.append("refused")
        return outcomes

    results = run_together(5, work)

    stored = Session.objects.get(pk=session.pk)
    appended = sum(outcome == "ok" for outcomes in results[1:] for outcome in outcomes)
    assert stored.message_count == appended == Message.objects.filter(session=session).count()
    archived_at = stored.archived_at
    assert archived_at is not None
    assert not Message.objects.filter(session=session, created_at__gt=archived_at).exists()


@pytest.mark.django_db
@pytest.mark.parametrize("archived", [False, True, None])
def test_lists_and_counts_by_archive_state_use_an_index(archived):
    from django.utils import timezone

    Session.objects.bulk_create(
        Session(
            agent_id="a",
            scope=f"org=o{n % 7}/user={n}",
            archived_at=timezone.now() if n % 3 == 0 else None,
        )
        for n in range(300)
    )
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE cortex_sessions_session")
        cursor.execute("SET LOCAL enable_seqscan = off")
    queryset = services.session_queryset(
        scope="org=o3", filters=services.SessionFilters(archived=archived)
    )
    for plan in (queryset[:50].explain(), queryset.order_by().explain()):
        assert "Seq Scan" not in plan, plan
        assert "cortex_session_" in plan, plan
    expected = {False: "cortex_session_scope_idx", True: "cortex_session_archived_idx"}
    if archived is not None:
        assert expected[archived] in queryset.order_by().explain()
