"""``GET /sessions/export/``: JSON Lines of the caller's scope, streamed (docs/design.md §18.3)."""

from __future__ import annotations

import json

import pytest
from django.core.management import call_command
from django.db import connection
from django.test.utils import CaptureQueriesContext

from cortex_sessions import services
from cortex_sessions.models import Message, Session

pytestmark = pytest.mark.django_db

URL = "/api/cortex/sessions/export/"


def _lines(response) -> list[dict]:
    assert response.streaming
    text = b"".join(response.streaming_content).decode("utf-8")
    assert text == "" or text.endswith("\n")
    return [json.loads(line) for line in text.splitlines()]


def _conversation(session: Session) -> tuple:
    messages = Message.objects.filter(session=session).order_by("seq")
    return (
        session.title,
        session.metadata,
        session.cwd,
        [(m.role, m.source, m.content, m.metadata, m.created_at) for m in messages],
    )


def test_export_streams_the_callers_sessions_and_reimports_exactly(
    api, alice_scope, tmp_path, make_user, client_for
):
    mine = []
    for number in range(3):
        session = services.create_session(
            scope=alice_scope, agent_id="bot", title=f"t{number}", metadata={"n": number}, cwd="/w"
        )
        services.append_messages(
            scope=alice_scope,
            session_id=session.pk,
            messages=[
                {"role": "user", "content": f"hi {number} é😀"},
                {
                    "role": "assistant",
                    "content": [{"type": "text", "text": "ok"}],
                    "metadata": {"k": 1},
                },
            ],
        )
        mine.append(Session.objects.get(pk=session.pk))
    other = make_user("eve", org="acme")
    services.create_session(scope=f"org=acme/user={other.pk}", agent_id="bot", title="not mine")

    response = api.get(URL)
    assert response.status_code == 200
    assert response["Content-Type"] == "application/jsonl; charset=utf-8"
    lines = _lines(response)
    assert [line["title"] for line in lines] == ["t0", "t1", "t2"]
    assert lines[0]["messages"][0]["content"] == [{"type": "text", "text": "hi 0 é😀"}]

    path = tmp_path / "export.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    call_command("cortex_sessions_import", str(path), "--agent-id", "bot", "--scope", "org=copy")
    copies = list(Session.objects.filter(scope="org=copy").order_by("pk"))
    assert [_conversation(copy) for copy in copies] == [_conversation(s) for s in mine]
    # Importing the same file again into the same place imports nothing.
    call_command("cortex_sessions_import", str(path), "--agent-id", "bot", "--scope", "org=copy")
    assert Session.objects.filter(scope="org=copy").count() == 3


def test_an_org_admin_narrows_the_export_to_one_member(client_for, make_user):
    admin = make_user("boss", org="acme", admin=True)
    services.create_session(scope="org=acme/user=1", agent_id="bot", title="one")
    services.create_session(scope="org=acme/user=2", agent_id="bot", title="two")
    services.create_session(scope="org=acme/user=2", agent_id="other", title="three")
    api = client_for(admin)
    assert [line["title"] for line in _lines(api.get(URL))] == ["one", "two", "three"]
    narrowed = api.get(URL, {"scope": "org=acme/user=2"})
    assert [line["title"] for line in _lines(narrowed)] == ["two", "three"]
    by_agent = api.get(URL, {"scope": "org=acme/user=2", "agent_id": "other"})
    assert [line["title"] for line in _lines(by_agent)] == ["three"]


def test_an_export_narrowed_outside_the_callers_scope_is_403(api):
    services.create_session(scope="org=globex/user=1", agent_id="bot", title="theirs")
    for narrowing in ({"scope": "org=globex"}, {"scope": "org=acme"}):
        response = api.get(URL, narrowing)
        assert response.status_code == 403
        assert response.json()["code"] == "scope_forbidden"


@pytest.mark.parametrize(
    ("params", "code"),
    [
        ({"agent_id": ""}, "invalid_agent_id"),
        ({"limit": "5"}, "invalid_filter"),
        ({"scope": "org"}, "invalid_scope"),
    ],
)
def test_bad_export_parameters_are_400(api, params, code):
    response = api.get(URL, params)
    assert response.status_code == 400
    assert response.json()["code"] == code


def test_export_answers_accept_jsonl(api, alice_scope):
    services.create_session(scope=alice_scope, agent_id="bot", title="x")
    response = api.get(URL, HTTP_ACCEPT="application/jsonl")
    assert response.status_code == 200
    assert [line["title"] for line in _lines(response)] == ["x"]


def test_export_reads_bounded_chunks_whatever_the_size_of_the_scope(api, alice_scope):
    """Constant memory: no query reads more than a chunk (100 sessions, 500 messages), so
    what is held at once does not grow with the scope; more rows only mean more queries."""
    big = services.create_session(scope=alice_scope, agent_id="bot", title="big")
    for start in range(0, 1200, 600):
        services.append_messages(
            scope=alice_scope,
            session_id=big.pk,
            messages=[{"role": "user", "content": f"m{n}"} for n in range(start, start + 600)],
        )
    for number in range(120):
        services.create_session(scope=alice_scope, agent_id="bot", title=f"s{number}")
    with CaptureQueriesContext(connection) as queries:
        lines = _lines(api.get(URL))
    assert len(lines) == 121
    assert sum(len(line["messages"]) for line in lines) == 1200
    statements = [q["sql"].replace("`", '"') for q in queries]  # MySQL quotes with `
    session_reads = [sql for sql in statements if '"cortex_sessions_session"."title"' in sql]
    message_reads = [sql for sql in statements if 'FROM "cortex_sessions_message"' in sql]
    assert len(session_reads) == 2 and all("LIMIT 100" in sql for sql in session_reads)
    assert all("LIMIT 500" in sql for sql in message_reads)
    # The big session's 1,200 messages in 3 reads; every other session one empty read.
    assert len(message_reads) == 3 + 120


def test_the_export_is_in_the_schema(api):
    from drf_spectacular.generators import SchemaGenerator

    schema = SchemaGenerator().get_schema(request=None, public=True)
    operation = schema["paths"]["/api/cortex/sessions/export/"]["get"]
    assert "application/jsonl" in operation["responses"]["200"]["content"]
    assert "/api/cortex/erasures/" in schema["paths"]
    assert connection.vendor  # the schema needs no database
