"""Expired sessions hidden from every read, and legal hold blocking every delete, through the
services (docs/design.md §18.1). The sweep is tested in ``tests/test_expire_command.py``."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from cortex_sessions import services
from cortex_sessions.exceptions import InvalidInput, LegalHold, SessionNotFound
from cortex_sessions.models import Message, Session
from cortex_sessions.references.service import reference_candidates
from cortex_sessions.services import SessionFilters

pytestmark = pytest.mark.django_db

SCOPE = "org=acme/user=1"


def _past() -> object:
    return timezone.now() - timedelta(seconds=5)


def _future() -> object:
    return timezone.now() + timedelta(days=1)


@pytest.fixture
def expired():
    """A session with two messages whose ``expires_at`` has passed (not swept)."""
    session = services.create_session(scope=SCOPE, agent_id="a", title="old hello")
    services.append_messages(
        scope=SCOPE,
        session_id=session.pk,
        messages=[{"role": "user", "content": "hello"}, {"role": "assistant", "content": "hi"}],
    )
    Session.objects.filter(pk=session.pk).update(expires_at=_past())
    return session


@pytest.fixture
def live():
    """A session expiring tomorrow: shown everywhere."""
    return services.create_session(
        scope=SCOPE, agent_id="a", title="new hello", expires_at=_future()
    )


def test_an_expired_session_is_hidden_from_get_list_count_and_resolve_by_id(expired, live):
    with pytest.raises(SessionNotFound):
        services.get_session(scope=SCOPE, session_id=expired.pk)
    with pytest.raises(SessionNotFound):
        services.resolve_session(scope=SCOPE, agent_id="a", session_id=expired.pk)
    assert [s.pk for s in services.list_sessions(scope=SCOPE)] == [live.pk]
    assert services.count_sessions(scope="org=acme") == 1
    archived_any = SessionFilters(archived=None)
    assert services.count_sessions(scope=SCOPE, filters=archived_any) == 1
    page = services.list_sessions_page(scope=SCOPE, limit=10)
    assert [s.pk for s in page.results] == [live.pk]
    assert services.get_session(scope=SCOPE, session_id=live.pk).expires_at == live.expires_at


def test_an_expired_session_is_hidden_from_title_and_message_search(expired, live):
    titled = services.list_sessions(scope=SCOPE, filters=SessionFilters(search="hello"))
    assert [s.pk for s in titled] == [live.pk]
    if connection.vendor == "mysql":
        return  # no message search there (InvalidFilter)
    said = services.list_sessions(scope=SCOPE, filters=SessionFilters(q="hello"))
    assert [s.pk for s in said] == [live.pk]  # its title; the expired one's messages say it too


def test_an_expired_sessions_messages_cannot_be_read_or_appended(expired):
    with pytest.raises(SessionNotFound):
        services.list_messages(scope=SCOPE, session_id=expired.pk)
    with pytest.raises(SessionNotFound):
        services.append_messages(
            scope=SCOPE, session_id=expired.pk, messages=[{"role": "user", "content": "x"}]
        )
    stored = Session.objects.get(pk=expired.pk)
    assert (stored.message_count, stored.last_seq) == (2, 2)
    assert Message.objects.filter(session=expired).count() == 2


@pytest.mark.parametrize("max_tokens", [None, 1000])
def test_an_expired_sessions_context_cannot_be_read(expired, max_tokens):
    with pytest.raises(SessionNotFound):
        services.context_messages(scope=SCOPE, session_id=expired.pk, max_tokens=max_tokens)


def test_an_expired_session_is_no_reference_candidate(expired, live):
    current = services.create_session(scope=SCOPE, agent_id="a")
    found = reference_candidates(scope=SCOPE, session_id=current.pk, query="hello")
    assert [c["session_id"] for c in found] == [str(live.pk)]


def test_resolve_retires_an_expired_default_and_creates_a_new_one():
    old, created = services.resolve_session(scope=SCOPE, agent_id="a")
    assert created
    Session.objects.filter(pk=old.pk).update(expires_at=_past())
    new, created = services.resolve_session(scope=SCOPE, agent_id="a")
    assert created and new.pk != old.pk and new.is_default
    retired = Session.objects.get(pk=old.pk)
    assert retired.is_default is False  # kept for the sweep, no longer the default
    assert services.resolve_session(scope=SCOPE, agent_id="a") == (new, False)


def test_expires_at_is_written_by_create_update_and_merge_patch():
    when = _future()
    session = services.create_session(scope=SCOPE, agent_id="a", expires_at=when.isoformat())
    assert Session.objects.get(pk=session.pk).expires_at == when
    later = when + timedelta(days=1)
    assert (
        services.update_session(scope=SCOPE, session_id=session.pk, expires_at=later).expires_at
        == later
    )
    patched = services.patch_session(scope=SCOPE, session_id=session.pk, patch={"expires_at": None})
    assert patched.expires_at is None
    # "Expire now": the write answers the row as written; reads hide it from then on.
    now = services.update_session(scope=SCOPE, session_id=session.pk, expires_at=_past())
    assert now.pk == session.pk
    with pytest.raises(SessionNotFound):
        services.get_session(scope=SCOPE, session_id=session.pk)


@pytest.mark.parametrize("bad", ["tomorrow", "2030-01-01T00:00:00", 12, "2030-13-01T00:00:00Z"])
def test_a_bad_expires_at_is_refused_and_nothing_is_written(bad):
    with pytest.raises(InvalidInput) as error:
        services.create_session(scope=SCOPE, agent_id="a", expires_at=bad)
    assert error.value.field == "expires_at"
    assert not Session.objects.exists()
    session = services.create_session(scope=SCOPE, agent_id="a", title="t")
    with pytest.raises(InvalidInput):
        services.patch_session(
            scope=SCOPE, session_id=session.pk, patch={"title": "changed", "expires_at": bad}
        )
    with pytest.raises(InvalidInput):
        services.update_session(scope=SCOPE, session_id=session.pk, title="changed", expires_at=bad)
    stored = Session.objects.get(pk=session.pk)
    assert (stored.title, stored.expires_at) == ("t", None)


@pytest.fixture
def held():
    session = services.create_session(scope=SCOPE, agent_id="a")
    services.append_messages(
        scope=SCOPE,
        session_id=session.pk,
        messages=[{"role": "user", "content": "one"}, {"role": "assistant", "content": "two"}],
    )
    Session.objects.filter(pk=session.pk).update(legal_hold=True)
    return session


@pytest.mark.parametrize(
    "delete",
    [
        lambda pk: services.delete_session(scope=SCOPE, session_id=pk),
        lambda pk: services.delete_message(scope=SCOPE, session_id=pk, seq=1),
        lambda pk: services.clear_messages(scope=SCOPE, session_id=pk),
        lambda pk: services.delete_messages_after(scope=SCOPE, session_id=pk, after_seq=0),
        lambda pk: services.pop_message(scope=SCOPE, session_id=pk),
    ],
    ids=["delete_session", "delete_message", "clear", "delete_after", "pop"],
)
def test_legal_hold_blocks_every_delete_and_nothing_is_deleted(held, delete):
    with pytest.raises(LegalHold) as error:
        delete(held.pk)
    assert error.value.code == "legal_hold"
    stored = Session.objects.get(pk=held.pk)
    assert (stored.message_count, stored.last_message) == (2, "two")
    assert Message.objects.filter(session=held).count() == 2


def test_a_held_session_still_takes_appends_and_edits(held):
    result = services.append_messages(
        scope=SCOPE, session_id=held.pk, messages=[{"role": "user", "content": "three"}]
    )
    assert result.session.message_count == 3
    assert services.update_session(scope=SCOPE, session_id=held.pk, title="kept").title == "kept"
    services.archive_session(scope=SCOPE, session_id=held.pk)
    assert Session.objects.get(pk=held.pk).legal_hold is True


def test_export_and_import_carry_expires_at_and_not_legal_hold():
    import io
    import json

    from cortex_sessions import transfer

    when = _future()
    services.create_session(scope=SCOPE, agent_id="a", title="expiring", expires_at=when)
    held = services.create_session(scope=SCOPE, agent_id="a", title="held")
    Session.objects.filter(pk=held.pk).update(legal_hold=True)
    exported = "".join(transfer.export_conversations(scope=SCOPE))
    lines = {json.loads(line)["title"]: json.loads(line) for line in exported.splitlines()}
    assert lines["expiring"]["expires_at"] == when.isoformat()
    assert "expires_at" not in lines["held"] and "legal_hold" not in lines["held"]

    report = transfer.import_conversations(io.StringIO(exported), scope="org=b", agent_id="a")
    assert (report.imported, report.failed) == (2, 0)
    assert Session.objects.get(scope="org=b", title="expiring").expires_at == when
    assert Session.objects.get(scope="org=b", title="held").legal_hold is False


@pytest.mark.parametrize("bad", ["soon", 5])
def test_an_import_with_a_bad_expires_at_fails_the_line_and_writes_nothing(bad):
    from cortex_sessions import transfer

    line = f'{{"id": "x", "messages": [{{"role": "user", "content": "q"}}], "expires_at": {bad!r}}}'
    report = transfer.import_conversations([line.replace("'", '"')], scope=SCOPE, agent_id="a")
    assert (report.imported, report.failed) == (0, 1)
    assert not Session.objects.exists()


def test_an_import_of_an_already_expired_conversation_keeps_its_messages_for_the_sweep():
    from cortex_sessions import transfer

    line = (
        '{"id": "x", "expires_at": "2001-01-01T00:00:00Z", "messages": '
        '[{"role": "user", "content": "q"}]}'
    )
    report = transfer.import_conversations([line], scope=SCOPE, agent_id="a")
    assert report.imported == 1
    stored = Session.objects.get()
    assert (stored.message_count, stored.expires_at.year) == (1, 2001)
    assert services.count_sessions(scope=SCOPE) == 0  # hidden until swept
