"""Migrations 0001–0003 and the default-session backfill, on real data (docs/design.md §4).

Each test walks the schema with Django's ``MigrationExecutor``: back to the message log of
``0001``, legacy rows written with the historical models, forward again. A ``finally`` in the
``migrator`` fixture always leaves the database at the latest migration for the other tests.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from itertools import pairwise
from types import SimpleNamespace
from typing import Any

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.db.migrations.loader import MigrationLoader
from django.test.utils import CaptureQueriesContext, override_settings

from cortex_sessions import services
from cortex_sessions.backfill import BackfillReport, backfill_default_sessions
from cortex_sessions.models import ImportedConversation, Message, Session
from cortex_sessions.services import _pg
from tests.factories import MessageFactory

APP = "cortex_sessions"
MESSAGE_LOG = "0001_message_log"
SESSIONS = "0002_sessions"
MARKER = "0003_backfill_default_sessions"

ALPHA_1 = ("alpha", "org=acme/user=1")
ALPHA_2 = ("alpha", "org=acme/user=2")
BETA_1 = ("beta", "org=acme/user=1")  # already has a default session at 0002
GAMMA = ("gamma", "org=acme")  # only tool and system messages
ODD = ("alpha", "org=a%2Fb%3Dc/user=1")  # a value with an encoded '/' and '='
# Agents that differ from BETA_1 / ALPHA_2 only by case or a trailing space: agents of their own on
# every database, so the backfill (0003, which runs before 0010) must never merge them.
BETA_UPPER = ("Beta", "org=acme/user=1")
BETA_PADDED = ("beta ", "org=acme/user=1")
ALPHA_UPPER = ("ALPHA", "org=acme/user=2")

#: Legacy rows per pair, oldest first: (role, source, text).
LEGACY: dict[tuple[str, str], list[tuple[str, str, str]]] = {
    ALPHA_1: [
        ("user", "user", "a1 q1"),
        ("assistant", "host", "a1 answer1"),
        ("user", "user", "a1 q2"),
        ("assistant", "host", "a1 answer2"),
        ("tool", "host", "a1 tool output"),
        ("user", "host", "a1 injected by the host"),
    ],
    ALPHA_2: [
        ("user", "user", "a2 hello"),
        ("assistant", "host", "a2 reply"),
        ("user", "checkpoint", "a2 summary"),
    ],
    BETA_1: [
        ("user", "user", "b q1"),
        ("assistant", "host", "b a1"),
        ("user", "user", "b q2"),
        ("assistant", "host", "b a2"),
        ("system", "host", "b system prompt"),
    ],
    GAMMA: [("system", "host", "g system"), ("tool", "host", "g tool")],
    ODD: [("user", "user", "odd q")],
    BETA_UPPER: [("user", "user", "B upper q"), ("assistant", "host", "B upper a")],
    BETA_PADDED: [("user", "user", "b padded q")],
    ALPHA_UPPER: [("user", "user", "A upper q")],
}

#: What the backfill must produce, written out by hand (not computed by the code under test).
EXPECTED_LAST_MESSAGE = {
    ALPHA_1: "a1 answer2",
    ALPHA_2: "a2 summary",
    BETA_1: "b a2",
    GAMMA: "",
    ODD: "odd q",
    BETA_UPPER: "B upper a",
    BETA_PADDED: "b padded q",
    ALPHA_UPPER: "A upper q",
}
#: The pre-existing default of BETA_1: organic messages with a gap (seq 3 was deleted).
BETA_ORGANIC_SEQS = [1, 2, 4]
BETA_LAST_SEQ = 4
BASE_TIME = datetime(2024, 1, 1, tzinfo=UTC)


def _text(text: str) -> list[dict[str, str]]:
    return [{"type": "text", "text": text}]


class Migrator:
    """Moves the app's schema with ``MigrationExecutor`` and hands out historical models.

    A name of a squashed-away original (``0001_message_log`` to
    ``0023_newest_page_function``) works both ways: going back to one, Django
    plans with the originals; from a database at one, the graph holds the originals.
    """

    @property
    def latest(self) -> str:
        """The app's newest migration in the graph of the database as it is now: the last
        squashed migration, or the last original while the database is at an original."""
        return MigrationExecutor(connection).loader.graph.leaf_nodes(APP)[0][1]

    def migrate(self, name: str) -> Any:
        """Migrate the app to ``name``; return the historical ``apps`` of that state."""
        executor = MigrationExecutor(connection)
        target = [(APP, name)]
        if target[0] not in executor.loader.graph.node_map:
            originals_only(executor.loader)
        executor.migrate(target)
        loader = MigrationLoader(connection)
        if target[0] not in loader.graph.node_map:
            originals_only(loader)
        return loader.project_state(target).apps


def originals_only(loader: MigrationLoader) -> MigrationLoader:
    """Rebuild ``loader``'s graph from the original migrations alone, the squashed ones taken
    out as Django takes out a partly applied squash; return ``loader``.

    Going back from the squashed migrations to an original (``migrate cortex_sessions
    0010_…``), Django 5.2 plans with a graph that holds both and, because the ADK app depends
    on an original, replays the squash's models over the originals' (Django ticket #36168):
    on SQLite the rebuilt tables then keep columns being dropped. With this graph the
    states are the originals'.
    """
    loader.replace_migrations = False
    loader.build_graph()
    for key, migration in loader.replacements.items():
        loader.graph.remove_replacement_node(key, migration.replaces)
    return loader


@pytest.fixture
def migrator():
    migrator = Migrator()
    try:
        yield migrator
    finally:
        migrator.migrate(migrator.latest)
        # Apps whose migrations depend on this one (the ADK integration) were unapplied with it.
        executor = MigrationExecutor(connection)
        executor.migrate(executor.loader.graph.leaf_nodes())


@dataclass
class Scenario:
    """Ids of the rows written before the backfill."""

    legacy_ids: dict[tuple[str, str], list[int]] = field(default_factory=dict)
    beta_default: Any = None
    beta_organic_ids: list[int] = field(default_factory=list)
    side_session: Any = None
    side_message_id: int = 0


def write_scenario(migrator: Migrator) -> Scenario:
    """Legacy rows at 0001 (interleaved across pairs), then organic sessions at 0002.

    ALPHA_1's ``created_at`` runs backwards, so only id order gives its original order.
    """
    scenario = Scenario(legacy_ids={pair: [] for pair in LEGACY})
    apps = migrator.migrate(MESSAGE_LOG)
    LegacyMessage = apps.get_model(APP, "Message")
    longest = max(len(rows) for rows in LEGACY.values())
    for index in range(longest):
        for pair, rows in LEGACY.items():
            if index >= len(rows):
                continue
            role, source, text = rows[index]
            step = -index if pair == ALPHA_1 else index
            row = LegacyMessage.objects.create(
                agent_id=pair[0],
                scope=pair[1],
                role=role,
                source=source,
                content=_text(text),
                created_at=BASE_TIME + timedelta(minutes=step),
            )
            scenario.legacy_ids[pair].append(row.pk)

    apps = migrator.migrate(SESSIONS)
    HistSession = apps.get_model(APP, "Session")
    HistMessage = apps.get_model(APP, "Message")
    # BETA_1 already has a default with organic messages and deliberately wrong counters.
    beta = HistSession.objects.create(
        agent_id=BETA_1[0],
        scope=BETA_1[1],
        title="Beta main",
        is_default=True,
        message_count=42,
        last_message="stale preview",
        last_seq=BETA_LAST_SEQ,
    )
    scenario.beta_default = beta.pk
    for seq in BETA_ORGANIC_SEQS:
        row = HistMessage.objects.create(
            session=beta,
            agent_id=beta.agent_id,
            scope=beta.scope,
            seq=seq,
            role="assistant" if seq % 2 == 0 else "user",
            source="host" if seq % 2 == 0 else "user",
            content=_text(f"b organic {seq}"),
        )
        scenario.beta_organic_ids.append(row.pk)
    # ALPHA_1 has an organic session that is not the default: it must stay as it is.
    side = HistSession.objects.create(
        agent_id=ALPHA_1[0],
        scope=ALPHA_1[1],
        title="Side thread",
        message_count=1,
        last_message="side message",
        last_seq=1,
    )
    scenario.side_session = side.pk
    scenario.side_message_id = HistMessage.objects.create(
        session=side,
        agent_id=side.agent_id,
        scope=side.scope,
        seq=1,
        role="user",
        source="user",
        content=_text("side message"),
    ).pk
    return scenario


def snapshot(apps: Any) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Every column of every session and message, in a stable order."""
    sessions = apps.get_model(APP, "Session").objects.order_by("pk").values()
    messages = apps.get_model(APP, "Message").objects.order_by("pk").values()
    return list(sessions), list(messages)


def assert_backfilled(apps: Any, scenario: Scenario) -> None:
    """The state docs/design.md §4 demands after the backfill, for the scenario of ``write_scenario``."""
    HistSession = apps.get_model(APP, "Session")
    HistMessage = apps.get_model(APP, "Message")
    assert not HistMessage.objects.filter(session__isnull=True).exists()
    assert (
        HistMessage.objects.count() == sum(map(len, LEGACY.values())) + len(BETA_ORGANIC_SEQS) + 1
    )
    assert HistSession.objects.count() == len(LEGACY) + 1  # one default per pair + side thread

    for pair, legacy_ids in scenario.legacy_ids.items():
        defaults = list(
            HistSession.objects.filter(agent_id=pair[0], scope=pair[1], is_default=True)
        )
        assert len(defaults) == 1, pair
        default = defaults[0]
        attached = list(
            HistMessage.objects.filter(session=default).order_by("seq").values_list("pk", "seq")
        )
        if pair == BETA_1:
            assert default.pk == scenario.beta_default
            assert default.title == "Beta main"
            assert default.backfilled_by == ""
            legacy_seqs = list(range(BETA_LAST_SEQ + 1, BETA_LAST_SEQ + 1 + len(legacy_ids)))
            expected = [
                *zip(scenario.beta_organic_ids, BETA_ORGANIC_SEQS, strict=True),
                *zip(legacy_ids, legacy_seqs, strict=True),
            ]
        else:
            assert default.title == "Default"
            assert default.backfilled_by == MARKER
            expected = list(zip(legacy_ids, range(1, len(legacy_ids) + 1), strict=True))
        assert attached == expected, pair
        assert default.message_count == len(expected), pair
        assert default.last_seq == expected[-1][1], pair
        assert default.last_message == EXPECTED_LAST_MESSAGE[pair], pair

    side = HistSession.objects.get(pk=scenario.side_session)
    assert (side.title, side.is_default, side.backfilled_by) == ("Side thread", False, "")
    assert (side.message_count, side.last_message, side.last_seq) == (1, "side message", 1)
    assert list(HistMessage.objects.filter(session=side).values_list("pk", "seq")) == [
        (scenario.side_message_id, 1)
    ]


@pytest.mark.django_db(transaction=True)
def test_migration_0003_gives_each_pair_one_default_with_ordered_messages_and_exact_counters(
    migrator,
):
    scenario = write_scenario(migrator)

    apps = migrator.migrate(migrator.latest)

    assert_backfilled(apps, scenario)


@pytest.mark.django_db(transaction=True)
def test_backfill_with_small_batches_gives_the_same_result(migrator):
    scenario = write_scenario(migrator)
    apps = migrator.migrate(SESSIONS)
    batches: list[str] = []

    report = backfill_default_sessions(
        session_model=apps.get_model(APP, "Session"),
        message_model=apps.get_model(APP, "Message"),
        batch_size=3,
        progress=batches.append,
    )

    # ALPHA_1 (6 rows) and BETA_1 (5) take two batches of 3 each, the other six pairs one.
    assert report == BackfillReport(pairs=8, sessions_created=7, messages_attached=21, batches=10)
    assert len(batches) == 10
    assert_backfilled(apps, scenario)
    # Migrating forward now runs 0003 over already-backfilled data: nothing left to do.
    assert_backfilled(migrator.migrate(migrator.latest), scenario)


@pytest.mark.django_db(transaction=True)
def test_rerunning_the_backfill_changes_nothing(migrator):
    write_scenario(migrator)
    apps = migrator.migrate(migrator.latest)
    before = snapshot(apps)

    report = backfill_default_sessions(session_model=Session, message_model=Message)
    migration = importlib.import_module(f"{APP}.migrations.{MARKER}")
    migration.forward(apps, SimpleNamespace(connection=connection))

    assert report == BackfillReport()
    assert snapshot(apps) == before


@pytest.mark.django_db(transaction=True)
def test_reverse_detaches_and_deletes_only_backfilled_sessions_and_loses_no_message(migrator):
    scenario = write_scenario(migrator)
    migrator.migrate(migrator.latest)
    # After the backfill the host keeps using a backfilled default: that message must survive.
    alpha_default = Session.objects.get(agent_id=ALPHA_1[0], scope=ALPHA_1[1], is_default=True)
    appended = services.append_messages(
        scope=ALPHA_1[1], session_id=alpha_default.pk, messages=[{"role": "user", "content": "hi"}]
    ).messages[0]
    organic = {scenario.beta_default, scenario.side_session}
    organic_sessions = list(Session.objects.filter(pk__in=organic).order_by("pk").values())
    organic_messages = list(
        Message.objects.filter(session__in=organic)
        .order_by("pk")
        .values_list("pk", "session", "seq")
    )
    message_count = Message.objects.count()

    apps = migrator.migrate(SESSIONS)

    HistSession = apps.get_model(APP, "Session")
    HistMessage = apps.get_model(APP, "Message")
    assert HistMessage.objects.count() == message_count
    # Compared on the columns 0002 has (later migrations add some, e.g. default_flag).
    columns = [field.attname for field in HistSession._meta.concrete_fields]
    assert list(HistSession.objects.order_by("pk").values()) == [
        {column: row[column] for column in columns} for row in organic_sessions
    ]
    assert (
        list(
            HistMessage.objects.filter(session__isnull=False)
            .order_by("pk")
            .values_list("pk", "session", "seq")
        )
        == organic_messages
    )
    detached = {pk for pair, ids in scenario.legacy_ids.items() if pair != BETA_1 for pk in ids} | {
        appended.pk
    }
    assert (
        set(
            HistMessage.objects.filter(session__isnull=True, seq__isnull=True).values_list(
                "pk", flat=True
            )
        )
        == detached
    )


@pytest.mark.django_db(transaction=True)
def test_reverse_then_forward_again_restores_the_backfilled_state(migrator):
    scenario = write_scenario(migrator)
    migrator.migrate(migrator.latest)
    migrator.migrate(SESSIONS)

    apps = migrator.migrate(migrator.latest)

    assert_backfilled(apps, scenario)


# -- batches and queries ---------------------------------------------------------------------------


def _backfill_counting_queries(rows: int) -> tuple[BackfillReport, list[int], int]:
    """Backfill ``rows`` legacy rows of one pair with ``batch_size=3``.

    Returns the report, the number of queries run by each batch after the first (between two
    progress calls), and the total number of queries.
    """
    MessageFactory.create_batch(rows, session=None, seq=None)
    marks: list[int] = []
    with CaptureQueriesContext(connection) as queries:
        report = backfill_default_sessions(
            session_model=Session,
            message_model=Message,
            batch_size=3,
            progress=lambda line: marks.append(len(queries.captured_queries)),
        )
    per_batch = [after - before for before, after in pairwise(marks)]
    return report, per_batch, len(queries.captured_queries)


@pytest.mark.django_db(transaction=True)
def test_backfill_runs_a_constant_number_of_queries_per_batch():
    small, small_per_batch, small_total = _backfill_counting_queries(12)
    Message.objects.all().delete()
    Session.objects.all().delete()

    large, large_per_batch, large_total = _backfill_counting_queries(24)

    assert (small.batches, large.batches) == (4, 8)
    assert (small.messages_attached, large.messages_attached) == (12, 24)
    per_batch = set(small_per_batch) | set(large_per_batch)
    assert len(per_batch) == 1, per_batch  # the same for every batch and both sizes
    (queries_per_batch,) = per_batch
    # BEGIN, lock the session, attach the next ids (one set-based UPDATE on every database),
    # read the batch's newest conversation text, move the counters, COMMIT.
    assert queries_per_batch == 6
    # Doubling the rows adds exactly four more batches' worth of queries: no hidden per-row work.
    assert large_total - small_total == 4 * queries_per_batch


@pytest.mark.django_db(transaction=True)
def test_backfill_reads_legacy_rows_a_batch_at_a_time():
    MessageFactory.create_batch(7, session=None, seq=None)

    with CaptureQueriesContext(connection) as queries:
        backfill_default_sessions(session_model=Session, message_model=Message, batch_size=3)

    legacy_reads = [
        q["sql"]
        for q in queries.captured_queries
        if q["sql"].startswith(("SELECT", "UPDATE"))
        and f"{connection.ops.quote_name('session_id')} IS NULL" in q["sql"]
        and "MIN(" not in q["sql"]  # the pair's first created_at: one aggregate row
    ]
    assert len(legacy_reads) >= 3  # pages of pairs, and batches of messages attached
    assert all("LIMIT 3" in sql for sql in legacy_reads), legacy_reads


# -- last_message rules ---------------------------------------------------------------------------


def _legacy(text: str, role: str = "user", source: str = "user", **kwargs: Any) -> Message:
    return MessageFactory(
        session=None, seq=None, role=role, source=source, content=_text(text), **kwargs
    )


def _backfilled_default() -> Session:
    backfill_default_sessions(session_model=Session, message_model=Message, batch_size=2)
    return Session.objects.get(is_default=True)


@pytest.mark.django_db
@override_settings(CORTEX_SESSIONS={"LAST_MESSAGE_PREVIEW_CHARS": 10})
def test_backfilled_last_message_is_cut_to_preview_chars_with_an_ellipsis():
    _legacy("short one")
    _legacy("0123456789abcdef", role="assistant", source="host")

    assert _backfilled_default().last_message == "0123456789…"


@pytest.mark.django_db
@override_settings(CORTEX_SESSIONS={"LAST_MESSAGE_PREVIEW_CHARS": 10})
def test_backfilled_last_message_of_exactly_preview_chars_is_not_cut():
    _legacy("0123456789")

    assert _backfilled_default().last_message == "0123456789"


@pytest.mark.parametrize(
    ("role", "source", "content"),
    [
        pytest.param("tool", "host", _text("tool result"), id="tool"),
        pytest.param("system", "host", _text("system prompt"), id="system"),
        pytest.param("user", "host", _text("injected by the host"), id="host-injected-user"),
        pytest.param("user", "session-reference", _text("snapshot"), id="reference-context"),
        pytest.param("assistant", "host", _text("   \n "), id="blank-assistant-text"),
        pytest.param("assistant", "host", [{"type": "tool_use", "id": "t1"}], id="no-text-block"),
    ],
)
@pytest.mark.django_db
def test_backfilled_last_message_skips_messages_that_are_not_conversation_text(
    role, source, content
):
    _legacy("question")
    _legacy("the answer", role="assistant", source="host")
    MessageFactory.create_batch(
        3, session=None, seq=None, role=role, source=source, content=content
    )

    assert _backfilled_default().last_message == "the answer"


@pytest.mark.parametrize(
    ("role", "source"),
    [("user", "user"), ("user", "checkpoint"), ("assistant", "host"), ("assistant", "user")],
)
@pytest.mark.django_db
def test_backfilled_last_message_is_the_newest_conversation_message(role, source):
    _legacy("older", role="assistant", source="host")
    _legacy("newest", role=role, source=source)
    _legacy("tool noise", role="tool", source="host")

    assert _backfilled_default().last_message == "newest"


# -- interrupted runs -----------------------------------------------------------------------------


class Interrupted(Exception):
    pass


#: After each batch of 3 rows of the scenario below: (rows attached, expected last_message).
AFTER_BATCH = {1: (3, "follow-up"), 2: (6, "final answer")}


def _six_legacy_rows() -> None:
    _legacy("question")
    _legacy("answer", role="assistant", source="host")
    _legacy("follow-up")
    _legacy("final answer", role="assistant", source="host")
    _legacy("tool output", role="tool", source="host")
    _legacy("host note", source="host")


def _existing_default_with_drifted_counters() -> Session:
    session = services.create_session(scope="org=acme/user=1", agent_id="agent-1", is_default=True)
    services.append_messages(
        scope=session.scope,
        session_id=session.pk,
        messages=[{"role": "user", "content": "organic 1"}, {"role": "user", "content": "o 2"}],
    )
    Session.objects.filter(pk=session.pk).update(message_count=42, last_message="stale")
    return session


@pytest.mark.parametrize("pre_existing", [0, 2], ids=["created", "pre-existing-default"])
@pytest.mark.parametrize("interrupt_after_batch", [1, 2])
@pytest.mark.django_db(transaction=True)
def test_an_interrupted_backfill_leaves_exact_counters_and_completes_when_run_again(
    interrupt_after_batch, pre_existing
):
    if pre_existing:
        _existing_default_with_drifted_counters()
    _six_legacy_rows()
    batches: list[str] = []

    def progress(line: str) -> None:
        batches.append(line)
        if len(batches) == interrupt_after_batch:
            raise Interrupted

    with pytest.raises(Interrupted):
        backfill_default_sessions(
            session_model=Session, message_model=Message, batch_size=3, progress=progress
        )
    session = Session.objects.get(is_default=True)
    attached, last_message = AFTER_BATCH[interrupt_after_batch]
    assert session.message_count == pre_existing + attached == session.messages.count()
    assert session.last_message == last_message

    backfill_default_sessions(session_model=Session, message_model=Message, batch_size=3)

    session.refresh_from_db()
    seqs = list(session.messages.order_by("seq").values_list("seq", flat=True))
    assert seqs == list(range(1, pre_existing + 7))
    assert (session.message_count, session.last_seq) == (pre_existing + 6, pre_existing + 6)
    assert session.last_message == "final answer"


@pytest.mark.django_db
def test_a_backfilled_default_is_dated_by_its_oldest_legacy_message():
    oldest = datetime(2020, 5, 1, tzinfo=UTC)
    _legacy("second", created_at=oldest + timedelta(days=1))
    _legacy("first", created_at=oldest)

    assert _backfilled_default().created_at == oldest


@pytest.mark.django_db(transaction=True)
def test_migrating_back_below_0010_keeps_agents_that_differ_by_case_or_a_trailing_space(migrator):
    """MySQL's DDL is not transactional: a reverse of 0010 that made ``agent_id`` case-folding
    again failed on ``Bot``/``bot`` imports after it had dropped the one-default index, and left
    a schema neither ``migrate`` direction could repair. The columns are exact from 0001 on, so
    the reverse never touches them (docs/design.md §15.2)."""
    agents = ["Bot", "bot", "bot "]
    for agent_id in agents:
        session = Session.objects.create(agent_id=agent_id, scope="org=x", is_default=True)
        ImportedConversation.objects.create(
            session=session, agent_id=agent_id, scope="org=x", external_id="c1"
        )

    apps = migrator.migrate("0009_session_recent_index_with_scope")

    HistSession = apps.get_model(APP, "Session")
    HistImport = apps.get_model(APP, "ImportedConversation")
    assert sorted(HistSession.objects.values_list("agent_id", flat=True)) == sorted(agents)
    assert HistImport.objects.filter(agent_id="bot").count() == 1
    migrator.migrate(migrator.latest)
    for agent_id in agents:
        session, created = services.resolve_session(scope="org=x", agent_id=agent_id)
        assert (session.agent_id, created) == (agent_id, False)
    assert services.resolve_session(scope="org=y", agent_id="bot")[1] is True


def _append_function_exists() -> bool:
    """Whether the function the code calls exists (``_pg.APPEND_ONE``). 0013's to 0015's
    never do at either end of these tests: below 0013 they were not made yet, and at the
    latest migration 0018 has dropped them (or the squash never made them)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_proc WHERE proname IN ('cortex_sessions_append_one',"
            " 'cortex_sessions_append_one_v2', 'cortex_sessions_append_one_v3')"
        )
        assert cursor.fetchone()[0] == 0
        cursor.execute("SELECT count(*) FROM pg_proc WHERE proname = %s", [_pg.APPEND_ONE])
        return bool(cursor.fetchone()[0])


def _append_one(session_id: Any, text: str) -> int:
    result = services.append_messages(
        scope="org=x", session_id=session_id, messages=[{"role": "user", "content": text}]
    )
    return result.messages[0].seq


@pytest.mark.postgres_only
@pytest.mark.django_db(transaction=True)
def test_0013_backward_drops_the_append_function_and_forward_restores_appends(migrator):
    """0013 on PostgreSQL through the executor, on a session with messages: back to 0012 the
    function is gone (this code needs the columns of later migrations, so it is not called
    there), forward it is back and appends continue the session's seqs."""
    session = services.create_session(scope="org=x", agent_id="a")
    assert [_append_one(session.pk, text) for text in ("one", "two")] == [1, 2]
    services.append_messages(
        scope="org=x",
        session_id=session.pk,
        messages=[{"role": "user", "content": "3"}, {"role": "user", "content": "4"}],
    )

    migrator.migrate("0012_message_search")
    assert not _append_function_exists()

    migrator.migrate(migrator.latest)
    assert _append_function_exists()
    assert _append_one(session.pk, "five") == 5
    stored = Session.objects.get(pk=session.pk)
    assert (stored.message_count, stored.last_seq, stored.last_message) == (5, 5, "five")


@pytest.mark.postgres_only
@pytest.mark.django_db(transaction=True)
def test_migrating_to_zero_drops_the_append_function_and_forward_creates_it(migrator):
    services.create_session(scope="org=x", agent_id="a")
    MigrationExecutor(connection).migrate([(APP, None)])  # migrate cortex_sessions zero
    assert not _append_function_exists()
    migrator.migrate(migrator.latest)
    assert _append_function_exists()
    session = services.create_session(scope="org=x", agent_id="a")
    assert [_append_one(session.pk, text) for text in ("one", "two")] == [1, 2]
