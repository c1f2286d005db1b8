"""Migration ``cortex_adk.0002`` keys app state by tenant and user state by scope, forward and
backward on a populated database (docs/design.md §13.3)."""

from __future__ import annotations

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from cortex_sessions import services

pytestmark = pytest.mark.django_db(transaction=True)

APP = "cortex_adk"
BEFORE = "0001_adk_sessions_and_state"
AFTER = "0002_tenant_keyed_shared_state"


def migrate(name):
    MigrationExecutor(connection).migrate([(APP, name)])
    return MigrationExecutor(connection).loader.project_state([(APP, name)]).apps


@pytest.fixture
def at_0001():
    apps = migrate(BEFORE)
    try:
        yield apps
    finally:
        executor = MigrationExecutor(connection)
        executor.migrate(executor.loader.graph.leaf_nodes())


def test_shared_state_moves_to_its_tenant_and_scope_and_back(at_0001):
    AdkSession = at_0001.get_model(APP, "AdkSession")
    AdkAppState = at_0001.get_model(APP, "AdkAppState")
    AdkUserState = at_0001.get_model(APP, "AdkUserState")
    # One user id whose sessions lie at two scopes (a tenant-dependent mapping), one at one.
    for scope, user, adk_id in [
        ("org=acme/user=1", "1", "a"),
        ("org=globex/user=1", "1", "b"),
        ("org=acme/user=2", "2", "c"),
    ]:
        cortex = services.create_session(scope=scope, agent_id="bot")
        AdkSession.objects.create(
            session_id=cortex.pk, app_name="bot", user_id=user, adk_id=adk_id, state={}
        )
    AdkAppState.objects.create(app_name="bot", state={"plan": "gold"})
    AdkUserState.objects.create(app_name="bot", user_id="1", state={"n": 1})
    AdkUserState.objects.create(app_name="bot", user_id="2", state={"n": 2})
    AdkUserState.objects.create(app_name="bot", user_id="3", state={"n": 3})  # no sessions

    apps = migrate(AFTER)
    AdkAppState = apps.get_model(APP, "AdkAppState")
    AdkUserState = apps.get_model(APP, "AdkUserState")
    assert list(AdkAppState.objects.values_list("tenant", "app_name", "state")) == [
        ("", "bot", {"plan": "gold"})
    ]
    assert sorted(AdkUserState.objects.values_list("scope", "user_id", "state")) == [
        ("", "3", {"n": 3}),
        ("org=acme/user=1", "1", {"n": 1}),
        ("org=acme/user=2", "2", {"n": 2}),
        ("org=globex/user=1", "1", {"n": 1}),
    ]
    AdkAppState.objects.create(tenant="org=acme", app_name="bot", state={"plan": "free"})

    apps = migrate(BEFORE)
    AdkAppState = apps.get_model(APP, "AdkAppState")
    AdkUserState = apps.get_model(APP, "AdkUserState")
    assert list(AdkAppState.objects.values_list("app_name", "state")) == [("bot", {"plan": "gold"})]
    assert sorted(AdkUserState.objects.values_list("user_id", "state")) == [
        ("1", {"n": 1}),
        ("2", {"n": 2}),
        ("3", {"n": 3}),
    ]
