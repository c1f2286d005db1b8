"""Erasure against concurrent writers, on PostgreSQL and MariaDB (docs/design.md §18.2).

Real transactions in threads (``concurrent_db``: skipped on SQLite, whose writers serialize on
the database lock).
"""

from __future__ import annotations

import threading

import pytest
from django.db import connections, transaction

from cortex_sessions import services
from cortex_sessions.models import Erasure, Message, Session

from .erasure_data import populate
from .test_concurrency import run_together

pytestmark = [pytest.mark.concurrent_db, pytest.mark.django_db(transaction=True)]


def test_a_hold_committed_while_the_erasure_waits_for_the_row_wins():
    populate(sessions_per_user=3)
    target = Session.objects.within("org=acme").filter(message_count=3).order_by("pk").first()
    locked, release = threading.Event(), threading.Event()

    def hold() -> None:
        try:
            with transaction.atomic():
                Session.objects.select_for_update().filter(pk=target.pk).update(legal_hold=True)
                locked.set()
                release.wait(timeout=60)
        finally:
            connections.close_all()

    holder = threading.Thread(target=hold)
    holder.start()
    assert locked.wait(timeout=60)
    result: dict[str, Erasure] = {}

    def erase() -> None:
        try:
            result["record"] = services.erase_scope(scope="org=acme", batch_size=500)
        finally:
            connections.close_all()

    eraser = threading.Thread(target=erase)
    eraser.start()
    eraser.join(timeout=1)  # the erasure reaches the locked row and waits (or has not yet)
    release.set()
    holder.join(timeout=60)
    eraser.join(timeout=120)
    assert not eraser.is_alive()

    assert list(Session.objects.within("org=acme")) == [target]
    assert Message.objects.filter(session=target).count() == 3
    assert result["record"].skipped_held == 1


def test_two_erasures_of_one_scope_at_once_delete_each_row_once_and_leave_nothing():
    populate(sessions_per_user=5)
    total = services.erase_scope(scope="org=acme", dry_run=True).counts

    records = run_together(2, lambda _: services.erase_scope(scope="org=acme", batch_size=2))

    assert not Session.objects.within("org=acme").exists()
    summed: dict[str, int] = {}
    for record in records:
        assert record.status == "done"
        for label, count in record.counts.items():
            summed[label] = summed.get(label, 0) + count
    assert summed == total
    assert Session.objects.within("org=globex").count() == 14
