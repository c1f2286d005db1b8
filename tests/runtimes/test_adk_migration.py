"""Migrations ``cortex_adk.0002`` (app state keyed by tenant, user state by scope) and ``0003``
(session ids unique per scope; hashed unique keys), forward and backward on a populated database
(docs/design.md §13.3)."""

from __future__ import annotations

import contextvars

import pytest
from django.db import IntegrityError, connection, transaction
from django.db.migrations.exceptions import IrreversibleError
from django.db.migrations.executor import MigrationExecutor
from django.db.migrations.loader import MigrationLoader
from django.db.migrations.recorder import MigrationRecorder

from cortex_sessions import services
from tests.test_migrations import originals_only

pytestmark = pytest.mark.django_db(transaction=True)

APP = "cortex_adk"
BEFORE = "0001_adk_sessions_and_state"
AFTER = "0002_tenant_keyed_shared_state"


def migrate(name):
    """Migrate the ADK app to ``name``, an original replaced by ``0001_squashed_0003_adk_state``
    (planned with the originals alone, as ``tests.test_migrations.Migrator`` does); return the
    historical ``apps`` of that state."""
    target = [(APP, name)]
    executor = MigrationExecutor(connection)
    if target[0] not in executor.loader.graph.node_map:
        originals_only(executor.loader)
    executor.migrate(target)
    loader = MigrationLoader(connection)
    if target[0] not in loader.graph.node_map:
        originals_only(loader)
    return loader.project_state(target).apps


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


AT_0002 = AFTER
KEYED = "0003_tenant_unique_session_ids"


@pytest.fixture
def at_0002():
    apps = migrate(AT_0002)
    try:
        yield apps
    finally:
        executor = MigrationExecutor(connection)
        executor.migrate(executor.loader.graph.leaf_nodes())


def _adk_session(apps, scope, user, adk_id):
    cortex = services.create_session(scope=scope, agent_id="bot")
    return apps.get_model(APP, "AdkSession").objects.create(
        session_id=cortex.pk, app_name="bot", user_id=user, adk_id=adk_id, state={"id": adk_id}
    )


def test_existing_sessions_and_user_states_get_the_keys_the_service_finds_them_by(
    at_0002, settings
):
    pytest.importorskip("google.adk")
    from asgiref.sync import async_to_sync

    from cortex_sessions.integrations.adk import CortexSessionService

    settings.CORTEX_SESSIONS_ADK_SCOPE = "tests.runtimes.test_adk_migration.org_scope"
    _adk_session(at_0002, "org=acme/user=1", "1", "s")
    _adk_session(at_0002, "org=acme/user=1", "1", "t")
    at_0002.get_model(APP, "AdkUserState").objects.create(
        scope="org=acme/user=1", app_name="bot", user_id="1", state={"n": 1}
    )

    migrate(KEYED)
    service = CortexSessionService()
    got = async_to_sync(service.get_session)(app_name="bot", user_id="1", session_id="s")
    assert got.state == {"id": "s", "user:n": 1}
    assert async_to_sync(service.get_user_state)(app_name="bot", user_id="1") == {"n": 1}
    # The id is free in another tenant now, and still taken in its own.
    current_org.set("globex")
    async_to_sync(service.create_session)(app_name="bot", user_id="1", session_id="s")
    current_org.set("acme")
    from google.adk.errors.already_exists_error import AlreadyExistsError

    with pytest.raises(AlreadyExistsError):
        async_to_sync(service.create_session)(app_name="bot", user_id="1", session_id="t")


def test_backward_is_refused_before_any_change_while_an_id_is_used_at_two_scopes(at_0002):
    apps = migrate(KEYED)
    AdkSession = apps.get_model(APP, "AdkSession")
    acme = _adk_session(apps, "org=acme/user=1", "1", "s")
    AdkSession.objects.filter(pk=acme.pk).update(key="a" * 64)
    globex = _adk_session(apps, "org=globex/user=1", "1", "s")
    AdkSession.objects.filter(pk=globex.pk).update(key="b" * 64)

    with pytest.raises(IrreversibleError, match=r"\('bot', '1', 's'\)"):
        migrate(AT_0002)
    assert MigrationRecorder(connection).migration_qs.filter(app=APP, name=KEYED).exists()
    columns = [
        c.name
        for c in connection.introspection.get_table_description(
            connection.cursor(), AdkSession._meta.db_table
        )
    ]
    assert "key" in columns

    AdkSession.objects.filter(pk=globex.pk).delete()
    apps = migrate(AT_0002)
    AdkSession = apps.get_model(APP, "AdkSession")
    assert list(AdkSession.objects.values_list("adk_id", "state")) == [("s", {"id": "s"})]
    with pytest.raises(IntegrityError), transaction.atomic():
        _adk_session(apps, "org=globex/user=1", "1", "s")  # the old key is back


current_org: contextvars.ContextVar[str] = contextvars.ContextVar("current_org", default="acme")


def org_scope(app_name, user_id):
    return f"org={current_org.get()}/user={user_id}"
