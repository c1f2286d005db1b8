"""Another tenant's session is indistinguishable from a missing one, everywhere (docs/design.md §7.3)."""

from __future__ import annotations

import pytest

from cortex_sessions import services
from cortex_sessions.models import Message, Session
from tests.api.conftest import BASE, session_url

pytestmark = pytest.mark.django_db

#: Every endpoint that takes a session id: (method, suffix, body).
ID_ENDPOINTS = [
    ("get", "", None),
    ("put", "", {"title": "stolen", "metadata": {"x": 1}, "cwd": "/x"}),
    ("patch", "", {"title": "stolen"}),
    ("delete", "", None),
    ("post", "make-default/", None),
    ("get", "messages/", None),
    ("get", "messages/?limit=1&before_seq=5", None),
    ("post", "messages/", {"role": "user", "content": "injected"}),
    ("post", "messages/", [{"role": "user", "content": "injected"}]),
]


@pytest.fixture
def tenants(make_user):
    """Two orgs: alice is acme's member, olga acme's admin; carol is globex's member, and
    bob another acme member. Each of carol and bob has a session with a message."""
    alice = make_user("alice-t", org="acme")
    olga = make_user("olga", org="acme", admin=True)
    carol = make_user("carol", org="globex")
    bob = make_user("bob-t", org="acme")
    foreign = {}
    for name, user, org in (("carol", carol, "globex"), ("bob", bob, "acme")):
        scope = f"org={org}/user={user.pk}"
        session, _ = services.resolve_session(scope=scope, agent_id="coder")
        services.append_messages(
            scope=scope, session_id=session.pk, messages=[{"role": "user", "content": "secret"}]
        )
        foreign[name] = session
    return {"alice": alice, "olga": olga, "carol": carol, "foreign": foreign}


def snapshot() -> list[tuple]:
    sessions = Session.objects.order_by("pk").values_list(
        "pk", "title", "metadata", "cwd", "is_default", "message_count", "updated_at"
    )
    return [*sessions, *Message.objects.order_by("pk").values_list("pk", "content")]


@pytest.mark.parametrize(("method", "suffix", "body"), ID_ENDPOINTS)
@pytest.mark.parametrize(
    ("caller", "victim"),
    [("alice", "carol"), ("olga", "carol"), ("alice", "bob"), ("carol", "bob")],
)
def test_another_tenants_session_id_is_the_same_404_as_a_missing_one(
    tenants, client_for, missing_id, caller, victim, method, suffix, body
):
    client = client_for(tenants[caller])
    victim_id = tenants["foreign"][victim].pk
    before = snapshot()
    foreign = getattr(client, method)(session_url(victim_id, suffix), body, format="json")
    missing = getattr(client, method)(session_url(missing_id, suffix), body, format="json")
    assert foreign.status_code == missing.status_code == 404
    assert foreign.content == missing.content
    assert foreign.json() == {"code": "session_not_found", "detail": "Session not found."}
    assert snapshot() == before


@pytest.mark.parametrize(("caller", "victim"), [("alice", "carol"), ("olga", "carol")])
def test_resolving_another_tenants_session_id_is_the_same_404(
    tenants, client_for, missing_id, caller, victim
):
    client = client_for(tenants[caller])
    url = f"{BASE}resolve/"
    foreign_id = str(tenants["foreign"][victim].pk)
    foreign = client.post(url, {"agent_id": "coder", "session_id": foreign_id}, format="json")
    missing = client.post(url, {"agent_id": "coder", "session_id": missing_id}, format="json")
    assert foreign.status_code == missing.status_code == 404
    assert foreign.content == missing.content


@pytest.mark.parametrize("caller", ["alice", "olga"])
def test_lists_and_counts_never_show_another_tenants_sessions(tenants, client_for, caller):
    client = client_for(tenants[caller])
    listed = {row["id"] for row in client.get(BASE).json()["results"]}
    assert str(tenants["foreign"]["carol"].pk) not in listed
    assert client.get(f"{BASE}count/", {"agent_id": "coder"}).json()["count"] == (
        1 if caller == "olga" else 0  # olga sees bob's acme session, never carol's
    )


def test_the_org_admin_sees_a_members_session_the_other_member_cannot(tenants, client_for):
    bob_session = tenants["foreign"]["bob"].pk
    assert client_for(tenants["olga"]).get(session_url(bob_session)).status_code == 200
    assert client_for(tenants["alice"]).get(session_url(bob_session)).status_code == 404
