"""Message search on PostgreSQL: full-text syntax, ranking, snippets, the configuration and its
checks, the index plans (docs/design.md §11.5)."""

from __future__ import annotations

import io

import pytest
from django.core.management import call_command
from django.db import connection
from django.test.utils import CaptureQueriesContext, override_settings

from cortex_sessions import search, services
from cortex_sessions.checks import check_search_config
from cortex_sessions.models import Session

pytestmark = [pytest.mark.django_db, pytest.mark.postgres_only]

ORG = "org=acme"
ALICE = "org=acme/user=alice"


def conversation(title: str, *texts: str, scope: str = ALICE):
    """A session whose messages alternate user/assistant with ``texts``."""
    session = services.create_session(scope=scope, agent_id="a", title=title)
    if texts:
        services.append_messages(
            scope=scope,
            session_id=session.pk,
            messages=[
                {"role": "user" if n % 2 == 0 else "assistant", "content": text}
                for n, text in enumerate(texts)
            ],
        )
    return session


def found(q: str) -> list:
    return [s.pk for s in services.list_sessions(scope=ORG, filters=services.SessionFilters(q=q))]


def test_websearch_syntax_phrases_or_and_minus():
    sent = conversation("", "the invoice was sent on monday")
    paid = conversation("", "the invoice was paid, and it was sent later")
    refund = conversation("", "a refund instead")

    assert set(found("invoice")) == {sent.pk, paid.pk}
    assert found('"sent on monday"') == [sent.pk]
    assert set(found("invoice sent")) == {sent.pk, paid.pk}  # words: all of them, anywhere
    assert found('"invoice sent"') == []  # a phrase: adjacent, in order
    assert set(found("refund or monday")) == {sent.pk, refund.pk}
    assert found("invoice -paid") == [sent.pk]
    assert found("INVOICE") and set(found("Invoice")) == {sent.pk, paid.pk}


def test_words_are_matched_whole_not_as_substrings():
    invoice = conversation("", "invoices arrived")  # 'simple' does not stem

    assert found("invoice") == []
    assert found("invoices") == [invoice.pk]


def test_best_match_first_then_newest():
    once = conversation("", "invoice", "something else entirely, at length, many words here")
    often = conversation("", "invoice invoice invoice")
    titled = conversation("Invoice", "hello")
    newer_once = conversation("", "invoice", "something else entirely, at length, many words here")

    ranked = services.list_sessions(scope=ORG, filters=services.SessionFilters(q="invoice"))

    assert ranked[0].pk == often.pk
    ranks = [s.search_match.rank for s in ranked]
    assert ranks == sorted(ranks, reverse=True) and all(rank > 0 for rank in ranks)
    assert {s.pk for s in ranked} == {once.pk, often.pk, titled.pk, newer_once.pk}
    tied = [s.pk for s in ranked if s.pk in (once.pk, newer_once.pk)]
    assert tied == [newer_once.pk, once.pk]  # equal rank: newest first


def test_the_snippet_comes_from_the_best_message_and_marks_every_hit():
    session = conversation("", "an invoice", "invoice, the invoice, and again the invoice")

    (result,) = services.list_sessions(scope=ORG, filters=services.SessionFilters(q="invoice"))

    assert result.pk == session.pk
    assert result.search_match.seq == 2
    assert result.search_match.snippet.count("<mark>invoice</mark>") == 3


def test_a_query_without_lexemes_matches_nothing():
    conversation("A title", "punctuation ! and text")

    for q in ("!", "&", "::", "'", '"', "- -", "(", ")"):
        assert found(q) == [], q
        assert services.count_sessions(scope=ORG, filters=services.SessionFilters(q=q)) == 0, q


def test_messages_beyond_the_indexed_length_are_still_stored_and_their_head_is_found():
    head = "invoice " + "x" * search.INDEXED_CHARS
    session = conversation("", head + " refund")

    assert found("invoice") == [session.pk]
    assert found("refund") == []  # past the first INDEXED_CHARS characters


def test_a_message_of_a_megabyte_of_distinct_words_is_stored():
    words = " ".join(f"w{n:07d}" for n in range(110_000))  # ~1 MB, tsvector would overflow
    session = conversation("", words)

    assert found("w0000001") == [session.pk]


# -- configuration ---------------------------------------------------------------------------------


def test_the_column_is_built_with_the_configured_default():
    assert search.installed_config(connection) == "simple"
    assert check_search_config(databases=["default"]) == []


@override_settings(CORTEX_SESSIONS={"SEARCH_CONFIG": "no_such_config"})
def test_a_missing_configuration_is_error_e014():
    (error,) = check_search_config(databases=["default"])
    assert error.id == "cortex_sessions.E014"


@override_settings(CORTEX_SESSIONS={"SEARCH_CONFIG": "english"})
def test_a_configuration_other_than_the_columns_is_warning_w002():
    (warning,) = check_search_config(databases=["default"])
    assert warning.id == "cortex_sessions.W002"
    assert "cortex_sessions_search_rebuild" in warning.hint


@pytest.mark.django_db(transaction=True)
def test_rebuild_applies_a_new_configuration_and_back():
    conversation("", "the cats were running")
    out = io.StringIO()
    try:
        with override_settings(CORTEX_SESSIONS={"SEARCH_CONFIG": "english"}):
            call_command("cortex_sessions_search_rebuild", stdout=out)
            assert search.installed_config(connection) == "english"
            assert check_search_config(databases=["default"]) == []
            assert len(found("cat")) == 1  # english stems: cats -> cat
            assert found("the") == []  # a stop word only: no lexeme, no match (never all)
            assert services.count_sessions(scope=ORG, filters=services.SessionFilters(q="the")) == 0
    finally:
        call_command("cortex_sessions_search_rebuild", stdout=out)
    assert search.installed_config(connection) == "simple"
    assert found("cat") == []
    assert len(found("cats")) == 1
    assert "english" in out.getvalue()


def test_rebuild_dry_run_prints_the_sql_and_changes_nothing():
    out = io.StringIO()
    with override_settings(CORTEX_SESSIONS={"SEARCH_CONFIG": "english"}):
        call_command("cortex_sessions_search_rebuild", "--dry-run", stdout=out)
    assert "'english'::regconfig" in out.getvalue()
    assert "CREATE INDEX CONCURRENTLY" in out.getvalue()
    assert search.installed_config(connection) == "simple"


# -- plans -------------------------------------------------------------------------------------------


def _plan(sql: str) -> str:
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN " + sql)
        return "\n".join(row[0] for row in cursor.fetchall())


def test_a_search_reads_the_gin_indexes_and_never_scans_the_message_table():
    sessions = Session.objects.bulk_create(
        Session(agent_id="a", scope=f"org=o{n % 4}/user={n}", title=f"title {n}")
        for n in range(400)
    )
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO cortex_sessions_message (session_id, agent_id, scope, seq, role, source, "
            "content, metadata, created_at) SELECT s.id, s.agent_id, s.scope, g, 'user', 'user', "
            "jsonb_build_array(jsonb_build_object('type', 'text', 'text', "
            "'common words in message ' || g)), '{}', now() "
            "FROM cortex_sessions_session s, generate_series(1, 20) AS g WHERE s.id = ANY(%s)",
            [[session.pk for session in sessions]],
        )
    rare = conversation("", "a rare invoice", scope="org=o1/user=rare")
    with connection.cursor() as cursor:
        # New entries wait in the GIN pending list (read whole by every search) until a vacuum
        # moves them into the index, as autovacuum does on a live table.
        cursor.execute("SELECT gin_clean_pending_list(%s::regclass)", [search.MESSAGE_INDEX])
        cursor.execute("SELECT gin_clean_pending_list(%s::regclass)", [search.TITLE_INDEX])
        cursor.execute("ANALYZE cortex_sessions_message")
        cursor.execute("ANALYZE cortex_sessions_session")
    with CaptureQueriesContext(connection) as captured:
        assert [
            s.pk
            for s in services.list_sessions(
                scope="org=o1", filters=services.SessionFilters(q="invoice")
            )
        ] == [rare.pk]
        assert (
            services.count_sessions(scope="org=o1", filters=services.SessionFilters(q="invoice"))
            == 1
        )
        assert len(services.list_messages(scope="org=o1", session_id=rare.pk, q="invoice")) == 1
    # the searches, without the savepoints and set_config() of SEARCH_TIMEOUT around each
    searches = [q["sql"] for q in captured.captured_queries if "websearch_to_tsquery" in q["sql"]]
    page, count = searches[:2]
    messages = searches[-1]
    for sql in (page, count):
        plan = _plan(sql)
        assert f"Bitmap Index Scan on {search.MESSAGE_INDEX}" in plan, plan
        assert f"Bitmap Index Scan on {search.TITLE_INDEX}" in plan, plan
        assert "Seq Scan on cortex_sessions_message" not in plan, plan
    assert "Seq Scan on cortex_sessions_message" not in _plan(messages)
