"""An empty filter is refused, not read as "no filter"; a body-less action refuses body fields
(docs/design.md §7.2, §12.4)."""

from __future__ import annotations

import pytest

from cortex_sessions import services
from tests.api.conftest import BASE, session_url

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize(
    ("parameter", "code", "field_code"),
    [
        ("agent_id", "invalid_agent_id", "invalid_agent_id"),  # the agent id's own rule
        ("exact", "invalid_filter", "invalid"),
        ("default_only", "invalid_filter", "invalid"),
        ("ordering", "invalid_filter", "invalid"),
        ("archived", "invalid_filter", "invalid"),
        ("metadata", "invalid_filter", "invalid"),
        ("limit", "invalid_filter", "invalid"),
        ("offset", "invalid_filter", "invalid"),
    ],
)
def test_an_empty_filter_value_is_a_400_naming_it(api, alice_scope, parameter, code, field_code):
    services.create_session(scope=alice_scope, agent_id="a")

    for path in (BASE, f"{BASE}count/"):
        if path != BASE and parameter in ("limit", "offset"):
            continue  # the count takes no page parameters
        response = api.get(f"{path}?{parameter}=")

        assert response.status_code == 400, (path, response.content)
        body = response.json()
        assert body["code"] == code
        assert body["errors"][parameter][0]["code"] == field_code


def test_an_empty_search_still_matches_every_title(api, alice_scope):
    services.create_session(scope=alice_scope, agent_id="a")

    response = api.get(f"{BASE}?search=")

    assert response.status_code == 200
    assert len(response.json()["results"]) == 1


@pytest.mark.parametrize(
    ("suffix", "body"),
    [
        ("make-default/", {"x": 1}),
        ("archive/", {"x": 1}),
        ("unarchive/", {"x": 1}),
        ("messages/pop/", {"x": 1}),
        ("make-default/", {"agent_id": "b"}),
    ],
)
def test_a_body_field_on_a_body_less_action_is_unknown_field(api, alice_scope, suffix, body):
    session = services.create_session(scope=alice_scope, agent_id="a")
    services.append_messages(
        scope=alice_scope, session_id=session.pk, messages=[{"role": "user", "content": "hi"}]
    )

    response = api.post(session_url(session.pk, suffix), body, format="json")

    assert response.status_code == 400, response.content
    key = next(iter(body))
    assert response.json()["errors"][key][0]["code"] == "unknown_field"
    session.refresh_from_db()
    assert session.message_count == 1
    assert session.archived_at is None


@pytest.mark.parametrize("body", [None, {}])
def test_a_body_less_action_still_takes_no_body_or_an_empty_object(api, alice_scope, body):
    session = services.create_session(scope=alice_scope, agent_id="a")

    response = api.post(session_url(session.pk, "make-default/"), body, format="json")

    assert response.status_code == 200, response.content
