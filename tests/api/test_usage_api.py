"""Usage through the API (docs/design.md §16.1-§16.2): ``usage`` on message appends and in
the message representation, the session totals, ordering by them, and
``GET /sessions/usage/``."""

from __future__ import annotations

import pytest

from cortex_sessions import services
from cortex_sessions.models import Message, Session
from cortex_sessions.tokens import estimate_tokens
from tests.api.conftest import BASE, session_url

pytestmark = pytest.mark.django_db

USAGE = {"input_tokens": 120, "output_tokens": 30, "model": "gpt-x", "cost": "0.0123"}


@pytest.fixture
def session(alice_scope):
    return services.create_session(scope=alice_scope, agent_id="coder")


def test_a_message_carries_usage_and_the_session_its_totals(api, session):
    response = api.post(
        session_url(session.pk, "messages/"),
        [
            {"role": "user", "content": "hello"},
            {"role": "assistant", "content": "hi there", "usage": USAGE},
        ],
        format="json",
    )
    assert response.status_code == 201
    body = response.json()
    assert [m["usage"] for m in body["messages"]] == [None, USAGE]
    tokens = [estimate_tokens("user", [{"type": "text", "text": t}]) for t in ("hello", "hi there")]
    assert [m["token_count"] for m in body["messages"]] == tokens
    totals = {k: body["session"][k] for k in ("input_tokens", "output_tokens", "cost")}
    assert totals == {"input_tokens": 120, "output_tokens": 30, "cost": "0.012300"}
    assert body["session"]["context_tokens"] == sum(tokens)
    page = api.get(session_url(session.pk, "messages/")).json()["results"]
    assert page[1]["usage"] == USAGE
    assert api.get(session_url(session.pk)).json()["cost"] == "0.012300"


def test_one_message_with_session_references_keeps_its_usage(api, session):
    response = api.post(
        session_url(session.pk, "messages/"),
        {"role": "user", "content": "no mentions", "resolve_references": True, "usage": USAGE},
        format="json",
    )
    assert response.status_code == 201
    assert response.json()["messages"][0]["usage"] == USAGE


@pytest.mark.parametrize(
    "usage",
    [
        {"cost": 0.01},
        {"cost": "0.0000001"},
        {"input_tokens": -5},
        {"input_tokens": "5"},
        {"output_tokens": True},
        {"prompt_tokens": 1},
        "lots",
        [1],
    ],
)
def test_bad_usage_is_400_invalid_usage_and_nothing_is_written(api, session, usage):
    for body in (
        {"role": "assistant", "content": "x", "usage": usage},
        [{"role": "user", "content": "ok"}, {"role": "assistant", "content": "x", "usage": usage}],
    ):
        response = api.post(session_url(session.pk, "messages/"), body, format="json")
        assert response.status_code == 400, response.json()
        assert response.json()["code"] == "invalid_usage"
    assert not Message.objects.filter(session=session).exists()
    assert Session.objects.get(pk=session.pk).input_tokens == 0


def test_the_totals_and_token_count_cannot_be_written(api, session):
    response = api.patch(
        session_url(session.pk),
        {"title": "t", "cost": "5", "input_tokens": 9, "context_tokens": 3},
        format="json",
    )
    assert response.status_code == 200
    stored = Session.objects.get(pk=session.pk)
    assert (stored.title, stored.input_tokens, stored.cost, stored.context_tokens) == ("t", 0, 0, 0)
    response = api.post(
        session_url(session.pk, "messages/"),
        {"role": "user", "content": "abcd", "token_count": 999},
        format="json",
    )
    assert response.status_code == 201
    assert response.json()["messages"][0]["token_count"] == 5


def _spend(scope, agent_id, cost, tokens):
    session = services.create_session(scope=scope, agent_id=agent_id)
    services.append_messages(
        scope=scope,
        session_id=session.pk,
        messages=[
            {
                "role": "assistant",
                "content": "x",
                "usage": {"input_tokens": tokens, "output_tokens": 1, "cost": cost},
            }
        ],
    )
    return session


def test_lists_order_by_cost(api, alice_scope):
    cheap = _spend(alice_scope, "a", "0.1", 1)
    dear = _spend(alice_scope, "a", "2", 5)
    listed = api.get(BASE, {"ordering": "-cost"}).json()["results"]
    assert [row["id"] for row in listed] == [str(dear.pk), str(cheap.pk)]
    page = api.get(BASE, {"ordering": "input_tokens", "limit": 1}).json()
    assert [row["id"] for row in page["results"]] == [str(cheap.pk)]


@pytest.fixture
def org(make_user, client_for):
    """An org admin of acme (scope ``org=acme``) and sessions of two members and the org."""
    admin = make_user("boss", org="acme", admin=True)
    _spend("org=acme", "planner", "1", 10)
    _spend("org=acme/user=7", "coder", "0.25", 100)
    _spend("org=acme/user=7", "planner", "0.25", 100)
    _spend("org=acme/user=8", "coder", "3.000001", 1000)
    _spend("org=globex/user=9", "coder", "50", 5)
    return client_for(admin)


def test_usage_answers_the_totals_of_the_callers_scope(org):
    response = org.get(f"{BASE}usage/")
    assert response.status_code == 200
    assert response.json() == {
        "group_by": None,
        "totals": {
            "sessions": 4,
            "message_count": 4,
            "input_tokens": 1210,
            "output_tokens": 4,
            "cost": "4.500001",
            "context_tokens": 4 * estimate_tokens("assistant", [{"type": "text", "text": "x"}]),
        },
        "groups": None,
    }
    coder = org.get(f"{BASE}usage/", {"agent_id": "coder"}).json()["totals"]
    assert (coder["sessions"], coder["cost"]) == (2, "3.250001")


def test_usage_groups_by_agent_and_by_member(org):
    by_agent = org.get(f"{BASE}usage/", {"group_by": "agent_id"}).json()
    assert [(g["key"], g["sessions"], g["cost"]) for g in by_agent["groups"]] == [
        ("coder", 2, "3.250001"),
        ("planner", 2, "1.250000"),
    ]
    assert by_agent["totals"]["cost"] == "4.500001"
    by_scope = org.get(f"{BASE}usage/", {"group_by": "scope"}).json()
    assert [(g["key"], g["sessions"], g["input_tokens"]) for g in by_scope["groups"]] == [
        (None, 1, 10),
        ("org=acme/user=7", 2, 200),
        ("org=acme/user=8", 1, 1000),
    ]
    assert by_scope["totals"]["sessions"] == 4


def test_a_member_sees_only_their_own_usage(api, alice_scope):
    _spend(alice_scope, "a", "1", 1)
    _spend("org=acme/user=999", "a", "100", 100)
    assert api.get(f"{BASE}usage/").json()["totals"]["cost"] == "1.000000"


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"group_by": "org"}, "group_by"),
        ({"group_by": ""}, "group_by"),
        ({"archived": "maybe"}, "archived"),
        ({"group": "scope"}, "group"),
    ],
)
def test_usage_refuses_bad_parameters(org, params, field):
    response = org.get(f"{BASE}usage/", params)
    assert response.status_code == 400
    body = response.json()
    assert body["code"] in ("invalid_filter", "unknown_parameter")
    assert field in str(body)
