"""``GET /sessions/?q=`` and ``GET /sessions/{id}/messages/?q=`` (docs/design.md §11.5)."""

from __future__ import annotations

import pytest
from django.db import connection

from cortex_sessions import services
from tests.api.conftest import BASE, session_url

pytestmark = pytest.mark.django_db

searching = pytest.mark.skipif(
    connection.vendor == "mysql", reason="MySQL/MariaDB refuse q (tests/test_search_databases.py)"
)


def conversation(scope: str, title: str, *texts: str):
    session = services.create_session(scope=scope, agent_id="a", title=title)
    services.append_messages(
        scope=scope,
        session_id=session.pk,
        messages=[{"role": "user", "content": text} for text in texts],
    )
    return session


@searching
def test_the_list_answers_the_matches_each_with_its_match(api, alice_scope):
    hit = conversation(alice_scope, "Billing", "hello", "where is my invoice?")
    conversation(alice_scope, "Other", "nothing")

    response = api.get(BASE, {"q": "invoice"})

    assert response.status_code == 200, response.content
    body = response.json()
    assert body["count"] == 1
    (result,) = body["results"]
    assert result["id"] == str(hit.pk)
    assert result["match"]["seq"] == 2
    assert "<mark>invoice</mark>" in result["match"]["snippet"]
    assert ("rank" in result["match"]) and (
        result["match"]["rank"] is None
        if connection.vendor == "sqlite"
        else result["match"]["rank"] > 0
    )
    assert api.get(f"{BASE}count/", {"q": "invoice"}).json() == {"count": 1}


@searching
def test_results_without_q_have_no_match_field(api, alice_scope):
    conversation(alice_scope, "Billing", "invoice")

    (result,) = api.get(BASE).json()["results"]

    assert "match" not in result


@searching
def test_the_message_list_answers_the_matching_messages_with_snippets(api, alice_scope):
    session = conversation(alice_scope, "", "invoice one", "unrelated", "invoice two", "invoice 3")

    page = api.get(session_url(session.pk, "messages/"), {"q": "invoice", "limit": 2}).json()

    assert [m["seq"] for m in page["results"]] == [3, 4]
    assert all("<mark>invoice</mark>" in m["match"]["snippet"] for m in page["results"])
    assert page["has_more"] is True
    older = api.get(page["next"]).json()
    assert [m["seq"] for m in older["results"]] == [1]
    assert older["has_more"] is False
    plain = api.get(session_url(session.pk, "messages/")).json()
    assert len(plain["results"]) == 4 and "match" not in plain["results"][0]


@searching
def test_a_listed_session_sent_back_with_its_match_is_accepted(api, alice_scope):
    session = conversation(alice_scope, "Billing", "invoice")
    listed = api.get(BASE, {"q": "invoice"}).json()["results"][0]

    response = api.put(session_url(session.pk), {**listed, "title": "New"}, format="json")

    assert response.status_code == 200, response.content


@searching
@pytest.mark.parametrize(
    ("path", "query", "code"),
    [
        ("list", "q=", "invalid"),
        ("count", "q=", "invalid"),
        ("messages", "q=", "invalid"),
        ("list", "q=%20%09", "invalid"),
        ("list", "q=" + "x" * 1001, "too_long"),
        ("list", "q=" + "word+" * 2048, "too_long"),  # 10 kB of words
        ("messages", "q=" + "x" * 1001, "too_long"),
        ("list", "q=a%00b", "nul_character"),
        ("messages", "q=a%00b", "nul_character"),
    ],
)
def test_a_bad_q_is_a_coded_400(api, alice_scope, path, query, code):
    session = conversation(alice_scope, "", "invoice")
    url = {"list": BASE, "count": f"{BASE}count/", "messages": session_url(session.pk, "messages/")}

    response = api.get(f"{url[path]}?{query}")

    assert response.status_code == 400, response.content
    body = response.json()
    # One rule, one code (docs/design.md §12.4): a rule of its own shows at the top too.
    assert body["code"] == ("invalid_filter" if code == "invalid" else code)
    assert body["errors"]["q"][0]["code"] == code


@searching
def test_cursor_pages_of_a_search_need_an_ordering(api, alice_scope):
    for n in range(3):
        conversation(alice_scope, f"s{n}", "invoice")

    refused = api.get(BASE, {"q": "invoice", "cursor": ""})
    first = api.get(BASE, {"q": "invoice", "cursor": "", "ordering": "title", "limit": 2})

    assert refused.status_code == 400
    assert refused.json()["code"] == "invalid_filter"
    assert "cursor" in refused.json()["errors"]
    assert first.status_code == 200
    second = api.get(first.json()["next"]).json()
    titles = [r["title"] for r in first.json()["results"] + second["results"]]
    assert titles == ["s0", "s1", "s2"]


@searching
@pytest.mark.parametrize(
    "q", ["'", "\\", ":*", "&", "!", '"open', "a:* & !b | (", "x " * 16]
)  # 17 words: too_long
def test_hostile_queries_answer_200_without_matching_everything(api, alice_scope, q):
    conversation(alice_scope, "plain", "nothing to see")

    for url in (BASE, f"{BASE}count/"):
        response = api.get(url, {"q": q})
        assert response.status_code == 200, (url, response.content)
    assert api.get(BASE, {"q": q}).json()["count"] == 0


@searching
def test_another_tenants_hit_never_shows_in_a_list_or_count(client_for, make_user):
    alice = make_user("alice-s", org="acme")
    carol = make_user("carol-s", org="globex")
    olga = make_user("olga-s", org="acme", admin=True)
    conversation(f"org=globex/user={carol.pk}", "invoice for carol", "secret invoice")
    mine = conversation(f"org=acme/user={alice.pk}", "", "my invoice")

    for user, expected in ((alice, [str(mine.pk)]), (olga, [str(mine.pk)]), (carol, None)):
        body = client_for(user).get(BASE, {"q": "invoice"}).json()
        count = client_for(user).get(f"{BASE}count/", {"q": "invoice"}).json()["count"]
        if expected is not None:
            assert [r["id"] for r in body["results"]] == expected
            assert body["count"] == count == 1
        else:
            assert body["count"] == count == 1
            assert body["results"][0]["title"] == "invoice for carol"
