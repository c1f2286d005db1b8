"""The read-only admin of erasure records (docs/design.md §18.2)."""

from __future__ import annotations

import pytest
from django.urls import reverse

from cortex_sessions import services
from cortex_sessions.models import Erasure

pytestmark = pytest.mark.django_db


def test_erasure_records_are_listed_and_shown_but_never_added_changed_or_deleted(admin_client):
    services.create_session(scope="org=acme/user=1", agent_id="bot")
    record = services.erase_scope(scope="org=acme", requested_by="ops")

    listing = admin_client.get(reverse("admin:cortex_sessions_erasure_changelist"), {"q": "acme"})
    page = listing.content.decode()
    assert listing.status_code == 200
    assert "org=acme" in page and "ops" in page and "done" in page

    change = reverse("admin:cortex_sessions_erasure_change", args=[record.pk])
    detail = admin_client.get(change)
    assert detail.status_code == 200
    assert "cortex_sessions.Session" in detail.content.decode()

    assert admin_client.get(reverse("admin:cortex_sessions_erasure_add")).status_code == 403
    assert admin_client.post(change, {"scope": "org=globex"}).status_code == 403
    delete = reverse("admin:cortex_sessions_erasure_delete", args=[record.pk])
    assert admin_client.post(delete, {"post": "yes"}).status_code == 403
    bulk = admin_client.post(
        reverse("admin:cortex_sessions_erasure_changelist"),
        {"action": "delete_selected", "_selected_action": [str(record.pk)], "post": "yes"},
    )
    assert bulk.status_code in (200, 302)
    assert Erasure.objects.get() == record
    record.refresh_from_db()
    assert record.scope == "org=acme"
