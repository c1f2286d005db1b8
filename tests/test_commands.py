"""The management commands ``cortex_sessions_backfill`` and ``cortex_sessions_recount`` (§4, §5)."""

from __future__ import annotations

from io import StringIO
from typing import Any

import pytest
from django.core.management import CommandError, call_command

from cortex_sessions import services
from cortex_sessions.backfill import BACKFILL_MARKER
from cortex_sessions.models import Message, Session
from cortex_sessions.tokens import estimate_tokens
from tests.factories import MessageFactory

SCOPE = "org=acme/user=1"
OTHER_SCOPE = "org=acme/user=2"

pytestmark = pytest.mark.django_db


def run(command: str, *args: str, **options: Any) -> str:
    out = StringIO()
    call_command(command, *args, stdout=out, **options)
    return out.getvalue()


def state() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    return (
        list(Session.objects.order_by("pk").values()),
        list(Message.objects.order_by("pk").values()),
    )


# -- cortex_sessions_backfill ----------------------------------------------------------------------


@pytest.fixture
def legacy_rows() -> Session:
    """Legacy rows for three pairs: 3 + 2 rows without a session, and 1 row for a pair whose
    default already exists. Returns that default."""
    MessageFactory.create_batch(3, agent_id="a", scope=SCOPE, session=None, seq=None)
    MessageFactory.create_batch(2, agent_id="b", scope=SCOPE, session=None, seq=None)
    existing, _ = services.resolve_session(scope=OTHER_SCOPE, agent_id="a")
    MessageFactory(agent_id="a", scope=OTHER_SCOPE, session=None, seq=None)
    return existing


def test_backfill_command_dry_run_reports_counts_and_writes_nothing(legacy_rows):
    before = state()

    out = run("cortex_sessions_backfill", "--dry-run")

    assert state() == before
    assert "Would attach 6 messages for 3 agent/scope pairs; 2 default sessions would be" in out


def test_backfill_command_attaches_legacy_rows_and_reports_what_it_did(legacy_rows):
    out = run("cortex_sessions_backfill")

    assert "Attached 6 messages for 3 agent/scope pairs; 2 default sessions created." in out
    assert not Message.objects.filter(session__isnull=True).exists()
    assert Session.objects.filter(is_default=True).count() == 3
    assert Session.objects.filter(backfilled_by=BACKFILL_MARKER).count() == 2
    legacy_rows.refresh_from_db()
    assert (legacy_rows.message_count, legacy_rows.backfilled_by) == (1, "")


def test_backfill_command_batch_size_sets_the_batches_and_prints_progress_after_each(legacy_rows):
    out = run("cortex_sessions_backfill", "--batch-size", "2")

    # Pairs in (agent, scope) order: a@user=1 has 3 rows -> batches of 2 and 1; a@user=2 (the
    # existing default) 1 row -> 1 batch; b@user=1 2 rows -> 1 batch. A line after each batch.
    progress = [line for line in out.splitlines() if "messages attached" in line]
    assert [line.split()[0] for line in progress] == ["2", "3", "4", "6"]
    assert "Attached 6 messages" in out


def test_backfill_command_prints_no_progress_at_verbosity_zero(legacy_rows):
    out = run("cortex_sessions_backfill", "--batch-size", "2", verbosity=0)

    assert "messages attached" not in out
    assert Message.objects.filter(session__isnull=True).count() == 0


def test_backfill_command_run_again_finds_nothing_to_do(legacy_rows):
    run("cortex_sessions_backfill")
    before = state()

    out = run("cortex_sessions_backfill")

    assert state() == before
    assert "Attached 0 messages for 0 agent/scope pairs; 0 default sessions created." in out


@pytest.mark.parametrize("size", ["0", "-5"])
def test_backfill_command_refuses_a_batch_size_below_one(legacy_rows, size):
    before = state()

    with pytest.raises(CommandError, match="--batch-size must be at least 1"):
        run("cortex_sessions_backfill", "--batch-size", size)

    assert state() == before


# -- cortex_sessions_recount -----------------------------------------------------------------------


def _session_with_messages(scope: str, texts: list[str]) -> Session:
    session = services.create_session(scope=scope, agent_id="agent-1")
    services.append_messages(
        scope=scope,
        session_id=session.pk,
        messages=[{"role": "user", "content": text} for text in texts],
    )
    return Session.objects.get(pk=session.pk)


def _counters(session: Session) -> tuple[int, str]:
    session.refresh_from_db()
    return session.message_count, session.last_message


@pytest.fixture
def drifted() -> Session:
    """A session at SCOPE whose counters were overwritten behind the app's back."""
    session = _session_with_messages(SCOPE, ["one", "two"])
    Session.objects.filter(pk=session.pk).update(message_count=99, last_message="stale")
    return session


def test_recount_command_requires_scope_or_all():
    with pytest.raises(CommandError, match="one of the arguments --scope --all is required"):
        run("cortex_sessions_recount")


def test_recount_command_refuses_scope_and_all_together():
    with pytest.raises(CommandError, match="not allowed with argument"):
        run("cortex_sessions_recount", "--scope", SCOPE, "--all")


def test_recount_command_reports_and_repairs_drift_with_the_session_id(drifted):
    healthy = _session_with_messages(SCOPE, ["fine"])

    out = run("cortex_sessions_recount", "--scope", SCOPE)

    assert f"{drifted.pk}: message_count 99 -> 2, last_message updated (fixed)" in out
    assert str(healthy.pk) not in out
    assert "1 session(s) with drifted counters fixed." in out
    assert _counters(drifted) == (2, "two")
    assert _counters(healthy) == (1, "fine")


def test_recount_command_reports_a_last_message_drift_alone():
    session = _session_with_messages(SCOPE, ["one", "two"])
    Session.objects.filter(pk=session.pk).update(last_message="stale")

    out = run("cortex_sessions_recount", "--scope", SCOPE)

    assert f"{session.pk}: message_count 2 -> 2, last_message updated (fixed)" in out
    assert _counters(session) == (2, "two")


def test_recount_command_repairs_drift_left_by_direct_message_deletes():
    session = _session_with_messages(SCOPE, ["one", "two", "three"])
    Message.objects.filter(session=session, seq=3).delete()
    context = Session.objects.get(pk=session.pk).context_tokens

    out = run("cortex_sessions_recount", "--scope", SCOPE)

    # The deleted row's tokens leave the context too (docs/design.md §16.2).
    three = estimate_tokens("user", [{"type": "text", "text": "three"}])
    assert (
        f"{session.pk}: message_count 3 -> 2, last_message updated, context_tokens {context} -> "
        f"{context - three} (fixed)" in out
    )
    assert _counters(session) == (2, "two")


def test_recount_command_dry_run_reports_without_repairing(drifted):
    out = run("cortex_sessions_recount", "--scope", SCOPE, "--dry-run")

    assert f"{drifted.pk}: message_count 99 -> 2, last_message updated (would fix)" in out
    assert "1 session(s) with drifted counters found; none repaired (dry run)." in out
    assert _counters(drifted) == (99, "stale")


def test_recount_command_with_scope_leaves_other_scopes_alone(drifted):
    elsewhere = _session_with_messages(OTHER_SCOPE, ["x"])
    Session.objects.filter(pk=elsewhere.pk).update(message_count=7)

    out = run("cortex_sessions_recount", "--scope", SCOPE)

    assert str(elsewhere.pk) not in out
    assert _counters(elsewhere) == (7, "x")


def test_recount_command_with_all_repairs_every_scope(drifted):
    elsewhere = _session_with_messages(OTHER_SCOPE, ["x"])
    Session.objects.filter(pk=elsewhere.pk).update(message_count=7)

    out = run("cortex_sessions_recount", "--all")

    assert str(drifted.pk) in out
    assert str(elsewhere.pk) in out
    assert "2 session(s) with drifted counters fixed." in out
    assert _counters(drifted) == (2, "two")
    assert _counters(elsewhere) == (1, "x")


def test_recount_command_reports_nothing_when_counters_are_right():
    _session_with_messages(SCOPE, ["one"])

    out = run("cortex_sessions_recount", "--all")

    assert out.strip() == "0 session(s) with drifted counters fixed."


@pytest.mark.parametrize(
    ("scope", "code"),
    [("org", "invalid_scope"), ("org=acme/", "invalid_scope"), ("", "no_scope")],
)
def test_recount_command_bad_scope_is_a_command_error_with_the_code(drifted, scope, code):
    with pytest.raises(CommandError, match=f"^{code}: "):
        run("cortex_sessions_recount", "--scope", scope)

    assert _counters(drifted) == (99, "stale")
