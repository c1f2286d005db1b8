"""Admin for the thread lifecycle (docs/design.md §11.1, §11.2): read-only fork provenance and
archive state, archive/unarchive actions, the archived list filter."""

from __future__ import annotations

import pytest

from cortex_sessions import services
from cortex_sessions.models import Session
from tests.admin.helpers import change_url, changelist_url, flash_messages, page_form_data

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
