"""A signal receiver that raises never changes a committed write's outcome (docs/design.md §12.2).

Case ``receiver-raises``: a host receiver raised ``RuntimeError`` and a committed append answered
an HTML 500, so clients retried and stored the message twice; an import stopped after its first
conversation. These run with real commits (``transaction=True``) so receivers run as in
production: after commit, inside the request.
"""

from __future__ import annotations

import json
import logging

import pytest
from django.core.management import call_command
from django.db import DatabaseError, connection, transaction

from cortex_sessions import services, signals
from cortex_sessions.models import Message, Session
from tests.api.conftest import BASE, session_url

pytestmark = pytest.mark.django_db(transaction=True)


class Boom(RuntimeError):
    pass


@pytest.fixture
def raising_receivers():
    """Connect a receiver that raises, and one that records, to every signal of the app."""
    calls: list[str] = []

    def explode(sender, **kwargs):
        raise Boom("receiver failed")

    def record(sender, signal, **kwargs):
        calls.append(signal)

    names = ("session_created", "messages_appended", "session_deleted")
    for name in names:
        getattr(signals, name).connect(explode, weak=False, dispatch_uid=f"boom-{name}")
        getattr(signals, name).connect(record, weak=False, dispatch_uid=f"record-{name}")
    yield calls
    for name in names:
        getattr(signals, name).disconnect(dispatch_uid=f"boom-{name}")
        getattr(signals, name).disconnect(dispatch_uid=f"record-{name}")


def _logged_boom(caplog) -> int:
    return sum(
        1
        for record in caplog.records
        if record.name == "cortex_sessions" and record.exc_info and record.exc_info[0] is Boom
    )


def test_create_append_delete_answer_normally_when_a_receiver_raises(
    api, raising_receivers, caplog
):
    caplog.set_level(logging.ERROR, logger="cortex_sessions")

    created = api.post(BASE, {"agent_id": "a"}, format="json")
    assert created.status_code == 201, created.content
    session_id = created.json()["id"]

    appended = api.post(
        session_url(session_id, "messages/"),
        {"role": "user", "content": "pay invoice 42"},
        format="json",
    )
    assert appended.status_code == 201, appended.content
    assert appended.json()["session"]["message_count"] == 1
    assert Message.objects.filter(session_id=session_id).count() == 1

    deleted = api.delete(session_url(session_id))
    assert deleted.status_code == 204
    assert not Session.objects.filter(pk=session_id).exists()

    # Every signal reached the receiver after the failing one, and each failure was logged.
    assert raising_receivers == [
        signals.session_created,
        signals.messages_appended,
        signals.session_deleted,
    ]
    assert _logged_boom(caplog) == 3


def test_import_goes_on_past_a_raising_receiver(tmp_path, raising_receivers, caplog):
    caplog.set_level(logging.ERROR, logger="cortex_sessions")
    path = tmp_path / "three.jsonl"
    path.write_text(
        "".join(
            json.dumps({"id": f"c{n}", "messages": [{"role": "user", "content": f"hi {n}"}]}) + "\n"
            for n in range(3)
        )
    )

    call_command(
        "cortex_sessions_import", str(path), "--agent-id", "a", "--scope", "org=acme/user=1"
    )

    assert Session.objects.count() == 3
    assert Message.objects.count() == 3
    assert _logged_boom(caplog) >= 3


@pytest.mark.parametrize(
    "end",
    [
        "commit",
        pytest.param(
            "rollback",
            marks=pytest.mark.skipif(
                connection.vendor == "sqlite",
                reason="on SQLite under manual transaction management, atomic() commits at "
                "its savepoint's release (Django's, with or without this app)",
            ),
        ),
    ],
)
def test_under_manual_transaction_management_receivers_run_at_the_write(
    end, raising_receivers, caplog
):
    # With autocommit turned off by the host and outside ``atomic()`` Django keeps no on-commit
    # callbacks (``on_commit`` raises TransactionManagementError): the writes went through, then
    # the service raised. The receivers run at the write instead, as Django's model signals do,
    # and the host's commit or rollback decides what stays.
    caplog.set_level(logging.ERROR, logger="cortex_sessions")
    scope = "org=acme/user=1"
    transaction.set_autocommit(False)
    try:
        session = services.create_session(scope=scope, agent_id="a")
        for count in (1, 2):  # the one-message append and the general one
            services.append_messages(
                scope=scope,
                session_id=session.pk,
                messages=[{"role": "user", "content": "pay invoice 42"}] * count,
            )
        services.delete_session(
            scope=scope, session_id=services.create_session(scope=scope, agent_id="a").pk
        )
        getattr(transaction, end)()
    finally:
        transaction.set_autocommit(True)

    assert raising_receivers == [
        signals.session_created,
        signals.messages_appended,
        signals.messages_appended,
        signals.session_created,
        signals.session_deleted,
    ]
    assert _logged_boom(caplog) == 5
    assert Message.objects.count() == (3 if end == "commit" else 0)
    assert Session.objects.count() == (1 if end == "commit" else 0)


def test_under_manual_transaction_management_receivers_run_at_the_write_inside_atomic_blocks(
    raising_receivers,
):
    # Inside an atomic() block of manual mode (a keyed write's own, or the host's) Django keeps
    # on_commit callbacks until autocommit is turned back on and drops them at any rollback,
    # even of later work: the committed create's receivers never ran.
    scope = "org=acme/user=1"
    transaction.set_autocommit(False)
    try:
        session = services.create_session(scope=scope, agent_id="a", idempotency_key="k1")
        assert raising_receivers == [signals.session_created]  # at the write
        transaction.commit()
        with transaction.atomic():
            services.append_messages(
                scope=scope, session_id=session.pk, messages=[{"role": "user", "content": "x"}]
            )
        assert raising_receivers == [signals.session_created, signals.messages_appended]
        transaction.rollback()  # the host undoes the append only
    finally:
        transaction.set_autocommit(True)
    assert raising_receivers == [signals.session_created, signals.messages_appended]
    assert Session.objects.filter(pk=session.pk).exists()  # the committed create


no_savepoint_on_sqlite = pytest.mark.skipif(
    connection.vendor == "sqlite",
    reason="Django's SQLite backend makes savepoints only inside atomic() (manual transactions)",
)


@no_savepoint_on_sqlite
@pytest.mark.parametrize("receiver_catches", [False, True], ids=["raises", "catches"])
def test_under_manual_transaction_management_a_receivers_database_error_spares_the_write(
    receiver_catches, caplog
):
    # The receivers run inside the host's transaction there: a failed statement of theirs (on
    # PostgreSQL one that aborts the transaction, even when the receiver catches the error)
    # is rolled back to a savepoint, with what the signal's other receivers wrote, and the
    # host's transaction goes on to commit the write.
    caplog.set_level(logging.ERROR, logger="cortex_sessions")

    def retitle(sender, session, **kwargs):
        Session.objects.filter(pk=session.pk).update(title="set by a receiver")

    def broken(sender, **kwargs):
        try:
            with connection.cursor() as cursor:
                cursor.execute("SELECT * FROM cortex_sessions_no_such_table")
        except DatabaseError:
            if not receiver_catches:
                raise

    signals.session_created.connect(retitle, weak=False, dispatch_uid="retitle")
    signals.session_created.connect(broken, weak=False, dispatch_uid="broken")
    scope = "org=acme/user=1"
    transaction.set_autocommit(False)
    try:
        session = services.create_session(scope=scope, agent_id="a", title="the host's")
        services.append_messages(
            scope=scope, session_id=session.pk, messages=[{"role": "user", "content": "x"}]
        )
        transaction.commit()
    finally:
        transaction.set_autocommit(True)
        signals.session_created.disconnect(dispatch_uid="retitle")
        signals.session_created.disconnect(dispatch_uid="broken")
    # A caught error leaves the transaction usable but on PostgreSQL, where the savepoint's
    # release is refused: only there is what the receivers wrote rolled back then.
    rolled_back = not receiver_catches or connection.vendor == "postgresql"
    stored = Session.objects.get(pk=session.pk)
    assert stored.message_count == 1
    assert stored.title == ("the host's" if rolled_back else "set by a receiver")
    logged = [record.getMessage() for record in caplog.records]
    assert any("was rolled back" in message for message in logged) is rolled_back


def test_under_manual_transaction_management_a_keyed_write_that_loses_its_race_sends_nothing(
    monkeypatch, raising_receivers
):
    # The key's first write committed after this call looked for the key (staged: the first
    # look finds nothing), so this call's claim of the key fails at its unique index and the
    # first one is replayed: no receiver may hear of a session that never stood.
    from cortex_sessions.services import idempotency

    scope = "org=acme/user=1"
    first = services.create_session(scope=scope, agent_id="a", idempotency_key="k1")
    raising_receivers.clear()
    real_live = idempotency._live
    looks: list[object] = []

    def first_look_finds_nothing(*args, **kwargs):
        looks.append(args)
        return None if len(looks) == 1 else real_live(*args, **kwargs)

    monkeypatch.setattr(idempotency, "_live", first_look_finds_nothing)
    transaction.set_autocommit(False)
    try:
        replayed = services.create_session(scope=scope, agent_id="a", idempotency_key="k1")
        transaction.commit()
    finally:
        transaction.set_autocommit(True)
    assert replayed.pk == first.pk
    assert raising_receivers == []
    assert list(Session.objects.values_list("pk", flat=True)) == [first.pk]


def test_under_manual_transaction_management_a_failed_import_sends_nothing(
    monkeypatch, raising_receivers
):
    # The import's transaction rolls back the session it created when a later step fails.
    from cortex_sessions import transfer
    from cortex_sessions.exceptions import InvalidInput

    def refuse(**kwargs):
        raise InvalidInput("refused", field="messages")

    monkeypatch.setattr(transfer.services, "append_messages", refuse)
    line = json.dumps({"id": "c1", "messages": [{"role": "user", "content": "hi"}]})
    transaction.set_autocommit(False)
    try:
        with pytest.raises(InvalidInput):
            transfer.import_conversation(
                transfer.parse_conversation(line), scope="org=acme/user=1", agent_id="a"
            )
        transaction.commit()
    finally:
        transaction.set_autocommit(True)
    assert raising_receivers == []


@no_savepoint_on_sqlite
def test_under_manual_transaction_management_a_receiver_ending_the_transaction_fails_the_call():
    # A receiver's database error that ended the caller's transaction (InnoDB's deadlock
    # victim; staged with a ROLLBACK) took the write with it: the call must not return as if
    # it stood, and the caller rolls back as after its own statement failed so.
    from django.db import OperationalError

    def victim(sender, **kwargs):
        with connection.cursor() as cursor:
            cursor.execute("ROLLBACK")
        raise OperationalError(1213, "Deadlock found when trying to get lock")

    signals.session_created.connect(victim, weak=False, dispatch_uid="victim")
    transaction.set_autocommit(False)
    try:
        with pytest.raises(OperationalError):
            services.create_session(scope="org=acme/user=1", agent_id="a")
        transaction.rollback()
    finally:
        transaction.set_autocommit(True)
        signals.session_created.disconnect(dispatch_uid="victim")
    assert services.create_session(scope="org=acme/user=1", agent_id="b").agent_id == "b"


@no_savepoint_on_sqlite
@pytest.mark.parametrize("receiver", ["raises", "catches", "set_rollback"])
def test_under_manual_transaction_management_a_receivers_error_spares_the_hosts_atomic_block(
    receiver,
):
    # Inside the host's atomic() block an ORM error (or set_rollback) marks that block for
    # rollback; rolled back to the receivers' savepoint, the mark must go with it, or the
    # host's block failed and lost the write.
    from django.contrib.auth.models import Group

    def duplicate(sender, **kwargs):
        if receiver == "set_rollback":
            Group.objects.create(name="by the receiver")
            transaction.set_rollback(True)
            return
        Group.objects.create(name="twice")
        try:
            Group.objects.create(name="twice")
        except DatabaseError:
            if receiver == "raises":
                raise

    signals.session_created.connect(duplicate, weak=False, dispatch_uid="duplicate")
    transaction.set_autocommit(False)
    try:
        with transaction.atomic():
            session = services.create_session(scope="org=acme/user=1", agent_id="a")
            Group.objects.create(name="the host's")
        transaction.commit()
    finally:
        transaction.set_autocommit(True)
        signals.session_created.disconnect(dispatch_uid="duplicate")
    assert Session.objects.filter(pk=session.pk).exists()
    assert list(Group.objects.values_list("name", flat=True)) == ["the host's"]
