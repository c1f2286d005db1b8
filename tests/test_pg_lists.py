"""Session lists and counts in one hand-written statement on PostgreSQL (``services/_pg_lists.py``,
docs/design.md §7.2, §14): the same sessions, order, values, cursors and counts as the ORM path,
on many filter combinations, orderings and page bounds.

The ORM path is forced by making :func:`._pg_lists.handles` false, so both paths run on the same
database and rows; on other databases the ORM path serves and the tests that compare the two
are skipped.
"""

from __future__ import annotations

from contextlib import contextmanager, nullcontext
from datetime import timedelta
from decimal import Decimal

import pytest
from django.db import connections
from django.test import override_settings
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cortex_sessions import services
from cortex_sessions.exceptions import InvalidFilter, InvalidScope, NoScope
from cortex_sessions.models import Session
from cortex_sessions.services import SessionFilters, _pg, _pg_lists
from cortex_sessions.services import keyset as keyset_module
from cortex_sessions.services import sessions as sessions_module

pytestmark = pytest.mark.django_db

on_postgresql = pytest.mark.skipif(
    not _pg.enabled("default"),
    reason="the hand-written SQL serves PostgreSQL through psycopg 3 only",
)

SCOPES = ["org=a", "org=a/project=x", "org=a/project=x/user=u", "org=ab", "org=a-x", "org=b"]
AGENTS = ["agent-1", "agent-2", "agent-3"]
TITLES = ["Billing", "billing report", "50% off", "a_b", "a\\b", "", "BILLING", "x"]


@pytest.fixture
def rows():
    """Sessions over sibling and nested scopes, with ties on every sort key, titles holding
    ``%``, ``_`` and ``\\``, defaults, archived and expired sessions."""
    moment = timezone.now().replace(microsecond=123456)
    made = []
    for n in range(48):
        made.append(
            Session(
                agent_id=AGENTS[n % 3],
                scope=SCOPES[n % len(SCOPES)],
                title=TITLES[n % len(TITLES)],
                metadata={"n": n % 4, "tag": "x" if n % 2 else None},
                cwd=None if n % 3 else f"/w/{n}",
                message_count=n % 5,
                last_message="" if n % 2 else f"m{n}",
                is_default=n in (0, 4, 8, 13),
                created_at=moment - timedelta(seconds=n % 7),
                updated_at=moment - timedelta(seconds=n % 4),
                archived_at=moment if n % 9 == 0 else None,
                input_tokens=n % 3,
                output_tokens=(n * 7) % 5,
                cost=Decimal(n % 4) / Decimal(1000),
                context_tokens=n % 6,
                expires_at=(
                    moment - timedelta(days=1)
                    if n % 11 == 5
                    else (moment + timedelta(days=1) if n % 5 == 1 else None)
                ),
            )
        )
    return Session.objects.bulk_create(made)


@contextmanager
def orm_path():
    """Force the ORM path (``_pg_lists.handles`` false) inside the block."""
    real = _pg_lists.handles
    _pg_lists.handles = lambda alias, filters: False
    try:
        yield
    finally:
        _pg_lists.handles = real


def snapshot(sessions) -> list[tuple]:
    """Every concrete value of each session, with its ``_state``-visible loading facts."""
    return [
        (
            tuple(getattr(s, f.attname) for f in Session._meta.concrete_fields),
            s._state.db,
            s._state.adding,
            tuple(type(getattr(s, f.attname)) for f in Session._meta.concrete_fields),
        )
        for s in sessions
    ]


ORDERINGS = [None, *services.ORDERING_FIELDS, *(f"-{name}" for name in services.ORDERING_FIELDS)]
filters_strategy = st.builds(
    SessionFilters,
    agent_id=st.sampled_from([None, *AGENTS]),
    exact=st.booleans(),
    default_only=st.booleans(),
    search=st.sampled_from([None, "", "billing", "BIL", "%", "_", "\\", "a_b", "0%", "zz"]),
    archived=st.sampled_from([False, True, None]),
)
hypothesis_settings = settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


@on_postgresql
@hypothesis_settings
@given(
    scope=st.sampled_from(SCOPES),
    filters=filters_strategy,
    ordering=st.sampled_from(ORDERINGS),
    limit=st.sampled_from([None, 0, 1, 3, 7, 50]),
    offset=st.sampled_from([0, 1, 4, 20]),
)
def test_a_list_is_the_orm_paths(rows, scope, filters, ordering, limit, offset):
    kwargs = {"scope": scope, "filters": filters, "ordering": ordering}
    fast = services.list_sessions(**kwargs, limit=limit, offset=offset)
    with orm_path():
        slow = services.list_sessions(**kwargs, limit=limit, offset=offset)
    assert snapshot(fast) == snapshot(slow)


@on_postgresql
@hypothesis_settings
@given(scope=st.sampled_from(SCOPES), filters=filters_strategy)
def test_a_count_is_the_orm_paths(rows, scope, filters):
    fast = services.count_sessions(scope=scope, filters=filters)
    with orm_path():
        slow = services.count_sessions(scope=scope, filters=filters)
    assert fast == slow
    assert fast == len(services.list_sessions(scope=scope, filters=filters))


def walk(scope, filters, ordering, limit):
    """Every page forward from the first, then back from the last: the pages' rows and cursors."""
    pages, cursor = [], None
    while True:
        page = services.list_sessions_page(
            scope=scope, filters=filters, ordering=ordering, limit=limit, cursor=cursor
        )
        pages.append((snapshot(page.results), page.next_cursor, page.previous_cursor))
        cursor = page.next_cursor
        if cursor is None:
            break
    cursor = pages[-1][2]
    while cursor is not None:
        page = services.list_sessions_page(
            scope=scope, filters=filters, ordering=ordering, limit=limit, cursor=cursor
        )
        pages.append((snapshot(page.results), page.next_cursor, page.previous_cursor))
        cursor = page.previous_cursor
    return pages


@on_postgresql
@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    scope=st.sampled_from(SCOPES),
    filters=filters_strategy,
    ordering=st.sampled_from(ORDERINGS),
    limit=st.sampled_from([1, 2, 5, 50]),
)
def test_keyset_pages_are_the_orm_paths(rows, scope, filters, ordering, limit):
    fast = walk(scope, filters, ordering, limit)
    with orm_path():
        slow = walk(scope, filters, ordering, limit)
    assert fast == slow


@on_postgresql
def test_every_ordering_pages_forward_and_back_as_the_orm_path(rows):
    """Each ordering (both directions) walked page by page, on the fast and the ORM path."""
    for ordering in ORDERINGS:
        for filters in (SessionFilters(), SessionFilters(archived=None, agent_id="agent-2")):
            fast = walk("org=a", filters, ordering, 3)
            with orm_path():
                assert fast == walk("org=a", filters, ordering, 3), ordering
            assert len(fast) > 2


@on_postgresql
@pytest.mark.parametrize("ordering", [None, "title", "-cost", "message_count"])
def test_prepared_statements_list_page_and_count_as_the_orm_path(rows, ordering):
    """With ``PREPARED_STATEMENTS`` (server-side binding, ``prepare=True``) every parameter
    type of the statements binds: scope text, the clock, the title pattern, keyset keys (a
    ``datetime``, ``Decimal``, ``int`` or ``str``), limit and offset."""
    filters = SessionFilters(search="B", archived=None, agent_id="agent-1")
    with override_settings(CORTEX_SESSIONS={"PREPARED_STATEMENTS": True}):
        for _ in range(3):  # prepared, then run prepared
            fast = walk("org=a", filters, ordering, 2)
            listed = services.list_sessions(
                scope="org=a", filters=filters, ordering=ordering, limit=3, offset=1
            )
            count = services.count_sessions(scope="org=a", filters=filters)
    with orm_path():
        assert fast == walk("org=a", filters, ordering, 2)
        assert snapshot(listed) == snapshot(
            services.list_sessions(
                scope="org=a", filters=filters, ordering=ordering, limit=3, offset=1
            )
        )
        assert count == services.count_sessions(scope="org=a", filters=filters)
    assert len(fast) > 2 and listed


@on_postgresql
def test_a_list_page_and_a_count_are_one_statement_without_a_queryset(rows, monkeypatch):
    """On PostgreSQL the list, keyset page and count build no queryset: one statement each."""

    def no_queryset(*args, **kwargs):
        raise AssertionError("the ORM path ran")

    monkeypatch.setattr(sessions_module, "_session_queryset", no_queryset)
    monkeypatch.setattr(sessions_module, "_filtered", no_queryset)
    monkeypatch.setattr(keyset_module, "_session_queryset", no_queryset)
    alias = services.list_sessions(scope="org=a", limit=1)[0]._state.db
    with CaptureQueriesContext(connections[alias]) as captured:
        listed = services.list_sessions(scope="org=a", limit=5, offset=1)
        page = services.list_sessions_page(scope="org=a", limit=2)
        services.list_sessions_page(scope="org=a", limit=2, cursor=page.next_cursor)
        count = services.count_sessions(scope="org=a", filters=SessionFilters(exact=True))
    assert len(captured.captured_queries) == 4
    assert len(listed) == 5 and len(page.results) == 2 and count > 0


@on_postgresql
def test_metadata_and_search_filters_keep_the_orm_path(rows, monkeypatch):
    """``metadata`` and ``q`` are not written by hand: the ORM path serves them."""
    calls = []
    real = sessions_module._session_queryset

    def counted(*args, **kwargs):
        calls.append(args)
        return real(*args, **kwargs)

    monkeypatch.setattr(sessions_module, "_session_queryset", counted)
    listed = services.list_sessions(scope="org=a", filters=SessionFilters(metadata={"n": 1}))
    services.list_sessions(scope="org=a", filters=SessionFilters(q="billing"))
    assert len(calls) == 2
    assert listed and all(s.metadata["n"] == 1 for s in listed)


@pytest.mark.parametrize("forced_orm", [False, True])
def test_bad_arguments_fail_alike_on_both_paths(rows, forced_orm):
    """Errors, in the ORM path's order: the scope, then the ordering, then the page bounds,
    then the cursor."""
    with orm_path() if forced_orm else nullcontext():
        with pytest.raises(NoScope):
            services.list_sessions(scope="", ordering="nope")
        with pytest.raises(InvalidScope):
            services.count_sessions(scope="org=")
        with pytest.raises(InvalidFilter) as error:
            services.list_sessions(scope="org=a", ordering="-id")
        assert error.value.field == "ordering"
        with pytest.raises(InvalidFilter) as error:
            services.list_sessions_page(scope="org=a", ordering="--title", limit=0)
        assert error.value.field == "ordering"
        with pytest.raises(InvalidFilter) as error:
            services.list_sessions_page(scope="org=a", limit=0, cursor="x")
        assert error.value.field == "limit"
        with pytest.raises(InvalidFilter) as error:
            services.list_sessions_page(scope="org=a", ordering="title", cursor="x")
        assert error.value.field == "cursor"
        assert services.list_sessions(scope="org=a", limit=0) == []


@on_postgresql
def test_a_list_on_a_connection_in_another_time_zone_reads_the_orm_paths_times(rows):
    """A host's ``SET TIME ZONE`` behind Django's back: the times are still the ORM path's."""
    alias = services.list_sessions(scope="org=a", limit=1)[0]._state.db
    with connections[alias].cursor() as cursor:
        cursor.execute("SET TIME ZONE 'Asia/Kolkata'")
    try:
        fast = services.list_sessions(scope="org=a", ordering="created_at")
        with orm_path():
            slow = services.list_sessions(scope="org=a", ordering="created_at")
        assert snapshot(fast) == snapshot(slow)
    finally:
        with connections[alias].cursor() as cursor:
            cursor.execute("SET TIME ZONE 'UTC'")


def test_a_title_search_matches_percent_literally(rows):
    """``%`` in ``search`` is a character, not a wildcard, on every database and path."""
    listed = services.list_sessions(
        scope="org=a", filters=SessionFilters(search="%", archived=None)
    )
    assert listed
    assert {s.title for s in listed} == {"50% off"}


@on_postgresql
@pytest.mark.parametrize("ordering", ORDERINGS)
def test_a_page_past_an_offset_reads_the_skipped_rows_by_id_only(rows, ordering):
    """A limited page past an offset selects the ids through the offset, then the page's rows
    by id (docs/performance.md): one statement, the ORM path's rows in its order, ties too."""
    alias = services.list_sessions(scope="org=a", limit=1)[0]._state.db
    filters = SessionFilters(archived=None)
    with CaptureQueriesContext(connections[alias]) as captured:
        fast = services.list_sessions(
            scope="org=a", filters=filters, ordering=ordering, limit=5, offset=6
        )
    with orm_path():
        slow = services.list_sessions(
            scope="org=a", filters=filters, ordering=ordering, limit=5, offset=6
        )
    assert snapshot(fast) == snapshot(slow) and len(fast) == 5
    (statement,) = (query["sql"] for query in captured.captured_queries)
    assert 'WHERE p."id" IN (SELECT s."id" FROM' in statement
