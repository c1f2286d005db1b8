"""Erasure by scope (docs/design.md §18.2): exact, scoped, batched, resumable."""

from __future__ import annotations

import pytest
from django.core.management import CommandError, call_command

from cortex_sessions.exceptions import ErasureNotFound, InvalidInput, InvalidScope, NoScope
from cortex_sessions.models import Erasure, Message, Session
from cortex_sessions.services import erasure

from .erasure_data import TENANTS, populate, scope_of, snapshot, within

pytestmark = pytest.mark.django_db


def _deleted(before: dict, after: dict) -> dict[str, dict[str, list]]:
    return {
        label: {pk: row for pk, row in rows.items() if pk not in after[label]}
        for label, rows in before.items()
    }


@pytest.mark.parametrize("batch_size", [1, 3, 500])
def test_erasing_one_tenant_deletes_its_rows_and_no_other_row(batch_size):
    populate()
    before = snapshot()
    planned = erasure.erase_scope(scope="org=acme", dry_run=True)
    record = erasure.erase_scope(scope="org=acme", batch_size=batch_size, requested_by="7")
    after = snapshot()
    deleted = _deleted(before, after)

    # No row changed or appeared: every row after is the row before.
    for label, rows in after.items():
        for pk, row in rows.items():
            assert before[label].get(pk) == row, (label, pk)
    # Exactly the rows at or beneath org=acme went, every one of them.
    for label, rows in before.items():
        for pk, row in rows.items():
            assert (pk in deleted[label]) == within(scope_of(label, row, before), "org=acme"), (
                label,
                row,
            )
    counts = {label: len(rows) for label, rows in deleted.items() if rows}
    assert record.counts == counts
    assert planned.counts == counts
    assert counts == {
        "cortex_sessions.Session": 8,  # 2 users x (2 created + 1 imported + 1 ADK)
        "cortex_sessions.Message": 16,  # 2 x (2 x 3 + 1 imported + 1 legacy)
        "cortex_sessions.ImportedConversation": 2,
        "cortex_sessions.IdempotencyKey": 8,  # 2 x (2 creates + 2 appends)
        "cortex_adk.AdkSession": 2,
        "cortex_adk.AdkUserState": 2,
        "cortex_adk.AdkAppState": 1,
    }
    stored = Erasure.objects.get(pk=record.pk)
    assert (stored.status, stored.counts, stored.skipped_held) == ("done", counts, 0)
    assert stored.scope == "org=acme" and stored.requested_by == "7"
    assert stored.finished_at is not None


def test_erasing_a_user_scope_keeps_the_tenants_other_users_and_app_state():
    populate()
    before = snapshot()
    record = erasure.erase_scope(scope="org=globex/user=2")
    deleted = _deleted(before, snapshot())
    assert all(
        within(scope_of(label, row, before), "org=globex/user=2")
        for label, rows in deleted.items()
        for row in rows.values()
    )
    assert record.counts["cortex_sessions.Session"] == 4
    assert "cortex_adk.AdkAppState" not in record.counts  # bound to org=globex, above
    assert Session.objects.filter(scope="org=globex/user=1").count() == 4


def test_dry_run_writes_nothing():
    populate()
    before = snapshot()
    planned = erasure.erase_scope(scope="org=globex", dry_run=True)
    assert planned.counts["cortex_sessions.Session"] == 8
    assert planned._state.adding  # not saved
    assert snapshot() == before
    assert not Erasure.objects.exists()


@pytest.mark.parametrize(
    ("scope", "error"),
    [
        ("", NoScope),
        ("   ", NoScope),
        (None, NoScope),
        ("org", InvalidScope),
        ("org=acme/", InvalidScope),
        ("*", InvalidScope),
    ],
)
def test_an_empty_or_unparsable_scope_is_refused_and_nothing_is_deleted(scope, error):
    populate(sessions_per_user=1)
    before = snapshot()
    with pytest.raises(error):
        erasure.erase_scope(scope=scope)
    with pytest.raises(error):
        erasure.erase_scope(scope=scope, dry_run=True)
    assert snapshot() == before
    assert not Erasure.objects.exists()


@pytest.mark.parametrize("batch_size", [0, -1, 10_001, True, "5"])
def test_a_bad_batch_size_is_refused(batch_size):
    with pytest.raises(InvalidInput):
        erasure.erase_scope(scope="org=acme", batch_size=batch_size)
    assert not Erasure.objects.exists()


def test_resume_finishes_an_interrupted_erasure_with_exact_counts():
    populate()
    total = erasure.erase_scope(scope="org=acme", dry_run=True).counts
    # Interrupted after its first session batch: the record says running, partial counts.
    with pytest.raises(KeyboardInterrupt):

        def stop(record: Erasure) -> None:
            if record.counts.get("cortex_sessions.Session"):
                raise KeyboardInterrupt

        erasure.erase_scope(scope="org=acme", batch_size=2, on_batch=stop)
    record = Erasure.objects.get()
    assert record.status == "running"
    assert record.counts["cortex_sessions.Session"] == 2
    assert Session.objects.within("org=acme").count() == 6
    resumed = erasure.resume_erasure(erasure_id=record.pk, batch_size=2)
    assert resumed.status == "done"
    assert resumed.counts == total
    assert not Session.objects.within("org=acme").exists()
    assert not Message.objects.filter(scope__startswith="org=acme/").exists()


def test_resume_of_an_unknown_erasure_is_not_found():
    with pytest.raises(ErasureNotFound):
        erasure.resume_erasure(erasure_id="not-a-uuid")
    with pytest.raises(ErasureNotFound):
        erasure.get_erasure(erasure_id="0190f5a0-0000-7000-8000-000000000000")


def test_sessions_created_at_the_scope_during_an_erasure_are_erased_too():
    populate(sessions_per_user=1)
    from cortex_sessions import services

    def add_one(record: Erasure) -> None:
        if record.counts.get("cortex_sessions.Session") == 1:
            services.create_session(scope="org=acme/user=9", agent_id="late")

    record = erasure.erase_scope(scope="org=acme", batch_size=1, on_batch=add_one)
    assert not Session.objects.within("org=acme").exists()
    assert record.counts["cortex_sessions.Session"] == 7  # 2 x (1 + 1 imported + 1 ADK) + 1


def test_unfinished_erasure_finds_the_pending_record_of_exactly_that_scope():
    done = Erasure.objects.create(scope="org=acme", status="done")
    running = Erasure.objects.create(scope="org=acme", status="running")
    Erasure.objects.create(scope="org=acme/user=1", status="pending")
    assert erasure.unfinished_erasure(scope="org=acme") == running
    assert erasure.unfinished_erasure(scope="org=globex") is None
    assert done.pk != running.pk


# -- the command ----------------------------------------------------------------------------------


def test_command_erases_and_prints_the_id_and_counts(capsys):
    populate(sessions_per_user=1)
    call_command("cortex_sessions_erase", "--scope", "org=acme", "--batch-size", "2")
    out = capsys.readouterr().out
    record = Erasure.objects.get()
    assert out.splitlines()[0] == f"Erasure {record.pk} of org=acme"
    assert f"Erasure {record.pk} done" in out
    assert '"cortex_sessions.Session": 6' in out
    assert record.requested_by.startswith("cli")
    assert not Session.objects.within("org=acme").exists()


def test_command_dry_run_prints_counts_and_deletes_nothing(capsys):
    populate(sessions_per_user=1)
    before = snapshot()
    call_command("cortex_sessions_erase", "--scope", "org=acme", "--dry-run")
    assert '"cortex_sessions.Session": 6' in capsys.readouterr().out
    assert snapshot() == before


def test_command_resumes_by_id(capsys):
    populate(sessions_per_user=1)
    record = Erasure.objects.create(scope="org=acme", status="running")
    call_command("cortex_sessions_erase", "--resume", str(record.pk))
    record.refresh_from_db()
    assert record.status == "done"
    assert record.counts["cortex_sessions.Session"] == 6


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--scope", ""], "no_scope"),
        (["--scope", "org"], "invalid_scope"),
        (["--resume", "nope"], "erasure_not_found"),
        (["--scope", "org=acme", "--batch-size", "0"], "batch_size"),
        (["--resume", "x", "--dry-run"], "--dry-run"),
    ],
)
def test_command_refuses_bad_input(args, message):
    populate(sessions_per_user=1)
    with pytest.raises(CommandError, match=message):
        call_command("cortex_sessions_erase", *args)
    assert Session.objects.count() == len(TENANTS) * 2 * 3


# -- legal hold (docs/design.md §18.1) ------------------------------------------------------------


def test_held_sessions_and_what_serves_them_are_kept_and_reported():
    populate()
    held = Session.objects.get(scope="org=acme/user=1", agent_id="adk")  # with ADK rows
    Session.objects.filter(pk=held.pk).update(legal_hold=True)
    before = snapshot()
    planned = erasure.erase_scope(scope="org=acme", dry_run=True)
    record = erasure.erase_scope(scope="org=acme", batch_size=2)
    after = snapshot()
    deleted = _deleted(before, after)

    assert record.skipped_held == planned.skipped_held == 1
    assert Erasure.objects.get().skipped_held == 1
    assert Session.objects.filter(pk=held.pk).exists()
    kept = {
        label: {pk for pk in rows if pk in after[label]}
        for label, rows in before.items()
        if label.startswith("cortex")
    }
    # In the scope only the held session, its ADK row, the user state at its scope and the app
    # state of its tenant stay (the idempotency records and the legacy message go).
    in_scope_kept = {
        label: sorted(
            after[label][pk][0] if label == "cortex_adk.AdkSession" else pk
            for pk in pks
            if within(scope_of(label, after[label][pk], before), "org=acme")
        )
        for label, pks in kept.items()
    }
    assert {label: len(pks) for label, pks in in_scope_kept.items() if pks} == {
        "cortex_sessions.Session": 1,
        "cortex_adk.AdkSession": 1,
        "cortex_adk.AdkUserState": 1,
        "cortex_adk.AdkAppState": 1,
    }
    counts = {label: len(rows) for label, rows in deleted.items() if rows}
    assert record.counts == planned.counts == counts
    assert counts["cortex_sessions.Session"] == 7
    assert counts["cortex_adk.AdkUserState"] == 1  # user=2's


def test_a_session_held_while_the_erasure_runs_is_kept():
    populate(sessions_per_user=3)
    held: list[Session] = []

    def hold_one_left(record: Erasure) -> None:
        if record.counts.get("cortex_sessions.Session") == 2 and not held:
            left = Session.objects.within("org=acme").filter(message_count=3).first()
            Session.objects.filter(pk=left.pk).update(legal_hold=True)
            held.append(left)

    record = erasure.erase_scope(scope="org=acme", batch_size=2, on_batch=hold_one_left)
    assert list(Session.objects.within("org=acme")) == held
    assert Message.objects.filter(session=held[0]).count() == 3
    assert record.skipped_held == 1
