"""The hot paths: one statement each on PostgreSQL, the same results as the ORM path
(docs/design.md §14).

The statement counts are pinned on PostgreSQL (the hand-written SQL of ``services/_pg.py``);
on other databases the ORM path runs and the behaviour tests below hold as they are. The
``orm_path`` fixture forces the ORM path on PostgreSQL too, so the two paths are compared on
the same database.
"""

from __future__ import annotations

import importlib
import uuid
from datetime import UTC, datetime
from decimal import Decimal

import pytest
from django.apps import apps as django_apps
from django.db import connection, models
from django.db.models.signals import post_migrate
from django.test import override_settings
from django.test.utils import CaptureQueriesContext

from cortex_sessions import services, signals
from cortex_sessions.exceptions import InvalidInput, InvalidScope, NoScope, SessionNotFound
from cortex_sessions.models import Message, Session
from cortex_sessions.services import _pg, _pg_run
from tests.pg_support import prepared_statements

pytestmark = pytest.mark.django_db

SCOPE = "org=acme/user=alice"
on_postgresql = pytest.mark.skipif(
    not _pg.enabled("default"),
    reason="the hand-written SQL serves PostgreSQL through psycopg 3 only",
)


def statements(captured: CaptureQueriesContext) -> list[str]:
    """The statements of a capture, without transaction control."""
    control = ("BEGIN", "COMMIT", "ROLLBACK", "SAVEPOINT", "RELEASE")
    return [q["sql"] for q in captured.captured_queries if not q["sql"].startswith(control)]


@pytest.fixture(params=["sql", "sql-prepared", "orm"])
def path(request, monkeypatch):
    """Run a test on the vendor's path ("sql": hand-written SQL on PostgreSQL, the ORM
    elsewhere), on the same SQL prepared ("sql-prepared": ``PREPARED_STATEMENTS``, a
    server-binding cursor), and on the ORM path."""
    if request.param == "orm":
        monkeypatch.setattr(_pg, "enabled", lambda alias: False)
        return "orm"
    if not _pg.enabled("default"):
        pytest.skip("the hand-written SQL serves PostgreSQL through psycopg 3 only")
    if request.param == "sql-prepared":
        prepared = override_settings(CORTEX_SESSIONS={"PREPARED_STATEMENTS": True})
        prepared.enable()
        request.addfinalizer(prepared.disable)
    return "sql"


@pytest.fixture
def session():
    return services.create_session(scope=SCOPE, agent_id="agent-1", title="t", metadata={"a": 1})


def _fields(instance) -> dict:
    return {f.attname: getattr(instance, f.attname) for f in type(instance)._meta.concrete_fields}


# -- one statement each ---------------------------------------------------------------------------


@pytest.mark.skipif(connection.vendor != "postgresql", reason="PostgreSQL's drivers")
def test_under_psycopg_2_the_orm_path_serves_postgresql(monkeypatch):
    """The hot paths use psycopg 3's server-side binding, loaders and connection state; under
    psycopg 2 (Django's driver only when psycopg 3 is missing) the ORM path serves."""
    from django.db.backends.postgresql import psycopg_any

    _pg.enabled.cache_clear()
    try:
        assert _pg.enabled("default") is psycopg_any.is_psycopg3
        _pg.enabled.cache_clear()
        monkeypatch.setattr(psycopg_any, "is_psycopg3", False)
        assert _pg.enabled("default") is False
    finally:
        _pg.enabled.cache_clear()


@on_postgresql
def test_append_is_one_statement(session):
    with CaptureQueriesContext(connection) as captured:
        services.append_messages(
            scope="org=acme", session_id=session.pk, messages=[{"role": "user", "content": "hi"}]
        )
    (statement,) = statements(captured)
    # One message: a call of the function whose plan the server keeps (§14.1).
    assert statement.startswith(f"SELECT {_pg.APPEND_ONE}(")


# -- the append function ----------------------------------------------------------------------------


def _migration_0013():
    return importlib.import_module("cortex_sessions.migrations.0013_append_one_function")


def _migration_0014():
    return importlib.import_module("cortex_sessions.migrations.0014_append_one_narrow_row")


def _migration_0015():
    return importlib.import_module(
        "cortex_sessions.migrations.0015_append_one_monotonic_updated_at"
    )


def _migration_0020():
    """The migration that holds the functions as the code describes them today."""
    return importlib.import_module("cortex_sessions.migrations.0020_retention")


def _signature(drop: str) -> str:
    """The function a ``DROP FUNCTION IF EXISTS`` statement names, with its argument types."""
    return drop.removeprefix("DROP FUNCTION IF EXISTS ")


def _function_result(signature: str | None = None) -> str | None:
    """The result type of the function ``signature`` (default: the one the code calls), or
    ``None`` when there is none."""
    signature = signature or _signature(_pg.function_sql(_pg.APPEND_ONE)[1])
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_get_function_result(to_regprocedure(%s))", [signature])
        return cursor.fetchone()[0]


def _function_exists(signature: str | None = None) -> bool:
    return _function_result(signature) is not None


#: The result type of the function the code calls: the narrow row as one value.
NARROW = "text[]"

#: Every function the code calls (but 0024's :data:`_pg.APPEND_MANY`, tested on its own).
FUNCTIONS = (_pg.APPEND_ONE, _pg.GET, _pg.RESOLVE)


@on_postgresql
def test_the_migration_creates_the_functions_the_code_calls():
    """The latest migration's frozen SQL is what the code describes today: a change to the
    session's columns or to a statement needs a migration that replaces the function."""
    migration = _migration_0020()
    assert _pg.function_sql(_pg.APPEND_ONE) == (
        migration.CREATE_APPEND_ONE,
        migration.DROP_APPEND_ONE,
    )
    assert _pg.function_sql(_pg.GET) == (migration.CREATE_GET, migration.DROP_GET)
    assert _pg.function_sql(_pg.RESOLVE) == (migration.CREATE_RESOLVE, migration.DROP_RESOLVE)
    for name in FUNCTIONS:  # the test database was migrated
        assert _function_result(_signature(_pg.function_sql(name)[1])) == NARROW


#: The functions of the earlier migrations (0013 to 0015), which 0018 drops before the release;
#: the squashed migrations never create them.
EARLIER = tuple(
    _signature(migration().DROP)
    for migration in (_migration_0013, _migration_0014, _migration_0015)
)


def _previous_functions() -> list[str]:
    """The functions 0020 replaces (0019_context_window's append, get and resolve)."""
    return [_signature(drop) for drop in _migration_0020()._previous()[1]]


def _run_0020(*, forwards: bool) -> None:
    """0020's function operation forward or backward (its columns stay)."""
    operation = _migration_0020()._functions()
    with connection.schema_editor() as editor:
        if forwards:
            operation.database_forwards("cortex_sessions", editor, None, None)
        else:
            operation.database_backwards("cortex_sessions", editor, None, None)


@on_postgresql
def test_0020_replaces_the_functions_and_backward_restores_the_previous_ones(session):
    """Each version of a function has a name of its own, so 0020 backward drops only its own
    and creates 0019's again, and forward the reverse; the pre-release versions
    are not on a migrated database (0018 drops them)."""
    current = [_signature(_pg.function_sql(name)[1]) for name in FUNCTIONS]
    assert _pg.APPEND_ONE.endswith("_v6") and not any(map(_function_exists, EARLIER))
    assert all(map(_function_exists, current))
    assert not any(map(_function_exists, _previous_functions()))
    _run_0020(forwards=False)
    assert not any(map(_function_exists, current))
    assert all(map(_function_exists, _previous_functions()))
    _run_0020(forwards=True)
    assert all(map(_function_exists, current))
    assert not any(map(_function_exists, _previous_functions() + list(EARLIER)))


def _migration(name: str):
    return importlib.import_module(f"cortex_sessions.migrations.{name}")


def _run(name: str, *, forwards: bool) -> None:
    """Migration ``name``'s ``RunSQL`` forward or backward (on PostgreSQL, as its
    ``OnVendors`` runs it)."""
    ((operation,),) = (on.database_operations for on in _migration(name).Migration.operations)
    with connection.schema_editor() as editor:
        if forwards:
            operation.database_forwards("cortex_sessions", editor, None, None)
        else:
            operation.database_backwards("cortex_sessions", editor, None, None)


#: The migrations of the multi-message append: ``_v1``, then ``_v2`` (the messages as jsonb).
APPEND_MANY_V1, APPEND_MANY_V2 = "0022_append_many_function", "0024_append_many_jsonb"


@on_postgresql
def test_0024_creates_the_append_many_function_the_code_calls_and_backward_drops_it(session):
    current, previous = _migration(APPEND_MANY_V2), _migration(APPEND_MANY_V1)
    create, drop = _pg.function_sql(_pg.APPEND_MANY)
    assert (create, drop) == (current.CREATE_APPEND_MANY, current.DROP_APPEND_MANY)
    assert _pg.APPEND_MANY.endswith("_v2") and "jsonb_array_elements" in create
    assert _function_result(_signature(drop)) == NARROW
    # 0022's v1 stays for code of the previous release while this release rolls out
    assert _function_result(_signature(previous.DROP_APPEND_MANY)) == NARROW
    _run(APPEND_MANY_V2, forwards=False)
    assert not _function_exists(_signature(drop))
    assert _function_exists(_signature(previous.DROP_APPEND_MANY))
    assert _function_exists()  # the one-message append's is 0020's
    _run(APPEND_MANY_V2, forwards=True)
    assert _function_result(_signature(drop)) == NARROW


@on_postgresql
@pytest.mark.django_db(transaction=True)
def test_this_code_on_a_database_without_0024_writes_nothing_of_a_many_message_append():
    from django.db import ProgrammingError

    session = services.create_session(scope=SCOPE, agent_id="agent-1")
    two = [{"role": "user", "content": "x"}, {"role": "assistant", "content": "y"}]
    _run(APPEND_MANY_V2, forwards=False)
    try:
        with pytest.raises(ProgrammingError, match="does not exist"):
            services.append_messages(scope=SCOPE, session_id=session.pk, messages=two)
        stored = Session.objects.get(pk=session.pk)
        assert (stored.message_count, stored.last_seq) == (0, 0)
        assert not Message.objects.filter(session=session).exists()
    finally:
        _run(APPEND_MANY_V2, forwards=True)
    result = services.append_messages(scope=SCOPE, session_id=session.pk, messages=two)
    assert [m.seq for m in result.messages] == [1, 2]


@on_postgresql
@pytest.mark.django_db(transaction=True)
def test_this_code_on_a_database_without_0020_writes_nothing():
    # New code deployed before `migrate`: the call is refused at parse time, before the
    # function would write (an append runs in autocommit, so writing and then failing would
    # store a message the caller was told failed).
    from django.db import ProgrammingError

    session = services.create_session(scope=SCOPE, agent_id="agent-1")
    _run_0020(forwards=False)
    try:
        with pytest.raises(ProgrammingError, match="does not exist"):
            services.append_messages(
                scope=SCOPE, session_id=session.pk, messages=[{"role": "user", "content": "x"}]
            )
        stored = Session.objects.get(pk=session.pk)
        assert (stored.message_count, stored.last_seq) == (0, 0)
        assert not Message.objects.filter(session=session).exists()
    finally:
        _run_0020(forwards=True)
    result = services.append_messages(
        scope=SCOPE, session_id=session.pk, messages=[{"role": "user", "content": "y"}]
    )
    assert result.messages[0].seq == 1
    assert services.get_session(scope="org=acme", session_id=session.pk).pk == session.pk
    assert services.resolve_session(scope=SCOPE, agent_id="agent-1")[1] is True


@on_postgresql
def test_migrations_disabled_the_function_comes_from_post_migrate(session):
    """With this app's migrations disabled (pytest-django ``--nomigrations``, ``TEST["MIGRATE"]
    = False``), ``post_migrate`` creates the function the migration would have; with them
    enabled it leaves the function to the migration. DDL is transactional: the test's
    rollback restores the function."""
    config = django_apps.get_app_config("cortex_sessions")
    every = (*FUNCTIONS, _pg.APPEND_MANY)
    signatures = [_signature(_pg.function_sql(name)[1]) for name in every]
    with connection.cursor() as cursor:
        for name in every:
            cursor.execute(_pg.function_sql(name)[1])
    with override_settings(MIGRATION_MODULES={}):  # enabled, even under --nomigrations
        post_migrate.send(sender=config, app_config=config, using="default", verbosity=0)
    assert not any(map(_function_exists, signatures))
    with override_settings(MIGRATION_MODULES={"cortex_sessions": None}):
        post_migrate.send(sender=config, app_config=config, using="default", verbosity=0)
    assert all(map(_function_exists, signatures))
    result = services.append_messages(
        scope=SCOPE, session_id=session.pk, messages=[{"role": "user", "content": "hi"}]
    )
    assert [m.seq for m in result.messages] == [1]
    assert result.session.message_count == 1
    assert services.get_session(scope=SCOPE, session_id=session.pk).message_count == 1
    assert services.resolve_session(scope=SCOPE, agent_id="agent-1")[1] is True


@on_postgresql
@pytest.mark.parametrize("count", [2, 25])
def test_append_of_many_messages_is_one_call_of_the_function(session, count):
    # Two or more messages: a call of the function whose plan the server keeps (§14.1), not
    # a statement planned on every call; the counters move by exactly the messages.
    with CaptureQueriesContext(connection) as captured:
        result = services.append_messages(
            scope=SCOPE,
            session_id=session.pk,
            messages=[{"role": "user", "content": str(n)} for n in range(count)],
        )
    (statement,) = statements(captured)
    assert statement.startswith(f"SELECT {_pg.APPEND_MANY}(")
    stored = list(Message.objects.order_by("seq").values_list("pk", "seq", "content"))
    expected = [[{"type": "text", "text": str(n)}] for n in range(count)]
    assert [(m.pk, m.seq, m.content) for m in result.messages] == stored
    assert [seq for _, seq, _ in stored] == list(range(1, count + 1))
    assert [content for _, _, content in stored] == expected
    row = Session.objects.get(pk=session.pk)
    assert (row.message_count, row.last_seq, row.last_message) == (count, count, str(count - 1))
    assert _fields(result.session) == _fields(row)


@on_postgresql
@pytest.mark.parametrize(
    "bounds", [{}, {"after_seq": 2}, {"before_seq": 4}, {"after_seq": 1, "before_seq": 5}]
)
def test_newest_messages_is_one_statement(session, bounds):
    services.append_messages(
        scope=SCOPE, session_id=session.pk, messages=[{"role": "user", "content": "x"}] * 5
    )
    with CaptureQueriesContext(connection) as captured:
        services.list_messages(scope="org=acme", session_id=session.pk, limit=2, **bounds)
    assert len(statements(captured)) == 1


@on_postgresql
def test_get_and_resolve_are_one_statement_each(session):
    default, _ = services.resolve_session(scope=SCOPE, agent_id="agent-1")
    with CaptureQueriesContext(connection) as captured:
        services.get_session(scope="org=acme", session_id=session.pk)
        services.get_session(scope="org=acme", session_id=session.pk, agent_id="agent-1")
        services.resolve_session(scope=SCOPE, agent_id="agent-1")
        services.resolve_session(scope=SCOPE, agent_id="agent-1", session_id=default.pk)
    # Each a call of the function whose plan the server keeps (§14.1).
    calls = [_pg.GET, _pg.GET, _pg.RESOLVE, _pg.GET]
    assert [text.split("(")[0] for text in statements(captured)] == [
        f"SELECT {name}" for name in calls
    ]


@on_postgresql
@override_settings(CORTEX_SESSIONS={"PREPARED_STATEMENTS": True})
def test_prepared_statements_keep_one_statement_and_the_same_results(session):
    for _ in range(3):  # prepared on the first call, executed from the cache after
        with CaptureQueriesContext(connection) as captured:
            result = services.append_messages(
                scope=SCOPE, session_id=session.pk, messages=[{"role": "user", "content": "p"}]
            )
            page = services.list_messages(scope=SCOPE, session_id=session.pk, limit=2)
            got = services.get_session(scope=SCOPE, session_id=session.pk)
        assert len(statements(captured)) == 3
    prepared = prepared_statements()
    for name in (_pg.APPEND_ONE, _pg.GET):
        assert any(text.startswith(f"SELECT {name}(") for text in prepared)
    assert result.session.message_count == 3
    assert [m.seq for m in page] == [2, 3]
    assert page[-1].content == [{"type": "text", "text": "p"}]
    assert _fields(got) == _fields(Session.objects.get(pk=session.pk))
    with pytest.raises(SessionNotFound):
        services.get_session(scope="org=other", session_id=session.pk)


# -- both paths give the same results -------------------------------------------------------------


def test_append_returns_what_is_stored(path, session, django_capture_on_commit_callbacks):
    received = []

    def receiver(sender, session, messages, **kwargs):
        received.append((session.pk, [m.seq for m in messages]))

    signals.messages_appended.connect(receiver)
    try:
        with django_capture_on_commit_callbacks(execute=True):
            result = services.append_messages(
                scope="org=acme",
                session_id=str(session.pk),
                messages=[
                    {"role": "user", "content": "a", "metadata": {"k": [1, "x"]}},
                    {"role": "tool", "content": [{"type": "json", "data": {"n": 1}}]},
                ],
            )
    finally:
        signals.messages_appended.disconnect(receiver)
    assert _fields(result.session) == _fields(Session.objects.get(pk=session.pk))
    assert result.session.last_message == "a"
    assert not result.session._state.adding
    for message in result.messages:
        assert _fields(message) == _fields(Message.objects.get(pk=message.pk))
        assert not message._state.adding
        assert message.session is result.session
    assert received == [(session.pk, [1, 2])]


def test_a_many_message_append_stores_every_value_as_given(path, session):
    # The PostgreSQL function takes the messages as one JSON text: text that needs escaping
    # in JSON and in SQL, usage on one message and not the other, a created_at in another
    # offset (with seconds, and microseconds) and one before year 1000 (where MariaDB's
    # DATETIME starts), all stored as given.
    from datetime import timedelta, timezone

    offset = timezone(timedelta(hours=5, minutes=30, seconds=15))
    early = datetime(5 if connection.vendor != "mysql" else 1000, 1, 1, tzinfo=UTC)
    text = "q\"uo\\te' \\u0041 {[,]} \u2028 é 😀 NULL \\N\n\t end"
    messages = [
        {
            "role": "user",
            "content": text,
            "metadata": {'k"ey': ["v\\", 1.5, None, True], "": {}},
            "created_at": datetime(2024, 2, 3, 4, 5, 6, 789, tzinfo=offset),
        },
        {
            "role": "assistant",
            "source": "host",
            "content": [{"type": "text", "text": text}, {"type": "json", "data": {"a": [text]}}],
            "usage": {"input_tokens": 3, "output_tokens": 4, "cost": "0.25", "model": 'm"\\'},
            "created_at": early,
        },
        {"role": "tool", "content": "plain"},
    ]
    result = services.append_messages(scope=SCOPE, session_id=session.pk, messages=messages)
    stored = list(Message.objects.filter(session=session).order_by("seq"))
    assert [_fields(m) for m in result.messages] == [_fields(m) for m in stored]
    first, second, third = stored
    assert first.content == [{"type": "text", "text": text}]
    assert first.metadata == {'k"ey': ["v\\", 1.5, None, True], "": {}}
    assert first.created_at == datetime(2024, 2, 3, 4, 5, 6, 789, tzinfo=offset)
    assert (first.usage, second.created_at) == (None, early)
    assert second.content[1] == {"type": "json", "data": {"a": [text]}}
    assert second.usage == result.messages[1].usage and second.usage["input_tokens"] == 3
    assert (second.source, third.role, third.usage) == ("host", "tool", None)
    # no usage is SQL NULL, not a JSON null (which reads back as None too)
    no_usage = Message.objects.filter(session=session, usage__isnull=True)
    assert sorted(no_usage.values_list("seq", flat=True)) == [1, 3]
    row = Session.objects.get(pk=session.pk)
    assert _fields(result.session) == _fields(row)
    assert (row.message_count, row.last_seq, row.input_tokens, row.output_tokens) == (3, 3, 3, 4)
    assert (row.cost, row.last_message) == (Decimal("0.25"), text)


@pytest.mark.parametrize("messages", [1, 2], ids=["one message", "two messages"])
def test_append_returns_every_field_as_stored(path, messages):
    # Every kind of session field, null and not (a one-message append reads them back from
    # one text array on PostgreSQL, _pg._narrow_session): a default, forked session with a
    # cwd, an escaped scope, nested metadata and text that needs quoting in an array.
    scope = "org=a%2Fb/user=al%3Dice"
    source = services.create_session(scope=scope, agent_id="agent-1")
    services.append_messages(
        scope=scope, session_id=source.pk, messages=[{"role": "user", "content": "x"}]
    )
    fork = services.fork_session(
        scope=scope,
        session_id=source.pk,
        up_to_seq=1,
        title='Ti"tle, {with} \\ commas ☃',
        metadata={"k": [1, 2.5, None, True, {"n": "é"}], "": "empty key"},
    )
    services.make_default(scope=scope, session_id=fork.pk)
    services.update_session(scope=scope, session_id=fork.pk, cwd='/tmp/a b,"c"')
    text = 'last, "quoted" {braces} \\ NULL\nnewline'
    result = services.append_messages(
        scope=scope, session_id=fork.pk, messages=[{"role": "user", "content": text}] * messages
    )
    stored = Session.objects.get(pk=fork.pk)
    assert _fields(result.session) == _fields(stored)
    assert stored.forked_from == source.pk and stored.forked_at_seq == 1 and stored.is_default
    assert stored.last_message == text and stored.message_count == 1 + messages
    assert result.session.default_flag == stored.default_flag


def test_append_keeps_last_message_when_no_conversation_text(path, session):
    services.append_messages(
        scope=SCOPE, session_id=session.pk, messages=[{"role": "assistant", "content": "kept"}]
    )
    result = services.append_messages(
        scope=SCOPE, session_id=session.pk, messages=[{"role": "tool", "content": "out"}]
    )
    assert result.session.last_message == "kept"
    assert Session.objects.get(pk=session.pk).last_message == "kept"


@pytest.mark.parametrize(
    ("scope", "session_id", "error"),
    [
        ("org=other", None, SessionNotFound),
        ("org=acme/user=bob", None, SessionNotFound),
        ("org=ac", None, SessionNotFound),  # a string prefix is not a scope prefix
        (SCOPE, "not-a-uuid", SessionNotFound),
        (SCOPE, uuid.UUID(int=7), SessionNotFound),
        ("", None, NoScope),
        ("org", None, InvalidScope),
    ],
)
def test_out_of_scope_or_missing_is_refused_and_writes_nothing(
    path, session, scope, session_id, error
):
    target = session.pk if session_id is None else session_id
    with pytest.raises(error):
        services.append_messages(
            scope=scope, session_id=target, messages=[{"role": "user", "content": "x"}]
        )
    with pytest.raises(error):
        services.list_messages(scope=scope, session_id=target)
    with pytest.raises(error):
        services.get_session(scope=scope, session_id=target)
    assert not Message.objects.exists()
    assert Session.objects.get(pk=session.pk).message_count == 0


def test_newest_messages_pages_alike(path, session):
    services.append_messages(
        scope=SCOPE,
        session_id=session.pk,
        messages=[{"role": "user", "content": str(n)} for n in range(1, 8)],
    )

    def seqs(**kwargs):
        return [
            m.seq for m in services.list_messages(scope="org=acme", session_id=session.pk, **kwargs)
        ]

    assert seqs(limit=3) == [5, 6, 7]
    assert seqs(limit=3, after_seq=2) == [3, 4, 5]
    assert seqs(limit=3, before_seq=4) == [1, 2, 3]
    assert seqs(limit=10, after_seq=2, before_seq=6) == [3, 4, 5]
    assert seqs(limit=2, after_seq=2, before_seq=6) == [4, 5]
    assert seqs(limit=3, after_seq=7) == []
    page = services.list_messages(scope=SCOPE, session_id=session.pk, limit=1)
    assert _fields(page[0]) == _fields(Message.objects.get(seq=7))
    assert page[0].content == [{"type": "text", "text": "7"}]


def test_newest_messages_of_an_empty_session_is_an_empty_page(path, session):
    assert services.list_messages(scope=SCOPE, session_id=session.pk) == []


def test_get_and_resolve_return_the_stored_row(path, session):
    assert _fields(services.get_session(scope="org=acme", session_id=session.pk)) == _fields(
        Session.objects.get(pk=session.pk)
    )
    with pytest.raises(SessionNotFound):
        services.get_session(scope=SCOPE, session_id=session.pk, agent_id="agent-2")
    created, was_created = services.resolve_session(scope=SCOPE, agent_id="agent-1")
    again, again_created = services.resolve_session(scope=SCOPE, agent_id="agent-1")
    assert (was_created, again_created) == (True, False)
    assert _fields(again) == _fields(created)
    assert again.metadata == {} and session.metadata == {"a": 1}


def _loaded_as(instance) -> dict:
    """Every concrete field's value with its type, and a datetime's tzinfo, offset and fold
    (two naive wall times of a repeated hour compare equal, their folds do not)."""
    values = {}
    for field in type(instance)._meta.concrete_fields:
        value = getattr(instance, field.attname)
        zone = (value.tzinfo, value.utcoffset(), value.fold) if isinstance(value, datetime) else ()
        values[field.attname] = (value, type(value), zone)
    return values


@pytest.mark.parametrize(
    "settings",
    [{}, {"TIME_ZONE": "Europe/Paris"}, {"USE_TZ": False, "TIME_ZONE": "Europe/Paris"}],
    ids=["UTC", "Paris", "USE_TZ False"],
)
def test_get_and_resolve_load_every_field_as_the_orm_does(path, settings):
    """Every column set, of every type, read back from the read functions' text (one array
    on PostgreSQL, ``_pg._session_values``) exactly as the ORM loads the row: timestamps in
    the hour Paris repeats (the second time), at an offset in seconds (Paris mean time, 1900)
    and in year 1; text that quoting or an array's syntax would trip on."""
    source = services.create_session(scope=SCOPE, agent_id="agent-1")
    default, _ = services.resolve_session(scope=SCOPE, agent_id="agent-1")
    text = 'quote " comma , brace { NULL \\ back\u2028é'
    Session.objects.filter(pk=default.pk).update(
        title=text,
        metadata={"n": [1, 2.5, None, True, {"k": text}], "": {}},
        cwd=text,
        last_message=text,
        message_count=3,
        last_seq=4,
        backfilled_by="0006_backfill_default_sessions",
        created_at=datetime(2026, 10, 25, 1, 30, tzinfo=UTC),
        updated_at=datetime(1900, 1, 1, 12, tzinfo=UTC),
        forked_from=source.pk,
        forked_at_seq=0,
    )
    Session.objects.filter(pk=source.pk).update(
        created_at=datetime(1, 1, 2, tzinfo=UTC),
        archived_at=datetime(2026, 10, 25, 0, 30, tzinfo=UTC),
    )
    with override_settings(**settings):
        for pk in (default.pk, source.pk):
            stored = Session.objects.get(pk=pk)
            got = services.get_session(scope="org=acme", session_id=pk)
            of_agent = services.get_session(scope=SCOPE, session_id=pk, agent_id="agent-1")
            assert _loaded_as(got) == _loaded_as(of_agent) == _loaded_as(stored)
            assert (got._state.db, got._state.adding) == ("default", False)
        resolved, created = services.resolve_session(scope=SCOPE, agent_id="agent-1")
        assert created is False
        assert _loaded_as(resolved) == _loaded_as(Session.objects.get(pk=default.pk))
    if path == "sql" and settings.get("USE_TZ") is False:  # SQLite keeps no zone
        assert (resolved.created_at.hour, resolved.created_at.fold) == (2, 1)


def test_timestamps_carry_the_orms_time_zone(path, session):
    # The hand-written path parses timestamps with psycopg's own loader and sets the time
    # zone as Django's loader does: the same tzinfo object, not merely an equal instant.
    result = services.append_messages(
        scope=SCOPE, session_id=session.pk, messages=[{"role": "user", "content": "t"}]
    )
    stored_session = Session.objects.get(pk=session.pk)
    stored_message = Message.objects.get(session=session)
    (page,) = services.list_messages(scope=SCOPE, session_id=session.pk)
    got = services.get_session(scope=SCOPE, session_id=session.pk)
    for name in ("created_at", "updated_at"):
        expected = getattr(stored_session, name)
        assert getattr(got, name) == expected
        assert getattr(got, name).tzinfo is expected.tzinfo
        assert getattr(result.session, name).tzinfo is expected.tzinfo
    assert page.created_at == stored_message.created_at
    assert page.created_at.tzinfo is stored_message.created_at.tzinfo
    with override_settings(USE_TZ=False):  # naive datetimes, as the ORM returns them then
        (naive_page,) = services.list_messages(scope=SCOPE, session_id=session.pk)
        naive_session = services.get_session(scope=SCOPE, session_id=session.pk)
        assert naive_page.created_at == Message.objects.get(session=session).created_at
        assert naive_page.created_at.tzinfo is None
        assert naive_session.updated_at == Session.objects.get(pk=session.pk).updated_at
        assert naive_session.updated_at.tzinfo is None


def test_an_append_takes_any_sequence_of_mappings_or_message_inputs(path, session):
    # A list of dicts skips the ABC checks; other sequences and mappings take them, alike.
    from types import MappingProxyType

    result = services.append_messages(
        scope=SCOPE,
        session_id=session.pk,
        messages=(
            MappingProxyType({"role": "user", "content": "one"}),
            services.MessageInput(role="assistant", content="two"),
        ),
    )
    assert [(m.seq, m.role, m.content[0]["text"]) for m in result.messages] == [
        (1, "user", "one"),
        (2, "assistant", "two"),
    ]
    for messages in ({"role": "user", "content": "x"}, MappingProxyType({}), 42, None):
        with pytest.raises(InvalidInput, match="must be a list"):
            services.append_messages(scope=SCOPE, session_id=session.pk, messages=messages)
    assert Session.objects.get(pk=session.pk).message_count == 2


@pytest.mark.parametrize("zone", ["America/Chicago", "Europe/Paris"])
def test_an_append_under_use_tz_false_returns_naive_local_times(path, session, zone):
    # created_at in the hour Paris repeats, the second time: naive values compare equal
    # whatever their fold, so the fold is compared too (timestamp() and make_aware read it).
    Session.objects.filter(pk=session.pk).update(
        created_at=datetime(2026, 10, 25, 1, 30, tzinfo=UTC)
    )
    with override_settings(USE_TZ=False, TIME_ZONE=zone):
        result = services.append_messages(
            scope=SCOPE, session_id=session.pk, messages=[{"role": "user", "content": "t"}]
        )
        stored = Session.objects.get(pk=session.pk)
    for name in ("created_at", "updated_at"):
        got, expected = getattr(result.session, name), getattr(stored, name)
        assert (got, got.tzinfo, got.fold) == (expected, None, expected.fold)
    # psycopg 3's loader sets the fold (SQLite keeps no zone; psycopg 2 sets no fold).
    if zone == "Europe/Paris" and _pg.enabled("default"):
        assert (result.session.created_at.hour, result.session.created_at.fold) == (2, 1)


#: A session zone a host may ``SET`` and an instant in the hour it repeats, the second time
#: (``fold`` 1); Tokyo repeats none. London writes that instant as ``+00``, as UTC does.
_REPEATED_HOURS = {
    "America/New_York": datetime(2026, 11, 1, 6, 30, tzinfo=UTC),  # 01:30 EST
    "Europe/London": datetime(2026, 10, 25, 1, 30, tzinfo=UTC),  # 01:30 GMT
    "Asia/Tokyo": datetime(2026, 11, 1, 6, 30, tzinfo=UTC),
}


@on_postgresql
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("session_zone", sorted(_REPEATED_HOURS))
@pytest.mark.parametrize(
    "settings",
    [{}, {"USE_TZ": False, "TIME_ZONE": None}, {"USE_TZ": False, "TIME_ZONE": "Europe/Paris"}],
    ids=["UTC", "USE_TZ False, no TIME_ZONE", "USE_TZ False, Paris"],
)
def test_the_hot_paths_read_timestamps_as_the_orm_in_any_session_zone(settings, session_zone):
    """Django sets the session's ``TimeZone`` to its own zone, except with ``USE_TZ = False``
    and ``TIME_ZONE = None`` (the server's zone stays), and a host may ``SET TIME ZONE``
    itself, after the hot paths have run on the connection: whatever the session's zone,
    get, resolve and both appends (the function and the statement) return the values the ORM
    loads in the same transaction (psycopg's loader reads into the session's zone, then
    Django's relabels), ``fold`` included. The session was created in the zone's repeated
    hour, the second time."""
    from django.db import transaction

    session = services.create_session(scope=SCOPE, agent_id="agent-1")
    Session.objects.filter(pk=session.pk).update(
        is_default=True, created_at=_REPEATED_HOURS[session_zone]
    )
    two = [{"role": "user", "content": "x"}, {"role": "assistant", "content": "y"}]
    with override_settings(**settings), transaction.atomic():
        # The hot paths once in Django's zone first, the statement last: cursors kept from
        # then on are reused, and psycopg's loader reuses its zone for the same statement.
        services.get_session(scope=SCOPE, session_id=session.pk)
        services.append_messages(scope=SCOPE, session_id=session.pk, messages=two)
        with connection.cursor() as cursor:
            cursor.execute(f"SET LOCAL TIME ZONE '{session_zone}'")
        for messages in (two, two[:1]):
            result = services.append_messages(
                scope=SCOPE, session_id=str(session.pk), messages=messages
            )  # (an id given as a UUID subclass would be returned as given)
            assert _loaded_as(result.session) == _loaded_as(Session.objects.get(pk=session.pk))
        got = services.get_session(scope="org=acme", session_id=session.pk)
        assert _loaded_as(got) == _loaded_as(Session.objects.get(pk=session.pk))
        resolved, created = services.resolve_session(scope=SCOPE, agent_id="agent-1")
        assert created is False
        assert _loaded_as(resolved) == _loaded_as(Session.objects.get(pk=session.pk))
        if session_zone != "Asia/Tokyo" and settings.get("TIME_ZONE", "UTC"):
            assert got.created_at.fold == 1  # what the comparisons above had to tell apart


@on_postgresql
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("session_zone", sorted(_REPEATED_HOURS))
def test_a_hook_that_sets_the_time_zone_before_the_statement_is_read_as_by_the_orm(session_zone):
    """An ``execute_wrapper`` hook runs between the hot path's choice of cursor and its
    statement: one that sets the session's time zone there (once the hot paths have kept
    cursors made in UTC) still gets the values the ORM loads after it."""
    from django.db import transaction

    session = services.create_session(scope=SCOPE, agent_id="agent-1")
    Session.objects.filter(pk=session.pk).update(
        is_default=True, created_at=_REPEATED_HOURS[session_zone]
    )
    two = [{"role": "user", "content": "x"}, {"role": "assistant", "content": "y"}]

    def sets_the_zone(execute, sql, params, many, context):
        context["connection"].connection.execute(f"SET LOCAL TIME ZONE '{session_zone}'")
        return execute(sql, params, many, context)

    with transaction.atomic():
        # Cursors kept in UTC, the statement that reads timestamp columns last (psycopg keeps
        # the loaders of a cursor's last result).
        services.get_session(scope=SCOPE, session_id=session.pk)
        services.append_messages(scope=SCOPE, session_id=session.pk, messages=two[:1])
        services.append_messages(scope=SCOPE, session_id=session.pk, messages=two)
        with connection.execute_wrapper(sets_the_zone):
            for messages in (two, two[:1]):
                result = services.append_messages(
                    scope=SCOPE, session_id=str(session.pk), messages=messages
                )  # (an id given as a UUID subclass would be returned as given)
                assert _loaded_as(result.session) == _loaded_as(Session.objects.get(pk=session.pk))
            got = services.get_session(scope=SCOPE, session_id=session.pk)
            assert _loaded_as(got) == _loaded_as(Session.objects.get(pk=session.pk))
            resolved, _ = services.resolve_session(scope=SCOPE, agent_id="agent-1")
            assert _loaded_as(resolved) == _loaded_as(Session.objects.get(pk=session.pk))
        with connection.cursor() as cursor:
            cursor.execute("SHOW TIME ZONE")
            assert cursor.fetchone()[0] == session_zone  # the hook did set it


@on_postgresql
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("session_zone", sorted(_REPEATED_HOURS))
def test_a_hook_that_sets_the_time_zone_after_the_statement_changes_no_value(session_zone):
    """Psycopg reads a result's timestamps in the zone the session has when the result
    arrives, inside the hooks: an ORM query under a hook that sets the zone after the
    statement loads the values of the zone before. Every hot path returns what that ORM query
    loads (the ones that read a text array as much as those psycopg's loaders read)."""
    from django.db import transaction

    session = services.create_session(scope=SCOPE, agent_id="agent-1")
    Session.objects.filter(pk=session.pk).update(
        is_default=True, created_at=_REPEATED_HOURS[session_zone]
    )
    two = [{"role": "user", "content": "x"}, {"role": "assistant", "content": "y"}]

    def sets_the_zone_after(execute, sql, params, many, context):
        try:
            return execute(sql, params, many, context)
        finally:
            context["connection"].connection.execute(f"SET LOCAL TIME ZONE '{session_zone}'")

    def in_utc_under_the_hook(call):
        connection.connection.execute("SET LOCAL TIME ZONE 'UTC'")  # no hook sees it
        with connection.execute_wrapper(sets_the_zone_after):
            return call()

    def orm():
        return in_utc_under_the_hook(lambda: Session.objects.get(pk=session.pk))

    with transaction.atomic():
        services.get_session(scope=SCOPE, session_id=session.pk)  # cursors kept in UTC
        services.append_messages(scope=SCOPE, session_id=session.pk, messages=two)
        for messages in (two, two[:1]):
            result = in_utc_under_the_hook(
                lambda messages=messages: services.append_messages(
                    scope=SCOPE, session_id=str(session.pk), messages=messages
                )
            )  # (an id given as a UUID subclass would be returned as given)
            assert _loaded_as(result.session) == _loaded_as(orm())
        got = in_utc_under_the_hook(
            lambda: services.get_session(scope=SCOPE, session_id=session.pk)
        )
        assert _loaded_as(got) == _loaded_as(orm())
        resolved, _ = in_utc_under_the_hook(
            lambda: services.resolve_session(scope=SCOPE, agent_id="agent-1")
        )
        assert _loaded_as(resolved) == _loaded_as(orm())
        with connection.cursor() as cursor:
            cursor.execute("SHOW TIME ZONE")
            assert cursor.fetchone()[0] == session_zone  # the hook did set it


@on_postgresql
@pytest.mark.parametrize(
    "instant",
    [
        "2026-10-25 00:30:00+00",  # 02:30 in Paris, the first time (fold 0)
        "2026-10-25 01:30:00+00",  # 02:30 in Paris again (fold 1)
        "1900-01-01 12:00:00+00",  # Paris mean time: an offset of 9 minutes 21 seconds
        "0001-01-01 00:00:00+00",
    ],
)
def test_a_timestamp_read_from_its_text_is_the_one_read_from_its_column(instant):
    """The append's narrow row carries the session's timestamps as text (``::text`` in the
    session's time zone); read back they are the values Django's loader makes of the column,
    in a time zone with a fold and an offset in seconds too."""
    from zoneinfo import ZoneInfo

    zone = ZoneInfo("Europe/Paris")
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL TIME ZONE 'Europe/Paris'")
        cursor.execute("SELECT %s::timestamptz, %s::timestamptz::text", [instant, instant])
        column, text = cursor.fetchone()
    expected = column.replace(tzinfo=zone)  # Django's loader: the connection's time zone
    got = _pg_run.datetime_text(text, zone, zone)
    assert (got, got.utcoffset(), got.fold, got.tzinfo) == (
        expected,
        expected.utcoffset(),
        expected.fold,
        zone,
    )
    naive = _pg_run.datetime_text(text, None, zone)  # USE_TZ = False
    assert (naive, naive.tzinfo, naive.fold) == (expected.replace(tzinfo=None), None, expected.fold)


@on_postgresql
@pytest.mark.parametrize("instant", ["0001-01-01 00:00:00+00", "9999-12-31 23:59:59+00"])
def test_a_timestamp_python_cannot_hold_is_a_data_error_as_from_the_column(instant):
    """Year 1 in New York is 1 BC and 9999 in Tokyo is year 10000: PostgreSQL writes both, no
    ``datetime`` holds them. Read from the column, Django raises ``DataError`` (psycopg's
    loader); read from the text of a function's array, the same class."""
    from django.db import DataError

    zone = "America/New_York" if instant.startswith("0001") else "Asia/Tokyo"
    with connection.cursor() as cursor:
        cursor.execute(f"SET LOCAL TIME ZONE '{zone}'")
        cursor.execute("SELECT %s::timestamptz::text", [instant])
        (text,) = cursor.fetchone()
        with pytest.raises(DataError):
            cursor.execute("SELECT %s::timestamptz", [instant])
            cursor.fetchone()
    from zoneinfo import ZoneInfo

    for timezone in (ZoneInfo(zone), None):
        with pytest.raises(DataError, match="out of Python's range"):
            _pg_run.datetime_text(text, timezone, ZoneInfo(zone))


@pytest.mark.parametrize("count", [1, 2])  # the function (one message) and the statement
@override_settings(TIME_ZONE="America/Chicago")
def test_a_naive_created_at_is_read_in_the_default_time_zone_on_both_paths(path, session, count):
    # As the ORM saves a naive datetime with USE_TZ: a RuntimeWarning, then the default time
    # zone (not the connection's UTC); the returned message holds the instant stored.
    naive = datetime(2024, 1, 2, 3, 4, 5)
    with pytest.warns(RuntimeWarning, match="naive datetime") as warned:
        result = services.append_messages(
            scope=SCOPE,
            session_id=session.pk,
            messages=[{"role": "user", "content": "x", "created_at": naive}] * count,
        )
    assert len(warned) == count
    expected = datetime(2024, 1, 2, 9, 4, 5, tzinfo=UTC)  # 03:04:05 in Chicago in January
    for message in result.messages:
        assert message.created_at == expected
        assert Message.objects.get(pk=message.pk).created_at == expected


def test_init_receivers_see_every_instance(path, session):
    # Instances are built without Model.__init__ only while no pre_init/post_init receiver
    # listens; with one connected, every instance the services return went through it.
    seen: list = []

    def receiver(sender, instance, **kwargs):
        seen.append(instance)

    models.signals.post_init.connect(receiver, sender=Message)
    models.signals.post_init.connect(receiver, sender=Session)
    try:
        result = services.append_messages(
            scope=SCOPE,
            session_id=session.pk,
            messages=[{"role": "user", "content": "a"}, {"role": "user", "content": "b"}],
        )
        page = services.list_messages(scope=SCOPE, session_id=session.pk)
        got = services.get_session(scope=SCOPE, session_id=session.pk)
    finally:
        models.signals.post_init.disconnect(receiver, sender=Message)
        models.signals.post_init.disconnect(receiver, sender=Session)
    for instance in [result.session, *result.messages, *page, got]:
        assert any(instance is other for other in seen)
    assert [m.seq for m in page] == [1, 2]
    assert not page[0]._state.adding and page[0]._state.db == "default"


def test_empty_metadata_is_a_new_dict_for_each_message(path, session):
    services.append_messages(
        scope=SCOPE, session_id=session.pk, messages=[{"role": "user", "content": "x"}] * 2
    )
    first, second = services.list_messages(scope=SCOPE, session_id=session.pk)
    assert first.metadata == {} and second.metadata == {}
    first.metadata["k"] = 1
    assert second.metadata == {}
    assert services.list_messages(scope=SCOPE, session_id=session.pk)[0].metadata == {}


# -- on Django's cursor ---------------------------------------------------------------------------


@on_postgresql
def test_every_hot_path_runs_under_the_hosts_execute_wrapper(session):
    seen: list[str] = []

    def wrapper(execute, sql, params, many, context):
        seen.append(sql.split("(")[0])
        return execute(sql, params, many, context)

    services.resolve_session(scope=SCOPE, agent_id="agent-1")  # creates the default
    with connection.execute_wrapper(wrapper):
        services.append_messages(
            scope=SCOPE, session_id=session.pk, messages=[{"role": "user", "content": "a"}]
        )
        services.get_session(scope=SCOPE, session_id=session.pk)
        services.resolve_session(scope=SCOPE, agent_id="agent-1")
        services.list_messages(scope=SCOPE, session_id=session.pk)
    assert seen[:3] == [f"SELECT {name}" for name in (_pg.APPEND_ONE, _pg.GET, _pg.RESOLVE)]
    assert seen[3].startswith("SELECT ") and len(seen) == 4


@on_postgresql
def test_a_statement_run_by_an_execute_wrapper_gets_its_own_rows(session):
    # A hook that runs another hot-path statement after the append's statement, before the
    # append has fetched its row: both calls see their own rows.
    other = services.create_session(scope=SCOPE, agent_id="agent-2", title="other")
    seen: list = []
    nested = []

    def wrapper(execute, sql, params, many, context):
        result = execute(sql, params, many, context)
        if not nested:  # once, and not for its own statement
            nested.append(True)
            seen.append(services.get_session(scope=SCOPE, session_id=other.pk))
        return result

    with connection.execute_wrapper(wrapper):
        result = services.append_messages(
            scope=SCOPE, session_id=session.pk, messages=[{"role": "user", "content": "a"}]
        )
    assert result.session.pk == session.pk and result.messages[0].seq == 1
    assert seen[0].pk == other.pk and seen[0].title == "other"


@on_postgresql
def test_a_statement_run_by_a_query_log_handler_gets_its_own_rows(session):
    # A log handler of ``django.db.backends`` runs after the append's statement, before its row
    # is fetched: a hot path it calls must not overwrite that row.
    import logging

    from django.test.utils import CaptureQueriesContext

    other = services.create_session(scope=SCOPE, agent_id="agent-2", title="other")
    seen: list = []

    class Reads(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if not seen:  # once, and not for its own statement
                seen.append(None)
                seen[0] = services.get_session(scope=SCOPE, session_id=other.pk)

    logger, handler = logging.getLogger("django.db.backends"), Reads()
    level = logger.level
    logger.setLevel(logging.DEBUG)  # (setLevel: the logger caches isEnabledFor)
    logger.addHandler(handler)
    try:
        with CaptureQueriesContext(connection):
            result = services.append_messages(
                scope=SCOPE, session_id=session.pk, messages=[{"role": "user", "content": "a"}]
            )
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
    assert result.session.pk == session.pk and result.messages[0].seq == 1
    assert seen[0].pk == other.pk and seen[0].title == "other"


@on_postgresql
@pytest.mark.django_db(transaction=True)
def test_an_append_inside_a_transaction_rolls_back_with_it():
    from django.db import transaction

    session = services.create_session(scope=SCOPE, agent_id="agent-1")
    with pytest.raises(RuntimeError), transaction.atomic():
        for text in ("a", "b"):
            services.append_messages(
                scope=SCOPE, session_id=session.pk, messages=[{"role": "user", "content": text}]
            )
        raise RuntimeError("roll back")
    assert Session.objects.get(pk=session.pk).message_count == 0
    assert not Message.objects.filter(session=session).exists()


@on_postgresql
@pytest.mark.django_db(transaction=True)
def test_a_refused_statement_raises_djangos_error_and_the_connection_goes_on():
    from django.db import DataError

    session = services.create_session(scope=SCOPE, agent_id="agent-1")
    with pytest.raises(DataError) as caught:
        # A statement the server refuses (the services send only parsed UUIDs).
        _pg.get_session("default", canonical=SCOPE, session_id="not-a-uuid", agent_id=None)
    assert caught.value.__cause__.sqlstate == "22P02"  # psycopg's class, as from a cursor
    assert services.get_session(scope=SCOPE, session_id=session.pk).pk == session.pk


@pytest.mark.skipif(
    not _pg.enabled("default"),
    reason="a PostgreSQL setting, which psycopg 2 (and the ORM with it) does not follow when SET",
)
def test_a_host_set_client_encoding_reaches_every_path(path, session):
    # psycopg's dumpers and loaders take the connection's encoding when they are made; after a
    # host's ``SET client_encoding`` the kept cursors are made again, so text is stored and
    # read as the ORM stores and reads it (not UTF-8 bytes sent as LATIN1: "cafÃ©").
    services.resolve_session(scope=SCOPE, agent_id="agent-1")  # the default, made now if need be
    Session.objects.filter(agent_id="agent-1").update(title="café ü")
    services.append_messages(  # the kept cursors exist, made under UTF8
        scope=SCOPE, session_id=session.pk, messages=[{"role": "user", "content": "a"}]
    )
    with connection.cursor() as cursor:
        cursor.execute("SET client_encoding TO 'LATIN1'")
    try:
        for count in (1, 2):
            result = services.append_messages(
                scope=SCOPE,
                session_id=session.pk,
                messages=[{"role": "user", "content": "café"}] * count,
            )
            assert result.session.last_message == "café"
        got = services.get_session(scope=SCOPE, session_id=session.pk)
        resolved, _ = services.resolve_session(scope=SCOPE, agent_id="agent-1")
        stored = Session.objects.get(pk=session.pk)
        texts = [m.content[0]["text"] for m in Message.objects.filter(session=session)]
    finally:
        with connection.cursor() as cursor:
            cursor.execute("SET client_encoding TO 'UTF8'")
    assert got.title == resolved.title == stored.title == "café ü"
    assert stored.last_message == "café" and texts == ["a", "café", "café", "café"]


@on_postgresql
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("encoding", ["SJIS", "EUC_JP", "BIG5", "SQL_ASCII"])
def test_a_session_in_another_client_encoding_takes_the_orm_path(encoding):
    # The hot paths send JSON text and read a text[] of the session: under SJIS or BIG5 a
    # second byte 0x5C is read as a backslash, under EUC_JP "¥" is one; SQL_ASCII returns
    # bytes. Until the host sets UTF8 back, the ORM serves (Django's adapters).
    title, text, metadata = "ソフト表示 許功蓋", "¥n ソ", {"k": "a‾b"}
    session = services.create_session(scope=SCOPE, agent_id="agent-1", title=title)
    with connection.cursor() as cursor:
        cursor.execute(f"SET client_encoding TO '{encoding}'")
    try:
        assert not _pg.serves("default")
        services.get_session(scope=SCOPE, session_id=session.pk)
        services.resolve_session(scope=SCOPE, agent_id="agent-1")
        for count in (1, 2):
            services.append_messages(
                scope=SCOPE,
                session_id=session.pk,
                messages=[{"role": "tool", "content": text, "metadata": metadata}] * count,
            )
    finally:
        with connection.cursor() as cursor:
            cursor.execute("SET client_encoding TO 'UTF8'")
    assert _pg.serves("default")
    stored = Session.objects.get(pk=session.pk)
    assert (stored.title, stored.message_count) == (title, 3)
    for message in Message.objects.filter(session=session):
        assert (message.content[0]["text"], message.metadata) == (text, metadata)


@on_postgresql
@pytest.mark.django_db(transaction=True)
def test_a_session_with_a_non_iso_datestyle_takes_the_orm_path():
    # The hot paths read timestamps from their ISO text; psycopg reads no other DateStyle.
    # The ORM path refuses it before writing (psycopg's loader), so nothing is written.
    session = services.create_session(scope=SCOPE, agent_id="agent-1")
    with connection.cursor() as cursor:
        cursor.execute("SET DateStyle TO 'German'")
    try:
        assert not _pg.serves("default")
        with pytest.raises(Exception):  # noqa: B017 - psycopg's, whatever the version says
            services.append_messages(
                scope=SCOPE, session_id=session.pk, messages=[{"role": "user", "content": "a"}]
            )
    finally:
        with connection.cursor() as cursor:
            cursor.execute("SET DateStyle TO 'ISO'")
    assert Session.objects.get(pk=session.pk).message_count == 0
    assert not Message.objects.filter(session=session).exists()


@on_postgresql
@pytest.mark.django_db(transaction=True)
def test_a_connection_closed_behind_djangos_back_raises_djangos_error():
    from django.db import OperationalError

    session = services.create_session(scope=SCOPE, agent_id="agent-1")
    services.get_session(scope=SCOPE, session_id=session.pk)  # the kept cursors exist
    connection.connection.close()
    try:
        with pytest.raises(OperationalError):  # Django's, as the ORM raises it
            services.get_session(scope=SCOPE, session_id=session.pk)
    finally:
        connection.close()
    assert services.get_session(scope=SCOPE, session_id=session.pk).pk == session.pk


@on_postgresql
def test_a_broken_transaction_refuses_the_hot_path_as_it_refuses_the_orm(session):
    from django.db import transaction
    from django.db.transaction import TransactionManagementError

    with transaction.atomic():
        transaction.set_rollback(True)
        assert not connection.queries_logged and not connection.execute_wrappers
        with pytest.raises(TransactionManagementError):
            services.append_messages(
                scope=SCOPE, session_id=session.pk, messages=[{"role": "user", "content": "a"}]
            )
        with pytest.raises(TransactionManagementError):
            Session.objects.get(pk=session.pk)
    assert Session.objects.get(pk=session.pk).message_count == 0


@pytest.mark.parametrize("count", [1, 2])
def test_an_append_never_moves_a_later_updated_at_back(path, session, count):
    # A row's updated_at ahead of this process's clock (another server's clock, a write that
    # committed while this append waited for the lock) is kept, on both paths alike.
    from datetime import timedelta

    ahead = session.updated_at + timedelta(hours=1)
    Session.objects.filter(pk=session.pk).update(updated_at=ahead)
    messages = [{"role": "user", "content": f"m{n}"} for n in range(count)]
    result = services.append_messages(scope=SCOPE, session_id=session.pk, messages=messages)
    assert result.session.updated_at == ahead == Session.objects.get(pk=session.pk).updated_at
