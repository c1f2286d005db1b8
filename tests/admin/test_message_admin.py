"""The message admin (docs/design.md §7.4): read-only, filtered by session, role and source; deleting
goes through the services so the session's counters follow (docs/design.md §5)."""

from __future__ import annotations

import pytest
from django.urls import reverse
from django.utils.html import escape

from cortex_sessions import services
from cortex_sessions.admin import TITLE_PREVIEW_CHARS
from cortex_sessions.content import preview
from cortex_sessions.models import Message, Session
from tests.admin.helpers import (
    bulk_messages,
    change_url,
    changelist_url,
    delete_url,
)
from tests.factories import MessageFactory, SessionFactory

pytestmark = pytest.mark.django_db


def listed(response) -> list[Message]:
    return list(response.context["cl"].result_list)


def messages_url(query: str = "") -> str:
    return changelist_url("message") + (f"?{query}" if query else "")


def test_changelist_shows_messages_with_their_session(admin_client, session_with_messages):
    session = session_with_messages(title="Trip")

    response = admin_client.get(messages_url())

    assert response.status_code == 200
    content = response.content.decode()
    for text in ("first question", "first answer", "second question", "Trip"):
        assert text in content
    assert f'href="{change_url(session)}"' in content
    assert len(listed(response)) == 3


def test_changelist_shows_the_text_over_the_session_title_each_whole_in_a_tooltip(
    admin_client, session_with_messages
):
    title = "A long title about the login bug " * 15  # 495 characters
    session = session_with_messages(title=title)

    content = admin_client.get(messages_url()).content.decode()

    link = f'<a href="{change_url(session)}">{escape(preview(title, TITLE_PREVIEW_CHARS))}</a>'
    assert (
        '<span class="cortex-line" title="first question">first question</span>'
        f'<span class="cortex-line cortex-preview" title="{escape(title)}">{link}</span>'
    ) in content


def test_a_legacy_message_is_listed_with_an_empty_session(admin_client):
    MessageFactory(content=[{"type": "text", "text": "from before sessions"}])

    response = admin_client.get(messages_url())

    assert response.status_code == 200
    assert '<span class="cortex-line cortex-preview" title="-">-</span>' in (
        response.content.decode()
    )


def test_changelist_filters_by_session(admin_client, session_with_messages):
    wanted = session_with_messages(title="wanted")
    session_with_messages(title="other")

    response = admin_client.get(messages_url(f"session={wanted.pk}"))

    rows = listed(response)
    assert {m.session_id for m in rows} == {wanted.pk}
    assert len(rows) == 3
    assert "wanted" in response.content.decode()  # the selected session names the filter


def test_changelist_with_malformed_session_id_is_refused(admin_client):
    response = admin_client.get(messages_url("session=not-a-uuid"))

    assert response.status_code == 302
    assert response.url.endswith("?e=1")


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("role__exact=assistant", ["first answer"]),
        ("source__exact=user", ["first question", "second question"]),
        ("role__exact=user&source__exact=host", []),
    ],
)
def test_changelist_filters_by_role_and_source(
    admin_client, session_with_messages, query, expected
):
    session_with_messages()

    rows = listed(admin_client.get(messages_url(query)))

    assert sorted(m.text for m in rows) == expected


def test_changelist_queries_are_bounded(admin_client, django_assert_max_num_queries):
    for index in range(5):
        bulk_messages(SessionFactory(title=f"s{index}", scope=f"org=acme/user={index}"), 40)

    with django_assert_max_num_queries(6):
        response = admin_client.get(messages_url())

    assert len(listed(response)) == 100


def test_messages_cannot_be_added_or_changed(admin_client, session_with_messages):
    session = session_with_messages()
    message = Message.objects.filter(session=session).first()
    before = list(Message.objects.values())

    add = admin_client.get(reverse("admin:cortex_sessions_message_add"))
    view = admin_client.get(change_url(message))
    post = admin_client.post(change_url(message), {"role": "system", "content": "[]", "seq": 99})

    assert add.status_code == 403
    assert view.status_code == 200
    assert 'name="role"' not in view.content.decode()
    assert "first question" in view.content.decode()
    assert post.status_code == 403
    assert list(Message.objects.values()) == before


def test_deleting_a_message_keeps_the_counters_right(admin_client, session_with_messages):
    session = session_with_messages()
    newest = Message.objects.get(session=session, seq=3)

    confirm = admin_client.get(delete_url(newest))
    response = admin_client.post(delete_url(newest), {"post": "yes"})

    assert confirm.status_code == 200
    assert response.status_code == 302
    session.refresh_from_db()
    assert session.message_count == 2
    assert session.last_message == "first answer"
    assert session.last_seq == 3  # seq is never reused


def test_delete_action_on_messages_goes_through_the_service(
    admin_client, session_with_messages, monkeypatch
):
    first = session_with_messages(title="first")
    second = session_with_messages(title="second", scope="org=acme/user=2")
    doomed = [
        *Message.objects.filter(session=first, seq__gte=2),
        Message.objects.get(session=second, seq=1),
    ]
    calls = []
    real = services.delete_message

    def spy(**kwargs):
        calls.append(kwargs)
        return real(**kwargs)

    monkeypatch.setattr(services, "delete_message", spy)
    selected = [str(m.pk) for m in doomed]

    admin_client.post(messages_url(), {"action": "delete_selected", "_selected_action": selected})
    response = admin_client.post(
        messages_url(),
        {"action": "delete_selected", "_selected_action": selected, "post": "yes"},
    )

    assert response.status_code == 302
    assert len(calls) == 3
    first.refresh_from_db()
    second.refresh_from_db()
    assert (first.message_count, first.last_message) == (1, "first question")
    assert (second.message_count, second.last_message) == (2, "second question")


def test_legacy_messages_without_a_session_cannot_be_deleted(admin_client):
    legacy = MessageFactory()  # session is null: a pre-session row (docs/design.md §4)

    view = admin_client.get(change_url(legacy))
    delete = admin_client.post(delete_url(legacy), {"post": "yes"})
    action = admin_client.post(
        messages_url(),
        {"action": "delete_selected", "_selected_action": [str(legacy.pk)], "post": "yes"},
    )

    assert view.status_code == 200
    assert delete.status_code == 403
    assert action.status_code == 403
    assert Message.objects.filter(pk=legacy.pk).exists()
    assert not Session.objects.exists()
