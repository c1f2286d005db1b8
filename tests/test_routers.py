"""``ReplicaRouter``'s decisions, its settings' checks, the consistency positions, and the
admin and commands reading from the primary (docs/design.md §17.2), on every database. The
same router against a real standby: tests/replicas/."""

from __future__ import annotations

import math

import pytest
from django.contrib.auth.models import Group
from django.core.management import call_command
from django.core.management.base import SystemCheckError
from django.db import connection, transaction

from cortex_sessions import checks, consistency, routers
from cortex_sessions.models import Session

REPLICA = "replica"
LATEST = 2**63


@pytest.fixture
def replicas(settings):
    settings.CORTEX_SESSIONS = {"READ_REPLICAS": [REPLICA], "REPLICA_MAX_LAG": 10}
    routers.forget_statuses()
    yield
    routers.forget_statuses()


@pytest.fixture
def replica_says(monkeypatch):
    """Factory: the replica answers the router's question with ``replay_lsn``, ``lag`` (or is
    ``down``); returns the list of the questions asked."""
    asked: list[str] = []

    def install(*, replay_lsn: int | None = LATEST, lag: float = 0.0, down: bool = False):
        def ask(alias: str) -> routers.ReplicaStatus:
            asked.append(alias)
            now = routers.time.monotonic()
            return routers.ReplicaStatus(checked_at=now, replay_lsn=replay_lsn, lag=lag, down=down)

        monkeypatch.setattr(routers, "_ask", ask)
        return asked

    return install


def read_alias() -> str | None:
    return routers.ReplicaRouter().db_for_read(Session)


# -- checks -----------------------------------------------------------------------------------


@pytest.mark.parametrize("value", ["replica", None, 3, [1], {"replica": 1}])
def test_read_replicas_that_is_not_a_list_of_aliases_is_e020(settings, value):
    settings.CORTEX_SESSIONS = {"READ_REPLICAS": value}
    assert [e.id for e in checks.check_settings()] == ["cortex_sessions.E020"]


@pytest.mark.parametrize("value", [["nowhere"], ["default"]])
def test_read_replicas_naming_no_replica_alias_is_e020(settings, value):
    settings.CORTEX_SESSIONS = {"READ_REPLICAS": value}
    assert [e.id for e in checks.check_settings()] == ["cortex_sessions.E020"]


@pytest.mark.parametrize("value", [0, -1, "10", True, math.inf, math.nan, None])
def test_replica_max_lag_that_is_not_a_positive_number_is_e021(settings, value):
    settings.CORTEX_SESSIONS = {"REPLICA_MAX_LAG": value}
    assert [e.id for e in checks.check_settings()] == ["cortex_sessions.E021"]


@pytest.mark.filterwarnings("ignore:Overriding setting DATABASES")
def test_replica_settings_are_valid_by_default_and_with_a_real_alias(settings):
    assert checks.check_settings() == []
    settings.DATABASES = {**settings.DATABASES, REPLICA: dict(settings.DATABASES["default"])}
    settings.CORTEX_SESSIONS = {"READ_REPLICAS": [REPLICA], "REPLICA_MAX_LAG": 0.5}
    assert checks.check_settings() == []


def test_manage_py_check_fails_on_e020_and_e021(settings):
    settings.CORTEX_SESSIONS = {"READ_REPLICAS": ["nowhere"], "REPLICA_MAX_LAG": 0}
    with pytest.raises(SystemCheckError, match="E020") as raised:
        call_command("check")
    assert "cortex_sessions.E021" in str(raised.value)


# -- positions and tokens ---------------------------------------------------------------------


@pytest.mark.parametrize("text", ["0/0", "0/3000148", "16/B374D848", "FFFFFFFF/FFFFFFFF"])
def test_a_wal_position_round_trips(text):
    assert consistency.format_lsn(consistency.parse_lsn(text)) == text


@pytest.mark.parametrize("sent", ["", "  ", None])
def test_no_token_is_a_caller_that_wrote_nothing(sent):
    assert consistency.parse_token(sent) == consistency.Position()


@pytest.mark.parametrize("sent", ["x", "0/", "1/2/3", "123456789/0", "0/3\x00"])
def test_a_malformed_token_reads_from_the_primary(sent):
    assert consistency.parse_token(sent).unknown


# -- routing ----------------------------------------------------------------------------------


def test_without_replicas_every_read_goes_to_the_primary(settings):
    settings.CORTEX_SESSIONS = {}
    assert read_alias() == "default"


def test_other_apps_models_are_left_to_other_routers(replicas):
    assert routers.ReplicaRouter().db_for_read(Group) is None
    assert routers.ReplicaRouter().db_for_write(Group) is None


def test_a_caller_that_wrote_nothing_reads_from_a_fresh_replica(
    transactional_db, replicas, replica_says
):
    replica_says()
    with consistency.consistency_context():
        assert read_alias() == REPLICA
        assert consistency.replica_used() == REPLICA


def test_reads_inside_a_transaction_go_to_the_primary(transactional_db, replicas, replica_says):
    asked = replica_says()
    with transaction.atomic():
        assert read_alias() == "default"
    assert asked == []


def test_primary_reads_pins_every_read(transactional_db, replicas, replica_says):
    replica_says()
    with consistency.consistency_context(), consistency.primary_reads():
        assert read_alias() == "default"


def test_a_replica_behind_the_token_is_skipped_and_one_past_it_serves(
    transactional_db, replicas, replica_says
):
    replica_says(replay_lsn=consistency.parse_lsn("0/FF"))
    with consistency.consistency_context("0/100"):
        assert read_alias() == "default"
    with consistency.consistency_context("0/FF"):
        assert read_alias() == REPLICA


def test_a_behind_replica_is_asked_again_at_once(transactional_db, replicas, replica_says):
    asked = replica_says(replay_lsn=0)
    with consistency.consistency_context("0/100"):
        read_alias()
        read_alias()
    assert asked == [REPLICA, REPLICA]


def test_a_malformed_token_is_served_by_the_primary(transactional_db, replicas, replica_says):
    replica_says()
    with consistency.consistency_context("not a position"):
        assert read_alias() == "default"


def test_a_replica_lagging_past_the_max_is_skipped(transactional_db, replicas, replica_says):
    replica_says(lag=11)
    with consistency.consistency_context():
        assert read_alias() == "default"


def test_a_replica_that_is_down_is_skipped_and_left_alone(transactional_db, replicas, replica_says):
    asked = replica_says(down=True)
    with consistency.consistency_context():
        assert read_alias() == "default"
        assert read_alias() == "default"
    assert asked == [REPLICA]  # not asked again within RETRY_DOWN_SECONDS


def test_after_a_write_the_replica_serves_only_once_it_has_replayed_it(
    transactional_db, replicas, replica_says
):
    with consistency.consistency_context():
        assert routers.ReplicaRouter().db_for_write(Session) == "default"
        if connection.vendor != "postgresql":
            replica_says()
            assert read_alias() == "default"  # no position to compare: the primary
            return
        replica_says(replay_lsn=0)
        assert read_alias() == "default"
        position = consistency.current_position()
        assert position.lsn is not None and not position.pending
        replica_says(replay_lsn=position.lsn)
        assert read_alias() == REPLICA


def test_a_write_in_a_transaction_is_named_once_it_commits(transactional_db, replicas):
    with consistency.consistency_context():
        with transaction.atomic():
            consistency.remember_write("default")
            assert consistency.write_position("default").pending == {"default"}
        position = consistency.current_position()
        assert position.pending == {"default"}  # marked again by the commit
        resolved = consistency.write_position("default")
        assert not resolved.pending
        assert (resolved.lsn is not None) == (connection.vendor == "postgresql")


def test_replicas_get_no_migrations_and_relations_cross(replicas):
    router = routers.ReplicaRouter()
    assert router.allow_migrate(REPLICA, "cortex_sessions") is False
    assert router.allow_migrate("default", "cortex_sessions") is None
    one, other = Session(), Session()
    one._state.db, other._state.db = "default", REPLICA
    assert router.allow_relation(one, other) is True


# -- the admin and the commands read from the primary -------------------------------------------

seen: list[bool] = []


class SpyRouter:
    """Records, for each routed read, whether it runs inside ``primary_reads``."""

    def db_for_read(self, model, **hints):
        seen.append(consistency.reads_pinned_to_primary())


@pytest.fixture
def spy(settings):
    settings.DATABASE_ROUTERS = ["tests.test_routers.SpyRouter"]
    seen.clear()
    yield seen
    seen.clear()


def test_admin_pages_read_from_the_primary(admin_client, spy, session_factory):
    session = session_factory()
    assert admin_client.get("/admin/cortex_sessions/session/").status_code == 200
    page = admin_client.get(f"/admin/cortex_sessions/session/{session.pk}/change/")
    assert page.status_code == 200
    assert spy and all(spy)


def test_management_commands_read_from_the_primary(
    spy, transactional_db, session_factory, tmp_path
):
    # Outside a transaction: inside one (a test case's) the app reads on the write database
    # without asking the router (docs/design.md §17.1).
    session = session_factory()
    call_command("cortex_sessions_export", "--scope", session.scope, "-o", str(tmp_path / "x"))
    assert spy and all(spy)
