"""What one message search may cost: at most ``MAX_QUERY_WORDS`` words, snippets made from the
query's distinct words, and ``SEARCH_TIMEOUT`` (docs/design.md §11.5, docs/search.md "Limits").

The time bounds below are generous (seconds, where a bounded search takes milliseconds): before
the limits, the repeated-word query took about a minute on PostgreSQL and the hostile long
message seconds per snippet.
"""

from __future__ import annotations

import math
import re
import time

import pytest
from django.db import DEFAULT_DB_ALIAS, connection, connections, transaction
from django.db.models import BooleanField
from django.db.models.expressions import RawSQL
from django.test.utils import override_settings
from hypothesis import given
from hypothesis import strategies as st
from rest_framework.test import APIClient

from cortex_sessions import search, services
from cortex_sessions.checks import check_settings
from cortex_sessions.exceptions import InvalidFilter, SearchTimeout
from cortex_sessions.models import Session
from cortex_sessions.search_limits import (
    MAX_QUERY_WORDS,
    QUERY_PATTERN,
    query_words,
    search_timeout,
    timeout_milliseconds,
)
from cortex_sessions.services import SessionFilters
from example_project.tenancy.models import Membership

searching = pytest.mark.skipif(
    connection.vendor == "mysql", reason="MySQL/MariaDB refuse q (tests/test_search_databases.py)"
)

ORG = "org=acme"
BASE = "/api/cortex/sessions/"
ORG_RESOLVER = "example_project.tenancy.resolver.org_scope_resolver"
#: Seconds any hostile query may take, list + count + messages together (generous: bounded, the
#: slowest takes about a second on a loaded 2-core machine; unbounded, the long-message query ran
#: past the 10 s SEARCH_TIMEOUT and the 199-times repeated word took a minute).
BOUND = 5.0


def conversation(scope: str, *texts: str, title: str = ""):
    session = services.create_session(scope=scope, agent_id="a", title=title)
    services.append_messages(
        scope=scope,
        session_id=session.pk,
        messages=[{"role": "user", "content": text} for text in texts],
    )
    return session


@pytest.fixture
def api(settings, django_user_model):
    """A client of a member of acme (scope ``org=acme/user=<pk>``), with ``.scope``."""
    settings.CORTEX_SESSIONS = {"SCOPE_RESOLVER": ORG_RESOLVER}
    user = django_user_model.objects.create_user(username="alice", password="pw")
    Membership.objects.create(user=user, org="acme")
    client = APIClient()
    client.force_authenticate(user)
    client.scope = f"org=acme/user={user.pk}"
    return client


# -- query shape ----------------------------------------------------------------------------------


@pytest.mark.django_db
@searching
def test_a_query_of_more_than_max_query_words_is_refused_by_the_services():
    session = conversation(ORG, "word " * 20)
    too_many = " ".join(["word"] * 199)  # the case of search-cost.md

    for call in (
        lambda q: services.list_sessions(scope=ORG, filters=SessionFilters(q=q)),
        lambda q: services.count_sessions(scope=ORG, filters=SessionFilters(q=q)),
        lambda q: services.list_messages(scope=ORG, session_id=session.pk, q=q),
        lambda q: services.list_sessions_page(
            scope=ORG, filters=SessionFilters(q=q), ordering="title"
        ),
    ):
        with pytest.raises(InvalidFilter, match="199 words; at most 16") as raised:
            call(too_many)
        assert raised.value.params["field"] == "q"
        call(" ".join(["word"] * MAX_QUERY_WORDS))  # 16 is answered


@pytest.mark.django_db
@searching
@pytest.mark.parametrize("path", ["", "count/", "{id}/messages/"])
@pytest.mark.parametrize(
    "q",
    [
        " ".join(["word"] * 199),
        " ".join(["word"] * (MAX_QUERY_WORDS + 1)),
        "a or b or c or d or e or f or g or h or i",  # 17 words: `or` counts
        "\t".join(f"-w{n}" for n in range(MAX_QUERY_WORDS + 1)),
    ],
)
def test_a_query_of_more_than_max_query_words_is_a_400_too_long(api, path, q):
    session = conversation(api.scope, "word")

    response = api.get(BASE + path.format(id=session.pk), {"q": q})

    assert response.status_code == 400, response.content
    body = response.json()
    assert body["code"] == "too_long"
    assert body["errors"]["q"][0]["code"] == "too_long"
    assert f"at most {MAX_QUERY_WORDS}" in body["errors"]["q"][0]["detail"]


@given(st.text(alphabet=' \t\n\x0bab\u00a0\u3000-"', max_size=60))
def test_the_schema_pattern_states_the_word_rule_exactly(q):
    """The OpenAPI pattern of ``q`` accepts exactly what the server accepts (length aside)."""
    accepted = bool(q.strip(search.BLANK)) and query_words(q) <= MAX_QUERY_WORDS
    assert bool(re.fullmatch(QUERY_PATTERN, q)) == accepted


def test_words_are_separated_by_ascii_blanks_only():
    assert query_words(" a\tb\nc  ") == 3
    assert query_words("a\u00a0b") == 1  # a no-break space is part of a word
    assert query_words('"a b" or -c') == 4


#: Hostile queries, each within the limits: repeated, distinct, long, operator spam, unicode.
HOSTILE = [
    " ".join(["word"] * MAX_QUERY_WORDS),
    " ".join(f"w{n}" for n in range(MAX_QUERY_WORDS)),
    " ".join(chr(97 + n) for n in range(MAX_QUERY_WORDS)),  # the words of the long message
    '"' + " ".join(chr(97 + n) for n in range(MAX_QUERY_WORDS)) + '"',  # as a phrase
    " or ".join(chr(97 + n) for n in range(8)),
    " ".join(["x" * 61] * MAX_QUERY_WORDS),
    "-".join(chr(97 + n % 26) + str(n) for n in range(250))[: search.MAX_QUERY_CHARS],
    ".".join(["word"] * 200)[: search.MAX_QUERY_CHARS],
    " ".join(["<->"] * MAX_QUERY_WORDS),
    " ".join(['"a', 'b"', "'", ":*", "&", "|", "!", "(", ")", "-a", "or", "-", "\\", "%"]),
    "or " * 15 + "or",
    " ".join(["élan", "日本語", "🙂", "ß", "ﬁ", "İ", "\u200b", "word"] * 2),
]


@pytest.mark.django_db
@searching
@pytest.mark.parametrize("q", HOSTILE)
def test_a_hostile_query_is_answered_within_a_small_bound(q):
    conversation(ORG, "text holding " + " ".join(["word"] * 199) + " literally")
    long = conversation(
        ORG,
        # 100,000 characters (all indexed): every letter but the last many times, then the last
        ("a b c d e f g h i j k l m n o " * 3300) + "p",
        "word " * 2000,
    )
    conversation(ORG, q, title=q[:500])

    started = time.monotonic()
    services.list_sessions(scope=ORG, filters=SessionFilters(q=q), limit=50)
    services.count_sessions(scope=ORG, filters=SessionFilters(q=q))
    services.list_messages(scope=ORG, session_id=long.pk, q=q)
    elapsed = time.monotonic() - started

    assert elapsed < BOUND, f"{elapsed:.1f} s for {q[:40]!r}"


@pytest.mark.django_db
@pytest.mark.skipif(connection.vendor != "postgresql", reason="ts_headline: PostgreSQL")
def test_the_snippet_marks_each_distinct_word_once_and_never_a_negated_one():
    conversation(ORG, "the invoice was paid, the invoice for march")

    (hit,) = services.list_sessions(
        scope=ORG, filters=SessionFilters(q="invoice invoice march -unpaid")
    )
    (paid,) = services.list_sessions(scope=ORG, filters=SessionFilters(q="invoice -receipt"))

    assert hit.search_match.snippet.count("<mark>invoice</mark>") == 2
    assert "<mark>march</mark>" in hit.search_match.snippet
    assert "<mark>" not in paid.search_match.snippet.replace("<mark>invoice</mark>", "")


# -- SEARCH_TIMEOUT --------------------------------------------------------------------------------

#: A condition that takes long on each row it is checked for.
_SLOW = {
    "postgresql": "(SELECT true FROM pg_sleep(0.5))",
    "sqlite": "((WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c "
    "WHERE x < 20000000) SELECT count(*) FROM c) > 0)",
}


@pytest.fixture
def slow_search(monkeypatch):
    """Every message search checks a deliberately slow condition on each message."""
    conditions = search._Search.message_conditions

    def slow(self, *, indexed=True):
        slow_sql = RawSQL(_SLOW[connection.vendor], [], output_field=BooleanField())
        return [*conditions(self, indexed=indexed), slow_sql]

    monkeypatch.setattr(search._Search, "message_conditions", slow)


def _fine_afterwards(session):
    """The connection answers the next queries, inside the test's transaction too."""
    assert Session.objects.filter(pk=session.pk).exists()
    assert [s.pk for s in services.list_sessions(scope=session.scope)] == [session.pk]


@pytest.mark.django_db
@searching
def test_a_search_past_search_timeout_raises_search_timeout_and_the_connection_goes_on(
    slow_search,
):
    session = conversation(ORG, "invoice")

    with override_settings(CORTEX_SESSIONS={"SEARCH_TIMEOUT": 0.001}):
        for call in (
            lambda: services.list_sessions(scope=ORG, filters=SessionFilters(q="invoice")),
            lambda: services.count_sessions(scope=ORG, filters=SessionFilters(q="invoice")),
            lambda: services.list_messages(scope=ORG, session_id=session.pk, q="invoice"),
            lambda: services.list_sessions_page(
                scope=ORG, filters=SessionFilters(q="invoice"), ordering="title"
            ),
        ):
            started = time.monotonic()
            with pytest.raises(SearchTimeout) as raised:
                call()
            assert time.monotonic() - started < BOUND  # cancelled, not run to its end
            assert raised.value.code == "search_timeout"
            _fine_afterwards(session)


@pytest.mark.django_db(transaction=True)
@searching
def test_a_search_past_search_timeout_in_autocommit_leaves_no_transaction_open(slow_search):
    session = conversation(ORG, "invoice")

    with (
        override_settings(CORTEX_SESSIONS={"SEARCH_TIMEOUT": 0.01}),
        pytest.raises(SearchTimeout),
    ):
        services.list_sessions(scope=ORG, filters=SessionFilters(q="invoice"))

    assert connection.get_autocommit() and not connection.in_atomic_block
    _fine_afterwards(session)


@pytest.mark.django_db
@searching
@pytest.mark.parametrize("path", ["", "count/", "{id}/messages/"])
@pytest.mark.parametrize("debug_cursor", [False, True], ids=["", "debug-cursor"])
def test_the_api_answers_a_search_past_search_timeout_503_search_timeout(
    api, settings, slow_search, path, debug_cursor
):
    session = conversation(api.scope, "invoice")
    settings.CORTEX_SESSIONS = {**settings.CORTEX_SESSIONS, "SEARCH_TIMEOUT": 0.001}
    # DEBUG's cursor quotes a failed statement's parameters with a query of its own (SQLite),
    # which a timeout must not interrupt too.
    wrapper = connections[DEFAULT_DB_ALIAS]
    wrapper.force_debug_cursor = debug_cursor
    try:
        response = api.get(BASE + path.format(id=session.pk), {"q": "invoice"})
    finally:
        wrapper.force_debug_cursor = False

    assert response.status_code == 503, response.content
    assert response.json()["code"] == "search_timeout"
    assert response["Retry-After"] == "1"
    assert api.get(BASE).json()["count"] == 1  # the connection goes on


@pytest.mark.django_db
@pytest.mark.skipif(connection.vendor != "sqlite", reason="SQLite's progress handler")
def test_after_sqlite_interrupts_a_search_the_query_that_reports_it_runs():
    # Django's debug cursor (DEBUG=True) quotes a failed statement's parameters with a query
    # of its own on the raw connection; interrupted too, its raw sqlite3 error replaced the
    # cancelled search's (an HTML 500 instead of 503 search_timeout).
    counted = None
    with (
        override_settings(CORTEX_SESSIONS={"SEARCH_TIMEOUT": 0.001}),
        pytest.raises(SearchTimeout),
        search_timeout(DEFAULT_DB_ALIAS),
    ):
        try:
            with connection.cursor() as cursor:
                cursor.execute(f"SELECT {_SLOW['sqlite']}")
        finally:
            counted = connection.connection.execute(_COUNT_TO_200_000).fetchone()

    assert counted == (200_000,)


#: A raw SQLite statement of many virtual-machine steps (several progress-handler calls).
_COUNT_TO_200_000 = (
    "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 200000) "
    "SELECT count(*) FROM c"
)


@pytest.mark.django_db
@searching
def test_a_search_within_search_timeout_is_answered_and_keeps_the_callers_timeout():
    session = conversation(ORG, "invoice")
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SET LOCAL statement_timeout = '123s'")

    with override_settings(CORTEX_SESSIONS={"SEARCH_TIMEOUT": 30}):
        assert [
            s.pk for s in services.list_sessions(scope=ORG, filters=SessionFilters(q="invoice"))
        ] == [session.pk]

    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SHOW statement_timeout")
            assert cursor.fetchone()[0] == "123s"


@pytest.mark.django_db(transaction=True)
@pytest.mark.skipif(connection.vendor != "postgresql", reason="statement_timeout: PostgreSQL")
def test_a_search_in_a_manually_managed_transaction_keeps_its_timeout():
    session = conversation(ORG, "invoice")
    transaction.set_autocommit(False)
    try:
        with connection.cursor() as cursor:
            cursor.execute("SET LOCAL statement_timeout = '123s'")
        with override_settings(CORTEX_SESSIONS={"SEARCH_TIMEOUT": 30}):
            assert [
                s.pk for s in services.list_sessions(scope=ORG, filters=SessionFilters(q="invoice"))
            ] == [session.pk]
        with connection.cursor() as cursor:
            cursor.execute("SHOW statement_timeout")
            assert cursor.fetchone()[0] == "123s"
    finally:
        transaction.rollback()
        transaction.set_autocommit(True)


@pytest.mark.django_db
@pytest.mark.skipif(connection.vendor != "postgresql", reason="statement_timeout: PostgreSQL")
def test_the_timeout_is_set_for_the_search_statement_on_postgresql():
    with (
        override_settings(CORTEX_SESSIONS={"SEARCH_TIMEOUT": 2.5}),
        search_timeout(connection.alias),
        connection.cursor() as cursor,
    ):
        cursor.execute("SHOW statement_timeout")
        assert cursor.fetchone()[0] == "2500ms"


def test_search_timeout_in_milliseconds_is_never_zero_nor_past_postgresqls_largest():
    assert timeout_milliseconds(0.0001) == 1
    assert timeout_milliseconds(10) == 10_000
    assert timeout_milliseconds(10**12) == 2**31 - 1


def test_search_timeout_asks_a_client_to_wait_the_timeout_rounded_up():
    assert SearchTimeout(seconds=0.001).retry_after == 1
    assert SearchTimeout(seconds=10).retry_after == 10
    assert SearchTimeout(seconds=2.5).retry_after == 3


@pytest.mark.django_db
@pytest.mark.skipif(connection.vendor != "mysql", reason="MySQL/MariaDB only")
def test_on_mysql_a_search_is_still_refused_before_any_timeout(api):
    response = api.get(BASE, {"q": "invoice"})
    with transaction.atomic(), pytest.raises(InvalidFilter):  # in a caller's transaction too
        services.list_sessions(scope=ORG, filters=SessionFilters(q="invoice"))

    assert response.status_code == 400
    assert response.json()["code"] == "invalid_filter"


# -- the system check -----------------------------------------------------------------------------


@pytest.mark.parametrize("value", [0, -1, "10", True, None, math.nan, math.inf, [10]])
def test_a_bad_search_timeout_is_e017(value):
    with override_settings(CORTEX_SESSIONS={"SEARCH_TIMEOUT": value}):
        assert [message.id for message in check_settings()] == ["cortex_sessions.E017"]


@pytest.mark.parametrize("value", [10, 0.5, 0.001, 3600])
def test_a_positive_search_timeout_passes_the_checks(value):
    with override_settings(CORTEX_SESSIONS={"SEARCH_TIMEOUT": value}):
        assert check_settings() == []
