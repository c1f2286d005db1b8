"""What message search does on each database, as README "Databases" documents it
(docs/design.md §11.5, §15): MySQL/MariaDB refuse ``q`` with ``invalid_filter``, never answering
as if no filter had been given; SQLite matches a case-insensitive substring (ASCII letters
folded), without a rank."""

from __future__ import annotations

import pytest
from django.db import connection
from rest_framework.test import APIClient

from cortex_sessions import services
from cortex_sessions.exceptions import InvalidFilter

pytestmark = pytest.mark.django_db

ALICE = "org=acme/user=alice"


@pytest.fixture
def session():
    created = services.create_session(scope=ALICE, agent_id="a", title="Invoice")
    services.append_messages(
        scope=ALICE, session_id=created.pk, messages=[{"role": "user", "content": "invoice"}]
    )
    return created


@pytest.mark.mysql_only
@pytest.mark.parametrize(
    "call",
    [
        lambda s: services.list_sessions(scope=ALICE, filters=services.SessionFilters(q="invoice")),
        lambda s: services.count_sessions(
            scope=ALICE, filters=services.SessionFilters(q="invoice")
        ),
        lambda s: services.list_sessions_page(
            scope=ALICE, filters=services.SessionFilters(q="invoice"), ordering="title"
        ),
        lambda s: services.list_messages(scope=ALICE, session_id=s.pk, q="invoice"),
    ],
)
def test_mysql_refuses_a_search_instead_of_listing_everything(session, call):
    with pytest.raises(InvalidFilter) as refused:
        call(session)
    assert refused.value.params["field"] == "q"
    assert "MySQL/MariaDB" in refused.value.message


@pytest.mark.mysql_only
@pytest.mark.parametrize("q", ["'", "\\", ":*", "&", "!", '"open', "x " * 400])
def test_mysql_refuses_every_query_alike(session, q):
    with pytest.raises(InvalidFilter):
        services.count_sessions(scope=ALICE, filters=services.SessionFilters(q=q))


@pytest.mark.mysql_only
def test_mysql_api_answers_q_with_a_400_invalid_filter(session, django_user_model, settings):
    settings.CORTEX_SESSIONS = {"SCOPE_RESOLVER": "tests.test_search_databases.alice_resolver"}
    client = APIClient()
    client.force_authenticate(django_user_model.objects.create_user("u", password="pw"))

    for url in (
        "/api/cortex/sessions/",
        "/api/cortex/sessions/count/",
        f"/api/cortex/sessions/{session.pk}/messages/",
    ):
        response = client.get(url, {"q": "invoice"})
        assert response.status_code == 400, (url, response.content)
        assert response.json()["code"] == "invalid_filter"
        assert response.json()["errors"]["q"][0]["code"] == "invalid_filter"


def alice_resolver(request):
    from cortex_sessions.scope import Scope

    return Scope.parse(ALICE)


@pytest.mark.skipif(connection.vendor != "sqlite", reason="SQLite's substring search")
def test_sqlite_matches_a_substring_folding_ascii_case_only(session):
    accented = services.create_session(scope=ALICE, agent_id="a", title="")
    services.append_messages(
        scope=ALICE, session_id=accented.pk, messages=[{"role": "user", "content": "ÉCOLE"}]
    )

    assert [
        s.pk for s in services.list_sessions(scope=ALICE, filters=services.SessionFilters(q="VOIC"))
    ] == [session.pk]
    assert (
        services.list_sessions(scope=ALICE, filters=services.SessionFilters(q="voic"))[
            0
        ].search_match.rank
        is None
    )
    assert (
        services.count_sessions(scope=ALICE, filters=services.SessionFilters(q="école")) == 0
    )  # É is not folded
    assert services.count_sessions(scope=ALICE, filters=services.SessionFilters(q="ÉCOLE")) == 1
