"""Request scopes: resolver, narrowing, refusals, the example project's org admins (§2.5)."""

from __future__ import annotations

import base64

import pytest
from rest_framework.test import APIClient

from cortex_sessions import services
from tests.api.conftest import BASE

pytestmark = pytest.mark.django_db


def listed_ids(response) -> set[str]:
    assert response.status_code == 200, response.json()
    return {row["id"] for row in response.json()["results"]}


@pytest.fixture
def acme(make_user):
    """alice and bob are acme members, boss is acme's admin; each has one session."""
    alice = make_user("alice2", org="acme")
    bob = make_user("bob", org="acme")
    boss = make_user("boss", org="acme", admin=True)
    sessions = {
        name: services.create_session(
            scope=f"org=acme/user={user.pk}", agent_id="coder", title=name
        )
        for name, user in (("alice", alice), ("bob", bob))
    }
    sessions["org"] = services.create_session(scope="org=acme", agent_id="coder", title="org")
    return {"alice": alice, "bob": bob, "boss": boss, "sessions": sessions}


def test_anonymous_requests_are_refused_as_not_authenticated(client_for):
    response = client_for(None).get(BASE)
    assert response.status_code in (401, 403)
    assert response.json()["code"] == "not_authenticated"


def test_bad_basic_credentials_are_refused_as_authentication_failed(make_user):
    make_user("dora")
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION="Basic " + base64.b64encode(b"dora:wrong").decode())
    response = client.get(BASE)
    # 401 when the host's first authentication class sends WWW-Authenticate, else 403.
    assert response.status_code in (401, 403)
    assert response.json()["code"] == "authentication_failed"


def test_basic_auth_with_the_right_password_works(make_user):
    make_user("dora")
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION="Basic " + base64.b64encode(b"dora:pw").decode())
    assert client.get(BASE).status_code == 200


def test_a_user_the_resolver_gives_no_scope_gets_403_no_scope(make_user, client_for):
    response = client_for(make_user("drifter", org=None)).get(BASE)
    assert response.status_code == 403
    assert response.json()["code"] == "no_scope"


def test_default_resolver_scopes_by_user(make_user, client_for, settings):
    settings.CORTEX_SESSIONS = {}
    user = make_user("plain", org=None)
    response = client_for(user).post(BASE, {"agent_id": "a"}, format="json")
    assert response.json()["scope"] == f"user={user.pk}"


def test_a_member_sees_only_their_own_sessions(acme, client_for):
    response = client_for(acme["alice"]).get(BASE)
    assert listed_ids(response) == {str(acme["sessions"]["alice"].pk)}


def test_an_org_admin_sees_every_session_of_the_org(acme, client_for, make_user):
    services.create_session(scope="org=globex/user=1", agent_id="coder")
    response = client_for(acme["boss"]).get(BASE)
    assert listed_ids(response) == {str(s.pk) for s in acme["sessions"].values()}


def test_an_org_admin_can_read_and_edit_a_members_session(acme, client_for):
    session = acme["sessions"]["bob"]
    client = client_for(acme["boss"])
    assert client.get(f"{BASE}{session.pk}/").status_code == 200
    assert client.patch(f"{BASE}{session.pk}/", {"title": "x"}, format="json").status_code == 200


def test_an_org_admin_resolves_the_default_at_the_org_level(acme, client_for):
    response = client_for(acme["boss"]).post(f"{BASE}resolve/", {"agent_id": "a"}, format="json")
    assert response.status_code == 201
    assert response.json()["scope"] == "org=acme"


@pytest.mark.parametrize("how", ["header", "param"])
def test_narrowing_to_a_members_scope_shows_only_that_scope(acme, client_for, how):
    scope = f"org=acme/user={acme['bob'].pk}"
    client = client_for(acme["boss"])
    if how == "header":
        response = client.get(BASE, HTTP_X_CORTEX_SCOPE=scope)
    else:
        response = client.get(BASE, {"scope": scope})
    assert listed_ids(response) == {str(acme["sessions"]["bob"].pk)}


def test_narrowing_with_exact_shows_only_sessions_stored_at_that_scope(acme, client_for):
    response = client_for(acme["boss"]).get(BASE, {"exact": "true"})
    assert listed_ids(response) == {str(acme["sessions"]["org"].pk)}


def test_a_member_may_narrow_beneath_their_scope(acme, client_for):
    alice = acme["alice"]
    scope = f"org=acme/user={alice.pk}/project=apollo"
    client = client_for(alice)
    created = client.post(BASE, {"agent_id": "a"}, format="json", HTTP_X_CORTEX_SCOPE=scope)
    assert created.status_code == 201
    assert created.json()["scope"] == scope
    assert listed_ids(client.get(BASE, {"scope": scope})) == {created.json()["id"]}


@pytest.mark.parametrize(
    "scope",
    ["org=acme", "org=globex", "org=acme/user={bob}", "org=acme2/user={alice}", "user={alice}"],
)
@pytest.mark.parametrize("how", ["header", "param"])
def test_narrowing_to_a_wider_or_sibling_scope_is_403_scope_forbidden(acme, client_for, scope, how):
    scope = scope.format(alice=acme["alice"].pk, bob=acme["bob"].pk)
    client = client_for(acme["alice"])
    kwargs = {"HTTP_X_CORTEX_SCOPE": scope} if how == "header" else {}
    data = {"scope": scope} if how == "param" else None
    response = client.get(BASE, data, **kwargs)
    assert response.status_code == 403
    assert response.json() == {
        "code": "scope_forbidden",
        "detail": "The requested scope is outside the scope this request may use.",
    }


@pytest.mark.parametrize("scope", ["nonsense", "org=", "Org=acme", "org=a/b=c/d=e/f=g"])
def test_narrowing_to_a_malformed_scope_is_400_invalid_scope(acme, client_for, scope):
    response = client_for(acme["alice"]).get(BASE, {"scope": scope})
    assert response.status_code == 400
    assert response.json()["code"] == "invalid_scope"


def test_header_and_parameter_that_disagree_are_400(acme, client_for):
    alice = acme["alice"].pk
    response = client_for(acme["alice"]).get(
        BASE,
        {"scope": f"org=acme/user={alice}/p=1"},
        HTTP_X_CORTEX_SCOPE=f"org=acme/user={alice}/p=2",
    )
    assert response.status_code == 400
    assert response.json()["code"] == "invalid_scope"


def test_narrowing_applies_to_detail_endpoints(acme, client_for):
    session = acme["sessions"]["bob"]
    response = client_for(acme["boss"]).get(
        f"{BASE}{session.pk}/", {"scope": f"org=acme/user={acme['alice'].pk}"}
    )
    assert response.status_code == 404


@pytest.mark.parametrize("value", ["café", "😀", "日本"])
def test_a_utf8_scope_header_narrows_like_the_query_parameter(make_user, client_for, value):
    bob = make_user("bob", org="acme")
    scope = f"org=acme/user={bob.pk}/p={value}"
    # WSGI hands header bytes over decoded as Latin-1; the client sent UTF-8.
    wire = scope.encode("utf-8").decode("latin-1")
    client = client_for(bob)
    created = client.post(BASE, {"agent_id": "a"}, format="json", HTTP_X_CORTEX_SCOPE=wire)
    assert created.status_code == 201, created.json()
    assert created.json()["scope"] == scope
    listed = client.get(BASE, {"scope": scope})
    assert [row["id"] for row in listed.json()["results"]] == [created.json()["id"]]


def test_a_scope_header_that_is_not_utf8_is_a_400(make_user, client_for):
    bob = make_user("bob", org="acme")
    wire = f"org=acme/user={bob.pk}/p=".encode().decode("latin-1") + "\xff"
    response = client_for(bob).get(BASE, HTTP_X_CORTEX_SCOPE=wire)
    assert response.status_code == 400
    assert response.json()["code"] == "invalid_scope"


def test_a_repeated_scope_parameter_is_a_400_not_the_last_one_silently(make_user, client_for):
    bob = make_user("bob", org="acme")
    mine = f"org=acme/user={bob.pk}"
    response = client_for(bob).get(f"{BASE}?scope={mine}&scope={mine}/p=x")
    assert response.status_code == 400
    assert response.json()["code"] == "invalid_filter"
    assert response.json()["errors"]["scope"][0]["code"] == "repeated_parameter"
