"""Session list: filters, ordering, pagination, and their 400s (docs/design.md §7.2, §7.3)."""

from __future__ import annotations

from datetime import timedelta
from unittest.mock import ANY
from urllib.parse import parse_qs, urlsplit

import pytest
from django.db import connection
from django.utils import timezone

from cortex_sessions import services
from cortex_sessions.models import Session
from tests.api.conftest import BASE

pytestmark = pytest.mark.django_db


def titles(response) -> list[str]:
    assert response.status_code == 200, response.json()
    return [row["title"] for row in response.json()["results"]]


@pytest.fixture
def listing(alice_scope):
    """Sessions of two agents at alice's scope and beneath it, with distinct timestamps."""
    now = timezone.now()
    specs = [
        ("coder", alice_scope, "Alpha 100%", 3),
        ("coder", alice_scope, "beta_one", 1),
        ("writer", alice_scope, "Gamma", 2),
        ("coder", f"{alice_scope}/project=x", "delta", 0),
    ]
    sessions = []
    for index, (agent, scope, title, messages) in enumerate(specs):
        session = services.create_session(scope=scope, agent_id=agent, title=title)
        if messages:
            services.append_messages(
                scope=scope,
                session_id=session.pk,
                messages=[{"role": "user", "content": "m"}] * messages,
            )
        stamp = now - timedelta(minutes=10 - index)
        Session.objects.filter(pk=session.pk).update(created_at=stamp, updated_at=stamp)
        sessions.append(session)
    services.make_default(scope=alice_scope, session_id=sessions[1].pk)
    Session.objects.filter(pk=sessions[1].pk).update(updated_at=now - timedelta(minutes=9))
    return sessions


def test_list_is_newest_updated_first_by_default(api, listing):
    assert titles(api.get(BASE)) == ["delta", "Gamma", "beta_one", "Alpha 100%"]


def test_title_ordering_follows_the_database_collation(api, listing):
    """README "Databases": titles are host text and sort as the database sorts text —
    byte order on SQLite and on a PostgreSQL database created with the C collation (as CI's
    is), case-insensitively under MySQL/MariaDB's default ``utf8mb4`` collations."""
    if connection.vendor == "mysql":
        expected = ["Alpha 100%", "beta_one", "delta", "Gamma"]
    else:
        expected = ["Alpha 100%", "Gamma", "beta_one", "delta"]
    assert titles(api.get(BASE, {"ordering": "title"})) == expected


def test_list_response_is_count_next_previous_results(api, listing):
    body = api.get(BASE).json()
    assert set(body) == {"count", "next", "previous", "results"}
    assert body["count"] == 4


@pytest.mark.parametrize(
    ("params", "expected"),
    [
        ({"agent_id": "coder"}, ["delta", "beta_one", "Alpha 100%"]),
        ({"agent_id": "nobody"}, []),
        ({"exact": "true"}, ["Gamma", "beta_one", "Alpha 100%"]),
        ({"exact": "false"}, ["delta", "Gamma", "beta_one", "Alpha 100%"]),
        ({"default_only": "1"}, ["beta_one"]),
        ({"search": "ALPHA"}, ["Alpha 100%"]),
        ({"search": "%"}, ["Alpha 100%"]),
        ({"search": "_"}, ["beta_one"]),
        ({"ordering": "-message_count"}, ["Alpha 100%", "Gamma", "beta_one", "delta"]),
        ({"ordering": "created_at"}, ["Alpha 100%", "beta_one", "Gamma", "delta"]),
        ({"agent_id": "coder", "exact": "true", "ordering": "title"}, ["Alpha 100%", "beta_one"]),
    ],
)
def test_filters_and_ordering(api, listing, params, expected):
    assert titles(api.get(BASE, params)) == expected


def test_count_takes_the_same_filters(api, listing):
    assert api.get(f"{BASE}count/", {"agent_id": "coder", "exact": "true"}).json() == {"count": 2}


@pytest.mark.parametrize(
    ("params", "bad"),
    [
        ({"exact": "maybe"}, {"exact"}),
        ({"default_only": "yes"}, {"default_only"}),
        ({"ordering": "password"}, {"ordering"}),
        ({"ordering": "--title"}, {"ordering"}),
        ({"ordering": "title,created_at"}, {"ordering"}),
        ({"limit": "-1"}, {"limit"}),
        ({"limit": "0"}, {"limit"}),
        ({"limit": "1001"}, {"limit"}),
        ({"limit": "1.5"}, {"limit"}),
        ({"offset": "-3"}, {"offset"}),
        ({"offset": "x"}, {"offset"}),
        ({"offset": "9" * 40}, {"offset"}),
        ({"exact": "maybe", "ordering": "password"}, {"exact", "ordering"}),
    ],
)
def test_bad_list_parameters_are_a_400_invalid_filter(api, listing, params, bad):
    response = api.get(BASE, params)
    assert response.status_code == 400
    body = response.json()
    assert body["code"] == "invalid_filter"
    assert set(body["errors"]) == bad


@pytest.mark.parametrize(
    ("params", "code"),
    [
        ({"agent_id": "a" * 256}, "invalid_agent_id"),
        ({"search": "s" * 501}, "too_long"),
    ],
)
def test_a_list_parameter_with_a_rule_of_its_own_answers_that_rules_code(
    api, listing, params, code
):
    response = api.get(BASE, params)
    assert response.status_code == 400
    body = response.json()
    assert body["code"] == code
    assert body["errors"] == {name: [{"code": code, "detail": ANY}] for name in params}


def test_limit_and_offset_page_through_the_list(api, listing):
    first = api.get(BASE, {"limit": 3})
    assert titles(first) == ["delta", "Gamma", "beta_one"]
    assert first.json()["previous"] is None
    query = parse_qs(urlsplit(first.json()["next"]).query)
    assert query == {"limit": ["3"], "offset": ["3"]}
    second = api.get(first.json()["next"])
    assert titles(second) == ["Alpha 100%"]
    assert second.json()["next"] is None
    assert second.json()["previous"] is not None


def test_an_offset_past_the_end_is_an_empty_page(api, listing):
    response = api.get(BASE, {"offset": 10**15})
    assert response.json()["results"] == [] and response.json()["count"] == 4


def test_page_size_defaults_follow_the_settings(api, listing, settings):
    settings.CORTEX_SESSIONS = {**settings.CORTEX_SESSIONS, "PAGE_SIZE": 2, "MAX_PAGE_SIZE": 3}
    assert len(titles(api.get(BASE))) == 2
    assert len(titles(api.get(BASE, {"limit": 3}))) == 3
    assert api.get(BASE, {"limit": 4}).status_code == 400


def test_ties_are_broken_by_id_so_pages_are_stable(api, alice_scope):
    stamp = timezone.now()
    ids = []
    for _ in range(6):
        session = services.create_session(scope=alice_scope, agent_id="a", title="same")
        Session.objects.filter(pk=session.pk).update(updated_at=stamp)
        ids.append(str(session.pk))
    pages = [api.get(BASE, {"limit": 2, "offset": offset}).json() for offset in (0, 2, 4)]
    seen = [row["id"] for page in pages for row in page["results"]]
    assert seen == sorted(ids, reverse=True)


# -- keyset pages (docs/design.md §14) --------------------------------------------------------------


def test_cursor_pages_follow_next_and_previous_links(api, listing):
    first = api.get(BASE, {"cursor": "", "limit": 2, "agent_id": "coder"})
    body = first.json()
    assert set(body) == {"next", "previous", "results"}
    assert titles(first) == ["delta", "beta_one"]
    assert body["previous"] is None
    query = parse_qs(urlsplit(body["next"]).query)
    assert query["agent_id"] == ["coder"] and query["limit"] == ["2"] and query["cursor"][0]
    second = api.get(body["next"])
    assert titles(second) == ["Alpha 100%"]
    assert second.json()["next"] is None
    back = api.get(second.json()["previous"])
    assert titles(back) == ["delta", "beta_one"]


def test_cursor_pages_are_stable_under_equal_sort_keys(api, alice_scope):
    stamp = timezone.now()
    ids = []
    for _ in range(7):
        session = services.create_session(scope=alice_scope, agent_id="a", title="same")
        Session.objects.filter(pk=session.pk).update(updated_at=stamp)
        ids.append(str(session.pk))
    seen, url, params = [], BASE, {"cursor": "", "limit": 3, "ordering": "title"}
    while url:
        body = api.get(url, params).json()
        seen += [row["id"] for row in body["results"]]
        url, params = body["next"], None
    assert seen == sorted(ids)


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"cursor": "garbage"}, "cursor"),
        ({"cursor": "", "offset": 2}, "offset"),
        ({"cursor": "", "limit": 0}, "limit"),
    ],
)
def test_bad_cursor_parameters_are_a_400(api, listing, params, field):
    response = api.get(BASE, params)
    assert response.status_code == 400
    assert response.json()["code"] == "invalid_filter"
    assert field in str(response.json())


def test_a_cursor_of_another_ordering_is_a_400(api, listing):
    cursor = parse_qs(urlsplit(api.get(BASE, {"cursor": "", "limit": 1}).json()["next"]).query)
    response = api.get(BASE, {"cursor": cursor["cursor"][0], "ordering": "title"})
    assert response.status_code == 400 and response.json()["code"] == "invalid_filter"
