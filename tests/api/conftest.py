"""Fixtures of the API tests: users in orgs, authenticated clients, the example resolver."""

from __future__ import annotations

import uuid

import pytest
from rest_framework.test import APIClient

from example_project.tenancy.models import Membership

ORG_RESOLVER = "example_project.tenancy.resolver.org_scope_resolver"
BASE = "/api/cortex/sessions/"


def session_url(session_id: object, suffix: str = "") -> str:
    """URL of one session, optionally of one of its sub-resources (``messages/`` …)."""
    return f"{BASE}{session_id}/{suffix}"


@pytest.fixture(autouse=True)
def org_resolver(settings):
    """The API tests run with the example project's resolver (org=<org>/user=<pk>)."""
    settings.CORTEX_SESSIONS = {"SCOPE_RESOLVER": ORG_RESOLVER}


@pytest.fixture
def make_user(django_user_model):
    """Factory: ``make_user("alice", org="acme", admin=False)``; ``org=None`` means no
    membership (the resolver then gives no scope)."""

    def make(username: str, *, org: str | None = "acme", admin: bool = False):
        user = django_user_model.objects.create_user(username=username, password="pw")
        if org is not None:
            Membership.objects.create(user=user, org=org, is_org_admin=admin)
        return user

    return make


@pytest.fixture
def client_for():
    """Factory: an ``APIClient`` authenticated as the given user (``None``: anonymous)."""

    def make(user=None) -> APIClient:
        client = APIClient()
        if user is not None:
            client.force_authenticate(user)
        return client

    return make


@pytest.fixture
def alice(make_user):
    """A member of acme: scope ``org=acme/user=<pk>``."""
    return make_user("alice", org="acme")


@pytest.fixture
def api(client_for, alice) -> APIClient:
    """A client authenticated as alice."""
    return client_for(alice)


@pytest.fixture
def alice_scope(alice) -> str:
    return f"org=acme/user={alice.pk}"


@pytest.fixture
def missing_id() -> str:
    return str(uuid.uuid4())
