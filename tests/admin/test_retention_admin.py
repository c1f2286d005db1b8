"""The admin's retention controls (docs/design.md §18.1): legal hold and ``expires_at`` edited
on a session's page and filtered in the list; a held session refused by the delete page and by
"Delete selected"; a held session's messages refused by the message admin."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from cortex_sessions import services
from cortex_sessions.models import Message, Session
from tests.admin.helpers import (
    change_url,
    changelist_url,
    delete_url,
    flash_messages,
    page_form_data,
)

pytestmark = pytest.mark.django_db


def _hold(session: Session) -> None:
    Session.objects.filter(pk=session.pk).update(legal_hold=True)


def test_legal_hold_and_expires_at_are_edited_on_the_change_page(
    admin_client, session_with_messages
):
    session = session_with_messages(title="t")
    data = page_form_data(admin_client.get(change_url(session)))
    data.update(legal_hold="on", expires_at_0="2031-01-02", expires_at_1="03:04:05")

    response = admin_client.post(change_url(session), data)

    assert response.status_code == 302, response.context["adminform"].form.errors
    stored = Session.objects.get(pk=session.pk)
    assert stored.legal_hold is True
    assert stored.expires_at.isoformat() == "2031-01-02T03:04:05+00:00"
    assert stored.title == "t" and stored.updated_at == session.updated_at  # no edit


def test_an_expired_session_can_still_be_held_and_rescued_from_the_admin(
    admin_client, session_with_messages
):
    session = session_with_messages()
    Session.objects.filter(pk=session.pk).update(expires_at=timezone.now() - timedelta(minutes=1))
    data = page_form_data(admin_client.get(change_url(session)))
    data.update(legal_hold="on", expires_at_0="", expires_at_1="")

    response = admin_client.post(change_url(session), data)

    assert response.status_code == 302, response.context["adminform"].form.errors
    stored = Session.objects.get(pk=session.pk)
    assert (stored.legal_hold, stored.expires_at) == (True, None)
    assert services.get_session(scope=session.scope, session_id=session.pk).pk == session.pk


def test_the_list_filters_by_legal_hold_and_expiry(admin_client):
    held = services.create_session(scope="org=acme", agent_id="a", title="held one")
    _hold(held)
    expired = services.create_session(scope="org=acme", agent_id="a", title="expired one")
    Session.objects.filter(pk=expired.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    services.create_session(scope="org=acme", agent_id="a", title="plain one")

    on_hold = admin_client.get(changelist_url(), {"legal_hold__exact": "1"})
    gone = admin_client.get(changelist_url(), {"expired": "yes"})

    assert [s.pk for s in on_hold.context["cl"].result_list] == [held.pk]
    assert [s.pk for s in gone.context["cl"].result_list] == [expired.pk]
    content = admin_client.get(changelist_url()).content.decode()
    assert "legal hold" in content and "expired" in content


def test_the_delete_page_refuses_a_held_session(admin_client, session_with_messages):
    session = session_with_messages()
    _hold(session)

    page = admin_client.get(delete_url(session))
    response = admin_client.post(delete_url(session), {"post": "yes"})

    assert "on legal hold" in page.content.decode()
    assert response.status_code == 200  # the refusal page again, nothing deleted
    assert Session.objects.filter(pk=session.pk).exists()
    assert Message.objects.filter(session=session).count() == 3


def test_delete_selected_refuses_a_selection_with_a_held_session(
    admin_client, session_with_messages
):
    held = session_with_messages(title="held")
    other = session_with_messages(title="other")
    _hold(held)
    selected = [str(held.pk), str(other.pk)]

    response = admin_client.post(
        changelist_url(),
        {"action": "delete_selected", "_selected_action": selected, "post": "yes"},
    )

    assert "on legal hold" in response.content.decode()
    assert Session.objects.count() == 2 and Message.objects.count() == 6


def test_a_session_held_after_the_confirmation_is_kept_with_an_error(
    admin_client, session_with_messages, monkeypatch
):
    held = session_with_messages(title="held")
    from cortex_sessions.admin.sessions import SessionAdmin

    real = SessionAdmin.get_deleted_objects

    def confirmed_before_the_hold(self, objs, request):
        result = real(self, objs, request)
        _hold(held)  # the hold lands between the check and the delete
        return result

    monkeypatch.setattr(SessionAdmin, "get_deleted_objects", confirmed_before_the_hold)
    response = admin_client.post(delete_url(held), {"post": "yes"})

    assert any("legal hold" in m for m in flash_messages(response))
    assert Session.objects.filter(pk=held.pk).exists()


def test_the_message_admin_refuses_to_delete_a_held_sessions_messages(
    admin_client, session_with_messages
):
    session = session_with_messages()
    _hold(session)
    message = Message.objects.filter(session=session).first()

    single = admin_client.post(delete_url(message), {"post": "yes"})
    bulk = admin_client.post(
        changelist_url("message"),
        {"action": "delete_selected", "_selected_action": [str(message.pk)], "post": "yes"},
    )

    assert any("legal hold" in m for m in flash_messages(single))
    assert any("legal hold" in m for m in flash_messages(bulk))
    assert Message.objects.filter(session=session).count() == 3
