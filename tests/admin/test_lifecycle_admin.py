"""Admin for the thread lifecycle (docs/design.md §11.1, §11.2): read-only fork provenance and
archive state, archive/unarchive actions, the archived list filter, and messages of archived
sessions never deleted (an error message, never a 500; "Delete selected" all or nothing)."""

from __future__ import annotations

import pytest
from django.contrib.admin.models import LogEntry

from cortex_sessions import services
from cortex_sessions.exceptions import SessionArchived
from cortex_sessions.models import Message, Session
from tests.admin.helpers import (
    change_url,
    changelist_url,
    delete_url,
    flash_messages,
    page_form_data,
)

pytestmark = pytest.mark.django_db


def run_action(client, action, sessions):
    return client.post(
        changelist_url(), {"action": action, "_selected_action": [str(s.pk) for s in sessions]}
    )


def test_archive_action_archives_and_demotes_the_default(admin_client):
    default = services.create_session(scope="org=acme", agent_id="a", is_default=True)
    other = services.create_session(scope="org=acme", agent_id="a")

    response = run_action(admin_client, "archive_sessions", [default, other])

    assert response.status_code == 302
    assert flash_messages(response) == ["Archived 2 sessions."]
    rows = Session.objects.filter(pk__in=[default.pk, other.pk])
    assert all(row.archived_at is not None and not row.is_default for row in rows)

    response = run_action(admin_client, "unarchive_sessions", [default])
    assert flash_messages(response)[-1] == "Unarchived 1 session."
    default.refresh_from_db()
    assert (default.archived_at, default.is_default) == (None, False)


def test_archived_list_filter(admin_client):
    live = services.create_session(scope="org=acme", agent_id="a", title="live")
    gone = services.create_session(scope="org=acme", agent_id="a", title="gone")
    services.archive_session(scope="org=acme", session_id=gone.pk)

    def titles(value):
        response = admin_client.get(changelist_url(), {"archived": value})
        return {row.title for row in response.context["cl"].result_list}

    assert titles("yes") == {"gone"}
    assert titles("no") == {"live"}
    assert live.title in titles("")


def test_fork_provenance_and_archive_state_are_read_only_on_the_change_page(admin_client):
    source = services.create_session(scope="org=acme", agent_id="a", title="Source")
    services.append_messages(
        scope="org=acme", session_id=source.pk, messages=[{"role": "user", "content": "q"}]
    )
    fork = services.fork_session(scope="org=acme", session_id=source.pk, title="Fork")
    services.archive_session(scope="org=acme", session_id=fork.pk)

    page = admin_client.get(change_url(fork))
    html = page.content.decode()
    assert change_url(source) in html  # the source is linked
    data = page_form_data(page)
    assert not {"archived_at", "forked_from", "forked_at_seq"} & set(data)
    data.update(
        title="Renamed",
        archived_at="",
        forked_from="00000000-0000-0000-0000-000000000000",
        forked_at_seq="7",
    )
    response = admin_client.post(change_url(fork), data)
    assert response.status_code == 302
    stored = Session.objects.get(pk=fork.pk)
    assert stored.title == "Renamed"
    assert (stored.forked_from, stored.forked_at_seq) == (source.pk, 1)
    assert stored.archived_at is not None

    services.delete_session(scope="org=acme", session_id=source.pk)
    html = admin_client.get(change_url(fork)).content.decode()
    assert f"{source.pk} (deleted)" in html


# -- messages of an archived session are never deleted (§11.2, §12.5) -----------------------------


def _messages_state():
    return sorted(Message.objects.values_list("session_id", "seq")), sorted(
        Session.objects.values_list("pk", "message_count", "last_message", "updated_at")
    )


def _archived_with_messages(session_with_messages, **kwargs):
    session = session_with_messages(**kwargs)
    services.archive_session(scope=session.scope, session_id=session.pk)
    return session


def test_deleting_a_message_of_an_archived_session_is_an_error_message(
    admin_client, session_with_messages
):
    archived = _archived_with_messages(session_with_messages)
    message = Message.objects.get(session=archived, seq=3)
    before = _messages_state()

    confirm = admin_client.get(delete_url(message))
    post = admin_client.post(delete_url(message), {"post": "yes"})

    for response in (confirm, post):
        assert response.status_code == 302
        assert response["Location"] == change_url(message)
        assert flash_messages(response)[-1] == SessionArchived.default_message
    assert _messages_state() == before
    assert not LogEntry.objects.exists()


def test_a_session_archived_after_the_delete_page_opened_is_an_error_message(
    admin_client, session_with_messages, monkeypatch
):
    session = session_with_messages()
    message = Message.objects.get(session=session, seq=3)
    real = services.delete_message

    def archive_first(**kwargs):  # archived between the confirmation page and the post
        services.archive_session(scope=session.scope, session_id=session.pk)
        return real(**kwargs)

    monkeypatch.setattr(services, "delete_message", archive_first)
    response = admin_client.post(delete_url(message), {"post": "yes"})

    assert response.status_code == 302
    assert flash_messages(response) == [SessionArchived.default_message]
    assert Message.objects.filter(pk=message.pk).exists()
    assert not LogEntry.objects.exists()  # the history entry was rolled back with the delete


def _delete_selected(client, selection, *, confirmed):
    data = {"action": "delete_selected", "_selected_action": [str(m.pk) for m in selection]}
    if confirmed:
        data["post"] = "yes"
    return client.post(changelist_url("message"), data)


def test_delete_selected_with_an_archived_session_deletes_nothing(
    admin_client, session_with_messages
):
    live = session_with_messages(title="live")
    archived = _archived_with_messages(session_with_messages, title="archived")
    selection = [
        *Message.objects.filter(session=live, seq__gte=2),
        Message.objects.get(session=archived, seq=1),
    ]
    before = _messages_state()

    for confirmed in (False, True):
        response = _delete_selected(admin_client, selection, confirmed=confirmed)

        assert response.status_code == 302
        assert flash_messages(response)[-1] == (
            "1 selected message belongs to an archived session, which is read-only: nothing "
            "was deleted. Unarchive it or leave it out."
        )
    assert _messages_state() == before
    assert not LogEntry.objects.exists()

    # without the archived one, the live session's messages go
    response = _delete_selected(admin_client, selection[:2], confirmed=True)
    assert response.status_code == 302
    live.refresh_from_db()
    assert (live.message_count, live.last_message) == (1, "first question")


def test_delete_selected_is_all_or_nothing_when_a_session_is_archived_meanwhile(
    admin_client, session_with_messages, monkeypatch
):
    first = session_with_messages(title="first")
    second = session_with_messages(title="second")
    selection = [*Message.objects.filter(session__in=[first, second], seq=3)]
    before = _messages_state()
    real = services.delete_message
    calls = []

    def archive_the_other(**kwargs):  # the second session is archived after the first delete
        calls.append(kwargs["session_id"])
        if len(calls) == 1:
            other = second if kwargs["session_id"] == first.pk else first
            services.archive_session(scope=other.scope, session_id=other.pk)
        return real(**kwargs)

    monkeypatch.setattr(services, "delete_message", archive_the_other)
    response = _delete_selected(admin_client, selection, confirmed=True)

    assert response.status_code == 302
    assert flash_messages(response) == [f"{SessionArchived.default_message} Nothing was deleted."]
    assert len(calls) == 2
    assert _messages_state() == before  # the first session's delete was rolled back too
    assert not LogEntry.objects.exists()
