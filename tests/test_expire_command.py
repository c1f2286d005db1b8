"""The expiry sweep, ``expire_sessions`` and ``manage.py cortex_sessions_expire``
(docs/design.md §18.1): exact counts, legal holds kept, policies by scope, agent and age,
batches, dry run; several workers at once and a run killed mid-way (PostgreSQL, MariaDB)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command
from django.db import connection, connections
from django.test import override_settings
from django.utils import timezone

from cortex_sessions import services, signals
from cortex_sessions.models import ImportedConversation, Message, Session

ROOT = Path(__file__).resolve().parent.parent
SCOPE = "org=acme/user=1"
DAY = 86_400


def _session(scope=SCOPE, agent_id="a", *, messages=2, expires_in=None, held=False, age=0):
    """A session with ``messages`` messages, expiring ``expires_in`` seconds from now (negative:
    expired), on hold or not, last updated ``age`` seconds ago."""
    session = services.create_session(scope=scope, agent_id=agent_id)
    if messages:
        services.append_messages(
            scope=scope,
            session_id=session.pk,
            messages=[{"role": "user", "content": str(n)} for n in range(messages)],
        )
    now = timezone.now()
    Session.objects.filter(pk=session.pk).update(
        expires_at=None if expires_in is None else now + timedelta(seconds=expires_in),
        legal_hold=held,
        updated_at=now - timedelta(seconds=age),
    )
    return session.pk


def _ids(**filters):
    return set(Session.objects.filter(**filters).values_list("pk", flat=True))


@pytest.fixture
def deleted_signals():
    received = []

    def receiver(sender, **kwargs):
        received.append(kwargs["session_id"])

    signals.session_deleted.connect(receiver)
    yield received
    signals.session_deleted.disconnect(receiver)


@pytest.mark.django_db
def test_expired_sessions_are_deleted_with_their_messages_and_held_ones_kept(
    deleted_signals, django_capture_on_commit_callbacks
):
    expired = {_session(expires_in=-60) for _ in range(5)}
    held = _session(expires_in=-60, held=True)
    later = _session(expires_in=DAY)
    never = _session()
    ImportedConversation.objects.create(
        session_id=next(iter(expired)), agent_id="a", scope=SCOPE, external_id="x"
    )

    with django_capture_on_commit_callbacks(execute=True):
        report = services.expire_sessions(batch_size=2, policies=[])

    assert (report.expired, report.deleted, report.messages, report.held) == (5, 0, 10, 1)
    assert report.batches == 3  # 2 + 2 + 1
    assert _ids() == {held, later, never}
    assert Message.objects.count() == 6
    assert not ImportedConversation.objects.exists()
    assert sorted(deleted_signals) == sorted(expired)
    stored = Session.objects.get(pk=held)
    assert (stored.message_count, stored.legal_hold) == (2, True)
    # Nothing left to do: a rerun changes nothing.
    again = services.expire_sessions(batch_size=2, policies=[])
    assert (again.expired, again.batches, again.held) == (0, 0, 1)


@pytest.mark.django_db
def test_policies_delete_or_archive_by_scope_agent_and_age():
    old_acme = _session("org=acme/user=1", age=40 * DAY)
    old_acme_held = _session("org=acme/user=2", age=40 * DAY, held=True)
    old_sibling = _session("org=acme2/user=1", age=40 * DAY)  # not beneath org=acme
    young_acme = _session("org=acme/user=1", age=10 * DAY)
    old_bot = _session("org=globex/user=1", agent_id="bot", age=8 * DAY)
    old_other_agent = _session("org=globex/user=1", agent_id="human", age=8 * DAY)
    held_bot = _session("org=globex/user=2", agent_id="bot", age=8 * DAY, held=True)
    policies = [
        {"scope": "org=acme", "after": 30 * DAY, "action": "delete"},
        {"scope": "org=globex", "agent_id": "bot", "after": 7 * DAY, "action": "archive"},
    ]

    report = services.expire_sessions(policies=policies)

    assert (report.expired, report.deleted, report.archived, report.held) == (0, 1, 2, 1)
    assert _ids() == {old_acme_held, old_sibling, young_acme, old_bot, old_other_agent, held_bot}
    assert old_acme not in _ids()
    assert _ids(archived_at__isnull=False) == {old_bot, held_bot}  # archiving deletes nothing
    assert Session.objects.get(pk=held_bot).legal_hold is True


@pytest.mark.django_db
def test_dry_run_counts_and_changes_nothing():
    for _ in range(3):
        _session(expires_in=-60)
    _session(expires_in=-60, held=True)
    _session(age=40 * DAY)
    policies = [{"scope": "org=acme", "after": 30 * DAY, "action": "archive"}]
    before = sorted(Session.objects.values_list("pk", "archived_at", "updated_at"))

    report = services.expire_sessions(dry_run=True, policies=policies)

    assert (report.expired, report.archived, report.held, report.batches) == (3, 1, 1, 0)
    assert sorted(Session.objects.values_list("pk", "archived_at", "updated_at")) == before
    assert Message.objects.count() == 10


@pytest.mark.django_db
def test_the_command_prints_what_it_did_and_applies_the_setting():
    _session(expires_in=-60)
    _session(expires_in=-60, held=True, age=40 * DAY)
    old = _session(age=40 * DAY)
    retention = [{"scope": "org=acme", "after": 30 * DAY, "action": "delete"}]
    out = StringIO()
    with override_settings(CORTEX_SESSIONS={"RETENTION": retention}):
        call_command("cortex_sessions_expire", "--dry-run", stdout=out)
        assert "Would delete 1 expired and 1 retained-too-long" in out.getvalue()
        assert Session.objects.count() == 3
        out = StringIO()
        call_command("cortex_sessions_expire", "--batch-size", "1", stdout=out)
    text = out.getvalue()
    assert "expired: batch 1: deleted 1 sessions, 2 messages" in text
    assert "Deleted 1 expired and 1 retained-too-long session(s) (4 message(s))" in text
    assert "2 on legal hold kept" in text  # held, and found due by both steps
    assert old not in _ids() and Session.objects.count() == 1


@pytest.mark.django_db
@pytest.mark.parametrize("size", ["0", "-3"])
def test_a_bad_batch_size_is_an_error_and_nothing_is_deleted(size):
    _session(expires_in=-60)
    with pytest.raises(CommandError, match="batch_size"):
        call_command("cortex_sessions_expire", "--batch-size", size, stdout=StringIO())
    assert Session.objects.count() == 1


@pytest.mark.django_db
def test_a_bad_policy_is_an_error_and_nothing_is_deleted():
    _session(expires_in=-60)
    bad = {"RETENTION": [{"scope": "org=acme"}]}
    with override_settings(CORTEX_SESSIONS=bad), pytest.raises(CommandError, match="RETENTION"):
        call_command("cortex_sessions_expire", stdout=StringIO())
    assert Session.objects.count() == 1


# -- several workers, and a killed run (real concurrent transactions) -----------------------------


def _run_together(workers, work):
    barrier = threading.Barrier(workers)

    def worker(index):
        try:
            barrier.wait(timeout=30)
            return work(index)
        finally:
            connections.close_all()

    with ThreadPoolExecutor(max_workers=workers) as pool:
        futures = [pool.submit(worker, index) for index in range(workers)]
        return [future.result(timeout=300) for future in futures]


@pytest.mark.concurrent_db
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("workers", [2, 3])
def test_workers_at_once_do_no_double_work_and_count_exactly(workers, deleted_signals):
    expired = {_session(expires_in=-60, messages=1) for _ in range(60)}
    held = {_session(expires_in=-60, messages=1, held=True) for _ in range(3)}
    archivable = {_session("org=globex", age=40 * DAY, messages=0) for _ in range(20)}
    live = _session(messages=1)
    policies = [{"scope": "org=globex", "after": 30 * DAY, "action": "archive"}]

    reports = _run_together(
        workers, lambda _: services.expire_sessions(batch_size=3, policies=policies)
    )

    assert sum(r.expired for r in reports) == 60
    assert sum(r.messages for r in reports) == 60
    assert sum(r.archived for r in reports) == 20
    assert _ids() == held | archivable | {live}
    assert _ids(archived_at__isnull=False) == archivable
    assert sorted(deleted_signals) == sorted(expired)  # each session deleted once
    assert Message.objects.count() == 4


def _database_url() -> str:
    settings = connection.settings_dict
    scheme = {"postgresql": "postgres", "mysql": "mysql"}[connection.vendor]
    user = settings["USER"] + (f":{settings['PASSWORD']}" if settings["PASSWORD"] else "")
    return f"{scheme}://{user}@{settings['HOST']}:{settings['PORT']}/{settings['NAME']}"


@pytest.mark.concurrent_db
@pytest.mark.django_db(transaction=True)
def test_a_run_killed_mid_way_is_finished_exactly_by_the_next():
    expired = {_session(expires_in=-60, messages=1) for _ in range(150)}
    held = _session(expires_in=-60, messages=1, held=True)
    live = _session(messages=1)
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in {"DATABASE_URL", "CORTEX_STRICT_ROUTER", "DJANGO_SETTINGS_MODULE"}
    }
    env.update(
        DATABASE_URL=_database_url(),
        DJANGO_SETTINGS_MODULE="tests.settings",
        PYTHONPATH=str(ROOT),
        PYTHONUNBUFFERED="1",
    )
    process = subprocess.Popen(
        [sys.executable, "-m", "django", "cortex_sessions_expire", "--batch-size", "1"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        first = process.stdout.readline()
        assert "expired: batch 1: deleted 1 sessions" in first, process.stderr.read()
        os.kill(process.pid, signal.SIGKILL)
    finally:
        process.wait(timeout=60)
        process.stdout.close()
        process.stderr.close()
    assert process.returncode == -signal.SIGKILL

    left = _ids() & expired
    assert 0 < len(left) < len(expired)  # killed after its first batch, before its last
    assert Message.objects.filter(session_id__in=expired).count() == len(left)
    report = services.expire_sessions(batch_size=7, policies=[])
    assert (report.expired, report.messages, report.held) == (len(left), len(left), 1)
    assert _ids() == {held, live}
    assert Message.objects.count() == 2


def _child_env(url: str) -> dict[str, str]:
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in {"DATABASE_URL", "CORTEX_STRICT_ROUTER", "DJANGO_SETTINGS_MODULE"}
    }
    env.update(
        DATABASE_URL=url,
        DJANGO_SETTINGS_MODULE="tests.settings",
        PYTHONPATH=str(ROOT),
        PYTHONUNBUFFERED="1",
    )
    return env


def _data(env: dict[str, str], *args: str) -> object:
    done = subprocess.run(
        [sys.executable, "-m", "tests.expiry_data", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout) if done.stdout else None


@pytest.mark.skipif(connection.vendor != "sqlite", reason="the other databases run the test above")
def test_on_sqlite_a_run_killed_mid_way_is_finished_exactly_by_the_next(tmp_path):
    """The kill test on SQLite, on a database file the child processes share (the test
    database is in memory): killed after its first batch, the next run finishes exactly."""
    env = _child_env(f"sqlite:///{tmp_path / 'expiry.sqlite3'}")
    _data(env, "migrate")
    ids = _data(env, "populate", "40")
    command = [sys.executable, "-m", "django", "cortex_sessions_expire", "--batch-size", "1"]
    process = subprocess.Popen(
        command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        assert process.stdout is not None
        first = process.stdout.readline()
        assert "expired: batch 1: deleted 1 sessions" in first, process.stderr.read()
        os.kill(process.pid, signal.SIGKILL)
    finally:
        process.wait(timeout=60)
        process.stdout.close()
        process.stderr.close()
    assert process.returncode == -signal.SIGKILL
    halfway = _data(env, "state")
    left = set(halfway) & set(ids["expired"])
    assert 0 < len(left) < len(ids["expired"])  # killed after its first batch, before its last
    assert all(halfway[pk] == 1 for pk in left)  # no session lost its messages alone
    rerun = subprocess.run(
        [*command[:-1], "7"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
    )
    assert rerun.returncode == 0, rerun.stderr
    assert _data(env, "state") == {ids["held"][0]: 1, ids["live"][0]: 1}
