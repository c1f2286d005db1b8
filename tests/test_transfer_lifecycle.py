"""Import and export carry the thread lifecycle: ``archived_at`` and fork provenance
(docs/design.md §11.1, §11.2); re-import stays idempotent."""

from __future__ import annotations

import io
import json

import pytest

from cortex_sessions import services, transfer
from cortex_sessions.models import Session

pytestmark = pytest.mark.django_db

ALICE = "org=acme/user=alice"
ELSEWHERE = "org=globex/user=carol"
AGENT = "chitchat"


def export_text(scope):
    return "".join(transfer.export_conversations(scope=scope))


def lifecycle_fields(scope):
    return sorted(
        Session.objects.filter(scope=scope).values_list(
            "title", "archived_at", "forked_from", "forked_at_seq", "message_count", "is_default"
        )
    )


@pytest.fixture
def sessions():
    source = services.create_session(scope=ALICE, agent_id=AGENT, title="source")
    services.append_messages(
        scope=ALICE,
        session_id=source.pk,
        messages=[{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}],
    )
    fork = services.fork_session(scope=ALICE, session_id=source.pk, up_to_seq=1, title="fork")
    services.archive_session(scope=ALICE, session_id=fork.pk)
    services.create_session(scope=ALICE, agent_id=AGENT, title="plain")
    return source, fork


def test_export_writes_archive_time_and_fork_provenance_only_when_set(sessions):
    source, fork = sessions
    lines = {
        json.loads(line)["title"]: json.loads(line) for line in export_text(ALICE).splitlines()
    }
    assert lines["fork"]["forked_from"] == str(source.pk)
    assert lines["fork"]["forked_at_seq"] == 1
    archived_at = Session.objects.get(pk=fork.pk).archived_at
    assert lines["fork"]["archived_at"] == archived_at.isoformat()
    assert not {"archived_at", "forked_from", "forked_at_seq"} & set(lines["plain"])
    assert not {"archived_at", "forked_from", "forked_at_seq"} & set(lines["source"])


def test_round_trip_reproduces_lifecycle_fields_and_reimport_is_idempotent(sessions):
    exported = export_text(ALICE)
    report = transfer.import_conversations(io.StringIO(exported), scope=ELSEWHERE, agent_id=AGENT)
    assert (report.imported, report.failed) == (3, 0)
    assert lifecycle_fields(ELSEWHERE) == lifecycle_fields(ALICE)
    assert export_text(ELSEWHERE) == exported

    again = transfer.import_conversations(io.StringIO(exported), scope=ELSEWHERE, agent_id=AGENT)
    assert (again.imported, again.skipped, again.failed) == (0, 3, 0)
    assert Session.objects.filter(scope=ELSEWHERE).count() == 3


def test_an_imported_fork_keeps_naming_a_source_that_is_not_there():
    missing = "01234567-89ab-7def-8123-456789abcdef"
    line = json.dumps({"id": "f", "messages": [], "forked_from": missing, "forked_at_seq": 4})
    report = transfer.import_conversations([line], scope=ALICE, agent_id=AGENT)
    assert report.imported == 1
    assert str(Session.objects.get(scope=ALICE).forked_from) == missing


@pytest.mark.parametrize(
    "extra",
    [
        {"archived_at": "yesterday"},
        {"archived_at": 5},
        {"forked_from": "not-a-uuid", "forked_at_seq": 1},
        {"forked_from": "01234567-89ab-7def-8123-456789abcdef"},
        {"forked_at_seq": 3},
        {"forked_from": "01234567-89ab-7def-8123-456789abcdef", "forked_at_seq": -1},
        {"forked_from": "01234567-89ab-7def-8123-456789abcdef", "forked_at_seq": "3"},
    ],
)
def test_bad_lifecycle_keys_fail_the_line_and_write_nothing(extra):
    line = json.dumps({"id": "x", "messages": [{"role": "user", "content": "q"}], **extra})
    report = transfer.import_conversations([line], scope=ALICE, agent_id=AGENT)
    assert (report.imported, report.failed) == (0, 1)
    assert report.errors[0].code == "invalid_conversation"
    assert not Session.objects.exists()
