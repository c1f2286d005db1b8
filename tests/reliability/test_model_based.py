"""A model-based test of the API (docs/design.md §2.3, §5, §6, §12): random create, resolve,
update, delete, append, make-default, get and list calls over HTTP by several tenants, in nested
scopes whose values need escaping, with other tenants' ids mixed in.

Invariants checked after every step:

- an id the caller may not see answers exactly what a missing id answers (status and body, byte
  for byte), and changes nothing;
- every session's ``message_count`` equals its message rows;
- at most one default per agent and scope;
- the database holds exactly the sessions the model holds, with the model's counters.

Bounded (``MAX_EXAMPLES`` × ``STEPS``) so it runs in CI on SQLite and PostgreSQL.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

import pytest
from django.db.models import Count
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    initialize,
    invariant,
    rule,
    run_state_machine_as_test,
)
from rest_framework.test import APIClient

from cortex_sessions.models import Message, Session
from cortex_sessions.scope import Scope
from example_project.tenancy.models import Membership
from tests.api.conftest import BASE, session_url

pytestmark = pytest.mark.django_db

MAX_EXAMPLES = 12
STEPS = 25

#: Values of the nested ``project`` level: each needs escaping or is not ASCII.
PROJECTS = ["a/b", "50%", "k=v", "ü ñ", "plain"]
AGENTS = ["a", "b"]


@dataclass
class Tenant:
    client: APIClient
    scope: Scope


@dataclass
class Row:
    scope: Scope
    agent_id: str
    message_count: int
    is_default: bool


def make_tenants(django_user_model) -> list[Tenant]:
    """Two members of acme, the admin of acme (sees both), and a member of globex."""
    specs = [("alice", "acme", False), ("bob", "acme", False), ("ann", "acme", True)]
    specs.append(("carol", "globex", False))
    tenants = []
    for name, org, admin in specs:
        user = django_user_model.objects.create_user(username=f"mb-{name}", password="pw")
        Membership.objects.create(user=user, org=org, is_org_admin=admin)
        client = APIClient()
        client.force_authenticate(user)
        base = Scope.from_levels([("org", org)])
        tenants.append(Tenant(client, base if admin else base.child("user", str(user.pk))))
    return tenants


class APIModel(RuleBasedStateMachine):
    tenants: list[Tenant] = []

    sessions = Bundle("sessions")

    def __init__(self) -> None:
        super().__init__()
        Message.objects.all().delete()
        Session.objects.all().delete()
        self.rows: dict[str, Row] = {}

    # -- helpers --------------------------------------------------------------------------------

    def scope_of(self, tenant: int, project: int | None) -> Scope:
        base = self.tenants[tenant].scope
        return base if project is None else base.child("project", PROJECTS[project])

    def visible(self, tenant: int, session_id: str) -> bool:
        row = self.rows.get(session_id)
        return row is not None and self.tenants[tenant].scope.contains(row.scope)

    def call(self, tenant: int, method: str, url: str, body=None, scope: Scope | None = None):
        params = {"scope": scope.canonical} if scope is not None else {}
        client = self.tenants[tenant].client
        if method == "get":
            return client.get(url, params)
        query = f"?{'&'.join(f'{k}={v}' for k, v in _encoded(params).items())}" if params else ""
        return getattr(client, method)(url + query, body, format="json")

    def same_as_missing(self, tenant: int, method: str, session_id: str, suffix: str, body):
        response = self.call(tenant, method, session_url(session_id, suffix), body)
        missing = self.call(tenant, method, session_url(uuid.uuid4(), suffix), body)
        assert (response.status_code, response.content) == (missing.status_code, missing.content)
        assert response.status_code == 404
        return response

    def demote(self, scope: Scope, agent_id: str) -> None:
        for row in self.rows.values():
            if row.scope == scope and row.agent_id == agent_id:
                row.is_default = False

    # -- rules ----------------------------------------------------------------------------------

    @initialize()
    def start(self) -> None:
        assert not Session.objects.exists()

    tenant = st.integers(0, 3)
    project = st.none() | st.integers(0, len(PROJECTS) - 1)

    @rule(target=sessions, tenant=tenant, project=project, agent=st.sampled_from(AGENTS))
    def create(self, tenant, project, agent):
        scope = self.scope_of(tenant, project)
        response = self.call(tenant, "post", BASE, {"agent_id": agent, "title": "t"}, scope)
        assert response.status_code == 201, response.content
        body = response.json()
        assert body["scope"] == scope.canonical
        self.rows[body["id"]] = Row(scope, agent, 0, False)
        return body["id"]

    @rule(target=sessions, tenant=tenant, project=project, agent=st.sampled_from(AGENTS))
    def resolve(self, tenant, project, agent):
        scope = self.scope_of(tenant, project)
        existing = [
            sid
            for sid, row in self.rows.items()
            if row.scope == scope and row.agent_id == agent and row.is_default
        ]
        response = self.call(tenant, "post", f"{BASE}resolve/", {"agent_id": agent}, scope)
        body = response.json()
        if existing:
            assert (response.status_code, body["id"]) == (200, existing[0])
        else:
            assert response.status_code == 201, response.content
            self.rows[body["id"]] = Row(scope, agent, 0, True)
        return body["id"]

    @rule(tenant=tenant, session=sessions, count=st.integers(1, 3))
    def append(self, tenant, session, count):
        body = [{"role": "user", "content": f"m{n}"} for n in range(count)]
        if not self.visible(tenant, session):
            self.same_as_missing(tenant, "post", session, "messages/", body)
            return
        response = self.call(tenant, "post", session_url(session, "messages/"), body)
        assert response.status_code == 201, response.content
        self.rows[session].message_count += count
        assert response.json()["session"]["message_count"] == self.rows[session].message_count

    @rule(tenant=tenant, session=sessions)
    def get(self, tenant, session):
        if not self.visible(tenant, session):
            self.same_as_missing(tenant, "get", session, "", None)
            return
        body = self.call(tenant, "get", session_url(session)).json()
        row = self.rows[session]
        assert (body["message_count"], body["is_default"]) == (row.message_count, row.is_default)

    @rule(tenant=tenant, session=sessions, title=st.sampled_from(["x", "ü/%=", ""]))
    def update(self, tenant, session, title):
        if not self.visible(tenant, session):
            self.same_as_missing(tenant, "patch", session, "", {"title": title})
            return
        response = self.call(tenant, "patch", session_url(session), {"title": title})
        assert response.status_code == 200 and response.json()["title"] == title

    @rule(tenant=tenant, session=sessions)
    def make_default(self, tenant, session):
        if not self.visible(tenant, session):
            self.same_as_missing(tenant, "post", session, "make-default/", None)
            return
        response = self.call(tenant, "post", session_url(session, "make-default/"))
        assert response.status_code == 200, response.content
        row = self.rows[session]
        self.demote(row.scope, row.agent_id)
        row.is_default = True

    @rule(tenant=tenant, session=sessions)
    def delete(self, tenant, session):
        if not self.visible(tenant, session):
            self.same_as_missing(tenant, "delete", session, "", None)
            return
        assert self.call(tenant, "delete", session_url(session)).status_code == 204
        del self.rows[session]

    @rule(tenant=tenant, project=project)
    def list_and_count(self, tenant, project):
        scope = self.scope_of(tenant, project)
        expected = {sid for sid, row in self.rows.items() if scope.contains(row.scope)}
        page = self.call(tenant, "get", BASE, scope=scope).json()
        assert {item["id"] for item in page["results"]} == expected
        assert page["count"] == len(expected)
        count = self.call(tenant, "get", f"{BASE}count/", scope=scope).json()
        assert count == {"count": len(expected)}

    # -- invariants -----------------------------------------------------------------------------

    @invariant()
    def counters_equal_rows(self):
        rows = Session.objects.annotate(rows=Count("messages")).values_list(
            "pk", "message_count", "rows"
        )
        for pk, counted, actual in rows:
            assert counted == actual, pk
            assert counted == self.rows[str(pk)].message_count

    @invariant()
    def at_most_one_default_per_agent_and_scope(self):
        doubled = (
            Session.objects.filter(is_default=True)
            .values("agent_id", "scope")
            .annotate(n=Count("pk"))
            .filter(n__gt=1)
        )
        assert not doubled.exists()

    @invariant()
    def database_holds_the_model(self):
        stored = {str(pk): d for pk, d in Session.objects.values_list("pk", "is_default")}
        assert stored == {sid: row.is_default for sid, row in self.rows.items()}


def _encoded(params: dict[str, str]) -> dict[str, str]:
    from urllib.parse import quote

    return {key: quote(value, safe="") for key, value in params.items()}


def test_the_api_keeps_tenants_apart_and_counters_exact(django_user_model):
    APIModel.tenants = make_tenants(django_user_model)
    run_state_machine_as_test(
        APIModel,
        settings=settings(
            max_examples=MAX_EXAMPLES,
            stateful_step_count=STEPS,
            deadline=None,
            derandomize=True,
            database=None,
            suppress_health_check=list(HealthCheck),
        ),
    )
