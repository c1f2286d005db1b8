"""Message search through the services, on every database (docs/design.md §11.5).

PostgreSQL answers with full-text search and SQLite with a case-insensitive substring; the
tests here hold on both (the words searched are whole words, found either way). MySQL/MariaDB
refuse ``q`` (tests/test_search_databases.py). Full-text syntax, ranking and the index plans
are in tests/test_search_postgres.py.
"""

from __future__ import annotations

import pytest
from asgiref.sync import sync_to_async
from django.db import connection

from cortex_sessions import services
from cortex_sessions.exceptions import InvalidFilter, NulCharacter, SessionNotFound
from cortex_sessions.search import MAX_QUERY_CHARS
from cortex_sessions.search_limits import MAX_QUERY_WORDS
from tests.asyncio_support import async_test

pytestmark = [
    pytest.mark.django_db,
    pytest.mark.skipif(
        connection.vendor == "mysql", reason="MySQL/MariaDB have no message search (refused)"
    ),
]

ORG = "org=acme"
ALICE = "org=acme/user=alice"
BOB = "org=acme/user=bob"
GLOBEX = "org=globex/user=carol"


def conversation(scope: str, title: str = "", *messages: tuple[str, str, str], agent="a"):
    """A session at ``scope`` holding ``messages`` as ``(role, source, text)``."""
    session = services.create_session(scope=scope, agent_id=agent, title=title)
    if messages:
        services.append_messages(
            scope=scope,
            session_id=session.pk,
            messages=[
                {"role": role, "source": source, "content": text} for role, source, text in messages
            ],
        )
    return session


def found(
    scope: str = ORG,
    *,
    ordering: str | None = None,
    limit: int | None = None,
    offset: int = 0,
    **filters,
) -> list:
    """The ids ``list_sessions`` lists at ``scope``; ``filters`` are ``SessionFilters`` fields."""
    listed = services.list_sessions(
        scope=scope,
        filters=services.SessionFilters(**filters),
        ordering=ordering,
        limit=limit,
        offset=offset,
    )
    return [session.pk for session in listed]


def test_conversation_messages_match_and_tool_system_host_and_reference_text_never_does():
    typed = conversation(ALICE, "", ("user", "user", "where is the invoice"))
    answered = conversation(ALICE, "", ("assistant", "host", "the invoice was sent"))
    summarized = conversation(ALICE, "", ("user", "checkpoint", "summary: invoice resent"))
    hidden = [
        conversation(ALICE, "", ("tool", "host", "invoice tool output")),
        conversation(ALICE, "", ("system", "host", "you handle every invoice")),
        conversation(ALICE, "", ("user", "host", "injected invoice context")),
        conversation(ALICE, "", ("user", "session-reference", "snapshot with invoice")),
    ]

    hits = found(q="invoice")

    assert set(hits) == {typed.pk, answered.pk, summarized.pk}
    assert not set(hits) & {session.pk for session in hidden}
    assert services.count_sessions(scope=ORG, filters=services.SessionFilters(q="invoice")) == 3


def test_each_result_carries_its_best_message_snippet_and_seq():
    session = conversation(
        ALICE,
        "Billing",
        ("user", "user", "hello"),
        ("assistant", "host", "nothing here"),
        ("user", "user", "and the invoice?"),
    )

    (result,) = services.list_sessions(scope=ORG, filters=services.SessionFilters(q="invoice"))

    assert result.pk == session.pk
    assert result.search_match.seq == 3
    assert "<mark>invoice</mark>" in result.search_match.snippet
    assert "and the" in result.search_match.snippet


def test_a_title_match_counts_and_has_no_seq():
    session = conversation(ALICE, "Invoice questions", ("user", "user", "hello there"))

    (result,) = services.list_sessions(scope=ORG, filters=services.SessionFilters(q="invoice"))

    assert result.pk == session.pk
    assert result.search_match.seq is None
    assert result.search_match.snippet == "<mark>Invoice</mark> questions"


def test_snippets_are_escaped_html_with_only_mark_tags():
    conversation(
        ALICE,
        "",
        ("user", "user", 'see <script>alert("x")</script> & the invoice \ue000forged\ue001 mark'),
    )

    (result,) = services.list_sessions(scope=ORG, filters=services.SessionFilters(q="invoice"))

    snippet = result.search_match.snippet
    assert "<script>" not in snippet and "&" not in snippet.replace("&amp;", "").replace(
        "&lt;", ""
    ).replace("&gt;", "").replace("&quot;", "").replace("&#x27;", "")
    assert snippet.count("<mark>") == snippet.count("</mark>") == 1
    assert "<mark>invoice</mark>" in snippet
    assert "\ue000" not in snippet and "\ue001" not in snippet


def test_another_tenants_hit_never_shows_not_even_in_a_count():
    mine = conversation(ALICE, "", ("user", "user", "invoice for alice"))
    colleague = conversation(BOB, "", ("user", "user", "invoice for bob"))
    foreign = conversation(GLOBEX, "invoice title", ("user", "user", "invoice for carol"))

    assert found(ALICE, q="invoice") == [mine.pk]
    assert services.count_sessions(scope=ALICE, filters=services.SessionFilters(q="invoice")) == 1
    assert set(found(ORG, q="invoice")) == {mine.pk, colleague.pk}
    assert services.count_sessions(scope=ORG, filters=services.SessionFilters(q="invoice")) == 2
    assert foreign.pk not in found(ORG, q="invoice")
    with pytest.raises(SessionNotFound):
        services.list_messages(scope=ALICE, session_id=foreign.pk, q="invoice")


def test_search_combines_with_every_other_list_filter():
    kept = conversation(ALICE, "", ("user", "user", "invoice one"), agent="billing")
    other_agent = conversation(ALICE, "", ("user", "user", "invoice two"), agent="support")
    archived = conversation(ALICE, "", ("user", "user", "invoice three"), agent="billing")
    services.archive_session(scope=ALICE, session_id=archived.pk)
    deeper = conversation(ALICE + "/project=p", "", ("user", "user", "invoice four"))
    services.update_session(scope=ALICE, session_id=kept.pk, metadata={"team": "red"})

    assert found(ALICE, q="invoice", agent_id="billing") == [kept.pk]
    assert set(found(ALICE, q="invoice", archived=None)) == {
        kept.pk,
        other_agent.pk,
        archived.pk,
        deeper.pk,
    }
    assert found(ALICE, q="invoice", archived=True) == [archived.pk]
    assert deeper.pk not in found(ALICE, q="invoice", exact=True)
    assert found(ALICE, q="invoice", metadata={"team": "red"}) == [kept.pk]
    assert found(ALICE, q="invoice", search="no such title") == []
    assert (
        services.count_sessions(
            scope=ALICE, filters=services.SessionFilters(q="invoice", agent_id="billing")
        )
        == 1
    )


def test_an_explicit_ordering_orders_the_matches():
    first = conversation(ALICE, "b", ("user", "user", "invoice"))
    second = conversation(ALICE, "a", ("user", "user", "invoice"))
    conversation(ALICE, "c", ("user", "user", "nothing"))

    assert found(ALICE, q="invoice", ordering="title") == [second.pk, first.pk]
    assert found(ALICE, q="invoice", ordering="-created_at") == [second.pk, first.pk]
    assert found(ALICE, q="invoice", ordering="title", limit=1, offset=1) == [first.pk]


def test_keyset_pages_of_a_search_need_an_ordering():
    sessions = [conversation(ALICE, f"s{n}", ("user", "user", "invoice")) for n in range(3)]

    with pytest.raises(InvalidFilter) as refused:
        services.list_sessions_page(
            scope=ALICE, filters=services.SessionFilters(q="invoice"), limit=2
        )
    assert refused.value.params["field"] == "cursor"

    page = services.list_sessions_page(
        scope=ALICE, filters=services.SessionFilters(q="invoice"), ordering="title", limit=2
    )
    rest = services.list_sessions_page(
        scope=ALICE,
        filters=services.SessionFilters(q="invoice"),
        ordering="title",
        limit=2,
        cursor=page.next_cursor,
    )
    assert [s.pk for s in page.results + rest.results] == [s.pk for s in sessions]
    assert all(s.search_match is not None for s in page.results + rest.results)


def test_message_search_returns_the_matching_messages_of_one_session_in_order():
    session = conversation(
        ALICE,
        "",
        ("user", "user", "first invoice"),
        ("assistant", "host", "unrelated"),
        ("tool", "host", "invoice from a tool"),
        ("assistant", "host", "second invoice"),
        ("user", "user", "third invoice"),
    )

    rows = services.list_messages(scope=ALICE, session_id=session.pk, q="invoice")
    assert [m.seq for m in rows] == [1, 4, 5]
    assert [m.search_match.seq for m in rows] == [1, 4, 5]
    assert all("<mark>invoice</mark>" in m.search_match.snippet for m in rows)

    newest = services.list_messages(scope=ALICE, session_id=session.pk, q="invoice", limit=2)
    assert [m.seq for m in newest] == [4, 5]
    older = services.list_messages(
        scope=ALICE, session_id=session.pk, q="invoice", limit=2, before_seq=4
    )
    assert [m.seq for m in older] == [1]
    assert (
        services.list_messages(scope=ALICE, session_id=session.pk, limit=10)[0].search_match is None
    )


@pytest.mark.parametrize(
    ("q", "error"),
    [
        ("", InvalidFilter),
        ("   \t\n", InvalidFilter),
        ("x" * (MAX_QUERY_CHARS + 1), InvalidFilter),
        ("invoice\x00", NulCharacter),
        (42, InvalidFilter),
        (["invoice"], InvalidFilter),
    ],
)
def test_a_bad_query_is_a_coded_error(q, error):
    conversation(ALICE, "", ("user", "user", "invoice"))

    with pytest.raises(error) as raised:
        services.list_sessions(scope=ORG, filters=services.SessionFilters(q=q))
    assert raised.value.params["field"] == "q"
    with pytest.raises(error):
        services.count_sessions(scope=ORG, filters=services.SessionFilters(q=q))
    with pytest.raises(error):
        services.list_messages(scope=ORG, session_id=services.list_sessions(scope=ORG)[0].pk, q=q)


#: Queries that look like syntax of some search language; each is a query, never SQL.
HOSTILE = [
    "'",
    "''; DROP TABLE cortex_sessions_message; --",
    "\\",
    ":*",
    "invoice:*",
    "&",
    "!",
    "!invoice",
    "invoice & !",
    '"unbalanced',
    "a | b",
    "(",
    "<->",
    "%",
    "_",
    "-",
    "or",
    '"" or -',
    " ".join(["word"] * MAX_QUERY_WORDS),  # 199 copies: too_long (tests/test_search_limits.py)
]


@pytest.mark.parametrize("q", HOSTILE)
def test_a_hostile_query_is_an_answer_never_an_error_nor_match_all(q):
    control = conversation(ALICE, "plain", ("user", "user", "nothing to see here"))
    literal = conversation(ALICE, "", ("user", "user", f"text holding {q} literally"))

    hits = found(q=q)

    assert control.pk not in hits
    assert set(hits) <= {literal.pk}
    assert services.count_sessions(scope=ORG, filters=services.SessionFilters(q=q)) == len(hits)
    services.list_messages(scope=ORG, session_id=literal.pk, q=q)


def test_a_query_of_the_longest_length_is_answered():
    conversation(ALICE, "", ("user", "user", "invoice"))
    q = " ".join(["invoice"] + ["y" * 60] * (MAX_QUERY_WORDS - 1))
    q += "z" * (MAX_QUERY_CHARS - len(q))  # 1,000 characters in 16 words

    assert services.count_sessions(scope=ORG, filters=services.SessionFilters(q=q)) in (0, 1)


@async_test
async def test_the_async_twins_search_too():
    session = await sync_to_async(conversation)(ALICE, "", ("user", "user", "invoice"))

    listed = await services.alist_sessions(scope=ORG, filters=services.SessionFilters(q="invoice"))
    counted = await services.acount_sessions(
        scope=ORG, filters=services.SessionFilters(q="invoice")
    )
    messages = await services.alist_messages(scope=ORG, session_id=session.pk, q="invoice")

    assert [s.pk for s in listed] == [session.pk]
    assert counted == 1
    assert [m.seq for m in messages] == [1]


def test_a_search_considers_the_newest_search_candidates_matches(settings):
    sessions = [conversation(ALICE, "", ("user", "user", f"invoice {n}")) for n in range(5)]
    settings.CORTEX_SESSIONS = {"SEARCH_CANDIDATES": 2}

    listed = found(ALICE, q="invoice")

    assert set(listed) == {sessions[3].pk, sessions[4].pk}
    assert services.count_sessions(scope=ALICE, filters=services.SessionFilters(q="invoice")) == 2
    assert found(ALICE, q="invoice 1") == [sessions[1].pk]  # a narrower query finds it
