"""The read-only admin of imported conversation ids."""

from __future__ import annotations

import pytest
from django.urls import reverse

from cortex_sessions import transfer
from cortex_sessions.models import ImportedConversation

pytestmark = pytest.mark.django_db


def test_imported_conversations_are_listed_read_only_and_link_their_session(admin_client):
    transfer.import_conversations(
        ['{"id": "chat-42", "title": "Imported", "messages": [{"role": "user", "content": "hi"}]}'],
        scope="org=acme/user=1",
        agent_id="importer",
    )
    record = ImportedConversation.objects.get()
    url = reverse("admin:cortex_sessions_importedconversation_changelist")

    response = admin_client.get(url, {"q": "chat-42"})

    page = response.content.decode()
    assert response.status_code == 200
    assert "chat-42" in page and "importer" in page
    assert reverse("admin:cortex_sessions_session_change", args=[record.session_id]) in page
    add = reverse("admin:cortex_sessions_importedconversation_add")
    assert admin_client.get(add).status_code == 403
    change = reverse("admin:cortex_sessions_importedconversation_change", args=[record.pk])
    assert admin_client.post(change, {"external_id": "forged"}).status_code == 403
    record.refresh_from_db()
    assert record.external_id == "chat-42"
