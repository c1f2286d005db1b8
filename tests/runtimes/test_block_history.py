"""The LangChain history's ``messages`` and Pydantic AI's ``load_history`` on PostgreSQL read a
whole history a page per statement (``integrations.block_history``); elsewhere, or with that
path turned off, the services' pages. Both paths return the same messages and raise the same
errors: stored and other writers' messages, JSON-text records, compacted sessions (§16.3),
expired sessions (§18.1), scope and agent checks, empty and longer-than-a-page histories
(docs/design.md §19.2, §19.3). And ``save_messages`` to a pinned session it has checked appends
at once, still refusing what the services refuse."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest

pytest.importorskip("langchain_core")
pytest.importorskip("pydantic_ai")

from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)
from pydantic_ai.messages import (
    ModelMessagesTypeAdapter,
    ModelRequest,
    ModelResponse,
    SystemPromptPart,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)

from cortex_sessions import services
from cortex_sessions.exceptions import CortexSessionsError, SessionArchived, SessionNotFound
from cortex_sessions.integrations import block_history, pydantic_ai
from cortex_sessions.integrations.blocks import stored_record
from cortex_sessions.integrations.langchain import CortexChatMessageHistory
from cortex_sessions.integrations.langchain import history as langchain_history
from cortex_sessions.models import Message, Session
from cortex_sessions.scope import as_scope

pytestmark = pytest.mark.django_db

SCOPE = "org=acme/user=alice"
AGENT = "bot"

LANGCHAIN = [
    SystemMessage("Be brief."),
    HumanMessage("What is 1 + 2?", id="h1"),
    AIMessage("", tool_calls=[{"name": "add", "args": {"a": 1, "b": 2}, "id": "c1"}]),
    ToolMessage("3", tool_call_id="c1"),
    AIMessage("nul \x00 here"),  # kept as JSON text
]
PYDANTIC = [
    ModelRequest(parts=[SystemPromptPart("Be brief."), UserPromptPart("What is 1 + 2?")]),
    ModelResponse(parts=[ToolCallPart("add", {"a": 1, "b": 2}, tool_call_id="c1")]),
    ModelRequest(parts=[ToolReturnPart("add", 3, tool_call_id="c1")]),
    ModelResponse(parts=[TextPart("nul \x00 here")]),  # kept as JSON text
]
OTHERS = [  # another writer's: read back by role, the tool note skipped
    {"role": "user", "content": "from the API"},
    {"role": "assistant", "content": [{"type": "text", "text": "an answer"}]},
    {"role": "system", "content": "a system note"},
    {"role": "tool", "content": "a tool note"},
]


def _langchain_write(pk: uuid.UUID, messages: list[Any]) -> None:
    CortexChatMessageHistory(scope=SCOPE, agent_id=AGENT, session_id=pk).add_messages(messages)


def _pydantic_write(pk: uuid.UUID, messages: list[Any]) -> None:
    pydantic_ai.save_messages(scope=SCOPE, agent_id=AGENT, messages=messages, session_id=pk)


def _langchain_read(pk: Any, scope: str = SCOPE, agent: str = AGENT) -> list[Any]:
    return CortexChatMessageHistory(scope=scope, agent_id=agent, session_id=pk).messages


def _pydantic_read(pk: Any, scope: str = SCOPE, agent: str = AGENT) -> list[Any]:
    return pydantic_ai.load_history(scope=scope, agent_id=agent, session_id=pk)


ADAPTERS = {
    "langchain": (_langchain_write, _langchain_read, LANGCHAIN),
    "pydantic_ai": (_pydantic_write, _pydantic_read, PYDANTIC),
}


def _outcome(read: Callable[[], list[Any]]) -> Any:
    try:
        return read()
    except CortexSessionsError as error:
        return (type(error), error.code)


def _comparable(outcome: Any) -> Any:
    """Records as JSON without the ``timestamp`` Pydantic AI gives a message another writer
    added when it is read (the time of the read); records stored by the adapter are compared
    with their timestamps by the tests themselves."""
    if not isinstance(outcome, list):
        return outcome
    return [_untimed(_as_json(record)) for record in outcome]


def _as_json(record: Any) -> Any:
    if isinstance(record, BaseMessage):
        return record.model_dump(mode="json")
    return ModelMessagesTypeAdapter.dump_python([record], mode="json")[0]


def _untimed(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _untimed(v) for k, v in value.items() if k != "timestamp"}
    if isinstance(value, list):
        return [_untimed(v) for v in value]
    return value


def _both(monkeypatch: pytest.MonkeyPatch, read: Callable[[], list[Any]]) -> tuple[Any, Any]:
    """``read()`` on the path this database takes, then on the services' pages."""
    fast = _outcome(read)
    with monkeypatch.context() as patched:
        patched.setattr(block_history, "serves", lambda scope: False)
        slow = _outcome(read)
    return fast, slow


def _same(fast: Any, slow: Any) -> bool:
    return bool(_comparable(fast) == _comparable(slow))


def _mixed_session(write: Callable[[uuid.UUID, list[Any]], None], records: list[Any]) -> Any:
    """Records, other writers' messages, a compaction (§16.3), then the records again."""
    pk = services.create_session(scope=SCOPE, agent_id=AGENT).pk
    write(pk, records)
    services.append_messages(scope=SCOPE, session_id=pk, messages=OTHERS)
    services.compact_session(scope=SCOPE, session_id=pk, through_seq=3, summary="the gist")
    write(pk, records)
    return pk


@pytest.fixture(params=sorted(ADAPTERS))
def adapter(request: pytest.FixtureRequest) -> tuple[Any, Any, list[Any]]:
    return ADAPTERS[request.param]


def test_a_mixed_compacted_history_reads_the_same_on_both_paths(monkeypatch, adapter):
    write, read, records = adapter
    pk = _mixed_session(write, records)
    fast, slow = _both(monkeypatch, lambda: read(pk))
    assert _same(fast, slow)
    assert fast[: len(records)] == records and fast[-len(records) :] == records
    assert len(fast) == 2 * len(records) + len(OTHERS) - 1 + 1  # tool note skipped, summary read


@pytest.mark.parametrize("page", [1, 2, 3, 1000])
def test_a_history_longer_than_a_page_reads_whole(monkeypatch, adapter, page):
    write, read, records = adapter
    monkeypatch.setattr(block_history, "PAGE", page)
    monkeypatch.setattr(langchain_history, "_PAGE", page)
    monkeypatch.setattr(pydantic_ai, "_PAGE", page)
    mixed = _mixed_session(write, records)
    fast, slow = _both(monkeypatch, lambda: read(mixed))
    assert _same(fast, slow) and len(fast) == 2 * len(records) + len(OTHERS)
    stored = services.create_session(scope=SCOPE, agent_id=AGENT).pk
    write(stored, records[:3] * 3)
    fast, slow = _both(monkeypatch, lambda: read(stored))
    assert fast == slow == records[:3] * 3


def test_an_empty_history_is_empty_on_both_paths(monkeypatch, adapter):
    _, read, _ = adapter
    pk = services.create_session(scope=SCOPE, agent_id=AGENT).pk
    assert _both(monkeypatch, lambda: read(pk)) == ([], [])


def test_expired_foreign_and_missing_sessions_fail_alike_on_both_paths(monkeypatch, adapter):
    write, read, records = adapter
    pk = services.create_session(scope=SCOPE, agent_id=AGENT).pk
    write(pk, records)
    not_found = (SessionNotFound, SessionNotFound.code)
    for case in (
        lambda: read(pk, scope="org=globex"),
        lambda: read(pk, scope="org=acme/user=bob"),
        lambda: read(pk, agent="another-bot"),
        lambda: read(uuid.uuid4()),
        lambda: read("not-a-uuid"),
    ):
        fast, slow = _both(monkeypatch, case)
        assert fast == slow == not_found
    assert _both(monkeypatch, lambda: read(pk, scope="org=acme"))[0] == records  # beneath
    Session.objects.filter(pk=pk).update(expires_at=timezone.now() - timedelta(seconds=5))
    assert _both(monkeypatch, lambda: read(pk)) == (not_found, not_found)


def test_a_default_session_reads_the_same_on_both_paths(monkeypatch):
    pydantic_ai.save_messages(scope=SCOPE, agent_id=AGENT, messages=PYDANTIC)
    assert _both(monkeypatch, lambda: pydantic_ai.load_history(scope=SCOPE, agent_id=AGENT)) == (
        PYDANTIC,
        PYDANTIC,
    )
    history = CortexChatMessageHistory(scope=SCOPE, agent_id="another-bot")
    history.add_messages(LANGCHAIN)
    assert _both(monkeypatch, lambda: history.messages) == (LANGCHAIN, LANGCHAIN)


@pytest.mark.postgres_only
def test_a_whole_history_is_one_statement_on_postgresql():
    pk = services.create_session(scope=SCOPE, agent_id=AGENT).pk
    _pydantic_write(pk, [ModelRequest(parts=[UserPromptPart(f"m {n}")]) for n in range(300)])
    with CaptureQueriesContext(connection) as captured:
        assert len(_pydantic_read(pk)) == 300
    assert len(captured.captured_queries) == 1  # the agent's check included
    pk = services.create_session(scope=SCOPE, agent_id=AGENT).pk
    history = CortexChatMessageHistory(scope=SCOPE, agent_id=AGENT, session_id=pk)
    history.add_messages([HumanMessage(f"m {n}") for n in range(300)])
    with CaptureQueriesContext(connection) as captured:
        assert len(history.messages) == 300
    assert len(captured.captured_queries) == 1
    services.append_messages(  # a message without a record: its page is read again
        scope=SCOPE, session_id=pk, messages=[{"role": "tool", "content": "a tool note"}]
    )
    with CaptureQueriesContext(connection) as captured:
        assert len(history.messages) == 300
    assert len(captured.captured_queries) == 2


@pytest.mark.parametrize("position", [0, 1, 2, 3])
def test_the_first_record_block_is_read_wherever_it_lies(monkeypatch, adapter, position):
    # Adapters write the text block then the record; another writer may put the record
    # anywhere, after other blocks, twice: the first block of the type is the record, on
    # PostgreSQL's lookups of the first two blocks and its path query past them alike. (Whole
    # records, as written before the text was stored once: a record kept without its text
    # belongs to its message's first block.)
    write, read, records = adapter
    source = services.create_session(scope=SCOPE, agent_id=AGENT).pk
    write(source, records[:2])
    first, second = (
        {
            "type": m.content[-1]["type"],
            "message": stored_record(m.content[-1], "message", m.content),
        }
        for m in Message.objects.filter(session_id=source).order_by("seq")
    )
    filler = [{"type": "text", "text": f"note {n}"} for n in range(position)]
    pk = services.create_session(scope=SCOPE, agent_id=AGENT).pk
    services.append_messages(
        scope=SCOPE,
        session_id=pk,
        messages=[
            {"role": "user", "content": [*filler, first, second]},
            {"role": "assistant", "content": [*filler, second, {"type": "image"}]},
        ],
    )
    with CaptureQueriesContext(connection) as captured:
        fast, slow = _both(monkeypatch, lambda: read(pk))
    assert fast == slow == [records[0], records[1]]
    if block_history.serves(as_scope(SCOPE)):
        assert any("content -> 0 -> 'type'" in q["sql"] for q in captured.captured_queries)


def test_save_to_a_checked_session_appends_at_once_and_still_refuses(monkeypatch):
    pk = services.create_session(scope=SCOPE, agent_id=AGENT).pk
    other = services.create_session(scope=SCOPE, agent_id="another-bot").pk
    _pydantic_write(pk, PYDANTIC[:1])  # checked once
    with CaptureQueriesContext(connection) as captured:
        _pydantic_write(pk, PYDANTIC[1:3])
    if connection.vendor == "postgresql":
        assert len(captured.captured_queries) == 1
    assert _pydantic_read(pk) == PYDANTIC[:3]
    refused = [
        (lambda: _pydantic_write(other, PYDANTIC[:1]), SessionNotFound),  # another agent's
        (  # checked for its own agent, not for another
            lambda: pydantic_ai.save_messages(
                scope=SCOPE, agent_id="another-bot", messages=PYDANTIC[:1], session_id=pk
            ),
            SessionNotFound,
        ),
        (  # out of scope
            lambda: pydantic_ai.save_messages(
                scope="org=globex", agent_id=AGENT, messages=PYDANTIC[:1], session_id=pk
            ),
            SessionNotFound,
        ),
    ]
    for call, error in refused:
        with pytest.raises(error):
            call()
    services.archive_session(scope=SCOPE, session_id=pk)
    with pytest.raises(SessionArchived):
        _pydantic_write(pk, PYDANTIC[:1])
    services.unarchive_session(scope=SCOPE, session_id=pk)
    Session.objects.filter(pk=pk).update(expires_at=timezone.now() - timedelta(seconds=5))
    with pytest.raises(SessionNotFound):
        _pydantic_write(pk, PYDANTIC[:1])
    Session.objects.filter(pk=pk).update(expires_at=None)
    assert Message.objects.filter(session_id=pk).count() == 3  # nothing refused was written
    assert Message.objects.filter(session_id=other).count() == 0
    services.delete_session(scope=SCOPE, session_id=pk)
    with pytest.raises(SessionNotFound):
        _pydantic_write(pk, PYDANTIC[:1])
