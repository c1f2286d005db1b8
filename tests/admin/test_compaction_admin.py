"""The admin shows which seqs a compaction summary stands for (docs/design.md §16.3)."""

from __future__ import annotations

import pytest

from cortex_sessions import services
from cortex_sessions.models import Message
from tests.admin.helpers import change_url

pytestmark = pytest.mark.django_db


@pytest.fixture
def compacted(session_with_messages):
    session = session_with_messages(title="Trip")
    services.compact_session(
        scope=session.scope, session_id=session.pk, through_seq=2, summary="the trip so far"
    )
    return session


def test_message_page_shows_what_a_summary_stands_for(admin_client, compacted):
    summary = Message.objects.get(session=compacted, compacts_through_seq__isnull=False)
    content = admin_client.get(change_url(summary)).content.decode()
    assert "summary of 1\u20132" in content
    plain = Message.objects.get(session=compacted, seq=1)
    assert "summary of" not in admin_client.get(change_url(plain)).content.decode()


def test_session_inline_shows_what_a_summary_stands_for(admin_client, compacted):
    content = admin_client.get(change_url(compacted)).content.decode()
    assert content.count("summary of 1\u20132") == 1
