"""The LangChain history and Pydantic AI store a message's text once (docs/design.md §19.2, §19.3):
the record block keeps the message without the string the ``text`` block holds and says where
it goes (``"text_at"``), so a message whose text fits ``MAX_MESSAGE_BYTES`` once is stored, and
every message reads back equal, on the PostgreSQL statement and the services' pages alike.
Rows written before (the whole record beside the text) still read back; the API and search
still see the text."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest

pytest.importorskip("langchain_core")
pytest.importorskip("pydantic_ai")

from django.db import connection
from langchain_core.messages import (
    AIMessage,
    AIMessageChunk,
    ChatMessage,
    FunctionMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)
from pydantic_ai.messages import (
    ImageUrl,
    ModelRequest,
    ModelResponse,
    SystemPromptPart,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)

from cortex_sessions import services
from cortex_sessions.content import content_text
from cortex_sessions.exceptions import MessageTooLarge
from cortex_sessions.integrations import block_history, pydantic_ai
from cortex_sessions.integrations.blocks import TEXT_AT, record_blocks, stored_record
from cortex_sessions.integrations.langchain import CortexChatMessageHistory
from cortex_sessions.integrations.langchain import messages as langchain_messages
from cortex_sessions.models import Message, Session

pytestmark = pytest.mark.django_db

SCOPE = "org=acme/user=alice"
AGENT = "bot"
LIMIT = 4000  # MAX_MESSAGE_BYTES in the size tests
BIG = "x" * 3000  # fits LIMIT once, not twice


def _langchain_write(pk: uuid.UUID, messages: list[Any]) -> None:
    CortexChatMessageHistory(scope=SCOPE, agent_id=AGENT, session_id=pk).add_messages(messages)


def _langchain_read(pk: uuid.UUID) -> list[Any]:
    return CortexChatMessageHistory(scope=SCOPE, agent_id=AGENT, session_id=pk).messages


def _pydantic_write(pk: uuid.UUID, messages: list[Any]) -> None:
    pydantic_ai.save_messages(scope=SCOPE, agent_id=AGENT, messages=messages, session_id=pk)


def _pydantic_read(pk: uuid.UUID) -> list[Any]:
    return pydantic_ai.load_history(scope=SCOPE, agent_id=AGENT, session_id=pk)


def _both(monkeypatch: pytest.MonkeyPatch, read: Any, pk: uuid.UUID) -> tuple[Any, Any]:
    """``read(pk)`` on the path this database takes, then on the services' pages."""
    fast = read(pk)
    with monkeypatch.context() as patched:
        patched.setattr(block_history, "serves", lambda scope: False)
        slow = read(pk)
    return fast, slow


LANGCHAIN = [
    SystemMessage("You are terse.", id="s"),
    HumanMessage("What is 2 + 2?", id="h", name="alice", additional_kwargs={"k": [1, None]}),
    AIMessage(
        "Let me add.",
        id="a",
        tool_calls=[{"name": "add", "args": {"a": 2, "b": 2}, "id": "c1"}],
        usage_metadata={"input_tokens": 10, "output_tokens": 5, "total_tokens": 15},
        response_metadata={"model_name": "scripted", "content": "not the text"},
    ),
    ToolMessage("4", tool_call_id="c1", id="t", name="add", artifact={"raw": 4}),
    AIMessage(  # a content list with a non-text part: the one text part is the text
        [
            {"type": "image_url", "image_url": {"url": "https://x/y.png"}},
            {"type": "text", "text": "It is 4."},
        ],
        id="a2",
    ),
    AIMessage([{"type": "text", "text": "two "}, {"type": "text", "text": "parts"}], id="a3"),
    AIMessage(["a plain string part", {"type": "reasoning", "reasoning": "hm"}], id="a4"),
    ChatMessage("an operator note", role="developer", id="c"),
    FunctionMessage("legacy", name="f", id="f"),
    AIMessageChunk("partial", id="chunk"),
    HumanMessage("text", id="odd", additional_kwargs={"note": "nul \x00 here"}),  # JSON text
    HumanMessage("nul \x00 in the text", id="nul"),  # text changed for the text block
    HumanMessage("lone \ud800 surrogate", id="sur"),
    HumanMessage("   ", id="blank"),
    AIMessage("", id="empty"),
]
#: The messages whose record keeps the text where the text block does: stored once.
LANGCHAIN_ONCE = {"s", "h", "a", "t", "a2", "c", "f", "chunk", "odd"}

PYDANTIC = [
    ModelRequest(parts=[SystemPromptPart("Be brief."), UserPromptPart("What is 1 + 2?")]),
    ModelResponse(
        parts=[ThinkingPart("hm"), TextPart("Adding."), ToolCallPart("add", {"a": 1}, "c1")],
        model_name="m",
    ),
    ModelRequest(parts=[ToolReturnPart("add", "3", tool_call_id="c1")]),
    ModelRequest(parts=[ToolReturnPart("add", {"sum": 3}, tool_call_id="c2")]),
    ModelRequest(parts=[ToolReturnPart("add", "try again", tool_call_id="c3", outcome="retried")]),
    ModelRequest(parts=[UserPromptPart(["look", ImageUrl(url="https://x/y.png")])]),
    ModelRequest(parts=[SystemPromptPart("Only a system prompt.")]),
    ModelResponse(parts=[TextPart("two "), TextPart("parts")], model_name="m"),
    ModelResponse(parts=[TextPart("fine")], model_name="m", provider_details={"n": "x\x00"}),
    ModelRequest(parts=[UserPromptPart("lone \ud800 surrogate")]),
]


def test_a_langchain_message_whose_text_fits_once_is_stored_and_reads_back(settings, monkeypatch):
    settings.CORTEX_SESSIONS = {**settings.CORTEX_SESSIONS, "MAX_MESSAGE_BYTES": LIMIT}
    pk = services.create_session(scope=SCOPE, agent_id=AGENT).pk
    sent = [
        HumanMessage(BIG, id="h"),
        AIMessage([{"type": "text", "text": BIG}, {"type": "image"}], id="a"),
    ]
    _langchain_write(pk, sent)
    assert _both(monkeypatch, _langchain_read, pk) == (sent, sent)
    with pytest.raises(MessageTooLarge):  # the limit still holds for the text itself
        _langchain_write(pk, [HumanMessage("x" * LIMIT)])


def test_a_pydantic_ai_message_whose_text_fits_once_is_stored_and_reads_back(settings, monkeypatch):
    settings.CORTEX_SESSIONS = {**settings.CORTEX_SESSIONS, "MAX_MESSAGE_BYTES": LIMIT}
    pk = services.create_session(scope=SCOPE, agent_id=AGENT).pk
    sent = [
        ModelRequest(parts=[UserPromptPart(BIG)]),
        ModelResponse(parts=[TextPart(BIG)], model_name="m"),
        ModelRequest(parts=[ToolReturnPart("t", BIG, tool_call_id="c")]),
    ]
    _pydantic_write(pk, sent)
    assert _both(monkeypatch, _pydantic_read, pk) == (sent, sent)
    with pytest.raises(MessageTooLarge):
        _pydantic_write(pk, [ModelRequest(parts=[UserPromptPart("x" * LIMIT)])])


def _left_out(block: dict[str, Any]) -> bool:
    """Whether the block's record lacks the key its ``"text_at"`` names."""
    record = block["message"] if "message" in block else json.loads(block["message_json"])
    *steps, last = block[TEXT_AT]
    for step in steps:
        record = record[step]
    return last not in record


def test_every_langchain_message_round_trips_with_its_text_once(monkeypatch):
    pk = services.create_session(scope=SCOPE, agent_id=AGENT).pk
    _langchain_write(pk, LANGCHAIN)
    assert _both(monkeypatch, _langchain_read, pk) == (LANGCHAIN, LANGCHAIN)
    rows = Message.objects.filter(session_id=pk).order_by("seq")
    for sent, row in zip(LANGCHAIN, rows, strict=True):
        block = row.content[-1]
        assert row.content == langchain_messages.to_cortex(sent)["content"]
        if sent.id not in ("nul", "sur"):  # (their text block's copy drops NUL, marks "?")
            assert content_text(row.content) == (sent.text if sent.text.strip() else "")
        if sent.id in LANGCHAIN_ONCE:
            assert row.content[0] == {"type": "text", "text": sent.text}
            assert TEXT_AT in block
            assert _left_out(block)
        else:
            assert TEXT_AT not in block


def test_every_pydantic_ai_message_round_trips_with_its_text_once(monkeypatch):
    pk = services.create_session(scope=SCOPE, agent_id=AGENT).pk
    _pydantic_write(pk, PYDANTIC)
    assert _both(monkeypatch, _pydantic_read, pk) == (PYDANTIC, PYDANTIC)
    rows = list(Message.objects.filter(session_id=pk).order_by("seq"))
    for sent, row in zip(PYDANTIC, rows, strict=True):
        assert row.content == pydantic_ai.to_cortex(sent)["content"]
    once = [TEXT_AT in row.content[-1] for row in rows]
    # Not once: a tool's return that is no string, a retry (its text is what the model is
    # told), a prompt that is a list, two text parts, a surrogate in the text (JSON text; the
    # text block's copy changed).
    assert once == [True, True, True, False, False, False, True, False, True, False]
    assert rows[1].content[-1][TEXT_AT] == ["parts", 1, "content"]
    assert all(_left_out(row.content[-1]) for row in rows if TEXT_AT in row.content[-1])
    assert "message_json" in rows[8].content[-1]  # the record refused, the text still once


def test_the_api_and_search_still_see_the_text():
    pk = services.create_session(scope=SCOPE, agent_id=AGENT).pk
    _langchain_write(pk, [HumanMessage("find the needle please", id="h")])
    _pydantic_write(pk, [ModelResponse(parts=[TextPart("a haystack answer")], model_name="m")])
    session = Session.objects.get(pk=pk)
    assert session.last_message == "a haystack answer"
    page = services.list_messages(scope=SCOPE, session_id=pk)
    texts = [content_text(m.content) for m in page]
    assert texts == ["find the needle please", "a haystack answer"]
    if connection.vendor != "mysql":  # MySQL/MariaDB have no message search
        found = services.list_sessions(scope=SCOPE, filters=services.SessionFilters(q="needle"))
        assert [s.pk for s in found] == [pk]


def _old_format(content: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``content`` as written before the text was stored once: the whole record in the block."""
    *head, block = content
    if TEXT_AT not in block:
        return content
    record = stored_record(block, "message", content)
    key = "message" if "message" in block else "message_json"
    whole = {"type": block["type"], key: record}
    if key == "message_json":
        whole[key] = pydantic_ai._as_json(record)
    return [*head, whole]


def test_rows_in_the_old_format_still_read_back(monkeypatch):
    lc_pk = services.create_session(scope=SCOPE, agent_id=AGENT).pk
    lc_old = [_old_format(langchain_messages.to_cortex(m)["content"]) for m in LANGCHAIN]
    services.append_messages(
        scope=SCOPE,
        session_id=lc_pk,
        messages=[
            {"role": langchain_messages.to_cortex(m)["role"], "content": c}
            for m, c in zip(LANGCHAIN, lc_old, strict=True)
        ],
    )
    _langchain_write(lc_pk, LANGCHAIN[:3])  # new rows after old ones, one history
    stored = [row.content for row in Message.objects.filter(session_id=lc_pk).order_by("seq")]
    assert not any(TEXT_AT in c[-1] for c in stored[: len(LANGCHAIN)])
    assert all(TEXT_AT in c[-1] for c in stored[len(LANGCHAIN) :])
    expected = [*LANGCHAIN, *LANGCHAIN[:3]]
    assert _both(monkeypatch, _langchain_read, lc_pk) == (expected, expected)

    pa_pk = services.create_session(scope=SCOPE, agent_id=AGENT).pk
    services.append_messages(
        scope=SCOPE,
        session_id=pa_pk,
        messages=[
            {**(out := pydantic_ai.to_cortex(m)), "content": _old_format(out["content"])}
            for m in PYDANTIC
        ],
    )
    _pydantic_write(pa_pk, PYDANTIC[:2])
    expected = [*PYDANTIC, *PYDANTIC[:2]]
    assert _both(monkeypatch, _pydantic_read, pa_pk) == (expected, expected)


def test_a_text_at_that_does_not_hold_the_text_is_ignored_and_nothing_is_changed():
    record = {"data": {"content": "the text", "other": ["x"]}}
    same = {"data": {"content": "the text", "other": ["x"]}}
    for path in (("data", "other"), ("data", "missing"), ("nope", "content"), ("data", 0)):
        content = record_blocks("the text", "kind", "message", record, as_json=str, text_at=path)
        assert content[-1] == {"type": "kind", "message": record}
    at = ("data", "content")
    content = record_blocks("the text", "kind", "message", record, as_json=str, text_at=at)
    kept = {"data": {"other": ["x"]}}
    assert content[-1] == {"type": "kind", "message": kept, TEXT_AT: ["data", "content"]}
    assert record == same  # the caller's record is not changed
    back = stored_record(content[-1], "message", content)
    assert back == same
    assert content[-1]["message"] == {"data": {"other": ["x"]}}  # nor the stored content
