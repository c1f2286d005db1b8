"""Resolve re-reads, and creates again, when the default it collided with is deleted before
the re-read (case ``resolve-races-delete``, docs/design.md §12.3). The race is staged here on
any database; ``test_database_faults`` runs it for real with threads on PostgreSQL."""

from __future__ import annotations

import pytest
from django.db import IntegrityError, OperationalError, transaction

from cortex_sessions import services
from cortex_sessions.exceptions import DefaultConflict
from cortex_sessions.models import Session

pytestmark = pytest.mark.django_db

SCOPE = "org=acme/user=1"


def _staged_create(monkeypatch, collisions: int):
    """``Session.objects.create`` that, ``collisions`` times, lets a 'concurrent' resolve win
    and a 'concurrent' delete remove the winner before raising the unique violation."""
    real_create = Session.objects.create
    calls: list[int] = []

    def create(**values):
        calls.append(1)
        if len(calls) <= collisions:
            real_create(**values).delete()
            raise IntegrityError("duplicate key value violates cortex_session_one_default")
        return real_create(**values)

    monkeypatch.setattr(Session.objects, "create", create)
    return calls


def test_resolve_creates_again_when_the_winner_was_deleted(monkeypatch):
    calls = _staged_create(monkeypatch, collisions=3)

    session, created = services.resolve_session(scope=SCOPE, agent_id="a")

    assert created is True
    assert len(calls) == 4
    assert list(Session.objects.filter(is_default=True).values_list("pk", flat=True)) == [
        session.pk
    ]


def test_resolve_gives_up_with_a_conflict_code_after_its_attempts(monkeypatch):
    _staged_create(monkeypatch, collisions=services.sessions.RESOLVE_ATTEMPTS)

    with pytest.raises(DefaultConflict):
        services.resolve_session(scope=SCOPE, agent_id="a")


@pytest.mark.django_db(transaction=True)
def test_resolve_runs_again_when_the_database_broke_a_deadlock_with_its_create(monkeypatch):
    """InnoDB rolls a resolve's insert back when it deadlocks with a make-default swap on the
    one-default index (docs/design.md §15.4); resolve retries it as make-default does."""
    real_create = Session.objects.create
    calls: list[int] = []

    def create(**values):
        calls.append(1)
        if len(calls) == 1:
            raise OperationalError(1213, "Deadlock found when trying to get lock")
        return real_create(**values)

    monkeypatch.setattr(Session.objects, "create", create)

    session, created = services.resolve_session(scope=SCOPE, agent_id="a")

    assert (created, len(calls)) == (True, 2)
    assert list(Session.objects.filter(is_default=True).values_list("pk", flat=True)) == [
        session.pk
    ]


def test_resolve_inside_a_callers_transaction_lets_a_deadlock_propagate(monkeypatch):
    """The deadlock rolled the caller's transaction back too, so running the insert again
    inside it would be wrong (docs/design.md §15.4)."""

    def create(**values):
        raise OperationalError(1213, "Deadlock found when trying to get lock")

    monkeypatch.setattr(Session.objects, "create", create)

    with pytest.raises(OperationalError):
        services.resolve_session(scope=SCOPE, agent_id="a")


@pytest.mark.django_db(transaction=True)
def test_resolve_under_manual_transaction_management_lets_a_deadlock_propagate(monkeypatch):
    """Autocommit turned off by the host is the caller's transaction too: InnoDB's rollback
    undid the host's earlier writes, so a retry that then succeeded let the host commit
    without them (docs/design.md §15.4)."""
    calls: list[int] = []

    def create(**values):
        calls.append(1)
        raise OperationalError(1213, "Deadlock found when trying to get lock")

    monkeypatch.setattr(Session.objects, "create", create)
    transaction.set_autocommit(False)
    try:
        with pytest.raises(OperationalError):
            services.resolve_session(scope=SCOPE, agent_id="a")
        transaction.rollback()
    finally:
        transaction.set_autocommit(True)
    assert len(calls) == 1
