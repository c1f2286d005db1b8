"""The API makes a bounded number of queries whatever the page size (docs/design.md §10)."""

from __future__ import annotations

import pytest

from cortex_sessions import services
from tests.api.conftest import BASE, session_url

pytestmark = pytest.mark.django_db

#: Queries of a list request: the resolver's membership lookup, the count and the page.
LIST_QUERIES = 3
#: Queries of a message page: the membership lookup, the session and the page.
MESSAGE_QUERIES = 3


@pytest.fixture
def many(alice_scope):
    """60 sessions, the first with 60 messages."""
    sessions = [services.create_session(scope=alice_scope, agent_id="a") for _ in range(60)]
    services.append_messages(
        scope=alice_scope,
        session_id=sessions[0].pk,
        messages=[{"role": "user", "content": f"m{n}"} for n in range(60)],
    )
    return sessions


@pytest.mark.parametrize("limit", [5, 50])
def test_session_list_queries_do_not_grow_with_the_page(
    api, many, limit, django_assert_max_num_queries
):
    with django_assert_max_num_queries(LIST_QUERIES):
        response = api.get(BASE, {"limit": limit, "search": "", "ordering": "title"})
    assert len(response.json()["results"]) == limit


@pytest.mark.parametrize("limit", [5, 50])
def test_message_page_queries_do_not_grow_with_the_page(
    api, many, limit, django_assert_max_num_queries
):
    with django_assert_max_num_queries(MESSAGE_QUERIES):
        response = api.get(session_url(many[0].pk, "messages/"), {"limit": limit})
    assert len(response.json()["results"]) == limit


def test_count_is_two_queries(api, many, django_assert_max_num_queries):
    with django_assert_max_num_queries(2):
        assert api.get(f"{BASE}count/").json() == {"count": 60}
